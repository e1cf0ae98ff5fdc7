"""`BerthStore` and `AsyncBerthStore`: `BaseStore` over a sync or an async berth client,
driving the one `_Core` (`_core`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Iterable
from typing import Any

from langgraph.store.base import BaseStore, Op, Result, TTLConfig

import berth

from .._drive import drive_async as _drive_async, drive_sync as _drive_sync
from ._core import _Core
from ._records import DEFAULT_ROOT, StoreUnsupported


def _refuse_index(index: Any) -> None:
    if index is not None:
        raise StoreUnsupported(
            "semantic search (an embedding `index`) is not supported: berth's memory search is "
            "full text (terms ANDed) with filters; leave `index` unset"
        )


class BerthStore(BaseStore):
    """`BaseStore` on berth's scoped memory, over a sync `berth.Client` (HTTP or
    `berth.open(...)`). `root`: the berth namespace the tuples live under. `ttl`:
    LangGraph's `TTLConfig` (`default_ttl` minutes, `refresh_on_read`; berth's sweeper
    removes expired items, so `sweep_interval_minutes` is not used). `abatch` runs
    `batch` on a worker thread."""

    supports_ttl = True

    def __init__(
        self,
        client: berth.Client,
        *,
        root: str = DEFAULT_ROOT,
        ttl: TTLConfig | None = None,
        index: Any = None,
    ) -> None:
        _refuse_index(index)
        self.client = client
        self.ttl_config = ttl
        self._core = _Core(root)

    @property
    def root(self) -> str:
        return self._core.root

    def berth_namespace(self, namespace: tuple[str, ...]) -> str:
        """The berth namespace a LangGraph namespace tuple is stored under."""
        return self._core.berth_namespace(tuple(namespace))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return _drive_sync(self.client, self._core.batch(ops))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        return await asyncio.to_thread(self.batch, ops)


class AsyncBerthStore(BaseStore):
    """`BaseStore` over a `berth.AsyncClient` (or `berth.open_async(...)`), for asyncio
    apps. The sync methods work only from another thread than the event loop's (the
    client belongs to its loop), as with LangGraph's `AsyncPostgresStore`."""

    supports_ttl = True

    def __init__(
        self,
        client: berth.AsyncClient,
        *,
        root: str = DEFAULT_ROOT,
        ttl: TTLConfig | None = None,
        index: Any = None,
    ) -> None:
        _refuse_index(index)
        self.client = client
        self.ttl_config = ttl
        self._core = _Core(root)
        try:  # made inside the app's loop (the usual case): its sync methods work at once
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None  # bound by the first a-method call
        self._lock = threading.Lock()

    @property
    def root(self) -> str:
        return self._core.root

    def berth_namespace(self, namespace: tuple[str, ...]) -> str:
        return self._core.berth_namespace(tuple(namespace))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
        return await _drive_async(self.client, self._core.batch(ops))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        loop = self._loop
        if loop is None or running is loop:
            raise asyncio.InvalidStateError(
                "AsyncBerthStore's sync methods run only from another thread than its event loop "
                "(and after the loop has used the store); use the a-methods, or BerthStore"
            )
        future: concurrent.futures.Future[list[Result]] = asyncio.run_coroutine_threadsafe(self.abatch(ops), loop)
        return future.result()
