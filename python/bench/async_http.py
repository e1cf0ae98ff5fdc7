"""The async client's HTTP request path, side by side in one run: `AsyncHttpTransport`
(the sync `http.client` pool, each request on a worker thread) against httpx's async
client, both to one release `berth serve` on loopback. Each round appends `--appends`
single-event batches of 1.5 KB to a fresh session per variant; rounds interleave and
alternate their order; the figures are each round's median append.

    python bench/async_http.py --berth target/release/berth [--rounds 3] [--appends 500]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
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


async def median_append(client: berth.AsyncClient, appends: int) -> float:
    session = await client.create_session()
    batch = [("bench/event", {"x": "y" * 1500})]
    times = []
    for _ in range(appends):
        started = time.perf_counter()
        await client.append(session.id, batch)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def run(args: argparse.Namespace, server: Server) -> None:
    results: dict[str, list[float]] = {"http.client on a thread": [], "httpx async": []}
    for round_index in range(args.rounds):
        names = list(results) if round_index % 2 == 0 else list(results)[::-1]
        for name in names:
            client = berth.AsyncClient(server.url, api_key=server.key)
            if name == "httpx async":
                await client._transport.close()
                client._transport = HttpxTransport(server.url, server.key, 30.0)
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
