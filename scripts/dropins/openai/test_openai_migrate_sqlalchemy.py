"""`berth-migrate` for the OpenAI Agents SDK's `SQLAlchemySession`
(`openai-sqlalchemy:URL`), on both transports, on SQLite (`sqlite+aiosqlite:///PATH`) and
on the local PostgreSQL (`postgresql+asyncpg://…`, `BERTH_TEST_PG`; each test creates and
drops its own databases, in a zone that is not UTC): the store of test_openai_migrate.py (several sessions, tool
calls, a pop, a clear, an id berth's grammar refuses, a row the SDK cannot read), written
by the SDK's own `SQLAlchemySession`, is imported, and `BerthSession.get_items()` must
equal `SQLAlchemySession.get_items()` item for item; the source is never written; a
rerun imports nothing (also with its bookkeeping lost); the export back into a fresh
database, read by `SQLAlchemySession`, equals the original, and its rerun writes nothing;
a changed source item is reported, berth's session left as it is."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from berth.integrations.openai_agents import BerthSession
from berth.migrate import keys
from test_openai_migrate import (  # noqa: F401  (the fixtures, by name)
    SESSIONS,
    _assistant,
    _berth_items,
    _berth_times,
    _migrate,
    _tool_turn,
    _user,
    _where,
    mig_place,
    mig_scratch,
    mig_server,
)

PG_SERVER = os.environ.get("BERTH_TEST_PG", "postgres://postgres@127.0.0.1:5432/postgres")


@pytest.fixture(params=["sqlite", "postgres"])
def new_url(request: Any, tmp_path: Path) -> Iterator[Any]:
    """Makes fresh stores of one backend: each call returns a new async SQLAlchemy URL
    (a file under tmp_path, or a database on the test server, dropped afterwards)."""
    made: list[str] = []

    def make() -> str:
        name = f"berth_mig_oa_{uuid.uuid4().hex[:12]}"
        if request.param == "sqlite":
            return f"sqlite+aiosqlite:///{tmp_path / name}.db"
        subprocess.run(["psql", PG_SERVER, "-qc", f'CREATE DATABASE "{name}"'], check=True, capture_output=True)
        made.append(name)
        # Not UTC: the store's naive created_at are this zone's (the import must say so).
        subprocess.run(["psql", PG_SERVER, "-qc", f"ALTER DATABASE \"{name}\" SET timezone TO 'America/New_York'"],
                       check=True, capture_output=True)
        return f"postgresql+asyncpg://{PG_SERVER.rpartition('/')[0].split('://', 1)[1]}/{name}"

    yield make
    for name in made:
        subprocess.run(["psql", PG_SERVER, "-qc", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'],
                       capture_output=True)


async def _on(url: str, work: Any) -> Any:
    engine = create_async_engine(url)
    try:
        return await work(engine)
    finally:
        await engine.dispose()


def _session(engine: Any, session_id: str, create: bool = False) -> SQLAlchemySession:
    return SQLAlchemySession(session_id, engine=engine, create_tables=create)


def _build_source(url: str) -> None:
    async def write(engine: Any) -> None:
        for number, session_id in enumerate(SESSIONS):
            session = _session(engine, session_id, create=True)
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
        async with engine.begin() as conn:  # one row the SDK itself skips
            await conn.execute(text("INSERT INTO agent_messages (session_id, message_data) "
                                    "VALUES ('alice', '{not json')"))
            # Rows a minute apart from 2025-01-01 UTC (as naive times in the store's zone,
            # as CURRENT_TIMESTAMP writes them): the import must keep these times.
            if engine.dialect.name == "postgresql":
                await conn.execute(text("UPDATE agent_messages SET created_at = (TIMESTAMPTZ '2025-01-01 00:00:00+00' "
                                        "+ id * INTERVAL '1 minute') AT TIME ZONE current_setting('TimeZone')"))
            else:
                await conn.execute(text("UPDATE agent_messages SET created_at = "
                                        "datetime('2025-01-01', '+' || id || ' minutes')"))
    asyncio.run(_on(url, write))


def _source_times(url: str, session_id: str) -> list[int]:
    """The time each row `get_items()` reads was given above, from its id."""
    async def read(engine: Any) -> list[int]:
        async with engine.connect() as conn:
            rows = (await conn.execute(text("SELECT id, message_data FROM agent_messages WHERE session_id = :s "
                                            "ORDER BY created_at, id"), {"s": session_id})).all()
        out = []
        for row_id, data in rows:
            try:
                json.loads(data)
            except ValueError:
                continue
            out.append(1735689600000 + row_id * 60000)
        return out
    return asyncio.run(_on(url, read))


def _items(url: str) -> dict[str, list[Any]]:
    async def read(engine: Any) -> dict[str, list[Any]]:
        return {session_id: await _session(engine, session_id).get_items() for session_id in SESSIONS}
    return asyncio.run(_on(url, read))


def _rows(url: str) -> str:
    """A digest of the store's rows (every column): the source must not change."""
    async def read(engine: Any) -> str:
        async with engine.connect() as conn:
            out = []
            for table in ("agent_sessions", "agent_messages"):
                rows = (await conn.execute(text(f"SELECT * FROM {table} ORDER BY 1"))).all()
                out.append(repr([tuple(map(str, row)) for row in rows]))
        return hashlib.sha256("\n".join(out).encode()).hexdigest()
    return asyncio.run(_on(url, read))


