"""What a chat turn and a service object per request cost (issue 53): a `Runner` turn on a
kept service makes its two appends and nothing else durable; a request's service object
(`BerthSessionService(client)`, one turn, `close()`) hands its run, its turn closed, to
the next request's object of the process on the same session and client instead of a
detach and a `resume` — two durable writes a request, not four. A handed-on run is never
used by two live objects; a killed process's idle run stays attached until its lease
lapses, then another process takes the session over. On a real `berth serve` and
embedded."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, AsyncGenerator

import pytest
from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

import berth
from berth.integrations._runpool import POOL
from berth.integrations.adk import BerthSessionService, session_berth_id
from conftest import CONNECT
from dropin_count import count_calls, durable_writes

BERTH_ID = session_berth_id("app", "u", "chat")


class Echo(BaseLlm):
    """Answers each message in text (one model call a turn)."""

    async def generate_content_async(self, llm_request: Any, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        text = llm_request.contents[-1].parts[0].text
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=f"re: {text}")]))


async def turn(service: BerthSessionService, n: int) -> None:
    """One chat turn through a `Runner`: the user's message and the model's answer."""
    runner = Runner(agent=LlmAgent(name="chat", model=Echo(model="echo")), app_name="app", session_service=service)
    message = types.Content(role="user", parts=[types.Part(text=f"q{n}")])
    async for _ in runner.run_async(user_id="u", session_id="chat", new_message=message):
        pass


def request(client: berth.Client, n: int, **options: Any) -> None:
    """A web request: a service object of its own, one turn, closed."""
    service = BerthSessionService(client, **options)
    try:
        asyncio.run(turn(service, n))
    finally:
        service.close()


def started(client: berth.Client) -> None:
    service = BerthSessionService(client)
    asyncio.run(service.create_session(app_name="app", user_id="u", session_id="chat"))
    service.close()


def runs_of(client: berth.Client) -> list[str]:
    return [run.run_id for run in client.get_session(BERTH_ID).runs]


def test_request_services_hand_their_run_on(adk_place: Any) -> None:
    client = adk_place.client()
    counts = count_calls(client)
    started(client)
    # A new session: created, its run resumed (and the record read again: may it be
    # handed on?), the create event appended; nothing detached.
    assert counts["create"] == 1 and counts["resume"] == 1 and counts["detach"] == 0, counts
    for n in range(4):
        counts.clear()
        request(client, n)
        # The idle run taken (the record, the log's end), the session read (its index
        # item, the tail, app: and user: state), the user's and the model's events
        # appended. No resume, no detach: two durable writes.
        assert counts == {"get_session": 1, "read": 2, "memory_get": 1, "search": 2, "append": 2}, counts
        assert durable_writes(counts) == 2
    events = client.read(BERTH_ID).events
    assert len({event.run for event in events}) == 1
    assert [event.data["turn"] for event in events if event.type == "turn/start"] == list(range(4))
    assert len(runs_of(client)) == 1  # idle, for the next request
    POOL.release_all()
    assert runs_of(client) == []


def test_without_hand_on_a_request_resumes_and_detaches(adk_place: Any) -> None:
    client = adk_place.client()
    started(client)
    POOL.release_all()
    counts = count_calls(client)
    for n in range(2):
        counts.clear()
        request(client, n, hand_on=False)
        assert counts == {"resume": 1, "memory_get": 1, "read": 1, "search": 2, "append": 2, "detach": 1}, counts
        assert durable_writes(counts) == 4
        assert runs_of(client) == []  # detached by the time `close()` returned


def test_a_chat_turn_on_a_kept_service_writes_its_events_only(adk_place: Any) -> None:
    client = adk_place.client()
    started(client)
    service = BerthSessionService(client)
    asyncio.run(turn(service, 0))
    counts = count_calls(client)
    for n in range(1, 4):
        counts.clear()
        asyncio.run(turn(service, n))
        # The session checked from the events kept (its index item, the log's newest
        # page, app: and user: state) and the two appends.
        assert counts == {"memory_get": 1, "read": 1, "search": 2, "append": 2}, counts
        assert durable_writes(counts) == 2
    service.close()
    POOL.release_all()


def test_a_handed_on_run_is_never_used_by_two_live_objects(adk_place: Any) -> None:
    client = adk_place.client()
    started(client)
    [idle] = runs_of(client)
    first, second = BerthSessionService(client), BerthSessionService(client)
    asyncio.run(turn(first, 0))
    assert first._held(BERTH_ID).run_id == idle  # taken from the pool
    # While `first` is live, `second` finds no idle run: it resumes a run of its own.
    asyncio.run(turn(second, 1))
    ours = second._held(BERTH_ID).run_id
    assert ours != idle and sorted(runs_of(client)) == sorted([idle, ours])
    # `second`'s resume saw `first`'s run attached: its run is never handed on.
    second.close()
    assert runs_of(client) == [idle]
    # `first`'s run is handed on, but `second` wrote after its last append: the next
    # object detaches it and resumes.
    first.close()
    counts = count_calls(client)
    request(client, 2)
    assert counts["resume"] == 1 and counts["detach"] == 1, counts
    [handed] = runs_of(client)
    assert handed not in (idle, ours)
    POOL.release_all()
    assert runs_of(client) == []


def test_a_run_with_a_write_in_flight_is_not_handed_on(adk_place: Any) -> None:
    client = adk_place.client()
    started(client)
    service = BerthSessionService(client)
    session = asyncio.run(service.get_session(app_name="app", user_id="u", session_id="chat"))
    hold = service._held(BERTH_ID)
    with hold.writing():  # an append on its way when `close()` comes
        service.close()
        # Detached, not handed on: the next object could take it while the append lands.
        assert runs_of(client) == []
    with pytest.raises(berth.OwnershipLost):
        with hold.writing():
            pass
    # An append of the closed object's copy attaches a run of its own.
    event = Event(invocation_id="late", author="user", timestamp=time.time(),
                  content=types.Content(role="user", parts=[types.Part(text="late")]))
    asyncio.run(service.append_event(session, event))
    assert service._held(BERTH_ID).run_id != hold.run_id
    service.close()
    POOL.release_all()


def test_an_open_turn_is_not_handed_on(adk_place: Any) -> None:
    client = adk_place.client()
    started(client)
    service = BerthSessionService(client)
    session = asyncio.run(service.get_session(app_name="app", user_id="u", session_id="chat"))
    event = Event(invocation_id="unanswered", author="user", timestamp=time.time(),
                  content=types.Content(role="user", parts=[types.Part(text="are you there?")]))
    asyncio.run(service.append_event(session, event))  # its turn stays open
    service.close()
    assert runs_of(client) == []
    # The next object resumes, and the repair ends the turn the closed object left open.
    request(client, 1)
    ends = [event.data["reason"] for event in client.read(BERTH_ID).events if event.type == "turn/end"]
    assert ends == ["interrupted", "completed"], ends
    POOL.release_all()


def test_a_run_is_not_handed_on_past_another_runs_events(adk_place: Any) -> None:
    client = adk_place.client()
    started(client)
    request(client, 0)
    [idle] = runs_of(client)
    # Another process opens a turn and goes away without closing it.
    other = adk_place.client()
    run_id = other.attach(BERTH_ID).run.run_id
    other.append(BERTH_ID, [("turn/start", {"turn": 7}), ("user/message", {"content": "left open"})], run=run_id)
    other.detach(BERTH_ID, run_id)
    counts = count_calls(client)
    request(client, 1)
    # The idle run detached, a new one resumed (repairing that turn) before the read.
    assert counts["resume"] == 1 and counts["detach"] == 1, counts
    events = client.read(BERTH_ID).events
    assert [event.data["reason"] for event in events if event.type == "turn/end" and event.run == run_id] == [
        "interrupted"]
    assert idle not in runs_of(client)
    POOL.release_all()
    assert runs_of(client) == []


CHILD = CONNECT + '''
import asyncio, sys
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types
from berth.integrations.adk import BerthSessionService

class Echo(BaseLlm):
    async def generate_content_async(self, llm_request, stream=False):
        text = llm_request.contents[-1].parts[0].text
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=f"re: {text}")]))

async def main():
    client = connect(sys.argv[1:4])
    for n in range(2):  # two requests, a service object each
        service = BerthSessionService(client, run_lease_ttl_ms=int(sys.argv[4]))
        if n == 0:
            await service.create_session(app_name="app", user_id="u", session_id="chat")
        runner = Runner(agent=LlmAgent(name="chat", model=Echo(model="echo")), app_name="app", session_service=service)
        message = types.Content(role="user", parts=[types.Part(text=f"q{n}")])
        async for _ in runner.run_async(user_id="u", session_id="chat", new_message=message):
            pass
        service.close()
    print("ready", flush=True)
    if sys.argv[5] == "wait":
        await asyncio.sleep(120)
    # else exit, the client left open: the idle run is detached at exit.

asyncio.run(main())
'''

LEASE_MS = 1_500


def _wait_until(check: Any, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def test_a_killed_processs_idle_run_lapses_and_another_process_takes_over(adk_place: Any, tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen([sys.executable, str(script), *adk_place.child_args(), str(LEASE_MS), "wait"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready", child.stderr.read()
        child.kill()
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    client = adk_place.client()
    # The killed process's idle run stays attached: nothing released it.
    [dead] = client.get_session(BERTH_ID).runs
    _wait_until(lambda: all(run.lease_until < time.time() * 1000 for run in client.get_session(BERTH_ID).runs),
                "the killed process's run lease lapsed")
    counts = count_calls(client)
    request(client, 2, run_lease_ttl_ms=LEASE_MS)
    # This process resumes (its turns were closed: nothing to repair) and goes on.
    assert counts["resume"] == 1, counts
    events = client.read(BERTH_ID).events
    assert not [event for event in events if event.type == "turn/end" and event.data["reason"] != "completed"]
    assert [event.data["turn"] for event in events if event.type == "turn/start"] == [0, 1, 2]
    assert dead.run_id not in runs_of(client)
    # And its own next request takes the run it handed on.
    counts.clear()
    request(client, 3, run_lease_ttl_ms=LEASE_MS)
    assert counts["resume"] == 0 and counts["detach"] == 0, counts
    POOL.release_all()
    assert runs_of(client) == []


def test_a_process_that_exits_leaves_no_idle_run(adk_place: Any, tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    done = subprocess.run([sys.executable, str(script), *adk_place.child_args(), str(30_000), "exit"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ready", done.stderr
    assert adk_place.client().get_session(BERTH_ID).runs == []
