"""A berth conversation as Google ADK `Event`s, to append to an ADK session
(`await session_service.append_event(session, event)` for each, on a new session) so an
agent's next turn sees it:

| reading | event |
|---|---|
| user message | `Event(author="user", content=Content(role="user", parts=[Part(text)]))` |
| assistant message | `Event(author=author, content=Content(role="model", parts=[Part(text)?, Part(function_call=FunctionCall(id, name, args))…]))` |
| consecutive tool results | one `Event(author=author, content=Content(role="user", parts=[Part(function_response=FunctionResponse(id, name, response))…]))` |

`author` is the agent that will read the history (ADK gives an agent only its own and
the user's events as they are; others' as context). A user message starts a new
`invocation_id`. A response is the stored result when it is a JSON object (what ADK
wrote), else `{"result": output}` (`{"error": output}` for a failed call), as ADK wraps a
tool's plain return value; `args` an object, else `{"input": value}`. System messages
have no ADK event (an agent's instruction is its own) and are left out.
"""

from __future__ import annotations

from typing import Any, Iterable

from . import _framework, conversation
from ._read import Item, ToolResult
from .langchain import arguments_object


def events_of(conversation_items: Iterable[Item], *, author: str) -> list[Any]:
    """ADK events of a neutral reading."""
    Event = _framework("google.adk.events", "google-adk", "adk").Event
    types = _framework("google.genai.types", "google-adk", "adk")

    events: list[Any] = []
    invocation = "e-berth"
    responses: list[Any] = []
    time_s = 0.0

    def flush() -> None:
        if responses:
            events.append(Event(author=author, invocation_id=invocation, timestamp=time_s,
                                content=types.Content(role="user", parts=list(responses))))
            responses.clear()

    for item in conversation_items:
        time_s = item.time_ms / 1000 if item.time_ms else time_s
        if isinstance(item, ToolResult):
            response = item.content if isinstance(item.content, dict) else {
                "error" if item.is_error else "result": item.output}
            responses.append(types.Part(function_response=types.FunctionResponse(
                id=item.call_id, name=item.name or "", response=response)))
            continue
        flush()
        if item.role == "system":
            continue
        if item.role == "user":
            invocation = f"e-berth-{item.seq}"
            events.append(Event(author="user", invocation_id=invocation, timestamp=time_s,
                                content=types.Content(role="user", parts=[types.Part(text=item.text)])))
            continue
        parts = [types.Part(text=item.text)] if item.text else []
        parts += [types.Part(function_call=types.FunctionCall(id=call.call_id, name=call.name,
                                                               args=arguments_object(call.arguments)))
                  for call in item.tool_calls]
        events.append(Event(author=author, invocation_id=invocation, timestamp=time_s,
                            content=types.Content(role="model", parts=parts)))
    flush()
    return events


def adk_events(client: Any, session_id: str, *, author: str) -> list[Any]:
    """Session `session_id`'s conversation as ADK events, the assistant's authored by
    `author` (the agent's name). Raises `berth.history.FrameworkMissing` when
    `google-adk` is not installed."""
    _framework("google.adk.events", "google-adk", "adk")
    return events_of(conversation(client, session_id), author=author)


__all__ = ["adk_events", "events_of"]
