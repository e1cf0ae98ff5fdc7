"""Google ADK's session and memory services (google-adk 2.13.0) on berth.

The swap::

    from berth.integrations.adk import BerthMemoryService, BerthSessionService
    client = berth.Client(url, api_key=SERVICE_KEY)   # or berth.open(path, tenant=..., user=..., role="service")
    runner = Runner(agent=agent, app_name="shop",
                    session_service=BerthSessionService(client),    # was InMemorySessionService()
                    memory_service=BerthMemoryService(client))      # was InMemoryMemoryService()

The key must have the `service` role: ADK's `app:` state is shared by every user of an
app (tenant-wide memory scope `app/...`, which a `user` key may only read), and the
service creates sessions on behalf of many ADK users.

Mapping (docs/adk.md has the whole of it):
- an ADK session `(app_name, user_id, id)` is one berth session, id `adk~` + the first
  40 hex digits of the SHA-256 of `[app_name, user_id, id]` (ADK allows one id under two
  users; berth ids are unique per tenant), owned by the berth user `encode_id(user_id)`
  (reversible: `decode_id`), labelled `adk`, titled with that JSON triple;
- the log: seq 0 is `adk/create`; then every ADK event becomes berth vocabulary with the
  ADK event verbatim in `data.adk` (`model_dump(mode="json", exclude_none=True)`): a
  function call is `tool/call {call_id, name, arguments}` (one per call; the first
  carries the event), a function response `tool/result {call_id, content}`, a user's
  text `user/message`, a model's text `assistant/message`, anything else an ignorable
  `adk/event`. Each invocation is a berth turn: `turn/start` before its first event,
  `turn/end` with its final response. ADK persists a function call before it runs the
  tool, so a process that dies mid-tool leaves an open turn with a pending call, which
  berth's repair closes on the next service object's first touch (a `resume`): that
  `get_session` shows the call followed by a function response saying its outcome is
  unknown. Event times are the ADK timestamps in ms, kept non-decreasing;
- state: unprefixed keys live in the session (folded into its index item, below);
  `app:` keys are memory items in `app/<encode_id(app_name)>/adk/state`, `user:` keys in
  `user/<encode_id(user_id)>/adk/<encode_id(app_name)>/state`, one item per key
  (`encode_key`); `temp:` keys are never persisted. Every write is **carried by the
  append of its event** (`append(memory=...)`), so the event and its state change are
  one atomic step, even across a crash;
- an index item per session, `app/<app>/adk/sessions` / `<berth id>`, bound to the
  session (deleted with it), holds its ids, session state and last update time and is
  rewritten by the carried write of each event: `list_sessions` is one memory search
  (plus one per user for `user:` state), never a read per session;
- stale writers: a `Session` remembers the log's next seq (`_storage_update_marker`);
  `append_event` appends with `expected_seq`, and a writer that lost the race gets
  `StaleSessionError`;
- runs: the service object attaches one berth run per session it touches (by
  `resume`, which repairs what a dead process left open), heartbeats them, and
  detaches them on `close()`; sessions are created `parallel` with a ten-year activity
  TTL.

`BerthMemoryService`: each event with text is an item of
`user/<user>/adk/<app>/memory`, searched with berth's full text search, scoped to the
app and the user.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import operator
import random
import re
import threading
import time
import unicodedata
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional, Union

import pydantic
from typing_extensions import TypedDict  # pydantic needs it for a TypedDict on Python < 3.12

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.errors import StaleSessionError
from google.adk.events.event import Event
from google.adk.memory import _utils as _memory_utils
from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from google.genai import types

import berth
from berth import _calls as berth_calls
from berth.integrations._ahead import ahead

#: The label of every session this service creates.
LABEL = "adk"
CREATE_TYPE = "adk/create"
EVENT_TYPE = "adk/event"
ACTIVITY_TTL_MS_FOREVER = 10 * 365 * 24 * 3600 * 1000
RUN_LEASE_TTL_MS_DEFAULT = 30_000
#: berth carries at most 100 memory writes per append; one is the session's index.
STATE_KEYS_PER_EVENT_MAX = 99

_ID_BYTES_MAX = 128
_KEY_BYTES_MAX = 512
_SAFE_ID_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._~-")
_REPAIR_CODES = frozenset(["TOOL_OUTCOME_UNKNOWN", "TOOL_NOT_STARTED"])
_PAGE = 1000
#: ADK's order of `list_sessions`: oldest first, ties by user, then id.
_LISTING_ORDER = operator.attrgetter("last_update_time", "user_id", "id")
#: Reads in flight ahead of their decoding, across the service's concurrent callers.
_PREFETCH_THREADS = 4


class StateDeltaTooLarge(ValueError):
    """An event's `app:`/`user:` delta has more keys than one append can carry."""


