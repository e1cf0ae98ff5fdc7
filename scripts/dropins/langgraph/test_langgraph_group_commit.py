"""Group commit in BerthSaver and AsyncBerthSaver, on both transports: calls that wait
while another is being written share one durable append, each still failing alone (a
refused batch, a failing build) and a group stored only where its builds assumed the
log ends."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

import berth
from berth.integrations.langgraph import AsyncBerthSaver, BerthSaver, thread_session_id

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import lg_graph  # noqa: E402


def _writes_config(thread: str, checkpoint_id: str) -> dict:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}}


class _Appends:
    """Counts a client's appends (each one durable write)."""

    def __init__(self, client: berth.Client) -> None:
        self.count = 0
        inner = client._execute

        def counted(call: Any) -> Any:
            if call.is_append:
                self.count += 1
            return inner(call)

        client._execute = counted  # type: ignore[method-assign]


def _queued(saver: BerthSaver, thread: str, calls: list[Any]) -> list[BaseException | None]:
    """Runs `calls` (each a function of the saver) on threads while this thread holds the
    saver's lock, until all of them wait to be written, then lets go: they are written
    as one group. Returns what each raised (None: returned)."""
    import threading

    outcomes: list[BaseException | None] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            calls[index](saver)
        except BaseException as error:  # noqa: BLE001 - reported to the test
            outcomes[index] = error

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(calls))]
    with saver._core.lock:
        for thread_ in threads:
            thread_.start()
        deadline = time.monotonic() + 10
        while len(saver._waiting.get(thread, [])) < len(calls):
            assert time.monotonic() < deadline, "the calls never queued"
            time.sleep(0.001)
    for thread_ in threads:
        thread_.join()
    return outcomes


def test_concurrent_calls_share_one_durable_append(lg_place: Any) -> None:
    """Calls that wait while another is being written are written together, in one
    append (group commit), and the log holds what they would have stored one by one:
    a fresh saver reads every write once and the checkpoint after them."""
    client = lg_place.sync_client()
    with BerthSaver(client) as saver:
        first = lg_graph.put_list(saver, "grouped", [1], None)
        appends = _Appends(client)
        calls: list[Any] = [
            (lambda index: lambda s: s.put_writes(_writes_config("grouped", first), [(f"c{index}", index)],
                                                  f"task-{index}"))(index)
            for index in range(6)
        ]
        calls.append(lambda s: lg_graph.put_list(s, "grouped", [1, 2], first))
        assert _queued(saver, "grouped", calls) == [None] * 7
        assert appends.count == 1
        # Idempotent per task and index, in a group as alone: the same writes again store nothing.
        before = client.get_session(thread_session_id("grouped")).event_count
        assert _queued(saver, "grouped", calls[:3]) == [None] * 3
        assert client.get_session(thread_session_id("grouped")).event_count == before
    with BerthSaver(client) as fresh:
        tuple_ = fresh.get_tuple(_writes_config("grouped", first))
        assert sorted(tuple_.pending_writes) == sorted((f"task-{i}", f"c{i}", i) for i in range(6))
        latest = fresh.get_tuple({"configurable": {"thread_id": "grouped"}})
        assert latest.checkpoint["channel_values"]["items"] == [1, 2]
        assert latest.parent_config["configurable"]["checkpoint_id"] == first


def test_a_refused_batch_in_a_group_fails_alone(lg_place: Any) -> None:
    """A group whose batch is refused (one call's writes are over the batch limit) is
    written one call at a time: that call gets `LimitExceeded`, the others are stored."""
    client = lg_place.sync_client()
    with BerthSaver(client) as saver:
        first = lg_graph.put_list(saver, "refused", [1], None)
        calls: list[Any] = [
            lambda s: s.put_writes(_writes_config("refused", first), [("small", 1)], "task-a"),
            lambda s: s.put_writes(_writes_config("refused", first), [("huge", os.urandom(9 << 20))], "task-b"),
            lambda s: s.put_writes(_writes_config("refused", first), [("small", 3)], "task-c"),
        ]
        outcomes = _queued(saver, "refused", calls)
        assert outcomes[0] is None and outcomes[2] is None
        assert isinstance(outcomes[1], berth.LimitExceeded) and outcomes[1].limit_name == "batch_bytes"
    with BerthSaver(client) as fresh:
        writes = fresh.get_tuple(_writes_config("refused", first)).pending_writes
        assert sorted(writes) == [("task-a", "small", 1), ("task-c", "small", 3)]


def _put_list_as(saver: BerthSaver, thread: str, items: list[int], parent: str, checkpoint_id: str) -> None:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = checkpoint_id
    version = saver.get_next_version(len(items), None)
    checkpoint["channel_values"] = {"items": list(items)}
    checkpoint["channel_versions"] = {"items": version}
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": parent}}
    saver.put(config, checkpoint, {"step": len(items)}, {"items": version})


