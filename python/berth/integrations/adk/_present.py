"""Stored events presented as ADK events: the newest a `get_session`'s filters keep,
and berth's repair of a call a dead process left pending as ADK's function response
(its outcome unknown, or it never started)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, NamedTuple

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


class _Call(NamedTuple):
    """What presenting a repair needs of the call it answers: its tool's name, and the
    invocation and author of the ADK event that asked for it."""

    name: str
    invocation: str
    author: str


def _call_of(event: _StoredEvent, call_id: Any) -> _Call | None:
    """The call `call_id` as `event` tells it: an ADK event asking for it (the
    `assistant/message` that holds it, or the old layout's first `tool/call`), or a
    `tool/call` of it with no ADK event (its name; the invocation and author when
    `before_tool_recorder` wrote it)."""
    data = _stored_data(event)
    if data is None:
        return None
    adk_event = data.get("adk")
    if adk_event is not None:
        for call in adk_event.get_function_calls():
            if call.id == call_id:
                return _Call(call.name or "unknown_tool", adk_event.invocation_id, adk_event.author)
        return None
    if event.type == "tool/call" and data.get("call_id") == call_id:
        invocation, author = data.get("invocation_id"), data.get("author")
        return _Call(str(data.get("name") or "unknown_tool"), invocation if isinstance(invocation, str) else "",
                     author if isinstance(author, str) and author else "berth")
    return None


def _calls_index(pages: list[_StoredPage]) -> dict[Any, _Call]:
    """Every call the pages read tell (`_call_of`), an ADK event's telling first."""
    calls: dict[Any, _Call] = {}
    for page in pages:
        for event in page.events:
            data = _stored_data(event)
            if data is None:
                continue
            adk_event = data.get("adk")
            if adk_event is not None:
                for call in adk_event.get_function_calls():
                    if call.id:
                        calls[call.id] = _Call(call.name or "unknown_tool", adk_event.invocation_id, adk_event.author)
            elif event.type == "tool/call" and "call_id" in data:
                told = _call_of(event, data["call_id"])
                if told is not None:
                    calls.setdefault(data["call_id"], told)
    return calls


def _repair_event(event: _StoredEvent, calls: Mapping[Any, _Call],
                  reader: Callable[[Any, Any], _Call | None]) -> Event:
    """The ADK function response that presents berth's repair of a pending call: its
    outcome is unknown (or it never started), said in the call's invocation (`reader`
    finds a call that is not among the pages read, by its id and the seq of its
    `tool/call`)."""
    data = _stored_data(event)
    assert data is not None and isinstance(data.get("error"), dict)
    call = calls.get(data["call_id"])
    if call is None:
        call = reader(data["call_id"], data.get("call_seq"))
    if call is None:
        call = _Call("unknown_tool", "", "berth")
    response = types.FunctionResponse(
        id=data["call_id"], name=call.name, response={"error": data.get("content", ""), "code": data["error"]["code"]}
    )
    return Event(
        id=f"berth-repair-{event.seq}",
        invocation_id=call.invocation,
        author=call.author,
        timestamp=event.time / 1000,
        content=types.Content(role="user", parts=[types.Part(function_response=response)]),
    )
