"""The neutral reading of a session's conversation vocabulary (pure: `Reader` is fed
events one at a time, in log order).

| event | reading |
|---|---|
| `user/message`, `system/message` | `Message(role, text)` |
| `assistant/message {content, tool_calls?}` | `Message("assistant", text, tool_calls)` |
| `tool/call {call_id, name, arguments}` | a `ToolCall` of the assistant message just before it (one whose calls have no result yet), else of a new assistant message without text — which the model's message takes as its own when it comes next, or later listing the call (a call recorded before its tool ran, ahead of its step's message: the OpenAI SDK's run hooks, smolagents' durable tools); nothing when its `call_id` was read already (a drop-in that writes the request and the tool's start both) |
| `tool/result {call_id, content, is_error?}` | `ToolResult(call_id, output, is_error)` |
| `turn/*`, `step/*`, ignorable and any other type | nothing |

A call's `arguments` are a JSON value: a string holding a JSON object or array (the
OpenAI SDK's `arguments`) is decoded; any other value is kept as it is. A result's
`output` is its content's text; ADK's wrapping of a plain return value (`{"result": s}`)
and of an error (`{"error": s}`) gives `s`. The raw `content` is kept beside the text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Union

from ._content import content_text

#: The message types read, and their role.
TURN_START = "turn/start"
ROLES = {"user/message": "user", "system/message": "system", "assistant/message": "assistant"}
TOOL_CALL, TOOL_RESULT = "tool/call", "tool/result"


@dataclass(frozen=True)
class ToolCall:
    """A tool call the assistant asked for: `arguments` is a JSON value."""

    call_id: str
    name: str
    arguments: Any


@dataclass
class Message:
    """A text message. `text` follows berth's reading of `content` (kept raw in
    `content`); `unmapped` names the parts shown only as placeholders (images, files,
    audio, refusals, unknown part types). An assistant message carries its `tool_calls`.
    `seq`, `time_ms`: the event it was read from."""

    role: str
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    content: Any = None
    unmapped: list[str] = field(default_factory=list)
    seq: int = -1
    time_ms: int = 0


@dataclass
class ToolResult:
    """A tool's result: `output` is its text, `content` the stored value; `name` is its
    call's tool name when the call was read."""

    call_id: str
    output: str
    is_error: bool = False
    name: str | None = None
    content: Any = None
    seq: int = -1
    time_ms: int = 0


Item = Union[Message, ToolResult]


