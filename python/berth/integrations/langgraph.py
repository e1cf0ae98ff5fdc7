"""LangGraph checkpointers on berth: `BerthSaver` (sync) and `AsyncBerthSaver` (async).

The one-line swap: `graph.compile(checkpointer=BerthSaver(berth.Client(url)))` instead of
`InMemorySaver()` / `SqliteSaver(...)`.

Layout (one LangGraph thread = one berth session, labelled `langgraph`, titled with the
thread id; every saver call is one atomic append):

| event type      | data |
|-----------------|------|
| `lg/blob`       | a channel value: `{ns, c, v, t, b}` (serde type, base64), or a list as its items `{ns, c, v, items: [[t, b]…]}`, or — when it extends the previous version — `{ns, c, v, base: [version, seq], chain or full, items}`: only the appended suffix, with the seqs of the links below it (`full`: all of them, every ANCHOR_EVERY-th link; `chain`: back to that anchor); a large value is split into `{…, part, of}` events of one batch |
| `lg/checkpoint` | `{ns, id, parent, cp, md, run_id, at: {channel: seq}, top?: [first, seq]}`: `at` names the seq holding each channel's version that is not in this batch; `top`: the writer's fold (the log up to `first`) had no newer checkpoint of `ns` and none with this id's writes, and expected it at `seq` |
| `lg/writes`     | `{ns, cp, task, path, w: [[idx, channel, t, b]…]}` (dedupe per (task, idx); negative idx upserts) |
| `lg/prune`      | `{keep: {ns: checkpoint_id}}` (keep_latest, logical) |
| `lg/drop-runs`  | `{runs: [...]}` (delete_for_runs, logical) |

Reads fold the log into a per-thread index that the saver keeps and refreshes with
`from=next_seq` (the log is append-only, so the refresh is always correct); a saver with
no fold of the thread answers `get_tuple` of the latest checkpoint from the tail and
point reads instead (`_Core.latest_by_points`). The I/O is
written once, as generators of berth calls, and driven by a sync or an async client.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import hashlib
import json
import operator
import random
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)

import berth
from berth import _calls as calls
from berth._errors import BerthError, Unavailable

from ._drive import Io, drive_async as _drive_async, drive_sync as _drive_sync

__all__ = ["AsyncBerthSaver", "AsyncBerthStore", "BerthSaver", "BerthStore", "ModeMismatch", "thread_session_id"]

LABEL = "langgraph"
#: Ten years: sessions live as LangGraph expects (a tenant's retention policy still applies).
FOREVER_MS = 10 * 365 * 24 * 3600 * 1000
EVENT_BYTES_MAX = 1 << 20
BATCH_BYTES_MAX = 8 << 20
BATCH_EVENTS_MAX = 1000
#: Base64 characters per `lg/blob` part: a part's JSON stays well under 1 MiB.
PART_CHARS = 768 * 1024
#: Every ANCHOR_EVERY-th link of a suffix chain is an anchor: it lists the seqs of all
#: its ancestors (`full`); the links between list the seqs back to their anchor (`chain`).
#: A reader rebuilds any version with three point reads, and the lists cost about
#: n·K/2 + n²/2K seqs for a chain of n links (K = 64: ~95,000 seqs for 2,000 steps).
ANCHOR_EVERY = 64
#: How many checkpoints' `channel_versions` a saver remembers (`_Core._channel_versions`).
VERSIONS_KEPT = 8
#: A cold `get_tuple` of the latest checkpoint reads at most this many tail events
#: looking for it before it replays the whole log instead.
TAIL_SCAN_EVENTS_MAX = 2000
_SAFE_ID = re.compile(r"[A-Za-z0-9._-][A-Za-z0-9._~-]{0,127}")


class ModeMismatch(berth.Invalid):
    """The thread's session was created with the other concurrency mode (`exclusive`)."""

    code = "mode_mismatch"


def thread_session_id(thread_id: str, prefix: str = "") -> str:
    """The berth session id of a LangGraph thread: ids berth accepts pass through (unless
    they start with `~`); others are base64url behind `~`; over-long ones are hashed
    behind `~~` (the session's title keeps the thread id, and listings use it). `prefix`
    is part of the id, so savers with different prefixes never see each other's threads."""
    raw = f"{prefix}{thread_id}"
    if _SAFE_ID.fullmatch(raw) and raw not in (".", ".."):
        return raw
    encoded = "~" + base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii").rstrip("=")
    if len(encoded) <= 128:
        return encoded
    return "~~" + hashlib.sha256(raw.encode("utf-8")).hexdigest()


_IMMUTABLE = (str, int, float, bool, bytes, type(None))
#: The snapshot of an immutable item: identity says it all.
_SAME: Any = object()


def _snapshot(item: Any) -> Any:
    """What `_unchanged` compares an item against later: its fields (an object's
    `__dict__`, a dict's items, a list's or tuple's elements), lists and dicts among them
    copied one level. None: an item whose changes cannot be seen this way (it is then
    serialized again)."""
    if isinstance(item, _IMMUTABLE):
        return _SAME
    kind = type(item)
    if kind is dict:
        fields = item
    elif kind is list or kind is tuple:
        return [value.copy() if type(value) in (list, dict) else value for value in item]
    elif isinstance(item, (dict, list, tuple)):
        return None  # a subclass: its contents and its attributes are not both seen here
    else:
        fields = getattr(item, "__dict__", None)
        if type(fields) is not dict:
            return None
    return {key: value.copy() if type(value) in (list, dict) else value for key, value in fields.items()}


def _unchanged(snapshot: Any, item: Any) -> bool:
    if snapshot is _SAME:
        return True
    if snapshot is None:
        return False
    kind = type(item)
    if kind is dict:
        return item == snapshot
    if kind is list or kind is tuple:
        return list(item) == snapshot
    return vars(item) == snapshot


def _prefix_unchanged(value: list[Any], objects: list[Any], snapshots: list[Any]) -> bool:
    """`value` starts with `objects` (the same objects), each unchanged since its
    snapshot. Loops in C where it can: this runs on every put, over the whole list."""
    count = len(objects)
    prefix = value[:count]
    if not all(map(operator.is_, prefix, objects)):
        return False
    try:
        # Objects with fields (messages): their `__dict__` against the snapshot.
        return all(map(operator.eq, map(vars, prefix), snapshots))
    except TypeError:  # an item without `__dict__` (a str, a dict…): one by one
        return all(map(_unchanged, snapshots, prefix))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _list_blob_fits(data: dict[str, Any]) -> bool:
    """Whether a list blob's JSON is under the event limit (less a margin), as
    `_json_size(data) < EVENT_BYTES_MAX - 4096` says, without encoding every put's list
    when a bound already answers: base64 needs no escaping, and a serde type name of n
    characters is at most 6n bytes in JSON."""
    limit = EVENT_BYTES_MAX - 4096
    rest = {key: value for key, value in data.items() if key != "items"}
    bound = _json_size(rest) + 16 + sum(6 * len(t) + len(b) + 8 for t, b in data["items"])
    return bound < limit or _json_size(data) < limit


