"""The cross-framework matrix (issue 54, item 4): the conversation each framework wrote
through its drop-in (fixtures/<framework>.jsonl, by fixtures/capture_<framework>.py) is
imported into a fresh store — a real `berth serve` and the embedded store — and read with
the presenter of the framework installed in this venv (berth.history), in which its
texts, tool names, arguments and outputs must agree with the fixture's neutral
expectation (<framework>.expect.json); then this venv's framework continues each foreign
conversation for one more turn with a fake model, which must have been given it.

Run in any drop-in's venv (scripts/dropins/<framework>/run does): the presenter is the
framework that imports. Sync tests only (the smolagents venv has no pytest-asyncio).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import re
from typing import Any, Callable

import pytest

import berth
from berth.history import conversation

import scenario

#: This venv's framework: the one whose module imports (a module inside it, since
#: scripts/dropins/<name>/ on the path makes a namespace package of the bare name).
_MODULES = {"openai": "agents.run", "langgraph": "langgraph.graph", "adk": "google.adk.events",
            "smolagents": "smolagents.memory"}


def _installed(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


PRESENTERS = [name for name, module in _MODULES.items() if _installed(module)]
pytestmark = pytest.mark.skipif(not PRESENTERS, reason="no framework of the matrix is installed")
FRAMEWORK = PRESENTERS[0] if PRESENTERS else ""
Neutral = list[dict[str, Any]]


def load(place: Any, framework: str) -> tuple[berth.Client, str, dict[str, Any]]:
    """Imports fixture `framework` into the place's tenant: (client, session id, expectation)."""
    expect = json.loads((scenario.FIXTURES / f"{framework}.expect.json").read_text())
    client = place.sync_client()
    first, _, events = (scenario.FIXTURES / f"{framework}.jsonl").read_bytes().partition(b"\n")
    head = json.loads(first)
    head["header"]["scope"]["tenant"] = place.tenant  # the export names its own tenant (acme)
    imported = client.import_sessions(json.dumps(head).encode() + b"\n" + events)
    assert [session.id for session in imported.sessions] == [expect["session_id"]]
    return client, expect["session_id"], expect


def neutral_of_reading(items: list[Any]) -> Neutral:
    out: Neutral = []
    for item in items:
        if isinstance(item, berth.history.ToolResult):
            out.append({"result": {"call_id": item.call_id, "name": item.name, "output": item.output,
                                   "is_error": item.is_error}})
        else:
            out.append({"role": item.role, "text": item.text, "tool_calls": [
                {"call_id": call.call_id, "name": call.name, "arguments": call.arguments} for call in item.tool_calls]})
    return out


class Folder:
    """Builds the neutral list back from a framework's objects, as the reader pairs them."""

    def __init__(self) -> None:
        self.out: Neutral = []
        self.names: dict[str, str] = {}

    def message(self, role: str, text: str) -> None:
        self.out.append({"role": role, "text": text, "tool_calls": []})

    def call(self, call_id: str, name: str, arguments: Any, *, own: bool = False) -> None:
        last = self.out[-1] if self.out else None
        if own or last is None or last.get("role") != "assistant":
            self.message("assistant", "")
        self.out[-1]["tool_calls"].append({"call_id": call_id, "name": name, "arguments": arguments})
        self.names[call_id] = name

    def result(self, call_id: str, output: str, is_error: bool, name: str | None = None) -> None:
        self.out.append({"result": {"call_id": call_id, "name": name or self.names.get(call_id),
                                    "output": output, "is_error": is_error}})


# -- each framework's presentation, as neutral data ------------------------------------

def openai_present(client: berth.Client, session_id: str) -> tuple[Any, Neutral]:
    from berth.history.openai import openai_items

    items = openai_items(client, session_id)
    folder = Folder()
    for item in items:
        assert json.loads(json.dumps(item)) == item  # plain JSON, as the SDK's input takes
        if item.get("type") == "function_call":
            assert isinstance(item["arguments"], str)
            folder.call(item["call_id"], item["name"], json.loads(item["arguments"]))
        elif item.get("type") == "function_call_output":
            folder.result(item["call_id"], item["output"], False)
        else:
            folder.message(item["role"], item["content"])
    return items, folder.out


