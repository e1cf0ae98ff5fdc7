"""`AsyncBerthSaver`: the asyncio checkpointer, driving the core with a
`berth.AsyncClient`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

import berth

from .._drive import Io, drive_async as _drive_async
from ._appends import WRITES_WAIT_S, Build, _Waiting
from ._core import _Core
from ._records import FOREVER_MS
from ._shared import _Attachment, _next_version, _SharedRun
from ._tools import STEP_POLL_S, STEP_READ_AFTER_S, STEP_WAIT_S, step_checkpoint


class AsyncBerthSaver(_SharedRun, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on berth for asyncio (`graph.ainvoke`, `astream`), over
    a `berth.AsyncClient` or `berth.open_async(...)`. Same storage, options and run
    lifecycle as `BerthSaver` (the heartbeat is a task on the loop of the first write;
    release with `await saver.aclose()` or `async with`). The sync methods are not
    offered: call them from a sync graph with `BerthSaver`."""

    def __init__(
        self,
        client: berth.AsyncClient,
        *,
        serde: Any = None,
        prefix: str = "",
        exclusive: bool = False,
        run_lease_ttl_ms: int = 60_000,
        activity_ttl_ms: int = FOREVER_MS,
        runs_max: int = 64,
    ) -> None:
        super().__init__(serde=serde)
        self.client = client
        self._core = _Core(self.serde, prefix=prefix, exclusive=exclusive, run_lease_ttl_ms=run_lease_ttl_ms,
                           activity_ttl_ms=activity_ttl_ms, runs_max=runs_max)
        self._attachment = _Attachment()
        #: thread id -> the `aput` / `aput_writes` batches waiting for the lock (`_write`).
        self._waiting: dict[str, list[_Waiting]] = {}

    @property
    def run_id(self) -> str:
        return self._core.run_id

    def _lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        attachment = self._attachment
        if attachment.lock is None or attachment.lock_loop is not loop:
            attachment.lock = asyncio.Lock()
            attachment.lock_loop = loop
        return attachment.lock

    async def _do(self, io: Io) -> Any:
        async with self._lock():
            result = await _drive_async(self.client, io)
            self._start_heartbeats()
            return result

    def _start_heartbeats(self) -> None:
        attachment = self._attachment
        if self._core.attached and (attachment.beat is None or attachment.beat.done()):
            attachment.beat = asyncio.get_running_loop().create_task(self._heartbeats())

    async def _write(self, thread_id: str, build: Build, checkpoint: bool) -> None:
        """`BerthSaver._write` on the event loop: batches waiting while another is being
        written share the next append, and an `aput_writes` first waits up to
        `WRITES_WAIT_S` for its step's `aput`, whose task then writes both."""
        waiting = _Waiting(build)
        self._waiting.setdefault(thread_id, []).append(waiting)
        if not checkpoint:
            waiting.written = asyncio.Event()
            try:
                await asyncio.wait_for(waiting.written.wait(), WRITES_WAIT_S)
            except asyncio.TimeoutError:
                pass
        if not waiting.done:
            async with self._lock():
                if not waiting.done:
                    group = self._waiting.pop(thread_id)
                    try:
                        await _drive_async(self.client, self._core.write_group(thread_id, group))
                    finally:
                        for one in group:
                            if one.written is not None:
                                one.written.set()
                    self._start_heartbeats()
        if waiting.error is not None:
            raise waiting.error

    async def _heartbeats(self) -> None:
        period = max(self._core.run_lease_ttl_ms / 3000, 0.05)
        while True:
            await asyncio.sleep(period)
            async with self._lock():
                try:
                    await _drive_async(self.client, self._core.heartbeat_all())
                except Exception:  # noqa: BLE001 - a failed beat is retried next period
                    pass

    async def aclose(self) -> None:
        """Releases this saver's run on every thread it wrote (the client stays open); the
        copies `with_allowlist` made share the run, so it is theirs too."""
        attachment = self._attachment
        if attachment.beat is not None:
            attachment.beat.cancel()
            try:
                await attachment.beat
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
            attachment.beat = None
        async with self._lock():
            await _drive_async(self.client, self._core.detach_all())

    async def __aenter__(self) -> AsyncBerthSaver:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._do(self._core.get_tuple(config))

    async def alist(
        self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None, limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for item in await self._do(self._core.list(config, filter, before, limit)):
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        thread_id, build, stored = self._core.put_build(config, checkpoint, metadata, new_versions)
        await self._write(thread_id, build, checkpoint=True)
        return stored

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        thread_id, build = self._core.put_writes_build(config, writes, task_id, task_path)
        await self._write(thread_id, build, checkpoint=False)

    async def arecord_tool_call(self, config: RunnableConfig, tool_call: Any) -> dict[str, Any] | None:
        """`BerthSaver.record_tool_call`, on the event loop (`durable_tool_node`)."""
        checkpoint_id = step_checkpoint(config)
        if checkpoint_id is not None:
            thread_id = str(config["configurable"]["thread_id"])
            started = time.monotonic()
            read = False  # the fold this saver has (a log it has not folded is read)
            while not await self._do(self._core.checkpoint_known(thread_id, checkpoint_id, read)):
                waited = time.monotonic() - started
                if waited > STEP_WAIT_S:
                    break
                await asyncio.sleep(STEP_POLL_S)
                read = waited > STEP_READ_AFTER_S
        found: dict[str, Any] | None = await self._do(self._core.record_tool_call(config, tool_call))
        return found

    async def adelete_thread(self, thread_id: str) -> None:
        await self._do(self._core.delete_thread(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._do(self._core.delete_for_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._do(self._core.copy_thread(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._do(self._core.prune(thread_ids, strategy))

    def get_next_version(self, current: str | int | float | None, channel: None) -> str:  # type: ignore[override]
        return _next_version(current)
