"""BerthSession beyond the SDK's own tests: the vocabulary it writes, reads backwards,
claims that race across processes, single-writer mode, runs, ids, roles, calls after
`close()` (as `SQLiteSession`'s) — on a real `berth serve` and on the embedded store."""

from __future__ import annotations

import asyncio
import gc
import json
import random
import subprocess
import time
from typing import Any
from urllib.parse import parse_qsl

import pytest

import berth
from berth.integrations.openai_agents import (
    ACTIVITY_TTL_MS_FOREVER,
    ITEM_MARK,
    LABEL,
    POP_VIEW_ITEMS,
    PROBE_EVENTS,
    BerthSession,
    SessionClosed,
    SessionModeMismatch,
    decode_session_id,
    encode_session_id,
)
from conftest import Place, python_child

from .conftest import CONNECT, child_connection

ITEMS: list[Any] = [
    {"role": "user", "content": "what is 2+2?"},
    {"type": "function_call", "call_id": "call-1", "name": "add", "arguments": '{"a":2,"b":2}', "id": "fc_1"},
    {"type": "function_call_output", "call_id": "call-1", "output": "4"},
    {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": "4", "annotations": []}]},
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {"role": "system", "content": "be brief"},
]


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


MARKERS = ("turn/start", "turn/end", "step/start", "step/end")


def item_events(events: list[berth.Event]) -> list[berth.Event]:
    """The events that store items: without the turn and step markers around them."""
    return [event for event in events if event.type not in MARKERS]


def count_backward_reads(client: berth.Client, reads: list[tuple[int, int | None]]) -> None:
    """Records `(before, limit)` of every backward read of events `client` sends (through
    `read_before` or as its call: `BerthSession` reads pages with their raw answers),
    blocking or awaited on the loop (`_aexecute`, the embedded store's path)."""
    original, original_async = client._execute, client._aexecute

    def count(call: Any) -> None:
        path, _, query = call.path.partition("?")
        params = dict(parse_qsl(query))
        if call.method == "GET" and path.endswith("/events") and "before" in params:
            reads.append((int(params["before"]), int(params["limit"]) if "limit" in params else None))

    def counting(call: Any) -> Any:
        count(call)
        return original(call)

    async def counting_async(call: Any) -> Any:
        count(call)
        return await original_async(call)

    client._execute = counting  # type: ignore[method-assign]
    client._aexecute = counting_async  # type: ignore[method-assign]


def limits(reads: list[tuple[int, int | None]]) -> list[int | None]:
    return [limit for _, limit in reads]


def test_items_map_onto_berths_vocabulary_and_round_trip(oai_place: Place) -> None:
    client = oai_place.connect()
    with BerthSession("chat-1", client) as session:
        run(session.add_items(ITEMS))
        assert run(session.get_items()) == ITEMS
        everything = client.read("chat-1").events
        # One `add_items` opening a turn: its markers ride in the same append.
        assert [event.type for event in everything] == [
            "turn/start", "user/message", "tool/call", "tool/result", "assistant/message", "openai/item", "system/message"
        ]
        assert everything[0].data == {"turn": 0}
        events = item_events(everything)
        # Messages and calls: the item's own fields are the data, in the item's order,
        # then the mark. Anything else: the item verbatim in data.item, berth's required
        # fields beside it.
        for event, item in zip(events, ITEMS):
            if event.type == "tool/result" or event.type == "openai/item":
                assert event.data["item"] == item and ITEM_MARK not in event.data
            else:
                assert list(event.data.items()) == [*item.items(), (ITEM_MARK, True)]
        assert events[0].data["content"] == "what is 2+2?"
        assert (events[1].data["call_id"], events[1].data["name"]) == ("call-1", "add")
        assert (events[2].data["call_id"], events[2].data["content"]) == ("call-1", "4")
        # Only the opaque type is ignorable; one append = one run's batch.
        assert [event.ignorable for event in events] == [False, False, False, False, True, False]
        assert len({event.run for event in everything}) == 1 and events[0].run is not None
        assert len({event.idempotency_key for event in everything}) == 1
        record = client.get_session("chat-1")
        assert record.blank is False and record.title == "chat-1" and LABEL in record.labels
        assert record.header.policy.activity_ttl_ms == ACTIVITY_TTL_MS_FOREVER
        assert record.header.policy.concurrency == {"mode": "parallel", "runs_max": 64}
        # Listed back without include_blank: a conversation happened.
        assert [item.id for item in client.list_sessions(label=LABEL).items] == ["chat-1"]


def test_items_round_trip_in_order_whatever_their_keys(oai_place: Place) -> None:
    """An item whose keys collide with the marked layout's (the mark, `item`, the
    tool-start record's `in_flight`, fields berth gives a meaning) is nested instead;
    every item comes back with its keys in order and its values exact, from a fresh
    object (the backward read) and from the writer's view (the fold)."""
    items: list[Any] = [
        {"content": "mark first", "role": "user", ITEM_MARK: False},
        {"role": "user", "content": "has item", "item": {"nested": [1, 2]}},
        {"role": "assistant", "content": "calls", "tool_calls": None},
        {"type": "function_call", "call_id": "c-2", "name": "n", "arguments": "{}", "in_flight": True},
        {"role": "user", "content": "", "id": "m", "type": "message", "big": 18446744073709551617, "f": 0.1},
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "x"}]},
    ]
    client = oai_place.connect()
    with BerthSession("chat-keys", client) as writer:
        run(writer.add_items(items[:3]))
        assert run(writer.get_items()) == items[:3]
        run(writer.add_items(items[3:]))
        got = run(writer.get_items())  # from the view, folded
        assert [list(item) for item in got] == [list(item) for item in items] and got == items
    with BerthSession("chat-keys", oai_place.connect()) as reader:
        got = run(reader.get_items())  # a backward read
        assert [list(item) for item in got] == [list(item) for item in items] and got == items
        assert json.dumps(got) == json.dumps(items)
    events = item_events(client.read("chat-keys").events)
    assert [ITEM_MARK in event.data for event in events] == [False, False, False, False, True, True]


