"""Fixtures for the LangGraph Store suite: every berth test runs on both transports.

`place` is parametrized: `http` (a real `berth serve`, started once per run by the
Python suite's own `Server`, on a fresh data directory) and `embedded` (the native store
on a fresh temporary directory). Each test gets its own tenant.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

import berth

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("berth_python_suite_fixtures", ROOT / "python" / "tests" / "conftest.py")
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)
Server = _fixtures.Server  # the Python suite's `berth serve` fixture class, reused


class Place:
    """Where one test's stores connect: a transport and one tenant."""

    def __init__(self, transport: str, server: Any, store: str | None) -> None:
        self.transport = transport
        self.server = server
        self.store = store
        self.tenant = f"st{uuid.uuid4().hex[:12]}"
        self._keys: dict[tuple[str, str], str] = {}
        self.clients: list[Any] = []

    def key(self, user: str = "agent", role: str = "service") -> str:
        if (user, role) not in self._keys:
            self._keys[(user, role)] = self.server.key(self.tenant, user, role)
        return self._keys[(user, role)]

    def sync_client(self, user: str = "agent", role: str = "service") -> berth.Client:
        if self.transport == "http":
            client = berth.Client(self.server.url, api_key=self.key(user, role))
        else:
            client = berth.open(self.store, tenant=self.tenant, user=user, role=role)  # type: ignore[arg-type]
        self.clients.append(client)
        return client

    def async_client(self, user: str = "agent", role: str = "service") -> berth.AsyncClient:
        if self.transport == "http":
            return berth.AsyncClient(self.server.url, api_key=self.key(user, role))
        return berth.open_async(self.store, tenant=self.tenant, user=user, role=role)  # type: ignore[arg-type]

    def close(self) -> None:
        for client in self.clients:
            client.close()


@pytest.fixture(scope="session")
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="berth-lgstore-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def server(scratch: Path) -> Iterator[Any]:
    running = Server(scratch / "served", ["--rate-per-tenant", "0"])
    running.start()
    yield running
    running.stop()


@pytest.fixture(params=["http", "embedded"])
def place(request: pytest.FixtureRequest, scratch: Path) -> Iterator[Place]:
    if request.param == "http":
        where = Place("http", request.getfixturevalue("server"), None)
    else:
        where = Place("embedded", None, tempfile.mkdtemp(dir=scratch, prefix="embedded-"))
    yield where
    where.close()