class ReadOutOfStep(RuntimeError):
    """A backward read answered other bounds than contiguous seqs predict (a broken
    invariant of the store, never an input error)."""


class IdTooLong(ValueError):
    """An ADK name berth cannot hold reversibly (its encoding is over 128 bytes)."""


# ----- encodings ------------------------------------------------------------------------


def encode_id(name: str) -> str:
    """A berth id (`[A-Za-z0-9._~-]`, 1–128 bytes, never `.`/`..`) for an ADK user id or
    app name, reversibly: the name itself when the grammar allows it and it does not
    start with `~`; otherwise `~` and its UTF-8 in unpadded base64url (names up to 95
    bytes). Longer names that need encoding raise `IdTooLong`."""
    if not isinstance(name, str):
        raise TypeError(f"an ADK id must be a str, not {type(name).__name__}")
    raw = name.encode("utf-8")
    if (
        0 < len(raw) <= _ID_BYTES_MAX
        and not raw.startswith(b"~")
        and name not in (".", "..")
        and all(byte in _SAFE_ID_BYTES for byte in raw)
    ):
        return name
    encoded = "~" + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
    if len(encoded) > _ID_BYTES_MAX:
        raise IdTooLong(f"{name[:40]!r}… needs {len(encoded)} bytes as a berth id, at most {_ID_BYTES_MAX}")
    return encoded


def decode_id(encoded: str) -> str:
    """The ADK name behind `encode_id`'s answer."""
    if encoded.startswith("~"):
        body = encoded[1:]
        try:
            return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError) as error:
            raise ValueError(f"{encoded!r} is not an encoded ADK id") from error
    return encoded


def encode_key(key: str) -> str:
    """A memory key (1–512 bytes, no control characters) for an ADK state key (without
    its prefix), reversibly: the key itself, or `~` + base64url."""
    raw = key.encode("utf-8")
    if 0 < len(raw) <= _KEY_BYTES_MAX and not key.startswith("~") and not any(
        unicodedata.category(char) == "Cc" for char in key
    ):
        return key
    encoded = "~" + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
    if len(encoded) > _KEY_BYTES_MAX:
        raise IdTooLong(f"state key {key[:40]!r}… is too long for berth memory ({len(encoded)} bytes encoded)")
    return encoded


def decode_key(key: str) -> str:
    return decode_id(key) if key.startswith("~") else key


def session_berth_id(app_name: str, user_id: str, session_id: str) -> str:
    """The berth session id of an ADK session."""
    digest = hashlib.sha256(json.dumps([app_name, user_id, session_id], ensure_ascii=False).encode()).hexdigest()
    return "adk~" + digest[:40]


def app_state_namespace(app_name: str) -> str:
    return f"app/{encode_id(app_name)}/adk/state"


def user_state_namespace(app_name: str, user_id: str) -> str:
    return f"user/{encode_id(user_id)}/adk/{encode_id(app_name)}/state"


def index_namespace(app_name: str) -> str:
    return f"app/{encode_id(app_name)}/adk/sessions"


def memory_namespace(app_name: str, user_id: str) -> str:
    return f"user/{encode_id(user_id)}/adk/{encode_id(app_name)}/memory"


# ----- events ---------------------------------------------------------------------------


def _event_json(event: Event) -> dict[str, Any]:
    return event.model_dump(mode="json", exclude_none=True)


def _text_of(content: Any) -> str | None:
    if content is None or not content.parts:
        return None
    texts = [part.text for part in content.parts if part.text]
    return "\n".join(texts) if texts else None


