"""A thread's log folded into the index a saver keeps (`_Thread`).

Reads fold the log into a per-thread index that the saver keeps and refreshes with
`from=next_seq` (the log is append-only, so the refresh is always correct); the
saver's own appends are folded in without reading them back (`_Own`). The vocabulary
events fold into the thread's `_Talk`, which only decides what the next writes add.
"""

from __future__ import annotations

from typing import Any

import berth

from ._records import ANCHOR_EVERY
from ._talk import TALK_TYPES, _Talk


class _Own:
    """One of this saver's own appended events, folded without reading it back."""

    __slots__ = ("type", "data", "seq", "run")

    def __init__(self, kind: str, data: Any, seq: int, run: str | None = None) -> None:
        self.type, self.data, self.seq, self.run = kind, data, seq, run


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
        #: What the vocabulary events say (`_talk`): never read back for LangGraph.
        self.talk = _Talk()

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
        elif kind in TALK_TYPES:
            self.talk.apply(kind, data, event.run)
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
