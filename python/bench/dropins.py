"""The drop-ins beside the stores their frameworks ship, in one run (issue 12, "Performance").

OpenAI Agents SDK — `BerthSession` vs `SQLiteSession` (openai-agents 0.24.0), through the
SDK's `Session` protocol (1 KiB items, as bench.py):
  W1  2,000 single-item `add_items`
  W2  100,000 items, `add_items` of 100
  W4  resume: a fresh object's `get_items()` of a 10,000-item session; its floor, timed
      each round, is `json.loads` of the 10,000 items (what any store that returns parsed
      items spends, and `SQLiteSession` does)
  W5  8 sessions x 8 concurrent writers (`asyncio.gather`), single-item `add_items`
  T   200 turns of `add_items` of 2 items + `get_items(20)` (what a `Runner` turn does)
  R   a session object per request: on a 10,000-item session, 30 requests, each a fresh
      object's `get_items(10)`, `add_items` of 2 items and `close` (the first request
      after the seeding, which reads the whole log, is not timed)
  floor  the same clients' bare single-item `append` (2,000, interleaved) beside a bare
         SQLite insert + commit of the same JSON (WAL, synchronous=FULL): what W1 stands on;
         and no store at all, the item's line written + fdatasynced at a file's end, inline
         and awaited through asyncio.to_thread (what any durable add_items pays here)
LangGraph — `BerthSaver` vs `SqliteSaver` (langgraph-checkpoint-sqlite 3.1.2): a graph of
STEPS one-message steps (a ~200-byte `AIMessage` per step on an `add_messages` channel):
steps/s, resume (a fresh saver's `get_tuple` of the latest) and bytes on disk.

Google ADK and smolagents — the request patterns (`--only adk|smolagents`, each in its
suite's venv: scripts/dropins/adk/requirements.txt, scripts/dropins/smolagents/): a chat
turn (20 turns on a kept object: ADK, a `Runner` turn with one model call; smolagents, a
kept `CodeAgent`'s `run(reset=False)` of a code step and the final answer) and a request
(40 times a fresh object on the same session: ADK, a `BerthSessionService` per request,
one turn, `close()`; smolagents, a fresh agent and `BerthAgentLog`, attached, one run,
closed), in ms, beside ADK's own `DatabaseSessionService` (sqlite+aiosqlite, one engine,
a service object per request on it) and `SqliteSessionService`, or smolagents with no
store; berth's ADK rows with and without the hand-on of idle runs (`hand_on=False`: the
before). The round trips and durable writes of one turn and one request are counted
apart from the timed rounds.

Variants: `sqlite` (the framework's SQLite store, on its defaults), `embedded`
(`berth.open` on a data directory) and `http` (`berth.Client` against `berth serve
--rate-per-tenant 0` on loopback). Rounds are interleaved and their order rotates;
figures are medians over rounds, ratios are against `sqlite` of the same run.

    python bench/dropins.py --berth target/release/berth [--rounds 2] [--lg-rounds 1] \\
        [--steps 2000] [--quick] [--only openai|langgraph|adk|smolagents] [--workloads W1,R] [--out report.json]

Needs openai-agents==0.24.0, langgraph==1.2.24 and langgraph-checkpoint-sqlite==3.1.2
beside the berth wheels (target/langgraph-venv plus `pip install openai-agents==0.24.0`).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, Callable, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import ITEM, Server, Sizes, _timed  # noqa: E402

import berth  # noqa: E402

OPENAI_WORKLOADS = ("W1", "W2", "W4", "W5", "T", "R")
TURNS = 200
REQUESTS = 30


def turn_item(n: int, role: str) -> dict[str, Any]:
    return {"role": role, "content": f"turn {n} " + ITEM["content"][:200], "type": "message"}


def openai_variant(make: Callable[[str], Any], close: Callable[[Any], None]) -> dict[str, Callable[[Sizes], float]]:
    """The workloads through the SDK's `Session` protocol; `make(session_id)` makes one."""

    def w1(sizes: Sizes) -> float:
        session = make(f"w1-{uuid.uuid4().hex}")

        async def go() -> None:
            for _ in range(sizes.w1):
                await session.add_items([ITEM])

        seconds = _timed(lambda: asyncio.run(go()))
        close(session)
        return seconds

    def w2(sizes: Sizes) -> float:
        session = make(f"w2-{uuid.uuid4().hex}")

        async def go() -> None:
            for _ in range(sizes.w2 // 100):
                await session.add_items([ITEM] * 100)

        seconds = _timed(lambda: asyncio.run(go()))
        close(session)
        return seconds

    def seeded(prefix: str, items: int) -> str:
        """A new session of `items` items, added 1,000 at a time by an object then closed."""
        session_id = f"{prefix}-{uuid.uuid4().hex}"
        writer = make(session_id)

        async def fill() -> None:
            for _ in range(items // 1000):
                await writer.add_items([ITEM] * 1000)

        asyncio.run(fill())
        close(writer)
        return session_id

    def w4(sizes: Sizes) -> float:
        session_id = seeded("w4", sizes.w4)
        reader = make(session_id)  # a fresh object: nothing read yet

        async def resume() -> None:
            items = await reader.get_items()
            assert len(items) == sizes.w4, len(items)

        seconds = _timed(lambda: asyncio.run(resume()))
        close(reader)
        return seconds

    def w5(sizes: Sizes) -> float:
        sessions = [make(f"w5-{uuid.uuid4().hex}-{n}") for n in range(8)]

        async def writer(session: Any) -> None:
            for _ in range(sizes.w5_per_writer):
                await session.add_items([ITEM])

        async def go() -> None:
            await asyncio.gather(*(writer(session) for session in sessions for _ in range(8)))

        seconds = _timed(lambda: asyncio.run(go()))
        for session in sessions:
            close(session)
        return seconds

    def turns(sizes: Sizes) -> float:
        session = make(f"t-{uuid.uuid4().hex}")

        async def go() -> None:
            for n in range(TURNS):
                await session.add_items([turn_item(n, "user"), turn_item(n, "assistant")])
                got = await session.get_items(20)
                assert len(got) == min(20, 2 * (n + 1)), len(got)

        seconds = _timed(lambda: asyncio.run(go()))
        close(session)
        return seconds

    def per_request(sizes: Sizes) -> float:
        session_id = seeded("r", sizes.w4)

        def request(n: int) -> None:
            session = make(session_id)

            async def go() -> None:
                assert len(await session.get_items(10)) == 10
                await session.add_items([turn_item(n, "user"), turn_item(n, "assistant")])

            asyncio.run(go())
            close(session)

        request(0)
        return _timed(lambda: [request(n) for n in range(1, REQUESTS + 1)])

    return {"W1": w1, "W2": w2, "W4": w4, "W5": w5, "T": turns, "R": per_request}


def openai_count(workload: str, sizes: Sizes) -> int:
    counts = {"W1": sizes.w1, "W2": sizes.w2, "W4": sizes.w4, "W5": sizes.w5_per_writer * 64, "T": TURNS, "R": REQUESTS}
    return counts[workload]


# ---- LangGraph ----------------------------------------------------------------------------


def steps_graph(steps: int) -> Any:
    """The LangGraph benchmarks' graph (uncompiled): a node that adds a ~200-byte message
    a step, `steps` times (`python/bench/migrate.py` builds its source with it too)."""
    from langchain_core.messages import AIMessage, AnyMessage
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages

    # The functional form: this module's annotations are strings (`from __future__`),
    # which LangGraph could not resolve for a class defined here.
    State = TypedDict("State", {"messages": Annotated[list[AnyMessage], add_messages], "n": int})

    def step(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"step {state['n']} " + "y" * 200)], "n": state["n"] + 1}

    graph = StateGraph(State)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", lambda state: END if state["n"] >= steps else "step")
    return graph


