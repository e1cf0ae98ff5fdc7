"""A LangGraph agent (model node + ToolNode) checkpointed in berth with `BerthSaver`.

Offline: the chat model is langchain_core's fake one, scripted to ask for the weather
tool and then answer. The thread's state is a berth session, so run this again with the
same thread id and the graph picks up the thread's earlier messages from berth. Each
model call is recorded too (`saver.model_calls()`), as a `model/call` event in the thread.

    BERTH_DATA=./berth-data python graph.py [THREAD_ID]                  # embedded store
    BERTH_URL=http://127.0.0.1:7420 BERTH_API_KEY=… python graph.py [THREAD_ID]
"""

from __future__ import annotations

import os
import sys

import berth
from berth.integrations.langgraph import BerthSaver, thread_session_id
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


def connect() -> berth.Client:
    """HTTP when BERTH_URL is set (the key from BERTH_API_KEY), else the embedded store."""
    if os.environ.get("BERTH_URL"):
        return berth.Client()
    return berth.open(os.environ.get("BERTH_DATA", "./berth-data"), tenant="acme", user="alice", role="service")


@tool
def get_weather(city: str) -> str:
    """The weather in a city (canned)."""
    return f"sunny and 21 °C in {city}"


# Stands in for an LLM: its first answer calls the tool, its second is the final reply;
# each reports its model and token usage, as a provider's chat model does.
model = FakeMessagesListChatModel(responses=[
    AIMessage(content="", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "call-1"}],
              usage_metadata={"input_tokens": 42, "output_tokens": 9, "total_tokens": 51},
              response_metadata={"model_name": "fake-model"}),
    AIMessage(content="It is sunny and 21 °C in Paris.",
              usage_metadata={"input_tokens": 70, "output_tokens": 11, "total_tokens": 81},
              response_metadata={"model_name": "fake-model"}),
])


def agent(state: MessagesState) -> dict:
    """The model node: the whole thread so far (restored from berth) is its input."""
    return {"messages": [model.invoke(state["messages"])]}


def build() -> StateGraph:
    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([get_weather]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)  # to "tools" on a tool call, else the end
    builder.add_edge("tools", "agent")
    return builder


def show(message) -> str:
    if message.type == "ai" and message.tool_calls:
        return "tool call: " + ", ".join(f"{call['name']}({call['args']})" for call in message.tool_calls)
    role = {"human": "user", "ai": "assistant", "tool": "tool result"}.get(message.type, message.type)
    return f"{role}: {message.content}"


def main(thread_id: str) -> None:
    client = connect()
    # The checkpointer is the one-line swap (was: InMemorySaver() / SqliteSaver).
    # `with` releases the saver's berth run when done.
    with BerthSaver(client) as saver:
        graph = build().compile(checkpointer=saver)
        # `callbacks`: record each model call in the thread (optional).
        config = {"configurable": {"thread_id": thread_id}, "callbacks": [saver.model_calls()]}
        before = len(graph.get_state(config).values.get("messages", []))
        print(f"thread {thread_id!r}: {before} messages restored from berth")
        result = graph.invoke({"messages": [HumanMessage("What's the weather in Paris?")]}, config)
        messages = result["messages"]
    calls = [event.data for event in client.iter_events(thread_session_id(thread_id)) if event.type == "model/call"]
    print(f"model calls recorded: {len(calls)}, {sum(call.get('input_tokens', 0) for call in calls)} input tokens, "
          f"{sum(call.get('output_tokens', 0) for call in calls)} output tokens")
    print(f"conversation {thread_id!r}, {len(messages)} messages:")
    for message in messages:
        print("  " + show(message))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "weather-thread")
