"""`Client` (sync) and `AsyncClient`: every `/v1` operation, over either transport.

Each operation is a call of `_calls`, where its request is made once; the two clients
differ only in how a call is executed (blocking, or awaited) and in their iterators.
Their methods spell out every parameter, with its type, so editors complete them and
type checkers check them (the same parameters on both: tests/test_signatures.py). Retries: a call is sent again only when that cannot duplicate anything —
see `_retry_delay` — with jittered exponential backoff, honouring `Retry-After`.
`Client` is safe to share across threads (httpx's client and the native store both
are); `AsyncClient` belongs to one event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from typing import Any, AsyncIterator, Callable, Iterable, Iterator, Mapping, TypeVar

from . import _calls as c
from . import _models as m
from ._calls import Answer, Call
from ._errors import (
    BerthError,
    InvalidApiKey,
    InvalidArgument,
    RateLimited,
    Subject,
    TransportError,
    WriterBusy,
    WrongType,
    error_from_body,
    name_subject,
)
from ._sse import SseDecoder

T = TypeVar("T")

_BACKOFF_FIRST_S = 0.05
_BACKOFF_MAX_S = 2.0


def _raise_for(answer: Answer, call: Call[Any]) -> None:
    if answer.status >= 400:
        error = error_from_body(answer.status, answer.body, answer.headers.get("retry-after"))
        raise name_subject(error, call.session_id, call.subjects)


#: How to get a key, for the errors that find none.
_KEY_HINT = (
    "pass api_key=... or set BERTH_API_KEY to a key `berth keys create --tenant <tenant> --user <user> "
    "--role <role>` printed"
)


def _api_key(given: str | None) -> str:
    """The key to send: `given`, else `BERTH_API_KEY`, without surrounding whitespace (a
    key read from a file keeps its newline). `InvalidApiKey` when there is none, or it is
    empty, or it holds a character no key has: keys are printable ASCII (`berth_…` keys
    and JWTs alike), and anything else would fail deep in the HTTP library on the first
    call. The message never shows the key."""
    source = "api_key" if given is not None else "BERTH_API_KEY"
    key = given if given is not None else os.environ.get("BERTH_API_KEY")
    if key is None:
        raise InvalidApiKey(f"no API key: {_KEY_HINT}", reason="missing")
    if not isinstance(key, str):
        raise WrongType(f"api_key is a str, not {type(key).__name__}", argument="api_key")
    key = key.strip()
    if not key:
        raise InvalidApiKey(f"the API key ({source}) is empty: {_KEY_HINT}", reason="empty")
    for index, character in enumerate(key):
        if not "!" <= character <= "~":
            raise InvalidApiKey(
                f"the API key ({source}) has {character!r} at index {index}, which no key has: keys are printable "
                f"ASCII without spaces, as `berth keys create` prints them ({_KEY_HINT})",
                reason="not_ascii",
            )
    return key


def _http_settings(client: str, url: str | None, api_key: str | None) -> tuple[str, str]:
    """The server URL (`url`, else `BERTH_URL`) and the key of an HTTP client."""
    url = url or os.environ.get("BERTH_URL")
    if not url:
        hint = "berth.open" if client == "Client" else "berth.open_async"
        raise InvalidArgument(f"no server URL: pass {client}(url) or set BERTH_URL (or use {hint} for the "
                              "embedded store)", argument="url")
    if not isinstance(url, str):
        raise WrongType(f"url is a str, not {type(url).__name__}", argument="url")
    return url, _api_key(api_key)


def _retry_delay(call: Call[Any], error: BerthError, attempt: int, started: float, busy_wait_s: float) -> float | None:
    """How long to wait before sending `call` again after `error`, or None to give up."""
    backoff = min(_BACKOFF_MAX_S, _BACKOFF_FIRST_S * (2.0**attempt)) * (0.5 + random.random() / 2)
    if isinstance(error, WriterBusy):
        # Another process's write handle on an embedded data directory: it is released
        # when that process's handle goes idle.
        if call.is_append and time.monotonic() - started + backoff <= busy_wait_s:
            return backoff
        return None
    if isinstance(error, RateLimited):
        # Refused before anything was done: always safe to send again.
        return error.retry_after_s if error.retry_after_s is not None else backoff
    if isinstance(error, TransportError) and not error.sent:
        return backoff
    if error.retryable and call.resend_safe:
        return backoff
    return None


def _stream_message(message: Any) -> tuple[str, Any]:
    """("event", Event) | ("end", body) | ("error", BerthError) | ("other", None)."""
    if message.event == "event":
        return "event", m.Event.from_wire(json.loads(message.data))
    if message.event == "end":
        return "end", json.loads(message.data)
    if message.event == "error":
        # The error body of a stream that cannot continue (its status line was a 200).
        return "error", error_from_body(0, message.data.encode())
    return "other", None


class _TailState:
    """Where a live tail is, so it resumes after a dropped connection."""

    def __init__(self, session_id: str, from_seq: int, max_events: int | None, idle_timeout_ms: int | None,
                 reconnect_s: float) -> None:
        self.session_id = session_id
        self.next_seq = from_seq
        self.remaining = max_events
        self.idle_timeout_ms = idle_timeout_ms
        self.reconnect_s = reconnect_s
        self.end: dict[str, Any] | None = None

    def path(self) -> str:
        return c.stream_path(
            self.session_id, from_seq=self.next_seq, max_events=self.remaining, idle_timeout_ms=self.idle_timeout_ms
        )

    def refused(self, status: int, body: bytes, retry_after: str | None) -> BerthError:
        """The error of a tail the server refused, naming its session."""
        return self._named(error_from_body(status, body, retry_after))

    def _named(self, error: BerthError) -> BerthError:
        return name_subject(error, self.session_id, (Subject("not_found", "session", self.session_id),))

    def take(self, message: Any) -> m.Event | None:
        """One SSE message: the event to yield (the position moves past it), or None;
        `end` is set when the server ended the stream; an error message raises."""
        kind, value = _stream_message(message)
        if kind == "error":
            raise self._named(value)
        if kind == "end":
            self.end = value
            return None
        if kind != "event":
            return None
        event: m.Event = value
        self.next_seq = event.seq + 1
        if self.remaining is not None:
            self.remaining -= 1
        return event


class EventStream:
    """A live tail (sync iterator of `Event`). Resumes from the last seq it yielded when
    the connection drops (a server restart included) for up to `reconnect_s` seconds of
    failed reconnects; ends when the server ends a bounded stream (`max_events`,
    `idle_timeout_ms`; then `end` holds the server's `{reason, next_seq}`)."""

    def __init__(self, client: Client, state: _TailState) -> None:
        self._client = client
        self._state = state
        self._stream: Any = None
        self._closed = False

    @property
    def end(self) -> dict[str, Any] | None:
        return self._state.end

    @property
    def next_seq(self) -> int:
        return self._state.next_seq

    def __iter__(self) -> Iterator[m.Event]:
        state = self._state
        failing_since: float | None = None
        attempt = 0
        while not self._closed:
            try:
                self._stream = self._client._transport.open_stream(state.path(), [])
                if self._stream.status >= 400:
                    body = self._stream.read_all()
                    raise state.refused(self._stream.status, body, self._stream.headers.get("retry-after"))
                failing_since, attempt = None, 0
                decoder = SseDecoder()
                for chunk in self._stream.chunks():
                    for message in decoder.feed(chunk):
                        event = state.take(message)
                        if state.end is not None:
                            return
                        if event is not None:
                            yield event
                # The server closed the stream without an end: reconnect.
            except BerthError as error:  # a TransportError included: the connection dropped
                if not isinstance(error, TransportError) and not error.retryable:
                    raise
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > state.reconnect_s:
                    raise
                time.sleep(min(_BACKOFF_MAX_S, _BACKOFF_FIRST_S * 2**attempt))
                attempt += 1
            finally:
                if self._stream is not None:
                    self._stream.close()
                    self._stream = None

    def close(self) -> None:
        self._closed = True
        if self._stream is not None:
            self._stream.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Client:
    """berth, blocking. `Client(url, api_key=...)` talks HTTP to `berth serve`
    (`BERTH_URL` / `BERTH_API_KEY` by default); `berth.open(...)` makes one on the
    embedded store. Safe to share across threads.

    Made over HTTP without a usable key (none given and no `BERTH_API_KEY`, an empty one,
    one with a character no key has) it raises `InvalidApiKey` at once: every operation
    needs a key."""

    def __init__(
        self,
        url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retries: int = 4,
        transport: Any = None,
    ) -> None:
        from ._transport import HttpTransport

        if transport is None:
            transport = HttpTransport(*_http_settings("Client", url, api_key), timeout)
        self._transport = transport
        self._retries = retries
        #: Run before the transport closes (`_before_close`): integrations release what
        #: they hold through this client (the OpenAI drop-in's idle runs).
        self._close_hooks: list[Callable[[], None]] = []

    def _before_close(self, hook: Callable[[], None]) -> None:
        """Calls `hook` once when this client closes, before its transport does."""
        self._close_hooks.append(hook)

    def _execute(self, call: Call[T]) -> T:
        started = time.monotonic()
        attempt = 0
        while True:
            try:
                answer = self._transport.send(call.method, call.path, call.headers, call.body)
                _raise_for(answer, call)
                return call.decode(answer)
            except BerthError as error:
                delay = _retry_delay(call, error, attempt, started, self._transport.busy_wait_s)
                busy = isinstance(error, WriterBusy)
                if delay is None or (attempt >= self._retries and not busy):
                    raise
                time.sleep(delay)
                attempt += 1

    async def _aexecute(self, call: Call[T]) -> T:
        """`_execute` for a coroutine, without blocking its loop (the integrations' async
        methods on a sync client): the transport's `asend` where it has one, else the
        blocking call on the loop's default executor."""
        asend = getattr(self._transport, "asend", None)
        if asend is None:
            return await asyncio.get_running_loop().run_in_executor(None, self._execute, call)
        return await _execute_async(asend, self._transport.busy_wait_s, self._retries, call)

    # sessions
    def create_session(
        self,
        id: str | None = None,
        *,
        title: str | None = None,
        labels: Iterable[str] | None = None,
        user: str | None = None,
        project: str | None = None,
        policy: Mapping[str, Any] | None = None,
        origin: str | None = None,
        delegation_depth: int | None = None,
    ) -> m.Session:
        """Creates a session (`id`: one of your own, else a time-ordered one is made).
        `policy`: `{"activity_ttl_ms", "run_lease_ttl_ms", "concurrency"}`. Never resent
        automatically: see docs/reference/http.md."""
        return self._execute(c.create_session(
            id, title=title, labels=labels, user=user, project=project, policy=policy, origin=origin,
            delegation_depth=delegation_depth,
        ))

    def count_sessions(
        self,
        *,
        user: str | None = None,
        project: str | None = None,
        label: str | None = None,
        parent: str | None = None,
        active_since: int | None = None,
        active_before: int | None = None,
        include_blank: bool | None = None,
        q: str | None = None,
    ) -> m.SessionCounts:
        """Per status, how many sessions match (filters as `list_sessions`, without
        status and paging); counts stop at the server's cap (`more`)."""
        return self._execute(c.count_sessions(
            user=user, project=project, label=label, parent=parent, active_since=active_since,
            active_before=active_before, include_blank=include_blank, q=q,
        ))

    def get_session(self, session_id: str) -> m.Session:
        return self._execute(c.get_session(session_id))

    def list_sessions(
        self,
        *,
        status: c.SessionStatus | Iterable[c.SessionStatus] | None = None,
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
    ) -> m.SessionPage:
        """One page of sessions, newest activity first; `iter_sessions` follows cursors.
        Times are milliseconds since the Unix epoch. `q`: sessions whose id, title or a
        label holds this text, ignoring case (at most 256 characters)."""
        return self._execute(c.list_sessions(
            status=status, label=label, user=user, project=project, parent=parent, active_since=active_since,
            active_before=active_before, include_blank=include_blank, q=q, cursor=cursor, limit=limit,
        ))

    def update_session(
        self,
        session_id: str,
        *,
        title: str | None | c._Unset = c.UNSET,
        labels: Iterable[str] | None | c._Unset = c.UNSET,
        expected_revision: int | None = None,
    ) -> m.Session:
        """Sets `title` and/or `labels` (None clears a title; `UNSET` leaves it), with
        `expected_revision`."""
        return self._execute(
            c.update_session(session_id, title=title, labels=labels, expected_revision=expected_revision)
        )

    def close_session(
        self, session_id: str, *, policy: c.ClosePolicy | None = None, expected_revision: int | None = None
    ) -> m.Session:
        return self._execute(c.close_session(session_id, policy=policy, expected_revision=expected_revision))

    def fork_session(
        self,
        session_id: str,
        *,
        upto_seq: int | None = None,
        new_id: str | None = None,
        user: str | None = None,
        policy: Mapping[str, Any] | None = None,
        title: str | None = None,
        labels: Iterable[str] | None = None,
    ) -> m.Session:
        """A new session from the events before `upto_seq` (all by default) of
        `session_id`, whose header names its parent. `user`, `policy`, `title` and
        `labels` replace the parent's (another `user`: service and admin keys only);
        `upto_seq=0` copies nothing — an empty session a drop-in can adopt."""
        call = c.fork_session(
            session_id, upto_seq=upto_seq, new_id=new_id, user=user, policy=policy, title=title, labels=labels
        )
        return self._execute(call)

    def reopen_session(self, session_id: str) -> m.Session:
        return self._execute(c.reopen_session(session_id))

    def delete_session(self, session_id: str, *, expected_revision: int | None = None) -> None:
        return self._execute(c.delete_session(session_id, expected_revision=expected_revision))

    # events
    def append(
        self,
        session_id: str,
        events: Iterable[c.NewEvent],
        *,
        expected_seq: int | None = None,
        run: str | None = None,
        idempotency_key: str | None = None,
        memory: Iterable[Mapping[str, Any]] | None = None,
    ) -> m.AppendOutcome:
        """Appends a batch atomically and durably. Without `idempotency_key` a fresh one
        is made, so a resend after a lost answer can never store the batch twice.
        `memory`: scoped-memory writes (`{namespace, key, value, expected_revision?,
        ttl_ms?, bound_to?}`) applied atomically with the batch, before this returns."""
        call = c.append(
            session_id, events, expected_seq=expected_seq, run=run, idempotency_key=idempotency_key, memory=memory
        )
        return self._execute(call)

    def read(
        self, session_id: str, *, from_seq: int = 0, limit: int | None = None, types: Iterable[str] | None = None
    ) -> m.EventPage:
        """Events from `from_seq`. With `types`, only events of those types (exact names):
        read on from the page's `next_seq` until a page scans nothing (`next_seq` ==
        `from_seq`); a page may hold fewer than `limit` before that."""
        return self._execute(c.read(session_id, from_seq=from_seq, limit=limit, types=types))

    def read_before(
        self,
        session_id: str,
        before: int = c.SEQ_END,
        *,
        limit: int | None = None,
        types: Iterable[str] | None = None,
    ) -> m.EventPage:
        """The `limit` events just before seq `before` (default: the end), ascending. With
        `types`, the last `limit` of those types: read on before the page's `first_seq`
        until it is 0."""
        return self._execute(c.read(session_id, before=before, limit=limit, types=types))

    def read_at(self, session_id: str, seqs: Iterable[int]) -> m.EventPage:
        """The events at `seqs` (a point read by position), each once, ascending: at most
        1,000 distinct seqs; one at or past the end is `NotFound` naming it (`id`, and
        `body["actual"]`)."""
        return self._execute(c.read_at(session_id, seqs))

    # runs
    def attach(
        self,
        session_id: str,
        *,
        run_id: str | None = None,
        on_busy: c.OnBusy | None = None,
        expected_revision: int | None = None,
    ) -> m.Attachment:
        """Attaches a run (`run_id`: one of your own, else one is made)."""
        return self._execute(c.attach(session_id, run_id=run_id, on_busy=on_busy, expected_revision=expected_revision))

    def heartbeat(self, session_id: str, run_id: str) -> m.Run:
        return self._execute(c.heartbeat(session_id, run_id))

    def detach(
        self, session_id: str, run_id: str, *, outcome: str | None = None, expected_revision: int | None = None
    ) -> m.Session:
        """Detaches a run; `outcome` (`completed` by default, `failed`, …) goes to the audit log."""
        return self._execute(c.detach(session_id, run_id, outcome=outcome, expected_revision=expected_revision))

    def resume(
        self,
        session_id: str,
        *,
        run_id: str | None = None,
        on_busy: c.OnBusy | None = None,
        expected_revision: int | None = None,
    ) -> m.ResumeOutcome:
        """Attaches a run and closes the turns a crash left open (`repaired`)."""
        return self._execute(c.resume(session_id, run_id=run_id, on_busy=on_busy, expected_revision=expected_revision))

    # export, import, admin
    def export(self, session_id: str, *, format: c.ExportFormat = "jsonl") -> bytes:
        return self._execute(c.export(session_id, format=format))

    def import_sessions(self, data: bytes) -> m.Imported:
        return self._execute(c.import_sessions(data))

    def audit(self, *, from_seq: int | None = None, limit: int | None = None) -> list[m.AuditEntry]:
        return self._execute(c.audit(from_seq=from_seq, limit=limit))

    def audit_search(
        self,
        *,
        from_seq: int | None = None,
        limit: int | None = None,
        action: str | None = None,
        session: str | None = None,
        actor: str | None = None,
        since: int | None = None,
        before: int | None = None,
    ) -> m.AuditSearchPage:
        """Audit entries matching `action`, `session`, `actor`, `since`, `before` (admin);
        one bounded scan per call, continue with `from_seq=page.next_from`."""
        return self._execute(c.audit_search(
            from_seq=from_seq, limit=limit, action=action, session=session, actor=actor, since=since, before=before
        ))

    def verify_audit(self) -> m.AuditVerification:
        return self._execute(c.verify_audit())

    def set_retention(
        self,
        *,
        idle_ttl_ms: int | None = None,
        max_age_ms: int | None = None,
        delete_terminal_after_ms: int | None = None,
        memory_max_age_ms: int | None = None,
    ) -> None:
        """The tenant's retention policy (admin); a limit not given is none."""
        return self._execute(c.set_retention(
            idle_ttl_ms=idle_ttl_ms, max_age_ms=max_age_ms, delete_terminal_after_ms=delete_terminal_after_ms,
            memory_max_age_ms=memory_max_age_ms,
        ))

    def whoami(self) -> m.Principal:
        return self._execute(c.whoami())

    # ----- scoped memory (docs/reference/memory.md) -----

    def memory_put(
        self,
        namespace: str,
        key: str,
        value: Any,
        *,
        expected_revision: int | None = None,
        ttl_ms: int | None = None,
        bound_to: str | None = None,
    ) -> m.MemoryItem:
        """Creates or replaces an item; `expected_revision` (0: only if absent), `ttl_ms`,
        `bound_to` (a session id: deleted with it)."""
        return self._execute(
            c.memory_put(namespace, key, value, expected_revision=expected_revision, ttl_ms=ttl_ms, bound_to=bound_to)
        )

    def memory_get(self, namespace: str, key: str, *, refresh: bool | None = None) -> m.MemoryItem:
        return self._execute(c.memory_get(namespace, key, refresh=refresh))

    def memory_delete(self, namespace: str, key: str, *, expected_revision: int | None = None) -> m.MemoryItem:
        return self._execute(c.memory_delete(namespace, key, expected_revision=expected_revision))

    def memory_search(
        self,
        prefix: str,
        *,
        filter: Iterable[c.Condition] | Mapping[str, Any] | None = None,
        query: str | None = None,
        order: c.MemoryOrder | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> m.MemoryPage:
        """Items within `prefix`: `filter` (conditions `(field, op, value)`, ANDed, or a
        mapping `{field: value}` for equality), `query` (full text), `order`, `cursor`,
        `limit`."""
        return self._execute(
            c.memory_search(prefix, filter=filter, query=query, order=order, cursor=cursor, limit=limit)
        )

    def memory_namespaces(
        self, prefix: str, *, max_depth: int | None = None, cursor: str | None = None, limit: int | None = None
    ) -> m.NamespacePage:
        return self._execute(c.memory_namespaces(prefix, max_depth=max_depth, cursor=cursor, limit=limit))

    def memory_forget(self, prefix: str) -> m.ForgetReport:
        return self._execute(c.memory_forget(prefix))

    def memory_delete_many(self, items: Iterable[tuple[str, str]]) -> m.MemoryDeleted:
        """Deletes the items named as (namespace, key) (absent ones skipped) with one
        audit record."""
        return self._execute(c.memory_delete_many(items))

    def session_usage(self, session_id: str) -> m.SessionUsage:
        """The session's LLM calls — totals over its `model/call` events, and per provider
        and model — and its tool time, computed by the server from its log."""
        return self._execute(c.session_usage(session_id))

    def usage(self, *, since: int, before: int) -> m.Usage:
        """The caller's totals over event times in `[since, before)` (ms since the epoch):
        every session it may list whose activity overlaps the range (a user key: its own),
        each one's `model/call` and tool events read by the server."""
        return self._execute(c.usage(since=since, before=before))

    def memory_usage(self) -> m.MemoryUsage:
        return self._execute(c.memory_usage())

    def memory_set_quota(self, *, items: int | None = None, bytes: int | None = None) -> m.MemoryUsage:
        """The tenant's own memory quota (admin); a limit not given is the server's default."""
        return self._execute(c.memory_set_quota(items=items, bytes=bytes))

    def memory_export(self, prefix: str | None = None) -> bytes:
        return self._execute(c.memory_export(prefix))

    def memory_import(self, data: bytes) -> m.MemoryImported:
        return self._execute(c.memory_import(data))

    # iterators, tails, lifetime
    def iter_sessions(
        self,
        *,
        status: c.SessionStatus | Iterable[c.SessionStatus] | None = None,
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
    ) -> Iterator[m.Session]:
        """Every session the filters match (as `list_sessions`), following `next_cursor`
        from `cursor`; `limit` is the size of each page."""
        while True:
            page = self.list_sessions(
                status=status, label=label, user=user, project=project, parent=parent, active_since=active_since,
                active_before=active_before, include_blank=include_blank, q=q, cursor=cursor, limit=limit,
            )
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def iter_events(self, session_id: str, *, from_seq: int = 0, page: int = c.READ_PAGE_MAX) -> Iterator[m.Event]:
        """Every event from `from_seq` to the current end, page by page."""
        while True:
            events = self.read(session_id, from_seq=from_seq, limit=page)
            yield from events.events
            if len(events.events) < page:
                return
            from_seq = events.next_seq

    def tail(self, session_id: str, count: int) -> list[m.Event]:
        """The last `count` events, ascending, read backwards (never the whole log)."""
        collected: list[m.Event] = []
        before = c.SEQ_END
        while len(collected) < count:
            page = self.read_before(session_id, before, limit=min(c.READ_PAGE_MAX, count - len(collected)))
            collected[:0] = page.events
            if page.first_seq == 0 or not page.events:
                break
            before = page.first_seq
        return collected

    def stream(
        self,
        session_id: str,
        *,
        from_seq: int = 0,
        max_events: int | None = None,
        idle_timeout_ms: int | None = None,
        reconnect_s: float = 30.0,
    ) -> EventStream:
        """A live tail from `from_seq` (SSE), resumed after a dropped connection for up to
        `reconnect_s` of failed reconnects; bounded by `max_events` / `idle_timeout_ms`."""
        return EventStream(self, _TailState(session_id, from_seq, max_events, idle_timeout_ms, reconnect_s))

    def close(self) -> None:
        hooks, self._close_hooks = self._close_hooks, []
        for hook in hooks:
            try:
                hook()
            except Exception:  # a hook's failure never keeps the transport open
                pass
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _execute_async(send: Any, busy_wait_s: float, retries: int, call: Call[T]) -> T:
    """`Client._execute`'s retries, awaiting `send` and sleeping on the loop."""
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            answer = await send(call.method, call.path, call.headers, call.body)
            _raise_for(answer, call)
            return call.decode(answer)
        except BerthError as error:
            delay = _retry_delay(call, error, attempt, started, busy_wait_s)
            busy = isinstance(error, WriterBusy)
            if delay is None or (attempt >= retries and not busy):
                raise
            await asyncio.sleep(delay)
            attempt += 1


class AsyncEventStream:
    """A live tail for asyncio (`async for event in stream`); as `EventStream`."""

    def __init__(self, client: AsyncClient, state: _TailState) -> None:
        self._client = client
        self._state = state
        self._stream: Any = None
        self._closed = False

    @property
    def end(self) -> dict[str, Any] | None:
        return self._state.end

    @property
    def next_seq(self) -> int:
        return self._state.next_seq

    async def __aiter__(self) -> AsyncIterator[m.Event]:
        state = self._state
        failing_since: float | None = None
        attempt = 0
        while not self._closed:
            try:
                self._stream = await self._client._transport.open_stream(state.path(), [])
                if self._stream.status >= 400:
                    body = await self._stream.read_all()
                    raise state.refused(self._stream.status, body, self._stream.headers.get("retry-after"))
                failing_since, attempt = None, 0
                decoder = SseDecoder()
                async for chunk in self._stream.chunks():
                    for message in decoder.feed(chunk):
                        event = state.take(message)
                        if state.end is not None:
                            return
                        if event is not None:
                            yield event
            except BerthError as error:  # a TransportError included: the connection dropped
                if not isinstance(error, TransportError) and not error.retryable:
                    raise
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > state.reconnect_s:
                    raise
                await asyncio.sleep(min(_BACKOFF_MAX_S, _BACKOFF_FIRST_S * 2**attempt))
                attempt += 1
            finally:
                if self._stream is not None:
                    await self._stream.close()
                    self._stream = None

    async def close(self) -> None:
        self._closed = True
        if self._stream is not None:
            await self._stream.close()

    async def __aenter__(self) -> AsyncEventStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncClient:
    """berth for asyncio: the operations of `Client`, each a coroutine answering the same
    type (the same parameters, checked by tests/test_signatures.py). `AsyncClient(url,
    api_key=...)` or `berth.open_async(...)`; without a usable key, `InvalidApiKey` at once."""

    def __init__(
        self,
        url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retries: int = 4,
        transport: Any = None,
    ) -> None:
        from ._transport import AsyncHttpTransport

        if transport is None:
            transport = AsyncHttpTransport(*_http_settings("AsyncClient", url, api_key), timeout)
        self._transport = transport
        self._retries = retries

    async def _execute(self, call: Call[T]) -> T:
        return await _execute_async(self._transport.send, self._transport.busy_wait_s, self._retries, call)

    # sessions
    async def create_session(
        self,
        id: str | None = None,
        *,
        title: str | None = None,
        labels: Iterable[str] | None = None,
        user: str | None = None,
        project: str | None = None,
        policy: Mapping[str, Any] | None = None,
        origin: str | None = None,
        delegation_depth: int | None = None,
    ) -> m.Session:
        """Creates a session (`id`: one of your own, else a time-ordered one is made).
        `policy`: `{"activity_ttl_ms", "run_lease_ttl_ms", "concurrency"}`. Never resent
        automatically: see docs/reference/http.md."""
        return await self._execute(c.create_session(
            id, title=title, labels=labels, user=user, project=project, policy=policy, origin=origin,
            delegation_depth=delegation_depth,
        ))

    async def count_sessions(
        self,
        *,
        user: str | None = None,
        project: str | None = None,
        label: str | None = None,
        parent: str | None = None,
        active_since: int | None = None,
        active_before: int | None = None,
        include_blank: bool | None = None,
        q: str | None = None,
    ) -> m.SessionCounts:
        """Per status, how many sessions match (filters as `list_sessions`, without
        status and paging); counts stop at the server's cap (`more`)."""
        return await self._execute(c.count_sessions(
            user=user, project=project, label=label, parent=parent, active_since=active_since,
            active_before=active_before, include_blank=include_blank, q=q,
        ))

    async def get_session(self, session_id: str) -> m.Session:
        return await self._execute(c.get_session(session_id))

    async def list_sessions(
        self,
        *,
        status: c.SessionStatus | Iterable[c.SessionStatus] | None = None,
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
    ) -> m.SessionPage:
        """One page of sessions, newest activity first; `iter_sessions` follows cursors.
        Times are milliseconds since the Unix epoch. `q`: sessions whose id, title or a
        label holds this text, ignoring case (at most 256 characters)."""
        return await self._execute(c.list_sessions(
            status=status, label=label, user=user, project=project, parent=parent, active_since=active_since,
            active_before=active_before, include_blank=include_blank, q=q, cursor=cursor, limit=limit,
        ))

    async def update_session(
        self,
        session_id: str,
        *,
        title: str | None | c._Unset = c.UNSET,
        labels: Iterable[str] | None | c._Unset = c.UNSET,
        expected_revision: int | None = None,
    ) -> m.Session:
        """Sets `title` and/or `labels` (None clears a title; `UNSET` leaves it), with
        `expected_revision`."""
        return await self._execute(
            c.update_session(session_id, title=title, labels=labels, expected_revision=expected_revision)
        )

    async def close_session(
        self, session_id: str, *, policy: c.ClosePolicy | None = None, expected_revision: int | None = None
    ) -> m.Session:
        return await self._execute(c.close_session(session_id, policy=policy, expected_revision=expected_revision))

    async def fork_session(
        self,
        session_id: str,
        *,
        upto_seq: int | None = None,
        new_id: str | None = None,
        user: str | None = None,
        policy: Mapping[str, Any] | None = None,
        title: str | None = None,
        labels: Iterable[str] | None = None,
    ) -> m.Session:
        """A new session from the events before `upto_seq` (all by default) of
        `session_id`, whose header names its parent. `user`, `policy`, `title` and
        `labels` replace the parent's (another `user`: service and admin keys only);
        `upto_seq=0` copies nothing — an empty session a drop-in can adopt."""
        call = c.fork_session(
            session_id, upto_seq=upto_seq, new_id=new_id, user=user, policy=policy, title=title, labels=labels
        )
        return await self._execute(call)

    async def reopen_session(self, session_id: str) -> m.Session:
        return await self._execute(c.reopen_session(session_id))

    async def delete_session(self, session_id: str, *, expected_revision: int | None = None) -> None:
        return await self._execute(c.delete_session(session_id, expected_revision=expected_revision))

    # events
    async def append(
        self,
        session_id: str,
        events: Iterable[c.NewEvent],
        *,
        expected_seq: int | None = None,
        run: str | None = None,
        idempotency_key: str | None = None,
        memory: Iterable[Mapping[str, Any]] | None = None,
    ) -> m.AppendOutcome:
        """Appends a batch atomically and durably. Without `idempotency_key` a fresh one
        is made, so a resend after a lost answer can never store the batch twice.
        `memory`: scoped-memory writes (`{namespace, key, value, expected_revision?,
        ttl_ms?, bound_to?}`) applied atomically with the batch, before this returns."""
        call = c.append(
            session_id, events, expected_seq=expected_seq, run=run, idempotency_key=idempotency_key, memory=memory
        )
        return await self._execute(call)

    async def read(
        self, session_id: str, *, from_seq: int = 0, limit: int | None = None, types: Iterable[str] | None = None
    ) -> m.EventPage:
        """Events from `from_seq`. With `types`, only events of those types (exact names):
        read on from the page's `next_seq` until a page scans nothing (`next_seq` ==
        `from_seq`); a page may hold fewer than `limit` before that."""
        return await self._execute(c.read(session_id, from_seq=from_seq, limit=limit, types=types))

    async def read_before(
        self,
        session_id: str,
        before: int = c.SEQ_END,
        *,
        limit: int | None = None,
        types: Iterable[str] | None = None,
    ) -> m.EventPage:
        """The `limit` events just before seq `before` (default: the end), ascending. With
        `types`, the last `limit` of those types: read on before the page's `first_seq`
        until it is 0."""
        return await self._execute(c.read(session_id, before=before, limit=limit, types=types))

    async def read_at(self, session_id: str, seqs: Iterable[int]) -> m.EventPage:
        """The events at `seqs` (a point read by position), each once, ascending: at most
        1,000 distinct seqs; one at or past the end is `NotFound` naming it (`id`, and
        `body["actual"]`)."""
        return await self._execute(c.read_at(session_id, seqs))

    # runs
    async def attach(
        self,
        session_id: str,
        *,
        run_id: str | None = None,
        on_busy: c.OnBusy | None = None,
        expected_revision: int | None = None,
    ) -> m.Attachment:
        """Attaches a run (`run_id`: one of your own, else one is made)."""
        return await self._execute(c.attach(session_id, run_id=run_id, on_busy=on_busy, expected_revision=expected_revision))

    async def heartbeat(self, session_id: str, run_id: str) -> m.Run:
        return await self._execute(c.heartbeat(session_id, run_id))

    async def detach(
        self, session_id: str, run_id: str, *, outcome: str | None = None, expected_revision: int | None = None
    ) -> m.Session:
        """Detaches a run; `outcome` (`completed` by default, `failed`, …) goes to the audit log."""
        return await self._execute(c.detach(session_id, run_id, outcome=outcome, expected_revision=expected_revision))

    async def resume(
        self,
        session_id: str,
        *,
        run_id: str | None = None,
        on_busy: c.OnBusy | None = None,
        expected_revision: int | None = None,
    ) -> m.ResumeOutcome:
        """Attaches a run and closes the turns a crash left open (`repaired`)."""
        return await self._execute(c.resume(session_id, run_id=run_id, on_busy=on_busy, expected_revision=expected_revision))

    # export, import, admin
    async def export(self, session_id: str, *, format: c.ExportFormat = "jsonl") -> bytes:
        return await self._execute(c.export(session_id, format=format))

    async def import_sessions(self, data: bytes) -> m.Imported:
        return await self._execute(c.import_sessions(data))

    async def audit(self, *, from_seq: int | None = None, limit: int | None = None) -> list[m.AuditEntry]:
        return await self._execute(c.audit(from_seq=from_seq, limit=limit))

    async def audit_search(
        self,
        *,
        from_seq: int | None = None,
        limit: int | None = None,
        action: str | None = None,
        session: str | None = None,
        actor: str | None = None,
        since: int | None = None,
        before: int | None = None,
    ) -> m.AuditSearchPage:
        """Audit entries matching `action`, `session`, `actor`, `since`, `before` (admin);
        one bounded scan per call, continue with `from_seq=page.next_from`."""
        return await self._execute(c.audit_search(
            from_seq=from_seq, limit=limit, action=action, session=session, actor=actor, since=since, before=before
        ))

    async def verify_audit(self) -> m.AuditVerification:
        return await self._execute(c.verify_audit())

    async def set_retention(
        self,
        *,
        idle_ttl_ms: int | None = None,
        max_age_ms: int | None = None,
        delete_terminal_after_ms: int | None = None,
        memory_max_age_ms: int | None = None,
    ) -> None:
        """The tenant's retention policy (admin); a limit not given is none."""
        return await self._execute(c.set_retention(
            idle_ttl_ms=idle_ttl_ms, max_age_ms=max_age_ms, delete_terminal_after_ms=delete_terminal_after_ms,
            memory_max_age_ms=memory_max_age_ms,
        ))

    async def whoami(self) -> m.Principal:
        return await self._execute(c.whoami())

    # ----- scoped memory (docs/reference/memory.md) -----

    async def memory_put(
        self,
        namespace: str,
        key: str,
        value: Any,
        *,
        expected_revision: int | None = None,
        ttl_ms: int | None = None,
        bound_to: str | None = None,
    ) -> m.MemoryItem:
        """Creates or replaces an item; `expected_revision` (0: only if absent), `ttl_ms`,
        `bound_to` (a session id: deleted with it)."""
        return await self._execute(
            c.memory_put(namespace, key, value, expected_revision=expected_revision, ttl_ms=ttl_ms, bound_to=bound_to)
        )

    async def memory_get(self, namespace: str, key: str, *, refresh: bool | None = None) -> m.MemoryItem:
        return await self._execute(c.memory_get(namespace, key, refresh=refresh))

    async def memory_delete(self, namespace: str, key: str, *, expected_revision: int | None = None) -> m.MemoryItem:
        return await self._execute(c.memory_delete(namespace, key, expected_revision=expected_revision))

    async def memory_search(
        self,
        prefix: str,
        *,
        filter: Iterable[c.Condition] | Mapping[str, Any] | None = None,
        query: str | None = None,
        order: c.MemoryOrder | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> m.MemoryPage:
        """Items within `prefix`: `filter` (conditions `(field, op, value)`, ANDed, or a
        mapping `{field: value}` for equality), `query` (full text), `order`, `cursor`,
        `limit`."""
        return await self._execute(
            c.memory_search(prefix, filter=filter, query=query, order=order, cursor=cursor, limit=limit)
        )

    async def memory_namespaces(
        self, prefix: str, *, max_depth: int | None = None, cursor: str | None = None, limit: int | None = None
    ) -> m.NamespacePage:
        return await self._execute(c.memory_namespaces(prefix, max_depth=max_depth, cursor=cursor, limit=limit))

    async def memory_forget(self, prefix: str) -> m.ForgetReport:
        return await self._execute(c.memory_forget(prefix))

    async def memory_delete_many(self, items: Iterable[tuple[str, str]]) -> m.MemoryDeleted:
        """Deletes the items named as (namespace, key) (absent ones skipped) with one
        audit record."""
        return await self._execute(c.memory_delete_many(items))

    async def session_usage(self, session_id: str) -> m.SessionUsage:
        """The session's LLM calls — totals over its `model/call` events, and per provider
        and model — and its tool time, computed by the server from its log."""
        return await self._execute(c.session_usage(session_id))

    async def usage(self, *, since: int, before: int) -> m.Usage:
        """The caller's totals over event times in `[since, before)` (ms since the epoch):
        every session it may list whose activity overlaps the range (a user key: its own),
        each one's `model/call` and tool events read by the server."""
        return await self._execute(c.usage(since=since, before=before))

    async def memory_usage(self) -> m.MemoryUsage:
        return await self._execute(c.memory_usage())

    async def memory_set_quota(self, *, items: int | None = None, bytes: int | None = None) -> m.MemoryUsage:
        """The tenant's own memory quota (admin); a limit not given is the server's default."""
        return await self._execute(c.memory_set_quota(items=items, bytes=bytes))

    async def memory_export(self, prefix: str | None = None) -> bytes:
        return await self._execute(c.memory_export(prefix))

    async def memory_import(self, data: bytes) -> m.MemoryImported:
        return await self._execute(c.memory_import(data))

    # iterators, tails, lifetime
    async def iter_sessions(
        self,
        *,
        status: c.SessionStatus | Iterable[c.SessionStatus] | None = None,
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
    ) -> AsyncIterator[m.Session]:
        """Every session the filters match (as `list_sessions`), following `next_cursor`
        from `cursor`; `limit` is the size of each page."""
        while True:
            page = await self.list_sessions(
                status=status, label=label, user=user, project=project, parent=parent, active_since=active_since,
                active_before=active_before, include_blank=include_blank, q=q, cursor=cursor, limit=limit,
            )
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def iter_events(
        self, session_id: str, *, from_seq: int = 0, page: int = c.READ_PAGE_MAX
    ) -> AsyncIterator[m.Event]:
        """Every event from `from_seq` to the current end, page by page."""
        while True:
            events = await self.read(session_id, from_seq=from_seq, limit=page)
            for event in events.events:
                yield event
            if len(events.events) < page:
                return
            from_seq = events.next_seq

    async def tail(self, session_id: str, count: int) -> list[m.Event]:
        """The last `count` events, ascending, read backwards (never the whole log)."""
        collected: list[m.Event] = []
        before = c.SEQ_END
        while len(collected) < count:
            page = await self.read_before(session_id, before, limit=min(c.READ_PAGE_MAX, count - len(collected)))
            collected[:0] = page.events
            if page.first_seq == 0 or not page.events:
                break
            before = page.first_seq
        return collected

    def stream(
        self,
        session_id: str,
        *,
        from_seq: int = 0,
        max_events: int | None = None,
        idle_timeout_ms: int | None = None,
        reconnect_s: float = 30.0,
    ) -> AsyncEventStream:
        """A live tail from `from_seq` (SSE), resumed after a dropped connection for up to
        `reconnect_s` of failed reconnects; bounded by `max_events` / `idle_timeout_ms`."""
        return AsyncEventStream(self, _TailState(session_id, from_seq, max_events, idle_timeout_ms, reconnect_s))

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
