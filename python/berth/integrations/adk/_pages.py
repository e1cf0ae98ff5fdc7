"""Reading a session's log: pages of the events that present ADK events, decoded by
pydantic straight from the answer's bytes, read backwards with the page before
fetched ahead while this one decodes."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, Union

import pydantic
from typing_extensions import TypedDict  # pydantic needs it for a TypedDict on Python < 3.12

from google.adk.events.event import Event

import berth
from berth import _calls as berth_calls
from berth.integrations._ahead import ahead

from ._mapping import EVENT_TYPE

#: The size of every page the adapter reads or searches (the log, the index, state,
#: memory). Modules read it here at each call (`_pages._PAGE`), so it is set in one place.
_PAGE = 1000


class ReadOutOfStep(RuntimeError):
    """A backward read answered other bounds than contiguous seqs predict (a broken
    invariant of the store, never an input error)."""


class _StoredData(TypedDict, total=False):
    """What the read path looks at in a stored event's `data`: the ADK event, validated
    in JSON mode straight from the page's bytes (exactly what `Event.model_validate_json`
    of its text builds, without first making it Python objects and JSON text again),
    and the fields of a berth repair. Every other field (a `session/memory` event's
    writes, a message's text) is skipped by the parser, never made into objects. A
    dict, not a model: most events of a long session are bookkeeping, and a model
    instance per event costs a tenth of the whole decode."""

    __pydantic_config__ = pydantic.ConfigDict(extra="ignore")  # type: ignore[misc]

    adk: Event
    # Lenient, as the fields of any event may be anything: only `adk` must validate.
    call_id: Any
    name: Any
    error: Any
    content: Any
    call_seq: Any
    # A `tool/call` that `before_tool_recorder` wrote (no ADK event holds it yet).
    invocation_id: Any
    author: Any


class _StoredEvent(pydantic.BaseModel):
    """One event of a read page (`EventBody`), its data as `_StoredData` when it is an
    object (as every event of an ADK session has), else left as it is."""

    model_config = pydantic.ConfigDict(extra="ignore")

    seq: int
    type: str
    time: int
    #: The key of the batch the event was stored in (`_Events` checks its newest by it).
    idempotency_key: Optional[str] = None
    # Not `Any` beside `_StoredData`: an object whose `adk` does not validate must raise,
    # never fall back to a dict the read path would skip.
    # Tried in order (pydantic's default "smart" union would try `_StoredData` strictly,
    # then again laxly, validating an ADK event twice).
    data: Union[_StoredData, list[Any], str, int, float, bool, None] = pydantic.Field(
        default=None, union_mode="left_to_right")


class _StoredPage(pydantic.BaseModel):
    """A read page (`EventPage`) as the read path needs it."""

    model_config = pydantic.ConfigDict(extra="ignore")

    events: list[_StoredEvent]
    first_seq: int
    next_seq: int


def _decode_stored_page(answer: Any) -> _StoredPage:
    """A page from the answer's bytes in one pass of pydantic's JSON parser."""
    return _StoredPage.model_validate_json(answer.body)


def _read_page(client: berth.Client, berth_id: str, **where: Any) -> _StoredPage:
    """One read (`before`/`from_seq`, `limit`), decoded by `_decode_stored_page`: the
    client's own call (retries, errors) with another decoder."""
    call = dataclasses.replace(berth_calls.read(berth_id, **where), decode=_decode_stored_page)
    return client._execute(call)


class _PageBounds(pydantic.BaseModel):
    """Only a page's bounds: parsed without making its events into objects."""

    model_config = pydantic.ConfigDict(extra="ignore")

    first_seq: int
    next_seq: int


# The types of the berth events that present an ADK event (`berth_events_for`) or a
# repair of one (a `tool/result`): a read asks for these only, so the bookkeeping (turn
# markers, the carried writes of `session/memory`) never leaves the store.
_PRESENTED_TYPES = ("user/message", "assistant/message", "tool/call", "tool/result", EVENT_TYPE)


def _fetch_page(client: berth.Client, berth_id: str, before: int | None, limit: int,
                from_seq: int | None = None) -> Any:
    """One read's answer of the presented types, not decoded yet (`Answer`: its body is
    the page's JSON): the last `limit` before `before`, or with `from_seq` the whole
    range `[from_seq, before)` (at most `limit` seqs long, so every match fits), or
    without `before` the first `limit` matches from `from_seq` on."""
    read = berth_calls.read(berth_id, from_seq=from_seq, before=before, limit=limit, types=_PRESENTED_TYPES)
    return client._execute(read.undecoded())


def _pages_backwards(client: berth.Client, berth_id: str, first_size: int,
                     prefetch: ThreadPoolExecutor) -> Iterator[tuple[_StoredPage, bytes]]:
    """The log's pages from its end backwards, of the presented types only: first the
    last `first_size` of them, then the last ones before it, twice as many each time (up
    to `_PAGE`). Pages count presented events, not seqs, so the turn and step markers
    and the carried writes between them cost no extra reads. A page's `[first_seq,
    next_seq)` is the seqs it scanned, so the next page ends at this page's `first_seq`,
    read from the answer's end (`_bounds`) before this page is decoded: it is fetched on
    `prefetch` while this thread decodes (decoding is most of a read's time; the store
    or the server makes the next page meanwhile). Each decoded page is checked to end
    where the one after it began. Each page comes with its answer's bytes (what
    `_Events` keeps)."""
    answer = _fetch_page(client, berth_id, berth.SEQ_END, first_size)
    first_seq = _bounds(answer.body)
    predicted: int | None = None
    size = first_size
    while True:
        size = min(_PAGE, size * 2)
        upcoming = ahead(prefetch, _fetch_page, client, berth_id, first_seq, size) if first_seq > 0 else None
        page = _decode_stored_page(answer)
        if page.first_seq != first_seq or (predicted is not None and page.next_seq != predicted):
            raise ReadOutOfStep(f"a backward read of {berth_id} answered seqs [{page.first_seq}, {page.next_seq}), "
                                f"not [{first_seq}, {predicted}) as its bounds and the page after it say")
        yield page, answer.body
        if upcoming is None:
            return
        answer = upcoming()
        predicted, first_seq = first_seq, _bounds(answer.body)


_BOUNDS_TAIL = re.compile(rb'\],"(?:next_seq":\d+,"first_seq":(\d+)|first_seq":(\d+),"next_seq":\d+)\}\s*$')


def _bounds(body: bytes) -> int:
    """A read page's `first_seq`, from the answer's end when the store wrote the bounds
    after the events (as it does: `"events":[…],"next_seq":N,"first_seq":M}`; numbers
    hold no brackets, so nothing else can end that way), else from a parse of the whole
    page without its events (`_PageBounds`)."""
    found = _BOUNDS_TAIL.search(body, max(0, len(body) - 64))
    if found is not None:
        return int(found.group(1) or found.group(2))
    return _PageBounds.model_validate_json(body).first_seq


def _stored_data(event: _StoredEvent) -> _StoredData | None:
    data = event.data
    return data if isinstance(data, dict) else None  # type: ignore[return-value]