def langgraph_present(client: berth.Client, session_id: str) -> tuple[Any, Neutral]:
    from berth.history.langchain import langchain_messages
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    messages = langchain_messages(client, session_id)
    folder = Folder()
    for message in messages:
        if isinstance(message, ToolMessage):
            folder.result(message.tool_call_id, message.content, message.status == "error", message.name)
        elif isinstance(message, AIMessage):
            folder.message("assistant", message.content)
            for call in message.tool_calls:
                folder.out[-1]["tool_calls"].append({"call_id": call["id"], "name": call["name"],
                                                     "arguments": call["args"]})
                folder.names[call["id"]] = call["name"]
        else:
            assert isinstance(message, (HumanMessage, SystemMessage))
            folder.message("user" if isinstance(message, HumanMessage) else "system", message.content)
    return messages, folder.out


def adk_present(client: berth.Client, session_id: str) -> tuple[Any, Neutral]:
    from berth.history.adk import adk_events

    events = adk_events(client, session_id, author="forecaster")
    folder = Folder()
    for event in events:
        parts = event.content.parts
        texts = [part.text for part in parts if part.text is not None]
        if event.author == "user":
            folder.message("user", "\n".join(texts))
            continue
        assert event.author == "forecaster"
        if event.content.role == "model":
            folder.message("assistant", "\n".join(texts))
        for part in parts:
            if part.function_call:
                call = part.function_call
                folder.call(call.id, call.name, call.args)
            if part.function_response:
                response = part.function_response.response
                failed = "error" in response
                folder.result(part.function_response.id, response["error" if failed else "result"], failed,
                              part.function_response.name)
    return events, folder.out


def smolagents_present(client: berth.Client, session_id: str) -> tuple[Any, Neutral]:
    from berth.history.smolagents import smolagents_steps
    from smolagents.memory import ActionStep, TaskStep

    steps = smolagents_steps(client, session_id)
    folder = Folder()
    for step in steps:
        if isinstance(step, TaskStep):
            folder.message("user", step.task)
            continue
        assert isinstance(step, ActionStep)
        if step.tool_calls:
            folder.message("assistant", step.model_output or "")
            for call in step.tool_calls:
                folder.call(call.id, call.name, call.arguments)
            assert len(step.tool_calls) == 1, "one call a step in the matrix: its observations are its result"
            folder.result(step.tool_calls[0].id, step.observations, False)
        else:
            assert step.is_final_answer and step.action_output == step.model_output
            folder.message("assistant", step.model_output)
    return steps, folder.out


PRESENT: dict[str, Callable[[berth.Client, str], tuple[Any, Neutral]]] = {
    "openai": openai_present, "langgraph": langgraph_present, "adk": adk_present,
    "smolagents": smolagents_present,
}


@pytest.mark.parametrize("written_by", scenario.FRAMEWORKS)
def test_presents_the_conversation(place: Any, written_by: str) -> None:
    """The neutral reading, then this venv's presentation, agree with the expectation."""
    client, session_id, expect = load(place, written_by)
    assert neutral_of_reading(conversation(client, session_id)) == expect["conversation"]
    for presenter in PRESENTERS:
        _objects, presented = PRESENT[presenter](client, session_id)
        assert presented == expect["conversation"], f"{written_by} read by {presenter}"


# -- each framework continues the foreign conversation ---------------------------------

