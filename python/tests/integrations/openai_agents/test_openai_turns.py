"""The mapping, table-driven from what openai-agents 0.24.0 really calls (recorded by
scripts/dropins/openai/fixtures/record_sdk_calls.py: a `Runner` with the SDK's scripted
model on a recording session, with and without run hooks, streamed or not): each call
sequence replayed through `event_for_item` and the turn planner (`_turns`) gives the log
shown, with no store in between. Under run hooks each model call (`on_llm_end`) is a
`model/call`, shown with its model (the replay names it after the agent). Items are the
recorded dicts (`MESSAGE`, `CALL`, `OUTPUT` rebuild them exactly)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from berth.integrations._model_calls import model_call_event
from berth.integrations.openai_agents import ITEM_MARK, event_for_item
from berth.integrations.openai_agents._turns import MODEL_CALLS_PENDING_MAX, _Turns


def MESSAGE(text: str) -> dict[str, Any]:
    """The scripted model's assistant message, as the SDK saves it."""
    return {"id": "scripted-message", "content": [{"annotations": [], "text": text, "type": "output_text",
                                                    "logprobs": []}],
            "role": "assistant", "status": "completed", "type": "message"}


def CALL(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"arguments": arguments, "call_id": call_id, "name": name, "type": "function_call", "id": call_id}


def OUTPUT(call_id: str, output: str) -> dict[str, Any]:
    return {"call_id": call_id, "output": output, "type": "function_call_output"}


def USER(text: str) -> dict[str, Any]:
    return {"content": text, "role": "user"}


ADD_22, ADD_11 = '{"a":2,"b":2}', '{"a":1,"b":1}'
STEP_WITH_TOOLS = ["add_items", [MESSAGE("Let me add."), CALL("c1", "add", ADD_22), CALL("c2", "add", ADD_11),
                                 OUTPUT("c1", "4"), OUTPUT("c2", "2")]]
HANDOFF = ["add_items", [CALL("h1", "transfer_to_helper", "{}"), OUTPUT("h1", '{"assistant": "helper"}')]]


def LLM(agent: str) -> list[Any]:
    """One model call of `agent`'s, as the run hooks see it."""
    return [["on_llm_start", agent], ["on_llm_end", agent]]