def langgraph_run(make: Callable[[], tuple[Any, Callable[[], None]]], steps: int) -> tuple[float, float]:
    """(seconds for `steps` steps, seconds for a fresh saver's `get_tuple` of the latest)."""
    graph = steps_graph(steps)
    thread = f"t-{uuid.uuid4().hex[:12]}"
    saver, close = make()
    compiled = graph.compile(checkpointer=saver)
    started = time.perf_counter()
    compiled.invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": thread}, "recursion_limit": steps + 10})
    elapsed = time.perf_counter() - started
    close()
    fresh, close_fresh = make()
    started = time.perf_counter()
    latest = fresh.get_tuple({"configurable": {"thread_id": thread}})
    resume = time.perf_counter() - started
    assert len(latest.checkpoint["channel_values"]["messages"]) == steps
    close_fresh()
    return elapsed, resume


def du(path: Path) -> int:
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--berth", required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--lg-rounds", type=int, default=1)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["openai", "langgraph", "adk", "smolagents"])
    parser.add_argument("--workloads", default=",".join(OPENAI_WORKLOADS),
                        help="the OpenAI workloads to run, comma-separated (default: all)")
    parser.add_argument("--out")
    args = parser.parse_args()
    sizes = Sizes(args.quick)
    work = Path(tempfile.mkdtemp(prefix="berth-dropin-bench-", dir=args.dir))
    report: dict[str, Any] = {"sizes": vars(sizes), "steps": args.steps}
    server = Server(args.berth, work / "served")
    try:
        if args.only in (None, "openai"):
            report["openai"] = bench_openai(args, sizes, work, server)
        if args.only in (None, "langgraph"):
            report["langgraph"] = bench_langgraph(args, work, server)
        for framework in ("adk", "smolagents"):
            if args.only == framework:
                report[framework] = bench_requests(args, work, server, framework)
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=2))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def bench_openai(args: argparse.Namespace, sizes: Sizes, work: Path, server: Server) -> list[dict[str, Any]]:
    from agents.memory import SQLiteSession

    from berth.integrations.openai_agents import BerthSession

    (work / "sdk").mkdir()
    embedded = berth.open(str(work / "embedded"), tenant="bench", user="bench", role="service")
    http = berth.Client(server.url, api_key=server.key)
    variants = {
        "sqlite": openai_variant(lambda sid: SQLiteSession(sid, str(work / "sdk" / "sdk.sqlite")),
                                 lambda session: session.close()),
        "embedded": openai_variant(lambda sid: BerthSession(sid, embedded), lambda session: session.close()),
        "http": openai_variant(lambda sid: BerthSession(sid, http), lambda session: session.close()),
    }
    workloads = [workload for workload in args.workloads.split(",") if workload]
    unknown = sorted(set(workloads) - set(OPENAI_WORKLOADS))
    if unknown:
        raise SystemExit(f"unknown workloads {unknown}; known: {', '.join(OPENAI_WORKLOADS)}")
    seconds: dict[tuple[str, str], list[float]] = {}
    names = list(variants)
    for round_index in range(args.rounds):
        order = names[round_index % len(names):] + names[: round_index % len(names)]
        for workload in workloads:
            for name in order:
                taken = variants[name][workload](sizes)
                seconds.setdefault((workload, name), []).append(taken)
                print(f"round {round_index + 1} {workload} {name}: {taken:.3f} s", file=sys.stderr)
            if workload == "W4":
                seconds.setdefault(("W4", "floor"), []).append(w4_floor(sizes))
    # The floor is W1's: measured when W1 is.
    floor = bench_floor(args, sizes, work, embedded, http) if "W1" in workloads else {}
    embedded.close()
    http.close()
    rows = []
    if floor:
        print("| floor: one durable single-item write, bare | per second | vs SQLite | W1 through the drop-in |")
        print("|---|---|---|---|")
    for name, seconds_taken in floor.items():
        through = f"{sizes.w1 / statistics.median(seconds[('W1', name)]):,.0f}/s" if ("W1", name) in seconds else "-"
        print(f"| {name} | {sizes.w1 / seconds_taken:,.0f}/s | {floor['sqlite'] / seconds_taken:.2f}x | {through} |")
        rows.append({"workload": "floor", "variant": name, "seconds_median": seconds_taken,
                     "per_second": sizes.w1 / seconds_taken, "vs_sqlite_speed": floor["sqlite"] / seconds_taken})
    print("| workload | variant | median s | items (turns, requests)/s | speed vs SQLiteSession |")
    print("|---|---|---|---|---|")
    for workload in workloads:
        base = statistics.median(seconds[(workload, "sqlite")])
        for name in names:
            median = statistics.median(seconds[(workload, name)])
            row = {"workload": workload, "variant": name, "seconds_median": median,
                   "per_second": openai_count(workload, sizes) / median, "rounds": seconds[(workload, name)],
                   "vs_sqlite_speed": base / median}
            rows.append(row)
            print(f"| {workload} | {name} | {median:.3f} | {row['per_second']:,.0f} | {row['vs_sqlite_speed']:.2f}x |")
    if ("W4", "floor") in seconds:
        floor_s = statistics.median(seconds[("W4", "floor")])
        base = statistics.median(seconds[("W4", "sqlite")])
        print(f"| W4 floor: `json.loads` of the {sizes.w4:,} items, held | {floor_s:.3f} s "
              f"| {floor_s / base:.2f} of SQLiteSession's W4 | a 2x store has {base / 2:.3f} s |")
        rows.append({"workload": "W4", "variant": "floor", "seconds_median": floor_s,
                     "rounds": seconds[("W4", "floor")], "of_sqlite": floor_s / base})
    return rows


