"""`before_tool_recorder(service)`: with ADK's Runner the call's event (appended before
its tool runs) already carries the `tool/call`, and the callback does nothing; a tool that
runs before its call's event was appended gets its `tool/call` from the callback, once,
and the repair of a crash then presents it in the call's invocation, as its agent."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from google.adk.events.event import Event
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from berth.integrations.adk import BerthSessionService, before_tool_recorder, session_berth_id

LEASE_MS = 800
T0 = 1_790_000_000.0
CALLS = [types.FunctionCall(id="call-1", name="charge_card", args={"amount": 5}),
         types.FunctionCall(id="call-2", name="email", args={"to": "bob"})]


def asked(*calls: types.FunctionCall, n: int = 2) -> Event:
    return Event(id=f"e{n}", invocation_id="inv-1", author="shop", timestamp=T0 + n,
                 content=types.Content(role="model", parts=[types.Part(function_call=call) for call in calls]))


def context(session: Any, call: types.FunctionCall) -> tuple[Any, dict[str, Any], Any]:
    """What ADK passes a before-tool callback (the fields the recorder reads)."""
    tool = SimpleNamespace(name=call.name)
    return tool, dict(call.args or {}), SimpleNamespace(session=session, function_call_id=call.id,
                                                        invocation_id="inv-1", agent_name="shop")


async def started(service: BerthSessionService, place: Any) -> Any:
    session = await service.create_session(app_name="shop", user_id="u1", session_id="s1")
    await service.append_event(session, Event(id="e1", invocation_id="inv-1", author="user", timestamp=T0 + 1,
                                              content=types.Content(role="user", parts=[types.Part(text="pay")])))
    return session


async def test_after_the_calls_event_it_writes_nothing(adk_place: Any) -> None:
    client = adk_place.client()
    with BerthSessionService(client) as service:
        record = before_tool_recorder(service)
        session = await started(service, adk_place)
        await service.append_event(session, asked(*CALLS))
        end = client.get_session(session_berth_id("shop", "u1", "s1")).event_count
        assert await asyncio.gather(*(record(*context(session, call)) for call in CALLS)) == [None, None]
        assert client.get_session(session_berth_id("shop", "u1", "s1")).event_count == end


async def test_before_the_calls_event_it_records_the_start_once(adk_place: Any) -> None:
    client = adk_place.client()
    berth_id = session_berth_id("shop", "u1", "s1")
    with BerthSessionService(client) as service:
        record = before_tool_recorder(service)
        session = await started(service, adk_place)
        # Both tools start (at once) before their call's event is appended.
        await asyncio.gather(*(record(*context(session, call)) for call in CALLS))
        await service.append_event(session, asked(*CALLS))  # the copy was not made stale
        got = await service.get_session(app_name="shop", user_id="u1", session_id="s1")
    assert got is not None and [event.id for event in got.events] == ["e1", "e2"]
    events = client.read(berth_id).events
    calls = [event.data for event in events if event.type == "tool/call"]
    assert sorted((c["call_id"], c["name"], c["arguments"], c["invocation_id"], c["author"]) for c in calls) == [
        ("call-1", "charge_card", {"amount": 5}, "inv-1", "shop"), ("call-2", "email", {"to": "bob"}, "inv-1", "shop")]
    message = next(event.data for event in events if event.type == "assistant/message")
    assert [c["call_id"] for c in message["tool_calls"]] == ["call-1", "call-2"]


async def test_a_crash_after_the_record_is_repaired_in_the_calls_invocation(adk_place: Any) -> None:
    client = adk_place.client()
    service = BerthSessionService(client, run_lease_ttl_ms=LEASE_MS)
    record = before_tool_recorder(service)
    session = await started(service, adk_place)
    await service.append_event(session, asked(CALLS[0]))
    # The call's event is there; a tool of another call starts before its event (the
    # record alone names the invocation and the agent).
    await record(*context(session, CALLS[1]))
    service._stop.set()  # the process dies: no more heartbeats, nothing detached
    service._finalizer.detach()
    await asyncio.sleep(LEASE_MS / 1000 + 0.3)
    with BerthSessionService(client) as after, BerthSessionService(client, events_cache_bytes=0) as keeps_none:
        got = await after.get_session(app_name="shop", user_id="u1", session_id="s1")
        assert got is not None
        repaired = [(e.author, e.invocation_id, r.id, r.name, r.response["code"])
                    for e in got.events[2:] for r in e.get_function_responses()]
        assert sorted(repaired) == [("shop", "inv-1", "call-1", "charge_card", "TOOL_OUTCOME_UNKNOWN"),
                                    ("shop", "inv-1", "call-2", "email", "TOOL_OUTCOME_UNKNOWN")]
        # Read alone, the last repair finds its call by the seq of its `tool/call`.
        last = await keeps_none.get_session(app_name="shop", user_id="u1", session_id="s1",
                                            config=GetSessionConfig(num_recent_events=1))
        assert last is not None and last.events == got.events[-1:]
        first_repair = await keeps_none.get_session(app_name="shop", user_id="u1", session_id="s1",
                                                    config=GetSessionConfig(num_recent_events=2))
        assert first_repair is not None and first_repair.events == got.events[-2:]
        # A call beyond the pages read is found by the seq of its `tool/call`: the message
        # that asked for it just before it, or the record itself.
        berth_id = session_berth_id("shop", "u1", "s1")
        seq_of = {e.data["call_id"]: e.seq for e in client.read(berth_id).events if e.type == "tool/call"}
        reader = keeps_none._call_reader(berth_id)
        assert tuple(reader("call-1", seq_of["call-1"])) == ("charge_card", "inv-1", "shop")
        assert tuple(reader("call-2", seq_of["call-2"])) == ("email", "inv-1", "shop")
        assert reader("call-9", seq_of["call-1"]) is None
    service._prefetch.shutdown(wait=False)
    time.sleep(0)
