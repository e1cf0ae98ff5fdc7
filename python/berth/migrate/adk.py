"""Google ADK's session stores (SQLite, PostgreSQL), into berth and back (google-adk 2.13).

The URL is the one ADK's own services take, and names the class that reads it, as
ADK's CLI does (`--session_service_uri`):

- `sqlite:///relative.db`, `sqlite:////absolute.db`: `SqliteSessionService` (ADK's
  own aiosqlite schema; `adk web`'s `.adk/session.db`);
- `sqlite+aiosqlite:///…`: `DatabaseSessionService` (SQLAlchemy's schema);
- `postgresql+asyncpg://…`, `postgresql+psycopg://…`: `DatabaseSessionService` on
  PostgreSQL (its async driver installed: asyncpg, or psycopg).

Import: a source file is copied first (`source.snapshot`: the source is never written,
and a live one is read as one snapshot); a PostgreSQL source is read in place, on
connections the server holds read-only (`default_transaction_read_only`: ADK's class
could not write it if it tried), each of ADK's reads one transaction (a live store's
session is taken as it was when read; the next run takes what came after). ADK's class
reads it — `list_sessions`
per app, `get_session` per session, `get_user_state` per user — and berth's drop-in
writes it: `BerthSessionService.create_session`, then `append_event` for every event,
so the berth session is what the drop-in writes (events, turns, carried `app:`/`user:`
writes, the ADK timestamps). Which apps and users the file holds is the one thing ADK
has no reader for: a plain `SELECT DISTINCT` of its tables' `app_name` / `user_id` (on
the copy, or through the service's own engine).

State is then imported as state, not only replayed (not every change came through an
event's `state_delta`): the session's own state and its last update time go into the
drop-in's index item for the session, the `app:` and `user:` state into the drop-in's
scoped memory items, one per key, as the drop-in keeps them (`_records`).

Reruns: what was taken from each source session is kept in berth's scoped memory
(`keys.STATE_NAMESPACE`: event count and a digest chained over the events); the events
berth's session holds are compared with the source's first events by digest, so a rerun,
or a run resumed after a kill, appends only the events after them; a source session
whose events changed since (or a berth session holding other events) is reported and
left as it is. A state key berth holds with another value than the source's, not
written by this run's events, is reported, not overwritten.

Export: `BerthSessionService` (every berth session labelled `adk`, its app, user and id
from its `adk/create` event) into ADK's class at the target URL: `create_session` with
the state no event sets, then `append_event` for every event. A state value that the
events' deltas do not end at cannot be written through ADK's classes: reported.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections import defaultdict
from typing import Any
from urllib.parse import unquote, urlparse

import sqlalchemy

from google.adk.events.event import Event
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.sessions.session import Session
from google.adk.sessions.state import State

import berth
from berth.integrations.adk import (
    BerthSessionService,
    app_state_namespace,
    encode_key,
    index_namespace,
    session_berth_id,
    user_state_namespace,
)
from berth.integrations.adk._records import _split

from . import keys
from .report import Report
from .source import redact, snapshot

KIND = "adk"
_PAGE = 500


# ----- the URL --------------------------------------------------------------------------


def sqlite_path(url: str) -> str:
    """The file of an ADK SQLite URL (`sqlite:///rel.db`, `sqlite:////abs.db`, and the
    `sqlite+aiosqlite:` forms), as ADK reads it."""
    scheme = url.partition(":")[0]
    if scheme != "sqlite" and not scheme.startswith("sqlite+"):
        raise ValueError(f"{url!r}: expected a SQLite URL (sqlite:///PATH or sqlite+aiosqlite:///PATH)")
    path = unquote(urlparse(url).path)
    path = path[1:] if path.startswith("/") else path
    if not path or path == ":memory:":
        raise ValueError(f"{url!r}: names no file")
    return path


def is_sqlite(url: str) -> bool:
    scheme = url.partition(":")[0]
    return scheme == "sqlite" or scheme.startswith("sqlite+")


def _database(url: str, read_only: bool) -> BaseSessionService:
    """`DatabaseSessionService` on a server database; `read_only`: every connection is
    held read-only by the server (asyncpg's server settings, libpq's options)."""
    from google.adk.sessions.database_session_service import DatabaseSessionService

    if not read_only:
        return DatabaseSessionService(url)
    if sqlalchemy.make_url(url).get_driver_name() == "asyncpg":
        args: dict[str, Any] = {"server_settings": {"default_transaction_read_only": "on"}}
    else:
        args = {"options": "-c default_transaction_read_only=on"}
    return DatabaseSessionService(url, connect_args=args)


def _service(url: str, path: str) -> BaseSessionService:
    """ADK's class for `url`'s scheme, on the file `path`."""
    if url.partition(":")[0] == "sqlite":
        from google.adk.sessions.sqlite_session_service import SqliteSessionService

        return SqliteSessionService(os.path.abspath(path))
    from google.adk.sessions.database_session_service import DatabaseSessionService

    scheme = url.partition(":")[0]
    return DatabaseSessionService(f"{scheme}:///{os.path.abspath(path)}")


async def _close(service: BaseSessionService) -> None:
    close = getattr(service, "close", None)
    if close is not None:
        result = close()
        if hasattr(result, "__await__"):
            await result


def _names(copy: str) -> tuple[list[str], dict[str, set[str]], set[str]]:
    """The apps the file holds, each app's users (sessions and user state), and the apps
    with app state: ADK lists none of them, so a plain SELECT of its tables' names."""
    conn = sqlite3.connect(copy)
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return _names_from(tables, lambda sql: conn.execute(sql).fetchall())
    finally:
        conn.close()


