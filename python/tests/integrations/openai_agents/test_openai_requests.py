"""The request patterns' costs (issue 53): a parallel object reads without a run, and a
request's object hands its run, its turns closed, to the next object of the process on
the same session and client instead of a detach and an attach — only while the catalog
shows nothing changed since that run's resume; on a real `berth serve` and embedded."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import berth
from berth.integrations.openai_agents import BerthSession
from berth.integrations.openai_agents._binding import _POOL
from conftest import Place


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def count_calls(client: berth.Client) -> collections.Counter[str]:
    """Counts `client`'s calls by kind (`resume`, `detach`, `append`, `read`, `get_session`, …)."""
    counts: collections.Counter[str] = collections.Counter()
    original, original_async = client._execute, client._aexecute

    def kind(call: Any) -> str:
        path = call.path.partition("?")[0]
        if call.method == "GET":
            return "read" if path.endswith("/events") else "get_session"
        return "append" if path.endswith("/events") else path.rsplit("/", 1)[-1]

    def counting(call: Any) -> Any:
        counts[kind(call)] += 1
        return original(call)

    async def counting_async(call: Any) -> Any:
        counts[kind(call)] += 1
        return await original_async(call)

    client._execute = counting  # type: ignore[method-assign]
    client._aexecute = counting_async  # type: ignore[method-assign]
    return counts


def turn(n: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": f"a{n}"}]


def request(client: berth.Client, session_id: str, n: int) -> list[Any]:
    session = BerthSession(session_id, client)

    async def go() -> list[Any]:
        seen = await session.get_items(10)
        await session.add_items(turn(n))
        return seen

    try:
        return run(go())
    finally:
        session.close()


def test_request_objects_hand_their_run_on(oai_place: Place) -> None:
    client = oai_place.connect()
    counts = count_calls(client)
    request(client, "requests", 0)
    assert counts["resume"] == 1 and counts["detach"] == 0
    counts.clear()
    for n in range(1, 6):
        assert [item["content"] for item in request(client, "requests", n)][-2:] == [f"q{n - 1}", f"a{n - 1}"]
    # Each request: the record (its mode, its runs), one read sized to the answer, the
    # append. No attach, no detach.
    assert counts == {"get_session": 5, "read": 5, "append": 5}, counts
    events = client.read("requests").events
    assert len({event.run for event in events}) == 1
    # Turns go on numbering across the objects of the one run.
    assert [event.data["turn"] for event in events if event.type == "turn/start"] == list(range(6))
    assert len(client.get_session("requests").runs) == 1  # idle, handed on at the next request
    _POOL.release_all()
    assert client.get_session("requests").runs == []


def test_a_reader_attaches_nothing(oai_place: Place) -> None:
    client = oai_place.connect()
    with BerthSession("read-only", client) as writer:
        run(writer.add_items(turn(0)))
    _POOL.release_all()
    counts = count_calls(client)
    with BerthSession("read-only", client) as reader:
        assert [item["content"] for item in run(reader.get_items())] == ["q0", "a0"]
        assert [item["content"] for item in run(reader.get_items(1))] == ["a0"]
        assert client.get_session("read-only").runs == []
    assert counts["resume"] == 0 and counts["detach"] == 0, counts


def test_a_run_is_not_handed_on_past_another_runs_events(oai_place: Place) -> None:
    client = oai_place.connect()
    request(client, "changed", 0)
    first = {event.run for event in client.read("changed").events}
    # Another process opens a turn and goes away without closing it.
    other = oai_place.connect()
    run_id = other.attach("changed").run.run_id
    other.append("changed", [("turn/start", {"turn": 7}), ("user/message", {"content": "left open"})], run=run_id)
    other.detach("changed", run_id)
    counts = count_calls(client)
    request(client, "changed", 1)
    # The idle run detached, a new one resumed (repairing that turn) before the answer.
    assert counts["resume"] == 1 and counts["detach"] == 1, counts
    events = client.read("changed").events
    closed = [event for event in events if event.type == "turn/end" and event.run == run_id]
    assert [event.data["reason"] for event in closed] == ["interrupted"]
    assert len({event.run for event in events} - first - {run_id}) == 1
    _POOL.release_all()
    assert client.get_session("changed").runs == []


def test_a_run_is_not_handed_on_while_another_is_attached(oai_place: Place) -> None:
    client = oai_place.connect()
    request(client, "shared", 0)
    other = oai_place.connect()
    held = other.attach("shared").run.run_id
    counts = count_calls(client)
    request(client, "shared", 1)
    # The idle run detached, a new one resumed; and, another run being attached, that one
    # is released at `close()` rather than handed on.
    assert counts["resume"] == 1 and counts["detach"] == 2, counts
    other.detach("shared", held)
    _POOL.release_all()
    assert client.get_session("shared").runs == []


def test_an_open_turn_or_an_exclusive_object_releases_its_run(oai_place: Place) -> None:
    client = oai_place.connect()
    with BerthSession("open-turn", client) as session:
        run(session.add_items([{"role": "user", "content": "unanswered"}]))  # the turn stays open
    assert client.get_session("open-turn").runs == []
    with BerthSession("solo-requests", client, exclusive=True) as session:
        run(session.add_items(turn(0)))
    assert client.get_session("solo-requests").runs == []


def test_closing_the_client_detaches_its_idle_runs(oai_place: Place) -> None:
    # A script that closes its client and exits leaves no run attached until its lease
    # lapses: the client's closing detaches the runs its objects handed on.
    client = oai_place.connect()
    request(client, "closing", 0)
    reader = oai_place.connect()
    assert len(reader.get_session("closing").runs) == 1  # idle, kept for a next request
    client.close()
    assert reader.get_session("closing").runs == []
