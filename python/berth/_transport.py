"""The two transports behind one client API.

- `HttpTransport`: `http.client` keep-alive connections to `berth serve`, pooled for
  threads; from a coroutine (`asend`), keep-alive connections of the loop's own
  (`_LoopConnection`, an asyncio protocol speaking just the HTTP/1.1 berth serve
  answers), so no request takes a thread. `AsyncHttpTransport`: the same `asend`, and
  httpx's async client for live tails. The standard library and a small protocol of our
  own because each costs a fraction of httpx's time per request (side by side, 2026-12-03:
  559–641 µs an async append against 1,085–1,129 µs through httpx).
- `NativeTransport` / `AsyncNativeTransport`: the Rust store in this process through the
  `berth._native` extension, answering the same routes without a socket. From asyncio a
  request is submitted to the store's own runtime and its answer wakes the event loop
  through a descriptor the loop watches (`_LoopWaker`): no worker thread, no GIL
  hand-offs. Several
  processes may share one data directory: idle write handles are released after
  `writer_idle_ms`, and the client waits out another process's handle (`Busy` on an
  append) for up to `busy_wait_s`. After `os.fork` the child reopens the store (the
  parent's copy cannot run there) and first closes the descriptors it inherited.

A transport turns a request into an `Answer` or raises `TransportError` (no answer).
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import http.client
import multiprocessing.util
import os
import select
import socket
import threading
import time
import urllib.parse
import weakref
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, AsyncIterator, Iterator

import httpx

from . import _exit
from ._calls import Answer
from ._errors import BerthError, ClientClosed, InvalidArgument, NativeMissing, TransportError, error_from_body

Headers = list[tuple[str, str]]


# ---- HTTP --------------------------------------------------------------------------


def _http_timeout(timeout: float) -> httpx.Timeout:
    return httpx.Timeout(timeout, connect=min(timeout, 5.0))


def _transport_error(error: Exception) -> TransportError:
    never_sent = isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))
    return TransportError(f"{type(error).__name__}: {error}", sent=not never_sent)


def _stream_timeout() -> httpx.Timeout:
    return httpx.Timeout(connect=5.0, read=_STREAM_READ_TIMEOUT_S, write=10.0, pool=10.0)


class HttpStream:
    def __init__(self, pool: _ConnectionPool, connection: http.client.HTTPConnection,
                 response: http.client.HTTPResponse) -> None:
        self._pool = pool
        self._connection = connection
        self._response = response
        self.status = response.status
        self.headers = {name.lower(): value for name, value in response.getheaders()}

    def read_all(self) -> bytes:
        try:
            return self._response.read()
        except OSError as error:
            raise _socket_error(error, sent=True) from error

    def chunks(self) -> Iterator[bytes]:
        try:
            while True:
                chunk = self._response.read1(65536)
                if not chunk:
                    return
                yield chunk
        except (OSError, http.client.HTTPException) as error:
            raise _socket_error(error, sent=True) from error

    def close(self) -> None:
        # A stream is never handed back to the pool: its connection is mid-body.
        self._connection.close()


def _socket_error(error: BaseException, *, sent: bool) -> TransportError:
    return TransportError(f"{type(error).__name__}: {error}", sent=sent)


def _dropped(connection: http.client.HTTPConnection) -> bool:
    """An idle keep-alive connection with something to read has been closed by the
    server (or is out of step): never send a request on it."""
    sock = connection.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class _ConnectionPool:
    """Keep-alive connections to one server, shared by threads: each request takes an
    idle connection (or opens one) and gives it back after reading the answer.
    Connections idle longer than `IDLE_MAX_S` are dropped before use: the server closes
    idle connections (its header-read timeout is 10 s), and a request on a closed one
    would fail with an unknown outcome. A forked child never uses the connections it
    inherited (the parent's requests would interleave with its own on one socket): it
    forgets them, leaving them to the parent, and opens its own."""

    IDLE_MAX_S = 4.0
    IDLE_KEPT_MAX = 32

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self._idle: list[tuple[float, http.client.HTTPConnection]] = []
        self._lock = threading.Lock()
        self._closed = False
        self._pid = os.getpid()

    def take(self, timeout: float | None = None) -> tuple[http.client.HTTPConnection, bool]:
        """A connection, and whether it was used before."""
        now = time.monotonic()
        with self._lock:
            if self._closed:
                raise ClientClosed("the client is closed")
            if self._pid != os.getpid():
                # Dropped unused: each socket is the parent's too. Closing the child's
                # copy of its descriptor (as collecting it does) leaves the parent's
                # connection open.
                self._idle, self._pid = [], os.getpid()
            while self._idle:
                idle_since, connection = self._idle.pop()
                if now - idle_since < self.IDLE_MAX_S and not _dropped(connection):
                    connection.timeout = timeout or self.timeout
                    if connection.sock is not None:
                        connection.sock.settimeout(connection.timeout)
                    return connection, True
                connection.close()
        connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.timeout)
        try:
            connection.connect()
            connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as error:
            connection.close()
            raise _socket_error(error, sent=False) from error
        return connection, False

    def give_back(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and self._pid == os.getpid() and len(self._idle) < self.IDLE_KEPT_MAX:
                self._idle.append((time.monotonic(), connection))
                return
        connection.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for _, connection in idle:
            connection.close()


class _LoopConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection of an event loop, one request at a time. It
    reads what berth serve answers: a status line, headers, and a body of
    `Content-Length` bytes or chunked."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._buffer = bytearray()
        self._waiter: asyncio.Future[Answer] | None = None
        self._head: tuple[int, dict[str, str]] | None = None
        self._body_end = 0  # with Content-Length: where the body ends in the buffer
        self._chunked = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, loop: asyncio.AbstractEventLoop, request: bytes) -> asyncio.Future[Answer]:
        assert self.transport is not None and self._waiter is None
        self._waiter = loop.create_future()
        self._buffer.clear()
        self._head = None
        self.transport.write(request)
        return self._waiter

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        waiter = self._waiter
        if waiter is None:
            # Nothing was asked: the server is out of step. Never reuse this connection.
            self._close()
            return
        try:
            answer = self._parse()
        except (ValueError, IndexError) as error:
            self._fail(TransportError(f"malformed answer: {error}", sent=True))
            return
        if answer is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(answer)
            if answer.headers.get("connection", "").lower() == "close":
                self._close()

    def _parse(self) -> Answer | None:
        buffer = self._buffer
        if self._head is None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return None
            lines = bytes(buffer[:end]).decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            del buffer[: end + 4]
            self._head = (status, headers)
            self._chunked = headers.get("transfer-encoding", "").lower() == "chunked"
            self._body_end = int(headers.get("content-length", "0"))
        status, headers = self._head
        if not self._chunked:
            if len(buffer) < self._body_end:
                return None
            return Answer(status, headers, bytes(buffer[: self._body_end]))
        body = bytearray()
        at = 0
        while True:
            line_end = buffer.find(b"\r\n", at)
            if line_end < 0:
                return None
            size = int(bytes(buffer[at:line_end]).split(b";")[0], 16)
            if size == 0:
                # The last chunk, then trailers (none from berth serve) and an empty line.
                if buffer.find(b"\r\n\r\n", line_end) < 0:
                    return None
                return Answer(status, headers, bytes(body))
            start = line_end + 2
            if len(buffer) < start + size + 2:
                return None
            body += buffer[start : start + size]
            at = start + size + 2

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(TransportError(f"connection lost: {exc or 'closed by the server'}", sent=True))

    def _fail(self, error: TransportError) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        self._close()

    def _close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _LoopConnections:
    """An event loop's idle keep-alive connections to one server. It holds them weakly:
    an idle connection lives as long as its loop watches it (until the server closes it,
    or the loop is gone), so a pool never keeps a finished loop alive."""

    def __init__(self, host: str, port: int) -> None:
        self._host, self._port = host, port
        self._idle: list[weakref.ref[_LoopConnection]] = []
        self.pid = os.getpid()

    async def take(self, loop: asyncio.AbstractEventLoop) -> _LoopConnection:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()()
            if connection is not None and not connection.closed:
                if now - connection.idle_since < _ConnectionPool.IDLE_MAX_S:
                    return connection
                connection._close()
        try:
            _, connection = await loop.create_connection(_LoopConnection, self._host, self._port)
        except OSError as error:
            raise _socket_error(error, sent=False) from error
        return connection

    def give_back(self, connection: _LoopConnection) -> None:
        if connection.closed or len(self._idle) >= _ConnectionPool.IDLE_KEPT_MAX:
            connection._close()
            return
        connection.idle_since = time.monotonic()
        self._idle.append(weakref.ref(connection))

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for ref in idle:
            connection = ref()
            if connection is not None:
                try:
                    connection._close()
                except RuntimeError:
                    pass  # its loop is closed: the socket goes with it


class HttpTransport:
    """HTTP/1.1 keep-alive on the standard library's `http.client` (see python/README.md
    for why not httpx here: its per-request cost, measured side by side)."""

    busy_wait_s = 0.0

    def __init__(self, base_url: str, api_key: str | None, timeout: float) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise InvalidArgument(f"{base_url!r}: use http://host:port (put TLS in a reverse proxy in front of berth "
                                  "serve)", argument="url")
        self._pool = _ConnectionPool(parsed.hostname, parsed.port or 80, timeout)
        self._prefix = parsed.path.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._host_header = parsed.netloc
        # What every `asend` request starts with after its request line.
        self._fixed_lines = "".join(f"\r\n{name}: {value}" for name, value in
                                    {"Host": parsed.netloc, **self._headers}.items())
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopConnections] = (
            weakref.WeakKeyDictionary()
        )
        self._closed = False

    def _request(self, connection: http.client.HTTPConnection, method: str, path: str, headers: Headers,
                 body: bytes | None) -> http.client.HTTPResponse:
        all_headers = {"Host": self._host_header, **self._headers, **dict(headers)}
        if body is not None:
            all_headers.setdefault("Content-Type", "application/json")
        connection.request(method, self._prefix + path, body=body, headers=all_headers)
        return connection.getresponse()

    def send(self, method: str, path: str, headers: Headers, body: bytes | None) -> Answer:
        connection, _reused = self._pool.take()
        try:
            response = self._request(connection, method, path, headers, body)
            payload = response.read()
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            raise _socket_error(error, sent=True) from error
        answer = Answer(response.status, {name.lower(): value for name, value in response.getheaders()}, payload)
        if response.will_close:
            connection.close()
        else:
            self._pool.give_back(connection)
        return answer

    async def asend(self, method: str, path: str, headers: Headers, body: bytes | None) -> Answer:
        """`send` for a coroutine, on keep-alive connections of its own loop."""
        if self._closed:
            raise ClientClosed("the client is closed")
        loop = asyncio.get_running_loop()
        connections = self._loops.get(loop)
        if connections is None or connections.pid != os.getpid():
            connections = self._loops[loop] = _LoopConnections(self._pool.host, self._pool.port)
        connection = await connections.take(loop)
        lines = [f"{method} {self._prefix}{path} HTTP/1.1{self._fixed_lines}"]
        lines += [f"{name}: {value}" for name, value in headers]
        if body is not None:
            if not any(name.lower() == "content-type" for name, _ in headers):
                lines.append("Content-Type: application/json")
            lines.append(f"Content-Length: {len(body)}")
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
        answer = connection.send(loop, request)
        timeout = self._pool.timeout
        expired = loop.call_later(timeout, connection._fail, TransportError(f"no answer within {timeout} s", sent=True))
        try:
            result = await answer
        except asyncio.CancelledError:
            connection._close()  # mid-request: its answer would confuse the next caller
            raise
        finally:
            expired.cancel()
        connections.give_back(connection)
        return result

    def open_stream(self, path: str, headers: Headers) -> HttpStream:
        connection, _reused = self._pool.take(timeout=_STREAM_READ_TIMEOUT_S)
        try:
            response = self._request(connection, "GET", path, headers, None)
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            raise _socket_error(error, sent=True) from error
        return HttpStream(self._pool, connection, response)

    def close(self) -> None:
        self._closed = True
        self._pool.close()
        for connections in list(self._loops.values()):
            connections.close()


#: A live tail sends a heartbeat comment every 15 s; a read that waits longer than this
#: means the connection is dead.
_STREAM_READ_TIMEOUT_S = 60.0


class AsyncHttpStream:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers = response.headers

    async def read_all(self) -> bytes:
        return await self._response.aread()

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx.TransportError as error:
            raise _transport_error(error) from error

    async def close(self) -> None:
        await self._response.aclose()


class AsyncHttpTransport:
    """HTTP for asyncio: each request goes out on a keep-alive connection of the loop's
    own (`HttpTransport.asend`), which costs less than httpx's async client per request
    (559–641 µs an append against 1,085–1,129 µs, side by side, 2026-12-03); live tails stream through httpx's async
    client, made on the first tail (making one costs ~20 ms, its TLS context)."""

    busy_wait_s = 0.0

    def __init__(self, base_url: str, api_key: str | None, timeout: float) -> None:
        self._sync = HttpTransport(base_url, api_key, timeout)
        self._base_url, self._api_key, self._timeout = base_url, api_key, timeout
        self._client: httpx.AsyncClient | None = None

    def _stream_client(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
            self._client = httpx.AsyncClient(base_url=self._base_url, headers=headers,
                                             timeout=_http_timeout(self._timeout))
        return self._client

    async def send(self, method: str, path: str, headers: Headers, body: bytes | None) -> Answer:
        return await self._sync.asend(method, path, headers, body)

    async def open_stream(self, path: str, headers: Headers) -> AsyncHttpStream:
        client = self._stream_client()
        request = client.build_request("GET", path, headers=headers, timeout=_stream_timeout())
        try:
            return AsyncHttpStream(await client.send(request, stream=True))
        except httpx.TransportError as error:
            raise _transport_error(error) from error

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        self._sync.close()

    def close_at_exit(self) -> None:
        """Nothing to flush: the server holds the state."""


# ---- embedded ----------------------------------------------------------------------


#: How to get the native module. Never a name that resolves to someone else's project:
#: PyPI's `berth` is unrelated, and berth-store's wheels are built from this repository.
NATIVE_MISSING = (
    "berth.open needs berth's native module (berth._native), which this installation lacks: "
    "it is berth-store's pure-Python wheel (py3-none-any), which speaks HTTP only. Install the "
    "platform wheel instead: from a checkout of the berth repository, scripts/dist builds it "
    "into target/dist (pip install target/dist/berth_store-*-abi3-*.whl), or pip install "
    "./python builds it with a Rust toolchain (python/README.md, \"Install\"); "
    "berth.Client(url) works without it"
)


def _native_module() -> Any:
    try:
        from . import _native  # type: ignore[attr-defined]
    except ImportError as error:
        raise NativeMissing(NATIVE_MISSING) from error
    return _native


#: Open native stores, so a fork's child can release what it inherited and `atexit` can
#: close them (flushing buffered activity and write handles).
_NATIVE_OPEN: "weakref.WeakSet[_NativeStore]" = weakref.WeakSet()


class _NativeStore:
    """One native store per process and URL (and options), shared by every client that
    opens it — whatever their principals — so they never wait on each other's write
    handles; reopened transparently in a forked child; closed with its last client."""

    def __init__(self, options: dict[str, Any]) -> None:
        self._options = options
        self._lock = threading.Lock()
        self._store = self._open()
        self._pid = os.getpid()
        self._closed = False
        self.clients = 0
        _NATIVE_OPEN.add(self)
        _close_at_process_exit(self)

    def _open(self) -> Any:
        native = _native_module()
        try:
            options = {key: value for key, value in self._options.items() if not key.startswith("_")}
            return native.Embedded(**options)
        except native.BerthError as error:
            status, body = error.args
            raise error_from_body(status, bytes(body)) from None

    def get(self) -> Any:
        if self._closed:
            raise ClientClosed("the client is closed")
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._store = self._open()
                    self._pid = os.getpid()
                    _close_at_process_exit(self)
        return self._store

    def after_fork_in_child(self) -> None:
        root = self._store.root
        if root is not None:
            _native_module().close_inherited_descriptors(root)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _SHARED.pop(_shared_key(self._options), None)
        if self._pid == os.getpid():
            self._store.close()


#: The open stores by URL and options, for sharing.
_SHARED: dict[tuple[Any, ...], _NativeStore] = {}
_SHARED_LOCK = threading.Lock()


def _shared_key(options: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted(options.items()))


def _acquire_store(options: dict[str, Any]) -> _NativeStore:
    with _SHARED_LOCK:
        store = _SHARED.get(_shared_key(options))
        if store is None or store._closed:
            store = _NativeStore(options)
            _SHARED[_shared_key(options)] = store
        store.clients += 1
        return store


def _release_store(store: _NativeStore) -> None:
    with _SHARED_LOCK:
        store.clients -= 1
        if store.clients > 0:
            return
    store.close()


def _close_if_alive(store_ref: "weakref.ref[_NativeStore]") -> None:
    store = store_ref()
    if store is not None:
        _exit.run_hooks()
        try:
            store.close()
        except BerthError:
            pass


def _close_at_process_exit(store: _NativeStore) -> None:
    # `atexit` does not run in multiprocessing's children (they end with `os._exit`);
    # its finalizers do. Without a close, a PostgreSQL writer lease would stay held
    # until it lapses.
    multiprocessing.util.Finalize(None, _close_if_alive, args=(weakref.ref(store),), exitpriority=10)


def _after_fork_in_child() -> None:
    for store in list(_NATIVE_OPEN):
        store.after_fork_in_child()


def _close_all_at_exit() -> None:
    _exit.run_hooks()
    for store in list(_NATIVE_OPEN):
        try:
            store.close()
        except BerthError:
            pass


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all_at_exit)


class NativeStream:
    _POLL_MS = 200

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.status = stream.status
        self.headers = dict(stream.headers)

    def read_all(self) -> bytes:
        return b"".join(self.chunks())

    def chunks(self) -> Iterator[bytes]:
        while True:
            chunk = self._stream.next_chunk(self._POLL_MS)
            if chunk is None:
                return
            if chunk:
                yield chunk

    def close(self) -> None:
        self._stream.close()


def _native_answer(
    native: Any, store: Any, principal: Any, method: str, path: str, headers: Headers, body: bytes | None
) -> Answer:
    try:
        status, answer_headers, answer_body = store.request(principal, method, path, headers, body)
    except native.ClosedError:
        raise ClientClosed("the client is closed") from None
    return Answer(status, dict(answer_headers), answer_body)


class _LoopWaker:
    """One event loop's side of native requests submitted from it: the native mailbox
    their answers are posted to, whose descriptor the loop watches, and the futures
    waiting for them by token. Made on a loop's first native request, dropped with the
    loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, native: Any) -> None:
        self._native = native
        self._completions = native.Completions()
        self._waiting: dict[int, asyncio.Future[Answer]] = {}
        self.pid = os.getpid()
        loop.add_reader(self._completions.fd, self._drain)

    def submit(self, loop: asyncio.AbstractEventLoop, store: Any, principal: Any, method: str, path: str,
               headers: Headers, body: bytes | None) -> asyncio.Future[Answer]:
        token = next(_TOKENS)
        future: asyncio.Future[Answer] = loop.create_future()
        self._waiting[token] = future
        try:
            store.submit(principal, method, path, headers, body, self._completions, token)
        except BaseException as error:
            del self._waiting[token]
            if isinstance(error, self._native.ClosedError):
                raise ClientClosed("the client is closed") from None
            raise
        return future

    def _drain(self) -> None:
        for token, status, headers, body, failure in self._completions.drain():
            future = self._waiting.pop(token, None)
            if future is None or future.done():
                continue  # its caller was cancelled: the request ran all the same
            if failure is None:
                future.set_result(Answer(status, dict(headers), body))
            elif failure == "closed":
                future.set_exception(ClientClosed("the client was closed before the store answered"))
            else:
                future.set_exception(TransportError(f"reading the answer failed: {failure}", sent=True))


