"""Reading ahead: a read's next page fetched on a worker thread while the reading thread
decodes the current one. Shared by the ADK and OpenAI Agents SDK adapters."""

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
    let start, 5-10 ms (2026-12-04, `docs/adk.md`)."""
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


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def pool() -> ThreadPoolExecutor:
    """The process's threads for reading ahead. Their own pool, not a caller's: a fetch
    never waits on anything, so readers that wait on their fetches cannot use up the
    threads those fetches need."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(THREADS, thread_name_prefix="berth-read-ahead")
        return _pool


def _forget_pool_in_child() -> None:
    # A forked child has none of the parent's threads: it makes its own pool when needed.
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_in_child)
