"""The core's appends (`_Appends`, mixed into `_Core`): the saver's run attached on a
thread's first write, one atomic append per call (built again from a fresh read when
the thread was deleted or re-created), and group commit: the batches of calls that
waited while another was written, appended as one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import berth
from berth import _calls as calls
from berth._errors import Unavailable

from .._drive import Io
from .._model_calls import MODEL_CALL_TYPE
from ._callbacks import Ended, _PendingCalls
from ._fold import _Own, _Thread
from ._records import BATCH_BYTES_MAX, BATCH_EVENTS_MAX, LABEL, SEEN_FRESH_S, ModeMismatch
from ._times import stamps


#: Makes one saver call's events from the thread's folded state (None: no log yet).
Build = Callable[[_Thread | None], list[tuple[str, Any]]]


class _Ungroupable(Exception):
    """A group's builds met a thread with no folded state: they go one at a time."""


#: How long a `put_writes` with no checkpoint waiting beside it waits for one (seconds).
WRITES_WAIT_S = 0.002


class _Waiting:
    """One `put` / `put_writes` batch waiting to be written (`BerthSaver._write`)."""

    __slots__ = ("build", "done", "error", "written")

    def __init__(self, build: Build) -> None:
        self.build = build
        self.done = False
        self.error: BaseException | None = None
        #: `AsyncBerthSaver`: set once the batch is written (a waiting `aput_writes`).
        self.written: asyncio.Event | None = None


