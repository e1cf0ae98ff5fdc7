"""BerthSessionService beside ADK's own persistent services, in one run (a measurement,
not part of the suite): `SqliteSessionService`, `DatabaseSessionService` on SQLite
(`sqlite+aiosqlite`), berth embedded (a temporary directory) and berth over HTTP (a
`berth serve` started here). Every figure is a median over interleaved rounds (each
round times every backend once, in turn), so a burst of load on the machine falls on
all of them alike:

- `append_event`: the rate of `--appends` appends to a fresh session per round (each
  durable when it returns, on every backend: SQLite commits with its default
  `synchronous=FULL`, berth fsyncs each append);
- `get_session`: one session of `--events` events, read whole by the service object
  that wrote it (berth's keeps the events it wrote or read, `events_cache_bytes`, and
  checks them with one forward read of the log); for berth also `cold`: read by a second
  object on the same client that keeps nothing (`events_cache_bytes=0`; attached by an
  untimed read after seeding), so the whole log is read, as a fresh process does;
- `list_sessions`: `--sessions` sessions of one app, listed;
- `long append/s`: once, after the rounds: `--appends` appends to the long session,
  through a copy read by `get_session` (a `Runner`'s invocation on a long session).

The floor no service can beat is printed first: building `--events` ADK `Event`s from
their JSON text with `Event.model_validate_json`, all of them alive at the end as the
`Session` a `get_session` returns holds them, with the cyclic collector paused while
they are built and its one pass over them afterwards (`held_ms`); and likewise for
listing, building `--sessions` `Session`s. Beside it, the same objects each dropped as
soon as it is built (`discarded`, the floor this script printed before 2026-12-03): no
service can answer that way, and it skips the collector's cost of holding them. Seeding
(the long session by `append_event`, the many sessions by `create_session`,
`--concurrency` at a time) is timed and printed too.

    BERTH_BIN=... target/adk-dropin/venv/bin/python scripts/dropins/adk/bench.py [--quick]
        [--events N] [--sessions N] [--appends N] [--rounds N] [--backends sqlite,database,embedded,http]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).parent))
from conftest import Server  # noqa: E402

import berth  # noqa: E402
from google.adk.events.event import Event  # noqa: E402
from google.adk.events.event_actions import EventActions  # noqa: E402
from google.adk.sessions.database_session_service import DatabaseSessionService  # noqa: E402
from google.adk.sessions.session import Session  # noqa: E402
from google.adk.sessions.sqlite_session_service import SqliteSessionService  # noqa: E402
from google.genai import types  # noqa: E402

from berth._calls import collector_paused  # noqa: E402
from berth.integrations.adk import BerthSessionService  # noqa: E402

APP = "bench"
LONG = "long"
BACKENDS = ("sqlite", "database", "embedded", "http")


def event(n: int) -> Event:
    """An ADK event of the usual shape: text, an invocation of four events, a state delta."""
    return Event(invocation_id=f"inv-{n // 4}", author="user" if n % 4 == 0 else "agent",
                 timestamp=1_700_000_000 + n, actions=EventActions(state_delta={"n": n}),
                 content=types.Content(role="model", parts=[types.Part(text=f"message number {n} " * 8)]))


def held_ms(build: Callable[[], list[Any]]) -> float:
    """The time of `build()` making objects that are all alive when it returns, as a
    service's answer holds them, built the cheapest way a service can: with the cyclic
    collector paused meanwhile (`berth._calls.collector_paused`, as berth's own read pauses it), then
    its one pass over the new objects (a generation-0 collection, which the first
    allocation after the pause would run anyway), timed too. With the collector running
    throughout, its collections of the growing heap cost more; without the pass, the
    cost is only moved to whatever allocates next."""
    started = time.perf_counter()
    with collector_paused():
        held = build()
    gc.collect(0)
    taken = (time.perf_counter() - started) * 1000
    del held
    return taken


def discarded_ms(build_one: Callable[[int], Any], count: int) -> float:
    """`count` objects built one at a time, each dropped at once: cheaper than any answer
    that holds them (no collector's pass; memory reused), so not a floor a service can
    reach. Printed beside the floor, for comparison with figures before 2026-12-03."""
    started = time.perf_counter()
    for index in range(count):
        build_one(index)
    return (time.perf_counter() - started) * 1000


def event_texts(count: int) -> list[str]:
    return [event(n).model_dump_json(exclude_none=True) for n in range(count)]


def floor_ms(texts: list[str]) -> float:
    """Building the events of `texts` from JSON, all held: the part of a `get_session`
    no service avoids."""
    return held_ms(lambda: [Event.model_validate_json(text) for text in texts])


def listed_session(index: int) -> Session:
    """A listed `Session` as the services build it: no events, a merged state of three
    keys."""
    return Session(app_name=APP, user_id=f"u{index % 10}", id=f"s{index}",
                   state={"n": index, "user:seen": index, "app:x": 1}, last_update_time=1_700_000_000.0 + index)


def list_floor_ms(count: int) -> float:
    """Building `count` listed `Session`s, all held: the part of a `list_sessions` no
    service avoids (ADK's own services build each so)."""
    return held_ms(lambda: [listed_session(index) for index in range(count)])


def floors_discarded_ms(texts: list[str], sessions: int) -> tuple[float, float]:
    """The events' and the sessions' figures built and dropped one at a time."""
    return (discarded_ms(lambda index: Event.model_validate_json(texts[index]), len(texts)),
            discarded_ms(listed_session, sessions))


@dataclass
class Backend:
    """One service under test, and the figures of its rounds."""

    name: str
    service: Any
    close: Callable[[], None] = lambda: None
    appends_per_s: list[float] = field(default_factory=list)
    get_ms: list[float] = field(default_factory=list)
    #: A second object that keeps no events (berth only), and its whole reads.
    cold: Any = None
    cold_get_ms: list[float] = field(default_factory=list)
    list_ms: list[float] = field(default_factory=list)
    seed_events_s: float = 0.0
    seed_sessions_s: float = 0.0
    long_appends_per_s: float = float("nan")


async def seed(backend: Backend, events: int, sessions: int, concurrency: int) -> None:
    """The long session (by `append_event`, the only way ADK has) and `sessions` more
    sessions of the app (by `create_session` with a state, `concurrency` at once)."""
    service = backend.service
    session = await service.create_session(app_name=APP, user_id="u0", session_id=LONG)
    started = time.perf_counter()
    for n in range(events):
        await service.append_event(session, event(n))
    backend.seed_events_s = time.perf_counter() - started
    gate = asyncio.Semaphore(concurrency)

    async def create(index: int) -> None:
        async with gate:
            await service.create_session(app_name=APP, user_id=f"u{index % 10}", session_id=f"s{index}",
                                         state={"n": index, "user:seen": index})

    started = time.perf_counter()
    await asyncio.gather(*(create(index) for index in range(sessions - 1)))
    backend.seed_sessions_s = time.perf_counter() - started
    if backend.cold is not None:  # attached now, so its timed reads read only
        assert await backend.cold.get_session(app_name=APP, user_id="u0", session_id=LONG) is not None


async def one_round(backend: Backend, round_index: int, events: int, sessions: int, appends: int) -> None:
    service = backend.service
    session = await service.create_session(app_name=APP, user_id="appender", session_id=f"append-{round_index}")
    started = time.perf_counter()
    for n in range(appends):
        await service.append_event(session, event(n))
    backend.appends_per_s.append(appends / (time.perf_counter() - started))
    await service.delete_session(app_name=APP, user_id="appender", session_id=f"append-{round_index}")

    started = time.perf_counter()
    got = await service.get_session(app_name=APP, user_id="u0", session_id=LONG)
    backend.get_ms.append((time.perf_counter() - started) * 1000)
    assert got is not None and len(got.events) == events, (backend.name, len(got.events) if got else None)
    del got
    if backend.cold is not None:
        started = time.perf_counter()
        got = await backend.cold.get_session(app_name=APP, user_id="u0", session_id=LONG)
        backend.cold_get_ms.append((time.perf_counter() - started) * 1000)
        assert got is not None and len(got.events) == events, (backend.name, len(got.events) if got else None)
        del got

    started = time.perf_counter()
    listed = await service.list_sessions(app_name=APP)
    backend.list_ms.append((time.perf_counter() - started) * 1000)
    assert len(listed.sessions) == sessions, (backend.name, len(listed.sessions))


async def long_appends(backend: Backend, events: int, appends: int) -> None:
    """`appends` appends to the long session, through a copy read by `get_session`."""
    session = await backend.service.get_session(app_name=APP, user_id="u0", session_id=LONG)
    started = time.perf_counter()
    for n in range(events, events + appends):
        await backend.service.append_event(session, event(n))
    backend.long_appends_per_s = appends / (time.perf_counter() - started)


async def open_backend(name: str, scratch: Path) -> Backend:
    if name == "sqlite":
        return Backend("SqliteSessionService", SqliteSessionService(str(scratch / "adk.db")))
    if name == "database":
        service = DatabaseSessionService(f"sqlite+aiosqlite:///{scratch / 'adk-database.db'}")
        return Backend("DatabaseSessionService", service)
    if name == "embedded":
        client = berth.open(str(scratch / "embedded"), tenant="bench", user="agent", role="service")
        service, cold = BerthSessionService(client), BerthSessionService(client, events_cache_bytes=0)
        return Backend("berth embedded", service, lambda: (service.close(), cold.close(), client.close()), cold=cold)
    if name == "http":
        server = Server(scratch / "served", ["--rate-per-tenant", "0"])
        key = server.key("bench", "agent", "service")
        server.start()
        client = berth.Client(server.url, api_key=key)
        service, cold = BerthSessionService(client), BerthSessionService(client, events_cache_bytes=0)
        return Backend("berth http", service, lambda: (service.close(), cold.close(), client.close(), server.stop()),
                       cold=cold)
    raise ValueError(f"unknown backend {name!r}: one of {', '.join(BACKENDS)}")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(backends: list[Backend], args: argparse.Namespace, floor: float, list_floor: float,
           discarded: tuple[float, float]) -> None:
    print(f"\nmedians of {args.rounds} interleaved rounds (the floors measured in each round too); floor "
          f"(Event.model_validate_json x {args.events}, held): {floor:.0f} ms; listing floor (Session(...) x "
          f"{args.sessions}, held): {list_floor:.0f} ms; each dropped at once instead: {discarded[0]:.0f} ms and "
          f"{discarded[1]:.0f} ms")
    print(f"{'':24} {'append_event/s':>15} {f'get_session({args.events}) ms':>24} {'cold ms':>8} "
          f"{f'list_sessions({args.sessions}) ms':>26} {'long append/s':>14}   seeding: events s, sessions s")
    for backend in backends:
        cold = f"{median(backend.cold_get_ms):8.0f}" if backend.cold_get_ms else f"{'-':>8}"
        print(f"{backend.name:24} {median(backend.appends_per_s):15.0f} {median(backend.get_ms):24.0f} {cold} "
              f"{median(backend.list_ms):26.0f} {backend.long_appends_per_s:14.0f}   "
              f"{backend.seed_events_s:8.1f} {backend.seed_sessions_s:10.1f}")
    print("rounds (append/s | get ms | cold get ms | list ms):")
    for backend in backends:
        print(f"  {backend.name:22} {[round(v) for v in backend.appends_per_s]} | "
              f"{[round(v) for v in backend.get_ms]} | {[round(v) for v in backend.cold_get_ms]} | "
              f"{[round(v) for v in backend.list_ms]}")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, for iterating (1,000 / 500 / 100)")
    parser.add_argument("--events", type=int, help="events of the session get_session reads (10,000)")
    parser.add_argument("--sessions", type=int, help="sessions list_sessions lists (10,000)")
    parser.add_argument("--appends", type=int, help="appends timed per round (200)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8, help="create_session calls at once when seeding")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    args = parser.parse_args()
    quick = {"events": 1000, "sessions": 500, "appends": 100}
    full = {"events": 10_000, "sessions": 10_000, "appends": 200}
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


async def main() -> None:
    args = arguments()
    texts = event_texts(args.events)
    floor = floor_ms(texts)
    list_floor = list_floor_ms(args.sessions)
    print(f"floor: Event.model_validate_json x {args.events}, held: {floor:.0f} ms; "
          f"Session(...) x {args.sessions}, held: {list_floor:.0f} ms", flush=True)
    with tempfile.TemporaryDirectory() as directory:
        scratch = Path(directory)
        backends = [await open_backend(name, scratch) for name in args.backends.split(",")]
        floors: list[float] = []
        list_floors: list[float] = []
        discarded: list[tuple[float, float]] = []
        try:
            for backend in backends:
                await seed(backend, args.events, args.sessions, args.concurrency)
                print(f"seeded {backend.name}: {args.events} events in {backend.seed_events_s:.1f} s, "
                      f"{args.sessions - 1} sessions in {backend.seed_sessions_s:.1f} s", flush=True)
            for round_index in range(args.rounds):
                floors.append(floor_ms(texts))
                list_floors.append(list_floor_ms(args.sessions))
                discarded.append(floors_discarded_ms(texts, args.sessions))
                for backend in backends:
                    await one_round(backend, round_index, args.events, args.sessions, args.appends)
                print(f"round {round_index + 1}/{args.rounds} done", flush=True)
            for backend in backends:  # last: the long session is longer afterwards
                await long_appends(backend, args.events, args.appends)
            dropped = (median([each[0] for each in discarded]), median([each[1] for each in discarded]))
            report(backends, args, median(floors), median(list_floors), dropped)
            print(f"  {'floors, held':22} {[round(v) for v in floors]} | {[round(v) for v in list_floors]}")
            print(f"  {'each dropped at once':22} {[round(v[0]) for v in discarded]} | "
                  f"{[round(v[1]) for v in discarded]}")
        finally:
            for backend in backends:
                backend.close()


if __name__ == "__main__":
    asyncio.run(main())
