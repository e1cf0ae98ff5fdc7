"""Turns and steps: berth's vocabulary around the SDK's items (`_Turns`, one per binding).

A turn is one `Runner.run`, from the user's input to the final output; a step is one model
response with the tool calls it asked for and their outputs (the SDK saves each as one
`add_items`). The markers ride in the appends the session makes anyway, never in one of
their own:

- the batch that opens a turn (a run's first `add_items`: its input) starts with
  `turn/start {turn}`;
- every later batch of the turn is a step: `step/start {turn, step}`, its items,
  `step/end`. Under `run_hooks()` a step whose tools run opens with the first tool's
  pre-tool record instead (the one write the drop-in adds), so a crash mid-tool leaves
  the turn and the step open for berth's repair;
- `turn/end {turn, reason}` follows the items of the batch that ends the turn.

Where a turn ends:

- with `run_hooks()`, exactly: `on_agent_end` (the run produced its final output) makes
  the next batch, the final output's, end it `completed`;
- without, inferred from the items: a batch whose last item is an assistant message and
  that leaves no function call unanswered ends it `completed`;
- either way, a batch leaving a function call without its output (a tool awaiting the
  user's approval) ends it `awaiting_input`, so berth's repair never answers a call the
  SDK will still run; a user message after the turn's steps (a new run's input) closes
  the turn first (`aborted` under hooks: that run stopped without a final output;
  `unknown` without them); a clear ends it `cleared`.

Model calls (`model/call`, from `on_llm_end` under `run_hooks()`) wait here for the
next append the session makes and ride in it, never in one of their own: in a step's
batch or a pre-tool record right after the step's `step/start`, so a call comes before
the events its response produced, inside the turn (a batch that first closes the turn
carries them before that turn's end).

Turns are numbered per object from the newest turn its reads met (so a session's turns
go 0, 1, 2 across processes); steps from 0 in each turn. A `function_call` item whose
call was recorded before its tool ran is stored as an ignorable `openai/item`: one
`tool/call` per call id for every reader; one whose output is not in its batch is the
model's request (`assistant/message {tool_calls}`), its tool not started.
"""

from __future__ import annotations

import threading
from typing import Any

from ._records import ITEM_TYPE

TURN_START = "turn/start"
TURN_END = "turn/end"
STEP_START = "step/start"
STEP_END = "step/end"

#: berth's limit on the events of one append: a batch of items leaves its markers out
#: rather than go over it (an `add_items` of 1,000 items stays one atomic append).
BATCH_EVENTS_MAX = 1000

_Event = dict[str, Any]
#: Model calls waiting for an append at most: beyond, the oldest are dropped (a run whose
#: responses no append follows, e.g. one whose items are not saved, must not grow them).
MODEL_CALLS_PENDING_MAX = 64

#: A plan's undo: the state before it and the version after it (`_Turns.rollback`).
_Token = tuple[tuple[Any, ...], int]


