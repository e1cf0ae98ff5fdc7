"""The newest live items as a `BerthSession` object last read and wrote them (`_View`),
kept so a `get_items` or a `pop_item` needs one probe of the log's end instead of a
backward read."""

from __future__ import annotations

import json
from typing import Any

from berth import _calls as calls

from ._records import CLEAR_TYPE, POP_TYPE, _stored_item, _stores_item


#: How many of the newest events `get_items` reads to check (and bring up to date) what
#: it read before: other writers' appends up to this many are folded in, more mean a
#: fresh backward read.
PROBE_EVENTS = 8
#: Items a `pop_item`'s backward read keeps as the view, for the pops after it.
POP_VIEW_ITEMS = 64


#: A view item not yet made JSON text: the raw answer of the page it was read in and the
#: event's index there (`_View.texts` makes the text when the item is first answered).
_Unmade = tuple[bytes, int]


class _View:
    """The newest live items as this object last read (and then wrote) them: valid while
    the log still ends with the event it saw last (`end`, that event's idempotency key).
    Items are kept as JSON text, so every `get_items` answers fresh objects. Items of a
    backward read are kept as their page's raw answer until a later `get_items` answers
    them (`_Unmade`): a resume that is not followed by another read (or that reads only
    the newest few again) never encodes the thousands it read."""

    __slots__ = ("end", "last_key", "items", "complete")

    def __init__(self, end: int, last_key: str | None, items: list[tuple[int, str | _Unmade]], complete: bool) -> None:
        self.end = end
        self.last_key = last_key
        #: (seq, item JSON or `_Unmade`), oldest first: the newest live items.
        self.items = items
        #: The items reach back to the log's start or a clear: none are older.
        self.complete = complete

    def fold(self, events: list[dict[str, Any]]) -> bool:
        """Brings the view past `events` (the log's newest, from `end` on, in order, as
        the wire's JSON objects); False when only a backward read can tell what they
        change."""
        for event in events:
            data = event.get("data")
            if not isinstance(data, dict):
                data = {}
            event_type, seq = event["type"], event["seq"]
            if event_type == CLEAR_TYPE:
                self.items, self.complete = [], True
            elif event_type == POP_TYPE:
                target = data.get("target")
                kept = [entry for entry in self.items if entry[0] != target]
                if len(kept) == len(self.items) and not self.complete:
                    return False  # a pop of an item older than the view
                self.items = kept
            elif _stores_item(event_type, data):
                self.items.append((seq, _dumps(_stored_item(data))))
            elif event_type == "tool/result":
                return False  # a repair closer: it presents an earlier call too
            # Anything else presents no item (turns, in-flight records, other types).
            self.end = seq + 1
            self.last_key = event.get("idempotency_key")
        return True

    def covers(self, limit: int | None) -> bool:
        """Holds enough items to answer a read of the latest `limit`."""
        return self.complete or (limit is not None and len(self.items) >= limit)

    def texts(self, limit: int | None) -> list[str]:
        """The JSON texts of the newest `limit` items (all when None), oldest first; the
        unmade ones among them are made now, each page parsed once (a private copy)."""
        start = 0 if limit is None else max(0, len(self.items) - limit)
        pages: dict[int, list[Any]] = {}
        for index in range(start, len(self.items)):
            seq, text = self.items[index]
            if type(text) is not str:
                body, position = text  # type: ignore[misc]
                events = pages.get(id(body))
                if events is None:
                    events = pages[id(body)] = json.loads(body)["events"]
                self.items[index] = (seq, _dumps(_stored_item(events[position]["data"])))
        return [text for _, text in self.items[start:]]  # type: ignore[misc]


def _dumps(value: Any) -> str:
    return calls.dumps(value).decode("utf-8")