def w4_floor(sizes: Sizes) -> float:
    """What W4 cannot go below on any store that hands back items parsed from stored JSON
    (as `SQLiteSession` does, one `json.loads` a row): parsing the items' texts, the
    results held as `get_items` holds them."""
    texts = [json.dumps(ITEM) for _ in range(sizes.w4)]
    started = time.perf_counter()
    items = [json.loads(text) for text in texts]
    taken = time.perf_counter() - started
    assert len(items) == sizes.w4
    return taken


def bench_floor(args: argparse.Namespace, sizes: Sizes, work: Path, embedded: berth.Client,
                http: berth.Client) -> dict[str, float]:
    """The floor under the drop-ins, W1's writes without the Session protocol, the worker
    thread or the item mapping: the same clients' bare single-item `append`, beside a bare
    SQLite insert + commit of the same JSON (WAL, `synchronous=FULL`: durable per commit).
    Interleaved rounds, medians of seconds for `sizes.w1` writes."""
    connection = sqlite3.connect(str(work / "floor.sqlite"), isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    connection.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, session TEXT, data TEXT)")
    text = json.dumps(ITEM)

    def sqlite_writes() -> None:
        for _ in range(sizes.w1):
            connection.execute("BEGIN")
            connection.execute("INSERT INTO items (session, data) VALUES (?, ?)", ("floor", text))
            connection.execute("COMMIT")

    def berth_writes(client: berth.Client) -> Callable[[], None]:
        session_id = client.create_session(f"raw-{uuid.uuid4().hex[:20]}",
                                           policy={"activity_ttl_ms": 10 ** 11, "run_lease_ttl_ms": 30_000}).id
        return lambda: [client.append(session_id, [("user/message", ITEM)]) for _ in range(sizes.w1)]

    line = (text + "\n").encode()

    def os_writes(hop: bool) -> Callable[[], None]:
        """No store at all: the item's line written and `fdatasync`ed at the end of a
        file, as a log grows (`hop`: each awaited through `asyncio.to_thread`, the
        hand-off an async `Session` makes, as `SQLiteSession` does). What one durable
        `add_items` cannot go below on this disk, whatever the store."""
        def write(fd: int) -> None:
            os.write(fd, line)
            os.fdatasync(fd)

        async def awaited(fd: int) -> None:
            for _ in range(sizes.w1):
                await asyncio.to_thread(write, fd)

        def go() -> None:
            fd = os.open(str(work / f"floor-{uuid.uuid4().hex}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            try:
                if hop:
                    asyncio.run(awaited(fd))
                else:
                    for _ in range(sizes.w1):
                        write(fd)
            finally:
                os.close(fd)
        return go

    variants = {"sqlite": sqlite_writes, "embedded": berth_writes(embedded), "http": berth_writes(http),
                "os write+fdatasync": os_writes(False), "os write+fdatasync via to_thread": os_writes(True)}
    names = list(variants)
    seconds: dict[str, list[float]] = {}
    for round_index in range(args.rounds):
        for name in names[round_index % len(names):] + names[: round_index % len(names)]:
            seconds.setdefault(name, []).append(_timed(variants[name]))
            print(f"round {round_index + 1} floor {name}: {seconds[name][-1]:.3f} s", file=sys.stderr)
    connection.close()
    return {name: statistics.median(taken) for name, taken in seconds.items()}


def bench_langgraph(args: argparse.Namespace, work: Path, server: Server) -> list[dict[str, Any]]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from berth.integrations.langgraph import BerthSaver

    places = {name: work / f"lg-{name}" for name in ("sqlite", "embedded")}
    for place in places.values():
        place.mkdir()
    embedded = berth.open(str(places["embedded"]), tenant="bench", user="bench", role="service")
    http = berth.Client(server.url, api_key=server.key)

    def sqlite_make() -> tuple[Any, Callable[[], None]]:
        connection = sqlite3.connect(str(places["sqlite"] / "cp.sqlite"), check_same_thread=False)
        return SqliteSaver(connection), connection.close

    def berth_make(client: berth.Client) -> Callable[[], tuple[Any, Callable[[], None]]]:
        def make() -> tuple[Any, Callable[[], None]]:
            saver = BerthSaver(client)
            return saver, saver.close
        return make

    variants = {"sqlite": sqlite_make, "embedded": berth_make(embedded), "http": berth_make(http)}
    served_before = du(work / "served")
    measured: dict[str, list[tuple[float, float]]] = {}
    names = list(variants)
    for round_index in range(args.lg_rounds):
        order = names[round_index % len(names):] + names[: round_index % len(names)]
        for name in order:
            elapsed, resume = langgraph_run(variants[name], args.steps)
            measured.setdefault(name, []).append((elapsed, resume))
            print(f"round {round_index + 1} langgraph {name}: {args.steps / elapsed:.1f} steps/s, "
                  f"resume {resume * 1000:.0f} ms", file=sys.stderr)
    embedded.close()
    http.close()
    disk = {"sqlite": du(places["sqlite"]) / args.lg_rounds, "embedded": du(places["embedded"]) / args.lg_rounds,
            "http": (du(work / "served") - served_before) / args.lg_rounds}
    base_elapsed = statistics.median(elapsed for elapsed, _ in measured["sqlite"])
    rows = []
    print(f"| saver ({args.steps} steps) | steps/s | vs SqliteSaver | resume ms | bytes on disk | vs SqliteSaver |")
    print("|---|---|---|---|---|---|")
    for name in names:
        elapsed = statistics.median(elapsed for elapsed, _ in measured[name])
        resume = statistics.median(resume for _, resume in measured[name])
        row = {"variant": name, "steps_per_second": args.steps / elapsed, "vs_sqlite_speed": base_elapsed / elapsed,
               "resume_ms": resume * 1000, "bytes_per_thread": disk[name],
               "vs_sqlite_bytes": disk[name] / disk["sqlite"], "rounds": measured[name]}
        rows.append(row)
        print(f"| {name} | {row['steps_per_second']:.1f} | {row['vs_sqlite_speed']:.2f}x | {row['resume_ms']:.0f} | "
              f"{disk[name] / 1e6:.1f} MB | 1/{1 / max(row['vs_sqlite_bytes'], 1e-9):.0f} |")
    return rows


# ---- Request patterns: Google ADK and smolagents ------------------------------------------


def adk_requests(make: Callable[[], Any], close: Callable[[Any], Any], turns: int, requests: int,
                 mark: Callable[[str], None] = lambda phase: None) -> Callable[[], tuple[float, float]]:
    """ADK's two patterns on one session service kind (`make()` makes a service object,
    `close(service)` closes it): a chat turn (`turns` `Runner` turns on a kept object, each
    the user's message, one model call and its answer) and a request (`requests` times a
    fresh object, one such turn, closed), on a session of `turns` turns already. Both in
    one event loop (a web app's). `mark(phase)` is called before each timed turn and
    request ("turn", "request") and at the end ("end"). Returns (seconds a turn, seconds
    a request)."""
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner
    from google.genai import types

    logging.getLogger("google_adk").setLevel(logging.ERROR)  # "missing token usage", a turn

    class Echo(BaseLlm):
        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            text = llm_request.contents[-1].parts[0].text
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=f"re: {text}")]))

    agent = LlmAgent(name="chat", model=Echo(model="echo"))

    async def turn(service: Any, session_id: str, n: int) -> None:
        runner = Runner(agent=agent, app_name="bench", session_service=service)
        message = types.Content(role="user", parts=[types.Part(text=f"turn {n} " + "x" * 200)])
        async for _ in runner.run_async(user_id="u", session_id=session_id, new_message=message):
            pass

    async def go() -> tuple[float, float]:
        session_id = f"s-{uuid.uuid4().hex}"
        kept = make()
        await kept.create_session(app_name="bench", user_id="u", session_id=session_id)
        started = time.perf_counter()
        for n in range(turns):
            mark("turn")
            await turn(kept, session_id, n)
        chat = (time.perf_counter() - started) / turns
        mark("end")
        await close(kept)

        async def request(n: int) -> None:
            service = make()
            await turn(service, session_id, n)
            await close(service)

        await request(turns)  # the first request after the kept object's turns: not timed
        started = time.perf_counter()
        for n in range(requests):
            mark("request")
            await request(turns + 1 + n)
        mark("end")
        return chat, (time.perf_counter() - started) / requests

    return lambda: asyncio.run(go())


