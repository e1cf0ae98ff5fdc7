"""One client's hold on a session (`_Binding`): its berth run, the heartbeat, its turns
(`_turns`) and the kept view; and the process's idle runs (`_RunPool`).

A `BerthSession` object writes through a berth run of its own, attached on its first
write (or on a read that finds a turn some other object may have left open: a `resume`,
so turns left open by objects whose runs are gone are closed first), heartbeated in the
background and released by `close()` / leaving its context manager, or by its lease
(`run_lease_ttl_ms`) lapsing if the process dies.

A parallel object whose turns are all closed hands its run, on `close()`, to the next
object of this process that writes the same session with the same client (a web app's
object per request), instead of detaching it and attaching another: no catalog write at
either end. A run may be handed on only when no other turn can be open:

- its `resume` left the session with no other run attached and the record at the
  revision the resume left (read again just after it): every turn then was closed, by
  that repair or before;
- every event since is this run's own (each append began where the last one ended);

and the next object takes it only if the record it reads lists no run but this one and
the log still ends where this run's last append ended. Otherwise it resumes as usual. An
idle run is detached within a third of its lease (before it would need a heartbeat), and
at exit.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections.abc import Callable

import berth
import berth._exit

from ._turns import _Turns
from ._view import _View


#: How long a dead process's run keeps its place (and its open turn unrepaired).
RUN_LEASE_TTL_MS_DEFAULT = 30_000
#: A catalog record at most this old (seconds) tells a write what the session is (its
#: mode, its runs) without reading it again.
SEEN_FRESH_S = 1.0
#: Runs whose lease ends within this margin (ms) count as lapsed (clocks may differ).
LEASE_MARGIN_MS = 1_000
#: Idle runs kept per session and client.
POOLED_PER_SESSION_MAX = 8


class _Binding:
    """One client's hold on the session: its berth run, the heartbeat, its turns."""

    def __init__(self, client: berth.Client) -> None:
        self.client = client
        self.lock = threading.Lock()
        self.run_id: str | None = None
        self.lost: BaseException | None = None
        self.stop = threading.Event()
        self.heartbeat: threading.Thread | None = None
        self.turns = _Turns()
        self.view: _View | None = None
        self.view_lock = threading.Lock()
        #: Where the log ends after this run's last append, while every event since its
        #: resume left no other turn open is the run's own (module docstring); else None.
        self.chain: int | None = None
        #: When (monotonic) the run's lease was last renewed (at or after this).
        self.lease_from = 0.0
        #: The session's catalog record as last read, and when (monotonic).
        self.seen: tuple[berth.Session, float] | None = None
        #: Closers the last `resume` appended.
        self.repaired = 0

    def joined(self) -> bool:
        """Attached and not displaced: writes and reads need no `_join` first."""
        return self.run_id is not None and self.lost is None

    def appended(self, outcome: berth.AppendOutcome) -> None:
        chain = self.chain
        if chain is not None:
            self.chain = outcome.next_seq if not outcome.duplicate and outcome.first_seq == chain else None

    def fresh_seen(self) -> berth.Session | None:
        seen = self.seen
        if seen is not None and time.monotonic() - seen[1] < SEEN_FRESH_S:
            return seen[0]
        return None

    def take_view(self) -> _View | None:
        """The view, now this caller's alone (worker threads share a binding)."""
        with self.view_lock:
            view, self.view = self.view, None
            return view

    def keep_view(self, view: _View) -> None:
        # Any view kept describes a prefix of the log; the next read checks and extends it.
        with self.view_lock:
            self.view = view


