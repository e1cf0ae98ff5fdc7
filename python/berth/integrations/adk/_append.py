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
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, Callable, Optional

from google.adk.errors import StaleSessionError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions.session import Session

import berth
from berth import _calls as berth_calls

from ._mapping import _event_json, berth_events_for, started_calls
from ._plugin import Ended, _PendingCalls
from ._records import _split, _state_writes, index_namespace, session_berth_id
from ._runs import _Hold
from ._turns import TurnState, markers, needs_number, restored, stored

#: What a service object remembers of a session it last wrote or read (`_cache`): the
#: log's next seq, the session's state, its index item's revision, the last event time
#: (ms), the next turn number (None: an index item written before turns were counted)
#: and the latest turn, closed (`_turns.restored`; None: not kept).
_Cached = tuple[int, dict[str, Any], int, int, Optional[int], Optional[TurnState]]


def _cached_from(next_seq: int, revision: int, value: dict[str, Any]) -> _Cached:
    """What to remember of a session read at `next_seq`, its index item's `value` at
    `revision`."""
    turns = value.get("turns")
    return (next_seq, dict(value.get("state") or {}), revision, int(value.get("time_ms", 0)),
            turns if isinstance(turns, int) else None, restored(value.get("turn")))


def _no_read() -> int:
    raise AssertionError("the next turn number is known here (`_append_on_loop` checked)")


class _Appends:
    """Appending, for `BerthSessionService` (its `_client`, `_lock`, `_holds`, `_cache`;
    `_hold`, `_held`, `_events_appended`)."""

    _client: berth.Client
    _lock: threading.Lock
    _holds: OrderedDict[str, _Hold]
    _cache: dict[str, _Cached]
    _model_calls: _PendingCalls

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
            cached = _cached_from(expected if expected is not None else -1, index.revision, index.value)
        plan = _AppendPlan(session, event, berth_id, hold, expected, cached, lambda: self._next_turn(berth_id),
                           self._model_calls.waiting(berth_id))
        with self._refused(session, berth_id):
            try:
                with hold.writing():
                    outcome = self._client._execute(plan.call())
            except berth.OwnershipLost:
                # This object's run lapsed (a long pause) or `close()` released it: attach
                # again and retry once. If the new attach repaired anything, the copy is
                # stale (SeqConflict below).
                with self._lock:
                    if self._holds.get(berth_id) is hold:
                        self._holds.pop(berth_id, None)
                hold, _ = self._hold(berth_id)
                if hold is None:
                    raise SessionNotFoundError(f"Session {session.id} not found.") from None
                plan.hold = hold
                with hold.writing():
                    outcome = self._client._execute(plan.call())
        self._appended(plan, outcome)

    async def _append_on_loop(self, session: Session, event: Event) -> None:
        """`_append` when this object holds the session and its cached copy is the
        caller's (the usual case: one request, submitted from the loop); otherwise, or
        after a lapsed run, `_append` on a worker thread."""
        berth_id = session_berth_id(session.app_name, session.user_id, session.id)
        hold = self._held(berth_id)
        expected, cached = self._cached_copy(session, berth_id)
        if hold is None or cached is None or (cached[4] is None and needs_number(_from(hold, cached), event)):
            # (A new turn in a session written before turns were counted reads the log.)
            await asyncio.to_thread(self._append, session, event)
            return
        plan = _AppendPlan(session, event, berth_id, hold, expected, cached, _no_read,
                           self._model_calls.waiting(berth_id))
        with self._refused(session, berth_id):
            try:
                with hold.writing():
                    outcome = await self._client._aexecute(plan.call())
            except berth.OwnershipLost:
                with self._lock:  # `_append` attaches again
                    if self._holds.get(berth_id) is hold:
                        self._holds.pop(berth_id, None)
                await asyncio.to_thread(self._append, session, event)
                return
        self._appended(plan, outcome)

    def _next_turn(self, berth_id: str) -> int:
        """The next turn number of a session whose index item does not count turns (written
        before it did): one after the number of the log's last `turn/start` (the old
        layout numbered turns by seq), else 0."""
        before = berth.SEQ_END
        while before > 0:
            page = self._client.read_before(berth_id, before, limit=1, types=["turn/start"])
            if page.events:
                number = page.events[-1].data.get("turn") if isinstance(page.events[-1].data, dict) else None
                return number + 1 if isinstance(number, int) and number >= 0 else 0
            if page.first_seq >= before:
                break
            before = page.first_seq
        return 0

    def _cached_copy(self, session: Session, berth_id: str) -> tuple[int | None, _Cached | None]:
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
        hold.appended(outcome)
        if hold.turns.invocation != plan.turns.invocation:
            hold.started = set()
        hold.turns = plan.turns
        hold.started.update(started_calls(plan.events))
        self._cache[plan.berth_id] = (outcome.next_seq, plan.new_state, plan.revision + 1, plan.time_ms,
                                      plan.next_turn, plan.turns._replace(open=False, step=None))
        self._model_calls.carried(plan.berth_id, plan.calls)
        self._events_appended(plan, outcome)
        plan.session._storage_update_marker = str(outcome.next_seq)


