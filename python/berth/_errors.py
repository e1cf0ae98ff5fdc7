"""Typed exceptions, one per error class of the wire contract.

The server (or the embedded store, which answers through the same code) reports every
error as `{code, message, retryable, ...}`; `error_from_body` turns that into the class
registered for `code` here. Whether a request may be sent again comes from the body's
`retryable` flag (the class table of `berth_core::ErrorClass`), never from a list kept
here. Both transports raise the same classes.
"""

from __future__ import annotations

import json
from typing import Any


class BerthError(Exception):
    """Any error berth reports. `code`, `status` (HTTP status), `retryable`, `body`."""

    code: str = "internal"

    def __init__(self, message: str, *, status: int = 500, body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.body: dict[str, Any] = body or {}
        self.code = self.body.get("code", type(self).code)
        self.retryable: bool = bool(self.body.get("retryable", False))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status}, message={self.message!r})"


class NotFound(BerthError):
    code = "not_found"


class AlreadyExists(BerthError):
    code = "already_exists"


class Busy(BerthError):
    """Another writer holds the session (another process's write handle, or — on
    attach with `on_busy="reject"` — another run)."""

    code = "busy"


class WriterBusy(Busy):
    """The session's log is open for writing by another process (an embedded store
    shared by several processes): transient, so waiting it out works — the embedded
    client does so for appends, up to `busy_wait_s`. A `Busy` of its own (`writer_busy`),
    unlike the concurrency policy's refusal (`busy`), which waiting does not cure."""

    code = "writer_busy"


class OwnershipLost(BerthError):
    """The run named by the call is no longer attached (displaced, abandoned, detached):
    this caller no longer owns the conversation. `run` names it."""

    code = "run_not_attached"

    @property
    def run(self) -> str | None:
        return self.body.get("run")


class Fenced(BerthError):
    code = "fenced"


class _Mismatch(BerthError):
    """A conflict that names what was expected and what was found."""

    @property
    def expected(self) -> int | None:
        return self.body.get("expected")

    @property
    def actual(self) -> int | None:
        return self.body.get("actual")


class RevisionConflict(_Mismatch):
    """`expected_revision` did not match; `expected` and `actual` say how."""

    code = "revision_conflict"


class SeqConflict(_Mismatch):
    """`expected_seq` did not match the session's next seq. As berth answers it,
    `expected` is the seq the session expected next and `actual` the seq the append
    asked for (`next_seq` names the first plainly)."""

    @property
    def next_seq(self) -> int | None:
        return self.body.get("expected")

    code = "seq_conflict"


class IdempotencyKeyReused(BerthError):
    code = "idempotency_key_reused"


class InvalidTransition(BerthError):
    code = "invalid_transition"


class Terminal(BerthError):
    """The session is closed or expired: terminal states are never reactivated (fork)."""

    code = "terminal"


class PayloadTooLarge(BerthError):
    code = "payload_too_large"


class LimitExceeded(BerthError):
    """A named limit (`limit_name`, value `limit`) was exceeded (`actual`)."""

    code = "limit_exceeded"

    @property
    def limit_name(self) -> str | None:
        return self.body.get("limit_name")

    @property
    def limit(self) -> int | None:
        return self.body.get("limit")

    @property
    def actual(self) -> int | None:
        return self.body.get("actual")


class Invalid(BerthError):
    """The request was malformed or named something invalid (400 / 422)."""

    code = "invalid"


class WrongType(Invalid, TypeError):
    """An argument of the wrong type, refused by the client before anything is sent: one
    string (or bytes, or a mapping) where the call takes a list — `labels="urgent"` would
    otherwise be taken apart and stored as its letters — or an item of a list that is not
    what the list holds. An `Invalid` (what the server answers a malformed request, so
    `status` is 400) and a `TypeError`; `argument` names the parameter."""

    code = "wrong_type"

    def __init__(self, message: str, *, argument: str) -> None:
        body = {"code": "wrong_type", "message": message, "retryable": False, "argument": argument}
        super().__init__(message, status=400, body=body)

    @property
    def argument(self) -> str:
        return self.body["argument"]


class Forbidden(BerthError):
    code = "forbidden"


class Unauthenticated(BerthError):
    code = "unauthenticated"


class Unavailable(BerthError):
    """The store or server cannot answer now; `retryable` says whether sending the same
    request again is safe."""

    code = "unavailable"


class RateLimited(Unavailable):
    """Over the tenant's request rate; `retry_after_s` says when to come back."""

    code = "rate_limited"

    def __init__(self, message: str, *, status: int = 429, body: dict[str, Any] | None = None,
                 retry_after_s: float | None = None) -> None:
        super().__init__(message, status=status, body=body)
        self.retry_after_s = retry_after_s


class Timeout(Unavailable):
    """The server timed out answering; an append's outcome is unknown (retry it with
    its idempotency key)."""

    code = "timeout"


class FormatUnsupported(BerthError):
    code = "format_unsupported"


class Damaged(BerthError):
    code = "corrupt"


class Internal(BerthError):
    code = "internal"


class TransportError(Unavailable):
    """The request did not get an answer: the connection failed or dropped, or the
    client's timeout passed. `sent` is False when the request surely never left."""

    code = "transport"

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message, status=0, body={"code": "transport", "message": message, "retryable": True})
        self.sent = sent


class ClientClosed(BerthError):
    """The client was closed."""

    code = "client_closed"


class NativeMissing(ImportError):
    """`berth.open` needs the native module, which is not installed; the message says how
    to build it from the repository (it is on no package index)."""


_CLASSES: dict[str, type[BerthError]] = {
    cls.code: cls
    for cls in (
        NotFound, AlreadyExists, Busy, WriterBusy, OwnershipLost, Fenced, RevisionConflict, SeqConflict,
        IdempotencyKeyReused, InvalidTransition, Terminal, PayloadTooLarge, LimitExceeded, Invalid,
        Forbidden, Unauthenticated, Unavailable, RateLimited, Timeout, FormatUnsupported, Damaged,
        Internal,
    )
}
# Codes that are finer names of one class: a 400 (`bad_request`), a wrong route or method.
_CLASSES.update({"bad_request": Invalid, "method_not_allowed": Invalid})


def error_from_body(status: int, raw: bytes, retry_after: str | None = None) -> BerthError:
    """The exception for an error answer (`raw` is its body)."""
    try:
        body = json.loads(raw) if raw else {}
        if not isinstance(body, dict):
            body = {}
    except ValueError:
        body = {}
    code = body.get("code")
    if not isinstance(code, str):
        code = {404: "not_found", 401: "unauthenticated", 403: "forbidden", 429: "rate_limited"}.get(
            status, "unavailable" if status in (502, 503, 504) else "internal"
        )
        body = {"code": code, "message": raw.decode("utf-8", "replace")[:500], "retryable": status in (429, 502, 503, 504)}
    message = str(body.get("message", code))
    cls = _CLASSES.get(code, Invalid if 400 <= status < 500 else Internal)
    if cls is RateLimited:
        seconds = None
        if retry_after is not None:
            try:
                seconds = float(retry_after)
            except ValueError:
                seconds = None
        return RateLimited(message, status=status, body=body, retry_after_s=seconds)
    return cls(message, status=status, body=body)
