"""Every `/v1` operation as a `Call`: the request to send and how to decode its answer.

Both clients (sync and async) and both transports (HTTP and embedded) send these same
calls, so an operation is written once. `resend_safe` says whether the request may be
sent again after its answer was lost (a timeout, a dropped connection): reads, heartbeats,
appends (which always carry an idempotency key) and `PUT /v1/retention`. Creates, forks,
attaches and the other state changes name what they create or are confirmed by a read
(docs/server.md, "Retrying safely"), so the client never resends them by itself.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Generic, Iterable, Iterator, Mapping, TypeVar
from urllib.parse import quote, urlencode

import orjson

from . import _models as m
from ._errors import WrongType

T = TypeVar("T")

#: The largest wire integer: `before=SEQ_END` reads the tail of any log.
SEQ_END = 9223372036854775807
#: Most events one read answers (the server's page bound).
READ_PAGE_MAX = 1000
#: Most events one read of some types (`read(..., types=)`) scans; its page's `next_seq`
#: then may fall short of the log's end (the server's `TYPED_READ_SCAN_MAX`).
TYPED_READ_SCAN_MAX = 100_000


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


#: "Leave unchanged" for `update_session` fields, where `None` means "clear".
UNSET: Any = _Unset()


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Call(Generic[T]):
    method: str
    path: str
    decode: Callable[[Answer], T]
    body: bytes | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    resend_safe: bool = False
    #: An append: the embedded transport waits out another process's write handle.
    is_append: bool = False

    def undecoded(self) -> "Call[Answer]":
        """The same request, answered with its `Answer` as received (the caller decodes
        it later, or keeps its raw body)."""
        return replace(self, decode=_answer_itself)  # type: ignore[arg-type,return-value]


def _answer_itself(answer: Answer) -> Answer:
    return answer


#: orjson's types that `json` refuses go back to `json` (which refuses them, as before).
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def dumps(value: Any) -> bytes:
    """`value` as compact UTF-8 JSON, what `json.dumps(value, ensure_ascii=False,
    separators=(",", ":"), allow_nan=False)` encodes, written by orjson (the bench's
    100-item append body: ~34 µs with the `null` check below, against `json`'s ~358 µs;
    docs/dropins.md, "Bodies written by orjson"). What orjson would
    write differently goes through `json` instead: integers past 64 bits, non-string keys,
    lone surrogates (orjson refuses them), and NaN or infinity (orjson writes `null`,
    where `json` refuses them: an answer with a `null` in it is checked for them).
    Floats may be spelled differently (`1e-7`, not `1e-07`); they read back the same."""
    try:
        body = orjson.dumps(value, option=_ORJSON_OPTIONS)
    except TypeError:
        pass
    else:
        # `rfind`: CPython's reverse search of a short needle is about twice as fast
        # as `in` on text like a message's (~25 against ~54 µs on a 100 KiB body).
        if body.rfind(b"null") < 0 or _finite(value):
            return body
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _finite(value: Any) -> bool:
    """No NaN or infinity anywhere in `value` (dicts, lists and tuples walked)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return False
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return True


def _json_body(fields: dict[str, Any]) -> bytes:
    return dumps({key: value for key, value in fields.items() if value is not None})


def _query(path: str, params: dict[str, Any]) -> str:
    pairs = []
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(item) for item in value)
        pairs.append((key, str(value)))
    return f"{path}?{urlencode(pairs)}" if pairs else path


#: One value where a list is expected: each is iterable, so `list()` would quietly take it
#: apart (`labels="urgent"` → `['u', 'r', 'g', …]`, a mapping → its keys).
_NOT_LISTS = (str, bytes, bytearray, memoryview, Mapping)


