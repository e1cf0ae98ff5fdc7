"""`BerthAgentLog`: one smolagents agent job in one berth session.

- **One berth session per agent job**, labelled `smolagents`, created `serial` and held
  by one berth run (attached with `on_busy="reject"` by a resume, which also closes the
  turns a crashed holder left open; heartbeated in the background: `_hold`).
- `attach` rebuilds the agent's memory from the session (`_fold`) and hooks the agent:
  its `run` (the task, and the turn's end on an error), its step callbacks (each finished
  step, the final answer) and its `_step_stream` (when the step's model answered or
  raised, what it requested and observed, noted without writing). What each moment
  appends is `_turns`' (each model call a `model/call` in its step's append); durable
  tools (`_tools`) call `_before_tool` / `_after_tool`.
"""

from __future__ import annotations

import inspect
import random
import threading
import time
import weakref
from collections.abc import Generator
from typing import Any

from smolagents.agents import ActionOutput, ToolOutput
from smolagents.memory import ActionStep, FinalAnswerStep, PlanningStep, TaskStep, ToolCall
from smolagents.models import ChatMessageStreamDelta

import berth
from berth import _calls as calls

from ._fold import fold
from ._hold import Hold
from ._records import ACTIVITY_TTL_MS_FOREVER, LABEL
from ._turns import Turns
from ._vocabulary import Call, Event

#: The sentence smolagents 1.26.0's `run()` adds to the task for `additional_args`.
_ADDITIONAL_ARGS = """
You have been provided with these additional arguments, that you can access directly using the keys as variables:
{}."""