class _Own:
    """One of this saver's own appended events, folded without reading it back."""

    __slots__ = ("type", "data", "seq")

    def __init__(self, kind: str, data: Any, seq: int) -> None:
        self.type, self.data, self.seq = kind, data, seq


class _Thread:
    """What the log of one thread says, folded up to `next_seq`."""

    def __init__(self) -> None:
        self.next_seq = 0
        #: The session's `created_at` when it was first read (None: not yet read).
        self.created_at: int | None = None
        # (ns, channel, version) -> (seq, stored) ; stored: ("typed", t, base64) |
        # ("items", base_key | None, [(t, base64)…]) | ("empty",). Values stay base64
        # text until a read needs them, so folding a long log decodes nothing.
        self.blobs: dict[tuple[str, str, Any], tuple[int, tuple[Any, ...]]] = {}
        self.parts: dict[tuple[str, str, Any], list[str]] = {}
        # ns -> checkpoint id -> record
        self.checkpoints: dict[str, dict[str, dict[str, Any]]] = {}
        # (ns, checkpoint id) -> (task, idx) -> (task, channel, t, base64, path)
        self.writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, str, str, str, str]]] = {}
        # A list blob's place in its suffix chain: (depth, seqs from its anchor to its
        # base) — the `chain` its child stores; () for an anchor (depth % ANCHOR_EVERY == 0).
        self.links: dict[tuple[str, str, Any], tuple[int, tuple[int, ...]]] = {}
        # (ns, channel) -> (version, seq, items, snapshots): the list this saver last stored
        # for the channel, as objects, so the next version's stored prefix is recognized
        # by identity (and an unchanged snapshot) instead of by serializing it again.
        self.lists: dict[tuple[str, str], tuple[Any, int, list[Any], list[Any]]] = {}
        self._newest: dict[str, str] = {}

    def apply(self, event: berth.Event | _Own) -> None:
        data = event.data if isinstance(event.data, dict) else {}
        kind = event.type
        if kind == "lg/blob":
            key = (data["ns"], data["c"], data["v"])
            if "part" in data:
                parts = self.parts.setdefault(key, [])
                parts.append(data["b"])
                if len(parts) < data["of"]:
                    return
                del self.parts[key]
                self.blobs[key] = (event.seq, ("typed", data["t"], "".join(parts)))
            elif "items" in data:
                base = data.get("base")
                base_key = (data["ns"], data["c"], base[0]) if base else None
                items = [(t, b) for t, b in data["items"]]
                self.blobs[key] = (event.seq, ("items", base_key, items))
                self.links[key] = self._link(base_key)
            elif data.get("t") == "empty":
                self.blobs[key] = (event.seq, ("empty",))
            else:
                self.blobs[key] = (event.seq, ("typed", data["t"], data["b"]))
        elif kind == "lg/checkpoint":
            record = {
                "seq": event.seq,
                "parent": data.get("parent"),
                "cp": (data["cp"][0], data["cp"][1]),
                "md": (data["md"][0], data["md"][1]),
                "run_id": data.get("run_id"),
            }
            self.checkpoints.setdefault(data["ns"], {})[data["id"]] = record
            newest = self._newest.get(data["ns"])
            if newest is not None and newest < data["id"]:
                self._newest[data["ns"]] = data["id"]
        elif kind == "lg/writes":
            stored = self.writes.setdefault((data["ns"], data["cp"]), {})
            for idx, channel, t, b in data["w"]:
                key = (data["task"], idx)
                if idx >= 0 and key in stored:
                    continue
                stored[key] = (data["task"], channel, t, b, data.get("path", ""))
        elif kind == "lg/prune":
            for ns, keep in data.get("keep", {}).items():
                for checkpoint_id in list(self.checkpoints.get(ns, {})):
                    if checkpoint_id != keep:
                        self._drop(ns, checkpoint_id)
        elif kind == "lg/drop-runs":
            runs = set(data.get("runs", []))
            for ns, checkpoints in list(self.checkpoints.items()):
                for checkpoint_id, record in list(checkpoints.items()):
                    if record["run_id"] is not None and record["run_id"] in runs:
                        self._drop(ns, checkpoint_id)
        # Anything else (berth's own `session/end-seed` after a fork, newer types) is skipped.

    def _link(self, base_key: tuple[str, str, Any] | None) -> tuple[int, tuple[int, ...]]:
        """The chain place of a list blob whose base is `base_key` (None: a whole list)."""
        if base_key is None:
            return (0, ())
        parent = self.links.get(base_key)
        found = self.blobs.get(base_key)
        if parent is None or found is None:
            return (0, ())  # a base this fold never saw: the chain is not indexable
        depth = parent[0] + 1
        if depth % ANCHOR_EVERY == 0:
            return (depth, ())
        return (depth, parent[1] + (found[0],))

    def ancestors(self, key: tuple[str, str, Any]) -> list[int]:
        """The seqs of every link below the list blob `key`, oldest first."""
        seqs: list[int] = []
        stored = self.blobs[key][1]
        while stored[0] == "items" and stored[1] is not None:
            parent = self.blobs.get(stored[1])
            if parent is None:
                break
            seqs.append(parent[0])
            stored = parent[1]
        seqs.reverse()
        return seqs

    def newest(self, ns: str) -> str | None:
        """The largest visible checkpoint id of `ns` (None: none), kept as the fold goes."""
        if ns not in self._newest:
            checkpoints = self.checkpoints.get(ns)
            if not checkpoints:
                return None
            self._newest[ns] = max(checkpoints)
        return self._newest[ns]

    def _drop(self, ns: str, checkpoint_id: str) -> None:
        self._newest.pop(ns, None)  # recomputed when next asked
        self.checkpoints.get(ns, {}).pop(checkpoint_id, None)
        self.writes.pop((ns, checkpoint_id), None)

    def resolve(self, key: tuple[str, str, Any]) -> tuple[str, Any] | None:
        """A blob as ("typed", (t, base64)) or ("items", [(t, base64)…]); None if absent
        or empty. A delta chain is walked back to its full list."""
        found = self.blobs.get(key)
        if found is None or found[1][0] == "empty":
            return None
        stored = found[1]
        if stored[0] == "typed":
            return ("typed", (stored[1], stored[2]))
        suffixes = []
        while stored[0] == "items":
            suffixes.append(stored[2])
            if stored[1] is None:
                break
            parent = self.blobs.get(stored[1])
            if parent is None or parent[1][0] != "items":
                raise berth.Damaged(f"langgraph: the base of channel {key[1]} version {key[2]} is missing")
            stored = parent[1]
        items: list[tuple[str, str]] = []
        for suffix in reversed(suffixes):
            items.extend(suffix)
        return ("items", items)



#: `latest_by_points` could not answer exactly: fold the log.
_REPLAY: Any = object()


