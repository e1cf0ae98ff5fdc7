"""The live tail as an iterator (sync and async), on every transport; resuming after the
server restarts (HTTP); and appends from another process reaching an embedded tail."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
import uuid

import berth
from berth._sse import SseDecoder
from conftest import FOREVER, Place, Server, python_child


def test_sse_decoder_takes_chunks_split_anywhere() -> None:
    text = b": heartbeat\r\n\r\nid: 4\r\nevent: event\r\ndata: {\"a\":\r\n\r\nid: 5\nevent: end\ndata: {}\n\n"
    for size in (1, 2, 3, 7, len(text)):
        decoder = SseDecoder()
        messages = [m for start in range(0, len(text), size) for m in decoder.feed(text[start : start + size])]
        assert [(m.event, m.id, m.data) for m in messages] == [("event", "4", '{"a":'), ("end", "5", "{}")]


def test_tail_receives_later_appends_and_ends_when_bounded(place: Place) -> None:
    client = place.connect()
    session_id = client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER).id
    client.append(session_id, [("note/n", {"n": 0})])
    received: list[int] = []

    def follow() -> None:
        for event in client.stream(session_id, max_events=3):
            received.append(event.data["n"])

    follower = threading.Thread(target=follow)
    follower.start()
    time.sleep(0.3)
    client.append(session_id, [("note/n", {"n": 1})])
    client.append(session_id, [("note/n", {"n": 2})])
    follower.join(timeout=20)
    assert not follower.is_alive() and received == [0, 1, 2]

    bounded = client.stream(session_id, from_seq=3, idle_timeout_ms=200)
    assert list(bounded) == [] and bounded.end == {"reason": "idle_timeout", "next_seq": 3}


async def test_async_tail_and_the_loop_is_never_blocked(place: Place) -> None:
    async with place.connect_async() as client:
        session_id = (await client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER)).id
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.005)

        async def follow() -> list[int]:
            return [event.seq async for event in client.stream(session_id, max_events=20)]

        ticking = asyncio.create_task(ticker())
        following = asyncio.create_task(follow())
        await asyncio.sleep(0.1)
        started = ticks
        await asyncio.gather(*(client.append(session_id, [("note/n", {"n": n})]) for n in range(20)))
        assert sorted(await asyncio.wait_for(following, 20)) == list(range(20))
        stop.set()
        await ticking
        assert ticks > started, "the event loop kept running while appends and the tail waited"
        assert [event.seq async for event in client.iter_events(session_id)] == list(range(20))


def test_tail_resumes_from_the_last_seq_after_the_server_restarts(scratch) -> None:
    server = Server(scratch / f"restart-{uuid.uuid4().hex[:6]}", ["--rate-per-tenant", "0"])
    key = server.key("restart", "agent", "service")
    server.start()
    try:
        client = berth.Client(server.url, api_key=key)
        session_id = client.create_session("followed", policy=FOREVER).id
        client.append(session_id, [("note/n", {"n": 0})])
        seen: list[int] = []
        stream = client.stream(session_id, max_events=4, reconnect_s=30)
        follower = threading.Thread(target=lambda: seen.extend(event.seq for event in stream))
        follower.start()
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.02)
        server.kill()
        time.sleep(0.5)
        server.start()
        client.append(session_id, [("note/n", {"n": n}) for n in (1, 2, 3)])
        follower.join(timeout=30)
        assert seen == [0, 1, 2, 3], "no event lost or repeated across the restart"
        client.close()
    finally:
        server.stop()


WRITER = """
import sys, berth
client = berth.open(sys.argv[1], tenant=sys.argv[2], user="writer", role="service")
client.append(sys.argv[3], [("note/from-another-process", {"pid": 1})])
client.close()
"""


def test_embedded_tail_sees_appends_from_another_process(native_place: Place) -> None:
    place = native_place
    client = place.connect()
    session_id = client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER).id
    received: list[str] = []
    follower = threading.Thread(
        target=lambda: received.extend(event.type for event in client.stream(session_id, max_events=1))
    )
    follower.start()
    time.sleep(0.3)
    assert place.store_url is not None
    subprocess.run(python_child(WRITER, place.store_url, place.tenant, session_id), check=True, timeout=60)
    follower.join(timeout=20)
    assert received == ["note/from-another-process"]
