"""`berth-migrate` for LangGraph's `SqliteSaver` (`langgraph-sqlite:PATH`) and
`PostgresSaver` (`langgraph-postgres:URL`, the local PostgreSQL: `BERTH_TEST_PG`, each
test its own databases), on both transports: a store LangGraph itself wrote (threads of
a graph stopped at an `interrupt()` with its pending writes, one resumed to the end, a
tool-calling agent) is imported, and `BerthSaver.get_tuple` / `list` must equal the
source saver's for every checkpoint (values, metadata, parent, pending writes); every
imported event is at its checkpoint's `ts`; the source is never written (file bytes, or
every table's rows); a rerun writes nothing; the export back into a fresh store (a dry
run into it first makes nothing) equals the original and its rerun writes nothing; a
graph resumed from the imported, interrupted thread continues as it would have; a
changed source checkpoint is reported, berth's left as it was; a password in a URL is
never printed, an unreachable database is a failed run said on stderr.

`--user-map FILE.json` (thread id -> berth user): each thread under its user (a user key
lists only its own), a thread the map does not name skipped and reported, a thread
berth holds under another user left as it is; bad mapping files and a user key are
refused before anything is written."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from berth.integrations.langgraph import BerthSaver, thread_session_id
from berth.migrate.cli import main

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import dropin_pg  # noqa: E402
import lg_agents  # noqa: E402
import lg_graph  # noqa: E402

THREADS = ["waiting", "resumed", "agent"]


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


class Store:
    """One kind of LangGraph store: fresh ones made, opened with LangGraph's saver, named
    as berth-migrate takes them, and digested (the source must not change)."""

    def __init__(self, kind: str, tmp_path: Path, databases: dropin_pg.Databases) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.databases = databases

    def new(self) -> str:
        """Where a new, empty store is: a file path, or a database's libpq URL."""
        if self.kind == "sqlite":
            return str(self.tmp_path / f"checkpoints-{uuid.uuid4().hex[:8]}.sqlite")
        return dropin_pg.libpq_url(self.databases.make())

    def spec(self, where: str) -> str:
        return f"langgraph-{self.kind}:{where}"

    @contextlib.contextmanager
    def saver(self, where: str, setup: bool = False) -> Iterator[Any]:
        if self.kind == "sqlite":
            with SqliteSaver.from_conn_string(where) as saver:
                yield saver
            return
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(where) as saver:
            if setup:
                saver.setup()
            yield saver

    def digest(self, where: str) -> dict[str, str]:
        if self.kind == "postgres":
            return dropin_pg.rows_digest(where.rpartition("/")[2])
        return {name: hashlib.sha256(Path(name).read_bytes()).hexdigest()
                for name in (where, f"{where}-wal") if os.path.exists(name) and os.path.getsize(name)}


@pytest.fixture(params=["sqlite", "postgres"])
def lg_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    databases = dropin_pg.Databases("berth_mig_lg_")
    yield Store(request.param, tmp_path, databases)
    databases.drop()


def _build_source(store: Store, where: str) -> None:
    with store.saver(where, setup=True) as saver:
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


def _where(place: Any) -> list[str]:
    if place.transport == "http":
        return ["--server", place.server.url, "--api-key", place.key()]
    return ["--data", str(place.store), "--tenant", place.tenant, "--user", "agent"]


def _migrate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main([*args, "--json", "--no-progress"])
    return code, json.loads(capsys.readouterr().out)


