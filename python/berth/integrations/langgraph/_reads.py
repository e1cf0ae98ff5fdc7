"""The core's reads (`_Reads`, mixed into `_Core`): a checkpoint as LangGraph's
`CheckpointTuple`, and the listing.

Reads fold the log into a per-thread index that the saver keeps and refreshes with
`from=next_seq` (the log is append-only, so the refresh is always correct); a saver with
no fold of the thread answers `get_tuple` of the latest checkpoint from the tail and
point reads instead (`_Core.latest_by_points`).
"""

from __future__ import annotations

import time
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, get_checkpoint_id, writes_sort_key

import berth
from berth import _calls as calls

from .._drive import Io
from ._fold import _Thread
from ._records import LABEL, TAIL_SCAN_EVENTS_MAX, _blob_needs, _unb64


#: `latest_by_points` could not answer exactly: fold the log.
_REPLAY: Any = object()


class _Reads:
    """Reading, for `_Core`, which makes every attribute named here (and `session_id`)."""

    serde: Any
    threads: dict[str, _Thread]
    attached: set[str]
    seen: dict[str, tuple[berth.Session, float]]
    versions: dict[str, dict[str, Any]]

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
            self.seen.pop(session_id, None)
            return None
        self.seen[session_id] = (session, time.monotonic())
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
