"""Every `/v1` operation as a `Call`: the request to send and how to decode its answer.

Both clients (sync and async) and both transports (HTTP and embedded) send these same
calls, so an operation is written once. `resend_safe` says whether the request may be
sent again after its answer was lost (a timeout, a dropped connection): reads, heartbeats,
appends (which always carry an idempotency key) and `PUT /v1/retention`. Creates, forks,
attaches and the other state changes name what they create or are confirmed by a read
(docs/reference/http.md, "Retrying safely"), so the client never resends them by itself.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Generic, Iterable, Iterator, Literal, Mapping, TypeVar, Union
from urllib.parse import quote, urlencode

import orjson

from . import _models as m
from ._errors import JSON_DEPTH_MAX, BerthError, InvalidArgument, NestingTooDeep, Subject, WrongType

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
UNSET = _Unset()

# The wire's closed vocabularies (their schemas in crates/berth-api/openapi.json), for
# type checkers and completion; the server refuses any other value.
#: How `attach` / `resume` treat a session that already has its runs (`OnBusy`).
OnBusy = Literal["reject", "interrupt"]
#: How `close_session` treats attached runs (`ClosePolicy`).
ClosePolicy = Literal["refuse", "cancel_runs"]
#: A status `list_sessions` filters on (`SessionStatus`, less `creating`).
SessionStatus = Literal["active", "idle", "closed", "expired"]
#: The order of `memory_search` (`MemoryOrder`).
MemoryOrder = Literal["key", "updated_at", "relevance"]
#: The operator of a `memory_search` condition (`FilterOpBody`).
FilterOp = Literal["eq", "ne", "gt", "gte", "lt", "lte", "in"]
#: What `export` writes.
ExportFormat = Literal["jsonl", "zip"]
#: An event to append: `(type, data)`, or a mapping with `type` (and `data`, `ignorable`,
#: `time`).
NewEvent = Union[tuple[str, Any], Mapping[str, Any]]
#: A `memory_search` condition: `(field, op, value)` or `{"field", "op", "value"}`.
Condition = Union[tuple[str, FilterOp, Any], Mapping[str, Any]]


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
    #: The session the call is about, and what else it names: an error answer says
    #: which (`_errors.name_subject`).
    session_id: str | None = None
    subjects: tuple[Subject, ...] = ()

    def undecoded(self) -> "Call[Answer]":
        """The same request, answered with its `Answer` as received (the caller decodes
        it later, or keeps its raw body)."""
        return replace(self, decode=_answer_itself)  # type: ignore[arg-type,return-value]


def _answer_itself(answer: Answer) -> Answer:
    return answer


def _in_session(call: Call[T], session_id: str, *more: Subject) -> Call[T]:
    """`call`, about `session_id` (a missing one is named in its `NotFound`) and `more`."""
    call.session_id = session_id
    call.subjects = (Subject("not_found", "session", session_id), *more)
    return call


def _naming(call: Call[T], *subjects: Subject) -> Call[T]:
    call.subjects = subjects
    return call


#: orjson's types that `json` refuses go back to `json` (which refuses them, as before).
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


#: What encoding JSON raises for a value it cannot hold (`TypeError`: not a JSON type;
#: `ValueError`: NaN, infinity, a circular value, a lone surrogate; `RecursionError`:
#: nested past Python's recursion limit).
_UNENCODABLE = (TypeError, ValueError, RecursionError)


def dumps(value: Any, *, argument: str = "value") -> bytes:
    """`value` as compact UTF-8 JSON, what `json.dumps(value, ensure_ascii=False,
    separators=(",", ":"), allow_nan=False)` encodes, written by orjson (the bench's
    100-item append body: ~34 µs with the `null` check below, against `json`'s ~358 µs,
    measured 2026-12-05). What orjson would
    write differently goes through `json` instead: integers past 64 bits, non-string keys,
    lone surrogates (orjson refuses them), and NaN or infinity (orjson writes `null`,
    where `json` refuses them: an answer with a `null` in it is checked for them).
    Floats may be spelled differently (`1e-7`, not `1e-07`); they read back the same.
    What `json` refuses is refused as the berth error that is also the exception `json`
    raises (`WrongType`, `InvalidArgument`, `NestingTooDeep`), naming `argument`."""
    try:
        return _encode(value)
    except _UNENCODABLE as error:
        raise unencodable(error, argument) from error


def unencodable(error: BaseException, argument: str) -> BerthError:
    """The berth error for `error`, raised encoding `argument` as JSON."""
    if isinstance(error, RecursionError):
        return NestingTooDeep(f"{argument} is nested too deep for JSON (berth stores at most {JSON_DEPTH_MAX} levels)",
                              argument=argument)
    if isinstance(error, UnicodeError):
        return InvalidArgument(f"{argument} holds a lone surrogate, which UTF-8 cannot encode ({error})"[:300],
                               argument=argument)
    if isinstance(error, TypeError):
        return WrongType(f"{argument} is not JSON: {error}"[:300], argument=argument)
    return InvalidArgument(f"{argument} is not JSON: {error}"[:300], argument=argument)


def _encode(value: Any) -> bytes:
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
    """`fields` but the None ones, as a JSON object."""
    return _object_body({key: value for key, value in fields.items() if value is not None})


def _object_body(fields: dict[str, Any]) -> bytes:
    """`fields` as a JSON object; a value JSON refuses is named by its field."""
    try:
        return _encode(fields)
    except _UNENCODABLE as error:
        raise unencodable(error, _unencodable_field(fields)) from error


def _unencodable_field(fields: dict[str, Any]) -> str:
    """Which of `fields` JSON refuses (found again only once the body was refused)."""
    for name, value in fields.items():
        try:
            _encode(value)
        except _UNENCODABLE:
            return name
    return "body"


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
    if not pairs:
        return path
    try:
        return f"{path}?{urlencode(pairs)}"
    except UnicodeError:
        culprit = next(key for key, value in pairs if not _encodable(value))
        raise InvalidArgument(f"{culprit} holds a lone surrogate, which UTF-8 cannot encode", argument=culprit) from None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeError:
        return False
    return True


def _segment(argument: str, value: Any) -> str:
    """`value` (an id) as one path segment."""
    if not isinstance(value, str):
        raise WrongType(f"{argument} must be a str, not {type(value).__name__}", argument=argument)
    try:
        return quote(value, safe="")
    except UnicodeError:
        raise InvalidArgument(f"{argument} holds a lone surrogate, which UTF-8 cannot encode",
                              argument=argument) from None


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


def _joined(argument: str, values: Iterable[str]) -> str:
    """`values` (strings) joined with commas, as a query parameter takes a list."""
    items = listed(argument, values)
    for item in items:
        if not isinstance(item, str):
            raise WrongType(f"{argument} holds strings, not {type(item).__name__}", argument=argument)
    return ",".join(items)


def listed(argument: str, value: Iterable[T]) -> list[T]:
    """`value` as a list, or `WrongType` when it is one string, bytes or mapping (or not
    iterable) where the call takes a list. The drop-ins check their list options with it."""
    _refuse_one(argument, value)
    return list(value)


def _mapping(argument: str, value: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise WrongType(f"{argument} is a mapping, not {type(value).__name__}", argument=argument)
    return dict(value)


def _session(session_id: str, rest: str = "") -> str:
    return f"/v1/sessions/{_segment('session_id', session_id)}{rest}"


def _decode_session(answer: Answer) -> m.Session:
    return m.Session.from_wire(answer.json())


def _nothing(answer: Answer) -> None:
    return None


_EVENT_FIELDS = frozenset(("type", "data", "ignorable", "time"))


def new_event(event: NewEvent) -> dict[str, Any]:
    """An event to append: a mapping with `type` (and `data`, `ignorable`, `time`), or a
    `(type, data)` pair."""
    if isinstance(event, tuple) and len(event) == 2:
        return {"type": event[0], "data": event[1]}
    # A plain dict first: `isinstance(…, typing.Mapping)` costs microseconds per event,
    # which a batch of a hundred pays a hundred times.
    if type(event) is dict or isinstance(event, Mapping):
        if "type" not in event:
            raise InvalidArgument("an event needs a \"type\"", argument="events")
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
            "policy": _mapping("policy", policy) if policy is not None else None,
            "origin": origin,
            "delegation_depth": delegation_depth,
        }
    )
    call = Call("POST", "/v1/sessions", _decode_session, body)
    if id is None:
        return call
    call.session_id = id
    return _naming(call, Subject("already_exists", "session", id))


def get_session(session_id: str) -> Call[m.Session]:
    return _in_session(Call("GET", _session(session_id), _decode_session, resend_safe=True), session_id)


def list_sessions(
    *,
    status: SessionStatus | Iterable[SessionStatus] | None = None,
    label: str | None = None,
    user: str | None = None,
    project: str | None = None,
    parent: str | None = None,
    active_since: int | None = None,
    active_before: int | None = None,
    include_blank: bool | None = None,
    q: str | None = None,
    cursor: str | None = None,
    limit: int | None = None,
) -> Call[m.SessionPage]:
    if status is not None and not isinstance(status, str):
        status = _joined("status", status)  # type: ignore[assignment]
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
            "q": q,
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
    q: str | None = None,
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
            "q": q,
        },
    )
    return Call("GET", path, lambda answer: m.SessionCounts.from_wire(answer.json()), resend_safe=True)


def update_session(
    session_id: str,
    *,
    title: str | None | _Unset = UNSET,
    labels: Iterable[str] | None | _Unset = UNSET,
    expected_revision: int | None = None,
) -> Call[m.Session]:
    fields: dict[str, Any] = {}
    if not isinstance(title, _Unset):
        fields["title"] = title
    if not isinstance(labels, _Unset):
        fields["labels"] = listed("labels", labels) if labels is not None else None
    if expected_revision is not None:
        fields["expected_revision"] = expected_revision
    path = _session(session_id)
    return _in_session(Call("PATCH", path, _decode_session, _object_body(fields)), session_id)


def delete_session(session_id: str, *, expected_revision: int | None = None) -> Call[None]:
    path = _query(_session(session_id), {"expected_revision": expected_revision})
    return _in_session(Call("DELETE", path, _nothing), session_id)


def close_session(
    session_id: str, *, policy: ClosePolicy | None = None, expected_revision: int | None = None
) -> Call[m.Session]:
    body = _json_body({"policy": policy, "expected_revision": expected_revision})
    return _in_session(Call("POST", _session(session_id, "/close"), _decode_session, body), session_id)


def fork_session(
    session_id: str,
    *,
    upto_seq: int | None = None,
    new_id: str | None = None,
    user: str | None = None,
    policy: Mapping[str, Any] | None = None,
    title: str | None = None,
    labels: Iterable[str] | None = None,
) -> Call[m.Session]:
    body = _json_body(
        {
            "upto_seq": upto_seq,
            "new_id": new_id,
            "user": user,
            "policy": _mapping("policy", policy) if policy is not None else None,
            "title": title,
            "labels": listed("labels", labels) if labels is not None else None,
        }
    )
    call = Call("POST", _session(session_id, "/fork"), _decode_session, body)
    if new_id is None:
        return _in_session(call, session_id)
    return _in_session(call, session_id, Subject("already_exists", "session", new_id))


def reopen_session(session_id: str) -> Call[m.Session]:
    return _in_session(Call("POST", _session(session_id, "/reopen"), _decode_session, b"{}"), session_id)


def append(
    session_id: str,
    events: Iterable[NewEvent],
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
    call = Call(
        "POST",
        _session(session_id, "/events"),
        lambda answer: m.AppendOutcome.from_wire(answer.json()),
        body,
        resend_safe=True,
        is_append=True,
    )
    return _in_session(call, session_id, *_write_subjects(writes))


def _write_subjects(writes: list[dict[str, Any]]) -> list[Subject]:
    """What an append's memory writes name: the item of a lone write (one made at once by
    another writer is `AlreadyExists`; of several writes, the answer does not say which).
    Their `bound_to` names no other session: the server takes only the appended one."""
    if len(writes) != 1:
        return []
    return [Subject("already_exists", "memory item", writes[0]["key"], namespace=writes[0]["namespace"])]


_MEMORY_WRITE_REQUIRED = frozenset(("namespace", "key", "value"))
_MEMORY_WRITE_FIELDS = _MEMORY_WRITE_REQUIRED | {"expected_revision", "ttl_ms", "bound_to"}


def _memory_write(write: Any) -> dict[str, Any]:
    if not isinstance(write, Mapping):
        raise WrongType(f"a memory write is a mapping, not {type(write).__name__}", argument="memory")
    unknown = sorted(str(name) for name in write if name not in _MEMORY_WRITE_FIELDS)
    missing = sorted(_MEMORY_WRITE_REQUIRED.difference(write))
    if unknown or missing:
        wrong = ", ".join([*(f"unknown {name!r}" for name in unknown), *(f"no {name!r}" for name in missing)])
        raise WrongType(f"a memory write has namespace, key, value (and expected_revision, ttl_ms, bound_to): "
                        f"{wrong}"[:300], argument="memory")
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
        raise InvalidArgument("types needs at least one event type", argument="types")
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
    return _in_session(Call("GET", path, decode_page, resend_safe=True), session_id)


def read_at(session_id: str, seqs: Iterable[int]) -> Call[m.EventPage]:
    """A point read by position: the events at `seqs`, each once, ascending. At most
    `READ_PAGE_MAX` distinct seqs (`LimitExceeded` above); a seq at or past the log's end
    is `NotFound` whose `body["actual"]` is that seq."""
    wanted = sorted({_seq(seq) for seq in listed("seqs", seqs)})
    if any(seq < 0 for seq in wanted):
        raise InvalidArgument(f"seqs are non-negative, not {wanted[0]}", argument="seqs")
    if not wanted:
        raise InvalidArgument("read_at needs at least one seq", argument="seqs")
    path = _query(_session(session_id, "/events"), {"seqs": wanted})
    call = Call("GET", path, decode_page, resend_safe=True)
    return _in_session(call, session_id, Subject("not_found", "event", None, session_id=session_id))


def _seq(seq: Any) -> int:
    try:
        return int(seq)
    except TypeError:
        raise WrongType(f"a seq is an int, not {type(seq).__name__}", argument="seqs") from None
    except ValueError:
        raise InvalidArgument(f"a seq is an int, not {seq!r}"[:300], argument="seqs") from None


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


def _run_subjects(session_id: str, run_id: str | None) -> tuple[Subject, ...]:
    return () if run_id is None else (Subject("already_exists", "run", run_id, session_id=session_id),)


def attach(
    session_id: str,
    *,
    run_id: str | None = None,
    on_busy: OnBusy | None = None,
    expected_revision: int | None = None,
) -> Call[m.Attachment]:
    body = _json_body({"run_id": run_id, "on_busy": on_busy, "expected_revision": expected_revision})
    call = Call("POST", _session(session_id, "/runs"), lambda answer: m.Attachment.from_wire(answer.json()), body)
    return _in_session(call, session_id, *_run_subjects(session_id, run_id))


def heartbeat(session_id: str, run_id: str) -> Call[m.Run]:
    path = _session(session_id, f"/runs/{_segment('run_id', run_id)}/heartbeat")
    return _in_session(Call("POST", path, lambda answer: m.Run.from_wire(answer.json()), resend_safe=True), session_id)


def detach(
    session_id: str, run_id: str, *, outcome: str | None = None, expected_revision: int | None = None
) -> Call[m.Session]:
    path = _session(session_id, f"/runs/{_segment('run_id', run_id)}/detach")
    body = _json_body({"outcome": outcome, "expected_revision": expected_revision})
    return _in_session(Call("POST", path, _decode_session, body), session_id)


def resume(
    session_id: str,
    *,
    run_id: str | None = None,
    on_busy: OnBusy | None = None,
    expected_revision: int | None = None,
) -> Call[m.ResumeOutcome]:
    body = _json_body({"run_id": run_id, "on_busy": on_busy, "expected_revision": expected_revision})
    call = Call("POST", _session(session_id, "/resume"), lambda answer: m.ResumeOutcome.from_wire(answer.json()), body)
    return _in_session(call, session_id, *_run_subjects(session_id, run_id))


def export(session_id: str, *, format: ExportFormat = "jsonl") -> Call[bytes]:
    if format not in ("jsonl", "zip"):
        raise InvalidArgument(f"format is \"jsonl\" or \"zip\", not {format!r}"[:300], argument="format")
    path = _query(_session(session_id, "/export"), {"format": format})
    return _in_session(Call("GET", path, lambda answer: answer.body, resend_safe=True), session_id)


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
    fields = {"namespace": namespace, "key": key, "value": value, "expected_revision": expected_revision,
              "ttl_ms": ttl_ms, "bound_to": bound_to}
    # None fields are left out, but for `value`: null is a value here.
    body = _object_body({name: field for name, field in fields.items() if field is not None or name == "value"})
    # Resending a put is safe only as a compare-and-set (a lost answer then conflicts
    # instead of writing twice over a newer value).
    call = Call("PUT", "/v1/memory/items", _memory_item, body, resend_safe=expected_revision is not None)
    subjects = [Subject("already_exists", "memory item", key, namespace=namespace)]
    if bound_to is not None:
        subjects.append(Subject("not_found", "session", bound_to))
    return _naming(call, *subjects)


def _item_subject(namespace: str, key: str) -> Subject:
    return Subject("not_found", "memory item", key, namespace=namespace)


def memory_get(namespace: str, key: str, *, refresh: bool | None = None) -> Call[m.MemoryItem]:
    path = _query("/v1/memory/items", {"namespace": namespace, "key": key, "refresh": refresh})
    return _naming(Call("GET", path, _memory_item, resend_safe=True), _item_subject(namespace, key))


def memory_delete(namespace: str, key: str, *, expected_revision: int | None = None) -> Call[m.MemoryItem]:
    path = _query("/v1/memory/items", {"namespace": namespace, "key": key, "expected_revision": expected_revision})
    return _naming(Call("DELETE", path, _memory_item), _item_subject(namespace, key))


def memory_delete_many(items: Iterable[tuple[str, str]]) -> Call[m.MemoryDeleted]:
    """Deletes the live items named as (namespace, key) — at most 1000, an absent one
    skipped — in one transaction with one audit record. Safe to resend: a second time
    deletes nothing more."""
    body = dumps({"items": [_item_name(item) for item in listed("items", items)]}, argument="items")
    return Call("POST", "/v1/memory/delete", lambda answer: m.MemoryDeleted.from_wire(answer.json()), body,
                resend_safe=True)


def _item_name(item: Any) -> dict[str, Any]:
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        raise WrongType(f"an item is named as (namespace, key), not {item!r}"[:300], argument="items")
    return {"namespace": item[0], "key": item[1]}


_CONDITION_FIELDS = ("field", "op", "value")


def _condition(condition: Any) -> dict[str, Any]:
    if isinstance(condition, Mapping):
        missing = [name for name in _CONDITION_FIELDS if name not in condition]
        if missing:
            raise InvalidArgument(f"a filter condition has field, op and value: no {', '.join(missing)}",
                                  argument="filter")
        field_name, op, value = (condition[name] for name in _CONDITION_FIELDS)
    elif isinstance(condition, (tuple, list)) and len(condition) == 3:
        field_name, op, value = condition
    else:
        raise WrongType(f"a filter condition is (field, op, value) or a mapping, not {condition!r}"[:300],
                        argument="filter")
    if op not in FILTER_OPS:
        raise InvalidArgument(f"filter operator {op!r}: one of {', '.join(FILTER_OPS)}"[:300], argument="filter")
    return {"field": field_name, "op": op, "value": value}


def memory_search(
    prefix: str,
    *,
    filter: Iterable[Condition] | Mapping[str, Any] | None = None,
    query: str | None = None,
    order: MemoryOrder | None = None,
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


def session_usage(session_id: str) -> Call[m.SessionUsage]:
    call = Call("GET", _session(session_id, "/usage"), lambda answer: m.SessionUsage.from_wire(answer.json()),
                resend_safe=True)
    return _in_session(call, session_id)


def usage(*, since: int, before: int) -> Call[m.Usage]:
    path = _query("/v1/usage", {"since": since, "before": before})
    return Call("GET", path, lambda answer: m.Usage.from_wire(answer.json()), resend_safe=True)


def memory_usage() -> Call[m.MemoryUsage]:
    return Call("GET", "/v1/memory/usage", lambda answer: m.MemoryUsage.from_wire(answer.json()), resend_safe=True)


def memory_set_quota(*, items: int | None = None, bytes: int | None = None) -> Call[m.MemoryUsage]:
    """Sets the tenant's own memory quota (admin keys); a limit not given is the
    server's default again. Answers with the usage and the quota that now applies."""
    return Call("PUT", "/v1/memory/quota", lambda answer: m.MemoryUsage.from_wire(answer.json()),
                _object_body({"items": items, "bytes": bytes}), resend_safe=True)


def memory_export(prefix: str | None = None) -> Call[bytes]:
    return Call("GET", _query("/v1/memory/export", {"prefix": prefix}), lambda answer: answer.body, resend_safe=True)


def memory_import(data: bytes) -> Call[m.MemoryImported]:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WrongType("memory_import takes the bytes of a memory export (JSONL)", argument="data")
    return Call("POST", "/v1/memory/import", lambda answer: m.MemoryImported.from_wire(answer.json()), bytes(data))


def whoami() -> Call[m.Principal]:
    return Call("GET", "/v1/whoami", lambda answer: m.Principal.from_wire(answer.json()), resend_safe=True)
