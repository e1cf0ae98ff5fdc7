"""`model/call` events (issue 54), on both transports: the plugin `service.model_calls()`
in a real ADK `Runner`'s app records each model call (a scripted `BaseLlm` reporting
usage) as one ignorable `model/call` — model, tokens, latency, finish reason — in the
step of the response it produced, carried by the append of that response's event: the
same appends as the run unrecorded. A model that raises is recorded with its error, with
the error event ADK appends; without the plugin nothing is recorded."""

from __future__ import annotations

from typing import Any, AsyncGenerator

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

import berth
from berth.integrations.adk import BerthSessionService, ModelCallRecorder, session_berth_id


def usage(prompt: int, candidates: int, cached: int | None) -> types.GenerateContentResponseUsageMetadata:
    return types.GenerateContentResponseUsageMetadata(
        prompt_token_count=prompt, candidates_token_count=candidates, cached_content_token_count=cached,
        total_token_count=prompt + candidates)


class Reporting(BaseLlm):
    """Asks for the weather, then answers from the tool's result; each response reports
    its usage and model version. `fail_answer`: the answer's call raises instead."""

    fail_answer: bool = False

    async def generate_content_async(self, llm_request: Any, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1]
        response = next((p.function_response for p in last.parts if p.function_response), None)
        if response is not None:
            if self.fail_answer:
                raise ConnectionError("the provider is down")
            text, counts = f"It is {response.response['result']} in Paris.", usage(160, 12, None)
        elif "weather" in (last.parts[0].text or ""):
            call = types.FunctionCall(name="weather", args={"city": "Paris"})
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]),
                              usage_metadata=usage(120, 15, 100), model_version="fake-gemini-001",
                              finish_reason=types.FinishReason.STOP)
            return
        else:
            text, counts = "You are welcome.", usage(30, 4, 0)
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]),
                          usage_metadata=counts, model_version="fake-gemini-001", finish_reason=types.FinishReason.STOP)


def weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


class Appends:
    """Counts a client's appends (each one durable write), from a worker thread or the loop."""

    def __init__(self, client: berth.Client) -> None:
        self.count = 0
        execute, aexecute = client._execute, client._aexecute

        def counted(call: Any) -> Any:
            self.count += call.is_append
            return execute(call)

        async def acounted(call: Any) -> Any:
            self.count += call.is_append
            return await aexecute(call)

        client._execute, client._aexecute = counted, acounted  # type: ignore[method-assign]


async def run(service: BerthSessionService, session_id: str, recorded: bool, texts: list[str],
              model: BaseLlm | None = None) -> None:
    agent = LlmAgent(name="forecaster", model=model or Reporting(model="scripted"), tools=[weather])
    app = App(name="weather", root_agent=agent, plugins=[service.model_calls()] if recorded else [])
    runner = Runner(app=app, session_service=service)
    await service.create_session(app_name="weather", user_id="u1", session_id=session_id)
    for text in texts:
        message = types.Content(role="user", parts=[types.Part(text=text)])
        try:
            async for _ in runner.run_async(user_id="u1", session_id=session_id, new_message=message):
                pass
        except ConnectionError:
            pass


def log(client: berth.Client, session_id: str) -> list[berth.Event]:
    return [event for event in client.read(session_berth_id("weather", "u1", session_id)).events
            if event.type != "session/memory"]


async def test_each_model_call_rides_with_its_response(adk_place: Any) -> None:
    client = adk_place.client()
    appends = Appends(client)
    with BerthSessionService(client) as service:
        await run(service, "plain", recorded=False, texts=["what is the weather in Paris?"])
        plain = appends.count
        await run(service, "recorded", recorded=True, texts=["what is the weather in Paris?"])
        recorded = appends.count - plain
        assert isinstance(service.model_calls(), ModelCallRecorder) and service.model_calls() is service.model_calls()
    assert recorded == plain, (recorded, plain)  # no durable write of its own
    assert [event for event in log(client, "plain") if event.type == "model/call"] == []
    events = log(client, "recorded")
    calls = [event for event in events if event.type == "model/call"]
    assert [e.data["model"] for e in calls] == ["fake-gemini-001", "fake-gemini-001"]
    assert [(e.data["input_tokens"], e.data["output_tokens"], e.data.get("cached_tokens")) for e in calls] == [
        (120, 15, 100), (160, 12, None)]
    assert all(e.data["finish_reason"] == "STOP" and e.data["latency_ms"] >= 0 for e in calls)
    assert all(e.ignorable and set(e.data) <= {"model", "input_tokens", "output_tokens", "cached_tokens",
                                               "latency_ms", "finish_reason"} for e in calls)
    # Each in the step of its response, just before the response's own events; the
    # rest of the log as the run unrecorded wrote it.
    kinds = [event.type for event in events]
    assert kinds == ["adk/create", "turn/start", "user/message",
                     "step/start", "model/call", "assistant/message", "tool/call", "tool/result",
                     "step/end", "step/start", "model/call", "assistant/message", "step/end", "turn/end"], kinds
    assert [kind for kind in kinds if kind != "model/call"] == [event.type for event in log(client, "plain")]
    # ADK reads the session as before.
    with BerthSessionService(client) as fresh:
        got = await fresh.get_session(app_name="weather", user_id="u1", session_id="recorded")
    assert got is not None and [event.author for event in got.events] == ["user", "forecaster", "forecaster",
                                                                           "forecaster"]


