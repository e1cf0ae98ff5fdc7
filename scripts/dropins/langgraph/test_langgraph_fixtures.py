"""Old layouts keep reading (issue 52, item 7): threads stored by the saver before it
wrote berth's conversation vocabulary (main at `ca6ed18`: `lg/*` events only — whole lists,
suffix deltas with `chain` and `full`, split values, interrupts, errors, subgraphs,
`Send`, the prune and drop-runs markers, a fork), exported into fixtures/ by
`fixtures/capture.py` with what LangGraph read of each. Each is imported into a fresh
store on both transports: today's savers read exactly the same (a cold `get_tuple`, the
list, the graph's state and history), berth's readers render it, and a new invocation
continues an old thread with the old history as the model's input."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

import berth
from berth.integrations.langgraph import LABEL, AsyncBerthSaver, BerthSaver, thread_session_id

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
sys.path[:0] = [str(HERE), str(FIXTURES)]
import capture  # noqa: E402
import fixture_view  # noqa: E402
import lg_readers  # noqa: E402

VIEWS: dict[str, Any] = json.loads((FIXTURES / "views.json").read_text())


def load(place: Any, thread: str) -> berth.Client:
    """Imports the fixture of `thread` into the place's tenant (the export names its
    tenant, acme: the copy imported is the place's)."""
    client = place.sync_client()
    first, _, events = (FIXTURES / f"{thread}.jsonl").read_bytes().partition(b"\n")
    head = json.loads(first)
    head["header"]["scope"]["tenant"] = place.tenant
    # Created now: berth's sweeper takes a session being imported (status `creating`)
    # whose header says it was created over an hour ago — every fixture's — for an
    # abandoned create and removes it mid-import (reported: berth-service's sweep.rs).
    # The events, all LangGraph reads, are the fixture's as they are.
    head["header"]["created_at"] = int(time.time() * 1000)
    imported = client.import_sessions(json.dumps(head).encode() + b"\n" + events)
    assert [session.id for session in imported.sessions] == [thread_session_id(thread)]
    return client


@pytest.mark.parametrize("thread", sorted(VIEWS))
async def test_an_old_thread_reads_as_it_did(lg_place: Any, thread: str) -> None:
    client = load(lg_place, thread)
    with BerthSaver(client) as saver:
        assert fixture_view.thread_view(saver, capture.BUILDS[thread], thread) == VIEWS[thread]
    async_client = lg_place.async_client()
    async with AsyncBerthSaver(async_client) as saver:
        config = {"configurable": {"thread_id": thread}}
        latest = await saver.aget_tuple(config)
        assert fixture_view.checkpoint_view(latest) == VIEWS[thread]["latest"]
        assert [fixture_view.digest(fixture_view.checkpoint_view(found))
                async for found in saver.alist(config)] == VIEWS[thread]["list"]
    await async_client.close()
    # berth's readers: the listing (the thread has no conversation events: blank), the
    # transcript and the inspector's page render it.
    session_id = thread_session_id(thread)
    assert thread in lg_readers.listed(lg_place, LABEL, "--all")
    text = lg_readers.transcript(lg_place, session_id)
    assert "lg/checkpoint" in text
    if lg_place.transport == "http":
        page = lg_readers.inspector_page(lg_place, session_id)
        assert thread in page and "lg/checkpoint" in page


def test_an_old_thread_continues(lg_place: Any) -> None:
    """The example's old thread, invoked again by today's saver: the model's input is
    the whole old conversation, and what the saver adds reads back with it."""
    client = load(lg_place, "weather")
    config = {"configurable": {"thread_id": "weather"}}
    before = VIEWS["weather"]["state"]["values"]["messages"]
    capture.weather.model.i = 0
    seen: list[int] = []
    agent = capture.weather.agent

    def counting(state: Any) -> Any:
        seen.append(len(state["messages"]))
        return agent(state)

    capture.weather.agent = counting
    try:
        with BerthSaver(client) as saver:
            graph = capture.weather.build().compile(checkpointer=saver)
            result = graph.invoke({"messages": [HumanMessage("And tomorrow?")]}, config)
    finally:
        capture.weather.agent = agent
    assert seen[0] == len(before) + 1  # the old history, then the new question
    assert len(result["messages"]) == len(before) + 4
    with BerthSaver(lg_place.sync_client()) as fresh:
        state = capture.BUILDS["weather"](fresh).get_state(config)
    assert [fixture_view.view(m) for m in state.values["messages"][: len(before)]] == before
    assert state.values["messages"][-1].content == "It is sunny and 21 °C in Paris."
