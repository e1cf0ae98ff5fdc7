"""Turns and steps of an ADK session (pure; table-tested in
scripts/dropins/adk/test_adk_mapping.py), written in the appends of the events they
bound (never an append of their own):

- **a turn is one invocation** (`invocation_id`): `turn/start {turn, invocation_id}`
  before its first event, `turn/end {turn, reason}` with its final response (an agent's
  event `is_final_response()`; `reason` is `aborted` for ADK's abort event, `error` for an
  event with an `error_code`, else `completed`). Turns are numbered 0, 1, 2… per session
  in the order invocations start: the next number is kept in the session's index item,
  rewritten by every append anyway (`turns`), with the latest turn's invocation, number
  and steps (`turn`: `stored`), so another service object goes on from them
  (`restored`). A turn still open when the next invocation starts is ended (`completed`)
  in that invocation's first append. When an invocation goes on after a final response
  (a second agent of a `SequentialAgent`, or an invocation resumed after a long-running
  call, in this process or another) its turn starts again under the same number, its
  steps numbered on;
- **a step is one model call**: an agent's event whose content the model wrote (role
  `model`, no function response) starts `step/start {turn, step}` (0, 1, 2… per turn),
  and the tool results that follow are in it; `step/end` comes with the next step's
  first event or with the turn's end.

A crash leaves the turn (and step) open with the call pending: berth's repair closes
them on the next `resume`.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from google.adk.events.event import Event

_ABORTED = "INVOCATION_ABORTED"


class TurnState(NamedTuple):
    """Where a service object's run is in a session's turns: the latest invocation it
    wrote and that invocation's turn number, whether that turn is open, the open step
    (None: none) and how many steps the turn has had."""

    invocation: str | None = None
    turn: int | None = None
    open: bool = False
    step: int | None = None
    steps: int = 0


def stored(state: TurnState) -> dict[str, Any] | None:
    """What the session's index item keeps of the latest turn (`turn`), if any."""
    if state.invocation is None or state.turn is None:
        return None
    return {"invocation_id": state.invocation, "turn": state.turn, "steps": state.steps}


def restored(value: Any) -> TurnState | None:
    """The latest turn as an index item kept it (`stored`), closed: where a service
    object that has not written the session yet starts from (None: not kept)."""
    if not isinstance(value, dict):
        return None
    invocation, turn, steps = value.get("invocation_id"), value.get("turn"), value.get("steps")
    if not isinstance(invocation, str) or not isinstance(turn, int) or not isinstance(steps, int):
        return None
    return TurnState(invocation, turn, False, None, steps)


def needs_number(state: TurnState, event: Event) -> bool:
    """Does `event` start an invocation's turn, which takes the session's next number?"""
    return bool(event.invocation_id) and event.invocation_id != state.invocation


def _marker(kind: str, time_ms: int, **data: Any) -> dict[str, Any]:
    return {"type": kind, "data": data, "time": time_ms}


def starts_step(event: Event, adk: dict[str, Any]) -> bool:
    """Is `event` a model call's answer (an agent's content in the model's role, with no
    function response)?"""
    if event.author == "user":
        return False
    content = adk.get("content")
    if not content or content.get("role") != "model" or not content.get("parts"):
        return False
    return not any("function_response" in part for part in content["parts"])


def end_reason(event: Event) -> str | None:
    """How `event` ends its turn, if it does: an agent's final response, or ADK's
    abort event."""
    if event.author == "user":
        return None
    if event.error_code == _ABORTED:
        return "aborted"
    if not event.is_final_response():
        return None
    return "error" if event.error_code else "completed"


def markers(state: TurnState, event: Event, adk: dict[str, Any], time_ms: int,
            number: Callable[[], int]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], TurnState]:
    """The turn and step markers that go before and after `event`'s own berth events in
    its append, and the state after it. `number()` gives the session's next turn number
    (called only when the event starts an invocation's turn: `needs_number`)."""
    invocation, turn, is_open, step, steps = state
    before: list[dict[str, Any]] = []
    after: list[dict[str, Any]] = []
    if needs_number(state, event):
        if step is not None:
            before.append(_marker("step/end", time_ms, turn=turn, step=step))
        if is_open:
            before.append(_marker("turn/end", time_ms, turn=turn, reason="completed"))
        invocation, turn, is_open, step, steps = event.invocation_id, number(), True, None, 0
        before.append(_marker("turn/start", time_ms, turn=turn, invocation_id=invocation))
    elif event.invocation_id and not is_open:
        # The invocation goes on after its final response: its turn again, same number.
        is_open = True
        before.append(_marker("turn/start", time_ms, turn=turn, invocation_id=invocation))
    if not is_open:
        return before, after, TurnState(invocation, turn, is_open, step, steps)
    if starts_step(event, adk):
        if step is not None:
            before.append(_marker("step/end", time_ms, turn=turn, step=step))
        step, steps = steps, steps + 1
        before.append(_marker("step/start", time_ms, turn=turn, step=step))
    reason = end_reason(event)
    if reason is not None:
        if step is not None:
            after.append(_marker("step/end", time_ms, turn=turn, step=step))
            step = None
        after.append(_marker("turn/end", time_ms, turn=turn, reason=reason))
        is_open = False
    return before, after, TurnState(invocation, turn, is_open, step, steps)
