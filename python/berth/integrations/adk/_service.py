"""`BerthSessionService`: ADK's `BaseSessionService` on berth, its interface and
lifecycle, its sessions' creation, reads and deletion (appends, the listing, the
re-delivery check and the kept events are its mixins')."""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
from google.adk.sessions.session import Session
from google.adk.sessions.state import State

import berth
from berth import _calls as berth_calls

from .._runpool import POOL, chain_after_resume
from . import _pages
from ._append import _Appends, _Cached, _cached_from
from ._kept import EVENTS_CACHE_BYTES_DEFAULT, _Events, _KeptEvents
from ._listing import _Listing
from ._plugin import ModelCallRecorder, _PendingCalls
from ._pages import _pages_backwards, _read_page, _StoredEvent, _StoredPage
from ._present import _Call, _call_of, _calls_index, _repair_event, _take_newest
from ._records import (
    ACTIVITY_TTL_MS_FOREVER,
    CREATE_TYPE,
    LABEL,
    RUN_LEASE_TTL_MS_DEFAULT,
    _split,
    _state_writes,
    app_state_namespace,
    decode_key,
    encode_id,
    index_namespace,
    session_berth_id,
    user_state_namespace,
)
from ._recorder import _Recording
from ._redelivery import _Delivered, _Redelivery
from ._runs import KIND, _beat, _CLOSED, _Closed, _Hold, _release, _Release


#: Reads in flight ahead of their decoding, across the service's concurrent callers.
_PREFETCH_THREADS = 4


