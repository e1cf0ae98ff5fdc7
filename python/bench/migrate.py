"""`berth-migrate` beside the source framework's own full read, in one run (issue 56,
"Performance"): how fast a store moves into berth, against the time the framework's own
API takes just to read the same data.

Sources, each built once by the framework itself and then only read:
  openai     an OpenAI Agents SDK `SQLiteSession` file (openai-agents 0.24.0) of SESSIONS
             sessions x ITEMS items (default 10,000 x 50: turns of a user message, a
             `function_call`, its `function_call_output` and an assistant message, ~250
             bytes an item), written by the SDK's own insert (its `add_items` statements,
             committed every 500 sessions instead of every call: the same rows, built fast)
  langgraph  one LangGraph thread of STEPS steps (default 2,000; a ~200-byte `AIMessage`
             a step on an `add_messages` channel, as dropins.py) run by a compiled graph on
             `SqliteSaver` (langgraph-checkpoint-sqlite 3.1.2): every checkpoint, with its
             pending writes

Variants, rounds interleaved (the order rotates), medians over rounds:
  read      the reference: the framework's own full read of the store. `SQLiteSession(id,
            path).get_items()` of every session (the ids from the SDK's sessions table),
            or `list(SqliteSaver(conn).list(None))`
  embedded  `berth-migrate SOURCE --data DIR --tenant bench` (in this process, through
            the command's `main`), into a fresh data directory each round
  http      `berth-migrate SOURCE --server URL --api-key KEY`, against a fresh
            `berth serve --rate-per-tenant 0` on loopback each round (BERTH_BIN or --berth)
  memory    `berth-migrate SOURCE --data memory:`: the same import, the same drop-in
            writes, into berth's in-memory store (no disk)
  floor     no store at all, from Python: what an import does but append — the source
            read through the framework as `read` does, on the snapshot the command takes,
            plus, OpenAI: each row's `created_at` (the SDK does not return it), each item's
            content digest (the idempotency key) and its berth event encoded as JSON;
            LangGraph: each checkpoint serialized by the saver's serde (what any `put`
            stores)
Each import is checked: its report names every item (checkpoint) and nothing skipped.
Rates are source items (checkpoints) a second; "vs read" is read's time / the variant's
(the issue's target: at least 0.5x, embedded).

    python bench/migrate.py [--berth target/release/berth] [--rounds 2] [--sessions 10000] \\
        [--items 50] [--steps 2000] [--only openai|langgraph] [--variants read,embedded,…] \\
        [--dir /tmp] [--out report.json] [--profile openai|langgraph]

`--profile F`: one embedded import of F under cProfile, the top costs printed (no rounds).
Needs openai-agents==0.24.0, langgraph==1.2.24 and langgraph-checkpoint-sqlite==3.1.2
beside the berth wheels (target/langgraph-venv plus `pip install openai-agents==0.24.0`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import Server  # noqa: E402
from dropins import steps_graph  # noqa: E402

VARIANTS = ("read", "embedded", "http", "memory", "floor")


# ---- building the sources, with the frameworks themselves ------------------------------


def session_items(session: int, count: int) -> list[dict[str, Any]]:
    """`count` items of one session: turns of a user message, a tool call, its output and
    the assistant's answer, in the SDK's item shapes."""
    items: list[dict[str, Any]] = []
    turn = 0
    while len(items) < count:
        call = f"call_{session}_{turn}"
        items += [
            {"role": "user", "content": f"Turn {turn}: what is the weather in city {session % 97} today? "
                                        "Please include the wind and the humidity."},
            {"type": "function_call", "call_id": call, "name": "get_weather", "id": f"fc_{session}_{turn}",
             "arguments": json.dumps({"city": f"city {session % 97}", "units": "metric"}), "status": "completed"},
            {"type": "function_call_output", "call_id": call,
             "output": json.dumps({"city": f"city {session % 97}", "temperature": 21, "wind_kmh": 14,
                                   "humidity": 0.62, "summary": "sunny, a light breeze from the west"})},
            {"id": f"msg_{session}_{turn}", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "annotations": [],
                          "text": f"In city {session % 97} it is sunny and 21 °C, with a light westerly breeze "
                                  "(14 km/h) and 62 % humidity. A good day to be outside."}]},
        ]
        turn += 1
    return items[:count]


def build_openai(path: Path, sessions: int, items: int) -> None:
    """The store, written by the SDK's `SQLiteSession` statements (`_insert_items`, what
    `add_items` runs) on its configured connection, one commit every 500 sessions."""
    from agents.memory import SQLiteSession

    writer = SQLiteSession("build", str(path))
    conn = sqlite3.connect(str(path))
    writer._configure_connection(conn)
    try:
        for index in range(sessions):
            writer.session_id = f"user-{index:05d}-{uuid.uuid4().hex[:8]}"
            writer._insert_items(conn, session_items(index, items))  # type: ignore[arg-type]
            if index % 500 == 499:
                conn.commit()
        conn.commit()
    finally:
        conn.close()
        writer.close()


def build_langgraph(path: Path, steps: int) -> str:
    """One thread of `steps` steps, run by a graph on `SqliteSaver` at `path`; its id."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    graph = steps_graph(steps)
    thread = f"t-{uuid.uuid4().hex[:12]}"
    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        graph.compile(checkpointer=SqliteSaver(conn)).invoke(
            {"messages": [], "n": 0}, {"configurable": {"thread_id": thread}, "recursion_limit": steps + 10})
    finally:
        conn.close()
    return thread


