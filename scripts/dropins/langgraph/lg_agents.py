"""Graphs the vocabulary and crash tests run: a tool-calling agent (a scripted chat
model and a `ToolNode`, plain or `durable_tool_node`), as examples/langgraph/graph.py,
with a fresh model per invocation; and the child-process entry of the crash test, which
runs the agent until its tool is killed mid-call."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from berth.integrations.langgraph import BerthSaver, durable_tool_node

#: Every model input the agent node saw, in this process (the crash test reads it).
MODEL_INPUTS: list[list[BaseMessage]] = []
#: Where `charge` notes each time it runs (a file: the crash test counts across processes).
RUNS_FILE = os.environ.get("LG_TOOL_RUNS_FILE")


@tool
def get_weather(city: str) -> str:
    """The weather in a city (canned)."""
    return f"sunny and 21 °C in {city}"


@tool
def charge(amount: int) -> str:
    """Charges a card (a side effect: noted in RUNS_FILE; sleeps when LG_TOOL_SLEEP is set)."""
    if RUNS_FILE:
        with open(RUNS_FILE, "a") as runs:
            runs.write(f"charge {amount}\n")
    print("tool started", flush=True)
    time.sleep(float(os.environ.get("LG_TOOL_SLEEP", "0")))
    return f"charged {amount}"


def scripted(tool_name: str, arguments: dict[str, Any], answer: str, call_id: str) -> FakeMessagesListChatModel:
    """A model that asks for one tool call, then answers (new message objects each time)."""
    return FakeMessagesListChatModel(responses=[
        AIMessage(content="", tool_calls=[{"name": tool_name, "args": arguments, "id": call_id}]),
        AIMessage(content=answer),
    ])


def agent_graph(saver: Any, model: Any, tools: list[Any], durable: bool = False) -> Any:
    def agent(state: MessagesState) -> dict[str, Any]:
        MODEL_INPUTS.append(list(state["messages"]))
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", durable_tool_node(tools, saver) if durable else ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def main(argv: list[str]) -> None:
    """`python lg_agents.py TRANSPORT WHERE CREDENTIAL THREAD`: asks for a charge and runs
    the durable tool node until the tool (sleeping) is killed."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import lg_graph

    transport, where, credential, thread = argv
    client = lg_graph.sync_client(transport, where, credential)
    saver = BerthSaver(client)
    model = scripted("charge", {"amount": 42}, "Charged.", "call-charge")
    graph = agent_graph(saver, model, [charge], durable=True)
    graph.invoke({"messages": [HumanMessage("Charge my card 42.")]}, {"configurable": {"thread_id": thread}})
    print("finished", flush=True)  # not reached: the parent kills this process mid-tool


if __name__ == "__main__":
    main(sys.argv[1:])
