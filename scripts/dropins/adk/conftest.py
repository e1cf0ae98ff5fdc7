"""Fixtures for the ADK drop-in suite: every berth case runs on both transports.

`adk_place` is parametrized: `http` (a real `berth serve`, started once per run by the
Python suite's own `Server` class on a fresh data directory, `BERTH_BIN`) and
`embedded` (the native store on a fresh temporary directory). Each test gets its own
tenant and a `service` key (ADK's `app:` state is tenant-wide memory).
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


class AdkPlace:
    """Where one test's services connect: a transport and one tenant."""

    def __init__(self, transport: str, server: Any, store: str | None) -> None:
        self.transport = transport
        self.server = server
        self.store = store
        self.tenant = f"adk{uuid.uuid4().hex[:12]}"
        self._key: str | None = None
        self.clients: list[berth.Client] = []

    def key(self) -> str:
        if self._key is None:
            self._key = self.server.key(self.tenant, "agent", "service")
        return self._key

    def client(self) -> berth.Client:
        if self.transport == "http":
            client = berth.Client(self.server.url, api_key=self.key())
        else:
            client = berth.open(self.store, tenant=self.tenant, user="agent", role="service")
        self.clients.append(client)
        return client

    def child_args(self) -> list[str]:
        """How a child process reaches the same place: transport, url/store, credential."""
        if self.transport == "http":
            return ["http", self.server.url, self.key()]
        return ["embedded", str(self.store), self.tenant]

    def close(self) -> None:
        for client in self.clients:
            client.close()


@pytest.fixture(scope="session")
def adk_scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="berth-adk-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def adk_server(adk_scratch: Path) -> Iterator[Any]:
    running = Server(adk_scratch / "served", ["--rate-per-tenant", "0"])
    running.start()
    yield running
    running.stop()


@pytest.fixture(params=["http", "embedded"])
def adk_place(request: pytest.FixtureRequest, adk_scratch: Path) -> Iterator[AdkPlace]:
    if request.param == "http":
        place = AdkPlace("http", request.getfixturevalue("adk_server"), None)
    else:
        place = AdkPlace("embedded", None, tempfile.mkdtemp(dir=adk_scratch, prefix="embedded-"))
    yield place
    place.close()


#: Child-process code: `connect(argv)` builds the client `AdkPlace.child_args` describes.
CONNECT = '''
import berth
def connect(argv):
    transport, where, credential = argv[:3]
    if transport == "http":
        return berth.Client(where, api_key=credential)
    return berth.open(where, tenant=credential, user="agent", role="service")
'''
