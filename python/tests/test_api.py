"""The client API, every `/v1` operation, on every transport (HTTP, embedded, PostgreSQL):
the same calls, the same answers, the same exceptions."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import berth
from conftest import FOREVER, Place


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:16]}"


def test_session_life(place: Place) -> None:
    client = place.connect()
    session_id = sid()
    created = client.create_session(session_id, title="hello", labels=["demo"], policy=FOREVER)
    assert created.id == session_id and created.title == "hello" and created.labels == ["demo"]
    assert created.header.scope.tenant == place.tenant

    fetched = client.get_session(session_id)
    assert fetched.revision == created.revision

    updated = client.update_session(session_id, title="renamed", expected_revision=fetched.revision)
    assert updated.title == "renamed" and updated.labels == ["demo"]
    with pytest.raises(berth.RevisionConflict) as stale:
        client.update_session(session_id, title="again", expected_revision=fetched.revision)
    assert stale.value.status == 412

    client.append(session_id, [("user/message", {"content": "hi"})])
    fork = client.fork_session(session_id, new_id=sid())
    assert fork.header.parent is not None and fork.header.parent.session == session_id

    closed = client.close_session(session_id)
    assert closed.status == "closed"
    with pytest.raises(berth.Terminal):
        client.append(session_id, [("user/message", {"content": "late"})])

    client.delete_session(session_id)
    with pytest.raises(berth.NotFound):
        client.get_session(session_id)
    assert client.get_session(fork.id).id == fork.id


def test_listing_filters_and_cursor_iteration(place: Place) -> None:
    client = place.connect()
    ids = set()
    for index in range(7):
        session_id = sid()
        ids.add(session_id)
        client.create_session(session_id, labels=["even" if index % 2 == 0 else "odd"], policy=FOREVER)
        client.append(session_id, [("user/message", {"content": f"n{index}"})])
    first = client.list_sessions(limit=3)
    assert len(first.items) == 3 and first.next_cursor is not None
    assert {session.id for session in client.iter_sessions(limit=3)} == ids
    counts = {count.status: count for count in client.count_sessions().counts}
    assert counts["active"].count == 7 and not counts["active"].more
    fork = client.fork_session(next(iter(ids)), new_id=sid())
    assert [session.id for session in client.iter_sessions(parent=next(iter(ids)))] == [fork.id]
    client.delete_session(fork.id)
    evens = {session.id for session in client.iter_sessions(label="even")}
    assert len(evens) == 4 and evens <= ids
    assert all(session.status == "active" for session in client.iter_sessions(status=["active"]))


def test_append_read_by_position_and_tail(place: Place) -> None:
    client = place.connect()
    session_id = client.create_session(sid(), policy=FOREVER).id
    for start in range(0, 2500, 500):
        outcome = client.append(session_id, [("note/n", {"n": n}) for n in range(start, start + 500)])
        assert outcome.first_seq == start and outcome.next_seq == start + 500
    page = client.read(session_id, from_seq=10, limit=5)
    assert [event.seq for event in page.events] == [10, 11, 12, 13, 14] and page.next_seq == 15
    before = client.read_before(session_id, 100, limit=3)
    assert [event.data["n"] for event in before.events] == [97, 98, 99] and before.first_seq == 97
    assert [event.seq for event in client.tail(session_id, 1500)] == list(range(1000, 2500))
    assert sum(1 for _ in client.iter_events(session_id)) == 2500


def test_point_read_by_seqs(place: Place) -> None:
    client = place.connect()
    session_id = client.create_session(sid(), policy=FOREVER).id
    client.append(session_id, [("note/n", {"n": n}) for n in range(50)])
    page = client.read_at(session_id, [40, 3, 3, 17, 0])
    assert [event.seq for event in page.events] == [0, 3, 17, 40]
    assert [event.data["n"] for event in page.events] == [0, 3, 17, 40]
    assert (page.first_seq, page.next_seq) == (0, 41)
    with pytest.raises(berth.NotFound) as missing:
        client.read_at(session_id, [2, 50, 60])
    assert missing.value.body.get("actual") == 50
    with pytest.raises(berth.LimitExceeded) as many:
        client.read_at(session_id, range(1001))
    assert (many.value.limit_name, many.value.limit) == ("page_size", 1000)
    with pytest.raises(berth.NotFound):
        client.read_at("missing", [0])


def test_reads_filtered_by_type(place: Place) -> None:
    client = place.connect()
    session_id = client.create_session(sid(), policy=FOREVER).id
    def event(n: int) -> tuple[str, dict[str, object]]:
        return ("user/message", {"content": "m", "n": n}) if n % 10 == 0 else ("note/n", {"n": n})

    for start in (0, 750):
        client.append(session_id, [event(n) for n in range(start, start + 750)])
    page = client.read(session_id, types=["user/message"], limit=3)
    assert [event.seq for event in page.events] == [0, 10, 20] and (page.first_seq, page.next_seq) == (0, 21)
    found, start = [], 0
    while True:
        page = client.read(session_id, from_seq=start, types=["user/message"], limit=40)
        if page.next_seq == start:
            break
        found += [event.data["n"] for event in page.events]
        start = page.next_seq
    assert found == list(range(0, 1500, 10))
    tail = client.read_before(session_id, types=["user/message", "note/x"], limit=2)
    assert [event.seq for event in tail.events] == [1480, 1490] and tail.first_seq == 1480
    assert client.read(session_id, types=["tool/call"]).events == []
    with pytest.raises(berth.Invalid):
        client.read(session_id, types=["Not a type"])
    with pytest.raises(TypeError):
        client.read(session_id, types="user/message")


def test_exact_values_round_trip(place: Place) -> None:
    client = place.connect()
    session_id = client.create_session(sid(), policy=FOREVER).id
    data = {"big": 2**63 - 1, "negative": -(2**62), "text": "snow ☃ \u0000 \"q\"", "nested": [1, [2, {"z": None}]]}
    client.append(session_id, [("note/data", data)])
    assert client.read(session_id).events[0].data == data


def test_expected_seq_conflict_names_the_actual_seq(place: Place) -> None:
    client = place.connect()
    session_id = client.create_session(sid(), policy=FOREVER).id
    client.append(session_id, [("user/message", {"content": "a"})], expected_seq=0)
    with pytest.raises(berth.SeqConflict) as conflict:
        client.append(session_id, [("user/message", {"content": "b"})], expected_seq=0)
    assert conflict.value.status == 409
    assert (conflict.value.next_seq, conflict.value.actual) == (1, 0)
    assert len(client.read(session_id).events) == 1


def test_idempotency_keys(place: Place) -> None:
    client = place.connect()
    session_id = client.create_session(sid(), policy=FOREVER).id
    events = [("user/message", {"content": "once"})]
    first = client.append(session_id, events, idempotency_key="k-1")
    again = client.append(session_id, events, idempotency_key="k-1")
    assert again.duplicate and again.first_seq == first.first_seq
    with pytest.raises(berth.IdempotencyKeyReused):
        client.append(session_id, [("user/message", {"content": "other"})], idempotency_key="k-1")
    assert len(client.read(session_id).events) == 1


@pytest.mark.parametrize(
    "bad, error",
    [
        ({"session_id": "no spaces allowed"}, berth.Invalid),
        ({"events": [("", {"x": 1})]}, berth.Invalid),
        ({"events": [("user/message", {"content": "x" * (2 * 1024 * 1024)})]}, (berth.LimitExceeded, berth.PayloadTooLarge)),
        ({"idempotency_key": "bad key with spaces"}, berth.Invalid),
        ({"expected_seq": -1}, berth.Invalid),
    ],
    ids=["session-id", "event-type", "too-large", "idempotency-key", "negative-seq"],
)
def test_bad_input_raises_and_stores_nothing(place: Place, bad: dict, error: type) -> None:
    client = place.connect()
    session_id = client.create_session(sid(), policy=FOREVER).id
    client.append(session_id, [("user/message", {"content": "kept"})])
    before = client.export(session_id)
    call = {"session_id": session_id, "events": [("user/message", {"content": "x"})], **bad}
    target = call.pop("session_id")
    with pytest.raises(error) as raised:
        client.append(target, call.pop("events"), **call)
    assert 400 <= raised.value.status < 500
    assert client.export(session_id) == before


def test_not_found_and_forbidden_across_users(place: Place) -> None:
    service = place.connect(role="service")
    alice = place.connect(role="user", user="alice")
    bob = place.connect(role="user", user="bob")
    session_id = alice.create_session(sid(), policy=FOREVER).id
    alice.attach(session_id, run_id="alice-run")
    alice.append(session_id, [("user/message", {"content": "mine"})], run="alice-run")
    with pytest.raises(berth.NotFound):
        bob.get_session(session_id)
    with pytest.raises(berth.NotFound):
        bob.read(session_id)
    assert service.get_session(session_id).header.scope.user == "alice"
    with pytest.raises(berth.Forbidden):
        alice.audit()


def test_runs_attach_race_heartbeat_detach_and_lost_ownership(place: Place) -> None:
    first = place.connect()
    second = place.connect(user="other-agent")
    session_id = first.create_session(sid(), policy=FOREVER).id
    attached = first.attach(session_id, run_id="run-a")
    assert attached.run_id == "run-a"
    with pytest.raises(berth.Busy):
        second.attach(session_id, run_id="run-b", on_busy="reject")
    first.append(session_id, [("user/message", {"content": "from a"})], run="run-a")
    assert first.heartbeat(session_id, "run-a").run_id == "run-a"
    taken = second.attach(session_id, run_id="run-b", on_busy="interrupt")
    assert [run.run_id for run in taken.displaced] == ["run-a"]
    with pytest.raises(berth.OwnershipLost) as lost:
        first.append(session_id, [("user/message", {"content": "stale"})], run="run-a")
    assert lost.value.run == "run-a"
    detached = second.detach(session_id, "run-b", outcome="completed")
    assert all(run.status != "attached" for run in detached.runs)


def test_resume_repairs_an_open_turn(place: Place) -> None:
    client = place.connect()
    session_id = client.create_session(sid(), policy=FOREVER).id
    client.attach(session_id, run_id="crashed")
    client.append(
        session_id,
        [
            ("turn/start", {"turn": 1}),
            ("user/message", {"content": "weather?"}),
            ("tool/call", {"call_id": "c1", "name": "weather", "arguments": {}}),
        ],
        run="crashed",
    )
    outcome = client.resume(session_id, run_id="after", on_busy="interrupt")
    assert outcome.attachment.run_id == "after"
    assert outcome.repaired, "the open tool call and turn get closers"
    assert {event.type for event in outcome.repaired} >= {"tool/result", "turn/end"}
    assert outcome.next_seq == client.read_before(session_id, limit=1).next_seq


def test_run_less_appends_from_two_service_principals_are_both_stored_in_order(place: Place) -> None:
    one = place.connect(user="svc-one")
    two = place.connect(user="svc-two")
    session_id = one.create_session(sid(), policy=FOREVER).id
    for n in range(10):
        (one if n % 2 == 0 else two).append(session_id, [("note/n", {"n": n})])
    events = one.read(session_id).events
    assert [event.data["n"] for event in events] == list(range(10))
    assert [event.seq for event in events] == list(range(10))


def test_export_import_round_trip(place: Place) -> None:
    client = place.connect()
    session_id = client.create_session(sid(), title="exported", policy=FOREVER).id
    client.append(session_id, [("user/message", {"content": "hi"}), ("assistant/message", {"content": "yo"})])
    exported = client.export(session_id)
    assert client.export(session_id, format="zip")[:2] == b"PK"
    client.delete_session(session_id)
    imported = client.import_sessions(exported)
    assert [session.id for session in imported.sessions] == [session_id]
    assert client.export(session_id) == exported


def test_admin_audit_retention_and_whoami(place: Place) -> None:
    admin = place.connect(role="admin", user="root")
    principal = admin.whoami()
    assert (principal.tenant, principal.user, principal.role) == (place.tenant, "root", "admin")
    session_id = admin.create_session(sid(), policy=FOREVER).id
    admin.close_session(session_id)
    assert admin.reopen_session(session_id).status in ("active", "idle")
    with pytest.raises(berth.Forbidden):
        place.connect(role="service").reopen_session(session_id)
    admin.set_retention(idle_ttl_ms=3_600_000)
    entries = admin.audit()
    assert entries and all(entry.tenant == place.tenant for entry in entries)
    found = admin.audit_search(session=session_id)
    assert found.entries and all(entry.session == session_id for entry in found.entries)
    assert admin.verify_audit().broken_at is None


def test_unknown_session_on_every_read_is_not_found(place: Place) -> None:
    client = place.connect()
    for call in (
        lambda: client.get_session("missing"),
        lambda: client.read("missing"),
        lambda: client.read_before("missing"),
        lambda: client.export("missing"),
        lambda: client.append("missing", [("user/message", {"content": ""})]),
    ):
        with pytest.raises(berth.NotFound):
            call()


def test_usage_of_a_session_and_over_a_range(place: Place) -> None:
    """Issue 54: a session's usage from its `model/call` and tool events, and the caller's
    totals over `[since, before)`; another user's session is `NotFound`; a bad range is
    `Invalid`."""
    import time

    client = place.connect()
    session_id = client.create_session(sid(), policy=FOREVER).id
    model = f"py-{uuid.uuid4().hex[:8]}"
    t0 = int(time.time() * 1000)
    client.append(session_id, [
        {"type": "model/call", "time": t0, "ignorable": True,
         "data": {"model": model, "provider": "test", "input_tokens": 100, "output_tokens": 9, "latency_ms": 12.5}},
        {"type": "tool/call", "time": t0 + 1, "data": {"call_id": "c1", "name": "ls", "arguments": {}}},
        {"type": "tool/result", "time": t0 + 31, "data": {"call_id": "c1", "content": "a"}},
        {"type": "model/call", "time": t0 + 40, "ignorable": True,
         "data": {"model": model, "error": {"code": "timeout", "name": "Timeout"}}},
    ])
    usage = client.session_usage(session_id)
    assert isinstance(usage, berth.SessionUsage) and usage.session == session_id
    assert (usage.calls, usage.errors, usage.input_tokens, usage.output_tokens) == (2, 1, 100, 9)
    assert (usage.model_ms, usage.tool_calls, usage.tool_ms) == (12.5, 1, 30)
    assert [(row.provider, row.model, row.calls) for row in usage.by_model] == [(None, model, 1), ("test", model, 1)]
    totals = client.usage(since=t0, before=t0 + 60_000)
    assert isinstance(totals, berth.Usage) and (totals.since, totals.sessions, totals.calls) == (t0, 1, 2)
    with pytest.raises(berth.NotFound):
        place.connect(role="user", user="mallory").session_usage(session_id)
    with pytest.raises(berth.Invalid):
        client.usage(since=t0, before=t0)


@pytest.mark.parametrize("preallocate, version", [(None, 2), (True, 2), (False, 1)])
def test_preallocate_logs_chooses_the_format_of_new_logs(tmp_path: Path, preallocate: bool | None, version: int) -> None:
    data = tmp_path / "data"
    with berth.open(data, tenant="t", user="u", role="service", preallocate_logs=preallocate) as client:
        client.create_session("grown", policy=FOREVER)
        client.append("grown", [("user/message", {"content": "hi"})])
        assert len(client.read("grown").events) == 1
    header = (data / "tenants" / "t" / "sessions" / "grown" / "session.jsonl").read_bytes().split(b"\n")[0]
    assert f'"version":{version},'.encode() in header, header
