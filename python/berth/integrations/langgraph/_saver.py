"""`BerthSaver`: the blocking checkpointer, driving the core with a `berth.Client`."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
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

from .._drive import Io, drive_sync as _drive_sync
from ._appends import WRITES_WAIT_S, Build, _Waiting
from ._core import _Core
from ._records import FOREVER_MS
from ._shared import _Attachment, _next_version, _SharedRun
from ._tools import STEP_POLL_S, STEP_READ_AFTER_S, STEP_WAIT_S, step_checkpoint


class BerthSaver(_SharedRun, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on berth, blocking (`graph.invoke`, `graph.stream`).

    `client`: a `berth.Client` (HTTP) or `berth.open(...)` (embedded). One berth run per
    saver object, attached to a thread's session on the first write, heartbeated in the
    background every third of `run_lease_ttl_ms`, released by `close()` (or the context
    manager; otherwise the lease lapses). `exclusive=True`: threads are created `serial`
    and a second saver writing the same thread gets `berth.Busy`. `prefix` namespaces
    thread ids (one tenant, several apps). The async methods run the sync ones on a
    worker thread; for asyncio graphs use `AsyncBerthSaver`.
    """

    def __init__(
        self,
        client: berth.Client,
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
        #: thread id -> the `put` / `put_writes` batches waiting for the lock (`_write`).
        self._waiting: dict[str, list[_Waiting]] = {}
        #: Notified when batches have been written (a waiting `put_writes` may be done).
        self._written = threading.Condition(threading.Lock())

    @property
    def run_id(self) -> str:
        return self._core.run_id

    def _do(self, io: Io) -> Any:
        with self._core.lock:
            result = _drive_sync(self.client, io)
            self._start_heartbeats()
            return result

    def _write(self, thread_id: str, build: Build, checkpoint: bool) -> None:
        """Appends one call's batch together with the batches other threads' calls wait
        to append to the same thread, in one durable append (`_Core.append_group`):
        group commit. LangGraph runs a graph's `put_writes` and (in its default "async"
        durability) its `put`s on background threads, one step's checkpoint soon after
        its writes. So a `put_writes` first waits a little (`WRITES_WAIT_S`) for a `put`
        to the same thread, whose caller then writes both; whoever takes the lock writes
        every batch waiting for that thread. Every call still returns only once its
        batch is durable, and raises what its own batch would have raised."""
        waiting = _Waiting(build)
        with self._written:
            self._waiting.setdefault(thread_id, []).append(waiting)
            if not checkpoint:
                deadline = time.monotonic() + WRITES_WAIT_S
                while not waiting.done:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._written.wait(left)
        if not waiting.done:
            with self._core.lock:
                if not waiting.done:
                    with self._written:
                        group = self._waiting.pop(thread_id)
                    _drive_sync(self.client, self._core.write_group(thread_id, group))
                    self._start_heartbeats()
                    with self._written:
                        self._written.notify_all()  # the callers whose batches were written
        if waiting.error is not None:
            raise waiting.error

    def _start_heartbeats(self) -> None:
        attachment = self._attachment
        if self._core.attached and attachment.beat is None:
            attachment.beat = threading.Thread(target=self._heartbeats, args=(attachment.stop,),
                                               name="berth-langgraph-heartbeat", daemon=True)
            attachment.beat.start()

    def _heartbeats(self, stop: threading.Event) -> None:
        period = max(self._core.run_lease_ttl_ms / 3000, 0.05)
        while not stop.wait(period):
            with self._core.lock:
                try:
                    _drive_sync(self.client, self._core.heartbeat_all())
                except Exception:  # noqa: BLE001 - a failed beat is retried next period
                    pass

    def close(self) -> None:
        """Releases this saver's run on every thread it wrote (the client stays open); the
        copies `with_allowlist` made share the run, so it is theirs too."""
        attachment = self._attachment
        attachment.stop.set()
        if attachment.beat is not None:
            attachment.beat.join()
            attachment.beat = None
        with self._core.lock:
            _drive_sync(self.client, self._core.detach_all())
        attachment.stop = threading.Event()

    def __enter__(self) -> BerthSaver:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._do(self._core.get_tuple(config))

    def list(
        self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None, limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return iter(self._do(self._core.list(config, filter, before, limit)))

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        thread_id, build, stored = self._core.put_build(config, checkpoint, metadata, new_versions)
        self._write(thread_id, build, checkpoint=True)
        return stored

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        thread_id, build = self._core.put_writes_build(config, writes, task_id, task_path)
        self._write(thread_id, build, checkpoint=False)

    def record_tool_call(self, config: RunnableConfig, tool_call: Any) -> dict[str, Any] | None:
        """Records in the thread of `config`, durably, that `tool_call` (LangChain's
        `{name, args, id}`) starts: a `tool/call` event, before the tool runs
        (`durable_tool_node` calls this). None: the tool may run. Otherwise it must not:
        a process that recorded its start died before its result (`{}`: the outcome is
        unknown), or berth's resume closed the call (its `tool/result`'s data).

        The record follows the checkpoint of the call's step: LangGraph stores it in the
        background while the step runs, so this waits (`STEP_WAIT_S` at most) until it is."""
        checkpoint_id = step_checkpoint(config)
        if checkpoint_id is not None:
            thread_id = str(config["configurable"]["thread_id"])
            started = time.monotonic()
            read = False  # the fold this saver has (a log it has not folded is read)
            while not self._do(self._core.checkpoint_known(thread_id, checkpoint_id, read)):
                waited = time.monotonic() - started
                if waited > STEP_WAIT_S:
                    break
                time.sleep(STEP_POLL_S)
                read = waited > STEP_READ_AFTER_S
        found: dict[str, Any] | None = self._do(self._core.record_tool_call(config, tool_call))
        return found

    def delete_thread(self, thread_id: str) -> None:
        self._do(self._core.delete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._do(self._core.delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._do(self._core.copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._do(self._core.prune(thread_ids, strategy))

    def get_next_version(self, current: str | int | float | None, channel: None) -> str:  # type: ignore[override]
        return _next_version(current)

    # async, on a worker thread
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None, limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(self._do, self._core.list(config, filter, before, limit))
        for item in found:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def arecord_tool_call(self, config: RunnableConfig, tool_call: Any) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.record_tool_call, config, tool_call)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)
