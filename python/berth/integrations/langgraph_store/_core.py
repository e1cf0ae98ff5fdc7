"""The store's logic (`_Core`), written once as generators of berth calls and driven
by a sync or an async client (`_store`; as in `berth.integrations.langgraph`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from berth import _calls as calls
from berth._errors import NotFound

from .._drive import Io
from ._records import (
    _TERM,
    FREE_SEGMENTS_MAX,
    NAMESPACE_BYTES_MAX,
    SEGMENT_CHARS_MAX,
    NamespaceTooLong,
    _check_root,
    _conditions,
    _matches,
    _ms,
    label_of,
    segment_of,
)


PAGE_MAX = 1000
#: Most items one delete call names (the server's bound on `POST /v1/memory/delete`).
DELETE_MAX = 1000


class _Core:
    """The store's logic, as generators of berth calls."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.root_depth = _check_root(self.root)

    # ----- namespaces ------------------------------------------------------------
    def berth_namespace(self, namespace: tuple[str, ...]) -> str:
        if not namespace:
            return self.root
        segments = []
        for label in namespace:
            segment = segment_of(label)
            if len(segment) > SEGMENT_CHARS_MAX:
                raise NamespaceTooLong(
                    f"label {label[:40]!r}… is {len(segment)} characters encoded; berth takes {SEGMENT_CHARS_MAX}"
                )
            segments.append(segment)
        if self.root_depth - 2 + len(segments) > FREE_SEGMENTS_MAX:
            raise NamespaceTooLong(
                f"{namespace!r} has {len(segments)} labels; under {self.root!r} berth takes "
                f"{FREE_SEGMENTS_MAX - (self.root_depth - 2)}"
            )
        full = self.root + "/" + "/".join(segments)
        if len(full.encode("utf-8")) > NAMESPACE_BYTES_MAX:
            raise NamespaceTooLong(f"{namespace!r} is over {NAMESPACE_BYTES_MAX} bytes as a berth namespace")
        return full

    def tuple_of(self, namespace: str) -> tuple[str, ...] | None:
        if not namespace.startswith(self.root + "/"):
            return None  # the root itself (written by something else): no LangGraph tuple
        return tuple(label_of(segment) for segment in namespace[len(self.root) + 1 :].split("/"))

    def item(self, found: Any, namespace: tuple[str, ...] | None = None, search: bool = False) -> Item:
        ns = namespace if namespace is not None else self.tuple_of(found.namespace)
        kind = SearchItem if search else Item
        return kind(
            value=found.value,
            key=found.key,
            namespace=ns,  # type: ignore[arg-type]
            created_at=_ms(found.created_at),
            updated_at=_ms(found.updated_at),
        )

    # ----- operations ------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> Io:
        ops = list(ops)
        for op in ops:
            validate_op_namespace(op)
            if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
                raise ValueError(f"Unknown operation type: {type(op)}")
        results: list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        # As InMemoryStore (and PostgresStore): the reads of a batch see the store as it
        # was before the batch; its puts are applied after, the last one per key winning.
        for op in ops:
            if isinstance(op, GetOp):
                results.append((yield from self.get(op)))
            elif isinstance(op, SearchOp):
                results.append((yield from self.search(op)))
            elif isinstance(op, ListNamespacesOp):
                results.append((yield from self.list_namespaces(op)))
            else:
                puts.pop((op.namespace, op.key), None)
                puts[(op.namespace, op.key)] = op
                results.append(None)
        for op in puts.values():
            if op.value is not None:
                yield from self.put(op)
        # The batch's deletes as one call: one transaction and one audit record.
        yield from self.delete_all([op for op in puts.values() if op.value is None])
        return results

    def delete_all(self, ops: list[PutOp]) -> Io:
        """Deletes the keys of `ops` (PutOps of value None) in calls of at most
        `DELETE_MAX` items, each one audit record; an absent item is skipped."""
        items = []
        for op in ops:
            namespace = self.readable(op.namespace)
            if namespace is not None:
                items.append((namespace, str(op.key)))
        for start in range(0, len(items), DELETE_MAX):
            yield calls.memory_delete_many(items[start : start + DELETE_MAX])
        return None

    def readable(self, namespace: tuple[str, ...]) -> str | None:
        """The berth namespace, or None for a tuple berth cannot hold (so nothing is
        stored there: a read answers "absent", as for any empty namespace)."""
        try:
            return self.berth_namespace(namespace)
        except NamespaceTooLong:
            return None

    def get(self, op: GetOp) -> Io:
        namespace = self.readable(op.namespace)
        if namespace is None:
            return None
        try:
            found = yield calls.memory_get(namespace, str(op.key), refresh=True if op.refresh_ttl else None)
        except NotFound:
            return None
        return self.item(found, op.namespace)

    def put(self, op: PutOp) -> Io:
        if op.value is None:
            yield from self.delete_all([op])
            return None
        if not op.namespace:  # `put` refuses it; a PutOp given to `batch` is checked here
            raise InvalidNamespaceError("Namespace cannot be empty.")
        namespace = self.berth_namespace(op.namespace)
        ttl_ms = None
        if op.ttl is not None:
            if op.ttl <= 0:
                raise ValueError(f"ttl {op.ttl!r}: minutes, more than 0")
            ttl_ms = max(1, round(op.ttl * 60_000))
        yield calls.memory_put(namespace, str(op.key), dict(op.value), ttl_ms=ttl_ms)
        return None

    def search(self, op: SearchOp) -> Io:
        if op.limit < 0 or op.offset < 0:
            raise ValueError("search: limit and offset are at least 0")
        want = op.offset + op.limit
        if op.limit == 0:
            return []
        conditions = _conditions(op.filter)
        query = op.query if op.query and _TERM.search(op.query) else None
        prefix = self.readable(op.namespace_prefix)
        if prefix is None:
            return []
        found: list[Any] = []
        cursor = None
        while len(found) < want:
            page = yield calls.memory_search(
                prefix,
                filter=conditions,
                query=query,
                order="relevance" if query else "key",
                cursor=cursor,
                limit=min(PAGE_MAX, want - len(found)),
            )
            found.extend(page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
        found = found[op.offset : want]
        if op.refresh_ttl:
            refreshed = []
            for item in found:
                if item.ttl_ms is not None:
                    try:
                        item = yield calls.memory_get(item.namespace, item.key, refresh=True)
                    except NotFound:
                        continue  # expired between the search and the refresh
                refreshed.append(item)
            found = refreshed
        return [self.item(item, search=True) for item in found if self.tuple_of(item.namespace) is not None]

    def list_namespaces(self, op: ListNamespacesOp) -> Io:
        conditions = list(op.match_conditions or ())
        prefix: tuple[str, ...] = ()
        exact = True
        for condition in conditions:
            if condition.match_type == "prefix":
                literal = []
                for label in condition.path:
                    if label == "*":
                        exact = False
                        break
                    literal.append(label)
                if len(literal) > len(prefix):
                    prefix = tuple(literal)
            elif condition.match_type == "suffix":
                exact = False
            else:
                raise ValueError(f"Unsupported match type: {condition.match_type}")
        # berth cuts to max_depth itself when nothing else is matched after the cut.
        cut = exact and op.max_depth is not None and op.max_depth >= max(1, len(prefix))
        depth = self.root_depth + op.max_depth if cut else None  # type: ignore[operator]
        where = self.readable(prefix)
        if where is None:
            return []
        namespaces: set[tuple[str, ...]] = set()
        cursor = None
        while True:
            page = yield calls.memory_namespaces(where, max_depth=depth, cursor=cursor, limit=PAGE_MAX)
            for text in page.namespaces:
                labels = self.tuple_of(text)
                if labels is not None and all(_matches(condition, labels) for condition in conditions):
                    namespaces.add(labels if op.max_depth is None else labels[: op.max_depth])
            cursor = page.next_cursor
            if cursor is None:
                break
        return sorted(namespaces)[op.offset : op.offset + op.limit]
