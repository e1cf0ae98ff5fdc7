"""`get_session` of one long session beside its floor, alone (a measurement, not part of
the suite): the floor (`Event.model_validate_json` of each event's JSON, all held, as
`bench.floor_ms` builds them) and a whole
`get_session` on the embedded store, interleaved round by round, medians. With
`--compare PATH`, the `BerthSessionService` of another copy of the adapter (e.g. the main
branch's: its `adk/` package directory, or `adk.py` from before the package) is timed in the
same rounds and must return equal events.

    target/adk-dropin/venv/bin/python scripts/dropins/adk/bench_read.py [--events 10000]
        [--rounds 7] [--compare /path/to/python/berth/integrations/adk]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench import APP, LONG, event, event_texts, floor_ms  # noqa: E402

import berth  # noqa: E402

from berth.integrations.adk import BerthSessionService  # noqa: E402


def other_service_class(path: str) -> Any:
    """`BerthSessionService` of another copy of the adapter (a package directory, its
    `__init__.py`, or a single module), loaded under another name."""
    location = Path(path)
    if location.is_dir():
        location = location / "__init__.py"
    # A package's submodules are found beside its `__init__.py` (`adk_compared._pages`, …).
    search = [str(location.parent)] if location.name == "__init__.py" else None
    spec = importlib.util.spec_from_file_location("adk_compared", location, submodule_search_locations=search)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered first: pydantic resolves the module's forward references through it.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.BerthSessionService


async def seed(service: BerthSessionService, events: int) -> None:
    session = await service.create_session(app_name=APP, user_id="u0", session_id=LONG)
    for n in range(events):
        await service.append_event(session, event(n))


def timed_ms(action: Any) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--compare", help="another adk package (or adk.py) whose BerthSessionService is timed too")
    args = parser.parse_args()
    texts = event_texts(args.events)
    with tempfile.TemporaryDirectory() as directory:
        client = berth.open(directory, tenant="bench", user="agent", role="service")
        service = BerthSessionService(client)
        compared = other_service_class(args.compare)(client) if args.compare else None
        started = time.perf_counter()
        asyncio.run(seed(service, args.events))
        print(f"seeded {args.events} events in {time.perf_counter() - started:.1f} s", flush=True)
        if compared is not None:
            mine = service._get(APP, "u0", LONG, None)
            theirs = compared._get(APP, "u0", LONG, None)
            assert mine is not None and theirs is not None and mine.events == theirs.events
        figures: dict[str, list[float]] = {"floor": [], "get_session": [], "compared": []}
        for _ in range(args.rounds):
            figures["floor"].append(floor_ms(texts))
            figures["get_session"].append(timed_ms(lambda: service._get(APP, "u0", LONG, None)))
            if compared is not None:
                figures["compared"].append(timed_ms(lambda: compared._get(APP, "u0", LONG, None)))
        medians = {name: statistics.median(values) for name, values in figures.items() if values}
        print(f"{args.events} events, medians of {args.rounds} interleaved rounds: "
              + ", ".join(f"{name} {value:.0f} ms" for name, value in medians.items())
              + f"; get_session - floor {medians['get_session'] - medians['floor']:.0f} ms")
        for name, values in figures.items():
            if values:
                print(f"  {name:12} {[round(value) for value in values]}")
        for each in (service, compared):
            if each is not None:
                each.close()
        client.close()


if __name__ == "__main__":
    main()
