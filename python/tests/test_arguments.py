"""List arguments: one string (or bytes, or a mapping) where a call takes a list is
`berth.WrongType` — a `berth.Invalid` and a `TypeError` — raised before anything is sent,
on both clients and every transport, instead of being taken apart (`labels="urgent"` was
stored as `['e', 'g', 'n', 'r', 't', 'u']`)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Callable

import pytest

import berth
from conftest import FOREVER, Place

SESSION = "s-kept"

#: (argument, the call with one value where a list goes); each must refuse and store nothing.
WRONG: list[tuple[str, Callable[[Any], Any]]] = [
    ("labels", lambda client: client.create_session(f"s-{uuid.uuid4().hex[:12]}", labels="urgent")),
    ("labels", lambda client: client.create_session(f"s-{uuid.uuid4().hex[:12]}", labels={"urgent": True})),
    ("labels", lambda client: client.update_session(SESSION, labels="urgent")),
    ("labels", lambda client: client.update_session(SESSION, labels=b"urgent")),
    ("events", lambda client: client.append(SESSION, "user/message")),
    ("events", lambda client: client.append(SESSION, {"type": "user/message", "data": {"content": "x"}})),
    ("events", lambda client: client.append(SESSION, ["user/message"])),
    ("memory", lambda client: client.append(SESSION, [("user/message", {})],
                                            memory={"namespace": "app", "key": "k", "value": 1})),
    ("memory", lambda client: client.append(SESSION, [("user/message", {})], memory=["app"])),
    ("types", lambda client: client.read(SESSION, types="user/message")),
    ("types", lambda client: client.read_before(SESSION, types="user/message")),
    ("seqs", lambda client: client.read_at(SESSION, "01")),
    ("filter", lambda client: client.memory_search("app", filter="kind")),
    ("filter", lambda client: client.memory_search("app", filter=["kind"])),
]
IDS = [f"{argument}-{index}" for index, (argument, _) in enumerate(WRONG)]


def _stored(client: berth.Client) -> tuple[list[str], list[str], int]:
    session = client.get_session(SESSION)
    events = [event.type for event in client.read(SESSION).events]
    return session.labels, events, len(client.list_sessions(include_blank=True, limit=100).items)


def _refused(error: BaseException, argument: str) -> None:
    assert isinstance(error, berth.WrongType) and isinstance(error, TypeError)
    assert isinstance(error, berth.Invalid) and isinstance(error, berth.BerthError)
    assert error.argument == argument and error.code == "wrong_type" and not error.retryable


@pytest.mark.parametrize("argument, call", WRONG, ids=IDS)
def test_one_value_where_a_list_goes_is_refused(place: Place, argument: str, call: Callable[[Any], Any]) -> None:
    client = place.connect()
    client.create_session(SESSION, labels=["kept"], policy=FOREVER)
    client.append(SESSION, [("user/message", {"content": "kept"})])
    before = _stored(client)
    with pytest.raises(TypeError) as raised:
        call(client)
    _refused(raised.value, argument)
    assert _stored(client) == before


def test_the_async_client_refuses_them_too(place: Place) -> None:
    async def each() -> None:
        client = place.connect_async()
        try:
            await client.create_session(SESSION, labels=["kept"], policy=FOREVER)
            for argument, call in WRONG:
                with pytest.raises(TypeError) as raised:
                    await call(client)
                _refused(raised.value, argument)
            session = await client.get_session(SESSION)
            assert session.labels == ["kept"] and (await client.read(SESSION)).events == []
            assert len((await client.list_sessions(include_blank=True)).items) == 1
        finally:
            await client.close()

    asyncio.run(each())


def test_lists_of_any_kind_still_go(place: Place) -> None:
    client = place.connect()
    created = client.create_session(SESSION, labels=("b", "a"), policy=FOREVER)
    assert created.labels == ["a", "b"]
    assert client.update_session(SESSION, labels={"urgent"}).labels == ["urgent"]
    client.append(SESSION, (event for event in [("user/message", {"content": "x"})]))
    assert [event.seq for event in client.read_at(SESSION, range(1)).events] == [0]
    assert client.read(SESSION, types=("user/message",)).events[0].data == {"content": "x"}