class BerthSessionService(_Appends, _KeptEvents, _Listing, _Recording, _Redelivery, BaseSessionService):
    """ADK's `BaseSessionService` on berth. See the package's docstring.

    - `client`: a `berth.Client` with a `service` key (HTTP or embedded);
    - `run_lease_ttl_ms`: the run lease of this object's runs; a crashed process's open
      turn is repaired by the next object that touches the session after it lapsed;
    - `max_holds`: how many sessions keep a run attached at once (the least recently
      used is detached beyond that);
    - `events_cache_bytes`: how many bytes of the sessions' events this object keeps,
      over all of them, to answer `get_session` from them after checking the log's end
      (`_Events`; the least recently used session's are dropped beyond that; 0: none);
    - `hand_on`: `close()` hands each run whose turn is closed to the next service object
      of this process on the same session and client (a service object per request)
      instead of detaching it, while nothing else wrote the session since the run's
      resume (`_runs`); an idle run is detached within a third of its lease, when the
      client closes, and at exit. False: `close()` detaches every run at once.
    """

    def __init__(
        self,
        client: berth.Client,
        *,
        run_lease_ttl_ms: int = RUN_LEASE_TTL_MS_DEFAULT,
        activity_ttl_ms: int = ACTIVITY_TTL_MS_FOREVER,
        runs_max: int = 64,
        max_holds: int = 1024,
        events_cache_bytes: int = EVENTS_CACHE_BYTES_DEFAULT,
        hand_on: bool = True,
    ) -> None:
        if isinstance(client, berth.AsyncClient):
            raise TypeError("BerthSessionService takes a berth.Client (its calls run on worker threads)")
        self._client = client
        self._policy = {
            "concurrency": {"mode": "parallel", "runs_max": runs_max},
            "activity_ttl_ms": activity_ttl_ms,
            "run_lease_ttl_ms": run_lease_ttl_ms,
        }
        self._max_holds = max_holds
        self._holds: OrderedDict[str, _Hold] = OrderedDict()
        self._attaching: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        # Serializes `before_tool_recorder`'s own appends (`_Recording`).
        self._recording = threading.Lock()
        self._stop = threading.Event()
        heartbeat_s = max(0.05, run_lease_ttl_ms / 3000)
        self._release_how = _Release(heartbeat_s, hand_on)
        self._heartbeat = threading.Thread(
            target=_beat, args=(client, self._holds, self._lock, self._stop, heartbeat_s),
            name="berth-adk-heartbeat", daemon=True,
        )
        self._heartbeat.start()
        # berth id -> what this object last wrote or read of the session (`_Cached`), so an
        # append needs no read of the index.
        self._cache: dict[str, _Cached] = {}
        # berth id -> the session's events as this object last wrote or read them (under
        # `_lock`), least recently used first; `_events_size` is their bytes in all.
        self._events: OrderedDict[str, _Events] = OrderedDict()
        self._events_size = 0
        self._events_budget = max(0, events_cache_bytes)
        # The model calls `model_calls()`'s plugin saw, waiting for their session's next append.
        self._model_calls = _PendingCalls()
        self._model_call_recorder = ModelCallRecorder(self._model_calls)
        # id(session) -> the ids of its events, for the re-delivery check (`_Delivered`).
        self._delivered: dict[int, _Delivered] = {}
        # Fetches the next page of a read while the caller's thread decodes the current one.
        self._prefetch = ThreadPoolExecutor(max_workers=_PREFETCH_THREADS, thread_name_prefix="berth-adk-read")
        self._finalizer = weakref.finalize(self, _release, client, self._holds, self._lock, self._stop,
                                           self._prefetch, self._release_how)

    # -- the interface ---------------------------------------------------------------

    async def create_session(self, *, app_name: str, user_id: str, state: Optional[dict[str, Any]] = None,
                             session_id: Optional[str] = None) -> Session:
        return await asyncio.to_thread(self._create, app_name, user_id, state, session_id)

    async def continue_session(self, source_session_id: str, *, app_name: str, user_id: str, author: str,
                               session_id: Optional[str] = None) -> Session:
        """Continues berth session `source_session_id` — a conversation any drop-in wrote
        (its berth id, as `berth sessions ls` lists it) — as a new ADK session: forks the
        source at 0 into the new session's berth session (its header names the source;
        this service's labels and policy, the ADK user as owner), creates the session
        there and appends the source's conversation as ADK events, the assistant's
        authored by `author` (`berth.history.adk.events_of`). The source is only read.
        A service key is needed when the ADK user is not the key's own user."""
        from ...history import conversation
        from ...history.adk import events_of

        events = events_of(await asyncio.to_thread(conversation, self._client, source_session_id), author=author)
        session_id = (session_id.strip() if session_id else None) or str(uuid.uuid4())
        await asyncio.to_thread(self._fork, source_session_id, app_name, user_id, session_id)
        session = await self.create_session(app_name=app_name, user_id=user_id, session_id=session_id)
        for event in events:
            await self.append_event(session, event)
        return session

    async def get_session(self, *, app_name: str, user_id: str, session_id: str,
                          config: Optional[GetSessionConfig] = None) -> Optional[Session]:
        return await asyncio.to_thread(self._get, app_name, user_id, session_id, config)

    async def list_sessions(self, *, app_name: str, user_id: Optional[str] = None) -> ListSessionsResponse:
        return await asyncio.to_thread(self._list, app_name, user_id)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        await asyncio.to_thread(self._delete, app_name, user_id, session_id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await asyncio.to_thread(self._scope_state, user_state_namespace(app_name, user_id))

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        # Idempotent for an equal re-delivery, as InMemorySessionService is.
        if self._delivered_before(session, event):
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        await self._append_on_loop(session, event)
        self._commit_event_to_session(session, event)
        session.last_update_time = event.timestamp
        return event

    def model_calls(self) -> ModelCallRecorder:
        """The ADK plugin that records each model call of a `Runner` on this service as a
        `model/call` event in its session, carried by the append of the session's next
        event (no write of its own): `App(..., plugins=[service.model_calls()])`, first
        among the app's plugins. One plugin per service object."""
        return self._model_call_recorder

    def close(self) -> _Closed:
        """Releases this object's runs (idempotent), at once — each handed on to the next
        service object of the process on the same session and client, or detached (see
        `hand_on`) — and returns an awaitable that is already done: `service.close()` and
        ADK's `await service.close()` (as for `DatabaseSessionService`) both work. On a
        running loop, `await service.aclose()` (or `async with`) releases them on a
        worker thread instead."""
        self._release_how.hand_on = self._release_how.may_hand_on
        self._finalizer()
        return _CLOSED

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> BerthSessionService:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> BerthSessionService:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- internals (worker threads) --------------------------------------------------

    def _hold(self, berth_id: str) -> tuple[_Hold | None, list[berth.Event]]:
        """This object's run on the session (attached by `resume` on first touch, which
        repairs turns left open by dead runs); None when the session does not exist."""
        hold = self._held(berth_id)
        if hold is not None:
            return hold, []
        with self._lock:
            attaching = self._attaching.setdefault(berth_id, threading.Lock())
        with attaching:  # one attach per session and object, however many callers
            with self._lock:
                hold = self._holds.get(berth_id)
                if hold is not None and hold.lost is None:
                    return hold, []
            try:
                return self._attach(berth_id)
            finally:
                with self._lock:
                    self._attaching.pop(berth_id, None)

    def _held(self, berth_id: str) -> _Hold | None:
        """This object's run on the session if it holds one now (no I/O): the most
        recently used of the holds kept."""
        with self._lock:
            hold = self._holds.get(berth_id)
            if hold is None or hold.lost is not None:
                return None
            self._holds.move_to_end(berth_id)
            return hold

    def _attach(self, berth_id: str) -> tuple[_Hold | None, list[berth.Event]]:
        """A run on the session: an idle one a closed object of this process handed on
        (`_take_idle`), else `resume`'s (its repairs returned)."""
        hold = self._take_idle(berth_id) if self._release_how.may_hand_on else None
        repaired: list[berth.Event] = []
        if hold is None:
            started = time.monotonic()
            try:
                outcome = self._resume(berth_id)
            except berth.NotFound:
                return None, []
            hold = _Hold(outcome.attachment.run_id, started)
            if self._release_how.may_hand_on:
                # May be handed on at `close()` if no other run is attached and nothing
                # changed since the resume (`_runpool`).
                hold.chain = chain_after_resume(self._client, berth_id, outcome)
            repaired = list(outcome.repaired)
        evicted: list[tuple[str, _Hold]] = []
        with self._lock:
            self._holds[berth_id] = hold
            while len(self._holds) > self._max_holds:
                evicted.append(self._holds.popitem(last=False))
        for old_id, old in evicted:
            try:
                self._client.detach(old_id, old.run_id, outcome="completed")
            except (berth.BerthError, OSError):
                pass
        if repaired:
            self._cache.pop(berth_id, None)
            self._events_drop(berth_id)
        return hold, repaired

    def _take_idle(self, berth_id: str) -> _Hold | None:
        """The run a closed service object of this process handed on, when the record lists
        no other run and the log ends where that run's last append ended (`_runpool`);
        None (and the entry detached) otherwise, or when there is none."""
        if not POOL.holds(KIND, self._client, berth_id):
            return None
        try:
            session = self._client.get_session(berth_id)
        except berth.NotFound:
            POOL.drop(KIND, self._client, berth_id)
            return None

        def end() -> int:
            return _read_page(self._client, berth_id, before=berth.SEQ_END, limit=1).next_seq

        idle = POOL.take(KIND, self._client, berth_id, session, end)
        return None if idle is None else _Hold(idle.run_id, idle.lease_from, idle.chain)

    def _resume(self, berth_id: str) -> berth.ResumeOutcome:
        """`resume`, waiting out another process's write handle on an embedded store (a
        resume that found the log busy detached its run again, so it is safe to repeat).
        A `Busy` from the concurrency policy (all `runs_max` runs taken) is raised."""
        wait_s = getattr(getattr(self._client, "_transport", None), "busy_wait_s", 10.0)
        deadline = time.monotonic() + wait_s
        delay = 0.02
        while True:
            try:
                return self._client.resume(berth_id, on_busy="reject")
            except berth.WriterBusy:
                # Not a policy's `Busy` (all `runs_max` runs taken): waiting cures this one.
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay * (0.5 + random.random()))
                delay = min(0.5, delay * 2)

    def _header(self, app_name: str, user_id: str, session_id: str) -> dict[str, Any]:
        """The title, labels, owner and policy of session `session_id`'s berth session."""
        title = f"{app_name}/{user_id}/{session_id}"
        if len(title.encode()) > 512:
            title = title.encode()[:500].decode("utf-8", "ignore") + "…"
        return {"title": title, "labels": [LABEL], "user": encode_id(user_id), "policy": self._policy}

    def _fork(self, source_session_id: str, app_name: str, user_id: str, session_id: str) -> None:
        self._client.fork_session(source_session_id, upto_seq=0, new_id=session_berth_id(app_name, user_id, session_id),
                                  **self._header(app_name, user_id, session_id))

    def _create(self, app_name: str, user_id: str, state: dict[str, Any] | None, session_id: str | None) -> Session:
        session_id = session_id.strip() if session_id else None
        session_id = session_id or str(uuid.uuid4())
        berth_id = session_berth_id(app_name, user_id, session_id)
        try:
            self._client.create_session(berth_id, **self._header(app_name, user_id, session_id))
        except berth.AlreadyExists:
            existing = self._client.get_session(berth_id)
            if existing.event_count > 0:
                raise AlreadyExistsError(f"Session with id {session_id} already exists.") from None
            # An empty leftover of a create that crashed before its first append: adopt it.
        hold, _ = self._hold(berth_id)
        assert hold is not None
        app_delta, user_delta, session_state = _split(state or {})
        now = time.time()
        now_ms = int(now * 1000)
        index = {"app": app_name, "user": user_id, "id": session_id, "state": session_state,
                 "last_update_time": now, "time_ms": 0, "turns": 0}
        writes = [{"namespace": index_namespace(app_name), "key": berth_id, "value": index,
                   "expected_revision": 0, "bound_to": berth_id}]
        writes += _state_writes(app_name, user_id, app_delta, user_delta)
        event = {"type": CREATE_TYPE, "data": {"app": app_name, "user": user_id, "id": session_id,
                                              "state": session_state, "time": now},
                 "ignorable": True, "time": now_ms}
        try:
            with hold.writing() as run_id:
                outcome = self._client.append(berth_id, [event], expected_seq=0, run=run_id, memory=writes)
        except (berth.SeqConflict, berth.RevisionConflict):
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from None
        hold.appended(outcome)
        # Event times start from the first ADK event (kept non-decreasing from there).
        self._cache[berth_id] = (outcome.next_seq, dict(session_state), 1, 0, 0, None)
        self._events_keep(berth_id, _Events(outcome.next_seq))
        session = Session(app_name=app_name, user_id=user_id, id=session_id, state=dict(session_state),
                          last_update_time=now)
        session._storage_update_marker = str(outcome.next_seq)
        self._merge(session, app_name, user_id)
        return session

    def _get(self, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None) -> Session | None:
        session_id = session_id.strip() if session_id else session_id
        berth_id = session_berth_id(app_name, user_id, session_id)
        hold, _ = self._hold(berth_id)
        if hold is None:
            return None
        try:
            index = self._client.memory_get(index_namespace(app_name), berth_id)
        except berth.NotFound:
            return None  # an empty leftover of a crashed create
        limit = config.num_recent_events if config is not None else None
        after = config.after_timestamp if config is not None else None
        events, next_seq = self._tail(berth_id, limit, after)
        value = index.value
        state = dict(value.get("state") or {})
        self._cache[berth_id] = _cached_from(next_seq, index.revision, value)
        session = Session(app_name=app_name, user_id=user_id, id=session_id, state=state, events=events,
                          last_update_time=float(value.get("last_update_time", 0.0)))
        session._storage_update_marker = str(next_seq)
        self._merge(session, app_name, user_id)
        return session

    def _tail(self, berth_id: str, limit: int | None, after: float | None) -> tuple[list[Event], int]:
        """The ADK events InMemorySessionService's filters keep, read backwards from the
        end: the last `limit`, then those after the last one older than `after`."""
        if limit == 0:
            page = _read_page(self._client, berth_id, before=berth.SEQ_END, limit=1)
            return [], page.next_seq
        kept = self._kept_tail(berth_id, limit, after)
        if kept is not None:
            return kept
        chosen: list[_StoredEvent] = []
        read: list[tuple[_StoredPage, bytes]] = []
        page_size = _pages._PAGE if limit is None else min(_pages._PAGE, 2 * limit + 8)
        with berth_calls.collector_paused():
            pages = _pages_backwards(self._client, berth_id, page_size, self._prefetch)
            for page, body in pages:
                read.append((page, body))
                if _take_newest(page.events, chosen, limit, after):
                    pages.close()
                    break
            chosen.reverse()
            out = self._present(berth_id, chosen, [page for page, _ in read])
            if limit is None and after is None:  # the whole log was read
                self._keep_read(berth_id, read, chosen, out)
            return out, read[0][0].next_seq

    def _call_reader(self, berth_id: str) -> Callable[[Any, Any], _Call | None]:
        """Finds a repaired call that is not among the pages read: its `tool/call` at its
        seq, else (it has no ADK event) the `assistant/message` just before it that asked
        for it (the same append's)."""

        def reader(call_id: Any, seq: Any) -> _Call | None:
            if not isinstance(seq, int) or seq < 0:
                return None
            found = _read_page(self._client, berth_id, from_seq=seq, limit=1).events
            call = _call_of(found[0], call_id) if found else None
            if call is not None and (call.invocation or found[0].data.get("adk") is not None):  # type: ignore[union-attr]
                return call
            asked = _read_page(self._client, berth_id, before=seq, limit=1, types=["assistant/message"]).events
            return (_call_of(asked[0], call_id) if asked else None) or call

        return reader

    def _present(self, berth_id: str, chosen: list[_StoredEvent], read: list[_StoredPage]) -> list[Event]:
        """The ADK events of `chosen`: each stored one as it was decoded, each repair as
        `_repair_event` (finding its call among the pages read, else by its seq)."""
        out: list[Event] = []
        calls: dict[Any, _Call] | None = None
        for event in chosen:
            adk_event = event.data.get("adk")  # type: ignore[union-attr]  (`_take_newest` chose it)
            if adk_event is None:
                calls = _calls_index(read) if calls is None else calls
                adk_event = _repair_event(event, calls, self._call_reader(berth_id))
            out.append(adk_event)
        return out

    def _merge(self, session: Session, app_name: str, user_id: str) -> None:
        for key, value in self._scope_state(app_state_namespace(app_name)).items():
            session.state[State.APP_PREFIX + key] = value
        for key, value in self._scope_state(user_state_namespace(app_name, user_id)).items():
            session.state[State.USER_PREFIX + key] = value

    def _scope_state(self, namespace: str) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for item in self._search(namespace):
            if item.namespace == namespace:
                state[decode_key(item.key)] = item.value
        return state

    def _search(self, prefix: str, **options: Any) -> list[berth.MemoryItem]:
        items: list[berth.MemoryItem] = []
        cursor = None
        while True:
            page = self._client.memory_search(prefix, cursor=cursor, limit=_pages._PAGE, **options)
            items.extend(page.items)
            if not page.next_cursor:
                return items
            cursor = page.next_cursor

    def _delete(self, app_name: str, user_id: str, session_id: str) -> None:
        session_id = session_id.strip() if session_id else session_id
        berth_id = session_berth_id(app_name, user_id, session_id)
        with self._lock:
            hold = self._holds.pop(berth_id, None)
        if hold is not None:
            hold.release()  # a write in flight on it is refused: the session is going
        POOL.drop(KIND, self._client, berth_id)
        self._cache.pop(berth_id, None)
        self._events_drop(berth_id)
        try:
            self._client.delete_session(berth_id)
        except berth.NotFound:
            pass
