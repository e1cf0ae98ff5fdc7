"""Stored events presented as ADK events: the newest a `get_session`'s filters keep,
and berth's repair of a call a dead process left pending as ADK's function response
(its outcome unknown, or it never started)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

from google.adk.events.event import Event
from google.genai import types

from ._pages import _stored_data, _StoredEvent, _StoredPage


_REPAIR_CODES = frozenset(["TOOL_OUTCOME_UNKNOWN", "TOOL_NOT_STARTED"])


def _is_repair(event: _StoredEvent) -> bool:
    data = _stored_data(event)
    if event.type != "tool/result" or data is None or "adk" in data or "call_id" not in data:
        return False
    error = data.get("error")
    return isinstance(error, dict) and error.get("code") in _REPAIR_CODES


def _take_newest(events: list[_StoredEvent], chosen: list[_StoredEvent], limit: int | None,
                 after: float | None) -> bool:
    """Appends to `chosen` (newest first) the events of a page that present an ADK event
    and that the filters keep; True once the filters want no older event. The hot loop
    of `get_session` (a long session has three or four berth events per ADK event)."""
    for event in reversed(events):
        data = event.data
        if data.__class__ is not dict:
            continue
        adk_event = data.get("adk")  # type: ignore[union-attr]
        if adk_event is not None:
            stamp = adk_event.timestamp
        elif _is_repair(event):
            stamp = event.time / 1000
        else:
            continue  # bookkeeping: a turn marker, carried writes
        if after is not None and stamp < after:
            return True
        chosen.append(event)
        if limit is not None and len(chosen) >= limit:
            return True
    return False


def _calls_index(pages: list[_StoredPage]) -> dict[Any, _StoredEvent]:
    return {data["call_id"]: event for page in pages for event in page.events
            if event.type == "tool/call" and (data := _stored_data(event)) is not None and "call_id" in data}


def _repair_event(event: _StoredEvent, calls: Mapping[Any, _StoredEvent],
                  reader: Callable[[Any], _StoredEvent | None]) -> Event:
    """The ADK function response that presents berth's repair of a pending call: its
    outcome is unknown (or it never started), said in the call's invocation."""
    data = _stored_data(event)
    assert data is not None and isinstance(data.get("error"), dict)
    call = calls.get(data["call_id"])
    if call is None:
        call = reader(data.get("call_seq"))
    name, invocation, author = "unknown_tool", "", "berth"
    call_data = _stored_data(call) if call is not None else None
    if call_data is not None:
        name = call_data.get("name") or name
        if "adk" in call_data:
            invocation = call_data["adk"].invocation_id
            author = call_data["adk"].author
    response = types.FunctionResponse(
        id=data["call_id"], name=name, response={"error": data.get("content", ""), "code": data["error"]["code"]}
    )
    return Event(
        id=f"berth-repair-{event.seq}",
        invocation_id=invocation,
        author=author,
        timestamp=event.time / 1000,
        content=types.Content(role="user", parts=[types.Part(function_response=response)]),
    )
