"""Durable tool calls: `durable_tool_node(tools, saver)`, a LangGraph `ToolNode` that
records each call's start in berth before the tool runs.

LangGraph stores a step's results only when the step ends, so a process killed while a
tool runs leaves nothing of it: resumed (`graph.invoke(None, config)`), LangGraph runs
the tool again — a payment made twice. With this node, every call is first a durable
`tool/call` event in the thread's session (the saver's `record_tool_call`, one append
per call). The next process's node finds that record, with no result after it, in the
turn the dead process left open, and answers the call without running it: a
`ToolMessage` with `status="error"` saying the outcome is unknown, which the model reads
in its next input (and berth stores as the call's `tool/result`, error
`TOOL_OUTCOME_UNKNOWN`). A call berth's resume already closed is answered with that
result. Calls re-run after an `interrupt()`, an error or a new input run normally.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import ToolMessage

from ._messages import OUTCOME_UNKNOWN

#: How long a call waits for the checkpoint of its step to be stored before its record
#: is (LangGraph stores checkpoints in the background while the next step runs).
STEP_WAIT_S = 10.0
#: How often it looks meanwhile; after `STEP_READ_AFTER_S`, by reading the log.
STEP_POLL_S = 0.002
STEP_READ_AFTER_S = 0.5
#: What the model reads for a call whose outcome is unknown (berth's repair text).
OUTCOME_UNKNOWN_TEXT = (
    "The tool call was interrupted after it started; its outcome is unknown. Retry only "
    "read-only or idempotent work; otherwise verify the effect or ask the user."
)


def unknown_outcome(call: Any, found: dict[str, Any]) -> ToolMessage:
    """The `ToolMessage` answering a call that must not run again: berth's repair result
    if it wrote one (`found`), else the outcome-unknown one."""
    error: dict[str, Any] = found["error"] if isinstance(found.get("error"), dict) else OUTCOME_UNKNOWN
    content = found.get("content") if isinstance(found.get("content"), str) else OUTCOME_UNKNOWN_TEXT
    return ToolMessage(content=content, tool_call_id=call["id"], name=call.get("name"), status="error",
                       response_metadata={"berth": {"code": error["code"], "name": error["name"]}})


class DurableToolCalls:
    """A `ToolNode`'s `wrap_tool_call` and `awrap_tool_call` that record each call in
    berth (through `saver`, the graph's `BerthSaver` or `AsyncBerthSaver`) before it runs,
    around the wrappers given (theirs run outside: their retries record once):

        calls = DurableToolCalls(saver)
        ToolNode(tools, wrap_tool_call=calls.wrap, awrap_tool_call=calls.awrap)
    """

    def __init__(self, saver: Any, wrap_tool_call: Callable[..., Any] | None = None,
                 awrap_tool_call: Callable[..., Awaitable[Any]] | None = None) -> None:
        self.saver = saver
        self._outer = wrap_tool_call
        self._aouter = awrap_tool_call

    def wrap(self, request: Any, execute: Callable[[Any], Any]) -> Any:
        def recorded(request: Any) -> Any:
            config = _config(request)
            if config is None:
                return execute(request)
            record = getattr(self.saver, "record_tool_call", None)
            if record is None:
                raise TypeError("durable_tool_node: a sync graph needs BerthSaver (AsyncBerthSaver is for ainvoke)")
            found = record(config, request.tool_call)
            return execute(request) if found is None else unknown_outcome(request.tool_call, found)

        return self._outer(request, recorded) if self._outer is not None else recorded(request)

    async def awrap(self, request: Any, execute: Callable[[Any], Awaitable[Any]]) -> Any:
        async def recorded(request: Any) -> Any:
            config = _config(request)
            if config is None:
                return await execute(request)
            found = await self.saver.arecord_tool_call(config, request.tool_call)
            return await execute(request) if found is None else unknown_outcome(request.tool_call, found)

        if self._aouter is not None:
            return await self._aouter(request, recorded)
        return await recorded(request)


def step_checkpoint(config: Mapping[str, Any]) -> str | None:
    """The root checkpoint whose super-step runs the call, to be stored before the call's
    record (so the record follows the message that asked for it); None when the run
    stores no checkpoint until it ends (`durability="exit"`)."""
    configurable = config.get("configurable") or {}
    if configurable.get("__pregel_durability") == "exit":
        return None
    found = (configurable.get("checkpoint_map") or {}).get("")
    return found if isinstance(found, str) else None


def _config(request: Any) -> dict[str, Any] | None:
    """The run's config (its thread), or None outside a graph with a thread."""
    runtime = getattr(request, "runtime", None)
    config = getattr(runtime, "config", None)
    if not isinstance(config, dict) or "thread_id" not in (config.get("configurable") or {}):
        return None
    return config


def durable_tool_node(tools: Sequence[Any], saver: Any, **options: Any) -> Any:
    """A `ToolNode` over `tools` whose every call is recorded in berth, durably, before it
    runs (`DurableToolCalls`): after a process dies mid-tool, the next one answers that
    call with an outcome-unknown `ToolMessage` instead of running it again. `saver`: the
    checkpointer the graph is compiled with; `options`: `ToolNode`'s (`name`,
    `handle_tool_errors`, `messages_key`, `wrap_tool_call`, `awrap_tool_call`…)."""
    from langgraph.prebuilt import ToolNode  # langgraph's (the saver needs only langgraph-checkpoint)

    calls = DurableToolCalls(saver, options.pop("wrap_tool_call", None), options.pop("awrap_tool_call", None))
    return ToolNode(tools, wrap_tool_call=calls.wrap, awrap_tool_call=calls.awrap, **options)
