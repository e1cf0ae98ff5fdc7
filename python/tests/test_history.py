"""berth.history's neutral reading of the conversation vocabulary (docs/guides/
cross-framework.md): the pure fold, table-tested over the layouts the drop-ins write, and
`conversation` / `aconversation` through the clients on every transport. The framework
presenters are tested in each framework's venv (scripts/dropins/matrix)."""

from __future__ import annotations

import asyncio
import importlib.util
import uuid
from typing import Any

import pytest

import berth
import berth.history as history
from berth.history import Message, ToolCall, ToolResult, read_events
from conftest import FOREVER, Place


def user(text: Any) -> tuple[str, Any]:
    return ("user/message", {"content": text})


def said(items: list[Any]) -> list[tuple[Any, ...]]:
    """Items as short tuples: (role, text, calls) or ("result", call_id, output, is_error, name)."""
    out: list[tuple[Any, ...]] = []
    for item in items:
        if isinstance(item, ToolResult):
            out.append(("result", item.call_id, item.output, item.is_error, item.name))
        else:
            out.append((item.role, item.text, [(call.call_id, call.name, call.arguments) for call in item.tool_calls]))
    return out


CALL = {"call_id": "c1", "name": "get_weather", "arguments": {"city": "Paris"}}
RESULT = ("tool/result", {"call_id": "c1", "content": "sunny"})

# (what, events, reading)
TABLE: list[tuple[str, list[tuple[str, Any]], list[tuple[Any, ...]]]] = [
    ("messages of every role; markers and framework records skipped",
     [("turn/start", {"turn": 0}), user("hi"), ("system/message", {"content": "be brief"}),
      ("step/start", {"turn": 0, "step": 0}), ("model/call", {"model": "m"}), ("lg/checkpoint", {"x": 1}),
      ("assistant/message", {"content": "hello"}), ("step/end", {"turn": 0, "step": 0}),
      ("turn/end", {"turn": 0, "reason": "completed"})],
     [("user", "hi", []), ("system", "be brief", []), ("assistant", "hello", [])]),
    ("a call both in the message's tool_calls and as tool/call appears once (ADK, smolagents)",
     [user("q"), ("assistant/message", {"content": "", "tool_calls": [CALL]}), ("tool/call", CALL), RESULT,
      ("assistant/message", {"content": "done"})],
     [("user", "q", []), ("assistant", "", [("c1", "get_weather", {"city": "Paris"})]),
      ("result", "c1", "sunny", False, "get_weather"), ("assistant", "done", [])]),
    ("the tool's start before its step's message: the message takes the call (OpenAI run hooks)",
     [user("q"), ("tool/call", dict(CALL, arguments='{"city":"Paris"}', in_flight=True)),
      ("assistant/message", {"content": [{"type": "output_text", "text": "Let me look."}]}),
      ("tool/call", dict(CALL, arguments='{"city":"Paris"}')), RESULT],
     [("user", "q", []), ("assistant", "Let me look.", [("c1", "get_weather", {"city": "Paris"})]),
      ("result", "c1", "sunny", False, "get_weather")]),
    ("a message listing a call read before it takes it, even after its result (durable tools)",
     [user("q"), ("tool/call", CALL), RESULT, ("assistant/message", {"content": "Thought", "tool_calls": [CALL]})],
     [("user", "q", []), ("assistant", "Thought", [("c1", "get_weather", {"city": "Paris"})]),
      ("result", "c1", "sunny", False, "get_weather")]),
    ("calls as items of their own join the assistant message before them (OpenAI SDK)",
     [user("q"), ("assistant/message", {"content": "Two calls."}), ("tool/call", CALL),
      ("tool/call", {"call_id": "c2", "name": "n", "arguments": "not json"}), RESULT,
      ("tool/result", {"call_id": "c2", "content": "boom", "is_error": True})],
     [("user", "q", []),
      ("assistant", "Two calls.", [("c1", "get_weather", {"city": "Paris"}), ("c2", "n", "not json")]),
      ("result", "c1", "sunny", False, "get_weather"), ("result", "c2", "boom", True, "n")]),
    ("ADK's results: {result} and {error} unwrapped, any other object as JSON; one result a call",
     [("assistant/message", {"content": "", "tool_calls": [CALL, dict(CALL, call_id="c2"), dict(CALL, call_id="c3")]}),
      ("tool/result", {"call_id": "c1", "content": {"result": "sunny"}, "name": "get_weather"}),
      ("tool/result", {"call_id": "c2", "content": {"error": "no such city"}, "is_error": True}),
      ("tool/result", {"call_id": "c3", "content": {"temp": 21, "sky": "clear"}}),
      ("tool/result", {"call_id": "c3", "content": "again"})],
     [("assistant", "", [("c1", "get_weather", {"city": "Paris"}), ("c2", "get_weather", {"city": "Paris"}),
                         ("c3", "get_weather", {"city": "Paris"})]),
      ("result", "c1", "sunny", False, "get_weather"), ("result", "c2", "no such city", True, "get_weather"),
      ("result", "c3", '{"temp":21,"sky":"clear"}', False, "get_weather")]),
    ("a call id used again in a later turn is a call of its own (smolagents numbers calls per run)",
     [("turn/start", {"turn": 0}), user("q"), ("assistant/message", {"content": "", "tool_calls": [CALL]}),
      ("tool/call", CALL), RESULT, ("turn/start", {"turn": 1}), user("again"),
      ("assistant/message", {"content": "", "tool_calls": [CALL]}), ("tool/call", CALL),
      ("tool/result", {"call_id": "c1", "content": "rainy"})],
     [("user", "q", []), ("assistant", "", [("c1", "get_weather", {"city": "Paris"})]),
      ("result", "c1", "sunny", False, "get_weather"), ("user", "again", []),
      ("assistant", "", [("c1", "get_weather", {"city": "Paris"})]),
      ("result", "c1", "rainy", False, "get_weather")]),
    ("a result of a call never read keeps the name it carries",
     [("tool/result", {"call_id": "x", "content": [{"type": "text", "text": "out"}], "name": "t"})],
     [("result", "x", "out", False, "t")]),
    ("typed parts read as berth's readers read them, with placeholders",
     [user([{"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": "data:…"},
            {"type": "input_file", "filename": "report.pdf"}]),
      ("assistant/message", {"content": [{"text": "Gemini"}, {"inline_data": {"mime_type": "image/png"}}]}),
      ("assistant/message", {"content": [{"type": "refusal", "refusal": "no"}, {"type": "reasoning", "summary": []}]})],
     [("user", "look\n[image]\n[file: report.pdf]", []), ("assistant", "Gemini\n[image]", []),
      ("assistant", "[refusal] no\n[reasoning]", [])]),
    ("an empty assistant message without calls is nothing; malformed events are skipped",
     [("assistant/message", {"content": ""}), ("tool/call", {"call_id": 3}), ("tool/result", {"content": "x"}),
      ("user/message", "not an object")],
     []),
]


