"""LangGraph's long-term memory store on berth's scoped memory: `BerthStore` (sync) and
`AsyncBerthStore` (asyncio), implementing `langgraph.store.base.BaseStore`.

The one-line swap: `graph.compile(store=BerthStore(berth.Client(url)))` instead of
`InMemoryStore()`. docs/langgraph-store.md has the mapping and every divergence.

Mapping. A store object has one berth namespace `root` (default `app/langgraph`; a scope —
`user/<id>`, `project/<id>` or `app/<name>` — plus optional free segments). A LangGraph
namespace tuple `(l1, …, ln)` is the berth namespace `root/seg(l1)/…/seg(ln)`, where
`seg` percent-encodes `%`, `/` and every control character (Unicode category Cc) as
`%XX` (UTF-8 bytes, upper-case hex) and keeps everything else. LangGraph already refuses
labels that are empty or hold `.`, so `.` and `..` cannot occur. The encoding is
reversible (`label_of(segment_of(l)) == l`), and a prefix of tuples is a prefix of berth
namespaces. Keys and values are stored as they are (values must be JSON).

The I/O is written once, as generators of berth calls, driven by a sync or an async
client (as in `berth.integrations.langgraph`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import threading
import unicodedata
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)

import berth
from berth import _calls as calls
from berth._errors import NotFound

from ._drive import Io, drive_async as _drive_async, drive_sync as _drive_sync

__all__ = [
    "AsyncBerthStore",
    "BerthStore",
    "DEFAULT_ROOT",
    "NamespaceTooLong",
    "StoreUnsupported",
    "label_of",
    "segment_of",
]

#: Where a store keeps its tuples unless told otherwise: tenant-wide (needs a `service`
#: or `admin` key to write; a `user` key writes only `user/<itself>` and its project).
DEFAULT_ROOT = "app/langgraph"
SEGMENT_CHARS_MAX = 128
FREE_SEGMENTS_MAX = 14
NAMESPACE_BYTES_MAX = 512
PAGE_MAX = 1000
#: Most items one delete call names (the server's bound on `POST /v1/memory/delete`).
DELETE_MAX = 1000

_ID = re.compile(r"[A-Za-z0-9._~-]{1,128}")
_SCOPES = ("user", "project", "app")
_OPERATORS = {"$eq": "eq", "$ne": "ne", "$gt": "gt", "$gte": "gte", "$lt": "lt", "$lte": "lte"}
#: A full-text term: a maximal run of Unicode letters and digits (docs/memory.md).
_TERM = re.compile(r"[^\W_]+")


class StoreUnsupported(NotImplementedError):
    """What `BerthStore` does not do (semantic search with an embedding `index`, a
    nested partial-match filter): refused before any berth call."""


class NamespaceTooLong(InvalidNamespaceError):
    """A tuple berth cannot hold: a label over 128 characters once encoded, more labels
    than the root leaves free (14 free segments in all), or over 512 bytes in all."""


def _escape(char: str) -> str:
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8"))


def segment_of(label: str) -> str:
    """One LangGraph namespace label as a berth namespace segment (reversible)."""
    return "".join(
        _escape(char) if char in "%/" or unicodedata.category(char) == "Cc" else char for char in label
    )


_ESCAPED = re.compile(r"(?:%[0-9A-F]{2})+")


def label_of(segment: str) -> str:
    """The label `segment_of` encoded."""
    return _ESCAPED.sub(lambda match: bytes.fromhex(match.group(0).replace("%", "")).decode("utf-8"), segment)


def _check_root(root: str) -> int:
    """The root's number of segments; a typed `ValueError` if it is not a berth namespace."""
    parts = root.split("/")
    if len(parts) < 2 or parts[0] not in _SCOPES or not _ID.fullmatch(parts[1]) or parts[1] in (".", ".."):
        raise ValueError(f"root {root!r}: a berth scope (user/<id>, project/<id> or app/<name>) and free segments")
    for part in parts[2:]:
        if not part or part in (".", "..") or len(part) > SEGMENT_CHARS_MAX or any(
            char == "/" or unicodedata.category(char) == "Cc" for char in part
        ):
            raise ValueError(f"root {root!r}: segment {part!r} is not a berth namespace segment")
    return len(parts)


