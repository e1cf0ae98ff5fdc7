"""BerthSaver and AsyncBerthSaver beyond the conformance package, on both transports:
a real `StateGraph` interrupted in one process and resumed in another; storage that grows
with the new messages only; blobs over the event and batch limits; one run per saver
(heartbeated, released on close); single-writer mode; ids berth's grammar refuses; the
copy `StateGraph.compile` makes under `LANGGRAPH_STRICT_MSGPACK` (`with_allowlist`)
loading the state's types as `InMemorySaver` does, on the saver's one run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.types import Command

import berth
from berth.integrations.langgraph import LABEL, AsyncBerthSaver, BerthSaver, ModeMismatch, thread_session_id

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import lg_graph  # noqa: E402


def _events(client: berth.Client, session_id: str) -> list[berth.Event]:
    return list(client.iter_events(session_id))


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_interrupt_resumed_by_another_process(lg_place: Any, mode: str) -> None:
    thread = f"graph-{mode}"
    child = subprocess.run([sys.executable, str(HERE / "lg_graph.py"), mode, *lg_place.child_args(), thread],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-3000:]
    assert "interrupted ['a']" in child.stdout
    config = {"configurable": {"thread_id": thread}}
    if mode == "sync":
        client = lg_place.sync_client()
        with BerthSaver(client) as saver:
            graph = lg_graph.build(saver)
            assert graph.get_state(config).next == ("ask",)
            result = graph.invoke(Command(resume="yes"), config)
            history = list(graph.get_state_history(config))
    else:
        async_client = lg_place.async_client()
        async with AsyncBerthSaver(async_client) as saver:
            graph = lg_graph.build(saver)
            assert (await graph.aget_state(config)).next == ("ask",)
            result = await graph.ainvoke(Command(resume="yes"), config)
            history = [snapshot async for snapshot in graph.aget_state_history(config)]
        await async_client.close()
        client = lg_place.sync_client()
    assert result["trail"] == ["a", "human:yes", "b"]
    assert [m.content for m in result["messages"]] == ["hi", "a ran", "yes", "b ran"]
    assert len(history) == 5
    # The swap took effect: the thread is a berth session written by two runs (two processes).
    session = client.get_session(thread)
    assert LABEL in session.labels and session.title == thread and not session.runs
    runs = {event.run for event in _events(client, thread) if event.type.startswith("lg/")}
    assert len(runs) == 2, runs


def test_storage_grows_with_new_messages_only(lg_place: Any) -> None:
    client = lg_place.sync_client()
    steps = 120
    padding = "x" * 2000  # each message is ~2 kB: a full copy per step would be quadratic
    config = {"configurable": {"thread_id": "long"}}
    marks = {}
    with BerthSaver(client) as saver:
        graph = lg_graph.build(saver)
        graph.invoke({"messages": [HumanMessage(content="start")], "trail": []}, config)
        for step in range(steps):
            graph.update_state(config, {"messages": [HumanMessage(content=f"{step} {padding}")]})
            if step + 1 in (40, 80, 120):
                marks[step + 1] = client.get_session("long").event_count
    events = _events(client, "long")
    sizes = [len(berth._calls.dumps(event.data)) for event in events]
    message_bytes = steps * 2050
    # Linear: every step adds the same bytes, however long the list already is (a full
    # copy per step would make steps 80-120 cost 1.6x steps 40-80, and the total ~60x).
    middle, last = sum(sizes[marks[40]:marks[80]]), sum(sizes[marks[80]:marks[120]])
    assert last < 1.1 * middle, (middle, last)
    # The record holds the message twice per step (LangGraph's pending write and the
    # channel's suffix), base64: about 3x its size, never a copy of the list; the
    # vocabulary once more, as its text (`user/message`).
    record = sum(size for event, size in zip(events, sizes) if event.type.startswith("lg/"))
    vocabulary = sum(size for event, size in zip(events, sizes) if not event.type.startswith("lg/"))
    assert record < 4 * message_bytes, (record, message_bytes)
    assert message_bytes < vocabulary < 1.1 * message_bytes, (vocabulary, message_bytes)
    assert sum(1 for event in events if event.type == "user/message") == steps + 1
    deltas = [e for e in events if e.type == "lg/blob" and e.data.get("c") == "messages" and "base" in e.data]
    assert len(deltas) >= steps, len(deltas)
    assert all(len(e.data["items"]) == 1 for e in deltas[-steps:])
    # A fresh saver (nothing cached) rebuilds the whole list from the suffixes.
    with BerthSaver(lg_place.sync_client()) as fresh:
        state = lg_graph.build(fresh).get_state(config)
    contents = [m.content for m in state.values["messages"]]
    assert contents[0] == "start" and contents[-1] == f"{steps - 1} {padding}" and len(contents) == steps + 2


def _put_value(saver: BerthSaver, thread: str, value: Any) -> dict:
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(None, None)
    checkpoint["channel_values"] = {"big": value}
    checkpoint["channel_versions"] = {"big": version}
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    return saver.put(config, checkpoint, {"source": "input", "step": 1}, {"big": version})


def test_large_blobs_split_and_over_limit_refused(lg_place: Any) -> None:
    client = lg_place.sync_client()
    with BerthSaver(client) as saver:
        large = os.urandom(3 << 20)  # over the 1 MiB event limit: split across one batch
        stored = _put_value(saver, "big", large)
        assert saver.get_tuple(stored).checkpoint["channel_values"]["big"] == large
        before = client.get_session("big").event_count
        with pytest.raises(berth.LimitExceeded) as refused:
            _put_value(saver, "big", os.urandom(9 << 20))
        assert refused.value.limit_name == "batch_bytes"
        assert client.get_session("big").event_count == before  # nothing stored
        assert saver.get_tuple({"configurable": {"thread_id": "big"}}).checkpoint["channel_values"]["big"] == large


def test_one_run_per_saver_heartbeated_and_released(lg_place: Any) -> None:
    client = lg_place.sync_client()
    saver = BerthSaver(client, run_lease_ttl_ms=1_000)
    _put_value(saver, "runs-1", "v")
    _put_value(saver, "runs-2", "v")
    time.sleep(2.5)  # well past the lease: the background heartbeat keeps the run
    for thread in ("runs-1", "runs-2"):
        assert [run.run_id for run in client.get_session(thread).runs] == [saver.run_id]
    _put_value(saver, "runs-1", "w")  # later writes reuse the same run
    saver.close()
    assert not client.get_session("runs-1").runs and not client.get_session("runs-2").runs
    writers = {event.run for event in _events(client, "runs-1")}
    assert writers == {saver.run_id}
    policy = client.get_session("runs-1").header.policy
    assert policy.concurrency["mode"] == "parallel" and policy.activity_ttl_ms >= 365 * 24 * 3600 * 1000


def test_exclusive_second_writer_is_busy(lg_place: Any) -> None:
    client = lg_place.sync_client()
    first = BerthSaver(client, exclusive=True)
    second = BerthSaver(lg_place.sync_client(), exclusive=True)
    _put_value(first, "solo", "one")
    with pytest.raises(berth.Busy):
        _put_value(second, "solo", "two")
    with pytest.raises(ModeMismatch):
        _put_value(BerthSaver(client), "solo", "three")  # a shared saver on an exclusive thread
    first.close()
    _put_value(second, "solo", "two")  # released: the next writer may take it
    second.close()
    assert client.get_session("solo").header.policy.concurrency["mode"] == "serial"
    shared_a, shared_b = BerthSaver(client), BerthSaver(lg_place.sync_client())
    _put_value(shared_a, "shared", "a")
    _put_value(shared_b, "shared", "b")  # parallel by default: both write
    assert len(client.get_session("shared").runs) == 2
    shared_a.close()
    shared_b.close()


def test_exclusive_holder_displaced_gets_ownership_lost(lg_place: Any) -> None:
    client = lg_place.sync_client()
    holder = BerthSaver(client, exclusive=True, run_lease_ttl_ms=600)
    _put_value(holder, "held", "one")
    client.detach("held", holder.run_id)  # an operator (or a lapsed lease) ends its run
    time.sleep(0.6)  # a heartbeat finds the run gone, or the next append does
    with pytest.raises(berth.OwnershipLost):
        _put_value(holder, "held", "two")
    intruder = BerthSaver(lg_place.sync_client(), exclusive=True)
    _put_value(intruder, "held", "three")  # the thread is free for the next writer
    with pytest.raises(berth.Busy):
        _put_value(holder, "held", "four")  # and the old holder does not get it back
    intruder.close()
    holder.close()


def test_crashed_exclusive_writer_lapses(lg_place: Any) -> None:
    code = (
        "import sys, time; sys.path.insert(0, sys.argv[1]); import lg_graph\n"
        "from berth.integrations.langgraph import BerthSaver\n"
        "from langgraph.checkpoint.base import empty_checkpoint\n"
        "client = lg_graph.sync_client(*sys.argv[2:5])\n"
        "saver = BerthSaver(client, exclusive=True, run_lease_ttl_ms=1000)\n"
        "cp = empty_checkpoint()\n"
        "saver.put({'configurable': {'thread_id': 'crash', 'checkpoint_ns': ''}}, cp, {}, {})\n"
        "print('wrote', flush=True); time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(HERE), *lg_place.child_args()],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "wrote"
        child.send_signal(signal.SIGKILL)
        child.wait()
        saver = BerthSaver(lg_place.sync_client(), exclusive=True, run_lease_ttl_ms=1000)
        deadline = time.monotonic() + 20
        busy = 0
        while True:
            try:
                _put_value(saver, "crash", "after")
                break
            except berth.Busy:
                busy += 1
                assert time.monotonic() < deadline, "the dead writer's run never lapsed"
                time.sleep(0.25)
        assert busy >= 1  # the crashed holder kept the thread until its lease lapsed
        saver.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_ids_berth_refuses_are_encoded_and_listed_back(lg_place: Any) -> None:
    client = lg_place.sync_client()
    odd = ["with space/and slash", "ünïcode", "~tilde", "x" * 300, ".", "..", "plain-id"]
    with BerthSaver(client) as unprefixed:
        for thread in odd:
            _put_value(unprefixed, thread, thread)
        assert {t.config["configurable"]["thread_id"] for t in unprefixed.list(None)} == set(odd)
        assert client.get_session("plain-id").title == "plain-id"  # safe ids pass through unchanged
    with BerthSaver(client, prefix="app1-") as saver:
        for thread in odd:
            _put_value(saver, thread, thread)
        listed = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
        assert listed == set(odd)
        for thread in odd:
            session = client.get_session(thread_session_id(thread, "app1-"))
            assert session.title == thread and LABEL in session.labels
            found = saver.get_tuple({"configurable": {"thread_id": thread}})
            assert found.checkpoint["channel_values"]["big"] == thread
    with BerthSaver(client, prefix="app2-") as other:
        assert list(other.list(None)) == []  # another prefix sees none of them


def test_user_role_key_writes_through_its_run(lg_place: Any) -> None:
    """A `user` key may append only through an attached run, which every saver has."""
    if lg_place.transport == "http":
        client = berth.Client(lg_place.server.url, api_key=lg_place.server.key(lg_place.tenant, "alice", "user"))
    else:
        client = berth.open(lg_place.store, tenant=lg_place.tenant, user="alice", role="user")
    lg_place.clients.append(client)
    config = {"configurable": {"thread_id": "user-thread"}}
    with BerthSaver(client) as saver:
        graph = lg_graph.build(saver)
        graph.invoke({"messages": [HumanMessage(content="hi")], "trail": []}, config)
        result = graph.invoke(Command(resume="ok"), config)
    assert result["trail"] == ["a", "human:ok", "b"]
    assert client.get_session("user-thread").header.scope.user == "alice"


def test_copy_thread_is_a_fork_with_deltas_intact(lg_place: Any) -> None:
    client = lg_place.sync_client()
    config = {"configurable": {"thread_id": "src"}}
    with BerthSaver(client) as saver:
        graph = lg_graph.build(saver)
        graph.invoke({"messages": [HumanMessage(content="hi")], "trail": []}, config)
        graph.invoke(Command(resume="ok"), config)
        saver.copy_thread("src", "dst")
        copied = graph.get_state({"configurable": {"thread_id": "dst"}})
        original = graph.get_state(config)
    assert [m.content for m in copied.values["messages"]] == [m.content for m in original.values["messages"]]
    assert client.get_session("dst").title == "dst"
    assert client.get_session("dst").header.parent is not None



@pytest.mark.parametrize("recreated", [False, True])
def test_write_after_another_saver_deleted_the_thread(lg_place: Any, recreated: bool) -> None:
    """A saver's cached fold goes stale when another saver deletes (and perhaps
    re-creates) the thread: its next write is rebuilt from a fresh read, never a delta
    onto a log that no longer exists."""
    client = lg_place.sync_client()
    with BerthSaver(client) as writer, BerthSaver(lg_place.sync_client()) as other:
        first = lg_graph.put_list(writer, "stale", [1], None)
        second = lg_graph.put_list(writer, "stale", [1, 2], first)
        stale_cache = writer._core.threads[thread_session_id("stale")]
        other.delete_thread("stale")
        if recreated:
            lg_graph.put_list(other, "stale", [9], None)
            lg_graph.put_list(other, "stale", [9, 9], None)
            # A read from the stale saver sees the new log only, not the old one extended.
            seen = [t.checkpoint["channel_values"]["items"] for t in writer.list({"configurable": {"thread_id": "stale"}})]
            assert sorted(seen) == [[9], [9, 9]], seen
            writer._core.threads.clear()  # its write below must be rebuilt on its own, from the cache it had
            writer._core.threads[thread_session_id("stale")] = stale_cache
        lg_graph.put_list(writer, "stale", [1, 2, 3], second)
    with BerthSaver(lg_place.sync_client()) as fresh:
        latest = fresh.get_tuple({"configurable": {"thread_id": "stale"}})
    assert latest.checkpoint["channel_values"]["items"] == [1, 2, 3]
    blobs = [e for e in _events(client, "stale") if e.type == "lg/blob"]
    assert "base" not in blobs[-1].data and len(blobs[-1].data["items"]) == 3  # stored whole, not a delta


def _put_channels(saver: BerthSaver, thread: str, items: list[int], parent: str | None, big: tuple[str, bytes],
                  run_id: str | None = None, checkpoint_id: str | None = None) -> str:
    """A checkpoint of `items` (a new version each time, a suffix of the last) and `big`
    (a 3 MiB value stored once, then named by `at`)."""
    checkpoint = empty_checkpoint()
    if checkpoint_id is not None:
        checkpoint["id"] = checkpoint_id
    version = saver.get_next_version(len(items), None)
    checkpoint["channel_values"] = {"items": list(items), "big": big[1]}
    checkpoint["channel_versions"] = {"items": version, "big": big[0]}
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if parent:
        config["configurable"]["checkpoint_id"] = parent
    new_versions = {"items": version}
    if parent is None:
        new_versions["big"] = big[0]
    metadata = {"step": len(items), **({"run_id": run_id} if run_id else {})}
    return saver.put(config, checkpoint, metadata, new_versions)["configurable"]["checkpoint_id"]


class _Recorder:
    """Wraps a client's `_execute`: the paths it sent and the events its reads answered."""

    def __init__(self, client: berth.Client) -> None:
        self.paths: list[str] = []
        self.events: list[berth.Event] = []
        inner = client._execute

        def record(call: Any) -> Any:
            self.paths.append(call.path)
            answer = inner(call)
            self.events.extend(getattr(answer, "events", None) or [])
            return answer

        client._execute = record  # type: ignore[method-assign]


