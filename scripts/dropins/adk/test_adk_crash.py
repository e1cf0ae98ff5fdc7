"""Crashes: a process dies while a tool runs; a server dies between an event and its
carried state writes.

1. A child process runs a real ADK `Runner` (a scripted model, no network) on
   BerthSessionService: the model asks for `charge_card`; ADK appends the function-call
   event, then runs the tool, which signals that it started and hangs; the parent
   SIGKILLs the child. The next service object (once the dead run's lease lapsed)
   resumes the session: `get_session` shows the call followed by a function response
   saying its outcome is unknown, and berth's log holds the repair. With
   InMemorySessionService the whole session dies with the process. And with the next
   process's `Runner` (with `before_tool_recorder` installed in the killed one, or not):
   its model's input carries that function response, then the new message.
2. `berth serve` is SIGKILLed after the log append of an event whose delta has `user:`
   and `app:` keys, before the carried writes are applied (berth's test hook
   `BERTH_TEST_PAUSE_CARRIED`): after the restart both the event and its state are there.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

import berth
from berth.integrations.adk import BerthSessionService, session_berth_id
from conftest import CONNECT, Server
from dropin_kill import kill_when

LEASE_MS = 800

CHILD = CONNECT + '''
import asyncio, sys, time
from typing import AsyncGenerator
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types
from berth.integrations.adk import BerthSessionService

marker = sys.argv[4]

class Scripted(BaseLlm):
    async def generate_content_async(self, llm_request, stream=False) -> AsyncGenerator[LlmResponse, None]:
        call = types.FunctionCall(id="call-charge-1", name="charge_card", args={"amount": 5})
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))

def charge_card(amount: int) -> str:
    """Charges the customer's card."""
    open(marker, "w").write("started")
    time.sleep(120)
    return "charged"

async def main():
    service = BerthSessionService(connect(sys.argv[1:4]), run_lease_ttl_ms=int(sys.argv[5]))
    agent = LlmAgent(name="shop", model=Scripted(model="scripted"), tools=[charge_card])
    runner = Runner(agent=agent, app_name="shop", session_service=service)
    await service.create_session(app_name="shop", user_id="u1", session_id="crash")
    message = types.Content(role="user", parts=[types.Part(text="charge me 5")])
    async for _ in runner.run_async(user_id="u1", session_id="crash", new_message=message):
        pass

asyncio.run(main())
'''


def test_a_tool_that_was_running_is_repaired_on_resume(adk_place: Any, tmp_path: Path) -> None:
    marker = tmp_path / "tool-started"
    _kill_mid_tool(CHILD, adk_place, marker)
    time.sleep(LEASE_MS / 1000 + 0.3)  # the dead process's run lease lapses

    client = adk_place.client()
    with BerthSessionService(client) as service:
        got = asyncio.run(service.get_session(app_name="shop", user_id="u1", session_id="crash"))
        assert got is not None
        calls = [(e.author, [(c.id, c.name, c.args) for c in e.get_function_calls()]) for e in got.events]
        assert calls[1] == ("shop", [("call-charge-1", "charge_card", {"amount": 5})]), calls
        assert got.events[0].content.parts[0].text == "charge me 5"
        repaired = got.events[2].get_function_responses()
        assert [(r.id, r.name) for r in repaired] == [("call-charge-1", "charge_card")], got.events
        assert "outcome is unknown" in repaired[0].response["error"]
        assert repaired[0].response["code"] == "TOOL_OUTCOME_UNKNOWN"
        assert got.events[2].author == "shop" and got.events[2].invocation_id == got.events[1].invocation_id
        assert len(got.events) == 3
        # The repair alone, from the events this object keeps, and read from the log by
        # an object that keeps none (its call read again, beyond the pages read).
        with BerthSessionService(client, events_cache_bytes=0) as keeps_none:
            for reader in (service, keeps_none):
                last = asyncio.run(reader.get_session(app_name="shop", user_id="u1", session_id="crash",
                                                      config=GetSessionConfig(num_recent_events=1)))
                assert last is not None and last.events == got.events[2:], last
        # The session goes on from there (the repair did not leave the copy stale).
        follow = Event(invocation_id="inv-2", author="user", timestamp=time.time(),
                       content=types.Content(role="user", parts=[types.Part(text="did it go through?")]))
        asyncio.run(service.append_event(got, follow))
    events = client.read(session_berth_id("shop", "u1", "crash")).events
    closers = [event for event in events if event.type == "tool/result" and "adk" not in event.data]
    assert [event.data["error"]["code"] for event in closers] == ["TOOL_OUTCOME_UNKNOWN"]
    assert any(event.type == "turn/end" and event.data["reason"] == "interrupted" for event in events)


NEXT = CONNECT + '''
import asyncio, json, sys
from typing import AsyncGenerator
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types
from berth.integrations.adk import BerthSessionService

