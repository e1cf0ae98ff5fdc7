"""Durable in-flight tool calls: `BerthRunHooks`.

Pass `hooks=session.run_hooks()` to `Runner.run`. Before a tool runs, the session
records a `turn/start` (once per model turn) and a `tool/call` through its run; the
turn is closed (`turn/end`) in the same append that saves the turn's items. If the
process dies while the tool runs, the next object to use the session gets berth's
repair (`_repair`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.lifecycle import RunHooks

from ._records import _nonempty
from ._workers import _on_worker

if TYPE_CHECKING:
    from ._session import BerthSession


class BerthRunHooks(RunHooks[Any]):
    """Records each function tool's start in berth before it runs (see `run_hooks`)."""

    def __init__(self, session: BerthSession) -> None:
        self._session = session

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        call_id = getattr(context, "tool_call_id", None)
        name = getattr(context, "tool_name", None) or getattr(tool, "name", None)
        if not _nonempty(call_id) or not _nonempty(name):
            return  # not a function tool call (no call id to repair against)
        arguments = getattr(context, "tool_arguments", None)
        binding = self._session._binding(context)
        await _on_worker(
            self._session._record_tool_start, binding, call_id, name, arguments if arguments is not None else ""
        )