def _ms(ts: str) -> int:
    """A checkpoint's ISO 8601 `ts` in ms since the epoch (exactly)."""
    return (datetime.fromisoformat(ts) - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(milliseconds=1)


def _events(client: Any, session_id: str) -> list[Any]:
    out: list[Any] = []
    seq = 0
    while True:
        page = client.read(session_id, from_seq=seq, limit=1000)
        out += page.events
        if not page.events or page.next_seq == seq:
            return out
        seq = page.next_seq


def _assert_source_times(client: Any, thread: str, rows: list[tuple[Any, ...]]) -> None:
    """Every event of the imported thread at its checkpoint's `ts`: each `lg/checkpoint`
    and `lg/writes` at its own checkpoint's; the vocabulary beside them (messages, tool
    calls and results, turns, steps) at the `ts` of the checkpoint whose `put` wrote it."""
    ts = {row[1]: _ms(row[3]["ts"]) for row in rows}
    events = _events(client, thread_session_id(thread))
    assert events
    for event in events:
        if event.type == "lg/checkpoint":
            assert event.time == ts[event.data["id"]], (thread, event.data["id"])
        elif event.type == "lg/writes":
            assert event.time == ts[event.data["cp"]], (thread, event.data["cp"])
        else:
            assert event.time in ts.values(), (thread, event.type)
    assert {event.time for event in events} == set(ts.values())
    vocabulary = {event.type for event in events if not event.type.startswith("lg/")}
    assert {"turn/start", "step/start", "user/message", "assistant/message"} <= vocabulary, vocabulary


def test_import_rerun_export(lg_place: Any, lg_store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    source = lg_store.new()
    _build_source(lg_store, source)
    with lg_store.saver(source) as saver:
        original = {thread: _snapshot(saver, thread) for thread in THREADS}
    total = sum(len(each) for each in original.values())
    assert any(row[5] for row in original["waiting"])  # the interrupt's pending writes
    digest = lg_store.digest(source)
    where = _where(lg_place)
    client = lg_place.sync_client()

    # A dry run writes nothing (a password in a URL, which the local server's trust auth
    # ignores, is never printed).
    shown = re.sub(r"://([^:@/]+)@", r"://\1:s3cret@", source, count=1)
    code, report = _migrate(capsys, lg_store.spec(shown), *where, "--dry-run")
    assert code == 0 and report["checkpoints"] == total and report["sessions"] == len(THREADS), report
    assert "s3cret" not in json.dumps(report)
    with BerthSaver(client) as saver:
        assert list(saver.list(None)) == []

    code, report = _migrate(capsys, lg_store.spec(source), *where)
    assert code == 0 and report["checkpoints"] == total and report["pending_write_groups"] > 0, report
    with BerthSaver(client) as saver:
        for thread, rows in original.items():
            assert _snapshot(saver, thread) == rows, thread
    for thread, rows in original.items():  # the source's own times
        _assert_source_times(client, thread, rows)
    assert lg_store.digest(source) == digest  # read-only on the source

    code, report = _migrate(capsys, lg_store.spec(source), *where)
    assert code == 0 and report["checkpoints"] == 0 and report["pending_write_groups"] == 0, report
    assert report["checkpoints_unchanged"] == total

    # Export back into a fresh store (a dry run into it first makes nothing); its rerun
    # writes nothing.
    target = lg_store.new()
    code, report = _migrate(capsys, "--to", lg_store.spec(target), *where, "--dry-run")
    assert code == 0 and report["checkpoints"] == total, report
    assert (lg_store.digest(target) == {}) if lg_store.kind == "postgres" else not os.path.exists(target)
    code, report = _migrate(capsys, "--to", lg_store.spec(target), *where)
    assert code == 0 and report["checkpoints"] == total, report
    with lg_store.saver(target) as saver:
        for thread, rows in original.items():
            assert _snapshot(saver, thread) == rows, thread
    code, report = _migrate(capsys, "--to", lg_store.spec(target), *where)
    assert code == 0 and report["checkpoints"] == 0 and report["pending_write_groups"] == 0, report

    # The interrupted thread, resumed on berth, continues as it would have at the source.
    with BerthSaver(client) as saver:
        graph = lg_graph.build(saver)
        assert graph.get_state(_config("waiting")).next == ("ask",)
        result = graph.invoke(Command(resume="later"), _config("waiting"))
    assert result["trail"] == ["a", "human:later", "b"]
    assert [m.content for m in result["messages"]] == ["hi waiting", "a ran", "later", "b ran"]

    # A source checkpoint changed since the import (its metadata rewritten in place):
    # reported, berth's left as it was.
    with lg_store.saver(source) as saver:
        latest = saver.get_tuple(_config("resumed"))
        assert latest is not None and latest.parent_config is not None
        saver.put(latest.parent_config, latest.checkpoint, {**latest.metadata, "step": 99}, {})
    code, report = _migrate(capsys, lg_store.spec(source), *where)
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


# ----- --user-map ------------------------------------------------------------------------


def _owner(client: Any, thread: str) -> str:
    return str(client.get_session(thread_session_id(thread)).header.scope.user)


def _threads(client: Any) -> list[str]:
    with BerthSaver(client) as saver:
        return sorted({str(item.config["configurable"]["thread_id"]) for item in saver.list(None)})


def test_user_map(lg_place: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store("sqlite", tmp_path, dropin_pg.Databases("unused_"))
    source = store.new()
    _build_source(store, source)
    with store.saver(source) as saver:
        original = {thread: _snapshot(saver, thread) for thread in THREADS}
    where = _where(lg_place)
    client = lg_place.sync_client()
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"waiting": "ann", "resumed": "bob", "nobody-s-thread": "cat"}))

    code, report = _migrate(capsys, store.spec(source), *where, "--user-map", str(users), "--dry-run")
    assert code == 1 and report["users"] == {"ann": 1, "bob": 1}, report
    assert _threads(client) == []

    # "agent" is not in the map: skipped and reported; the others under their users.
    code, report = _migrate(capsys, store.spec(source), *where, "--user-map", str(users))
    assert code == 1 and report["users"] == {"ann": 1, "bob": 1}, report
    assert [(entry["session"], entry["record"]) for entry in report["skipped"]] == [("agent", "thread")], report
    assert "names no berth user" in report["skipped"][0]["reason"]
    assert (_owner(client, "waiting"), _owner(client, "resumed")) == ("ann", "bob")
    assert _threads(client) == ["resumed", "waiting"]
    with BerthSaver(client) as saver:
        for thread in ("waiting", "resumed"):
            assert _snapshot(saver, thread) == original[thread], thread
    # A user's own key sees its threads only.
    assert _threads(lg_place.sync_client(user="ann", role="user")) == ["waiting"]
    assert _threads(lg_place.sync_client(user="bob", role="user")) == ["resumed"]

    # The map grows: the new thread arrives under its user; the others are unchanged. A
    # thread the map now gives another user: reported, left with the one it has.
    users.write_text(json.dumps({"waiting": "cat", "resumed": "bob", "agent": "ann"}))
    code, report = _migrate(capsys, store.spec(source), *where, "--user-map", str(users))
    assert code == 1 and report["users"] == {"ann": 1, "bob": 1}, report
    assert [entry["session"] for entry in report["changed"]] == ["waiting"], report
    assert "under user 'ann'" in report["changed"][0]["reason"]
    assert (_owner(client, "waiting"), _owner(client, "agent")) == ("ann", "ann")
    assert _threads(lg_place.sync_client(user="ann", role="user")) == ["agent", "waiting"]
    with BerthSaver(client) as saver:
        assert _snapshot(saver, "agent") == original["agent"]

    # Without a map (the caller's user): threads already there are left as they are.
    code, report = _migrate(capsys, store.spec(source), *where)
    assert code == 0 and report["checkpoints"] == 0 and "users" not in report, report


