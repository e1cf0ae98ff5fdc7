"""A quick measurement of BerthSessionService beside ADK's SqliteSessionService (one run,
not part of the suite): append_event rate, get_session of a long session, list_sessions
of many sessions, and the floor neither can beat (building the ADK events from JSON).

    BERTH_BIN=... target/adk-dropin/venv/bin/python scripts/dropins/adk/bench.py [events] [sessions]

berth runs embedded (a temporary directory) and over HTTP (a `berth serve` started here);
BENCH_BACKENDS=sqlite,embedded,http picks which.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from conftest import Server  # noqa: E402

import berth  # noqa: E402
from google.adk.events.event import Event  # noqa: E402
from google.adk.events.event_actions import EventActions  # noqa: E402
from google.adk.sessions.sqlite_session_service import SqliteSessionService  # noqa: E402
from google.genai import types  # noqa: E402

from berth.integrations.adk import BerthSessionService  # noqa: E402

EVENTS = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
SESSIONS = int(sys.argv[2]) if len(sys.argv) > 2 else 500


def event(n: int) -> Event:
    return Event(invocation_id=f"inv-{n // 4}", author="user" if n % 4 == 0 else "agent",
                 timestamp=1_700_000_000 + n, actions=EventActions(state_delta={"n": n}),
                 content=types.Content(role="model", parts=[types.Part(text=f"message number {n} " * 8)]))


async def measure(name: str, service: Any) -> None:
    session = await service.create_session(app_name="bench", user_id="u1", session_id="long")
    started = time.perf_counter()
    for n in range(EVENTS):
        await service.append_event(session, event(n))
    append_s = time.perf_counter() - started
    started = time.perf_counter()
    got = await service.get_session(app_name="bench", user_id="u1", session_id="long")
    get_s = time.perf_counter() - started
    assert len(got.events) == EVENTS
    for index in range(SESSIONS):
        created = await service.create_session(app_name="bench", user_id=f"u{index % 10}", session_id=f"s{index}")
        await service.append_event(created, event(index))
    started = time.perf_counter()
    listed = await service.list_sessions(app_name="bench")
    list_s = time.perf_counter() - started
    assert len(listed.sessions) == SESSIONS + 1
    print(f"{name:>16}: append_event {EVENTS / append_s:8.0f}/s   get_session({EVENTS}) {get_s * 1000:7.0f} ms   "
          f"list_sessions({SESSIONS + 1}) {list_s * 1000:7.0f} ms", flush=True)


async def main() -> None:
    texts = [event(n).model_dump_json(exclude_none=True) for n in range(EVENTS)]
    started = time.perf_counter()
    for text in texts:
        Event.model_validate_json(text)
    print(f"floor: Event.model_validate_json x {EVENTS}: {(time.perf_counter() - started) * 1000:.0f} ms")
    backends = os.environ.get("BENCH_BACKENDS", "sqlite,embedded,http").split(",")
    with tempfile.TemporaryDirectory() as scratch:
        if "sqlite" in backends:
            await measure("SqliteSession", SqliteSessionService(str(Path(scratch) / "adk.db")))
        if "embedded" in backends:
            embedded = berth.open(str(Path(scratch) / "embedded"), tenant="bench", user="agent", role="service")
            with embedded as client, BerthSessionService(client) as service:
                await measure("berth embedded", service)
        if "http" not in backends:
            return
        server = Server(Path(scratch) / "served", ["--rate-per-tenant", "0"])
        key = server.key("bench", "agent", "service")
        server.start()
        try:
            with berth.Client(server.url, api_key=key) as client, BerthSessionService(client) as service:
                await measure("berth http", service)
        finally:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main())