async def _database_names(service: BaseSessionService) -> tuple[list[str], dict[str, set[str]], set[str]]:
    """`_names`, through a `DatabaseSessionService`'s own engine (read-only, as it is)."""
    engine = service.db_engine  # type: ignore[attr-defined]
    async with engine.connect() as conn:
        tables = set(await conn.run_sync(lambda sync: sqlalchemy.inspect(sync).get_table_names()))
        rows = {}
        for sql in ("SELECT DISTINCT app_name, user_id FROM sessions", "SELECT DISTINCT app_name, user_id FROM "
                    "user_states", "SELECT app_name FROM app_states"):
            if sql.rsplit(" ", 1)[1] in tables:
                rows[sql] = [tuple(row) for row in (await conn.execute(sqlalchemy.text(sql))).all()]
    return _names_from(tables, lambda sql: rows[sql])


def _names_from(tables: set[str], query: Any) -> tuple[list[str], dict[str, set[str]], set[str]]:
    apps: set[str] = set()
    users: dict[str, set[str]] = defaultdict(set)
    for table in ("sessions", "user_states"):
        if table in tables:
            for app, user in query(f"SELECT DISTINCT app_name, user_id FROM {table}"):
                apps.add(app)
                users[app].add(user)
    stated: set[str] = set()
    if "app_states" in tables:
        stated = {row[0] for row in query("SELECT app_name FROM app_states")}
    return sorted(apps | stated), users, stated


# ----- helpers --------------------------------------------------------------------------


def _event_digest(event: Event) -> str:
    return keys.digest(event.model_dump(mode="json", exclude_none=True))


def _scope(client: berth.Client, namespace: str) -> dict[str, Any]:
    """The items of one memory namespace, by (encoded) key."""
    out: dict[str, Any] = {}
    cursor = None
    while True:
        page = client.memory_search(namespace, cursor=cursor, limit=_PAGE)
        out.update((item.key, item.value) for item in page.items if item.namespace == namespace)
        if not page.next_cursor:
            return out
        cursor = page.next_cursor


def _record(client: berth.Client, identity: str) -> dict[str, Any] | None:
    try:
        value = client.memory_get(keys.STATE_NAMESPACE, keys.state_key(identity)).value
    except berth.NotFound:
        return None
    return value if isinstance(value, dict) else None


def _touched(events: list[Event]) -> tuple[set[str], set[str], set[str]]:
    """The app, user and session keys the events' state deltas set."""
    app: set[str] = set()
    user: set[str] = set()
    session: set[str] = set()
    for event in events:
        delta = event.actions.state_delta if event.actions and event.actions.state_delta else {}
        a, u, s = _split(delta)
        app.update(a)
        user.update(u)
        session.update(s)
    return app, user, session


# ----- import ---------------------------------------------------------------------------


async def import_store(url: str, client: berth.Client, report: Report) -> None:
    report.unit = "events"
    if not is_sqlite(url):
        source = _database(url, read_only=True)
        try:
            names = await _database_names(source)
        except BaseException:
            await _close(source)
            raise
        await _import(source, redact(url), names, client, report)
        return
    path = sqlite_path(url)
    with tempfile.TemporaryDirectory(prefix="berth-migrate-") as scratch:
        copy = snapshot(path, scratch)
        await _import(_service(url, copy), os.path.realpath(path), _names(copy), client, report)


