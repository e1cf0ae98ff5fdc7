"""A graph whose state holds a Pydantic model, under `LANGGRAPH_STRICT_MSGPACK=true`, on
`InMemorySaver`, `BerthSaver` and `AsyncBerthSaver` side by side (the child process of
`test_langgraph_saver.py::test_strict_msgpack_allowlist_as_in_memory_saver`: the
variable is read when LangGraph is imported, as a user sets it).

`StateGraph.compile` hands the graph a copy of the saver from `with_allowlist`, whose
serde also loads the state's own types. Printed as JSON, per saver: the type the graph's
`get_state` gives back for the model (through the copy), the type the saver itself
(strict, no allowlist) loads it as, and whether the graph got a copy.

`python lg_strict.py TRANSPORT WHERE CREDENTIAL THREAD`
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any, TypedDict

import pydantic

assert os.environ.get("LANGGRAPH_STRICT_MSGPACK") == "true", "run me with LANGGRAPH_STRICT_MSGPACK=true"

from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

import lg_graph  # noqa: E402
from berth.integrations.langgraph import AsyncBerthSaver, BerthSaver  # noqa: E402


class Item(pydantic.BaseModel):
    name: str
    count: int


class State(TypedDict):
    item: Item


def bump(state: State) -> dict[str, Any]:
    return {"item": Item(name=state["item"].name, count=state["item"].count + 1)}


def build(checkpointer: Any) -> Any:
    graph = StateGraph(State)
    graph.add_node("bump", bump)
    graph.add_edge(START, "bump")
    graph.add_edge("bump", END)
    return graph.compile(checkpointer=checkpointer)


def seen(graph: Any, saver: Any, through_graph: Any, through_saver: Any) -> dict[str, Any]:
    item = through_saver.checkpoint["channel_values"]["item"]
    return {
        "graph": type(through_graph).__name__,
        "graph_value": through_graph.model_dump() if isinstance(through_graph, pydantic.BaseModel) else through_graph,
        "saver": type(item).__name__,
        "copied": graph.checkpointer is not saver,
    }


def run_sync(saver: Any, thread: str) -> dict[str, Any]:
    graph = build(saver)
    config = {"configurable": {"thread_id": thread}}
    graph.invoke({"item": Item(name="x", count=1)}, config)
    return seen(graph, saver, graph.get_state(config).values["item"], saver.get_tuple(config))


async def run_async(saver: Any, thread: str) -> dict[str, Any]:
    graph = build(saver)
    config = {"configurable": {"thread_id": thread}}
    await graph.ainvoke({"item": Item(name="x", count=1)}, config)
    state = await graph.aget_state(config)
    return seen(graph, saver, state.values["item"], await saver.aget_tuple(config))


async def berth_async(transport: str, where: str, credential: str, thread: str) -> dict[str, Any]:
    client = lg_graph.async_client(transport, where, credential)
    async with AsyncBerthSaver(client) as saver:
        found = await run_async(saver, thread)
    await client.close()
    return found


def main(argv: list[str]) -> None:
    transport, where, credential, thread = argv
    found = {"memory": run_sync(InMemorySaver(), thread)}
    client = lg_graph.sync_client(transport, where, credential)
    with BerthSaver(client) as saver:
        found["berth-sync"] = run_sync(saver, f"{thread}-sync")
    client.close()
    found["berth-async"] = asyncio.run(berth_async(transport, where, credential, f"{thread}-async"))
    print(json.dumps(found))


if __name__ == "__main__":
    main(sys.argv[1:])
