"""LangGraph's `SqliteSaver` and `PostgresSaver` stores, into berth and back.

Import: the source file is copied first (SQLite's online backup from a read-only
connection: the source is never written; a live one is read as one snapshot), then
`SqliteSaver.list(None)` reads every thread's checkpoints from the copy — values,
metadata, parent, pending writes — and `BerthSaver.put` / `put_writes` write them,
parents first, so the berth thread is what the drop-in writes. `SqliteSaver`'s reader
drops a pending write's `task_path` (it only sorts by it): that one column is read with
a plain SELECT of the copy's `writes` table and passed to `put_writes`. The source's
times are kept: a checkpoint's events take its `ts` (as `BerthSaver.put` always gives
them), and its pending writes, for which the source keeps no time, the same.

A PostgreSQL store (`langgraph-postgres:URL`, `langgraph-checkpoint-postgres`) is read
in place: `PostgresSaver.list(None)` on a connection the server holds read-only, in one
REPEATABLE READ transaction (one snapshot of a live store, the `task_path`s read in the
same transaction from `checkpoint_writes`).

Export: `BerthSaver.list(None)` into `SqliteSaver.put` / `put_writes` of the target file,
or `PostgresSaver`'s of the target database (its `setup()` first: tables and migrations).

Both ways a checkpoint's identity is its thread, namespace and id: one the target
already holds is compared with the source's (checkpoint, metadata, parent, each task's
writes) — equal, it is left alone (a rerun writes nothing); different, it is reported
as changed, never overwritten, and its descendants are not written.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.sqlite import SqliteSaver

import berth
from berth.integrations.langgraph import LABEL, BerthSaver, thread_session_id
from berth.integrations.langgraph._times import ts_ms

from . import users as owners
from .report import Report
from .source import snapshot

_Key = tuple[str, str]  # (checkpoint_ns, checkpoint_id)


class _ImportSaver(BerthSaver):
    """`BerthSaver` whose `put_writes_at` stores pending writes at a given time: the
    source keeps no time for a write, so an import gives it its checkpoint's (`ts`: the
    writes were made after it). A `put` takes its checkpoint's `ts` in any saver."""

    def put_writes_at(self, config: Any, writes: Any, task_id: str, task_path: str, at: int | None) -> None:
        thread_id, build = self._core.put_writes_build(config, writes, task_id, task_path, at)
        self._write(thread_id, build, checkpoint=False)


def _ids(item: CheckpointTuple) -> tuple[str, str, str | None]:
    conf = item.config["configurable"]
    parent = item.parent_config["configurable"].get("checkpoint_id") if item.parent_config else None
    return str(conf.get("checkpoint_ns", "")), str(conf["checkpoint_id"]), parent


def _parent_order(items: list[CheckpointTuple]) -> list[CheckpointTuple]:
    """Every checkpoint after its parent (ids are time-ordered; a parent out of that
    order still goes first)."""
    by_key = {_ids(item)[:2]: item for item in items}
    done: set[_Key] = set()
    ordered: list[CheckpointTuple] = []
    for item in sorted(items, key=lambda each: (_ids(each)[0], _ids(each)[1])):
        chain = []
        ns, cid, parent = _ids(item)
        key: _Key | None = (ns, cid)
        while key is not None and key not in done and key in by_key:
            chain.append(by_key[key])
            done.add(key)
            parent = _ids(by_key[key])[2]
            key = (ns, parent) if parent else None
        ordered.extend(reversed(chain))
    return ordered


def _groups(writes: Iterable[tuple[str, str, Any]] | None) -> dict[str, list[tuple[str, Any]]]:
    """Pending writes by task, in order."""
    groups: dict[str, list[tuple[str, Any]]] = defaultdict(list)
    for task_id, channel, value in writes or ():
        groups[task_id].append((channel, value))
    return dict(groups)


def _new_versions(checkpoint: Any, parent: Any) -> dict[str, Any]:
    """The channels whose version this checkpoint changed (all, for a root)."""
    versions = dict(checkpoint.get("channel_versions") or {})
    if parent is None:
        return versions
    before = parent.get("channel_versions") or {}
    return {channel: version for channel, version in versions.items() if before.get(channel) != version}


def _same(have: CheckpointTuple, item: CheckpointTuple) -> bool:
    return bool(have.checkpoint == item.checkpoint and dict(have.metadata or {}) == dict(item.metadata or {})
                and _ids(have)[2] == _ids(item)[2])


