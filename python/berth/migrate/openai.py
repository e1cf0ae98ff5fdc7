"""The OpenAI Agents SDK's `SQLiteSession` store, into berth and back.

Import: the source file is copied first (`source.snapshot`: the source is never
written, and a live one is read as one consistent snapshot); `SQLiteSession.get_items()`
reads each session from the copy, and `BerthSession.add_items` writes it, so the berth
session is what the drop-in writes.
Which sessions the file holds is the one thing the SDK has no reader for: a plain
`SELECT session_id` of its sessions table (and a row count per session, to report the
rows the SDK itself skips as unreadable).

Export: `BerthSession.get_items()` (pops and clears applied: the live item list) into
`SQLiteSession.add_items` of the target file.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Sequence
from typing import Any

from agents.memory import SQLiteSession

import berth
from berth.integrations.openai_agents import BerthSession

from . import keys
from .report import Report
from .source import snapshot

#: Items per append (one atomic batch each).
CHUNK_ITEMS = 256
KIND = "openai-sqlite"


class _ImportSession(BerthSession):
    """`BerthSession` whose `add_items` appends under the idempotency key the importer
    sets (`import_key`) instead of a fresh one: the same writes as the drop-in's."""

    import_key: str | None = None

    async def _aappend(self, binding: Any, events: list[dict[str, Any]], **options: Any) -> berth.AppendOutcome:
        if self.import_key is not None:
            options["idempotency_key"] = self.import_key
        return await super()._aappend(binding, events, **options)


def _session_rows(copy: str, sessions_table: str, messages_table: str) -> list[tuple[str, int]]:
    """(session id, message rows) for every session of the file: the SDK lists no
    sessions, so a plain SELECT of its tables' ids and counts (oldest session first)."""
    conn = sqlite3.connect(copy)
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if sessions_table not in tables:
            return []
        counts = dict(conn.execute(f"SELECT session_id, COUNT(*) FROM {messages_table} GROUP BY session_id")) \
            if messages_table in tables else {}
        ids = [row[0] for row in conn.execute(f"SELECT session_id FROM {sessions_table} ORDER BY created_at, session_id")]
        for orphan in sorted(set(counts) - set(ids)):  # messages whose session row is gone
            ids.append(orphan)
        return [(session_id, int(counts.get(session_id, 0))) for session_id in ids]
    finally:
        conn.close()


def _state(client: berth.Client, identity: str) -> dict[str, Any] | None:
    try:
        value = client.memory_get(keys.STATE_NAMESPACE, keys.state_key(identity)).value
    except berth.NotFound:
        return None
    return value if isinstance(value, dict) else None


async def import_store(path: str, client: berth.Client, report: Report, *, sessions_table: str = "agent_sessions",
                       messages_table: str = "agent_messages") -> None:
    where = os.path.realpath(path)
    with tempfile.TemporaryDirectory(prefix="berth-migrate-") as scratch:
        copy = snapshot(path, scratch)
        rows = _session_rows(copy, sessions_table, messages_table)
        report.total = len(rows)
        for session_id, row_count in rows:
            source = SQLiteSession(session_id, copy, sessions_table, messages_table)
            try:
                items = await source.get_items()
            finally:
                source.close()
            report.sessions += 1
            if row_count > len(items):
                report.skip(session_id, f"{row_count - len(items)} rows",
                            "rows SQLiteSession itself does not read (not valid JSON): not imported")
            await _import_session(client, keys.source_identity(KIND, where, session_id), session_id, items, report)
            report.tick()
    report.tick(force=True)


async def _import_session(client: berth.Client, identity: str, session_id: str, items: list[Any],
                          report: Report) -> None:
    digests = [keys.digest(item) for item in items]
    chained = keys.chain(digests)
    target = _ImportSession(session_id, client)
    try:
        state = _state(client, identity)
        if state is not None:
            start = int(state.get("items", 0))
            if start > len(items) or chained[start] != state.get("chain"):
                report.change(session_id, f"items 0..{start - 1}",
                              "the source's items changed since the last import: the berth session is left as it is")
                return
        else:
            held = await target.get_items()
            if held and [keys.digest(item) for item in held] != digests[:len(held)]:
                report.change(session_id, f"{len(held)} items in berth",
                              "berth already holds this session with other items: not imported")
                return
            start = len(held)  # an import killed before it recorded its state, or a copy
        new = items[start:]
        report.records_unchanged += start
        if not new:
            report.unchanged += 1
            return
        report.imported += 1
        if report.dry_run:
            report.records += len(new)
            report.bytes += sum(keys.size(item) for item in new)
            return
        while start < len(items):
            batch = items[start:start + CHUNK_ITEMS]
            await _append(target, identity, start, batch, digests[start:start + len(batch)], session_id, report)
            start += len(batch)
            client.memory_put(keys.STATE_NAMESPACE, keys.state_key(identity),
                              {"source": session_id, "items": start, "chain": chained[start]},
                              bound_to=target.berth_id)
    finally:
        target.close()


async def _append(target: _ImportSession, identity: str, start: int, batch: Sequence[Any], digests: list[str],
                  session_id: str, report: Report) -> None:
    """One batch through `add_items` under its key; item by item when berth refuses the
    batch, reporting the items it cannot hold."""
    target.import_key = keys.batch_key(identity, start, digests)
    try:
        await target.add_items(list(batch))
        report.records += len(batch)
        report.bytes += sum(keys.size(item) for item in batch)
        return
    except berth.IdempotencyKeyReused:
        # The key names the source records and their content: an earlier run that was
        # killed after this append landed (with other turn markers around it).
        report.records_unchanged += len(batch)
        return
    except (berth.PayloadTooLarge, berth.LimitExceeded, berth.Invalid):
        if len(batch) == 1:
            raise
    for offset, item in enumerate(batch):
        try:
            await _append(target, identity, start + offset, [item], [digests[offset]], session_id, report)
        except (berth.PayloadTooLarge, berth.LimitExceeded, berth.Invalid) as error:
            report.skip(session_id, f"item {start + offset}", f"berth cannot hold it: {type(error).__name__}: {error}")


async def export_store(client: berth.Client, path: str, report: Report, *, sessions_table: str = "agent_sessions",
                       messages_table: str = "agent_messages") -> None:
    session_ids = BerthSession.list_session_ids(client)
    report.total = len(session_ids)
    for session_id in session_ids:
        source = BerthSession(session_id, client)
        try:
            items = await source.get_items()
        finally:
            source.close()
        report.sessions += 1
        target = SQLiteSession(session_id, path, sessions_table, messages_table)
        try:
            held = await target.get_items()
            if held != items[:len(held)]:
                report.change(session_id, f"{len(held)} items in the target",
                              "the target already holds this session with other items: not exported")
                continue
            new = items[len(held):]
            report.records_unchanged += len(held)
            if not new:
                report.unchanged += 1
                continue
            report.imported += 1
            report.records += len(new)
            report.bytes += sum(keys.size(item) for item in new)
            if not report.dry_run:
                await target.add_items(new)
        finally:
            target.close()
        report.tick()
    report.tick(force=True)
