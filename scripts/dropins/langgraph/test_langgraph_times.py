"""The times of the events the saver writes, on both transports, sync and async: a
tool-calling agent run with `saver.model_calls()`; every event a `put` writes (the
`lg/checkpoint` record and the conversation beside it: messages, tool calls and results,
turn and step markers) is at its checkpoint's own `ts`; a `put_writes`' events at the
time the writes were handed over (this process's clock, never before their checkpoint);
so a step's markers enclose the model calls that ran in it (a call's `time` is its end,
`time - latency_ms` its start), as the inspector's trace draws them."""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from berth.integrations.langgraph import AsyncBerthSaver, BerthSaver, thread_session_id

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import lg_agents  # noqa: E402


def _ms(ts: str) -> int:
    return (datetime.fromisoformat(ts) - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(milliseconds=1)


def _run(place: Any, flavour: str, thread: str) -> dict[str, int]:
    """Runs the agent (two model calls, a tool) on `thread`; its checkpoints' ts by id."""
    question = {"messages": [HumanMessage("Weather in Oslo?")]}
    config = {"configurable": {"thread_id": thread}}
    model = lg_agents.scripted("get_weather", {"city": "Oslo"}, "Sunny in Oslo.", "call-weather")
    if flavour == "sync":
        with BerthSaver(place.sync_client()) as saver:
            graph = lg_agents.agent_graph(saver, model, [lg_agents.get_weather])
            graph.invoke(question, {**config, "callbacks": [saver.model_calls()]})
            return {item.config["configurable"]["checkpoint_id"]: _ms(item.checkpoint["ts"])
                    for item in saver.list(config)}

    async def run() -> dict[str, int]:
        client = place.async_client()
        try:
            async with AsyncBerthSaver(client) as saver:
                graph = lg_agents.agent_graph(saver, model, [lg_agents.get_weather])
                await graph.ainvoke(question, {**config, "callbacks": [saver.model_calls()]})
                return {item.config["configurable"]["checkpoint_id"]: _ms(item.checkpoint["ts"])
                        async for item in saver.alist(config)}
        finally:
            await client.close()
    return asyncio.run(run())


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_events_take_their_checkpoints_times(lg_place: Any, flavour: str) -> None:
    ts = _run(lg_place, flavour, "timed")
    events = lg_place.sync_client().read(thread_session_id("timed"), limit=1000).events
    assert len(ts) >= 4 and events
    # Every event of a put at its checkpoint's ts: its record, and what came with it
    # (every event but the writes and the model calls); writes never before theirs.
    for event in events:
        if event.type == "lg/checkpoint":
            assert event.time == ts[event.data["id"]], event.data["id"]
        elif event.type == "lg/writes":
            assert event.time >= ts[event.data["cp"]], event.data["cp"]
        elif event.type != "model/call":
            assert event.time in ts.values(), (event.type, event.time)
    kinds = {event.type for event in events}
    assert {"turn/start", "step/start", "step/end", "turn/end", "user/message", "assistant/message", "tool/call",
            "tool/result", "lg/writes"} <= kinds, kinds
    assert [event.type for event in events].count("model/call") == 2
    # Each model call inside its step: the step's start before the call started, its end
    # after the call ended.
    for index, event in enumerate(events):
        if event.type != "model/call":
            continue
        started = event.time - float(event.data["latency_ms"])
        opened = [e for e in events[:index] if e.type == "step/start"][-1]
        closed = next(e for e in events[index:] if e.type == "step/end")
        assert opened.data["step"] == closed.data["step"]
        assert opened.time <= started + 1 and event.time <= closed.time, (opened.time, started, event.time,
                                                                          closed.time)