#: (scenario, recorded calls, the log: one entry per event).
SCENARIOS: list[tuple[str, list[Any], str]] = [
    ("a tool step then the answer, then a plain run; no hooks (streamed: the same calls)", [
        ["add_items", [USER("add")]], STEP_WITH_TOOLS, ["add_items", [MESSAGE("4 and 2")]],
        ["add_items", [USER("thanks")]], ["add_items", [MESSAGE("bye")]],
    ], "turn/start 0 | user/message | step/start 0.0 | assistant/message | tool/call c1 | tool/call c2 "
       "| tool/result c1 | tool/result c2 | step/end 0.0 | step/start 0.1 | assistant/message | step/end 0.1 "
       "| turn/end 0 completed | turn/start 1 | user/message | step/start 1.0 | assistant/message | step/end 1.0 "
       "| turn/end 1 completed"),
    ("the same with run hooks", [
        ["add_items", [USER("add")]], ["on_agent_start", "calc"], *LLM("calc"), ["on_tool_start", "c1", "add", ADD_22],
        ["on_tool_start", "c2", "add", ADD_11], STEP_WITH_TOOLS, *LLM("calc"), ["on_agent_end", "calc"],
        ["add_items", [MESSAGE("4 and 2")]], ["add_items", [USER("thanks")]], ["on_agent_start", "calc"],
        *LLM("calc"), ["on_agent_end", "calc"], ["add_items", [MESSAGE("bye")]],
    ], "turn/start 0 | user/message | step/start 0.0 calc | model/call calc | tool/call c1 in_flight "
       "| tool/call c2 in_flight | assistant/message | openai/item c1 | openai/item c2 | tool/result c1 "
       "| tool/result c2 | step/end 0.0 | step/start 0.1 calc | model/call calc | assistant/message | step/end 0.1 "
       "| turn/end 0 completed | turn/start 1 | user/message | step/start 1.0 calc | model/call calc "
       "| assistant/message | step/end 1.0 | turn/end 1 completed"),
    ("the same with run hooks, streamed (the agent starts before the input is saved)", [
        ["on_agent_start", "calc"], ["on_llm_start", "calc"], ["add_items", [USER("add")]], ["on_llm_end", "calc"],
        ["on_tool_start", "c1", "add", ADD_22], ["on_tool_start", "c2", "add", ADD_11], STEP_WITH_TOOLS,
        *LLM("calc"), ["on_agent_end", "calc"], ["add_items", [MESSAGE("4 and 2")]], ["on_agent_start", "calc"],
        ["on_llm_start", "calc"], ["add_items", [USER("thanks")]], ["on_llm_end", "calc"], ["on_agent_end", "calc"],
        ["add_items", [MESSAGE("bye")]],
    ], "turn/start 0 | user/message | step/start 0.0 calc | model/call calc | tool/call c1 in_flight "
       "| tool/call c2 in_flight | assistant/message | openai/item c1 | openai/item c2 | tool/result c1 "
       "| tool/result c2 | step/end 0.0 | step/start 0.1 calc | model/call calc | assistant/message | step/end 0.1 "
       "| turn/end 0 completed | turn/start 1 | user/message | step/start 1.0 calc | model/call calc "
       "| assistant/message | step/end 1.0 | turn/end 1 completed"),
    ("a handoff, then the helper's tool and answer; no hooks", [
        ["add_items", [USER("add")]], HANDOFF, ["add_items", [CALL("c1", "add", ADD_22), OUTPUT("c1", "4")]],
        ["add_items", [MESSAGE("4")]],
    ], "turn/start 0 | user/message | step/start 0.0 | tool/call h1 | tool/result h1 | step/end 0.0 "
       "| step/start 0.1 | tool/call c1 | tool/result c1 | step/end 0.1 | step/start 0.2 | assistant/message "
       "| step/end 0.2 | turn/end 0 completed"),
    ("the handoff with run hooks: each step names its agent", [
        ["add_items", [USER("add")]], ["on_agent_start", "triage"], *LLM("triage"), HANDOFF,
        ["on_agent_start", "helper"], *LLM("helper"), ["on_tool_start", "c1", "add", ADD_22],
        ["add_items", [CALL("c1", "add", ADD_22), OUTPUT("c1", "4")]], *LLM("helper"), ["on_agent_end", "helper"],
        ["add_items", [MESSAGE("4")]],
    ], "turn/start 0 | user/message | step/start 0.0 triage | model/call triage | tool/call h1 | tool/result h1 "
       "| step/end 0.0 | step/start 0.1 helper | model/call helper | tool/call c1 in_flight | openai/item c1 "
       "| tool/result c1 | step/end 0.1 | step/start 0.2 helper | model/call helper | assistant/message "
       "| step/end 0.2 | turn/end 0 completed"),
    ("a tool awaiting approval, then the run resumed from its state; no hooks", [
        ["add_items", [USER("pay 5")]], ["add_items", [CALL("p1", "pay", '{"amount":5}')]],
        ["add_items", [OUTPUT("p1", "paid")]], ["add_items", [MESSAGE("paid")]],
    ], "turn/start 0 | user/message | step/start 0.0 | assistant/message p1? | step/end 0.0 "
       "| turn/end 0 awaiting_input | turn/start 1 | tool/result p1 | step/start 1.0 | assistant/message "
       "| step/end 1.0 | turn/end 1 completed"),
    ("the approval with run hooks: the approved tool's start (before the resumed run's agent starts) is its "
     "one tool/call", [
        ["add_items", [USER("pay 5")]], ["on_agent_start", "shop"], *LLM("shop"),
        ["add_items", [CALL("p1", "pay", '{"amount":5}')]], ["on_tool_start", "p1", "pay", '{"amount":5}'],
        ["add_items", [OUTPUT("p1", "paid")]], ["on_agent_start", "shop"], *LLM("shop"), ["on_agent_end", "shop"],
        ["add_items", [MESSAGE("paid")]],
    ], "turn/start 0 | user/message | step/start 0.0 shop | model/call shop | assistant/message p1? "
       "| step/end 0.0 | turn/end 0 awaiting_input | turn/start 1 | step/start 1.0 | tool/call p1 in_flight "
       "| tool/result p1 | step/end 1.0 | step/start 1.1 shop | model/call shop | assistant/message | step/end 1.1 "
       "| turn/end 1 completed"),
    ("stop_on_first_tool without hooks: inference cannot see the end, the next input closes it", [
        ["add_items", [USER("add")]], ["add_items", [CALL("c1", "add", ADD_22), OUTPUT("c1", "4")]],
        ["add_items", [USER("thanks")]], ["add_items", [MESSAGE("bye")]],
    ], "turn/start 0 | user/message | step/start 0.0 | tool/call c1 | tool/result c1 | step/end 0.0 "
       "| turn/end 0 unknown | turn/start 1 | user/message | step/start 1.0 | assistant/message | step/end 1.0 "
       "| turn/end 1 completed"),
    ("stop_on_first_tool with run hooks: on_agent_end comes before the tool step is saved", [
        ["add_items", [USER("add")]], ["on_agent_start", "calc"], *LLM("calc"), ["on_tool_start", "c1", "add", ADD_22],
        ["on_agent_end", "calc"], ["add_items", [CALL("c1", "add", ADD_22), OUTPUT("c1", "4")]],
        ["add_items", [USER("thanks")]], ["on_agent_start", "calc"], *LLM("calc"), ["on_agent_end", "calc"],
        ["add_items", [MESSAGE("bye")]],
    ], "turn/start 0 | user/message | step/start 0.0 calc | model/call calc | tool/call c1 in_flight "
       "| openai/item c1 | tool/result c1 | step/end 0.0 | turn/end 0 completed | turn/start 1 | user/message "
       "| step/start 1.0 calc | model/call calc | assistant/message | step/end 1.0 | turn/end 1 completed"),
    ("MaxTurnsExceeded with run hooks: the run raised, the next input closes its turn aborted", [
        ["add_items", [USER("add")]], ["on_agent_start", "calc"], *LLM("calc"), ["on_tool_start", "c1", "add", ADD_22],
        ["add_items", [CALL("c1", "add", ADD_22), OUTPUT("c1", "4")]], ["raised", "MaxTurnsExceeded"],
        ["add_items", [USER("again")]], ["on_agent_start", "calc"], *LLM("calc"), ["on_agent_end", "calc"],
        ["add_items", [MESSAGE("sorry")]],
    ], "turn/start 0 | user/message | step/start 0.0 calc | model/call calc | tool/call c1 in_flight "
       "| openai/item c1 | tool/result c1 | step/end 0.0 | turn/end 0 aborted | turn/start 1 | user/message "
       "| step/start 1.0 calc | model/call calc | assistant/message | step/end 1.0 | turn/end 1 completed"),
    ("a response no batch followed (the run raised after it, e.g. an output guardrail): its call rides in the "
     "next run's input, before the turn's end", [
        ["add_items", [USER("add")]], ["on_agent_start", "calc"], *LLM("calc"), ["on_tool_start", "c1", "add", ADD_22],
        ["add_items", [CALL("c1", "add", ADD_22), OUTPUT("c1", "4")]], *LLM("calc"),
        ["raised", "OutputGuardrailTripwireTriggered"], ["add_items", [USER("again")]], ["on_agent_start", "calc"],
        *LLM("calc"), ["on_agent_end", "calc"], ["add_items", [MESSAGE("sorry")]],
    ], "turn/start 0 | user/message | step/start 0.0 calc | model/call calc | tool/call c1 in_flight "
       "| openai/item c1 | tool/result c1 | step/end 0.0 | model/call calc | turn/end 0 aborted | turn/start 1 "
       "| user/message | step/start 1.0 calc | model/call calc | assistant/message | step/end 1.0 "
       "| turn/end 1 completed"),
    ("items added by the application itself: each exchange a turn", [
        ["add_items", [USER("hi"), {"role": "assistant", "content": "hello"}]],
        ["add_items", [USER("more")]], ["add_items", [USER("still more")]],
        ["add_items", [{"role": "assistant", "content": "ok"}]],
    ], "turn/start 0 | user/message | assistant/message | turn/end 0 completed | turn/start 1 | user/message "
       "| user/message | step/start 1.0 | assistant/message | step/end 1.0 | turn/end 1 completed"),
]