_TOKENS = itertools.count(1)
#: Each running loop's waker (loops that cannot watch a descriptor map to None: their
#: requests run on worker threads).
_WAKERS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWaker | None]" = weakref.WeakKeyDictionary()


def _waker(loop: asyncio.AbstractEventLoop, native: Any) -> _LoopWaker | None:
    waker = _WAKERS.get(loop)
    if loop not in _WAKERS or (waker is not None and waker.pid != os.getpid()):
        try:
            waker = _LoopWaker(loop, native)
        except (NotImplementedError, AttributeError):
            waker = None  # e.g. a loop without add_reader
        _WAKERS[loop] = waker
    return waker


class NativeTransport:
    """One client's view of a shared native store: its principal, its own closed state."""

    def __init__(self, options: dict[str, Any], principal: dict[str, Any], busy_wait_s: float) -> None:
        self._native = _native_module()
        try:
            self._principal = self._native.Principal(**principal)
        except self._native.BerthError as error:
            status, body = error.args
            raise error_from_body(status, bytes(body)) from None
        self._store = _acquire_store(options)
        self._closed = False
        self.busy_wait_s = busy_wait_s

    def _live(self) -> Any:
        if self._closed:
            raise ClientClosed("the client is closed")
        return self._store.get()

    def send(self, method: str, path: str, headers: Headers, body: bytes | None) -> Answer:
        return _native_answer(self._native, self._live(), self._principal, method, path, headers, body)

    async def asend(self, method: str, path: str, headers: Headers, body: bytes | None) -> Answer:
        """`send` for a coroutine on a running loop, without blocking it: the store
        answers on its own runtime and wakes the loop."""
        loop = asyncio.get_running_loop()
        waker = _waker(loop, self._native)
        if waker is None:
            return await loop.run_in_executor(None, partial(self.send, method, path, headers, body))
        return await waker.submit(loop, self._live(), self._principal, method, path, headers, body)

    def open_stream(self, path: str, headers: Headers) -> NativeStream:
        return NativeStream(self._live().stream(self._principal, path, headers))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _release_store(self._store)


