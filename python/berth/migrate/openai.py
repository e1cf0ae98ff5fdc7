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

Several sessions are imported at once (`SESSIONS_IN_FLIGHT`): the drop-in's calls wait on
the store on worker threads with the GIL released, so one session's appends are in flight
while others are read. What berth already holds is read once, up front (`_Held`: every
import state, one memory search; the berth sessions, one listing), so a session berth
holds nothing of costs no read of berth; a session the listing does not name is created
by the import itself (as the drop-in creates it), and one that exists after all (made
since the listing) is read as before. A session's berth error is reported with it (the
others go on; a rerun tries it again); a failure of berth itself (unreachable, the key
refused) stops the import after the sessions in flight. The report's entries are in the
source's session order, whatever order the sessions finished in.

Export: `BerthSession.get_items()` (pops and clears applied: the live item list) into
`SQLiteSession.add_items` of the target file, or `SQLAlchemySession.add_items` of the
target database (its tables made by the SDK: `create_tables=True`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from itertools import accumulate
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agents.memory import SQLiteSession

import berth
from berth.integrations.openai_agents import BerthSession
from berth.integrations.openai_agents._records import LABEL, event_for_item
from berth.integrations.openai_agents._workers import _on_worker

from . import keys
from . import users as owners
from .report import Report
from .source import redact, snapshot

#: Items per append (one atomic batch each).
CHUNK_ITEMS = 256
#: Source sessions imported at once. Each is one berth session written by its own
#: `BerthSession`; the store works on several sessions' durable writes together while
#: Python reads and encodes the next ones (measured: python/bench/migrate.py).
SESSIONS_IN_FLIGHT = 8
KIND = "openai-sqlite"
SQLALCHEMY_KIND = "openai-sqlalchemy"


class _ImportSession(BerthSession):
    """`BerthSession` whose `add_items` appends under the idempotency key the importer
    sets (`import_key`) instead of a fresh one, and with the source's times
    (`import_times`, ms, one per item of `import_items`: each item's event at its row's
    `created_at`, the turn markers before the items at the first's, those after at the
    last's): the same writes as the drop-in's, at the times the source holds.

    Its run is detached when it is closed, never handed on to the process's next object
    of the session (`_binding`): the import opens each session once, so a handed-on run
    would only wait for the sweeper to detach it, and handing on costs a read of the
    session after each attach. `import_made`: the session's record, when the importer
    has just created it (`_berth_items`): the attach then needs no read of it first."""

    import_key: str | None = None
    import_items: list[Any] | None = None
    import_times: list[int] | None = None
    import_made: berth.Session | None = None

    def __init__(self, session_id: str, client: berth.Client) -> None:
        super().__init__(session_id, client)
        self._release_how.may_hand_on = False

    def _look(self, binding: Any, create: bool) -> berth.Session | None:
        made, self.import_made = self.import_made, None
        if made is not None and binding.seen is None:
            binding.seen = (made, time.monotonic())  # as fresh as the drop-in's own read
        return super()._look(binding, create)

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


@dataclass
class _Held:
    """What berth holds, read once before an import: every import state (one memory
    search of `keys.STATE_NAMESPACE`, by key) and the ids of the drop-in's sessions
    berth holds (one listing). Hints only where they say "nothing": a session they miss
    is created by the import (`_berth_items`), and one made since the listing is found by
    that create and read as before; a state is what `memory_get` would have answered."""

    states: dict[str, dict[str, Any]]
    berth_ids: set[str]

    @classmethod
    def read(cls, client: berth.Client) -> _Held:
        states: dict[str, dict[str, Any]] = {}
        cursor = None
        while True:
            page = client.memory_search(keys.STATE_NAMESPACE, cursor=cursor, limit=1000)
            for item in page.items:
                if item.namespace == keys.STATE_NAMESPACE and isinstance(item.value, dict):
                    states[item.key] = item.value
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        return cls(states, {session.id for session in client.iter_sessions(label=LABEL, include_blank=True)})

    def state(self, identity: str) -> dict[str, Any] | None:
        return self.states.get(keys.state_key(identity))


async def import_store(path: str, client: berth.Client, report: Report, *, sessions_table: str = "agent_sessions",
                       messages_table: str = "agent_messages", users: owners.UserMap | None = None,
                       in_flight: int | None = None) -> None:
    where = os.path.realpath(path)
    with tempfile.TemporaryDirectory(prefix="berth-migrate-") as scratch:
        copy = snapshot(path, scratch)
        rows = _session_rows(copy, sessions_table, messages_table)
        conn = sqlite3.connect(copy)  # the rows' times, every session's: on the loop's thread only
        try:
            async def times(session_id: str, items: list[Any], row_count: int) -> list[int] | None:
                if row_count == len(items):
                    # Every row decoded (the SDK skips only rows that do not), and the copy
                    # does not change: the rows' times, in `get_items()`'s order, are the
                    # items'. (A store read in place is checked item for item: `_times`.)
                    created = conn.execute(f"SELECT created_at FROM {messages_table} WHERE session_id = ? "
                                           "ORDER BY id", (session_id,)).fetchall()
                    stamps = [_ms(at) for (at,) in created]
                    if len(stamps) != len(items) or None in stamps:
                        return None
                    return list(accumulate(stamps, max))  # type: ignore[arg-type]
                found = conn.execute(f"SELECT message_data, created_at FROM {messages_table} WHERE session_id = ? "
                                     "ORDER BY id", (session_id,)).fetchall()
                return _times(found, items)

            readers = _Readers(lambda: SQLiteSession("", copy, sessions_table, messages_table))
            try:
                await _import_sessions(client, report, KIND, where, rows, readers.open, times, users, in_flight)
            finally:
                readers.close()
        finally:
            conn.close()


class _Readers:
    """`SQLiteSession`s reading the snapshot, one per session in flight, each pointed at
    the next session by its `session_id` (which the SDK reads at every query) instead of
    one made and closed per session: making one takes a lock entry, connects, configures
    the connection and checks the schema, and closing it closes its connections — in
    `python/bench/migrate.py --profile openai`, 2.5 ms a session, more than reading its
    50 items. The reads are the SDK's own `get_items()`."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._idle: list[Any] = []
        self._made: list[Any] = []

    def open(self, session_id: str) -> "_Lent":
        if self._idle:
            source = self._idle.pop()
        else:
            source = self._make()
            self._made.append(source)
        source.session_id = session_id
        return _Lent(source, self._idle)

    def close(self) -> None:
        for source in self._made:
            source.close()


class _Lent:
    """One of `_Readers`' sessions, lent for one source session: `close` gives it back."""

    def __init__(self, source: Any, idle: list[Any]) -> None:
        self.source, self._idle = source, idle
        self.name = type(source).__name__

    async def get_items(self) -> list[Any]:
        return await self.source.get_items()  # type: ignore[no-any-return]

    def close(self) -> None:
        self._idle.append(self.source)


#: Errors of one session (its berth session refused, busy, in the other mode, another
#: user's, damaged…): reported with it, the others go on. Errors of berth itself (the
#: key refused, the store unreachable, the client closed, an internal error) stop the run.
_RUN_ERRORS = (berth.Unauthenticated, berth.Forbidden, berth.Unavailable, berth.ClientClosed, berth.Internal)


async def _import_sessions(client: berth.Client, report: Report, kind: str, where: str, rows: list[tuple[str, int]],
                           open_source: Callable[[str], Any],
                           times: Callable[[str, list[Any], int], Awaitable[list[int] | None]],
                           users: owners.UserMap | None, in_flight: int | None = None) -> None:
    """Every listed source session (`open_source(id)`: the SDK's session reading it)
    into berth, at the source's times (`times(id, items, rows)`: each item's, or None),
    each under the user `users` maps it to (None: the caller's own); up to `in_flight`
    sessions at once (None: `SESSIONS_IN_FLIGHT`). The report's entries end in the
    source's session order."""
    report.total = len(rows)
    held = await _on_worker(_Held.read, client)
    skipped, changed = len(report.skipped), len(report.changed)
    pending = iter(rows)
    failures: list[BaseException] = []

    async def worker() -> None:
        for session_id, row_count in pending:  # shared: each row is taken by one worker
            if failures:
                return
            try:
                await _import_one(client, report, kind, where, held, session_id, row_count, open_source, times, users)
            except _RUN_ERRORS as error:
                failures.append(error)
                return
            except berth.BerthError as error:
                report.skip(session_id, "session", f"not imported, a rerun tries it again: "
                                                   f"{type(error).__name__}: {error}")
            except Exception as error:  # the source unreadable, a bug: the run stops
                failures.append(error)
                return
            report.tick()

    workers = max(1, min(in_flight if in_flight is not None else SESSIONS_IN_FLIGHT, len(rows)))
    await asyncio.gather(*(worker() for _ in range(workers)))
    order = {session_id: index for index, (session_id, _) in enumerate(rows)}
    _in_order(report.skipped, skipped, order)
    _in_order(report.changed, changed, order)
    report.tick(force=True)
    if failures:
        raise failures[0]


def _in_order(entries: list[dict[str, Any]], first: int, order: dict[str, int]) -> None:
    """`entries[first:]` in the source's session order (each session's own in the order
    it made them: the sort is stable)."""
    entries[first:] = sorted(entries[first:], key=lambda entry: order.get(entry["session"], len(order)))


async def _import_one(client: berth.Client, report: Report, kind: str, where: str, held: _Held, session_id: str,
                      row_count: int, open_source: Callable[[str], Any],
                      times: Callable[[str, list[Any], int], Awaitable[list[int] | None]],
                      users: owners.UserMap | None) -> None:
    """One source session: read through the SDK, then imported (`_import_session`)."""
    user = users.user_for(session_id) if users is not None else None
    if users is not None and user is None:
        report.sessions += 1
        report.skip(session_id, "session", f"the user map {users.path} names no berth user for it: not imported")
        return
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
                    f"rows {getattr(source, 'name', type(source).__name__)} itself does not read (not valid JSON): "
                    "not imported")
    await _import_session(client, held, keys.source_identity(kind, where, session_id), session_id, items, report,
                          await times(session_id, items, row_count), user)


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
                            users: owners.UserMap | None = None, in_flight: int | None = None) -> None:
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

            async def times(session_id: str, items: list[Any], row_count: int) -> list[int] | None:
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
                                   times, users, in_flight)
        finally:
            await engine.dispose()


