"""The records that restore a smolagents agent's memory, and how each is read back:

- **the task**, `user/message {content: task, smolagents: {reset, images_dropped}}`,
  becomes a `TaskStep` (one with `reset` starts the memory over, as `run()` does);
- **each finished step**, `smol/step {kind: "action" | "planning", step}` (ignorable):
  the step's `dict()` without `model_input_messages` (smolagents rebuilds those from
  memory each step) and without images, read back by `action` / `planning` into the same
  `ActionStep` / `PlanningStep`.

These are the records the package has written since its first version; the
conversation vocabulary beside them (`_vocabulary`) is for berth's readers. The fold of
a whole session is `_fold`.
"""

from __future__ import annotations

import json
from typing import Any

from smolagents import utils as smol_utils
from smolagents.memory import ActionStep, PlanningStep, ToolCall
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
    """The `smol/step` data of a step. Its `dict()` is taken with the model inputs and
    images set aside (they are dropped from the record anyway, and serializing the whole
    conversation for every step cost more than the rest of the record)."""
    inputs = step.model_input_messages
    images = step.observations_images if isinstance(step, ActionStep) else None
    step.model_input_messages = [] if isinstance(step, PlanningStep) else None
    if isinstance(step, ActionStep):
        step.observations_images = None
    try:
        data = step.dict()
    finally:
        step.model_input_messages = inputs
        if isinstance(step, ActionStep):
            step.observations_images = images
    data.pop("model_input_messages", None)
    if isinstance(step, ActionStep):
        data["observations_images"] = None
        data["observations_images_dropped"] = len(images or [])
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
    # A copy: `from_dict` replaces the dict's tool calls with objects (a second read of
    # the same event data would fail).
    return ChatMessage.from_dict({**data}) if data else None


def error_of(data: dict[str, Any] | None) -> Exception | None:
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


def action(data: dict[str, Any]) -> ActionStep:
    return ActionStep(
        step_number=data["step_number"],
        timing=_timing(data.get("timing")),
        model_input_messages=None,
        tool_calls=[
            ToolCall(name=call["function"]["name"], arguments=call["function"]["arguments"], id=call["id"])
            for call in data.get("tool_calls") or []
        ]
        or None,
        error=error_of(data.get("error")),  # type: ignore[arg-type]
        model_output_message=_message(data.get("model_output_message")),
        model_output=data.get("model_output"),
        code_action=data.get("code_action"),
        observations=data.get("observations"),
        observations_images=None,
        action_output=data.get("action_output"),
        token_usage=_usage(data.get("token_usage")),
        is_final_answer=bool(data.get("is_final_answer")),
    )


def planning(data: dict[str, Any]) -> PlanningStep:
    return PlanningStep(
        model_input_messages=[],
        model_output_message=_message(data.get("model_output_message")),  # type: ignore[arg-type]
        plan=data.get("plan", ""),
        timing=_timing(data.get("timing")),
        token_usage=_usage(data.get("token_usage")),
    )
