"""The conversation a LangGraph thread holds in berth's vocabulary (issue 52, items 2, 3
and 5), on both transports: each message a graph adds once, as its vocabulary event, in
the append that stores it anyway; a graph invocation as a turn (numbered 0, 1, 2 per
thread), super-steps as steps, an `interrupt()` ending the turn as awaiting input; the
`lg/*` record marked ignorable and read by the saver exactly as before; berth's readers
(listing, transcript, inspector) showing the conversation; `durable_tool_node`'s record
before each tool runs, and a process killed mid-tool whose call the next process answers
with an outcome-unknown `ToolMessage` instead of running it again."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command

import berth
from berth.integrations.langgraph import (
    LABEL,
    OUTCOME_UNKNOWN_TEXT,
    AsyncBerthSaver,
    BerthSaver,
    thread_session_id,
)

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "fixtures")]
import capture  # noqa: E402
import lg_agents  # noqa: E402
import lg_graph  # noqa: E402
import lg_readers  # noqa: E402


def talk(client: berth.Client, thread: str) -> list[str]:
    """The thread's vocabulary events, one short line each (the `lg/*` record left out)."""
    lines = []
    for event in client.iter_events(thread_session_id(thread)):
        data = event.data
        kind = event.type
        if kind.startswith("lg/"):
            continue
        if kind in ("turn/start", "turn/end"):
            lines.append(f"{kind} {data['turn']}" + (f" {data['reason']}" if "reason" in data else ""))
        elif kind in ("step/start", "step/end"):
            lines.append(f"{kind} {data['turn']}.{data['step']}")
        elif kind == "assistant/message" and data.get("tool_calls"):
            calls = ", ".join(f"{call['name']}({json.dumps(call['arguments'])}) {call['call_id']}"
                              for call in data["tool_calls"])
            lines.append(f"assistant → {calls}")
        elif kind.endswith("/message"):
            lines.append(f"{kind.split('/')[0]} {data['content']}")
        elif kind == "tool/call":
            lines.append(f"tool/call {data['name']} {data['call_id']}")
        elif kind == "tool/result":
            error = data.get("error", {}).get("code") if data.get("error") else ("error" if data.get("is_error") else "")
            lines.append(f"tool/result {data['call_id']} {data['content']}" + (f" [{error}]" if error else ""))
        else:
            lines.append(kind)
    return lines


