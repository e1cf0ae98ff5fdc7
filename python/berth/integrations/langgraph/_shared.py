"""What `BerthSaver` and `AsyncBerthSaver` share: their run's attachment, the copies
`with_allowlist` makes, their model-call recorder, and LangGraph's channel versions."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

from ._callbacks import ModelCallRecorder
from ._core import _Core
from ._records import LABEL


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

    def model_calls(self) -> ModelCallRecorder:
        """The LangChain callback handler that records each LLM call of a graph run on this
        saver as a `model/call` event in the run's thread, carried by an append the saver
        makes anyway (the call's task's writes, or its step's checkpoint). Pass it in the
        run's config, `{"callbacks": [saver.model_calls()]}`, or once,
        `graph.with_config(callbacks=[...])`. One handler per saver (and the copies
        `with_allowlist` makes)."""
        return self._core.recorder

    def fork_target(self, thread_id: str) -> dict[str, Any]:
        """What a fork that this saver adopts as thread `thread_id` takes (the keyword
        arguments of `Client.fork_session` besides the cut): the thread's session id,
        title, labels and this saver's policy, as its own create would set them
        (`berth.history.langchain.continue_thread`)."""
        return {"new_id": self._core.session_id(str(thread_id)), "title": str(thread_id), "labels": [LABEL],
                "policy": self._core.policy()}

    def with_allowlist(self, extra_allowlist: Any) -> Any:
        clone = super().with_allowlist(extra_allowlist)  # type: ignore[misc]
        if clone is not self:
            clone._core = self._core.with_serde(clone.serde)
        return clone