seen_path = sys.argv[4]

class Recording(BaseLlm):
    """Writes down what it is asked (the model's input), answers in text."""
    async def generate_content_async(self, llm_request, stream=False) -> AsyncGenerator[LlmResponse, None]:
        with open(seen_path, "w") as seen:
            json.dump([c.model_dump(mode="json", exclude_none=True) for c in llm_request.contents], seen)
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="I will check the charge.")]))

def charge_card(amount: int) -> str:
    """Charges the customer's card."""
    return "charged"

async def main():
    with BerthSessionService(connect(sys.argv[1:4])) as service:
        agent = LlmAgent(name="shop", model=Recording(model="recording"), tools=[charge_card])
        runner = Runner(agent=agent, app_name="shop", session_service=service)
        message = types.Content(role="user", parts=[types.Part(text="did it go through?")])
        async for _ in runner.run_async(user_id="u1", session_id="crash", new_message=message):
            pass

asyncio.run(main())
'''


@pytest.mark.parametrize("recorder", [False, True], ids=["runner", "with-recorder"])
def test_the_next_process_model_is_told_the_outcome_is_unknown(adk_place: Any, tmp_path: Path, recorder: bool) -> None:
    """A child `Runner` (with `before_tool_recorder(service)` as its agent's before-tool
    callback, or without) is SIGKILLed while its tool runs; the next process's `Runner`
    on the same session sends its model the call followed by ADK's function response
    for it, saying its outcome is unknown, then the new message. The log holds one
    `tool/call` for the call, the repair (its result, the step's and the turn's ends),
    and the next invocation as turn 1."""
    marker, seen = tmp_path / "tool-started", tmp_path / "model-input.json"
    child_code = CHILD.replace("tools=[charge_card])", "tools=[charge_card], before_tool_callback=recorder)")
    child_code = child_code.replace("    agent = LlmAgent(", "    recorder = before_tool_recorder(service)\n    agent = LlmAgent(")
    child_code = child_code.replace("from berth.integrations.adk import BerthSessionService",
                                    "from berth.integrations.adk import BerthSessionService, before_tool_recorder")
    _kill_mid_tool(child_code if recorder else CHILD, adk_place, marker)
    time.sleep(LEASE_MS / 1000 + 0.3)  # the dead process's run lease lapses
    done = subprocess.run([sys.executable, "-c", NEXT, *adk_place.child_args(), str(seen)], capture_output=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    contents = json.loads(seen.read_text())
    parts = [(content["role"], part) for content in contents for part in content["parts"]]
    assert parts[0] == ("user", {"text": "charge me 5"})
    assert parts[1] == ("model", {"function_call": {"id": "call-charge-1", "args": {"amount": 5}, "name": "charge_card"}})
    role, answered = parts[2]
    assert role == "user" and answered["function_response"]["id"] == "call-charge-1"
    assert answered["function_response"]["name"] == "charge_card"
    assert answered["function_response"]["response"]["code"] == "TOOL_OUTCOME_UNKNOWN"
    assert "outcome is unknown" in answered["function_response"]["response"]["error"]
    assert parts[-1] == ("user", {"text": "did it go through?"}) and len(parts) == 4
    events = adk_place.client().read(session_berth_id("shop", "u1", "crash")).events
    assert [event.data["call_id"] for event in events if event.type == "tool/call"] == ["call-charge-1"]
    kinds = [event.type for event in events if event.type != "session/memory"]
    assert kinds == ["adk/create", "turn/start", "user/message", "step/start", "assistant/message", "tool/call",
                     "tool/result", "step/end", "turn/end",
                     "turn/start", "user/message", "step/start", "assistant/message", "step/end", "turn/end"], kinds
    closers = [event for event in events if event.type in ("tool/result", "step/end", "turn/end")][:3]
    assert [closer.data.get("error", {}).get("code") or closer.data.get("reason") for closer in closers] == [
        "TOOL_OUTCOME_UNKNOWN", None, "interrupted"]
    assert [event.data["turn"] for event in events if event.type == "turn/start"] == [0, 1]


def _kill_mid_tool(code: str, place: Any, marker: Path) -> None:
    """Runs the child `code` and SIGKILLs it once its tool has started (`marker`)."""
    kill_when([sys.executable, "-c", code, *place.child_args(), str(marker), str(LEASE_MS)], marker.exists,
              what="the start of its tool", timeout_s=60)


def test_a_server_crash_between_an_event_and_its_state_loses_neither(tmp_path: Path) -> None:
    pause = tmp_path / "paused"
    server = Server(tmp_path / "data", ["--rate-per-tenant", "0"])
    key = server.key("crash", "agent", "service")
    server.start()
    try:
        with berth.Client(server.url, api_key=key) as client, BerthSessionService(client) as service:
            asyncio.run(service.create_session(app_name="shop", user_id="u1", session_id="s1"))
        server.stop()
        os.environ["BERTH_TEST_PAUSE_CARRIED"] = str(pause)
        try:
            server.start()  # with the hook: a carried append pauses after its log append
        finally:
            del os.environ["BERTH_TEST_PAUSE_CARRIED"]
        failure: list[BaseException] = []
        with berth.Client(server.url, api_key=key, retries=0) as client:
            service = BerthSessionService(client)
            session = asyncio.run(service.get_session(app_name="shop", user_id="u1", session_id="s1"))
            event = Event(id="e1", invocation_id="inv-1", author="agent", timestamp=1_700_000_001.0,
                          content=types.Content(role="model", parts=[types.Part(text="noted")]),
                          actions=EventActions(state_delta={"user:plan": "pro", "app:seen": 1, "n": 1}))
            worker = threading.Thread(
                target=_catch, args=(lambda: asyncio.run(service.append_event(session, event)), failure), daemon=True)
            worker.start()
            deadline = time.monotonic() + 30
            while not pause.exists():
                assert time.monotonic() < deadline, "the server never reached the carried-write pause"
                time.sleep(0.02)
            server.kill()  # after the log append, before the writes are applied
            worker.join(30)
            service._finalizer.detach()  # its runs died with the server's answer
        assert failure and isinstance(failure[0], berth.BerthError), failure
        server.start()  # without the hook now
        with berth.Client(server.url, api_key=key) as client, BerthSessionService(client) as service:
            got = asyncio.run(service.get_session(app_name="shop", user_id="u1", session_id="s1"))
            assert [e.id for e in got.events] == ["e1"]
            assert got.state == {"user:plan": "pro", "app:seen": 1, "n": 1}
            assert asyncio.run(service.get_user_state(app_name="shop", user_id="u1")) == {"plan": "pro"}
            listed = asyncio.run(service.list_sessions(app_name="shop")).sessions
            assert [(s.id, s.state, s.last_update_time) for s in listed] == [
                ("s1", {"user:plan": "pro", "app:seen": 1, "n": 1}, 1_700_000_001.0)]
    finally:
        server.stop()


def _catch(fn: Any, into: list[BaseException]) -> None:
    try:
        fn()
    except BaseException as error:  # noqa: BLE001 - recorded for the test
        into.append(error)
