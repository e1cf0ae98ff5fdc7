"""The service's runs: one berth run per session it touches, attached by `resume`
(which repairs what a dead process left open), heartbeated, and detached on
`close()`; sessions are created `parallel` with a ten-year activity TTL."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import berth

from ._turns import TurnState


class _Hold:
    """The service's hold on one berth session: its run, where the run is in the turns
    (`_turns`), and the calls of the current invocation whose `tool/call` it appended
    (what `before_tool_recorder` checks)."""

    __slots__ = ("run_id", "turns", "started", "lost")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.turns = TurnState()
        self.started: set[str] = set()
        self.lost: BaseException | None = None


def _beat(client: berth.Client, holds: OrderedDict[str, _Hold], lock: threading.Lock, stop: threading.Event,
          interval_s: float) -> None:
    while not stop.wait(interval_s):
        with lock:
            current = list(holds.items())
        for berth_id, hold in current:
            if hold.lost is not None:
                continue
            try:
                client.heartbeat(berth_id, hold.run_id)
            except (berth.OwnershipLost, berth.NotFound, berth.Terminal) as error:
                hold.lost = error
            except (berth.BerthError, OSError):
                continue


def _release(client: berth.Client, holds: OrderedDict[str, _Hold], lock: threading.Lock,
             stop: threading.Event, prefetch: ThreadPoolExecutor) -> None:
    stop.set()
    prefetch.shutdown(wait=False, cancel_futures=True)
    with lock:
        current = list(holds.items())
        holds.clear()
    for berth_id, hold in current:
        if hold.lost is None:
            try:
                client.detach(berth_id, hold.run_id, outcome="completed")
            except (berth.BerthError, OSError):
                pass


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
