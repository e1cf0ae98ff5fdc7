"""Which events each moment of a smolagents run adds, and where turns and steps begin and
end: one `run()` is one turn, numbered from 0 in the session (the loader counts the
turns already there); each `ActionStep` is one step of it, numbered from 0 in its turn
(smolagents' `step_number` - 1). Pure: `BerthAgentLog` appends what these methods
return, one append per moment, as before:

- `begin`: the task (`run()` starts) — `turn/start`, `user/message`;
- `before_tool`: a durable tool is about to run (`_tools`) — the step's `step/start` and
  model message if not stored yet, then its `tool/call`: the only append the
  vocabulary adds, and only for tools the user made durable;
- `step_finished`: smolagents finalized an `ActionStep` — what is not stored yet of the
  step's start, message and calls, every call's `tool/result`, the final answer when
  the step gave it, `smol/step`, `step/end`, and then `turn/end` (the answer and its
  step in one append, where there were two);
- `planned`, `final`, `failed`, `abort`: a planning step, a final answer not given by a
  step, `run()` raising, a turn left open (a stream not run to its end).

What smolagents does between those moments (`_log`'s hook on `_step_stream`) is noted
with `step_begins`, `model_answered`, `model_failed`, `requested`, `observed` and
`answered`, without writing.

Each model call is a `model/call` (`_vocabulary.model_call`) in the append of the step it
belongs to, right after its `step/start` (before the model's message: the events its
response produced), so it costs no write: an `ActionStep`'s in `before_tool` or
`step_finished` (a call that raised, in the failed step's `step_finished`, with its
error), a `PlanningStep`'s in `planned`, before the plan. Its latency is the time from
the step's start to the model's answer (the first thing the step yields that is not a
stream delta, or the step raising) — an `ActionStep`'s `timing` spans its tools too;
a step smolagents runs without `_step_stream` (the max-steps answer) and a planning
step make one call each, which their `timing` spans.
"""

from __future__ import annotations

from typing import Any

from berth.integrations._model_calls import CallTimer
from smolagents.agent_types import handle_agent_output_types
from smolagents.memory import ActionStep, ToolCall
from smolagents.utils import AgentError, AgentMaxStepsError

from . import _vocabulary as vocab
from ._records import _jsonable, _step_data
from ._vocabulary import Call, Event


class Running:
    """The `ActionStep` smolagents is running, and its calls (requested ones by
    smolagents' id, calls made inside them by berth's)."""

    def __init__(self, memory_step: ActionStep) -> None:
        self.memory_step = memory_step
        self.number = max(0, memory_step.step_number - 1)
        self.calls: dict[str, Call] = {}
        #: Its `step/start` and model message are stored (by a pre-tool record).
        self.opened = False
        self.inner = 0
        #: `(output,)` when the step gave the final answer.
        self.answer: tuple[Any] | None = None
        #: From the step's start to its model call's end: that call's latency and end (ms).
        self.timer: CallTimer | None = None
        self.model_ms: float | None = None
        self.model_end_ms: int | None = None
        #: The error the model call raised, if it did.
        self.model_error: BaseException | None = None

    def requested(self) -> list[Call]:
        return [call for call in self.calls.values() if call.parent is None]

    def inner_of(self, parent: str) -> list[Call]:
        """The calls made inside `parent` (`""`: inside no requested call)."""
        return [call for call in self.calls.values() if call.parent == parent]

    def partial(self) -> dict[str, Any]:
        """The step as smolagents holds it now (its `smol/step` shape), with the calls it
        requested: what the loader rebuilds if the process dies before the step ends."""
        data = _step_data(self.memory_step)["step"]
        data["tool_calls"] = [ToolCall(name=call.name, arguments=call.arguments, id=call.id).dict()
                              for call in self.requested()]
        return _jsonable(data)  # type: ignore[no-any-return]


def _timed(step: Any) -> tuple[float | None, int | None]:
    """(latency, end) in ms of a step that is one model call, from its `timing`."""
    timing = getattr(step, "timing", None)
    start, end = getattr(timing, "start_time", None), getattr(timing, "end_time", None)
    if not isinstance(start, (int, float)) or not isinstance(end, (int, float)) or not start:
        return None, None
    return max(0.0, (end - start) * 1000.0), int(end * 1000)


def _reason(error: BaseException) -> str:
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
    if isinstance(error, AgentError) and str(error) == "Agent interrupted.":
        return "interrupted"
    return "error"