class _Turns:
    """Where one binding's turn and step are: what the next append must carry."""

    __slots__ = ("lock", "write_lock", "next_turn", "turn", "step", "steps", "stepped", "exact", "ending",
                 "agent", "started", "calls", "version")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: Held through a pre-tool record's append, so parallel tools' records land in order.
        self.write_lock = threading.Lock()
        self.next_turn = 0
        self.turn: int | None = None  # the open turn
        self.step: int | None = None  # the open step
        self.steps = 0  # the next step's number in the open turn
        self.stepped = False  # the open turn has had a step (model output)
        self.exact = False  # run hooks saw this turn's run start: its end is `on_agent_end`'s
        self.ending = False  # `on_agent_end` came: the next batch ends the turn
        self.agent: str | None = None  # the agent running, from run hooks
        self.started: set[str] = set()  # call ids recorded before their tools ran, this step
        self.calls: list[_Event] = []  # `model/call` events the next append carries
        self.version = 0

    # -- what the hooks and reads tell ----------------------------------------------

    def agent_started(self, name: str | None) -> None:
        with self.lock:
            self.exact = True
            if isinstance(name, str):
                self.agent = name

    def agent_ended(self) -> None:
        with self.lock:
            if self.turn is not None:
                self.ending = True

    def model_called(self, event: _Event) -> None:
        """A model call ended (`on_llm_end`): its `model/call` rides in the next append."""
        with self.lock:
            self.calls.append(event)
            del self.calls[:-MODEL_CALLS_PENDING_MAX]

    def saw(self, number: Any) -> None:
        """A read met turn `number` (the newest it met): this object's next turn follows it."""
        if type(number) is int and number >= 0:
            with self.lock:
                if self.turn is None and number >= self.next_turn:
                    self.next_turn = number + 1

    # -- plans: the markers an append carries, the state moved on before it is sent --

    def plan_items(
        self, items: list[Any], events: list[_Event], room: int | None = None
    ) -> tuple[list[_Event], list[_Event], _Token]:
        """The markers before and after `events` (the items' events, changed in place where
        a call's record supersedes its item), and the plan's undo token. Markers that would
        take the batch past `room` more events (berth's limit less the items, by default)
        are left out, and the turns stay as they were."""
        if room is None:
            room = BATCH_EVENTS_MAX - len(events)
        has_user = False
        calls: list[tuple[int, str]] = []
        answered: set[str] = set()
        for index, event in enumerate(events):
            kind = event["type"]
            if kind == "user/message":
                has_user = True
            elif kind == "tool/call":
                calls.append((index, event["data"]["call_id"]))
            elif kind == "tool/result":
                answered.add(event["data"]["call_id"])
        answer_last = bool(events) and events[-1]["type"] == "assistant/message"
        with self.lock:
            before = self._state()
            prefix: list[_Event] = []
            suffix: list[_Event] = []
            if self.turn is not None and has_user and self.stepped:
                prefix += self._take_calls()  # the closing turn's: before its end
                prefix += self._close("completed" if self.ending else "aborted" if self.exact else "unknown")
            # The turn's input: the batch that opens it, or a user message before its first
            # step (inputs saved in several batches); anything else is a step.
            opening = self.turn is None
            if opening:
                prefix.append(self._open())
            elif has_user and not self.stepped:
                opening = True
            else:
                if self.step is None:
                    prefix.append(self._open_step())
                self.stepped = True
            prefix += self._take_calls()  # before the items the responses produced
            unanswered = False
            for index, call_id in calls:
                if call_id in self.started:
                    events[index] = _superseded(items[index])
                elif call_id not in answered:
                    unanswered = True
                    events[index] = _requested(items[index], events[index]["data"])
            if not opening:
                suffix.append(self._close_step())
            if self.ending:
                suffix += self._close("completed")
            elif unanswered:
                suffix += self._close("awaiting_input")
            elif answer_last and not self.exact:
                suffix += self._close("completed")
            if len(prefix) + len(suffix) > room:
                self._restore(before)
                return [], [], self._done(before)
            return prefix, suffix, self._done(before)

    def plan_tool_start(self, call_id: str, name: str, arguments: Any) -> tuple[list[_Event], _Token]:
        """The pre-tool record: `tool/call {…, in_flight}`, after the markers that open the
        turn and the step if they are not open yet."""
        with self.lock:
            before = self._state()
            events: list[_Event] = []
            if self.turn is None:
                events.append(self._open())
            if self.step is None:
                events.append(self._open_step())
                self.stepped = True
            events += self._take_calls()  # the response that asked for the tool
            self.started.add(call_id)
            events.append(
                {"type": "tool/call", "data": {"call_id": call_id, "name": name, "arguments": arguments, "in_flight": True}}
            )
            return events, self._done(before)

    def plan_clear(self) -> tuple[list[_Event], _Token]:
        """What a clear's marker follows: the open turn's model calls and end (`cleared`).
        With no turn open, waiting calls wait on (outside a turn they would read as one
        left open)."""
        with self.lock:
            before = self._state()
            events = [*self._take_calls(), *self._close("cleared")] if self.turn is not None else []
            return events, self._done(before)

    def rollback(self, token: _Token) -> None:
        """Undoes a plan whose append failed, unless another plan came after it."""
        before, version = token
        with self.lock:
            if self.version == version:
                self._restore(before)

    # -- internals (under the lock) -------------------------------------------------

    def _state(self) -> tuple[Any, ...]:
        return (self.next_turn, self.turn, self.step, self.steps, self.stepped, self.exact, self.ending,
                self.agent, tuple(self.started), tuple(self.calls))

    def _restore(self, state: tuple[Any, ...]) -> None:
        (self.next_turn, self.turn, self.step, self.steps, self.stepped, self.exact, self.ending, self.agent,
         started, calls) = state
        self.started = set(started)
        self.calls = list(calls)

    def _done(self, before: tuple[Any, ...]) -> _Token:
        self.version += 1
        return before, self.version

    def _take_calls(self) -> list[_Event]:
        calls, self.calls = self.calls, []
        return calls

    def _open(self) -> _Event:
        self.turn = self.next_turn
        self.next_turn += 1
        self.step, self.steps, self.stepped, self.ending = None, 0, False, False
        self.started.clear()
        return {"type": TURN_START, "data": {"turn": self.turn}}

    def _open_step(self) -> _Event:
        self.step = self.steps
        self.steps += 1
        data: dict[str, Any] = {"turn": self.turn, "step": self.step}
        if self.agent is not None:
            data["agent"] = self.agent
        return {"type": STEP_START, "data": data}

    def _close_step(self) -> _Event:
        event = {"type": STEP_END, "data": {"turn": self.turn, "step": self.step}}
        self.step = None
        self.started.clear()
        return event

    def _close(self, reason: str) -> list[_Event]:
        events = [self._close_step()] if self.step is not None else []
        events.append({"type": TURN_END, "data": {"turn": self.turn, "reason": reason}})
        self.turn, self.step, self.steps, self.stepped, self.exact, self.ending = None, None, 0, False, False, False
        self.agent = None
        self.started.clear()
        return events


def _superseded(item: Any) -> _Event:
    """A `function_call` item whose call a pre-tool record already shows as berth's
    `tool/call`: kept verbatim, ignorable, so readers see one call."""
    return {"type": ITEM_TYPE, "data": {"item": item}, "ignorable": True}


def _requested(item: Any, data: dict[str, Any]) -> _Event:
    """A `function_call` item with no output in its batch (its tool awaits the user's
    approval, or never ran): the model's request, `assistant/message {tool_calls}`, not a
    `tool/call` (the tool has not started; when it does, its record is the call)."""
    call = {"call_id": data["call_id"], "name": data["name"], "arguments": data["arguments"]}
    return {"type": "assistant/message", "data": {"content": "", "tool_calls": [call], "item": item}}
