"""`berth.integrations._ahead`: a page fetched on a worker thread while the reader
decodes the one before it."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from berth.integrations import _ahead


def test_the_fetch_has_begun_when_ahead_returns() -> None:
    """The reader goes on to hold the GIL for a long decode: a fetch not yet begun would
    wait for all of it. `ahead` returns once the worker runs the fetch."""
    begun = threading.Event()
    release = threading.Event()

    def fetch(value: int) -> int:
        begun.set()
        release.wait(5)
        return value * 2

    with ThreadPoolExecutor(1) as pool:
        for value in range(20):
            begun.clear()
            release.clear()
            answer = _ahead.ahead(pool, fetch, value)
            assert begun.is_set(), f"round {value}: the fetch had not begun"
            release.set()
            assert answer() == value * 2


def test_a_busy_pool_does_not_hold_the_reader_for_long() -> None:
    """With every worker busy, the reader goes on after `START_WAIT_S` and gets the
    answer once a worker has run the fetch."""
    blocker = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        pool.submit(blocker.wait, 5)
        answer = _ahead.ahead(pool, lambda: "late")
        blocker.set()
        assert answer() == "late"


def test_errors_reach_the_reader_and_a_shut_pool_fetches_when_asked() -> None:
    def failing() -> None:
        raise ValueError("no page")

    with ThreadPoolExecutor(1) as pool:
        answer = _ahead.ahead(pool, failing)
        with pytest.raises(ValueError, match="no page"):
            answer()
    calls: list[int] = []
    answer = _ahead.ahead(pool, lambda: calls.append(1) or "now")  # shut down: nothing started
    assert calls == [] and answer() == "now" and calls == [1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_reads_ahead_on_threads_of_its_own() -> None:
    assert _ahead.ahead(_ahead.pool(), lambda: 1)() == 1
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's outcome is its exit status
        ok = False
        try:
            ok = _ahead.ahead(_ahead.pool(), lambda: 2)() == 2
        finally:
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(child, 0)
