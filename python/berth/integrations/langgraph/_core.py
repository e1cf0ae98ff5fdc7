"""The saver's logic (`_Core`): its reads (`_reads`), the batches a put makes
(`_builds`) and their appends (`_appends`), and the thread-wide operations here.

The I/O is written once, as generators of berth calls, and driven by a sync or an
async client (`BerthSaver`, `AsyncBerthSaver`).
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig

import berth
from berth import _calls as calls
from berth._errors import BerthError

from .._drive import Io
from ._appends import _Appends
from ._builds import _Builds
from ._callbacks import Ended, ModelCallRecorder, _PendingCalls
from ._fold import _Thread
from ._messages import tool_call_data
from ._reads import _Reads
from ._records import LABEL, thread_session_id
from ._talk import _Talk
from ._times import Timed, now_ms
from ._vocabulary import tool_start_events


class _Core(_Reads, _Appends, _Builds):
    """The saver's logic, written once as generators of berth calls (`yield call` sends
    it and answers the result, or raises the berth error into the generator).

    Shared, all but `serde`, by a saver and the copies `with_allowlist` makes of it
    (`with_serde`): they hold one run. So no attribute is rebound after `__init__`, only
    mutated, or a copy would go on with the old value."""

    def __init__(
        self,
        serde: Any,
        *,
        prefix: str,
        exclusive: bool,
        run_lease_ttl_ms: int,
        activity_ttl_ms: int,
        runs_max: int,
    ) -> None:
        self.serde = serde
        self.prefix = prefix
        self.exclusive = exclusive
        self.run_lease_ttl_ms = run_lease_ttl_ms
        self.activity_ttl_ms = activity_ttl_ms
        self.runs_max = runs_max
        self.run_id = f"lg-{uuid.uuid4().hex}"
        self.threads: dict[str, _Thread] = {}
        self.attached: set[str] = set()
        # Exclusive threads whose run was lost between writes (a failed heartbeat): the
        # next write there reports it instead of attaching again as if nothing happened.
        self.lost: set[str] = set()
        #: session id -> `created_at` of the session this saver attached to.
        self.created_at: dict[str, int] = {}
        #: session id -> (its catalog record, when it was read: monotonic), as the last
        #: `refresh` read it, for the attach of the write that follows (`ensure_run`).
        self.seen: dict[str, tuple[berth.Session, float]] = {}
        self.lock = threading.RLock()
        #: A stored checkpoint's base64 text -> its `channel_versions`, for the last few
        #: this saver serialized (`_channel_versions`), oldest first.
        self.versions: dict[str, dict[str, Any]] = {}
        #: (ns, channel, version) -> (items, snapshots) of the list blobs the batch being
        #: built stores; remembered in the thread's `lists` once the batch is folded.
        self.pending_lists: dict[tuple[str, str, Any], tuple[list[Any], list[Any]]] = {}
        #: `plain`: the batch being built leaves the messages' vocabulary out (`append`:
        #: with it, the batch would pass berth's limits).
        self.flags = {"plain": False}
        #: The `model/call` events the recorder saw, waiting for an append to their thread
        #: (`carried_calls`), and the handler graphs are given (`BerthSaver.model_calls`).
        self.model_calls = _PendingCalls()
        self.recorder = ModelCallRecorder(self.model_calls, self.session_id)
        #: The waiting calls the batch being built carries (`_Appends.append`).
        self.carrying: list[Ended] = []

    def with_serde(self, serde: Any) -> _Core:
        """This core for a saver that (de)serializes with `serde`: the same run, threads,
        caches and lock — every other attribute is the same object — and its own serde."""
        shared = copy.copy(self)
        shared.serde = serde
        return shared

    # ids
    def session_id(self, thread_id: str) -> str:
        return thread_session_id(str(thread_id), self.prefix)

    def policy(self) -> dict[str, Any]:
        concurrency = {"mode": "serial"} if self.exclusive else {"mode": "parallel", "runs_max": self.runs_max}
        return {"concurrency": concurrency, "activity_ttl_ms": self.activity_ttl_ms,
                "run_lease_ttl_ms": self.run_lease_ttl_ms}

    def delete_thread(self, thread_id: str) -> Io:
        session_id = self.session_id(str(thread_id))
        self.threads.pop(session_id, None)
        self.attached.discard(session_id)
        self.lost.discard(session_id)
        self.seen.pop(session_id, None)
        try:
            yield calls.delete_session(session_id)
        except berth.NotFound:
            pass

    def delete_for_runs(self, run_ids: Sequence[str]) -> Io:
        runs = {str(run) for run in run_ids}
        if not runs:
            return
        thread_ids = yield from self.thread_ids()
        for thread_id in thread_ids:
            state = yield from self.refresh(thread_id)
            if state is None:
                continue
            if any(record["run_id"] in runs for checkpoints in state.checkpoints.values()
                   for record in checkpoints.values()):
                yield from self.append(thread_id, lambda _state: [("lg/drop-runs", {"runs": sorted(runs)})])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> Io:
        source = self.session_id(str(source_thread_id))
        target = self.session_id(str(target_thread_id))
        try:
            yield calls.fork_session(source, new_id=target)
        except berth.NotFound:
            return
        # The fork copies every event at its seq (so `at` and delta bases stay right)
        # and ends with berth's `session/end-seed`, which the fold skips.
        yield calls.update_session(target, title=str(target_thread_id), labels=[LABEL])
        self.threads.pop(target, None)
        self.attached.discard(target)

    def prune(self, thread_ids: Sequence[str], strategy: str) -> Io:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"langgraph: unknown prune strategy {strategy!r} (keep_latest or delete)")
        for thread_id in thread_ids:
            if strategy == "delete":
                yield from self.delete_thread(thread_id)
                continue
            state = yield from self.refresh(str(thread_id))
            if state is None:
                continue
            keep = {ns: max(checkpoints) for ns, checkpoints in state.checkpoints.items() if checkpoints}
            if any(len(checkpoints) > 1 for checkpoints in state.checkpoints.values()):
                yield from self.append(str(thread_id), lambda _state: [("lg/prune", {"keep": keep})])

    def checkpoint_known(self, thread_id: str, checkpoint_id: str, read: bool) -> Io:
        """Whether the thread's root checkpoint `checkpoint_id` is in the log as this saver
        folded it (`read`: bring the fold up to date first; it is read anyway when there
        is none)."""
        state = self.threads.get(self.session_id(thread_id))
        if state is None or read:
            state = yield from self.refresh(thread_id)
        return state is not None and checkpoint_id in state.checkpoints.get("", {})

    def record_tool_call(self, config: RunnableConfig, call: Any) -> Io:
        """`durable_tool_node`'s record that a tool call starts, durable before the tool
        runs (a `tool/call`, in its own append: the one extra write a call costs).

        Answers None when the tool may run; otherwise (nothing appended) the data of what
        stands for its result: `{}` when another run recorded this call's start in the
        turn still open and no result followed (that process died while the tool ran:
        its outcome is unknown), or the `tool/result` berth's resume wrote for it."""
        data = tool_call_data(call)
        if data is None:
            return None  # a call without an id: nothing to name its record by
        answer: list[dict[str, Any] | None] = [None]

        def build(state: _Thread | None) -> list[tuple[str, Any]]:
            talk = state.talk if state is not None else _Talk()
            answer[0] = talk.in_doubt(data["call_id"], self.run_id)
            if answer[0] is not None or talk.recorded_here(data["call_id"]):
                return []  # answered without running, or recorded in this turn already (a retry)
            return tool_start_events(talk, data)

        # At this process's time of the record (the tool's start), as the model calls are.
        yield from self.append(str(config["configurable"]["thread_id"]), Timed(build, now_ms()))
        return answer[0]

    def heartbeat_all(self) -> Io:
        for session_id in list(self.attached):
            try:
                yield calls.heartbeat(session_id, self.run_id)
            except BerthError:
                # A shared saver attaches again on its next write; an exclusive one reports
                # the loss there (OwnershipLost).
                self.attached.discard(session_id)
                if self.exclusive:
                    self.lost.add(session_id)

    def detach_all(self) -> Io:
        for session_id in list(self.attached):
            self.attached.discard(session_id)
            try:
                yield calls.detach(session_id, self.run_id)
            except BerthError:
                pass  # already gone: the lease lapsed or the thread was deleted