def _blob_needs(event: berth.Event) -> list[int] | None:
    """The seqs a point reader must also read to rebuild this `lg/blob`: the earlier
    parts of a split value, or the links below a suffix (`full` of an anchor, else
    `chain`). None: a suffix stored without them (an older saver), so only a fold can."""
    data = event.data if isinstance(event.data, dict) else {}
    if "part" in data:
        return list(range(event.seq - int(data["part"]), event.seq))
    if data.get("base"):
        if "full" in data:
            return [int(seq) for seq in data["full"]]
        if "chain" in data:
            return [int(seq) for seq in data["chain"]]
        return None
    return []


#: Makes one saver call's events from the thread's folded state (None: no log yet).
Build = Callable[[_Thread | None], list[tuple[str, Any]]]


class _Ungroupable(Exception):
    """A group's builds met a thread with no folded state: they go one at a time."""


class _Core:
    """The saver's logic, written once as generators of berth calls (`yield call` sends
    it and answers the result, or raises the berth error into the generator).

    Shared, all but `serde`, by a saver and the copies `with_allowlist` makes of it
    (`with_serde`): they hold one run. So no attribute is rebound after `__init__`, only
    mutated, or a copy would go on with the old value."""

    def __init__(
        self,
        serde: Any,
        *,
        prefix: str,
        exclusive: bool,
        run_lease_ttl_ms: int,
        activity_ttl_ms: int,
        runs_max: int,
    ) -> None:
        self.serde = serde
        self.prefix = prefix
        self.exclusive = exclusive
        self.run_lease_ttl_ms = run_lease_ttl_ms
        self.activity_ttl_ms = activity_ttl_ms
        self.runs_max = runs_max
        self.run_id = f"lg-{uuid.uuid4().hex}"
        self.threads: dict[str, _Thread] = {}
        self.attached: set[str] = set()
        # Exclusive threads whose run was lost between writes (a failed heartbeat): the
        # next write there reports it instead of attaching again as if nothing happened.
        self.lost: set[str] = set()
        #: session id -> `created_at` of the session this saver attached to.
        self.created_at: dict[str, int] = {}
        self.lock = threading.RLock()
        #: A stored checkpoint's base64 text -> its `channel_versions`, for the last few
        #: this saver serialized (`_channel_versions`), oldest first.
        self.versions: dict[str, dict[str, Any]] = {}
        #: (ns, channel, version) -> (items, snapshots) of the list blobs the batch being
        #: built stores; remembered in the thread's `lists` once the batch is folded.
        self.pending_lists: dict[tuple[str, str, Any], tuple[list[Any], list[Any]]] = {}

    def with_serde(self, serde: Any) -> _Core:
        """This core for a saver that (de)serializes with `serde`: the same run, threads,
        caches and lock — every other attribute is the same object — and its own serde."""
        shared = copy.copy(self)
        shared.serde = serde
        return shared

    # ids
    def session_id(self, thread_id: str) -> str:
        return thread_session_id(str(thread_id), self.prefix)

    def policy(self) -> dict[str, Any]:
        concurrency = {"mode": "serial"} if self.exclusive else {"mode": "parallel", "runs_max": self.runs_max}
        return {"concurrency": concurrency, "activity_ttl_ms": self.activity_ttl_ms,
                "run_lease_ttl_ms": self.run_lease_ttl_ms}

    # reading
    def refresh(self, thread_id: str) -> Io:
        """The thread's folded state, brought up to date; None when the thread has no session."""
        session_id = self.session_id(thread_id)
        state = self.threads.get(session_id) or _Thread()
        try:
            # The session's identity: a thread deleted and re-created by another saver
            # is a new log, and a cache of the old one must not be extended with it.
            session = yield calls.get_session(session_id)
        except berth.NotFound:
            session = None
        if session is None:
            self.threads.pop(session_id, None)
            self.attached.discard(session_id)
            return None
        if state.created_at is not None and state.created_at != session.header.created_at:
            state = _Thread()
            self.attached.discard(session_id)
        state.created_at = session.header.created_at
        while True:
            try:
                page = yield calls.read(session_id, from_seq=state.next_seq, limit=calls.READ_PAGE_MAX)
            except berth.NotFound:
                self.threads.pop(session_id, None)
                self.attached.discard(session_id)
                return None
            for event in page.events:
                state.apply(event)
            state.next_seq = page.next_seq
            if len(page.events) < calls.READ_PAGE_MAX:
                break
        self.threads[session_id] = state
        return state

    def thread_ids(self) -> Io:
        """Every thread of this saver (label `langgraph`, this prefix), by session listing."""
        found: list[str] = []
        cursor = None
        while True:
            page = yield calls.list_sessions(label=LABEL, include_blank=True, cursor=cursor, limit=200)
            for session in page.items:
                title = session.title
                if title is not None and self.session_id(title) == session.id:
                    found.append(title)
            if page.next_cursor is None:
                return found
            cursor = page.next_cursor

    def _value(self, state: _Thread, key: tuple[str, str, Any]) -> tuple[bool, Any]:
        resolved = state.resolve(key)
        if resolved is None:
            return False, None
        if resolved[0] == "typed":
            return True, self._load(resolved[1])
        items = resolved[1]
        if items and all(t == "msgpack" for t, _ in items):
            # One decode of the whole list: a msgpack array header before the items'
            # own encodings is the list's encoding (what a saver storing it whole keeps).
            count = len(items)
            header = bytes([0xDC]) + count.to_bytes(2, "big") if count < 1 << 16 else bytes([0xDD]) + count.to_bytes(4, "big")
            return True, self.serde.loads_typed(("msgpack", header + b"".join(_unb64(b) for _, b in items)))
        return True, [self._load(item) for item in items]

    def _load(self, typed: tuple[str, str]) -> Any:
        return self.serde.loads_typed((typed[0], _unb64(typed[1])))

    def _channel_versions(self, typed: tuple[str, str]) -> dict[str, Any]:
        """A stored checkpoint's `channel_versions`: remembered for the checkpoints this
        saver serialized last (a put's parent is usually its previous put), else loaded."""
        found = self.versions.get(typed[1])
        if found is None:
            found = self._load(typed).get("channel_versions", {})
        return found

    def _remember_versions(self, text: str, versions: dict[str, Any]) -> None:
        self.versions[text] = versions
        while len(self.versions) > VERSIONS_KEPT:
            del self.versions[next(iter(self.versions))]

    def _tuple(self, thread_id: str, state: _Thread, ns: str, checkpoint_id: str) -> CheckpointTuple:
        record = state.checkpoints[ns][checkpoint_id]
        checkpoint = self._load(record["cp"])
        values = {}
        for channel, version in checkpoint["channel_versions"].items():
            present, value = self._value(state, (ns, channel, version))
            if present:
                values[channel] = value
        stored = state.writes.get((ns, checkpoint_id), {})
        ordered = sorted(stored.items(), key=lambda item: writes_sort_key(item[1][4], item[0][0], item[0][1]))
        pending = [(task, channel, self._load((t, b))) for _, (task, channel, t, b, _) in ordered]
        parent = record["parent"]
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}},
            checkpoint={**checkpoint, "channel_values": values},
            metadata=self._load(record["md"]),
            parent_config=(
                {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}}
                if parent
                else None
            ),
            pending_writes=pending,
        )

    def get_tuple(self, config: RunnableConfig) -> Io:
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "")
        if self.session_id(thread_id) not in self.threads:
            # Cold (nothing folded yet): the latest checkpoint from the tail and point reads.
            found = yield from self.latest_by_points(thread_id, ns, get_checkpoint_id(config))
            if found is not _REPLAY:
                return found
        state = yield from self.refresh(thread_id)
        if state is None:
            return None
        checkpoints = state.checkpoints.get(ns) or {}
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id:
            if checkpoint_id not in checkpoints:
                return None
        elif checkpoints:
            checkpoint_id = max(checkpoints)
        else:
            return None
        return self._tuple(thread_id, state, ns, checkpoint_id)

    def latest_by_points(self, thread_id: str, ns: str, wanted: str | None) -> Io:
        """The latest checkpoint of `ns` (or `wanted`, if that is it) without folding the
        log: the tail is read backwards to the newest `lg/checkpoint` whose `top` claim
        holds (it was stored where its writer expected, so its writer's fold was the
        whole log before it and it was the namespace's newest then), the events after it
        are folded, and the channel versions it names in `at` — with their suffix chains,
        by `chain` / `full` — are point-read (`read_at`, by seq). `_REPLAY` whenever that
        cannot answer exactly what the fold would (no valid claim in the first
        `TAIL_SCAN_EVENTS_MAX` events, a newer or hidden checkpoint after it, a chain
        written without its seqs, another checkpoint wanted): the caller then folds."""
        session_id = self.session_id(thread_id)
        tail: list[berth.Event] = []
        before, limit, scanned = calls.SEQ_END, 64, 0
        claim: berth.Event | None = None
        while claim is None:
            try:
                page = yield calls.read(session_id, before=before, limit=limit)
            except berth.NotFound:
                return None
            tail[:0] = page.events
            scanned += len(page.events)
            for event in reversed(page.events):
                data = event.data if isinstance(event.data, dict) else {}
                top = data.get("top")
                if (event.type == "lg/checkpoint" and data.get("ns") == ns and isinstance(top, list)
                        and len(top) == 2 and top[1] == event.seq):
                    claim = event
                    break
            if claim is not None:
                break
            if page.first_seq == 0 or not page.events:
                # The whole log is in hand: fold it (no further reads).
                state = _Thread()
                for event in tail:
                    state.apply(event)
                return self._answer(thread_id, state, ns, wanted)
            if scanned >= TAIL_SCAN_EVENTS_MAX:
                return _REPLAY
            before, limit = page.first_seq, min(calls.READ_PAGE_MAX, limit * 4)
        first = claim.data["top"][0]
        if tail and first < tail[0].seq:
            try:
                page = yield calls.read(session_id, from_seq=first, before=tail[0].seq)
            except berth.NotFound:
                return None
            tail[:0] = page.events
        batch = [event for event in tail if event.seq >= first]
        after = _Thread()
        for event in batch:
            after.apply(event)
        checkpoints = after.checkpoints.get(ns, {})
        cp_id = claim.data["id"]
        if (not checkpoints or max(checkpoints) != cp_id or checkpoints[cp_id]["seq"] != claim.seq
                or (wanted and wanted != cp_id)):
            return _REPLAY  # a newer checkpoint after it, or it was hidden, or another one wanted
        versions = self._load(checkpoints[cp_id]["cp"]).get("channel_versions", {})
        at = claim.data.get("at") or {}
        fetched: dict[int, berth.Event] = {}
        wanted_seqs: set[int] = set()
        for channel, version in versions.items():
            key = (ns, channel, version)
            if key not in after.blobs:
                if channel not in at:
                    return _REPLAY  # its writer did not know where this version is
                wanted_seqs.add(at[channel])
        for event in batch:
            if event.type == "lg/blob":
                more = _blob_needs(event)
                if more is None:
                    return _REPLAY
                wanted_seqs.update(more)
        in_hand = {event.seq: event for event in tail if event.seq < first}
        while True:
            wanted_seqs = {seq for seq in wanted_seqs if seq not in fetched and seq < first}
            if not wanted_seqs:
                break
            found = [in_hand[seq] for seq in wanted_seqs if seq in in_hand]
            ordered = sorted(seq for seq in wanted_seqs if seq not in in_hand)
            for start in range(0, len(ordered), calls.READ_PAGE_MAX):
                try:
                    page = yield calls.read_at(session_id, ordered[start:start + calls.READ_PAGE_MAX])
                except berth.NotFound:
                    return _REPLAY  # deleted meanwhile, or a seq past the end: fold whatever is there
                found.extend(page.events)
            wanted_seqs = set()
            for event in found:
                if event.type != "lg/blob":
                    return _REPLAY
                more = _blob_needs(event)
                if more is None:
                    return _REPLAY
                fetched[event.seq] = event
                wanted_seqs.update(more)
        state = _Thread()
        for seq in sorted(fetched):
            state.apply(fetched[seq])
        for event in batch:
            state.apply(event)
        try:
            return self._tuple(thread_id, state, ns, cp_id)
        except berth.Damaged:
            return _REPLAY

    def _answer(self, thread_id: str, state: _Thread, ns: str, wanted: str | None) -> CheckpointTuple | None:
        checkpoints = state.checkpoints.get(ns) or {}
        if wanted:
            return self._tuple(thread_id, state, ns, wanted) if wanted in checkpoints else None
        return self._tuple(thread_id, state, ns, max(checkpoints)) if checkpoints else None

    def list(
        self, config: RunnableConfig | None, filter: dict[str, Any] | None, before: RunnableConfig | None,
        limit: int | None,
    ) -> Io:
        if config is not None:
            thread_ids = [str(config["configurable"]["thread_id"])]
        else:
            thread_ids = yield from self.thread_ids()
        wanted_ns = config["configurable"].get("checkpoint_ns") if config else None
        wanted_id = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        found: list[CheckpointTuple] = []
        for thread_id in thread_ids:
            state = yield from self.refresh(thread_id)
            if state is None:
                continue
            for ns, checkpoints in state.checkpoints.items():
                if wanted_ns is not None and ns != wanted_ns:
                    continue
                for checkpoint_id in sorted(checkpoints, reverse=True):
                    if wanted_id and checkpoint_id != wanted_id:
                        continue
                    if before_id and checkpoint_id >= before_id:
                        continue
                    if filter:
                        metadata = self._load(checkpoints[checkpoint_id]["md"])
                        if not all(metadata.get(key) == value for key, value in filter.items()):
                            continue
                    if limit is not None and len(found) >= limit:
                        return found
                    found.append(self._tuple(thread_id, state, ns, checkpoint_id))
        return found

    # writing
    def ensure_run(self, session_id: str, thread_id: str) -> Io:
        """Creates the thread's session if needed and attaches this saver's run to it."""
        if session_id in self.attached:
            return
        if session_id in self.lost:
            self.lost.discard(session_id)  # reported once; a later write may take the thread again
            raise berth.OwnershipLost(
                f"langgraph: this saver's run on thread {thread_id!r} lapsed or was displaced; "
                "another writer may have written since",
                status=409,
                body={"code": "run_not_attached", "run": self.run_id},
            )
        try:
            session = yield calls.create_session(session_id, title=thread_id, labels=[LABEL], policy=self.policy())
        except berth.AlreadyExists:
            session = yield calls.get_session(session_id)
        mode = (session.header.policy.concurrency or {}).get("mode", "serial")
        wanted = "serial" if self.exclusive else "parallel"
        if mode != wanted:
            raise ModeMismatch(
                f"langgraph: thread {thread_id!r} was created {mode}; this saver is "
                f"{'exclusive' if self.exclusive else 'shared'} ({wanted})",
                status=409,
            )
        yield calls.attach(session_id, run_id=self.run_id, on_busy="reject")
        self.attached.add(session_id)
        self.created_at[session_id] = session.header.created_at
        cached = self.threads.get(session_id)
        if cached is not None and cached.created_at not in (None, session.header.created_at):
            del self.threads[session_id]  # a cache of a log that was deleted: read afresh

    def append(self, thread_id: str, build: Build, conditional: bool = False) -> Io:
        """One atomic append through this saver's run (attached on first write).

        `build` makes the events from the thread's cached state (it is not re-read: a
        write needs only this saver's own earlier writes, and a base another writer
        stored meanwhile is simply not used). If the thread turns out to be gone or
        re-created (NotFound, or our run is not attached there), the cache is dropped
        and the events are built again from a fresh read, so no event ever refers to
        seqs of a log that no longer exists. Our own events are folded in locally when
        nobody appended in between, so the next write needs no read. `conditional`: the
        batch is stored only at the end of the log the state was folded to
        (`expected_seq`; `SeqConflict` otherwise, nothing stored).
        """
        session_id = self.session_id(thread_id)
        for attempt in range(3):
            state = self.threads.get(session_id)
            if state is None:
                state = yield from self.refresh(thread_id)
            self.pending_lists.clear()
            start = state.next_seq if state is not None else 0
            events = build(state)
            if not events:
                return None
            yield from self.ensure_run(session_id, thread_id)
            if self.threads.get(session_id) is not state:
                # Attaching found a different log than the cache describes (deleted and
                # re-created meanwhile): build again from a fresh read.
                state = yield from self.refresh(thread_id)
                self.pending_lists.clear()
                start = state.next_seq if state is not None else 0
                events = build(state)
                if not events:
                    return None
            # The batch's size is its request body's: encoded once, for sending.
            call = calls.append(session_id, events, run=self.run_id, expected_seq=start if conditional else None)
            size = len(call.body or b"")
            if size > BATCH_BYTES_MAX or len(events) > BATCH_EVENTS_MAX:
                raise berth.LimitExceeded(
                    f"langgraph: one saver call would append {size} bytes in {len(events)} events "
                    f"(the batch limit is {BATCH_BYTES_MAX} bytes, {BATCH_EVENTS_MAX} events); nothing was stored",
                    status=413,
                    body={"code": "limit_exceeded", "limit_name": "batch_bytes", "limit": BATCH_BYTES_MAX,
                          "actual": size},
                )
            try:
                outcome = yield call
            except (berth.OwnershipLost, berth.NotFound):
                # The run lapsed (a long pause) or the thread was deleted meanwhile: a shared
                # saver attaches again; an exclusive one reports that it lost the thread.
                self.attached.discard(session_id)
                self.threads.pop(session_id, None)
                if self.exclusive or attempt == 2:
                    raise
                continue
            self._fold_own(session_id, events, outcome)
            folded = self.threads.get(session_id)
            if folded is not None and not outcome.duplicate:
                for (ns, channel, version), (objects, snapshots) in self.pending_lists.items():
                    found = folded.blobs.get((ns, channel, version))
                    if found is not None and found[0] >= outcome.first_seq:
                        folded.lists[(ns, channel)] = (version, found[0], objects, snapshots)
            self.pending_lists.clear()
            return outcome
        raise AssertionError("unreachable")

    def append_group(self, thread_id: str, builds: list[Build]) -> Io:
        """Several saver calls' batches to one thread as one atomic append (group commit):
        one durable write for calls that arrived while another was being written.

        Each build sees the state the builds before it leave — their events folded at the
        seqs they will have, which a later build may refer to — so the batch is stored
        only at the seq the builds assumed (`conditional`: another writer's append in
        between is a `SeqConflict`, nothing stored), and the log holds exactly what the
        calls appended one after another would have stored. Once it has landed, the state
        is already folded, `next_seq` included (`_fold_own` sees it past the batch and
        leaves it); if it was not stored, or was a resend's duplicate, the cached state,
        which already holds the batch, is dropped and the next call reads the log. Raises
        `_Ungroupable` (nothing stored) when the thread has no log yet.
        """
        if len(builds) == 1:
            return (yield from self.append(thread_id, builds[0]))
        session_id = self.session_id(thread_id)

        def build(state: _Thread | None) -> list[tuple[str, Any]]:
            if state is None:
                raise _Ungroupable()
            events: list[tuple[str, Any]] = []
            for one in builds:
                made = one(state)
                for offset, (kind, data) in enumerate(made):
                    state.apply(_Own(kind, data, state.next_seq + offset))
                state.next_seq += len(made)
                events.extend(made)
            return events

        try:
            outcome = yield from self.append(thread_id, build, conditional=True)
        except BaseException:
            self.threads.pop(session_id, None)
            raise
        if outcome is not None and outcome.duplicate:
            self.threads.pop(session_id, None)
        return outcome

    def write_group(self, thread_id: str, group: list[_Waiting]) -> Io:
        """Writes the batches of `group` (calls waiting to append to one thread): as one
        `append_group`, or, when that is refused or a build fails (nothing stored), one
        call at a time, so each call gets its own outcome. An ambiguous failure
        (`Unavailable`, `Internal`: perhaps stored) goes to every caller, as it would
        to one. Marks every call done, with its error if any; raises nothing."""
        try:
            if len(group) > 1:
                try:
                    yield from self.append_group(thread_id, [one.build for one in group])
                    return
                except (Unavailable, berth.Internal):
                    raise
                except Exception:  # noqa: BLE001 - refused, or a build failed: nothing was stored
                    pass
            for one in group:
                try:
                    yield from self.append(thread_id, one.build)
                except Exception as error:  # noqa: BLE001 - handed to that batch's caller
                    one.error = error
                one.done = True
        except BaseException as error:  # noqa: BLE001 - handed to every caller of the group
            for one in group:
                if not one.done:
                    one.error = error
            if not isinstance(error, Exception):
                raise  # an interrupt, after telling every caller
        finally:
            for one in group:
                one.done = True

    def _fold_own(self, session_id: str, events: list[tuple[str, Any]], outcome: berth.AppendOutcome) -> None:
        state = self.threads.get(session_id)
        if state is None and outcome.first_seq == 0 and not outcome.duplicate:
            state = self.threads[session_id] = _Thread()
            state.created_at = self.created_at.get(session_id)
        if state is None or outcome.duplicate or outcome.first_seq != state.next_seq:
            return  # another writer appended in between: the next read folds both, in order
        for offset, (kind, data) in enumerate(events):
            state.apply(_Own(kind, data, outcome.first_seq + offset))
        state.next_seq = outcome.next_seq

    def _blob_events(self, state: _Thread | None, ns: str, channel: str, version: Any, present: bool, value: Any,
                     base: tuple[Any, int] | None) -> list[tuple[str, Any]]:
        if not present:
            return [("lg/blob", {"ns": ns, "c": channel, "v": version, "t": "empty"})]
        if type(value) is list:
            data: dict[str, Any] = {"ns": ns, "c": channel, "v": version}
            items: list[tuple[str, str]] | None = None
            objects, snapshots = list(value), None
            if base is not None and state is not None:
                remembered = state.lists.get((ns, channel))
                stored = None
                if remembered is not None and remembered[0] == base[0] and remembered[1] == base[1]:
                    # This saver stored the base: a prefix of the same, unchanged objects
                    # is that list, so only the new items are serialized.
                    old_objects, old_snapshots = remembered[2], remembered[3]
                    count = len(old_objects)
                    if count <= len(value) and _prefix_unchanged(value, old_objects, old_snapshots):
                        stored = count
                        snapshots = old_snapshots + [_snapshot(item) for item in value[count:]]
                if stored is None:
                    items = [(t, _b64(b)) for t, b in (self.serde.dumps_typed(item) for item in value)]
                    previous = state.resolve((ns, channel, base[0]))
                    if previous is not None and previous[0] == "items":
                        old = previous[1]
                        if len(old) <= len(items) and items[: len(old)] == old:
                            stored = len(old)
                if stored is not None:
                    data["base"] = [base[0], base[1]]
                    items = (items[stored:] if items is not None else
                             [(t, _b64(b)) for t, b in (self.serde.dumps_typed(item) for item in value[stored:])])
                    # Where the rest of the chain is, so a reader needs no walk.
                    depth, link = state._link((ns, channel, base[0]))
                    if depth % ANCHOR_EVERY == 0:
                        data["full"] = state.ancestors((ns, channel, base[0])) + [base[1]]
                    else:
                        data["chain"] = list(link)
            if items is None:
                items = [(t, _b64(b)) for t, b in (self.serde.dumps_typed(item) for item in value)]
            data["items"] = [[t, b] for t, b in items]
            if _list_blob_fits(data):
                if snapshots is None:
                    snapshots = [_snapshot(item) for item in value]
                if None not in snapshots:
                    self.pending_lists[(ns, channel, version)] = (objects, snapshots)
                return [("lg/blob", data)]
        t, b = self.serde.dumps_typed(value)
        text = _b64(b)
        if len(text) <= PART_CHARS:
            return [("lg/blob", {"ns": ns, "c": channel, "v": version, "t": t, "b": text})]
        chunks = [text[start:start + PART_CHARS] for start in range(0, len(text), PART_CHARS)]
        return [
            ("lg/blob", {"ns": ns, "c": channel, "v": version, "t": t, "b": chunk, "part": index, "of": len(chunks)})
            for index, chunk in enumerate(chunks)
        ]

    def put_build(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                  new_versions: ChannelVersions) -> tuple[str, Build, RunnableConfig]:
        """A `put`'s batch, for the saver to append (`BerthSaver._write`): (thread id, the
        batch's build, the config to return). The serializing happens here, outside the
        saver's lock."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "")
        parent_id = configurable.get("checkpoint_id")
        copy = dict(checkpoint)
        values: dict[str, Any] = copy.pop("channel_values", {})  # type: ignore[assignment]
        metadata_full = get_checkpoint_metadata(config, metadata)
        cp_t, cp_b = self.serde.dumps_typed(copy)
        cp_text = _b64(cp_b)
        self._remember_versions(cp_text, dict(checkpoint["channel_versions"]))
        md_t, md_b = self.serde.dumps_typed(metadata_full)
        run_id = metadata_full.get("run_id")

        def build(state: _Thread | None) -> list[tuple[str, Any]]:
            parent_versions: dict[str, Any] = {}
            if state is not None and parent_id and parent_id in state.checkpoints.get(ns, {}):
                parent_versions = self._channel_versions(state.checkpoints[ns][parent_id]["cp"])
            events: list[tuple[str, Any]] = []
            for channel, version in new_versions.items():
                base = None
                if channel in parent_versions and state is not None:
                    found = state.blobs.get((ns, channel, parent_versions[channel]))
                    if found is not None:
                        base = (parent_versions[channel], found[0])
                events.extend(
                    self._blob_events(state, ns, channel, version, channel in values, values.get(channel), base)
                )
            at = {}
            for channel, version in checkpoint["channel_versions"].items():
                if channel in new_versions or state is None:
                    continue
                found = state.blobs.get((ns, channel, version))
                if found is not None:
                    at[channel] = found[0]
            record = {"ns": ns, "id": checkpoint["id"], "parent": parent_id, "cp": [cp_t, cp_text],
                      "md": [md_t, _b64(md_b)], "run_id": str(run_id) if run_id is not None else None, "at": at}
            # `top: [first, seq]`: as of the fold this was built from (the log up to seq
            # `first`), this is the newest checkpoint of its namespace and it has no writes
            # yet. Stored at exactly `seq`, the fold was the whole log before it, so a reader
            # finding it in the tail may answer the latest checkpoint from the tail and point
            # reads (`get_tuple`); stored elsewhere (another writer appended meanwhile), the
            # claim is void.
            newest = state.newest(ns) if state is not None else None
            if ((newest is None or newest < checkpoint["id"])
                    and (state is None or (ns, checkpoint["id"]) not in state.writes)):
                first = state.next_seq if state is not None else 0
                record["top"] = [first, first + len(events)]
            events.append(("lg/checkpoint", record))
            return events

        return thread_id, build, {"configurable": {"thread_id": configurable["thread_id"], "checkpoint_ns": ns,
                                                   "checkpoint_id": checkpoint["id"]}}

    def put_writes_build(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                         task_path: str) -> tuple[str, Build]:
        """A `put_writes`'s batch, for the saver to append: (thread id, the batch's build)."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "")
        checkpoint_id = configurable["checkpoint_id"]
        encoded = []
        for index, (channel, value) in enumerate(writes):
            t, b = self.serde.dumps_typed(value)
            encoded.append([WRITES_IDX_MAP.get(channel, index), channel, t, _b64(b)])

        def build(state: _Thread | None) -> list[tuple[str, Any]]:
            stored = state.writes.get((ns, checkpoint_id), {}) if state is not None else {}
            # Idempotent: the first write of (task, idx) stays (the fold keeps it too, so
            # a write another saver made meanwhile is harmless).
            rows = [row for row in encoded if row[0] < 0 or (task_id, row[0]) not in stored]
            if not rows:
                return []
            return [("lg/writes", {"ns": ns, "cp": checkpoint_id, "task": task_id, "path": task_path, "w": rows})]

        return thread_id, build

    def delete_thread(self, thread_id: str) -> Io:
        session_id = self.session_id(str(thread_id))
        self.threads.pop(session_id, None)
        self.attached.discard(session_id)
        self.lost.discard(session_id)
        try:
            yield calls.delete_session(session_id)
        except berth.NotFound:
            pass

    def delete_for_runs(self, run_ids: Sequence[str]) -> Io:
        runs = {str(run) for run in run_ids}
        if not runs:
            return
        thread_ids = yield from self.thread_ids()
        for thread_id in thread_ids:
            state = yield from self.refresh(thread_id)
            if state is None:
                continue
            if any(record["run_id"] in runs for checkpoints in state.checkpoints.values()
                   for record in checkpoints.values()):
                yield from self.append(thread_id, lambda _state: [("lg/drop-runs", {"runs": sorted(runs)})])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> Io:
        source = self.session_id(str(source_thread_id))
        target = self.session_id(str(target_thread_id))
        try:
            yield calls.fork_session(source, new_id=target)
        except berth.NotFound:
            return
        # The fork copies every event at its seq (so `at` and delta bases stay right)
        # and ends with berth's `session/end-seed`, which the fold skips.
        yield calls.update_session(target, title=str(target_thread_id), labels=[LABEL])
        self.threads.pop(target, None)
        self.attached.discard(target)

    def prune(self, thread_ids: Sequence[str], strategy: str) -> Io:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"langgraph: unknown prune strategy {strategy!r} (keep_latest or delete)")
        for thread_id in thread_ids:
            if strategy == "delete":
                yield from self.delete_thread(thread_id)
                continue
            state = yield from self.refresh(str(thread_id))
            if state is None:
                continue
            keep = {ns: max(checkpoints) for ns, checkpoints in state.checkpoints.items() if checkpoints}
            if any(len(checkpoints) > 1 for checkpoints in state.checkpoints.values()):
                yield from self.append(str(thread_id), lambda _state: [("lg/prune", {"keep": keep})])

    def heartbeat_all(self) -> Io:
        for session_id in list(self.attached):
            try:
                yield calls.heartbeat(session_id, self.run_id)
            except BerthError:
                # A shared saver attaches again on its next write; an exclusive one reports
                # the loss there (OwnershipLost).
                self.attached.discard(session_id)
                if self.exclusive:
                    self.lost.add(session_id)

    def detach_all(self) -> Io:
        for session_id in list(self.attached):
            self.attached.discard(session_id)
            try:
                yield calls.detach(session_id, self.run_id)
            except BerthError:
                pass  # already gone: the lease lapsed or the thread was deleted




