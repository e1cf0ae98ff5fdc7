"""BerthStore beyond InMemoryStore (both transports): the swap is real (the items are in
berth's memory, where another client sees them, and they outlive the store object), TTL
with refresh on read, the label encoding, the refusals, user keys, the async store's
sync methods, and a LangGraph graph whose nodes use the store."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any, TypedDict

import pytest
from langgraph.store.base import BaseStore, InvalidNamespaceError, PutOp

import berth
from berth.integrations.langgraph_store import (
    AsyncBerthStore,
    BerthStore,
    NamespaceTooLong,
    StoreUnsupported,
    label_of,
    segment_of,
)


def root() -> str:
    return f"app/t-{uuid.uuid4().hex[:8]}"


def test_items_are_berth_memory(place: Any) -> None:
    store = BerthStore(place.sync_client(), root=(where := root()))
    store.put(("users", "u/1", "prefs"), "theme", {"dark": True})
    raw = place.sync_client().memory_get(f"{where}/users/u%2F1/prefs", "theme")
    assert raw.value == {"dark": True} and raw.revision == 1
    assert store.berth_namespace(("users", "u/1", "prefs")) == f"{where}/users/u%2F1/prefs"
    assert place.sync_client().memory_namespaces(where).namespaces == [f"{where}/users/u%2F1/prefs"]
    # A new store object (a new client, a new process in real life) reads it back.
    again = BerthStore(place.sync_client(), root=where)
    assert again.get(("users", "u/1", "prefs"), "theme").value == {"dark": True}  # type: ignore[union-attr]
    # Roots do not see each other.
    assert BerthStore(place.sync_client(), root=root()).search(()) == []


def test_a_batch_of_deletes_is_one_audit_record(place: Any) -> None:
    """A batch's deletes are memory deletes: one call, one audit record for the batch
    (`memory.delete`, counted per scope), an absent key skipped; a lone delete is one."""
    store = BerthStore(place.sync_client(), root=(where := root()))
    for key in ("a", "b", "c"):
        store.put(("docs",), key, {"v": key})
    store.batch([PutOp(("docs",), "a", None), PutOp(("docs",), "b", None), PutOp(("docs",), "never", None),
                 PutOp(("docs",), "d", {"v": "d"})])
    store.delete(("docs",), "c")
    assert [item.key for item in store.search(("docs",))] == ["d"]
    admin = place.sync_client(role="admin")
    deletes = [entry for entry in admin.audit(limit=1000) if entry.action == "memory.delete"]
    assert [entry.details["items"] for entry in deletes] == [2, 1], deletes
    assert deletes[0].details["scopes"] == {where: {"items": 2, "bytes": deletes[0].details["bytes"]}}


def test_ttl_expires_and_refresh_on_read(place: Any) -> None:
    client = place.sync_client()
    store = BerthStore(client, root=root())
    ns = store.berth_namespace(("s",))
    ttl_s = 1.8  # margins of 0.6 s or more between each check and the expiry it tests
    store.put(("s",), "short", {"v": 1}, ttl=ttl_s / 60)
    store.put(("s",), "kept", {"v": 2})
    first = client.memory_get(ns, "short")
    assert first.ttl_ms == 1800 and first.expires_at is not None
    time.sleep(ttl_s / 2)
    assert store.get(("s",), "short", refresh_ttl=False) is not None
    assert client.memory_get(ns, "short").expires_at == first.expires_at
    assert store.get(("s",), "short") is not None  # refresh_ttl defaults to True
    refreshed = client.memory_get(ns, "short").expires_at
    assert refreshed is not None and refreshed >= first.expires_at + 800  # type: ignore[operator]
    time.sleep(ttl_s * 2 / 3)  # past the first expiry, not the refreshed one
    assert [item.key for item in store.search(("s",))] == ["kept", "short"]  # the search refreshes it too
    assert client.memory_get(ns, "short").expires_at > refreshed  # type: ignore[operator]
    time.sleep(ttl_s + 0.4)
    assert store.get(("s",), "short") is None
    assert [item.key for item in store.search(("s",))] == ["kept"]
    assert client.memory_get(ns, "kept").expires_at is None


def test_ttl_config_default_and_no_refresh(place: Any) -> None:
    client = place.sync_client()
    store = BerthStore(client, root=root(), ttl={"default_ttl": 0.01, "refresh_on_read": False})
    store.put(("s",), "k", {"v": 1})
    store.put(("s",), "forever", {"v": 1}, ttl=None)
    ns = store.berth_namespace(("s",))
    before = client.memory_get(ns, "k")
    assert before.ttl_ms == 600 and client.memory_get(ns, "forever").ttl_ms is None
    time.sleep(0.2)
    store.get(("s",), "k")
    store.search(("s",))
    assert client.memory_get(ns, "k").expires_at == before.expires_at
    time.sleep(0.6)
    assert store.get(("s",), "k") is None and store.get(("s",), "forever") is not None


def test_bad_ttl_refused(place: Any) -> None:
    store = BerthStore(place.sync_client(), root=root())
    with pytest.raises(ValueError):
        store.put(("s",), "k", {"v": 1}, ttl=0)


@pytest.mark.parametrize(
    "label", ["plain", "a/b", "%", "%25", "%2f", "\x00x"[1:], "\x01", "\x7f\x9f", "ünï", "漢字/%/\x1b", "*", "~", " "]
)
def test_label_encoding_round_trips(label: str) -> None:
    segment = segment_of(label)
    assert "/" not in segment and not any(ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F for char in segment)
    assert label_of(segment) == label


def test_refusals_are_typed(place: Any) -> None:
    client = place.sync_client()
    with pytest.raises(StoreUnsupported):
        BerthStore(client, index={"dims": 3, "embed": lambda texts: [[0.0] * 3 for _ in texts]})
    with pytest.raises(StoreUnsupported):
        AsyncBerthStore(place.async_client(), index={"dims": 3, "embed": "fake:model"})
    assert issubclass(StoreUnsupported, NotImplementedError) and issubclass(NamespaceTooLong, InvalidNamespaceError)
    for bad in ("users", "team/x", "app/", "app/a b", "app/x//y", "app/x/..", "app/x/"):
        with pytest.raises(ValueError):
            BerthStore(client, root=bad)
    store = BerthStore(client, root=root())
    with pytest.raises(StoreUnsupported):
        store.search(("a",), filter={"nested": {"x": 1}})
    with pytest.raises(NamespaceTooLong):
        store.put(("x" * 129,), "k", {"v": 1})
    with pytest.raises(NamespaceTooLong):
        store.put(tuple("abcdefghijklmno"), "k", {"v": 1})  # 15 labels: berth has 14 free segments
    store.put(tuple("abcdefghijklmn"), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp((), "k", {"v": 1})])  # would be the root itself
    deeper = BerthStore(client, root=root() + "/sub")
    with pytest.raises(NamespaceTooLong):
        deeper.put(tuple("abcdefghijklmn"), "k", {"v": 1})  # the root's free segment counts
    with pytest.raises(berth.Invalid):
        store.put(("a",), "", {"v": 1})  # berth keys are 1-512 bytes
    with pytest.raises(berth.PayloadTooLarge):
        store.put(("a",), "k" * 513, {"v": 1})
    with pytest.raises(berth.Invalid):
        store.search(("a",), filter={"n": {"$gt": True}})  # berth orders numbers and strings only


def test_user_key_under_its_own_scope(place: Any) -> None:
    mine = BerthStore(place.sync_client(user="alice", role="user"), root="user/alice/langgraph")
    mine.put(("memories",), "m1", {"text": "likes tea"})
    assert mine.search(("memories",), query="tea")[0].key == "m1"
    assert mine.list_namespaces() == [("memories",)]
    with pytest.raises(berth.Forbidden):
        BerthStore(place.sync_client(user="alice", role="user"), root="user/bob").put(("m",), "k", {"v": 1})
    with pytest.raises(berth.Forbidden):
        BerthStore(place.sync_client(user="alice", role="user")).put(("m",), "k", {"v": 1})  # app/ is read-only


async def test_async_store_and_its_sync_methods(place: Any) -> None:
    client = place.async_client()
    store = AsyncBerthStore(client, root=(where := root()))
    with pytest.raises(asyncio.InvalidStateError):
        store.put(("a",), "k", {"v": 0})  # this is the loop's own thread
    await store.aput(("a",), "k", {"v": 1})
    with pytest.raises(asyncio.InvalidStateError):
        store.get(("a",), "k")
    seen: list[Any] = []
    thread = threading.Thread(target=lambda: seen.append(store.get(("a",), "k")))
    thread.start()
    while thread.is_alive():
        await asyncio.sleep(0.01)
    assert seen[0].value == {"v": 1}
    assert (await store.asearch(("a",)))[0].key == "k"
    assert await store.alist_namespaces() == [("a",)]
    await store.adelete(("a",), "k")
    assert await store.aget(("a",), "k") is None
    await client.close()
    assert place.sync_client().memory_search(where).items == []


async def test_sync_store_async_methods(place: Any) -> None:
    store = BerthStore(place.sync_client(), root=root())
    results = await asyncio.gather(*(store.aput(("g",), f"k{i}", {"i": i}) for i in range(10)))
    assert results == [None] * 10
    assert len(await store.asearch(("g",), limit=100)) == 10


def test_search_pages_past_one_berth_page(place: Any) -> None:
    store = BerthStore(place.sync_client(), root=root())
    store.batch([PutOp(("p",), f"k{i:04d}", {"i": i}) for i in range(1100)])
    page = store.search(("p",), limit=50, offset=1040)
    assert [item.value["i"] for item in page] == list(range(1040, 1090))
    assert len(store.search(("p",), filter={"i": {"$gte": 100}}, limit=2000)) == 1000


class State(TypedDict):
    user: str
    text: str
    recalled: list[str]


def _graph(checkpointless_store: BaseStore) -> Any:
    from langgraph.graph import END, START, StateGraph

    def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
        store.put(("memories", state["user"]), uuid.uuid4().hex, {"text": state["text"]})
        return {}

    def recall(state: State, *, store: BaseStore) -> dict[str, Any]:
        found = store.search(("memories", state["user"]), limit=100)
        return {"recalled": sorted(item.value["text"] for item in found)}

    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    return builder.compile(store=checkpointless_store)


def test_graph_uses_the_store(place: Any) -> None:
    where = root()
    graph = _graph(BerthStore(place.sync_client(), root=where))
    graph.invoke({"user": "ann", "text": "likes tea", "recalled": []})
    out = graph.invoke({"user": "ann", "text": "owns a cat", "recalled": []})
    assert out["recalled"] == ["likes tea", "owns a cat"]
    # A second graph on a new store object: cross-thread memory, durable.
    other = _graph(BerthStore(place.sync_client(), root=where))
    assert other.invoke({"user": "ann", "text": "x", "recalled": []})["recalled"] == ["likes tea", "owns a cat", "x"]
    assert len(place.sync_client().memory_search(where + "/memories/ann").items) == 3


async def test_graph_uses_the_async_store(place: Any) -> None:
    client = place.async_client()
    graph = _graph(AsyncBerthStore(client, root=(where := root())))
    await graph.ainvoke({"user": "bo", "text": "one", "recalled": []})
    out = await graph.ainvoke({"user": "bo", "text": "two", "recalled": []})
    assert out["recalled"] == ["one", "two"]
    await client.close()
    assert len(place.sync_client().memory_search(where).items) == 2
