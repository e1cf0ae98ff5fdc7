"""Safe retries: a severed connection after the server stored an append is retried with
the same idempotency key and answered as a duplicate (one copy stored); 429 is retried
after `Retry-After`; what is retried comes from the error's class (`retryable`) and the
call's own safety, never from a list of codes; errors map to the same classes."""

from __future__ import annotations

import re
import socket
import sys
import threading
import time
import uuid

import pytest

import berth
from berth import _calls
from berth._client import _retry_delay
from berth._errors import error_from_body
from conftest import FOREVER, ROOT, Server


def _read_message(sock: socket.socket, buffer: bytearray) -> bytes | None:
    """One HTTP/1.1 message with a Content-Length body (what berth and httpx send)."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buffer.extend(chunk)
    head, _, _ = bytes(buffer).partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    total = len(head) + 4 + length
    while len(buffer) < total:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buffer.extend(chunk)
    message = bytes(buffer[:total])
    del buffer[:total]
    return message


class SeveringProxy:
    """Forwards HTTP to the server, but drops the connection instead of passing on the
    answer to the first `sever` appends: the server stored them, the client never hears."""

    def __init__(self, upstream_port: int, sever: int) -> None:
        self.upstream_port = upstream_port
        self.sever = sever
        self.severed = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(downstream,), daemon=True).start()

    def _serve(self, downstream: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        down_buffer, up_buffer = bytearray(), bytearray()
        with downstream, upstream:
            while True:
                request = _read_message(downstream, down_buffer)
                if request is None:
                    return
                upstream.sendall(request)
                answer = _read_message(upstream, up_buffer)
                if answer is None:
                    return
                if request.startswith(b"POST") and b"/events " in request.split(b"\r\n")[0] and self.severed < self.sever:
                    self.severed += 1
                    return  # the append is stored; its answer is lost with the connection
                downstream.sendall(answer)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def own_server(scratch, request) -> Server:
    server = Server(scratch / f"retries-{uuid.uuid4().hex[:6]}", getattr(request, "param", ["--rate-per-tenant", "0"]))
    server.start()
    yield server
    server.stop()


def test_a_severed_append_is_retried_with_its_key_and_stored_once(own_server: Server) -> None:
    key = own_server.key("severed", "agent", "service")
    proxy = SeveringProxy(own_server.port, sever=2)
    client = berth.Client(proxy.url, api_key=key)
    session_id = client.create_session("severed", policy=FOREVER).id
    outcome = client.append(session_id, [("user/message", {"content": "exactly once"})])
    assert proxy.severed == 2, "two answers were lost and the append was resent twice"
    assert outcome.duplicate and outcome.first_seq == 0
    events = client.read(session_id).events
    assert [event.data for event in events] == [{"content": "exactly once"}]
    client.close()
    proxy.close()


def test_without_retries_a_severed_append_raises_a_transport_error(own_server: Server) -> None:
    key = own_server.key("severed", "agent", "service")
    proxy = SeveringProxy(own_server.port, sever=1)
    client = berth.Client(proxy.url, api_key=key, retries=0)
    session_id = client.create_session("severed-no-retry", policy=FOREVER).id
    with pytest.raises(berth.TransportError) as lost:
        client.append(session_id, [("user/message", {"content": "unknown outcome"})])
    assert lost.value.sent and lost.value.retryable
    client.close()
    proxy.close()


@pytest.mark.parametrize("own_server", [["--rate-per-tenant", "1", "--rate-burst", "1"]], indirect=True)
def test_rate_limited_calls_wait_for_retry_after(own_server: Server) -> None:
    key = own_server.key("limited", "agent", "service")
    client = berth.Client(own_server.url, api_key=key)
    started = time.monotonic()
    for _ in range(3):
        client.whoami()
    assert time.monotonic() - started >= 1.0, "the second and third calls waited for the bucket"
    with pytest.raises(berth.RateLimited) as limited:
        berth.Client(own_server.url, api_key=key, retries=0).whoami()
    assert limited.value.retry_after_s is not None and limited.value.retryable
    client.close()


def test_unreachable_server_is_a_transport_error_never_sent() -> None:
    port = socket.create_server(("127.0.0.1", 0))
    address = port.getsockname()
    port.close()
    client = berth.Client(f"http://{address[0]}:{address[1]}", api_key="x", retries=1)
    with pytest.raises(berth.TransportError) as refused:
        client.whoami()
    assert refused.value.sent is False


def _error(code: str, retryable: bool, status: int = 409) -> berth.BerthError:
    return error_from_body(status, f'{{"code":"{code}","message":"m","retryable":{str(retryable).lower()}}}'.encode())


def test_what_is_retried_comes_from_the_class_and_the_calls_safety() -> None:
    append = _calls.append("s", [("user/message", {})])
    create = _calls.create_session("s")
    started = time.monotonic()
    assert _retry_delay(append, _error("fenced", True), 0, started, 0) is not None
    assert _retry_delay(append, _error("unavailable", True, 503), 0, started, 0) is not None
    assert _retry_delay(create, _error("unavailable", True, 503), 0, started, 0) is None, "never resend a create"
    assert _retry_delay(append, _error("seq_conflict", False), 0, started, 0) is None
    writer_busy = _error("writer_busy", False)
    assert _retry_delay(append, writer_busy, 0, started, 0) is None, "HTTP does not wait out busy"
    assert _retry_delay(append, writer_busy, 0, started, 5.0) is not None, "embedded waits for a handle"
    # A policy's refusal is not another process's handle: waiting does not cure it.
    assert _retry_delay(append, _error("busy", False), 0, started, 5.0) is None, "a policy's busy is not waited out"
    assert _retry_delay(create, _error("rate_limited", True, 429), 0, started, 0) is not None, "429: not processed"


@pytest.mark.parametrize(
    "code, cls",
    [
        ("not_found", berth.NotFound), ("already_exists", berth.AlreadyExists), ("busy", berth.Busy),
        ("writer_busy", berth.WriterBusy),
        ("run_not_attached", berth.OwnershipLost), ("revision_conflict", berth.RevisionConflict),
        ("seq_conflict", berth.SeqConflict), ("terminal", berth.Terminal), ("limit_exceeded", berth.LimitExceeded),
        ("invalid", berth.Invalid), ("bad_request", berth.Invalid), ("unavailable", berth.Unavailable),
        ("unauthenticated", berth.Unauthenticated), ("forbidden", berth.Forbidden), ("corrupt", berth.Damaged),
        ("some_future_code", berth.Invalid),
    ],
)
def test_error_codes_map_to_classes(code: str, cls: type) -> None:
    assert type(_error(code, False, 400)) is cls


def test_open_without_the_native_module_says_what_to_install(monkeypatch) -> None:
    # The pure-Python wheel: no berth._native in the package.
    monkeypatch.setitem(sys.modules, "berth._native", None)
    monkeypatch.delattr(berth, "_native", raising=False)
    with pytest.raises(berth.NativeMissing) as missing:
        berth.open("memory:", tenant="t", user="u")
    message = str(missing.value)
    # Only what works: the platform wheel of this repository's build.
    assert "scripts/dist" in message and "pip install target/dist/berth_store-*-abi3-*.whl" in message
    assert "pip install ./python" in message
    # Never a registry name that is someone else's: `berth` on PyPI is another project.
    assert not re.search(r"pip install\s+['\"]?berth(\[|-native|['\"\s]|$)", message), message


def test_bad_principal_on_open_is_invalid() -> None:
    with pytest.raises(berth.Invalid):
        berth.open("memory:", tenant="bad tenant", user="u")
    with pytest.raises(berth.Invalid):
        berth.open("memory:", tenant="t", user="u", role="superuser")
    with pytest.raises(berth.Invalid):
        berth.open("s3://bucket", tenant="t", user="u")


def test_a_closed_client_raises_client_closed() -> None:
    client = berth.open("memory:", tenant="t", user="u")
    client.close()
    client.close()  # idempotent
    with pytest.raises(berth.ClientClosed):
        client.whoami()
