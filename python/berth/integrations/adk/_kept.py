"""The events a `BerthSessionService` keeps for `get_session` (`_Events`), and its
methods that keep, check and extend them (`_KeptEvents`, mixed into the service)."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from google.adk.events.event import Event

import berth
from berth import _calls as berth_calls

from . import _pages
from ._mapping import _event_json
from ._pages import _decode_stored_page, _fetch_page, _stored_data, _StoredEvent, _StoredPage
from ._present import _Call, _calls_index, _is_repair, _repair_event

if TYPE_CHECKING:
    from ._append import _AppendPlan


#: An event `_Events` holds not yet made JSON text: the bytes of the page it was read in
#: and its index among that page's events.
_Unmade = tuple[bytes, int]

#: How many bytes of events (JSON texts, read pages) one service object keeps for
#: `get_session`, over all its sessions, by default.
EVENTS_CACHE_BYTES_DEFAULT = 64 << 20


class _Events:
    """The ADK events of one session as this object last wrote or read them, so that a
    `get_session` does not read the whole log again: every event the log presents below
    `next_seq`, oldest first, as (seq, ADK timestamp, its JSON text or `_Unmade`). They
    are the log's while it still holds, at `anchor_seq`, the event of the batch keyed
    `anchor_key` (the newest keyed entry; a key is a random UUID, so no other log holds
    it there, and a log's events never change, so every entry holds too): a
    `get_session` checks that with one forward read from there, which also answers the
    events appended since, by anyone. (A repair has no key: it is kept, but not
    checked by.) Each `get_session` builds its events afresh from these
    (`Event.model_validate_json` of a text, or its page decoded again), so no caller
    ever shares an object with another."""

    __slots__ = ("anchor_key", "anchor_seq", "bodies", "entries", "last_seq", "next_seq", "size")

    def __init__(self, next_seq: int) -> None:
        self.entries: list[tuple[int, float, str | _Unmade]] = []
        self.last_seq = -1
        self.anchor_seq: int | None = None
        self.anchor_key: str | None = None
        self.next_seq = next_seq
        #: Bytes held: the texts, and each page once.
        self.size = 0
        self.bodies: set[int] = set()

    def add(self, seq: int, stamp: float, item: str | _Unmade, key: str | None) -> None:
        self.entries.append((seq, stamp, item))
        self.last_seq = seq
        if key is not None:
            self.anchor_seq, self.anchor_key = seq, key
        if type(item) is str:
            self.size += len(item)
        elif id(item[0]) not in self.bodies:  # type: ignore[index]
            self.bodies.add(id(item[0]))  # type: ignore[index]
            self.size += len(item[0])  # type: ignore[index]

    def choose(self, end: int, limit: int | None, after: float | None) -> list[str | _Unmade]:
        """What `_take_newest`'s filters keep of the entries below `end`, oldest first."""
        chosen: list[str | _Unmade] = []
        for seq, stamp, item in reversed(self.entries):
            if seq >= end:
                continue
            if after is not None and stamp < after:
                break
            chosen.append(item)
            if limit is not None and len(chosen) >= limit:
                break
        chosen.reverse()
        return chosen


def _made(chosen: list[str | _Unmade]) -> list[Event]:
    """Fresh ADK events of `_Events.choose`'s items: each text validated, each page
    decoded once for all its items."""
    pages: dict[int, _StoredPage] = {}
    out: list[Event] = []
    for item in chosen:
        if type(item) is str:
            out.append(Event.model_validate_json(item))
            continue
        body, index = item  # type: ignore[misc]
        page = pages.get(id(body))
        if page is None:
            page = pages[id(body)] = _StoredPage.model_validate_json(body)
        out.append(page.events[index].data["adk"])  # type: ignore[index,union-attr]
    return out


def _event_text(event: Event) -> str:
    """An ADK event as `_Events` keeps a presented one that is not in a page (a repair)."""
    return json.dumps(_event_json(event), ensure_ascii=False, separators=(",", ":"))


class _KeptEvents:
    """Keeping events, for `BerthSessionService` (its `_client`, `_lock`, `_events`,
    `_events_size`, `_events_budget`; `_call_reader`)."""

    _client: berth.Client
    _lock: threading.Lock
    _events: OrderedDict[str, _Events]
    _events_size: int
    _events_budget: int

    def _kept_tail(self, berth_id: str, limit: int | None, after: float | None) -> tuple[list[Event], int] | None:
        """`_tail` from the events this object keeps of the session, when the log still
        holds their anchor: one forward read from it, which brings what was appended
        since (by anyone) too. None when nothing is kept or the log moved otherwise
        (deleted and created again, or a page or more appended since)."""
        with self._lock:
            events = self._events.get(berth_id)
            if events is None or events.anchor_seq is None:
                return None
            self._events.move_to_end(berth_id)
            anchor = (events.anchor_seq, events.anchor_key)
            kept_to = events.last_seq
        answer = _fetch_page(self._client, berth_id, None, _pages._PAGE, anchor[0])
        page, body = _decode_stored_page(answer), answer.body
        first = page.events[0] if page.events else None
        if (first is None or (first.seq, first.idempotency_key) != anchor or len(page.events) >= _pages._PAGE
                or page.next_seq - anchor[0] >= berth_calls.TYPED_READ_SCAN_MAX):  # (it may stop short of the end)
            self._events_drop(berth_id, events)
            return None
        fresh: list[tuple[int, float, str | _Unmade, str | None]] = []
        calls: dict[Any, _Call] | None = None
        for index, event in enumerate(page.events):
            if event.seq <= kept_to:
                continue
            data = _stored_data(event)
            adk_event = data.get("adk") if data is not None else None
            if adk_event is not None:
                fresh.append((event.seq, adk_event.timestamp, (body, index), event.idempotency_key))
            elif _is_repair(event):
                calls = _calls_index([page]) if calls is None else calls
                repaired = _repair_event(event, calls, self._call_reader(berth_id))
                fresh.append((event.seq, repaired.timestamp, _event_text(repaired), event.idempotency_key))
        with self._lock:
            if self._events.get(berth_id) is not events:
                return None  # dropped or replaced meanwhile
            before = events.size
            for entry in fresh:
                if entry[0] > events.last_seq:  # (not kept already: an append of ours may have added it)
                    events.add(*entry)
            events.next_seq = max(events.next_seq, page.next_seq)
            chosen = events.choose(page.next_seq, limit, after)
            self._events_grown(berth_id, events, before)
        with berth_calls.collector_paused():
            return _made(chosen), page.next_seq

    def _keep_read(self, berth_id: str, read: list[tuple[_StoredPage, bytes]], chosen: list[_StoredEvent],
                   out: list[Event]) -> None:
        """Keeps a whole read of the log (`read`: its pages, newest first; `chosen`
        presented as `out`): each ADK event as its page's bytes and index, each repair
        as text."""
        if self._events_budget == 0:
            return
        repairs = {id(event): shown for event, shown in zip(chosen, out)
                   if (data := _stored_data(event)) is None or data.get("adk") is None}
        events = _Events(read[0][0].next_seq)
        for page, body in reversed(read):
            for index, event in enumerate(page.events):
                data = _stored_data(event)
                adk_event = data.get("adk") if data is not None else None
                if adk_event is not None:
                    events.add(event.seq, adk_event.timestamp, (body, index), event.idempotency_key)
                elif id(event) in repairs:
                    shown = repairs[id(event)]
                    events.add(event.seq, shown.timestamp, _event_text(shown), event.idempotency_key)
        if events.anchor_seq is not None:
            self._events_keep(berth_id, events)

    def _events_keep(self, berth_id: str, events: _Events) -> None:
        """Keeps `events` as the session's, unless what is kept already reaches further."""
        if self._events_budget == 0:
            return
        with self._lock:
            kept = self._events.get(berth_id)
            if kept is not None:
                if kept.next_seq > events.next_seq:
                    return
                self._events_forget(berth_id)
            self._events[berth_id] = events
            self._events_grown(berth_id, events, 0)

    def _events_drop(self, berth_id: str, events: _Events | None = None) -> None:
        """Forgets the session's kept events (only if they are still `events`, if given)."""
        with self._lock:
            kept = self._events.get(berth_id)
            if kept is not None and (events is None or kept is events):
                self._events_forget(berth_id)

    def _events_forget(self, berth_id: str) -> None:
        """Forgets the session's kept events, which there are (under `_lock`)."""
        self._events_size -= self._events.pop(berth_id).size

    def _events_grown(self, berth_id: str, events: _Events, before: int) -> None:
        """Counts what the session's kept `events` (`before` bytes until now) have grown
        by, marks them the most recently used, and drops the least recently used
        sessions' while over the budget (under `_lock`)."""
        self._events_size += events.size - before
        self._events.move_to_end(berth_id)
        while self._events_size > self._events_budget and self._events:
            _, dropped = self._events.popitem(last=False)
            self._events_size -= dropped.size

    def _events_appended(self, plan: _AppendPlan, outcome: berth.AppendOutcome) -> None:
        """Adds an append of ours to the session's kept events when they end where the
        append began (else drops them: the log moved in a way they do not know)."""
        events = self._events.get(plan.berth_id)
        if events is None:
            return
        text = json.dumps(plan.events[plan.adk_index]["data"]["adk"], ensure_ascii=False, separators=(",", ":"))
        with self._lock:
            if self._events.get(plan.berth_id) is not events:
                return
            if plan.expected is None or events.next_seq != plan.expected:
                self._events_forget(plan.berth_id)
                return
            before = events.size
            events.add(outcome.first_seq + plan.adk_index, plan.event.timestamp, text, plan.key)
            events.next_seq = outcome.next_seq
            self._events_grown(plan.berth_id, events, before)