def _refuse_one(argument: str, value: Any) -> None:
    """`WrongType` unless `value` can be a list argument (a list, tuple, set, generator…)."""
    # A list or tuple first: `isinstance(…, Mapping)` is an ABC check, dearer on a hot path.
    if type(value) in (list, tuple):
        return
    if isinstance(value, _NOT_LISTS):
        kind = "one mapping" if isinstance(value, Mapping) else f"one {type(value).__name__}"
        raise WrongType(f"{argument} is a list, not {kind}: pass [{value!r}]"[:300], argument=argument)
    if not isinstance(value, Iterable):
        raise WrongType(f"{argument} is a list, not {type(value).__name__}", argument=argument)


def listed(argument: str, value: Iterable[T]) -> list[T]:
    """`value` as a list, or `WrongType` when it is one string, bytes or mapping (or not
    iterable) where the call takes a list. The drop-ins check their list options with it."""
    _refuse_one(argument, value)
    return list(value)


def _session(session_id: str, rest: str = "") -> str:
    if not isinstance(session_id, str):
        raise WrongType(f"session id must be a str, not {type(session_id).__name__}", argument="session_id")
    return f"/v1/sessions/{quote(session_id, safe='')}{rest}"


def _decode_session(answer: Answer) -> m.Session:
    return m.Session.from_wire(answer.json())


def _nothing(answer: Answer) -> None:
    return None


_EVENT_FIELDS = frozenset(("type", "data", "ignorable", "time"))


def new_event(event: Any) -> dict[str, Any]:
    """An event to append: a mapping with `type` (and `data`, `ignorable`, `time`), or a
    `(type, data)` pair."""
    if isinstance(event, tuple) and len(event) == 2:
        return {"type": event[0], "data": event[1]}
    # A plain dict first: `isinstance(…, typing.Mapping)` costs microseconds per event,
    # which a batch of a hundred pays a hundred times.
    if type(event) is dict or isinstance(event, Mapping):
        if "type" not in event:
            raise ValueError("an event needs a \"type\"")
        return {key: value for key, value in event.items() if key in _EVENT_FIELDS}
    raise WrongType(
        f"an event is a mapping with \"type\" (and \"data\") or a (type, data) pair, not {type(event).__name__}",
        argument="events",
    )


def create_session(
    id: str | None = None,
    *,
    title: str | None = None,
    labels: Iterable[str] | None = None,
    user: str | None = None,
    project: str | None = None,
    policy: Mapping[str, Any] | None = None,
    origin: str | None = None,
    delegation_depth: int | None = None,
) -> Call[m.Session]:
    body = _json_body(
        {
            "id": id,
            "title": title,
            "labels": listed("labels", labels) if labels is not None else None,
            "user": user,
            "project": project,
            "policy": dict(policy) if policy is not None else None,
            "origin": origin,
            "delegation_depth": delegation_depth,
        }
    )
    return Call("POST", "/v1/sessions", _decode_session, body)


def get_session(session_id: str) -> Call[m.Session]:
    return Call("GET", _session(session_id), _decode_session, resend_safe=True)


def list_sessions(
    *,
    status: str | Iterable[str] | None = None,
    label: str | None = None,
    user: str | None = None,
    project: str | None = None,
    parent: str | None = None,
    active_since: int | None = None,
    active_before: int | None = None,
    include_blank: bool | None = None,
    cursor: str | None = None,
    limit: int | None = None,
) -> Call[m.SessionPage]:
    if status is not None and not isinstance(status, str):
        status = ",".join(status)
    path = _query(
        "/v1/sessions",
        {
            "status": status,
            "label": label,
            "user": user,
            "project": project,
            "parent": parent,
            "active_since": active_since,
            "active_before": active_before,
            "include_blank": include_blank,
            "cursor": cursor,
            "limit": limit,
        },
    )
    return Call("GET", path, lambda answer: m.SessionPage.from_wire(answer.json()), resend_safe=True)


