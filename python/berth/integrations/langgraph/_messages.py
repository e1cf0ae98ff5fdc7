"""LangChain messages as berth's conversation vocabulary (pure: no I/O, no state).

| LangChain message | berth events |
|---|---|
| `HumanMessage` (`ChatMessage` with role `user`) | `user/message {content, message_id, name?}` |
| `SystemMessage` (role `system`) | `system/message {content, message_id, name?}` |
| `AIMessage` (role `assistant`) | `assistant/message {content, message_id, name?, tool_calls?: [{call_id, name, arguments}]}` |
| `ToolMessage` | `tool/call {call_id, name, arguments}` when no start was recorded (`durable_tool_node` records it before the tool runs), then `tool/result {call_id, content, message_id, name?, is_error?, error?}` |
| anything else (`RemoveMessage`, `FunctionMessage`, other roles) | nothing: the `lg/*` record keeps it |

`content` is LangChain's as it is — a string or a list of parts (text, images, tool
uses…), which berth's readers render — made JSON berth accepts (no NaN, string keys),
with a value of a non-text part longer than `PART_VALUE_CHARS` (an image's base64)
replaced by a note of its size, and text over `TEXT_CHARS` cut (`truncated: true`): the
exact message stays in the checkpoint.
"""

from __future__ import annotations

import json
import math
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, HumanMessage, SystemMessage, ToolMessage


#: Characters of a message's text kept in its vocabulary event (the rest: `truncated`).
TEXT_CHARS = 64 * 1024
#: Characters of any other string inside a content part (an image's data) kept.
PART_VALUE_CHARS = 1024
#: Nesting of parts and arguments followed; deeper values are kept as their `str`.
DEPTH_MAX = 24
#: Characters of one event's JSON at most (berth refuses an event over 1 MiB): larger
#: arguments and content are cut (`truncated: true`).
EVENT_CHARS = 192 * 1024
#: What is kept of arguments cut to fit: their JSON text, this long.
ARGUMENT_CHARS = 4 * 1024
#: Why `durable_tool_node` answers a call without running it: berth's repair codes.
OUTCOME_UNKNOWN = {"code": "TOOL_OUTCOME_UNKNOWN", "name": "ToolOutcomeUnknownError"}
_ROLES = {"user": "user/message", "human": "user/message", "system": "system/message",
          "assistant": "assistant/message", "ai": "assistant/message"}


def message_kind(message: Any) -> str | None:
    """The vocabulary type of a LangChain message, or None (not a conversation message)."""
    if isinstance(message, ToolMessage):
        return "tool/result"
    if isinstance(message, AIMessage):
        return "assistant/message"
    if isinstance(message, HumanMessage):
        return "user/message"
    if isinstance(message, SystemMessage):
        return "system/message"
    if isinstance(message, ChatMessage):
        return _ROLES.get(str(message.role).lower())
    return None


def message_events(message: BaseMessage, requested: dict[str, tuple[str, Any]],
                   started: Any, answered: Any = ()) -> list[tuple[str, dict[str, Any]]]:
    """The vocabulary events of one message. `requested`: call id -> (name, arguments)
    of the calls assistant messages asked for; `started`: the call ids whose start is
    recorded (a `ToolMessage` adds its `tool/call` otherwise); `answered`: the call ids
    with a result already (berth's repair closed it: a `ToolMessage` adds nothing)."""
    kind = message_kind(message)
    if kind is None:
        return []
    content, truncated = _content(message.content)
    data: dict[str, Any] = {"content": content}
    if truncated:
        data["truncated"] = True
    if message.id:
        data["message_id"] = str(message.id)
    if message.name:
        data["name"] = str(message.name)
    if kind == "assistant/message":
        calls = [_requested_call(call) for call in getattr(message, "tool_calls", None) or ()]
        calls = [call for call in calls if call is not None]
        if calls:
            data["tool_calls"] = calls
        return [(kind, _fit(data))]
    if kind != "tool/result":
        return [(kind, _fit(data))]
    call_id = getattr(message, "tool_call_id", None)
    if not isinstance(call_id, str) or not call_id or call_id in answered:
        return []  # berth's tool/result names its call (LangChain's always does); one result a call
    data["call_id"] = call_id
    metadata = message.response_metadata.get("berth") if isinstance(message.response_metadata, dict) else None
    if isinstance(metadata, dict) and isinstance(metadata.get("code"), str):
        data["is_error"] = True
        data["error"] = {"code": metadata["code"], "name": str(metadata.get("name") or metadata["code"])}
    elif getattr(message, "status", None) == "error":
        data["is_error"] = True
    events: list[tuple[str, dict[str, Any]]] = []
    if call_id not in started:
        name, arguments = requested.get(call_id, (message.name, None))
        events.append(("tool/call", _fit({"call_id": call_id, "name": str(name or "tool"),
                                          "arguments": arguments if arguments is not None else {}})))
    events.append(("tool/result", _fit(data)))
    return events