def _tables(url: str) -> list[str]:
    async def read(engine: Any) -> list[str]:
        async with engine.connect() as conn:
            return [row[0] for row in (await conn.execute(text(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"))).all()]
    return asyncio.run(_on(url, read))


def _execute(url: str, sql: str, **params: Any) -> None:
    async def run(engine: Any) -> None:
        async with engine.begin() as conn:
            await conn.execute(text(sql), params)
    asyncio.run(_on(url, run))


def test_import_rerun_change_and_export(mig_place: Any, new_url: Any, capsys: pytest.CaptureFixture[str]) -> None:
    source = new_url()
    _build_source(source)
    original = _items(source)
    assert len(original["bob"]) == 10 and len(original["dora"]) == 2 and original["carol ünïcode/id with spaces"]
    rows = _rows(source)
    where = _where(mig_place)
    client = mig_place.sync_client()
    total = sum(len(items) for items in original.values())

    code, report = _migrate(capsys, f"openai-sqlalchemy:{source}", *where, "--dry-run")
    assert report["dry_run"] and report["items"] == total and report["sessions"] == len(SESSIONS), report
    assert BerthSession.list_session_ids(client) == []

    code, report = _migrate(capsys, f"openai-sqlalchemy:{source}", *where)
    assert report["items"] == total and report["sessions_imported"] == len(SESSIONS), report
    assert [entry["session"] for entry in report["skipped"]] == ["alice"] and code == 1
    for session_id, items in original.items():
        assert _berth_items(client, session_id) == items, session_id
    assert _rows(source) == rows  # read-only on the source
    for session_id in ("alice", "carol ünïcode/id with spaces"):  # the source's own times, kept
        item_times, all_times = _berth_times(client, session_id)
        assert item_times == _source_times(source, session_id), session_id
        assert all_times == sorted(all_times) and all_times[0] == item_times[0] and all_times[-1] == item_times[-1]

    code, report = _migrate(capsys, f"openai-sqlalchemy:{source}", *where)
    assert report["items"] == 0 and report["items_unchanged"] == total, report
    for entry in client.memory_search(keys.STATE_NAMESPACE).items:
        client.memory_delete(keys.STATE_NAMESPACE, entry.key)
    code, report = _migrate(capsys, f"openai-sqlalchemy:{source}", *where)
    assert report["items"] == 0 and report["items_unchanged"] == total, report

    target = new_url()
    code, report = _migrate(capsys, "--to", f"openai-sqlalchemy:{target}", *where, "--dry-run")
    assert code == 0 and report["items"] == total, report
    assert not os.path.exists(target.rpartition("///")[2]) if target.startswith("sqlite") else _tables(target) == []
    code, report = _migrate(capsys, "--to", f"openai-sqlalchemy:{target}", *where)
    assert code == 0 and report["items"] == total and report["sessions"] == len(SESSIONS), report
    assert _items(target) == original
    code, report = _migrate(capsys, "--to", f"openai-sqlalchemy:{target}", *where)
    assert code == 0 and report["items"] == 0 and report["items_unchanged"] == total

    _execute(source, "UPDATE agent_messages SET message_data = :data WHERE id = (SELECT MIN(id) FROM agent_messages "
                     "WHERE session_id = 'bob')", data=json.dumps(_user("rewritten")))
    code, report = _migrate(capsys, f"openai-sqlalchemy:{source}", *where)
    assert code == 1 and [entry["session"] for entry in report["changed"]] == ["bob"] and report["items"] == 0
    assert _berth_items(client, "bob") == original["bob"]
