"""Old layouts keep reading (issue 52, item 7): ADK sessions written by the drop-in of berth
main at ca6ed18 — turns numbered by the log's seq, a function call's ADK event in its
first `tool/call`, thoughts in the message's text, a crash repaired by berth, the title a
JSON triple — exported into fixtures/ by its `capture.py` (the session's JSONL and its
memory items). Each is imported into a fresh store on both transports: today's
`BerthSessionService` answers exactly what that code did (events, state, user state,
listing, the filters), a new invocation goes on from it, and berth's readers render it."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, AsyncGenerator

import pytest

from google.adk.events.event import Event
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from berth.integrations.adk import LABEL, BerthSessionService, session_berth_id
from readers import inspector_page, listed, transcript

FIXTURES = Path(__file__).resolve().parent / "fixtures"
NAMES = ["example-runner", "direct-events", "crash-repaired"]


def load(place: Any, name: str) -> tuple[dict[str, Any], str, Any]:
    """Imports fixture `name` (its session and memory items) into the place's tenant: its
    expectations, berth id and a client."""
    expect = json.loads((FIXTURES / f"{name}.expect.json").read_text())
    client = place.client()
    # The export names its tenant (acme): the copy imported is the place's tenant's.
    first, _, events = (FIXTURES / f"{name}.jsonl").read_bytes().partition(b"\n")
    head = json.loads(first)
    head["header"]["scope"]["tenant"] = place.tenant
    # Created now: berth's sweep removes a session still being created (as an import is)
    # whose `created_at` is over an hour old as a crash's abandoned create, and a store
    # just opened sweeps at once (nothing the drop-in reads depends on this time).
    head["header"]["created_at"] = int(time.time() * 1000)
    imported = client.import_sessions(json.dumps(head).encode() + b"\n" + events)
    berth_id = session_berth_id(expect["app"], expect["user"], expect["session_id"])
    assert [session.id for session in imported.sessions] == [berth_id]
    # One memory export per prefix, each after its own header line.
    chunk: list[bytes] = []
    for line in (FIXTURES / f"{name}.memory.jsonl").read_bytes().splitlines(keepends=True):
        if line.startswith(b'{"berth_memory_export"') and chunk:
            client.memory_import(b"".join(chunk))
            chunk = []
        chunk.append(line)
    client.memory_import(b"".join(chunk))
    return expect, berth_id, client


def dumped(events: list[Event]) -> list[dict[str, Any]]:
    return [event.model_dump(mode="json", exclude_none=True) for event in events]


async def read_back(service: BerthSessionService, expect: dict[str, Any]) -> None:
    where = {"app_name": expect["app"], "user_id": expect["user"], "session_id": expect["session_id"]}
    got = await service.get_session(**where)
    assert got is not None
    assert dumped(got.events) == expect["events"]
    assert got.state == expect["state"] and got.last_update_time == expect["last_update_time"]
    assert await service.get_user_state(app_name=expect["app"], user_id=expect["user"]) == expect["user_state"]
    listed_now = (await service.list_sessions(app_name=expect["app"])).sessions
    assert [[s.user_id, s.id, s.state, s.last_update_time] for s in listed_now] == expect["listed"]
    last2 = await service.get_session(**where, config=GetSessionConfig(num_recent_events=2))
    assert last2 is not None and dumped(last2.events) == expect["events"][-2:]
    middle = expect["events"][len(expect["events"]) // 2]["timestamp"]
    after = await service.get_session(**where, config=GetSessionConfig(after_timestamp=middle))
    assert after is not None
    assert dumped(after.events) == [event for event in expect["events"] if event["timestamp"] >= middle]


@pytest.mark.parametrize("name", NAMES)
async def test_an_old_session_reads_as_it_did(adk_place: Any, name: str) -> None:
    expect, _, client = load(adk_place, name)
    # Twice from a fresh object (the first resumes and reads the whole log; the second
    # keeps no events), then again from the first (from the events it keeps).
    with BerthSessionService(client) as service:
        await read_back(service, expect)
        with BerthSessionService(client, events_cache_bytes=0) as keeps_none:
            await read_back(keeps_none, expect)
        await read_back(service, expect)


@pytest.mark.parametrize("name", NAMES)
def test_berths_readers_render_an_old_session(adk_place: Any, name: str) -> None:
    expect, berth_id, _ = load(adk_place, name)
    shown = transcript(adk_place, berth_id)
    for event in expect["events"]:
        parts = (event.get("content") or {}).get("parts", [])
        # The old layout stored an event with calls as its `tool/call`s only: the text
        # beside them ("Checking both.") is in the ADK event, which readers do not show.
        calls = [part["function_call"] for part in parts if part.get("function_call")]
        for part in parts:
            if part.get("text") and not calls:
                assert part["text"] in shown, (part["text"], shown)
        for call in calls:
            if call.get("id"):  # an id-less call was an ignorable `adk/event`
                assert f'{call["name"]} {call["id"]}' in shown, (call, shown)
    # Messages read as their text, never as the ADK event's JSON.
    for line in shown.splitlines():
        if "/message" in line.split(":")[0]:
            assert '"adk"' not in line and '"parts"' not in line, line
    assert berth_id in listed(adk_place, LABEL)  # a conversation: listed without --all
    if adk_place.transport == "http":
        page = inspector_page(adk_place, berth_id)
        for event in expect["events"]:
            if event["author"] == "user":
                for part in (event.get("content") or {}).get("parts", []):
                    assert not part.get("text") or part["text"] in page, part["text"]


async def test_a_new_invocation_continues_an_old_session(adk_place: Any) -> None:
    """A `Runner` with today's drop-in on the old example's session: the model sees the
    old conversation, and the new turn is numbered after the old ones."""
    from google.adk.agents import Agent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner

    expect, berth_id, client = load(adk_place, "example-runner")
    seen: list[Any] = []

    class Scripted(BaseLlm):
        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
            seen.append(list(llm_request.contents))
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="Still sunny.")]))

    agent = Agent(name="forecaster", model=Scripted(model="scripted"))
    old_end = client.get_session(berth_id).event_count
    with BerthSessionService(client) as service:
        runner = Runner(agent=agent, app_name="weather", session_service=service)
        message = types.Content(role="user", parts=[types.Part(text="And tomorrow?")])
        async for _ in runner.run_async(user_id="alice", session_id="weather-1", new_message=message):
            pass
        got = await service.get_session(app_name="weather", user_id="alice", session_id="weather-1")
    assert got is not None and dumped(got.events[: len(expect["events"])]) == expect["events"]
    texts = [part.text for content in seen[0] for part in content.parts if part.text]
    assert texts.count("What's the weather in Paris?") == 2 and texts[-1] == "And tomorrow?"
    events = client.read(berth_id).events
    old_turns = [event.data["turn"] for event in events if event.type == "turn/start" and event.seq < old_end]
    new_turns = [event.data["turn"] for event in events if event.type == "turn/start" and event.seq >= old_end]
    assert new_turns == [max(old_turns) + 1], (old_turns, new_turns)
    assert events[-2].type == "turn/end" and events[-2].data == {"turn": new_turns[0], "reason": "completed"}
    assert "Still sunny." in transcript(adk_place, berth_id)


def test_the_fixtures_are_small_and_complete() -> None:
    for name in NAMES:
        assert (FIXTURES / f"{name}.jsonl").stat().st_size < 24 * 1024
        expect = json.loads((FIXTURES / f"{name}.expect.json").read_text())
        assert set(expect) == {"app", "user", "session_id", "events", "state", "last_update_time", "user_state",
                               "listed"}
    assert (FIXTURES / "capture.py").exists()
