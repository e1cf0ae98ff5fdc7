"""`berth-migrate` for Google ADK's `DatabaseSessionService` on PostgreSQL
(`adk:postgresql+asyncpg://…`), on both transports, against the local PostgreSQL
(`BERTH_TEST_PG`, default the one on 127.0.0.1:5432; each test creates and drops its own
databases): the store of test_adk_migrate.py (a real `Runner` with a scripted model: two
apps, three users, function calls and responses, `app:`/`user:` deltas, state given at
create, a session with no events), written by ADK into PostgreSQL, is imported, and
berth's drop-in must return what ADK's service returns (`get_session` events and merged
state, `list_sessions`, `get_user_state`); the source database is never written (every
table's rows hashed before and after); a rerun imports nothing, also with its
bookkeeping lost; the export back into a fresh database read by the same class equals
the original, and its rerun writes nothing; a source session changed since the import is
reported, berth's left as it was."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.runners import Runner
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.genai import types

from berth.migrate import keys
from test_adk_migrate import SESSIONS, Scripted, _berth_view, _migrate, _view, _view_of, _where, weather

PG_SERVER = os.environ.get("BERTH_TEST_PG", "postgres://postgres@127.0.0.1:5432/postgres")


@pytest.fixture
def pg_database() -> Iterator[Any]:
    """Makes fresh databases on the test server (dropped afterwards): each call returns
    a new database's name."""
    made: list[str] = []

    def make() -> str:
        name = f"berth_mig_adk_{uuid.uuid4().hex[:12]}"
        _psql(PG_SERVER, f'CREATE DATABASE "{name}"')
        made.append(name)
        return name

    yield make
    for name in made:
        subprocess.run(["psql", PG_SERVER, "-qc", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'],
                       capture_output=True)


def _psql(url: str, sql: str) -> str:
    return subprocess.run(["psql", url, "-qAtc", sql], check=True, capture_output=True, text=True).stdout


def _url(name: str) -> str:
    """The SQLAlchemy URL ADK takes, for database `name` on the test server."""
    base = PG_SERVER.rpartition("/")[0].split("://", 1)[1]
    return f"postgresql+asyncpg://{base}/{name}"


def _rows(name: str) -> dict[str, str]:
    """A digest of every table's rows: the source must not change."""
    url = f"{PG_SERVER.rpartition('/')[0]}/{name}"
    out = {}
    for table in _psql(url, "SELECT table_name FROM information_schema.tables "
                            "WHERE table_schema = 'public' ORDER BY 1").split():
        rows = _psql(url, f'SELECT md5(string_agg(t::text, \'|\' ORDER BY t::text)) FROM "{table}" t')
        out[table] = hashlib.sha256(rows.encode()).hexdigest()
    return out


async def _build(url: str) -> None:
    service = DatabaseSessionService(url)
    try:
        for app, user, sid, state, messages in SESSIONS:
            agent = LlmAgent(name="forecaster", model=Scripted(model="scripted"), tools=[weather],
                             output_key="last_reply")
            runner = Runner(agent=agent, app_name=app, session_service=service)
            await service.create_session(app_name=app, user_id=user, session_id=sid, state=state)
            for text in messages:
                message = types.Content(role="user", parts=[types.Part(text=text)])
                async for _ in runner.run_async(user_id=user, session_id=sid, new_message=message):
                    pass
    finally:
        await service.close()


async def _read(url: str, times: bool = True) -> dict[str, Any]:
    service = DatabaseSessionService(url)
    try:
        return await _view(service, times)
    finally:
        await service.close()


def test_import_rerun_export(adk_place: Any, pg_database: Any, capsys: pytest.CaptureFixture[str]) -> None:
    name = pg_database()
    url = _url(name)
    asyncio.run(_build(url))
    original = asyncio.run(_read(url))
    events = sum(len(v["events"]) for k, v in original.items() if k.count("/") == 2 and not k.startswith("user"))
    assert events > 20 and original["weather/ann/s1"]["state"]["app:lookups"] == 3
    assert original["weather/cat/empty"]["events"] == []
    rows = _rows(name)
    where = _where(adk_place)
    client = adk_place.sync_client()

    code, report = _migrate(capsys, f"adk:{url}", *where, "--dry-run")
    assert code == 0 and report["events"] == events and report["sessions"] == len(SESSIONS), report
    assert client.list_sessions(label="adk").items == []

    code, report = _migrate(capsys, f"adk:{url}", *where)
    assert code == 0 and report["events"] == events and report["sessions_imported"] == len(SESSIONS), report
    assert asyncio.run(_berth_view(client)) == original
    assert _rows(name) == rows  # read-only on the source

    code, report = _migrate(capsys, f"adk:{url}", *where)
    assert code == 0 and report["events"] == 0 and report["events_unchanged"] == events, report
    for item in client.memory_search(keys.STATE_NAMESPACE, limit=100).items:
        client.memory_delete(item.namespace, item.key)
    code, report = _migrate(capsys, f"adk:{url}", *where)
    assert code == 0 and report["events"] == 0 and report["events_unchanged"] == events, report
    assert asyncio.run(_berth_view(client)) == original

    target = _url(pg_database())
    code, report = _migrate(capsys, "--to", f"adk:{target}", *where)
    assert code == 0 and report["events"] == events, report
    assert asyncio.run(_read(target, times=False)) == _view_of(original)
    for key, value in asyncio.run(_read(target)).items():
        if key.count("/") == 2 and not key.startswith(("user", "list")) and value["events"]:
            assert value["time"] == pytest.approx(original[key]["time"]), key
    code, report = _migrate(capsys, "--to", f"adk:{target}", *where)
    assert code == 0 and report["events"] == 0 and report["sessions_unchanged"] == len(SESSIONS), report

    # A source event rewritten in place: reported, berth's session left as it was.
    _psql(f"{PG_SERVER.rpartition('/')[0]}/{name}",
          "UPDATE events SET event_data = jsonb_set(event_data, '{content,parts,0,text}', '\"weather in Bergen?\"') "
          "WHERE id = (SELECT id FROM events WHERE app_name = 'weather' AND user_id = 'bob' "
          "ORDER BY timestamp LIMIT 1)")
    code, report = _migrate(capsys, f"adk:{url}", *where)
    assert code == 1 and [entry["session"] for entry in report["changed"]] == ["weather/bob/s1"], report
    assert report["events"] == 0
    assert asyncio.run(_berth_view(client))["weather/bob/s1"] == original["weather/bob/s1"]


def test_the_source_is_held_read_only(pg_database: Any) -> None:
    """The importer's service cannot write the source: the server refuses it."""
    from berth.migrate.adk import _database

    url = _url(pg_database())
    asyncio.run(_build(url))

    async def write() -> None:
        service = _database(url, read_only=True)
        try:
            await service.create_session(app_name="weather", user_id="eve", session_id="new")
        finally:
            await service.close()

    with pytest.raises(Exception, match="read-only transaction"):
        asyncio.run(write())