def copy_threads(items: Iterable[CheckpointTuple], target: BaseCheckpointSaver[Any], report: Report,
                 task_paths: dict[tuple[str, str, str, str], str], users: owners.UserMap | None = None) -> None:
    """Writes `items` (any threads) into `target`, parents first, through its `put` /
    `put_writes`; see the module's docstring for what is compared and reported. `users`
    (berth targets): each thread's session made for the user it maps the thread to."""
    threads: dict[str, list[CheckpointTuple]] = defaultdict(list)
    for item in items:
        threads[str(item.config["configurable"]["thread_id"])].append(item)
    report.total = len(threads)
    for thread_id, thread_items in threads.items():
        report.sessions += 1
        if users is not None and isinstance(target, BerthSaver) and not _claim(target, thread_id, users, report):
            report.tick()
            continue
        before = (report.records, report.writes)
        _copy_thread(thread_id, thread_items, target, report, task_paths)
        if (report.records, report.writes) != before:
            report.imported += 1
        else:
            report.unchanged += 1
        report.tick()
    report.tick(force=True)


def _claim(target: BerthSaver, thread_id: str, users: owners.UserMap, report: Report) -> bool:
    """The thread's session made for the user `users` maps it to (as `BerthSaver` would
    make it, which then writes on); False, reported, when it names none or berth holds the
    thread under another user."""
    user = users.user_for(thread_id)
    if user is None:
        report.skip(thread_id, "thread", f"the user map {users.path} names no berth user for it: not imported")
        return False
    held = owners.claim(target.client, thread_session_id(thread_id), user, report.dry_run, title=thread_id,
                        labels=[LABEL], policy=target._core.policy())
    if held is not None:
        report.change(thread_id, "thread", owners.elsewhere(user, held))
        return False
    report.owned(user)
    return True


def _copy_thread(thread_id: str, items: list[CheckpointTuple], target: BaseCheckpointSaver[Any], report: Report,
                 task_paths: dict[tuple[str, str, str, str], str]) -> None:
    existing = {_ids(have)[:2]: have for have in target.list({"configurable": {"thread_id": thread_id}})}
    by_key = {_ids(item)[:2]: item for item in items}
    blocked: set[_Key] = set()
    serde = target.serde
    for item in _parent_order(items):
        ns, cid, parent_id = _ids(item)
        where = f"checkpoint {ns + '/' if ns else ''}{cid}"
        if parent_id is not None and (ns, parent_id) in blocked:
            blocked.add((ns, cid))
            report.skip(thread_id, where, "its parent checkpoint was not written")
            continue
        have = existing.get((ns, cid))
        if have is not None:
            if not _same(have, item):
                blocked.add((ns, cid))
                report.change(thread_id, where, "the target holds this checkpoint with other content: left as it is")
                continue
            report.records_unchanged += 1
        else:
            parent = by_key.get((ns, parent_id)) if parent_id else None
            config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
            if parent_id:
                config["configurable"]["checkpoint_id"] = parent_id
            if not report.dry_run:
                try:
                    target.put(config, item.checkpoint, item.metadata,  # type: ignore[arg-type]
                               _new_versions(item.checkpoint, parent.checkpoint if parent else None))
                except berth.BerthError as error:
                    blocked.add((ns, cid))
                    report.skip(thread_id, where, f"the target cannot hold it: {type(error).__name__}: {error}")
                    continue
            report.records += 1
            report.bytes += len(serde.dumps_typed(item.checkpoint)[1])
        held = _groups(have.pending_writes if have is not None else None)
        for task_id, writes in _groups(item.pending_writes).items():
            if task_id in held:
                # The target's writes for the task may be more (a thread resumed there
                # since): only writes of the source's it lacks or holds otherwise count.
                if any(write not in held[task_id] for write in writes):
                    report.change(thread_id, f"{where} task {task_id}",
                                  "the target holds other pending writes for this task: left as they are")
                continue
            size = sum(len(serde.dumps_typed(value)[1]) for _, value in writes)
            if report.dry_run:
                report.writes += 1
                report.bytes += size
                continue
            config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}
            path = task_paths.get((thread_id, ns, cid, task_id), "")
            try:
                if isinstance(target, _ImportSaver):
                    target.put_writes_at(config, writes, task_id, path, ts_ms(item.checkpoint))
                else:
                    target.put_writes(config, writes, task_id, path)  # type: ignore[arg-type]
            except berth.BerthError as error:
                report.skip(thread_id, f"{where} task {task_id}",
                            f"the target cannot hold these pending writes: {type(error).__name__}: {error}")
                continue
            report.writes += 1
            report.bytes += size


