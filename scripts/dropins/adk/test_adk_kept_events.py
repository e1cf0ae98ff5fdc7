"""The events a `BerthSessionService` keeps for `get_session` (`_Events` in
`berth.integrations.adk._kept`): an object answers a session it wrote or read before from
what it keeps plus one forward read from the newest keyed event it kept — and never
answers otherwise than the log. Each case compares the keeping object's answer with a
twin that keeps nothing (`events_cache_bytes=0`, the whole log read every time), on both
transports."""

from __future__ import annotations

from typing import Any

import pytest
from google.adk.sessions.base_session_service import GetSessionConfig

from berth.integrations import adk
from berth.integrations.adk import BerthSessionService
from test_adk_differential import APP, T0, ev


class Reads:
    """Counts the reads of event pages a client answers (GET …/events)."""

    def __init__(self, client: Any) -> None:
        self.count = 0
        execute = client._execute

        def counted(call: Any) -> Any:
            if call.method == "GET" and "/events" in call.path:
                self.count += 1
            return execute(call)

        client._execute = counted


async def cold(client: Any, **where: Any) -> Any:
    with BerthSessionService(client, events_cache_bytes=0) as twin:
        return await twin.get_session(app_name=APP, **where)


async def test_a_session_read_again_is_one_read(adk_place: Any) -> None:
    client = adk_place.client()
    with BerthSessionService(client) as svc:
        session = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
        for n in range(1, 30):
            await svc.append_event(session, ev(n, text=f"m{n}", inv=f"inv-{n // 5}"))
        reads = Reads(client)
        got = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert reads.count == 1, reads.count  # the forward read from the anchor, nothing else
        assert [event.id for event in got.events] == [f"e{n}" for n in range(1, 30)]
        assert got == await cold(client, user_id="u1", session_id="s1")
        # Fresh objects every time: changing one answer changes no other.
        got.events[0].content.parts[0].text = "changed"
        again = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert again.events[0].content.parts[0].text == "m1"
        for config in (GetSessionConfig(num_recent_events=3), GetSessionConfig(after_timestamp=T0 + 25),
                       GetSessionConfig(num_recent_events=2, after_timestamp=T0 + 10)):
            warm = await svc.get_session(app_name=APP, user_id="u1", session_id="s1", config=config)
            assert warm == await cold(client, user_id="u1", session_id="s1", config=config), config


async def test_appends_by_another_object_are_seen(adk_place: Any) -> None:
    client = adk_place.client()
    with BerthSessionService(client) as one, BerthSessionService(adk_place.client()) as two:
        session = await one.create_session(app_name=APP, user_id="u1", session_id="s1")
        await one.append_event(session, ev(1, text="one"))
        await one.get_session(app_name=APP, user_id="u1", session_id="s1")
        other = await two.get_session(app_name=APP, user_id="u1", session_id="s1")
        for n in range(2, 6):
            await two.append_event(other, ev(n, text="two", delta={"k": n}))
        got = await one.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert [event.id for event in got.events] == ["e1", "e2", "e3", "e4", "e5"]
        assert got == await cold(client, user_id="u1", session_id="s1")
        await one.append_event(got, ev(6, text="one again"))  # the copy is not stale
        assert len((await two.get_session(app_name=APP, user_id="u1", session_id="s1")).events) == 6


async def test_an_append_from_another_objects_copy_leaves_nothing_out(adk_place: Any) -> None:
    """The keeping object appends from a copy another object read: what it keeps ends
    before the other object's appends, so its own append must not be added after it."""
    client = adk_place.client()
    with BerthSessionService(client) as one, BerthSessionService(adk_place.client()) as two:
        session = await one.create_session(app_name=APP, user_id="u1", session_id="s1")
        await one.append_event(session, ev(1, text="one"))
        other = await two.get_session(app_name=APP, user_id="u1", session_id="s1")
        await two.append_event(other, ev(2, text="two"))
        await two.append_event(other, ev(3, text="two"))
        await one.append_event(other, ev(4, text="one, from two's copy"))
        got = await one.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert [event.id for event in got.events] == ["e1", "e2", "e3", "e4"]
        assert got == await cold(client, user_id="u1", session_id="s1")


