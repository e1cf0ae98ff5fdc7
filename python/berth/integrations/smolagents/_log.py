"""`BerthAgentLog`: one smolagents agent job in one berth session.

- **One berth session per agent job**, labelled `smolagents`, created `serial` and held
  by one berth run (attached with `on_busy="reject"`, heartbeated in the background):
  a second process gets `berth.Busy`; a crashed holder's run is ended when its lease
  lapses (`run_lease_ttl_ms`), and the next `attach` takes over.
- `attach` rebuilds the agent's memory from the session (`load`) and makes the agent
  record its task and steps there (the records: `_records`).
"""

from __future__ import annotations

import inspect
import random
import threading
import time
import weakref
from typing import Any

from smolagents.memory import ActionStep, FinalAnswerStep, PlanningStep

import berth
from berth import _calls as calls

from ._records import (
    ACTIVITY_TTL_MS_FOREVER,
    FINAL_TYPE,
    LABEL,
    STEP_TYPE,
    TASK_TYPE,
    _jsonable,
    _step_data,
    steps_from_events,
)


class _Hold:
    """The run this log holds and its heartbeat (referenced by the finalizer, never the log)."""

    def __init__(self, client: berth.Client, session_id: str) -> None:
        self.client = client
        self.session_id = session_id
        self.run_id: str | None = None
        self.lost: BaseException | None = None
        self.stop = threading.Event()

    def beat(self, interval_s: float) -> None:
        run_id = self.run_id
        while not self.stop.wait(interval_s):
            try:
                self.client.heartbeat(self.session_id, run_id)  # type: ignore[arg-type]
            except (berth.OwnershipLost, berth.NotFound, berth.Terminal) as error:
                self.lost = error
                return
            except (berth.BerthError, OSError):
                continue  # transient: the next beat tries again

    def release(self) -> None:
        self.stop.set()
        run_id, self.run_id = self.run_id, None
        if run_id is not None and self.lost is None:
            try:
                self.client.detach(self.session_id, run_id, outcome="completed")
            except (berth.BerthError, OSError):
                pass  # gone already: the lease lapses on its own


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
        self._hold = _Hold(client, session_id)
        self._finalizer = weakref.finalize(self, self._hold.release)
        self._agent: Any = None

    @property
    def run_id(self) -> str | None:
        return self._hold.run_id

    # ----- holding the session -----------------------------------------------------
    def _take(self) -> None:
        if self._hold.run_id is not None:
            return
        try:
            self.client.create_session(self.session_id, title=self.session_id, labels=self._labels,
                                       policy=self._policy)
        except berth.AlreadyExists:
            pass
        deadline = time.monotonic() + self.wait_s
        delay = 0.05
        while True:
            try:
                outcome = self.client.resume(self.session_id, on_busy="reject")
                break
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

    def _append(self, events: list[dict[str, Any]]) -> None:
        if self._hold.lost is not None:
            raise self._hold.lost
        if self._hold.run_id is None:
            raise RuntimeError("BerthAgentLog: attach(agent) first (or the log was closed)")
        self.client.append(self.session_id, events, run=self._hold.run_id)

    # ----- the agent -----------------------------------------------------------------
    def load(self, agent: Any) -> int:
        """Rebuilds `agent.memory.steps` from the session; returns how many steps."""
        steps = steps_from_events(self.client.iter_events(self.session_id))
        agent.memory.steps = steps
        return len(steps)

    def attach(self, agent: Any) -> Any:
        """Holds the session, rebuilds the agent's memory from it, and makes the agent
        record its tasks and steps here. Returns the agent."""
        if self._agent is not None:
            raise RuntimeError("BerthAgentLog: already attached to an agent")
        self._take()
        self.load(agent)
        for kind in (ActionStep, PlanningStep, FinalAnswerStep):
            agent.step_callbacks.register(kind, self._on_step)
        original = agent.run
        signature = inspect.signature(original)

        def run(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            task = bound.arguments["task"]
            extra = bound.arguments.get("additional_args")
            if extra:  # the text smolagents 1.26.0's run() gives the TaskStep
                task += f"""
You have been provided with these additional arguments, that you can access directly using the keys as variables:
{str(extra)}."""
            self._append([{"type": TASK_TYPE, "data": {"content": task, "smolagents": {
                "reset": bool(bound.arguments.get("reset", True)),
                "images_dropped": len(bound.arguments.get("images") or [])}}}])
            return original(*args, **kwargs)

        agent.run = run
        self._agent = agent
        return agent

    def _on_step(self, step: Any, agent: Any = None) -> None:
        if isinstance(step, FinalAnswerStep):
            output = _jsonable(step.output)
            self._append([{"type": FINAL_TYPE, "data": {"content": str(step.output), "smolagents": {"output": output}}}])
        else:
            self._append([{"type": STEP_TYPE, "data": _step_data(step), "ignorable": True}])

    def close(self) -> None:
        """Detaches the run (idempotent). The agent keeps its in-memory steps."""
        self._finalizer()

    def __enter__(self) -> BerthAgentLog:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
