"""`append_event`'s re-delivery check (`_Redelivery`, mixed into `BerthSessionService`):
an event equal to one the `Session` holds already is not appended again, as
`InMemorySessionService` does, without comparing every event of a long session."""

from __future__ import annotations

import functools
import weakref
from typing import Callable

from google.adk.events.event import Event
from google.adk.sessions.session import Session


class _Delivered:
    """The ids of one `Session` object's events, indexed as its `events` list grew, for
    `append_event`'s re-delivery check. It speaks for the list only while that list is
    the one it indexed, no shorter, with the same event object where indexing stopped:
    ADK only ever appends to `session.events`. (An event swapped into the middle of the
    list by hand, under an id not otherwise there, is not seen: then an equal event is
    appended again rather than taken as delivered.) An id found is then checked the way
    ADK checks, field by field, against every event with it."""

    __slots__ = ("count", "events", "ids", "last", "session")

    def __init__(self, session: Session, events: list[Event], forget: Callable[[], object]) -> None:
        # Dropped with the session object (the callback forgets this entry).
        self.session = weakref.ref(session, lambda _: forget())
        self.events = events
        self.ids: set[str] = set()
        self.count = 0
        self.last: Event | None = None

    def follows(self, session: Session, events: list[Event]) -> bool:
        return (self.session() is session and self.events is events and len(events) >= self.count
                and (self.count == 0 or events[self.count - 1] is self.last))

    def catch_up(self, events: list[Event]) -> None:
        if len(events) > self.count:
            self.ids.update(known.id for known in events[self.count:])
            self.count = len(events)
            self.last = events[-1]


class _Redelivery:
    """The check, for `BerthSessionService` (its `_delivered`)."""

    _delivered: dict[int, _Delivered]

    def _delivered_before(self, session: Session, event: Event) -> bool:
        """Does `session.events` hold an event equal to `event` (ADK's check: an equal id,
        then equal in every field)? The ids are indexed per `Session` object and only the
        events added since the last call are looked at, so a long session's appends do
        not each compare every event; the index is built again whenever the list is not
        the one it saw grow (replaced, shortened, or its last indexed event swapped)."""
        events = session.events
        delivered = self._delivered_index(session, events)
        if delivered is not None:
            delivered.catch_up(events)
            if event.id not in delivered.ids:
                return False
        return any(known == event for known in events if known.id == event.id)

    def _delivered_index(self, session: Session, events: list[Event]) -> _Delivered | None:
        """The index of `session`'s event ids, made again unless it follows `events`; None
        for a `Session` (subclass) that takes no weak reference (then every event is
        looked at)."""
        key = id(session)
        delivered = self._delivered.get(key)
        if delivered is None or not delivered.follows(session, events):
            try:
                delivered = _Delivered(session, events, functools.partial(self._delivered.pop, key, None))
            except TypeError:
                return None
            self._delivered[key] = delivered
        return delivered