def _lapsing(session: berth.Session, now_ms: int | None = None) -> bool:
    """A run of `session` has lost (or is about to lose) its lease: its turn may need repair."""
    if now_ms is None:
        now_ms = int(time.time() * 1000)
    margin = min(LEASE_MARGIN_MS, session.header.policy.run_lease_ttl_ms // 3)
    return any(run.lease_until < now_ms + margin for run in session.runs)


class _Pooled:
    __slots__ = ("client", "berth_id", "run_id", "chain", "lease_from", "expires", "next_turn")

    def __init__(self, client: berth.Client, berth_id: str, run_id: str, chain: int, lease_from: float,
                 expires: float, next_turn: int) -> None:
        self.client = client
        self.berth_id = berth_id
        self.run_id = run_id
        self.chain = chain
        self.lease_from = lease_from
        self.expires = expires
        self.next_turn = next_turn


class _RunPool:
    """The process's idle runs, by session and client (see the module's docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: dict[tuple[int, str], list[_Pooled]] = {}
        self.wake = threading.Event()
        self.sweeper: threading.Thread | None = None
        #: Clients whose closing releases their idle runs first (`berth.Client._before_close`).
        self.hooked: weakref.WeakSet[berth.Client] = weakref.WeakSet()

    def put(self, entry: _Pooled) -> bool:
        with self.lock:
            entries = self.idle.setdefault((id(entry.client), entry.berth_id), [])
            if len(entries) >= POOLED_PER_SESSION_MAX:
                return False
            entries.append(entry)
            client = entry.client
            if client not in self.hooked and hasattr(client, "_before_close"):
                self.hooked.add(client)
                client._before_close(lambda: self.release_client(client))
            if self.sweeper is None:
                self.sweeper = threading.Thread(target=self._sweep, name="berth-openai-runs", daemon=True)
                self.sweeper.start()
        self.wake.set()
        return True

    def take(
        self, client: berth.Client, berth_id: str, session: berth.Session, end: Callable[[], int]
    ) -> _Pooled | None:
        """An idle run of this client on the session, if the record `session` (read just
        now) lists no other run and the log (`end()`) still ends where the run left it;
        stale entries are dropped (and detached)."""
        now = time.monotonic()
        now_ms = int(time.time() * 1000)
        stale: list[_Pooled] = []
        taken = None
        with self.lock:
            entries = self.idle.get((id(client), berth_id))
            while entries:
                entry = entries.pop()
                if entry.client is not client:
                    stale.append(entry)
                    continue
                if (
                    entry.expires > now
                    and [run.run_id for run in session.runs] == [entry.run_id]
                    and not _lapsing(session, now_ms)
                ):
                    taken = entry
                else:
                    stale.append(entry)
                break
            if entries is not None and not entries:
                self.idle.pop((id(client), berth_id), None)
        if taken is not None:
            try:
                if end() != taken.chain:
                    stale.append(taken)
                    taken = None
            except BaseException:
                stale.append(taken)
                raise
            finally:
                for entry in stale:
                    _detach(entry.client, entry.berth_id, entry.run_id)
            return taken
        for entry in stale:
            _detach(entry.client, entry.berth_id, entry.run_id)
        return None

    def drop(self, client: berth.Client, berth_id: str) -> None:
        """Forgets this client's idle runs of the session (it is being deleted)."""
        with self.lock:
            entries = self.idle.get((id(client), berth_id), [])
            kept = [entry for entry in entries if entry.client is not client]
            if kept:
                self.idle[(id(client), berth_id)] = kept
            else:
                self.idle.pop((id(client), berth_id), None)

    def expired(self, everything: bool = False) -> tuple[list[_Pooled], float | None]:
        now = time.monotonic()
        gone: list[_Pooled] = []
        soonest: float | None = None
        with self.lock:
            for key in list(self.idle):
                kept = []
                for entry in self.idle[key]:
                    if everything or entry.expires <= now:
                        gone.append(entry)
                    else:
                        kept.append(entry)
                        soonest = entry.expires if soonest is None else min(soonest, entry.expires)
                if kept:
                    self.idle[key] = kept
                else:
                    del self.idle[key]
        return gone, soonest

    def _sweep(self) -> None:
        while True:
            self.wake.clear()  # before looking: an entry put from here on wakes the wait
            gone, soonest = self.expired()
            for entry in gone:
                _detach(entry.client, entry.berth_id, entry.run_id)
            self.wake.wait(None if soonest is None else max(0.01, soonest - time.monotonic()))

    def release_client(self, client: berth.Client) -> None:
        """Detaches `client`'s idle runs now: it is closing (a script that closes its client
        and exits leaves no run attached until its lease lapses)."""
        gone: list[_Pooled] = []
        with self.lock:
            self.hooked.discard(client)
            for key in [key for key in self.idle if key[0] == id(client)]:
                kept = [entry for entry in self.idle[key] if entry.client is not client]
                gone.extend(entry for entry in self.idle[key] if entry.client is client)
                if kept:
                    self.idle[key] = kept
                else:
                    del self.idle[key]
        for entry in gone:
            _detach(entry.client, entry.berth_id, entry.run_id)

    def release_all(self) -> None:
        gone, _ = self.expired(everything=True)
        for entry in gone:
            try:
                _detach(entry.client, entry.berth_id, entry.run_id)
            except Exception:  # at exit, a client torn down already: the lease lapses
                pass


_POOL = _RunPool()
# At exit, before the embedded stores close (berth._exit: this module may be imported
# before the transport, and atexit runs last-registered first), and for HTTP clients.
berth._exit.before_stores_close(_POOL.release_all)
atexit.register(_POOL.release_all)


def _detach(client: berth.Client, berth_id: str, run_id: str) -> None:
    try:
        client.detach(berth_id, run_id, outcome="completed")
    except (berth.BerthError, OSError):
        pass  # gone already, or unreachable: the run's lease lapses on its own


def _beat(client: berth.Client, berth_id: str, binding: _Binding, interval_s: float) -> None:
    # Only the binding and the client are referenced here, never the BerthSession, so an
    # unreachable session is collected (and its finalizer detaches the run).
    run_id = binding.run_id
    assert run_id is not None
    stop = binding.stop
    while not stop.wait(interval_s):
        try:
            started = time.monotonic()
            client.heartbeat(berth_id, run_id)
            binding.lease_from = started
        except (berth.OwnershipLost, berth.NotFound, berth.Terminal) as error:
            binding.lost = error
            return
        except (berth.BerthError, OSError):
            continue  # transient (the client already retried): the next beat tries again


class _Release:
    """What `_release` may do with a run: hand it on (`close()` of a parallel object with
    a client it does not own) or only detach it (the finalizer, `delete()`)."""

    __slots__ = ("hand_on", "may_hand_on", "heartbeat_s")

    def __init__(self, heartbeat_s: float, may_hand_on: bool) -> None:
        self.hand_on = False
        #: A parallel object on a client it does not own (and so does not close).
        self.may_hand_on = may_hand_on
        self.heartbeat_s = heartbeat_s


def _release(bindings: dict[int, _Binding], berth_id: str, how: _Release) -> None:
    for binding in list(bindings.values()):
        # After an attach in flight (`_join` holds the lock through it), so its run is
        # released too.
        with binding.lock:
            binding.stop.set()
            run_id, binding.run_id = binding.run_id, None
            chain, binding.chain = binding.chain, None
        if run_id is None or binding.lost is not None:
            continue
        turns = binding.turns
        if how.hand_on and chain is not None and turns.turn is None and not turns.started:
            expires = binding.lease_from + how.heartbeat_s  # before the run would need a heartbeat
            if expires > time.monotonic() and _POOL.put(
                _Pooled(binding.client, berth_id, run_id, chain, binding.lease_from, expires, turns.next_turn)
            ):
                continue
        _detach(binding.client, berth_id, run_id)
    bindings.clear()