def berth_events_for(event: Event, time_ms: int) -> list[dict[str, Any]]:
    """The berth events that store one ADK event (verbatim in the first one's `adk`)."""
    adk = _event_json(event)
    calls = event.get_function_calls()
    responses = event.get_function_responses()
    out: list[dict[str, Any]] = []
    if calls and all(call.id and call.name for call in calls):
        for index, call in enumerate(calls):
            data: dict[str, Any] = {"call_id": call.id, "name": call.name, "arguments": call.args or {}}
            if index == 0:
                data["adk"] = adk
            out.append({"type": "tool/call", "data": data, "time": time_ms})
        return out
    if responses and not calls and all(response.id for response in responses):
        for index, response in enumerate(responses):
            data = {"call_id": response.id, "content": response.response, "name": response.name}
            if index == 0:
                data["adk"] = adk
            out.append({"type": "tool/result", "data": data, "time": time_ms})
        return out
    text = _text_of(event.content) if not calls and not responses else None
    if text is not None:
        kind = "user/message" if event.author == "user" else "assistant/message"
        return [{"type": kind, "data": {"content": text, "adk": adk}, "time": time_ms}]
    return [{"type": EVENT_TYPE, "data": {"adk": adk}, "ignorable": True, "time": time_ms}]


# ----- reading the log ------------------------------------------------------------------


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


class _IndexEntry(pydantic.BaseModel):
    """A session's index item's value (`_create`/`_append` write it), as listing needs it."""

    model_config = pydantic.ConfigDict(extra="ignore")

    user: str
    id: str
    state: Optional[dict[str, Any]] = None
    last_update_time: float = 0.0


class _IndexItem(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="ignore")

    # An object that is not an index entry raises; another JSON value is skipped.
    value: Union[_IndexEntry, list[Any], str, int, float, bool, None] = pydantic.Field(union_mode="left_to_right")


class _IndexPage(pydantic.BaseModel):
    """A memory search page of index items (`MemoryPageBody`), decoded straight from
    the answer's bytes: no `MemoryItem` per session, no JSON made into dicts twice."""

    model_config = pydantic.ConfigDict(extra="ignore")

    items: list[_IndexItem]
    next_cursor: Optional[str] = None


class _PageCursor(pydantic.BaseModel):
    """Only a memory search page's cursor: parsed without making its items into objects."""

    model_config = pydantic.ConfigDict(extra="ignore")

    next_cursor: Optional[str] = None


def _decode_index_page(answer: Any) -> _IndexPage:
    return _IndexPage.model_validate_json(answer.body)


_CURSOR_KEY = b'"next_cursor":'


def _page_cursor(body: bytes) -> Optional[str]:
    """A memory search page's `next_cursor`, read from the page's end when it is there:
    the store writes it last (`MemoryPageBody`), and outside a string the bytes
    `"next_cursor":` are a key (inside one, a quote is escaped). The last such key is
    the page's own when what follows it is a string and the page's closing brace, and
    nothing more (a key of an item's value would be followed by more closings). Any other
    shape is parsed whole (`_PageCursor`), as every page was before: a whole parse of a
    1,000-item page took 0.7 ms, the listing's 10 pages 7 ms."""
    at = body.rfind(_CURSOR_KEY)
    if at != -1:
        try:
            tail = json.loads(b"{" + body[at:])
        except ValueError:
            tail = None
        if isinstance(tail, dict) and isinstance(tail.get("next_cursor"), str):
            return tail["next_cursor"]
    return _PageCursor.model_validate_json(body).next_cursor


