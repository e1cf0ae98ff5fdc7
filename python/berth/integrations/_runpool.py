"""The process's idle runs (`POOL`): a drop-in object's berth run, handed on at its
`close()` to the next object of this process that writes the same session with the same
client, instead of a detach at one end and an attach (`resume`) at the other (issue 53
item 4: a web app's object per request pays no catalog write for the run it needs).

Used by the OpenAI Agents SDK's `BerthSession` and ADK's `BerthSessionService`; each keeps
its own run bookkeeping and asks this module three things:

- after its `resume`: may this run ever be handed on (`chain_after_resume`)? Only when
  the resume left the session with no other run attached and the record at the revision
  the resume left (read again just after it): every turn then was closed, by that repair
  or before;
- after each append: is every event since still the run's own (`chain_after_append`:
  each append began where the last one ended)? The chain is where the log ends after
  the run's last append, or None once broken;
- at `close()`, its turns all closed and no write in flight: `hand_on_or_detach`.

The next object takes an idle run (`POOL.take`) only if the record it reads lists no run
but this one, no lease is lapsing, and the log still ends where the run's last append
ended; otherwise the entry is detached and the object resumes as usual (repairing
whatever another run left open). An entry is popped under the pool's lock, so a run is
never handed to two objects. An idle run is detached within a third of its lease
(before it would need a heartbeat: `expires`), when its client closes
(`berth.Client._before_close`), and at exit. A process that dies leaves it to lapse with
its lease, its turns closed: nothing for the next process's resume to repair.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import berth
import berth._exit

#: Runs whose lease ends within this margin (ms) count as lapsed (clocks may differ).
LEASE_MARGIN_MS = 1_000
#: Idle runs kept per drop-in, session and client.
POOLED_PER_SESSION_MAX = 8


def lapsing(session: berth.Session, now_ms: int | None = None) -> bool:
    """A run of `session` has lost (or is about to lose) its lease: its turn may need repair."""
    if now_ms is None:
        now_ms = int(time.time() * 1000)
    margin = min(LEASE_MARGIN_MS, session.header.policy.run_lease_ttl_ms // 3)
    return any(run.lease_until < now_ms + margin for run in session.runs)


def chain_after_resume(client: berth.Client, berth_id: str, outcome: berth.ResumeOutcome) -> int | None:
    """Where the log ends after `outcome`'s resume, if its run may be handed on later:
    the record, read again, lists no other run and is still at the resume's revision."""
    after = client.get_session(berth_id)
    run_id = outcome.attachment.run_id
    if [run.run_id for run in after.runs] == [run_id] and after.revision == outcome.attachment.revision:
        return outcome.next_seq
    return None


def chain_after_append(chain: int | None, outcome: berth.AppendOutcome) -> int | None:
    """The chain after an append by the run: on where the append ended if it began where
    the chain was (a duplicate, or an append after someone else's, breaks it)."""
    if chain is None or outcome.duplicate or outcome.first_seq != chain:
        return None
    return outcome.next_seq


class IdleRun:
    """A run handed on: whose (`kind`: the drop-in; the client), which, where its chain
    ends, when its lease was last renewed and when it must be detached (monotonic), and
    what the drop-in carries with it (`carried`: the OpenAI object's next turn number)."""

    __slots__ = ("kind", "client", "berth_id", "run_id", "chain", "lease_from", "expires", "carried")

    def __init__(self, kind: str, client: berth.Client, berth_id: str, run_id: str, chain: int,
                 lease_from: float, expires: float, carried: Any = None) -> None:
        self.kind = kind
        self.client = client
        self.berth_id = berth_id
        self.run_id = run_id
        self.chain = chain
        self.lease_from = lease_from
        self.expires = expires
        self.carried = carried

    def key(self) -> tuple[str, int, str]:
        return (self.kind, id(self.client), self.berth_id)


