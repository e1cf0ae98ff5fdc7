"""The async client's HTTP request path, side by side in one run: `AsyncHttpTransport`
(keep-alive connections of the loop's own, `HttpTransport.asend`), the path before it
(the sync `http.client` pool, each request on a worker thread), and httpx's async
client, all to one release `berth serve` on loopback. Each round appends `--appends`
single-event batches of 1.5 KB to a fresh session per variant; rounds interleave and
rotate their order; the figures are each round's median append.

    python bench/async_http.py --berth target/release/berth [--rounds 3] [--appends 500]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import Server  # noqa: E402

import berth  # noqa: E402
from berth import _transport  # noqa: E402
from berth._calls import Answer  # noqa: E402


class HttpxTransport(_transport.AsyncHttpTransport):
    """Every request through httpx's async client (what `AsyncHttpTransport` did before)."""

    async def send(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes | None) -> Answer:
        response = await self._stream_client().request(method, path, content=body, headers=headers)
        return Answer(response.status_code, response.headers, response.content)


class ThreadTransport(_transport.AsyncHttpTransport):
    """Every request through the sync `http.client` pool on a worker thread (what
    `AsyncHttpTransport` did before `asend`)."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float) -> None:
        super().__init__(base_url, api_key, timeout)
        self._executor = ThreadPoolExecutor(max_workers=16, thread_name_prefix="bench-http")

    async def send(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes | None) -> Answer:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, partial(self._sync.send, method, path, headers, body))

    async def close(self) -> None:
        await super().close()
        self._executor.shutdown(wait=False)


#: What every timed append stores: one event of 1.5 KB.
BATCH = [("bench/event", {"x": "y" * 1500})]


async def median_append(client: berth.AsyncClient, appends: int) -> float:
    """The median time of `appends` appends of `BATCH` to a fresh session."""
    session = await client.create_session()
    times = []
    for _ in range(appends):
        started = time.perf_counter()
        await client.append(session.id, BATCH)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def run(args: argparse.Namespace, server: Server) -> None:
    variants = {"the loop's own connections": None, "http.client on a thread": ThreadTransport,
                "httpx async": HttpxTransport}
    results: dict[str, list[float]] = {name: [] for name in variants}
    for round_index in range(args.rounds):
        shift = round_index % len(variants)
        names = list(variants)[shift:] + list(variants)[:shift]
        for name in names:
            client = berth.AsyncClient(server.url, api_key=server.key)
            transport = variants[name]
            if transport is not None:
                await client._transport.close()
                client._transport = transport(server.url, server.key, 30.0)
            results[name].append(await median_append(client, args.appends))
            await client.close()
    for name, medians in results.items():
        rounds = ", ".join(f"{median * 1e6:.0f}" for median in medians)
        print(f"{name}: median append per round {rounds} µs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--berth", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--appends", type=int, default=500)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    server = Server(args.berth, Path(tempfile.mkdtemp(dir=args.dir)) / "served")
    try:
        asyncio.run(run(args, server))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