def replay(calls: list[Any]) -> list[dict[str, Any]]:
    """The events `BerthSession` appends for `calls`, in order (no store: its plans)."""
    turns, log = _Turns(), []
    for call in calls:
        if call[0] == "add_items":
            items = json.loads(json.dumps(call[1]))  # the session's own copy
            events = [event_for_item(item) for item in items]
            before, after, _ = turns.plan_items(items, events)
            log += [*before, *events, *after]
        elif call[0] == "on_agent_start":
            turns.agent_started(call[1])
        elif call[0] == "on_agent_end":
            turns.agent_ended()
        elif call[0] == "on_tool_start":
            events, _ = turns.plan_tool_start(*call[1:])
            log += events
        elif call[0] == "on_llm_end":
            turns.model_called(model_call_event(model=call[1], input_tokens=10, output_tokens=2, latency_ms=1.0))
    return log


def shown(event: dict[str, Any]) -> str:
    kind, data = event["type"], event["data"]
    if kind == "turn/start":
        return f"turn/start {data['turn']}"
    if kind == "turn/end":
        return f"turn/end {data['turn']} {data['reason']}"
    if kind == "step/start":
        return f"step/start {data['turn']}.{data['step']}" + (f" {data['agent']}" if "agent" in data else "")
    if kind == "step/end":
        return f"step/end {data['turn']}.{data['step']}"
    if kind == "tool/call":
        return f"tool/call {data['call_id']}" + (" in_flight" if data.get("in_flight") else "")
    if kind == "tool/result":
        return f"tool/result {data['call_id']}"
    if kind == "model/call":
        return f"model/call {data['model']}"
    if kind == "openai/item":
        return f"openai/item {data['item'].get('call_id')}"
    if kind == "assistant/message" and data.get("tool_calls"):
        return f"assistant/message {data['tool_calls'][0]['call_id']}?"
    return kind