@pytest.mark.parametrize("what, events, reading", TABLE, ids=[row[0][:40] for row in TABLE])
def test_reading(what: str, events: list[tuple[str, Any]], reading: list[tuple[Any, ...]]) -> None:
    assert said(read_events(events)) == reading, what


def test_unmapped_parts_are_named() -> None:
    (message,) = read_events([user([{"type": "input_text", "text": "a"}, {"type": "input_image"},
                                    {"type": "input_audio"}, {"type": "reasoning"}])])
    assert isinstance(message, Message)
    assert message.unmapped == ["image", "audio", "reasoning"]
    assert history.content_text("plain").unmapped == []


def test_arguments_value() -> None:
    assert history.arguments_value('{"a": [1, 2]}') == {"a": [1, 2]}
    assert history.arguments_value(" [1]") == [1]
    assert history.arguments_value("{not json") == "{not json"
    assert history.arguments_value("42") == "42"  # a string that is not an object or array stays one
    assert history.arguments_value({"a": 1}) == {"a": 1}


def test_framework_missing_is_an_import_error_and_a_berth_error() -> None:
    with pytest.raises(history.FrameworkMissing) as raised:
        history._framework("berth_no_such_framework", "no-such-framework", "none")
    assert isinstance(raised.value, ImportError) and isinstance(raised.value, berth.BerthError)
    assert "pip install 'no-such-framework'" in str(raised.value)


@pytest.mark.skipif(importlib.util.find_spec("agents") is not None, reason="openai-agents is installed here")
def test_a_presenter_without_its_framework_says_so(place: Place) -> None:
    from berth.history.openai import items_of, openai_items

    client = place.connect()
    with pytest.raises(ImportError, match="openai-agents"):
        openai_items(client, "any")
    # The pure half needs no framework.
    assert items_of([Message("user", "hi")]) == [{"role": "user", "content": "hi"}]


def _session(place: Place) -> tuple[berth.Client, str]:
    client = place.connect()
    session_id = f"h-{uuid.uuid4().hex[:8]}"
    client.create_session(session_id, policy=FOREVER)
    client.append(session_id, [("turn/start", {"turn": 0}), user("What's the weather?"),
                               ("assistant/message", {"content": "", "tool_calls": [CALL]}), ("tool/call", CALL)])
    client.append(session_id, [{"type": "lg/blob", "data": {"x": 1}, "ignorable": True}, RESULT,
                               ("assistant/message", {"content": [{"type": "output_text", "text": "Sunny."}]}),
                               ("turn/end", {"turn": 0, "reason": "completed"})])
    return client, session_id


EXPECTED = [("user", "What's the weather?", []), ("assistant", "", [("c1", "get_weather", {"city": "Paris"})]),
            ("result", "c1", "sunny", False, "get_weather"), ("assistant", "Sunny.", [])]


def test_conversation_through_the_client(place: Place) -> None:
    client, session_id = _session(place)
    items = history.conversation(client, session_id)
    assert said(items) == EXPECTED
    assert [item.seq for item in items] == [1, 2, 5, 6]  # the events they were read from
    assert items[0].time_ms > 0
    with pytest.raises(berth.NotFound):
        history.conversation(client, "absent")


def test_aconversation_through_the_async_client(place: Place) -> None:
    _client, session_id = _session(place)

    async def read() -> list[Any]:
        async with place.connect_async() as client:
            return await history.aconversation(client, session_id)

    assert said(asyncio.run(read())) == EXPECTED


def test_tool_call_identity() -> None:
    assert ToolCall("c", "n", {"a": 1}) == ToolCall("c", "n", {"a": 1})
