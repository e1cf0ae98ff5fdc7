"""`BerthSession` against an earlier version of itself, side by side in one run.

The workloads of python/bench/dropins.py (W1, W2, W4, W5, T, R: the SDK's `Session`
protocol called directly) plus two through the SDK's `Runner` with its scripted model —
RH: runs with `hooks=session.run_hooks()`, each a tool call then an answer (a pre-tool
record, then 3 `add_items`); RN: the same runs without hooks — for the installed
`berth.integrations.openai_agents` ("new") and a copy of an earlier version of that
package ("old", imported from BASELINE as the top-level package `oa_old`), on the
embedded store (on disk, or `memory:` with no disk writes: the drop-in's own cost) and over
HTTP. Rounds alternate the variants and rotate their order;
figures are medians over rounds, of wall time or (`--clock cpu`) of this process's CPU time.

    git show REV:python/berth/integrations/openai_agents/<file> > BASELINE/oa_old/<file>   # each file
    python bench_ab.py --berth target/release/berth --baseline BASELINE [--rounds 5] [--quick] \\
        [--workloads W1,T,RH] [--out report.json]

(in the openai-dropin venv, beside python/bench on sys.path)
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "python" / "bench"))
import dropins  # noqa: E402
from bench import Server, Sizes  # noqa: E402
from dropins import openai_variant  # noqa: E402

import berth  # noqa: E402

RUNS = 40


def runner_workloads(make: Callable[[str], Any], close: Callable[[Any], None]) -> dict[str, Callable[[Sizes], float]]:
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    set_tracing_disabled(True)

    @function_tool
    def lookup(city: str) -> str:
        """Canned."""
        return f"sunny in {city}"

    def runs(hooks: bool) -> Callable[[Sizes], float]:
        def workload(sizes: Sizes) -> float:
            session = make(f"run-{uuid.uuid4().hex}")
            model = ScriptedModel()
            agent = Agent(name="weather", model=model, tools=[lookup])

            async def go() -> None:
                for n in range(RUNS):
                    model.enqueue([function_call("lookup", {"city": "Paris"}, call_id=f"call-{n}")])
                    model.enqueue([assistant_message(f"answer {n}")])
                    await Runner.run(agent, f"question {n}", session=session,
                                     hooks=session.run_hooks() if hooks else None)

            seconds = dropins._timed(lambda: asyncio.run(go()))
            close(session)
            return seconds

        return workload

    return {"RH": runs(True), "RN": runs(False)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--berth", required=True)
    parser.add_argument("--baseline", required=True, help="a directory holding oa_old/, the earlier package")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workloads", default="W1,W2,W4,W5,T,R,RH,RN")
    parser.add_argument("--transports", default="embedded,memory,http")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="cpu: this process's CPU time (all its threads; not the server's), "
                             "steadier than wall time on a loaded machine")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.clock == "cpu":
        def cpu_timed(action: Callable[[], Any]) -> float:
            started = time.process_time()
            action()
            return time.process_time() - started

        dropins._timed = cpu_timed
    sys.path.insert(0, args.baseline)
    old = importlib.import_module("oa_old")
    from berth.integrations.openai_agents import BerthSession as New

    sizes = Sizes(args.quick)
    work = Path(tempfile.mkdtemp(prefix="berth-openai-ab-"))
    server = Server(args.berth, work / "served")
    try:
        clients = {}
        if "embedded" in args.transports:
            clients["embedded"] = berth.open(str(work / "embedded"), tenant="bench", user="bench", role="service")
        if "memory" in args.transports:  # the store without disk writes: the drop-in's own cost
            clients["memory"] = berth.open("memory:", tenant="bench", user="bench", role="service")
        if "http" in args.transports:
            clients["http"] = berth.Client(server.url, api_key=server.key)
        variants: dict[str, dict[str, Callable[[Sizes], float]]] = {}
        for transport, client in clients.items():
            for version, cls in (("old", old.BerthSession), ("new", New)):
                def make(session_id: str, cls: Any = cls, client: Any = client) -> Any:
                    return cls(session_id, client)

                def close(session: Any) -> None:
                    session.close()

                variants[f"{transport}-{version}"] = {**openai_variant(make, close), **runner_workloads(make, close)}
        workloads = [workload for workload in args.workloads.split(",") if workload]
        names = list(variants)
        seconds: dict[tuple[str, str], list[float]] = {}
        for round_index in range(args.rounds):
            for workload in workloads:
                shift = round_index % len(names)
                order = names[shift:] + names[:shift]
                if round_index % 2:
                    order.reverse()
                for name in order:
                    taken = variants[name][workload](sizes)
                    seconds.setdefault((workload, name), []).append(taken)
                    print(f"round {round_index + 1} {workload} {name}: {taken:.3f} s", file=sys.stderr, flush=True)
            if args.out:  # what the rounds so far measured, should a later one fail
                Path(args.out).write_text(json.dumps({"rounds_done": round_index + 1, "seconds": [
                    [workload, name, taken] for (workload, name), taken in seconds.items()]}))
        rows = []
        print("| workload | transport | old median s | new median s | new/old |")
        print("|---|---|---|---|---|")
        for workload in workloads:
            for transport in clients:
                old_s = statistics.median(seconds[(workload, f"{transport}-old")])
                new_s = statistics.median(seconds[(workload, f"{transport}-new")])
                rows.append({"workload": workload, "transport": transport, "old_s": old_s, "new_s": new_s,
                             "old_rounds": seconds[(workload, f"{transport}-old")],
                             "new_rounds": seconds[(workload, f"{transport}-new")]})
                print(f"| {workload} | {transport} | {old_s:.3f} | {new_s:.3f} | {new_s / old_s:.2f} |")
        for client in clients.values():
            client.close()
        if args.out:
            Path(args.out).write_text(json.dumps({"sizes": vars(sizes), "rows": rows}, indent=1))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
