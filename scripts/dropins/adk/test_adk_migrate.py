"""`berth-migrate` for Google ADK's session stores, on both transports:
`SqliteSessionService` (`adk:sqlite:///…`) and `DatabaseSessionService` on SQLite
(`adk:sqlite+aiosqlite:///…`) and on the local PostgreSQL through asyncpg and through
psycopg (`adk:postgresql+asyncpg://…`, `adk:postgresql+psycopg://…`; `BERTH_TEST_PG`,
each test its own databases). A store ADK itself wrote (a real `Runner` with a scripted
model, no network: two apps, three users, function calls and responses, state deltas
with `app:`/`user:` keys, state given at create and a session with no events) is
imported, and berth's drop-in must return what ADK's own service returns —
`get_session` events and merged state, `list_sessions`, `get_user_state` — with each
event at its ADK timestamp and each session under its ADK user; the source is never
written (file bytes, or every table's rows); a rerun imports nothing, also with its
bookkeeping lost; the export back into a fresh store read by the same ADK class equals
the original, and its rerun writes nothing; a source session changed since the import is
reported, berth's left as it was. A PostgreSQL source is held read-only by the server."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, AsyncGenerator

import pytest
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from berth.integrations.adk import BerthSessionService, encode_id, session_berth_id
from berth.migrate import keys
from berth.migrate.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import dropin_pg  # noqa: E402


class Scripted(BaseLlm):
    """Asks for the weather when told to, then answers from the tool's result."""

    async def generate_content_async(self, llm_request: Any, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1]
        response = next((p.function_response for p in last.parts if p.function_response), None)
        if response is not None:
            text = f"It is {response.response['result']}."
        elif "weather in " in (last.parts[0].text or ""):
            city = (last.parts[0].text or "").rsplit("weather in ", 1)[1].rstrip("?")
            call = types.FunctionCall(name="weather", args={"city": city})
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
            return
        else:
            text = "You are welcome."
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


def weather(city: str, tool_context: ToolContext) -> str:
    """The weather in a city."""
    tool_context.state["user:last_city"] = city
    tool_context.state["app:lookups"] = tool_context.state.get("app:lookups", 0) + 1
    tool_context.state["cities"] = [*tool_context.state.get("cities", []), city]
    tool_context.state["temp:scratch"] = "never stored"
    return f"sunny in {city}"


#: (app, user, session, create state, messages)
SESSIONS = [
    ("weather", "ann", "s1", {"user:lang": "en", "topic": "trip"}, ["weather in Paris?", "thanks"]),
    ("weather", "bob", "s1", {}, ["weather in Oslo?"]),
    ("weather", "ann", "s2", {"app:region": "eu"}, ["hello", "weather in Rome?"]),
    ("weather", "cat", "empty", {"user:plan": "pro", "draft": True}, []),
    ("shop", "ann", "cart", {"app:currency": "EUR"}, ["weather in Lima?", "ok"]),
]
APPS = ["shop", "weather"]


class Store:
    """One kind of ADK store: `sqlite` (`SqliteSessionService`), or
    `DatabaseSessionService` on `sqlite+aiosqlite`, `postgres-asyncpg`,
    `postgres-psycopg`: fresh ones made (the URL ADK takes), read with ADK's class,
    digested (the source must not change), one event rewritten in place."""

    def __init__(self, kind: str, tmp_path: Path, databases: dropin_pg.Databases) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.databases = databases
        self.names: dict[str, str] = {}  # URL -> database or file

    def new(self, name: str = "sessions") -> str:
        if self.kind.startswith("postgres"):
            database = self.databases.make()
            url = dropin_pg.sqlalchemy_url(database, self.kind.split("-")[1])
        else:
            os.makedirs(self.tmp_path / name, exist_ok=True)
            database = str(self.tmp_path / name / "sessions.db")
            url = f"{self.kind}:///{database}"
        self.names[url] = database
        return url

    def digest(self, url: str) -> dict[str, str]:
        if self.kind.startswith("postgres"):
            return dropin_pg.rows_digest(self.names[url])
        path = self.names[url]
        return {name: hashlib.sha256(Path(name).read_bytes()).hexdigest()
                for name in (path, f"{path}-wal", f"{path}-journal") if os.path.exists(name)}

    def rewrite_first_event(self, url: str) -> None:
        """The first event of weather/bob/s1 rewritten in place (its text)."""
        if self.kind.startswith("postgres"):
            dropin_pg.psql(dropin_pg.libpq_url(self.names[url]),
                           "UPDATE events SET event_data = jsonb_set(event_data, '{content,parts,0,text}', "
                           "'\"weather in Bergen?\"') WHERE id = (SELECT id FROM events WHERE app_name = 'weather' "
                           "AND user_id = 'bob' ORDER BY timestamp LIMIT 1)")
            return
        conn = sqlite3.connect(self.names[url])
        try:
            row = conn.execute("SELECT rowid, event_data FROM events WHERE app_name='weather' AND user_id='bob' "
                               "ORDER BY timestamp LIMIT 1").fetchone()
            data = json.loads(row[1]) if isinstance(row[1], str) else row[1]
            data["content"]["parts"][0]["text"] = "weather in Bergen?"
            conn.execute("UPDATE events SET event_data = ? WHERE rowid = ?", (json.dumps(data), row[0]))
            conn.commit()
        finally:
            conn.close()


