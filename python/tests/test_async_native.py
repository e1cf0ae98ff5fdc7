"""The native store from asyncio without worker threads (`NativeTransport.asend`): a
request is submitted to the store's runtime and its answer wakes the loop through a
descriptor the loop watches. These tests hold that path to what the executor path did:
every answer arrives once, a closed store or a cancelled caller never leaves a future
waiting, and a loop that cannot watch descriptors still works."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import uuid

import pytest

import berth
from berth import _calls as calls
from berth import _transport
from conftest import FOREVER, Place


def _berth_threads() -> set[str]:
    return {thread.name for thread in threading.enumerate() if thread.name.startswith("berth")}


async def test_concurrent_appends_answer_once_each_without_a_worker_thread(native_place: Place) -> None:
    client = native_place.connect_async()
    session_id = (await client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER)).id
    threads_before = _berth_threads()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticking = asyncio.create_task(ticker())
    outcomes = await asyncio.gather(*(client.append(session_id, [("note/n", {"n": n})]) for n in range(200)))
    ticking.cancel()
    assert sorted(outcome.first_seq for outcome in outcomes) == list(range(200))
    events = [event async for event in client.iter_events(session_id)]
    assert sorted(event.data["n"] for event in events) == list(range(200))
    # The executor path ran each request on a `berth` worker thread; this one made none.
    assert _berth_threads() == threads_before
    assert ticks > 200, "the loop ran while the appends were in flight"
    waker = _transport._WAKERS.get(asyncio.get_running_loop())
    assert waker is not None and not waker._waiting
    await client.close()


async def test_more_requests_at_once_than_the_blocking_pool_has_threads_all_answer(native_place: Place) -> None:
    # Each session's first append makes its log on the store's blocking pool. Were every
    # submitted request to hold a pool thread while it ran, 600 at once took tokio's 512
    # threads and waited forever for the logs to be made (it hung so before the cap).
    client = native_place.connect_async()
    ids = [f"s-{n:04d}-{uuid.uuid4().hex[:6]}" for n in range(600)]
    for chunk in range(0, len(ids), 50):
        await asyncio.gather(*(client.create_session(id, policy=FOREVER) for id in ids[chunk:chunk + 50]))
    appends = asyncio.gather(*(client.append(id, [("note/n", {"n": 0})]) for id in ids))
    outcomes = await asyncio.wait_for(appends, timeout=120)
    assert all(outcome.first_seq == 0 for outcome in outcomes)
    await client.close()


async def test_a_sync_client_awaits_its_requests_on_the_loop(native_place: Place) -> None:
    # What the integrations' async methods do with the sync client they are given.
    client = native_place.connect()
    session_id = client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER).id
    threads_before = _berth_threads()
    outcomes = await asyncio.gather(
        *(client._aexecute(calls.append(session_id, [("note/n", {"n": n})])) for n in range(20))
    )
    assert sorted(outcome.first_seq for outcome in outcomes) == list(range(20))
    assert _berth_threads() == threads_before
    with pytest.raises(berth.NotFound):
        await client._aexecute(calls.get_session("missing"))


async def test_a_cancelled_caller_leaves_nothing_waiting_and_its_append_lands(native_place: Place) -> None:
    client = native_place.connect_async()
    session_id = (await client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER)).id
    task = asyncio.create_task(client.append(session_id, [("note/n", {"n": 0})], idempotency_key="cancelled"))
    await asyncio.sleep(0)  # submitted
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The request ran all the same; its answer is drained and dropped.
    for _ in range(200):
        if (await client.read(session_id)).events:
            break
        await asyncio.sleep(0.01)
    page = await client.read(session_id)
    assert [event.idempotency_key for event in page.events] == ["cancelled"]
    await client.append(session_id, [("note/n", {"n": 1})])
    waker = _transport._WAKERS[asyncio.get_running_loop()]
    assert not waker._waiting
    await client.close()


async def test_closing_the_store_with_requests_in_flight_answers_every_caller(native_place: Place) -> None:
    client = native_place.connect_async()
    session_id = (await client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER)).id
    in_flight = [asyncio.create_task(client.append(session_id, [("note/n", {"n": n})])) for n in range(50)]
    await asyncio.sleep(0)
    await client.close()
    done, pending = await asyncio.wait(in_flight, timeout=30)
    assert not pending, "a caller was left waiting after the store closed"
    for task in done:
        error = task.exception()
        assert error is None or isinstance(error, (berth.ClientClosed, berth.Unavailable)), repr(error)
    with pytest.raises(berth.ClientClosed):
        await client.append(session_id, [("note/n", {"n": 99})])


def test_each_loop_gets_its_own_waker_and_drops_it_with_the_loop(native_place: Place) -> None:
    client = native_place.connect_async()

    async def create() -> str:
        return (await client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER)).id

    created = [asyncio.run(create()) for _ in range(5)]
    assert len(set(created)) == 5
    gc.collect()
    assert len(_transport._WAKERS) <= 1  # the loops are gone, and their wakers with them
    asyncio.run(client.close())


def test_a_loop_that_cannot_watch_descriptors_runs_requests_on_threads(
    native_place: Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = native_place.connect_async()

    class NoReader(asyncio.SelectorEventLoop):
        def add_reader(self, *args: object) -> None:
            raise NotImplementedError

    async def go() -> list[int]:
        session_id = (await client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER)).id
        outcomes = await asyncio.gather(*(client.append(session_id, [("note/n", {"n": n})]) for n in range(10)))
        assert _transport._WAKERS[asyncio.get_running_loop()] is None
        return sorted(outcome.first_seq for outcome in outcomes)

    loop = NoReader()
    try:
        assert loop.run_until_complete(go()) == list(range(10))
        loop.run_until_complete(client.close())
    finally:
        loop.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_submits_on_its_own_loop(native_place: Place) -> None:
    client = native_place.connect_async()

    async def append(session_id: str, n: int) -> int:
        return (await client.append(session_id, [("note/n", {"n": n})])).first_seq

    session_id = asyncio.run(client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER)).id
    assert asyncio.run(append(session_id, 0)) == 0
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own store, its own loop and waker
        code = 1
        try:
            code = 0 if asyncio.run(append(session_id, 1)) == 1 else 2
            asyncio.run(client.close())  # releases its write handle (a lease, on PostgreSQL)
        finally:
            os.write(write, bytes([code]))
            os._exit(code)
    os.close(write)
    assert os.read(read, 1) == b"\x00"
    os.waitpid(pid, 0)
    assert asyncio.run(append(session_id, 2)) == 2
    asyncio.run(client.close())