@pytest.mark.parametrize("calls,log", [(calls, log) for _, calls, log in SCENARIOS],
                         ids=[name for name, _, _ in SCENARIOS])
def test_recorded_sdk_calls_make_this_log(calls: list[Any], log: str) -> None:
    events = replay(calls)
    assert " | ".join(shown(event) for event in events) == log


@pytest.mark.parametrize("calls", [calls for _, calls, _ in SCENARIOS], ids=[name for name, _, _ in SCENARIOS])
def test_every_log_keeps_the_vocabularys_rules(calls: list[Any]) -> None:
    """One `tool/call` per call id; every item (and model call) inside a turn; turns
    numbered 0, 1, … and steps 0, 1, … in each; every turn and step closed; the items
    exactly the SDK's; one `model/call` per model call the hooks saw."""
    events = replay(calls)
    started = [event["data"]["call_id"] for event in events if event["type"] == "tool/call"]
    assert len(started) == len(set(started))
    turn, step, turns_seen = None, None, []
    for event in events:
        kind, data = event["type"], event["data"]
        if kind == "turn/start":
            assert turn is None
            turn, steps = data["turn"], []
            turns_seen.append(turn)
        elif kind == "turn/end":
            assert turn == data["turn"] and step is None
            turn = None
        elif kind == "step/start":
            assert turn == data["turn"] and step is None and data["step"] == len(steps)
            step = data["step"]
            steps.append(step)
        elif kind == "step/end":
            assert (turn, step) == (data["turn"], data["step"])
            step = None
        else:
            assert turn is not None, event  # an item (or a tool's start) outside a turn
    assert turn is None and turns_seen == list(range(len(turns_seen)))
    stored = [event for event in events if not event["type"].startswith(("turn/", "step/", "model/"))
              and not event["data"].get("in_flight")]
    assert [event["data"]["model"] for event in events if event["type"] == "model/call"] == [
        call[1] for call in calls if call[0] == "on_llm_end"]
    items = [item for call in calls if call[0] == "add_items" for item in call[1]]
    assert [_item_of(event) for event in stored] == items


def _item_of(event: dict[str, Any]) -> Any:
    data = event["data"]
    if "item" in data:
        return data["item"]
    return {key: value for key, value in data.items() if key != ITEM_MARK}


