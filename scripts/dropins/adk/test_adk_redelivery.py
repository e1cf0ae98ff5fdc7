"""`append_event`'s re-delivery check (`_Delivered` in
`berth.integrations.adk._redelivery`): the ids of a `Session` object's events are indexed
as its list grows, so a long session's append does not compare every event — and the index
never answers for a list it did not see grow. Each case changes the caller's
`session.events` the way a caller might, then re-delivers, on both transports; the
differential suite covers the plain cases."""

from __future__ import annotations

from typing import Any, ClassVar

from google.adk.events.event import Event

from berth.integrations import adk
from berth.integrations.adk import BerthSessionService
from test_adk_differential import APP, ev


class CountedEvent(Event):
    """An event that counts how often its id is read and it is compared with another."""

    id_reads: ClassVar[int] = 0
    compared: ClassVar[int] = 0

    def __getattribute__(self, name: str) -> Any:
        if name == "id":
            CountedEvent.id_reads += 1
        return super().__getattribute__(name)

    def __eq__(self, other: object) -> bool:
        CountedEvent.compared += 1
        return super().__eq__(other)


async def with_events(svc: BerthSessionService, count: int) -> Any:
    """Session s1 of user u1, created by `svc`, with events e0..e{count-1} appended."""
    session = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
    for n in range(count):
        await svc.append_event(session, ev(n, text=f"m{n}"))
    return session


async def stored(svc: BerthSessionService) -> list[str]:
    got = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
    return [event.id for event in got.events]


async def test_a_long_sessions_append_compares_no_earlier_event(adk_place: Any) -> None:
    with BerthSessionService(adk_place.client()) as svc:
        session = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
        CountedEvent.id_reads = CountedEvent.compared = 0
        for n in range(300):
            event = CountedEvent(**ev(n, text=f"m{n}").model_dump())
            before = CountedEvent.id_reads
            await svc.append_event(session, event)
            # The new event's id, read a bounded number of times (looked up, indexed,
            # written): no earlier event's — a scan of the list would read n of them.
            assert CountedEvent.id_reads - before < 10, (n, CountedEvent.id_reads - before)
        assert CountedEvent.compared == 0
        await svc.append_event(session, session.events[150])  # a re-delivery: compared
        assert CountedEvent.compared >= 1
        assert len(await stored(svc)) == 300


async def test_a_replaced_list_is_indexed_again(adk_place: Any) -> None:
    with BerthSessionService(adk_place.client()) as svc:
        session = await with_events(svc, 10)
        events = list(session.events)
        # A copy of the list (another object): still every event, still delivered.
        session.events = list(session.events)
        await svc.append_event(session, events[4])
        # A list without e5..e9: they are no longer this copy's, so e7 is appended again
        # (the check is of the caller's events, as before the index).
        session.events = session.events[:5]
        await svc.append_event(session, events[7])
        # A copy as long, ending in the same event, with one event swapped in the middle:
        # the swapped-in event is this copy's, so delivered.
        copy = list(session.events)
        copy[2] = ev(50, text="swapped in")
        session.events = copy
        await svc.append_event(session, ev(50, text="swapped in"))
        assert await stored(svc) == [f"e{n}" for n in range(10)] + ["e7"]


async def test_a_list_cut_in_place_is_indexed_again(adk_place: Any) -> None:
    with BerthSessionService(adk_place.client()) as svc:
        session = await with_events(svc, 6)
        del session.events[2:]
        await svc.append_event(session, ev(4, text="m4"))  # cut from the list: appended
        await svc.append_event(session, ev(1, text="m1"))  # still there: delivered
        assert await stored(svc) == [f"e{n}" for n in range(6)] + ["e4"]


async def test_a_list_cut_and_grown_again_is_indexed_again(adk_place: Any) -> None:
    with BerthSessionService(adk_place.client()) as svc:
        session = await with_events(svc, 6)
        await svc.append_event(session, ev(0, text="m0"))  # indexes e0..e5
        # Cut in place and grown back past the indexed length with other objects: the
        # index's last event is not there any more, so it is built again.
        del session.events[3:]
        session.events.extend([ev(n, text=f"other {n}") for n in (30, 31, 32, 33)])
        await svc.append_event(session, ev(31, text="other 31"))  # in the list: delivered
        await svc.append_event(session, ev(4, text="m4"))  # cut from the list: appended
        assert await stored(svc) == [f"e{n}" for n in range(6)] + ["e4"]


async def test_each_session_object_has_its_own_index(adk_place: Any) -> None:
    with BerthSessionService(adk_place.client()) as svc:
        session = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
        await svc.append_event(session, ev(1, text="one"))
        first = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
        await svc.append_event(first, ev(2, text="two"))
        second = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
        await svc.append_event(second, ev(2, text="two"))  # delivered: in this copy's events
        assert await stored(svc) == ["e1", "e2"]
        del session, first
        import gc

        gc.collect()
        # Entries go with their session objects.
        assert list(svc._delivered) == [id(second)]


async def test_a_session_without_weak_references_is_checked_event_by_event(adk_place: Any, monkeypatch: Any) -> None:
    class Refused(adk._redelivery._Delivered):
        """What `weakref.ref` of a `Session` subclass with no weak reference slot does."""

        def __init__(self, *_: Any) -> None:
            raise TypeError("cannot create weak reference to 'Session' object")

    monkeypatch.setattr(adk._redelivery, "_Delivered", Refused)
    with BerthSessionService(adk_place.client()) as svc:
        session = await with_events(svc, 5)
        await svc.append_event(session, ev(2, text="m2"))  # delivered
        await svc.append_event(session, ev(2, text="not the same"))  # appended
        assert await stored(svc) == ["e0", "e1", "e2", "e3", "e4", "e2"]
        assert svc._delivered == {}
