"""Real processes: a writer killed with SIGKILL mid-append loses nothing it was told was
stored; several processes share one embedded data directory by taking turns; a forked
child reopens the store instead of using the parent's; racing attaches on a serial
session leave exactly one owner."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import threading
import time
import uuid

import pytest

import berth
from conftest import FOREVER, Place, Server, python_child

KILLED_WRITER = """
import sys, berth
transport, where, tenant, session_id = sys.argv[1:5]
if transport == "http":
    client = berth.Client(where, api_key=sys.argv[5])
else:
    client = berth.open(where, tenant=tenant, user="writer", role="service")
n = 0
while True:
    outcome = client.append(session_id, [("note/n", {"n": n, "pad": "x" * 512})])
    print(outcome.first_seq, flush=True)  # acknowledged: durable from here on
    n += 1
"""


#: In a process of its own: Python's `sqlite3` is a second copy of SQLite, and two copies
#: in one process break each other's POSIX locks (one's `close` drops the other's; each
#: takes the other's shared-memory lock for its own). Checked in this process while the
#: store wrote what activity it held, the check read a torn snapshot ("row 1 missing from
#: index sessions_by_user").
INTEGRITY_CHECK = """
import sqlite3, sys
catalog = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
print("\\n".join(row[0] for row in catalog.execute("PRAGMA integrity_check")))
"""


def _acknowledged_then_killed(command: list[str], count: int) -> list[int]:
    writer = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    acknowledged: list[int] = []
    assert writer.stdout is not None
    while len(acknowledged) < count:
        line = writer.stdout.readline()
        assert line, "the writer died before it was killed"
        acknowledged.append(int(line))
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    acknowledged.extend(int(line) for line in writer.stdout.read().split())
    return acknowledged


def test_sigkill_of_an_embedded_writer_loses_nothing_acknowledged(native_place: Place) -> None:
    place = native_place
    client = place.connect()
    session_id = client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER).id
    assert place.store_url is not None
    command = python_child(KILLED_WRITER, "embedded", place.store_url, place.tenant, session_id)
    acknowledged = _acknowledged_then_killed(command, 60)
    stored = [event.seq for event in client.iter_events(session_id)]
    assert set(acknowledged) <= set(stored)
    assert stored == list(range(len(stored))), "a contiguous log, no torn event"
    # The dead writer's lock is gone: at once on a data directory (the kernel drops its
    # flock), on PostgreSQL when its writer lease lapses (10 s).
    after = place.connect(busy_wait_s=30)
    after.append(session_id, [("note/after", {})])


def test_sigkill_of_the_server_mid_append_loses_nothing_acknowledged(scratch) -> None:
    server = Server(scratch / f"killed-{uuid.uuid4().hex[:6]}", ["--rate-per-tenant", "0"])
    key = server.key("killed", "agent", "service")
    server.start()
    try:
        client = berth.Client(server.url, api_key=key, retries=0)
        session_id = client.create_session("appended", policy=FOREVER).id
        writer = subprocess.Popen(
            python_child(KILLED_WRITER, "http", server.url, "killed", session_id, key),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        assert writer.stdout is not None
        acknowledged = [int(writer.stdout.readline()) for _ in range(40)]
        server.kill()  # mid-append: the writer is sending as fast as it can
        writer.wait(timeout=60)
        acknowledged.extend(int(line) for line in writer.stdout.read().split())
        server.start()
        stored = [event.seq for event in client.iter_events(session_id)]
        assert set(acknowledged) <= set(stored) and stored == list(range(len(stored)))
        client.close()
    finally:
        server.stop()


ALTERNATING = """
import sys, time, berth
where, tenant, session_id, parity = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
client = berth.open(where, tenant=tenant, user=f"p{parity}", role="service", writer_idle_ms=50)
done = 0
while done < 5:
    events = client.read_before(session_id, limit=1).events
    next_n = events[-1].data["n"] + 1 if events else 0
    if next_n % 2 == parity:
        client.append(session_id, [("note/n", {"n": next_n})], expected_seq=events[-1].seq + 1 if events else 0)
        done += 1
    else:
        time.sleep(0.01)
