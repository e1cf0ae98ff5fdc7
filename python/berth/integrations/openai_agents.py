"""`BerthSession`: the OpenAI Agents SDK's `Session` protocol (openai-agents 0.24.0) on berth.

The one-line swap::

    from berth.integrations.openai_agents import BerthSession
    session = BerthSession("user-123", client)   # was SQLiteSession("user-123", "chat.db")
    await Runner.run(agent, "hi", session=session)

`client` is a `berth.Client`: HTTP (`berth.Client(url, api_key=...)`) or the embedded
store (`berth.open(path, tenant=..., user=..., role=...)`); every call runs on a worker
thread, so one `BerthSession` may be used from any event loop or thread (the SDK's
`run_sync` and threaded callers each bring their own loop).

How the SDK's history lives in berth:
- one SDK session is one berth session, labelled `openai-agents`, titled with the SDK's
  `session_id`, whose id is `session_id` itself when berth's id grammar allows it and a
  reversible encoding otherwise (`encode_session_id`);
- each item is one event. Known shapes use berth's vocabulary (a user message is
  `user/message`, an assistant message `assistant/message`, a `function_call` is
  `tool/call`, a `function_call_output` is `tool/result`), with the SDK's item kept
  verbatim in `data.item`, so `berth sessions cat` and the inspector read the
  conversation; anything else is an ignorable `openai/item`;
- `add_items` is one atomic, durable append; `pop_item` appends a claim
  (`openai/pop {target, claim}` at the log's end, with `expected_seq` and a nonce, so
  racing processes each pop a different item) and `clear_session` a marker
  (`openai/clear`): the log stays append-only, and its audit trail with it. Storage is
  reclaimed when the session is deleted (`delete()`, `berth sessions rm`) or by the
  tenant's retention policy;
- every `BerthSession` object writes through a berth run of its own, attached on its first
  use (by `resume`, so turns left open by objects whose runs are gone are closed first),
  heartbeated in the background and detached by `close()` / leaving its context manager,
  or by its lease (`run_lease_ttl_ms`) lapsing if the process dies.

Durable in-flight tool calls: pass `hooks=session.run_hooks()` to `Runner.run`. Before a
tool runs, the session records a `turn/start` (once per model turn) and a `tool/call`
through its run; the turn is closed (`turn/end`) in the same append that saves the turn's
items. If the process dies while the tool runs, the next object to use the session (once
the dead object's run lease has lapsed) gets berth's repair: a `tool/result` saying the
outcome is unknown, which `get_items` presents as the call plus a `function_call_output`,
so the model sees that the tool may have run.

Not supported: `OpenAIResponsesCompactionAwareSession` / `run_compaction`, and the
SDK's private compaction hook (`_get_compaction_snapshot` / `replace_suffix`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextvars
import functools
import hashlib
import json
import random
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from agents.lifecycle import RunHooks
from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit

import berth
from berth import _calls as calls
from berth.integrations._ahead import ProcessPool, ahead
from berth.integrations._ahead import pool as read_ahead_pool

#: The label every session made by `BerthSession` carries (listings filter on it).
LABEL = "openai-agents"
#: An SDK item berth's vocabulary has no type for (kept verbatim, ignorable by berth).
ITEM_TYPE = "openai/item"
#: A `pop_item` claim: `{target: seq, claim: nonce}`.
POP_TYPE = "openai/pop"
#: A `clear_session` marker: every item before it is gone.
CLEAR_TYPE = "openai/clear"
#: Sessions are created with this activity TTL (ten years): the SDK assumes history lives
#: until it is cleared, and berth's default (24 h idle) would expire them.
ACTIVITY_TTL_MS_FOREVER = 10 * 365 * 24 * 3600 * 1000
#: How long a dead process's run keeps its place (and its open turn unrepaired).
RUN_LEASE_TTL_MS_DEFAULT = 30_000

_ID_BYTES_MAX = 128
_SAFE_ID_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._~-")
_MESSAGE_TYPES = {
    "user": "user/message",
    "assistant": "assistant/message",
    "system": "system/message",
    "developer": "system/message",
}
_ITEM_TYPES = frozenset(["user/message", "assistant/message", "system/message", "tool/call", "tool/result", ITEM_TYPE])
#: Marks a message or `function_call` stored as its event's data itself: the item's own
#: fields, in its order, then this key (`True`). The fields berth's vocabulary needs
#: (`content`; `call_id`, `name`, `arguments`) are the item's, so its text is stored once.
ITEM_MARK = "openai_item"
#: Keys that keep an item out of that layout (it is nested as `{..., item}` instead):
#: the mark itself, the nested layout's and the tool-start record's keys, and fields
#: berth's vocabulary gives a meaning of its own.
_NESTED_ONLY_KEYS = frozenset([ITEM_MARK, "item", "in_flight", "tool_calls", "error", "is_error"])
_MARKED_TYPES = frozenset(["user/message", "assistant/message", "system/message", "tool/call"])
_REPAIR_CODES = frozenset(["TOOL_OUTCOME_UNKNOWN", "TOOL_NOT_STARTED"])

#: Worker threads for every `BerthSession`'s calls. Not the loop's default executor
#: (`min(32, cores + 4)` threads: 6 on two cores, sized for CPU work): these calls mostly
#: wait on the store with the GIL released, and concurrent writers each need a thread for
#: their durable appends to be in flight together.
WORKER_THREADS_MAX = 64
_worker_pool = ProcessPool(WORKER_THREADS_MAX, "berth-openai")
_T = TypeVar("_T")


async def _on_worker(function: Callable[..., _T], *args: Any) -> _T:
    """`asyncio.to_thread` on the pool above (the caller's context variables go along)."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, function, *args)
    return await asyncio.get_running_loop().run_in_executor(_worker_pool(), call)


class SessionModeMismatch(berth.BerthError):
    """The berth session exists with the other concurrency mode (`exclusive=` differs
    from the mode it was created with, which is fixed at creation)."""

    code = "session_mode_mismatch"

    def __init__(self, message: str) -> None:
        super().__init__(message, status=409)


class SessionClosed(berth.ClientClosed, RuntimeError):
    """A call on a `BerthSession` after its `close()`. A `RuntimeError`, as `SQLiteSession`
    raises after its own `close()` ("SQLiteSession is closed"), and a `berth.ClientClosed`:
    a closed object attaches no run again (its `close()` released it); make a new one."""

    def __init__(self) -> None:
        super().__init__("BerthSession is closed")


def encode_session_id(session_id: str) -> str:
    """The berth id of an SDK session id: the id itself when berth's grammar
    (`[A-Za-z0-9._~-]{1,128}`) allows it and it does not start with `~`; otherwise `~`
    and its UTF-8 in unpadded base64url; and if that is over 128 bytes, `~~` and its
    SHA-256 (the original id is then only in the session's title)."""
    if not isinstance(session_id, str):
        raise TypeError(f"session_id must be a str, not {type(session_id).__name__}")
    raw = session_id.encode("utf-8")
    if 0 < len(raw) <= _ID_BYTES_MAX and not raw.startswith(b"~") and all(byte in _SAFE_ID_BYTES for byte in raw):
        return session_id
    encoded = "~" + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
    if len(encoded) <= _ID_BYTES_MAX:
        return encoded
    return "~~" + hashlib.sha256(raw).hexdigest()


def decode_session_id(berth_id: str) -> str | None:
    """The SDK session id behind a berth id, or None when it is a hash (read the title)."""
    if berth_id.startswith("~~"):
        return None
    if berth_id.startswith("~"):
        body = berth_id[1:]
        try:
            return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
    return berth_id


def event_for_item(item: Any) -> dict[str, Any]:
    """The berth event that stores one SDK item. A message or a `function_call` is the
    event's data itself, marked (`ITEM_MARK`), unless it holds a key of
    `_NESTED_ONLY_KEYS`; any other item is verbatim in `data.item`, beside the fields
    berth's vocabulary requires."""
    if type(item) is dict or isinstance(item, Mapping):  # a dict first: the ABC check is slow
        kind = item.get("type")
        call_id = item.get("call_id")
        if kind == "function_call" and _nonempty(call_id) and _nonempty(item.get("name")) and "arguments" in item:
            if _NESTED_ONLY_KEYS.isdisjoint(item):
                return {"type": "tool/call", "data": _marked(item)}
            data = {"call_id": call_id, "name": item["name"], "arguments": item["arguments"], "item": item}
            return {"type": "tool/call", "data": data}
        if kind == "function_call_output" and _nonempty(call_id) and "output" in item:
            return {"type": "tool/result", "data": {"call_id": call_id, "content": item["output"], "item": item}}
        message_type = _MESSAGE_TYPES.get(item.get("role"))  # type: ignore[arg-type]
        if kind in (None, "message") and message_type and "content" in item:
            if _NESTED_ONLY_KEYS.isdisjoint(item):
                return {"type": message_type, "data": _marked(item)}
            return {"type": message_type, "data": {"content": item["content"], "item": item}}
    return {"type": ITEM_TYPE, "data": {"item": item}, "ignorable": True}


def _marked(item: Any) -> dict[str, Any]:
    data = dict(item)  # a copy: the caller's item is not changed
    data[ITEM_MARK] = True
    return data


def _stores_item(event_type: str, data: dict[str, Any]) -> bool:
    """Whether an event of `event_type` with `data` stores an SDK item (either layout),
    rather than presenting one (a repair closer) or none (a tool-start record)."""
    if event_type not in _ITEM_TYPES:
        return False
    return "item" in data or (event_type in _MARKED_TYPES and data.get(ITEM_MARK) is True)


def _stored_item(data: dict[str, Any]) -> Any:
    """The SDK item that `data` stores (`_stores_item` is true of it). A marked item is
    made a new dict: `data` is not changed."""
    if "item" in data:
        return data["item"]
    item = dict(data)
    del item[ITEM_MARK]
    return item


def _nonempty(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _presented_item(event_type: str, data: Any, repaired_calls: set[str]) -> Any | None:
    """The SDK item an event that stores none (`_stores_item`) presents, or None
    (markers, turn bookkeeping). Repair closers become `function_call_output`s; an
    in-flight call record becomes its `function_call` only when a closer answers it
    (otherwise the turn was saved whole)."""
    if not isinstance(data, dict):
        return None
    if event_type == "tool/result":
        error = data.get("error")
        if isinstance(error, dict) and error.get("code") in _REPAIR_CODES and _nonempty(data.get("call_id")):
            repaired_calls.add(data["call_id"])
            return {"type": "function_call_output", "call_id": data["call_id"], "output": data.get("content", "")}
        return None
    if event_type == "tool/call" and data.get("in_flight") and data.get("call_id") in repaired_calls:
        arguments = data.get("arguments")
        return {
            "type": "function_call",
            "call_id": data["call_id"],
            "name": data.get("name", ""),
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False),
        }
    return None


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

    def fold(self, events: list[berth.Event]) -> bool:
        """Brings the view past `events` (the log's newest, from `end` on, in order);
        False when only a backward read can tell what they change."""
        for event in events:
            data = event.data if isinstance(event.data, dict) else {}
            if event.type == CLEAR_TYPE:
                self.items, self.complete = [], True
            elif event.type == POP_TYPE:
                target = data.get("target")
                kept = [entry for entry in self.items if entry[0] != target]
                if len(kept) == len(self.items) and not self.complete:
                    return False  # a pop of an item older than the view
                self.items = kept
            elif _stores_item(event.type, data):
                self.items.append((event.seq, _dumps(_stored_item(data))))
            elif event.type == "tool/result":
                return False  # a repair closer: it presents an earlier call too
            # Anything else presents no item (turns, in-flight records, other types).
            self.end = event.seq + 1
            self.last_key = event.idempotency_key
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


def _fetch_before(client: berth.Client, session_id: str, before: int, limit: int) -> calls.Answer:
    """`client.read_before`'s answer, not decoded yet (`calls.decode_page`): its raw
    bytes are what `_View` keeps."""
    call = calls.read(session_id, before=before, limit=limit)
    return client._execute(call.undecoded())


class _Binding:
    """One client's hold on the session: its berth run, the heartbeat, the open turn."""

    def __init__(self, client: berth.Client) -> None:
        self.client = client
        self.lock = threading.Lock()
        self.run_id: str | None = None
        self.lost: BaseException | None = None
        self.stop = threading.Event()
        self.heartbeat: threading.Thread | None = None
        self.open_turn: int | None = None
        self.turns = 0
        self.view: _View | None = None
        self.view_lock = threading.Lock()

    def joined(self) -> bool:
        """Attached and not displaced: writes and reads need no `_join` first."""
        return self.run_id is not None and self.lost is None

    def take_view(self) -> _View | None:
        """The view, now this caller's alone (worker threads share a binding)."""
        with self.view_lock:
            view, self.view = self.view, None
            return view

    def keep_view(self, view: _View) -> None:
        # Any view kept describes a prefix of the log; the next read checks and extends it.
        with self.view_lock:
            self.view = view


def _beat(client: berth.Client, berth_id: str, binding: _Binding, interval_s: float) -> None:
    # Only the binding and the client are referenced here, never the BerthSession, so an
    # unreachable session is collected (and its finalizer detaches the run).
    run_id = binding.run_id
    assert run_id is not None
    while not binding.stop.wait(interval_s):
        try:
            client.heartbeat(berth_id, run_id)
        except (berth.OwnershipLost, berth.NotFound, berth.Terminal) as error:
            binding.lost = error
            return
        except (berth.BerthError, OSError):
            continue  # transient (the client already retried): the next beat tries again


def _release(bindings: dict[int, _Binding], berth_id: str) -> None:
    for binding in list(bindings.values()):
        # After an attach in flight (`_join` holds the lock through it), so its run is
        # released too.
        with binding.lock:
            binding.stop.set()
            run_id, binding.run_id = binding.run_id, None
        if run_id is not None and binding.lost is None:
            try:
                binding.client.detach(berth_id, run_id, outcome="completed")
            except (berth.BerthError, OSError):
                pass  # gone already, or unreachable: the run's lease lapses on its own
    bindings.clear()


class BerthSession:
    """The SDK's `Session` protocol on berth. See the module's docstring.

    - `client`: a `berth.Client` (HTTP or embedded); or `url=` / `api_key=` to make one
      (closed with the session).
    - `exclusive=True`: single-writer mode. The session is created `serial`, attached
      with `on_busy="reject"`, so a second object or process gets `berth.Busy`, and a
      displaced holder `berth.OwnershipLost`. Default: `parallel` (up to `runs_max`
      objects write at once, as the SDK allows). The mode is fixed when the berth session
      is created; opening it in the other mode raises `SessionModeMismatch`.
    - `run_lease_ttl_ms`: the run lease; a crashed process's open turn is repaired by the
      next object that attaches after it lapsed (the worst-case wait).
    - `client_for_context`: `wrapper -> berth.Client`, to pick the tenant's key from the
      run context (the SDK passes `wrapper=` to sessions whose four methods take it).
      Return one long-lived client per tenant: the object holds a run per client.
    - `id_prefix`: prepended to `session_id` before encoding (to share one tenant).
    """

    session_id: str
    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        client: berth.Client | None = None,
        *,
        url: str | None = None,
        api_key: str | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        exclusive: bool = False,
        runs_max: int = 64,
        run_lease_ttl_ms: int = RUN_LEASE_TTL_MS_DEFAULT,
        activity_ttl_ms: int = ACTIVITY_TTL_MS_FOREVER,
        labels: list[str] | None = None,
        id_prefix: str = "",
        client_for_context: Callable[[Any], berth.Client] | None = None,
    ) -> None:
        if not isinstance(session_id, str):
            raise TypeError(f"session_id must be a str, not {type(session_id).__name__}")
        if isinstance(client, berth.AsyncClient):
            raise TypeError("BerthSession takes a berth.Client (its calls run on worker threads), not an AsyncClient")
        self.session_id = session_id
        self.session_settings = (
            coerce_session_settings(session_settings) if session_settings is not None else SessionSettings()
        )
        self._owns_client = client is None
        self._client = client if client is not None else berth.Client(url, api_key=api_key)
        self.exclusive = exclusive
        self.berth_id = encode_session_id(id_prefix + session_id)
        concurrency = {"mode": "serial"} if exclusive else {"mode": "parallel", "runs_max": runs_max}
        self._policy = {
            "concurrency": concurrency,
            "activity_ttl_ms": activity_ttl_ms,
            "run_lease_ttl_ms": run_lease_ttl_ms,
        }
        self._labels = [LABEL, *(calls.listed("labels", labels) if labels is not None else [])]
        self._heartbeat_s = max(0.05, run_lease_ttl_ms / 3000)
        self._client_for_context = client_for_context
        self._bindings: dict[int, _Binding] = {}
        self._bindings_lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _release, self._bindings, self.berth_id)
        self._closed = False

    # -- the protocol ---------------------------------------------------------------

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[Any]:
        """The latest `limit` live items (all when None), oldest first."""
        self._check_open()
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit <= 0:
            return []
        binding = self._binding(wrapper)
        if binding.joined():
            # The common case, on the loop: the view this object keeps, checked against
            # the log's newest events (one read).
            view = binding.take_view()
            if view is not None and view.covers(limit):
                probe = await binding.client._aexecute(self._probe())
                answer = self._answer_from_view(binding, view, probe, limit)
                if answer is not None:
                    return answer
        return await _on_worker(self._get_items, binding, limit)

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        """Appends `items` as one atomic, durable batch."""
        self._check_open()  # before the empty batch's shortcut, as `SQLiteSession` checks
        if not items:
            return
        binding = self._binding(wrapper)
        if not binding.joined():
            await _on_worker(self._join, binding, True)
        items = list(items)
        events = [event_for_item(item) for item in items]
        closing = binding.open_turn
        if closing is not None:
            # The turn's items are saved: it ended (in the same atomic batch).
            events.append({"type": "turn/end", "data": {"turn": closing, "reason": "completed"}})
        key = uuid.uuid4().hex
        view = binding.take_view()
        outcome = await self._aappend(binding, events, idempotency_key=key)
        if view is not None and not outcome.duplicate and outcome.first_seq == view.end:
            # Nobody appended in between: the view extends by what was just stored.
            view.items.extend((outcome.first_seq + index, _dumps(item)) for index, item in enumerate(items))
            view.end, view.last_key = outcome.next_seq, key
            binding.keep_view(view)
        if binding.open_turn == closing:
            binding.open_turn = None

    async def pop_item(self, *, wrapper: Any = None) -> Any | None:
        """Removes and returns the latest live item (None when there is none); racing
        callers, in any process, each get a different item."""
        binding = self._binding(wrapper)
        return await _on_worker(self._pop_item, binding)

    async def clear_session(self, *, wrapper: Any = None) -> None:
        """Removes every item (a marker: the log and its audit trail stay)."""
        binding = self._binding(wrapper)
        await _on_worker(self._clear, binding)

    # -- beyond the protocol --------------------------------------------------------

    def run_hooks(self) -> BerthRunHooks:
        """Run hooks that record each tool start durably before the tool runs
        (`Runner.run(agent, input, session=session, hooks=session.run_hooks())`)."""
        return BerthRunHooks(self)

    async def delete(self, *, wrapper: Any = None) -> None:
        """Deletes the berth session, reclaiming its storage (history and markers)."""
        binding = self._binding(wrapper)
        await _on_worker(self._delete, binding)

    @staticmethod
    def list_session_ids(client: berth.Client, **filters: Any) -> list[str]:
        """The SDK session ids of the tenant's `openai-agents` sessions (from titles)."""
        ids = []
        for session in client.iter_sessions(label=LABEL, include_blank=True, **filters):
            ids.append(session.title if session.title is not None else (decode_session_id(session.id) or session.id))
        return ids

    def close(self) -> None:
        """Detaches this object's runs and stops their heartbeats (idempotent). Every
        later call raises `SessionClosed`, as `SQLiteSession`'s do after its `close()`."""
        self._closed = True
        self._finalizer()
        if self._owns_client:
            self._client.close()

    async def aclose(self) -> None:
        await _on_worker(self.close)

    def __enter__(self) -> BerthSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> BerthSession:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- internals (run on worker threads) ------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosed()

    def _binding(self, wrapper: Any) -> _Binding:
        self._check_open()
        client = self._client
        if wrapper is not None and self._client_for_context is not None:
            client = self._client_for_context(wrapper)
        with self._bindings_lock:
            binding = self._bindings.get(id(client))
            if binding is None:
                binding = self._bindings[id(client)] = _Binding(client)
            return binding

    def _join(self, binding: _Binding, create: bool) -> bool:
        """Attaches this object's run (creating the session if `create`); False when the
        session does not exist and was not created. Attaching is a `resume`: turns left
        open by runs that are gone are closed before this object reads or writes."""
        with binding.lock:
            self._check_open()  # closed while this call waited: attach nothing
            if binding.lost is not None:
                raise binding.lost
            if binding.run_id is not None:
                return True
            client = binding.client
            try:
                session = client.get_session(self.berth_id)
            except berth.NotFound:
                if not create:
                    return False
                try:
                    session = client.create_session(
                        self.berth_id, title=self.session_id, labels=self._labels, policy=self._policy
                    )
                except berth.AlreadyExists:
                    session = client.get_session(self.berth_id)
            mode = (session.header.policy.concurrency or {}).get("mode", "serial")
            wanted = self._policy["concurrency"]["mode"]
            if mode != wanted:
                raise SessionModeMismatch(
                    f"session {self.session_id!r} was created {mode!r}; this BerthSession is "
                    f"{'exclusive (serial)' if self.exclusive else 'parallel'}: open it with exclusive={mode == 'serial'}"
                )
            outcome = self._resume(client)
            binding.run_id = outcome.attachment.run_id
            binding.stop.clear()
            binding.heartbeat = threading.Thread(
                target=_beat,
                args=(client, self.berth_id, binding, self._heartbeat_s),
                name=f"berth-heartbeat-{self.berth_id}",
                daemon=True,
            )
            binding.heartbeat.start()
            return True

    def _resume(self, client: berth.Client) -> berth.ResumeOutcome:
        """`resume`, waiting out another process's write handle on an embedded store (the
        client waits so for appends; a resume that found the log busy detached its run
        again, so it is safe to repeat). A `Busy` from the concurrency policy — another
        object holds an exclusive session — is raised at once."""
        wait_s = getattr(getattr(client, "_transport", None), "busy_wait_s", 10.0)
        deadline = time.monotonic() + wait_s
        delay = 0.02
        while True:
            try:
                return client.resume(self.berth_id, on_busy="reject")
            except berth.WriterBusy:
                # Another process's write handle (`writer_busy`); the policy's refusal is
                # a plain `Busy` and is raised at once.
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay * (0.5 + random.random()))
                delay = min(0.5, delay * 2)

    def _run_id(self, binding: _Binding) -> str | None:
        """The binding's run for a write; `SessionClosed` when `close()` released it after
        this call attached (the write would go out with no run)."""
        run_id = binding.run_id
        if run_id is None:
            self._check_open()
        return run_id

    def _append(self, binding: _Binding, events: list[dict[str, Any]], **options: Any) -> berth.AppendOutcome:
        try:
            return binding.client.append(self.berth_id, events, run=self._run_id(binding), **options)
        except berth.OwnershipLost as error:
            binding.lost = error
            raise

    async def _aappend(self, binding: _Binding, events: list[dict[str, Any]], **options: Any) -> berth.AppendOutcome:
        try:
            call = calls.append(self.berth_id, events, run=self._run_id(binding), **options)
            return await binding.client._aexecute(call)
        except berth.OwnershipLost as error:
            binding.lost = error
            raise

    def _collect(self, binding: _Binding, limit: int | None) -> tuple[list[tuple[int, Any]], int]:
        """The latest `limit` live items as (seq, item), oldest first, and the log's end,
        read backwards page by page (pops are markers after their targets, so reading
        backwards meets a pop before the item it removes). Leaves what it read as the
        binding's view, for the next `get_items`. The collector is paused meanwhile: a
        whole session's items are made and held at once (`calls.collector_paused`)."""
        with calls.collector_paused():
            found, kept, end, last_key, complete = self._read_back(binding, limit)
        binding.keep_view(_View(end, last_key, kept, complete))
        return found, end

    def _read_back(
        self, binding: _Binding, limit: int | None
    ) -> tuple[list[tuple[int, Any]], list[tuple[int, str | _Unmade]], int, str | None, bool]:
        """The items as `_collect` says, what the view keeps of each (its text, or where
        it is in its page's raw answer), the log's end, its last key, and `complete`."""
        popped: set[int] = set()
        repaired_calls: set[str] = set()
        found: list[tuple[int, Any]] = []
        kept: list[tuple[int, str | _Unmade]] = []
        # Markers are rare: the first page is the items asked for and a little slack;
        # each further page doubles (berth's read cost grows with the events returned).
        page_size = 1000 if limit is None else min(1000, limit + 8)
        before = berth.SEQ_END
        end: int | None = None
        last_key: str | None = None
        client = binding.client

        # A whole read fetches the page before this one on a worker thread while this
        # thread decodes and walks this one. Its end is this page's first seq: known now
        # after the first page (seqs are contiguous, so a read of `page_size` before
        # `before` starts at `before - page_size`), once decoded for the first. A
        # prediction the page does not bear out is dropped and the page read again.
        def read_ahead(end: int, size: int) -> tuple[int, Callable[[], calls.Answer]] | None:
            if limit is not None or end == 0:
                return None
            return end, ahead(read_ahead_pool(), _fetch_before, client, self.berth_id, end, size)

        answer = _fetch_before(client, self.berth_id, before, page_size)
        while True:
            next_size = min(1000, page_size * 2)
            predicted = None if before == berth.SEQ_END else max(0, before - page_size)
            upcoming = None if predicted is None else read_ahead(predicted, next_size)
            # The page's events as decoded JSON, not `berth.Event`s: the walk reads only
            # their seq, type and data.
            raw, body = answer.json(), answer.body
            events = raw["events"]
            if predicted is None:
                upcoming = read_ahead(raw["first_seq"], next_size)
            if end is None:
                end = raw["next_seq"]
                last_key = events[-1].get("idempotency_key") if events else None
            for position in range(len(events) - 1, -1, -1):
                wire = events[position]
                seq, event_type, data = wire["seq"], wire["type"], wire.get("data")
                if event_type == CLEAR_TYPE:
                    found.reverse()
                    kept.reverse()
                    return found, kept, end, last_key, True
                if event_type == POP_TYPE:
                    if isinstance(data, dict) and isinstance(data.get("target"), int):
                        popped.add(data["target"])
                    continue
                stored = isinstance(data, dict) and _stores_item(event_type, data)
                item = _stored_item(data) if stored else _presented_item(event_type, data, repaired_calls)
                if item is None or seq in popped:
                    continue
                found.append((seq, item))
                # A stored item is made text later, from the raw answer; a presented one
                # (a repair's call or output) is made here.
                kept.append((seq, (body, position) if stored else _dumps(item)))
                if limit is not None and len(found) >= limit:
                    found.reverse()
                    kept.reverse()
                    return found, kept, end, last_key, False
            if raw["first_seq"] == 0 or not events:
                found.reverse()
                kept.reverse()
                return found, kept, end, last_key, True
            before = raw["first_seq"]
            page_size = next_size
            if upcoming is not None and upcoming[0] == before:
                answer = upcoming[1]()
            else:
                answer = _fetch_before(client, self.berth_id, before, page_size)

    def _probe(self) -> calls.Call[berth.EventPage]:
        """The read a kept view is checked with: the log's newest `PROBE_EVENTS` events."""
        return calls.read(self.berth_id, before=berth.SEQ_END, limit=PROBE_EVENTS)

    @staticmethod
    def _answer_from_view(binding: _Binding, view: _View, probe: berth.EventPage, limit: int | None) -> list[Any] | None:
        """The latest `limit` items from `view`, kept again, if the probe shows it still
        describes the log; None when it does not (the view is dropped)."""
        if BerthSession._view_matches(view, probe) and view.covers(limit):
            with calls.collector_paused():
                texts = view.texts(limit)
                binding.keep_view(view)
                return [json.loads(text) for text in texts]
        return None

    @staticmethod
    def _view_matches(view: _View, page: berth.EventPage) -> bool:
        """True when the view still describes the log whose newest events are `page`: it
        ends with the event the view saw last, or with at most a few events after it,
        folded in now."""
        if page.next_seq < view.end:
            return False  # shorter: deleted and made again
        if view.end > 0:
            seen = [event for event in page.events if event.seq == view.end - 1]
            if not seen or seen[0].idempotency_key is None or seen[0].idempotency_key != view.last_key:
                return False  # more new events than the probe holds, or another log
        elif page.next_seq > len(page.events):
            return False
        return view.fold([event for event in page.events if event.seq >= view.end])

    def _get_items(self, binding: _Binding, limit: int | None) -> list[Any]:
        if not self._join(binding, create=False):
            return []
        view = binding.take_view()
        # A view too short for the answer is not checked: a backward read is needed anyway.
        if view is not None and view.covers(limit):
            answer = self._answer_from_view(binding, view, binding.client._execute(self._probe()), limit)
            if answer is not None:
                return answer
        items, _ = self._collect(binding, limit)
        return [item for _, item in items]

    def _pop_item(self, binding: _Binding) -> Any | None:
        if not self._join(binding, create=False):
            return None
        while True:
            taken = self._pop_from_view(binding)
            if taken is not None:
                return taken[0]
            # A backward read, which leaves up to `POP_VIEW_ITEMS` items as the view: the
            # pops after this one claim from it, each after the probe, instead of reading
            # back past every pop before them (their markers and the items they took).
            items, end = self._collect(binding, POP_VIEW_ITEMS)
            if not items:
                return None
            target, item = items[-1]
            if self._claim(binding, target, end):
                # The view `_collect` left ends before the claim: the next read folds it in.
                return item
            binding.take_view()  # someone appended (perhaps popped) first: read again

    def _pop_from_view(self, binding: _Binding) -> tuple[Any | None] | None:
        """Pops from the view this object kept, if the probe shows it still describes the
        log: `(item,)`, or `(None,)` when the view holds every item and there are none;
        None when a backward read must decide (no view, one too short, a claim lost)."""
        view = binding.take_view()
        if view is None or not view.covers(1):
            return None
        if not self._view_matches(view, binding.client._execute(self._probe())) or not view.covers(1):
            return None
        if not view.items:
            binding.keep_view(view)
            return (None,)
        target = view.items[-1][0]
        # The newest items made text together: each page they are in parsed once for all
        # of them, not once a pop.
        text = view.texts(POP_VIEW_ITEMS)[-1]
        if not self._claim(binding, target, view.end):
            return None
        binding.keep_view(view)  # ends before the claim: the next read folds it in
        return (json.loads(text),)

    def _claim(self, binding: _Binding, target: int, end: int) -> bool:
        """Appends the pop of the item at seq `target` if the log still ends at `end`;
        False when someone appended first."""
        # The nonce makes the claim this caller's own: berth answers an identical batch
        # at the same seq as a duplicate, whoever sent it.
        claim = uuid.uuid4().hex
        marker = {"type": POP_TYPE, "data": {"target": target, "claim": claim}, "ignorable": True}
        try:
            self._append(binding, [marker], expected_seq=end, idempotency_key=f"openai-pop-{claim}")
        except berth.SeqConflict:
            return False
        return True

    def _clear(self, binding: _Binding) -> None:
        if not self._join(binding, create=False):
            return
        claim = uuid.uuid4().hex
        self._append(binding, [{"type": CLEAR_TYPE, "data": {"claim": claim}, "ignorable": True}])
        binding.open_turn = None

    def _delete(self, binding: _Binding) -> None:
        self._finalizer()
        try:
            binding.client.delete_session(self.berth_id)
        except berth.NotFound:
            pass
        self._finalizer = weakref.finalize(self, _release, self._bindings, self.berth_id)

    def _record_tool_start(self, binding: _Binding, call_id: str, name: str, arguments: Any) -> None:
        self._join(binding, create=True)
        events: list[dict[str, Any]] = []
        if binding.open_turn is None:
            binding.open_turn = binding.turns
            binding.turns += 1
            events.append({"type": "turn/start", "data": {"turn": binding.open_turn}})
        events.append(
            {"type": "tool/call", "data": {"call_id": call_id, "name": name, "arguments": arguments, "in_flight": True}}
        )
        self._append(binding, events)


class BerthRunHooks(RunHooks[Any]):
    """Records each function tool's start in berth before it runs (see `run_hooks`)."""

    def __init__(self, session: BerthSession) -> None:
        self._session = session

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        call_id = getattr(context, "tool_call_id", None)
        name = getattr(context, "tool_name", None) or getattr(tool, "name", None)
        if not _nonempty(call_id) or not _nonempty(name):
            return  # not a function tool call (no call id to repair against)
        arguments = getattr(context, "tool_arguments", None)
        binding = self._session._binding(context)
        await _on_worker(
            self._session._record_tool_start, binding, call_id, name, arguments if arguments is not None else ""
        )


__all__ = [
    "ACTIVITY_TTL_MS_FOREVER", "BerthRunHooks", "BerthSession", "CLEAR_TYPE", "ITEM_TYPE", "LABEL", "POP_TYPE",
    "RUN_LEASE_TTL_MS_DEFAULT", "SessionClosed", "SessionModeMismatch", "decode_session_id", "encode_session_id", "event_for_item",
]