def test_cold_get_tuple_reads_the_tail_and_point_reads(lg_place: Any) -> None:
    """A fresh saver's `get_tuple` of the latest checkpoint reads the tail backwards and
    point-reads (`?seqs=`) the versions `at` names and their suffix chains (three
    anchors deep here), never the whole log, and answers what the fold answers; when a
    later marker hides the latest checkpoint it falls back to the fold."""
    client = lg_place.sync_client()
    big = ("00000000000000000000000000000001.0", os.urandom(3 << 20))
    steps = 200  # anchors at 64, 128 and 192
    with BerthSaver(client) as writer:
        parent = None
        for step in range(steps):
            parent = _put_channels(writer, "points", list(range(step + 1)), parent, big, run_id=f"run-{step}")
            if step % 7 == 0:
                writer.put_writes({"configurable": {"thread_id": "points", "checkpoint_ns": "",
                                                    "checkpoint_id": parent}}, [("items", step)], f"task-{step}")
        writer.put_writes({"configurable": {"thread_id": "points", "checkpoint_ns": "", "checkpoint_id": parent}},
                          [("items", "last")], "task-last")
        folded = writer.get_tuple({"configurable": {"thread_id": "points"}})  # the writer's cached fold
    total = client.get_session("points").event_count
    reader_client = lg_place.sync_client()
    recorder = _Recorder(reader_client)
    with BerthSaver(reader_client) as fresh:
        cold = fresh.get_tuple({"configurable": {"thread_id": "points"}})
        assert fresh._core.threads == {}  # nothing folded, nothing cached
    assert cold == folded
    assert cold.checkpoint["channel_values"]["items"] == list(range(steps))
    assert cold.checkpoint["channel_values"]["big"] == big[1]
    assert cold.pending_writes == [("task-last", "items", "last")]
    assert any("seqs=" in path for path in recorder.paths), recorder.paths
    assert not any("from=" in path and "before=" not in path for path in recorder.paths), recorder.paths
    assert len(recorder.paths) <= 8, recorder.paths
    # The tail's first page, the chain's links and the big value's parts: not the
    # checkpoints and writes of the 199 earlier steps.
    checkpoints_read = sum(1 for event in recorder.events if event.type == "lg/checkpoint")
    assert checkpoints_read <= 32 and len(recorder.events) <= 64 + steps + 4, (checkpoints_read, len(recorder.events))
    assert total > 2 * steps

    # The same latest checkpoint, asked by id, is answered the same way; another id is folded.
    assert fresh.get_tuple(cold.config) == folded
    older = fresh.get_tuple(cold.parent_config)
    assert older is not None and older.checkpoint["channel_values"]["items"] == list(range(steps - 1))

    # A checkpoint with an older id stored after the latest does not change the answer.
    with BerthSaver(lg_place.sync_client()) as writer:
        _put_channels(writer, "points", [7], None, big, checkpoint_id="00000000-0000-0000-0000-000000000001")
    with BerthSaver(lg_place.sync_client()) as fresh:
        assert fresh.get_tuple({"configurable": {"thread_id": "points"}}) == folded
    # A marker hiding the latest: the answer is the previous checkpoint, as the fold says.
    with BerthSaver(lg_place.sync_client()) as writer:
        writer.delete_for_runs([f"run-{steps - 1}"])
        expected = writer.get_tuple({"configurable": {"thread_id": "points"}})
    assert expected.checkpoint["channel_values"]["items"] == list(range(steps - 1))
    reader_client = lg_place.sync_client()
    recorder = _Recorder(reader_client)
    with BerthSaver(reader_client) as fresh:
        assert fresh.get_tuple({"configurable": {"thread_id": "points"}}) == expected
    assert any("from=" in path and "before=" not in path for path in recorder.paths)  # the fold