client.close()
"""


def test_two_processes_append_alternately_to_one_session(native_place: Place) -> None:
    place = native_place
    client = place.connect()
    session_id = client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER).id
    client.close()  # its own write handle would keep the others waiting
    assert place.store_url is not None
    writers = [
        subprocess.Popen(python_child(ALTERNATING, place.store_url, place.tenant, session_id, str(parity)))
        for parity in (0, 1)
    ]
    for writer in writers:
        assert writer.wait(timeout=120) == 0
    reader = place.connect()
    assert [event.data["n"] for event in reader.iter_events(session_id)] == list(range(10))


def _forked_child_appends(client: berth.Client, session_id: str, result: "multiprocessing.Queue[object]") -> None:
    try:
        outcome = client.append(session_id, [("note/from", {"pid": os.getpid()})])
        result.put(outcome.first_seq)
    except BaseException as error:  # report it to the parent instead of dying silently
        result.put(repr(error))


def test_a_forked_child_reopens_the_store(native_place: Place) -> None:
    place = native_place
    client = place.connect(writer_idle_ms=50)
    session_id = client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER).id
    client.append(session_id, [("note/from", {"pid": os.getpid()})])  # the parent holds a write handle
    context = multiprocessing.get_context("fork")
    result: multiprocessing.Queue[object] = context.Queue()
    child = context.Process(target=_forked_child_appends, args=(client, session_id, result))
    child.start()
    answer = result.get(timeout=60)
    child.join(timeout=30)
    assert answer == 1, answer
    client.append(session_id, [("note/from", {"pid": os.getpid()})])  # the parent carries on
    assert [event.seq for event in client.iter_events(session_id)] == [0, 1, 2]


def _forked_child_creates(client: berth.Client, prefix: str, count: int,
                          result: "multiprocessing.Queue[object]") -> None:
    try:
        for n in range(count):
            session_id = client.create_session(f"{prefix}{n}", policy=FOREVER).id
            client.append(session_id, [("note/from", {"n": n})])
        result.put("created")
    except BaseException as error:  # report it to the parent instead of dying silently
        result.put(repr(error))


def test_a_forked_child_and_its_parent_write_one_store_at_once(native_place: Place) -> None:
    """The parent's store is busy when it forks (its catalog open, a write handle held),
    then the child, through the client it inherited, and the parent each create and
    append to 40 sessions at once. Every session and event is stored once, and the
    embedded catalog is intact. Before connections were closed at fork, the child
    reused SQLite's table of the parent's open files (and the locks it believed held):
    sessions went missing and the catalog read as damaged, 4 runs of 4."""
    client = native_place.connect()
    first = client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER).id
    client.append(first, [("note/from", {"n": -1})])
    count = 40
    context = multiprocessing.get_context("fork")
    result: multiprocessing.Queue[object] = context.Queue()
    child = context.Process(target=_forked_child_creates, args=(client, "child-", count, result))
    child.start()
    for n in range(count):
        session_id = client.create_session(f"parent-{n}", policy=FOREVER).id
        client.append(session_id, [("note/from", {"n": n})])
    assert result.get(timeout=120) == "created"
    child.join(timeout=30)
    assert child.exitcode == 0
    for prefix in ("child-", "parent-"):
        for n in range(count):
            events = list(client.iter_events(f"{prefix}{n}"))
            assert [(event.seq, event.data["n"]) for event in events] == [(0, n)], (prefix, n)
    assert [event.seq for event in client.iter_events(first)] == [0]
    client.close()  # writes what activity it holds (the first session's: row 1)
    if native_place.transport == "embedded":
        assert native_place.store_url is not None
        path = os.path.join(native_place.store_url, "catalog.sqlite")
        check = subprocess.run(python_child(INTEGRITY_CHECK, path), capture_output=True, text=True, timeout=60)
        assert check.stdout.strip() == "ok", (check.stdout, check.stderr)


def _idle_connections(client: berth.Client) -> set[tuple[str, int]]:
    """The local addresses of the HTTP client's idle keep-alive connections."""
    return {connection.sock.getsockname() for _, connection in client._transport._pool._idle}  # type: ignore[attr-defined]


