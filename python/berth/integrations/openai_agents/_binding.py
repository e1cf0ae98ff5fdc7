"""One client's hold on a session (`_Binding`): its berth run, the heartbeat, its turns
(`_turns`) and the kept view; and its release (`_release`).

A `BerthSession` object writes through a berth run of its own, attached on its first
write (or on a read that finds a turn some other object may have left open: a `resume`,
so turns left open by objects whose runs are gone are closed first), heartbeated in the
background and released by `close()` / leaving its context manager, or by its lease
(`run_lease_ttl_ms`) lapsing if the process dies.

A parallel object whose turns are all closed hands its run, on `close()`, to the next
object of this process that writes the same session with the same client (a web app's
object per request), instead of detaching it and attaching another: no catalog write at
either end. When a run may be handed on, and when the next object may take it, is the
process's pool's rule (`berth.integrations._runpool`, shared with ADK's service): the
binding keeps the run's chain (`chain`) and when its lease was last renewed.
"""

from __future__ import annotations

import threading
import time

import berth

from .._runpool import POOL as _POOL
from .._runpool import chain_after_append, detach, hand_on_or_detach
from .._runpool import lapsing as _lapsing  # noqa: F401  (`_reads`)
from ._turns import _Turns
from ._view import _View

#: This drop-in's idle runs in the process's pool (`berth.integrations._runpool`).
KIND = "openai-agents"


#: How long a dead process's run keeps its place (and its open turn unrepaired).
RUN_LEASE_TTL_MS_DEFAULT = 30_000
#: A catalog record at most this old (seconds) tells a write what the session is (its
#: mode, its runs) without reading it again.
SEEN_FRESH_S = 1.0


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
        self.chain = chain_after_append(self.chain, outcome)

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
        if how.hand_on and turns.turn is None and not turns.started:
            hand_on_or_detach(KIND, binding.client, berth_id, run_id, chain, binding.lease_from, how.heartbeat_s,
                              turns.next_turn)
        else:
            detach(binding.client, berth_id, run_id)
    bindings.clear()
