"""The differential contract: every case runs against ADK's own InMemorySessionService
(the reference) and against BerthSessionService on both berth transports, and the two
answers must be equal (ids and creation times normalized where ADK makes them up).

ADK's contract tests are not in any registry artifact (google-adk's sdist and wheel ship
no tests), so these cases are written here from ADK 2.13.0's documented behaviour:
creation, duplicate and padded ids, one id under two users, `num_recent_events` and
`after_timestamp`, state deltas per prefix, `list_sessions` order and merged state,
`get_user_state`, deletion, partial events, function calls. A case where berth
deliberately differs is a strict expected failure with its reason (DIVERGENCES), and its
berth behaviour is asserted by a test of its own below.

Every case also proves the swap: afterwards berth holds exactly as many `adk` sessions as
the reference holds sessions.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

import pytest
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from berth.integrations._runpool import POOL
from berth.integrations.adk import LABEL, BerthSessionService, session_berth_id

T0 = 1_700_000_000.0
APP = "shop"

Case = Callable[[Any], Awaitable[Any]]
CASES: dict[str, Case] = {}
#: Cases where berth differs from InMemorySessionService on purpose, and why.
DIVERGENCES = {
    "stale_copy_appends": "berth rejects a stale Session (StaleSessionError, as ADK's database services do); "
                          "InMemorySessionService appends from any copy",
    "stale_writers_race": "berth lets exactly one of two racing stale copies win each round; "
                          "InMemorySessionService lets both",
}


def case(fn: Case) -> Case:
    CASES[fn.__name__.removeprefix("case_")] = fn
    return fn


def ev(n: int, *, author: str = "agent", text: str | None = None, delta: dict[str, Any] | None = None,
       inv: str = "inv-1", ts: float | None = None, parts: list[types.Part] | None = None, **fields: Any) -> Event:
    if parts is None and text is not None:
        parts = [types.Part(text=text)]
    content = types.Content(role="user" if author == "user" else "model", parts=parts) if parts else None
    return Event(id=f"e{n}", invocation_id=inv, author=author, timestamp=T0 + n if ts is None else ts,
                 content=content, actions=EventActions(state_delta=delta or {}), **fields)


def when(value: float) -> Any:
    """A time the case chose, or "now" (a creation time ADK takes from the clock)."""
    return value if value < T0 + 10_000_000 else "now"


def snap(session: Any, *, keep_id: bool = True) -> Any:
    if session is None:
        return None
    return {
        "id": session.id if keep_id else "<generated>",
        "app": session.app_name,
        "user": session.user_id,
        "state": session.state,
        "events": [event.model_dump(mode="json", exclude_none=True) for event in session.events],
        "last_update_time": when(session.last_update_time),
    }


async def outcome(awaitable: Awaitable[Any]) -> Any:
    try:
        return {"ok": await awaitable}
    except Exception as error:  # the type is what is compared
        return {"raised": type(error).__name__}


def listing(response: Any) -> list[Any]:
    return [snap(session) for session in response.sessions]


# ----- creation and lookup --------------------------------------------------------------

@case
async def case_create_and_get(svc: Any) -> Any:
    created = await svc.create_session(app_name=APP, user_id="u1", session_id="s1",
                                       state={"a": 1, "app:x": 2, "user:y": 3, "temp:z": 4})
    got = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
    return [snap(created), snap(got)]


@case
async def case_generated_id(svc: Any) -> Any:
    created = await svc.create_session(app_name=APP, user_id="u1")
    got = await svc.get_session(app_name=APP, user_id="u1", session_id=created.id)
    return [isinstance(created.id, str) and len(created.id) > 0, got.id == created.id, snap(got, keep_id=False)]


@case
async def case_duplicate_id(svc: Any) -> Any:
    await svc.create_session(app_name=APP, user_id="u1", session_id="s1", state={"a": 1})
    again = await outcome(svc.create_session(app_name=APP, user_id="u1", session_id="s1", state={"a": 2}))
    padded = await outcome(svc.create_session(app_name=APP, user_id="u1", session_id="  s1 "))
    got = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
    return [again, padded, snap(got)]


@case
async def case_padded_ids(svc: Any) -> Any:
    created = await svc.create_session(app_name=APP, user_id="u1", session_id="  s2\t")
    got = await svc.get_session(app_name=APP, user_id="u1", session_id=" s2 ")
    await svc.delete_session(app_name=APP, user_id="u1", session_id="s2  ")
    gone = await svc.get_session(app_name=APP, user_id="u1", session_id="s2")
    return [created.id, snap(got), gone]


@case
async def case_same_id_two_users(svc: Any) -> Any:
    await svc.create_session(app_name=APP, user_id="u1", session_id="s", state={"who": "u1"})
    await svc.create_session(app_name=APP, user_id="u2", session_id="s", state={"who": "u2"})
    await svc.create_session(app_name="other", user_id="u1", session_id="s", state={"who": "other"})
    return [snap(await svc.get_session(app_name=app, user_id=user, session_id="s"))
            for app, user in [(APP, "u1"), (APP, "u2"), ("other", "u1")]]


@case
async def case_missing(svc: Any) -> Any:
    await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
    return [await svc.get_session(app_name=APP, user_id="u1", session_id="nope"),
            await svc.get_session(app_name=APP, user_id="u9", session_id="s1"),
            await svc.get_session(app_name="nope", user_id="u1", session_id="s1")]


@case
async def case_awkward_names(svc: Any) -> Any:
    names = [("app/with slash", "alice@example.com", "s/1"), ("ünï", ".", ".."), ("~tilde", "~u", "~s"),
             ("a" * 90, "b" * 95, "c" * 200), ("app", "user with spaces", "x" * 128)]
    out = []
    for app, user, sid in names:
        await svc.create_session(app_name=app, user_id=user, session_id=sid, state={"user:k": user, "app:k": app})
        await svc.append_event(await svc.get_session(app_name=app, user_id=user, session_id=sid),
                               ev(1, text="hi", delta={"user:n": 1}))
        out.append(snap(await svc.get_session(app_name=app, user_id=user, session_id=sid)))
        out.append(await svc.get_user_state(app_name=app, user_id=user))
        out.append(listing(await svc.list_sessions(app_name=app)))
    return out


# ----- events and their filters ---------------------------------------------------------

async def _five(svc: Any) -> None:
    session = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
    await svc.append_event(session, ev(1, author="user", text="hello", inv="i1"))
    await svc.append_event(session, ev(2, text="hi there", inv="i1"))
    await svc.append_event(session, ev(3, author="user", text="more", inv="i2"))
    await svc.append_event(session, ev(3, ts=T0 + 3, text="same time", inv="i2") .model_copy(update={"id": "e3b"}))
    await svc.append_event(session, ev(5, text="done", inv="i2"))


@case
async def case_events_round_trip(svc: Any) -> Any:
    await _five(svc)
    return snap(await svc.get_session(app_name=APP, user_id="u1", session_id="s1"))


@case
async def case_num_recent_events(svc: Any) -> Any:
    await _five(svc)
    out = []
    for n in [0, 1, 2, 5, 6, 100, None]:
        got = await svc.get_session(app_name=APP, user_id="u1", session_id="s1",
                                    config=GetSessionConfig(num_recent_events=n))
        out.append(snap(got))
    return out


@case
async def case_after_timestamp(svc: Any) -> Any:
    await _five(svc)
    out = []
    for after in [T0, T0 + 2, T0 + 3, T0 + 3.5, T0 + 5, T0 + 6, T0 - 100]:
        got = await svc.get_session(app_name=APP, user_id="u1", session_id="s1",
                                    config=GetSessionConfig(after_timestamp=after))
        out.append(snap(got))
    both = await svc.get_session(app_name=APP, user_id="u1", session_id="s1",
                                 config=GetSessionConfig(num_recent_events=2, after_timestamp=T0 + 3))
    out.append(snap(both))
    none_left = await svc.get_session(app_name=APP, user_id="u1", session_id="s1",
                                      config=GetSessionConfig(num_recent_events=3, after_timestamp=T0 + 9))
    out.append(snap(none_left))
    return out


@case
async def case_timestamps_out_of_order(svc: Any) -> Any:
    session = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
    for n, ts in [(1, T0 + 10), (2, T0 + 5), (3, T0 + 20), (4, T0 + 7)]:
        await svc.append_event(session, ev(n, text=f"t{n}", ts=ts))
    out = [snap(await svc.get_session(app_name=APP, user_id="u1", session_id="s1",
                                      config=GetSessionConfig(after_timestamp=after)))
           for after in [T0 + 6, T0 + 8, T0 + 1]]
    out.append(listing(await svc.list_sessions(app_name=APP)))
    return out


@case
async def case_partial_events_not_stored(svc: Any) -> Any:
    session = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
    returned = await svc.append_event(session, ev(1, text="stream", partial=True, delta={"k": 1}))
    await svc.append_event(session, ev(2, text="whole"))
    return [returned.id, snap(session), snap(await svc.get_session(app_name=APP, user_id="u1", session_id="s1"))]


@case
async def case_function_calls(svc: Any) -> Any:
    session = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
    await svc.append_event(session, ev(1, author="user", text="weather in paris and rome?"))
    calls = [types.Part(function_call=types.FunctionCall(id=f"call-{city}", name="weather", args={"city": city}))
             for city in ("paris", "rome")]
    await svc.append_event(session, ev(2, parts=calls))
    responses = [types.Part(function_response=types.FunctionResponse(id=f"call-{city}", name="weather",
                                                                     response={"t": t}))
                 for city, t in (("paris", 20), ("rome", 25))]
    await svc.append_event(session, ev(3, parts=responses))
    await svc.append_event(session, ev(4, text="20 and 25"))
    no_id = types.Part(function_call=types.FunctionCall(name="clock", args={}))
    await svc.append_event(session, ev(5, parts=[no_id], inv="i2"))
    return snap(await svc.get_session(app_name=APP, user_id="u1", session_id="s1"))


@case
async def case_rich_event_fields(svc: Any) -> Any:
    session = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
    image = types.Part(inline_data=types.Blob(mime_type="image/png", data=b"\x89PNG\r\n\x1a\n" + bytes(range(256))))
    await svc.append_event(session, ev(1, author="user", parts=[types.Part(text="look"), image]))
    actions = EventActions(state_delta={"k": "v"}, transfer_to_agent="helper", escalate=True,
                           artifact_delta={"a.txt": 2}, skip_summarization=True)
    await svc.append_event(session, Event(id="e2", invocation_id="inv-1", author="agent", timestamp=T0 + 2,
                                          branch="root.helper", actions=actions,
                                          long_running_tool_ids={"t1"},
                                          content=types.Content(role="model", parts=[types.Part(text="ok")])))
    await svc.append_event(session, Event(id="e3", invocation_id="inv-1", author="agent", timestamp=T0 + 3,
                                          error_code="SAFETY", error_message="blocked", turn_complete=True))
    got = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
    return [snap(got), got.events[0].content.parts[1].inline_data.data == image.inline_data.data]


@case
async def case_equal_redelivery(svc: Any) -> Any:
    session = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
    event = ev(1, text="once", delta={"n": 1, "user:m": 2})
    await svc.append_event(session, event)
    await svc.append_event(session, event)
    return snap(await svc.get_session(app_name=APP, user_id="u1", session_id="s1"))


@case
async def case_redelivery_in_a_long_session(svc: Any) -> Any:
    """Re-deliveries of the first, a middle and the latest of 40 events are taken as
    delivered; an event under a known id but not equal is appended. The same from a copy
    read afresh (a new `Session` object, as each of the `Runner`'s invocations reads)."""
    session = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
    events = [ev(n, text=f"m{n}", inv=f"inv-{n // 8}") for n in range(40)]
    for event in events:
        await svc.append_event(session, event)
    for n in (0, 17, 39):
        await svc.append_event(session, events[n])
    await svc.append_event(session, ev(17, text="not the same", inv="inv-9"))
    fresh = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
    await svc.append_event(fresh, events[3])
    await svc.append_event(fresh, ev(40, text="new"))
    await svc.append_event(fresh, ev(40, text="new"))
    return [len(session.events), len(fresh.events),
            snap(await svc.get_session(app_name=APP, user_id="u1", session_id="s1"))]


@case
async def case_append_to_deleted(svc: Any) -> Any:
    session = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
    await svc.delete_session(app_name=APP, user_id="u1", session_id="s1")
    return await outcome(svc.append_event(session, ev(1, text="late")))


# ----- state ----------------------------------------------------------------------------

@case
async def case_state_prefixes(svc: Any) -> Any:
    session = await svc.create_session(app_name=APP, user_id="u1", session_id="s1", state={"s": 0})
    await svc.append_event(session, ev(1, delta={"s": 1, "app:a": 1, "user:u": 1, "temp:t": 1}))
    in_object = dict(session.state)
    got = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
    other_user = await svc.create_session(app_name=APP, user_id="u2", session_id="s2")
    same_user = await svc.create_session(app_name=APP, user_id="u1", session_id="s3")
    other_app = await svc.create_session(app_name="other", user_id="u1", session_id="s4")
    return [in_object, snap(got), snap(other_user), snap(same_user), snap(other_app)]


@case
async def case_state_values(svc: Any) -> Any:
    session = await svc.create_session(app_name=APP, user_id="u1", session_id="s1",
                                       state={"d": {"a": 1, "b": 2}, "flag": True, "app:d": {"x": 1},
                                              "user:d": {"y": 1}})
    await svc.append_event(session, ev(1, delta={"d": {"c": 3}, "app:d": {"z": 2}, "user:d": None}))
    await svc.append_event(session, ev(2, delta={"other": 1, "n": None, "f": 1.5, "big": 2 ** 62,
                                                 "list": [1, "two", None, {"3": [4]}]}))
    await svc.append_event(session, ev(3, delta={"user:later": "x", "app:flag": False}))
    return [snap(session), snap(await svc.get_session(app_name=APP, user_id="u1", session_id="s1"))]


@case
async def case_state_survives_other_sessions(svc: Any) -> Any:
    first = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
    second = await svc.create_session(app_name=APP, user_id="u1", session_id="s2")
    await svc.append_event(first, ev(1, delta={"user:n": 1, "app:n": 1}))
    await svc.append_event(second, ev(2, delta={"user:n": 2, "s": "second"}))
    await svc.delete_session(app_name=APP, user_id="u1", session_id="s2")
    return [snap(await svc.get_session(app_name=APP, user_id="u1", session_id="s1")),
            await svc.get_user_state(app_name=APP, user_id="u1")]


@case
async def case_get_user_state(svc: Any) -> Any:
    out = [await svc.get_user_state(app_name=APP, user_id="nobody")]
    await svc.create_session(app_name=APP, user_id="u1", session_id="s1",
                             state={"user:a": 1, "app:b": 2, "c": 3, "temp:d": 4})
    out.append(await svc.get_user_state(app_name=APP, user_id="u1"))
    out.append(await svc.get_user_state(app_name=APP, user_id="u2"))
    out.append(await svc.get_user_state(app_name="other", user_id="u1"))
    session = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
    await svc.append_event(session, ev(1, delta={"user:a": {"nested": True}, "user:": "empty key"}))
    out.append(await svc.get_user_state(app_name=APP, user_id="u1"))
    return out


# ----- listing and deletion -------------------------------------------------------------

@case
async def case_list_sessions(svc: Any) -> Any:
    out = [listing(await svc.list_sessions(app_name=APP)), listing(await svc.list_sessions(app_name=APP,
                                                                                           user_id="u1"))]
    sessions = {}
    for user, sid in [("u1", "a"), ("u1", "b"), ("u2", "c"), ("u1", "d")]:
        sessions[sid] = await svc.create_session(app_name=APP, user_id=user, session_id=sid, state={"sid": sid})
    await svc.create_session(app_name="other", user_id="u1", session_id="z")
    # Updated in another order than created: b first, then c, then a (d only created).
    await svc.append_event(sessions["b"], ev(1, text="b", delta={"n": 1, "user:seen": "b"}))
    await svc.append_event(sessions["c"], ev(2, text="c", delta={"app:seen": "c"}))
    await svc.append_event(sessions["a"], ev(3, text="a", delta={"n": 3}))
    out.append(listing(await svc.list_sessions(app_name=APP)))
    out.append(listing(await svc.list_sessions(app_name=APP, user_id="u1")))
    out.append(listing(await svc.list_sessions(app_name=APP, user_id="u2")))
    out.append(listing(await svc.list_sessions(app_name=APP, user_id="u3")))
    out.append(listing(await svc.list_sessions(app_name="nope")))
    return out


@case
async def case_list_ties(svc: Any) -> Any:
    for user, sid in [("u2", "b"), ("u1", "b"), ("u1", "a")]:
        session = await svc.create_session(app_name=APP, user_id=user, session_id=sid)
        await svc.append_event(session, ev(1, text="same time"))
    return listing(await svc.list_sessions(app_name=APP))


@case
async def case_delete(svc: Any) -> Any:
    await svc.create_session(app_name=APP, user_id="u1", session_id="s1", state={"user:kept": 1})
    await svc.create_session(app_name=APP, user_id="u1", session_id="s2")
    await svc.delete_session(app_name=APP, user_id="u1", session_id="s1")
    await svc.delete_session(app_name=APP, user_id="u1", session_id="s1")
    await svc.delete_session(app_name=APP, user_id="u9", session_id="never")
    recreated = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
    return [listing(await svc.list_sessions(app_name=APP)), snap(recreated),
            await svc.get_user_state(app_name=APP, user_id="u1")]


# ----- stale writers (divergences: see DIVERGENCES) -------------------------------------

@case
async def case_stale_copy_appends(svc: Any) -> Any:
    await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
    first = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
    second = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
    await svc.append_event(first, ev(1, text="first"))
    return await outcome(svc.append_event(second, ev(2, text="second")))


@case
async def case_stale_writers_race(svc: Any) -> Any:
    await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
    wins = []
    for round_ in range(4):
        copies = [await svc.get_session(app_name=APP, user_id="u1", session_id="s1") for _ in range(2)]
        results = await asyncio.gather(*(outcome(svc.append_event(copy, ev(10 * round_ + i, text=f"r{round_}")))
                                         for i, copy in enumerate(copies)))
        wins.append(sum(1 for result in results if "ok" in result))
    return wins


# ----- the test -------------------------------------------------------------------------

def _reference_count(reference: InMemorySessionService) -> int:
    return sum(len(sessions) for users in reference.sessions.values() for sessions in users.values())


class ColdChecked(BerthSessionService):
    """A `BerthSessionService` whose every `get_session` is also answered by a twin that
    keeps no events (`events_cache_bytes=0`: the whole log read each time), and must be
    equal: the events an object keeps never answer otherwise than the log."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.twin = BerthSessionService(client, events_cache_bytes=0)
        self.checked = 0

    async def get_session(self, **where: Any) -> Any:
        got = await super().get_session(**where)
        cold = await self.twin.get_session(**where)
        assert got == cold, (where, got, cold)
        self.checked += 1
        return got

    def close(self) -> None:
        self.twin.close()
        super().close()


@pytest.mark.parametrize("name", list(CASES))
async def test_case(name: str, adk_place: Any, request: pytest.FixtureRequest) -> None:
    if name in DIVERGENCES:
        request.applymarker(pytest.mark.xfail(strict=True, reason=DIVERGENCES[name]))
    reference_service = InMemorySessionService()
    reference = await CASES[name](reference_service)
    client = adk_place.client()
    with ColdChecked(client) as service:
        got = await CASES[name](service)
    # The swap happened: berth holds the sessions the reference holds.
    held = client.list_sessions(label=LABEL, include_blank=True, limit=1000).items
    assert len(held) == _reference_count(reference_service), (len(held), name)
    assert got == reference


# ----- berth's own behaviour where it differs -------------------------------------------

async def test_stale_copy_is_rejected(adk_place: Any) -> None:
    with BerthSessionService(adk_place.client()) as svc:
        assert await case_stale_copy_appends(svc) == {"raised": "StaleSessionError"}
        again = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert [event.id for event in again.events] == ["e1"]
        await svc.append_event(again, ev(3, text="fresh copy"))


async def test_stale_writers_race_one_winner_per_round(adk_place: Any) -> None:
    """Two service objects (as two processes would), racing stale copies, 8 rounds."""
    with BerthSessionService(adk_place.client()) as one, BerthSessionService(adk_place.client()) as two:
        await one.create_session(app_name=APP, user_id="u1", session_id="race")
        for round_ in range(8):
            copies = [await svc.get_session(app_name=APP, user_id="u1", session_id="race") for svc in (one, two)]
            results = await asyncio.gather(
                *(outcome(svc.append_event(copy, ev(100 * round_ + i, text="x", delta={"user:w": i})))
                  for i, (svc, copy) in enumerate(zip((one, two), copies))))
            assert sum("ok" in result for result in results) == 1, results
            assert [result for result in results if "ok" not in result] == [{"raised": "StaleSessionError"}]
        final = await one.get_session(app_name=APP, user_id="u1", session_id="race")
        assert len(final.events) == 8


async def test_a_second_service_object_sees_everything(adk_place: Any) -> None:
    with BerthSessionService(adk_place.client()) as one:
        session = await one.create_session(app_name=APP, user_id="u1", session_id="s1", state={"user:a": 1})
        await one.append_event(session, ev(1, author="user", text="hi", delta={"app:b": 2, "c": 3}))
    with BerthSessionService(adk_place.client()) as two:
        got = await two.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert got.state == {"user:a": 1, "app:b": 2, "c": 3}
        assert [event.id for event in got.events] == ["e1"]
        await two.append_event(got, ev(2, text="hello"))
        assert [s.id for s in (await two.list_sessions(app_name=APP)).sessions] == ["s1"]


async def test_berth_log_is_readable(adk_place: Any) -> None:
    """The log uses berth's vocabulary: turns per invocation (numbered from 0), a step
    per model call, the model's calls requested and started, results, messages; the ADK
    event is verbatim in data.adk of the first event of its append."""
    client = adk_place.client()
    with BerthSessionService(client) as svc:
        await case_function_calls(svc)
    events = client.read(session_berth_id(APP, "u1", "s1")).events
    kinds = [event.type for event in events]
    assert kinds == ["adk/create", "session/memory",
                     "turn/start", "user/message", "session/memory",
                     "step/start", "assistant/message", "tool/call", "tool/call", "session/memory",
                     "tool/result", "tool/result", "session/memory",
                     "step/end", "step/start", "assistant/message", "step/end", "turn/end", "session/memory",
                     "turn/start", "step/start", "adk/event", "session/memory"], kinds
    markers = [(event.type, event.data) for event in events if event.type.startswith(("turn/", "step/"))]
    assert markers == [("turn/start", {"turn": 0, "invocation_id": "inv-1"}), ("step/start", {"turn": 0, "step": 0}),
                       ("step/end", {"turn": 0, "step": 0}), ("step/start", {"turn": 0, "step": 1}),
                       ("step/end", {"turn": 0, "step": 1}), ("turn/end", {"turn": 0, "reason": "completed"}),
                       ("turn/start", {"turn": 1, "invocation_id": "i2"}), ("step/start", {"turn": 1, "step": 0})]
    calls = [event.data for event in events if event.type == "tool/call"]
    assert [(c["call_id"], c["name"], c["arguments"]) for c in calls] == [
        ("call-paris", "weather", {"city": "paris"}), ("call-rome", "weather", {"city": "rome"})]
    asked = events[6].data
    assert asked["content"] == "" and asked["adk"]["id"] == "e2"
    assert [(c["call_id"], c["name"], c["arguments"]) for c in asked["tool_calls"]] == [
        (c["call_id"], c["name"], c["arguments"]) for c in calls]
    assert [(e.data["call_id"], e.data["content"]) for e in events if e.type == "tool/result"] == [
        ("call-paris", {"t": 20}), ("call-rome", {"t": 25})]
    assert events[3].data["content"] == "weather in paris and rome?" and events[3].data["adk"]["id"] == "e1"
    times = [event.time for event in events if event.type not in ("session/memory", "adk/create")]
    assert times == sorted(times) and times[-1] == int((T0 + 5) * 1000), times
    assert client.get_session(session_berth_id(APP, "u1", "s1")).blank is False


async def test_state_is_in_scoped_memory(adk_place: Any) -> None:
    client = adk_place.client()
    with BerthSessionService(client) as svc:
        session = await svc.create_session(app_name=APP, user_id="alice@example.com", session_id="s1")
        await svc.append_event(session, ev(1, delta={"app:tier": "gold", "user:lang": "fr", "temp:x": 1}))
    assert client.memory_get("app/shop/adk/state", "tier").value == "gold"
    user_items = client.memory_search("user/~YWxpY2VAZXhhbXBsZS5jb20").items
    assert [(item.namespace, item.key, item.value) for item in user_items] == [
        ("user/~YWxpY2VAZXhhbXBsZS5jb20/adk/shop/state", "lang", "fr")]
    index = client.memory_get("app/shop/adk/sessions", session_berth_id(APP, "alice@example.com", "s1"))
    assert index.bound_to == session_berth_id(APP, "alice@example.com", "s1")
    assert index.value["last_update_time"] == T0 + 1
    berth_session = client.get_session(session_berth_id(APP, "alice@example.com", "s1"))
    assert berth_session.header.scope.user == "~YWxpY2VAZXhhbXBsZS5jb20"


async def test_too_many_shared_keys_is_a_typed_error(adk_place: Any) -> None:
    from berth.integrations.adk import StateDeltaTooLarge
    with BerthSessionService(adk_place.client()) as svc:
        session = await svc.create_session(app_name=APP, user_id="u1", session_id="s1")
        with pytest.raises(StateDeltaTooLarge):
            await svc.append_event(session, ev(1, delta={f"user:k{i}": i for i in range(100)}))
        got = await svc.get_session(app_name=APP, user_id="u1", session_id="s1")
        assert got.events == [] and got.state == {}


async def test_an_empty_leftover_of_a_crashed_create_is_adopted(adk_place: Any) -> None:
    client = adk_place.client()
    berth_id = session_berth_id(APP, "u1", "s1")
    client.create_session(berth_id, labels=[LABEL])  # as if the create died before its first append
    with BerthSessionService(client) as svc:
        assert await svc.get_session(app_name=APP, user_id="u1", session_id="s1") is None
        created = await svc.create_session(app_name=APP, user_id="u1", session_id="s1", state={"a": 1})
        assert created.state == {"a": 1}
        assert [s.id for s in (await svc.list_sessions(app_name=APP)).sessions] == ["s1"]
        assert (await outcome(svc.create_session(app_name=APP, user_id="u1", session_id="s1"))) == {
            "raised": "AlreadyExistsError"}


async def test_runs_beyond_max_holds_are_detached(adk_place: Any) -> None:
    client = adk_place.client()
    with BerthSessionService(client, max_holds=2) as svc:
        for sid in ("a", "b", "c"):
            await svc.create_session(app_name=APP, user_id="u1", session_id=sid)
        attached = {sid: len(client.get_session(session_berth_id(APP, "u1", sid)).runs) for sid in ("a", "b", "c")}
        assert attached == {"a": 0, "b": 1, "c": 1}, attached
        session = await svc.get_session(app_name=APP, user_id="u1", session_id="a")  # attached again
        await svc.append_event(session, ev(1, text="still fine"))
        assert len(client.get_session(session_berth_id(APP, "u1", "a")).runs) == 1
    # Closing handed the two runs held on, idle (`hand_on`); the evicted one stayed detached.
    attached = {sid: len(client.get_session(session_berth_id(APP, "u1", sid)).runs) for sid in ("a", "b", "c")}
    assert attached == {"a": 1, "b": 0, "c": 1}, attached
    POOL.release_all()
    assert all(not client.get_session(session_berth_id(APP, "u1", sid)).runs for sid in ("a", "b", "c"))
