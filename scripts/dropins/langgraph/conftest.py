"""Fixtures for the LangGraph drop-in suite: every test runs on both transports.

`lg_place` is parametrized: `http` (a real `berth serve`, started once per run by the
Python suite's own `Server`, on a fresh data directory) and `embedded` (the native store
on a fresh temporary directory). Each test gets its own tenant and `service` key.
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
berth_binary = _fixtures.berth_binary

__all__ = ["LgPlace", "berth_binary"]


class LgPlace:
    """Where one test's savers connect: a transport and one tenant."""

    def __init__(self, transport: str, server: Server | None, store: str | None) -> None:
        self.transport = transport
        self.server = server
        self.store = store
        self.tenant = f"lg{uuid.uuid4().hex[:12]}"
        self._key: str | None = None
        self.clients: list[Any] = []

    def key(self) -> str:
        assert self.server is not None
        if self._key is None:
            self._key = self.server.key(self.tenant, "agent", "service")
        return self._key

    def sync_client(self) -> berth.Client:
        if self.transport == "http":
            client = berth.Client(self.server.url, api_key=self.key())  # type: ignore[union-attr]
        else:
            client = berth.open(self.store, tenant=self.tenant, user="agent", role="service")  # type: ignore[arg-type]
        self.clients.append(client)
        return client

    def async_client(self) -> berth.AsyncClient:
        if self.transport == "http":
            return berth.AsyncClient(self.server.url, api_key=self.key())  # type: ignore[union-attr]
        return berth.open_async(self.store, tenant=self.tenant, user="agent", role="service")  # type: ignore[arg-type]

    def child_args(self) -> list[str]:
        """How a child process reaches the same place: transport, url/store, credential."""
        if self.transport == "http":
            return ["http", self.server.url, self.key()]  # type: ignore[union-attr]
        return ["embedded", str(self.store), self.tenant]

    def close(self) -> None:
        for client in self.clients:
            client.close()


@pytest.fixture(scope="session")
def lg_scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="berth-lg-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def lg_server(lg_scratch: Path) -> Iterator[Server]:
    running = Server(lg_scratch / "served", ["--rate-per-tenant", "0"])
    running.start()
    yield running
    running.stop()


@pytest.fixture(params=["http", "embedded"])
def lg_place(request: pytest.FixtureRequest, lg_scratch: Path) -> Iterator[LgPlace]:
    if request.param == "http":
        place = LgPlace("http", request.getfixturevalue("lg_server"), None)
    else:
        place = LgPlace("embedded", None, tempfile.mkdtemp(dir=lg_scratch, prefix="embedded-"))
    yield place
    place.close()
