"""What `BerthAgentLog` writes for berth's readers (issue 52, items 2 and 3), on both
transports: one `run()` is one turn, numbered from 0 in the session across runs and
processes, each ActionStep a step of it numbered from 0, ended with the reason
(`completed`, `max_steps`, `error`, `aborted`); the task, the model's messages, tool
calls and results and the answer in berth's vocabulary, in the appends the log made
anyway (the task; each step, the last with the answer); each model call a `model/call`
first in its step's append (issue 54); and berth's readers — `sessions ls` without
`--all`, `sessions cat --transcript`, the inspector — show the conversation."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from smolagents import CodeAgent

import readers
from berth.integrations.smolagents import LABEL, BerthAgentLog, steps_from_events
from fixtures.capture import memory_view
from smol_fakes import SCRIPT, TASK, CallingModel, ScriptedModel, lookup, make_agent, make_calling_agent, usage_of

VOCABULARY = ("turn/", "step/", "user/", "assistant/", "tool/")


def shape(events: list[Any]) -> list[tuple[str, Any]]:
    """The vocabulary events, with the fields that say where they are."""
    out = []
    for event in events:
        if event.type.startswith(("turn/", "step/")):
            out.append((event.type, {k: v for k, v in event.data.items() if k in ("turn", "step", "reason")}))
        elif event.type.startswith(VOCABULARY):
            out.append((event.type, event.data.get("call_id")))
    return out


def appends(events: list[Any]) -> int:
    return len({event.idempotency_key for event in events})


def test_turns_and_steps_across_runs_and_processes(place: Any) -> None:
    session_id = f"job-{uuid.uuid4().hex[:8]}"
    client = place.sync_client()
    model = CallingModel([[("lookup", {"city": "Paris"})], [("final_answer", {"answer": "sunny"})]])
    agent = make_calling_agent(model, [lookup])
    with BerthAgentLog(client, session_id) as log:
        log.attach(agent)
        assert agent.run("Weather in Paris?") == "sunny"
    first = list(client.iter_events(session_id))
    assert shape(first) == [
        ("turn/start", {"turn": 0}), ("user/message", None),
        ("step/start", {"turn": 0, "step": 0}), ("assistant/message", None), ("tool/call", "call-1-0"),
        ("tool/result", "call-1-0"), ("step/end", {"turn": 0, "step": 0}),
        ("step/start", {"turn": 0, "step": 1}), ("assistant/message", None), ("step/end", {"turn": 0, "step": 1}),
        ("turn/end", {"turn": 0, "reason": "completed"})]
    assert first[-4].data == {"content": "sunny", "smolagents": {"output": "sunny"}}
    # Three appends: the task, the step, the step with the answer (the old layout made four).
    assert appends(first) == 3
    # Another process continues the job: its turn is the next one.
    again = make_agent(ScriptedModel([SCRIPT[0], SCRIPT[2]]))
    with BerthAgentLog(place.sync_client(), session_id) as log:
        log.attach(again)
        assert again.run(TASK, reset=False) == "42"
    events = list(client.iter_events(session_id))
    assert [(kind, data) for kind, data in shape(events) if kind.startswith("turn/")] == [
        ("turn/start", {"turn": 0}), ("turn/end", {"turn": 0, "reason": "completed"}),
        ("turn/start", {"turn": 1}), ("turn/end", {"turn": 1, "reason": "completed"})]
    assert [data for kind, data in shape(events[len(first):]) if kind == "step/start"] == [
        {"turn": 1, "step": 0}, {"turn": 1, "step": 1}]
    assert memory_view(steps_from_events(events)) == memory_view(again.memory.steps)

    assert session_id in readers.listed(place, place.tenant, LABEL)  # not blank: listed without --all
    text = readers.transcript(place, place.tenant, session_id)
    for line in ("turn/start", "turn 1", "Weather in Paris?", "lookup call-1-0", "sunny in Paris", "x is 21",
                 "python_interpreter call_", "completed"):
        assert line in text, (line, text)
    if place.transport == "http":
        page = readers.inspector_page(place, place.tenant, session_id)
        assert "Turn 0" in page and "Turn 1" in page and "Step 0" in page and "Step 1" in page
        assert "Events outside a turn" not in page and "Weather in Paris?" in page


def model_calls(events: list[Any]) -> list[Any]:
    """The `model/call` events, each checked to open its step's append: right after a
    `step/start` (or first in a planning step's append), in the same append."""
    found = []
    for index, event in enumerate(events):
        if event.type == "model/call":
            assert event.ignorable and event.data["latency_ms"] >= 0, event
            before = events[index - 1]
            assert before.type in ("step/start", "user/message", "smol/step", "turn/start"), before
            if before.type == "step/start":
                assert before.idempotency_key == event.idempotency_key
            else:  # a planning step's: the first event of its append
                assert before.idempotency_key != event.idempotency_key
            found.append(event)
    return found


@pytest.mark.parametrize("kind", ["calling", "code"])
def test_each_model_call_is_a_model_call_event_in_its_steps_append(place: Any, kind: str) -> None:
    """Two model calls with a tool call between: two `model/call`s, each with the model's
    id, the tokens its message reported and its latency, first in its step's append; the
    appends are the three they were (the task, each step)."""
    session_id = f"job-{uuid.uuid4().hex[:8]}"
    client = place.sync_client()
    if kind == "calling":
        model: Any = CallingModel([[("lookup", {"city": "Paris"})], [("final_answer", {"answer": "sunny"})]],
                                  usage=True)
        agent: Any = make_calling_agent(model, [lookup])
        answer = "sunny"
    else:
        model = ScriptedModel(["Thought: look.\n<code>\nprint(lookup(city='Paris'))\n</code>", SCRIPT[2]], usage=True)
        agent = make_agent(model, [lookup])
        answer = "42"
    with BerthAgentLog(client, session_id) as log:
        log.attach(agent)
        assert agent.run("Weather in Paris?") == answer
    events = list(client.iter_events(session_id))
    assert appends(events) == 3  # as without model calls: the task, the step, the step with the answer
    calls = model_calls(events)
    assert [call.data["model"] for call in calls] == [model.model_id] * 2
    for call, number in zip(calls, (1, 2)):
        usage = usage_of(number, True)
        assert (call.data["input_tokens"], call.data["output_tokens"]) == (usage.input_tokens, usage.output_tokens)
        assert set(call.data) == {"model", "input_tokens", "output_tokens", "latency_ms"}  # never the prompt
    starts = [event for event in events if event.type == "step/start"]
    assert [events[events.index(start) + 1] for start in starts] == calls
    # The tool call between the two: in the first step, after the first model call.
    tool = next(event for event in events if event.type == "tool/call")
    assert events.index(calls[0]) < events.index(tool) < events.index(calls[1])
    # A model that reports no tokens: the call is recorded without them.
    quiet = f"job-{uuid.uuid4().hex[:8]}"
    with BerthAgentLog(client, quiet) as log:
        plain = log.attach(make_agent(ScriptedModel([SCRIPT[2]])))
        assert plain.run(TASK) == "42"
    [call] = model_calls(list(client.iter_events(quiet)))
    assert set(call.data) == {"model", "latency_ms"} and call.data["model"] == "scripted"


def test_how_turns_end(place: Any) -> None:
    session_id = f"job-{uuid.uuid4().hex[:8]}"
    client = place.sync_client()

    class Broken(ScriptedModel):
        def generate(self, *args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("the model is down")

    with BerthAgentLog(client, session_id) as log:
        # Max steps: smolagents' forced answer ends the turn.
        looping = CodeAgent(tools=[], model=ScriptedModel([SCRIPT[0], "It is 21."]), max_steps=1, verbosity_level=0)
        log.attach(looping)
        assert looping.run("Never finish.") == "It is 21."
        # A model error: run() raises, the turn ends as an error.
        looping.model = Broken([])
        with pytest.raises(Exception, match="the model is down"):
            looping.run("Try.", reset=False)
        # A stream: the steps as they come, the turn ends with the answer.
        looping.model = ScriptedModel([SCRIPT[2]])
        steps = list(looping.run("Stream.", reset=False, stream=True))
        assert steps[-1].output == "42"
        # A stream never run: the log's close() ends its turn as aborted.
        looping.model = ScriptedModel([SCRIPT[0]])
        stream = looping.run("Abandon.", reset=False, stream=True)
    events = list(client.iter_events(session_id))
    ends = [event.data for event in events if event.type == "turn/end"]
    assert [(end["turn"], end["reason"]) for end in ends] == [
        (0, "max_steps"), (1, "error"), (2, "completed"), (3, "aborted")]
    assert ends[1]["error"]["type"] == "AgentGenerationError" and "the model is down" in ends[1]["error"]["message"]
    # Each model call a model/call: max steps (a step, then smolagents' forced answer),
    # the failed call with the model's own error (in its step's append), the stream's.
    calls = model_calls(events)
    assert [call.data.get("error") for call in calls] == [
        None, None, {"code": "model_error", "name": "ConnectionError", "message": "the model is down"}, None]
    failed = events.index(calls[2])
    assert events[failed - 1].type == "step/start" and events[failed + 1].type == "smol/step"
    assert events[failed + 2].type == "step/end" and events[failed + 3].type == "turn/end"
    last = [event.type for event in events[events.index(next(e for e in events if e.data.get("content") == "Abandon.")):]]
    assert last == ["user/message", "turn/end"]
    stream.close()
    answers = [event.data["content"] for event in events if event.type == "assistant/message"
               and "output" in event.data.get("smolagents", {})]
    assert answers == ["It is 21.", "42"]


def test_planning_steps_are_assistant_messages_marked_planning(place: Any) -> None:
    session_id = f"job-{uuid.uuid4().hex[:8]}"
    client = place.sync_client()
    model = ScriptedModel(["1. Double 21.\n2. Answer.<end_plan>", SCRIPT[2]])
    agent = CodeAgent(tools=[], model=model, max_steps=3, verbosity_level=0, planning_interval=5)
    with BerthAgentLog(client, session_id) as log:
        log.attach(agent)
        assert agent.run(TASK) == "42"
    events = list(client.iter_events(session_id))
    [plan] = [event for event in events if event.type == "assistant/message"
              and event.data.get("smolagents") == {"kind": "planning"}]
    assert "Double 21" in plan.data["content"]
    kinds = [event.type for event in events]
    # In the turn, before the step it plans.
    assert kinds.index("turn/start") < events.index(plan) < kinds.index("step/start")
    # The plan's model call just before it, in its append; then the step's.
    calls = model_calls(events)
    assert len(calls) == 2 and events[events.index(plan) - 1] == calls[0]


def test_call_ids_stay_unique_in_a_run(place: Any) -> None:
    session_id = f"job-{uuid.uuid4().hex[:8]}"
    client = place.sync_client()
    agent = make_agent(ScriptedModel([SCRIPT[2]]))
    with BerthAgentLog(client, session_id) as log:
        log.attach(agent)
        assert agent.run(TASK) == "42"
        agent.model = ScriptedModel([SCRIPT[2]])
        assert agent.run(TASK) == "42"  # reset=True: smolagents numbers its call `call_1` again
    again = make_agent(ScriptedModel([SCRIPT[2]]))
    with BerthAgentLog(client, session_id) as log:  # another run: readers pair its calls apart
        log.attach(again)
        assert again.run(TASK) == "42"
    events = list(client.iter_events(session_id))
    started = [event.data["call_id"] for event in events if event.type == "tool/call"]
    assert started == ["call_1", "call_1@1.0", "call_1"]
    assert [event.data["call_id"] for event in events if event.type == "tool/result"] == started
    # smolagents' memory keeps its own ids.
    assert [step.tool_calls[0].id for step in steps_from_events(events) if hasattr(step, "tool_calls")] == ["call_1"]
    if place.transport == "http":
        page = readers.inspector_page(place, place.tenant, session_id)
        assert "call_1@1.0" in page and page.count("python_interpreter") >= 3
