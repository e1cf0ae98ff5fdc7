"""HTTP from asyncio without worker threads (`HttpTransport.asend`): keep-alive
connections of the loop's own, speaking the HTTP/1.1 `berth serve` answers. Held to
what the thread path did: every answer arrives once and in order per connection, a
connection the server closed is never reused, a timeout or a cancelled caller never
leaves a connection half-read for the next request, and a finished loop is not kept."""

from __future__ import annotations

import asyncio
import gc
import threading
import uuid

import pytest

import berth
from berth import _calls as calls
from berth._transport import HttpTransport, _LoopConnection
from conftest import FOREVER, Server


@pytest.fixture
def http_client(server: Server) -> berth.AsyncClient:
    tenant = f"t{uuid.uuid4().hex[:12]}"
    return berth.AsyncClient(server.url, api_key=server.key(tenant, "agent", "service"))


async def test_concurrent_appends_answer_once_each_on_the_loops_own_connections(
    http_client: berth.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[int] = []
    original_create = asyncio.BaseEventLoop.create_connection

    async def create_connection(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(1)
        return await original_create(self, *args, **kwargs)

    monkeypatch.setattr(asyncio.BaseEventLoop, "create_connection", create_connection)
    threads_before = {thread.name for thread in threading.enumerate()}
    session_id = (await http_client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER)).id
    outcomes = await asyncio.gather(*(http_client.append(session_id, [("note/n", {"n": n})]) for n in range(100)))
    assert sorted(outcome.first_seq for outcome in outcomes) == list(range(100))
    events = [event async for event in http_client.iter_events(session_id)]
    assert sorted(event.data["n"] for event in events) == list(range(100))
    assert {thread.name for thread in threading.enumerate()} <= threads_before, "no request took a thread"
    assert 1 <= len(made) <= 100
    # One at a time, the same connection serves every request.
    before = len(made)
    for n in range(20):
        await http_client.append(session_id, [("note/n", {"n": 100 + n})])
    assert len(made) == before
    await http_client.close()


async def test_a_sync_client_awaits_http_requests_on_the_loop(server: Server) -> None:
    client = berth.Client(server.url, api_key=server.key(f"t{uuid.uuid4().hex[:12]}", "agent", "service"))
    session_id = client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER).id
    outcomes = await asyncio.gather(
        *(client._aexecute(calls.append(session_id, [("note/n", {"n": n})])) for n in range(10))
    )
    assert sorted(outcome.first_seq for outcome in outcomes) == list(range(10))
    with pytest.raises(berth.NotFound):
        await client._aexecute(calls.get_session("missing"))
    client.close()
    with pytest.raises(berth.ClientClosed):
        await client._aexecute(calls.get_session(session_id))


async def test_a_connection_the_server_closed_is_not_reused(scratch) -> None:  # type: ignore[no-untyped-def]
    server = Server(scratch / f"closing-{uuid.uuid4().hex[:6]}", ["--rate-per-tenant", "0"])
    key = server.key("closing", "agent", "service")
    server.start()
    try:
        client = berth.AsyncClient(server.url, api_key=key)
        session_id = (await client.create_session("kept", policy=FOREVER)).id
        server.kill()
        server.start()  # every connection of the old process is gone
        await asyncio.sleep(0.1)  # the loop reads their ends
        # At the transport, where nothing is retried: a request sent on the dead
        # connection would fail (a transport error) instead of this answer.
        answer = await client._transport._sync.asend("GET", f"/v1/sessions/{session_id}", [], None)
        assert answer.status == 200
        await client.close()
    finally:
        server.stop()


async def test_a_timeout_or_a_cancelled_caller_discards_the_connection(http_client: berth.AsyncClient) -> None:
    session_id = (await http_client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER)).id
    task = asyncio.create_task(http_client.append(session_id, [("note/n", {"n": 0})], idempotency_key="k0"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The next request gets a whole answer of its own, on a connection nobody half-read.
    page = await http_client.read(session_id)
    assert page.next_seq in (0, 1)
    assert (await http_client.get_session(session_id)).id == session_id
    await http_client.close()


async def test_no_answer_within_the_timeout_is_a_transport_error_and_the_connection_goes() -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # reads the request, never answers

    listener = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    transport = HttpTransport(f"http://127.0.0.1:{port}", "key", 0.2)
    try:
        with pytest.raises(berth.TransportError) as raised:
            await transport.asend("GET", "/v1/sessions", [], None)
        assert raised.value.sent and "no answer within" in str(raised.value)
        with pytest.raises(berth.TransportError):
            await transport.asend("GET", "/v1/sessions", [], None)
        assert len(accepted) == 2, "the timed-out connection was not reused"
    finally:
        transport.close()
        for writer in accepted:
            writer.close()
        listener.close()
        await listener.wait_closed()


def test_a_finished_loop_is_not_kept(http_client: berth.AsyncClient) -> None:
    async def create() -> str:
        return (await http_client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER)).id

    assert len({asyncio.run(create()) for _ in range(5)}) == 5
    gc.collect()
    assert len(http_client._transport._sync._loops) == 0
    asyncio.run(http_client.close())


def _feed(pieces: list[bytes]) -> berth._calls.Answer:
    loop = asyncio.new_event_loop()
    try:
        connection = _LoopConnection()

        class Sink:
            def write(self, data: bytes) -> None:
                pass

            def close(self) -> None:
                pass

        connection.transport = Sink()  # type: ignore[assignment]
        answer = connection.send(loop, b"GET / HTTP/1.1\r\n\r\n")
        for piece in pieces:
            assert not answer.done()
            connection.data_received(piece)
        assert answer.done()
        return answer.result()
    finally:
        loop.close()


def test_answers_split_anywhere_and_chunked_bodies_are_read_whole() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n"
    whole = head + b'{"a": true}'
    for cut in range(1, len(whole)):
        answer = _feed([whole[:cut], whole[cut:]])
        assert (answer.status, answer.body, answer.headers["content-type"]) == (200, b'{"a": true}', "application/json")
    chunked = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n5;x=1\r\n: 1}\n\r\n0\r\n\r\n"
    for cut in range(1, len(chunked)):
        answer = _feed([chunked[:cut], chunked[cut:]])
        assert (answer.status, answer.body) == (404, b'{"a": 1}\n')