#: `list_sessions`'s `Session`s, validated in one call: 10,000 took 31 ms this way and
#: 42 ms as one `Session(...)` each (2026-12-04, `/work/scratch`, the same rows).
_SESSIONS = pydantic.TypeAdapter(list[Session])


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
    last `first_size` of them, then ranges of seqs before it, each twice as long (up to
    `_PAGE`). A page's `[first_seq, next_seq)` is the seqs it scanned, so the next range
    ends at this page's `first_seq`, known before this page is decoded: it is fetched on
    `prefetch` while this thread decodes (decoding is most of a read's time; the store
    or the server makes the next page meanwhile). Each decoded page is checked against
    the bounds it was predicted to have. Each page comes with its answer's bytes (what
    `_Events` keeps)."""
    answer = _fetch_page(client, berth_id, berth.SEQ_END, first_size)
    first_seq = _PageBounds.model_validate_json(answer.body).first_seq
    predicted: int | None = None
    size = first_size
    while True:
        next_size = min(_PAGE, size * 2)
        start = max(0, first_seq - next_size)
        upcoming = ahead(prefetch, _fetch_page, client, berth_id, first_seq, next_size, start) if first_seq > 0 else None
        page = _decode_stored_page(answer)
        if predicted is not None and (page.first_seq, page.next_seq) != (predicted, predicted + size):
            raise ReadOutOfStep(f"a backward read of {berth_id} answered seqs [{page.first_seq}, {page.next_seq}), "
                                f"not the predicted [{predicted}, {predicted + size})")
        yield page, answer.body
        if upcoming is None:
            return
        answer = upcoming()
        predicted, size, first_seq = start, first_seq - start, start


def _stored_data(event: _StoredEvent) -> _StoredData | None:
    data = event.data
    return data if isinstance(data, dict) else None  # type: ignore[return-value]


def _is_repair(event: _StoredEvent) -> bool:
    data = _stored_data(event)
    if event.type != "tool/result" or data is None or "adk" in data or "call_id" not in data:
        return False
    error = data.get("error")
    return isinstance(error, dict) and error.get("code") in _REPAIR_CODES


def _take_newest(events: list[_StoredEvent], chosen: list[_StoredEvent], limit: int | None,
                 after: float | None) -> bool:
    """Appends to `chosen` (newest first) the events of a page that present an ADK event
    and that the filters keep; True once the filters want no older event. The hot loop
    of `get_session` (a long session has three or four berth events per ADK event)."""
    for event in reversed(events):
        data = event.data
        if data.__class__ is not dict:
            continue
        adk_event = data.get("adk")  # type: ignore[union-attr]
        if adk_event is not None:
            stamp = adk_event.timestamp
        elif _is_repair(event):
            stamp = event.time / 1000
        else:
            continue  # bookkeeping: a turn marker, carried writes
        if after is not None and stamp < after:
            return True
        chosen.append(event)
        if limit is not None and len(chosen) >= limit:
            return True
    return False


def _calls_index(pages: list[_StoredPage]) -> dict[Any, _StoredEvent]:
    return {data["call_id"]: event for page in pages for event in page.events
            if event.type == "tool/call" and (data := _stored_data(event)) is not None and "call_id" in data}


def _repair_event(event: _StoredEvent, calls: Mapping[Any, _StoredEvent],
                  reader: Callable[[Any], _StoredEvent | None]) -> Event:
    """The ADK function response that presents berth's repair of a pending call: its
    outcome is unknown (or it never started), said in the call's invocation."""
    data = _stored_data(event)
    assert data is not None and isinstance(data.get("error"), dict)
    call = calls.get(data["call_id"])
    if call is None:
        call = reader(data.get("call_seq"))
    name, invocation, author = "unknown_tool", "", "berth"
    call_data = _stored_data(call) if call is not None else None
    if call_data is not None:
        name = call_data.get("name") or name
        if "adk" in call_data:
            invocation = call_data["adk"].invocation_id
            author = call_data["adk"].author
    response = types.FunctionResponse(
        id=data["call_id"], name=name, response={"error": data.get("content", ""), "code": data["error"]["code"]}
    )
    return Event(
        id=f"berth-repair-{event.seq}",
        invocation_id=invocation,
        author=author,
        timestamp=event.time / 1000,
        content=types.Content(role="user", parts=[types.Part(function_response=response)]),
    )


#: An event `_Events` holds not yet made JSON text: the bytes of the page it was read in
#: and its index among that page's events.
_Unmade = tuple[bytes, int]

#: How many bytes of events (JSON texts, read pages) one service object keeps for
#: `get_session`, over all its sessions, by default.
EVENTS_CACHE_BYTES_DEFAULT = 64 << 20


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


# ----- runs -----------------------------------------------------------------------------


class _Hold:
    """The service's hold on one berth session: its run and its open turn."""

    __slots__ = ("run_id", "turn", "invocation", "lost")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.turn: int | None = None
        self.invocation: str | None = None
        self.lost: BaseException | None = None


def _beat(client: berth.Client, holds: OrderedDict[str, _Hold], lock: threading.Lock, stop: threading.Event,
          interval_s: float) -> None:
    while not stop.wait(interval_s):
        with lock:
            current = list(holds.items())
        for berth_id, hold in current:
            if hold.lost is not None:
                continue
            try:
                client.heartbeat(berth_id, hold.run_id)
            except (berth.OwnershipLost, berth.NotFound, berth.Terminal) as error:
                hold.lost = error
            except (berth.BerthError, OSError):
                continue


