"""Every input the client refuses before sending anything is a `berth.BerthError` that is
also the built-in exception it raised before (`TypeError`, `ValueError`,
`RecursionError`): `except berth.BerthError` catches it, and so does the old `except
ValueError`. Held on every transport and both clients, with nothing stored."""

from __future__ import annotations

import asyncio
import datetime
import math
from typing import Any, Callable

import pytest

import berth
from conftest import FOREVER, Place

SESSION = "s-kept"


def _deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


def _circular() -> Any:
    value: list[Any] = []
    value.append(value)
    return value


def _event(data: Any) -> list[tuple[str, Any]]:
    return [("note/x", data)]


#: (label, the call, the berth class, the built-in it also is, the argument it names).
REFUSED: list[tuple[str, Callable[[Any], Any], type[berth.BerthError], type[BaseException], str]] = [
    ("event without a type", lambda c: c.append(SESSION, [{"data": 1}]), berth.InvalidArgument, ValueError, "events"),
    ("data not JSON", lambda c: c.append(SESSION, _event(datetime.date(2026, 1, 1))), berth.WrongType, TypeError,
     "events"),
    ("data a set", lambda c: c.append(SESSION, _event({1, 2})), berth.WrongType, TypeError, "events"),
    ("data NaN", lambda c: c.append(SESSION, _event(math.nan)), berth.InvalidArgument, ValueError, "events"),
    ("data circular", lambda c: c.append(SESSION, _event(_circular())), berth.InvalidArgument, ValueError, "events"),
    ("data too deep", lambda c: c.append(SESSION, _event(_deep(20_000))), berth.NestingTooDeep, RecursionError,
     "events"),
    ("data a lone surrogate", lambda c: c.append(SESSION, _event("\ud800")), berth.InvalidArgument, ValueError,
     "events"),
    ("memory write unknown field", lambda c: c.append(SESSION, _event(1), memory=[
        {"namespace": "app/n", "key": "k", "value": 1, "ttl": 5}]), berth.WrongType, TypeError, "memory"),
    ("memory write without value", lambda c: c.append(SESSION, _event(1), memory=[
        {"namespace": "app/n", "key": "k"}]), berth.WrongType, TypeError, "memory"),
    ("memory write not JSON", lambda c: c.append(SESSION, _event(1), memory=[
        {"namespace": "app/n", "key": "k", "value": object()}]), berth.WrongType, TypeError, "memory"),
    ("session id not a str", lambda c: c.get_session(7), berth.WrongType, TypeError, "session_id"),
    ("session id a lone surrogate", lambda c: c.get_session("s-\udc80"), berth.InvalidArgument, ValueError,
     "session_id"),
    ("run id not a str", lambda c: c.heartbeat(SESSION, None), berth.WrongType, TypeError, "run_id"),
    ("title not JSON", lambda c: c.update_session(SESSION, title=b"t"), berth.WrongType, TypeError, "title"),
    ("policy not a mapping", lambda c: c.create_session("s-new", policy="serial"), berth.WrongType, TypeError,
     "policy"),
    ("label a lone surrogate", lambda c: c.list_sessions(label="\ud800"), berth.InvalidArgument, ValueError,
     "label"),
    ("status not strings", lambda c: c.list_sessions(status=[1]), berth.WrongType, TypeError, "status"),
    ("no types", lambda c: c.read(SESSION, types=[]), berth.InvalidArgument, ValueError, "types"),
    ("no seqs", lambda c: c.read_at(SESSION, []), berth.InvalidArgument, ValueError, "seqs"),
    ("a negative seq", lambda c: c.read_at(SESSION, [-1]), berth.InvalidArgument, ValueError, "seqs"),
    ("a seq not a number", lambda c: c.read_at(SESSION, ["first"]), berth.InvalidArgument, ValueError, "seqs"),
    ("a seq None", lambda c: c.read_at(SESSION, [None]), berth.WrongType, TypeError, "seqs"),
    ("export format", lambda c: c.export(SESSION, format="tar"), berth.InvalidArgument, ValueError, "format"),
    ("filter operator", lambda c: c.memory_search("app", filter=[("n", "like", 1)]), berth.InvalidArgument,
     ValueError, "filter"),
    ("filter condition without op", lambda c: c.memory_search("app", filter=[{"field": "n", "value": 1}]),
     berth.InvalidArgument, ValueError, "filter"),
    ("memory value not JSON", lambda c: c.memory_put("app/n", "k", datetime.time()), berth.WrongType, TypeError,
     "value"),
    ("memory value too deep", lambda c: c.memory_put("app/n", "k", _deep(20_000)), berth.NestingTooDeep,
     RecursionError, "value"),
    ("memory namespace a lone surrogate", lambda c: c.memory_get("app/\ud800", "k"), berth.InvalidArgument,
     ValueError, "namespace"),
    ("items not pairs", lambda c: c.memory_delete_many(["app/n"]), berth.WrongType, TypeError, "items"),
    ("import not bytes", lambda c: c.import_sessions("{}"), berth.WrongType, TypeError, "data"),
]
IDS = [label for label, *_ in REFUSED]


