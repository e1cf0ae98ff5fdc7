"""The OpenAI Agents SDK's `SQLiteSession` and `SQLAlchemySession` stores, into berth and back.

Import: the source file is copied first (`source.snapshot`: the source is never
written, and a live one is read as one consistent snapshot); `SQLiteSession.get_items()`
reads each session from the copy, and `BerthSession.add_items` writes it, so the berth
session is what the drop-in writes.
Which sessions the file holds is the one thing the SDK has no reader for: a plain
`SELECT session_id` of its sessions table (and a row count per session, to report the
rows the SDK itself skips as unreadable).

`SQLAlchemySession` (`openai-sqlalchemy:URL`, the SDK's `agents.extensions.memory`,
extra `openai-agents[sqlalchemy]`; an async URL): a SQLite file is copied the same way
and read through `sqlite+aiosqlite:` on the copy; a server database (PostgreSQL through
asyncpg or psycopg) is read in place on connections the server holds read-only
(`default_transaction_read_only`), one transaction per session. The sessions are listed
with the same plain SELECT, through the SDK's engine.

Export: `BerthSession.get_items()` (pops and clears applied: the live item list) into
`SQLiteSession.add_items` of the target file, or `SQLAlchemySession.add_items` of the
target database (its tables made by the SDK: `create_tables=True`).
"""

from __future__ import annotations

import json
import os
import sqlite3
from datetime import datetime, timezone
from itertools import accumulate
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
import tempfile
from collections.abc import Sequence
from typing import Any

from agents.memory import SQLiteSession

import berth
from berth.integrations.openai_agents import BerthSession
from berth.integrations.openai_agents._records import event_for_item

from . import keys
from . import users as owners
from .report import Report
from .source import redact, snapshot

#: Items per append (one atomic batch each).
CHUNK_ITEMS = 256
KIND = "openai-sqlite"
SQLALCHEMY_KIND = "openai-sqlalchemy"


class _ImportSession(BerthSession):
    """`BerthSession` whose `add_items` appends under the idempotency key the importer
    sets (`import_key`) instead of a fresh one, and with the source's times
    (`import_times`, ms, one per item of `import_items`: each item's event at its row's
    `created_at`, the turn markers before the items at the first's, those after at the
    last's): the same writes as the drop-in's, at the times the source holds."""

    import_key: str | None = None
    import_items: list[Any] | None = None
    import_times: list[int] | None = None

    async def _aappend(self, binding: Any, events: list[dict[str, Any]], **options: Any) -> berth.AppendOutcome:
        if self.import_key is not None:
            options["idempotency_key"] = self.import_key
        if self.import_items is not None and self.import_times is not None:
            events = _timed(events, self.import_items, self.import_times)
        return await super()._aappend(binding, events, **options)


def _timed(events: list[dict[str, Any]], items: list[Any], times: list[int]) -> list[dict[str, Any]]:
    """`events` (the markers, then the items' events, then markers: what `add_items`
    appends for `items`) with `time`s from `times`: each item's event its item's, the
    markers before them the first's, those after the last's. (Found by their types: the
    drop-in may change an item's event in place. Should it ever not find them, every
    event gets the batch's first time, still the source's.)"""
    kinds = [event_for_item(item)["type"] for item in items]
    offset = next((start for start in range(len(events) - len(kinds) + 1)
                   if [event["type"] for event in events[start:start + len(kinds)]] == kinds), None)
    out = []
    for index, event in enumerate(events):
        position = 0 if offset is None else min(max(index - offset, 0), len(times) - 1)
        out.append({**event, "time": times[position]})
    return out