def test_a_group_is_stored_only_where_its_builds_assumed(lg_place: Any) -> None:
    """A later build in a group refers to the seqs of the batches before it (here the
    second checkpoint's list is a suffix of the first's), so a group is an append at
    the log's end its saver folded (`expected_seq`): after another saver appended to the
    thread, the group is refused, nothing stored, and written again one call at a time
    from a fresh read — both checkpoints read back whole."""
    client = lg_place.sync_client()
    with BerthSaver(client) as saver, BerthSaver(client) as other:
        first = lg_graph.put_list(saver, "moved", [1], None)
        other.put_writes(_writes_config("moved", first), [("theirs", 0)], "task-other")
        appends = _Appends(client)
        a = empty_checkpoint()["id"]
        b = empty_checkpoint()["id"]
        assert a < b
        calls: list[Any] = [
            lambda s: _put_list_as(s, "moved", [1, 2], first, a),
            lambda s: _put_list_as(s, "moved", [1, 2, 3], a, b),
        ]
        assert _queued(saver, "moved", calls) == [None, None]
        assert appends.count == 3  # the refused group, then each call alone
    with BerthSaver(client) as fresh:
        for checkpoint_id, items in ((a, [1, 2]), (b, [1, 2, 3])):
            found = fresh.get_tuple(_writes_config("moved", checkpoint_id))
            assert found.checkpoint["channel_values"]["items"] == items
        assert fresh.get_tuple(_writes_config("moved", first)).pending_writes == [("task-other", "theirs", 0)]
    with BerthSaver(client) as cold:  # the latest, read from the tail and point reads
        assert cold.get_tuple({"configurable": {"thread_id": "moved"}}).checkpoint["channel_values"]["items"] == [1, 2, 3]


def test_a_failing_build_in_a_group_fails_alone(lg_place: Any) -> None:
    """A checkpoint whose list holds an object the serializer refuses fails in its
    group's build, before anything is sent: that `put` raises the serializer's error,
    and the writes queued with it are stored."""
    import threading

    client = lg_place.sync_client()
    with BerthSaver(client) as saver:
        first = lg_graph.put_list(saver, "unserializable", [1], None)
        calls: list[Any] = [
            lambda s: s.put_writes(_writes_config("unserializable", first), [("ok", 1)], "task-a"),
            lambda s: lg_graph.put_list(s, "unserializable", [1, threading.Lock()], first),
        ]
        outcomes = _queued(saver, "unserializable", calls)
        assert outcomes[0] is None
        assert isinstance(outcomes[1], TypeError)
    with BerthSaver(client) as fresh:
        assert fresh.get_tuple(_writes_config("unserializable", first)).pending_writes == [("task-a", "ok", 1)]
        latest = fresh.get_tuple({"configurable": {"thread_id": "unserializable"}})
        assert latest.config["configurable"]["checkpoint_id"] == first


async def test_async_saver_groups_concurrent_calls(lg_place: Any) -> None:
    """`AsyncBerthSaver` groups the same way on the event loop: six `aput_writes` and
    an `aput` gathered are one append, and a fresh saver reads all of them."""
    import asyncio

    client = lg_place.async_client()
    async with AsyncBerthSaver(client) as saver:
        checkpoint = empty_checkpoint()
        version = saver.get_next_version(1, None)
        checkpoint["channel_values"] = {"items": [1]}
        checkpoint["channel_versions"] = {"items": version}
        stored = await saver.aput({"configurable": {"thread_id": "agrouped", "checkpoint_ns": ""}}, checkpoint,
                                  {"step": 1}, {"items": version})
        first = stored["configurable"]["checkpoint_id"]
        appends = 0
        inner = client._execute

        async def counted(call: Any) -> Any:
            nonlocal appends
            appends += call.is_append
            return await inner(call)

        client._execute = counted  # type: ignore[method-assign]
        second = empty_checkpoint()
        version2 = saver.get_next_version(2, None)
        second["channel_values"] = {"items": [1, 2]}
        second["channel_versions"] = {"items": version2}
        await asyncio.gather(
            *(saver.aput_writes(_writes_config("agrouped", first), [(f"c{i}", i)], f"task-{i}") for i in range(6)),
            saver.aput(_writes_config("agrouped", first), second, {"step": 2}, {"items": version2}),
        )
        assert appends == 1
    async with AsyncBerthSaver(client) as fresh:
        found = await fresh.aget_tuple(_writes_config("agrouped", first))
        assert sorted(found.pending_writes) == sorted((f"task-{i}", f"c{i}", i) for i in range(6))
        latest = await fresh.aget_tuple({"configurable": {"thread_id": "agrouped"}})
        assert latest.checkpoint["channel_values"]["items"] == [1, 2]
