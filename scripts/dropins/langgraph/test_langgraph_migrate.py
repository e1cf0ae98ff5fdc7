"""`berth-migrate` for LangGraph's `SqliteSaver`, on both transports: a store LangGraph
itself wrote (threads of a graph stopped at an `interrupt()` with its pending writes,
one resumed to the end, a tool-calling agent) is imported, and `BerthSaver.get_tuple` /
`list` must equal `SqliteSaver`'s for every checkpoint (values, metadata, parent,
pending writes); the source is never written; a rerun writes nothing; the export back to
a fresh `SqliteSaver` file equals the original; and a graph resumed from the imported,
interrupted thread continues as it would have."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from berth.integrations.langgraph import BerthSaver
from berth.migrate.cli import main

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import lg_agents  # noqa: E402
import lg_graph  # noqa: E402

THREADS = ["waiting", "resumed", "agent"]


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def _build_source(path: Path) -> None:
    with SqliteSaver.from_conn_string(str(path)) as saver:
        graph = lg_graph.build(saver)
        for thread in ("waiting", "resumed"):
            result = graph.invoke({"messages": [HumanMessage(content=f"hi {thread}")], "trail": []}, _config(thread))
            assert "__interrupt__" in result
        graph.invoke(Command(resume="yes"), _config("resumed"))
        model = lg_agents.scripted("get_weather", {"city": "Oslo"}, "Sunny in Oslo.", "call-weather")
        agent = lg_agents.agent_graph(saver, model, [lg_agents.get_weather])
        agent.invoke({"messages": [HumanMessage("Weather in Oslo?")]}, _config("agent"))


def _snapshot(saver: Any, thread: str) -> list[tuple[Any, ...]]:
    """Every checkpoint of the thread as the saver returns it, newest first."""
    listed = list(saver.list(_config(thread)))
    out = []
    for item in listed:
        conf = item.config["configurable"]
        got = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": conf["checkpoint_ns"],
                                                "checkpoint_id": conf["checkpoint_id"]}})
        assert got is not None and got.checkpoint == item.checkpoint and got.pending_writes == item.pending_writes
        parent = item.parent_config["configurable"]["checkpoint_id"] if item.parent_config else None
        out.append((conf["checkpoint_ns"], conf["checkpoint_id"], parent, item.checkpoint, dict(item.metadata),
                    item.pending_writes))
    return out


def _files(path: Path) -> dict[str, str]:
    return {name: hashlib.sha256(Path(name).read_bytes()).hexdigest()
            for name in (str(path), f"{path}-wal") if os.path.exists(name) and os.path.getsize(name)}


def _where(place: Any) -> list[str]:
    if place.transport == "http":
        return ["--server", place.server.url, "--api-key", place.key()]
    return ["--data", str(place.store), "--tenant", place.tenant, "--user", "agent"]


def _migrate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main([*args, "--json", "--no-progress"])
    return code, json.loads(capsys.readouterr().out)


def test_import_rerun_export_resume(lg_place: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "checkpoints.sqlite"
    _build_source(source)
    with SqliteSaver.from_conn_string(str(source)) as saver:
        original = {thread: _snapshot(saver, thread) for thread in THREADS}
    total = sum(len(each) for each in original.values())
    assert any(row[5] for row in original["waiting"])  # the interrupt's pending writes
    files = _files(source)
    where = _where(lg_place)
    client = lg_place.sync_client()

    code, report = _migrate(capsys, f"langgraph-sqlite:{source}", *where, "--dry-run")
    assert code == 0 and report["checkpoints"] == total and report["sessions"] == len(THREADS), report
    with BerthSaver(client) as saver:
        assert list(saver.list(None)) == []

    code, report = _migrate(capsys, f"langgraph-sqlite:{source}", *where)
    assert code == 0 and report["checkpoints"] == total and report["pending_write_groups"] > 0, report
    with BerthSaver(client) as saver:
        for thread, rows in original.items():
            assert _snapshot(saver, thread) == rows, thread
    assert _files(source) == files  # read-only on the source

    code, report = _migrate(capsys, f"langgraph-sqlite:{source}", *where)
    assert code == 0 and report["checkpoints"] == 0 and report["pending_write_groups"] == 0, report
    assert report["checkpoints_unchanged"] == total

    target = tmp_path / "exported.sqlite"
    code, report = _migrate(capsys, "--to", f"langgraph-sqlite:{target}", *where)
    assert code == 0 and report["checkpoints"] == total, report
    with SqliteSaver.from_conn_string(str(target)) as saver:
        for thread, rows in original.items():
            assert _snapshot(saver, thread) == rows, thread
    code, report = _migrate(capsys, "--to", f"langgraph-sqlite:{target}", *where)
    assert code == 0 and report["checkpoints"] == 0 and report["pending_write_groups"] == 0, report

    # The interrupted thread, resumed on berth, continues as it would have on SQLite.
    with BerthSaver(client) as saver:
        graph = lg_graph.build(saver)
        assert graph.get_state(_config("waiting")).next == ("ask",)
        result = graph.invoke(Command(resume="later"), _config("waiting"))
    assert result["trail"] == ["a", "human:later", "b"]
    assert [m.content for m in result["messages"]] == ["hi waiting", "a ran", "later", "b ran"]

    # A source checkpoint changed since the import (its metadata rewritten in place):
    # reported, berth's left as it was.
    with SqliteSaver.from_conn_string(str(source)) as saver:
        latest = saver.get_tuple(_config("resumed"))
        assert latest is not None and latest.parent_config is not None
        saver.put(latest.parent_config, latest.checkpoint, {**latest.metadata, "step": 99}, {})
    code, report = _migrate(capsys, f"langgraph-sqlite:{source}", *where)
    assert code == 1 and [entry["session"] for entry in report["changed"]] == ["resumed"], report
    assert report["checkpoints"] == 0
    with BerthSaver(client) as saver:
        assert _snapshot(saver, "resumed") == original["resumed"]
