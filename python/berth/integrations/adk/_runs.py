"""The service's runs: one berth run per session it touches, attached by `resume`
(which repairs what a dead process left open), heartbeated, and released on
`close()`: handed on to the next service object of the process on the same session and
client when its turns are closed and nothing else wrote since its resume (the process's
pool, `berth.integrations._runpool`, shared with the OpenAI drop-in), else detached;
sessions are created `parallel` with a ten-year activity TTL."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import berth

from .._runpool import chain_after_append, detach, hand_on_or_detach
from ._turns import TurnState

#: This drop-in's idle runs in the process's pool (`berth.integrations._runpool`).
KIND = "adk"


class _Hold:
    """The service's hold on one berth session: its run, where the run is in the turns
    (`_turns`), and the calls of the current invocation whose `tool/call` it appended
    (what `before_tool_recorder` checks); for its release, where the log ends after the
    run's last append while every event since its resume is its own (`chain`,
    `_runpool`; None: not so), when its lease was last renewed (monotonic), and its
    writes in flight."""

    __slots__ = ("run_id", "turns", "started", "lost", "chain", "lease_from", "lock", "writes", "released")

    def __init__(self, run_id: str, lease_from: float, chain: int | None = None) -> None:
        self.run_id = run_id
        self.turns = TurnState()
        self.started: set[str] = set()
        self.lost: BaseException | None = None
        self.chain = chain
        self.lease_from = lease_from
        self.lock = threading.Lock()
        self.writes = 0
        self.released = False

    @contextlib.contextmanager
    def writing(self) -> Iterator[str]:
        """The run id for one write, counted in flight until it returns: a released run
        (`close()` may have handed it to another object) writes nothing more."""
        with self.lock:
            if self.released:
                raise berth.OwnershipLost(f"run {self.run_id!r} was released by close()", status=409)
            self.writes += 1
        try:
            yield self.run_id
        finally:
            with self.lock:
                self.writes -= 1

    def appended(self, outcome: berth.AppendOutcome) -> None:
        self.chain = chain_after_append(self.chain, outcome)

    def release(self) -> bool:
        """Marks the run released; True when no write of it is in flight (and its turn
        is closed): it may be handed on."""
        with self.lock:
            self.released = True
            return self.writes == 0 and self.lost is None and not self.turns.open


def _beat(client: berth.Client, holds: OrderedDict[str, _Hold], lock: threading.Lock, stop: threading.Event,
          interval_s: float) -> None:
    while not stop.wait(interval_s):
        with lock:
            current = list(holds.items())
        for berth_id, hold in current:
            if hold.lost is not None:
                continue
            try:
                started = time.monotonic()
                client.heartbeat(berth_id, hold.run_id)
                hold.lease_from = started
            except (berth.OwnershipLost, berth.NotFound, berth.Terminal) as error:
                hold.lost = error
            except (berth.BerthError, OSError):
                continue


class _Release:
    """What `_release` may do with the runs: hand them on (`close()`, when the service
    was made with `hand_on=True`) or only detach them (the finalizer of an object that
    was never closed)."""

    __slots__ = ("hand_on", "may_hand_on", "heartbeat_s")

    def __init__(self, heartbeat_s: float, may_hand_on: bool) -> None:
        self.hand_on = False
        self.may_hand_on = may_hand_on
        self.heartbeat_s = heartbeat_s


def _release(client: berth.Client, holds: OrderedDict[str, _Hold], lock: threading.Lock,
             stop: threading.Event, prefetch: ThreadPoolExecutor, how: _Release) -> None:
    stop.set()
    prefetch.shutdown(wait=False, cancel_futures=True)
    with lock:
        current = list(holds.items())
        holds.clear()
    for berth_id, hold in current:
        idle = hold.release()
        if hold.lost is not None:
            continue
        if how.hand_on and idle:
            hand_on_or_detach(KIND, client, berth_id, hold.run_id, hold.chain, hold.lease_from, how.heartbeat_s)
        else:
            detach(client, berth_id, hold.run_id)


class _Closed:
    """What `BerthSessionService.close()` returns: the close is done, and awaiting this
    finishes at once, so code written for ADK's async `close()` works unchanged. Not a
    coroutine: a sync caller that drops it gets no "never awaited" warning."""

    __slots__ = ()

    def __await__(self) -> Iterator[None]:
        return iter(())

    def __repr__(self) -> str:
        return "<BerthSessionService closed>"


_CLOSED = _Closed()
