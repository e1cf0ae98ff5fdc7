"""The times of the events a saver call appends (the write path's clock).

A `put`'s events — its `lg/*` record and the conversation vocabulary it carries
(messages, tool calls and results, turn and step markers) — take the checkpoint's own
`ts` (LangGraph's ISO 8601 time of the checkpoint's creation), so an imported thread
keeps its source's times and, in live use, a step's events sit where LangGraph made the
checkpoint, beside the `model/call`s of that step (their time the call's end, by the
same process's clock), not at the time of an append LangGraph makes later. A
`put_writes`' events take the time the writes were handed to the saver, and
`durable_tool_node`'s `tool/call` the time the call was recorded (this process's clock
both).

The server keeps a time it is given as given: it never refuses an append for its times
and never reorders them, so a log's times may step back where the process's order
differs from the log's (a step's `model/call` ended before the checkpoint that follows
it; writes made before a checkpoint another thread appended ahead of them).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

from ._fold import _Thread

Events = list[tuple[str, Any]]
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def now_ms() -> int:
    """This process's clock, in ms since the epoch."""
    return int(time.time() * 1000)


def ts_ms(checkpoint: Any) -> int | None:
    """A checkpoint's `ts` (ISO 8601; a time without a zone is UTC) in ms since the
    epoch; None when it has none or it is not a time from 1970 on."""
    text = checkpoint.get("ts") if isinstance(checkpoint, dict) else None
    if not isinstance(text, str):
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    ms = (value - _EPOCH) // timedelta(milliseconds=1)  # exact: no float in between
    return ms if ms >= 0 else None


class Timed:
    """A build (`_appends.Build`) whose events take the time `at` (ms)."""

    __slots__ = ("build", "at")

    def __init__(self, build: Any, at: int) -> None:
        self.build = build
        self.at = at

    def __call__(self, state: _Thread | None) -> Events:
        made: Events = self.build(state)
        return made


def stamps(build: Any, events: Events) -> list[int | None]:
    """Each event's time from the build that made `events`: a `Timed` build's `at`, a
    group's per-event `stamps` (`_appends.append_group`), else None (the server's)."""
    per_event = getattr(build, "stamps", None)
    if per_event is not None and len(per_event) == len(events):
        return list(per_event)
    at = getattr(build, "at", None)
    return [at] * len(events)
