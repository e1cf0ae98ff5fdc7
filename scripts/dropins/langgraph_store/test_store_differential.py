"""The differential suite: every case runs against LangGraph's own `InMemoryStore` and
against `BerthStore` / `AsyncBerthStore` (HTTP and embedded; sync and async methods),
and the normalized results must be equal. Results are normalized as items
`(namespace, key, value)`; a search's items are compared as a sorted list (neither store
promises an order: InMemoryStore returns insertion order, berth (namespace, key) order),
list_namespaces exactly (both sort). An exception is compared by its class.

A case where berth differs on purpose is in `DIVERGENT`, with its reason, and runs as a
strict expected failure: it must differ, so the list stays the truth
(docs/guides/langgraph.md, "Divergences from `InMemoryStore`").
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from langgraph.store.base import GetOp, Item, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from berth.integrations.langgraph_store import AsyncBerthStore, BerthStore


class Facade:
    """One store behind one async API: its sync methods (called directly) or its
    a-methods."""

    def __init__(self, store: Any, mode: str) -> None:
        self.store = store
        self.mode = mode

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.mode == "async":
            return await getattr(self.store, "a" + name)(*args, **kwargs)
        return getattr(self.store, name)(*args, **kwargs)

    async def put(self, *args: Any, **kwargs: Any) -> Any:
        return await self._call("put", *args, **kwargs)

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        return await self._call("get", *args, **kwargs)

    async def delete(self, *args: Any, **kwargs: Any) -> Any:
        return await self._call("delete", *args, **kwargs)

    async def search(self, *args: Any, **kwargs: Any) -> Any:
        return await self._call("search", *args, **kwargs)

    async def list_namespaces(self, *args: Any, **kwargs: Any) -> Any:
        return await self._call("list_namespaces", *args, **kwargs)

    async def batch(self, ops: list[Any]) -> Any:
        return await self._call("batch", ops)


Case = Callable[[Facade], Awaitable[Any]]
CASES: dict[str, Case] = {}


def case(function: Case) -> Case:
    CASES[function.__name__] = function
    return function


def norm(result: Any) -> Any:
    if isinstance(result, Item):
        return ("item", tuple(result.namespace), result.key, result.value)
    if isinstance(result, list) and result and all(isinstance(item, Item) for item in result):
        return sorted((norm(item) for item in result), key=repr)
    if isinstance(result, (list, tuple)):
        return [norm(item) for item in result]
    if isinstance(result, dict):
        return {key: norm(value) for key, value in result.items()}
    return result


async def outcome(function: Case, facade: Facade) -> Any:
    try:
        return ("ok", norm(await function(facade)))
    except Exception as error:  # noqa: BLE001 - the class is the result
        return ("raises", _family(error))


def _family(error: Exception) -> str:
    for family in ("InvalidNamespaceError", "NotImplementedError", "TypeError", "ValueError"):
        if any(kind.__name__ == family for kind in type(error).__mro__):
            return family
    return type(error).__name__


async def seed(s: Facade, items: list[tuple[tuple[str, ...], str, dict[str, Any]]]) -> None:
    for namespace, key, value in items:
        await s.put(namespace, key, value)


PEOPLE = [
    (("people",), "ann", {"name": "Ann", "age": 31, "score": 1.5, "admin": True, "tags": ["a", "b"], "bio": "likes apples"}),
    (("people",), "bob", {"name": "Bob", "age": 25, "score": 2, "admin": False, "tags": ["b"], "bio": "likes apples and pears"}),
    (("people",), "cy", {"name": "Cy", "age": 40, "score": 2.0, "admin": False, "tags": [], "bio": "apples, apples"}),
    (("people", "old"), "dee", {"name": "Dee", "age": 77, "score": 0, "admin": None, "bio": "apples"}),
    (("peoplex",), "eve", {"name": "Eve", "age": 31, "bio": "apples"}),
]


# ----- put / get / delete -------------------------------------------------------------
@case
async def put_get_roundtrip(s: Facade) -> Any:
    value = {"s": "héllo ✓", "n": 3, "f": 2.5, "big": 12345678901234567, "b": True, "z": None,
             "l": [1, "two", {"three": 3}], "o": {"nested": {"deep": [True, None]}}}
    await s.put(("docs", "user-1"), "doc", value)
    return await s.get(("docs", "user-1"), "doc")


@case
async def get_missing(s: Facade) -> Any:
    await s.put(("docs",), "other", {"x": 1})
    return [await s.get(("docs",), "absent"), await s.get(("nowhere",), "absent")]


@case
async def overwrite_keeps_latest(s: Facade) -> Any:
    await s.put(("docs",), "k", {"v": 1})
    await s.put(("docs",), "k", {"v": 2, "w": "x"})
    return [await s.get(("docs",), "k"), await s.search(("docs",))]


@case
async def delete_and_delete_missing(s: Facade) -> Any:
    await s.put(("docs",), "k", {"v": 1})
    await s.put(("docs",), "keep", {"v": 2})
    await s.delete(("docs",), "k")
    await s.delete(("docs",), "never-there")
    return [await s.get(("docs",), "k"), await s.search(("docs",))]


@case
async def keys_any_text(s: Facade) -> Any:
    keys = ["with space", "slash/in/key", "ünïcode", "a.b", "%41", "*", "x" * 300]
    for key in keys:
        await s.put(("keys",), key, {"k": key})
    return [await s.get(("keys",), key) for key in keys] + [await s.search(("keys",), limit=100)]


@case
async def same_key_two_namespaces(s: Facade) -> Any:
    await s.put(("a",), "k", {"v": "a"})
    await s.put(("a", "b"), "k", {"v": "ab"})
    await s.put(("b",), "k", {"v": "b"})
    return [await s.get(("a",), "k"), await s.get(("a", "b"), "k"), await s.get(("b",), "k")]


# ----- batch --------------------------------------------------------------------------
@case
async def batch_mixed(s: Facade) -> Any:
    await seed(s, PEOPLE)
    return await s.batch([
        GetOp(("people",), "ann"),
        SearchOp(("people",), filter={"age": {"$gte": 30}}),
        ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("people",)),)),
        PutOp(("people",), "new", {"name": "New"}),
        GetOp(("people",), "absent"),
    ])


@case
async def batch_reads_see_state_before_puts(s: Facade) -> Any:
    await s.put(("b",), "k", {"v": 0})
    first = await s.batch([PutOp(("b",), "k", {"v": 1}), GetOp(("b",), "k"), PutOp(("b",), "k", {"v": 2}),
                           GetOp(("b",), "k")])
    return [first, await s.get(("b",), "k")]


@case
async def batch_put_none_deletes(s: Facade) -> Any:
    await s.put(("b",), "k", {"v": 0})
    await s.put(("b",), "j", {"v": 0})
    await s.batch([PutOp(("b",), "k", None), PutOp(("b",), "absent", None)])
    return [await s.get(("b",), "k"), await s.search(("b",))]


@case
async def batch_put_empty_namespace(s: Facade) -> Any:
    await s.put(("b",), "k", {"v": 0})
    await s.batch([PutOp((), "k", {"v": 1})])
    return await s.get((), "k")


@case
async def batch_last_put_wins(s: Facade) -> Any:
    await s.batch([PutOp(("b",), "k", {"v": 1}), PutOp(("b",), "j", {"v": 1}), PutOp(("b",), "k", None),
                   PutOp(("b",), "j", {"v": 3})])
    return await s.search(("b",))


# ----- search -------------------------------------------------------------------------
@case
async def search_prefix_is_whole_labels(s: Facade) -> Any:
    await seed(s, PEOPLE)
    return [await s.search(("people",)), await s.search(("people", "old")), await s.search(("peoplex",)),
            await s.search(("peo",))]


@case
async def search_empty_prefix_is_everything(s: Facade) -> Any:
    await seed(s, PEOPLE)
    return await s.search((), limit=100)


@case
async def search_default_limit_is_10(s: Facade) -> Any:
    for i in range(15):
        await s.put(("many",), f"k{i:02d}", {"i": i})
    return len(await s.search(("many",)))


@case
async def filter_equality(s: Facade) -> Any:
    await seed(s, PEOPLE)
    return [await s.search(("people",), filter={"name": "Bob"}),
            await s.search(("people",), filter={"admin": False}),
            await s.search(("people",), filter={"tags": ["a", "b"]}),
            await s.search(("people",), filter={"tags": []}),
            await s.search(("people",), filter={"age": 31, "name": "Ann"}),
            await s.search(("people",), filter={"name": "Nobody"})]


@case
async def filter_operators_on_numbers(s: Facade) -> Any:
    await seed(s, PEOPLE)
    results = []
    for op in ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte"):
        results.append(await s.search(("people",), filter={"age": {op: 31}}))
    results.append(await s.search(("people",), filter={"age": {"$gt": 20, "$lt": 35}}))
    results.append(await s.search(("people",), filter={"score": {"$gte": 1.5, "$lte": 2}}))
    return results


@case
async def filter_numbers_by_value(s: Facade) -> Any:
    await seed(s, PEOPLE)
    return [await s.search(("people",), filter={"score": 2}), await s.search(("people",), filter={"score": 2.0}),
            await s.search(("people",), filter={"score": {"$eq": 2}})]


@case
async def filter_eq_object_with_operator(s: Facade) -> Any:
    await s.put(("o",), "a", {"o": {"x": 1, "y": [1, 2]}})
    await s.put(("o",), "b", {"o": {"x": 1}})
    return await s.search(("o",), filter={"o": {"$eq": {"x": 1, "y": [1, 2]}}})


@case
async def filter_unknown_operator(s: Facade) -> Any:
    await seed(s, PEOPLE)
    return await s.search(("people",), filter={"age": {"$between": [1, 2]}})


@case
async def filter_ne_on_missing_field(s: Facade) -> Any:
    await seed(s, PEOPLE)
    return await s.search(("people",), filter={"tags": {"$ne": ["b"]}})


@case
async def filter_none_matches_missing(s: Facade) -> Any:
    await seed(s, PEOPLE)
    return await s.search(("people",), filter={"tags": None})


@case
async def filter_number_equals_bool(s: Facade) -> Any:
    await seed(s, PEOPLE)
    return await s.search(("people",), filter={"admin": 1})


@case
async def filter_order_on_numeric_strings(s: Facade) -> Any:
    await s.put(("n",), "a", {"v": "10"})
    await s.put(("n",), "b", {"v": "9"})
    return await s.search(("n",), filter={"v": {"$gt": 9.5}})


@case
async def filter_nested_partial_match(s: Facade) -> Any:
    await s.put(("o",), "a", {"o": {"x": 1, "y": 2}})
    return await s.search(("o",), filter={"o": {"x": 1}})


@case
async def paging_with_offset_covers_all_once(s: Facade) -> Any:
    for namespace in (("p",), ("p", "q"), ("p", "r", "s")):
        for i in range(7):
            await s.put(namespace, f"k{i}", {"i": i, "even": i % 2 == 0})
    full = await s.search(("p",), limit=100)
    pages = []
    for offset in range(0, 21, 4):
        pages.extend(await s.search(("p",), limit=4, offset=offset))
    even = await s.search(("p",), filter={"even": True}, limit=100)
    even_pages = []
    for offset in range(0, 12, 5):
        even_pages.extend(await s.search(("p",), filter={"even": True}, limit=5, offset=offset))
    keys = [(tuple(item.namespace), item.key) for item in pages]
    return [len(full), len(keys), len(set(keys)), norm(full) == norm(pages), len(even), norm(even) == norm(even_pages),
            await s.search(("p",), offset=100), await s.search(("p",), limit=0)]


@case
async def query_every_item_matches(s: Facade) -> Any:
    await seed(s, PEOPLE)
    return await s.search(("people",), query="apples", limit=100)


@case
async def query_filters_by_terms(s: Facade) -> Any:
    await seed(s, PEOPLE)
    return await s.search(("people",), query="pears", limit=100)


@case
async def search_items_have_no_score(s: Facade) -> Any:
    await seed(s, PEOPLE)
    return [item.score for item in await s.search(("people",), limit=100)]


# ----- list_namespaces ----------------------------------------------------------------
TREE = [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"), ("a", "c", "f"),
        ("b", "a", "f"), ("users", "123"), ("users", "456", "settings"), ("admin", "users", "789"),
        ("a-x", "y"), ("a b", "c")]


@case
async def list_namespaces_conditions(s: Facade) -> Any:
    for i, namespace in enumerate(TREE):
        await s.put(namespace, f"id{i}", {"i": i})
    return [
        await s.list_namespaces(),
        await s.list_namespaces(prefix=("a", "b")),
        await s.list_namespaces(suffix=("f",)),
        await s.list_namespaces(prefix=("a",), suffix=("f",)),
        await s.list_namespaces(prefix=("a", "*", "f")),
        await s.list_namespaces(suffix=("*", "f")),
        await s.list_namespaces(prefix=("*", "users")),
        await s.list_namespaces(prefix=("nonexistent",)),
        await s.list_namespaces(prefix=("users", "123")),
    ]


@case
async def list_namespaces_depth_and_paging(s: Facade) -> Any:
    for i, namespace in enumerate(TREE):
        await s.put(namespace, f"id{i}", {"i": i})
    return [
        await s.list_namespaces(max_depth=1),
        await s.list_namespaces(max_depth=2),
        await s.list_namespaces(prefix=("a", "b"), max_depth=3),
        await s.list_namespaces(suffix=("f",), max_depth=2),
        await s.list_namespaces(prefix=("a", "*"), max_depth=2),
        await s.list_namespaces(limit=3),
        await s.list_namespaces(limit=3, offset=3),
        await s.list_namespaces(prefix=("a", "b"), offset=2),
        await s.list_namespaces(offset=100),
        await s.list_namespaces(prefix=("a", "b", "d"), max_depth=2),
        await s.list_namespaces(prefix=("a", "b", "d"), max_depth=3),
        await s.list_namespaces(prefix=("a", "b", "d", "e"), max_depth=1),
    ]


@case
async def list_namespaces_after_last_delete(s: Facade) -> Any:
    await s.put(("gone",), "k", {"v": 1})
    await s.put(("kept",), "k", {"v": 1})
    await s.delete(("gone",), "k")
    return await s.list_namespaces()


@case
async def list_namespaces_empty_store(s: Facade) -> Any:
    return await s.list_namespaces()


# ----- namespace labels ---------------------------------------------------------------
ODD = ("slash/label", "per%cent", "%2F", "ctl\x01\x1f\x7f", "c1\x85", "ünï 漢字", "*", "a_%", "~tilde", "-", " ")


@case
async def labels_round_trip(s: Facade) -> Any:
    for i, label in enumerate(ODD):
        await s.put(("odd", label), "k", {"i": i})
    return [await s.list_namespaces(prefix=("odd",)), await s.search(("odd",), limit=100),
            [await s.get(("odd", label), "k") for label in ODD], await s.search(("odd", "slash/label"))]


@case
async def invalid_labels_refused(s: Facade) -> Any:
    outcomes = []
    for namespace in [(), ("a.b",), ("a", ""), ("nul\x00",), ("langgraph", "x"), (1,)]:
        try:
            await s.put(namespace, "k", {"v": 1})  # type: ignore[arg-type]
            outcomes.append("stored")
        except Exception as error:  # noqa: BLE001
            outcomes.append(_family(error))
    return outcomes


@case
async def label_longer_than_a_segment(s: Facade) -> Any:
    await s.put(("long", "x" * 200), "k", {"v": 1})
    return await s.get(("long", "x" * 200), "k")


@case
async def reads_of_namespaces_berth_cannot_hold(s: Facade) -> Any:
    await s.put(("here",), "k", {"v": 1})
    long, deep = ("here", "x" * 200), tuple(f"l{i}" for i in range(16))
    # Listings first: InMemoryStore lists a namespace once anything read it (divergence 6).
    listed = [await s.list_namespaces(prefix=long), await s.list_namespaces(prefix=deep)]
    await s.delete(long, "k")
    return listed + [await s.get(long, "k"), await s.get(deep, "k"), await s.search(long), await s.search(deep)]


@case
async def namespace_deeper_than_berth(s: Facade) -> Any:
    namespace = tuple(f"l{i}" for i in range(16))
    await s.put(namespace, "k", {"v": 1})
    return await s.get(namespace, "k")


# ----- values, times, TTL, index ------------------------------------------------------
@case
async def values_must_be_json(s: Facade) -> Any:
    await s.put(("v",), "k", {"when": datetime.datetime(2026, 1, 1)})
    return await s.get(("v",), "k")


@case
async def value_tuples_and_int_keys(s: Facade) -> Any:
    await s.put(("v",), "k", {"t": (1, 2), "m": {1: "one"}})
    return await s.get(("v",), "k")


@case
async def update_keeps_created_at(s: Facade) -> Any:
    await s.put(("t",), "k", {"v": 1})
    first = await s.get(("t",), "k")
    await asyncio.sleep(0.01)
    await s.put(("t",), "k", {"v": 2})
    second = await s.get(("t",), "k")
    return [first.created_at == second.created_at, second.updated_at > first.updated_at]


@case
async def times_are_utc_datetimes(s: Facade) -> Any:
    await s.put(("t",), "k", {"v": 1})
    item = await s.get(("t",), "k")
    now = datetime.datetime.now(datetime.timezone.utc)
    return [item.created_at.tzinfo is not None, abs((now - item.updated_at).total_seconds()) < 60]


@case
async def ttl_on_put(s: Facade) -> Any:
    await s.put(("t",), "k", {"v": 1}, ttl=5)
    return await s.get(("t",), "k")


# What berth does differently on purpose (docs/guides/langgraph.md).
DIVERGENT = {
    "filter_ne_on_missing_field": "berth: a field the item does not have matches no condition, $ne included "
    "(InMemoryStore compares None != operand: true)",
    "filter_none_matches_missing": "berth: {field: None} matches a stored null only; InMemoryStore also matches "
    "items without the field",
    "filter_number_equals_bool": "berth never equates types (1 is not true); Python's 1 == True does",
    "filter_order_on_numeric_strings": "berth never orders across types (a string is not > a number); "
    "InMemoryStore converts both with float()",
    "filter_nested_partial_match": "berth filters top-level fields: a nested partial match raises StoreUnsupported "
    "(use $eq for an exact object)",
    "query_filters_by_terms": "berth's query is full text (every term must occur); InMemoryStore without an index "
    "ignores the query and returns every item",
    "list_namespaces_after_last_delete": "berth lists namespaces of live items; InMemoryStore keeps listing a "
    "namespace whose last item was deleted",
    "label_longer_than_a_segment": "a berth segment is at most 128 characters (encoded): NamespaceTooLong",
    "namespace_deeper_than_berth": "berth holds at most 14 free segments after the scope (14 labels under app/langgraph): "
    "NamespaceTooLong",
    "values_must_be_json": "berth stores JSON: a datetime in a value raises TypeError; InMemoryStore keeps the "
    "Python object",
    "value_tuples_and_int_keys": "berth stores JSON: tuples come back as lists, int keys as strings",
    "update_keeps_created_at": "berth keeps created_at across updates; InMemoryStore resets it on every put",
    "batch_put_empty_namespace": "berth refuses the empty namespace in batch too (InvalidNamespaceError), as put "
    "does; InMemoryStore's batch stores the item under ()",
    "ttl_on_put": "BerthStore supports TTL (supports_ttl = True); InMemoryStore raises NotImplementedError",
}


#: Cases after which berth holds nothing under the store's root (every put was refused).
LEAVE_NOTHING = {"list_namespaces_empty_store", "invalid_labels_refused", "label_longer_than_a_segment",
                 "namespace_deeper_than_berth", "values_must_be_json"}
#: Cases whose right answer is an exception (on both stores).
RAISES = {"filter_unknown_operator", "ttl_on_put"}


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.mark.parametrize("name", sorted(CASES))
async def test_same_as_in_memory(name: str, mode: str, place: Any) -> None:
    function = CASES[name]
    reference = await outcome(function, Facade(InMemoryStore(), mode))
    assert (reference[0] == "raises") == (name in RAISES), f"InMemoryStore answered {reference!r}"
    root = f"app/diff-{uuid.uuid4().hex[:8]}"
    if mode == "sync":
        client = place.sync_client()
        store: Any = BerthStore(client, root=root)
    else:
        client = place.async_client()
        store = AsyncBerthStore(client, root=root)
    try:
        ours = await outcome(function, Facade(store, mode))
    finally:
        if mode == "async":
            await client.close()
    # The swap happened: what the case stored is berth memory under the store's root.
    stored = place.sync_client().memory_search(root, limit=1).items
    assert bool(stored) == (name not in LEAVE_NOTHING), f"berth holds {stored!r} under {root}"
    if name in DIVERGENT:
        assert ours != reference, f"{name} now agrees with InMemoryStore: drop it from DIVERGENT"
        pytest.xfail(DIVERGENT[name])
    assert ours == reference
