"""Run hooks: `BerthRunHooks` (`Runner.run(…, session=session, hooks=session.run_hooks())`).

- `on_agent_start` / `on_agent_end`: where the run starts and produces its final output,
  so its turn ends exactly there (`_turns`: the final output's batch carries `turn/end`)
  rather than where the items suggest; no write of their own.
- `on_tool_start`: before a function tool runs, the session records its `tool/call`
  durably (opening the turn and the step if the run's appends have not), the one write
  the hooks add. If the process dies while the tool runs, the next object to use the
  session gets berth's repair (`_repair`): the model sees that the tool may have run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.lifecycle import RunHooks

from ._records import _nonempty
from ._workers import _on_worker

if TYPE_CHECKING:
    from ._session import BerthSession


class BerthRunHooks(RunHooks[Any]):
    """Delimits each `Runner.run`'s turn and records each function tool's start in berth
    before it runs (see `BerthSession.run_hooks`)."""

    def __init__(self, session: BerthSession) -> None:
        self._session = session

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        self._session._binding(context).turns.agent_started(getattr(agent, "name", None))

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        self._session._binding(context).turns.agent_ended()

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