def count_sessions(
    *,
    user: str | None = None,
    project: str | None = None,
    label: str | None = None,
    parent: str | None = None,
    active_since: int | None = None,
    active_before: int | None = None,
    include_blank: bool | None = None,
) -> Call[m.SessionCounts]:
    path = _query(
        "/v1/sessions/counts",
        {
            "user": user,
            "project": project,
            "label": label,
            "parent": parent,
            "active_since": active_since,
            "active_before": active_before,
            "include_blank": include_blank,
        },
    )
    return Call("GET", path, lambda answer: m.SessionCounts.from_wire(answer.json()), resend_safe=True)


def update_session(
    session_id: str, *, title: Any = UNSET, labels: Any = UNSET, expected_revision: int | None = None
) -> Call[m.Session]:
    fields: dict[str, Any] = {}
    if title is not UNSET:
        fields["title"] = title
    if labels is not UNSET:
        fields["labels"] = listed("labels", labels) if labels is not None else None
    if expected_revision is not None:
        fields["expected_revision"] = expected_revision
    return Call("PATCH", _session(session_id), _decode_session, dumps(fields))


def delete_session(session_id: str, *, expected_revision: int | None = None) -> Call[None]:
    return Call("DELETE", _query(_session(session_id), {"expected_revision": expected_revision}), _nothing)


def close_session(
    session_id: str, *, policy: str | None = None, expected_revision: int | None = None
) -> Call[m.Session]:
    body = _json_body({"policy": policy, "expected_revision": expected_revision})
    return Call("POST", _session(session_id, "/close"), _decode_session, body)


def fork_session(session_id: str, *, upto_seq: int | None = None, new_id: str | None = None) -> Call[m.Session]:
    body = _json_body({"upto_seq": upto_seq, "new_id": new_id})
    return Call("POST", _session(session_id, "/fork"), _decode_session, body)


def reopen_session(session_id: str) -> Call[m.Session]:
    return Call("POST", _session(session_id, "/reopen"), _decode_session, b"{}")


def append(
    session_id: str,
    events: Iterable[Any],
    *,
    expected_seq: int | None = None,
    run: str | None = None,
    idempotency_key: str | None = None,
    memory: Iterable[Mapping[str, Any]] | None = None,
) -> Call[m.AppendOutcome]:
    # Every append carries a key, so a resend after a lost answer is answered as a
    # duplicate instead of storing the batch twice.
    key = idempotency_key if idempotency_key is not None else uuid.uuid4().hex
    _refuse_one("events", events)
    writes = [_memory_write(write) for write in listed("memory", memory)] if memory is not None else []
    body = _json_body(
        {
            "events": [new_event(event) for event in events],
            "expected_seq": expected_seq,
            "run": run,
            "idempotency_key": key,
            "memory": writes or None,
        }
    )
    return Call(
        "POST",
        _session(session_id, "/events"),
        lambda answer: m.AppendOutcome.from_wire(answer.json()),
        body,
        resend_safe=True,
        is_append=True,
    )


def _memory_write(write: Any) -> dict[str, Any]:
    if not isinstance(write, Mapping):
        raise WrongType(f"a memory write is a mapping, not {type(write).__name__}", argument="memory")
    return memory_write(**write)


def memory_write(
    namespace: str,
    key: str,
    value: Any,
    expected_revision: int | None = None,
    ttl_ms: int | None = None,
    bound_to: str | None = None,
) -> dict[str, Any]:
    """One memory write an append carries (`append(..., memory=[...])`)."""
    write = {"namespace": namespace, "key": key, "value": value}
    for name, option in (("expected_revision", expected_revision), ("ttl_ms", ttl_ms), ("bound_to", bound_to)):
        if option is not None:
            write[name] = option
    return write


def _types_param(types: Iterable[str] | None) -> list[str] | None:
    if types is None:
        return None
    wanted = listed("types", types)
    if not wanted:
        raise ValueError("types needs at least one event type")
    return wanted


