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
    kinds = [event.type for event in client.read(session_berth_id("weather", "u1", "chat")).events
             if event.type != "session/memory"]
    assert kinds == ["adk/create",
                     "turn/start", "user/message", "tool/call", "tool/result", "assistant/message", "turn/end",
                     "turn/start", "user/message", "assistant/message", "turn/end"], kinds