def test_random_items_round_trip_exactly(oai_place: Place) -> None:
    """Seeded random items — every known shape, keys in random order, values of every
    JSON kind, keys that collide with either layout — come back equal, with their keys
    in order, from the writer's view and from a fresh object, one `add_items` or many."""
    rng = random.Random(20261205)
    values: list[Any] = [None, True, False, 0, -1, 2**70, 0.5, -1e-300, "", "é ☃ \u0000", [], {}, [1, {"a": [None]}]]
    extra_keys = ["id", "status", "name", "x", ITEM_MARK, "item", "in_flight", "tool_calls", "error", "is_error"]

    def item() -> dict[str, Any]:
        shape = rng.choice(["user", "assistant", "system", "developer", "call", "output", "other"])
        if shape == "call":
            fields = {"type": "function_call", "call_id": f"c{rng.randrange(10**6)}", "name": "f", "arguments": "{}"}
        elif shape == "output":
            fields = {"type": "function_call_output", "call_id": f"c{rng.randrange(10**6)}", "output": rng.choice(values)}
        elif shape == "other":
            fields = {"type": "reasoning", "summary": []}
        else:
            fields = {"role": shape, "content": rng.choice(values + ["text"])}
            if rng.random() < 0.5:
                fields["type"] = "message"
        for key in rng.sample(extra_keys, rng.randrange(3)):
            fields.setdefault(key, rng.choice(values))
        keys = list(fields)
        rng.shuffle(keys)
        return {key: fields[key] for key in keys}

    items = [item() for _ in range(150)]
    client = oai_place.connect()
    with BerthSession("chat-random", client) as writer:
        position = 0
        while position < len(items):
            size = rng.randrange(1, 12)
            run(writer.add_items(items[position : position + size]))
            position += size
            if rng.random() < 0.3:
                run(writer.get_items(rng.randrange(1, 30)))  # keep a view to fold into
        got = run(writer.get_items())
        assert json.dumps(got) == json.dumps(items) and got == items
    with BerthSession("chat-random", oai_place.connect()) as reader:
        got = run(reader.get_items())
        assert json.dumps(got) == json.dumps(items) and got == items
        assert json.dumps(run(reader.get_items(7))) == json.dumps(items[-7:])


