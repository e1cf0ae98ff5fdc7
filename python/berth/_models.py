"""The `/v1` response bodies as typed, frozen dataclasses.

Each class names the OpenAPI schema it mirrors (`WIRE_SCHEMA`); `tests/test_models.py`
checks every class against the committed `crates/berth-api/openapi.json` (the same field
names, and a default exactly for the fields the schema does not require), so the models
cannot drift from the server. Integers are exact (Python ints); `data` is decoded JSON.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

T = TypeVar("T")


_FIELD_NAMES: dict[type, frozenset[str]] = {}


def _build(cls: type[T], body: dict[str, Any], nested: dict[str, Any] | None = None) -> T:
    """Builds `cls` from a wire object: known fields only (a newer server may add some)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    values = {key: value for key, value in body.items() if key in names}
    for key, decode in (nested or {}).items():
        if values.get(key) is not None:
            values[key] = decode(values[key])
    return cls(**values)


@dataclass(frozen=True)
class Scope:
    WIRE_SCHEMA: ClassVar[str] = "ScopeBody"
    tenant: str
    user: str
    project: str | None = None


@dataclass(frozen=True)
class Parent:
    WIRE_SCHEMA: ClassVar[str] = "ParentBody"
    session: str
    cut_seq: int


@dataclass(frozen=True)
class Policy:
    """`concurrency` is `{"mode": "serial"}` or `{"mode": "parallel", "runs_max": N}`."""

    WIRE_SCHEMA: ClassVar[str] = "PolicyBody"
    activity_ttl_ms: int
    run_lease_ttl_ms: int
    concurrency: dict[str, Any] | None = None


@dataclass(frozen=True)
class Header:
    WIRE_SCHEMA: ClassVar[str] = "HeaderBody"
    version: int
    id: str
    scope: Scope
    created_at: int
    delegation_depth: int
    policy: Policy
    parent: Parent | None = None
    origin: str | None = None

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Header:
        return _build(
            cls,
            body,
            {
                "scope": lambda v: _build(Scope, v),
                "policy": lambda v: _build(Policy, v),
                "parent": lambda v: _build(Parent, v),
            },
        )


@dataclass(frozen=True)
class Run:
    WIRE_SCHEMA: ClassVar[str] = "RunBody"
    run_id: str
    attached_by: str
    attached_at: int
    lease_until: int
    status: str

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Run:
        return _build(cls, body)


@dataclass(frozen=True)
class Session:
    """A session's catalog record. `status`: creating, active, idle, closed, expired,
    deleting. Times are milliseconds since the Unix epoch."""

    WIRE_SCHEMA: ClassVar[str] = "SessionBody"
    header: Header
    status: str
    lease_until: int
    last_activity: int
    revision: int
    labels: list[str]
    event_count: int
    blank: bool
    runs: list[Run]
    status_changed_at: int
    title: str | None = None

    @property
    def id(self) -> str:
        return self.header.id

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Session:
        return _build(
            cls, body, {"header": Header.from_wire, "runs": lambda runs: [Run.from_wire(run) for run in runs]}
        )


@dataclass(frozen=True)
class SessionPage:
    WIRE_SCHEMA: ClassVar[str] = "SessionPage"
    items: list[Session]
    next_cursor: str | None = None

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> SessionPage:
        return _build(cls, body, {"items": lambda items: [Session.from_wire(item) for item in items]})


@dataclass(slots=True)
class Event:
    """A stored event. `run` is the run that appended it (always set in `parallel`
    sessions); `idempotency_key` is the key of the batch it was stored in, if any.
    Treat it as read-only: unlike the other models it is not frozen, because a frozen
    dataclass costs four times as much to build and a resume builds thousands."""

    WIRE_SCHEMA: ClassVar[str] = "EventBody"
    seq: int
    type: str
    time: int
    data: Any
    ignorable: bool = False
    run: str | None = None
    idempotency_key: str | None = None

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Event:
        # The hot path of every read (a resume decodes thousands): no generic builder.
        return cls(
            body["seq"], body["type"], body["time"], body.get("data"),
            body.get("ignorable", False), body.get("run"), body.get("idempotency_key"),
        )


@dataclass(frozen=True)
class EventPage:
    """Events in ascending seq. Page forward with `from_seq=next_seq`, backward with
    `before=first_seq` (stop when `first_seq` is 0)."""

    WIRE_SCHEMA: ClassVar[str] = "EventPage"
    events: list[Event]
    first_seq: int
    next_seq: int

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> EventPage:
        return _build(cls, body, {"events": lambda events: [Event.from_wire(event) for event in events]})


