"""A real ADK `Runner` (a scripted model, no network) on each service: the same two
invocations — a tool call and its answer, then a plain reply, with output_key state and
`user:`/`app:` state written by a tool — run on InMemorySessionService and on
BerthSessionService, and the sessions they leave must agree (generated ids and times
normalized). On berth the log also shows one turn per invocation.
"""

from __future__ import annotations

from typing import Any, AsyncGenerator

from google.adk.agents import LlmAgent
from google.adk.memory import InMemoryMemoryService
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from google.adk.events.event import Event

from berth.integrations.adk import BerthMemoryService, BerthSessionService, session_berth_id


class Scripted(BaseLlm):
    """Asks for the weather once, then answers from the tool's result."""

    async def generate_content_async(self, llm_request: Any, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1]
        response = next((p.function_response for p in last.parts if p.function_response), None)
        if response is not None:
            text = f"It is {response.response['result']} in Paris."
        elif "weather" in (last.parts[0].text or ""):
            call = types.FunctionCall(name="weather", args={"city": "Paris"})
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
            return
        else:
            text = "You are welcome."
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


def weather(city: str, tool_context: ToolContext) -> str:
    """The weather in a city."""
    tool_context.state["user:last_city"] = city
    tool_context.state["app:lookups"] = tool_context.state.get("app:lookups", 0) + 1
    tool_context.state["temp:scratch"] = "never stored"
    return "sunny"


async def _run(service: Any, memory: Any) -> tuple[Any, Any]:
    agent = LlmAgent(name="forecaster", model=Scripted(model="scripted"), tools=[weather], output_key="last_reply")
    runner = Runner(agent=agent, app_name="weather", session_service=service, memory_service=memory)
    await service.create_session(app_name="weather", user_id="u1", session_id="chat", state={"user:lang": "en"})
    for text in ["what is the weather in Paris?", "thanks"]:
        message = types.Content(role="user", parts=[types.Part(text=text)])
        async for _ in runner.run_async(user_id="u1", session_id="chat", new_message=message):
            pass
    session = await service.get_session(app_name="weather", user_id="u1", session_id="chat")
    await memory.add_session_to_memory(session)
    found = await memory.search_memory(app_name="weather", user_id="u1", query="sunny Paris")
    return session, [m.content.parts[0].text for m in found.memories]


def _normal(session: Any) -> Any:
    invocations: dict[str, int] = {}
    calls: dict[str, int] = {}
    events = []
    for event in session.events:
        data = event.model_dump(mode="json", exclude_none=True)
        data.pop("id")
        data.pop("timestamp")
        data["invocation_id"] = invocations.setdefault(event.invocation_id, len(invocations))
        for part in data.get("content", {}).get("parts", []):
            for kind in ("function_call", "function_response"):
                if kind in part:
                    part[kind]["id"] = calls.setdefault(part[kind]["id"], len(calls))
        events.append(data)
    return {"state": session.state, "events": events}


async def test_runner_agrees_with_in_memory(adk_place: Any) -> None:
    reference, reference_found = await _run(InMemorySessionService(), InMemoryMemoryService())
    client = adk_place.client()
    with BerthSessionService(client) as service:
        got, found = await _run(service, BerthMemoryService(client))
    assert _normal(got) == _normal(reference)
    assert got.state["user:last_city"] == "Paris" and "temp:scratch" not in got.state
    assert found == reference_found and found
    berth_id = session_berth_id("weather", "u1", "chat")
    events = [event for event in client.read(berth_id).events if event.type != "session/memory"]
    kinds = [event.type for event in events]
    assert kinds == ["adk/create",
                     "turn/start", "user/message",
                     "step/start", "assistant/message", "tool/call", "tool/result",
                     "step/end", "step/start", "assistant/message", "step/end", "turn/end",
                     "turn/start", "user/message",
                     "step/start", "assistant/message", "step/end", "turn/end"], kinds
    # One turn per invocation, numbered in order from 0; one step per model call.
    invocations = [event.data["invocation_id"] for event in events if event.type == "turn/start"]
    assert [(event.type, event.data.get("turn"), event.data.get("step")) for event in events
            if event.type.startswith(("turn/", "step/"))] == [
        ("turn/start", 0, None), ("step/start", 0, 0), ("step/end", 0, 0), ("step/start", 0, 1), ("step/end", 0, 1),
        ("turn/end", 0, None), ("turn/start", 1, None), ("step/start", 1, 0), ("step/end", 1, 0),
        ("turn/end", 1, None)]
    assert invocations == list(dict.fromkeys(event.invocation_id for event in got.events))
    call = next(event.data for event in events if event.type == "assistant/message" and "tool_calls" in event.data)
    assert [c["name"] for c in call["tool_calls"]] == ["weather"]
    assert client.get_session(berth_id).title == "weather/u1/chat"


async def test_an_invocation_resumed_by_another_object_keeps_its_turn(adk_place: Any) -> None:
    """An invocation that goes on in another service object (another process: a
    resumable app answering a long-running call) is the same turn, its steps numbered
    on; the next invocation takes the next number, whichever object writes it."""
    client = adk_place.client()

    def said(n: int, invocation: str, author: str) -> Event:
        role = "user" if author == "user" else "model"
        return Event(id=f"e{n}", invocation_id=invocation, author=author, timestamp=1_790_000_000.0 + n,
                     content=types.Content(role=role, parts=[types.Part(text=f"m{n}")]))

    with BerthSessionService(client) as first:
        session = await first.create_session(app_name="weather", user_id="u1", session_id="resumed")
        for event in [said(1, "inv-1", "user"), said(2, "inv-1", "forecaster")]:
            await first.append_event(session, event)
    for event in [said(3, "inv-1", "closer"), said(4, "inv-2", "user")]:
        with BerthSessionService(client) as other:
            session = await other.get_session(app_name="weather", user_id="u1", session_id="resumed")
            assert session is not None
            await other.append_event(session, event)
    events = client.read(session_berth_id("weather", "u1", "resumed")).events
    assert [(event.type, event.data.get("turn"), event.data.get("step")) for event in events
            if event.type.startswith(("turn/", "step/"))] == [
        ("turn/start", 0, None), ("step/start", 0, 0), ("step/end", 0, 0), ("turn/end", 0, None),
        ("turn/start", 0, None), ("step/start", 0, 1), ("step/end", 0, 1), ("turn/end", 0, None),
        ("turn/start", 1, None)]