def _from(hold: _Hold, cached: _Cached) -> TurnState:
    """Where an append starts in the session's turns: where this object's run is, or,
    when the run has written no turn yet (a new service object, a run attached again),
    the latest turn as the session's index item keeps it (closed: a run that left it
    open is gone, and its resume's repair ended it)."""
    if hold.turns.invocation is None and cached[5] is not None:
        return cached[5]
    return hold.turns


class _AppendPlan:
    """One `append_event`'s berth append, worked out from the copy this object holds:
    the events (the ADK event as vocabulary, `_mapping`, inside its turn and step
    markers, `_turns`, after the `model/call` events of the model calls that ended
    since the session's last append, `calls`), the memory writes it carries (the
    session's index entry, with the next turn number; `app:` and `user:` state), and
    what to remember after.

    A call of the event's invocation goes just before the event's own events (after the
    step it starts: with ADK's Runner, the event is that call's response); a call of
    another invocation (one that failed, so no event of it followed) before every marker,
    in the turn it ran in."""

    def __init__(self, session: Session, event: Event, berth_id: str, hold: _Hold, expected: int | None,
                 cached: _Cached, next_turn: Callable[[], int], calls: list[Ended]) -> None:
        app_name, user_id = session.app_name, session.user_id
        self.session, self.event, self.berth_id, self.hold, self.expected = session, event, berth_id, hold, expected
        _, session_state, self.revision, last_ms, self.next_turn, _ = cached
        delta = dict(event.actions.state_delta) if event.actions and event.actions.state_delta else {}
        app_delta, user_delta, session_delta = _split(delta)
        self.new_state = {**session_state, **session_delta}
        self.time_ms = time_ms = max(last_ms, int(math.floor(event.timestamp * 1000)), 0)
        adk = _event_json(event)
        events = berth_events_for(event, time_ms, adk, hold.started)
        before, after, self.turns = markers(_from(hold, cached), event, adk, time_ms, self._number(next_turn))
        #: The model calls this append carries.
        self.calls = calls
        if calls:
            own = [call.event for call in calls if call.invocation_id == event.invocation_id]
            before = [call.event for call in calls if call.invocation_id != event.invocation_id] + before + own
        #: Where the event that holds the ADK event is among `events` (after the markers).
        self.adk_index = len(before)
        self.events = before + events + after if before or after else events
        index = {"app": app_name, "user": user_id, "id": session.id, "state": self.new_state,
                 "last_update_time": event.timestamp, "time_ms": time_ms}
        if self.next_turn is not None:
            index["turns"] = self.next_turn
        turn = stored(self.turns)
        if turn is not None:
            index["turn"] = turn
        self.writes = [{"namespace": index_namespace(app_name), "key": berth_id, "value": index,
                        "expected_revision": self.revision, "bound_to": berth_id}]
        self.writes += _state_writes(app_name, user_id, app_delta, user_delta)
        #: The idempotency key of the latest `call`.
        self.key = ""

    def _number(self, next_turn: Callable[[], int]) -> Callable[[], int]:
        """The session's next turn number, taken (`next_turn()` finds it when the index
        item does not count turns)."""

        def take() -> int:
            number = self.next_turn if self.next_turn is not None else next_turn()
            self.next_turn = number + 1
            return number

        return take

    def call(self) -> berth_calls.Call[berth.AppendOutcome]:
        """The append, by the hold's current run (a new key each time: a retry after a
        lapsed run is another batch)."""
        self.key = uuid.uuid4().hex
        return berth_calls.append(self.berth_id, self.events, expected_seq=self.expected, run=self.hold.run_id,
                                  idempotency_key=self.key, memory=self.writes)
