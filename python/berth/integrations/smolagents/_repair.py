"""A step the process died in, as smolagents would have recorded it.

When a durable tool (`_tools`) was running at a crash, the session holds the step's
pre-tool record (`step/start`, the model message with the step as smolagents held it,
`tool/call`) but no `smol/step`; the next `attach`'s resume closes it with berth's
repair (`tool/result {is_error, error: {code: TOOL_OUTCOME_UNKNOWN | TOOL_NOT_STARTED}}`,
`step/end`, `turn/end {reason: interrupted}`). The loader then rebuilds that step as the
`ActionStep` smolagents makes of a failed tool: the model output and the calls it
requested, and an `AgentToolExecutionError` (a `CodeAgent`: `AgentExecutionError`)
worded as smolagents words one, naming each open call and what berth knows of it —

    Error executing tool 'charge_card' with arguments {'amount': 30}: ToolOutcomeUnknownError:
    The tool call was interrupted after it started; its outcome is unknown. …
    Please try again or use another tool

— so the model's next prompt says the call may or may not have happened.
"""

from __future__ import annotations

from typing import Any

from smolagents.memory import ActionStep

from ._records import action, error_of
from ._vocabulary import CODE_TOOL

OUTCOME_UNKNOWN = ("ToolOutcomeUnknownError", "The tool call was interrupted after it started; its outcome is unknown. "
                   "Retry only read-only or idempotent work; otherwise verify the effect or ask the user.")
NOT_STARTED = ("ToolNotStartedError",
               "The tool call was interrupted before it started. Retry it if it is still needed.")


class OpenStep:
    """A step whose pre-tool record the loader read, and what followed it."""

    def __init__(self, partial: dict[str, Any], requested: list[Any]) -> None:
        """`partial`: the step (smolagents' ids); `requested`: the model message's
        `tool_calls` (berth's ids), in the same order."""
        self.partial = partial
        self.requested = requested
        #: `tool/call` data by call id, in order.
        self.started: dict[str, dict[str, Any]] = {}
        #: `tool/result` data by call id.
        self.results: dict[str, dict[str, Any]] = {}

    def feed(self, event_type: str, data: dict[str, Any]) -> None:
        call_id = data.get("call_id")
        if not isinstance(call_id, str):
            return
        if event_type == "tool/call":
            self.started.setdefault(call_id, data)
        elif event_type == "tool/result":
            self.results.setdefault(call_id, data)

    def step(self, end_time_ms: int) -> ActionStep:
        """The step, ended with the error of its open calls."""
        step = action(self.partial)
        step.timing.end_time = end_time_ms / 1000
        step.error = error_of(self._error())
        return step

    def _error(self) -> dict[str, str]:
        berth_ids = [call.get("call_id") if isinstance(call, dict) else None for call in self.requested]
        requested: list[tuple[str, str, Any]] = [
            (str(berth_ids[index] if index < len(berth_ids) and berth_ids[index] else call["id"]),
             call["function"]["name"], call["function"]["arguments"])
            for index, call in enumerate(self.partial.get("tool_calls") or [])]
        ids = {call_id for call_id, _, _ in requested}
        inner = [(call_id, str(data.get("name", "?")), data.get("arguments")) for call_id, data in self.started.items()
                 if call_id not in ids]
        if any(name == CODE_TOOL for _, name, _ in requested):
            lines = []
            for call_id, name, arguments in inner or requested:
                outcome = self._outcome(call_id)
                if outcome is not None:
                    line = f"{name}({_python_arguments(arguments)})" if inner else str(arguments)
                    lines.append(f"Code execution failed at line '{line}' due to: {outcome[0]}: {outcome[1]}")
            return {"type": "AgentExecutionError", "message": "\n".join(lines)}
        lines = []
        for call_id, name, arguments in requested + inner:
            outcome = self._outcome(call_id)
            if outcome is not None:
                lines.append(f"Error executing tool '{name}' with arguments {arguments}: {outcome[0]}: {outcome[1]}\n"
                             "Please try again or use another tool")
        return {"type": "AgentToolExecutionError", "message": "\n".join(lines)}

    def _outcome(self, call_id: str) -> tuple[str, str] | None:
        """`(error name, message)` of a call that did not end, none for one that did."""
        result = self.results.get(call_id)
        if result is None:
            return OUTCOME_UNKNOWN if call_id in self.started else NOT_STARTED
        error = result.get("error")
        if isinstance(error, dict):
            return str(error.get("name") or error.get("code") or "ToolError"), str(result.get("content", ""))
        if result.get("is_error"):
            return "ToolError", str(result.get("content", ""))
        return None


def _python_arguments(arguments: Any) -> str:
    """A call's arguments as code would write them: `city='Paris'`."""
    if isinstance(arguments, dict):
        return ", ".join(f"{name}={value!r}" for name, value in arguments.items())
    return repr(arguments)