async def _import_session(client: berth.Client, held: _Held, identity: str, session_id: str, items: list[Any],
                          report: Report, times: list[int] | None = None, user: str | None = None) -> None:
    digests = [keys.digest(item) for item in items]
    chained = keys.chain(digests)
    target = _ImportSession(session_id, client)
    try:
        if user is not None:  # the session made for its user first (the drop-in writes on)
            owner = await _on_worker(functools.partial(
                owners.claim, client, target.berth_id, user, report.dry_run, title=session_id,
                labels=list(target._labels), policy=target._policy))
            if owner is not None:
                report.change(session_id, "session", owners.elsewhere(user, owner))
                return
            report.owned(user)
        state = held.state(identity)
        if state is not None:
            start = int(state.get("items", 0))
            if start > len(items) or chained[start] != state.get("chain"):
                report.change(session_id, f"items 0..{start - 1}",
                              "the source's items changed since the last import: the berth session is left as it is")
                return
        else:
            found = await _berth_items(client, held, target, items, user, report.dry_run)
            if found and [keys.digest(item) for item in found] != digests[:len(found)]:
                report.change(session_id, f"{len(found)} items in berth",
                              "berth already holds this session with other items: not imported")
                return
            start = len(found)  # an import killed before it recorded its state, or a copy
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
            await _on_worker(functools.partial(
                client.memory_put, keys.STATE_NAMESPACE, keys.state_key(identity),
                {"source": session_id, "items": start, "chain": chained[start]}, bound_to=target.berth_id))
    finally:
        await target.aclose()


async def _berth_items(client: berth.Client, held: _Held, target: _ImportSession, items: list[Any],
                       user: str | None, dry_run: bool) -> list[Any]:
    """What berth holds of a session the import has no state of: the drop-in's read. Or,
    when the listing (`_Held`) names no such session, nothing: the import creates it
    now, as the drop-in would on its first write (not on a dry run, nor for a source
    session without items: nothing is written then). A session made since the listing
    is found by that create (`AlreadyExists`) and read. (Under `--user-map`, `claim`
    has made it already: read.)"""
    if user is None and target.berth_id not in held.berth_ids:
        if dry_run or not items:
            return []
        try:
            target.import_made = await _on_worker(functools.partial(
                client.create_session, target.berth_id, title=target.session_id, labels=target._labels,
                policy=target._policy))
            return []
        except berth.AlreadyExists:
            pass
    return await target.get_items()


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
