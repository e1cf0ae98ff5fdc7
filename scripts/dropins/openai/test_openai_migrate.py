"""`berth-migrate` for the OpenAI Agents SDK's `SQLiteSession` (`openai-sqlite:PATH`) and
`SQLAlchemySession` (`openai-sqlalchemy:URL`: a SQLite file through aiosqlite, and the
local PostgreSQL through asyncpg and through psycopg — `BERTH_TEST_PG`, each test its
own databases, in a zone that is not UTC), on both transports (a real `berth serve`, and
the embedded store): a store the SDK itself wrote (several sessions, tool calls, a pop,
a clear, an id berth's grammar refuses, a row the SDK cannot read) is imported, and
`BerthSession.get_items()` must equal the SDK session's `get_items()` item for item, at
the source rows' own times; the source is never written; a rerun imports nothing (also
with its bookkeeping lost); the export back into a fresh store (a dry run into it first
makes nothing) equals the original again, and its rerun writes nothing; a source that
grew gives only its new items; a changed source record is reported, not overwritten.

`--user-map FILE.json` (session id -> berth user): each session under its user (a user
key lists only its own), one the map does not name skipped and reported; a bad mapping
file is refused before anything is written."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents.memory import SQLiteSession

from berth.integrations.openai_agents import BerthSession
from berth.migrate import keys
from berth.migrate.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import dropin_pg  # noqa: E402
import dropin_place  # noqa: E402


class _Place(dropin_place.Place):
    tenant_prefix = "mig"


mig_scratch, mig_server, mig_place = dropin_place.fixtures("mig_", _Place)

SESSIONS = ["alice", "bob", "carol ünïcode/id with spaces", "dora"]
#: 2025-01-01 00:00 UTC: the source rows' times are this plus their id in minutes.
EPOCH_2025_MS = 1735689600000


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _assistant(text: str, index: int) -> dict[str, Any]:
    return {"id": f"msg_{index}", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def _tool_turn(index: int) -> list[dict[str, Any]]:
    call = f"call_{index}"
    return [
        {"type": "function_call", "call_id": call, "name": "get_weather", "arguments": json.dumps({"city": f"c{index}"}),
         "id": f"fc_{index}", "status": "completed"},
        {"type": "function_call_output", "call_id": call, "output": f"sunny {index}"},
        _assistant(f"it is sunny in c{index}", index),
    ]


class Store:
    """One kind of OpenAI Agents SDK store: `sqlite` (`SQLiteSession`), or
    `SQLAlchemySession` on `sqlalchemy-sqlite` (aiosqlite), `postgres-asyncpg`,
    `postgres-psycopg`: fresh ones made, sessions opened with the SDK's class, plain SQL
    run on it, named as berth-migrate takes it."""

    def __init__(self, kind: str, tmp_path: Path, databases: dropin_pg.Databases) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.databases = databases

    def new(self) -> str:
        """A new store: a file path (`sqlite`), or an async SQLAlchemy URL."""
        name = f"berth_mig_oa_{uuid.uuid4().hex[:12]}"
        if self.kind == "sqlite":
            return str(self.tmp_path / f"{name}.db")
        if self.kind == "sqlalchemy-sqlite":
            return f"sqlite+aiosqlite:///{self.tmp_path / name}.db"
        # Not UTC: the store's naive created_at are this zone's (the import must say so).
        return dropin_pg.sqlalchemy_url(self.databases.make(timezone="America/New_York"), self.kind.split("-")[1])

    def spec(self, where: str) -> str:
        return f"openai-sqlite:{where}" if self.kind == "sqlite" else f"openai-sqlalchemy:{where}"

    def file(self, where: str) -> str | None:
        if self.kind == "sqlite":
            return where
        return where.rpartition("///")[2] if self.kind == "sqlalchemy-sqlite" else None

    async def on(self, where: str, work: Any, create: bool = False) -> Any:
        """`work(open)`, `open(session_id)` giving the SDK's session on the store."""
        if self.kind == "sqlite":
            opened: list[Any] = []

            def open_sqlite(session_id: str) -> Any:
                opened.append(SQLiteSession(session_id, where))
                return opened[-1]
            try:
                return await work(open_sqlite)
            finally:
                for session in opened:
                    session.close()
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(where)
        try:
            return await work(lambda session_id: SQLAlchemySession(session_id, engine=engine, create_tables=create))
        finally:
            await engine.dispose()

    def sql(self, where: str, statement: str, **params: Any) -> list[tuple[Any, ...]]:
        """One statement (`:name` parameters) on the store, committed; its rows."""
        if self.kind == "sqlite":
            conn = sqlite3.connect(where)
            try:
                rows = conn.execute(statement, params).fetchall()
                conn.commit()
                return rows
            finally:
                conn.close()
        from sqlalchemy import text
        from sqlalchemy.ext.asyncio import create_async_engine

        async def run() -> list[tuple[Any, ...]]:
            engine = create_async_engine(where)
            try:
                async with engine.begin() as conn:
                    result = await conn.execute(text(statement), params)
                    return [tuple(row) for row in result.all()] if result.returns_rows else []
            finally:
                await engine.dispose()
        return asyncio.run(run())

    def items(self, where: str, sessions: list[str] = SESSIONS) -> dict[str, list[Any]]:
        async def read(open_session: Any) -> dict[str, list[Any]]:
            return {session_id: await open_session(session_id).get_items() for session_id in sessions}
        return asyncio.run(self.on(where, read))

    def add(self, where: str, session_id: str, items: list[Any]) -> None:
        async def write(open_session: Any) -> None:
            await open_session(session_id).add_items(items)
        asyncio.run(self.on(where, write, create=True))

    def digest(self, where: str) -> str:
        """The store's rows (every column; a file's bytes too): the source must not change."""
        out = [repr([tuple(map(str, row)) for row in self.sql(where, f"SELECT * FROM {table} ORDER BY 1")])
               for table in ("agent_sessions", "agent_messages")]
        file = self.file(where)
        if file is not None:
            out += [hashlib.sha256(Path(name).read_bytes()).hexdigest()
                    for name in (file, f"{file}-wal") if os.path.exists(name) and os.path.getsize(name)]
        return hashlib.sha256("\n".join(out).encode()).hexdigest()

    def made(self, where: str) -> bool:
        """Whether the store exists: the file, or the SDK's tables."""
        file = self.file(where)
        if file is not None:
            return os.path.exists(file)
        return bool(self.sql(where, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"))


STORES = ["sqlite", "sqlalchemy-sqlite", "postgres-asyncpg", "postgres-psycopg"]


@pytest.fixture(params=STORES)
def oa_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    databases = dropin_pg.Databases("berth_mig_oa_")
    yield Store(request.param, tmp_path, databases)
    databases.drop()


def _build_source(store: Store, where: str) -> None:
    """The store, written by the SDK's own session class (turns as `Runner.run` stores
    them: the input, then the model's items and the tools' outputs)."""
    async def write(open_session: Any) -> None:
        for number, session_id in enumerate(SESSIONS):
            session = open_session(session_id)
            for turn in range(3 + number):
                await session.add_items([_user(f"{session_id} turn {turn}")])
                await session.add_items(_tool_turn(number * 10 + turn) if turn % 2 == 0
                                        else [_assistant(f"reply {turn}", number * 10 + turn)])
            if session_id == "bob":
                await session.pop_item()
                await session.pop_item()
            if session_id == "dora":
                await session.clear_session()
                await session.add_items([_user("after the clear"), _assistant("fresh", 99)])
    asyncio.run(store.on(where, write, create=True))
    # One row the SDK itself skips: reported, not lost silently.
    store.sql(where, "INSERT INTO agent_messages (session_id, message_data) VALUES ('alice', '{not json')")
    # Rows a minute apart from 2025-01-01 UTC (as naive times in the store's zone, as
    # CURRENT_TIMESTAMP writes them): the import must keep these times, not stamp its own.
    if store.kind.startswith("postgres"):
        store.sql(where, "UPDATE agent_messages SET created_at = (TIMESTAMPTZ '2025-01-01 00:00:00+00' "
                         "+ id * INTERVAL '1 minute') AT TIME ZONE current_setting('TimeZone')")
    else:
        store.sql(where, "UPDATE agent_messages SET created_at = datetime('2025-01-01', '+' || id || ' minutes')")


def _source_times(store: Store, where: str, session_id: str) -> list[int]:
    """The time each row the SDK reads was given above, from its id."""
    rows = store.sql(where, "SELECT id, message_data FROM agent_messages WHERE session_id = :s ORDER BY created_at, id",
                     s=session_id)
    out = []
    for row_id, data in rows:
        try:
            json.loads(data)
        except ValueError:
            continue
        out.append(EPOCH_2025_MS + int(row_id) * 60000)
    return out


def _berth_times(client: Any, session_id: str) -> tuple[list[int], list[int]]:
    """The times of the events storing the session's items, and of every event."""
    session = BerthSession(session_id, client)
    try:
        berth_id = session.berth_id
    finally:
        session.close()
    events, seq = [], 0
    while True:
        page = client.read(berth_id, from_seq=seq, limit=1000)
        events += page.events
        if not page.events or page.next_seq == seq:
            break
        seq = page.next_seq
    items = [e.time for e in events if isinstance(e.data, dict) and (e.data.get("openai_item") is True
                                                                       or "item" in e.data)]
    return items, [e.time for e in events]


def _berth_items(client: Any, session_id: str, exclusive: bool = False) -> list[Any]:
    async def read() -> list[Any]:
        session = BerthSession(session_id, client, exclusive=exclusive)
        try:
            return await session.get_items()
        finally:
            session.close()
    return asyncio.run(read())


def _where(place: Any) -> list[str]:
    if place.transport == "http":
        return ["--server", place.server.url, "--api-key", place.key()]
    return ["--data", str(place.store), "--tenant", place.tenant, "--user", "agent"]


def _migrate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main([*args, "--json", "--no-progress"])
    return code, json.loads(capsys.readouterr().out)


def test_import_rerun_change_and_export(mig_place: Any, oa_store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    store = oa_store
    source = store.new()
    _build_source(store, source)
    original = store.items(source)
    assert len(original["bob"]) == 10 and len(original["dora"]) == 2 and original["carol ünïcode/id with spaces"]
    digest = store.digest(source)
    where = _where(mig_place)
    client = mig_place.sync_client()
    total = sum(len(items) for items in original.values())

    # A dry run writes nothing and says what it would.
    code, report = _migrate(capsys, store.spec(source), *where, "--dry-run")
    assert report["dry_run"] and report["items"] == total and report["sessions"] == len(SESSIONS), report
    assert BerthSession.list_session_ids(client) == []

    # The import: every session, item for item; the unreadable row reported.
    code, report = _migrate(capsys, store.spec(source), *where)
    assert report["items"] == total and report["sessions_imported"] == len(SESSIONS), report
    assert [entry["session"] for entry in report["skipped"]] == ["alice"] and code == 1
    assert sorted(BerthSession.list_session_ids(client)) == sorted(SESSIONS)
    for session_id, items in original.items():
        assert _berth_items(client, session_id) == items, session_id
    assert store.digest(source) == digest  # read-only on the source
    # The source's own times, kept: each item's event at its row's created_at; the turn
    # markers within them (the log's times never go back).
    for session_id in ("alice", "carol ünïcode/id with spaces"):
        item_times, all_times = _berth_times(client, session_id)
        want = _source_times(store, source, session_id)
        assert item_times == want and want[0] > EPOCH_2025_MS, session_id
        assert all_times == sorted(all_times) and all_times[0] == want[0] and all_times[-1] == want[-1]

    # A rerun imports nothing; nor one whose bookkeeping was lost (an import killed before
    # it recorded what it took: the items already there are found).
    code, report = _migrate(capsys, store.spec(source), *where)
    assert report["items"] == 0 and report["items_unchanged"] == total and report["sessions_unchanged"] == len(SESSIONS)
    for entry in client.memory_search(keys.STATE_NAMESPACE).items:
        client.memory_delete(keys.STATE_NAMESPACE, entry.key)
    code, report = _migrate(capsys, store.spec(source), *where)
    assert report["items"] == 0 and report["items_unchanged"] == total, report
    for session_id, items in original.items():
        assert _berth_items(client, session_id) == items

    # Export back into a fresh store (a dry run into it first makes nothing): the SDK
    # reads what it wrote; rerun: nothing.
    target = store.new()
    code, report = _migrate(capsys, "--to", store.spec(target), *where, "--dry-run")
    assert code == 0 and report["items"] == total, report
    assert not store.made(target)
    code, report = _migrate(capsys, "--to", store.spec(target), *where)
    assert code == 0 and report["items"] == total and report["sessions"] == len(SESSIONS), report
    assert store.items(target) == original
    code, report = _migrate(capsys, "--to", store.spec(target), *where)
    assert code == 0 and report["items"] == 0 and report["items_unchanged"] == total

    # The source grows: only the new items arrive. A source item changed since: reported,
    # the berth session left as it is.
    store.add(source, "alice", [_user("one more")])
    code, report = _migrate(capsys, store.spec(source), *where)
    assert report["items"] == 1 and report["sessions_imported"] == 1, report
    assert _berth_items(client, "alice") == store.items(source, ["alice"])["alice"]
    store.sql(source, "UPDATE agent_messages SET message_data = :data WHERE id = (SELECT MIN(id) FROM agent_messages "
                      "WHERE session_id = 'bob')", data=json.dumps(_user("rewritten")))
    code, report = _migrate(capsys, store.spec(source), *where)
    assert code == 1 and [entry["session"] for entry in report["changed"]] == ["bob"] and report["items"] == 0
    assert _berth_items(client, "bob") == original["bob"]


def test_user_map(mig_place: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store("sqlite", tmp_path, dropin_pg.Databases("unused_"))
    source = store.new()
    _build_source(store, source)
    original = store.items(source)
    where = _where(mig_place)
    client = mig_place.sync_client()
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"alice": "ann", "bob": "bob", "carol ünïcode/id with spaces": "ann"}))

    # "dora" is not in the map: skipped and reported (with alice's unreadable row).
    code, report = _migrate(capsys, store.spec(source), *where, "--user-map", str(users))
    assert code == 1 and report["users"] == {"ann": 2, "bob": 1}, report
    skipped = {(entry["session"], entry["record"]) for entry in report["skipped"]}
    assert ("dora", "session") in skipped and len(skipped) == 2, report
    assert sorted(BerthSession.list_session_ids(client)) == sorted(SESSIONS[:3])
    for session_id in SESSIONS[:3]:
        assert _berth_items(client, session_id) == original[session_id], session_id
    owners = {}
    for session_id in SESSIONS[:3]:
        session = BerthSession(session_id, client)
        owners[session_id] = client.get_session(session.berth_id).header.scope.user
        session.close()
    assert owners == {"alice": "ann", "bob": "bob", "carol ünïcode/id with spaces": "ann"}
    # A user's own key lists its sessions only.
    assert sorted(BerthSession.list_session_ids(mig_place.sync_client(user="ann", role="user"))) == \
        ["alice", "carol ünïcode/id with spaces"]
    assert BerthSession.list_session_ids(mig_place.sync_client(user="bob", role="user")) == ["bob"]

    # A bad mapping file: refused, nothing more written.
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"dora": "dora smith"}))
    capsys.readouterr()
    code = main([store.spec(source), *where, "--user-map", str(bad), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "UserMapError" in err and "'dora smith'" in err, err
    assert "dora" not in BerthSession.list_session_ids(client)


def test_entry_and_text_report(mig_place: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m berth.migrate` starts (a child process: importing the SDK there costs
    seconds, so the migration itself runs in-process) and the text report reads."""
    child = subprocess.run([sys.executable, "-m", "berth.migrate", "--help"], capture_output=True, text=True, timeout=60)
    assert child.returncode == 0 and "openai-sqlite:PATH" in child.stdout and "--user-map" in child.stdout, child.stderr
    store = Store("sqlite", tmp_path, dropin_pg.Databases("unused_"))
    source = store.new()
    store.add(source, "solo", [_user("hi"), _assistant("hello", 1)])
    capsys.readouterr()
    assert main([store.spec(source), *_where(mig_place), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "1 sessions" in out and "wrote 2 items" in out, out
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"solo": "ann"}))
    source = store.new()
    store.add(source, "solo2", [_user("hi")])
    users.write_text(json.dumps({"solo2": "ann"}))
    assert main([store.spec(source), *_where(mig_place), "--user-map", str(users), "--no-progress"]) == 0
    assert "users: ann 1" in capsys.readouterr().out


# ----- several sessions at once ----------------------------------------------------------

FIVE = ["anna", "ben", "cleo", "dan", "eve"]


def _five(store: Store, where: str) -> dict[str, list[Any]]:
    """Five sessions of a few turns each (named in the order the import lists them)."""
    for number, session_id in enumerate(FIVE):
        store.add(where, session_id, [_user(f"{session_id} asks"), *_tool_turn(number)])
    return store.items(where, FIVE)


def test_a_session_failing_leaves_the_others(mig_place: Any, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Two sessions berth holds in the other concurrency mode (a drop-in opened them
    `exclusive=True`): each is reported with its error and left as it is; the others,
    in flight beside them, are imported item for item; a rerun reports the two again
    and takes nothing else twice."""
    store = Store("sqlite", tmp_path, dropin_pg.Databases("unused_"))
    source = store.new()
    original = _five(store, source)
    client = mig_place.sync_client()

    async def hold(session_id: str) -> None:
        session = BerthSession(session_id, client, exclusive=True)
        try:
            await session.add_items([_user("written on berth first")])
        finally:
            session.close()
    for session_id in ("ben", "dan"):
        asyncio.run(hold(session_id))

    for run in range(2):
        code, report = _migrate(capsys, store.spec(source), *_where(mig_place))
        assert code == 1 and report["sessions"] == len(FIVE), report
        assert [(entry["session"], entry["record"]) for entry in report["skipped"]] == [("ben", "session"),
                                                                                      ("dan", "session")]
        assert all("SessionModeMismatch" in entry["reason"] for entry in report["skipped"]), report
        others = ["anna", "cleo", "eve"]
        want = sum(len(original[session_id]) for session_id in others)
        assert (report["items"], report["items_unchanged"]) == ((want, 0) if run == 0 else (0, want)), report
        for session_id in others:
            assert _berth_items(client, session_id) == original[session_id], session_id
        for session_id in ("ben", "dan"):
            assert _berth_items(client, session_id, exclusive=True) == [_user("written on berth first")], session_id


def test_sessions_in_flight_together_report_in_source_order(mig_place: Any, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The sessions are imported together (each one here waits for the next to finish
    first, which only works with all of them in flight), and finish in the reverse of
    the source's order; the report still lists the changes in the source's order."""
    from berth.migrate import openai as importer

    store = Store("sqlite", tmp_path, dropin_pg.Databases("unused_"))
    source = store.new()
    original = _five(store, source)
    where = _where(mig_place)
    code, report = _migrate(capsys, store.spec(source), *where)
    assert code == 0 and report["sessions_imported"] == len(FIVE), report
    # Each session's first row rewritten: every one a change on the next run.
    store.sql(source, "UPDATE agent_messages SET message_data = :data WHERE id IN "
                      "(SELECT MIN(id) FROM agent_messages GROUP BY session_id)", data=json.dumps(_user("rewritten")))

    original_import = importer._import_session
    finished: dict[str, asyncio.Event] = {}
    order: list[str] = []

    async def last_first(client: Any, held: Any, identity: str, session_id: str, *args: Any) -> None:
        done = finished.setdefault(session_id, asyncio.Event())
        later = FIVE[FIVE.index(session_id) + 1:]
        if later:
            await asyncio.wait_for(finished.setdefault(later[0], asyncio.Event()).wait(), timeout=30)
        try:
            await original_import(client, held, identity, session_id, *args)
        finally:
            order.append(session_id)
            done.set()

    monkeypatch.setattr(importer, "_import_session", last_first)
    code, report = _migrate(capsys, store.spec(source), *where)
    assert order == FIVE[::-1]
    assert code == 1 and [entry["session"] for entry in report["changed"]] == FIVE, report
    assert report["items"] == 0 and report["sessions_unchanged"] == 0, report
    for session_id in FIVE:
        assert _berth_items(mig_place.sync_client(), session_id) == original[session_id]


def test_a_session_continued_on_berth_is_no_change(mig_place: Any, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """After the import, the app goes on in berth: a rerun finds every session as the
    import left it (its record of what it took), reports no change and writes nothing;
    an item the source gains later still arrives, after berth's own."""
    store = Store("sqlite", tmp_path, dropin_pg.Databases("unused_"))
    source = store.new()
    original = _five(store, source)
    where = _where(mig_place)
    client = mig_place.sync_client()
    code, report = _migrate(capsys, store.spec(source), *where)
    assert code == 0 and report["sessions_imported"] == len(FIVE), report

    async def go_on(session_id: str, item: Any) -> None:
        session = BerthSession(session_id, client)
        try:
            await session.add_items([item])
        finally:
            session.close()
    for session_id in FIVE:
        asyncio.run(go_on(session_id, _user(f"{session_id} goes on in berth")))
    code, report = _migrate(capsys, store.spec(source), *where)
    total = sum(len(items) for items in original.values())
    assert code == 0 and report["changed"] == [] and report["items"] == 0, report
    assert report["sessions_unchanged"] == len(FIVE) and report["items_unchanged"] == total, report

    store.add(source, "cleo", [_user("cleo, later, in the old app")])
    code, report = _migrate(capsys, store.spec(source), *where)
    assert code == 0 and report["items"] == 1 and report["sessions_imported"] == 1, report
    assert _berth_items(client, "cleo") == [*original["cleo"], _user("cleo goes on in berth"),
                                            _user("cleo, later, in the old app")]


def test_a_session_made_since_the_listing_is_read(mig_place: Any, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The listing read before the import is a hint: a session berth holds that it does
    not name (made by the app after it was read; here, a listing that names nothing) is
    found when the import goes to create it, and read: other items are reported and left
    as they are, the import's own (a copy, or an earlier run's) are not taken twice."""
    from berth.migrate import openai as importer

    store = Store("sqlite", tmp_path, dropin_pg.Databases("unused_"))
    source = store.new()
    original = _five(store, source)
    where = _where(mig_place)
    client = mig_place.sync_client()

    async def write(session_id: str, items: list[Any]) -> None:
        session = BerthSession(session_id, client)
        try:
            await session.add_items(items)
        finally:
            session.close()
    asyncio.run(write("ben", [_user("the app's own")]))
    asyncio.run(write("dan", original["dan"][:2]))
    monkeypatch.setattr(importer._Held, "read", classmethod(lambda cls, client: cls({}, set())))
    code, report = _migrate(capsys, store.spec(source), *where)
    assert code == 1 and [(entry["session"], entry["record"]) for entry in report["changed"]] == \
        [("ben", "1 items in berth")], report
    assert report["items_unchanged"] == 2 and report["sessions_imported"] == 4, report
    assert _berth_items(client, "ben") == [_user("the app's own")]
    for session_id in ("anna", "cleo", "dan", "eve"):
        assert _berth_items(client, session_id) == original[session_id], session_id
