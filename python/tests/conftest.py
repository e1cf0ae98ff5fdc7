"""Fixtures: one suite, run on every transport.

`principal_factory` is parametrized over the transports: `http` (a real `berth serve`
this module starts on a free loopback port, on its own data directory, and stops),
`embedded` (the native store on a fresh temporary directory) and `postgres` (the native
store on a fresh PostgreSQL database, dropped afterwards). Each test gets its own
tenant, so tests never see each other's sessions. A test asks for clients by principal:
`connect(role="service", user="agent")`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import berth

ROOT = Path(__file__).resolve().parents[2]
PG_SERVER = os.environ.get("BERTH_TEST_PG", "postgres://postgres@127.0.0.1:5432/postgres")
TRANSPORTS = ["http", "embedded", "postgres"]


def berth_binary() -> str:
    path = os.environ.get("BERTH_BIN") or str(
        Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "debug" / "berth"
    )
    if not os.access(path, os.X_OK):
        pytest.fail(f"no berth binary at {path}: build it (cargo build -p berth) or set BERTH_BIN")
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """A `berth serve` process on its own data directory (restartable on its port)."""

    def __init__(self, data: Path, extra: list[str] | None = None) -> None:
        self.data = data
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.extra = extra or []
        self.process: subprocess.Popen[bytes] | None = None
        self.log = data.parent / f"serve-{self.port}.log"

    def key(self, tenant: str, user: str, role: str, project: str | None = None) -> str:
        command = [berth_binary(), "--data", str(self.data), "keys", "create", "--tenant", tenant, "--user", user,
                   "--role", role]
        if project:
            command += ["--project", project]
        return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()

    def start(self) -> None:
        command = [berth_binary(), "serve", "--data", str(self.data), "--listen", f"127.0.0.1:{self.port}",
                   *self.extra]
        self.process = subprocess.Popen(command, stdout=self.log.open("ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"berth serve exited: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    if b" 200 " in sock.recv(100):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("berth serve did not become ready")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self.process = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None


@pytest.fixture(scope="session")
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="berth-py-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def server(scratch: Path) -> Iterator[Server]:
    # No rate limit: the suite's bursts are not what the limit is for (it has its own test).
    running = Server(scratch / "served", ["--rate-per-tenant", "0"])
    running.start()
    yield running
    running.stop()


def _createdb(name: str) -> str:
    base, _, _ = PG_SERVER.rpartition("/")
    subprocess.run(["psql", PG_SERVER, "-qc", f'CREATE DATABASE "{name}"'], check=True, capture_output=True)
    return f"{base}/{name}"


def _dropdb(name: str) -> None:
    subprocess.run(["psql", PG_SERVER, "-qc", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'], capture_output=True)


class Place:
    """Where one test's clients connect: a transport, a store, one tenant."""

    def __init__(self, transport: str, server: Server | None, store_url: str | None) -> None:
        self.transport = transport
        self.server = server
        self.store_url = store_url
        self.tenant = f"t{uuid.uuid4().hex[:12]}"
        self.clients: list[Any] = []

    def connect(self, role: str = "service", user: str = "agent", project: str | None = None,
                **options: Any) -> berth.Client:
        if self.transport == "http":
            assert self.server is not None
            client = berth.Client(self.server.url, api_key=self.server.key(self.tenant, user, role, project), **options)
        else:
            assert self.store_url is not None
            client = berth.open(self.store_url, tenant=self.tenant, user=user, project=project, role=role, **options)
        self.clients.append(client)
        return client

    def connect_async(self, role: str = "service", user: str = "agent", project: str | None = None) -> berth.AsyncClient:
        if self.transport == "http":
            assert self.server is not None
            return berth.AsyncClient(self.server.url, api_key=self.server.key(self.tenant, user, role, project))
        assert self.store_url is not None
        return berth.open_async(self.store_url, tenant=self.tenant, user=user, project=project, role=role)

    def close(self) -> None:
        for client in self.clients:
            client.close()


def _place(request: pytest.FixtureRequest, scratch: Path) -> Iterator[Place]:
    transport = request.param
    dbname = None
    if transport == "http":
        where = Place("http", request.getfixturevalue("server"), None)
    elif transport == "embedded":
        where = Place("embedded", None, str(Path(tempfile.mkdtemp(dir=scratch, prefix="embedded-"))))
    else:
        dbname = f"berth_py_{uuid.uuid4().hex[:12]}"
        where = Place("postgres", None, _createdb(dbname))
    yield where
    where.close()
    if dbname:
        _dropdb(dbname)


@pytest.fixture(params=TRANSPORTS)
def place(request: pytest.FixtureRequest, scratch: Path) -> Iterator[Place]:
    yield from _place(request, scratch)


@pytest.fixture(params=["embedded", "postgres"])
def native_place(request: pytest.FixtureRequest, scratch: Path) -> Iterator[Place]:
    """The embedded transport only, for what concerns processes sharing one store."""
    yield from _place(request, scratch)


@pytest.fixture
def connect(place: Place) -> Callable[..., berth.Client]:
    return place.connect


#: A policy that never expires sessions during a test run.
FOREVER = {"activity_ttl_ms": 10 * 365 * 24 * 3600 * 1000, "run_lease_ttl_ms": 30_000}


def python_child(code: str, *args: str) -> list[str]:
    """A command line running `code` in a fresh interpreter of this venv."""
    return [sys.executable, "-c", code, *args]
