"""What a smolagents job's berth session holds, and the loader that folds it back:

- **The task is recorded when `run()` starts** (before any model call), as
  `user/message {content: task, smolagents: {reset}}`; every step is appended durably by
  a step callback when smolagents finalizes it: `smol/step {kind: "action" | "planning",
  step}` (the step's `dict()`, without `model_input_messages` — smolagents rebuilds
  those from memory each step — and without images); the final answer as
  `assistant/message {content: str(output), smolagents: {output}}`.
- **The loader** (`steps_from_events`, called by `BerthAgentLog.load`) folds those
  events back into `TaskStep`, `ActionStep` and `PlanningStep` objects, so
  `run(task, reset=False)` continues with the same memory the crashed process had
  after its last finished step.
"""

from __future__ import annotations

import json
from typing import Any

from smolagents import utils as smol_utils
from smolagents.memory import ActionStep, PlanningStep, TaskStep, ToolCall
from smolagents.models import ChatMessage
from smolagents.monitoring import Timing, TokenUsage
from smolagents.utils import make_json_serializable


LABEL = "smolagents"
STEP_TYPE = "smol/step"
TASK_TYPE = "user/message"
FINAL_TYPE = "assistant/message"
#: Ten years: a job's session does not expire under berth's 24 h idle default.
ACTIVITY_TTL_MS_FOREVER = 10 * 365 * 24 * 3600 * 1000


def _jsonable(value: Any) -> Any:
    """`value` as JSON (smolagents' own conversion, then `default=str` for the rest)."""
    return json.loads(json.dumps(make_json_serializable(value), default=str))


def _step_data(step: ActionStep | PlanningStep) -> dict[str, Any]:
    data = step.dict()
    data.pop("model_input_messages", None)
    if isinstance(step, ActionStep):
        images = step.observations_images or []
        data["observations_images"] = None
        data["observations_images_dropped"] = len(images)
    data.get("timing", {}).pop("duration", None)
    return {"kind": "action" if isinstance(step, ActionStep) else "planning", "step": _jsonable(data)}


def _timing(data: dict[str, Any] | None) -> Timing:
    data = data or {}
    return Timing(start_time=data.get("start_time") or 0.0, end_time=data.get("end_time"))


def _usage(data: dict[str, Any] | None) -> TokenUsage | None:
    if not data:
        return None
    return TokenUsage(input_tokens=data["input_tokens"], output_tokens=data["output_tokens"])


def _message(data: dict[str, Any] | None) -> ChatMessage | None:
    return ChatMessage.from_dict(data) if data else None


def _error(data: dict[str, Any] | None) -> Exception | None:
    """The step's `AgentError` again, of the same class, without logging it a second time
    (`AgentError.__init__` logs)."""
    if not data:
        return None
    kind = getattr(smol_utils, str(data.get("type")), None)
    if not (isinstance(kind, type) and issubclass(kind, smol_utils.AgentError)):
        kind = smol_utils.AgentError
    error = kind.__new__(kind)
    Exception.__init__(error, data.get("message", ""))
    error.message = data.get("message", "")
    return error


def _action(data: dict[str, Any]) -> ActionStep:
    return ActionStep(
        step_number=data["step_number"],
        timing=_timing(data.get("timing")),
        model_input_messages=None,
        tool_calls=[
            ToolCall(name=call["function"]["name"], arguments=call["function"]["arguments"], id=call["id"])
            for call in data.get("tool_calls") or []
        ]
        or None,
        error=_error(data.get("error")),  # type: ignore[arg-type]
        model_output_message=_message(data.get("model_output_message")),
        model_output=data.get("model_output"),
        code_action=data.get("code_action"),
        observations=data.get("observations"),
        observations_images=None,
        action_output=data.get("action_output"),
        token_usage=_usage(data.get("token_usage")),
        is_final_answer=bool(data.get("is_final_answer")),
    )


def _planning(data: dict[str, Any]) -> PlanningStep:
    return PlanningStep(
        model_input_messages=[],
        model_output_message=_message(data.get("model_output_message")),  # type: ignore[arg-type]
        plan=data.get("plan", ""),
        timing=_timing(data.get("timing")),
        token_usage=_usage(data.get("token_usage")),
    )


def steps_from_events(events: Any) -> list[TaskStep | ActionStep | PlanningStep]:
    """Folds a session's events into `agent.memory.steps`: a task with `reset` starts
    the list over, as `run(reset=True)` does."""
    steps: list[TaskStep | ActionStep | PlanningStep] = []
    for event in events:
        data = event.data if isinstance(event.data, dict) else {}
        if event.type == TASK_TYPE and "smolagents" in data:
            if data["smolagents"].get("reset"):
                steps = []
            steps.append(TaskStep(task=data["content"]))
        elif event.type == STEP_TYPE:
            steps.append(_action(data["step"]) if data.get("kind") == "action" else _planning(data["step"]))
    return steps