def _forked_child_appends_many(client: berth.Client, session_id: str, count: int,
                               result: "multiprocessing.Queue[object]") -> None:
    try:
        pool = client._transport._pool  # type: ignore[attr-defined]
        connection, reused = pool.take()  # the connection the first request would use
        result.put((reused, connection.sock.getsockname()))
        pool.give_back(connection)
        for n in range(count):
            client.append(session_id, [("note/child", {"n": n})])
        result.put("appended")
    except BaseException as error:  # report it to the parent instead of dying silently
        result.put(repr(error))


@pytest.mark.parametrize("place", ["http"], indirect=True)
def test_a_forked_child_opens_its_own_http_connections(place: Place) -> None:
    """Over HTTP a forked child never uses the keep-alive connections it inherited
    (sharing a socket, its requests and the parent's would interleave): the parent and
    the child append at once through the same client object, every append is stored
    once, and the child's connections are none of the parent's."""
    client = place.connect()
    session_id = client.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER).id
    client.append(session_id, [("note/parent", {"n": -1})])
    inherited = _idle_connections(client)
    assert inherited  # a keep-alive connection the child would otherwise take
    context = multiprocessing.get_context("fork")
    result: multiprocessing.Queue[object] = context.Queue()
    child = context.Process(target=_forked_child_appends_many, args=(client, session_id, 100, result))
    child.start()
    answer = result.get(timeout=60)  # before the parent uses its connection again
    assert isinstance(answer, tuple), answer
    reused, first = answer
    assert not reused and tuple(first) not in inherited
    for n in range(100):
        client.append(session_id, [("note/parent", {"n": n})])
    assert result.get(timeout=60) == "appended"
    child.join(timeout=30)
    events = list(client.iter_events(session_id))
    assert sorted(event.data["n"] for event in events if event.type == "note/child") == list(range(100))
    assert sorted(event.data["n"] for event in events if event.type == "note/parent") == list(range(-1, 100))


def test_racing_attaches_on_a_serial_session_leave_one_owner(place: Place) -> None:
    clients = [place.connect(user=f"racer-{n}") for n in range(6)]
    session_id = clients[0].create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER).id
    outcomes: list[str] = []
    barrier = threading.Barrier(len(clients))

    def race(client: berth.Client, n: int) -> None:
        barrier.wait()
        try:
            client.attach(session_id, run_id=f"run-{n}", on_busy="reject")
            outcomes.append("attached")
        except berth.Busy:
            outcomes.append("busy")

    threads = [threading.Thread(target=race, args=(client, n)) for n, client in enumerate(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["attached"] + ["busy"] * (len(clients) - 1)
    attached = [run for run in clients[0].get_session(session_id).runs if run.status == "attached"]
    assert len(attached) == 1
    time.sleep(0)  # keep the threads' clients alive until here


APPEND_ONCE = """
import sys, berth
where, tenant, session_id, wait_s = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
client = berth.open(where, tenant=tenant, user="other", role="service", busy_wait_s=wait_s)
try:
    print(client.append(session_id, [("note/other", {})]).first_seq)
except berth.Busy as busy:
    print(type(busy).__name__, busy.code)
"""


def test_another_processes_write_handle_is_writer_busy_and_waited_out(native_place: Place) -> None:
    place = native_place
    holder = place.connect(writer_idle_ms=600_000)
    session_id = holder.create_session(f"s-{uuid.uuid4().hex[:12]}", policy=FOREVER).id
    holder.append(session_id, [("note/held", {})])  # its write handle stays open
    assert place.store_url is not None
    child = python_child(APPEND_ONCE, place.store_url, place.tenant, session_id, "0")
    refused = subprocess.run(child, capture_output=True, text=True, timeout=120, check=True).stdout.split()
    assert refused == ["WriterBusy", "writer_busy"], refused
    assert [event.seq for event in holder.iter_events(session_id)] == [0], "the refused append stored nothing"
    # A waiting client gets in once the holder lets go (here: closes, a second after).
    waiting = subprocess.Popen(python_child(APPEND_ONCE, place.store_url, place.tenant, session_id, "60"),
                               stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)
    holder.close()
    out, _ = waiting.communicate(timeout=120)
    assert out.split() == ["1"], out