def _ms(moment: int) -> datetime:
    return datetime.fromtimestamp(moment / 1000, tz=timezone.utc)




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


def _matches(condition: MatchCondition, labels: tuple[str, ...]) -> bool:
    path = condition.path
    if len(labels) < len(path):
        return False
    pairs = zip(labels, path) if condition.match_type == "prefix" else zip(reversed(labels), reversed(path))
    return all(wanted == "*" or label == wanted for label, wanted in pairs)


def _conditions(filter: Mapping[str, Any] | None) -> list[tuple[str, str, Any]]:
    """LangGraph's filter as berth conditions: `{field: value}` is `eq` (exact, on the
    whole value), `{field: {"$op": operand, …}}` one condition per operator."""
    conditions: list[tuple[str, str, Any]] = []
    for field, wanted in (filter or {}).items():
        if isinstance(wanted, Mapping):
            if not any(str(name).startswith("$") for name in wanted):
                raise StoreUnsupported(
                    f"filter {field!r}: a nested partial match ({{field: {{…}}}}) is not a berth filter; "
                    "berth compares top-level fields (use {field: {'$eq': {…}}} for an exact object)"
                )
            for name, operand in wanted.items():
                if name not in _OPERATORS:
                    raise ValueError(f"Unsupported operator: {name}")
                conditions.append((field, _OPERATORS[name], _plain(operand)))
        else:
            conditions.append((field, "eq", _plain(wanted)))
    return conditions


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value




def _refuse_index(index: Any) -> None:
    if index is not None:
        raise StoreUnsupported(
            "semantic search (an embedding `index`) is not supported: berth's memory search is "
            "full text (terms ANDed) with filters; leave `index` unset"
        )


class BerthStore(BaseStore):
    """`BaseStore` on berth's scoped memory, over a sync `berth.Client` (HTTP or
    `berth.open(...)`). `root`: the berth namespace the tuples live under. `ttl`:
    LangGraph's `TTLConfig` (`default_ttl` minutes, `refresh_on_read`; berth's sweeper
    removes expired items, so `sweep_interval_minutes` is not used). `abatch` runs
    `batch` on a worker thread."""

    supports_ttl = True

    def __init__(
        self,
        client: berth.Client,
        *,
        root: str = DEFAULT_ROOT,
        ttl: TTLConfig | None = None,
        index: Any = None,
    ) -> None:
        _refuse_index(index)
        self.client = client
        self.ttl_config = ttl
        self._core = _Core(root)

    @property
    def root(self) -> str:
        return self._core.root

    def berth_namespace(self, namespace: tuple[str, ...]) -> str:
        """The berth namespace a LangGraph namespace tuple is stored under."""
        return self._core.berth_namespace(tuple(namespace))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return _drive_sync(self.client, self._core.batch(ops))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        return await asyncio.to_thread(self.batch, ops)


class AsyncBerthStore(BaseStore):
    """`BaseStore` over a `berth.AsyncClient` (or `berth.open_async(...)`), for asyncio
    apps. The sync methods work only from another thread than the event loop's (the
    client belongs to its loop), as with LangGraph's `AsyncPostgresStore`."""

    supports_ttl = True

    def __init__(
        self,
        client: berth.AsyncClient,
        *,
        root: str = DEFAULT_ROOT,
        ttl: TTLConfig | None = None,
        index: Any = None,
    ) -> None:
        _refuse_index(index)
        self.client = client
        self.ttl_config = ttl
        self._core = _Core(root)
        try:  # made inside the app's loop (the usual case): its sync methods work at once
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None  # bound by the first a-method call
        self._lock = threading.Lock()

    @property
    def root(self) -> str:
        return self._core.root

    def berth_namespace(self, namespace: tuple[str, ...]) -> str:
        return self._core.berth_namespace(tuple(namespace))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
        return await _drive_async(self.client, self._core.batch(ops))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        loop = self._loop
        if loop is None or running is loop:
            raise asyncio.InvalidStateError(
                "AsyncBerthStore's sync methods run only from another thread than its event loop "
                "(and after the loop has used the store); use the a-methods, or BerthStore"
            )
        future: concurrent.futures.Future[list[Result]] = asyncio.run_coroutine_threadsafe(self.abatch(ops), loop)
        return future.result()
