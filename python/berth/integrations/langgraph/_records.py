"""The log of a LangGraph thread in berth: its event types, limits and ids.

Layout (one LangGraph thread = one berth session, labelled `langgraph`, titled with the
thread id; every saver call is one atomic append):

| event type      | data |
|-----------------|------|
| `lg/blob`       | a channel value: `{ns, c, v, t, b}` (serde type, base64), or a list as its items `{ns, c, v, items: [[t, b]…]}`, or — when it extends the previous version — `{ns, c, v, base: [version, seq], chain or full, items}`: only the appended suffix, with the seqs of the links below it (`full`: all of them, every ANCHOR_EVERY-th link; `chain`: back to that anchor); a large value is split into `{…, part, of}` events of one batch |
| `lg/checkpoint` | `{ns, id, parent, cp, md, run_id, at: {channel: seq}, top?: [first, seq]}`: `at` names the seq holding each channel's version that is not in this batch; `top`: the writer's fold (the log up to `first`) had no newer checkpoint of `ns` and none with this id's writes, and expected it at `seq` |
| `lg/writes`     | `{ns, cp, task, path, w: [[idx, channel, t, b]…]}` (dedupe per (task, idx); negative idx upserts) |
| `lg/prune`      | `{keep: {ns: checkpoint_id}}` (keep_latest, logical) |
| `lg/drop-runs`  | `{runs: [...]}` (delete_for_runs, logical) |

Every `lg/*` event is appended `ignorable` (since the vocabulary was added; older ones
are not): beside them, in the same appends, berth's conversation vocabulary says what
happened (`_vocabulary`), and readers and berth's repair may skip the record. The saver
reads only the record.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

import berth


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
#: A thread's catalog record at most this old (seconds), read by the fold a write made
#: just before, tells the write's attach the thread's mode without reading it again.
SEEN_FRESH_S = 1.0
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