async def test_more_than_a_page_appended_elsewhere_is_read_whole(adk_place: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adk._pages, "_PAGE", 4)
    client = adk_place.client()
    with BerthSessionService(client) as one, BerthSessionService(adk_place.client()) as two:
        session = await one.create_session(app_name=APP, user_id="u1", session_id="s1")
        await one.append_event(session, ev(1, text="one"))
        other = await two.get_session(app_name=APP, user_id="u1", session_id="s1")
        for n in range(2, 12):
            await two.append_event(other, ev(n, text="two"))
        got = await one.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert [event.id for event in got.events] == [f"e{n}" for n in range(1, 12)]
        assert got == await cold(client, user_id="u1", session_id="s1")


async def test_a_cold_read_counts_adk_events_not_seqs(adk_place: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read from scratch goes back a page of `_PAGE` ADK events at a time, however many
    turn and step markers and carried writes lie between them; the filters too."""
    monkeypatch.setattr(adk._pages, "_PAGE", 4)
    client = adk_place.client()
    with BerthSessionService(client) as writer:
        session = await writer.create_session(app_name=APP, user_id="u1", session_id="s1")
        for n in range(1, 31):
            await writer.append_event(session, ev(n, author="user" if n % 3 == 1 else "agent", text=f"m{n}",
                                                  inv=f"inv-{(n - 1) // 3}"))
    assert client.get_session(adk.session_berth_id(APP, "u1", "s1")).event_count > 3 * 30
    reads = Reads(client)
    whole = await cold(client, user_id="u1", session_id="s1")
    assert [event.id for event in whole.events] == [f"e{n}" for n in range(1, 31)]
    assert reads.count <= 30 // 4 + 2, reads.count
    last = await cold(client, user_id="u1", session_id="s1", config=GetSessionConfig(num_recent_events=5))
    assert last.events == whole.events[-5:]
    after = await cold(client, user_id="u1", session_id="s1", config=GetSessionConfig(after_timestamp=T0 + 20))
    assert after.events == whole.events[19:]


async def test_a_session_deleted_and_created_again_elsewhere_is_the_new_one(adk_place: Any) -> None:
    client = adk_place.client()
    with BerthSessionService(client) as one:
        session = await one.create_session(app_name=APP, user_id="u1", session_id="s1")
        for n in range(1, 4):
            await one.append_event(session, ev(n, text="old"))
        assert len((await one.get_session(app_name=APP, user_id="u1", session_id="s1")).events) == 3
        with BerthSessionService(adk_place.client()) as two:
            await two.delete_session(app_name=APP, user_id="u1", session_id="s1")
            new = await two.create_session(app_name=APP, user_id="u1", session_id="s1")
            for n in range(1, 6):  # as many events and more: the old seqs exist again
                await two.append_event(new, ev(10 + n, text="new"))
        got = await one.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert [event.id for event in got.events] == [f"e{10 + n}" for n in range(1, 6)]
        assert got == await cold(client, user_id="u1", session_id="s1")


async def test_the_budget_keeps_the_most_recently_used(adk_place: Any) -> None:
    client = adk_place.client()

    async def fill(svc: BerthSessionService, sid: str) -> None:
        session = await svc.create_session(app_name=APP, user_id="u1", session_id=sid)
        for n in range(1, 6):
            await svc.append_event(session, ev(n, text=sid * 300))

    with BerthSessionService(client) as measure:
        await fill(measure, "m")
        one_session = measure._events_size
    assert one_session > 5 * 300
    budget = one_session * 5 // 2
    with BerthSessionService(client, events_cache_bytes=budget) as svc:
        for sid in ("a", "b", "c"):
            await fill(svc, sid)
        assert list(svc._events) == [adk.session_berth_id(APP, "u1", sid) for sid in ("b", "c")]
        for sid in ("a", "b", "c", "a"):
            got = await svc.get_session(app_name=APP, user_id="u1", session_id=sid)
            assert got == await cold(client, user_id="u1", session_id=sid)
            assert svc._events_size == sum(events.size for events in svc._events.values()) <= budget
    with BerthSessionService(client, events_cache_bytes=0) as none:
        await fill(none, "z")
        await none.get_session(app_name=APP, user_id="u1", session_id="z")
        assert not none._events and none._events_size == 0
