"""`berth-migrate` for LangGraph's `PostgresSaver` (`langgraph-postgres:URL`), on both
transports, against the local PostgreSQL (`BERTH_TEST_PG`, default the one on
127.0.0.1:5432; each test creates and drops its own databases): a store LangGraph itself
wrote (the threads of test_langgraph_migrate.py: stopped at an `interrupt()` with its
pending writes, one resumed to its end, a tool-calling agent) is imported, and
`BerthSaver.get_tuple` / `list` must equal `PostgresSaver`'s for every checkpoint; the
source database is never written (every table's rows hashed before and after); a rerun
writes nothing; the export back to a fresh database equals the original and its rerun
writes nothing; a changed source checkpoint is reported; an unreachable database is a
failed run said on stderr, with no password printed."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.types import Command

from berth.integrations.langgraph import BerthSaver
from berth.migrate.cli import main

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import lg_agents  # noqa: E402
import lg_graph  # noqa: E402
from test_langgraph_migrate import THREADS, _config, _migrate, _snapshot, _where  # noqa: E402

PG_SERVER = os.environ.get("BERTH_TEST_PG", "postgres://postgres@127.0.0.1:5432/postgres")


@pytest.fixture
def pg_database() -> Iterator[Any]:
    """A function making fresh databases on the test server (dropped afterwards): each
    call returns a new database's URL."""
    made: list[str] = []

    def make() -> str:
        name = f"berth_mig_lg_{uuid.uuid4().hex[:12]}"
        subprocess.run(["psql", PG_SERVER, "-qc", f'CREATE DATABASE "{name}"'], check=True, capture_output=True)
        made.append(name)
        return f"{PG_SERVER.rpartition('/')[0]}/{name}"

    yield make
    for name in made:
        subprocess.run(["psql", PG_SERVER, "-qc", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'],
                       capture_output=True)


def _build_source(url: str) -> None:
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        graph = lg_graph.build(saver)
        for thread in ("waiting", "resumed"):
            result = graph.invoke({"messages": [HumanMessage(content=f"hi {thread}")], "trail": []}, _config(thread))
            assert "__interrupt__" in result
        graph.invoke(Command(resume="yes"), _config("resumed"))
        model = lg_agents.scripted("get_weather", {"city": "Oslo"}, "Sunny in Oslo.", "call-weather")
        agent = lg_agents.agent_graph(saver, model, [lg_agents.get_weather])
        agent.invoke({"messages": [HumanMessage("Weather in Oslo?")]}, _config("agent"))


def _rows(url: str) -> dict[str, str]:
    """A digest of every table's rows (in a stable order): the source must not change."""
    out = {}
    with psycopg.connect(url) as conn:
        tables = [row[0] for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1")]
        for table in tables:
            rows = conn.execute(f'SELECT * FROM "{table}"').fetchall()
            out[table] = hashlib.sha256(repr(sorted(map(repr, rows))).encode()).hexdigest()
    return out


def test_import_rerun_export(lg_place: Any, pg_database: Any, capsys: pytest.CaptureFixture[str]) -> None:
    source = pg_database()
    _build_source(source)
    with PostgresSaver.from_conn_string(source) as saver:
        original = {thread: _snapshot(saver, thread) for thread in THREADS}
    total = sum(len(each) for each in original.values())
    assert any(row[5] for row in original["waiting"])  # the interrupt's pending writes
    rows = _rows(source)
    where = _where(lg_place)
    client = lg_place.sync_client()

    # A password in the URL (the local server's trust auth ignores it) is never printed.
    with_password = re.sub(r"://([^:@/]+)@", r"://\1:s3cret@", source, count=1)
    code, report = _migrate(capsys, f"langgraph-postgres:{with_password}", *where, "--dry-run")
    assert code == 0 and report["checkpoints"] == total and report["sessions"] == len(THREADS), report
    assert "s3cret" not in json.dumps(report)
    with BerthSaver(client) as saver:
        assert list(saver.list(None)) == []

    code, report = _migrate(capsys, f"langgraph-postgres:{source}", *where)
    assert code == 0 and report["checkpoints"] == total and report["pending_write_groups"] > 0, report
    with BerthSaver(client) as saver:
        for thread, want in original.items():
            assert _snapshot(saver, thread) == want, thread
    assert _rows(source) == rows  # read-only on the source

    code, report = _migrate(capsys, f"langgraph-postgres:{source}", *where)
    assert code == 0 and report["checkpoints"] == 0 and report["pending_write_groups"] == 0, report
    assert report["checkpoints_unchanged"] == total

    # Export back into a fresh database (tables made by PostgresSaver.setup()); a dry run
    # into it first makes nothing.
    target = pg_database()
    code, report = _migrate(capsys, "--to", f"langgraph-postgres:{target}", *where, "--dry-run")
    assert code == 0 and report["checkpoints"] == total, report
    assert _rows(target) == {}
    code, report = _migrate(capsys, "--to", f"langgraph-postgres:{target}", *where)
    assert code == 0 and report["checkpoints"] == total, report
    with PostgresSaver.from_conn_string(target) as saver:
        for thread, want in original.items():
            assert _snapshot(saver, thread) == want, thread
    code, report = _migrate(capsys, "--to", f"langgraph-postgres:{target}", *where)
    assert code == 0 and report["checkpoints"] == 0 and report["pending_write_groups"] == 0, report

    # A source checkpoint changed since the import: reported, berth's left as it was.
    with PostgresSaver.from_conn_string(source) as saver:
        latest = saver.get_tuple(_config("resumed"))
        assert latest is not None and latest.parent_config is not None
        saver.put(latest.parent_config, latest.checkpoint, {**latest.metadata, "step": 99}, {})
    code, report = _migrate(capsys, f"langgraph-postgres:{source}", *where)
    assert code == 1 and [entry["session"] for entry in report["changed"]] == ["resumed"], report
    assert report["checkpoints"] == 0
    with BerthSaver(client) as saver:
        assert _snapshot(saver, "resumed") == original["resumed"]


def test_an_unreachable_database_is_a_failed_run(lg_place: Any, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"postgresql://postgres:s3cret@127.0.0.1:5432/berth_mig_missing_{uuid.uuid4().hex[:8]}"
    code = main([f"langgraph-postgres:{url}", *_where(lg_place), "--json", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "does not exist" in err and "s3cret" not in err, err
    with pytest.raises(SystemExit) as stopped:
        main(["langgraph-postgres:/some/file.sqlite", *_where(lg_place)])
    assert stopped.value.code == 2 and "s3cret" not in capsys.readouterr().err
