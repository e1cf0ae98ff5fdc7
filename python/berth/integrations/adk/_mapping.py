"""One ADK event as berth's conversation vocabulary (pure; table-tested from events a real
`Runner` wrote, scripts/dropins/adk/test_adk_mapping.py). The ADK event itself rides
verbatim in the first berth event's `adk` (`model_dump(mode="json", exclude_none=True)`),
which is all `get_session` reads back:

| ADK event (author, content parts) | berth events |
|---|---|
| the user's text, images, files | `user/message {content}` |
| an agent's text (its thoughts only when it says nothing else), images, files, code | `assistant/message {content}` |
| an agent's `function_call` parts (with any text beside them) | `assistant/message {content, tool_calls}`, then one `tool/call {call_id, name, arguments}` per call: ADK runs a call's tool only after its event is appended, so the `tool/call` is durable before the tool starts |
| `function_response` parts (a tool's, or the user's answer to a long-running call) | one `tool/result {call_id, name, content}` per response (`is_error` when the response is ADK's `{"error": …}`) |
| nothing a reader shows (a state change only, an error, an id-less call) | `adk/event`, ignorable |

`content` is the text when every part is text (parts joined by a newline), else a list of
Gemini parts (`{text}`, `{inline_data: {mime_type}}` without its bytes — those stay in
the ADK event —, `{file_data}`, typed code parts) that berth's readers show as text and
placeholders.
"""

from __future__ import annotations

from typing import Any

from google.adk.events.event import Event

#: A non-vocabulary type for an ADK event no reader shows: ignorable (folded by readers,
#: skipped by repair and by a resume's checks).
EVENT_TYPE = "adk/event"


def _event_json(event: Event) -> dict[str, Any]:
    return event.model_dump(mode="json", exclude_none=True)


def _readable(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]] | None:
    """A message's `content` from ADK parts (JSON): their text, or Gemini parts without
    inline bytes; None when no part reads as anything. Thoughts count only when nothing
    else does."""
    shown: list[dict[str, Any]] = []
    thoughts: list[dict[str, Any]] = []
    only_text = True
    for part in parts:
        text = part.get("text")
        if text is not None:
            if text:
                (thoughts if part.get("thought") else shown).append({"text": text})
            continue
        if "inline_data" in part:
            blob = part["inline_data"]
            shown.append({"inline_data": {key: blob[key] for key in ("mime_type", "display_name") if key in blob}})
        elif "file_data" in part:
            shown.append({"file_data": part["file_data"]})
        elif "executable_code" in part:
            shown.append({"type": "executable_code", "text": part["executable_code"].get("code", "")})
        elif "code_execution_result" in part:
            shown.append({"type": "code_execution_result", "text": part["code_execution_result"].get("output", "")})
        else:
            continue  # calls and responses are not content
        only_text = False
    shown = shown or thoughts
    if not shown:
        return None
    if only_text:
        return "\n".join(part["text"] for part in shown)
    return shown


def berth_events_for(event: Event, time_ms: int, adk: dict[str, Any] | None = None,
                     started: frozenset[str] | set[str] = frozenset()) -> list[dict[str, Any]]:
    """The berth events that store one ADK event, the ADK event verbatim in the first one's
    `adk` (`adk`: its JSON, if already made). A call in `started` has its `tool/call`
    in the log already (written by `before_tool_recorder`): it is not written again."""
    if adk is None:
        adk = _event_json(event)
    parts = (adk.get("content") or {}).get("parts") or []
    user = event.author == "user"
    calls: list[dict[str, Any]] = []
    responses: list[dict[str, Any]] = []
    for part in parts:
        if "function_call" in part:
            call = part["function_call"]
            if not user and call.get("id") and call.get("name"):
                calls.append({"call_id": call["id"], "name": call["name"], "arguments": call.get("args") or {}})
        elif "function_response" in part:
            response = part["function_response"]
            if response.get("id"):
                responses.append(response)
    content = _readable(parts)
    out: list[dict[str, Any]] = []
    if content is not None or calls:
        data: dict[str, Any] = {"content": content if content is not None else ""}
        if calls:
            data["tool_calls"] = calls
        out.append({"type": "user/message" if user else "assistant/message", "data": data, "time": time_ms})
        out.extend({"type": "tool/call", "data": dict(call), "time": time_ms}
                   for call in calls if call["call_id"] not in started)
    for response in responses:
        body = response.get("response")
        result: dict[str, Any] = {"call_id": response["id"], "content": body if body is not None else {},
                                  "name": response.get("name", "")}
        if isinstance(body, dict) and "error" in body:
            result["is_error"] = True
        out.append({"type": "tool/result", "data": result, "time": time_ms})
    if not out:
        return [{"type": EVENT_TYPE, "data": {"adk": adk}, "ignorable": True, "time": time_ms}]
    out[0]["data"]["adk"] = adk
    return out


def started_calls(stored: list[dict[str, Any]]) -> list[str]:
    """The call ids whose `tool/call` is among `stored` (berth events of one append)."""
    return [each["data"]["call_id"] for each in stored if each["type"] == "tool/call"]
