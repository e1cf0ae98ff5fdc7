"""Durable smolagents runs on berth: `BerthAgentLog` (smolagents 1.26.0).

smolagents keeps an agent's memory in-process only (`agent.memory.steps`) and has no
store interface, so this is a persistence helper, not a drop-in (docs/smolagents.md):

```python
log = BerthAgentLog(berth.Client(url), "job-42")   # or berth.open(...)
log.attach(agent)              # rebuilds agent.memory.steps from the session, holds its run
agent.run(task, reset=False)   # continues after a crash (reset=True starts over, recorded too)
log.close()
```

- **One berth session per agent job**, labelled `smolagents`, created `serial` and held
  by one berth run (attached with `on_busy="reject"`, heartbeated in the background):
  a second process gets `berth.Busy`; a crashed holder's run is ended when its lease
  lapses (`run_lease_ttl_ms`), and the next `attach` takes over.
- **The task is recorded when `run()` starts** (before any model call), as
  `user/message {content: task, smolagents: {reset}}`; every step is appended durably by
  a step callback when smolagents finalizes it: `smol/step {kind: "action" | "planning",
  step}` (the step's `dict()`, without `model_input_messages` — smolagents rebuilds
  those from memory each step — and without images); the final answer as
  `assistant/message {content: str(output), smolagents: {output}}`.
- **The loader** (`load`, called by `attach`) folds those events back into `TaskStep`,
  `ActionStep` and `PlanningStep` objects, so `run(task, reset=False)` continues with
  the same memory the crashed process had after its last finished step.
"""

from __future__ import annotations

import inspect
import json
import random
import threading
import time
import weakref
from typing import Any

from smolagents import utils as smol_utils
from smolagents.memory import ActionStep, FinalAnswerStep, PlanningStep, TaskStep, ToolCall
from smolagents.models import ChatMessage
from smolagents.monitoring import Timing, TokenUsage
from smolagents.utils import make_json_serializable

import berth
from berth import _calls as calls

__all__ = ["ACTIVITY_TTL_MS_FOREVER", "BerthAgentLog", "LABEL", "STEP_TYPE", "steps_from_events"]

LABEL = "smolagents"
STEP_TYPE = "smol/step"
TASK_TYPE = "user/message"
FINAL_TYPE = "assistant/message"
#: Ten years: a job's session does not expire under berth's 24 h idle default.
ACTIVITY_TTL_MS_FOREVER = 10 * 365 * 24 * 3600 * 1000


def _jsonable(value: Any) -> Any:
    """`value` as JSON (smolagents' own conversion, then `default=str` for the rest)."""
    return json.loads(json.dumps(make_json_serializable(value), default=str))


def _step_data(step: ActionStep | PlanningStep) -> dict[str, Any]:
    data = step.dict()
    data.pop("model_input_messages", None)
    if isinstance(step, ActionStep):
        images = step.observations_images or []
        data["observations_images"] = None
        data["observations_images_dropped"] = len(images)
    data.get("timing", {}).pop("duration", None)
    return {"kind": "action" if isinstance(step, ActionStep) else "planning", "step": _jsonable(data)}


def _timing(data: dict[str, Any] | None) -> Timing:
    data = data or {}
    return Timing(start_time=data.get("start_time") or 0.0, end_time=data.get("end_time"))


def _usage(data: dict[str, Any] | None) -> TokenUsage | None:
    if not data:
        return None
    return TokenUsage(input_tokens=data["input_tokens"], output_tokens=data["output_tokens"])


def _message(data: dict[str, Any] | None) -> ChatMessage | None:
    return ChatMessage.from_dict(data) if data else None


def _error(data: dict[str, Any] | None) -> Exception | None:
    """The step's `AgentError` again, of the same class, without logging it a second time
    (`AgentError.__init__` logs)."""
    if not data:
        return None
    kind = getattr(smol_utils, str(data.get("type")), None)
    if not (isinstance(kind, type) and issubclass(kind, smol_utils.AgentError)):
        kind = smol_utils.AgentError
    error = kind.__new__(kind)
    Exception.__init__(error, data.get("message", ""))
    error.message = data.get("message", "")
    return error


def _action(data: dict[str, Any]) -> ActionStep:
    return ActionStep(
        step_number=data["step_number"],
        timing=_timing(data.get("timing")),
        model_input_messages=None,
        tool_calls=[
            ToolCall(name=call["function"]["name"], arguments=call["function"]["arguments"], id=call["id"])
            for call in data.get("tool_calls") or []
        ]
        or None,
        error=_error(data.get("error")),  # type: ignore[arg-type]
        model_output_message=_message(data.get("model_output_message")),
        model_output=data.get("model_output"),
        code_action=data.get("code_action"),
        observations=data.get("observations"),
        observations_images=None,
        action_output=data.get("action_output"),
        token_usage=_usage(data.get("token_usage")),
        is_final_answer=bool(data.get("is_final_answer")),
    )


def _planning(data: dict[str, Any]) -> PlanningStep:
    return PlanningStep(
        model_input_messages=[],
        model_output_message=_message(data.get("model_output_message")),  # type: ignore[arg-type]
        plan=data.get("plan", ""),
        timing=_timing(data.get("timing")),
        token_usage=_usage(data.get("token_usage")),
    )


def steps_from_events(events: Any) -> list[TaskStep | ActionStep | PlanningStep]:
    """Folds a session's events into `agent.memory.steps`: a task with `reset` starts
    the list over, as `run(reset=True)` does."""
    steps: list[TaskStep | ActionStep | PlanningStep] = []
    for event in events:
        data = event.data if isinstance(event.data, dict) else {}
        if event.type == TASK_TYPE and "smolagents" in data:
            if data["smolagents"].get("reset"):
                steps = []
            steps.append(TaskStep(task=data["content"]))
        elif event.type == STEP_TYPE:
            steps.append(_action(data["step"]) if data.get("kind") == "action" else _planning(data["step"]))
    return steps


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
