"""The conversation vocabulary a saver call adds to the append it makes anyway (pure:
decided from the thread's `_Talk` and the call's arguments).

Turns are graph invocations, steps are super-steps, numbered as LangGraph numbers them
(the `step` of the checkpoint a super-step writes), and only the root namespace's calls
delimit them (a subgraph runs inside its parent's step):

| saver call | events |
|---|---|
| `put` of an `input` checkpoint (a new input) | `turn/start` (after `turn/end {reason: unknown}` if a turn was still open: a static interrupt, a dead process, an error LangGraph did not store), then `step/start` of the super-step that applies the input |
| `put` of a `loop` checkpoint (a super-step done) | `turn/start` if none is open (a resumed run), `step/start` if that step was not started, its new messages, `step/end`; then `step/start` of the next super-step, or `turn/end {reason: completed}` when nothing is left to run |
| `put_writes` with `__interrupt__` / `__error__` | `step/end`, `turn/end {reason: awaiting_input / error}` (in the checkpoint's `put` instead when they are stored before it: LangGraph stores a step's writes and its checkpoint concurrently) |
| `put_writes` of `Command(resume=…)` (`__resume__`) | `turn/start` if none is open |
| any other `put` (`update_state`, a subgraph's) | its new messages only |
| `durable_tool_node`, before a tool runs | `turn/start` if none is open, `tool/call` |

The `model/call` events of the LLM calls `ModelCallRecorder` saw (`_callbacks`) ride in
the same appends (`carries`): a root task's calls in its `put_writes` once the
checkpoint its step follows is stored, else in the `put` of its super-step's checkpoint;
any call still waiting in the batch that ends the turn. `with_calls` places them in the
step they ran in.

A message is written once, by its LangChain id, from the checkpoint whose channel value
first holds it (its new suffix): the user's input in the step that applies it (the
input checkpoint holds it before `add_messages` gives it an id).
"""

from __future__ import annotations

from collections import ChainMap
from typing import Any, Iterable

from langchain_core.messages import BaseMessage

from ._callbacks import Ended
from ._messages import message_events
from ._talk import _Talk


#: LangGraph's write channels and task id that delimit turns (`langgraph._internal._constants`).
INTERRUPT, ERROR, RESUME, START = "__interrupt__", "__error__", "__resume__", "__start__"
NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"
#: Channels whose update schedules a task: the start, an edge, a join, a `Send`.
_TRIGGER_PREFIXES = ("branch:to:", "join:")
_TRIGGERS = frozenset([START, "__pregel_tasks"])

Events = list[tuple[str, dict[str, Any]]]


def has_next(checkpoint: Any) -> bool | None:
    """Whether a checkpoint leaves tasks to run, from the channels its super-step updated
    (None: not said — a checkpoint of an older LangGraph — so the turn is not ended)."""
    updated = checkpoint.get("updated_channels")
    if updated is None:
        return None
    return any(channel in _TRIGGERS or channel.startswith(_TRIGGER_PREFIXES) for channel in updated)


def messages_events(talk: _Talk, messages: Iterable[BaseMessage]) -> Events:
    """The events of the messages not recorded yet (by id; a message without one is
    taken as new: it comes from a list's new suffix)."""
    events: Events = []
    seen: set[str] = set()
    requested: Any = None
    for message in messages:
        message_id = message.id
        if message_id is not None:
            if message_id in talk.messages or message_id in seen:
                continue
            seen.add(message_id)
        if requested is None:
            requested = ChainMap({}, talk.requested)
        made = message_events(message, requested, talk.calls, talk.results)
        for kind, data in made:
            if kind == "assistant/message":
                for call in data.get("tool_calls") or ():
                    requested.maps[0][call["call_id"]] = (call["name"], call["arguments"])
        events.extend(made)
    return events


def ended_by(writes: Any) -> str | None:
    """The reason a checkpoint's stored writes end its turn: an interrupt's or an
    error's (their negative indexes, `WRITES_IDX_MAP`), or None. LangGraph stores a
    step's writes and its checkpoint concurrently, so the writes may come first."""
    for _task, index in writes or ():
        if index == -3:
            return "awaiting_input"
        if index == -1:
            return "error"
    return None


