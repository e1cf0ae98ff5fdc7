"""Reading ahead: a read's next page fetched on a worker thread while the reading thread
decodes the current one; and the per-process thread pools the adapters run such work
on (`ProcessPool`). Shared by the ADK and OpenAI Agents SDK adapters."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

#: How long `ahead` lets its fetch start before the caller goes on regardless.
START_WAIT_S = 0.005
#: Fetches in flight at once in `pool()` (each mostly waits on the store, the GIL let go).
THREADS = 4


def ahead(pool: ThreadPoolExecutor, fetch: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    """`fetch(*args)` started on `pool`; its answer (or error) when called. Once the pool
    is shut down, the fetch runs when its answer is wanted.

    The caller waits until the fetch has begun (up to `START_WAIT_S`). It goes on to
    decode a page, one long call into pydantic or `json` that holds the GIL throughout,
    and a fetch that had not yet reached the store (the native call, or the socket)
    waited for all of it: the two ran one after the other. Waiting on the event gives
    the worker the GIL, which it keeps until its request lets it go. A listing of 10,000
    ADK sessions (11 pages, embedded) waited 31 ms for its pages this way; with the fetch
    let start, 5-10 ms (2026-12-04, `docs/guides/adk.md`)."""
    started = threading.Event()

    def begun() -> Any:
        started.set()
        return fetch(*args)

    try:
        future = pool.submit(begun)
    except RuntimeError:
        return lambda: fetch(*args)
    started.wait(START_WAIT_S)
    return future.result


class ProcessPool:
    """A thread pool made on first use, once per process: a forked child has none of
    its parent's threads (a pool it inherited would queue work no thread runs), so it
    makes its own when it needs one."""

    def __init__(self, threads: int, name: str) -> None:
        self._threads, self._name = threads, name
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forget)

    def __call__(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix=self._name)
            return self._pool

    def _forget(self) -> None:
        self._pool, self._lock = None, threading.Lock()


#: The process's threads for reading ahead. Their own pool, not a caller's: a fetch
#: never waits on anything, so readers that wait on their fetches cannot use up the
#: threads those fetches need.
pool = ProcessPool(THREADS, "berth-read-ahead")
