"""Run hooks: `BerthRunHooks` (`Runner.run(…, session=session, hooks=session.run_hooks())`).

- `on_agent_start` / `on_agent_end`: where the run starts and produces its final output,
  so its turn ends exactly there (`_turns`: the final output's batch carries `turn/end`)
  rather than where the items suggest; no write of their own.
- `on_tool_start`: before a function tool runs, the session records its `tool/call`
  durably (opening the turn and the step if the run's appends have not), the one write
  the hooks add. If the process dies while the tool runs, the next object to use the
  session gets berth's repair (`_repair`): the model sees that the tool may have run.
- `on_llm_start` / `on_llm_end`: each model call's `model/call` event (issue 54): the
  model, the tokens and cached tokens the response's `usage` reports, the latency
  between the two hooks, the `response_id`. No write of their own: the event waits in
  the binding's turns (`_turns`) for the session's next append, the response's step
  batch or its first tool's pre-tool record. A call that raises is not recorded: the
  SDK calls no hook for it (`on_llm_end` never comes; the error reaches `Runner.run`'s
  caller). Neither are the provider or a finish reason: `ModelResponse` carries neither.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from agents.lifecycle import RunHooks

from berth.integrations._model_calls import CallTimer, model_call_event

from ._records import _nonempty
from ._workers import _on_worker

if TYPE_CHECKING:
    from ._session import BerthSession


#: Model calls timed at once at most (one per run in flight; a call that raised leaves
#: its start behind, dropped once this many are newer).
CALLS_TIMED_MAX = 256


class BerthRunHooks(RunHooks[Any]):
    """Delimits each `Runner.run`'s turn, records each function tool's start in berth
    before it runs, and each model call (see `BerthSession.run_hooks`)."""

    def __init__(self, session: BerthSession, run_config: Any = None) -> None:
        self._session = session
        self._run_config = run_config
        #: Each run's model call in flight, by its context (`on_llm_start` to `on_llm_end`).
        self._timers: dict[int, CallTimer] = {}

    async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
        timers = self._timers
        timers[id(context)] = CallTimer()
        while len(timers) > CALLS_TIMED_MAX:
            del timers[next(iter(timers))]

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        timer = self._timers.pop(id(context), None)
        usage = getattr(response, "usage", None)
        tokens: dict[str, Any] = {}
        # The SDK's `Usage` is zeros when the provider reported none: counts only when some are not.
        if usage is not None and (getattr(usage, "input_tokens", 0) or getattr(usage, "output_tokens", 0)):
            details = getattr(usage, "input_tokens_details", None)
            tokens = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                      "cached_tokens": getattr(details, "cached_tokens", None)}
        event = model_call_event(
            model=_model_name(agent, self._run_config),
            latency_ms=timer.elapsed_ms() if timer is not None else None,
            response_id=getattr(response, "response_id", None),
            time_ms=int(time.time() * 1000),
            **tokens,
        )
        self._session._binding(context).turns.model_called(event)

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


def _model_name(agent: Any, run_config: Any) -> str | None:
    """The model's name as the run resolves it (`RunConfig.model` over `Agent.model`): a
    string, or a `Model` object's `model` (the SDK's OpenAI and LiteLLM models keep their
    name there); None when neither says (the SDK's default model, a scripted model)."""
    for model in (getattr(run_config, "model", None), getattr(agent, "model", None)):
        if model is None:
            continue
        if isinstance(model, str):
            return model
        name = getattr(model, "model", None)
        return name if isinstance(name, str) else None
    return None