def read(
    session_id: str,
    *,
    from_seq: int | None = None,
    before: int | None = None,
    limit: int | None = None,
    types: Iterable[str] | None = None,
) -> Call[m.EventPage]:
    """A page of events. With `types`, only events of those types: `limit` counts them,
    and the page's `[first_seq, next_seq)` is what was scanned (at most 100,000 events),
    so a page may hold fewer than `limit` before the end."""
    params = {"from": from_seq, "before": before, "limit": limit, "types": _types_param(types)}
    path = _query(_session(session_id, "/events"), params)
    return Call("GET", path, decode_page, resend_safe=True)


def read_at(session_id: str, seqs: Iterable[int]) -> Call[m.EventPage]:
    """A point read by position: the events at `seqs`, each once, ascending. At most
    `READ_PAGE_MAX` distinct seqs (`LimitExceeded` above); a seq at or past the log's end
    is `NotFound` whose `body["actual"]` is that seq."""
    wanted = sorted({int(seq) for seq in listed("seqs", seqs)})
    if any(seq < 0 for seq in wanted):
        raise ValueError(f"seqs are non-negative, not {wanted[0]}")
    if not wanted:
        raise ValueError("read_at needs at least one seq")
    path = _query(_session(session_id, "/events"), {"seqs": wanted})
    return Call("GET", path, decode_page, resend_safe=True)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector paused while a read makes many objects: a page is up to 1,000
    events, each a few new objects, and a long read (a drop-in's whole session) holds
    tens of thousands at once. None is in a cycle, but the collections their count
    triggers would scan the ones already made again and again (a sixth of a long ADK
    `get_session`, and over a quarter of a fresh `BerthSession.get_items()` of 10,000,
    measured). Reference counting still frees everything meanwhile. Only the pause that
    found the collector on turns it on again, so nested pauses, or pauses on several
    threads at once, never leave it off (one that overlaps another thread's may run
    partly with it on: only slower), and a collector the app turned off stays off."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def decode_page(answer: Answer) -> m.EventPage:
    with collector_paused():
        return m.EventPage.from_wire(answer.json())


def stream_path(
    session_id: str, *, from_seq: int, max_events: int | None = None, idle_timeout_ms: int | None = None
) -> str:
    return _query(
        _session(session_id, "/events/stream"),
        {"from": from_seq, "max_events": max_events, "idle_timeout_ms": idle_timeout_ms},
    )


def attach(
    session_id: str,
    *,
    run_id: str | None = None,
    on_busy: str | None = None,
    expected_revision: int | None = None,
) -> Call[m.Attachment]:
    body = _json_body({"run_id": run_id, "on_busy": on_busy, "expected_revision": expected_revision})
    return Call("POST", _session(session_id, "/runs"), lambda answer: m.Attachment.from_wire(answer.json()), body)


def heartbeat(session_id: str, run_id: str) -> Call[m.Run]:
    path = _session(session_id, f"/runs/{quote(run_id, safe='')}/heartbeat")
    return Call("POST", path, lambda answer: m.Run.from_wire(answer.json()), resend_safe=True)


def detach(
    session_id: str, run_id: str, *, outcome: str | None = None, expected_revision: int | None = None
) -> Call[m.Session]:
    path = _session(session_id, f"/runs/{quote(run_id, safe='')}/detach")
    return Call("POST", path, _decode_session, _json_body({"outcome": outcome, "expected_revision": expected_revision}))


def resume(
    session_id: str,
    *,
    run_id: str | None = None,
    on_busy: str | None = None,
    expected_revision: int | None = None,
) -> Call[m.ResumeOutcome]:
    body = _json_body({"run_id": run_id, "on_busy": on_busy, "expected_revision": expected_revision})
    return Call(
        "POST", _session(session_id, "/resume"), lambda answer: m.ResumeOutcome.from_wire(answer.json()), body
    )


def export(session_id: str, *, format: str = "jsonl") -> Call[bytes]:
    if format not in ("jsonl", "zip"):
        raise ValueError("format is \"jsonl\" or \"zip\"")
    return Call("GET", _query(_session(session_id, "/export"), {"format": format}), lambda a: a.body, resend_safe=True)


def import_sessions(data: bytes) -> Call[m.Imported]:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WrongType("import takes the bytes of an export (JSONL or ZIP)", argument="data")
    return Call("POST", "/v1/import", lambda answer: m.Imported.from_wire(answer.json()), bytes(data))


def audit(*, from_seq: int | None = None, limit: int | None = None) -> Call[list[m.AuditEntry]]:
    return Call(
        "GET",
        _query("/v1/audit", {"from": from_seq, "limit": limit}),
        lambda answer: [m.AuditEntry.from_wire(entry) for entry in answer.json()],
        resend_safe=True,
    )


def audit_search(
    *,
    from_seq: int | None = None,
    limit: int | None = None,
    action: str | None = None,
    session: str | None = None,
    actor: str | None = None,
    since: int | None = None,
    before: int | None = None,
) -> Call[m.AuditSearchPage]:
    path = _query(
        "/v1/audit/search",
        {"from": from_seq, "limit": limit, "action": action, "session": session, "actor": actor, "since": since,
         "before": before},
    )
    return Call("GET", path, lambda answer: m.AuditSearchPage.from_wire(answer.json()), resend_safe=True)


def verify_audit() -> Call[m.AuditVerification]:
    return Call("GET", "/v1/audit/verify", lambda answer: m.AuditVerification.from_wire(answer.json()), resend_safe=True)


def set_retention(
    *,
    idle_ttl_ms: int | None = None,
    max_age_ms: int | None = None,
    delete_terminal_after_ms: int | None = None,
    memory_max_age_ms: int | None = None,
) -> Call[None]:
    body = _json_body(
        {"idle_ttl_ms": idle_ttl_ms, "max_age_ms": max_age_ms, "delete_terminal_after_ms": delete_terminal_after_ms,
         "memory_max_age_ms": memory_max_age_ms}
    )
    return Call("PUT", "/v1/retention", _nothing, body, resend_safe=True)


# ----- scoped memory ------------------------------------------------------------------

#: Filter operators of `memory_search` conditions.
FILTER_OPS = ("eq", "ne", "gt", "gte", "lt", "lte", "in")


def _memory_item(answer: Answer) -> m.MemoryItem:
    return m.MemoryItem.from_wire(answer.json())


def memory_put(
    namespace: str,
    key: str,
    value: Any,
    *,
    expected_revision: int | None = None,
    ttl_ms: int | None = None,
    bound_to: str | None = None,
) -> Call[m.MemoryItem]:
    body = _json_body(
        {"namespace": namespace, "key": key, "value": value, "expected_revision": expected_revision,
         "ttl_ms": ttl_ms, "bound_to": bound_to}
    )
    if value is None:  # `_json_body` drops None fields; null is a value here.
        body = dumps({**json.loads(body), "value": None})
    # Resending a put is safe only as a compare-and-set (a lost answer then conflicts
    # instead of writing twice over a newer value).
    return Call("PUT", "/v1/memory/items", _memory_item, body, resend_safe=expected_revision is not None)


def memory_get(namespace: str, key: str, *, refresh: bool | None = None) -> Call[m.MemoryItem]:
    path = _query("/v1/memory/items", {"namespace": namespace, "key": key, "refresh": refresh})
    return Call("GET", path, _memory_item, resend_safe=True)


def memory_delete(namespace: str, key: str, *, expected_revision: int | None = None) -> Call[m.MemoryItem]:
    path = _query("/v1/memory/items", {"namespace": namespace, "key": key, "expected_revision": expected_revision})
    return Call("DELETE", path, _memory_item)


def memory_delete_many(items: Iterable[tuple[str, str]]) -> Call[m.MemoryDeleted]:
    """Deletes the live items named as (namespace, key) — at most 1000, an absent one
    skipped — in one transaction with one audit record. Safe to resend: a second time
    deletes nothing more."""
    body = dumps({"items": [{"namespace": namespace, "key": key} for namespace, key in listed("items", items)]})
    return Call("POST", "/v1/memory/delete", lambda answer: m.MemoryDeleted.from_wire(answer.json()), body,
                resend_safe=True)


def _condition(condition: Any) -> dict[str, Any]:
    if isinstance(condition, Mapping):
        return {"field": condition["field"], "op": condition["op"], "value": condition["value"]}
    if not isinstance(condition, (tuple, list)) or len(condition) != 3:
        raise WrongType(f"a filter condition is (field, op, value) or a mapping, not {condition!r}"[:300],
                        argument="filter")
    field_name, op, value = condition
    if op not in FILTER_OPS:
        raise ValueError(f"filter operator {op!r}: one of {', '.join(FILTER_OPS)}")
    return {"field": field_name, "op": op, "value": value}


def memory_search(
    prefix: str,
    *,
    filter: Iterable[Any] | Mapping[str, Any] | None = None,
    query: str | None = None,
    order: str | None = None,
    cursor: str | None = None,
    limit: int | None = None,
) -> Call[m.MemoryPage]:
    """`filter`: conditions `(field, op, value)` (or `{field, op, value}`), ANDed; a
    mapping `{field: value}` means equality on each."""
    if isinstance(filter, Mapping):
        conditions = [{"field": name, "op": "eq", "value": value} for name, value in filter.items()]
    else:
        conditions = [_condition(condition) for condition in listed("filter", filter)] if filter is not None else []
    body = _json_body(
        {"prefix": prefix, "filter": conditions or None, "query": query, "order": order, "cursor": cursor,
         "limit": limit}
    )
    return Call("POST", "/v1/memory/search", lambda answer: m.MemoryPage.from_wire(answer.json()), body,
                resend_safe=True)


def memory_namespaces(
    prefix: str, *, max_depth: int | None = None, cursor: str | None = None, limit: int | None = None
) -> Call[m.NamespacePage]:
    path = _query("/v1/memory/namespaces", {"prefix": prefix, "max_depth": max_depth, "cursor": cursor,
                                           "limit": limit})
    return Call("GET", path, lambda answer: m.NamespacePage.from_wire(answer.json()), resend_safe=True)


def memory_forget(prefix: str) -> Call[m.ForgetReport]:
    # Deleting what is already deleted again deletes nothing more: safe to resend.
    body = _json_body({"prefix": prefix})
    return Call("POST", "/v1/memory/forget", lambda answer: m.ForgetReport.from_wire(answer.json()), body,
                resend_safe=True)


def memory_usage() -> Call[m.MemoryUsage]:
    return Call("GET", "/v1/memory/usage", lambda answer: m.MemoryUsage.from_wire(answer.json()), resend_safe=True)


def memory_set_quota(*, items: int | None = None, bytes: int | None = None) -> Call[m.MemoryUsage]:
    """Sets the tenant's own memory quota (admin keys); a limit not given is the
    server's default again. Answers with the usage and the quota that now applies."""
    return Call("PUT", "/v1/memory/quota", lambda answer: m.MemoryUsage.from_wire(answer.json()),
                dumps({"items": items, "bytes": bytes}), resend_safe=True)


def memory_export(prefix: str | None = None) -> Call[bytes]:
    return Call("GET", _query("/v1/memory/export", {"prefix": prefix}), lambda answer: answer.body, resend_safe=True)


def memory_import(data: bytes) -> Call[m.MemoryImported]:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WrongType("memory_import takes the bytes of a memory export (JSONL)", argument="data")
    return Call("POST", "/v1/memory/import", lambda answer: m.MemoryImported.from_wire(answer.json()), bytes(data))


def whoami() -> Call[m.Principal]:
    return Call("GET", "/v1/whoami", lambda answer: m.Principal.from_wire(answer.json()), resend_safe=True)