STORES = ["sqlite", "sqlite+aiosqlite", "postgres-asyncpg", "postgres-psycopg"]


@pytest.fixture(params=STORES)
def adk_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    databases = dropin_pg.Databases("berth_mig_adk_")
    yield Store(request.param, tmp_path, databases)
    databases.drop()


def _service(url: str) -> Any:
    if url.startswith("sqlite:"):
        return SqliteSessionService(url[len("sqlite:///"):])
    return DatabaseSessionService(url)


async def _close(service: Any) -> None:
    await service.close()


async def _build(url: str) -> None:
    service = _service(url)
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
        await _close(service)


def _event(event: Any) -> dict[str, Any]:
    return event.model_dump(mode="json", exclude_none=True)


async def _view(service: Any, times: bool = True) -> dict[str, Any]:
    """Every session as `get_session` returns it, and every app's listing."""
    out: dict[str, Any] = {}
    for app in APPS:
        listed = (await service.list_sessions(app_name=app)).sessions
        rows = sorted((s.user_id, s.id, s.state, s.last_update_time if times else None, len(s.events))
                      for s in listed)
        out[f"list {app}"] = rows
        for user, sid, *_ in rows:
            got = await service.get_session(app_name=app, user_id=user, session_id=sid)
            out[f"{app}/{user}/{sid}"] = {"events": [_event(e) for e in got.events], "state": got.state,
                                          "time": got.last_update_time if times else None}
        for user in sorted({s.user_id for s in listed}):
            out[f"user {app}/{user}"] = await service.get_user_state(app_name=app, user_id=user)
    return out


def _where(place: Any) -> list[str]:
    if place.transport == "http":
        return ["--server", place.server.url, "--api-key", place.key()]
    return ["--data", str(place.store), "--tenant", place.tenant, "--user", "agent"]


def test_a_url_adk_does_not_take_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    for url in ("adk:mysql://host/db", "adk:/some/file.db", "adk:postgresql://host/db"):
        with pytest.raises(SystemExit) as stopped:
            main([url, "--data", "x", "--tenant", "t"])
        assert stopped.value.code == 2, url