def forked_from(client: berth.Client, source: str, continued: str | None = None, before: Any = None,
                label: str | None = None) -> Any:
    """The source's log (called before continuing); after it, with the new session: the
    source is unchanged, and the new session is berth's fork of it at 0 under the target
    drop-in's label, whose conversation begins with the source's."""
    log = [(event.seq, event.type, event.data) for event in client.iter_events(source)]
    if continued is None:
        return log
    assert log == before, "continuing wrote to the source"
    record = client.get_session(continued)
    parent = record.header.parent
    assert parent is not None and (parent.session, parent.cut_seq) == (source, 0), parent
    assert label in record.labels, record.labels
    source_reading = neutral_of_reading(conversation(client, source))
    assert neutral_of_reading(conversation(client, continued))[: len(source_reading)] == source_reading
    return None


def openai_continue(client: berth.Client, session_id: str) -> list[str]:
    """`Runner.run` with the items and a new question: the SDK's scripted model's input."""
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message
    from berth.history.openai import openai_items
    from berth.integrations.openai_agents import BerthSession

    set_tracing_disabled(True)

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city (canned)."""
        return scenario.weather(city)

    model = ScriptedModel()
    model.enqueue([assistant_message(scenario.FOLLOW_UP_ANSWER)])
    agent = Agent(name="forecaster", model=model, tools=[get_weather])
    before = forked_from(client, session_id)
    session = BerthSession(f"continued-{session_id}", client=client)
    added = asyncio.run(session.continue_from(session_id))
    assert added == openai_items(client, session_id)
    result = asyncio.run(Runner.run(agent, scenario.FOLLOW_UP, session=session))
    assert result.final_output == scenario.FOLLOW_UP_ANSWER
    session.close()
    forked_from(client, session_id, session.berth_id, before, "openai-agents")
    seen = [item if isinstance(item, dict) else item.model_dump() for item in model.first_call.input]
    return [json.dumps(item, ensure_ascii=False) for item in seen]


def langgraph_continue(client: berth.Client, session_id: str) -> list[str]:
    """A new `MessagesState` thread (checkpointed in berth) seeded with the messages by
    `update_state`, invoked once with a fake chat model: the messages the model saw; the
    new thread's own berth session reads back the foreign turn and the new one."""
    from berth.history.langchain import continue_thread
    from berth.integrations.langgraph import BerthSaver, thread_session_id
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city (canned)."""
        return scenario.weather(city)

    model = FakeMessagesListChatModel(responses=[AIMessage(content=scenario.FOLLOW_UP_ANSWER)])
    seen: list[Any] = []

    def agent(state: MessagesState) -> dict:
        seen.extend(state["messages"])
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([get_weather]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    thread = f"continued-{session_id}"
    with BerthSaver(client) as saver:
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": thread}}
        before = forked_from(client, session_id)
        continue_thread(client, session_id, graph, config, as_node="agent")
        result = graph.invoke({"messages": [HumanMessage(scenario.FOLLOW_UP)]}, config)
    assert result["messages"][-1].content == scenario.FOLLOW_UP_ANSWER
    forked_from(client, session_id, thread_session_id(thread), before, "langgraph")
    texts = [item.text for item in conversation(client, thread_session_id(thread)) if hasattr(item, "text")]
    assert texts[0] == scenario.QUESTION and texts[-2:] == [scenario.FOLLOW_UP, scenario.FOLLOW_UP_ANSWER]
    return [repr(message) for message in seen]


def adk_continue(client: berth.Client, session_id: str) -> list[str]:
    """The events appended to a new session of berth's ADK service, then one turn of a
    `Runner` with a scripted `BaseLlm`: the request's contents."""
    from berth.history.adk import adk_events
    from berth.integrations.adk import BerthSessionService
    from berth.integrations.adk._records import session_berth_id
    from google.adk.agents import Agent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner
    from google.genai import types

    seen: list[str] = []

    class RecordingLlm(BaseLlm):
        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            seen.extend(content.model_dump_json(exclude_none=True) for content in llm_request.contents)
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=scenario.FOLLOW_UP_ANSWER)]))

    def get_weather(city: str) -> str:
        """The weather in a city (canned)."""
        return scenario.weather(city)

    async def run() -> str | None:
        with BerthSessionService(client) as sessions:
            session = await sessions.continue_session(session_id, app_name="matrix", user_id="bob",
                                                      author="forecaster", session_id=f"continued-{session_id}"[:100])
            assert [event.content for event in session.events] == [
                event.content for event in adk_events(client, session_id, author="forecaster")]
            forked_from(client, session_id, session_berth_id("matrix", "bob", session.id), before, "adk")
            agent = Agent(name="forecaster", model=RecordingLlm(model="recording"), tools=[get_weather])
            runner = Runner(app_name="matrix", agent=agent, session_service=sessions)
            answer = None
            question = types.Content(role="user", parts=[types.Part(text=scenario.FOLLOW_UP)])
            async for event in runner.run_async(user_id="bob", session_id=session.id, new_message=question):
                if event.is_final_response():
                    answer = event.content.parts[0].text
            return answer

    before = forked_from(client, session_id)
    assert asyncio.run(run()) == scenario.FOLLOW_UP_ANSWER
    return seen