def arguments_value(arguments: Any) -> Any:
    """A call's arguments as a JSON value: a string holding a JSON object or array is
    decoded (the OpenAI SDK stores arguments as JSON text); anything else is itself."""
    if isinstance(arguments, str) and arguments.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def result_output(content: Any) -> str:
    """A result's text: a string itself; ADK's `{"result": s}` / `{"error": s}` as `s`;
    anything else as berth's readers show it."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict) and len(content) == 1:
        (key, value), = content.items()
        if key in ("result", "error") and isinstance(value, str):
            return value
    if isinstance(content, (dict, list)) and not _looks_like_parts(content):
        return json.dumps(content, ensure_ascii=False, separators=(",", ":"))
    return content_text(content).text


def _looks_like_parts(content: Any) -> bool:
    items = content if isinstance(content, list) else [content]
    return bool(items) and all(isinstance(item, dict) and ("type" in item or "text" in item) for item in items)


class Reader:
    """Folds events into the conversation, one at a time (`items` so far)."""

    def __init__(self) -> None:
        self.items: list[Item] = []
        #: call id -> the message whose `tool_calls` hold it.
        self.calls: dict[str, Message] = {}
        #: Messages made for a `tool/call` no message listed: filled in by the message
        #: that lists it later (a drop-in that records a call before its step's message).
        self.made: set[int] = set()
        self.answered: set[str] = set()

    def feed(self, event_type: str, data: Any, seq: int = -1, time_ms: int = 0) -> None:
        if not isinstance(data, dict):
            return
        if event_type == TURN_START:
            # Call ids are a turn's own: a drop-in may number them afresh each turn
            # (smolagents' scripted `call-1` in every run).
            self.calls.clear()
            self.made.clear()
            self.answered.clear()
        elif event_type in ROLES:
            self._message(ROLES[event_type], data, seq, time_ms)
        elif event_type == TOOL_CALL:
            self._tool_call(data, seq, time_ms)
        elif event_type == TOOL_RESULT:
            self._tool_result(data, seq, time_ms)

    def _message(self, role: str, data: dict[str, Any], seq: int, time_ms: int) -> None:
        read = content_text(data.get("content"))
        calls = [call for call in map(_call, data.get("tool_calls") or ()) if call is not None] \
            if role == "assistant" else []
        made = self._made_for(calls) if role == "assistant" else None
        if made is not None:
            # Its calls were read first, as a message without text: this is that message.
            made.text, made.content, made.unmapped = read.text, data.get("content"), read.unmapped
            self.made.discard(id(made))
            fresh = [call for call in calls if call.call_id not in self.calls]
            self._add_calls(made, fresh)
            return
        message = Message(role, read.text, [], data.get("content"), read.unmapped, seq, time_ms)
        self._add_calls(message, [call for call in calls if call.call_id not in self.calls])
        if message.text or message.tool_calls or role != "assistant" or data.get("content") not in ("", None, []):
            self.items.append(message)

    def _made_for(self, calls: list[ToolCall]) -> Message | None:
        """The message made for calls read before the model's message that asked for
        them, if this is that message: one holding any of `calls`, or — a message that
        lists none (the OpenAI SDK's: its calls are items of their own) — the last item."""
        for call in calls:
            holder = self.calls.get(call.call_id)
            if holder is not None and id(holder) in self.made:
                return holder
        last = self.items[-1] if self.items else None
        if not calls and isinstance(last, Message) and id(last) in self.made:
            return last
        return None

    def _add_calls(self, message: Message, calls: Iterable[ToolCall]) -> None:
        for call in calls:
            message.tool_calls.append(call)
            self.calls[call.call_id] = message

    def _tool_call(self, data: dict[str, Any], seq: int, time_ms: int) -> None:
        call = _call(data)
        if call is None or call.call_id in self.calls:
            return
        last = self.items[-1] if self.items else None
        if isinstance(last, Message) and last.role == "assistant":
            self._add_calls(last, [call])
            return
        message = Message("assistant", "", [], None, [], seq, time_ms)
        self.made.add(id(message))
        self._add_calls(message, [call])
        self.items.append(message)

    def _tool_result(self, data: dict[str, Any], seq: int, time_ms: int) -> None:
        call_id = data.get("call_id")
        if not isinstance(call_id, str) or call_id in self.answered:
            return
        self.answered.add(call_id)
        content = data.get("content")
        message = self.calls.get(call_id)
        name = next((call.name for call in message.tool_calls if call.call_id == call_id), None) if message else None
        if name is None and isinstance(data.get("name"), str) and data["name"]:
            name = data["name"]
        self.items.append(ToolResult(call_id, result_output(content), data.get("is_error") is True, name, content,
                                     seq, time_ms))


def _call(data: Any) -> ToolCall | None:
    if not isinstance(data, dict):
        return None
    call_id, name = data.get("call_id"), data.get("name")
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str):
        return None
    return ToolCall(call_id, name, arguments_value(data.get("arguments")))


def read_events(events: Iterable[Any]) -> list[Item]:
    """The conversation of `events` (berth `Event`s, or `(type, data)` pairs)."""
    reader = Reader()
    for event in events:
        if isinstance(event, tuple):
            reader.feed(event[0], event[1])
        else:
            reader.feed(event.type, event.data, event.seq, event.time)
    return reader.items