def put_events(talk: _Talk, ns: str, checkpoint: Any, metadata: Any, messages: list[BaseMessage],
               plain: bool = False, ended: str | None = None) -> tuple[Events, Events]:
    """(before, after): the vocabulary a `put` adds before its `lg/*` events and after
    its `lg/checkpoint`. `messages`: the new items of its list channels; `plain`: leave
    the messages out (the batch would pass berth's limits with them); `ended`: the turn
    ends in the super-step after this checkpoint (`ended_by` its writes, stored first)."""
    source, step = metadata.get("source"), metadata.get("step")
    before: Events = []
    after: Events = []
    if ns != "" or source not in ("input", "loop") or type(step) is not int:
        if not plain:
            before.extend(messages_events(talk, messages))
        return before, after
    turn = talk.turn
    if source == "input":
        if turn is not None:
            if talk.step is not None:
                before.append(("step/end", {"turn": turn, "step": talk.step}))
            before.append(("turn/end", {"turn": turn, "reason": "unknown"}))
        turn = talk.next_turn
        before.append(("turn/start", {"turn": turn}))
        after.append(("step/start", {"turn": turn, "step": step + 1}))
        if ended is not None:
            after.append(("step/end", {"turn": turn, "step": step + 1}))
            after.append(("turn/end", {"turn": turn, "reason": ended}))
        return before, after
    open_step = talk.step
    if turn is None:
        turn, open_step = talk.next_turn, None
        before.append(("turn/start", {"turn": turn}))
    if open_step != step:
        if open_step is not None:
            before.append(("step/end", {"turn": turn, "step": open_step}))
        before.append(("step/start", {"turn": turn, "step": step}))
    if not plain:
        before.extend(messages_events(talk, messages))
    before.append(("step/end", {"turn": turn, "step": step}))
    if ended is not None:
        after.append(("step/start", {"turn": turn, "step": step + 1}))
        after.append(("step/end", {"turn": turn, "step": step + 1}))
        after.append(("turn/end", {"turn": turn, "reason": ended}))
    elif has_next(checkpoint) is False:
        after.append(("turn/end", {"turn": turn, "reason": "completed"}))
    else:
        after.append(("step/start", {"turn": turn, "step": step + 1}))
    return before, after


def writes_events(talk: _Talk, ns: str, task_id: str, channels: Iterable[str], stored: bool) -> Events:
    """What a `put_writes` adds after its `lg/writes`: the end of the turn at an
    interrupt or an error, the start of one at a `Command(resume=…)`. `stored`: the
    checkpoint the writes belong to is in the log (if not, its `put` ends the turn)."""
    if ns != "":
        return []
    channels = set(channels)
    if INTERRUPT in channels or ERROR in channels:
        if talk.turn is None or not stored:
            return []
        events: Events = []
        if talk.step is not None:
            events.append(("step/end", {"turn": talk.turn, "step": talk.step}))
        reason = "awaiting_input" if INTERRUPT in channels else "error"
        events.append(("turn/end", {"turn": talk.turn, "reason": reason}))
        return events
    if task_id == NULL_TASK_ID and RESUME in channels and talk.turn is None:
        return [("turn/start", {"turn": talk.next_turn})]
    return []


def carries(call: Ended, step: int | None = None, task: str | None = None) -> bool:
    """Whether a root-namespace batch carries a waiting model call: the `put` of the
    checkpoint of super-step `step` those of its step or before (and those LangGraph ran
    outside a task); the `put_writes` of `task` (its checkpoint stored) that task's;
    with neither, the batch ends the turn and carries every one."""
    if task is not None:
        return call.task == task
    if step is not None:
        return call.task is None or (call.step is not None and call.step <= step)
    return True


def ends_turn(events: Events) -> bool:
    return any(kind == "turn/end" for kind, _data in events)


def with_calls(events: Events, calls: list[tuple[str, Any]]) -> Events:
    """`events` with the `model/call` events `calls` in the step they ran in: before
    the first step or turn end among them, else after them."""
    if not calls:
        return events
    for index, (kind, _data) in enumerate(events):
        if kind in ("step/end", "turn/end"):
            return events[:index] + calls + events[index:]
    return events + calls


def tool_start_events(talk: _Talk, call: dict[str, Any]) -> Events:
    """`durable_tool_node`'s record before a tool runs (a turn started if none is open)."""
    events: Events = []
    if talk.turn is None:
        events.append(("turn/start", {"turn": talk.next_turn}))
    events.append(("tool/call", call))
    return events
