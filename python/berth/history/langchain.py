"""A berth conversation as `langchain_core.messages`, to seed a LangGraph thread whose
state is a `MessagesState`: `graph.invoke({"messages": messages + [HumanMessage(…)]},
config)` on a new thread, or `graph.update_state(config, {"messages": messages})` before
the first invocation.

| reading | message |
|---|---|
| user message | `HumanMessage(text)` |
| system message | `SystemMessage(text)` |
| assistant message | `AIMessage(text, tool_calls=[{name, args, id}])` |
| tool result | `ToolMessage(output, tool_call_id, name, status="error" when it failed)` |

A call's `args` are its arguments when they are a JSON object, else `{"input": value}`
(LangChain's tool calls take an object). Non-text parts are their placeholders in the text.
"""

from __future__ import annotations

from typing import Any, Iterable

from . import _framework, conversation
from ._read import Item, ToolResult


def arguments_object(arguments: Any) -> dict[str, Any]:
    """Arguments as the object LangChain, ADK and smolagents' callers expect."""
    return arguments if isinstance(arguments, dict) else {"input": arguments}


def messages_of(conversation_items: Iterable[Item]) -> list[Any]:
    """LangChain messages of a neutral reading."""
    lc = _framework("langchain_core.messages", "langchain-core", "langgraph")
    messages: list[Any] = []
    for item in conversation_items:
        if isinstance(item, ToolResult):
            messages.append(lc.ToolMessage(content=item.output, tool_call_id=item.call_id, name=item.name,
                                        status="error" if item.is_error else "success"))
        elif item.role == "user":
            messages.append(lc.HumanMessage(content=item.text))
        elif item.role == "system":
            messages.append(lc.SystemMessage(content=item.text))
        else:
            calls = [{"name": call.name, "args": arguments_object(call.arguments), "id": call.call_id,
                      "type": "tool_call"} for call in item.tool_calls]
            messages.append(lc.AIMessage(content=item.text, tool_calls=calls))
    return messages


def langchain_messages(client: Any, session_id: str) -> list[Any]:
    """Session `session_id`'s conversation as LangChain messages. Raises
    `berth.history.FrameworkMissing` when `langchain-core` is not installed."""
    _framework("langchain_core.messages", "langchain-core", "langgraph")
    return messages_of(conversation(client, session_id))


__all__ = ["arguments_object", "langchain_messages", "messages_of"]