@dataclass(frozen=True)
class AppendOutcome:
    """`duplicate`: the batch was already stored (a retry), at `first_seq`."""

    WIRE_SCHEMA: ClassVar[str] = "AppendOutcomeBody"
    first_seq: int
    next_seq: int
    duplicate: bool

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> AppendOutcome:
        return _build(cls, body)


@dataclass(frozen=True)
class Attachment:
    """An attached run; `displaced` lists the runs its attach took over (`on_busy`)."""

    WIRE_SCHEMA: ClassVar[str] = "AttachmentBody"
    run: Run
    revision: int
    session_lease_until: int
    displaced: list[Run]

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Attachment:
        return _build(
            cls,
            body,
            {"run": Run.from_wire, "displaced": lambda runs: [Run.from_wire(run) for run in runs]},
        )


@dataclass(frozen=True)
class ResumeOutcome:
    """What `resume` did: the run it attached, the closer events it appended for turns a
    crash left open (`repaired`), the latest checkpoint, and the next seq."""

    WIRE_SCHEMA: ClassVar[str] = "ResumeOutcomeBody"
    attachment: Attachment
    repaired: list[Event]
    next_seq: int
    checkpoint: Event | None = None

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> ResumeOutcome:
        return _build(
            cls,
            body,
            {
                "attachment": Attachment.from_wire,
                "repaired": lambda events: [Event.from_wire(event) for event in events],
                "checkpoint": Event.from_wire,
            },
        )


@dataclass(frozen=True)
class AuditEntry:
    WIRE_SCHEMA: ClassVar[str] = "AuditEntryBody"
    seq: int
    tenant: str
    time: int
    actor: str
    action: str
    outcome: str
    details: Any
    prev_hash: str
    hash: str
    session: str | None = None
    revision: int | None = None

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> AuditEntry:
        return _build(cls, body)


@dataclass(frozen=True)
class AuditVerification:
    """`broken_at` is the seq of the first entry whose hash chain does not hold."""

    WIRE_SCHEMA: ClassVar[str] = "AuditVerificationBody"
    entries: int
    broken_at: int | None = None
    reason: str | None = None

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> AuditVerification:
        return _build(cls, body)


@dataclass(frozen=True)
class Backup:
    """A backup `POST /v1/admin/backup` took, on the server's machine (docs/backup.md)."""

    WIRE_SCHEMA: ClassVar[str] = "BackupBody"
    id: str
    name: str
    kind: str
    snapshot_at: int
    sessions: int
    logs_copied: int
    logs_unchanged: int
    vanished: int
    bytes: int
    duration_ms: int
    previous: str | None = None

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Backup:
        return _build(cls, body)


@dataclass(frozen=True)
class Principal:
    WIRE_SCHEMA: ClassVar[str] = "PrincipalBody"
    tenant: str
    user: str
    role: str
    project: str | None = None

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Principal:
        return _build(cls, body)


@dataclass(frozen=True)
class Imported:
    WIRE_SCHEMA: ClassVar[str] = "ImportedBody"
    sessions: list[Session]

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Imported:
        return _build(cls, body, {"sessions": lambda items: [Session.from_wire(item) for item in items]})


@dataclass(frozen=True)
class StatusCount:
    """One status's count: exact up to the cap, else `more` and `count` = the cap."""

    WIRE_SCHEMA: ClassVar[str] = "StatusCountBody"
    status: str
    count: int
    more: bool

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> StatusCount:
        return _build(cls, body)


@dataclass(frozen=True)
class SessionCounts:
    """Per listable status, how many sessions match (stopped at `cap`)."""

    WIRE_SCHEMA: ClassVar[str] = "SessionCountsBody"
    counts: list[StatusCount]
    cap: int

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> SessionCounts:
        return _build(cls, body, {"counts": lambda items: [StatusCount.from_wire(item) for item in items]})


@dataclass(frozen=True)
class AuditSearchPage:
    """Matching audit entries in stored order; continue with `from_seq=next_from`
    (`None`: the scan reached the end of the log)."""

    WIRE_SCHEMA: ClassVar[str] = "AuditSearchPage"
    entries: list[AuditEntry]
    next_from: int | None = None

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> AuditSearchPage:
        return _build(cls, body, {"entries": lambda items: [AuditEntry.from_wire(item) for item in items]})


