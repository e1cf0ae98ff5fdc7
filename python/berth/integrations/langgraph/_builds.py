"""The batches a `put` and a `put_writes` append (`_Builds`, mixed into `_Core`):
channel values as `lg/blob`s (a list that extends its previous version as only the
suffix, with the seqs of its chain; a large value in parts), the `lg/checkpoint`
record with its `at` and `top`, and `lg/writes`; and, in the same batch, the
conversation vocabulary they carry (`_vocabulary`: the messages of a list's new suffix,
turns and steps). Serialized outside the saver's lock."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)

from ._appends import Build
from ._callbacks import Ended
from ._fold import _Thread
from ._records import ANCHOR_EVERY, PART_CHARS, VERSIONS_KEPT, _b64, _list_blob_fits
from ._snapshots import _prefix_unchanged, _snapshot
from ._talk import _Talk
from ._times import Timed, now_ms, ts_ms
from ._vocabulary import carries, ended_by, ends_turn, put_events, with_calls, writes_events


class _Builds:
    """Building batches, for `_Core`, which makes every attribute named here
    (`_channel_versions` is `_Reads`')."""

    serde: Any
    flags: dict[str, bool]
    versions: dict[str, dict[str, Any]]
    pending_lists: dict[tuple[str, str, Any], tuple[list[Any], list[Any]]]

    if TYPE_CHECKING:
        def session_id(self, thread_id: str) -> str: ...

        def carried_calls(self, session_id: str, which: Callable[[Ended], bool]) -> list[tuple[str, Any]]: ...

    def _remember_versions(self, text: str, versions: dict[str, Any]) -> None:
        self.versions[text] = versions
        while len(self.versions) > VERSIONS_KEPT:
            del self.versions[next(iter(self.versions))]

    def _blob_events(self, state: _Thread | None, ns: str, channel: str, version: Any, present: bool, value: Any,
                     base: tuple[Any, int] | None) -> tuple[list[tuple[str, Any]], int]:
        """The events of one channel version, and — for a list — how many of its items
        the version it extends holds (0: all of them are new to the log)."""
        if not present:
            return [("lg/blob", {"ns": ns, "c": channel, "v": version, "t": "empty"})], 0
        if type(value) is list:
            data: dict[str, Any] = {"ns": ns, "c": channel, "v": version}
            items: list[tuple[str, str]] | None = None
            objects, snapshots = list(value), None
            stored: int | None = None
            if base is not None and state is not None:
                remembered = state.lists.get((ns, channel))
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
                return [("lg/blob", data)], stored or 0
        t, b = self.serde.dumps_typed(value)
        text = _b64(b)
        if len(text) <= PART_CHARS:
            return [("lg/blob", {"ns": ns, "c": channel, "v": version, "t": t, "b": text})], 0
        chunks = [text[start:start + PART_CHARS] for start in range(0, len(text), PART_CHARS)]
        return [
            ("lg/blob", {"ns": ns, "c": channel, "v": version, "t": t, "b": chunk, "part": index, "of": len(chunks)})
            for index, chunk in enumerate(chunks)
        ], 0

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
        session_id = self.session_id(thread_id)
        step = metadata_full.get("step")

        def build(state: _Thread | None) -> list[tuple[str, Any]]:
            parent_versions: dict[str, Any] = {}
            if state is not None and parent_id and parent_id in state.checkpoints.get(ns, {}):
                parent_versions = self._channel_versions(state.checkpoints[ns][parent_id]["cp"])
            blobs: list[tuple[str, Any]] = []
            messages: list[Any] = []
            for channel, version in new_versions.items():
                base = None
                if channel in parent_versions and state is not None:
                    found = state.blobs.get((ns, channel, parent_versions[channel]))
                    if found is not None:
                        base = (parent_versions[channel], found[0])
                value = values.get(channel)
                made, new_from = self._blob_events(state, ns, channel, version, channel in values, value, base)
                blobs.extend(made)
                if type(value) is list:
                    messages.extend(item for item in value[new_from:] if isinstance(item, BaseMessage))
            talk = state.talk if state is not None else _Talk()
            ended = ended_by(state.writes.get((ns, checkpoint["id"]))) if state is not None and ns == "" else None
            events, after = put_events(talk, ns, checkpoint, metadata_full, messages, self.flags["plain"], ended)
            if ns == "" and type(step) is int:  # the model calls of its step (and before)
                events = with_calls(events, self.carried_calls(session_id, partial(carries, step=step)))
            if ns == "" and ends_turn(after):  # every call left, when the turn ends
                after = with_calls(after, self.carried_calls(session_id, carries))
            events.extend(blobs)
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
            events.extend(after)
            return events

        # Every event of the batch at the checkpoint's own time (`_times`).
        at = ts_ms(checkpoint)
        return thread_id, Timed(build, at if at is not None else now_ms()), {
            "configurable": {"thread_id": configurable["thread_id"], "checkpoint_ns": ns,
                             "checkpoint_id": checkpoint["id"]}}

    def put_writes_build(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                         task_path: str, at: int | None = None) -> tuple[str, Build]:
        """A `put_writes`'s batch, for the saver to append: (thread id, the batch's build),
        its events at `at` (ms; by default now: when the writes were handed over)."""
        made_at = at if at is not None else now_ms()
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "")
        checkpoint_id = configurable["checkpoint_id"]
        encoded = []
        for index, (channel, value) in enumerate(writes):
            t, b = self.serde.dumps_typed(value)
            encoded.append([WRITES_IDX_MAP.get(channel, index), channel, t, _b64(b)])
        channels = [channel for channel, _ in writes]
        # Only LangGraph's special writes (an interrupt, an error, a resume) delimit turns.
        special = ns == "" and any(channel in WRITES_IDX_MAP for channel in channels)
        session_id = self.session_id(thread_id)

        def build(state: _Thread | None) -> list[tuple[str, Any]]:
            stored = state.writes.get((ns, checkpoint_id), {}) if state is not None else {}
            # Idempotent: the first write of (task, idx) stays (the fold keeps it too, so
            # a write another saver made meanwhile is harmless).
            rows = [row for row in encoded if row[0] < 0 or (task_id, row[0]) not in stored]
            if not rows:
                return []
            events = [("lg/writes", {"ns": ns, "cp": checkpoint_id, "task": task_id, "path": task_path, "w": rows})]
            known = state is not None and checkpoint_id in state.checkpoints.get(ns, {})
            if special and state is not None:
                events.extend(writes_events(state.talk, ns, task_id, channels, known))
            if ns == "" and ends_turn(events):
                return with_calls(events, self.carried_calls(session_id, carries))
            if ns == "" and known:  # the task's model calls, in its step (started by that checkpoint's put)
                return with_calls(events, self.carried_calls(session_id, partial(carries, task=task_id)))
            return events

        return thread_id, Timed(build, made_at)