class RunPool:
    """The process's idle runs, by drop-in, client and session (the module's docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: dict[tuple[str, int, str], list[IdleRun]] = {}
        self.wake = threading.Event()
        self.sweeper: threading.Thread | None = None
        #: Clients whose closing releases their idle runs first (`berth.Client._before_close`).
        self.hooked: weakref.WeakSet[berth.Client] = weakref.WeakSet()

    def put(self, entry: IdleRun) -> bool:
        with self.lock:
            entries = self.idle.setdefault(entry.key(), [])
            if len(entries) >= POOLED_PER_SESSION_MAX:
                return False
            entries.append(entry)
            client = entry.client
            if client not in self.hooked and hasattr(client, "_before_close"):
                self.hooked.add(client)
                client._before_close(lambda: self.release_client(client))
            if self.sweeper is None:
                self.sweeper = threading.Thread(target=self._sweep, name="berth-idle-runs", daemon=True)
                self.sweeper.start()
        self.wake.set()
        return True

    def holds(self, kind: str, client: berth.Client, berth_id: str) -> bool:
        """Is an idle run of this drop-in and client on the session waiting (no I/O)?"""
        with self.lock:
            return bool(self.idle.get((kind, id(client), berth_id)))

    def take(
        self, kind: str, client: berth.Client, berth_id: str, session: berth.Session, end: Callable[[], int]
    ) -> IdleRun | None:
        """An idle run of this drop-in and client on the session, if the record `session`
        (read just now) lists no other run and the log (`end()`) still ends where the run
        left it; stale entries are dropped (and detached)."""
        now = time.monotonic()
        now_ms = int(time.time() * 1000)
        stale: list[IdleRun] = []
        taken = None
        with self.lock:
            entries = self.idle.get((kind, id(client), berth_id))
            while entries:
                entry = entries.pop()
                if entry.client is not client:
                    stale.append(entry)
                    continue
                if (
                    entry.expires > now
                    and [run.run_id for run in session.runs] == [entry.run_id]
                    and not lapsing(session, now_ms)
                ):
                    taken = entry
                else:
                    stale.append(entry)
                break
            if entries is not None and not entries:
                self.idle.pop((kind, id(client), berth_id), None)
        try:
            if taken is not None and end() != taken.chain:
                stale.append(taken)
                taken = None
        except BaseException:
            if taken is not None:
                stale.append(taken)
            raise
        finally:
            for entry in stale:
                detach(entry.client, entry.berth_id, entry.run_id)
        return taken

    def drop(self, kind: str, client: berth.Client, berth_id: str) -> None:
        """Forgets this client's idle runs of the session (it is being deleted)."""
        key = (kind, id(client), berth_id)
        with self.lock:
            kept = [entry for entry in self.idle.get(key, []) if entry.client is not client]
            if kept:
                self.idle[key] = kept
            else:
                self.idle.pop(key, None)

    def expired(self, everything: bool = False) -> tuple[list[IdleRun], float | None]:
        now = time.monotonic()
        gone: list[IdleRun] = []
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
                detach(entry.client, entry.berth_id, entry.run_id)
            self.wake.wait(None if soonest is None else max(0.01, soonest - time.monotonic()))

    def release_client(self, client: berth.Client) -> None:
        """Detaches `client`'s idle runs now: it is closing (a script that closes its client
        and exits leaves no run attached until its lease lapses)."""
        gone: list[IdleRun] = []
        with self.lock:
            self.hooked.discard(client)
            for key in [key for key in self.idle if key[1] == id(client)]:
                kept = [entry for entry in self.idle[key] if entry.client is not client]
                gone.extend(entry for entry in self.idle[key] if entry.client is client)
                if kept:
                    self.idle[key] = kept
                else:
                    del self.idle[key]
        for entry in gone:
            detach(entry.client, entry.berth_id, entry.run_id)

    def release_all(self) -> None:
        gone, _ = self.expired(everything=True)
        for entry in gone:
            try:
                detach(entry.client, entry.berth_id, entry.run_id)
            except Exception:  # at exit, a client torn down already: the lease lapses
                pass


POOL = RunPool()
# At exit, before the embedded stores close (berth._exit: this module may be imported
# before the transport, and atexit runs last-registered first), and for HTTP clients.
berth._exit.before_stores_close(POOL.release_all)
atexit.register(POOL.release_all)


def detach(client: berth.Client, berth_id: str, run_id: str) -> None:
    try:
        client.detach(berth_id, run_id, outcome="completed")
    except (berth.BerthError, OSError):
        pass  # gone already, or unreachable: the run's lease lapses on its own


def hand_on_or_detach(kind: str, client: berth.Client, berth_id: str, run_id: str, chain: int | None,
                      lease_from: float, heartbeat_s: float, carried: Any = None) -> bool:
    """Puts a released run in the pool when its chain holds and it will not need a
    heartbeat before the next object could take it (`lease_from + heartbeat_s`); else
    (or the pool is full for the session) detaches it. The caller has checked that the
    run's turns are all closed and no write of its is in flight. True: handed on."""
    expires = lease_from + heartbeat_s
    if chain is not None and expires > time.monotonic() and POOL.put(
        IdleRun(kind, client, berth_id, run_id, chain, lease_from, expires, carried)
    ):
        return True
    detach(client, berth_id, run_id)
    return False
