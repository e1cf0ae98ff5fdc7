"""`model/call` events (issue 54), on both transports, sync and async: the handler
`saver.model_calls()` given to a graph records each LLM call (a fake chat model that
reports usage) as one ignorable `model/call` in its thread — model, provider, tokens,
latency, finish reason — inside the step the call ran in, carried by the appends the
saver makes anyway: the same number of durable writes as the same run unrecorded. A
model that fails is recorded with its error. Without the handler nothing is recorded."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage

import berth
from berth.integrations.langgraph import AsyncBerthSaver, BerthSaver, ModelCallRecorder, thread_session_id

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import lg_agents  # noqa: E402
from test_langgraph_vocabulary import batches, talk  # noqa: E402

QUESTION = {"messages": [HumanMessage("What's the weather in Paris?")]}


def usage(input_tokens: int, output_tokens: int, cached: int) -> dict[str, Any]:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens, "input_token_details": {"cache_read": cached}}


def reporting_model() -> FakeMessagesListChatModel:
    """Asks for the weather, then answers: two calls, each reporting its usage and model."""
    return FakeMessagesListChatModel(responses=[
        AIMessage(content="", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "call-1"}],
                  usage_metadata=usage(120, 15, 100),
                  response_metadata={"model_name": "fake-model-1", "finish_reason": "tool_calls", "id": "resp-1"}),
        AIMessage(content="It is sunny and 21 °C in Paris.", usage_metadata=usage(160, 12, 0),
                  response_metadata={"model_name": "fake-model-1", "finish_reason": "stop", "id": "resp-2"}),
    ])


class FailingModel(FakeMessagesListChatModel):
    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("the provider is down")


@pytest.fixture
def paired(monkeypatch: pytest.MonkeyPatch) -> None:
    """Group commit given the time to pair each step's `put_writes` with its checkpoint's
    `put` (both savers): a run makes the same number of appends every time, which the
    default 2 ms wait leaves to the scheduler (5 to 7 for the weather agent)."""
    from berth.integrations.langgraph import _async_saver, _saver

    monkeypatch.setattr(_saver, "WRITES_WAIT_S", 0.5)
    monkeypatch.setattr(_async_saver, "WRITES_WAIT_S", 0.5)


class _Appends:
    """Counts a client's appends (each one durable write), sync or async."""

    def __init__(self, client: Any) -> None:
        self.count = 0
        inner = client._execute
        if isinstance(client, berth.AsyncClient):
            async def counted_async(call: Any) -> Any:
                self.count += call.is_append
                return await inner(call)
            client._execute = counted_async
        else:
            def counted(call: Any) -> Any:
                self.count += call.is_append
                return inner(call)
            client._execute = counted


async def run_agent(lg_place: Any, mode: str, thread: str, recorded: bool, model: Any = None,
                    durable: bool = False) -> int:
    """Runs the weather agent on `thread` with a saver of its own (recording its model
    calls or not); the number of appends it made."""
    model = model or reporting_model()
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    if mode == "sync":
        client: Any = lg_place.sync_client()
        appends = _Appends(client)
        with BerthSaver(client) as saver:
            if recorded:
                config["callbacks"] = [saver.model_calls()]
            graph = lg_agents.agent_graph(saver, model, [lg_agents.get_weather], durable=durable)
            try:
                graph.invoke(QUESTION, config)
            except ConnectionError:
                pass
    else:
        client = lg_place.async_client()
        appends = _Appends(client)
        async with AsyncBerthSaver(client) as saver:
            graph = lg_agents.agent_graph(saver, model, [lg_agents.get_weather], durable=durable)
            if recorded:  # once, on the compiled graph
                graph = graph.with_config(callbacks=[saver.model_calls()])
            try:
                await graph.ainvoke(QUESTION, config)
            except ConnectionError:
                pass
        await client.close()
    return appends.count


def model_calls(client: berth.Client, thread: str) -> list[berth.Event]:
    return [event for event in client.iter_events(thread_session_id(thread)) if event.type == "model/call"]


def steps_of_calls(lines: list[str]) -> list[str]:
    """The step each `model/call` line of `talk` is in."""
    found, step = [], None
    for line in lines:
        if line.startswith("step/start"):
            step = line.split()[-1]
        elif line.startswith("step/end"):
            step = None
        elif line == "model/call":
            found.append(step)
    return found


