"""A process dies while a tool runs: does the next run know the tool may have run?

A child process runs the SDK's `Runner` with its scripted test model (no network): the
model asks for `charge_card`, and the tool signals that it started and then hangs; the
parent SIGKILLs the child. A second child runs again on the same session, and the test
reads the scripted model's recorded input. With `SQLiteSession` that input holds no trace
of the call (0.24.0 saves a turn's items only after its tools ran). With `BerthSession`
and its run hooks, the call was recorded before the tool ran, and berth's repair closed
the dead run's turn: the model sees the call and an output saying its outcome is unknown.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from pathlib import Path

from berth.integrations.openai_agents import BerthSession
from conftest import Place, python_child

from .conftest import CONNECT, child_connection

LEASE_MS = 800

CHILD = CONNECT + '''
import asyncio, json, sys, time
from agents import Agent, Runner, SQLiteSession, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from berth.integrations.openai_agents import BerthSession

store, phase, marker = sys.argv[1:4]
if store == "sqlite":
    session, hooks = SQLiteSession("crash", sys.argv[4]), None
else:
    session = BerthSession("crash", connect(sys.argv[4:]), run_lease_ttl_ms=int(sys.argv[7]))
    hooks = session.run_hooks()

@function_tool
def charge_card(amount: int) -> str:
    """Charges the customer's card."""
    with open(marker, "w") as started:
        started.write("started")
    time.sleep(120)
    return "charged"

@function_tool(needs_approval=True)
def refund(amount: int) -> str:
    """Refunds the customer (after a person approves)."""
    with open(marker, "w") as started:
        started.write("started")
    time.sleep(120)
    return "refunded"

async def main():
    model = ScriptedModel()
    agent = Agent(name="shop", model=model, tools=[charge_card, refund])
    if phase == "approved":
        # The tool awaits approval (the run returns), is approved, and the resumed run dies
        # while it runs.
        model.enqueue([function_call("refund", {"amount": 5}, call_id="call-refund-1")])
        result = await Runner.run(agent, "refund me 5", session=session, hooks=hooks)
        state = result.to_state()
        for interruption in result.interruptions:
            state.approve(interruption)
        await Runner.run(agent, state, session=session, hooks=hooks)
    elif phase == "first":
        model.enqueue([function_call("charge_card", {"amount": 5}, call_id="call-charge-1")])
        model.enqueue([assistant_message("charged")])
        await Runner.run(agent, "charge me 5", session=session, hooks=hooks)
    else:
        model.enqueue([assistant_message("let me check")])
        await Runner.run(agent, "did it go through?", session=session, hooks=hooks)
        recorded = model.calls[0].input
        items = [item.model_dump(exclude_unset=True) if hasattr(item, "model_dump") else item for item in recorded]
        print(json.dumps(items))