class Turns:
    """The turn and step being written, and what each moment adds."""

    def __init__(self, next_turn: int = 0, used: set[str] | None = None) -> None:
        self.next_turn = next_turn
        #: The call ids this log's run used.
        self.used: set[str] = set() if used is None else used
        #: The open turn's number.
        self.turn: int | None = None
        self.running: Running | None = None
        #: The open turn's final answer is stored.
        self.answered = False
        #: The agent's model (`run()` tells it): whose calls these are.
        self.model: Any = None

    # ----- state kept across a failed append ------------------------------------------
    def snapshot(self) -> Any:
        running = self.running
        calls = None if running is None else (running.opened, running.inner, dict(running.calls),
                                               {key: call.started for key, call in running.calls.items()})
        return self.next_turn, self.turn, self.answered, running, calls

    def restore(self, snapshot: Any) -> None:
        self.next_turn, self.turn, self.answered, self.running, calls = snapshot
        if self.running is not None and calls is not None:
            self.running.opened, self.running.inner, self.running.calls, started = calls
            for key, call in self.running.calls.items():
                call.started = started[key]

    # ----- moments that write -----------------------------------------------------------
    def begin(self, text: str, reset: bool, images_dropped: int, model: Any = None) -> list[Event]:
        events = self.abort()
        self.model = model
        self.turn, self.next_turn, self.answered = self.next_turn, self.next_turn + 1, False
        return [*events, vocab.turn_start(self.turn), vocab.task(text, reset=reset, images_dropped=images_dropped)]

    def before_tool(self, name: str, arguments: Any) -> tuple[Call, list[Event]]:
        """A durable tool `name` is about to run with `arguments`: which call it is (the
        step's requested call of that name not started yet, else a call made inside one,
        `<parent>.<n>`, as a `CodeAgent`'s code makes), and its pre-tool record."""
        running = self.running
        if running is None:
            raise RuntimeError("berth durable tool: called outside a step of the agent attached to its log")
        call = self._match(running, name, arguments)
        events: list[Event] = []
        if not running.opened:
            running.opened = True
            if self.turn is not None:
                events.append(vocab.step_start(self.turn, running.number))
            events.append(self._model_call(running, running.memory_step))
            message = vocab.model_message(running.memory_step.model_output, running.requested(), running.partial())
            assert message is not None
            events.append(message)
        if call is None:
            requested = running.requested()
            parent = requested[0] if requested else None
            if parent is not None and not parent.started:
                events.append(vocab.tool_call(parent))
                parent.started = True
            running.inner += 1
            prefix = parent.call_id if parent is not None else f"tool_{running.number}"
            call = self._call(running, f"{prefix}.{running.inner}", name, arguments,
                              parent=parent.call_id if parent is not None else "")
            running.calls[call.call_id] = call
        events.append(vocab.tool_call(call))
        call.started = True
        return call, events

    def step_finished(self, step: ActionStep) -> list[Event]:
        running = self.running if self.running is not None and self.running.memory_step is step else self._ended(step)
        self.running = None
        turn = self.turn
        calls = running.requested()
        lone_answer = (step.is_final_answer and not running.opened and len(calls) == 1
                       and calls[0].name == vocab.FINAL_ANSWER_TOOL)
        shown = [] if lone_answer else calls
        events: list[Event] = []
        if not running.opened:
            if turn is not None:
                events.append(vocab.step_start(turn, running.number))
            events.append(self._model_call(running, step))
            message = vocab.model_message(step.model_output, shown)
            if message is not None:
                events.append(message)
        for call in [*shown, None]:
            if call is not None and not call.started:
                events.append(vocab.tool_call(call))
            for inner in running.inner_of(call.call_id if call is not None else ""):
                events.append(vocab.tool_result(inner.call_id, *(inner.result or ("No result was recorded.", True))))
            if call is not None:
                events.append(vocab.tool_result(call.call_id, *self._result(call, step, len(shown))))
        if turn is None:
            return [*events, vocab.step_record(step)]
        reason = None
        if step.is_final_answer and running.answer is not None:
            output, reason = running.answer[0], "completed"
        elif isinstance(step.error, AgentMaxStepsError):
            output, reason = step.action_output, "max_steps"
        if reason is not None:
            # The step's answer ends the turn, in this append: smolagents' FinalAnswerStep
            # holds `handle_agent_output_types(answer)`, the same here.
            events.append(vocab.final_answer(handle_agent_output_types(output)))
        events += [vocab.step_record(step), vocab.step_end(turn, running.number)]
        if reason is not None:
            events.append(vocab.turn_end(turn, reason))
            self.turn, self.answered = None, True
        return events

    def seeded(self, task: str, steps: list[ActionStep], results: dict[str, tuple[str, bool]]) -> list[Event]:
        """A whole turn carried over from another session (`BerthAgentLog.continue_from`):
        the task, then each step's message, calls (with `results` by the call's id) and
        record, then the answer when a step gave one. No `model/call`: no model ran here."""
        events = self.begin(task, True, 0)
        turn = self.turn
        assert turn is not None
        reason = "completed"
        for step in steps:
            running = self._ended(step)
            calls = running.requested()
            events.append(vocab.step_start(turn, running.number))
            message = vocab.model_message(step.model_output, calls)
            if message is not None:
                events.append(message)
            for call in calls:
                events.append(vocab.tool_call(call))
                events.append(vocab.tool_result(call.call_id, *results.get(call.id or call.call_id, (
                    "No result was recorded for this call.", True))))
            if step.is_final_answer:
                events.append(vocab.final_answer(step.action_output))
            events += [vocab.step_record(step), vocab.step_end(turn, running.number)]
        if not any(step.is_final_answer for step in steps):
            reason = "aborted"  # the source's turn gave no answer (yet)
        events.append(vocab.turn_end(turn, reason))
        self.turn, self.answered = None, True
        return events

    def planned(self, step: Any) -> list[Event]:
        latency_ms, end_ms = _timed(step)
        return [vocab.model_call(self.model, step, latency_ms=latency_ms, time_ms=end_ms), vocab.plan(step),
                vocab.step_record(step)]

    def final(self, output: Any) -> list[Event]:
        """smolagents' `FinalAnswerStep`: nothing when its step already stored the answer."""
        if self.answered:
            return []
        events = [vocab.final_answer(output)]
        if self.turn is not None:
            events.append(vocab.turn_end(self.turn, "completed"))
        self.turn, self.answered = None, True
        return events

    def failed(self, error: BaseException) -> list[Event]:
        return self._close(_reason(error), error)

    def abort(self) -> list[Event]:
        return self._close("aborted", None)

    def _close(self, reason: str, error: BaseException | None) -> list[Event]:
        running, self.running = self.running, None
        if self.turn is None:
            return []
        events = []
        if running is not None and running.opened:
            events.append(vocab.step_end(self.turn, running.number))
        events.append(vocab.turn_end(self.turn, reason, error))
        self.turn = None
        return events

    # ----- what smolagents does between them (no write) -----------------------------------
    def step_begins(self, memory_step: ActionStep) -> None:
        self.running = Running(memory_step)
        self.running.timer = CallTimer()

    def model_answered(self) -> None:
        """The running step's model call ended (the step yields what its answer asked for)."""
        running = self.running
        if running is not None and running.timer is not None and running.model_ms is None:
            running.model_ms = running.timer.elapsed_ms()
            running.model_end_ms = running.timer.started_ms + round(running.model_ms)

    def model_failed(self, error: BaseException) -> None:
        """The running step raised `error`: its model call's, when the model had not
        answered (smolagents' `AgentGenerationError` says so; the model's own error is
        its cause)."""
        running = self.running
        if running is None or running.model_ms is not None:
            return
        self.model_answered()
        if running.memory_step.model_output_message is None:
            running.model_error = error.__cause__ if isinstance(error.__cause__, Exception) else error

    def requested(self, call: ToolCall) -> None:
        if self.running is not None and call.id not in self.running.calls:
            self.running.calls[call.id] = self._call(self.running, call.id, call.name, call.arguments)

    def observed(self, call_id: str, observation: str) -> None:
        """smolagents' observation of its call `call_id`."""
        if self.running is not None and call_id in self.running.calls:
            self.running.calls[call_id].result = (observation, False)

    def answered_with(self, output: Any) -> None:
        if self.running is not None:
            self.running.answer = (output,)

    def tool_ended(self, call: Call, content: str, is_error: bool) -> None:
        call.result = (content, is_error)

    # -----------------------------------------------------------------------------------------
    def _call(self, running: Running, call_id: str, name: str, arguments: Any, parent: str | None = None) -> Call:
        """A call, its id in berth's events made unique in the run (readers and berth's
        repair pair a run's calls by id)."""
        unique, again = call_id, 1
        while unique in self.used:
            unique = f"{call_id}@{self.turn if self.turn is not None else 0}.{running.number}"
            unique += f".{again}" if again > 1 else ""
            again += 1
        self.used.add(unique)
        return Call(unique, name, arguments, parent=parent, id=call_id if parent is None else "")

    def _model_call(self, running: Running, step: ActionStep) -> Event:
        latency_ms, end_ms = running.model_ms, running.model_end_ms
        if latency_ms is None:  # not run through `_step_stream`: the step is the one call
            latency_ms, end_ms = _timed(step)
        return vocab.model_call(self.model, step, latency_ms=latency_ms, time_ms=end_ms, error=running.model_error)

    def _ended(self, step: ActionStep) -> Running:
        """A step seen only when it ended (e.g. smolagents' max-steps step): its calls from
        the step, or from the model's message when the step failed before running them."""
        running = Running(step)
        found = [(call.id, call.name, call.arguments) for call in step.tool_calls or []]
        message = step.model_output_message
        if not found and message is not None:
            found = [(call.id, call.function.name, call.function.arguments) for call in message.tool_calls or []]
        for call_id, name, arguments in found:
            if call_id not in running.calls:
                running.calls[call_id] = self._call(running, call_id, name, arguments)
        return running

    @staticmethod
    def _match(running: Running, name: str, arguments: Any) -> Call | None:
        candidates = [call for call in running.requested() if call.name == name and not call.started]
        wanted = _jsonable(arguments)
        for call in candidates:
            if _jsonable(call.arguments) == wanted:
                return call
        return candidates[0] if candidates else None

    @staticmethod
    def _result(call: Call, step: ActionStep, calls: int) -> tuple[str, bool]:
        """A requested call's result: its own observation (a `ToolCallingAgent` call), else
        the step's — its error, or its observations when it made only this call."""
        if call.result is not None:
            return call.result
        if step.error is not None:
            return vocab.error_text(step.observations if calls == 1 else None, step.error), True
        if step.observations is not None and calls == 1:
            return step.observations, False
        return "No result was recorded for this call.", True
