"""The mapping of ADK events to berth's vocabulary (`_mapping`) and their turns and steps
(`_turns`), table-driven, from ADK events a real `Runner` wrote (google-adk 2.13.0: a
`SequentialAgent` of a clerk with two tools and a closer, a scripted model; ids and
times shortened, ADK's empty defaults left out — `Event.model_validate` puts them back):
each record's berth events, the ADK event verbatim in the first one's `adk`."""

from __future__ import annotations

from typing import Any

import pytest

from google.adk.events.event import Event

from berth.integrations.adk import EVENT_TYPE, berth_events_for
from berth.integrations.adk._turns import TurnState, markers, restored, stored

INV = "e-d22e5bac"
#: Captured from the Runner (see the module's docstring), in the order it wrote them.
USER = {"content": {"parts": [{"text": "Is A1 in stock?"}], "role": "user"}, "invocation_id": INV, "author": "user",
        "id": "4090b4c1", "timestamp": 1796612093.19}
CALLS = {"content": {"parts": [{"text": "Checking."},
                               {"function_call": {"id": "adk-6077", "args": {"sku": "A1"}, "name": "lookup"}},
                               {"function_call": {"id": "adk-cd05", "args": {"sku": "A1"}, "name": "stock"}}],
                     "role": "model"},
         "invocation_id": INV, "author": "clerk", "long_running_tool_ids": [], "id": "48339d30",
         "timestamp": 1796612093.40}
RESPONSES = {"content": {"parts": [{"function_response": {"id": "adk-6077", "name": "lookup",
                                                          "response": {"result": "a kettle"}}},
                                   {"function_response": {"id": "adk-cd05", "name": "stock", "response": {"result": 3}}}],
                         "role": "user"},
             "invocation_id": INV, "author": "clerk", "id": "aba95889", "timestamp": 1796612093.41}
THOUGHT_ANSWER = {"content": {"parts": [{"text": "thinking", "thought": True}, {"text": "3 kettles."}], "role": "model"},
                  "invocation_id": INV, "author": "clerk", "id": "ae1d5d68", "timestamp": 1796612093.42}
CLOSER = {"content": {"parts": [{"text": "Anything else?"}], "role": "model"}, "invocation_id": INV,
          "author": "closer", "id": "2eef3d1c", "timestamp": 1796612093.43}
#: ADK's own shapes of other events (`Event` fields as ADK builds them).
IMAGE = {"content": {"parts": [{"text": "Mine:"}, {"inline_data": {"mime_type": "image/png", "data": "iVBORw0KGgo="}}],
                     "role": "user"}, "invocation_id": "e-2", "author": "user", "id": "i1", "timestamp": 1.0}
TOOL_ERROR = {"content": {"parts": [{"function_response": {"id": "adk-9", "name": "stock",
                                                          "response": {"error": "Tool 'stok' not found."}}}],
                          "role": "user"}, "invocation_id": "e-2", "author": "clerk", "id": "t1", "timestamp": 1.0}
STATE_ONLY = {"invocation_id": "e-2", "author": "clerk", "actions": {"state_delta": {"n": 1}}, "id": "s1",
              "timestamp": 1.0}
NO_ID_CALL = {"content": {"parts": [{"function_call": {"args": {}, "name": "clock"}}], "role": "model"},
              "invocation_id": "e-2", "author": "clerk", "id": "c1", "timestamp": 1.0}
ABORTED = {"invocation_id": "e-2", "author": "shop", "error_code": "INVOCATION_ABORTED",
           "error_message": "Invocation was aborted by client.", "id": "a1", "timestamp": 1.0}
CODE = {"content": {"parts": [{"executable_code": {"code": "print(1)", "language": "PYTHON"}},
                              {"code_execution_result": {"outcome": "OUTCOME_OK", "output": "1"}}], "role": "model"},
        "invocation_id": "e-2", "author": "clerk", "id": "x1", "timestamp": 1.0}
THOUGHT_ONLY = {"content": {"parts": [{"text": "hmm", "thought": True}], "role": "model"}, "invocation_id": "e-2",
                "author": "clerk", "id": "h1", "timestamp": 1.0}