# ---- the reference: the framework's own full read --------------------------------------


def openai_session_ids(path: Path) -> list[str]:
    """The store's sessions: the SDK has no listing, so its sessions table."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [row[0] for row in conn.execute("SELECT session_id FROM agent_sessions ORDER BY created_at, session_id")]
    finally:
        conn.close()


def read_openai(path: Path) -> int:
    """`get_items()` of every session, each through a fresh `SQLiteSession`: the items read."""
    from agents.memory import SQLiteSession

    async def go() -> int:
        count = 0
        for session_id in openai_session_ids(path):
            session = SQLiteSession(session_id, str(path))
            count += len(await session.get_items())
            session.close()
        return count

    return asyncio.run(go())


def read_langgraph(path: Path) -> int:
    """`SqliteSaver.list(None)`, every checkpoint held: how many."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        return len(list(SqliteSaver(conn).list(None)))
    finally:
        conn.close()


# ---- the floor: the import without a store ---------------------------------------------


def floor_openai(path: Path) -> int:
    """An import's work without its appends: the snapshot, the SDK's read, each row's
    `created_at`, each item's digest and its event encoded (see the module's docstring)."""
    import orjson
    from agents.memory import SQLiteSession

    from berth.integrations.openai_agents._records import event_for_item
    from berth.migrate import keys
    from berth.migrate.source import snapshot

    async def go(copy: str) -> int:
        count = 0
        conn = sqlite3.connect(copy)  # one for every session's times, as the import reads them
        try:
            for session_id in openai_session_ids(Path(copy)):
                session = SQLiteSession(session_id, copy)
                items = await session.get_items()
                session.close()
                times = conn.execute("SELECT created_at FROM agent_messages WHERE session_id = ? ORDER BY id",
                                     (session_id,)).fetchall()
                assert len(times) == len(items)
                digests = [keys.digest(item) for item in items]
                keys.batch_key(keys.source_identity("openai-sqlite", str(path), session_id), 0, digests)
                orjson.dumps([event_for_item(item) for item in items])
                count += len(items)
        finally:
            conn.close()
        return count

    with tempfile.TemporaryDirectory(prefix="berth-migrate-floor-") as scratch:
        return asyncio.run(go(snapshot(str(path), scratch)))


