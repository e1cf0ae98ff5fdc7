"""pytest plugin: runs the OpenAI Agents SDK's own session tests with `SQLiteSession`
swapped for `berth.integrations.openai_agents.BerthSession`.

Loaded with `-p pytest_berth_openai` (this directory on PYTHONPATH) from the extracted
openai-agents sdist. `BERTH_OPENAI_TRANSPORT` picks the transport:
- `http`: a real `berth serve` (`BERTH_BIN`) on a temporary data directory and a free
  loopback port, with a `service` key of its own tenant;
- `embedded`: the native store on a temporary directory.

The tests hard-code `SQLiteSession(session_id, db_path, session_settings=...)`, so an
autouse fixture replaces the name in every loaded module whose file is
`memory/test_session.py` or `memory/test_session_limit.py` (the test file is imported
both as `test_session` and, by the limit tests, as `tests.memory.test_session`). Each
`db_path` (and each `:memory:` instance) becomes an id prefix, so tests stay as isolated
as their SQLite files are.

At the end the plugin checks that the swap took effect: berth must hold `openai-agents`
sessions, all made by this plugin's factory, and a report (`BERTH_OPENAI_REPORT`, JSON)
says how many; a plugin that silently tested SQLite would fail here.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

import berth
from berth.integrations.openai_agents import LABEL, BerthSession

_TARGET_FILES = ("memory/test_session.py", "memory/test_session_limit.py")


class _Backend:
    """The berth the swapped sessions write to (one per pytest run)."""

    def __init__(self, transport: str) -> None:
        self.transport = transport
        self.scratch = Path(tempfile.mkdtemp(prefix="berth-openai-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.created: set[str] = set()
        self.objects = 0
        if transport == "http":
            self.client = self._serve()
        elif transport == "embedded":
            self.client = berth.open(str(self.scratch / "store"), tenant="openai", user="agent", role="service")
        else:
            raise pytest.UsageError(f"BERTH_OPENAI_TRANSPORT must be http or embedded, not {transport!r}")

    def _serve(self) -> berth.Client:
        binary = os.environ.get("BERTH_BIN", "")
        if not os.access(binary, os.X_OK):
            raise pytest.UsageError(f"BERTH_BIN is not an executable berth binary: {binary!r}")
        data = self.scratch / "served"
        key = subprocess.run(
            [binary, "--data", str(data), "keys", "create", "--tenant", "openai", "--user", "agent", "--role", "service"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        log = (self.scratch / "serve.log").open("ab")
        self.process = subprocess.Popen(
            [binary, "serve", "--data", str(data), "--listen", f"127.0.0.1:{port}", "--rate-per-tenant", "0"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"berth serve exited: {(self.scratch / 'serve.log').read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                    sock.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    if b" 200 " in sock.recv(100):
                        return berth.Client(f"http://127.0.0.1:{port}", api_key=key)
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("berth serve did not become ready")

    def session(self, session_id: str, db_path: Any = ":memory:", *args: Any, session_settings: Any = None,
                **kwargs: Any) -> BerthSession:
        # SQLiteSession(session_id, db_path, sessions_table, messages_table, session_settings)
        if len(args) >= 3:
            session_settings = args[2]
        path = str(db_path)
        scope = uuid.uuid4().hex[:12] if path == ":memory:" else hashlib.sha256(path.encode()).hexdigest()[:12]
        made = BerthSession(session_id, self.client, session_settings=session_settings, id_prefix=f"{scope}.")
        self.created.add(made.berth_id)
        self.objects += 1
        return made

    def close(self) -> None:
        self.client.close()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=15)
        shutil.rmtree(self.scratch, ignore_errors=True)


_backend: _Backend | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _backend
    _backend = _Backend(os.environ.get("BERTH_OPENAI_TRANSPORT", "embedded"))


@pytest.fixture(autouse=True)
def _swap_sqlite_session(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    assert _backend is not None
    swapped = 0
    for module in list(sys.modules.values()):
        path = (getattr(module, "__file__", None) or "").replace(os.sep, "/")
        if path.endswith(_TARGET_FILES) and hasattr(module, "SQLiteSession"):
            monkeypatch.setattr(module, "SQLiteSession", _backend.session)
            swapped += 1
    assert swapped, "no test module of the SDK's session tests was loaded: nothing swapped"
    yield


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    assert _backend is not None
    try:
        held = {item.id for item in _backend.client.iter_sessions(label=LABEL, include_blank=True)}
        foreign = held - _backend.created
        report = {
            "transport": _backend.transport,
            "objects": _backend.objects,
            "sessions_in_berth": len(held),
            "foreign_sessions": sorted(foreign),
        }
        line = (f"berth ({_backend.transport}) holds {len(held)} {LABEL} sessions, made by "
                f"{_backend.objects} BerthSession objects")
        print(f"\n{line}", file=sys.stderr)
        if os.environ.get("BERTH_OPENAI_REPORT"):
            Path(os.environ["BERTH_OPENAI_REPORT"]).write_text(json.dumps(report))
        if not held or foreign or _backend.objects == 0:
            print("the swap did not take effect: " + json.dumps(report), file=sys.stderr)
            session.exitstatus = 1
    finally:
        _backend.close()
