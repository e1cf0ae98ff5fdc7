"""The mapping to berth's vocabulary, table-driven from records captured from real
LangGraph runs (langgraph 1.2.24, langchain-core 1.8.3): messages as a graph with a
`ToolNode` left them in its state (`langchain_core.load.dumpd`, as captured), and the
checkpoints' `source`, `step` and `updated_channels` as the saver received them."""

from __future__ import annotations

import math
from typing import Any

import pytest
from langchain_core.load import load

from berth.integrations.langgraph._messages import TEXT_CHARS, _content, _json, message_events
from berth.integrations.langgraph._talk import _Talk
from berth.integrations.langgraph._vocabulary import ended_by, has_next, put_events, writes_events

# `load` of a captured record: in beta, and its default allowlist about to change.
pytestmark = [pytest.mark.filterwarnings("ignore:The function `load` is in beta"),
              pytest.mark.filterwarnings("ignore:The default value of `allowed_objects`")]


def _record(kind: str, **kwargs: Any) -> dict[str, Any]:
    return {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", kind], "kwargs": kwargs}


# (name, the message as captured, call id -> (name, arguments) requested before, call
# ids whose start is recorded, the events expected)
MESSAGES: list[tuple[str, dict[str, Any], dict[str, Any], set[str], list[tuple[str, dict[str, Any]]]]] = [
    ("system from a tuple",
     _record("SystemMessage", content="You are terse.", type="system", id="bcfbb7c3-edcb-4ad1-9120-e18b1c3c6325"),
     {}, set(),
     [("system/message", {"content": "You are terse.", "message_id": "bcfbb7c3-edcb-4ad1-9120-e18b1c3c6325"})]),
    ("user from a tuple",
     _record("HumanMessage", content="Weather in Oslo?", type="human", id="128e4204-a4d5-4a91-979b-a6bf9427715b"),
     {}, set(),
     [("user/message", {"content": "Weather in Oslo?", "message_id": "128e4204-a4d5-4a91-979b-a6bf9427715b"})]),
    ("user with parts, from a dict",
     _record("HumanMessage", type="human", id="9d042940-ae9c-4245-aa87-526d80e7b463", content=[
         {"type": "text", "text": "and this"}, {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]),
     {}, set(),
     [("user/message", {"content": [{"type": "text", "text": "and this"},
                                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}],
                        "message_id": "9d042940-ae9c-4245-aa87-526d80e7b463"})]),
    ("assistant with parts and two tool calls",
     _record("AIMessage", type="ai", id="lc_run--01a24e6a-7975-712e-852c-16ffb79fafa8-0", invalid_tool_calls=[],
             content=[{"type": "text", "text": "Let me check."},
                      {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}],
             tool_calls=[{"name": "get_weather", "args": {"city": "Oslo"}, "id": "toolu_1", "type": "tool_call"},
                         {"name": "fails", "args": {"x": 1}, "id": "toolu_2", "type": "tool_call"}]),
     {}, set(),
     [("assistant/message", {
         "content": [{"type": "text", "text": "Let me check."},
                     {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}],
         "message_id": "lc_run--01a24e6a-7975-712e-852c-16ffb79fafa8-0",
         "tool_calls": [{"call_id": "toolu_1", "name": "get_weather", "arguments": {"city": "Oslo"}},
                        {"call_id": "toolu_2", "name": "fails", "arguments": {"x": 1}}]})]),
    ("a ToolNode's result: its call's start added",
     _record("ToolMessage", content="sunny and 21 °C in Oslo", type="tool", name="get_weather",
             id="fd204334-ace5-4c8c-a8b8-01fd79d27560", tool_call_id="toolu_1", status="success"),
     {"toolu_1": ("get_weather", {"city": "Oslo"})}, set(),
     [("tool/call", {"call_id": "toolu_1", "name": "get_weather", "arguments": {"city": "Oslo"}}),
      ("tool/result", {"call_id": "toolu_1", "content": "sunny and 21 °C in Oslo", "name": "get_weather",
                       "message_id": "fd204334-ace5-4c8c-a8b8-01fd79d27560"})]),
    ("a result whose start durable_tool_node recorded",
     _record("ToolMessage", content="sunny and 21 °C in Oslo", type="tool", name="get_weather",
             id="fd204334-ace5-4c8c-a8b8-01fd79d27560", tool_call_id="toolu_1", status="success"),
     {"toolu_1": ("get_weather", {"city": "Oslo"})}, {"toolu_1"},
     [("tool/result", {"call_id": "toolu_1", "content": "sunny and 21 °C in Oslo", "name": "get_weather",
                       "message_id": "fd204334-ace5-4c8c-a8b8-01fd79d27560"})]),
    ("a ToolNode's error (handle_tool_errors)",
     _record("ToolMessage", content="Error: ValueError('no such account')\n Please fix your mistakes.", type="tool",
             name="fails", id="77629f8d-9bf7-427f-be7b-0eb29f19dc1e", tool_call_id="toolu_2", status="error"),
     {"toolu_2": ("fails", {"x": 1})}, set(),
     [("tool/call", {"call_id": "toolu_2", "name": "fails", "arguments": {"x": 1}}),
      ("tool/result", {"call_id": "toolu_2", "content": "Error: ValueError('no such account')\n Please fix your mistakes.",
                       "name": "fails", "message_id": "77629f8d-9bf7-427f-be7b-0eb29f19dc1e", "is_error": True})]),
    ("durable_tool_node's outcome unknown",
     _record("ToolMessage", content="outcome unknown", type="tool", name="charge", id="m-9", tool_call_id="c-9",
             status="error", response_metadata={"berth": {"code": "TOOL_OUTCOME_UNKNOWN",
                                                          "name": "ToolOutcomeUnknownError"}}),
     {}, {"c-9"},
     [("tool/result", {"call_id": "c-9", "content": "outcome unknown", "name": "charge", "message_id": "m-9",
                       "is_error": True, "error": {"code": "TOOL_OUTCOME_UNKNOWN", "name": "ToolOutcomeUnknownError"}})]),
    ("a result whose request this log never saw",
     _record("ToolMessage", content="ok", type="tool", id="m-3", tool_call_id="c-3"),
     {}, set(),
     [("tool/call", {"call_id": "c-3", "name": "tool", "arguments": {}}),
      ("tool/result", {"call_id": "c-3", "content": "ok", "message_id": "m-3"})]),
    ("the final answer",
     _record("AIMessage", content="Oslo: sunny.", type="ai", id="lc_run--01a24e6a-7997-765c-a456-8385ce07ab39-0",
             tool_calls=[], invalid_tool_calls=[]),
     {}, set(),
     [("assistant/message", {"content": "Oslo: sunny.", "message_id": "lc_run--01a24e6a-7997-765c-a456-8385ce07ab39-0"})]),
    ("a streamed answer (AIMessageChunk)",
     _record("AIMessageChunk", content="streamed hello", type="AIMessageChunk",
             id="lc_run--01a24e6a-79a3-740a-a73c-ba7fd8823a50", chunk_position="last", tool_calls=[],
             invalid_tool_calls=[]),
     {}, set(),
     [("assistant/message", {"content": "streamed hello", "message_id": "lc_run--01a24e6a-79a3-740a-a73c-ba7fd8823a50"})]),
    ("a ChatMessage of a known role", _record("ChatMessage", content="a chat message", type="chat", role="assistant"),
     {}, set(), [("assistant/message", {"content": "a chat message"})]),
    ("a ChatMessage of another role", _record("ChatMessage", content="unknown role", type="chat", role="critic"),
     {}, set(), []),
    ("RemoveMessage", _record("RemoveMessage", content="", type="remove", id="x"), {}, set(), []),
    ("a tool call without an id",
     _record("AIMessage", content="", type="ai", id="m-4",
             tool_calls=[{"name": "f", "args": {}, "id": None, "type": "tool_call"}]),
     {}, set(), [("assistant/message", {"content": "", "message_id": "m-4"})]),
]


def test_a_result_berth_repair_gave_already_adds_nothing() -> None:
    record = _record("ToolMessage", content="outcome unknown", type="tool", id="m-9", tool_call_id="c-9",
                     status="error")
    assert message_events(load(record), {}, {"c-9"}, answered={"c-9"}) == []


@pytest.mark.parametrize("name, record, requested, started, expected", MESSAGES, ids=[row[0] for row in MESSAGES])
def test_message_events(name: str, record: dict[str, Any], requested: dict[str, Any], started: set[str],
                        expected: list[tuple[str, dict[str, Any]]]) -> None:
    assert message_events(load(record), requested, started) == expected


CONTENT = [
    ("a string", "hi", ("hi", False)),
    ("a long string", "x" * (TEXT_CHARS + 5), ("x" * TEXT_CHARS, True)),
    ("text parts over the budget", [{"type": "text", "text": "a" * TEXT_CHARS}, {"type": "text", "text": "b"}, "c"],
     ([{"type": "text", "text": "a" * TEXT_CHARS}, {"type": "text", "text": ""}, ""], True)),
    ("an inline image", [{"type": "image", "base64": "Q" * 3000, "mime_type": "image/png"}],
     ([{"type": "image", "base64": "[3000 characters, kept in the checkpoint]", "mime_type": "image/png"}], False)),
    ("values JSON cannot hold", [{"type": "x", "v": [math.inf, b"\x01", {1: 2}]}],
     ([{"type": "x", "v": ["inf", "b'\\x01'", {"1": 2}]}], False)),
]


@pytest.mark.parametrize("name, content, expected", CONTENT, ids=[row[0] for row in CONTENT])
def test_content(name: str, content: Any, expected: Any) -> None:
    assert _content(content) == expected


def test_json_bounds_depth_and_numbers() -> None:
    deep: Any = "bottom"
    for _ in range(40):
        deep = [deep]
    assert isinstance(_json(deep, 0), list) and "bottom" in str(_json(deep, 0))
    assert _json(1 << 70, 0) == str(1 << 70) and _json(-5, 0) == -5 and _json(math.nan, 0) == "nan"
    assert _json(True, 0) is True and _json((1, "a"), 0) == [1, "a"]


# The checkpoints a graph's run stores, as the saver received them: (source, step,
# updated_channels), captured from langgraph 1.2.24 — then the vocabulary the puts add.
RUNS: list[tuple[str, list[tuple[str, int, list[str] | None]], list[str]]] = [
    ("an agent with a tool call",
     [("input", -1, ["__start__"]), ("loop", 0, ["branch:to:agent", "messages"]),
      ("loop", 1, ["branch:to:tools", "messages"]), ("loop", 2, ["branch:to:agent", "messages"]),
      ("loop", 3, ["messages"])],
     ["turn/start 0", "step/start 0.0", "step/end 0.0", "step/start 0.1", "step/end 0.1", "step/start 0.2",
      "step/end 0.2", "step/start 0.3", "step/end 0.3", "turn/end 0 completed"]),
    ("Send fan-out",
     [("input", -1, ["__start__"]), ("loop", 0, ["branch:to:plan", "messages"]),
      ("loop", 1, ["__pregel_tasks", "messages"]), ("loop", 2, ["branch:to:done", "items"]), ("loop", 3, ["messages"])],
     ["turn/start 0", "step/start 0.0", "step/end 0.0", "step/start 0.1", "step/end 0.1", "step/start 0.2",
      "step/end 0.2", "step/start 0.3", "step/end 0.3", "turn/end 0 completed"]),
    ("the functional API (an entrypoint and a task)",
     [("input", -1, ["__start__"]), ("loop", 0, ["__end__", "__previous__"])],
     ["turn/start 0", "step/start 0.0", "step/end 0.0", "turn/end 0 completed"]),
    ("durability exit: the final checkpoint only",
     [("loop", 2, ["messages"])],
     ["turn/start 0", "step/start 0.2", "step/end 0.2", "turn/end 0 completed"]),
    ("update_state, then a run",
     [("update", 0, None), ("input", 1, ["__start__"]), ("loop", 2, ["branch:to:a", "messages"]),
      ("loop", 3, ["messages"])],
     ["turn/start 0", "step/start 0.2", "step/end 0.2", "step/start 0.3", "step/end 0.3", "turn/end 0 completed"]),
    ("a checkpoint that does not say what it updated",
     [("input", -1, ["__start__"]), ("loop", 0, None), ("input", 1, ["__start__"])],
     ["turn/start 0", "step/start 0.0", "step/end 0.0", "step/start 0.1", "step/end 0.1", "turn/end 0 unknown",
      "turn/start 1", "step/start 1.2"]),
]


def _line(kind: str, data: dict[str, Any]) -> str:
    if kind.startswith("step/"):
        return f"{kind} {data['turn']}.{data['step']}"
    return f"{kind} {data['turn']}" + (f" {data['reason']}" if "reason" in data else "")


@pytest.mark.parametrize("name, puts, expected", RUNS, ids=[row[0] for row in RUNS])
def test_turns_and_steps_of_a_run(name: str, puts: list[tuple[str, int, list[str] | None]],
                                  expected: list[str]) -> None:
    talk = _Talk()
    lines = []
    for source, step, updated in puts:
        before, after = put_events(talk, "", {"updated_channels": updated, "channel_values": {}},
                                   {"source": source, "step": step}, [])
        for kind, data in before + after:
            talk.apply(kind, data, "run-1")
            lines.append(_line(kind, data))
    assert lines == expected
    # A subgraph's checkpoints (their own namespace) delimit nothing.
    assert put_events(talk, "sub:1", {"updated_channels": ["messages"]}, {"source": "loop", "step": 1}, []) == ([], [])


def test_interrupts_errors_and_resumes() -> None:
    talk = _Talk()
    for kind, data in [("turn/start", {"turn": 0}), ("step/start", {"turn": 0, "step": 2})]:
        talk.apply(kind, data, "run-1")
    # Stored after its checkpoint: the writes end the turn; stored before, they do not
    # (the checkpoint's put does, from the writes it finds: `ended_by`).
    assert writes_events(talk, "", "task-1", ["__interrupt__"], stored=True) == [
        ("step/end", {"turn": 0, "step": 2}), ("turn/end", {"turn": 0, "reason": "awaiting_input"})]
    assert writes_events(talk, "", "task-1", ["__interrupt__"], stored=False) == []
    assert writes_events(talk, "", "task-1", ["__error__"], stored=True)[-1] == (
        "turn/end", {"turn": 0, "reason": "error"})
    assert writes_events(talk, "sub:1", "task-1", ["__interrupt__"], stored=True) == []
    assert ended_by({("task-1", -3): None}) == "awaiting_input" and ended_by({("task-1", -1): None}) == "error"
    assert ended_by({("task-1", 0): None, ("task-1", -4): None}) is None
    before, after = put_events(talk, "", {"updated_channels": ["branch:to:b"]}, {"source": "loop", "step": 2}, [],
                               ended="awaiting_input")
    assert [_line(kind, data) for kind, data in before + after] == [
        "step/end 0.2", "step/start 0.3", "step/end 0.3", "turn/end 0 awaiting_input"]
    talk.apply("turn/end", {"turn": 0, "reason": "awaiting_input"}, "run-1")
    resume = "00000000-0000-0000-0000-000000000000"
    assert writes_events(talk, "", resume, ["__resume__"], stored=True) == [("turn/start", {"turn": 1})]
    assert writes_events(talk, "", "task-2", ["messages"], stored=True) == []


def test_a_call_left_in_flight() -> None:
    """`_Talk.in_doubt`: a start another run recorded in the turn still open, with no
    result, must not run again; a retry in this run, a call whose turn ended, or a
    call requested again may."""
    talk = _Talk()
    for kind, data, run in [
        ("turn/start", {"turn": 0}, "dead"),
        ("assistant/message", {"content": "", "tool_calls": [{"call_id": "c", "name": "pay", "arguments": {}}]}, "dead"),
        ("tool/call", {"call_id": "c", "name": "pay", "arguments": {}}, "dead"),
    ]:
        talk.apply(kind, data, run)
    assert talk.in_doubt("c", "next") == {} and talk.in_doubt("c", "dead") is None
    assert talk.recorded_here("c")
    talk.apply("turn/end", {"turn": 0, "reason": "awaiting_input"}, "dead")
    assert talk.in_doubt("c", "next") is None and not talk.recorded_here("c")
    closer = {"call_id": "c", "content": "unknown", "is_error": True,
              "error": {"code": "TOOL_OUTCOME_UNKNOWN", "name": "ToolOutcomeUnknownError"}}
    talk.apply("tool/result", closer, "dead")
    assert talk.in_doubt("c", "next") == closer  # berth's resume answered it
    talk.apply("assistant/message", {"content": "", "tool_calls": [{"call_id": "c", "name": "pay", "arguments": {}}]},
               "next")
    assert talk.in_doubt("c", "next") is None  # a new request of the same id
    assert has_next({"updated_channels": ["join:a+b:c"]}) is True and has_next({}) is None
