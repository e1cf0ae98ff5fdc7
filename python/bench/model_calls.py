"""What recording model calls (`model/call`, issue 54) costs an agent turn: the same
scripted agent turn — a user message, a model call that asks for a tool, the tool, a
model call that answers — run through a drop-in with the recording on and off, rounds
alternating (their order rotates), in one process on one store.

On/off per framework: OpenAI Agents SDK — `session.run_hooks()` against the same hooks
with `on_llm_start`/`on_llm_end` doing nothing (the turn and tool-start recording kept);
LangGraph — the run config with `saver.model_calls()` as a callback, or without;
Google ADK — the `App` with `service.model_calls()` as a plugin, or without. The agents
and scripted models are the ones in examples/ (each call reports token usage).

Also reported: the stored size of a `model/call` event (its canonical JSON line as
`berth sessions cat` prints it, without the log's checksum and framing).

    python bench/model_calls.py --framework openai|langgraph|adk [--turns 50] [--rounds 4] \\
        [--berth target/release/berth]   # with --berth: over HTTP too

Run each framework in the venv its drop-in suite uses (target/openai-dropin/venv,
target/langgraph-venv, target/adk-dropin/venv) with the wheel under test installed.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import Server  # noqa: E402

import berth  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example(relative: str) -> Any:
    path = EXAMPLES / relative
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}_{uuid.uuid4().hex[:6]}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- one round per framework: (turns) -> seconds, run on `client` -------------------

def openai_round(client: berth.Client, turns: int, record: bool) -> float:
    from agents import Agent, Runner, set_tracing_disabled
    from agents.usage import Usage
    from berth.integrations.openai_agents import BerthRunHooks, BerthSession

    example = _example("openai_agents/agent.py")
    set_tracing_disabled(True)

    class Counted(example.ScriptedModel):  # type: ignore[name-defined,misc]
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            response = await super().get_response(*args, **kwargs)
            response.usage = Usage(requests=1, input_tokens=42, output_tokens=9, total_tokens=51)
            return response

    class NoModelCalls(BerthRunHooks):
        async def on_llm_start(self, *args: Any) -> None:
            return None

        async def on_llm_end(self, *args: Any) -> None:
            return None

    agent = Agent(name="weather", instructions="Answer weather questions.", model=Counted(),
                  tools=[example.get_weather])

    async def run() -> float:
        with BerthSession(f"mc-{uuid.uuid4().hex[:10]}", client) as session:
            hooks = session.run_hooks() if record else NoModelCalls(session)
            started = time.perf_counter()
            for _ in range(turns):
                await Runner.run(agent, "What's the weather in Paris?", session=session, hooks=hooks)
            return time.perf_counter() - started

    return asyncio.run(run())


def langgraph_round(client: berth.Client, turns: int, record: bool) -> float:
    from langchain_core.messages import HumanMessage

    from berth.integrations.langgraph import BerthSaver

    example = _example("langgraph/graph.py")
    with BerthSaver(client) as saver:
        graph = example.build().compile(checkpointer=saver)
        config: dict[str, Any] = {"configurable": {"thread_id": f"mc-{uuid.uuid4().hex[:10]}"}}
        if record:
            config["callbacks"] = [saver.model_calls()]
        started = time.perf_counter()
        for _ in range(turns):
            graph.invoke({"messages": [HumanMessage("What's the weather in Paris?")]}, config)
        return time.perf_counter() - started


def adk_round(client: berth.Client, turns: int, record: bool) -> float:
    from google.adk.agents import Agent
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.genai import types

    from berth.integrations.adk import BerthSessionService

    example = _example("adk/agent.py")
    agent = Agent(name="forecaster", model=example.ScriptedLlm(model="scripted"), tools=[example.get_weather],
                  instruction="Answer weather questions.")

    async def run() -> float:
        with BerthSessionService(client) as sessions:
            plugins = [sessions.model_calls()] if record else []
            runner = Runner(app=App(name="weather", root_agent=agent, plugins=plugins), session_service=sessions)
            session_id = f"mc-{uuid.uuid4().hex[:10]}"
            await sessions.create_session(app_name="weather", user_id="alice", session_id=session_id)
            question = types.Content(role="user", parts=[types.Part(text="What's the weather in Paris?")])
            started = time.perf_counter()
            for _ in range(turns):
                async for _event in runner.run_async(user_id="alice", session_id=session_id, new_message=question):
                    pass
            return time.perf_counter() - started

    return asyncio.run(run())


ROUNDS: dict[str, Callable[[berth.Client, int, bool], float]] = {
    "openai": openai_round, "langgraph": langgraph_round, "adk": adk_round,
}


def model_call_bytes(client: berth.Client) -> float | None:
    """The mean size of the stored `model/call` events of the client's sessions, as
    canonical JSON lines (`berth sessions cat`)."""
    sizes = []
    for session in client.list_sessions(limit=100).items:
        for event in client.iter_events(session.id):
            if event.type == "model/call":
                line = {"seq": event.seq, "type": event.type, "time": event.time, "data": event.data,
                        "ignorable": True}
                if event.run is not None:
                    line["run"] = event.run
                sizes.append(len(json.dumps(line, separators=(",", ":"), ensure_ascii=False).encode()))
    return statistics.mean(sizes) if sizes else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", choices=sorted(ROUNDS), required=True)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--berth", help="a berth binary: also measure over HTTP")
    arguments = parser.parse_args()
    round_of = ROUNDS[arguments.framework]
    with tempfile.TemporaryDirectory(prefix="berth-mc-") as scratch:
        places: list[tuple[str, Callable[[], berth.Client]]] = [
            ("embedded", lambda: berth.open(str(Path(scratch) / "embedded"), tenant="bench", user="bench",
                                            role="service")),
        ]
        server = None
        if arguments.berth:
            server = Server(arguments.berth, Path(scratch) / "served")
            places.append(("http", lambda: berth.Client(server.url, api_key=server.key)))  # bench/bench, service
        try:
            for transport, connect in places:
                client = connect()
                round_of(client, 2, True)  # warm up: imports, the store's first session
                seconds: dict[bool, list[float]] = {True: [], False: []}
                for index in range(arguments.rounds):
                    for record in ((True, False) if index % 2 == 0 else (False, True)):
                        seconds[record].append(round_of(client, arguments.turns, record))
                on = statistics.median(arguments.turns / value for value in seconds[True])
                off = statistics.median(arguments.turns / value for value in seconds[False])
                size = model_call_bytes(client)
                print(f"{arguments.framework} {transport}: {on:.1f} turns/s recording, {off:.1f} without "
                      f"({on / off:.3f}x); rounds {[round(arguments.turns / s, 1) for s in seconds[True]]} / "
                      f"{[round(arguments.turns / s, 1) for s in seconds[False]]}; "
                      f"a model/call event {size:.0f} bytes" if size else "")
                client.close()
        finally:
            if server is not None:
                server.stop()


if __name__ == "__main__":
    main()
