"""A Google ADK agent whose sessions live in berth (`BerthSessionService`).

Offline: the model is a scripted `BaseLlm` (no API key, no network): it calls the
weather tool, then answers from the tool's result. The Runner stores every event in
berth, so a second run with the same session id shows, and continues, the first. Each
model call is recorded too (`sessions.model_calls()`), as a `model/call` event.

    BERTH_DATA=./berth-data python agent.py [SESSION_ID]                 # embedded store
    BERTH_URL=http://127.0.0.1:7420 BERTH_API_KEY=… python agent.py [SESSION_ID]
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import AsyncGenerator

import berth
from berth.integrations.adk import BerthSessionService, session_berth_id
from google.adk.agents import Agent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

APP, USER = "weather", "alice"


def connect() -> berth.Client:
    """HTTP when BERTH_URL is set (the key, a service key, from BERTH_API_KEY), else the
    embedded store."""
    if os.environ.get("BERTH_URL"):
        return berth.Client()
    return berth.open(os.environ.get("BERTH_DATA", "./berth-data"), tenant="acme", user="alice", role="service")


def get_weather(city: str) -> str:
    """The weather in a city (canned)."""
    return f"sunny and 21 °C in {city}"


class ScriptedLlm(BaseLlm):
    """Stands in for Gemini: asks for the tool, then answers from the tool's output."""

    async def generate_content_async(self, llm_request: LlmRequest,
                                     stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        # The request holds the whole session so far (earlier runs' events included).
        latest = llm_request.contents[-1].parts
        result = next((part.function_response for part in latest if part.function_response), None)
        if result is None:
            part = types.Part(function_call=types.FunctionCall(name="get_weather", args={"city": "Paris"}))
        else:
            part = types.Part(text=f"It is {result.response['result']}.")
        # A real model reports its token usage (and ADK's metrics log a warning without one).
        usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=42, candidates_token_count=9)
        yield LlmResponse(content=types.Content(role="model", parts=[part]), usage_metadata=usage,
                          model_version="scripted-001")


def show(event) -> list[str]:
    """One ADK event as transcript lines."""
    lines = []
    for part in event.content.parts if event.content else []:
        if part.function_call:
            lines.append(f"tool call: {part.function_call.name}({part.function_call.args})")
        elif part.function_response:
            lines.append(f"tool result: {part.function_response.response.get('result')}")
        elif part.text:
            lines.append(f"{'user' if event.author == 'user' else 'assistant'}: {part.text}")
    return lines


async def main(session_id: str) -> None:
    agent = Agent(name="forecaster", model=ScriptedLlm(model="scripted"), tools=[get_weather],
                  instruction="Answer weather questions.")
    client = connect()
    # The one-line swap: BerthSessionService instead of InMemorySessionService.
    with BerthSessionService(client) as sessions:
        # The plugin records each model call in the session (optional).
        runner = Runner(app=App(name=APP, root_agent=agent, plugins=[sessions.model_calls()]),
                        session_service=sessions)
        session = await sessions.get_session(app_name=APP, user_id=USER, session_id=session_id)
        if session is None:
            session = await sessions.create_session(app_name=APP, user_id=USER, session_id=session_id)
        print(f"session {session_id!r}: {len(session.events)} events restored from berth")
        question = types.Content(role="user", parts=[types.Part(text="What's the weather in Paris?")])
        async for event in runner.run_async(user_id=USER, session_id=session_id, new_message=question):
            if event.is_final_response():
                print("agent:", event.content.parts[0].text)
        session = await sessions.get_session(app_name=APP, user_id=USER, session_id=session_id)
    calls = [event.data for event in client.iter_events(session_berth_id(APP, USER, session_id))
             if event.type == "model/call"]
    print(f"model calls recorded: {len(calls)}, {sum(call.get('input_tokens', 0) for call in calls)} input tokens, "
          f"{sum(call.get('output_tokens', 0) for call in calls)} output tokens")
    lines = [line for event in session.events for line in show(event)]
    print(f"conversation {session_id!r}, {len(lines)} messages:")
    for line in lines:
        print("  " + line)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "weather-session"))
