"""Errors name what they are about. The server never echoes an id (a missing session and
another tenant's answer byte for byte alike), so the client names it from the call it
sent: "session 's-ghost' not found", with `what`, `id`, `namespace` and `session_id` as
attributes, on every transport and both clients, keeping what the error had (`code`,
`status`, `body`, `retryable`)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest

import berth
from conftest import FOREVER, Place

KEPT, OTHER, GHOST = "s-kept", "s-other", "s-ghost"
EVENT = [("user/message", {"content": "x"})]

#: (what is called, the class, the message, the attributes it names: what, id, namespace,
#: session_id). Each call runs on a tenant holding KEPT (one event, run "r-1" attached),
#: OTHER and the memory item app/notes:k.
CASES: list[tuple[str, Callable[[Any], Any], type[berth.BerthError], str, tuple[Any, ...]]] = [
    ("get", lambda c: c.get_session(GHOST), berth.NotFound, "session 's-ghost' not found",
     ("session", GHOST, None, GHOST)),
    ("create", lambda c: c.create_session(KEPT), berth.AlreadyExists, "session 's-kept' already exists",
     ("session", KEPT, None, KEPT)),
    ("update", lambda c: c.update_session(GHOST, title="t"), berth.NotFound, "session 's-ghost' not found",
     ("session", GHOST, None, GHOST)),
    ("close", lambda c: c.close_session(GHOST), berth.NotFound, "session 's-ghost' not found",
     ("session", GHOST, None, GHOST)),
    ("delete", lambda c: c.delete_session(GHOST), berth.NotFound, "session 's-ghost' not found",
     ("session", GHOST, None, GHOST)),
    ("fork from", lambda c: c.fork_session(GHOST, new_id="s-new"), berth.NotFound, "session 's-ghost' not found",
     ("session", GHOST, None, GHOST)),
    ("fork onto", lambda c: c.fork_session(KEPT, new_id=OTHER), berth.AlreadyExists,
     "session 's-other' already exists", ("session", OTHER, None, OTHER)),
    ("append", lambda c: c.append(GHOST, EVENT), berth.NotFound, "session 's-ghost' not found",
     ("session", GHOST, None, GHOST)),
    ("read", lambda c: c.read(GHOST), berth.NotFound, "session 's-ghost' not found", ("session", GHOST, None, GHOST)),
    ("read before", lambda c: c.read_before(GHOST), berth.NotFound, "session 's-ghost' not found",
     ("session", GHOST, None, GHOST)),
    ("read at, no session", lambda c: c.read_at(GHOST, [0]), berth.NotFound, "session 's-ghost' not found",
     ("session", GHOST, None, GHOST)),
    ("read at, past the end", lambda c: c.read_at(KEPT, [0, 7]), berth.NotFound,
     "event 7 of session 's-kept' not found", ("event", "7", None, KEPT)),
    ("attach", lambda c: c.attach(GHOST), berth.NotFound, "session 's-ghost' not found",
     ("session", GHOST, None, GHOST)),
    ("attach a run twice", lambda c: c.attach(KEPT, run_id="r-1"), berth.AlreadyExists,
     "run 'r-1' of session 's-kept' already exists", ("run", "r-1", None, KEPT)),
    ("heartbeat", lambda c: c.heartbeat(GHOST, "r-1"), berth.NotFound, "session 's-ghost' not found",
     ("session", GHOST, None, GHOST)),
    ("detach", lambda c: c.detach(GHOST, "r-1"), berth.NotFound, "session 's-ghost' not found",
     ("session", GHOST, None, GHOST)),
    ("resume", lambda c: c.resume(GHOST), berth.NotFound, "session 's-ghost' not found",
     ("session", GHOST, None, GHOST)),
    ("export", lambda c: c.export(GHOST), berth.NotFound, "session 's-ghost' not found",
     ("session", GHOST, None, GHOST)),
    ("memory get", lambda c: c.memory_get("app/notes", "nope"), berth.NotFound,
     "memory item 'nope' in namespace 'app/notes' not found", ("memory item", "nope", "app/notes", None)),
    ("memory delete", lambda c: c.memory_delete("app/notes", "nope"), berth.NotFound,
     "memory item 'nope' in namespace 'app/notes' not found", ("memory item", "nope", "app/notes", None)),
    ("memory bound to", lambda c: c.memory_put("app/notes", "b", 1, bound_to=GHOST), berth.NotFound,
     "session 's-ghost' not found", ("session", GHOST, None, GHOST)),
]


def _named(error: BaseException, cls: type[berth.BerthError], message: str, names: tuple[Any, ...]) -> list[str]:
    """What differs from the expectation (empty: nothing)."""
    problems = []
    if type(error) is not cls:
        return [f"{type(error).__name__}: {error}"]
    assert isinstance(error, (berth.NotFound, berth.AlreadyExists))
    if str(error) != message or error.message != message:
        problems.append(f"message {str(error)!r}")
    if (error.what, error.id, error.namespace, error.session_id) != names:
        problems.append(f"names {(error.what, error.id, error.namespace, error.session_id)!r}")
    # What the error had before: the server's body as sent, its code and status.
    status = 404 if cls is berth.NotFound else 409
    if (error.code, error.status, error.retryable, error.body.get("code")) != (cls.code, status, False, cls.code):
        problems.append(f"kept {(error.code, error.status, error.retryable, error.body)!r}")
    return problems


def _arrange(client: berth.Client) -> None:
    client.create_session(KEPT, policy=FOREVER)
    client.create_session(OTHER, policy=FOREVER)
    client.append(KEPT, EVENT)
    client.attach(KEPT, run_id="r-1")
    client.memory_put("app/notes", "k", 1)


def test_errors_name_the_session_or_item(place: Place) -> None:
    client = place.connect()
    _arrange(client)
    wrong = {}
    for label, call, cls, message, names in CASES:
        try:
            call(client)
        except berth.BerthError as error:
            problems = _named(error, cls, message, names)
        else:
            problems = ["no error"]
        if problems:
            wrong[label] = problems
    assert not wrong, wrong
    assert [event.seq for event in client.read(KEPT).events] == [0]


def test_the_async_client_names_them_too(place: Place) -> None:
    _arrange(place.connect())

    async def each() -> dict[str, list[str]]:
        wrong = {}
        async with place.connect_async() as client:
            for label, call, cls, message, names in CASES:
                try:
                    await call(client)
                except berth.BerthError as error:
                    problems = _named(error, cls, message, names)
                else:
                    problems = ["no error"]
                if problems:
                    wrong[label] = problems
        return wrong

    wrong = asyncio.run(each())
    assert not wrong, wrong


def test_a_live_tail_names_its_session(place: Place) -> None:
    client = place.connect()
    try:
        list(client.stream(GHOST, max_events=1, reconnect_s=0))
    except berth.NotFound as error:
        assert (str(error), error.session_id, error.id) == ("session 's-ghost' not found", GHOST, GHOST)
    else:
        raise AssertionError("a tail of a missing session ended")

    async def tail() -> None:
        async with place.connect_async() as aclient:
            try:
                async for _ in aclient.stream(GHOST, max_events=1, reconnect_s=0):
                    pass
            except berth.NotFound as error:
                assert (str(error), error.session_id) == ("session 's-ghost' not found", GHOST)
            else:
                raise AssertionError("a tail of a missing session ended")

    asyncio.run(tail())


def test_other_errors_say_their_session() -> None:
    """Any error answer to a call about a session carries its id (`session_id`), the
    message as the server wrote it; one about none carries None."""
    from berth import _calls as calls
    from berth._client import _raise_for

    conflict = calls.Answer(409, {}, b'{"code":"seq_conflict","message":"expected seq 3","retryable":false,'
                                     b'"expected":3,"actual":0}')
    with pytest.raises(berth.SeqConflict) as raised:
        _raise_for(conflict, calls.append(KEPT, EVENT, expected_seq=0))
    assert (raised.value.session_id, raised.value.next_seq, str(raised.value)) == (KEPT, 3, "expected seq 3")
    route = calls.Answer(404, {}, b'{"code":"not_found","message":"no such endpoint","retryable":false}')
    with pytest.raises(berth.NotFound) as unnamed:
        _raise_for(route, calls.whoami())
    assert (unnamed.value.session_id, unnamed.value.what, unnamed.value.id) == (None, None, None)
    assert str(unnamed.value) == "no such endpoint"