def smolagents_continue(client: berth.Client, session_id: str) -> list[str]:
    """`agent.memory.steps` set to the steps, `agent.run(question, reset=False)` with a
    scripted model: the prompt it was given."""
    from berth.history.smolagents import smolagents_steps
    from berth.integrations.smolagents import BerthAgentLog
    from smolagents import ToolCallingAgent, tool
    from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city (canned).

        Args:
            city: the city's name.
        """
        return scenario.weather(city)

    seen: list[str] = []

    class RecordingModel(Model):
        def generate(self, messages: Any, stop_sequences: Any = None, response_format: Any = None,
                     tools_to_call_from: Any = None, **kwargs: Any) -> ChatMessage:
            seen.extend(str(getattr(message, "content", message)) for message in messages)
            call = ChatMessageToolCall(id="call-answer-2", type="function", function=ChatMessageToolCallFunction(
                name="final_answer", arguments={"answer": scenario.FOLLOW_UP_ANSWER}))
            return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])

    agent = ToolCallingAgent(tools=[get_weather], model=RecordingModel(model_id="recording"), max_steps=3,
                             verbosity_level=0)
    before = forked_from(client, session_id)
    log = BerthAgentLog(client, f"continued-{session_id}")
    log.continue_from(session_id, agent)
    assert len(agent.memory.steps) == len(smolagents_steps(client, session_id))
    assert agent.run(scenario.FOLLOW_UP, reset=False) == scenario.FOLLOW_UP_ANSWER
    log.close()
    forked_from(client, session_id, log.session_id, before, "smolagents")
    return seen


CONTINUE: dict[str, Callable[[berth.Client, str], list[str]]] = {
    "openai": openai_continue, "langgraph": langgraph_continue, "adk": adk_continue,
    "smolagents": smolagents_continue,
}


@pytest.mark.parametrize("written_by", scenario.FRAMEWORKS)
def test_continues_the_conversation(place: Any, written_by: str) -> None:
    """This venv's framework runs one more turn on the foreign history: its model is given
    the question, both calls' names, arguments and results, and the answer."""
    client, session_id, _expect = load(place, written_by)
    for presenter in PRESENTERS:
        seen = "\n".join(CONTINUE[presenter](client, session_id))
        facts = [scenario.QUESTION, scenario.ANSWER, scenario.FOLLOW_UP]
        for call_id, name, arguments, result in scenario.CALLS:
            facts += [call_id, name, result]
            # Arguments as JSON, a dict's repr, or the JSON text inside a JSON string.
            (key, value), = arguments.items()
            assert re.search(rf"""\\?['"]{key}\\?['"]:\s*\\?['"]{value}""", seen), \
                f"{presenter}'s model was not given the arguments {arguments} of {written_by}'s conversation"
        for fact in facts:
            assert json.dumps(fact, ensure_ascii=False)[1:-1] in seen or fact in seen, \
                f"{presenter}'s model was not given {fact!r} of {written_by}'s conversation"
