"""An OpenAI Agents SDK agent whose conversation lives in berth (`BerthSession`).

Offline: the model is scripted (no API key, no network). It asks for the weather tool,
then answers with what the tool said. Run it twice with the same id: the second run's
agent sees, and prints, the first run's turns, read back from berth.

    BERTH_DATA=./berth-data python agent.py [SESSION_ID]                 # embedded store
    BERTH_URL=http://127.0.0.1:7420 BERTH_API_KEY=… python agent.py [SESSION_ID]
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import berth
from agents import Agent, Model, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled
from agents.items import TResponseInputItem
from berth.integrations.openai_agents import BerthSession
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText


def connect() -> berth.Client:
    """HTTP when BERTH_URL is set (the key from BERTH_API_KEY), else the embedded store."""
    if os.environ.get("BERTH_URL"):
        return berth.Client()
    return berth.open(os.environ.get("BERTH_DATA", "./berth-data"), tenant="acme", user="alice", role="service")


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city (canned)."""
    return f"sunny and 21 °C in {city}"


class ScriptedModel(Model):
    """Stands in for an LLM: asks for the tool, then answers from the tool's output."""

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema,
                           handoffs, tracing, **kwargs) -> ModelResponse:
        items = [input] if isinstance(input, str) else input
        # The input holds the whole conversation (earlier runs' turns included, from berth).
        last = items[-1] if items else {}
        if isinstance(last, dict) and last.get("type") == "function_call_output":
            output = ResponseOutputMessage(
                id="msg", type="message", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text=f"It is {last['output']}.", annotations=[])])
        else:
            call = len([item for item in items if isinstance(item, dict) and item.get("type") == "function_call"])
            output = ResponseFunctionToolCall(
                id=f"fc-{call}", call_id=f"call-{call}", type="function_call", status="completed",
                name="get_weather", arguments=json.dumps({"city": "Paris"}))
        return ModelResponse(output=[output], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("this example does not stream")


def show(item: TResponseInputItem) -> str:
    """One SDK item as a line of the transcript."""
    item = dict(item)
    if item.get("type") == "function_call":
        return f"tool call: {item['name']}({item['arguments']})"
    if item.get("type") == "function_call_output":
        return f"tool result: {item['output']}"
    content = item.get("content")
    if isinstance(content, list):  # an assistant message: a list of output parts
        content = "".join(part.get("text", "") for part in content)
    return f"{item.get('role')}: {content}"


async def main(session_id: str) -> None:
    set_tracing_disabled(True)  # no trace export: this example never leaves the machine
    agent = Agent(name="weather", instructions="Answer weather questions.", model=ScriptedModel(),
                  tools=[get_weather])
    # The one-line swap: BerthSession instead of SQLiteSession. `run_hooks()` records each
    # tool call before the tool runs, so a crash mid-tool is repaired on the next run, and
    # each model call as a `model/call` event (its model, tokens and latency).
    with BerthSession(session_id, connect()) as session:
        result = await Runner.run(agent, "What's the weather in Paris?", session=session,
                                  hooks=session.run_hooks())
        print("agent:", result.final_output)
        items = await session.get_items()
    print(f"conversation {session_id!r}, {len(items)} items:")
    for item in items:
        print("  " + show(item))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "weather-demo"))
