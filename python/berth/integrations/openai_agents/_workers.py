"""The worker threads `BerthSession`'s blocking calls run on."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from berth.integrations._ahead import ProcessPool


#: Worker threads for every `BerthSession`'s calls. Not the loop's default executor
#: (`min(32, cores + 4)` threads: 6 on two cores, sized for CPU work): these calls mostly
#: wait on the store with the GIL released, and concurrent writers each need a thread for
#: their durable appends to be in flight together.
WORKER_THREADS_MAX = 64
_worker_pool = ProcessPool(WORKER_THREADS_MAX, "berth-openai")
_T = TypeVar("_T")


async def _on_worker(function: Callable[..., _T], *args: Any) -> _T:
    """`asyncio.to_thread` on the pool above (the caller's context variables go along)."""
    context = contextvars.copy_context()
    call = functools.partial(context.run, function, *args)
    return await asyncio.get_running_loop().run_in_executor(_worker_pool(), call)
