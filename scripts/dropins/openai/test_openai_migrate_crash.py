"""`berth-migrate openai-sqlite:` killed part-way, on both transports: a child
`python -m berth.migrate` importing a many-session `SQLiteSession` store (each session
several 256-item batches) is SIGKILLed once berth holds some of its sessions, a second
child is SIGKILLed later on, and a third run finishes. The result must equal a clean
import's into another tenant: every session's items as `SQLiteSession.get_items()`
returns them, and the same stored events (type and data, in order) — nothing appended
twice, nothing lost; the finished run's report counts every item, written then or
before."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from agents.memory import SQLiteSession

import berth
from berth.integrations.openai_agents import BerthSession
from test_openai_migrate import (  # noqa: F401  (the fixtures, by name)
    _berth_items,
    _migrate,
    _tool_turn,
    _user,
    _where,
    mig_place,
    mig_scratch,
    mig_server,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dropin_kill import kill_when  # noqa: E402

SESSIONS = [f"s{number:03d}" for number in range(24)]
TURNS = 150  # 4 items a turn (user, call, output, reply): 600 items, three batches of 256


def _build_source(path: Path) -> None:
    async def write() -> None:
        for number, session_id in enumerate(SESSIONS):
            session = SQLiteSession(session_id, path)
            items: list[Any] = []
            for turn in range(TURNS):
                items += [_user(f"{session_id} turn {turn}"), *_tool_turn(number * 1000 + turn)]
            await session.add_items(items)
            session.close()
    asyncio.run(write())


def _log(client: berth.Client, berth_id: str) -> list[tuple[str, str]]:
    """A session's stored events as (type, data): what an import wrote, times aside."""
    out: list[tuple[str, str]] = []
    seq = 0
    while True:
        page = client.read(berth_id, from_seq=seq, limit=1000)
        out += [(event.type, json.dumps(event.data, sort_keys=True)) for event in page.events]
        if page.next_seq == seq or not page.events:
            return out
        seq = page.next_seq


def _logs(client: berth.Client) -> dict[str, list[tuple[str, str]]]:
    out = {}
    for session_id in BerthSession.list_session_ids(client):
        session = BerthSession(session_id, client)
        try:
            out[session_id] = _log(client, session.berth_id)
        finally:
            session.close()
    return out


def _counts(client: berth.Client) -> dict[str, int]:
    """Items per session berth holds."""
    return {session_id: len(_berth_items(client, session_id)) for session_id in BerthSession.list_session_ids(client)}


def _kill_part_way(args: list[str], client: berth.Client, far_enough: Any) -> None:
    """Runs `python -m berth.migrate ARGS` and SIGKILLs it once `far_enough(client)`
    (the child must not have finished by then)."""
    kill_when([sys.executable, "-m", "berth.migrate", *args, "--no-progress"], lambda: far_enough(client),
              what="the point it is killed at", poll_s=0.005)


class _MidSession:
    """Far enough once, after `start` full sessions, one session holds some of its
    batches but not all (the kill lands between two appends of one session)."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.full: set[str] = set()

    def __call__(self, client: berth.Client) -> bool:
        ids = BerthSession.list_session_ids(client)
        for session_id in ids:
            if session_id in self.full:
                continue
            count = len(_berth_items(client, session_id))
            if count == TURNS * 4:
                self.full.add(session_id)
            elif count > 0 and len(self.full) >= self.start:
                return True
        return False


def test_killed_twice_then_finished_equals_a_clean_import(mig_place: Any, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "agents.db"
    _build_source(source)
    where = _where(mig_place)
    client = mig_place.sync_client()

    # First killed between two batches of one session, then just after it made a session.
    # (The kill follows the poll that saw a session part-written; on a loaded machine the
    # child may finish that session first: then it is killed again, at most twice more.)
    for _attempt in range(3):
        _kill_part_way([f"openai-sqlite:{source}", *where], client, _MidSession(len(SESSIONS) // 4))
        counts = _counts(client)
        if any(0 < n < TURNS * 4 for n in counts.values()):
            break
    assert len(counts) < len(SESSIONS) and any(0 < n < TURNS * 4 for n in counts.values()), counts
    _kill_part_way([f"openai-sqlite:{source}", *where], client,
                   lambda client: len(BerthSession.list_session_ids(client)) > len(counts) + len(SESSIONS) // 3)
    assert len(_counts(client)) < len(SESSIONS), "the second child finished before the kill"
    code, report = _migrate(capsys, f"openai-sqlite:{source}", *where)
    total = len(SESSIONS) * TURNS * 4
    assert code == 0 and report["items"] + report["items_unchanged"] == total, report
    assert 0 < report["items"] < total, report

    # A clean import of the same store, into a tenant of its own.
    clean_place = type(mig_place)(mig_place.transport, mig_place.server, mig_place.store)
    try:
        clean = clean_place.sync_client()
        code, report = _migrate(capsys, f"openai-sqlite:{source}", *_where(clean_place))
        assert code == 0 and report["items"] == total, report
        logs = _logs(client)
        assert sorted(logs) == SESSIONS
        other = _logs(clean)
        assert logs == other
    finally:
        clean_place.close()
    for session_id, items in _source_items(source).items():
        assert _berth_items(client, session_id) == items, session_id


def _source_items(path: Path) -> dict[str, list[Any]]:
    async def read() -> dict[str, list[Any]]:
        out = {}
        for session_id in SESSIONS:
            session = SQLiteSession(session_id, path)
            out[session_id] = await session.get_items()
            session.close()
        return out
    return asyncio.run(read())
