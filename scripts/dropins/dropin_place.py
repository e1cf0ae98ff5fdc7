"""What every drop-in suite's fixtures share (LangGraph, LangGraph's Store, smolagents,
ADK): where one test's clients connect — `http` (a real `berth serve`, started once per
run by the Python suite's own `Server` class on a fresh data directory, `BERTH_BIN`) or
`embedded` (the native store on a fresh temporary directory) — with a tenant of its own.

A suite's conftest calls `fixtures(prefix, tenant_prefix)` and binds the three fixtures
it returns (`<prefix>scratch`, `<prefix>server`, `<prefix>place`) at module level.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import berth

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("berth_python_suite_fixtures", ROOT / "python" / "tests" / "conftest.py")
assert _spec is not None and _spec.loader is not None
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)
Server = _suite.Server  # the Python suite's `berth serve` fixture class, reused
berth_binary = _suite.berth_binary


class Place:
    """Where one test's clients connect: a transport and one tenant."""

    tenant_prefix = "t"

    def __init__(self, transport: str, server: Any, store: str | None) -> None:
        self.transport = transport
        self.server = server
        self.store = store
        self.tenant = f"{self.tenant_prefix}{uuid.uuid4().hex[:12]}"
        self._keys: dict[tuple[str, str], str] = {}
        self.clients: list[Any] = []

    def key(self, user: str = "agent", role: str = "service") -> str:
        assert self.server is not None
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

    client = sync_client

    def async_client(self, user: str = "agent", role: str = "service") -> berth.AsyncClient:
        if self.transport == "http":
            return berth.AsyncClient(self.server.url, api_key=self.key(user, role))
        return berth.open_async(self.store, tenant=self.tenant, user=user, role=role)  # type: ignore[arg-type]

    def child_args(self) -> list[str]:
        """How a child process reaches the same place: transport, url/store, credential."""
        if self.transport == "http":
            return ["http", self.server.url, self.key()]
        return ["embedded", str(self.store), self.tenant]

    def close(self) -> None:
        for client in self.clients:
            client.close()


def fixtures(prefix: str, place_class: type[Place] = Place) -> tuple[Callable[..., Any], ...]:
    """The suite's `scratch`, `server` and `place` fixtures, named `<prefix>scratch`,
    `<prefix>server` and `<prefix>place` (bind them at module level under those names)."""
    scratch_name, server_name = f"{prefix}scratch", f"{prefix}server"

    @pytest.fixture(scope="session", name=scratch_name)
    def scratch() -> Iterator[Path]:
        path = Path(tempfile.mkdtemp(prefix=f"berth-{prefix or 'dropin'}-"))
        yield path
        shutil.rmtree(path, ignore_errors=True)

    @pytest.fixture(scope="session", name=server_name)
    def server(request: pytest.FixtureRequest) -> Iterator[Any]:
        running = Server(request.getfixturevalue(scratch_name) / "served", ["--rate-per-tenant", "0"])
        running.start()
        yield running
        running.stop()

    @pytest.fixture(params=["http", "embedded"], name=f"{prefix}place")
    def place(request: pytest.FixtureRequest) -> Iterator[Place]:
        directory = request.getfixturevalue(scratch_name)
        if request.param == "http":
            where = place_class("http", request.getfixturevalue(server_name), None)
        else:
            where = place_class("embedded", None, tempfile.mkdtemp(dir=directory, prefix="embedded-"))
        yield where
        where.close()

    return scratch, server, place