def floor_langgraph(path: Path) -> int:
    """`SqliteSaver.list(None)` of the snapshot, each checkpoint serialized by the serde."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    from berth.migrate.source import snapshot

    with tempfile.TemporaryDirectory(prefix="berth-migrate-floor-") as scratch:
        conn = sqlite3.connect(snapshot(str(path), scratch), check_same_thread=False)
        try:
            saver = SqliteSaver(conn)
            items = list(saver.list(None))
            for item in items:
                saver.serde.dumps_typed(item.checkpoint)
                for _, _, value in item.pending_writes or ():
                    saver.serde.dumps_typed(value)
            return len(items)
        finally:
            conn.close()


# ---- the imports -----------------------------------------------------------------------


def migrate(argv: list[str]) -> dict[str, Any]:
    """`berth-migrate ARGV --json --no-progress` in this process: its report."""
    from berth.migrate.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main([*argv, "--json", "--no-progress"])
    report: dict[str, Any] = json.loads(out.getvalue())
    if status != 0 or report["skipped"] or report["changed"]:
        raise RuntimeError(f"berth-migrate {' '.join(argv)}: status {status}, {report}")
    return report


class Places:
    """Where each round's import goes: a fresh data directory (embedded), a fresh server
    (HTTP), a fresh in-memory store."""

    def __init__(self, work: Path, binary: str | None) -> None:
        self.work = work
        self.binary = binary

    def argv(self, variant: str, source: str) -> tuple[list[str], Callable[[], None]]:
        where = self.work / f"{variant}-{uuid.uuid4().hex[:8]}"
        if variant == "memory":
            return [source, "--data", "memory:", "--tenant", "bench"], lambda: None
        if variant == "embedded":
            return [source, "--data", str(where), "--tenant", "bench"], lambda: shutil.rmtree(where, True)
        if self.binary is None:
            raise SystemExit("the http variant needs --berth or BERTH_BIN")
        server = Server(self.binary, where)

        def done() -> None:
            server.stop()
            shutil.rmtree(where, True)

        return [source, "--server", server.url, "--api-key", server.key], done


def run_import(places: Places, variant: str, source: str, expected: int, unit: str) -> float:
    argv, done = places.argv(variant, source)
    try:
        started = time.perf_counter()
        report = migrate(argv)
        taken = time.perf_counter() - started
    finally:
        done()
    if report[unit] != expected:
        raise RuntimeError(f"{variant}: imported {report[unit]} {unit}, the source holds {expected}")
    return taken


# ---- one framework: the rounds ---------------------------------------------------------


class Framework:
    def __init__(self, name: str, source: str, unit: str, read: Callable[[], int], floor: Callable[[], int]) -> None:
        self.name, self.source, self.unit, self.read, self.floor = name, source, unit, read, floor


def bench(framework: Framework, places: Places, variants: list[str], rounds: int) -> list[dict[str, Any]]:
    expected = framework.read()  # also warms the page cache and the imports
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for index in range(rounds):
        order = variants[index % len(variants):] + variants[: index % len(variants)]
        for name in order:
            if name == "read":
                started = time.perf_counter()
                assert framework.read() == expected
                taken = time.perf_counter() - started
            elif name == "floor":
                started = time.perf_counter()
                assert framework.floor() == expected
                taken = time.perf_counter() - started
            else:
                taken = run_import(places, name, framework.source, expected, framework.unit)
            seconds[name].append(taken)
            print(f"round {index + 1} {framework.name} {name}: {taken:.2f} s ({expected / taken:,.0f} "
                  f"{framework.unit}/s)", file=sys.stderr)
    base = statistics.median(seconds["read"]) if "read" in seconds else None
    rows = []
    print(f"\n{framework.name}: {expected:,} {framework.unit}")
    print(f"| variant | median s | {framework.unit}/s | vs read | rounds (s) |")
    print("|---|---|---|---|---|")
    for name in variants:
        median = statistics.median(seconds[name])
        ratio = base / median if base else None
        rows.append({"variant": name, "seconds_median": median, "per_second": expected / median,
                     "vs_read": ratio, "rounds": seconds[name]})
        print(f"| {name} | {median:.2f} | {expected / median:,.0f} | "
              f"{f'{ratio:.2f}x' if ratio else '-'} | {', '.join(f'{s:.2f}' for s in seconds[name])} |")
    return rows


def profile(framework: Framework, places: Places) -> None:
    """One embedded import under cProfile: the top costs, by own time and cumulative."""
    expected = framework.read()
    argv, done = places.argv("embedded", framework.source)
    profiler = cProfile.Profile()
    try:
        profiler.enable()
        report = migrate(argv)
        profiler.disable()
    finally:
        done()
    assert report[framework.unit] == expected
    for order in ("tottime", "cumulative"):
        stats = pstats.Stats(profiler)
        stats.sort_stats(order).print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--berth", default=os.environ.get("BERTH_BIN"), help="berth binary (for http)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--items", type=int, default=50)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--only", choices=["openai", "langgraph"])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--out")
    parser.add_argument("--profile", choices=["openai", "langgraph"])
    args = parser.parse_args()
    variants = [name for name in args.variants.split(",") if name]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    import berth

    print(f"berth from {Path(berth.__file__).parent}, berth serve: {args.berth or '-'}", file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="berth-migrate-bench-", dir=args.dir))
    places = Places(work, args.berth)
    report: dict[str, Any] = {"sessions": args.sessions, "items": args.items, "steps": args.steps}
    try:
        wanted = [args.profile] if args.profile else [args.only] if args.only else ["openai", "langgraph"]
        for name in wanted:
            started = time.perf_counter()
            if name == "openai":
                path = work / "openai.sqlite"
                build_openai(path, args.sessions, args.items)
                framework = Framework("openai", f"openai-sqlite:{path}", "items",
                                      lambda: read_openai(path), lambda: floor_openai(path))
            else:
                path = work / "langgraph.sqlite"
                build_langgraph(path, args.steps)
                framework = Framework("langgraph", f"langgraph-sqlite:{path}", "checkpoints",
                                      lambda: read_langgraph(path), lambda: floor_langgraph(path))
            print(f"{name}: source built in {time.perf_counter() - started:.1f} s, "
                  f"{path.stat().st_size / 1e6:.1f} MB", file=sys.stderr)
            if args.profile:
                profile(framework, places)
            else:
                report[name] = bench(framework, places, variants, args.rounds)
            path.unlink()
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