def batches(client: berth.Client, thread: str) -> list[list[dict[str, Any]]]:
    """The thread's appends, as the export records them (each event names its batch's key)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for line in client.export(thread_session_id(thread)).decode().splitlines()[1:]:
        event = json.loads(line)
        if "seq" in event:
            found.setdefault(event["idempotency"]["key"], []).append(event)
    return list(found.values())


def weather(saver: Any, durable: bool = False) -> Any:
    model = lg_agents.scripted("get_weather", {"city": "Paris"}, "It is sunny and 21 °C in Paris.", "call-1")
    return lg_agents.agent_graph(saver, model, [lg_agents.get_weather], durable=durable)


TURN = [
    "step/start {t}.{s0}", "user What's the weather in Paris?", "step/end {t}.{s0}",
    "step/start {t}.{s1}", 'assistant → get_weather({{"city": "Paris"}}) call-1', "step/end {t}.{s1}",
    "step/start {t}.{s2}", "tool/call get_weather call-1", "tool/result call-1 sunny and 21 °C in Paris",
    "step/end {t}.{s2}",
    "step/start {t}.{s3}", "assistant It is sunny and 21 °C in Paris.", "step/end {t}.{s3}",
    "turn/end {t} completed",
]


def weather_turn(turn: int, first_step: int) -> list[str]:
    steps = {f"s{index}": first_step + index for index in range(4)}
    return [f"turn/start {turn}"] + [line.format(t=turn, **steps) for line in TURN]


def test_an_agent_thread_is_a_conversation(lg_place: Any) -> None:
    client = lg_place.sync_client()
    config = {"configurable": {"thread_id": "weather"}}
    for _ in range(3):  # three invocations by three savers, as three processes would
        with BerthSaver(lg_place.sync_client()) as saver:
            weather(saver).invoke({"messages": [HumanMessage("What's the weather in Paris?")]}, config)
    # Turns 0, 1, 2; steps numbered as LangGraph numbers its checkpoints (metadata `step`).
    assert talk(client, "weather") == weather_turn(0, 0) + weather_turn(1, 5) + weather_turn(2, 10)
    events = list(client.iter_events("weather"))
    assert all(event.ignorable for event in events if event.type.startswith("lg/"))
    assert not any(event.ignorable for event in events if not event.type.startswith("lg/"))
    assert len({event.run for event in events}) == 3
    # No append of its own: every batch holding vocabulary holds the lg record it rides with.
    for batch in batches(client, "weather"):
        assert any(event["type"].startswith("lg/") for event in batch), batch
    with BerthSaver(lg_place.sync_client()) as fresh:
        messages = weather(fresh).get_state(config).values["messages"]
    assert [type(message).__name__ for message in messages] == ["HumanMessage", "AIMessage", "ToolMessage",
                                                                "AIMessage"] * 3
    # berth's readers: listed without --all, its conversation in the transcript and the inspector.
    listing = lg_readers.listed(lg_place, LABEL)
    assert "weather" in listing, listing
    transcript = lg_readers.transcript(lg_place, "weather")
    assert "user/message" in transcript and "What's the weather in Paris?" in transcript
    assert "→ get_weather call-1" in transcript and "It is sunny and 21 °C in Paris." in transcript
    if lg_place.transport == "http":
        page = lg_readers.inspector_page(lg_place, "weather")
        for text in ("Turn 0", "Turn 2", "What's the weather in Paris?", "get_weather", "completed"):
            assert text in page, text


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_an_interrupt_ends_the_turn_awaiting_input(lg_place: Any, mode: str) -> None:
    thread = f"ask-{mode}"
    child = subprocess.run([sys.executable, str(HERE / "lg_graph.py"), mode, *lg_place.child_args(), thread],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-3000:]
    config = {"configurable": {"thread_id": thread}}
    if mode == "sync":
        with BerthSaver(lg_place.sync_client()) as saver:
            lg_graph.build(saver).invoke(Command(resume="yes"), config)
    else:
        async_client = lg_place.async_client()
        async with AsyncBerthSaver(async_client) as saver:
            await lg_graph.build(saver).ainvoke(Command(resume="yes"), config)
        await async_client.close()
    assert talk(lg_place.sync_client(), thread) == [
        "turn/start 0",
        "step/start 0.0", "user hi", "step/end 0.0",
        "step/start 0.1", "assistant a ran", "step/end 0.1",
        "step/start 0.2", "step/end 0.2", "turn/end 0 awaiting_input",
        "turn/start 1",
        "step/start 1.2", "user yes", "step/end 1.2",
        "step/start 1.3", "assistant b ran", "step/end 1.3",
        "turn/end 1 completed",
    ]


def test_errors_static_interrupts_and_new_inputs(lg_place: Any) -> None:
    client = lg_place.sync_client()
    with BerthSaver(client) as saver:
        failing = capture.failing_graph(saver)
        with pytest.raises(ValueError):
            failing.invoke({"messages": [HumanMessage("fail")], "n": 0}, {"configurable": {"thread_id": "failed"}})
        # A static interrupt (`interrupt_before`) says nothing to the saver: the turn stays
        # open and the run that continues it (`invoke(None)`) ends it; a new input while
        # one is open ends it (as `unknown`: how it ended is not known).
        graph = lg_graph.build(None)
        graph.checkpointer = saver
        graph.interrupt_before_nodes = ["a"]
        config = {"configurable": {"thread_id": "static"}}
        graph.invoke({"messages": [HumanMessage("one")], "trail": []}, config)
        graph.invoke({"messages": [HumanMessage("two")], "trail": []}, config)
        graph.interrupt_before_nodes = []
        graph.invoke(None, config)
    assert talk(client, "failed") == [
        "turn/start 0", "step/start 0.0", "user fail", "step/end 0.0", "step/start 0.1", "step/end 0.1",
        "turn/end 0 error",
    ]
    assert talk(client, "static") == [
        "turn/start 0", "step/start 0.0", "user one", "step/end 0.0", "step/start 0.1",
        "step/end 0.1", "turn/end 0 unknown",
        "turn/start 1", "step/start 1.2", "user two", "step/end 1.2", "step/start 1.3",
        "assistant a ran", "step/end 1.3", "step/start 1.4", "step/end 1.4", "turn/end 1 awaiting_input",
    ]


def test_subgraphs_send_and_exit_durability(lg_place: Any) -> None:
    client = lg_place.sync_client()
    with BerthSaver(client) as saver:
        capture.fan_graph(saver).invoke({"messages": [HumanMessage("fan out")], "items": []},
                                        {"configurable": {"thread_id": "fan"}})
        capture.loop_graph(saver, 3).invoke({"messages": [HumanMessage("go")], "n": 0},
                                            {"configurable": {"thread_id": "exit"}}, durability="exit")
    # The subgraph's message once (its own namespace first, then the parent's state).
    assert talk(client, "fan") == [
        "turn/start 0", "step/start 0.0", "user fan out", "step/end 0.0",
        "step/start 0.1", "assistant from the subgraph", "step/end 0.1",
        "step/start 0.2", "step/end 0.2",
        "step/start 0.3", "assistant done: ['a!', 'b!']", "step/end 0.3", "turn/end 0 completed",
    ]
    # Stored once at the end: one turn, its last step holding every message.
    assert talk(client, "exit") == [
        "turn/start 0", "step/start 0.3", "user go", "assistant s0", "assistant s1", "assistant s2",
        "step/end 0.3", "turn/end 0 completed",
    ]


def test_content_parts_and_values_json_cannot_hold(lg_place: Any) -> None:
    client = lg_place.sync_client()
    image = "data:image/png;base64," + "A" * 5000
    parts = [{"type": "text", "text": "look at this"}, {"type": "image_url", "image_url": {"url": image}}]
    odd = {"nan": math.nan, "bytes": b"\x00\x01", "nested": [[["deep"]]]}
    with BerthSaver(client) as saver:
        graph = lg_graph.build(saver)
        config = {"configurable": {"thread_id": "parts"}}
        graph.update_state(config, {"messages": [
            HumanMessage(content=parts),
            AIMessage(content="", tool_calls=[{"name": "odd", "args": odd, "id": "c-1"}]),
            ToolMessage(content=[{"type": "text", "text": "x" * 70_000}], tool_call_id="c-1", status="error"),
        ]})
        stored = graph.get_state(config).values["messages"]
    assert stored[0].content == parts and stored[1].tool_calls[0]["args"]["bytes"] == b"\x00\x01"
    events = {event.type: event.data for event in client.iter_events("parts") if not event.type.startswith("lg/")}
    assert events["user/message"]["content"][0] == {"type": "text", "text": "look at this"}
    assert events["user/message"]["content"][1]["image_url"]["url"] == "[5022 characters, kept in the checkpoint]"
    assert events["assistant/message"]["tool_calls"][0]["arguments"] == {
        "nan": "nan", "bytes": "b'\\x00\\x01'", "nested": [[["deep"]]]}
    assert events["tool/call"] == {"call_id": "c-1", "name": "odd", "arguments": events["assistant/message"][
        "tool_calls"][0]["arguments"]}
    result = events["tool/result"]
    assert result["is_error"] is True and result["truncated"] is True
    assert len(result["content"][0]["text"]) == 64 * 1024
    transcript = lg_readers.transcript(lg_place, "parts")
    assert "look at this" in transcript and "[image]" in transcript


def test_a_batch_over_the_limits_leaves_the_messages_out(lg_place: Any) -> None:
    """1,200 messages in one update: with their events the batch would pass berth's
    1,000 events; the saver stores its record, the turns it had, and no messages."""
    client = lg_place.sync_client()
    many = [HumanMessage(content=f"m{index}") for index in range(1200)]
    with BerthSaver(client) as saver:
        graph = lg_graph.build(saver)
        config = {"configurable": {"thread_id": "many"}}
        graph.update_state(config, {"messages": many})
        graph.update_state(config, {"messages": [HumanMessage("after")]})
        assert len(graph.get_state(config).values["messages"]) == 1201
    assert talk(client, "many") == ["user after"]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_durable_tool_node_records_each_call_before_it_runs(lg_place: Any, mode: str) -> None:
    """One `tool/call` per call: the durable record, in an append of its own before the
    tool runs; the result's append adds none."""
    thread = f"durable-{mode}"
    config = {"configurable": {"thread_id": thread}}
    question = {"messages": [HumanMessage("What's the weather in Paris?")]}
    if mode == "sync":
        with BerthSaver(lg_place.sync_client()) as saver:
            result = weather(saver, durable=True).invoke(question, config)
    else:
        async_client = lg_place.async_client()
        async with AsyncBerthSaver(async_client) as saver:
            result = await weather(saver, durable=True).ainvoke(question, config)
        await async_client.close()
    assert result["messages"][-1].content == "It is sunny and 21 °C in Paris."
    client = lg_place.sync_client()
    assert talk(client, thread) == weather_turn(0, 0)
    records = [batch for batch in batches(client, thread) if any(e["type"] == "tool/call" for e in batch)]
    assert [[event["type"] for event in batch] for batch in records] == [["tool/call"]]