def smolagents_requests(make_log: Callable[[str], Any], turns: int, requests: int,
                        mark: Callable[[str], None] = lambda phase: None) -> Callable[[], tuple[float, float]]:
    """smolagents' two patterns (`make_log(job)`: a `BerthAgentLog`, or None for no store):
    a chat turn (`turns` runs of a kept agent with `reset=False`, each a code step and the
    final answer) and a request (`requests` times a fresh agent and log on the job,
    attached — its memory rebuilt from the log —, one run, closed). `mark` as
    `adk_requests`'. Returns (seconds a turn, seconds a request)."""
    from smolagents import CodeAgent
    from smolagents.models import ChatMessage, MessageRole, Model

    script = ["Thought: one.\n<code>\nprint('v', 2)\n</code>", "Thought: done.\n<code>\nfinal_answer('ok')\n</code>"]

    class Scripted(Model):
        def __init__(self) -> None:
            super().__init__(model_id="scripted")
            self.calls = 0

        def generate(self, messages: list[Any], stop_sequences: Any = None, response_format: Any = None,
                     tools_to_call_from: Any = None, **kwargs: Any) -> ChatMessage:
            self.calls += 1
            return ChatMessage(role=MessageRole.ASSISTANT, content=script[(self.calls - 1) % 2])

    def agent() -> Any:
        return CodeAgent(tools=[], model=Scripted(), max_steps=6, verbosity_level=0)

    def go() -> tuple[float, float]:
        job = f"job-{uuid.uuid4().hex}"
        kept, log = agent(), make_log(job)
        if log is not None:
            log.attach(kept)
        started = time.perf_counter()
        for n in range(turns):
            mark("turn")
            assert kept.run(f"task {n}", reset=False) == "ok"
        chat = (time.perf_counter() - started) / turns
        mark("end")
        if log is not None:
            log.close()

        def request(n: int) -> None:
            fresh, log = agent(), make_log(job)
            if log is not None:
                log.attach(fresh)
            assert fresh.run(f"task {n}", reset=False) == "ok"
            if log is not None:
                log.close()

        request(turns)
        started = time.perf_counter()
        for n in range(requests):
            mark("request")
            request(turns + 1 + n)
        mark("end")
        return chat, (time.perf_counter() - started) / requests

    return go