def _task_paths(copy: str) -> dict[tuple[str, str, str, str], str]:
    """(thread, ns, checkpoint, task) -> task_path: the column `SqliteSaver`'s reader
    sorts by but does not return (a plain SELECT; empty for files from before it)."""
    conn = sqlite3.connect(copy)
    try:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(writes)")}
        if "task_path" not in columns:
            return {}
        rows = conn.execute("SELECT DISTINCT thread_id, checkpoint_ns, checkpoint_id, task_id, task_path FROM writes")
        return {(str(t), str(ns), str(c), str(task)): str(path) for t, ns, c, task, path in rows}
    finally:
        conn.close()


def import_store(path: str, client: berth.Client, report: Report, users: owners.UserMap | None = None) -> None:
    with tempfile.TemporaryDirectory(prefix="berth-migrate-") as scratch:
        copy = snapshot(path, scratch)
        conn = sqlite3.connect(copy, check_same_thread=False)
        try:
            source = SqliteSaver(conn)
            items = list(source.list(None))
            paths = _task_paths(copy)
            with _ImportSaver(client) as target:
                copy_threads(items, target, report, paths, users)
        finally:
            conn.close()


def _postgres_tables(conn: Any) -> bool:
    """Whether the database holds `PostgresSaver`'s tables (an empty one holds nothing)."""
    row = conn.execute("SELECT to_regclass('checkpoints') IS NOT NULL AS found").fetchone()
    return bool(row["found"])


def _postgres_task_paths(conn: Any) -> dict[tuple[str, str, str, str], str]:
    """(thread, ns, checkpoint, task) -> task_path, as `_task_paths`, from
    `checkpoint_writes` (the column `PostgresSaver`'s migrations add)."""
    found = conn.execute("SELECT 1 FROM information_schema.columns WHERE table_name = 'checkpoint_writes' "
                         "AND column_name = 'task_path' AND table_schema = current_schema()").fetchone()
    if found is None:
        return {}
    rows = conn.execute("SELECT DISTINCT thread_id, checkpoint_ns, checkpoint_id, task_id, task_path "
                        "FROM checkpoint_writes").fetchall()
    return {(str(r["thread_id"]), str(r["checkpoint_ns"]), str(r["checkpoint_id"]), str(r["task_id"])):
            str(r["task_path"]) for r in rows}


def import_postgres(url: str, client: berth.Client, report: Report, users: owners.UserMap | None = None) -> None:
    """`PostgresSaver` at `url` into berth: one read-only REPEATABLE READ transaction."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import Connection, IsolationLevel
    from psycopg.rows import dict_row

    with Connection.connect(url, autocommit=False, prepare_threshold=0, row_factory=dict_row) as conn:
        conn.read_only = True
        conn.isolation_level = IsolationLevel.REPEATABLE_READ
        try:
            items = list(PostgresSaver(conn).list(None)) if _postgres_tables(conn) else []
            paths = _postgres_task_paths(conn) if items else {}
        finally:
            conn.rollback()
    with _ImportSaver(client) as target:
        copy_threads(items, target, report, paths, users)


def export_postgres(client: berth.Client, url: str, report: Report) -> None:
    """berth into `PostgresSaver` at `url` (its tables made first; a dry run makes
    nothing and compares with what the database holds, if anything)."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.postgres import PostgresSaver

    with BerthSaver(client) as source:
        items = list(source.list(None))
    with PostgresSaver.from_conn_string(url) as saver:
        if not report.dry_run:
            saver.setup()
        elif not _postgres_tables(saver.conn):
            copy_threads(items, InMemorySaver(), report, {})
            return
        copy_threads(items, saver, report, {})


def export_store(client: berth.Client, path: str, report: Report) -> None:
    with BerthSaver(client) as source:
        items = list(source.list(None))
    if report.dry_run and not os.path.exists(path):  # a dry run makes no file
        from langgraph.checkpoint.memory import InMemorySaver

        copy_threads(items, InMemorySaver(), report, {})
        return
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        copy_threads(items, SqliteSaver(conn), report, {})
    finally:
        conn.close()
