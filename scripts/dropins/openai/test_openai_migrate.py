"""`berth-migrate` for the OpenAI Agents SDK's `SQLiteSession`, on both transports (a
real `berth serve`, and the embedded store): a store the SDK itself wrote (several
sessions, tool calls, a pop, a clear, an id berth's grammar refuses, a row the SDK
cannot read) is imported, and `BerthSession.get_items()` must equal
`SQLiteSession.get_items()` item for item; the source is never written; a rerun imports
nothing; a changed source record is reported, not overwritten; the export back to a
fresh `SQLiteSession` file equals the original again, and its rerun writes nothing."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents.memory import SQLiteSession

from berth.integrations.openai_agents import BerthSession
from berth.migrate.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import dropin_place  # noqa: E402


class _Place(dropin_place.Place):
    tenant_prefix = "mig"


mig_scratch, mig_server, mig_place = dropin_place.fixtures("mig_", _Place)

SESSIONS = ["alice", "bob", "carol ünïcode/id with spaces", "dora"]


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


def _build_source(path: Path) -> None:
    """The store, written by the SDK's own `SQLiteSession` (turns as `Runner.run` stores
    them: the input, then the model's items and the tools' outputs)."""
    async def write() -> None:
        for number, session_id in enumerate(SESSIONS):
            session = SQLiteSession(session_id, path)
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
            session.close()
    asyncio.run(write())
    conn = sqlite3.connect(path)  # one row the SDK itself skips: reported, not lost silently
    conn.execute("INSERT INTO agent_messages (session_id, message_data) VALUES ('alice', '{not json')")
    # Rows a minute apart, from 2025 on (the SDK's CURRENT_TIMESTAMP, UTC): the import
    # must keep these times, not stamp its own.
    conn.execute("UPDATE agent_messages SET created_at = datetime('2025-01-01', '+' || id || ' minutes')")
    conn.commit()
    conn.close()


def _source_times(path: Path, session_id: str) -> list[int]:
    """The `created_at` (epoch ms) of each row `SQLiteSession.get_items()` reads."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT message_data, strftime('%s', created_at) FROM agent_messages "
                            "WHERE session_id = ? ORDER BY id", (session_id,)).fetchall()
    finally:
        conn.close()
    out = []
    for data, seconds in rows:
        try:
            json.loads(data)
        except ValueError:
            continue
        out.append(int(seconds) * 1000)
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


def _items(path: Path, session_id: str) -> list[Any]:
    async def read() -> list[Any]:
        session = SQLiteSession(session_id, path)
        try:
            return await session.get_items()
        finally:
            session.close()
    return asyncio.run(read())


def _berth_items(client: Any, session_id: str) -> list[Any]:
    async def read() -> list[Any]:
        session = BerthSession(session_id, client)
        try:
            return await session.get_items()
        finally:
            session.close()
    return asyncio.run(read())


def _files(path: Path) -> dict[str, str]:
    """The database's bytes: the file and its write-ahead log (an empty log, which
    SQLite makes for any reader of a WAL database, counts as none)."""
    return {name: hashlib.sha256(Path(name).read_bytes()).hexdigest()
            for name in (str(path), f"{path}-wal") if os.path.exists(name) and os.path.getsize(name)}


def _where(place: Any) -> list[str]:
    if place.transport == "http":
        return ["--server", place.server.url, "--api-key", place.key()]
    return ["--data", str(place.store), "--tenant", place.tenant, "--user", "agent"]


def _migrate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main([*args, "--json", "--no-progress"])
    return code, json.loads(capsys.readouterr().out)