def _shape(stored: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Each berth event's type and data without `adk`, and whether it is ignorable."""
    return [(each["type"] + (" (ignorable)" if each.get("ignorable") else ""),
             {key: value for key, value in each["data"].items() if key != "adk"}) for each in stored]


MAPPED = [
    ("user text", USER, [("user/message", {"content": "Is A1 in stock?"})]),
    ("model text and two calls", CALLS, [
        ("assistant/message", {"content": "Checking.", "tool_calls": [
            {"call_id": "adk-6077", "name": "lookup", "arguments": {"sku": "A1"}},
            {"call_id": "adk-cd05", "name": "stock", "arguments": {"sku": "A1"}}]}),
        ("tool/call", {"call_id": "adk-6077", "name": "lookup", "arguments": {"sku": "A1"}}),
        ("tool/call", {"call_id": "adk-cd05", "name": "stock", "arguments": {"sku": "A1"}})]),
    ("two responses", RESPONSES, [
        ("tool/result", {"call_id": "adk-6077", "content": {"result": "a kettle"}, "name": "lookup"}),
        ("tool/result", {"call_id": "adk-cd05", "content": {"result": 3}, "name": "stock"})]),
    ("thought and answer", THOUGHT_ANSWER, [("assistant/message", {"content": "3 kettles."})]),
    ("second agent's answer", CLOSER, [("assistant/message", {"content": "Anything else?"})]),
    ("text and image", IMAGE, [("user/message", {"content": [{"text": "Mine:"},
                                                             {"inline_data": {"mime_type": "image/png"}}]})]),
    ("tool error", TOOL_ERROR, [("tool/result", {"call_id": "adk-9", "content": {"error": "Tool 'stok' not found."},
                                                 "name": "stock", "is_error": True})]),
    ("state only", STATE_ONLY, [(EVENT_TYPE + " (ignorable)", {})]),
    ("call without id", NO_ID_CALL, [(EVENT_TYPE + " (ignorable)", {})]),
    ("abort", ABORTED, [(EVENT_TYPE + " (ignorable)", {})]),
    ("code", CODE, [("assistant/message", {"content": [{"type": "executable_code", "text": "print(1)"},
                                                       {"type": "code_execution_result", "text": "1"}]})]),
    ("thoughts only", THOUGHT_ONLY, [("assistant/message", {"content": "hmm"})]),
]


@pytest.mark.parametrize("record,expected", [(record, expected) for _, record, expected in MAPPED],
                         ids=[name for name, _, _ in MAPPED])
def test_an_adk_event_maps_to_the_vocabulary(record: dict[str, Any], expected: list[Any]) -> None:
    event = Event.model_validate(record)
    stored = berth_events_for(event, 7)
    assert _shape(stored) == expected
    assert stored[0]["data"]["adk"] == event.model_dump(mode="json", exclude_none=True)
    assert all("adk" not in each["data"] for each in stored[1:]) and all(each["time"] == 7 for each in stored)
    assert Event.model_validate(stored[0]["data"]["adk"]) == event  # what `get_session` reads back


def test_a_call_recorded_before_its_event_is_not_started_twice() -> None:
    stored = berth_events_for(Event.model_validate(CALLS), 7, started={"adk-6077"})
    assert [(each["type"], each["data"].get("call_id")) for each in stored] == [
        ("assistant/message", None), ("tool/call", "adk-cd05")]
    assert [call["call_id"] for call in stored[0]["data"]["tool_calls"]] == ["adk-6077", "adk-cd05"]


def _walk(records: list[dict[str, Any]], state: TurnState = TurnState(), first: int = 0) -> tuple[list[str], TurnState]:
    """The berth events of a run of ADK events: markers as `type turn.step`, the ADK
    event's own as its id; turn numbers from `first` on."""
    numbers = iter(range(first, first + 100))
    out: list[str] = []
    for record in records:
        event = Event.model_validate(record)
        adk = event.model_dump(mode="json", exclude_none=True)
        before, after, state = markers(state, event, adk, 0, lambda: next(numbers))
        shown = [f"{m['type']} {m['data']['turn']}" + (f".{m['data']['step']}" if "step" in m["data"] else "")
                 + (f" {m['data']['reason']}" if "reason" in m["data"] else "") for m in before]
        out += shown + [event.id] + [f"{m['type']} {m['data']['turn']}"
                                     + (f".{m['data']['step']}" if "step" in m["data"] else "")
                                     + (f" {m['data']['reason']}" if "reason" in m["data"] else "") for m in after]
    return out, state


def _again(record: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**record, **changes}


TURNS = [
    ("one invocation, two agents: its turn again after the first answer, same number",
     [USER, CALLS, RESPONSES, THOUGHT_ANSWER, CLOSER],
     ["turn/start 0", "4090b4c1", "step/start 0.0", "48339d30", "aba95889",
      "step/end 0.0", "step/start 0.1", "ae1d5d68", "step/end 0.1", "turn/end 0 completed",
      "turn/start 0", "step/start 0.2", "2eef3d1c", "step/end 0.2", "turn/end 0 completed"]),
    ("invocations numbered in order; an unfinished one is ended by the next",
     [USER, _again(USER, invocation_id="e-2", id="u2"), _again(CLOSER, invocation_id="e-2", id="c2"),
      _again(USER, invocation_id="e-3", id="u3")],
     ["turn/start 0", "4090b4c1", "turn/end 0 completed", "turn/start 1", "u2", "step/start 1.0", "c2",
      "step/end 1.0", "turn/end 1 completed", "turn/start 2", "u3"]),
    ("a step left open by a call is ended with its turn",
     [_again(USER, invocation_id="e-2"), _again(CALLS, invocation_id="e-2"), _again(USER, invocation_id="e-3")],
     ["turn/start 0", "4090b4c1", "step/start 0.0", "48339d30", "step/end 0.0", "turn/end 0 completed",
      "turn/start 1", "4090b4c1"]),
    ("an abort ends the turn as aborted; an error event as error",
     [_again(USER, invocation_id="e-2"), ABORTED, _again(USER, invocation_id="e-3"),
      {"invocation_id": "e-3", "author": "clerk", "error_code": "MALFORMED_FUNCTION_CALL", "id": "err",
       "timestamp": 1.0}],
     ["turn/start 0", "4090b4c1", "a1", "turn/end 0 aborted", "turn/start 1", "4090b4c1", "err",
      "turn/end 1 error"]),
    ("a long-running call's answer from the user, in a later invocation",
     [_again(USER, invocation_id="e-2"), _again(CALLS, invocation_id="e-2", long_running_tool_ids=["adk-6077"]),
      _again(RESPONSES, invocation_id="e-3", author="user")],
     ["turn/start 0", "4090b4c1", "step/start 0.0", "48339d30", "step/end 0.0", "turn/end 0 completed",
      "turn/start 1", "aba95889"]),
    ("an event with no invocation id is in no turn",
     [_again(STATE_ONLY, invocation_id="")], ["s1"]),
]


@pytest.mark.parametrize("records,expected", [(records, expected) for _, records, expected in TURNS],
                         ids=[name for name, _, _ in TURNS])
def test_turns_and_steps(records: list[dict[str, Any]], expected: list[str]) -> None:
    assert _walk(records)[0] == expected


def test_turn_numbers_go_on_from_the_sessions_count() -> None:
    """A second service object (another process) numbers its first turn from the count
    the session's index item keeps, not from 0."""
    shown, state = _walk([USER, CLOSER], first=5)
    assert shown[0] == "turn/start 5" and state == TurnState(INV, 5, False, None, 1)


def test_another_object_goes_on_from_the_turn_the_index_keeps() -> None:
    """The index item keeps the latest turn (`stored`); a service object that has not
    written the session starts from it (`restored`, closed): the same invocation goes
    on as that turn, its steps numbered on; another invocation takes the next number."""
    _, state = _walk([USER, CALLS, RESPONSES])
    kept = stored(state)
    assert kept == {"invocation_id": INV, "turn": 0, "steps": 1}
    seed = restored(kept)
    assert seed == TurnState(INV, 0, False, None, 1)
    assert _walk([THOUGHT_ANSWER], seed, first=1)[0] == [
        "turn/start 0", "step/start 0.1", "ae1d5d68", "step/end 0.1", "turn/end 0 completed"]
    assert _walk([_again(USER, invocation_id="e-2", id="u2")], seed, first=1)[0] == ["turn/start 1", "u2"]
    assert stored(TurnState()) is None
    for bad in (None, [INV, 0, 1], {"invocation_id": INV, "turn": "0", "steps": 1}, {"turn": 0, "steps": 1}):
        assert restored(bad) is None, bad