def _migrate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main([*args, "--json", "--no-progress"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_import_rerun_export(adk_place: Any, adk_store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    url = adk_store.new()
    asyncio.run(_build(url))
    original = asyncio.run(_read(url))
    events = sum(len(v["events"]) for k, v in original.items() if k.count("/") == 2 and not k.startswith("user"))
    assert events > 20 and any("function_call" in json.dumps(v) for v in original.values())
    assert original["weather/ann/s1"]["state"]["app:lookups"] == 3  # one lookup from each of three sessions
    assert original["weather/cat/empty"]["events"] == []
    digest = adk_store.digest(url)
    where = _where(adk_place)
    client = adk_place.sync_client()

    code, report = _migrate(capsys, f"adk:{url}", *where, "--dry-run")
    assert code == 0 and report["events"] == events and report["sessions"] == len(SESSIONS), report
    assert client.list_sessions(label="adk").items == []

    code, report = _migrate(capsys, f"adk:{url}", *where)
    assert code == 0 and report["events"] == events and report["sessions_imported"] == len(SESSIONS), report
    assert asyncio.run(_berth_view(client)) == original
    assert adk_store.digest(url) == digest  # read-only on the source
    # The source's own times: each ADK event stored at its timestamp (ms).
    for key in ("weather/ann/s1", "shop/ann/cart"):
        app, user, sid = key.split("/")
        stored = [e for e in client.read(session_berth_id(app, user, sid), limit=1000).events
                  if isinstance(e.data, dict) and "adk" in e.data]  # the first event of each ADK event
        assert [e.time for e in stored] == [int(e["timestamp"] * 1000) for e in original[key]["events"]], key
    # Each session under its ADK user (`--user-from adk-user`, the default).
    for app, user, sid, *_ in SESSIONS:
        assert client.get_session(session_berth_id(app, user, sid)).header.scope.user == encode_id(user)

    code, report = _migrate(capsys, f"adk:{url}", *where)
    assert code == 0 and report["events"] == 0 and report["events_unchanged"] == events, report
    assert report["sessions_unchanged"] == len(SESSIONS), report
    # …also with the import's bookkeeping lost (as after a kill before it was written).
    for item in client.memory_search(keys.STATE_NAMESPACE, limit=100).items:
        client.memory_delete(item.namespace, item.key)
    code, report = _migrate(capsys, f"adk:{url}", *where)
    assert code == 0 and report["events"] == 0 and report["events_unchanged"] == events, report
    assert asyncio.run(_berth_view(client)) == original

    # Export back, through the same ADK class, into a fresh store.
    target = adk_store.new("exported")
    code, report = _migrate(capsys, "--to", f"adk:{target}", *where)
    assert code == 0 and report["events"] == events, report
    assert asyncio.run(_read(target, times=False)) == _view_of(original)
    # Times: every session with events ends at its last event's, as in the source.
    for key, value in asyncio.run(_read(target)).items():
        if key.count("/") == 2 and not key.startswith(("user", "list")) and value["events"]:
            assert value["time"] == pytest.approx(original[key]["time"]), key
    code, report = _migrate(capsys, "--to", f"adk:{target}", *where)
    assert code == 0 and report["events"] == 0 and report["sessions_unchanged"] == len(SESSIONS), report

    # A source session changed since the import (an event rewritten in place): reported,
    # berth's left as it was.
    adk_store.rewrite_first_event(url)
    code, report = _migrate(capsys, f"adk:{url}", *where)
    assert code == 1 and [entry["session"] for entry in report["changed"]] == ["weather/bob/s1"], report
    assert report["sessions_unchanged"] == len(SESSIONS) - 1, report
    assert report["events"] == 0
    assert asyncio.run(_berth_view(client))["weather/bob/s1"] == original["weather/bob/s1"]


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
def test_a_postgres_source_is_held_read_only(driver: str) -> None:
    """The importer's service cannot write the source: the server refuses it."""
    from berth.migrate.adk import _database

    databases = dropin_pg.Databases("berth_mig_adk_")
    try:
        url = dropin_pg.sqlalchemy_url(databases.make(), driver)
        asyncio.run(_build(url))

        async def write() -> None:
            service = _database(url, read_only=True)
            try:
                await service.create_session(app_name="weather", user_id="eve", session_id="new")
            finally:
                await service.close()

        with pytest.raises(Exception, match="read-only transaction"):
            asyncio.run(write())
    finally:
        databases.drop()


def test_adk_sessions_keep_their_own_users(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`--user-from adk-user` is ADK's only choice (berth's ADK drop-in keys sessions and
    `user:` state by the ADK user id): a map or the caller's user is a usage error."""
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"ann": "u1"}))
    url = f"adk:sqlite:///{tmp_path / 'sessions.db'}"
    for args in (["--user-map", str(users)], ["--user-from", "caller"]):
        with pytest.raises(SystemExit) as stopped:
            main([url, "--data", str(tmp_path / "berth"), "--tenant", "t", *args])
        assert stopped.value.code == 2, args
        assert "adk-user" in capsys.readouterr().err
    assert not (tmp_path / "berth").exists() and not (tmp_path / "sessions.db").exists()


async def _read(url: str, times: bool = True) -> dict[str, Any]:
    service = _service(url)
    try:
        return await _view(service, times)
    finally:
        await _close(service)


async def _berth_view(client: Any) -> dict[str, Any]:
    async with BerthSessionService(client) as service:
        return await _view(service)


def _view_of(view: dict[str, Any]) -> dict[str, Any]:
    """`view` without its times."""
    out: dict[str, Any] = {}
    for key, value in view.items():
        if key.startswith("list "):
            out[key] = [(u, s, st, None, n) for u, s, st, _, n in value]
        elif isinstance(value, dict) and "events" in value:
            out[key] = {**value, "time": None}
        else:
            out[key] = value
    return out
