"""smolagents' records as berth's conversation vocabulary (docs/concepts.md), pure: each
function returns the events for one thing smolagents did, which `_turns` puts in the
appends the log makes anyway.

| smolagents | berth |
|---|---|
| `run(task)` | `turn/start {turn}`, `user/message {content: task, smolagents: {reset, images_dropped}}` |
| an `ActionStep` | `step/start {turn, step}` … `step/end {turn, step}` around: |
| its model output | `assistant/message {content, tool_calls: [{call_id, name, arguments}]}` |
| each tool call (a `CodeAgent`'s code is its `python_interpreter` call) | `tool/call {call_id, name, arguments}` |
| its observation, or error | `tool/result {call_id, content, is_error?}` |
| the step itself | `smol/step {kind: "action", step}` (ignorable; restores the memory) |
| a `PlanningStep` | `assistant/message {content: plan, smolagents: {kind: "planning"}}`, its `smol/step` |
| the final answer | `assistant/message {content: str(output), smolagents: {output}}`, `turn/end {reason}` |
| `run()` raised | `turn/end {reason: "error" \\| "interrupted", error: {type, message}}` |
| each model call (a step's, a plan's) | `model/call {model, input_tokens, …}` (ignorable), first in its step |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from berth.integrations._model_calls import model_call_event

from ._records import STEP_TYPE, _jsonable, _step_data

#: smolagents' tool that ends a run: a `ToolCallingAgent` step calling only it is the
#: final answer, shown as the answer, not as a tool call.
FINAL_ANSWER_TOOL = "final_answer"
#: The call a `CodeAgent` step makes of its code.
CODE_TOOL = "python_interpreter"

Event = dict[str, Any]


@dataclass
class Call:
    """One tool call of a step, as berth records it."""

    #: Its id in berth's events: smolagents' id, unless this log's berth run used that one
    #: already (a `CodeAgent` numbers its calls by its memory's length, again after a
    #: reset): readers pair a run's calls by id.
    call_id: str
    name: str
    arguments: Any
    #: Set for a call made inside a requested one (a tool a `CodeAgent`'s code called):
    #: that call's id, or `""` when no call was requested.
    parent: str | None = None
    #: Its `tool/call` is stored.
    started: bool = False
    #: `(content, is_error)` once known in this process.
    result: tuple[str, bool] | None = None
    #: smolagents' id of a requested call (its `ToolCall.id`).
    id: str = ""

    def requested(self) -> dict[str, Any]:
        """As the model's message lists it (`assistant/message`'s `tool_calls`)."""
        return {"call_id": self.call_id, "name": self.name, "arguments": _jsonable(self.arguments)}


def turn_start(turn: int) -> Event:
    return {"type": "turn/start", "data": {"turn": turn}}


def turn_end(turn: int, reason: str, error: BaseException | None = None) -> Event:
    data: dict[str, Any] = {"turn": turn, "reason": reason}
    if error is not None:
        data["error"] = {"type": type(error).__name__, "message": str(error)}
    return {"type": "turn/end", "data": data}


def step_start(turn: int, step: int) -> Event:
    return {"type": "step/start", "data": {"turn": turn, "step": step}}


def step_end(turn: int, step: int) -> Event:
    return {"type": "step/end", "data": {"turn": turn, "step": step}}


def task(text: str, *, reset: bool, images_dropped: int) -> Event:
    return {"type": "user/message", "data": {"content": text, "smolagents": {
        "reset": reset, "images_dropped": images_dropped}}}


def model_message(content: Any, calls: list[Call], partial: dict[str, Any] | None = None) -> Event | None:
    """A step's model output, or none when it said nothing and called nothing. `partial`:
    the step as smolagents held it when a tool started (the pre-tool record), for the
    loader to rebuild should the process die before the step ends."""
    if content is None:
        content = ""
    if content == "" and not calls and partial is None:
        return None
    data: dict[str, Any] = {"content": _jsonable(content)}
    if calls:
        data["tool_calls"] = [call.requested() for call in calls]
    if partial is not None:
        data["smolagents"] = {"step": partial}
    return {"type": "assistant/message", "data": data}


def tool_call(call: Call) -> Event:
    return {"type": "tool/call", "data": call.requested()}


def tool_result(call_id: str, content: str, is_error: bool) -> Event:
    data: dict[str, Any] = {"call_id": call_id, "content": content}
    if is_error:
        data["is_error"] = True
    return {"type": "tool/result", "data": data}


def step_record(step: Any) -> Event:
    """The record that restores the step (`smol/step`, as the package always wrote it)."""
    return {"type": STEP_TYPE, "data": _step_data(step), "ignorable": True}


def plan(step: Any) -> Event:
    return {"type": "assistant/message", "data": {"content": step.plan, "smolagents": {"kind": "planning"}}}


def final_answer(output: Any) -> Event:
    return {"type": "assistant/message", "data": {"content": str(output), "smolagents": {"output": _jsonable(output)}}}


def error_text(observations: str | None, error: BaseException) -> str:
    """A failed call's result: what it printed before it failed, then the error."""
    return "\n".join(part for part in (observations, f"Error: {error}") if part)


def model_call(model: Any, step: Any, *, latency_ms: float | None, time_ms: int | None,
               error: BaseException | None = None) -> Event:
    """The `model/call` of the step's model call: `model.model_id`; the tokens of the
    step's `token_usage` (smolagents counts zero when the model reported none: left out
    then); from the provider's raw response, when it is OpenAI-shaped (OpenAI, LiteLLM,
    Hugging Face inference), its cached prompt tokens, finish reason and id."""
    usage = getattr(step, "token_usage", None)
    tokens: dict[str, Any] = {}
    if usage is not None and (getattr(usage, "input_tokens", 0) or getattr(usage, "output_tokens", 0)):
        tokens = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
    raw = getattr(getattr(step, "model_output_message", None), "raw", None)
    cached, finish_reason, response_id = _from_raw(raw) if raw is not None else (None, None, None)
    return model_call_event(model=getattr(model, "model_id", None), cached_tokens=cached, finish_reason=finish_reason,
                            response_id=response_id, latency_ms=latency_ms, time_ms=time_ms, error=error, **tokens)


def _from_raw(raw: Any) -> tuple[Any, str | None, Any]:
    """(cached prompt tokens, finish reason, response id) of an OpenAI-shaped chat
    completion; None for what it does not hold (any other shape holds nothing)."""
    details = getattr(getattr(raw, "usage", None), "prompt_tokens_details", None)
    choices = getattr(raw, "choices", None)
    finish_reason = None
    if isinstance(choices, (list, tuple)) and choices:
        reason = getattr(choices[0], "finish_reason", None)
        finish_reason = reason if isinstance(reason, str) else None
    return getattr(details, "cached_tokens", None), finish_reason, getattr(raw, "id", None)