def _release(client: berth.Client, holds: OrderedDict[str, _Hold], lock: threading.Lock,
             stop: threading.Event, prefetch: ThreadPoolExecutor) -> None:
    stop.set()
    prefetch.shutdown(wait=False, cancel_futures=True)
    with lock:
        current = list(holds.items())
        holds.clear()
    for berth_id, hold in current:
        if hold.lost is None:
            try:
                client.detach(berth_id, hold.run_id, outcome="completed")
            except (berth.BerthError, OSError):
                pass


class _Closed:
    """What `BerthSessionService.close()` returns: the close is done, and awaiting this
    finishes at once, so code written for ADK's async `close()` works unchanged. Not a
    coroutine: a sync caller that drops it gets no "never awaited" warning."""

    __slots__ = ()

    def __await__(self) -> Iterator[None]:
        return iter(())

    def __repr__(self) -> str:
        return "<BerthSessionService closed>"


_CLOSED = _Closed()


# ----- the session service --------------------------------------------------------------


class BerthSessionService(BaseSessionService):
    """ADK's `BaseSessionService` on berth. See the module's docstring.

    - `client`: a `berth.Client` with a `service` key (HTTP or embedded);
    - `run_lease_ttl_ms`: the run lease of this object's runs; a crashed process's open
      turn is repaired by the next object that touches the session after it lapsed;
    - `max_holds`: how many sessions keep a run attached at once (the least recently
      used is detached beyond that);
    - `events_cache_bytes`: how many bytes of the sessions' events this object keeps,
      over all of them, to answer `get_session` from them after checking the log's end
      (`_Events`; the least recently used session's are dropped beyond that; 0: none).
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
        self._stop = threading.Event()
        self._heartbeat = threading.Thread(
            target=_beat, args=(client, self._holds, self._lock, self._stop, max(0.05, run_lease_ttl_ms / 3000)),
            name="berth-adk-heartbeat", daemon=True,
        )
        self._heartbeat.start()
        # berth id -> (next_seq, session state, index revision, last time ms): what this
        # object last wrote or read, so an append needs no read of the index.
        self._cache: dict[str, tuple[int, dict[str, Any], int, int]] = {}
        # berth id -> the session's events as this object last wrote or read them (under
        # `_lock`), least recently used first; `_events_size` is their bytes in all.
        self._events: OrderedDict[str, _Events] = OrderedDict()
        self._events_size = 0
        self._events_budget = max(0, events_cache_bytes)
        # id(session) -> the ids of its events, for the re-delivery check (`_Delivered`).
        self._delivered: dict[int, _Delivered] = {}
        # Fetches the next page of a read while the caller's thread decodes the current one.
        self._prefetch = ThreadPoolExecutor(max_workers=_PREFETCH_THREADS, thread_name_prefix="berth-adk-read")
        self._finalizer = weakref.finalize(self, _release, client, self._holds, self._lock, self._stop,
                                           self._prefetch)

    # -- the interface ---------------------------------------------------------------

    async def create_session(self, *, app_name: str, user_id: str, state: Optional[dict[str, Any]] = None,
                             session_id: Optional[str] = None) -> Session:
        return await asyncio.to_thread(self._create, app_name, user_id, state, session_id)

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

    def close(self) -> _Closed:
        """Detaches this object's runs (idempotent), at once, and returns an awaitable
        that is already done: `service.close()` and ADK's `await service.close()` (as
        for `DatabaseSessionService`) both work. On a running loop, `await
        service.aclose()` (or `async with`) detaches on a worker thread instead."""
        self._finalizer()
        return _CLOSED

    async def aclose(self) -> None:
        await asyncio.to_thread(self._finalizer)

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
        try:
            outcome = self._resume(berth_id)
        except berth.NotFound:
            return None, []
        hold = _Hold(outcome.attachment.run_id)
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
        if outcome.repaired:
            self._cache.pop(berth_id, None)
            self._events_drop(berth_id)
        return hold, list(outcome.repaired)

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

    def _create(self, app_name: str, user_id: str, state: dict[str, Any] | None, session_id: str | None) -> Session:
        session_id = session_id.strip() if session_id else None
        session_id = session_id or str(uuid.uuid4())
        berth_id = session_berth_id(app_name, user_id, session_id)
        title = json.dumps([app_name, user_id, session_id], ensure_ascii=False)
        if len(title.encode()) > 512:
            title = title.encode()[:500].decode("utf-8", "ignore") + "…"
        try:
            self._client.create_session(berth_id, title=title, labels=[LABEL], user=encode_id(user_id),
                                        policy=self._policy)
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
                 "last_update_time": now, "time_ms": 0}
        writes = [{"namespace": index_namespace(app_name), "key": berth_id, "value": index,
                   "expected_revision": 0, "bound_to": berth_id}]
        writes += _state_writes(app_name, user_id, app_delta, user_delta)
        event = {"type": CREATE_TYPE, "data": {"app": app_name, "user": user_id, "id": session_id,
                                              "state": session_state, "time": now},
                 "ignorable": True, "time": now_ms}
        try:
            outcome = self._client.append(berth_id, [event], expected_seq=0, run=hold.run_id, memory=writes)
        except (berth.SeqConflict, berth.RevisionConflict):
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from None
        # Event times start from the first ADK event (kept non-decreasing from there).
        self._cache[berth_id] = (outcome.next_seq, dict(session_state), 1, 0)
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
        self._cache[berth_id] = (next_seq, dict(state), index.revision, int(value.get("time_ms", 0)))
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
        page_size = _PAGE if limit is None else min(_PAGE, 2 * limit + 8)
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

    def _call_reader(self, berth_id: str) -> Callable[[Any], _StoredEvent | None]:
        """Reads the event at a seq (a repaired call that is not among the pages read)."""

        def reader(seq: Any) -> _StoredEvent | None:
            if not isinstance(seq, int):
                return None
            found = _read_page(self._client, berth_id, from_seq=seq, limit=1).events
            return found[0] if found else None

        return reader

    def _present(self, berth_id: str, chosen: list[_StoredEvent], read: list[_StoredPage]) -> list[Event]:
        """The ADK events of `chosen`: each stored one as it was decoded, each repair as
        `_repair_event` (finding its call among the pages read, else by its seq)."""
        out: list[Event] = []
        calls: dict[Any, _StoredEvent] | None = None
        for event in chosen:
            adk_event = event.data.get("adk")  # type: ignore[union-attr]  (`_take_newest` chose it)
            if adk_event is None:
                calls = _calls_index(read) if calls is None else calls
                adk_event = _repair_event(event, calls, self._call_reader(berth_id))
            out.append(adk_event)
        return out

    # -- the events kept for get_session (`_Events`) ---------------------------------

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
        answer = _fetch_page(self._client, berth_id, None, _PAGE, anchor[0])
        page, body = _decode_stored_page(answer), answer.body
        first = page.events[0] if page.events else None
        if (first is None or (first.seq, first.idempotency_key) != anchor or len(page.events) >= _PAGE
                or page.next_seq - anchor[0] >= berth_calls.TYPED_READ_SCAN_MAX):  # (it may stop short of the end)
            self._events_drop(berth_id, events)
            return None
        fresh: list[tuple[int, float, str | _Unmade, str | None]] = []
        calls: dict[Any, _StoredEvent] | None = None
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
            page = self._client.memory_search(prefix, cursor=cursor, limit=_PAGE, **options)
            items.extend(page.items)
            if not page.next_cursor:
                return items
            cursor = page.next_cursor

    def _index_entries(self, app_name: str, user_id: str | None) -> list[_IndexEntry]:
        """Every index entry of the app (of one user's sessions when `user_id` is given):
        one memory search, page by page, the next page fetched on `_prefetch` while this
        thread decodes the current one (its cursor is read first, without the items)."""
        filters = {"user": user_id} if user_id is not None else None

        def fetch(cursor: str | None) -> Any:
            call = berth_calls.memory_search(index_namespace(app_name), filter=filters, cursor=cursor, limit=_PAGE)
            return self._client._execute(call.undecoded())

        entries: list[_IndexEntry] = []
        answer = fetch(None)
        while True:
            cursor = _page_cursor(answer.body)
            upcoming = ahead(self._prefetch, fetch, cursor) if cursor else None
            page = _decode_index_page(answer)
            entries.extend(item.value for item in page.items if isinstance(item.value, _IndexEntry))
            if upcoming is None:
                return entries
            answer = upcoming()

    def _list(self, app_name: str, user_id: str | None) -> ListSessionsResponse:
        with berth_calls.collector_paused():
            return self._listing(app_name, user_id)

    def _listing(self, app_name: str, user_id: str | None) -> ListSessionsResponse:
        entries = self._index_entries(app_name, user_id)
        app_state = {State.APP_PREFIX + key: value
                     for key, value in self._scope_state(app_state_namespace(app_name)).items()}
        # Per user, what merges over each session's own state: `app:` keys, then `user:`.
        shared: dict[str, dict[str, Any]] = {}
        for uid in sorted({entry.user for entry in entries}):
            shared[uid] = {**app_state, **{State.USER_PREFIX + key: value for key, value in
                                           self._scope_state(user_state_namespace(app_name, uid)).items()}}
        rows = []
        for entry in entries:
            state = entry.state if entry.state is not None else {}  # fresh from this decode: ours
            state.update(shared[entry.user])
            rows.append({"app_name": app_name, "user_id": entry.user, "id": entry.id, "state": state,
                         "last_update_time": entry.last_update_time})
        sessions = _SESSIONS.validate_python(rows)
        sessions.sort(key=_LISTING_ORDER)
        return ListSessionsResponse(sessions=sessions)

    def _delete(self, app_name: str, user_id: str, session_id: str) -> None:
        session_id = session_id.strip() if session_id else session_id
        berth_id = session_berth_id(app_name, user_id, session_id)
        with self._lock:
            self._holds.pop(berth_id, None)
        self._cache.pop(berth_id, None)
        self._events_drop(berth_id)
        try:
            self._client.delete_session(berth_id)
        except berth.NotFound:
            pass

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


def _split(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in state.items():
        if key.startswith(State.APP_PREFIX):
            app[key[len(State.APP_PREFIX):]] = value
        elif key.startswith(State.USER_PREFIX):
            user[key[len(State.USER_PREFIX):]] = value
        elif not key.startswith(State.TEMP_PREFIX):
            session[key] = value
    return app, user, session


def _state_writes(app_name: str, user_id: str, app_delta: Mapping[str, Any],
                  user_delta: Mapping[str, Any]) -> list[dict[str, Any]]:
    if len(app_delta) + len(user_delta) > STATE_KEYS_PER_EVENT_MAX:
        raise StateDeltaTooLarge(
            f"{len(app_delta) + len(user_delta)} app:/user: keys in one event; berth carries at most "
            f"{STATE_KEYS_PER_EVENT_MAX} with an append"
        )
    writes = [{"namespace": app_state_namespace(app_name), "key": encode_key(key), "value": value}
              for key, value in app_delta.items()]
    writes += [{"namespace": user_state_namespace(app_name, user_id), "key": encode_key(key), "value": value}
               for key, value in user_delta.items()]
    return writes


# ----- the memory service ---------------------------------------------------------------

_MAX_SEARCH_RESULTS = 10
_BERTH_TERM = re.compile(r"[^\W_]", re.UNICODE)


class BerthMemoryService(BaseMemoryService):
    """ADK's `BaseMemoryService` on berth memory: one item per event with text, in
    `user/<user>/adk/<app>/memory`, key = the event id; `search_memory` ranks the items
    by how many of the query's words they contain (berth full text search, one query per
    word) and returns the ten best, as `InMemoryMemoryService` does. Each word brings at
    most `candidates_per_word` items (its most relevant), so a search is bounded however
    large the memory grows."""

    def __init__(self, client: berth.Client, *, candidates_per_word: int = _PAGE) -> None:
        if isinstance(client, berth.AsyncClient):
            raise TypeError("BerthMemoryService takes a berth.Client (its calls run on worker threads)")
        if not 1 <= candidates_per_word <= _PAGE:
            raise ValueError(f"candidates_per_word must be 1–{_PAGE}")
        self._client = client
        self._candidates_per_word = candidates_per_word

    async def add_session_to_memory(self, session: Session) -> None:
        await asyncio.to_thread(self._add, session.app_name, session.user_id, session.id, list(session.events))

    async def add_events_to_memory(self, *, app_name: str, user_id: str, events: Sequence[Event],
                                   session_id: str | None = None,
                                   custom_metadata: Mapping[str, object] | None = None) -> None:
        await asyncio.to_thread(self._add, app_name, user_id, session_id, list(events))

    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        return await asyncio.to_thread(self._find, app_name, user_id, query)

    async def delete_memory(self, *, app_name: str, user_id: str, memory_id: str | None = None) -> None:
        if not memory_id:
            return
        await asyncio.to_thread(self._forget_one, app_name, user_id, memory_id)

    def _add(self, app_name: str, user_id: str, session_id: str | None, events: list[Event]) -> None:
        namespace = memory_namespace(app_name, user_id)
        wanted: dict[str, dict[str, Any]] = {}
        for event in events:
            if not event.content or not event.content.parts or not event.id:
                continue
            text = " ".join(part.text for part in event.content.parts if part.text)
            if not text.strip():
                continue  # nothing a search could match
            wanted[encode_key(event.id)] = {
                "text": text,
                "author": event.author,
                "timestamp": event.timestamp,
                "session": session_id,
                "content": event.content.model_dump(mode="json", exclude_none=True),
            }
        if not wanted:
            return
        # What is stored already (this session's items, and every tombstone of the
        # user's memory for the app): two searches, then a put per new or changed event.
        stored: dict[str, Any] = {}
        for conditions in ({"session": session_id}, {"deleted": True}):
            for item in self._search(namespace, conditions):
                if item.namespace == namespace:
                    stored[item.key] = item.value
        for key, value in wanted.items():
            existing = stored.get(key)
            if existing == value or (isinstance(existing, dict) and existing.get("deleted")):
                continue  # already stored, or deleted (never ingested again)
            self._client.memory_put(namespace, key, value)

    def _search(self, prefix: str, conditions: Mapping[str, Any]) -> list[berth.MemoryItem]:
        items: list[berth.MemoryItem] = []
        cursor = None
        while True:
            page = self._client.memory_search(prefix, filter=conditions, cursor=cursor, limit=_PAGE)
            items.extend(page.items)
            if not page.next_cursor:
                return items
            cursor = page.next_cursor

    def _find(self, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        namespace = memory_namespace(app_name, user_id)
        words = {word.lower() for word in re.findall(r"\w+", unicodedata.normalize("NFC", query))}
        scores: dict[str, int] = {}
        found: dict[str, berth.MemoryItem] = {}
        for word in sorted(words):
            if not _BERTH_TERM.search(word):
                continue  # no letter or digit: berth has no term for it
            page = self._client.memory_search(namespace, query=word, order="relevance",
                                              limit=self._candidates_per_word)
            for item in page.items:
                if item.namespace != namespace or not isinstance(item.value, dict):
                    continue
                found[item.key] = item
                scores[item.key] = scores.get(item.key, 0) + 1
        ranked = sorted(found.values(), key=lambda item: (-scores[item.key], item.value.get("timestamp", 0),
                                                          item.key))
        memories = []
        for item in ranked[:_MAX_SEARCH_RESULTS]:
            value = item.value
            memories.append(MemoryEntry(
                id=decode_key(item.key),
                content=types.Content.model_validate(value["content"]),
                author=value.get("author"),
                timestamp=_memory_utils.format_timestamp(value.get("timestamp", 0.0)),
            ))
        return SearchMemoryResponse(memories=memories)

    def _forget_one(self, app_name: str, user_id: str, memory_id: str) -> None:
        namespace = memory_namespace(app_name, user_id)
        try:
            self._client.memory_get(namespace, encode_key(memory_id))
        except berth.NotFound:
            return
        # A tombstone: a later add_session_to_memory does not ingest the event again.
        self._client.memory_put(namespace, encode_key(memory_id), {"deleted": True})


__all__ = [
    "ACTIVITY_TTL_MS_FOREVER", "BerthMemoryService", "BerthSessionService", "IdTooLong", "LABEL",
    "STATE_KEYS_PER_EVENT_MAX", "StateDeltaTooLarge", "app_state_namespace", "berth_events_for", "decode_id",
    "decode_key", "encode_id", "encode_key", "index_namespace", "memory_namespace", "session_berth_id",
    "user_state_namespace",
]