def calls_per_pattern(client: berth.Client,
                      pattern: Callable[[Callable[[str], None]], Callable[[], Any]]) -> dict[str, dict[str, int]]:
    """The round trips and durable writes through `client` of the last turn and the last
    request of `pattern(mark)` (run once, untimed)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "dropins"))
    from dropin_count import count_calls, durable_writes

    saved = client._execute, client._aexecute
    counts = count_calls(client)
    phase = {"now": "", "seen": {}}

    def mark(next_phase: str) -> None:
        if phase["now"]:
            phase["seen"][phase["now"]] = {"round_trips": sum(counts.values()), "durable_writes": durable_writes(counts)}
        phase["now"] = "" if next_phase == "end" else next_phase
        counts.clear()

    try:
        pattern(mark)()
    finally:
        client._execute, client._aexecute = saved  # type: ignore[method-assign]
    return phase["seen"]


def bench_requests(args: argparse.Namespace, work: Path, server: Server, framework: str) -> list[dict[str, Any]]:
    """The request patterns of one framework, its own store (or none) beside berth's
    drop-in on both transports, with and without the hand-on of idle runs (ADK's
    `hand_on`; smolagents' sessions are serial: nothing to hand on)."""
    from berth.integrations._runpool import POOL

    turns, requests = (5, 10) if args.quick else (20, 40)
    embedded = berth.open(str(work / f"{framework}-embedded"), tenant="bench", user="bench", role="service")
    http = berth.Client(server.url, api_key=server.key)
    clients = {"embedded": embedded, "http": http}
    variants: dict[str, Callable[[], tuple[float, float]]] = {}
    counted: dict[str, Callable[[Callable[[str], None]], Callable[[], Any]]] = {}
    if framework == "adk":
        from google.adk.sessions import DatabaseSessionService
        from google.adk.sessions.sqlite_session_service import SqliteSessionService
        from sqlalchemy.ext.asyncio import create_async_engine

        from berth.integrations.adk import BerthSessionService

        (work / "adk").mkdir()
        database_url = f"sqlite+aiosqlite:///{work / 'adk' / 'database.sqlite'}"

        async def no_close(service: Any) -> None:
            pass

        def database() -> tuple[float, float]:
            # One engine for the run (its connection pool), a service object per request on
            # it, as berth's share one client.
            engine = create_async_engine(database_url)

            async def dispose(service: Any) -> None:
                await service.close()

            try:
                return adk_requests(lambda: DatabaseSessionService(db_engine=engine), dispose, turns, requests)()
            finally:
                asyncio.run(engine.dispose())

        variants["adk DatabaseSessionService"] = database
        variants["adk SqliteSessionService"] = adk_requests(
            lambda: SqliteSessionService(str(work / "adk" / "sqlite.db")), no_close, turns, requests)

        async def close_berth(service: Any) -> None:
            service.close()

        for transport, client in clients.items():
            for hand_on in (False, True):
                name = f"berth {transport}{'' if hand_on else ', hand_on=False'}"
                make = functools.partial(BerthSessionService, client, hand_on=hand_on)
                variants[name] = adk_requests(make, close_berth, turns, requests)
                counted[name] = functools.partial(adk_requests, make, close_berth, 2, 2)
    else:
        from berth.integrations.smolagents import BerthAgentLog

        variants["smolagents, no store"] = smolagents_requests(lambda job: None, turns, requests)
        for transport, client in clients.items():
            name = f"berth {transport}"
            make_log = functools.partial(BerthAgentLog, client)
            variants[name] = smolagents_requests(make_log, turns, requests)
            counted[name] = functools.partial(smolagents_requests, make_log, 2, 2)
    measured: dict[str, list[tuple[float, float]]] = {}
    names = list(variants)
    for round_index in range(args.rounds):
        order = names[round_index % len(names):] + names[: round_index % len(names)]
        for name in order:
            measured.setdefault(name, []).append(variants[name]())
            POOL.release_all()
            chat, request = measured[name][-1]
            print(f"round {round_index + 1} {framework} {name}: turn {chat * 1000:.2f} ms, "
                  f"request {request * 1000:.2f} ms", file=sys.stderr)
    base = names[0]
    base_chat = statistics.median(chat for chat, _ in measured[base])
    base_request = statistics.median(request for _, request in measured[base])
    rows = []
    print(f"| {framework} ({turns} turns, {requests} requests) | turn ms | vs {base} | request ms | vs {base} "
          "| turn: round trips, durable writes | request: round trips, durable writes |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        chat = statistics.median(chat for chat, _ in measured[name])
        request = statistics.median(request for _, request in measured[name])
        calls: dict[str, dict[str, int]] = {}
        if name in counted:
            # Counted apart from the timed rounds (a pattern of two turns and two requests).
            calls = calls_per_pattern(clients[name.split()[1].rstrip(",")], counted[name])
            POOL.release_all()
        row = {"framework": framework, "variant": name, "turn_ms": chat * 1000, "request_ms": request * 1000,
               "turn_vs_base_speed": base_chat / chat, "request_vs_base_speed": base_request / request,
               "rounds": measured[name], "calls": calls}
        rows.append(row)
        shown = [f"{calls[phase]['round_trips']}, {calls[phase]['durable_writes']}" if phase in calls else "-"
                 for phase in ("turn", "request")]
        print(f"| {name} | {row['turn_ms']:.2f} | {row['turn_vs_base_speed']:.2f}x | {row['request_ms']:.2f} | "
              f"{row['request_vs_base_speed']:.2f}x | {shown[0]} | {shown[1]} |")
    embedded.close()
    http.close()
    return rows


if __name__ == "__main__":
    os.environ.setdefault("OPENAI_API_KEY", "unused")
    main()
