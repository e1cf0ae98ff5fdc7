"""berth from Python beside the OpenAI Agents SDK's `SQLiteSession`, in one run.

Workloads (1 KiB chat-like items; every store at its durable default):
  W1  2,000 single-item appends to one session
  W2  100,000 items in batches of 100 to one session
  W4  resume: read a 10,000-item session back
  W5  8 sessions x 8 concurrent writers, single-item appends
Variants: `sqlite` (SQLiteSession, openai-agents 0.24.0: WAL, synchronous as reported),
`embedded` (berth.open on a data directory: fdatasync per append), `http` (berth.Client
against a release `berth serve --rate-per-tenant 0` on loopback, embedded store), and
`rust-http` (the Rust client, `berth-httpbench`, through the same server, the same bytes).
Rounds are interleaved and their order rotates; figures are medians over rounds.

    python bench/bench.py --berth target/release/berth --httpbench target/release/berth-httpbench \
        [--rounds 2] [--dir /tmp] [--quick] [--out report.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import berth

CONTENT = ("The quick brown fox jumps over the lazy dog. " * 23)[:1000]
ITEM = {"role": "user", "content": CONTENT, "type": "message"}
FOREVER = {"activity_ttl_ms": 10 * 365 * 24 * 3600 * 1000, "run_lease_ttl_ms": 30_000}


class Sizes:
    def __init__(self, quick: bool) -> None:
        self.w1 = 200 if quick else 2000
        self.w2 = 10_000 if quick else 100_000
        self.w4 = 2_000 if quick else 10_000
        self.w5_per_writer = 5 if quick else 40


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    def __init__(self, binary: str, data: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.key = subprocess.run(
            [binary, "--data", str(data), "keys", "create", "--tenant", "bench", "--user", "bench", "--role", "service"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
        self.flags = ["--rate-per-tenant", "0"]
        self.process = subprocess.Popen(
            [binary, "serve", "--data", str(data), "--listen", f"127.0.0.1:{self.port}", *self.flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                berth.Client(self.url, api_key=self.key, retries=0).whoami()
                return
            except berth.BerthError:
                time.sleep(0.05)
        raise RuntimeError("berth serve did not start")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=20)


# ---- SQLiteSession ----------------------------------------------------------------------


def sqlite_variant(directory: Path) -> dict[str, Callable[[Sizes], float]]:
    from agents.memory import SQLiteSession

    db = str(directory / "sdk.sqlite")

    def w1(sizes: Sizes) -> float:
        session = SQLiteSession(f"w1-{uuid.uuid4().hex}", db)

        async def go() -> None:
            for _ in range(sizes.w1):
                await session.add_items([ITEM])

        return _timed(lambda: asyncio.run(go()))

    def w2(sizes: Sizes) -> float:
        session = SQLiteSession(f"w2-{uuid.uuid4().hex}", db)

        async def go() -> None:
            for _ in range(sizes.w2 // 100):
                await session.add_items([ITEM] * 100)

        return _timed(lambda: asyncio.run(go()))

    def w4(sizes: Sizes) -> float:
        session_id = f"w4-{uuid.uuid4().hex}"

        async def fill() -> None:
            session = SQLiteSession(session_id, db)
            for _ in range(sizes.w4 // 1000):
                await session.add_items([ITEM] * 1000)
            session.close()

        asyncio.run(fill())

        async def resume() -> None:
            session = SQLiteSession(session_id, db)  # a fresh process's view: a new connection
            items = await session.get_items()
            assert len(items) == sizes.w4
            session.close()

        return _timed(lambda: asyncio.run(resume()))

    def w5(sizes: Sizes) -> float:
        sessions = [SQLiteSession(f"w5-{uuid.uuid4().hex}-{n}", db) for n in range(8)]

        async def writer(session: Any) -> None:
            for _ in range(sizes.w5_per_writer):
                await session.add_items([ITEM])

        async def go() -> None:
            await asyncio.gather(*(writer(session) for session in sessions for _ in range(8)))

        return _timed(lambda: asyncio.run(go()))

    return {"W1": w1, "W2": w2, "W4": w4, "W5": w5}


def sqlite_synchronous(directory: Path) -> str:
    from agents.memory import SQLiteSession

    session = SQLiteSession("probe", str(directory / "sdk.sqlite"))
    asyncio.run(session.add_items([ITEM]))
    connection = sqlite3.connect(str(directory / "sdk.sqlite"))
    mode = connection.execute("PRAGMA journal_mode").fetchone()[0]
    connection.close()
    sync = session._get_connection().execute("PRAGMA synchronous").fetchone()[0]  # type: ignore[attr-defined]
    return f"journal_mode={mode}, synchronous={ {0: 'OFF', 1: 'NORMAL', 2: 'FULL', 3: 'EXTRA'}.get(sync, sync)}"


# ---- berth from Python ------------------------------------------------------------------


def berth_variant(connect: Callable[[], berth.Client]) -> dict[str, Callable[[Sizes], float]]:
    def new_session(client: berth.Client, prefix: str) -> str:
        return client.create_session(f"{prefix}-{uuid.uuid4().hex[:20]}", policy=FOREVER).id

    def w1(sizes: Sizes) -> float:
        client = connect()
        session_id = new_session(client, "w1")
        seconds = _timed(lambda: [client.append(session_id, [("user/message", ITEM)]) for _ in range(sizes.w1)])
        client.close()
        return seconds

    def w2(sizes: Sizes) -> float:
        client = connect()
        session_id = new_session(client, "w2")
        batch = [("user/message", ITEM)] * 100
        seconds = _timed(lambda: [client.append(session_id, batch) for _ in range(sizes.w2 // 100)])
        client.close()
        return seconds

    def w4(sizes: Sizes) -> float:
        client = connect()
        session_id = new_session(client, "w4")
        for _ in range(sizes.w4 // 1000):
            client.append(session_id, [("user/message", ITEM)] * 1000)
        client.close()
        reader = connect()  # a fresh client: nothing cached
        seconds = _timed(lambda: _check_len(list(reader.iter_events(session_id)), sizes.w4))
        reader.close()
        return seconds

    def w5(sizes: Sizes) -> float:
        client = connect()
        sessions = [new_session(client, "w5") for _ in range(8)]

        def writer(session_id: str) -> None:
            for _ in range(sizes.w5_per_writer):
                client.append(session_id, [("user/message", ITEM)])

        threads = [threading.Thread(target=writer, args=(session_id,)) for session_id in sessions for _ in range(8)]

        def go() -> None:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

        seconds = _timed(go)
        client.close()
        return seconds

    return {"W1": w1, "W2": w2, "W4": w4, "W5": w5}


def rust_variant(httpbench: str, server: Server, directory: Path) -> dict[str, Callable[[Sizes], float]]:
    client = berth.Client(server.url, api_key=server.key)
    single = directory / "single.json"
    single.write_text(json.dumps({"events": [{"type": "user/message", "data": ITEM}]}))
    batch = directory / "batch.json"
    batch.write_text(json.dumps({"events": [{"type": "user/message", "data": ITEM}] * 100}))

    def run(workload: str, session: str, body: Path | None, count: int, *extra: str) -> float:
        command = [httpbench, "--url", server.url, "--key", server.key, "--workload", workload, "--session", session,
                   "--count", str(count), *extra]
        if body is not None:
            command += ["--body-file", str(body)]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        return float(json.loads(out)["seconds"])

    def session(prefix: str) -> str:
        return client.create_session(f"{prefix}-{uuid.uuid4().hex[:20]}", policy=FOREVER).id

    def w1(sizes: Sizes) -> float:
        return run("w1", session("rw1"), single, sizes.w1)

    def w2(sizes: Sizes) -> float:
        return run("w2", session("rw2"), batch, sizes.w2 // 100)

    def w4(sizes: Sizes) -> float:
        session_id = session("rw4")
        for _ in range(sizes.w4 // 1000):
            client.append(session_id, [("user/message", ITEM)] * 1000)
        return run("w4", session_id, None, 0)

    def w5(sizes: Sizes) -> float:
        prefix = f"rw5-{uuid.uuid4().hex[:16]}"
        for n in range(8):
            client.create_session(f"{prefix}-{n}", policy=FOREVER)
        return run("w5", prefix, single, sizes.w5_per_writer * 64, "--sessions", "8", "--writers", "8")

    return {"W1": w1, "W2": w2, "W4": w4, "W5": w5}


def _timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _check_len(items: list[Any], expected: int) -> None:
    assert len(items) == expected, (len(items), expected)


def rate(workload: str, sizes: Sizes, seconds: float) -> float:
    count = {"W1": sizes.w1, "W2": sizes.w2, "W4": sizes.w4, "W5": sizes.w5_per_writer * 64}[workload]
    return count / seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--berth", required=True)
    parser.add_argument("--httpbench", required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    sizes = Sizes(args.quick)
    work = Path(tempfile.mkdtemp(prefix="berth-pybench-", dir=args.dir))
    try:
        (work / "sqlite").mkdir()
        server = Server(args.berth, work / "served")
        variants = {
            "sqlite": sqlite_variant(work / "sqlite"),
            "embedded": berth_variant(lambda: berth.open(str(work / "embedded"), tenant="bench", user="bench",
                                                         role="service")),
            "http": berth_variant(lambda: berth.Client(server.url, api_key=server.key)),
            "rust-http": rust_variant(args.httpbench, server, work),
        }
        print(f"SQLiteSession: {sqlite_synchronous(work / 'sqlite')}; berth serve flags: {' '.join(server.flags)}",
              file=sys.stderr)
        seconds: dict[tuple[str, str], list[float]] = {}
        names = list(variants)
        for round_index in range(args.rounds):
            order = names[round_index % len(names):] + names[: round_index % len(names)]
            for workload in ("W1", "W2", "W4", "W5"):
                for name in order:
                    taken = variants[name][workload](sizes)
                    seconds.setdefault((workload, name), []).append(taken)
                    print(f"round {round_index + 1} {workload} {name}: {taken:.3f} s", file=sys.stderr)
        server.stop()
        report = []
        for workload in ("W1", "W2", "W4", "W5"):
            base = statistics.median(seconds[(workload, "sqlite")])
            for name in names:
                median = statistics.median(seconds[(workload, name)])
                report.append({
                    "workload": workload, "variant": name, "seconds_median": median,
                    "per_second": rate(workload, sizes, median), "rounds": seconds[(workload, name)],
                    "vs_sqlite_speed": base / median,
                })
        print("| workload | variant | median s | items/s | speed vs SQLiteSession |")
        print("|---|---|---|---|---|")
        for row in report:
            print(f"| {row['workload']} | {row['variant']} | {row['seconds_median']:.3f} | {row['per_second']:,.0f} | "
                  f"{row['vs_sqlite_speed']:.2f}x |")
        if args.out:
            Path(args.out).write_text(json.dumps({"sizes": vars(sizes), "rows": report}, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("OPENAI_API_KEY", "unused")
    main()
