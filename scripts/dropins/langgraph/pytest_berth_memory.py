"""pytest plugin: runs langgraph-checkpoint's own `tests/test_memory.py::TestMemorySaver`
(from the 4.3.2 sdist, never committed here) with `InMemorySaver` swapped for
`BerthSaver`, on the transport `BERTH_LG_TRANSPORT` names (`http`: a real `berth serve`
this plugin starts; `embedded`: a temporary data directory).

Each test gets a saver with a fresh id prefix (the upstream tests reuse the thread ids
`thread-1` and `thread-2`), and after each test the plugin checks that the threads it
wrote are berth sessions labelled `langgraph` — so a green run cannot be InMemorySaver.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

import berth
from berth.integrations.langgraph import LABEL, BerthSaver

ROOT = Path(__file__).resolve().parents[3]
TRANSPORT = os.environ.get("BERTH_LG_TRANSPORT", "embedded")


def _server_class() -> Any:
    spec = importlib.util.spec_from_file_location("berth_python_suite_fixtures", ROOT / "python" / "tests" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Server


@pytest.fixture(scope="session")
def berth_store_client() -> Iterator[berth.Client]:
    scratch = Path(tempfile.mkdtemp(prefix="berth-lg-memory-"))
    server = None
    try:
        if TRANSPORT == "http":
            server = _server_class()(scratch / "served", ["--rate-per-tenant", "0"])
            server.start()
            client = berth.Client(server.url, api_key=server.key("lgmemory", "agent", "service"))
        elif TRANSPORT == "embedded":
            client = berth.open(str(scratch / "store"), tenant="lgmemory", user="agent", role="service")
        else:
            raise pytest.UsageError(f"BERTH_LG_TRANSPORT is http or embedded, not {TRANSPORT!r}")
        yield client
        client.close()
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(autouse=True)
def berth_instead_of_memory(monkeypatch: pytest.MonkeyPatch, berth_store_client: berth.Client) -> Iterator[None]:
    import tests.test_memory as upstream

    prefix = f"m{uuid.uuid4().hex[:10]}-"
    made: list[BerthSaver] = []

    def factory(*args: Any, **kwargs: Any) -> BerthSaver:
        saver = BerthSaver(berth_store_client, prefix=prefix, **kwargs)
        made.append(saver)
        return saver

    monkeypatch.setattr(upstream, "InMemorySaver", factory)
    yield
    for saver in made:
        saver.close()
    assert made, "the test never made a saver: the swap did not take effect"
    ours = [s for s in berth_store_client.iter_sessions(label=LABEL, include_blank=True) if s.id.startswith(prefix)]
    assert ours, f"no berth session with prefix {prefix}: the test did not write through BerthSaver"
    assert all(not session.runs for session in ours), "close() released every run"
