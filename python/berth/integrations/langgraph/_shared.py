"""What `BerthSaver` and `AsyncBerthSaver` share: their run's attachment, the copies
`with_allowlist` makes, and LangGraph's channel versions."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

from ._core import _Core


def _next_version(current: str | int | float | None) -> str:
    if current is None:
        number = 0
    elif isinstance(current, (int, float)):
        number = int(current)
    else:
        number = int(str(current).split(".")[0])
    return f"{number + 1:032}.{random.random():016}"


class _Attachment:
    """What a saver shares with the copies `with_allowlist` makes of it, beside the core:
    the heartbeat of their one run and, for `AsyncBerthSaver`, the lock its calls take
    turns on (and the loop that lock belongs to)."""

    __slots__ = ("beat", "stop", "lock", "lock_loop")

    def __init__(self) -> None:
        self.beat: Any = None
        self.stop = threading.Event()
        self.lock: asyncio.Lock | None = None
        self.lock_loop: asyncio.AbstractEventLoop | None = None


class _SharedRun:
    """`with_allowlist` for berth's savers. LangGraph's (a shallow copy with a serde that
    also loads the graph's own types, what `StateGraph.compile` asks for under
    `LANGGRAPH_STRICT_MSGPACK`) would leave the copy (de)serializing through the core's,
    the original serde. Here the copy gets a core with its own serde, sharing everything
    else: the run (a second run would find the first holding an exclusive thread), the
    threads' state, the heartbeat and the group commit's queue."""

    _core: _Core

    def with_allowlist(self, extra_allowlist: Any) -> Any:
        clone = super().with_allowlist(extra_allowlist)  # type: ignore[misc]
        if clone is not self:
            clone._core = self._core.with_serde(clone.serde)
        return clone