class BerthAgentLog:
    """One smolagents agent job, durably, in the berth session `session_id` (an id of
    berth's grammar, `[A-Za-z0-9._~-]{1,128}`), written by one berth run at a time."""

    def __init__(
        self,
        client: berth.Client,
        session_id: str,
        *,
        run_lease_ttl_ms: int = 30_000,
        activity_ttl_ms: int = ACTIVITY_TTL_MS_FOREVER,
        labels: list[str] | None = None,
        wait_s: float = 0.0,
    ) -> None:
        """`wait_s`: how long `attach` waits for another holder (a crashed process's run
        until its lease lapses) before raising `berth.Busy`."""
        self.client = client
        self.session_id = session_id
        self.wait_s = wait_s
        self._policy = {
            "concurrency": {"mode": "serial"},
            "activity_ttl_ms": activity_ttl_ms,
            "run_lease_ttl_ms": run_lease_ttl_ms,
        }
        self._labels = [LABEL, *(calls.listed("labels", labels) if labels is not None else [])]
        self._heartbeat_s = max(0.05, run_lease_ttl_ms / 3000)
        self._hold = Hold(client, session_id)
        self._finalizer = weakref.finalize(self, self._hold.release)
        self._agent: Any = None
        self._turns = Turns()
        self._closed = False
        # Durable tools may run in parallel threads (a ToolCallingAgent's calls).
        self._lock = threading.Lock()

    @property
    def run_id(self) -> str | None:
        return self._hold.run_id

    # ----- holding the session -----------------------------------------------------
    def _take(self) -> None:
        """Attaches by `resume`, creating the session first only when it does not exist:
        a job's next `attach` (the usual case) costs one round trip and one catalog write,
        not a refused create before them."""
        if self._hold.run_id is not None:
            return
        deadline = time.monotonic() + self.wait_s
        delay = 0.05
        created = False
        while True:
            try:
                outcome = self.client.resume(self.session_id, on_busy="reject")
                break
            except berth.NotFound:
                if created:
                    raise  # created (or found existing) just now, and still not there: deleted meanwhile
                created = True
                try:
                    self.client.create_session(self.session_id, title=self.session_id, labels=self._labels,
                                               policy=self._policy)
                except berth.AlreadyExists:
                    pass  # another process created it meanwhile: resume it
            except berth.Busy:
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay * (0.5 + random.random()))
                delay = min(1.0, delay * 2)
        self._hold.run_id = outcome.attachment.run_id
        self._hold.lost = None
        self._hold.stop.clear()
        threading.Thread(target=self._hold.beat, args=(self._heartbeat_s,), daemon=True,
                         name=f"berth-smolagents-{self.session_id}").start()

    def _append(self, events: list[Event]) -> None:
        if self._hold.lost is not None:
            raise self._hold.lost
        if self._hold.run_id is None:
            raise RuntimeError("BerthAgentLog: attach(agent) first (or the log was closed)")
        self.client.append(self.session_id, events, run=self._hold.run_id)

    def _write(self, moment: Any, *args: Any) -> Any:
        """`moment(*args)` of the turns, its events appended durably; the turns' state is
        put back when the append fails (nothing of it was stored)."""
        with self._lock:
            before = self._turns.snapshot()
            try:
                answer = moment(*args)
                events = answer[1] if isinstance(answer, tuple) else answer
                if events:
                    self._append(events)
            except BaseException:
                self._turns.restore(before)
                raise
            return answer

    # ----- the agent -----------------------------------------------------------------
    def load(self, agent: Any) -> int:
        """Rebuilds `agent.memory.steps` from the session; returns how many steps."""
        folded = fold(self.client.iter_events(self.session_id))
        agent.memory.steps = folded.steps
        with self._lock:
            self._turns.next_turn = max(self._turns.next_turn, folded.next_turn)
        return len(folded.steps)

    def attach(self, agent: Any) -> Any:
        """Holds the session, rebuilds the agent's memory from it, and makes the agent
        record its tasks and steps here. Returns the agent."""
        if self._agent is not None:
            raise RuntimeError("BerthAgentLog: already attached to an agent")
        self._take()
        self.load(agent)
        for kind in (ActionStep, PlanningStep, FinalAnswerStep):
            agent.step_callbacks.register(kind, self._on_step)
        agent.run = self._hook_run(agent.run)
        agent._step_stream = self._hook_step_stream(agent._step_stream)
        self._agent = agent
        return agent

    def continue_from(self, source_session_id: str, agent: Any) -> Any:
        """Continues berth session `source_session_id` — a conversation any drop-in wrote
        (its berth id, as `berth sessions ls` lists it) — in this log's session, which must
        not exist yet: forks the source at 0 into it (its header names the source; this
        log's labels and policy), attaches `agent`, and writes the source's conversation as
        this log's turns (`berth.history.smolagents.steps_of`: one turn per user message),
        so `agent.memory.steps` holds it and `agent.run(task, reset=False)` continues. The
        source is only read. Returns the agent."""
        from ...history import ToolResult, conversation
        from ...history.smolagents import steps_of

        items = conversation(self.client, source_session_id)
        results = {item.call_id: (item.output, item.is_error) for item in items if isinstance(item, ToolResult)}
        self.client.fork_session(source_session_id, upto_seq=0, new_id=self.session_id, title=self.session_id,
                                 labels=self._labels, policy=self._policy)
        self.attach(agent)
        turns: list[tuple[str, list[Any]]] = []
        for step in steps_of(items):
            if isinstance(step, TaskStep):
                turns.append((step.task, []))
            elif turns:
                turns[-1][1].append(step)
            else:
                turns.append(("", [step]))  # results before any user message: an untitled turn
        for task, steps in turns:
            self._write(self._turns.seeded, task, steps, results)
        self.load(agent)
        return agent

    def _hook_run(self, original: Any) -> Any:
        signature = inspect.signature(original)

        def run(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            task = bound.arguments["task"]
            extra = bound.arguments.get("additional_args")
            if extra:  # the text smolagents 1.26.0's run() gives the TaskStep
                task += _ADDITIONAL_ARGS.format(str(extra))
            self._write(self._turns.begin, task, bool(bound.arguments.get("reset", True)),
                        len(bound.arguments.get("images") or []), getattr(self._agent, "model", None))
            try:
                result = original(*args, **kwargs)
            except BaseException as error:
                self._failed(error)
                raise
            return self._watch(result) if inspect.isgenerator(result) else result

        return run

    def _watch(self, stream: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
        """`run(stream=True)`'s steps, the turn ended if they raise."""
        try:
            yield from stream
        except GeneratorExit:
            raise  # left open: the next run(), close() or berth's repair ends it
        except BaseException as error:
            self._failed(error)
            raise

    def _failed(self, error: BaseException) -> None:
        if isinstance(error, (berth.BerthError, OSError)) or self._hold.lost is not None:
            return  # berth refused or could not be reached: nothing more is written
        try:
            self._write(self._turns.failed, error)
        except (berth.BerthError, OSError, RuntimeError):
            pass  # the run's own error is the one raised

    def _hook_step_stream(self, original: Any) -> Any:
        turns = self._turns

        def step_stream(memory_step: ActionStep) -> Generator[Any, Any, Any]:
            with self._lock:
                turns.step_begins(memory_step)
            try:
                for output in original(memory_step):
                    # Noted before smolagents goes on: a ToolCall comes before its tool runs.
                    with self._lock:
                        if not isinstance(output, ChatMessageStreamDelta):
                            turns.model_answered()  # the step acts on the model's answer
                        if isinstance(output, ToolCall):
                            turns.requested(output)
                        elif isinstance(output, ToolOutput):
                            turns.observed(output.id, output.observation)
                        elif isinstance(output, ActionOutput) and output.is_final_answer:
                            turns.answered_with(output.output)
                    yield output
            except GeneratorExit:
                raise  # the stream was abandoned: nothing to note
            except BaseException as error:
                with self._lock:
                    turns.model_failed(error)
                raise
            with self._lock:
                turns.model_answered()

        return step_stream

    def _on_step(self, step: Any, agent: Any = None) -> None:
        if self._closed:
            return  # a stream's step smolagents finalizes when the abandoned stream is collected
        if isinstance(step, FinalAnswerStep):
            self._write(self._turns.final, step.output)
        elif isinstance(step, ActionStep):
            self._write(self._turns.step_finished, step)
        else:
            self._write(self._turns.planned, step)

    # ----- durable tools (`_tools`) ----------------------------------------------------
    def _before_tool(self, name: str, arguments: Any) -> Call:
        call, _ = self._write(self._turns.before_tool, name, arguments)
        return call  # type: ignore[no-any-return]

    def _after_tool(self, call: Call, content: str, is_error: bool) -> None:
        with self._lock:
            self._turns.tool_ended(call, content, is_error)

    def close(self) -> None:
        """Ends a turn this process left open (`reason: aborted`), then detaches the run
        (idempotent). The agent keeps its in-memory steps."""
        if self._hold.run_id is not None and self._hold.lost is None and self._turns.turn is not None:
            try:
                self._write(self._turns.abort)
            except (berth.BerthError, OSError):
                pass  # berth's repair ends it at the next attach
        self._closed = self._agent is not None
        self._finalizer()

    def __enter__(self) -> BerthAgentLog:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
