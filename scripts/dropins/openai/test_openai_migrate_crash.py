"""`berth-migrate openai-sqlite:` killed part-way, on both transports: a child
`python -m berth.migrate` importing a many-session `SQLiteSession` store (each session
several 256-item batches, several sessions in flight) is SIGKILLed once it has recorded
some sessions as imported in full and one only in part, with two or more made and not
recorded in full (in flight together); a second child is SIGKILLed after it recorded a
few more in full, and a third run finishes. The result must equal a clean import's into
another tenant: every session's items as `SQLiteSession.get_items()` returns them, and
the same stored events (type and data, in order) — nothing appended twice, nothing
lost; the finished run's report counts every item, written then or before."""

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
from berth.migrate import keys
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


def _kill_part_way(args: list[str], client: berth.Client, far_enough: Any) -> None:
    """Runs `python -m berth.migrate ARGS` and SIGKILLs it once `far_enough(client)`
    (the child must not have finished by then)."""
    kill_when([sys.executable, "-m", "berth.migrate", *args, "--no-progress"], lambda: far_enough(client),
              what="the point it is killed at", poll_s=0.005)


def _imported(client: berth.Client) -> dict[str, int]:
    """Items per source session the import recorded as taken (its state: one search, so
    the kill polls stay cheap beside the child)."""
    out: dict[str, int] = {}
    cursor = None
    while True:
        page = client.memory_search(keys.STATE_NAMESPACE, cursor=cursor, limit=1000)
        out.update((item.value["source"], item.value["items"]) for item in page.items)
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


def _full(counts: dict[str, int]) -> int:
    return sum(1 for count in counts.values() if count == TURNS * 4)


def _part_written(counts: dict[str, int]) -> int:
    return sum(1 for count in counts.values() if 0 < count < TURNS * 4)


def _in_flight(client: berth.Client, imported: dict[str, int]) -> int:
    """Sessions berth holds that the import has not recorded in full: in flight (made,
    perhaps part-written) when it was killed."""
    return len(BerthSession.list_session_ids(client)) - _full(imported)


def _mid_sessions(start: int) -> Any:
    """Far enough once `start` sessions are recorded in full, one in part, and four or
    more are in flight (two of them may finish between this poll and the kill)."""
    def far_enough(client: berth.Client) -> bool:
        imported = _imported(client)
        return _full(imported) >= start and _part_written(imported) >= 1 and _in_flight(client, imported) >= 4
    return far_enough


def test_killed_twice_then_finished_equals_a_clean_import(mig_place: Any, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "agents.db"
    _build_source(source)
    where = _where(mig_place)
    client = mig_place.sync_client()

    # First killed with two sessions or more in flight (made, perhaps part-written, not
    # recorded in full: sessions are imported several at once), then after it recorded a
    # few more in full.
    _kill_part_way([f"openai-sqlite:{source}", *where], client, _mid_sessions(len(SESSIONS) // 4))
    recorded = _imported(client)
    assert _full(recorded) < len(SESSIONS) - 2 and _in_flight(client, recorded) >= 2, recorded
    _kill_part_way([f"openai-sqlite:{source}", *where], client,
                   lambda client: _full(_imported(client)) >= _full(recorded) + len(SESSIONS) // 6)
    assert _full(_imported(client)) < len(SESSIONS), "the second child finished before the kill"
    code, report = _migrate(capsys, f"openai-sqlite:{source}", *where)
    # A create the kill interrupted left its `creating` record; the rerun's create of that
    # id takes it over (its process is gone), so nothing is skipped.
    assert code == 0 and not report["skipped"] and not report["changed"], report
    total = len(SESSIONS) * TURNS * 4
    assert report["items"] + report["items_unchanged"] == total, report
    assert 0 < report["items"] < total, report

    # A clean import of the same store, into a tenant of its own.
    clean_place = type(mig_place)(mig_place.transport, mig_place.server, mig_place.store)
    try:
        clean = clean_place.sync_client()
        code, report = _migrate(capsys, f"openai-sqlite:{source}", *_where(clean_place))
        assert code == 0 and report["items"] == len(SESSIONS) * TURNS * 4, report
        assert _logs(client) == _logs(clean)
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