class _Appends:
    """Appending, for `_Core`, which makes every attribute named here (and
    `session_id`, `policy`; `refresh` is `_Reads`')."""

    exclusive: bool
    flags: dict[str, bool]
    run_id: str
    threads: dict[str, _Thread]
    attached: set[str]
    lost: set[str]
    created_at: dict[str, int]
    seen: dict[str, tuple[berth.Session, float]]
    pending_lists: dict[tuple[str, str, Any], tuple[list[Any], list[Any]]]
    model_calls: _PendingCalls
    carrying: list[Ended]

    # writing
    def ensure_run(self, session_id: str, thread_id: str) -> Io:
        """Creates the thread's session if needed and attaches this saver's run to it."""
        if session_id in self.attached:
            return
        if session_id in self.lost:
            self.lost.discard(session_id)  # reported once; a later write may take the thread again
            raise berth.OwnershipLost(
                f"langgraph: this saver's run on thread {thread_id!r} lapsed or was displaced; "
                "another writer may have written since",
                status=409,
                body={"code": "run_not_attached", "run": self.run_id},
            )
        # The record the read just before this write made (`refresh`), else read now; the
        # session is created only when missing (a thread's next writer, the usual case,
        # pays no refused create).
        seen = self.seen.pop(session_id, None)
        if seen is not None and time.monotonic() - seen[1] < SEEN_FRESH_S:
            session = seen[0]
        else:
            try:
                session = yield calls.get_session(session_id)
            except berth.NotFound:
                try:
                    session = yield calls.create_session(session_id, title=thread_id, labels=[LABEL],
                                                         policy=self.policy())
                except berth.AlreadyExists:
                    session = yield calls.get_session(session_id)
        mode = (session.header.policy.concurrency or {}).get("mode", "serial")
        wanted = "serial" if self.exclusive else "parallel"
        if mode != wanted:
            raise ModeMismatch(
                f"langgraph: thread {thread_id!r} was created {mode}; this saver is "
                f"{'exclusive' if self.exclusive else 'shared'} ({wanted})",
                status=409,
            )
        yield calls.attach(session_id, run_id=self.run_id, on_busy="reject")
        self.attached.add(session_id)
        self.created_at[session_id] = session.header.created_at
        cached = self.threads.get(session_id)
        if cached is not None and cached.created_at not in (None, session.header.created_at):
            del self.threads[session_id]  # a cache of a log that was deleted: read afresh

    def append(self, thread_id: str, build: Build, conditional: bool = False) -> Io:
        """One atomic append through this saver's run (attached on first write).

        `build` makes the events from the thread's cached state (it is not re-read: a
        write needs only this saver's own earlier writes, and a base another writer
        stored meanwhile is simply not used). If the thread turns out to be gone or
        re-created (NotFound, or our run is not attached there), the cache is dropped
        and the events are built again from a fresh read, so no event ever refers to
        seqs of a log that no longer exists. Our own events are folded in locally when
        nobody appended in between, so the next write needs no read. `conditional`: the
        batch is stored only at the end of the log the state was folded to
        (`expected_seq`; `SeqConflict` otherwise, nothing stored).
        """
        session_id = self.session_id(thread_id)
        for attempt in range(3):
            state = self.threads.get(session_id)
            if state is None:
                state = yield from self.refresh(thread_id)
            self.pending_lists.clear()
            self.carrying.clear()
            start = state.next_seq if state is not None else 0
            events = build(state)
            if not events:
                return None
            yield from self.ensure_run(session_id, thread_id)
            if self.threads.get(session_id) is not state:
                # Attaching found a different log than the cache describes (deleted and
                # re-created meanwhile): build again from a fresh read.
                state = yield from self.refresh(thread_id)
                self.pending_lists.clear()
                self.carrying.clear()
                start = state.next_seq if state is not None else 0
                events = build(state)
                if not events:
                    return None
            # The batch's size is its request body's: encoded once, for sending.
            call = calls.append(session_id, _sent(events, stamps(build, events)), run=self.run_id,
                                expected_seq=start if conditional else None)
            size = len(call.body or b"")
            if (size > BATCH_BYTES_MAX or len(events) > BATCH_EVENTS_MAX) and not conditional:
                # Over berth's batch limits with the messages' vocabulary: the same batch
                # without it (the lg record is what the saver needs; the turns stay). A
                # group (`conditional`) is refused instead, and its calls go one by one.
                self.flags["plain"] = True
                try:
                    self.pending_lists.clear()
                    self.carrying.clear()
                    events = build(state)
                finally:
                    self.flags["plain"] = False
                call = calls.append(session_id, _sent(events, stamps(build, events)), run=self.run_id,
                                    expected_seq=start if conditional else None)
                size = len(call.body or b"")
            if size > BATCH_BYTES_MAX or len(events) > BATCH_EVENTS_MAX:
                raise berth.LimitExceeded(
                    f"langgraph: one saver call would append {size} bytes in {len(events)} events "
                    f"(the batch limit is {BATCH_BYTES_MAX} bytes, {BATCH_EVENTS_MAX} events); nothing was stored",
                    status=413,
                    body={"code": "limit_exceeded", "limit_name": "batch_bytes", "limit": BATCH_BYTES_MAX,
                          "actual": size},
                )
            try:
                outcome = yield call
            except (berth.OwnershipLost, berth.NotFound):
                # The run lapsed (a long pause) or the thread was deleted meanwhile: a shared
                # saver attaches again; an exclusive one reports that it lost the thread.
                self.attached.discard(session_id)
                self.threads.pop(session_id, None)
                if self.exclusive or attempt == 2:
                    raise
                continue
            self.model_calls.carried(session_id, self.carrying)
            self.carrying.clear()
            self._fold_own(session_id, events, outcome)
            folded = self.threads.get(session_id)
            if folded is not None and not outcome.duplicate:
                for (ns, channel, version), (objects, snapshots) in self.pending_lists.items():
                    found = folded.blobs.get((ns, channel, version))
                    if found is not None and found[0] >= outcome.first_seq:
                        folded.lists[(ns, channel)] = (version, found[0], objects, snapshots)
            self.pending_lists.clear()
            return outcome
        raise AssertionError("unreachable")

    def carried_calls(self, session_id: str, which: Callable[[Ended], bool]) -> list[tuple[str, Any]]:
        """The model calls waiting for this thread that `which` picks and the batch being
        built does not carry yet, which it carries now: `(type, event)`, the event whole
        as `model_call_event` made it. Once the batch is stored no later one carries
        them; a batch not stored leaves them waiting (`append` starts each build afresh)."""
        carrying = {id(call) for call in self.carrying}
        new = [call for call in self.model_calls.waiting(session_id) if id(call) not in carrying and which(call)]
        self.carrying.extend(new)
        return [(MODEL_CALL_TYPE, call.event) for call in new]

    def append_group(self, thread_id: str, builds: list[Build]) -> Io:
        """Several saver calls' batches to one thread as one atomic append (group commit):
        one durable write for calls that arrived while another was being written.

        Each build sees the state the builds before it leave — their events folded at the
        seqs they will have, which a later build may refer to — so the batch is stored
        only at the seq the builds assumed (`conditional`: another writer's append in
        between is a `SeqConflict`, nothing stored), and the log holds exactly what the
        calls appended one after another would have stored. Once it has landed, the state
        is already folded, `next_seq` included (`_fold_own` sees it past the batch and
        leaves it); if it was not stored, or was a resend's duplicate, the cached state,
        which already holds the batch, is dropped and the next call reads the log. Raises
        `_Ungroupable` (nothing stored) when the thread has no log yet.
        """
        if len(builds) == 1:
            return (yield from self.append(thread_id, builds[0]))
        session_id = self.session_id(thread_id)
        #: Each event's time, from the build that made it (`_times.stamps`).
        stamped: list[int | None] = []

        def build(state: _Thread | None) -> list[tuple[str, Any]]:
            if state is None:
                raise _Ungroupable()
            events: list[tuple[str, Any]] = []
            stamped.clear()
            for one in builds:
                made = one(state)
                for offset, (kind, data) in enumerate(made):
                    state.apply(_Own(kind, data, state.next_seq + offset, self.run_id))
                state.next_seq += len(made)
                events.extend(made)
                stamped.extend(stamps(one, made))
            return events

        build.stamps = stamped  # type: ignore[attr-defined]

        try:
            outcome = yield from self.append(thread_id, build, conditional=True)
        except BaseException:
            self.threads.pop(session_id, None)
            raise
        if outcome is not None and outcome.duplicate:
            self.threads.pop(session_id, None)
        return outcome

    def write_group(self, thread_id: str, group: list[_Waiting]) -> Io:
        """Writes the batches of `group` (calls waiting to append to one thread): as one
        `append_group`, or, when that is refused or a build fails (nothing stored), one
        call at a time, so each call gets its own outcome. An ambiguous failure
        (`Unavailable`, `Internal`: perhaps stored) goes to every caller, as it would
        to one. Marks every call done, with its error if any; raises nothing."""
        try:
            if len(group) > 1:
                try:
                    yield from self.append_group(thread_id, [one.build for one in group])
                    return
                except (Unavailable, berth.Internal):
                    raise
                except Exception:  # noqa: BLE001 - refused, or a build failed: nothing was stored
                    pass
            for one in group:
                try:
                    yield from self.append(thread_id, one.build)
                except Exception as error:  # noqa: BLE001 - handed to that batch's caller
                    one.error = error
                one.done = True
        except BaseException as error:  # noqa: BLE001 - handed to every caller of the group
            for one in group:
                if not one.done:
                    one.error = error
            if not isinstance(error, Exception):
                raise  # an interrupt, after telling every caller
        finally:
            for one in group:
                one.done = True

    def _fold_own(self, session_id: str, events: list[tuple[str, Any]], outcome: berth.AppendOutcome) -> None:
        state = self.threads.get(session_id)
        if state is None and outcome.first_seq == 0 and not outcome.duplicate:
            state = self.threads[session_id] = _Thread()
            state.created_at = self.created_at.get(session_id)
        if state is None or outcome.duplicate or outcome.first_seq != state.next_seq:
            return  # another writer appended in between: the next read folds both, in order
        for offset, (kind, data) in enumerate(events):
            state.apply(_Own(kind, data, outcome.first_seq + offset, self.run_id))
        state.next_seq = outcome.next_seq


def _sent(events: list[tuple[str, Any]], times: list[int | None]) -> list[Any]:
    """A batch as appended: the `lg/*` record marked ignorable — berth's readers and its
    repair may skip it, the vocabulary beside it tells the conversation; a `model/call`
    is its whole event (ignorable, its time the call's end). The others at their build's
    time (`times`, one per event: `_times`), or the server's where it is None."""
    out: list[Any] = []
    for (kind, data), at in zip(events, times):
        if kind == MODEL_CALL_TYPE:
            out.append(data)
            continue
        event: dict[str, Any] = {"type": kind, "data": data}
        if kind.startswith("lg/"):
            event["ignorable"] = True
        if at is not None:
            event["time"] = at
        out.append(event)
    return out
