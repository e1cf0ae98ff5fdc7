"""Durable tools (issue 52, item 5), on both transports: a tool wrapped by
`durable_tools` has its `tool/call` stored before it runs. A child process SIGKILLed
inside such a tool (a ToolCallingAgent's call, and a tool a CodeAgent's code calls) is
continued by another process: berth's repair closes the call as outcome-unknown, the
restored memory's last step carries that in smolagents' own error format, the model's
next prompt says so, and the job goes on. Without a crash, the pre-tool record and the
step's own record are one tool call to every reader (one `tool/call` per call id), and
the record costs exactly one append per call of a wrapped tool."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from smolagents.memory import ActionStep, TaskStep, ToolCall
from smolagents.utils import AgentExecutionError, AgentToolExecutionError

from berth.integrations.smolagents import BerthAgentLog, DurableTool, durable_tools, steps_from_events
from fixtures.capture import memory_view
from smol_fakes import (
    SCRIPT,
    TASK,
    CallingModel,
    ScriptedModel,
    charge_card,
    lookup,
    make_agent,
    make_calling_agent,
)

HERE = Path(__file__).resolve().parent
UNKNOWN = ("ToolOutcomeUnknownError: The tool call was interrupted after it started; its outcome is unknown. "
           "Retry only read-only or idempotent work; otherwise verify the effect or ask the user.")


def crash_in_tool(place: Any, session_id: str, kind: str) -> None:
    child = subprocess.run(
        [sys.executable, str(HERE / "smol_tool_child.py"), *place.child_args(), session_id, kind],
        capture_output=True, text=True, timeout=60, cwd=HERE, env={**os.environ, "SMOL_DIE_IN_TOOL": "charge_card"},
    )
    assert child.returncode == -9, child.stderr[-2000:]
    assert "dying in charge_card" in child.stdout


def appends(events: list[Any]) -> int:
    """How many appends stored these events (each append has its own idempotency key)."""
    return len({event.idempotency_key for event in events})


@pytest.mark.parametrize("kind", ["calling", "code"])
def test_killed_inside_a_durable_tool(place: Any, kind: str) -> None:
    session_id = f"job-{uuid.uuid4().hex[:8]}"
    crash_in_tool(place, session_id, kind)
    client = place.sync_client()
    died = list(client.iter_events(session_id))
    # The pre-tool record is stored: the charge's tool/call, no result, the step open.
    charge = [event.data for event in died if event.type == "tool/call" and event.data["name"] == "charge_card"]
    assert len(charge) == 1 and charge[0]["arguments"] == {"amount": 30}
    assert died[-1].type == "tool/call" and died[-1].data == charge[0]

    if kind == "calling":
        model: Any = CallingModel([[("final_answer", {"answer": "checked the card first"})]])
        agent: Any = make_calling_agent(model, [])
    else:
        model = ScriptedModel(["Thought: check first.\n<code>\nfinal_answer('checked the card first')\n</code>"])
        agent = make_agent(model)
    with BerthAgentLog(client, session_id, run_lease_ttl_ms=1500, wait_s=15) as log:
        log.attach(agent)  # waits out the dead run's lease; the resume repairs its turn
        steps = agent.memory.steps
        last = steps[-1]
        assert isinstance(last, ActionStep) and last.timing.end_time is not None
        if kind == "calling":
            assert [type(step) for step in steps] == [TaskStep, ActionStep, ActionStep]
            assert "sunny in Paris" in steps[1].observations
            assert last.step_number == 2 and last.observations is None
            assert last.tool_calls == [ToolCall(name="charge_card", arguments={"amount": 30}, id="call-2-0")]
            assert type(last.error) is AgentToolExecutionError
            assert str(last.error) == (f"Error executing tool 'charge_card' with arguments {{'amount': 30}}: {UNKNOWN}\n"
                                       "Please try again or use another tool")
        else:
            assert [type(step) for step in steps] == [TaskStep, ActionStep]
            assert last.step_number == 1 and last.code_action.endswith("charge_card(amount=30)")
            assert [call.name for call in last.tool_calls] == ["python_interpreter"]
            assert type(last.error) is AgentExecutionError
            # Both tools the code called had started; neither result was stored.
            assert str(last.error).splitlines() == [
                f"Code execution failed at line 'lookup(city='Paris')' due to: {UNKNOWN}",
                f"Code execution failed at line 'charge_card(amount=30)' due to: {UNKNOWN}",
            ]
        # smolagents' own rendering of the step tells the model.
        told = "\n".join(part["text"] for message in last.to_messages() for part in message.content)
        assert "outcome is unknown" in told and "charge_card" in told
        assert agent.run("Was the card charged?", reset=False) == "checked the card first"
        assert "ToolOutcomeUnknownError" in model.prompts[0]
        expected = memory_view(agent.memory.steps)

    events = list(client.iter_events(session_id))
    # berth's repair closed the dead run's turn: the charge outcome-unknown, the step, the turn.
    after = [event.type for event in events[len(died):]]
    repaired = events[len(died):len(died) + after.index("turn/end") + 1]
    results = [event for event in repaired if event.type == "tool/result"]
    assert charge[0]["call_id"] in {event.data["call_id"] for event in results}
    assert all(event.data["error"]["code"] == "TOOL_OUTCOME_UNKNOWN" for event in results)
    assert [event.type for event in repaired[len(results):]] == ["step/end", "turn/end"]
    closer = dict(repaired[-1].data)
    by = closer.pop("repaired_by")  # the resume that wrote it, and when (issue 55)
    assert closer == {"turn": 0, "reason": "interrupted"}
    assert isinstance(by["run"], str) and isinstance(by["at"], int)
    # One tool/call per call id; the memory reloads the same.
    started = [event.data["call_id"] for event in events if event.type == "tool/call"]
    assert len(started) == len(set(started))
    assert memory_view(steps_from_events(events)) == expected


@pytest.mark.parametrize("kind", ["calling", "code"])
def test_durable_calls_are_one_call_and_one_append_each(place: Any, kind: str) -> None:
    session_id = f"job-{uuid.uuid4().hex[:8]}"
    client = place.sync_client()
    log = BerthAgentLog(client, session_id)
    if kind == "calling":  # a step with two parallel calls, one of a plain tool
        model: Any = CallingModel([[("charge_card", {"amount": 5}), ("lookup", {"city": "Oslo"})],
                                   [("final_answer", {"answer": "paid"})]])
        agent: Any = make_calling_agent(model, durable_tools([charge_card], log) + [lookup])
    else:
        model = ScriptedModel(["Thought: pay.\n<code>\ncharge_card(amount=5)\nprint(lookup(city='Oslo'))\n</code>",
                               "Thought: done.\n<code>\nfinal_answer('paid')\n</code>"])
        agent = make_agent(model, durable_tools([charge_card], log) + [lookup])
    assert isinstance(agent.tools["charge_card"], DurableTool) and "amount" in agent.tools["charge_card"].inputs
    with log:
        log.attach(agent)
        assert agent.run("Pay 5 EUR.") == "paid"
    events = list(client.iter_events(session_id))
    kinds = [event.type for event in events]
    # The task; the pre-tool record; the step's end; the answer's step: four appends.
    assert appends(events) == 4
    started = [event.data for event in events if event.type == "tool/call"]
    assert len(started) == len({call["call_id"] for call in started}) == 2 + (kind == "code")
    ended = {event.data["call_id"]: event.data for event in events if event.type == "tool/result"}
    assert set(ended) == {call["call_id"] for call in started}
    charged = next(call for call in started if call["name"] == "charge_card")
    assert ended[charged["call_id"]]["content"] == "charged 5 EUR"
    if kind == "code":
        assert charged["call_id"] == "call_1.1"
    assert kinds.count("step/start") == kinds.count("step/end") == 2
    assert kinds[-1] == "turn/end" and events[-1].data == {"turn": 0, "reason": "completed"}
    # Each model call a model/call, the first in the pre-tool record (after its
    # step/start, before the model's message and the call): no append of its own.
    calls = [event for event in events if event.type == "model/call"]
    assert [call.data["model"] for call in calls] == [model.model_id] * 2
    first_tool = next(event for event in events if event.type == "tool/call")
    assert calls[0].idempotency_key == first_tool.idempotency_key
    assert kinds[kinds.index("model/call") - 1:kinds.index("model/call") + 2] == [
        "step/start", "model/call", "assistant/message"]
    assert memory_view(steps_from_events(events)) == memory_view(agent.memory.steps)


def test_a_durable_tool_outside_an_attached_agent_refuses(place: Any) -> None:
    log = BerthAgentLog(place.sync_client(), f"job-{uuid.uuid4().hex[:8]}")
    [wrapped] = durable_tools([charge_card], log)
    with pytest.raises(RuntimeError, match="outside a step"):
        wrapped(amount=1)
    assert durable_tools([wrapped], log)[0] is wrapped
    with pytest.raises(TypeError):
        durable_tools([lambda: None], log)  # type: ignore[list-item]
    assert SCRIPT  # the CodeAgent script is shared with the other tests