def _wrong(error: BaseException, cls: type, builtin: type, argument: str) -> list[str]:
    problems = []
    if type(error) is not cls:
        return [f"{type(error).__name__}: {error}"]
    if not isinstance(error, builtin) or not isinstance(error, berth.BerthError):
        problems.append(f"bases {type(error).__mro__}")
    if getattr(error, "argument", None) != argument:
        problems.append(f"argument {getattr(error, 'argument', None)!r}")
    if (error.status, error.retryable) != (400, False):  # type: ignore[attr-defined]
        problems.append("status")
    return problems


def _stored(client: berth.Client) -> tuple[Any, ...]:
    return (client.get_session(SESSION).revision, [event.seq for event in client.read(SESSION).events],
            len(client.list_sessions(include_blank=True).items), client.memory_usage().items)


def test_client_side_refusals_are_berth_errors(place: Place) -> None:
    client = place.connect()
    client.create_session(SESSION, policy=FOREVER)
    client.append(SESSION, _event(0))
    before = _stored(client)
    wrong = {}
    for label, call, cls, builtin, argument in REFUSED:
        try:
            call(client)
        except BaseException as error:  # noqa: BLE001 - what it is, is the point
            problems = _wrong(error, cls, builtin, argument)
        else:
            problems = ["not refused"]
        if problems:
            wrong[label] = problems
    assert not wrong, wrong
    assert _stored(client) == before


def test_the_async_client_refuses_them_alike(place: Place) -> None:
    place.connect().create_session(SESSION, policy=FOREVER)

    async def each() -> dict[str, list[str]]:
        wrong = {}
        async with place.connect_async() as client:
            for label, call, cls, builtin, argument in REFUSED:
                try:
                    await call(client)
                except BaseException as error:  # noqa: BLE001
                    problems = _wrong(error, cls, builtin, argument)
                else:
                    problems = ["not refused"]
                if problems:
                    wrong[label] = problems
        return wrong

    wrong = asyncio.run(each())
    assert not wrong, wrong


@pytest.mark.parametrize("label, call, cls, builtin, argument", REFUSED, ids=IDS)
def test_the_old_except_still_catches_it(label: str, call: Callable[[Any], Any], cls: type, builtin: type,
                                         argument: str) -> None:
    """Without a store: each refusal comes before any request (a transport that fails
    every request proves it)."""
    client = berth.Client(transport=_Refusing())
    with pytest.raises(builtin):
        call(client)
    with pytest.raises(berth.BerthError):
        call(client)


class _Refusing:
    busy_wait_s = 0.0

    def send(self, method: str, path: str, headers: Any, body: Any) -> Any:
        raise AssertionError(f"sent {method} {path}")

    def close(self) -> None:
        pass


#: `berth.open`'s arguments, checked before the store is opened.
OPEN_REFUSED: list[tuple[dict[str, Any], type[berth.BerthError], type[BaseException], str]] = [
    ({"url": 5, "tenant": "t", "user": "u"}, berth.WrongType, TypeError, "url"),
    ({"url": "memory:", "tenant": None, "user": "u"}, berth.WrongType, TypeError, "tenant"),
    ({"url": "memory:", "tenant": "t", "user": 3}, berth.WrongType, TypeError, "user"),
    ({"url": "memory:", "tenant": "t", "user": "u", "project": 1}, berth.WrongType, TypeError, "project"),
    ({"url": "memory:", "tenant": "t", "user": "u", "writer_idle_ms": "1s"}, berth.WrongType, TypeError,
     "writer_idle_ms"),
    ({"url": "memory:", "tenant": "t", "user": "u", "writer_idle_ms": -1}, berth.InvalidArgument, ValueError,
     "writer_idle_ms"),
    ({"url": "memory:", "tenant": "t", "user": "u", "preallocate_logs": "off"}, berth.WrongType, TypeError,
     "preallocate_logs"),
]


@pytest.mark.parametrize("opener", [berth.open, berth.open_async])
@pytest.mark.parametrize("arguments, cls, builtin, argument", OPEN_REFUSED,
                         ids=[f"open-{index}" for index in range(len(OPEN_REFUSED))])
def test_open_refuses_its_arguments_alike(opener: Callable[..., Any], arguments: dict[str, Any], cls: type,
                                          builtin: type, argument: str) -> None:
    with pytest.raises(builtin) as refused:
        opener(**arguments)
    assert not _wrong(refused.value, cls, builtin, argument)


def test_a_bad_principal_the_store_refuses_is_still_its_answer() -> None:
    with pytest.raises(berth.Invalid):
        berth.open("memory:", tenant="not a tenant!", user="u")
