"""Each model call a `model/call` event (issue 54), from the run hooks' `on_llm_start` /
`on_llm_end`, in the appends the session makes anyway: the SDK's `Runner` with its
scripted model reporting usage, on a real `berth serve` and on the embedded store."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import InputTokensDetails, Usage

from berth.integrations.openai_agents import BerthSession
from conftest import Place

from .test_openai_requests import count_calls


@function_tool
def add(a: int, b: int) -> str:
    """Adds two numbers."""
    return str(a + b)


def usage(input_tokens: int, output_tokens: int, cached_tokens: int) -> Usage:
    return Usage(requests=1, input_tokens=input_tokens, output_tokens=output_tokens,
                 total_tokens=input_tokens + output_tokens,
                 input_tokens_details=InputTokensDetails(cached_tokens=cached_tokens, cache_write_tokens=0))


def scripted(name: str) -> ScriptedModel:
    """The SDK's scripted model, named as the SDK's own models are (`Model.model`)."""
    model = ScriptedModel()
    model.model = name  # type: ignore[attr-defined]
    return model


def tool_then_answer(model: ScriptedModel) -> None:
    """Two model calls with a tool call between."""
    model.enqueue(ModelStep(output=[function_call("add", {"a": 2, "b": 2}, call_id="c1")],
                            usage=usage(120, 7, 64), response_id="resp-1"))
    model.enqueue(ModelStep(output=[assistant_message("4")], usage=usage(200, 12, 0), response_id="resp-2"))


async def run(agent: Agent[Any], text: str, session: BerthSession, stream: bool, **options: Any) -> Any:
    if stream:
        result = Runner.run_streamed(agent, text, session=session, **options)
        async for _ in result.stream_events():
            pass
        return result.final_output
    return (await Runner.run(agent, text, session=session, **options)).final_output


def model_calls(events: list[Any]) -> list[Any]:
    return [event for event in events if event.type == "model/call"]


@pytest.mark.parametrize("stream", [False, True], ids=["run", "streamed"])
def test_two_model_calls_are_two_model_call_events_in_the_appends_made_anyway(oai_place: Place, stream: bool) -> None:
    client = oai_place.connect()
    counts = count_calls(client)
    session = BerthSession("calls", client)
    model = scripted("gpt-scripted")
    tool_then_answer(model)
    agent = Agent(name="calc", model=model, tools=[add])
    with session:
        assert asyncio.run(run(agent, "add 2 and 2", session, stream, hooks=session.run_hooks())) == "4"
    # The input; the pre-tool record; the tool step; the answer: four appends, as the
    # same run made before model calls were recorded (test_openai_turns' table).
    assert counts["append"] == 4, counts
    events = list(client.iter_events(session.berth_id))
    calls = model_calls(events)
    assert len(calls) == 2
    for call in calls:
        assert call.ignorable and call.data.pop("latency_ms") >= 0 and call.time > 0
    assert [call.data for call in calls] == [
        {"model": "gpt-scripted", "input_tokens": 120, "output_tokens": 7, "cached_tokens": 64,
         "response_id": "resp-1"},
        {"model": "gpt-scripted", "input_tokens": 200, "output_tokens": 12, "cached_tokens": 0,
         "response_id": "resp-2"}]
    # Each right after its step's `step/start`, in the same append, before what its
    # response produced: the tool's call (its pre-tool record), the answer.
    for call, produced in zip(calls, [("tool/call", "c1"), ("assistant/message", None)]):
        at = events.index(call)
        assert events[at - 1].type == "step/start" and events[at - 1].idempotency_key == call.idempotency_key
        assert (events[at + 1].type, events[at + 1].data.get("call_id")) == produced
    assert events[-1].type == "turn/end" and events[-1].data["reason"] == "completed"
    # The SDK's history reads back without them.
    with BerthSession("calls", oai_place.connect()) as again:
        items = asyncio.run(again.get_items())
    assert [item.get("type", item.get("role")) for item in items] == [
        "user", "function_call", "function_call_output", "message"]


def test_the_model_is_the_runs_and_a_call_that_raised_is_not_recorded(oai_place: Place) -> None:
    """`RunConfig(model=…)` overrides the agent's model (given to `run_hooks`); a model
    that reports no usage leaves the tokens out; a call that raised has no `on_llm_end`:
    nothing is recorded for it, and the next run's calls are recorded as usual."""
    client = oai_place.connect()
    agent_model, run_model = scripted("agent-model"), scripted("run-model")
    run_model.enqueue([assistant_message("hello")])
    agent = Agent(name="greeter", model=agent_model)
    config = RunConfig(model=run_model)
    with BerthSession("overridden", client) as session:
        hooks = session.run_hooks(run_config=config)
        assert asyncio.run(run(agent, "hi", session, False, hooks=hooks, run_config=config)) == "hello"
        agent_model.enqueue(ConnectionError("the model is down"))
        with pytest.raises(ConnectionError):
            asyncio.run(run(agent, "again", session, False, hooks=session.run_hooks()))
        agent_model.enqueue([assistant_message("back")])
        assert asyncio.run(run(agent, "once more", session, False, hooks=session.run_hooks())) == "back"
    calls = model_calls(list(client.iter_events(session.berth_id)))
    assert [(call.data["model"], sorted(call.data)) for call in calls] == [
        ("run-model", ["latency_ms", "model", "response_id"]),
        ("agent-model", ["latency_ms", "model", "response_id"])]


def test_without_run_hooks_nothing_is_recorded(oai_place: Place) -> None:
    client = oai_place.connect()
    model = scripted("gpt-scripted")
    tool_then_answer(model)
    with BerthSession("no-hooks", client) as session:
        assert asyncio.run(run(Agent(name="calc", model=model, tools=[add]), "add", session, False)) == "4"
    assert model_calls(list(client.iter_events(session.berth_id))) == []
