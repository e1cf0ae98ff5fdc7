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


def _fork(client: Any, source_session_id: str, graph: Any, config: Any) -> list[Any]:
    saver = graph.checkpointer
    if not hasattr(saver, "fork_target"):
        raise TypeError(f"continue_thread needs a graph compiled with berth's saver, not {type(saver).__name__}")
    thread_id = config["configurable"]["thread_id"]
    messages = messages_of(conversation(client, source_session_id))
    client.fork_session(source_session_id, upto_seq=0, **saver.fork_target(thread_id))
    return messages


def continue_thread(client: Any, source_session_id: str, graph: Any, config: Any, *, as_node: str | None = None) -> Any:
    """Continues berth session `source_session_id` — a conversation any drop-in wrote (its
    berth id, as `berth sessions ls` lists it) — as the LangGraph thread of `config`, which
    must not exist yet: forks the source at 0 into the thread's session (its header names
    the source; the saver's labels and policy), then `graph.update_state(config,
    {"messages": messages}, as_node=as_node)`, written by `graph`'s checkpointer (a
    `BerthSaver`). The source is only read (through `client`, a `berth.Client`). Returns
    the new checkpoint's config; `graph.invoke({"messages": [new]}, config)` continues."""
    return graph.update_state(config, {"messages": _fork(client, source_session_id, graph, config)}, as_node=as_node)


async def acontinue_thread(client: Any, source_session_id: str, graph: Any, config: Any, *,
                           as_node: str | None = None) -> Any:
    """`continue_thread` for a graph on an `AsyncBerthSaver` (`client` is still a
    `berth.Client`, called on a worker thread)."""
    import asyncio

    messages = await asyncio.to_thread(_fork, client, source_session_id, graph, config)
    return await graph.aupdate_state(config, {"messages": messages}, as_node=as_node)


__all__ = ["acontinue_thread", "arguments_object", "continue_thread", "langchain_messages", "messages_of"]