def test_items_stored_nested_by_earlier_versions_read_back(oai_place: Place) -> None:
    """Sessions written before messages and calls were stored as their data (each item
    nested in `data.item` beside a copy of berth's fields) read back the same."""
    client = oai_place.connect()
    with BerthSession("chat-old", client) as session:
        run(session.add_items(ITEMS[:1]))
    nested = [
        ("user/message", {"content": ITEMS[0]["content"], "item": ITEMS[0]}),
        ("tool/call", {"call_id": "call-1", "name": "add", "arguments": ITEMS[1]["arguments"], "item": ITEMS[1]}),
        ("tool/result", {"call_id": "call-1", "content": "4", "item": ITEMS[2]}),
        ("assistant/message", {"content": ITEMS[3]["content"], "item": ITEMS[3]}),
    ]
    run_id = client.attach("chat-old").run.run_id
    client.append("chat-old", nested, run=run_id)
    client.detach("chat-old", run_id)
    with BerthSession("chat-old", oai_place.connect()) as reader:
        assert run(reader.get_items()) == [ITEMS[0], *ITEMS[:4]]
        assert run(reader.pop_item()) == ITEMS[3]
        assert run(reader.get_items(2)) == ITEMS[1:3]


def test_add_items_is_one_atomic_batch(oai_place: Place) -> None:
    client = oai_place.connect()
    with BerthSession("atomic", client) as session:
        run(session.add_items([{"role": "user", "content": "kept"}]))
        bad = [{"role": "user", "content": "x"}, {"type": "opaque", "blob": "y" * (2 * 1024 * 1024)}]
        with pytest.raises(berth.PayloadTooLarge):
            run(session.add_items(bad))
        assert run(session.get_items()) == [{"role": "user", "content": "kept"}]


def test_an_add_items_of_berths_largest_batch_leaves_its_markers_out(oai_place: Place) -> None:
    """berth takes at most 1,000 events an append: 1,000 items are still one atomic append,
    without the turn markers that would not fit; smaller batches carry them."""
    client = oai_place.connect()
    items = [{"role": "user", "content": f"m{index}"} for index in range(1000)]
    with BerthSession("full-batch", client) as session:
        run(session.add_items(items))
        run(session.add_items(items[:998]))
        run(session.add_items([{"role": "assistant", "content": "done"}]))
        assert run(session.get_items()) == [*items, *items[:998], {"role": "assistant", "content": "done"}]
    kinds = [event.type for event in client.iter_events("full-batch")]
    assert kinds[:1000] == ["user/message"] * 1000  # no room: no markers
    assert kinds[1000] == "turn/start" and kinds[-4:] == ["step/start", "assistant/message", "step/end", "turn/end"]


def test_get_items_reads_backwards_only_as_far_as_it_needs(oai_place: Place) -> None:
    client = oai_place.connect()
    with BerthSession("long", client) as session:
        items = [{"role": "user", "content": f"m{index}"} for index in range(2500)]
        for start in range(0, 2500, 500):
            run(session.add_items(items[start:start + 500]))
        for _ in range(3):
            run(session.pop_item())
        reads: list[tuple[int, int | None]] = []
        count_backward_reads(client, reads)
        assert run(session.get_items(4)) == items[2493:2497]
        assert len(reads) == 1 and reads[0][1] is not None and reads[0][1] <= 16
        reads.clear()
        everything = run(session.get_items())
        assert everything == items[:2497] and len(reads) == 3  # 3 pages of 1000, backwards
        assert run(session.get_items(0)) == []


