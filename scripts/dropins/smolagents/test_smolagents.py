"""berth.integrations.smolagents on both transports: a CodeAgent with a scripted model is
SIGKILLed mid-run in a child process and continued by another process from berth
(`run(task, reset=False)`), the task is durable before any model call, one writer at a
time, `reset=True` is recorded, the steps round-trip, and `labels=` is a list."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from smolagents.memory import ActionStep, TaskStep

import berth
from berth.integrations.smolagents import LABEL, STEP_TYPE, BerthAgentLog, steps_from_events
from smol_fakes import SCRIPT, TASK, ScriptedModel, make_agent

HERE = Path(__file__).resolve().parent


def crash(place: Any, session_id: str, kill_at: int) -> None:
    child = subprocess.run(
        [sys.executable, str(HERE / "smol_child.py"), *place.child_args(), session_id, str(kill_at)],
        capture_output=True, text=True, timeout=60, cwd=HERE,
    )
    assert child.returncode == -9, child.stderr[-2000:]


def test_killed_run_continues(place: Any) -> None:
    session_id = f"job-{uuid.uuid4().hex[:8]}"
    crash(place, session_id, kill_at=3)  # steps 1 and 2 finished and stored
    client = place.sync_client()
    model = ScriptedModel(["Thought: finish.\n<code>\nfinal_answer('42')\n</code>"])
    agent = make_agent(model)
    with BerthAgentLog(client, session_id, run_lease_ttl_ms=1500, wait_s=15) as log:
        log.attach(agent)  # waits out the dead run's lease
        steps = agent.memory.steps
        assert [type(step).__name__ for step in steps] == ["TaskStep", "ActionStep", "ActionStep"]
        assert steps[0].task == TASK
        assert [step.step_number for step in steps[1:]] == [1, 2]
        assert "x is 21" in steps[1].observations and "y is 42" in steps[2].observations
        assert steps[1].code_action == "x = 21\nprint('x is', x)"
        assert steps[1].model_output_message.content == SCRIPT[0]
        assert steps[2].timing.end_time is not None and steps[2].token_usage is None
        assert agent.run(TASK, reset=False) == "42"
        # The model continued from the stored memory: it saw the dead process's steps.
        assert "x is 21" in model.prompts[0] and "y is 42" in model.prompts[0]
        assert len(agent.memory.steps) == 5  # + the task again, + the final step
    again = make_agent(ScriptedModel([]))
    with BerthAgentLog(client, session_id) as log:
        log.attach(again)
    assert [type(step).__name__ for step in again.memory.steps] == [type(step).__name__ for step in agent.memory.steps]
    assert [getattr(step, "observations", None) for step in again.memory.steps] == [
        getattr(step, "observations", None) for step in agent.memory.steps]
    session = client.get_session(session_id)
    assert LABEL in session.labels and not session.runs
    types = [event.type for event in client.iter_events(session_id)]
    assert types.count(STEP_TYPE) == 3 and types.count("user/message") == 2 and "assistant/message" in types


def test_task_is_durable_before_the_first_model_call(place: Any) -> None:
    session_id = f"job-{uuid.uuid4().hex[:8]}"
    crash(place, session_id, kill_at=1)
    agent = make_agent(ScriptedModel(SCRIPT))
    with BerthAgentLog(place.sync_client(), session_id, wait_s=15) as log:
        log.attach(agent)
        assert [(type(step), step.task) for step in agent.memory.steps] == [(TaskStep, TASK)]
        assert agent.run(TASK, reset=False) == "42"


def test_one_writer_at_a_time(place: Any) -> None:
    session_id = f"job-{uuid.uuid4().hex[:8]}"
    first = BerthAgentLog(place.sync_client(), session_id)
    first.attach(make_agent(ScriptedModel(SCRIPT)))
    with pytest.raises(berth.Busy):
        BerthAgentLog(place.sync_client(), session_id).attach(make_agent(ScriptedModel(SCRIPT)))
    first.close()
    second = BerthAgentLog(place.sync_client(), session_id)
    second.attach(make_agent(ScriptedModel(SCRIPT)))
    second.close()


def test_reset_run_starts_over(place: Any) -> None:
    session_id = f"job-{uuid.uuid4().hex[:8]}"
    client = place.sync_client()
    agent = make_agent(ScriptedModel(SCRIPT))
    with BerthAgentLog(client, session_id) as log:
        log.attach(agent)
        assert agent.run(TASK) == "42"
        agent.model = ScriptedModel(["Thought: again.\n<code>\nfinal_answer('7')\n</code>"])
        assert agent.run("Say seven.", additional_args={"hint": 7}) == "7"
    steps = steps_from_events(client.iter_events(session_id))
    assert [type(step) for step in steps] == [TaskStep, ActionStep]
    assert steps[0].task == agent.memory.steps[0].task and "hint" in steps[0].task
    assert steps[1].is_final_answer and steps[1].action_output == "7"


def test_errors_and_tool_calls_round_trip(place: Any) -> None:
    session_id = f"job-{uuid.uuid4().hex[:8]}"
    client = place.sync_client()
    agent = make_agent(ScriptedModel(["Thought: oops.\n<code>\nundefined_name + 1\n</code>", SCRIPT[2]]))
    with BerthAgentLog(client, session_id) as log:
        log.attach(agent)
        assert agent.run(TASK) == "42"
    loaded = steps_from_events(client.iter_events(session_id))
    original = agent.memory.steps
    assert type(loaded[1].error) is type(original[1].error) and str(loaded[1].error) == str(original[1].error)
    assert [call.dict() for call in loaded[1].tool_calls] == [call.dict() for call in original[1].tool_calls]
    assert [m.dict() if hasattr(m, "dict") else m for step in loaded[1:] for m in step.to_messages()] == [
        m.dict() if hasattr(m, "dict") else m for step in original[1:] for m in step.to_messages()]


def test_planning_steps_round_trip(place: Any) -> None:
    from smolagents import CodeAgent
    from smolagents.memory import PlanningStep

    session_id = f"job-{uuid.uuid4().hex[:8]}"
    client = place.sync_client()
    model = ScriptedModel(["1. Double 21.\n2. Answer.<end_plan>", SCRIPT[2]])
    agent = CodeAgent(tools=[], model=model, max_steps=3, verbosity_level=0, planning_interval=5)
    with BerthAgentLog(client, session_id) as log:
        log.attach(agent)
        assert agent.run(TASK) == "42"
    loaded = steps_from_events(client.iter_events(session_id))
    assert [type(step) for step in loaded] == [TaskStep, PlanningStep, ActionStep]
    assert loaded[1].plan == agent.memory.steps[1].plan and "Double 21" in loaded[1].plan
    assert [m.dict() for m in loaded[1].to_messages()] == [m.dict() for m in agent.memory.steps[1].to_messages()]


def test_user_key_and_a_displaced_holder(place: Any) -> None:
    session_id = f"job-{uuid.uuid4().hex[:8]}"
    user_client = place.sync_client(user="alice", role="user")
    stale = BerthAgentLog(user_client, session_id, run_lease_ttl_ms=1000)
    agent = make_agent(ScriptedModel(SCRIPT))
    stale.attach(agent)
    stale._hold.stop.set()  # its heartbeat stops, as in a process that hangs
    fresh = BerthAgentLog(place.sync_client(user="alice", role="user"), session_id, wait_s=15)
    fresh.attach(make_agent(ScriptedModel(SCRIPT)))  # after the lease lapsed
    with pytest.raises(berth.OwnershipLost):
        agent.run(TASK)  # the displaced holder's first write is refused, nothing interleaves
    fresh.close()
    stale.close()
    assert [event.type for event in user_client.iter_events(session_id)
            if not event.type.startswith(("session/", "run/", "turn/"))] == []


def test_labels_are_a_list(place: Any) -> None:
    client = place.sync_client()
    session_id = f"job-{uuid.uuid4().hex[:8]}"
    with pytest.raises(berth.WrongType) as wrong:
        BerthAgentLog(client, session_id, labels="urgent")  # was stored as its letters
    assert wrong.value.argument == "labels" and isinstance(wrong.value, TypeError)
    with BerthAgentLog(client, session_id, labels=["urgent"]) as log:
        log.attach(make_agent(ScriptedModel(SCRIPT)))
    assert client.get_session(session_id).labels == sorted([LABEL, "urgent"])
