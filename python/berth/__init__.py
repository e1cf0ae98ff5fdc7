"""berth for Python: one client API over two transports.

- `berth.Client(url, api_key=...)` / `berth.AsyncClient(...)`: HTTP to `berth serve`
  (pure Python, httpx). `BERTH_URL` and `BERTH_API_KEY` are the defaults.
- `berth.open(url, tenant=..., user=...)` / `berth.open_async(...)`: the embedded store in
  this process (a data directory, `file:///path`, `postgres://…`, `memory:`), through
  the native module `berth._native` inside berth-store's platform wheel
  (python/README.md, "Install").

Both raise the same typed exceptions (`berth.NotFound`, `berth.SeqConflict`, …) and
return the same models (`berth.Session`, `berth.Event`, …). Every error is a
`berth.BerthError`; the ones the client raises before sending anything are also the
built-in exception of their kind (`berth.WrongType` a `TypeError`, `berth.InvalidArgument`
and `berth.InvalidApiKey` a `ValueError`, `berth.NestingTooDeep` a `RecursionError`).
"""

from __future__ import annotations

import os
from typing import Any, Literal

from ._calls import (
    SEQ_END,
    UNSET,
    ClosePolicy,
    Condition,
    ExportFormat,
    FilterOp,
    MemoryOrder,
    NewEvent,
    OnBusy,
    SessionStatus,
)
from ._client import AsyncClient, AsyncEventStream, Client, EventStream
from ._errors import (
    AlreadyExists,
    BerthError,
    Busy,
    ClientClosed,
    Damaged,
    Fenced,
    Forbidden,
    FormatUnsupported,
    IdempotencyKeyReused,
    Internal,
    Invalid,
    InvalidApiKey,
    InvalidArgument,
    InvalidTransition,
    LimitExceeded,
    NativeMissing,
    NestingTooDeep,
    NotFound,
    OwnershipLost,
    PayloadTooLarge,
    RateLimited,
    RevisionConflict,
    SeqConflict,
    Terminal,
    Timeout,
    TransportError,
    Unauthenticated,
    Unavailable,
    WriterBusy,
    WrongType,
)
from ._models import (
    AppendOutcome,
    Attachment,
    AuditEntry,
    AuditVerification,
    Event,
    EventPage,
    Header,
    Imported,
    Policy,
    Principal,
    ResumeOutcome,
    Run,
    Session,
    SessionCounts,
    SessionPage,
    StatusCount,
    AuditSearchPage,
    ModelUsage,
    SessionUsage,
    Usage,
)

__version__ = "0.1.0"

#: The role of an embedded client's principal (`Role` in the wire contract).
Role = Literal["user", "service", "admin"]


def _native_options(
    url: str | os.PathLike[str], writer_idle_ms: int, preallocate_logs: bool | None = None
) -> dict[str, Any]:
    if not isinstance(url, (str, os.PathLike)):
        raise WrongType(f"url is a str or a path, not {type(url).__name__}", argument="url")
    url = os.fspath(url)
    if not isinstance(writer_idle_ms, int) or isinstance(writer_idle_ms, bool):
        raise WrongType(f"writer_idle_ms is an int, not {type(writer_idle_ms).__name__}", argument="writer_idle_ms")
    if writer_idle_ms < 0:
        raise InvalidArgument(f"writer_idle_ms is not negative, not {writer_idle_ms}", argument="writer_idle_ms")
    if preallocate_logs is not None and not isinstance(preallocate_logs, bool):
        raise WrongType(
            f"preallocate_logs is a bool or None, not {type(preallocate_logs).__name__}", argument="preallocate_logs"
        )
    if "://" not in url and url not in ("memory:",):
        url = os.path.abspath(url)  # one store per directory, however it is spelled
    options: dict[str, Any] = {"url": url, "writer_idle_ms": writer_idle_ms}
    if preallocate_logs is not None:
        options["preallocate_logs"] = preallocate_logs
    if url.startswith("memory:"):
        options["_fresh"] = object()  # every open of memory: is a store of its own
    return options


def _principal(tenant: str, user: str, project: str | None, role: str) -> dict[str, Any]:
    principal = {"tenant": tenant, "user": user, "project": project, "role": role}
    for name, value in principal.items():
        if not isinstance(value, str) and not (name == "project" and value is None):
            kind = "a str or None" if name == "project" else "a str"
            raise WrongType(f"{name} is {kind}, not {type(value).__name__}", argument=name)
    return principal


def open(
    url: str | os.PathLike[str],
    *,
    tenant: str,
    user: str,
    project: str | None = None,
    role: Role = "user",
    writer_idle_ms: int = 250,
    busy_wait_s: float = 10.0,
    retries: int = 4,
    preallocate_logs: bool | None = None,
) -> Client:
    """The embedded store at `url`, in this process, acting as one principal.

    `writer_idle_ms`: a session's write handle (and its lock) is released after this
    long without appends, so other processes on the same data directory take turns;
    an append that finds another process's handle waits up to `busy_wait_s` for it.
    `preallocate_logs`: create new logs of a data directory preallocated (log format
    version 2, the default) or classic (`False`: version 1, readable by builds older
    than preallocation); existing logs keep their format.
    Clients of one process opening the same URL share one store, whatever their
    principals.
    """
    from ._transport import NativeTransport

    options = _native_options(url, writer_idle_ms, preallocate_logs)
    transport = NativeTransport(options, _principal(tenant, user, project, role), busy_wait_s)
    return Client(transport=transport, retries=retries)


def open_async(
    url: str | os.PathLike[str],
    *,
    tenant: str,
    user: str,
    project: str | None = None,
    role: Role = "user",
    writer_idle_ms: int = 250,
    busy_wait_s: float = 10.0,
    retries: int = 4,
    preallocate_logs: bool | None = None,
) -> AsyncClient:
    """As `open`, for asyncio (calls run on worker threads; the loop never blocks)."""
    from ._transport import AsyncNativeTransport

    transport = AsyncNativeTransport(
        _native_options(url, writer_idle_ms, preallocate_logs), _principal(tenant, user, project, role), busy_wait_s
    )
    return AsyncClient(transport=transport, retries=retries)


__all__ = [
    "SEQ_END", "UNSET", "AsyncClient", "AsyncEventStream", "Client", "EventStream", "open", "open_async",
    "ClosePolicy", "Condition", "ExportFormat", "FilterOp", "MemoryOrder", "NewEvent", "OnBusy", "Role",
    "SessionStatus",
    "AlreadyExists", "BerthError", "Busy", "ClientClosed", "Damaged", "Fenced", "Forbidden", "FormatUnsupported",
    "IdempotencyKeyReused", "Internal", "Invalid", "InvalidApiKey", "InvalidArgument", "InvalidTransition",
    "LimitExceeded", "NativeMissing", "NestingTooDeep", "NotFound", "OwnershipLost", "PayloadTooLarge", "RateLimited", "RevisionConflict", "SeqConflict", "Terminal",
    "Timeout", "TransportError", "Unauthenticated", "Unavailable", "WriterBusy", "WrongType",
    "AppendOutcome", "Attachment", "AuditEntry", "AuditVerification", "Event", "EventPage", "Header", "Imported",
    "Policy", "Principal", "ResumeOutcome", "Run", "Session", "SessionPage", "SessionCounts", "StatusCount",
    "AuditSearchPage", "ModelUsage", "SessionUsage", "Usage",
]