@dataclass(frozen=True)
class MemoryItem:
    """A scoped-memory item: `(namespace, key) -> value`, with its revision (1 on
    creation, +1 per put) and times in ms."""

    WIRE_SCHEMA: ClassVar[str] = "MemoryItemBody"
    namespace: str
    key: str
    value: Any
    revision: int
    created_at: int
    updated_at: int
    expires_at: int | None = None
    ttl_ms: int | None = None
    bound_to: str | None = None

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> MemoryItem:
        return _build(cls, body)


@dataclass(frozen=True)
class MemoryPage:
    """One page of a memory search; continue with `cursor=page.next_cursor`."""

    WIRE_SCHEMA: ClassVar[str] = "MemoryPageBody"
    items: list[MemoryItem]
    next_cursor: str | None = None

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> MemoryPage:
        return _build(cls, body, {"items": lambda items: [MemoryItem.from_wire(item) for item in items]})


@dataclass(frozen=True)
class NamespacePage:
    WIRE_SCHEMA: ClassVar[str] = "NamespacePageBody"
    namespaces: list[str]
    next_cursor: str | None = None

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> NamespacePage:
        return _build(cls, body)


@dataclass(frozen=True)
class ForgetReport:
    """What `forget` deleted, its audit record, and the sessions whose logs still hold
    values written into the scope by appends."""

    WIRE_SCHEMA: ClassVar[str] = "ForgetReportBody"
    prefix: str
    items: int
    bytes: int
    audit_seq: int
    sessions_holding_values: list[str]

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> ForgetReport:
        return _build(cls, body)


@dataclass(frozen=True)
class MemoryUsage:
    WIRE_SCHEMA: ClassVar[str] = "MemoryUsageBody"
    items: int
    bytes: int
    quota_items: int
    quota_bytes: int

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> MemoryUsage:
        return _build(cls, body)


@dataclass(frozen=True)
class ModelUsage:
    """The totals of one (provider, model) pair of `model/call` events."""

    WIRE_SCHEMA: ClassVar[str] = "ModelUsageBody"
    model: str
    calls: int
    errors: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    model_ms: float
    #: `None`: the calls named no provider.
    provider: str | None = None

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> ModelUsage:
        return _build(cls, body, {"model_ms": float})


@dataclass(frozen=True)
class SessionUsage:
    """A session's LLM calls (totals over its `model/call` events, and per provider and
    model) and its tool time, computed by the server from the log."""

    WIRE_SCHEMA: ClassVar[str] = "SessionUsageBody"
    session: str
    calls: int
    errors: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    model_ms: float
    tool_calls: int
    tool_ms: int
    by_model: list[ModelUsage]

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> SessionUsage:
        return _build(cls, body, {"model_ms": float, "by_model": _model_usages})


@dataclass(frozen=True)
class Usage:
    """The caller's totals over event times in `[since, before)` (ms since the epoch):
    every session it may list whose activity overlaps the range; `sessions` counts those
    with a model call in it."""

    WIRE_SCHEMA: ClassVar[str] = "UsageBody"
    since: int
    before: int
    sessions: int
    calls: int
    errors: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    model_ms: float
    tool_calls: int
    tool_ms: int
    by_model: list[ModelUsage]

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Usage:
        return _build(cls, body, {"model_ms": float, "by_model": _model_usages})


def _model_usages(items: list[dict[str, Any]]) -> list[ModelUsage]:
    return [ModelUsage.from_wire(item) for item in items]


@dataclass(frozen=True)
class MemoryDeleted:
    """What `memory_delete_many` deleted, in the order named (absent items skipped)."""

    WIRE_SCHEMA: ClassVar[str] = "MemoryDeletedBody"
    deleted: list[MemoryItem]

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> MemoryDeleted:
        return _build(cls, body, {"deleted": lambda items: [MemoryItem.from_wire(item) for item in items]})


@dataclass(frozen=True)
class MemoryImported:
    WIRE_SCHEMA: ClassVar[str] = "MemoryImportedBody"
    imported: int

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> MemoryImported:
        return _build(cls, body)


#: Every response model, for the drift test.
MODELS: tuple[type, ...] = (
    Scope,
    Parent,
    Policy,
    Header,
    Run,
    Session,
    SessionPage,
    Event,
    EventPage,
    AppendOutcome,
    Attachment,
    ResumeOutcome,
    AuditEntry,
    AuditVerification,
    Backup,
    Principal,
    Imported,
    StatusCount,
    SessionCounts,
    AuditSearchPage,
    MemoryItem,
    MemoryPage,
    NamespacePage,
    ForgetReport,
    MemoryUsage,
    MemoryDeleted,
    MemoryImported,
    ModelUsage,
    SessionUsage,
    Usage,
)
