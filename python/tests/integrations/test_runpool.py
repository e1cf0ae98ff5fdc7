"""`berth.integrations._runpool`: the process's idle runs, shared by the OpenAI and ADK
drop-ins — when a released run may be handed on, when the next object may take it, and
that an entry goes to one taker only, of its own drop-in and client. On every transport
(the drop-ins' own suites test the objects that use it)."""

from __future__ import annotations

import time
from typing import Any

import berth
from berth.integrations import _runpool
from berth.integrations._runpool import POOL, chain_after_append, chain_after_resume, hand_on_or_detach
from conftest import FOREVER

HEARTBEAT_S = 10.0


def resumed(client: berth.Client, session_id: str) -> tuple[str, int | None]:
    """A parallel session's run, resumed, and its chain."""
    try:
        client.create_session(session_id, policy={**FOREVER, "concurrency": {"mode": "parallel", "runs_max": 16}})
    except berth.AlreadyExists:
        pass
    outcome = client.resume(session_id)
    return outcome.attachment.run_id, chain_after_resume(client, session_id, outcome)


def end_of(client: berth.Client, session_id: str) -> int:
    return client.read_before(session_id, berth.SEQ_END, limit=1).next_seq


def runs(client: berth.Client, session_id: str) -> list[str]:
    return [run.run_id for run in client.get_session(session_id).runs]


def take(kind: str, client: berth.Client, session_id: str) -> Any:
    return POOL.take(kind, client, session_id, client.get_session(session_id), lambda: end_of(client, session_id))


def test_a_run_handed_on_goes_to_one_taker_of_its_kind_and_client(place: Any) -> None:
    client, other = place.connect(), place.connect()
    run_id, chain = resumed(client, "s")
    assert chain is not None
    chain = chain_after_append(chain, client.append("s", [("user/message", {"content": "hi"})], run=run_id))
    assert hand_on_or_detach("adk", client, "s", run_id, chain, time.monotonic(), HEARTBEAT_S)
    assert runs(client, "s") == [run_id]  # idle, still attached
    assert take("openai-agents", client, "s") is None  # another drop-in's
    assert take("adk", other, "s") is None  # another client's
    taken = take("adk", client, "s")
    assert taken is not None and taken.run_id == run_id and taken.chain == chain
    assert take("adk", client, "s") is None  # gone to the one taker
    assert runs(client, "s") == [run_id]
    client.detach("s", run_id)


def test_a_resume_beside_another_run_never_hands_on(place: Any) -> None:
    client = place.connect()
    first, _ = resumed(client, "busy")
    second, chain = resumed(client, "busy")
    assert chain is None
    assert not hand_on_or_detach("adk", client, "busy", second, chain, time.monotonic(), HEARTBEAT_S)
    assert runs(client, "busy") == [first]  # detached at once
    client.detach("busy", first)


def test_another_writer_breaks_the_chain_and_the_take_detaches(place: Any) -> None:
    client = place.connect()
    run_id, chain = resumed(client, "moved")
    outcome = client.append("moved", [("user/message", {"content": "mine"})], run=run_id)
    chain = chain_after_append(chain, outcome)
    assert chain == outcome.next_seq
    assert hand_on_or_detach("adk", client, "moved", run_id, chain, time.monotonic(), HEARTBEAT_S)
    # Another run writes and goes (the record lists the idle run alone again).
    other = client.attach("moved").run.run_id
    client.append("moved", [("user/message", {"content": "someone else's"})], run=other)
    client.detach("moved", other)
    assert runs(client, "moved") == [run_id]
    assert take("adk", client, "moved") is None
    assert runs(client, "moved") == []  # the stale entry was detached
    # A duplicate breaks a chain by itself too.
    run_id, _ = resumed(client, "moved")
    first = client.append("moved", [("user/message", {"content": "x"})], run=run_id, idempotency_key="k")
    again = client.append("moved", [("user/message", {"content": "x"})], run=run_id, idempotency_key="k")
    assert again.duplicate and chain_after_append(first.next_seq, again) is None
    client.detach("moved", run_id)


def test_an_expired_or_overfull_entry_is_detached(place: Any) -> None:
    client = place.connect()
    run_id, chain = resumed(client, "late")
    # Past a third of its lease since its last renewal: detached, not kept.
    assert not hand_on_or_detach("adk", client, "late", run_id, chain, time.monotonic() - HEARTBEAT_S, HEARTBEAT_S)
    assert runs(client, "late") == []
    handed = []
    for _ in range(_runpool.POOLED_PER_SESSION_MAX + 1):
        run_id, _ = resumed(client, "full")
        # Each resume saw the idle runs before it attached: hand on with a chain anyway,
        # to fill the pool (the take's checks are not under test here).
        handed.append(hand_on_or_detach("adk", client, "full", run_id, 0, time.monotonic(), HEARTBEAT_S))
    assert handed == [True] * _runpool.POOLED_PER_SESSION_MAX + [False]
    assert len(runs(client, "full")) == _runpool.POOLED_PER_SESSION_MAX
    POOL.release_client(client)
    assert runs(client, "full") == []