class AsyncNativeStream:
    def __init__(self, stream: NativeStream, executor: ThreadPoolExecutor) -> None:
        self._stream = stream
        self._executor = executor
        self.status = stream.status
        self.headers = stream.headers

    async def read_all(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    async def chunks(self) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        while True:
            chunk = await loop.run_in_executor(self._executor, self._stream._stream.next_chunk, NativeStream._POLL_MS)
            if chunk is None:
                return
            if chunk:
                yield chunk

    async def close(self) -> None:
        self._stream.close()


class AsyncNativeTransport:
    """The native store for asyncio: each request is submitted to the store's runtime
    and wakes the loop when answered (`NativeTransport.asend`); live tails and closing
    run on worker threads. The event loop is never blocked."""

    def __init__(
        self, options: dict[str, Any], principal: dict[str, Any], busy_wait_s: float, workers: int = 16
    ) -> None:
        self._sync = NativeTransport(options, principal, busy_wait_s)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="berth")
        self.busy_wait_s = busy_wait_s

    async def send(self, method: str, path: str, headers: Headers, body: bytes | None) -> Answer:
        return await self._sync.asend(method, path, headers, body)

    async def open_stream(self, path: str, headers: Headers) -> AsyncNativeStream:
        loop = asyncio.get_running_loop()
        stream = await loop.run_in_executor(self._executor, partial(self._sync.open_stream, path, headers))
        return AsyncNativeStream(stream, self._executor)

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._sync.close)
        self._executor.shutdown(wait=False)

    def close_at_exit(self) -> None:
        self._sync.close()
