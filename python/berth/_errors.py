"""Typed exceptions, one per error class of the wire contract.

The server (or the embedded store, which answers through the same code) reports every
error as `{code, message, retryable, ...}`; `error_from_body` turns that into the class
registered for `code` here. Whether a request may be sent again comes from the body's
`retryable` flag (the class table of `berth_core::ErrorClass`), never from a list kept
here. Both transports raise the same classes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence


class BerthError(Exception):
    """Any error berth reports. `code`, `status` (HTTP status), `retryable`, `body` (the
    answer's error body as sent), and `session_id`: the session the failed call was about
    (None for calls about no session, and for errors raised before anything was sent)."""

    code: str = "internal"

    def __init__(self, message: str, *, status: int = 500, body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.body: dict[str, Any] = body or {}
        self.code = self.body.get("code", type(self).code)
        self.retryable: bool = bool(self.body.get("retryable", False))
        self.session_id: str | None = None

    def _reword(self, message: str) -> None:
        self.message = message
        self.args = (message,)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status}, message={self.message!r})"


class _Named(BerthError):
    """An error about one thing the call named. The server never echoes an id (a missing
    session and another tenant's answer byte for byte alike), so the client names it from
    the call it sent: `what` ("session", "run", "memory item", "event"), `id` (the session
    or run id, the memory item's key, the event's seq) and, for a memory item,
    `namespace`; the message says them ("session 'chat-1' not found"). All None when the
    call named several things the answer could be about."""

    what: str | None = None
    id: str | None = None
    namespace: str | None = None


class NotFound(_Named):
    code = "not_found"


class AlreadyExists(_Named):
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


def _refused_body(code: str, message: str, argument: str, **more: Any) -> dict[str, Any]:
    return {"code": code, "message": message, "retryable": False, "argument": argument, **more}


class WrongType(Invalid, TypeError):
    """An argument of the wrong type, refused by the client before anything is sent: one
    string (or bytes, or a mapping) where the call takes a list — `labels="urgent"` would
    otherwise be taken apart and stored as its letters — an item of a list that is not
    what the list holds, or a value JSON cannot hold (a `datetime`, a `set`, an object).
    An `Invalid` (what the server answers a malformed request, so `status` is 400) and a
    `TypeError`; `argument` names the parameter."""

    code = "wrong_type"

    def __init__(self, message: str, *, argument: str) -> None:
        super().__init__(message, status=400, body=_refused_body(type(self).code, message, argument))

    @property
    def argument(self) -> str:
        return str(self.body["argument"])


class InvalidArgument(Invalid, ValueError):
    """An argument of the right type but a value the client refuses before anything is
    sent: an event without a `"type"`, an empty `types` list, a negative seq, an unknown
    filter operator or export format, NaN or infinity in JSON data, a lone surrogate, a
    circular value, a server URL that is not `http://host:port`. An `Invalid` (`status`
    400) and a `ValueError`; `argument` names the parameter."""

    code = "invalid_argument"

    def __init__(self, message: str, *, argument: str) -> None:
        super().__init__(message, status=400, body=_refused_body(type(self).code, message, argument))

    @property
    def argument(self) -> str:
        return str(self.body["argument"])


#: The deepest JSON berth stores (the server's `berth_core::limits::JSON_DEPTH_MAX`).
JSON_DEPTH_MAX = 128


class NestingTooDeep(Invalid, RecursionError):
    """JSON data nested too deep for the client to encode (Python's recursion limit, far
    past the `JSON_DEPTH_MAX` = 128 levels the server takes: data between the two is sent
    and refused by the server as `Invalid`). An `Invalid` and a `RecursionError`, raised
    before anything is sent; `argument` names the parameter, `body["limit"]` the depth
    berth takes."""

    code = "nesting_too_deep"

    def __init__(self, message: str, *, argument: str) -> None:
        body = _refused_body(type(self).code, message, argument, limit_name="json_depth", limit=JSON_DEPTH_MAX)
        super().__init__(message, status=400, body=body)

    @property
    def argument(self) -> str:
        return str(self.body["argument"])


class Forbidden(BerthError):
    code = "forbidden"


class Unauthenticated(BerthError):
    code = "unauthenticated"


class InvalidApiKey(Unauthenticated, ValueError):
    """No usable API key, found by `Client(url)` / `AsyncClient(url)` when it is made,
    before any request: none given (no `api_key=`, no `BERTH_API_KEY`), an empty one, or
    one with a character no key has (keys are printable ASCII, as `berth keys create`
    prints them; surrounding whitespace is ignored). Every `/v1` route needs a key, so
    such a client could only ever be refused. An `Unauthenticated` (`status` 401) and a
    `ValueError`; `reason` is "missing", "empty" or "not_ascii". The message never shows
    the key."""

    code = "invalid_api_key"

    def __init__(self, message: str, *, reason: str) -> None:
        body = {"code": type(self).code, "message": message, "retryable": False, "reason": reason}
        super().__init__(message, status=401, body=body)

    @property
    def reason(self) -> str:
        return str(self.body["reason"])


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


@dataclass(frozen=True)
class Subject:
    """Something a call names that an error answer of class `code` ("not_found",
    "already_exists") may be about: `what` as the server says it ("session", "run",
    "memory item", "event"), its `id` (None: the answer's `actual`, an event's seq), and
    where it lives (`session_id` of a run or event, `namespace` of a memory item)."""

    code: str
    what: str
    id: str | None
    session_id: str | None = None
    namespace: str | None = None

    def phrase(self, id: str) -> str:
        if self.what == "memory item":
            return f"memory item {id!r} in namespace {self.namespace!r}"
        if self.what == "event":
            return f"event {id} of session {self.session_id!r}"
        if self.session_id is not None:
            return f"{self.what} {id!r} of session {self.session_id!r}"
        return f"{self.what} {id!r}"


_VERBS = {"not_found": "not found", "already_exists": "already exists"}


def name_subject(error: BerthError, session_id: str | None, subjects: Sequence[Subject]) -> BerthError:
    """`error` with what it is about: `session_id` (the session the call was about), and
    for a `NotFound` or `AlreadyExists` the one of `subjects` it names. The server's
    message for these is exactly "{what} not found" / "{what} already exists" (it never
    echoes the id), which tells a missing session from a missing event of one call; a
    message of any other shape, or several subjects it could be, leaves it unnamed rather
    than named wrongly."""
    error.session_id = session_id
    verb = _VERBS.get(error.code)
    if not isinstance(error, _Named) or verb is None:
        return error
    matching = {subject for subject in subjects
                if subject.code == error.code and error.message == f"{subject.what} {verb}"}
    if len(matching) != 1:
        return error
    (subject,) = matching
    name = subject.id if subject.id is not None else error.body.get("actual")
    if name is None:
        return error
    error.what, error.id, error.namespace = subject.what, str(name), subject.namespace
    if subject.what == "session":
        error.session_id = str(name)
    error._reword(f"{subject.phrase(str(name))} {verb}")
    return error


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
