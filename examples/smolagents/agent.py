"""A smolagents ToolCallingAgent whose memory is kept in berth by `BerthAgentLog`.

Offline: the model is scripted (a smolagents `Model` returning canned messages): it calls
the weather tool, then `final_answer`. smolagents keeps memory in the process only;
`BerthAgentLog` stores the task and every finished step in a berth session, and on the
next run rebuilds `agent.memory.steps` from it, so `agent.run(task, reset=False)`
continues the same job with the earlier steps in the model's prompt.

    BERTH_DATA=./berth-data python agent.py [JOB_ID]                     # embedded store
    BERTH_URL=http://127.0.0.1:7420 BERTH_API_KEY=… python agent.py [JOB_ID]
"""

from __future__ import annotations

import os
import sys

import berth
from berth.integrations.smolagents import BerthAgentLog
from smolagents import ActionStep, TaskStep, ToolCallingAgent, tool
from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model


def connect() -> berth.Client:
    """HTTP when BERTH_URL is set (the key from BERTH_API_KEY), else the embedded store."""
    if os.environ.get("BERTH_URL"):
        return berth.Client()
    return berth.open(os.environ.get("BERTH_DATA", "./berth-data"), tenant="acme", user="alice", role="service")


@tool
def get_weather(city: str) -> str:
    """The weather in a city (canned).

    Args:
        city: the city's name.
    """
    return f"sunny and 21 °C in {city}"


class ScriptedModel(Model):
    """Stands in for an LLM: its first answer calls the tool, its second gives the answer."""

    def __init__(self) -> None:
        super().__init__(model_id="scripted")
        self.calls = 0

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None,
                 **kwargs) -> ChatMessage:
        self.calls += 1
        name, arguments = (("get_weather", {"city": "Paris"}) if self.calls == 1
                           else ("final_answer", {"answer": "It is sunny and 21 °C in Paris."}))
        call = ChatMessageToolCall(id=f"call-{self.calls}", type="function",
                                   function=ChatMessageToolCallFunction(name=name, arguments=arguments))
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])


def transcript(steps) -> list[str]:
    """The agent's memory as lines: each task, each tool call and its result, each answer."""
    lines = []
    for step in steps:
        if isinstance(step, TaskStep):
            lines.append(f"user: {step.task}")
        elif isinstance(step, ActionStep):
            for call in step.tool_calls or []:
                if call.name != "final_answer":
                    lines.append(f"tool call: {call.name}({call.arguments})")
            if step.observations:  # the tool's output; of final_answer, the answer
                role = "assistant" if step.is_final_answer else "tool result"
                lines.append(f"{role}: {step.observations.strip()}")
    return lines


def main(job_id: str) -> None:
    agent = ToolCallingAgent(tools=[get_weather], model=ScriptedModel(), max_steps=4, verbosity_level=0)
    # `wait_s`: if a crashed process still holds the job, wait for its run lease to lapse.
    with BerthAgentLog(connect(), job_id, wait_s=60) as log:
        log.attach(agent)  # holds the job's session; rebuilds agent.memory.steps from it
        print(f"job {job_id!r}: {len(agent.memory.steps)} steps restored from berth")
        answer = agent.run("What's the weather in Paris?", reset=False)  # reset=False: continue the job
        print("agent:", answer)
    lines = transcript(agent.memory.steps)
    print(f"conversation {job_id!r}, {len(lines)} messages:")
    for line in lines:
        print("  " + line)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "weather-job")