async def _import(source: BaseSessionService, where: str, names: tuple[list[str], dict[str, set[str]], set[str]],
                  client: berth.Client, report: Report) -> None:
    """Every session of `source` (named `where` in the bookkeeping) into berth; closes
    `source`."""
    apps, users, stated = names
    target = BerthSessionService(client)
    try:
        listed = {app: (await source.list_sessions(app_name=app)).sessions for app in apps}
        report.total = sum(len(each) for each in listed.values())
        for app in apps:
            touched: set[tuple[str, str]] = set()
            app_state: dict[str, Any] | None = None
            for row in listed[app]:
                session = await source.get_session(app_name=app, user_id=row.user_id, session_id=row.id)
                if session is None:  # deleted while listed (not in a snapshot)
                    continue
                app_part, _, _ = _split(session.state)
                app_state = app_part if app_state is None else app_state
                report.sessions += 1
                identity = keys.source_identity(KIND, where, f"{app}\x00{row.user_id}\x00{row.id}")
                await _import_session(client, target, identity, session, report, touched)
                report.tick()
            if app_state is None:
                if app in stated:
                    report.skip(app, "app state", "app: state of an app with no sessions: ADK has no reader for it")
                app_state = {}
            writes = [(app_state_namespace(app), app_state)]
            for user in sorted(users.get(app, ())):
                writes.append((user_state_namespace(app, user),
                               await source.get_user_state(app_name=app, user_id=user)))
            for namespace, state in writes:
                _put_state(client, namespace, state, touched, report, app)
    finally:
        await target.aclose()
        await _close(source)
    report.tick(force=True)


async def _import_session(client: berth.Client, target: BerthSessionService, identity: str, session: Session,
                          report: Report, touched: set[tuple[str, str]]) -> None:
    app, user, sid = session.app_name, session.user_id, session.id
    name = f"{app}/{user}/{sid}"
    events = list(session.events)
    digests = [_event_digest(event) for event in events]
    chained = keys.chain(digests)
    record = _record(client, identity)
    if record is not None:
        start = int(record.get("events", 0))
        if start > len(events) or chained[start] != record.get("chain"):
            report.change(name, f"events 0..{start - 1}",
                          "the source's events changed since the last import: the berth session is left as it is")
            return
    held_session = await target.get_session(app_name=app, user_id=user, session_id=sid)
    held = list(held_session.events) if held_session is not None else []
    if held and [_event_digest(event) for event in held] != digests[:len(held)]:
        report.change(name, f"{len(held)} events in berth",
                      "berth already holds this session with other events: not imported")
        return
    start = len(held)  # what a run killed before it recorded its state appended, too
    new = events[start:]
    report.records_unchanged += start
    _, _, session_state = _split(session.state)
    if report.dry_run:
        report.records += len(new)
        report.bytes += sum(keys.size(event.model_dump(mode="json", exclude_none=True)) for event in new)
        if new or held_session is None:
            report.imported += 1
        else:
            report.unchanged += 1
        return
    if held_session is None:
        held_session = await target.create_session(app_name=app, user_id=user, session_id=sid)
    for event in new:
        await target.append_event(held_session, event.model_copy(deep=True))
        report.records += 1
        report.bytes += keys.size(event.model_dump(mode="json", exclude_none=True))
        a, u, _ = _touched([event])
        touched.update((app_state_namespace(app), encode_key(key)) for key in a)
        touched.update((user_state_namespace(app, user), encode_key(key)) for key in u)
    berth_id = session_berth_id(app, user, sid)
    wrote_state = _put_session_state(client, berth_id, app, session_state, session.last_update_time,
                                     bool(new) or record is None, report, name)
    if new or wrote_state:
        report.imported += 1
    else:
        report.unchanged += 1
    client.memory_put(keys.STATE_NAMESPACE, keys.state_key(identity),
                      {"source": name, "events": len(events), "chain": chained[len(events)]}, bound_to=berth_id)


def _put_session_state(client: berth.Client, berth_id: str, app: str, state: dict[str, Any], last_update: float,
                       ours: bool, report: Report, name: str) -> bool:
    """The session's own state and last update time into its index item, as the source
    holds them. `ours`: this run wrote the session (or it was never imported), so the
    source's state wins; else a differing one is reported, not overwritten."""
    item = client.memory_get(index_namespace(app), berth_id)
    value = dict(item.value)
    if value.get("state") == state and value.get("last_update_time") == last_update:
        return False
    if not ours:
        report.change(name, "session state", "berth's session state differs from the source's: left as it is")
        return False
    value["state"] = state
    value["last_update_time"] = last_update
    client.memory_put(index_namespace(app), berth_id, value, expected_revision=item.revision, bound_to=berth_id)
    report.bytes += keys.size(state)
    return True


def _put_state(client: berth.Client, namespace: str, state: dict[str, Any], touched: set[tuple[str, str]],
               report: Report, app: str) -> None:
    """`app:` or `user:` state (keys without their prefix) into its memory items: a key
    berth lacks, or one this run's events wrote, takes the source's value; one berth
    holds with another value is reported."""
    held = _scope(client, namespace)
    for key, value in state.items():
        encoded = encode_key(key)
        if encoded in held and held[encoded] == value:
            continue
        if encoded in held and (namespace, encoded) not in touched:
            report.change(app, f"{namespace} {key}", "berth holds this state key with another value: left as it is")
            continue
        report.bytes += keys.size(value)
        if not report.dry_run:
            client.memory_put(namespace, encoded, value)