def _next_version(current: str | int | float | None) -> str:
    if current is None:
        number = 0
    elif isinstance(current, (int, float)):
        number = int(current)
    else:
        number = int(str(current).split(".")[0])
    return f"{number + 1:032}.{random.random():016}"


#: How long a `put_writes` with no checkpoint waiting beside it waits for one (seconds).
WRITES_WAIT_S = 0.002


class _Waiting:
    """One `put` / `put_writes` batch waiting to be written (`BerthSaver._write`)."""

    __slots__ = ("build", "done", "error", "written")

    def __init__(self, build: Build) -> None:
        self.build = build
        self.done = False
        self.error: BaseException | None = None
        #: `AsyncBerthSaver`: set once the batch is written (a waiting `aput_writes`).
        self.written: asyncio.Event | None = None


class _Attachment:
    """What a saver shares with the copies `with_allowlist` makes of it, beside the core:
    the heartbeat of their one run and, for `AsyncBerthSaver`, the lock its calls take
    turns on (and the loop that lock belongs to)."""

    __slots__ = ("beat", "stop", "lock", "lock_loop")

    def __init__(self) -> None:
        self.beat: Any = None
        self.stop = threading.Event()
        self.lock: asyncio.Lock | None = None
        self.lock_loop: asyncio.AbstractEventLoop | None = None