def _ms(value: Any, zone: Any = timezone.utc) -> int | None:
    """A row's `created_at` (SQLite's `CURRENT_TIMESTAMP` text, or a naive datetime in
    `zone`) as epoch ms; None when it is neither."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=zone)
    return int(value.timestamp() * 1000)


def _times(rows: list[tuple[Any, Any]], items: list[Any], zone: Any = timezone.utc) -> list[int] | None:
    """The `created_at` of each item `get_items()` returned, from `rows` (message_data,
    created_at in the SDK's order): the rows it reads (valid JSON), which must decode
    to exactly its items; else None (the times are not carried)."""
    decoded: list[Any] = []
    times: list[int] = []
    for data, created in rows:
        try:
            decoded.append(json.loads(data))
        except (json.JSONDecodeError, TypeError):
            continue
        at = _ms(created, zone)
        if at is None:
            return None
        times.append(at)
    # Never back in time within a log (as the drop-ins stamp theirs): a row older than
    # the one before it gets that one's time.
    return list(accumulate(times, max)) if decoded == items else None


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
                       messages_table: str = "agent_messages", users: owners.UserMap | None = None) -> None:
    where = os.path.realpath(path)
    with tempfile.TemporaryDirectory(prefix="berth-migrate-") as scratch:
        copy = snapshot(path, scratch)
        rows = _session_rows(copy, sessions_table, messages_table)

        async def times(session_id: str, items: list[Any]) -> list[int] | None:
            conn = sqlite3.connect(copy)
            try:  # in `SQLiteSession.get_items()`'s order
                rows = conn.execute(f"SELECT message_data, created_at FROM {messages_table} WHERE session_id = ? "
                                    "ORDER BY id", (session_id,)).fetchall()
            finally:
                conn.close()
            return _times(rows, items)

        await _import_sessions(client, report, KIND, where, rows,
                               lambda session_id: SQLiteSession(session_id, copy, sessions_table, messages_table),
                               times, users)


async def _import_sessions(client: berth.Client, report: Report, kind: str, where: str, rows: list[tuple[str, int]],
                           open_source: Any, times: Any, users: owners.UserMap | None) -> None:
    """Every listed source session (`open_source(id)`: the SDK's session reading it)
    into berth, at the source's times (`times(id, items)`: each item's, or None), each
    under the user `users` maps it to (None: the caller's own)."""
    report.total = len(rows)
    for session_id, row_count in rows:
        user = users.user_for(session_id) if users is not None else None
        if users is not None and user is None:
            report.sessions += 1
            report.skip(session_id, "session", f"the user map {users.path} names no berth user for it: not imported")
            report.tick()
            continue
        source = open_source(session_id)
        try:
            items = await source.get_items()
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()
        report.sessions += 1
        if row_count > len(items):
            report.skip(session_id, f"{row_count - len(items)} rows",
                        f"rows {type(source).__name__} itself does not read (not valid JSON): not imported")
        await _import_session(client, keys.source_identity(kind, where, session_id), session_id, items, report,
                              await times(session_id, items), user)
        report.tick()
    report.tick(force=True)


# ----- SQLAlchemySession ----------------------------------------------------------------


def _engine(url: str, read_only: bool) -> Any:
    """An async SQLAlchemy engine on `url`; `read_only`: a server database's connections
    held read-only by the server (asyncpg's server settings, libpq's options)."""
    from sqlalchemy import make_url
    from sqlalchemy.ext.asyncio import create_async_engine

    parsed = make_url(url)
    options: dict[str, Any] = {}
    if read_only and parsed.get_backend_name() == "postgresql":
        if parsed.get_driver_name() == "asyncpg":
            options["connect_args"] = {"server_settings": {"default_transaction_read_only": "on"}}
        else:
            options["connect_args"] = {"options": "-c default_transaction_read_only=on"}
    return create_async_engine(url, **options)


async def _sqlalchemy_rows(engine: Any, sessions_table: str, messages_table: str) -> list[tuple[str, int]]:
    """`_session_rows` through the engine: the SDK lists no sessions."""
    from sqlalchemy import inspect, text

    async with engine.connect() as conn:
        tables = set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))
        if sessions_table not in tables:
            return []
        counts: dict[str, int] = {}
        if messages_table in tables:
            result = await conn.execute(text(f"SELECT session_id, COUNT(*) FROM {messages_table} GROUP BY session_id"))
            counts = {str(sid): int(n) for sid, n in result.all()}
        result = await conn.execute(text(f"SELECT session_id FROM {sessions_table} ORDER BY created_at, session_id"))
        ids = [str(row[0]) for row in result.all()]
    ids += sorted(set(counts) - set(ids))
    return [(session_id, counts.get(session_id, 0)) for session_id in ids]


async def _zone(engine: Any) -> Any:
    """The zone of the store's naive `created_at`s: SQLite's `CURRENT_TIMESTAMP` is UTC;
    PostgreSQL's is the session's `TimeZone`, the server's default for the SDK's writes."""
    from sqlalchemy import text

    if engine.dialect.name != "postgresql":
        return timezone.utc
    async with engine.connect() as conn:
        name = (await conn.execute(text("SHOW TIME ZONE"))).scalar_one()
    try:
        return ZoneInfo(str(name))
    except (ZoneInfoNotFoundError, ValueError):
        return timezone.utc


async def import_sqlalchemy(url: str, client: berth.Client, report: Report, *,
                            sessions_table: str = "agent_sessions", messages_table: str = "agent_messages",
                            users: owners.UserMap | None = None) -> None:
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
    from sqlalchemy import make_url

    parsed = make_url(url)
    with tempfile.TemporaryDirectory(prefix="berth-migrate-") as scratch:
        if parsed.get_backend_name() == "sqlite":
            if not parsed.database or parsed.database == ":memory:":
                raise ValueError(f"{redact(url)!r}: names no file")
            where = os.path.realpath(parsed.database)
            engine = _engine(str(parsed.set(database=snapshot(parsed.database, scratch))), read_only=False)
        else:
            where = redact(url)
            engine = _engine(url, read_only=True)
        try:
            rows = await _sqlalchemy_rows(engine, sessions_table, messages_table)
            zone = await _zone(engine)

            async def times(session_id: str, items: list[Any]) -> list[int] | None:
                from sqlalchemy import text

                async with engine.connect() as conn:  # in `SQLAlchemySession.get_items()`'s order
                    result = await conn.execute(text(
                        f"SELECT message_data, created_at FROM {messages_table} WHERE session_id = :id "
                        "ORDER BY created_at, id"), {"id": session_id})
                    return _times([tuple(row) for row in result.all()], items, zone)

            await _import_sessions(client, report, SQLALCHEMY_KIND, where, rows,
                                   lambda session_id: SQLAlchemySession(session_id, engine=engine,
                                                                        sessions_table=sessions_table,
                                                                        messages_table=messages_table),
                                   times, users)
        finally:
            await engine.dispose()