def tool_call_data(call: Any) -> dict[str, Any] | None:
    """A LangChain `ToolCall` (`{name, args, id}`) as a `tool/call`'s data; None without an id."""
    data = _requested_call(call)
    return _fit(data) if data is not None else None


def _fit(data: dict[str, Any]) -> dict[str, Any]:
    """`data` small enough for one event: arguments over the limit kept as the start of
    their JSON text, then content as its text, cut (`truncated: true`)."""
    content = data.get("content")
    if (type(content) is str and len(content) <= 16 * 1024 and "tool_calls" not in data
            and "arguments" not in data):
        return data  # certainly small: most messages
    if _chars(data) <= EVENT_CHARS:
        return data
    data = dict(data, truncated=True)
    if "arguments" in data:
        data["arguments"] = _cut_json(data["arguments"])
    if "tool_calls" in data:
        data["tool_calls"] = [dict(call, arguments=_cut_json(call["arguments"])) for call in data["tool_calls"]]
    if _chars(data) > EVENT_CHARS and "content" in data:
        data["content"] = _cut_json(data["content"], TEXT_CHARS) if type(data["content"]) is not str else ""
        if _chars(data) > EVENT_CHARS:
            data["content"] = ""
    return data


def _chars(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _cut_json(value: Any, limit: int = ARGUMENT_CHARS) -> Any:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return value if len(text) <= limit else text[:limit]


def _requested_call(call: Any) -> dict[str, Any] | None:
    if not isinstance(call, dict):
        return None
    call_id, name = call.get("id"), call.get("name")
    if not isinstance(call_id, str) or not call_id:
        return None  # berth names a call by its id: a call without one is left to the lg record
    arguments = call.get("args")
    return {"call_id": call_id, "name": str(name) if name else "tool",
            "arguments": _json(arguments, 0) if arguments is not None else {}}


def _content(content: Any) -> tuple[Any, bool]:
    """LangChain content as berth content: (JSON value, whether text was cut)."""
    if type(content) is str:
        if len(content) <= TEXT_CHARS:
            return content, False
        return content[:TEXT_CHARS], True
    if isinstance(content, list):
        budget = [TEXT_CHARS]
        parts = [_part(part, budget) for part in content]
        return parts, budget[0] < 0
    return _json(content, 0), False


def _part(part: Any, budget: list[int]) -> Any:
    """One content part: text counted against the message's budget; any other long
    string (base64 data, a data: URL) replaced by a note of its length."""
    if isinstance(part, str):
        return _text(part, budget)
    if not isinstance(part, dict):
        return _json(part, 1)
    kept: dict[str, Any] = {}
    for key, value in part.items():
        key = str(key)
        if isinstance(value, str):
            if key == "text" or key == "refusal":
                kept[key] = _text(value, budget)
            elif len(value) > PART_VALUE_CHARS:
                kept[key] = f"[{len(value)} characters, kept in the checkpoint]"
            else:
                kept[key] = value
        elif key == "image_url" and isinstance(value, dict):
            kept[key] = _part(value, budget)
        else:
            kept[key] = _json(value, 2)
    return kept


def _text(text: str, budget: list[int]) -> str:
    room = budget[0]
    budget[0] -= len(text)
    if len(text) <= room:
        return text
    budget[0] = -1
    return text[:max(room, 0)]


def _json(value: Any, depth: int) -> Any:
    """`value` as JSON berth stores exactly: finite numbers, string keys, lists; anything
    else (bytes, objects, deeper than `DEPTH_MAX`) as its `str`, cut."""
    kind = type(value)
    if value is None or kind is str or kind is bool:
        return value
    if kind is int:
        return value if -(1 << 63) <= value < (1 << 64) else str(value)
    if kind is float:
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):  # subclasses: enums, markup…
        return str(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):  # numpy scalars, int enums…
        return _json(float(value) if isinstance(value, float) else int(value), depth)
    if depth < DEPTH_MAX:
        if isinstance(value, dict):
            return {str(key): _json(item, depth + 1) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [_json(item, depth + 1) for item in value]
    text = str(value)
    return text if len(text) <= PART_VALUE_CHARS else text[:PART_VALUE_CHARS] + "…"