# ----- export ---------------------------------------------------------------------------


def _berth_sessions(client: berth.Client) -> dict[str, list[tuple[str, str]]]:
    """(user, id) of every ADK session berth holds, by app: from each `adk`-labelled
    session's `adk/create` event."""
    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    cursor = None
    while True:
        page = client.list_sessions(label="adk", cursor=cursor, limit=_PAGE)
        for each in page.items:
            first = client.read(each.id, from_seq=0, limit=1).events
            data = first[0].data if first and first[0].type == "adk/create" else None
            if isinstance(data, dict) and all(isinstance(data.get(k), str) for k in ("app", "user", "id")):
                if session_berth_id(data["app"], data["user"], data["id"]) == each.id:
                    out[data["app"]].append((data["user"], data["id"]))
        if not page.next_cursor:
            return out
        cursor = page.next_cursor


async def export_store(client: berth.Client, url: str, report: Report) -> None:
    report.unit = "events"
    if is_sqlite(url):
        path = sqlite_path(url)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        target = _service(url, path)
    else:
        target = _database(url, read_only=False)
    source = BerthSessionService(client)
    try:
        apps = _berth_sessions(client)
        listed = {app: (await source.list_sessions(app_name=app)).sessions for app in sorted(apps)}
        report.total = sum(len(each) for each in listed.values())
        for app, rows in listed.items():
            sessions = []
            for row in rows:
                got = await source.get_session(app_name=app, user_id=row.user_id, session_id=row.id)
                if got is not None:
                    sessions.append(got)
            app_touched, _, _ = _touched([event for each in sessions for event in each.events])
            user_touched = {user: _touched([e for each in sessions if each.user_id == user for e in each.events])[1]
                            for user in {each.user_id for each in sessions}}
            seeded: set[str] = set()
            written = []
            for session in sessions:
                report.sessions += 1
                if await _export_session(target, session, app_touched, user_touched[session.user_id], seeded,
                                         report):
                    written.append(session)
                report.tick()
            if report.dry_run:
                continue
            # The state each session ends at, once the whole app is written (its app: state
            # is every session's).
            for session in written:
                got = await target.get_session(app_name=app, user_id=session.user_id, session_id=session.id)
                if got is not None:
                    _check_state(got, session, report, f"{app}/{session.user_id}/{session.id}")
    finally:
        await source.aclose()
        await _close(target)
    report.tick(force=True)


async def _export_session(target: BaseSessionService, session: Session, app_touched: set[str],
                          user_touched: set[str], seeded: set[str], report: Report) -> bool:
    """Writes one session into the target; False when it was left as it is (changed)."""
    app, user, sid = session.app_name, session.user_id, session.id
    name = f"{app}/{user}/{sid}"
    events = list(session.events)
    held_session = await target.get_session(app_name=app, user_id=user, session_id=sid)
    held = list(held_session.events) if held_session is not None else []
    if held and [_event_digest(event) for event in held] != [_event_digest(event) for event in events[:len(held)]]:
        report.change(name, f"{len(held)} events in the target",
                      "the target already holds this session with other events: not exported")
        return False
    new = events[len(held):]
    report.records_unchanged += len(held)
    if not new and held_session is not None:
        report.unchanged += 1
        return True
    report.imported += 1
    report.records += len(new)
    report.bytes += sum(keys.size(event.model_dump(mode="json", exclude_none=True)) for event in new)
    if report.dry_run:
        return True
    if held_session is None:
        # The state no event sets, as the create's: the session's own keys, and the app's
        # and user's keys with the first session of each that is created here.
        app_state, user_state, own = _split(session.state)
        _, _, own_touched = _touched(events)
        state = {key: value for key, value in own.items() if key not in own_touched}
        if app not in seeded:
            seeded.add(app)
            state.update({State.APP_PREFIX + k: v for k, v in app_state.items() if k not in app_touched})
        if f"{app}\x00{user}" not in seeded:
            seeded.add(f"{app}\x00{user}")
            state.update({State.USER_PREFIX + k: v for k, v in user_state.items() if k not in user_touched})
        held_session = await target.create_session(app_name=app, user_id=user, session_id=sid, state=state)
    for event in new:
        await target.append_event(held_session, event.model_copy(deep=True))
    return True


def _check_state(written: Session, session: Session, report: Report, name: str) -> None:
    """A state key the target ends at otherwise than berth: ADK's classes write state
    only through a create's state and events' deltas, so it is reported."""
    for key in sorted(set(written.state) | set(session.state)):
        if written.state.get(key) != session.state.get(key):
            report.skip(name, f"state {key}",
                        "berth's value is not what the events' state deltas end at; ADK's classes cannot write it")