def test_a_whole_read_fetches_ahead_and_rereads_a_page_it_mispredicted(
    oai_place: Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole read fetches each page before the one it decodes, its bounds predicted
    from contiguous seqs; a page that answers other bounds (here: one read answered 7
    events short) is followed by a read from where it really starts, and the prefetched
    page, for the predicted bounds, is not used. The items are the same either way."""
    from berth.integrations.openai_agents import _reads

    client = oai_place.connect()
    items = [{"role": "user", "content": f"m{index}"} for index in range(3200)]
    with BerthSession("ahead", client) as session:
        for start in range(0, 3200, 800):
            run(session.add_items(items[start:start + 800]))
        run(session.pop_item())
    fetched: list[tuple[int, int]] = []
    fetch = _reads._fetch_before

    def second_short(client: Any, session_id: str, before: int, limit: int) -> Any:
        fetched.append((before, limit))
        if len(fetched) == 2:  # the first page fetched ahead answers 7 events short
            return fetch(client, session_id, before, limit - 7)
        return fetch(client, session_id, before, limit)

    monkeypatch.setattr(_reads, "_fetch_before", second_short)
    with BerthSession("ahead", client) as fresh:
        assert run(fresh.get_items()) == items[:3199]
    assert fetched[0] == (berth.SEQ_END, 1000)
    predicted = fetched[1][0] - 1000  # where the short page was predicted to start
    assert (predicted, 1000) in fetched  # the page before it, fetched ahead: not used
    assert (predicted + 7, 1000) in fetched  # read again from where the short page starts
    with BerthSession("ahead", client) as fresh:
        assert run(fresh.get_items()) == items[:3199]


def test_a_whole_read_runs_with_the_collector_paused(oai_place: Place, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read of the whole session makes and holds an object or more per item: the cyclic
    collector is paused for all of it (its collections scanned the items already made
    again and again, over a quarter of a fresh `get_items()` of 10,000), and on after."""
    client = oai_place.connect()
    with BerthSession("paused", client) as session:
        run(session.add_items([{"role": "user", "content": f"m{index}"} for index in range(30)]))
    seen: list[bool] = []
    read_back = BerthSession._read_back

    def watched(self: BerthSession, binding: Any, limit: int | None, *rest: Any) -> Any:
        seen.append(gc.isenabled())
        return read_back(self, binding, limit, *rest)

    monkeypatch.setattr(BerthSession, "_read_back", watched)
    assert gc.isenabled()
    with BerthSession("paused", client) as fresh:
        assert len(run(fresh.get_items())) == 30
    # (Read twice: the first read met the turn the writer left open, so the object
    # resumed, which repaired it, and read again.)
    assert seen == [False, False] and gc.isenabled()


def test_get_items_again_checks_the_newest_events_only(oai_place: Place) -> None:
    """A `get_items` after this object's own reads and writes reads only the newest few
    events (to see that the log still ends where it did) and folds what others appended
    since; a log deleted and made again, or more new events than it reads, is read
    backwards afresh. Every answer is the same as a fresh object's."""
    client = oai_place.connect()
    with BerthSession("again", client) as session, BerthSession("again", oai_place.connect()) as other:
        run(session.add_items([{"role": "user", "content": f"m{index}"} for index in range(30)]))
        reads: list[tuple[int, int | None]] = []
        count_backward_reads(client, reads)

        def fresh(limit: int | None) -> list[Any]:
            with BerthSession("again", oai_place.connect()) as reader:
                return run(reader.get_items(limit))

        assert run(session.get_items(20)) == fresh(20) and limits(reads) == [48]
        run(session.add_items([{"role": "assistant", "content": "mine"}]))
        reads.clear()
        assert run(session.get_items(20)) == fresh(20) and limits(reads) == [8]  # its own append: the view extended
        run(other.add_items([{"role": "user", "content": "theirs"}]))
        run(other.pop_item())
        run(other.add_items([{"role": "user", "content": "later"}, {"role": "user", "content": "last"}]))
        reads.clear()
        assert run(session.get_items(20)) == fresh(20) and limits(reads) == [8]  # 3 appends by another: folded
        assert [item["content"] for item in run(session.get_items(3))] == ["mine", "later", "last"]
        run(other.add_items([{"role": "user", "content": f"n{index}"} for index in range(9)]))
        reads.clear()
        assert run(session.get_items(20)) == fresh(20) and limits(reads) == [8, 48]  # too many: read afresh
        reads.clear()
        assert run(session.get_items()) == fresh(None) and limits(reads) == [1000]  # the view was short: no probe
        run(other.clear_session())
        reads.clear()
        assert run(session.get_items()) == [] and limits(reads) == [8]  # the clear, folded
        run(other.delete())
        run(other.add_items([{"role": "user", "content": "anew"}]))
        assert run(session.get_items()) == [{"role": "user", "content": "anew"}]
        answered = run(session.get_items())
        answered[0]["content"] = "changed by the caller"
        assert run(session.get_items()) == [{"role": "user", "content": "anew"}]  # fresh objects each time


POPPER = CONNECT + '''
import asyncio, json, sys
from berth.integrations.openai_agents import BerthSession

async def main():
    session = BerthSession("shared", connect(sys.argv[1:4]))
    results = await asyncio.gather(*(session.pop_item() for _ in range(int(sys.argv[4]))))
    session.close()
    print(json.dumps(results))

asyncio.run(main())
'''


def test_racing_pops_across_processes_each_take_a_different_item(oai_place: Place) -> None:
    client = oai_place.connect()
    with BerthSession("shared", client) as session:
        items = [{"role": "user", "content": f"item {index}"} for index in range(20)]
        run(session.add_items(items))
    connection = child_connection(oai_place)
    children = [subprocess.Popen(python_child(POPPER, *connection, "6"), stdout=subprocess.PIPE, text=True)
                for _ in range(4)]
    popped: list[Any] = []
    for child in children:
        out, _ = child.communicate(timeout=120)
        assert child.returncode == 0
        popped.extend(json.loads(out.strip().splitlines()[-1]))
    taken = [item["content"] for item in popped if item is not None]
    assert len(popped) == 24 and popped.count(None) == 4
    assert sorted(taken) == sorted(item["content"] for item in items)  # 20 distinct items
    with BerthSession("shared", client) as after:
        assert run(after.get_items()) == []
    # Append-only: every item and every claim is still in the log (the audit trail).
    events = client.read("shared").events
    assert sum(event.type == "user/message" for event in events) == 20
    assert sum(event.type == "openai/pop" for event in events) == 20


def test_pops_in_a_row_claim_from_the_view(oai_place: Place) -> None:
    """Pops one after another read back once per `POP_VIEW_ITEMS` items, not past every
    earlier pop each time (each pop leaves a marker, and its item stays in the log); the
    others check the view with the probe. Another object's appends and pops meanwhile are
    folded in, and the answers are a fresh object's."""
    client = oai_place.connect()
    with BerthSession("pops", client) as session, BerthSession("pops", oai_place.connect()) as other:
        items = [{"role": "user", "content": f"m{index}"} for index in range(300)]
        run(session.add_items(items))
        reads: list[tuple[int, int | None]] = []
        count_backward_reads(client, reads)
        popped = [run(session.pop_item()) for _ in range(200)]
        assert popped == items[299:99:-1]  # newest first
        backward = [limit for limit in limits(reads) if limit != PROBE_EVENTS]
        assert len(reads) - len(backward) <= 200  # at most one probe a pop
        # One backward read (its pages) per POP_VIEW_ITEMS pops; before, each pop read
        # back past every earlier pop's marker and item, 3 reads a pop on average.
        assert len(backward) <= 4 * (200 // POP_VIEW_ITEMS + 1), backward
        run(other.add_items([{"role": "user", "content": "theirs"}]))
        assert run(session.pop_item()) == {"role": "user", "content": "theirs"}  # folded in
        run(other.pop_item())  # takes m99
        assert run(session.pop_item()) == items[98]
        with BerthSession("pops", oai_place.connect()) as fresh:
            assert run(session.get_items()) == run(fresh.get_items()) == items[:98]
        run(other.clear_session())
        assert run(session.pop_item()) is None


def test_clear_is_a_marker_and_delete_reclaims(oai_place: Place) -> None:
    client = oai_place.connect()
    with BerthSession("cleared", client) as session:
        run(session.add_items(ITEMS[:3]))
        run(session.clear_session())
        assert run(session.get_items()) == [] and run(session.pop_item()) is None
        run(session.add_items([{"role": "user", "content": "after"}]))
        assert run(session.get_items()) == [{"role": "user", "content": "after"}]
        # The clear ended the open turn; the next item opened a new one.
        assert [event.type for event in client.read("cleared").events][-4:] == [
            "turn/end", "openai/clear", "turn/start", "user/message"
        ]
        run(session.delete())
        with pytest.raises(berth.NotFound):
            client.get_session("cleared")
        assert run(session.get_items()) == []
        run(session.add_items([{"role": "user", "content": "anew"}]))  # re-created, a new run attached
        assert run(session.get_items()) == [{"role": "user", "content": "anew"}]


def test_operations_on_a_missing_session_create_nothing(oai_place: Place) -> None:
    client = oai_place.connect()
    with BerthSession("never", client) as session:
        assert run(session.get_items()) == [] and run(session.pop_item()) is None
        run(session.clear_session())
        run(session.add_items([]))
    with pytest.raises(berth.NotFound):
        client.get_session("never")


def test_one_run_per_object_heartbeated_and_released(oai_place: Place) -> None:
    client = oai_place.connect()
    first = BerthSession("runs", client, run_lease_ttl_ms=600)
    second = BerthSession("runs", oai_place.connect(), run_lease_ttl_ms=600)
    run(first.add_items([{"role": "user", "content": "a"}]))
    run(second.add_items([{"role": "user", "content": "b"}]))
    assert len(client.get_session("runs").runs) == 2
    time.sleep(1.5)  # > 2 leases: only the background heartbeat keeps the runs attached
    run(first.add_items([{"role": "user", "content": "c"}]))
    run(second.add_items([{"role": "user", "content": "d"}]))
    runs = {event.run for event in client.read("runs").events}
    assert len(runs) == 2  # later writes reuse each object's run
    first.close()
    assert len(client.get_session("runs").runs) == 1
    second.close()
    second.close()  # idempotent
    assert client.get_session("runs").runs == []
    assert [item["content"] for item in run(BerthSession("runs", client).get_items())] == ["a", "b", "c", "d"]


def test_exclusive_mode_gives_a_second_writer_busy(oai_place: Place) -> None:
    client = oai_place.connect()
    holder = BerthSession("solo", client, exclusive=True)
    run(holder.add_items([{"role": "user", "content": "mine"}]))
    assert client.get_session("solo").header.policy.concurrency == {"mode": "serial"}
    intruder = BerthSession("solo", oai_place.connect(), exclusive=True)
    with pytest.raises(berth.Busy):
        run(intruder.add_items([{"role": "user", "content": "theirs"}]))
    with pytest.raises(berth.Busy):
        run(intruder.get_items())
    # The mode is fixed at creation: opening it parallel is a typed error.
    with pytest.raises(SessionModeMismatch):
        run(BerthSession("solo", client).get_items())
    holder.close()
    run(intruder.add_items([{"role": "user", "content": "theirs"}]))
    assert [item["content"] for item in run(intruder.get_items())] == ["mine", "theirs"]
    # A displaced holder learns it at its next write.
    client.attach("solo", on_busy="interrupt")
    with pytest.raises(berth.OwnershipLost):
        run(intruder.add_items([{"role": "user", "content": "lost"}]))
    with pytest.raises(berth.OwnershipLost):
        run(intruder.get_items())
    intruder.close()
    # And the other way round: a parallel session opened exclusive.
    with BerthSession("chat-parallel", client) as parallel:
        run(parallel.add_items([{"role": "user", "content": "x"}]))
    with pytest.raises(SessionModeMismatch):
        run(BerthSession("chat-parallel", client, exclusive=True).get_items())


@pytest.mark.parametrize("sdk_id", ["user 42/chat ü", "~tilde", "x" * 300, ""])
def test_ids_berth_refuses_are_encoded_and_listed_back(oai_place: Place, sdk_id: str) -> None:
    client = oai_place.connect()
    berth_id = encode_session_id(sdk_id)
    assert berth_id != sdk_id and len(berth_id) <= 128
    if len(sdk_id) < 90:
        assert decode_session_id(berth_id) == sdk_id
    with BerthSession(sdk_id, client) as session:
        run(session.add_items([{"role": "user", "content": "hi"}]))
        assert session.berth_id == berth_id
        assert run(session.get_items()) == [{"role": "user", "content": "hi"}]
    assert BerthSession.list_session_ids(client) == [sdk_id]
    assert encode_session_id("plain-id_1.2") == "plain-id_1.2"


def test_a_user_key_writes_through_its_run(oai_place: Place) -> None:
    client = oai_place.connect(role="user", user="alice")
    with BerthSession("alice-chat", client) as session:
        run(session.add_items(ITEMS[:3]))
        assert run(session.pop_item()) == ITEMS[2]
        run(session.clear_session())
        assert run(session.get_items()) == []


def test_wrapper_picks_the_client(oai_place: Place) -> None:
    default = oai_place.connect(role="user", user="default")
    tenant_client = oai_place.connect(role="user", user="routed")

    class Wrapper:
        context = {"user": "routed"}

    session = BerthSession("routed-chat", default, client_for_context=lambda wrapper: tenant_client)
    run(session.add_items([{"role": "user", "content": "hi"}], wrapper=Wrapper()))
    assert run(session.get_items(wrapper=Wrapper())) == [{"role": "user", "content": "hi"}]
    assert tenant_client.get_session("routed-chat").header.scope.user == "routed"
    with pytest.raises(berth.NotFound):
        default.get_session("routed-chat")
    session.close()
    from agents.memory.session import _session_accepts_wrapper

    assert _session_accepts_wrapper(session)


def test_a_closed_session_raises_as_sqlite_session_does(oai_place: Place, tmp_path: Any) -> None:
    """After `close()` every call raises the `RuntimeError` `SQLiteSession` raises after its
    own (an empty `add_items` and `get_items(0)` included), and no run is attached again."""
    from types import SimpleNamespace

    from agents import SQLiteSession

    reference = SQLiteSession("closed", tmp_path / "reference.db")
    client = oai_place.connect()
    session = BerthSession("closed", client)
    for each in (reference, session):
        run(each.add_items([{"role": "user", "content": "kept"}]))
        each.close()
    assert client.get_session(session.berth_id).runs == []
    for each, text in ((reference, "SQLiteSession is closed"), (session, "BerthSession is closed")):
        for call in (lambda: each.get_items(), lambda: each.get_items(0), lambda: each.add_items([]),
                     lambda: each.add_items([{"role": "user", "content": "late"}]), lambda: each.pop_item(),
                     lambda: each.clear_session()):
            with pytest.raises(RuntimeError, match=text):
                run(call())
        each.close()  # idempotent
    with pytest.raises(SessionClosed):
        run(session.delete())
    context = SimpleNamespace(tool_call_id="call-1", tool_name="add", tool_arguments="{}")
    with pytest.raises(SessionClosed):
        run(session.run_hooks().on_tool_start(context, None, None))
    assert isinstance(SessionClosed(), berth.ClientClosed)
    # Nothing was attached or written after the close.
    assert client.get_session(session.berth_id).runs == []
    assert [item["content"] for item in run(BerthSession("closed", client).get_items())] == ["kept"]


def test_labels_are_a_list(oai_place: Place) -> None:
    client = oai_place.connect()
    with pytest.raises(berth.WrongType) as wrong:
        BerthSession("labelled", client, labels="urgent")
    assert wrong.value.argument == "labels" and isinstance(wrong.value, TypeError)
    with BerthSession("labelled", client, labels=("urgent",)) as session:
        run(session.add_items([{"role": "user", "content": "x"}]))
    assert client.get_session(session.berth_id).labels == ["openai-agents", "urgent"]
