"""A berth conversation as smolagents memory steps, to assign to `agent.memory.steps`
before `agent.run(task, reset=False)`:

| reading | step |
|---|---|
| user message | `TaskStep(task=text)` |
| assistant message with tool calls, and the results that follow | `ActionStep(model_output=text, tool_calls=[ToolCall(name, arguments, id)], observations=<the results' text, one a line>)` |
| assistant message without calls (an answer) | `ActionStep(model_output=text, action_output=text, is_final_answer=True)` |
| results no assistant message asked for | `ActionStep(observations=…)` |

Steps are numbered from 1 in order; a failed call's result is in `observations` as its
text. System messages are left out (an agent makes its own system prompt), as are images,
which smolagents keeps as PIL images (their placeholders are in the text).
"""

from __future__ import annotations

from typing import Any, Iterable

from . import _framework, conversation
from ._read import Item, ToolResult


def steps_of(conversation_items: Iterable[Item]) -> list[Any]:
    """smolagents memory steps of a neutral reading."""
    memory = _framework("smolagents.memory", "smolagents", "smolagents")
    ActionStep, TaskStep, ToolCall = memory.ActionStep, memory.TaskStep, memory.ToolCall
    Timing = _framework("smolagents.monitoring", "smolagents", "smolagents").Timing

    steps: list[Any] = []
    open_step: Any = None

    for item in conversation_items:
        time_s = item.time_ms / 1000
        if isinstance(item, ToolResult):
            if open_step is None:
                open_step = ActionStep(step_number=len(steps) + 1, timing=Timing(start_time=time_s, end_time=time_s))
                steps.append(open_step)
            lines = [open_step.observations] if open_step.observations else []
            open_step.observations = "\n".join(lines + [item.output])
            continue
        open_step = None
        if item.role == "user":
            steps.append(TaskStep(task=item.text))
        elif item.role == "assistant":
            timing = Timing(start_time=time_s, end_time=time_s)
            if item.tool_calls:
                open_step = ActionStep(
                    step_number=len(steps) + 1, timing=timing, model_output=item.text or None,
                    tool_calls=[ToolCall(name=call.name, arguments=call.arguments, id=call.call_id)
                                for call in item.tool_calls])
                steps.append(open_step)
            else:
                steps.append(ActionStep(step_number=len(steps) + 1, timing=timing, model_output=item.text,
                                        action_output=item.text, is_final_answer=True))
    return steps


def smolagents_steps(client: Any, session_id: str) -> list[Any]:
    """Session `session_id`'s conversation as smolagents memory steps. Raises
    `berth.history.FrameworkMissing` when `smolagents` is not installed."""
    _framework("smolagents.memory", "smolagents", "smolagents")
    return steps_of(conversation(client, session_id))


__all__ = ["smolagents_steps", "steps_of"]