def test_a_message_changed_in_place_is_stored_as_changed(lg_place: Any) -> None:
    """The saver recognizes the stored prefix of a list by identity, so it serializes
    only new items — but an item changed in place since (a field set again) is seen by
    its snapshot, and the list is then compared by value and stored right."""
    client = lg_place.sync_client()
    first, second = HumanMessage(content="one"), HumanMessage(content="two")
    with BerthSaver(client) as saver:
        parent = lg_graph.put_list(saver, "mutated", [first], None)
        parent = lg_graph.put_list(saver, "mutated", [first, second], parent)
        first.content = "one, edited"
        lg_graph.put_list(saver, "mutated", [first, second, HumanMessage(content="three")], parent)
    with BerthSaver(lg_place.sync_client()) as fresh:
        latest = fresh.get_tuple({"configurable": {"thread_id": "mutated"}})
    assert [m.content for m in latest.checkpoint["channel_values"]["items"]] == ["one, edited", "two", "three"]
    blobs = [e for e in _events(client, "mutated") if e.type == "lg/blob"]
    assert "base" in blobs[1].data and len(blobs[1].data["items"]) == 1  # a suffix while nothing changed
    assert "base" not in blobs[2].data and len(blobs[2].data["items"]) == 3  # stored whole once it did


def test_strict_msgpack_allowlist_as_in_memory_saver(lg_place: Any) -> None:
    """Under `LANGGRAPH_STRICT_MSGPACK=true` a state holding a Pydantic model comes back as
    the model from `get_state`, as `InMemorySaver` gives it: `StateGraph.compile`'s
    `with_allowlist` copy loads with its own serde (which allows the state's types),
    while the saver it was made from still loads strictly (a `dict`)."""
    child = subprocess.run([sys.executable, str(HERE / "lg_strict.py"), *lg_place.child_args(), "strict"],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "LANGGRAPH_STRICT_MSGPACK": "true"})
    assert child.returncode == 0, child.stderr[-3000:]
    found = json.loads(child.stdout.strip().splitlines()[-1])
    expected = {"graph": "Item", "graph_value": {"name": "x", "count": 2}, "saver": "dict", "copied": True}
    assert found["memory"] == expected  # the reference: strict mode and the copy are in effect
    assert found["berth-sync"] == expected
    assert found["berth-async"] == expected


