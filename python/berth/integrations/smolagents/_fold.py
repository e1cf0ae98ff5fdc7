"""The loader: a session's events folded back into `agent.memory.steps`.

Reads every layout the package has written: the task (`user/message` with
`smolagents`) and `smol/step` records restore the memory exactly as they always did
(`_records`); the conversation vocabulary beside them is skipped, except a step's
pre-tool record that no `smol/step` followed — the step a crash interrupted, rebuilt
once berth's repair closed it (`_repair`). Also counts the turns, so the next `run()`
is numbered after them.
"""

from __future__ import annotations

from typing import Any, Iterable

from smolagents.memory import ActionStep, PlanningStep, TaskStep

from ._records import STEP_TYPE, TASK_TYPE, action, planning
from ._repair import OpenStep


class Fold:
    """Events in, in log order (`feed`); `steps` and `next_turn` out."""

    def __init__(self) -> None:
        self.steps: list[TaskStep | ActionStep | PlanningStep] = []
        #: The number the next turn takes: one more than the last `turn/start`'s.
        self.next_turn = 0
        self._open: OpenStep | None = None

    def feed(self, event: Any) -> None:
        data = event.data if isinstance(event.data, dict) else {}
        kind = event.type
        if kind == TASK_TYPE and "smolagents" in data:
            self._open = None
            if data["smolagents"].get("reset"):
                self.steps = []
            self.steps.append(TaskStep(task=data["content"]))
        elif kind == STEP_TYPE:
            self._open = None
            self.steps.append(action(data["step"]) if data.get("kind") == "action" else planning(data["step"]))
        elif kind == "assistant/message":
            calls = data.get("tool_calls")
            requested: list[Any] = calls if isinstance(calls, list) else []
            extra = data.get("smolagents")
            if isinstance(extra, dict) and isinstance(extra.get("step"), dict):
                self._open = OpenStep(extra["step"], requested)
        elif kind in ("tool/call", "tool/result"):
            if self._open is not None:
                self._open.feed(kind, data)
        elif kind in ("step/end", "turn/end"):
            if self._open is not None:
                self.steps.append(self._open.step(event.time))
                self._open = None
        elif kind == "turn/start":
            self._open = None
            turn = data.get("turn")
            if isinstance(turn, int):
                self.next_turn = max(self.next_turn, turn + 1)


def fold(events: Iterable[Any]) -> Fold:
    folded = Fold()
    for event in events:
        folded.feed(event)
    return folded


def steps_from_events(events: Iterable[Any]) -> list[TaskStep | ActionStep | PlanningStep]:
    """Folds a session's events into `agent.memory.steps`: a task with `reset` starts
    the list over, as `run(reset=True)` does."""
    return fold(events).steps