async def _import_session(client: berth.Client, identity: str, session_id: str, items: list[Any],
                          report: Report, times: list[int] | None = None, user: str | None = None) -> None:
    digests = [keys.digest(item) for item in items]
    chained = keys.chain(digests)
    target = _ImportSession(session_id, client)
    try:
        if user is not None:  # the session made for its user first (the drop-in writes on)
            held = owners.claim(client, target.berth_id, user, report.dry_run, title=session_id,
                                labels=list(target._labels), policy=target._policy)
            if held is not None:
                report.change(session_id, "session", owners.elsewhere(user, held))
                return
            report.owned(user)
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
        if state is not None and start:
            # The drop-in numbers its turns after the newest one a read met: read the
            # tail, so the rest continues the session's turns as one run would have.
            await target.get_items(limit=1)
        while start < len(items):
            batch = items[start:start + CHUNK_ITEMS]
            await _append(target, identity, start, batch, digests[start:start + len(batch)], session_id, report,
                          times[start:start + len(batch)] if times else None)
            start += len(batch)
            client.memory_put(keys.STATE_NAMESPACE, keys.state_key(identity),
                              {"source": session_id, "items": start, "chain": chained[start]},
                              bound_to=target.berth_id)
    finally:
        target.close()


async def _append(target: _ImportSession, identity: str, start: int, batch: Sequence[Any], digests: list[str],
                  session_id: str, report: Report, times: list[int] | None) -> None:
    """One batch through `add_items` under its key; item by item when berth refuses the
    batch, reporting the items it cannot hold."""
    target.import_key = keys.batch_key(identity, start, digests)
    target.import_items, target.import_times = list(batch), times
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
            await _append(target, identity, start + offset, [item], [digests[offset]], session_id, report,
                          times[offset:offset + 1] if times else None)
        except (berth.PayloadTooLarge, berth.LimitExceeded, berth.Invalid) as error:
            report.skip(session_id, f"item {start + offset}", f"berth cannot hold it: {type(error).__name__}: {error}")


async def export_store(client: berth.Client, path: str, report: Report, *, sessions_table: str = "agent_sessions",
                       messages_table: str = "agent_messages") -> None:
    if report.dry_run and not os.path.exists(path):
        await _export(client, report, lambda _: _Empty())  # a dry run makes no file
        return
    await _export(client, report, lambda session_id: SQLiteSession(session_id, path, sessions_table, messages_table))


async def export_sqlalchemy(client: berth.Client, url: str, report: Report, *,
                            sessions_table: str = "agent_sessions", messages_table: str = "agent_messages") -> None:
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
    from sqlalchemy import make_url

    parsed = make_url(url)
    file = parsed.database if parsed.get_backend_name() == "sqlite" and parsed.database != ":memory:" else None
    if report.dry_run and file is not None and not os.path.exists(file):
        await _export(client, report, lambda _: _Empty())  # a dry run makes no file
        return
    if file:
        os.makedirs(os.path.dirname(os.path.abspath(file)), exist_ok=True)
    engine = _engine(url, read_only=False)
    try:
        if report.dry_run and not (await _sqlalchemy_rows(engine, sessions_table, messages_table)):
            await _export(client, report, lambda _: _Empty())  # nor tables
            return
        await _export(client, report, lambda session_id: SQLAlchemySession(
            session_id, engine=engine, create_tables=True, sessions_table=sessions_table,
            messages_table=messages_table))
    finally:
        await engine.dispose()


class _Empty:
    """A target session that holds nothing (a dry run's, where the store is not made)."""

    async def get_items(self) -> list[Any]:
        return []


async def _export(client: berth.Client, report: Report, open_target: Any) -> None:
    """Every berth session into `open_target(id)` (the SDK's session writing it)."""
    session_ids = BerthSession.list_session_ids(client)
    report.total = len(session_ids)
    for session_id in session_ids:
        source = BerthSession(session_id, client)
        try:
            items = await source.get_items()
        finally:
            source.close()
        report.sessions += 1
        target = open_target(session_id)
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
            close = getattr(target, "close", None)
            if close is not None:
                close()
        report.tick()
    report.tick(force=True)
