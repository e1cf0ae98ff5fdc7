"""`append_event`'s berth append (`_Appends`, mixed into `BerthSessionService`, and
`_AppendPlan`): the event with its invocation's turn boundaries and the memory
writes it carries, in one atomic append.

Stale writers: a `Session` remembers the log's next seq (`_storage_update_marker`);
`append_event` appends with `expected_seq`, and a writer that lost the race gets
`StaleSessionError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from google.adk.errors import StaleSessionError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions.session import Session

import berth
from berth import _calls as berth_calls

from ._records import _split, _state_writes, berth_events_for, index_namespace, session_berth_id
from ._runs import _Hold


class _Appends:
    """Appending, for `BerthSessionService` (its `_client`, `_lock`, `_holds`, `_cache`;
    `_hold`, `_held`, `_events_appended`)."""

    _client: berth.Client
    _lock: threading.Lock
    _holds: OrderedDict[str, _Hold]
    _cache: dict[str, tuple[int, dict[str, Any], int, int]]

    def _append(self, session: Session, event: Event) -> None:
        berth_id = session_berth_id(session.app_name, session.user_id, session.id)
        hold, _ = self._hold(berth_id)
        if hold is None:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        expected, cached = self._cached_copy(session, berth_id)
        if cached is None:
            try:
                index = self._client.memory_get(index_namespace(session.app_name), berth_id)
            except berth.NotFound:
                raise SessionNotFoundError(f"Session {session.id} not found.") from None
            cached = (expected if expected is not None else -1, dict(index.value.get("state") or {}),
                      index.revision, int(index.value.get("time_ms", 0)))
        plan = _AppendPlan(session, event, berth_id, hold, expected, cached)
        with self._refused(session, berth_id):
            try:
                outcome = self._client._execute(plan.call())
            except berth.OwnershipLost:
                # This object's run lapsed (a long pause): attach again and retry once. If
                # the new attach repaired anything, the copy is stale (SeqConflict below).
                with self._lock:
                    self._holds.pop(berth_id, None)
                hold, _ = self._hold(berth_id)
                if hold is None:
                    raise SessionNotFoundError(f"Session {session.id} not found.") from None
                plan.hold = hold
                outcome = self._client._execute(plan.call())
        self._appended(plan, outcome)

    async def _append_on_loop(self, session: Session, event: Event) -> None:
        """`_append` when this object holds the session and its cached copy is the
        caller's (the usual case: one request, submitted from the loop); otherwise, or
        after a lapsed run, `_append` on a worker thread."""
        berth_id = session_berth_id(session.app_name, session.user_id, session.id)
        hold = self._held(berth_id)
        expected, cached = self._cached_copy(session, berth_id)
        if hold is None or cached is None:
            await asyncio.to_thread(self._append, session, event)
            return
        plan = _AppendPlan(session, event, berth_id, hold, expected, cached)
        with self._refused(session, berth_id):
            try:
                outcome = await self._client._aexecute(plan.call())
            except berth.OwnershipLost:
                with self._lock:  # `_append` attaches again
                    if self._holds.get(berth_id) is hold:
                        self._holds.pop(berth_id, None)
                await asyncio.to_thread(self._append, session, event)
                return
        self._appended(plan, outcome)

    def _cached_copy(self, session: Session, berth_id: str) -> tuple[int | None, tuple[int, dict[str, Any], int, int] | None]:
        """The seq `session` was loaded at (its storage marker), and what this object
        cached of the session when that is where it last wrote or read it (else None)."""
        marker = session._storage_update_marker
        expected = int(marker) if marker is not None else None
        cached = self._cache.get(berth_id)
        if cached is None or expected is None or cached[0] != expected:
            return expected, None
        return expected, cached

    @contextlib.contextmanager
    def _refused(self, session: Session, berth_id: str) -> Iterator[None]:
        """An append's refusals as ADK names them: a copy older than the log (or the
        index entry) is stale (and this object's cached copy is dropped); a deleted
        session is not found."""
        try:
            yield
        except (berth.SeqConflict, berth.RevisionConflict):
            self._cache.pop(berth_id, None)
            raise StaleSessionError(
                f"The session {session.id} has been modified in storage since it was loaded: "
                "get it again (get_session) before appending."
            ) from None
        except berth.NotFound:
            raise SessionNotFoundError(f"Session {session.id} not found.") from None

    def _appended(self, plan: _AppendPlan, outcome: berth.AppendOutcome) -> None:
        hold = plan.hold
        if plan.started:
            hold.turn, hold.invocation = plan.turn, plan.event.invocation_id
        if plan.ending:
            hold.turn, hold.invocation = None, None
        self._cache[plan.berth_id] = (outcome.next_seq, plan.new_state, plan.revision + 1, plan.time_ms)
        self._events_appended(plan, outcome)
        plan.session._storage_update_marker = str(outcome.next_seq)


class _AppendPlan:
    """One `append_event`'s berth append, worked out from the copy this object holds:
    the events (with the invocation's turn boundaries), the memory writes it carries
    (the session's index entry, `app:` and `user:` state), and what to remember after."""

    def __init__(self, session: Session, event: Event, berth_id: str, hold: _Hold, expected: int | None,
                 cached: tuple[int, dict[str, Any], int, int]) -> None:
        app_name, user_id = session.app_name, session.user_id
        self.session, self.event, self.berth_id, self.hold, self.expected = session, event, berth_id, hold, expected
        _, session_state, self.revision, last_ms = cached
        delta = dict(event.actions.state_delta) if event.actions and event.actions.state_delta else {}
        app_delta, user_delta, session_delta = _split(delta)
        self.new_state = {**session_state, **session_delta}
        self.time_ms = time_ms = max(last_ms, int(math.floor(event.timestamp * 1000)), 0)
        index = {"app": app_name, "user": user_id, "id": session.id, "state": self.new_state,
                 "last_update_time": event.timestamp, "time_ms": time_ms}
        self.writes = [{"namespace": index_namespace(app_name), "key": berth_id, "value": index,
                        "expected_revision": self.revision, "bound_to": berth_id}]
        self.writes += _state_writes(app_name, user_id, app_delta, user_delta)
        events = berth_events_for(event, time_ms)
        # Each invocation is one berth turn (repair closes a turn a crash left open).
        self.started = False
        if event.invocation_id and hold.invocation != event.invocation_id:
            if hold.turn is not None:
                events.insert(0, {"type": "turn/end", "data": {"turn": hold.turn, "reason": "completed"},
                                  "time": time_ms})
            turn = expected if expected is not None else int(time.time() * 1000)
            events.insert(1 if hold.turn is not None else 0,
                          {"type": "turn/start", "data": {"turn": turn, "invocation_id": event.invocation_id},
                           "time": time_ms})
            self.started = True
        else:
            turn = hold.turn
        self.turn = turn
        self.ending = turn is not None and event.author != "user" and event.is_final_response()
        if self.ending:
            events.append({"type": "turn/end", "data": {"turn": turn, "reason": "completed"}, "time": time_ms})
        self.events = events
        #: Where the event that holds the ADK event is among `events` (after the turn markers).
        self.adk_index = next(index for index, stored in enumerate(events) if "adk" in stored["data"])
        #: The idempotency key of the latest `call`.
        self.key = ""

    def call(self) -> berth_calls.Call[berth.AppendOutcome]:
        """The append, by the hold's current run (a new key each time: a retry after a
        lapsed run is another batch)."""
        self.key = uuid.uuid4().hex
        return berth_calls.append(self.berth_id, self.events, expected_seq=self.expected, run=self.hold.run_id,
                                  idempotency_key=self.key, memory=self.writes)