async def same_appends(lg_place: Any, mode: str, name: str, durable: bool = False) -> tuple[str, str]:
    """Runs the agent on two threads, unrecorded and recorded, until both made the same
    number of appends (three tries): the threads. Group commit joins calls that meet
    at the lock, so the count of a run can differ by one with the scheduler (1 in ~30
    runs, recorded or not, even with `paired`); an append the recording added would
    show on every try."""
    tries = []
    for attempt in range(3):
        plain, recorded = f"{name}-plain-{attempt}", f"{name}-recorded-{attempt}"
        counts = (await run_agent(lg_place, mode, plain, recorded=False, durable=durable),
                  await run_agent(lg_place, mode, recorded, recorded=True, durable=durable))
        if counts[0] == counts[1]:
            return plain, recorded
        tries.append(counts)
    raise AssertionError(f"appends (unrecorded, recorded) on each try: {tries}")


def carried_only(client: berth.Client, thread: str) -> None:
    """No batch holds only model calls: each rides with the saver's own record."""
    for batch in batches(client, thread):
        if any(event["type"] == "model/call" for event in batch):
            assert any(event["type"].startswith("lg/") for event in batch), batch


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_each_model_call_is_recorded_in_the_appends_the_saver_makes(lg_place: Any, mode: str,
                                                                         paired: None) -> None:
    client = lg_place.sync_client()
    plain, recorded = await same_appends(lg_place, mode, mode)
    assert model_calls(client, plain) == []
    calls = model_calls(client, recorded)
    assert [event.data["model"] for event in calls] == ["fake-model-1", "fake-model-1"]
    assert [(e.data["input_tokens"], e.data["output_tokens"], e.data["cached_tokens"]) for e in calls] == [
        (120, 15, 100), (160, 12, 0)]
    assert [event.data["finish_reason"] for event in calls] == ["tool_calls", "stop"]
    assert [event.data["response_id"] for event in calls] == ["resp-1", "resp-2"]
    assert all(event.data["provider"] == "fakemessageslistchatmodel" for event in calls)  # LangChain's ls_provider
    assert all(event.data["latency_ms"] >= 0 and "error" not in event.data for event in calls)
    assert all(event.ignorable and isinstance(event.time, int) for event in calls)
    # Never the prompt or the completion.
    assert all(set(event.data) == {"model", "provider", "input_tokens", "output_tokens", "cached_tokens",
                                   "latency_ms", "finish_reason", "response_id"} for event in calls)
    # In the agent's two steps, and the conversation otherwise as it was.
    lines = talk(client, recorded)
    assert steps_of_calls(lines) == ["0.1", "0.3"], lines
    assert [line for line in lines if line != "model/call"] == talk(client, plain)
    # No durable write of its own (and `same_appends`: as many appends as unrecorded).
    carried_only(client, recorded)
    session = client.get_session(thread_session_id(recorded))
    assert session.event_count == client.get_session(thread_session_id(plain)).event_count + 2


async def test_durable_tool_node_appends_are_unchanged(lg_place: Any, paired: None) -> None:
    """With `durable_tool_node` (an append before each tool runs) too: two calls, no more appends."""
    client = lg_place.sync_client()
    _plain, recorded = await same_appends(lg_place, "sync", "durable", durable=True)
    assert len(model_calls(client, recorded)) == 2
    assert steps_of_calls(talk(client, recorded)) == ["0.1", "0.3"]
    carried_only(client, recorded)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_failed_model_call_is_recorded_with_its_error(lg_place: Any, mode: str) -> None:
    client = lg_place.sync_client()
    await run_agent(lg_place, mode, f"failed-{mode}", recorded=True, model=FailingModel(responses=[]))
    calls = model_calls(client, f"failed-{mode}")
    assert len(calls) == 1, calls
    data = calls[0].data
    assert data["error"] == {"code": "model_error", "name": "ConnectionError", "message": "the provider is down"}
    assert data["model"] == "unknown" and data["latency_ms"] >= 0 and "input_tokens" not in data
    lines = talk(client, f"failed-{mode}")
    assert lines[-3:] == ["model/call", "step/end 0.1", "turn/end 0 error"], lines


def test_the_recorder_is_one_handler_per_saver(lg_place: Any) -> None:
    with BerthSaver(lg_place.sync_client()) as saver:
        recorder = saver.model_calls()
        assert isinstance(recorder, ModelCallRecorder) and saver.model_calls() is recorder
        assert saver.with_allowlist([("x", "y")]).model_calls() is recorder


async def test_calls_stay_in_their_steps_whatever_the_group_commit_does(lg_place: Any) -> None:
    """With the default 2 ms wait a step's writes and its checkpoint are one append or
    two, and LangGraph runs ahead of its writes: each call still lands in its own step."""
    client = lg_place.sync_client()
    for index in range(4):
        await run_agent(lg_place, "sync" if index % 2 else "async", f"timing-{index}", recorded=True)
        assert steps_of_calls(talk(client, f"timing-{index}")) == ["0.1", "0.3"]
        carried_only(client, f"timing-{index}")