def _strict_serde() -> Any:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return JsonPlusSerializer(allowed_msgpack_modules=None)  # what LANGGRAPH_STRICT_MSGPACK=true makes


def test_allowlist_copy_has_its_own_serde_and_shares_the_run(lg_place: Any) -> None:
    """The copy `with_allowlist` makes writes through the same run as its saver — an
    exclusive thread takes no second attachment, which would be `Busy` — and `close()` on
    the saver releases it; the copy attaches (and heartbeats) again on its next write."""
    client = lg_place.sync_client()
    saver = BerthSaver(client, serde=_strict_serde(), exclusive=True, run_lease_ttl_ms=1_000)
    copy = saver.with_allowlist([("lg_strict", "Item")])
    assert copy is not saver and copy.serde is not saver.serde
    assert copy._core.serde is copy.serde and saver._core.serde is saver.serde
    assert copy.run_id == saver.run_id
    _put_value(copy, "shared-run", "by the copy")
    _put_value(saver, "shared-run", "by the saver")  # no Busy: one run
    time.sleep(2.5)  # past the lease: one heartbeat keeps the one run
    _put_value(copy, "shared-run", "again")
    assert [run.run_id for run in client.get_session("shared-run").runs] == [saver.run_id]
    assert {event.run for event in _events(client, "shared-run")} == {saver.run_id}
    saver.close()
    assert client.get_session("shared-run").runs == []
    assert copy._attachment.beat is None
    _put_value(copy, "shared-run", "after close")
    assert [run.run_id for run in client.get_session("shared-run").runs] == [saver.run_id]
    assert copy._attachment.beat is not None and saver._attachment.beat is copy._attachment.beat
    copy.close()
    assert client.get_session("shared-run").runs == []


async def test_async_allowlist_copy_has_its_own_serde_and_shares_the_run(lg_place: Any) -> None:
    client = lg_place.async_client()
    saver = AsyncBerthSaver(client, serde=_strict_serde(), exclusive=True)
    copy = saver.with_allowlist([("lg_strict", "Item")])
    assert copy is not saver and copy._core.serde is copy.serde and saver._core.serde is saver.serde
    for writer, value in ((copy, "by the copy"), (saver, "by the saver")):
        checkpoint = empty_checkpoint()
        version = writer.get_next_version(None, None)
        checkpoint["channel_values"] = {"v": value}
        checkpoint["channel_versions"] = {"v": version}
        await writer.aput({"configurable": {"thread_id": "ashared", "checkpoint_ns": ""}}, checkpoint,
                          {"step": 1}, {"v": version})  # no Busy: one run
    sync_client = lg_place.sync_client()
    assert [run.run_id for run in sync_client.get_session("ashared").runs] == [saver.run_id]
    await saver.aclose()
    assert sync_client.get_session("ashared").runs == []
    assert copy._attachment.beat is None
    await client.close()
