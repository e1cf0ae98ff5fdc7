"""How the SDK's history lives in berth:

- one SDK session is one berth session, labelled `openai-agents`, titled with the SDK's
  `session_id`, whose id is `session_id` itself when berth's id grammar allows it and a
  reversible encoding otherwise (`encode_session_id`);
- each item is one event. Known shapes use berth's vocabulary (a user message is
  `user/message`, an assistant message `assistant/message`, a `function_call` is
  `tool/call`, a `function_call_output` is `tool/result`), with the SDK's item kept
  verbatim in `data.item`, so `berth sessions cat` and the inspector read the
  conversation; anything else is an ignorable `openai/item`. Turn and step markers go
  around them (`_turns`), which also store a `function_call` as the model's request or,
  when its start was recorded first, as an `openai/item`;
- `add_items` is one atomic, durable append; `pop_item` appends a claim
  (`openai/pop {target, claim}` at the log's end, with `expected_seq` and a nonce, so
  racing processes each pop a different item) and `clear_session` a marker
  (`openai/clear`): the log stays append-only, and its audit trail with it. Storage is
  reclaimed when the session is deleted (`delete()`, `berth sessions rm`) or by the
  tenant's retention policy.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from typing import Any


#: The label every session made by `BerthSession` carries (listings filter on it).
LABEL = "openai-agents"
#: An SDK item berth's vocabulary has no type for (kept verbatim, ignorable by berth).
ITEM_TYPE = "openai/item"
#: A `pop_item` claim: `{target: seq, claim: nonce}`.
POP_TYPE = "openai/pop"
#: A `clear_session` marker: every item before it is gone.
CLEAR_TYPE = "openai/clear"
#: Sessions are created with this activity TTL (ten years): the SDK assumes history lives
#: until it is cleared, and berth's default (24 h idle) would expire them.
ACTIVITY_TTL_MS_FOREVER = 10 * 365 * 24 * 3600 * 1000

_ID_BYTES_MAX = 128
_SAFE_ID_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._~-")
_MESSAGE_TYPES = {
    "user": "user/message",
    "assistant": "assistant/message",
    "system": "system/message",
    "developer": "system/message",
}
_ITEM_TYPES = frozenset(["user/message", "assistant/message", "system/message", "tool/call", "tool/result", ITEM_TYPE])
#: Marks a message or `function_call` stored as its event's data itself: the item's own
#: fields, in its order, then this key (`True`). The fields berth's vocabulary needs
#: (`content`; `call_id`, `name`, `arguments`) are the item's, so its text is stored once.
ITEM_MARK = "openai_item"
#: Keys that keep an item out of that layout (it is nested as `{..., item}` instead):
#: the mark itself, the nested layout's and the tool-start record's keys, and fields
#: berth's vocabulary gives a meaning of its own.
_NESTED_ONLY_KEYS = frozenset([ITEM_MARK, "item", "in_flight", "tool_calls", "error", "is_error"])
_MARKED_TYPES = frozenset(["user/message", "assistant/message", "system/message", "tool/call"])


def encode_session_id(session_id: str) -> str:
    """The berth id of an SDK session id: the id itself when berth's grammar
    (`[A-Za-z0-9._~-]{1,128}`) allows it and it does not start with `~`; otherwise `~`
    and its UTF-8 in unpadded base64url; and if that is over 128 bytes, `~~` and its
    SHA-256 (the original id is then only in the session's title)."""
    if not isinstance(session_id, str):
        raise TypeError(f"session_id must be a str, not {type(session_id).__name__}")
    raw = session_id.encode("utf-8")
    if 0 < len(raw) <= _ID_BYTES_MAX and not raw.startswith(b"~") and all(byte in _SAFE_ID_BYTES for byte in raw):
        return session_id
    encoded = "~" + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
    if len(encoded) <= _ID_BYTES_MAX:
        return encoded
    return "~~" + hashlib.sha256(raw).hexdigest()


def decode_session_id(berth_id: str) -> str | None:
    """The SDK session id behind a berth id, or None when it is a hash (read the title)."""
    if berth_id.startswith("~~"):
        return None
    if berth_id.startswith("~"):
        body = berth_id[1:]
        try:
            return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
    return berth_id


def event_for_item(item: Any) -> dict[str, Any]:
    """The berth event that stores one SDK item. A message or a `function_call` is the
    event's data itself, marked (`ITEM_MARK`), unless it holds a key of
    `_NESTED_ONLY_KEYS`; any other item is verbatim in `data.item`, beside the fields
    berth's vocabulary requires."""
    if type(item) is dict or isinstance(item, Mapping):  # a dict first: the ABC check is slow
        kind = item.get("type")
        call_id = item.get("call_id")
        if kind == "function_call" and _nonempty(call_id) and _nonempty(item.get("name")) and "arguments" in item:
            if _NESTED_ONLY_KEYS.isdisjoint(item):
                return {"type": "tool/call", "data": _marked(item)}
            data = {"call_id": call_id, "name": item["name"], "arguments": item["arguments"], "item": item}
            return {"type": "tool/call", "data": data}
        if kind == "function_call_output" and _nonempty(call_id) and "output" in item:
            return {"type": "tool/result", "data": {"call_id": call_id, "content": item["output"], "item": item}}
        message_type = _MESSAGE_TYPES.get(item.get("role"))  # type: ignore[arg-type]
        if kind in (None, "message") and message_type and "content" in item:
            if _NESTED_ONLY_KEYS.isdisjoint(item):
                return {"type": message_type, "data": _marked(item)}
            return {"type": message_type, "data": {"content": item["content"], "item": item}}
    return {"type": ITEM_TYPE, "data": {"item": item}, "ignorable": True}


def _marked(item: Any) -> dict[str, Any]:
    data = dict(item)  # a copy: the caller's item is not changed
    data[ITEM_MARK] = True
    return data


def _stores_item(event_type: str, data: dict[str, Any]) -> bool:
    """Whether an event of `event_type` with `data` stores an SDK item (either layout),
    rather than presenting one (a repair closer) or none (a tool-start record)."""
    if event_type not in _ITEM_TYPES:
        return False
    return "item" in data or (event_type in _MARKED_TYPES and data.get(ITEM_MARK) is True)


def _stored_item(data: dict[str, Any]) -> Any:
    """The SDK item that `data` stores (`_stores_item` is true of it). A marked item is
    made a new dict: `data` is not changed."""
    if "item" in data:
        return data["item"]
    item = dict(data)
    del item[ITEM_MARK]
    return item


def _nonempty(value: Any) -> bool:
    return isinstance(value, str) and value != ""
