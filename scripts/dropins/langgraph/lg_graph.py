"""The graph the drop-in tests run: START → a → ask (`interrupt()`) → b → END over a
`messages` channel (`add_messages`), and the child-process entry that runs it up to the
interrupt with a saver of its own, then exits (releasing its run)."""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt

import berth
from berth.integrations.langgraph import AsyncBerthSaver, BerthSaver


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    trail: list[str]


def node_a(state: State) -> dict[str, Any]:
    return {"trail": [*state.get("trail", []), "a"], "messages": [AIMessage(content="a ran")]}


def node_ask(state: State) -> dict[str, Any]:
    answer = interrupt("continue?")
    return {"trail": [*state["trail"], f"human:{answer}"], "messages": [HumanMessage(content=str(answer))]}


def node_b(state: State) -> dict[str, Any]:
    return {"trail": [*state["trail"], "b"], "messages": [AIMessage(content="b ran")]}


def build(checkpointer: Any) -> Any:
    graph = StateGraph(State)
    graph.add_node("a", node_a)
    graph.add_node("ask", node_ask)
    graph.add_node("b", node_b)
    graph.add_edge(START, "a")
    graph.add_edge("a", "ask")
    graph.add_edge("ask", "b")
    graph.add_edge("b", END)
    return graph.compile(checkpointer=checkpointer)


def put_list(saver: BerthSaver, thread: str, items: list[Any], parent: str | None) -> str:
    """Stores a checkpoint whose `items` channel is `items` (a child of `parent`); its id."""
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(len(items), None)
    checkpoint["channel_values"] = {"items": list(items)}
    checkpoint["channel_versions"] = {"items": version}
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if parent:
        config["configurable"]["checkpoint_id"] = parent
    return saver.put(config, checkpoint, {"step": len(items)}, {"items": version})["configurable"]["checkpoint_id"]


def sync_client(transport: str, where: str, credential: str) -> berth.Client:
    if transport == "http":
        return berth.Client(where, api_key=credential)
    return berth.open(where, tenant=credential, user="agent", role="service")


def async_client(transport: str, where: str, credential: str) -> berth.AsyncClient:
    if transport == "http":
        return berth.AsyncClient(where, api_key=credential)
    return berth.open_async(where, tenant=credential, user="agent", role="service")


async def _run_async(transport: str, where: str, credential: str, thread: str) -> Any:
    client = async_client(transport, where, credential)
    async with AsyncBerthSaver(client) as saver:
        result = await build(saver).ainvoke({"messages": [HumanMessage(content="hi")], "trail": []},
                                            {"configurable": {"thread_id": thread}})
    await client.close()
    return result


def main(argv: list[str]) -> None:
    """`python lg_graph.py sync|async TRANSPORT WHERE CREDENTIAL THREAD`: runs to the interrupt."""
    mode, transport, where, credential, thread = argv
    if mode == "sync":
        client = sync_client(transport, where, credential)
        with BerthSaver(client) as saver:
            result = build(saver).invoke({"messages": [HumanMessage(content="hi")], "trail": []},
                                         {"configurable": {"thread_id": thread}})
        client.close()
    else:
        result = asyncio.run(_run_async(transport, where, credential, thread))
    assert "__interrupt__" in result, result
    print("interrupted", result["trail"])


if __name__ == "__main__":
    main(sys.argv[1:])
