"""The embedded store's asyncio request path, side by side in one run: `AsyncNativeTransport`
(each request submitted to the store's runtime, its answer waking the loop through the
loop's mailbox: `NativeTransport.asend`), the path before it (the blocking native call on
a worker thread), and the blocking call made directly (no loop at all: the floor the
other two add their hand-offs to). One store on a temporary directory; each round
appends `--appends` single-event batches of 1.5 KB to a fresh session per variant;
rounds interleave and rotate their order; the figures are each round's median append.

    python bench/async_native.py [--rounds 3] [--appends 500] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from async_http import BATCH, median_append  # noqa: E402

import berth  # noqa: E402
from berth._calls import Answer  # noqa: E402


class ThreadTransport:
    """Every request as the blocking native call on a worker thread (what
    `AsyncNativeTransport` did before `asend`)."""

    def __init__(self, transport: Any) -> None:
        self._inner = transport
        self._sync = transport._sync
        self.busy_wait_s = transport.busy_wait_s
        self._executor = ThreadPoolExecutor(max_workers=16, thread_name_prefix="bench-native")

    async def send(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes | None) -> Answer:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, partial(self._sync.send, method, path, headers, body))

    async def close(self) -> None:
        self._executor.shutdown(wait=False)
        await self._inner.close()


def sync_median(client: berth.Client, appends: int) -> float:
    session = client.create_session()
    times = []
    for _ in range(appends):
        started = time.perf_counter()
        client.append(session.id, BATCH)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--appends", type=int, default=500)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    store = tempfile.mkdtemp(dir=args.dir)
    principal = {"tenant": "bench", "user": "bench", "role": "service"}
    variants = ["submitted, the loop woken", "blocking call on a thread", "blocking call, no loop"]
    results: dict[str, list[float]] = {name: [] for name in variants}
    for round_index in range(args.rounds):
        shift = round_index % len(variants)
        for name in variants[shift:] + variants[:shift]:
            if name == "blocking call, no loop":
                with berth.open(store, **principal) as client:
                    results[name].append(sync_median(client, args.appends))
                continue

            async def run(name: str = name) -> float:
                client = berth.open_async(store, **principal)
                if name == "blocking call on a thread":
                    client._transport = ThreadTransport(client._transport)
                try:
                    return await median_append(client, args.appends)
                finally:
                    await client.close()

            results[name].append(asyncio.run(run()))
    for name, medians in results.items():
        rounds = ", ".join(f"{median * 1e6:.0f}" for median in medians)
        print(f"{name}: median append per round {rounds} µs")


if __name__ == "__main__":
    main()