class _SharedRun:
    """`with_allowlist` for berth's savers. LangGraph's (a shallow copy with a serde that
    also loads the graph's own types, what `StateGraph.compile` asks for under
    `LANGGRAPH_STRICT_MSGPACK`) would leave the copy (de)serializing through the core's,
    the original serde. Here the copy gets a core with its own serde, sharing everything
    else: the run (a second run would find the first holding an exclusive thread), the
    threads' state, the heartbeat and the group commit's queue."""

    _core: _Core

    def with_allowlist(self, extra_allowlist: Any) -> Any:
        clone = super().with_allowlist(extra_allowlist)  # type: ignore[misc]
        if clone is not self:
            clone._core = self._core.with_serde(clone.serde)
        return clone


class BerthSaver(_SharedRun, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on berth, blocking (`graph.invoke`, `graph.stream`).

    `client`: a `berth.Client` (HTTP) or `berth.open(...)` (embedded). One berth run per
    saver object, attached to a thread's session on the first write, heartbeated in the
    background every third of `run_lease_ttl_ms`, released by `close()` (or the context
    manager; otherwise the lease lapses). `exclusive=True`: threads are created `serial`
    and a second saver writing the same thread gets `berth.Busy`. `prefix` namespaces
    thread ids (one tenant, several apps). The async methods run the sync ones on a
    worker thread; for asyncio graphs use `AsyncBerthSaver`.
    """

    def __init__(
        self,
        client: berth.Client,
        *,
        serde: Any = None,
        prefix: str = "",
        exclusive: bool = False,
        run_lease_ttl_ms: int = 60_000,
        activity_ttl_ms: int = FOREVER_MS,
        runs_max: int = 64,
    ) -> None:
        super().__init__(serde=serde)
        self.client = client
        self._core = _Core(self.serde, prefix=prefix, exclusive=exclusive, run_lease_ttl_ms=run_lease_ttl_ms,
                           activity_ttl_ms=activity_ttl_ms, runs_max=runs_max)
        self._attachment = _Attachment()
        #: thread id -> the `put` / `put_writes` batches waiting for the lock (`_write`).
        self._waiting: dict[str, list[_Waiting]] = {}
        #: Notified when batches have been written (a waiting `put_writes` may be done).
        self._written = threading.Condition(threading.Lock())

    @property
    def run_id(self) -> str:
        return self._core.run_id

    def _do(self, io: Io) -> Any:
        with self._core.lock:
            result = _drive_sync(self.client, io)
            self._start_heartbeats()
            return result

    def _write(self, thread_id: str, build: Build, checkpoint: bool) -> None:
        """Appends one call's batch together with the batches other threads' calls wait
        to append to the same thread, in one durable append (`_Core.append_group`):
        group commit. LangGraph runs a graph's `put_writes` and (in its default "async"
        durability) its `put`s on background threads, one step's checkpoint soon after
        its writes. So a `put_writes` first waits a little (`WRITES_WAIT_S`) for a `put`
        to the same thread, whose caller then writes both; whoever takes the lock writes
        every batch waiting for that thread. Every call still returns only once its
        batch is durable, and raises what its own batch would have raised."""
        waiting = _Waiting(build)
        with self._written:
            self._waiting.setdefault(thread_id, []).append(waiting)
            if not checkpoint:
                deadline = time.monotonic() + WRITES_WAIT_S
                while not waiting.done:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._written.wait(left)
        if not waiting.done:
            with self._core.lock:
                if not waiting.done:
                    with self._written:
                        group = self._waiting.pop(thread_id)
                    _drive_sync(self.client, self._core.write_group(thread_id, group))
                    self._start_heartbeats()
                    with self._written:
                        self._written.notify_all()  # the callers whose batches were written
        if waiting.error is not None:
            raise waiting.error

    def _start_heartbeats(self) -> None:
        attachment = self._attachment
        if self._core.attached and attachment.beat is None:
            attachment.beat = threading.Thread(target=self._heartbeats, args=(attachment.stop,),
                                               name="berth-langgraph-heartbeat", daemon=True)
            attachment.beat.start()

    def _heartbeats(self, stop: threading.Event) -> None:
        period = max(self._core.run_lease_ttl_ms / 3000, 0.05)
        while not stop.wait(period):
            with self._core.lock:
                try:
                    _drive_sync(self.client, self._core.heartbeat_all())
                except Exception:  # noqa: BLE001 - a failed beat is retried next period
                    pass

    def close(self) -> None:
        """Releases this saver's run on every thread it wrote (the client stays open); the
        copies `with_allowlist` made share the run, so it is theirs too."""
        attachment = self._attachment
        attachment.stop.set()
        if attachment.beat is not None:
            attachment.beat.join()
            attachment.beat = None
        with self._core.lock:
            _drive_sync(self.client, self._core.detach_all())
        attachment.stop = threading.Event()

    def __enter__(self) -> BerthSaver:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._do(self._core.get_tuple(config))

    def list(
        self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None, limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return iter(self._do(self._core.list(config, filter, before, limit)))

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        thread_id, build, stored = self._core.put_build(config, checkpoint, metadata, new_versions)
        self._write(thread_id, build, checkpoint=True)
        return stored

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        thread_id, build = self._core.put_writes_build(config, writes, task_id, task_path)
        self._write(thread_id, build, checkpoint=False)

    def delete_thread(self, thread_id: str) -> None:
        self._do(self._core.delete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._do(self._core.delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._do(self._core.copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._do(self._core.prune(thread_ids, strategy))

    def get_next_version(self, current: str | int | float | None, channel: None) -> str:  # type: ignore[override]
        return _next_version(current)

    # async, on a worker thread
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None, limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(self._do, self._core.list(config, filter, before, limit))
        for item in found:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


class AsyncBerthSaver(_SharedRun, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on berth for asyncio (`graph.ainvoke`, `astream`), over
    a `berth.AsyncClient` or `berth.open_async(...)`. Same storage, options and run
    lifecycle as `BerthSaver` (the heartbeat is a task on the loop of the first write;
    release with `await saver.aclose()` or `async with`). The sync methods are not
    offered: call them from a sync graph with `BerthSaver`."""

    def __init__(
        self,
        client: berth.AsyncClient,
        *,
        serde: Any = None,
        prefix: str = "",
        exclusive: bool = False,
        run_lease_ttl_ms: int = 60_000,
        activity_ttl_ms: int = FOREVER_MS,
        runs_max: int = 64,
    ) -> None:
        super().__init__(serde=serde)
        self.client = client
        self._core = _Core(self.serde, prefix=prefix, exclusive=exclusive, run_lease_ttl_ms=run_lease_ttl_ms,
                           activity_ttl_ms=activity_ttl_ms, runs_max=runs_max)
        self._attachment = _Attachment()
        #: thread id -> the `aput` / `aput_writes` batches waiting for the lock (`_write`).
        self._waiting: dict[str, list[_Waiting]] = {}

    @property
    def run_id(self) -> str:
        return self._core.run_id

    def _lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        attachment = self._attachment
        if attachment.lock is None or attachment.lock_loop is not loop:
            attachment.lock = asyncio.Lock()
            attachment.lock_loop = loop
        return attachment.lock

    async def _do(self, io: Io) -> Any:
        async with self._lock():
            result = await _drive_async(self.client, io)
            self._start_heartbeats()
            return result

    def _start_heartbeats(self) -> None:
        attachment = self._attachment
        if self._core.attached and (attachment.beat is None or attachment.beat.done()):
            attachment.beat = asyncio.get_running_loop().create_task(self._heartbeats())

    async def _write(self, thread_id: str, build: Build, checkpoint: bool) -> None:
        """`BerthSaver._write` on the event loop: batches waiting while another is being
        written share the next append, and an `aput_writes` first waits up to
        `WRITES_WAIT_S` for its step's `aput`, whose task then writes both."""
        waiting = _Waiting(build)
        self._waiting.setdefault(thread_id, []).append(waiting)
        if not checkpoint:
            waiting.written = asyncio.Event()
            try:
                await asyncio.wait_for(waiting.written.wait(), WRITES_WAIT_S)
            except asyncio.TimeoutError:
                pass
        if not waiting.done:
            async with self._lock():
                if not waiting.done:
                    group = self._waiting.pop(thread_id)
                    try:
                        await _drive_async(self.client, self._core.write_group(thread_id, group))
                    finally:
                        for one in group:
                            if one.written is not None:
                                one.written.set()
                    self._start_heartbeats()
        if waiting.error is not None:
            raise waiting.error

    async def _heartbeats(self) -> None:
        period = max(self._core.run_lease_ttl_ms / 3000, 0.05)
        while True:
            await asyncio.sleep(period)
            async with self._lock():
                try:
                    await _drive_async(self.client, self._core.heartbeat_all())
                except Exception:  # noqa: BLE001 - a failed beat is retried next period
                    pass

    async def aclose(self) -> None:
        """Releases this saver's run on every thread it wrote (the client stays open); the
        copies `with_allowlist` made share the run, so it is theirs too."""
        attachment = self._attachment
        if attachment.beat is not None:
            attachment.beat.cancel()
            try:
                await attachment.beat
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
            attachment.beat = None
        async with self._lock():
            await _drive_async(self.client, self._core.detach_all())

    async def __aenter__(self) -> AsyncBerthSaver:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._do(self._core.get_tuple(config))

    async def alist(
        self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None, limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for item in await self._do(self._core.list(config, filter, before, limit)):
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        thread_id, build, stored = self._core.put_build(config, checkpoint, metadata, new_versions)
        await self._write(thread_id, build, checkpoint=True)
        return stored

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        thread_id, build = self._core.put_writes_build(config, writes, task_id, task_path)
        await self._write(thread_id, build, checkpoint=False)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._do(self._core.delete_thread(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._do(self._core.delete_for_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._do(self._core.copy_thread(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._do(self._core.prune(thread_ids, strategy))

    def get_next_version(self, current: str | int | float | None, channel: None) -> str:  # type: ignore[override]
        return _next_version(current)


# LangGraph's long-term memory (`BaseStore`) on berth's scoped memory: docs/langgraph-store.md.
from .langgraph_store import AsyncBerthStore, BerthStore  # noqa: E402
