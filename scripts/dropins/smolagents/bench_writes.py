"""What a step's write costs: `BerthAgentLog` as it is, side by side with another version
of the package (e.g. the one before the conversation vocabulary), on the same store,
alternating, medians.

A CodeAgent with a scripted model (no network) runs STEPS steps, each printing a line,
then answers; every step callback (the append of the finished step) is timed, and each
whole `run()`. Each round runs both versions on fresh sessions, in alternating order.

    # the other version, as a package named `smol_other`:
    mkdir -p /tmp/old/smol_other && for f in __init__.py _log.py _records.py; do
      git show ca6ed18:python/berth/integrations/smolagents/$f > /tmp/old/smol_other/$f; done
    python bench_writes.py --other /tmp/old [--url URL --key KEY] [--rounds 15] [--steps 8]

Without --url: the embedded store in a temporary directory.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import berth  # noqa: E402
from smolagents import CodeAgent  # noqa: E402
from smol_fakes import ScriptedModel  # noqa: E402


def script(steps: int) -> list[str]:
    return [f"Thought: step {n}.\n<code>\nprint('value', {n} * 2)\n</code>" for n in range(steps)] + [
        "Thought: done.\n<code>\nfinal_answer('done')\n</code>"]


def one_run(module: Any, client: Any, steps: int) -> tuple[list[float], float, int]:
    """Step-callback times (s), the run's time (s), and the session's event count."""
    agent = CodeAgent(tools=[], model=ScriptedModel(script(steps)), max_steps=steps + 2, verbosity_level=0)
    session_id = f"bench-{uuid.uuid4().hex[:10]}"
    log = module.BerthAgentLog(client, session_id)
    log.attach(agent)
    timed: list[float] = []
    original = log._on_step

    def on_step(step: Any, agent: Any = None) -> None:
        started = time.perf_counter()
        original(step, agent)
        timed.append(time.perf_counter() - started)

    # The callbacks registered at attach call the bound method: re-register the timed one.
    agent.step_callbacks._callbacks = {kind: [on_step if cb == original else cb for cb in cbs]
                                       for kind, cbs in agent.step_callbacks._callbacks.items()}
    started = time.perf_counter()
    assert agent.run("Count.") == "done"
    total = time.perf_counter() - started
    log.close()
    return timed[: steps], total, len(list(client.iter_events(session_id)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--other", required=True, help="a directory holding the package `smol_other`")
    parser.add_argument("--url")
    parser.add_argument("--key")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=8)
    arguments = parser.parse_args()
    sys.path.insert(0, arguments.other)
    versions = {"before": importlib.import_module("smol_other"),
                "now": importlib.import_module("berth.integrations.smolagents")}
    if arguments.url:
        client = berth.Client(arguments.url, api_key=arguments.key)
    else:
        client = berth.open(tempfile.mkdtemp(prefix="smol-bench-"), tenant="bench", user="u", role="service")
    steps: dict[str, list[float]] = {name: [] for name in versions}
    runs: dict[str, list[float]] = {name: [] for name in versions}
    events: dict[str, int] = {}
    for _ in range(2):  # warm-up
        for module in versions.values():
            one_run(module, client, arguments.steps)
    for round_ in range(arguments.rounds):
        order = list(versions) if round_ % 2 == 0 else list(reversed(versions))
        for name in order:
            timed, total, count = one_run(versions[name], client, arguments.steps)
            steps[name] += timed
            runs[name].append(total)
            events[name] = count
    where = arguments.url or "embedded"
    print(f"{where}: {arguments.rounds} rounds x {arguments.steps} steps (+ the answer's step)")
    print("| version | step write, median ms | p90 ms | run, median ms | events per run |")
    print("|---|---|---|---|---|")
    for name in versions:
        ordered = sorted(steps[name])
        p90 = ordered[int(len(ordered) * 0.9)]
        print(f"| {name} | {statistics.median(steps[name]) * 1000:.2f} | {p90 * 1000:.2f} | "
              f"{statistics.median(runs[name]) * 1000:.1f} | {events[name]} |")


if __name__ == "__main__":
    main()