BAD_MAPS = {
    "missing": None,
    "not JSON": "{waiting: ann",
    "a list": json.dumps([["waiting", "ann"]]),
    "empty": "{}",
    "a number": json.dumps({"waiting": 5}),
    "outside the id grammar": json.dumps({"waiting": "ann smith"}),
    "dot-dot": json.dumps({"waiting": ".."}),
    "too long": json.dumps({"waiting": "u" * 129}),
}


def test_bad_user_maps_write_nothing(lg_place: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from berth.migrate.users import UserMapError, load

    store = Store("sqlite", tmp_path, dropin_pg.Databases("unused_"))
    source = store.new()
    _build_source(store, source)
    where = _where(lg_place)
    client = lg_place.sync_client()
    for number, (name, text) in enumerate(BAD_MAPS.items()):
        path = tmp_path / f"map-{number}.json"
        if text is not None:
            path.write_text(text)
        with pytest.raises(UserMapError):
            load(str(path))
        capsys.readouterr()
        code = main([store.spec(source), *where, "--user-map", str(path), "--no-progress"])
        err = capsys.readouterr().err
        assert code == 2 and "UserMapError" in err and str(path) in err, (name, err)
    # A user key cannot make sessions for others: refused before anything is written.
    good = tmp_path / "good.json"
    good.write_text(json.dumps({thread: "ann" for thread in THREADS}))
    if lg_place.transport == "http":
        as_user = ["--server", lg_place.server.url, "--api-key", lg_place.key(user="ann", role="user")]
    else:
        as_user = ["--data", str(lg_place.store), "--tenant", lg_place.tenant, "--user", "ann", "--role", "user"]
    code = main([store.spec(source), *as_user, "--user-map", str(good), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "service key" in err, err
    assert _threads(client) == [] and client.list_sessions().items == []
    # Options that do not fit: usage errors.
    for args in (["--user-from", "adk-user"], ["--user-map", str(good), "--user-from", "caller"]):
        with pytest.raises(SystemExit) as stopped:
            main([store.spec(source), *where, *args])
        assert stopped.value.code == 2, args
    with pytest.raises(SystemExit) as stopped:
        main(["--to", store.spec(str(tmp_path / "out.sqlite")), *where, "--user-map", str(good)])
    assert stopped.value.code == 2
    assert client.list_sessions().items == []