#: `event_for_item` on the items the SDK saves (recorded), and on shapes it accepts.
MAPPING: list[tuple[Any, str, dict[str, Any]]] = [
    (USER("add"), "user/message", {"content": "add", "role": "user", ITEM_MARK: True}),
    (MESSAGE("4"), "assistant/message", {**MESSAGE("4"), ITEM_MARK: True}),
    (CALL("c1", "add", ADD_22), "tool/call", {**CALL("c1", "add", ADD_22), ITEM_MARK: True}),
    (OUTPUT("c1", "4"), "tool/result", {"call_id": "c1", "content": "4", "item": OUTPUT("c1", "4")}),
    ({"type": "reasoning", "id": "rs_1", "summary": []}, "openai/item",
     {"item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
    ({"role": "developer", "content": "be brief"}, "system/message",
     {"role": "developer", "content": "be brief", ITEM_MARK: True}),
    ({"role": "assistant", "content": "x", "tool_calls": None}, "assistant/message",
     {"content": "x", "item": {"role": "assistant", "content": "x", "tool_calls": None}}),
]


@pytest.mark.parametrize("item,kind,data", MAPPING, ids=[kind + "-" + str(index) for index, (_, kind, _) in
                                                        enumerate(MAPPING)])
def test_event_for_item(item: Any, kind: str, data: dict[str, Any]) -> None:
    event = event_for_item(item)
    assert event["type"] == kind and event["data"] == data
    assert list(event["data"]) == list(data)  # the item's own key order, then the mark
    assert event.get("ignorable", False) is (kind == "openai/item")


def test_a_failed_append_is_planned_again() -> None:
    """A plan whose append failed is undone (the next batch carries its markers again),
    unless another plan came after it."""
    turns = _Turns()
    items = [USER("hi")]
    _, _, token = turns.plan_items(items, [event_for_item(item) for item in items])
    turns.rollback(token)
    before, _, _ = turns.plan_items(items, [event_for_item(item) for item in items])
    assert before == [{"type": "turn/start", "data": {"turn": 0}}]
    _, token = turns.plan_tool_start("c1", "add", "{}")
    turns.plan_tool_start("c2", "add", "{}")
    turns.rollback(token)  # another plan came after: kept
    assert turns.step == 0 and turns.started == {"c1", "c2"}


def test_model_calls_wait_for_an_append_and_a_failed_one_keeps_them() -> None:
    """A `model/call` rides in the next plan (a step's batch or a pre-tool record, after
    `step/start`); a plan undone gives it back to the next; a clear with no turn open
    leaves it waiting; at most `MODEL_CALLS_PENDING_MAX` wait."""
    turns = _Turns()
    turns.plan_items([USER("hi")], [event_for_item(USER("hi"))])
    call = model_call_event(model="gpt-x", input_tokens=3)
    turns.model_called(call)
    _, token = turns.plan_tool_start("c1", "add", "{}")
    turns.rollback(token)
    events, _ = turns.plan_tool_start("c1", "add", "{}")
    assert [event["type"] for event in events] == ["step/start", "model/call", "tool/call"]
    assert events[1] is call and turns.calls == []
    items = [MESSAGE("done")]
    turns.model_called(call)
    before, _, _ = turns.plan_items(items, [event_for_item(item) for item in items])
    assert before == [call]  # the step is open already: the call heads the batch
    turns.plan_clear()
    turns.model_called(call)
    assert turns.plan_clear()[0] == [] and turns.calls == [call]
    for _ in range(MODEL_CALLS_PENDING_MAX + 5):
        turns.model_called(call)
    assert len(turns.calls) == MODEL_CALLS_PENDING_MAX


def test_the_next_turn_follows_the_newest_one_read() -> None:
    turns = _Turns()
    turns.saw(4)
    turns.saw(2)
    turns.saw("7")  # not a turn number
    before, _, _ = turns.plan_items([USER("hi")], [event_for_item(USER("hi"))])
    assert before == [{"type": "turn/start", "data": {"turn": 5}}]
    turns.saw(9)  # a turn is open: its number stands
    assert turns.turn == 5