asyncio.run(main())
'''


def _crash_then_rerun(tmp_path: Path, store_args: list[str], phase: str = "first") -> list[dict]:
    marker = tmp_path / "tool-started"
    first = subprocess.Popen(python_child(CHILD, store_args[0], phase, str(marker), *store_args[1:]))
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert first.poll() is None, "the first run ended before its tool started"
            assert time.monotonic() < deadline, "the tool never started"
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    # The dead process's run lease lapses; the next object to attach repairs its turn.
    time.sleep(LEASE_MS / 1000 + 0.3)
    second = subprocess.run(
        python_child(CHILD, store_args[0], "second", str(tmp_path / "unused"), *store_args[1:]),
        capture_output=True, text=True, timeout=120,
    )
    assert second.returncode == 0, second.stderr
    return json.loads(second.stdout.strip().splitlines()[-1])


def _calls(items: list[dict]) -> list[dict]:
    return [item for item in items if item.get("type") == "function_call"]


def _outputs(items: list[dict]) -> list[dict]:
    return [item for item in items if item.get("type") == "function_call_output"]


def test_sqlite_session_forgets_a_tool_that_was_running(tmp_path: Path) -> None:
    seen = _crash_then_rerun(tmp_path, ["sqlite", str(tmp_path / "chat.db")])
    assert _calls(seen) == [] and _outputs(seen) == [], seen
    assert [item.get("content") for item in seen if item.get("role") == "user"] == ["charge me 5", "did it go through?"]


def test_berth_session_tells_the_model_the_outcome_is_unknown(tmp_path: Path, oai_place: Place) -> None:
    seen = _crash_then_rerun(tmp_path, ["berth", *child_connection(oai_place), str(LEASE_MS)])
    calls, outputs = _calls(seen), _outputs(seen)
    assert [(call["call_id"], call["name"], json.loads(call["arguments"])) for call in calls] == [
        ("call-charge-1", "charge_card", {"amount": 5})
    ], seen
    assert [output["call_id"] for output in outputs] == ["call-charge-1"], seen
    assert "outcome is unknown" in outputs[0]["output"]
    # Order as the model needs it: the question, the call, its output, the new question.
    kinds = [item.get("type") or item.get("role") for item in seen]
    assert kinds.index("function_call") < kinds.index("function_call_output") < len(kinds) - 1
    assert seen[-1].get("content") == "did it go through?"

    # The log says the same to berth's own readers: the first run's turn from the user's
    # message, its step and the tool/call recorded before the tool ran (one per call id),
    # closed by the repair (TOOL_OUTCOME_UNKNOWN, the step's and the turn's ends); then the
    # second run's turn, numbered after it, from its input to its answer. Each step opens
    # with its model call (`model/call`): the dead run's rode in the pre-tool record.
    client = oai_place.connect()
    berth_id = BerthSession("crash", client).berth_id
    events = client.read(berth_id).events
    assert [(event.type, event.data.get("turn"), event.data.get("step")) for event in events] == [
        ("turn/start", 0, None), ("user/message", None, None), ("step/start", 0, 0), ("model/call", None, None),
        ("tool/call", None, None), ("tool/result", 0, None), ("step/end", 0, 0), ("turn/end", 0, None),
        ("turn/start", 1, None), ("user/message", None, None), ("step/start", 1, 0), ("model/call", None, None),
        ("assistant/message", None, None), ("step/end", 1, 0), ("turn/end", 1, None),
    ]
    assert events[3].idempotency_key == events[4].idempotency_key and events[3].data["model"] == "unknown"
    assert events[4].data["in_flight"] is True and events[4].data["call_id"] == "call-charge-1"
    assert events[5].data["error"]["code"] == "TOOL_OUTCOME_UNKNOWN" and "item" not in events[5].data
    assert [events[7].data["reason"], events[14].data["reason"]] == ["interrupted", "completed"]
    assert events[0].run == events[4].run != events[8].run  # each process its own berth run
    assert client.get_session(berth_id).blank is False


def test_an_approved_tool_that_dies_is_one_call_with_an_unknown_outcome(tmp_path: Path, oai_place: Place) -> None:
    """A tool awaiting approval ends its turn (`awaiting_input`: the model's request, no
    `tool/call`, nothing for the repair to answer); approved, the resumed run records its
    start, and dies. The next run's model sees the call once (the request's item) and an
    outcome-unknown output; the log holds one `tool/call` for it."""
    seen = _crash_then_rerun(tmp_path, ["berth", *child_connection(oai_place), str(LEASE_MS)], phase="approved")
    assert [call["call_id"] for call in _calls(seen)] == ["call-refund-1"], seen
    assert [output["call_id"] for output in _outputs(seen)] == ["call-refund-1"], seen
    assert "outcome is unknown" in _outputs(seen)[0]["output"]
    client = oai_place.connect()
    with BerthSession("crash", client) as reader:  # the session API itself, not only the SDK's input
        items = asyncio.run(reader.get_items())
    assert [(item.get("type"), item.get("call_id")) for item in items if item.get("call_id")] == [
        ("function_call", "call-refund-1"), ("function_call_output", "call-refund-1")
    ]
    events = client.read(BerthSession("crash", client).berth_id).events
    assert [event.data["call_id"] for event in events if event.type == "tool/call"] == ["call-refund-1"]
    request = [event for event in events if event.type == "assistant/message" and event.data.get("tool_calls")]
    assert [call["call_id"] for event in request for call in event.data["tool_calls"]] == ["call-refund-1"]
    ends = [event.data["reason"] for event in events if event.type == "turn/end"]
    assert ends == ["awaiting_input", "interrupted", "completed"]


def test_repair_waits_for_the_dead_runs_lease(oai_place: Place) -> None:
    """Until a dead object's run lease lapses its run still holds its turn: nothing is
    repaired yet (so the worst case a user waits is one run lease)."""
    client = oai_place.connect()
    session = BerthSession("held", client, run_lease_ttl_ms=60_000)
    binding = session._binding(None)
    session._record_tool_start(binding, "call-1", "send_email", "{}")
    binding.stop.set()  # as if the process died: no more heartbeats, no detach
    other = BerthSession("held", oai_place.connect(), run_lease_ttl_ms=60_000)
    assert asyncio.run(other.get_items()) == []
    events = client.read(session.berth_id).events
    assert [event.type for event in events] == ["turn/start", "step/start", "tool/call"]
    other.close()
