"""Scoped memory from Python, on every transport (HTTP, embedded, PostgreSQL): exact
values, compare-and-set, search, namespaces, authorization, forget, export/import,
and the same from the async client."""

from __future__ import annotations

import asyncio
import uuid

import pytest

import berth
from conftest import FOREVER, Place


def test_put_get_search_forget(place: Place) -> None:
    alice = place.connect(role="user", user="alice")
    item = alice.memory_put("user/alice/prefs", "tone", {"style": "terse", "n": 18446744073709551617})
    assert (item.revision, item.value) == (1, {"style": "terse", "n": 18446744073709551617})
    assert alice.memory_get("user/alice/prefs", "tone") == item
    with pytest.raises(berth.RevisionConflict):
        alice.memory_put("user/alice/prefs", "tone", 2, expected_revision=0)
    assert alice.memory_put("user/alice/prefs", "tone", None, expected_revision=1).value is None
    with pytest.raises(berth.NotFound):
        alice.memory_get("user/alice/prefs", "absent")
    for key, text, n in [("a", "Green tea at noon", 3), ("b", "coffee", 10), ("c", "tea, tea", 1)]:
        alice.memory_put("user/alice/notes", key, {"text": text, "n": n})
    page = alice.memory_search("user/alice/notes", query="TEA", order="relevance")
    assert [i.key for i in page.items] == ["c", "a"]
    page = alice.memory_search("user/alice", filter=[("n", "gte", 3)])
    assert [i.key for i in page.items] == ["a", "b"]
    assert [i.key for i in alice.memory_search("user/alice", filter={"n": 1}).items] == ["c"]
    first = alice.memory_search("user/alice", limit=2)
    assert first.next_cursor is not None
    rest = alice.memory_search("user/alice", limit=2, cursor=first.next_cursor)
    assert len(first.items) + len(rest.items) == 4
    assert alice.memory_namespaces("user/alice").namespaces == ["user/alice/notes", "user/alice/prefs"]
    # Authorization: another user's scope and writing app memory are refused.
    with pytest.raises(berth.Forbidden):
        alice.memory_get("user/bob/prefs", "tone")
    with pytest.raises(berth.Forbidden):
        alice.memory_put("app/faq", "k", 1)
    service = place.connect(role="service")
    service.memory_put("app/faq", "k", {"q": "hours"})
    assert alice.memory_get("app/faq", "k").value == {"q": "hours"}
    # Bad input is typed.
    with pytest.raises(berth.Invalid):
        alice.memory_put("user/alice/../bob", "k", 1)
    with pytest.raises(berth.PayloadTooLarge):
        alice.memory_put("user/alice", "big", "x" * (256 * 1024))
    # Forget exactly one scope.
    exported = service.memory_export()
    report = alice.memory_forget("user/alice/notes")
    assert (report.items, report.prefix) == (3, "user/alice/notes")
    assert alice.memory_search("user/alice").items[0].key == "tone"
    assert service.memory_get("app/faq", "k").revision == 1
    usage = service.memory_usage()
    assert usage.items == 2 and usage.quota_items > 0
    # Export -> import into a fresh tenant -> export: identical.
    other = Place(place.transport, place.server, place.store_url)
    try:
        admin = other.connect(role="admin")
        assert admin.memory_import(exported).imported == 5
        assert admin.memory_export() == exported
    finally:
        other.close()


def test_bound_items_go_with_their_session(place: Place) -> None:
    client = place.connect()
    session_id = f"s-{uuid.uuid4().hex[:12]}"
    client.create_session(session_id, policy=FOREVER)
    client.memory_put("user/agent/s", "bound", 1, bound_to=session_id)
    client.memory_put("user/agent/s", "free", 2)
    client.close_session(session_id)
    assert len(client.memory_search("user/agent").items) == 2, "closing leaves memory alone"
    client.delete_session(session_id)
    assert [i.key for i in client.memory_search("user/agent").items] == ["free"]


def test_delete_many_is_one_audit_record_and_an_admin_sets_the_quota(place: Place) -> None:
    alice = place.connect(role="user", user="alice")
    for key in ("a", "b", "c"):
        alice.memory_put("user/alice/batch", key, 1)
    deleted = alice.memory_delete_many([("user/alice/batch", "a"), ("user/alice/batch", "absent"),
                                        ("user/alice/batch", "c")])
    assert [item.key for item in deleted.deleted] == ["a", "c"]
    admin = place.connect(role="admin")
    records = [entry for entry in admin.audit(limit=1000) if entry.action == "memory.delete"]
    assert len(records) == 1 and records[0].details["items"] == 2
    with pytest.raises(berth.Forbidden):
        place.connect(role="service").memory_set_quota(items=1)
    usage = admin.memory_set_quota(items=usage_items(admin) + 1)
    assert usage.quota_items == usage.items + 1
    alice.memory_put("user/alice/batch", "d", 1)
    with pytest.raises(berth.LimitExceeded):
        alice.memory_put("user/alice/batch", "e", 1)
    with pytest.raises(berth.NotFound):
        alice.memory_get("user/alice/batch", "e")
    assert admin.memory_set_quota().quota_items > usage.quota_items, "the default again"


def usage_items(client: berth.Client) -> int:
    return client.memory_usage().items


def test_async_client(place: Place) -> None:
    async def run() -> None:
        client = place.connect_async(role="user", user="alice")
        async with client:
            item = await client.memory_put("user/alice", "k", [1, 2])
            assert (await client.memory_get("user/alice", "k")) == item
            page = await client.memory_search("user/alice")
            assert [i.key for i in page.items] == ["k"]
            deleted = await client.memory_delete("user/alice", "k", expected_revision=1)
            assert deleted.value == [1, 2]

    asyncio.run(run())


def test_an_append_carries_memory_writes(place: Place) -> None:
    client = place.connect()
    session_id = f"s-{uuid.uuid4().hex[:12]}"
    client.create_session(session_id, policy=FOREVER)
    outcome = client.append(
        session_id,
        [("user/message", {"content": "call me Al"})],
        memory=[{"namespace": "user/alice/profile", "key": "name", "value": "Al"},
                {"namespace": "app/stats", "key": "greetings", "value": 1, "expected_revision": 0}],
    )
    assert outcome.next_seq == 2  # the message and berth's record of the writes
    assert client.memory_get("user/alice/profile", "name").value == "Al"
    with pytest.raises(berth.RevisionConflict):
        client.append(session_id, [("user/message", {"content": "again"})],
                      memory=[{"namespace": "app/stats", "key": "greetings", "value": 2, "expected_revision": 0}])
    assert client.read(session_id).events[-1].type == "session/memory"
    assert len(client.read(session_id).events) == 2, "a refused compare-and-set appends nothing"