def test_import_rerun_change_and_export(mig_place: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "agents.db"
    _build_source(source)
    original = {session_id: _items(source, session_id) for session_id in SESSIONS}
    assert len(original["bob"]) == 10 and len(original["dora"]) == 2 and original["carol ünïcode/id with spaces"]
    files = _files(source)
    where = _where(mig_place)
    client = mig_place.sync_client()
    total = sum(len(items) for items in original.values())

    # A dry run writes nothing and says what it would.
    code, report = _migrate(capsys, f"openai-sqlite:{source}", *where, "--dry-run")
    assert report["dry_run"] and report["items"] == total and report["sessions"] == len(SESSIONS)
    assert BerthSession.list_session_ids(client) == []

    # The import: every session, item for item; the unreadable row reported.
    code, report = _migrate(capsys, f"openai-sqlite:{source}", *where)
    assert report["items"] == total and report["sessions_imported"] == len(SESSIONS), report
    assert [entry["session"] for entry in report["skipped"]] == ["alice"] and code == 1
    assert sorted(BerthSession.list_session_ids(client)) == sorted(SESSIONS)
    for session_id, items in original.items():
        assert _berth_items(client, session_id) == items, session_id
    assert _files(source) == files  # read-only on the source
    # The source's own times, kept: each item's event at its row's created_at; the turn
    # markers within them (the log's times never go back).
    for session_id in ("alice", "carol ünïcode/id with spaces"):
        item_times, all_times = _berth_times(client, session_id)
        want = _source_times(source, session_id)
        assert item_times == want and want[0] >= 1735689600000, session_id
        assert all_times == sorted(all_times) and all_times[0] == want[0] and all_times[-1] == want[-1]

    # A rerun imports nothing.
    code, report = _migrate(capsys, f"openai-sqlite:{source}", *where)
    assert report["items"] == 0 and report["items_unchanged"] == total and report["sessions_unchanged"] == len(SESSIONS)
    for session_id, items in original.items():
        assert _berth_items(client, session_id) == items

    # An import killed before it recorded what it took (its state gone): the rerun finds
    # the items already there and adds none.
    from berth.migrate import keys
    for entry in client.memory_search(keys.STATE_NAMESPACE).items:
        client.memory_delete(keys.STATE_NAMESPACE, entry.key)
    code, report = _migrate(capsys, f"openai-sqlite:{source}", *where)
    assert report["items"] == 0 and report["items_unchanged"] == total, report
    for session_id, items in original.items():
        assert _berth_items(client, session_id) == items

    # Export back to a fresh SQLiteSession file: the SDK reads what it wrote; rerun: nothing.
    target = tmp_path / "exported.db"
    code, report = _migrate(capsys, "--to", f"openai-sqlite:{target}", *where)
    assert code == 0 and report["items"] == total and report["sessions"] == len(SESSIONS), report
    for session_id, items in original.items():
        assert _items(target, session_id) == items, session_id
    code, report = _migrate(capsys, "--to", f"openai-sqlite:{target}", *where)
    assert code == 0 and report["items"] == 0 and report["items_unchanged"] == total

    # The source grows: only the new items arrive. A source item changed since: reported,
    # the berth session left as it is.
    asyncio.run(_add(source, "alice", [_user("one more")]))
    code, report = _migrate(capsys, f"openai-sqlite:{source}", *where)
    assert report["items"] == 1 and report["sessions_imported"] == 1
    assert _berth_items(client, "alice") == _items(source, "alice")
    conn = sqlite3.connect(source)
    conn.execute("UPDATE agent_messages SET message_data = ? WHERE id = (SELECT MIN(id) FROM agent_messages "
                 "WHERE session_id = 'bob')", (json.dumps(_user("rewritten")),))
    conn.commit()
    conn.close()
    code, report = _migrate(capsys, f"openai-sqlite:{source}", *where)
    assert code == 1 and [entry["session"] for entry in report["changed"]] == ["bob"] and report["items"] == 0
    assert _berth_items(client, "bob") == original["bob"]


async def _add(path: Path, session_id: str, items: list[Any]) -> None:
    session = SQLiteSession(session_id, path)
    await session.add_items(items)
    session.close()


def test_entry_and_text_report(mig_place: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m berth.migrate` starts (a child process: importing the SDK there costs
    seconds, so the migration itself runs in-process) and the text report reads."""
    child = subprocess.run([sys.executable, "-m", "berth.migrate", "--help"], capture_output=True, text=True, timeout=60)
    assert child.returncode == 0 and "openai-sqlite:PATH" in child.stdout, child.stderr
    source = tmp_path / "agents.db"
    asyncio.run(_add(source, "solo", [_user("hi"), _assistant("hello", 1)]))
    capsys.readouterr()
    assert main([f"openai-sqlite:{source}", *_where(mig_place), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "1 sessions" in out and "wrote 2 items" in out, out