async def test_a_failed_model_call_is_recorded_with_its_error(adk_place: Any) -> None:
    """The answer's call raises (ADK's `on_model_error_callback`): the call rides with
    the error event ADK 2.13 appends for the failed invocation, in its turn; the next
    invocation's call is recorded as usual."""
    client = adk_place.client()
    with BerthSessionService(client) as service:
        await run(service, "failed", recorded=True, texts=["what is the weather in Paris?", "thanks"],
                  model=Reporting(model="scripted", fail_answer=True))
    events = log(client, "failed")
    calls = [event.data for event in events if event.type == "model/call"]
    assert len(calls) == 3, calls
    assert "error" not in calls[0] and "error" not in calls[2]
    assert calls[1]["error"] == {"code": "model_error", "name": "ConnectionError", "message": "the provider is down"}
    assert calls[1]["model"] == "scripted" and calls[1]["latency_ms"] >= 0 and "input_tokens" not in calls[1]
    kinds = [event.type for event in events]
    failed = kinds.index("model/call", kinds.index("tool/result"))
    assert kinds[failed - 1:failed + 5] == ["tool/result", "model/call", "adk/event", "step/end", "turn/end",
                                            "turn/start"], kinds
    assert events[failed + 1].data["adk"]["error_code"] == "ConnectionError"
    assert events[failed + 3].data["reason"] == "error"


@pytest.mark.parametrize("partial", [True, False])
async def test_a_streamed_call_is_one_call(adk_place: Any, partial: bool) -> None:
    """Streamed fragments (`partial`) are not calls of their own: the call ends with its
    complete response."""
    client = adk_place.client()
    with BerthSessionService(client) as service:
        recorder = service.model_calls()
        session = await service.create_session(app_name="weather", user_id="u1", session_id="s")

        class Context:
            invocation_id, agent_name = "inv-1", "forecaster"

        Context.session = session  # type: ignore[attr-defined]
        request = type("Request", (), {"model": "gemini-x"})()
        await recorder.before_model_callback(callback_context=Context(), llm_request=request)
        if partial:
            await recorder.after_model_callback(callback_context=Context(), llm_response=LlmResponse(partial=True))
        await recorder.after_model_callback(callback_context=Context(), llm_response=LlmResponse(
            usage_metadata=usage(7, 3, None), finish_reason=types.FinishReason.MAX_TOKENS))
        waiting = service._model_calls.waiting(session_berth_id("weather", "u1", "s"))
    assert [(call.invocation_id, call.event["data"]) for call in waiting] == [
        ("inv-1", {"model": "gemini-x", "input_tokens": 7, "output_tokens": 3,
                   "latency_ms": waiting[0].event["data"]["latency_ms"], "finish_reason": "MAX_TOKENS"})]


async def test_a_call_of_an_invocation_that_wrote_nothing_after_it_stays_in_its_turn(adk_place: Any) -> None:
    """A call whose invocation appended no event after it (the process went on to the
    next invocation) rides with the next invocation's first event, before that
    invocation's turn starts: in the turn it ran in."""
    from google.adk.events.event import Event

    client = adk_place.client()
    with BerthSessionService(client) as service:
        recorder = service.model_calls()
        session = await service.create_session(app_name="weather", user_id="u1", session_id="s")

        def said(n: int, invocation: str) -> Event:
            return Event(id=f"e{n}", invocation_id=invocation, author="user", timestamp=1_790_000_000.0 + n,
                         content=types.Content(role="user", parts=[types.Part(text=f"m{n}")]))

        class Context:
            invocation_id, agent_name = "inv-1", "forecaster"

        Context.session = session  # type: ignore[attr-defined]
        await service.append_event(session, said(1, "inv-1"))
        await recorder.before_model_callback(callback_context=Context(), llm_request=type("R", (), {"model": "m"})())
        await recorder.on_model_error_callback(callback_context=Context(), llm_request=None,  # type: ignore[arg-type]
                                               error=TimeoutError("slow"))
        await service.append_event(session, said(2, "inv-2"))
    kinds = [event.type for event in client.read(session_berth_id("weather", "u1", "s")).events
             if event.type != "session/memory"]
    assert kinds == ["adk/create", "turn/start", "user/message", "model/call", "turn/end", "turn/start",
                     "user/message"], kinds