def test_a_process_killed_mid_tool_is_answered_outcome_unknown(lg_place: Any, tmp_path: Path) -> None:
    """The crash test: a child process asks for a charge through `durable_tool_node` and
    is SIGKILLed while the tool runs. The next process resumes the thread
    (`graph.invoke(None, config)`): the call is not run again, and the model's input
    carries an outcome-unknown `ToolMessage` for it."""
    runs = tmp_path / "runs"
    environment = dict(os.environ, LG_TOOL_RUNS_FILE=str(runs), LG_TOOL_SLEEP="60")
    child = subprocess.Popen([sys.executable, str(HERE / "lg_agents.py"), *lg_place.child_args(), "pay"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "tool started", child.stderr.read() if child.stderr else ""
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert runs.read_text() == "charge 42\n"
    client = lg_place.sync_client()
    assert talk(client, "pay") == [
        "turn/start 0", "step/start 0.0", "user Charge my card 42.", "step/end 0.0",
        "step/start 0.1", 'assistant → charge({"amount": 42}) call-charge', "step/end 0.1",
        "step/start 0.2", "tool/call charge call-charge",
    ]
    # The next process (here: this one, with a saver and a model of its own).
    os.environ["LG_TOOL_RUNS_FILE"] = str(runs)
    lg_agents.RUNS_FILE = str(runs)
    lg_agents.MODEL_INPUTS.clear()
    config = {"configurable": {"thread_id": "pay"}}
    with BerthSaver(lg_place.sync_client()) as saver:
        model = lg_agents.scripted("charge", {"amount": 42}, "I could not confirm the charge.", "unused")
        model.i = 1  # the model's next answer: the text
        graph = lg_agents.agent_graph(saver, model, [lg_agents.charge], durable=True)
        assert graph.get_state(config).next == ("tools",)
        result = graph.invoke(None, config)
    assert runs.read_text() == "charge 42\n"  # not run again
    answered = lg_agents.MODEL_INPUTS[-1][-1]
    assert isinstance(answered, ToolMessage) and answered.tool_call_id == "call-charge"
    assert answered.status == "error" and answered.content == OUTCOME_UNKNOWN_TEXT
    assert result["messages"][-1].content == "I could not confirm the charge."
    assert talk(client, "pay")[9:] == [
        f"tool/result call-charge {OUTCOME_UNKNOWN_TEXT} [TOOL_OUTCOME_UNKNOWN]", "step/end 0.2",
        "step/start 0.3", "assistant I could not confirm the charge.", "step/end 0.3", "turn/end 0 completed",
    ]
    calls = [event for event in client.iter_events("pay") if event.type == "tool/call"]
    assert len(calls) == 1  # one tool/call for the call: the dead process's durable record
