"""The smolagents mapping, table-driven, from records captured from smolagents 1.26.0
(scripted models, no network: the steps' `smol/step` records, nulls left out, and what
the agent's `_step_stream` yielded): which berth events each moment of a run appends
(`_turns`, `_vocabulary`; each model call a `model/call` first in its step), and how the
loader reads them back (`_fold`, `_repair`).
No store: the suites in scripts/dropins/smolagents run the same against berth."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("smolagents.memory")  # the python suite's venv has no smolagents (and tests/integrations/smolagents would pass for it as a namespace package): its drop-in suite runs this

from smolagents.memory import ActionStep, PlanningStep, TaskStep, ToolCall
from smolagents.models import ChatMessage, MessageRole
from smolagents.monitoring import TokenUsage
from smolagents.utils import AgentExecutionError, AgentGenerationError, AgentToolExecutionError  # noqa: E402

from berth.integrations.smolagents._fold import fold
from berth.integrations.smolagents._records import action, planning
from berth.integrations.smolagents._turns import Turns

# ----- records captured from smolagents 1.26.0 ----------------------------------------------
TIMING = {"start_time": 1796610979.136856, "end_time": 1796610979.1376936}
#: A ToolCallingAgent step calling a tool (examples/smolagents/agent.py).
WEATHER = {"step_number": 1, "timing": TIMING, "tool_calls": [
    {"id": "call-1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
    "model_output_message": {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"arguments": {"city": "Paris"}, "name": "get_weather", "description": None}, "id": "call-1",
         "type": "function"}]},
    "model_output": "", "observations": "sunny and 21 °C in Paris", "is_final_answer": False}
#: Its final step: the `final_answer` tool alone.
ANSWER = {"step_number": 2, "timing": TIMING, "tool_calls": [
    {"id": "call-2", "type": "function", "function": {"name": "final_answer",
                                                      "arguments": {"answer": "It is sunny and 21 °C in Paris."}}}],
    "model_output": "", "observations": "It is sunny and 21 °C in Paris.", "is_final_answer": True}
#: A ToolCallingAgent step with two parallel calls (observations joined by smolagents).
PARALLEL = {"step_number": 1, "timing": TIMING, "tool_calls": [
    {"id": "call-1-0", "type": "function", "function": {"name": "charge_card", "arguments": {"amount": 5}}},
    {"id": "call-1-1", "type": "function", "function": {"name": "lookup", "arguments": {"city": "Oslo"}}}],
    "model_output": "", "observations": "charged 5 EUR\nsunny in Oslo", "is_final_answer": False}
PARALLEL_OUTPUTS = [("call-1-0", "charged 5 EUR"), ("call-1-1", "sunny in Oslo")]
#: A CodeAgent step whose code failed.
CODE_ERROR = {"step_number": 1, "timing": TIMING, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "python_interpreter", "arguments": "undefined_name + 1"}}],
    "error": {"type": "AgentExecutionError", "message": "Code execution failed at line 'undefined_name + 1' due to: "
              "InterpreterError: The variable `undefined_name` is not defined."},
    "model_output": "Thought: oops.\n<code>\nundefined_name + 1\n</code>", "code_action": "undefined_name + 1",
    "is_final_answer": False}
#: A CodeAgent step that printed.
CODE_PRINT = {"step_number": 1, "timing": TIMING, "tool_calls": [
    {"id": "call_6", "type": "function", "function": {"name": "python_interpreter",
                                                      "arguments": "x = 21\nprint('x is', x)"}}],
    "model_output": "Thought: set x.\n<code>\nx = 21\nprint('x is', x)\n</code>", "code_action": "x = 21\nprint('x is', x)",
    "observations": "Execution logs:\nx is 21\nLast output from code snippet:\nNone", "is_final_answer": False}
#: A CodeAgent step giving the final answer in its code.
CODE_ANSWER = {"step_number": 2, "timing": TIMING, "tool_calls": [
    {"id": "call_2", "type": "function", "function": {"name": "python_interpreter", "arguments": "final_answer('42')"}}],
    "model_output": "Thought: done.\n<code>\nfinal_answer('42')\n</code>", "code_action": "final_answer('42')",
    "observations": "Execution logs:\nLast output from code snippet:\n42", "action_output": "42", "is_final_answer": True}
#: smolagents' step when `max_steps` ran out (made by `_handle_max_steps_reached`).
MAX_STEPS = {"step_number": 2, "timing": TIMING, "error": {"type": "AgentMaxStepsError", "message": "Reached max steps."},
             "action_output": "It is 21.", "is_final_answer": False}
#: A planning step.
PLAN = {"model_output_message": {"role": "assistant", "content": "1. Double 21.\n2. Answer.<end_plan>"},
        "plan": "Here are the facts I know and my new/updated plan of action to solve the task:\n```\n1. Double 21.\n```",
        "timing": TIMING, "token_usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}}

UNKNOWN = ("The tool call was interrupted after it started; its outcome is unknown. Retry only read-only or "
           "idempotent work; otherwise verify the effect or ask the user.")


def call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"call_id": call_id, "name": name, "arguments": arguments}


def requested(record: dict[str, Any]) -> list[ToolCall]:
    return [ToolCall(name=c["function"]["name"], arguments=c["function"]["arguments"], id=c["id"])
            for c in record.get("tool_calls") or []]


@dataclass
class StepCase:
    name: str
    record: dict[str, Any]
    expected: list[tuple[str, Any]]
    #: What `_step_stream` yielded: per-call observations, the final answer.
    outputs: list[tuple[str, str]] = field(default_factory=list)
    answer: tuple[Any] | None = None
    #: The step ran through `_step_stream` (smolagents' max-steps step does not).
    streamed: bool = True


STEP = "smol/step"  # its data is checked apart: the record itself, exactly
#: The step's model call (no model told, no usage in the records): its latency is checked apart.
MODEL = ("model/call", {"model": "unknown"})
STEP_CASES = [
    StepCase("tool-calling: a call and its observation", WEATHER, [
        ("step/start", {"turn": 0, "step": 0}), MODEL,
        ("assistant/message", {"content": "", "tool_calls": [call("call-1", "get_weather", {"city": "Paris"})]}),
        ("tool/call", call("call-1", "get_weather", {"city": "Paris"})),
        ("tool/result", {"call_id": "call-1", "content": "sunny and 21 °C in Paris"}),
        (STEP, None), ("step/end", {"turn": 0, "step": 0})],
        outputs=[("call-1", "sunny and 21 °C in Paris")]),
    StepCase("tool-calling: the final_answer call is the answer, and ends the turn", ANSWER, [
        ("step/start", {"turn": 0, "step": 1}), MODEL,
        ("assistant/message", {"content": "It is sunny and 21 °C in Paris.",
                               "smolagents": {"output": "It is sunny and 21 °C in Paris."}}),
        (STEP, None), ("step/end", {"turn": 0, "step": 1}), ("turn/end", {"turn": 0, "reason": "completed"})],
        outputs=[("call-2", "It is sunny and 21 °C in Paris.")], answer=("It is sunny and 21 °C in Paris.",)),
    StepCase("tool-calling: parallel calls, each its own observation", PARALLEL, [
        ("step/start", {"turn": 0, "step": 0}), MODEL,
        ("assistant/message", {"content": "", "tool_calls": [call("call-1-0", "charge_card", {"amount": 5}),
                                                             call("call-1-1", "lookup", {"city": "Oslo"})]}),
        ("tool/call", call("call-1-0", "charge_card", {"amount": 5})),
        ("tool/result", {"call_id": "call-1-0", "content": "charged 5 EUR"}),
        ("tool/call", call("call-1-1", "lookup", {"city": "Oslo"})),
        ("tool/result", {"call_id": "call-1-1", "content": "sunny in Oslo"}),
        (STEP, None), ("step/end", {"turn": 0, "step": 0})], outputs=PARALLEL_OUTPUTS),
    StepCase("code: the code is the python_interpreter call; its failure an error result", CODE_ERROR, [
        ("step/start", {"turn": 0, "step": 0}), MODEL,
        ("assistant/message", {"content": CODE_ERROR["model_output"],
                               "tool_calls": [call("call_1", "python_interpreter", "undefined_name + 1")]}),
        ("tool/call", call("call_1", "python_interpreter", "undefined_name + 1")),
        ("tool/result", {"call_id": "call_1", "is_error": True, "content": f"Error: {CODE_ERROR['error']['message']}"}),
        (STEP, None), ("step/end", {"turn": 0, "step": 0})]),
    StepCase("code: the observations are the result", CODE_PRINT, [
        ("step/start", {"turn": 0, "step": 0}), MODEL,
        ("assistant/message", {"content": CODE_PRINT["model_output"],
                               "tool_calls": [call("call_6", "python_interpreter", "x = 21\nprint('x is', x)")]}),
        ("tool/call", call("call_6", "python_interpreter", "x = 21\nprint('x is', x)")),
        ("tool/result", {"call_id": "call_6", "content": CODE_PRINT["observations"]}),
        (STEP, None), ("step/end", {"turn": 0, "step": 0})]),
    StepCase("code: the answer given in code ends the turn", CODE_ANSWER, [
        ("step/start", {"turn": 0, "step": 1}), MODEL,
        ("assistant/message", {"content": CODE_ANSWER["model_output"],
                               "tool_calls": [call("call_2", "python_interpreter", "final_answer('42')")]}),
        ("tool/call", call("call_2", "python_interpreter", "final_answer('42')")),
        ("tool/result", {"call_id": "call_2", "content": CODE_ANSWER["observations"]}),
        ("assistant/message", {"content": "42", "smolagents": {"output": "42"}}),
        (STEP, None), ("step/end", {"turn": 0, "step": 1}), ("turn/end", {"turn": 0, "reason": "completed"})],
        answer=("42",)),
    StepCase("max steps: the forced answer ends the turn as max_steps", MAX_STEPS, [
        ("step/start", {"turn": 0, "step": 1}), MODEL,
        ("assistant/message", {"content": "It is 21.", "smolagents": {"output": "It is 21."}}),
        (STEP, None), ("step/end", {"turn": 0, "step": 1}), ("turn/end", {"turn": 0, "reason": "max_steps"})],
        streamed=False),
]


def shape(events: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    shown = []
    for event in events:
        data = None if event["type"] == STEP else event["data"]
        if event["type"] == "model/call":
            assert event["ignorable"] and event["data"]["latency_ms"] >= 0 and event["time"] > 0, event
            data = {key: value for key, value in data.items() if key != "latency_ms"}
        shown.append((event["type"], data))
    return shown


@pytest.mark.parametrize("case", STEP_CASES, ids=[case.name for case in STEP_CASES])
def test_a_finished_step(case: StepCase) -> None:
    turns = Turns()
    assert shape(turns.begin("Compute.", True, 0)) == [
        ("turn/start", {"turn": 0}), ("user/message", {"content": "Compute.", "smolagents": {
            "reset": True, "images_dropped": 0}})]
    step = action(case.record)
    if case.streamed:
        turns.step_begins(step)
        turns.model_answered()
        for tool_call in requested(case.record):
            turns.requested(tool_call)
        for call_id, observation in case.outputs:
            turns.observed(call_id, observation)
        if case.answer is not None:
            turns.answered_with(case.answer[0])
    events = turns.step_finished(step)
    assert shape(events) == case.expected
    [record] = [event for event in events if event["type"] == STEP]
    assert record["ignorable"] and record["data"]["kind"] == "action"
    # The record that restores the memory is the step's as it always was.
    assert action(record["data"]["step"]).dict() == step.dict()
    # An answer given by the step is not given again by smolagents' FinalAnswerStep.
    answered = case.expected[-1][0] == "turn/end"
    assert turns.final("again") == ([] if answered else [
        {"type": "assistant/message", "data": {"content": "again", "smolagents": {"output": "again"}}},
        {"type": "turn/end", "data": {"turn": 0, "reason": "completed"}}])


def test_planning_a_task_and_the_turn_ends() -> None:
    turns = Turns(next_turn=3)
    events = turns.begin("Plan.", False, 1)
    assert shape(events)[0] == ("turn/start", {"turn": 3})
    assert events[1]["data"]["smolagents"] == {"reset": False, "images_dropped": 1}
    step = planning(PLAN)
    assert shape(turns.planned(step)) == [
        ("model/call", {"model": "unknown"}),  # smolagents' zero tokens: none reported
        ("assistant/message", {"content": PLAN["plan"], "smolagents": {"kind": "planning"}}), (STEP, None)]
    # A turn left open (a stream not run to its end) ends as aborted when the next begins.
    assert shape(turns.begin("Again.", False, 0))[:2] == [
        ("turn/end", {"turn": 3, "reason": "aborted"}), ("turn/start", {"turn": 4})]
    assert shape(turns.failed(KeyboardInterrupt())) == [("turn/end", {
        "turn": 4, "reason": "interrupted", "error": {"type": "KeyboardInterrupt", "message": ""}})]
    assert turns.failed(ValueError("late")) == [] and turns.abort() == []
    turns.begin("Fail.", False, 0)
    assert shape(turns.failed(ValueError("boom"))) == [("turn/end", {
        "turn": 5, "reason": "error", "error": {"type": "ValueError", "message": "boom"}})]


def test_pre_tool_records_of_a_tool_calling_step() -> None:
    turns = Turns()
    turns.begin("Pay.", True, 0)
    step = action({**PARALLEL, "tool_calls": None, "observations": None})  # as it is while its tools run
    turns.step_begins(step)
    for tool_call in requested(PARALLEL):
        turns.requested(tool_call)
    # An append that fails stores nothing: the state is put back, the record made again.
    before = turns.snapshot()
    _, refused = turns.before_tool("charge_card", {"amount": 5})
    turns.restore(before)
    charge, events = turns.before_tool("charge_card", {"amount": 5})
    assert events == refused
    assert charge.call_id == "call-1-0"
    assert [event["type"] for event in events] == ["step/start", "model/call", "assistant/message", "tool/call"]
    partial = events[2]["data"].pop("smolagents")["step"]
    assert partial["tool_calls"] == PARALLEL["tool_calls"] and partial["observations"] is None
    assert events[2]["data"] == {"content": "", "tool_calls": [call("call-1-0", "charge_card", {"amount": 5}),
                                                               call("call-1-1", "lookup", {"city": "Oslo"})]}
    turns.tool_ended(charge, "charged 5 EUR", False)
    for call_id, observation in PARALLEL_OUTPUTS:
        turns.observed(call_id, observation)
    step.tool_calls, step.observations = action(PARALLEL).tool_calls, PARALLEL["observations"]
    # The step's end stores what is not stored yet: no second step/start, message or tool/call.
    assert shape(turns.step_finished(step)) == [
        ("tool/result", {"call_id": "call-1-0", "content": "charged 5 EUR"}),
        ("tool/call", call("call-1-1", "lookup", {"city": "Oslo"})),
        ("tool/result", {"call_id": "call-1-1", "content": "sunny in Oslo"}),
        (STEP, None), ("step/end", {"turn": 0, "step": 0})]


def test_pre_tool_records_of_tools_a_code_step_calls() -> None:
    turns = Turns()
    turns.begin("Pay.", True, 0)
    step = action({**CODE_PRINT, "tool_calls": None, "observations": None})
    turns.step_begins(step)
    turns.requested(ToolCall(name="python_interpreter", arguments=CODE_PRINT["code_action"], id="call_6"))
    first, events = turns.before_tool("charge_card", {"amount": 30})
    assert shape(events)[3:] == [("tool/call", call("call_6", "python_interpreter", CODE_PRINT["code_action"])),
                                 ("tool/call", call("call_6.1", "charge_card", {"amount": 30}))]
    second, events = turns.before_tool("lookup", {"city": "Oslo"})
    assert (second.call_id, shape(events)) == ("call_6.2", [("tool/call", call("call_6.2", "lookup", {"city": "Oslo"}))])
    turns.tool_ended(first, "charged 30 EUR", False)
    turns.tool_ended(second, "ValueError: no such city", True)
    step.observations = CODE_PRINT["observations"]
    assert shape(turns.step_finished(step)) == [
        ("tool/result", {"call_id": "call_6.1", "content": "charged 30 EUR"}),
        ("tool/result", {"call_id": "call_6.2", "content": "ValueError: no such city", "is_error": True}),
        ("tool/result", {"call_id": "call_6", "content": CODE_PRINT["observations"]}),
        (STEP, None), ("step/end", {"turn": 0, "step": 0})]
    with pytest.raises(RuntimeError, match="outside a step"):
        turns.before_tool("lookup", {"city": "Oslo"})


def test_a_call_id_the_run_used_already_is_made_unique() -> None:
    # A CodeAgent numbers its calls by its memory's length: after a reset, `call_1` again.
    turns = Turns(used={"call_1"})
    turns.begin("Again.", True, 0)
    step = action({**CODE_PRINT, "step_number": 1})
    turns.step_begins(step)
    turns.requested(ToolCall(name="python_interpreter", arguments="x = 21", id="call_1"))
    charge, events = turns.before_tool("charge_card", {"amount": 1})
    assert [event["data"].get("call_id") for event in events] == [None, None, None, "call_1@0.0", "call_1@0.0.1"]
    events = [events[0], *events[2:]]  # the model call aside
    assert events[1]["data"]["tool_calls"][0]["call_id"] == "call_1@0.0"
    assert events[1]["data"]["smolagents"]["step"]["tool_calls"][0]["id"] == "call_1"  # smolagents' own
    turns.tool_ended(charge, "charged 1 EUR", False)
    assert [event["data"].get("call_id") for event in turns.step_finished(step)][:2] == ["call_1@0.0.1", "call_1@0.0"]
    # The loader maps berth's ids back to the step's calls by their order.
    partial = events[1]["data"]["smolagents"]["step"]
    log = [event(0, "turn/start", {"turn": 0}),
           event(1, "assistant/message", events[1]["data"]),
           event(2, "tool/call", events[2]["data"]), event(3, "tool/call", events[3]["data"]),
           event(4, "tool/result", repaired("call_1@0.0")), event(5, "tool/result", repaired("call_1@0.0.1")),
           event(6, "step/end", {"turn": 0, "step": 0})]
    [last] = fold(log).steps
    assert last.tool_calls == action(partial).tool_calls
    assert str(last.error) == f"Code execution failed at line 'charge_card(amount=1)' due to: ToolOutcomeUnknownError: {UNKNOWN}"


def test_a_model_call_from_the_step_and_the_providers_response() -> None:
    """The model's id, the step's `token_usage`, an OpenAI-shaped raw response's cached
    tokens, finish reason and id; the latency from the step's start to the model's answer;
    nothing of the prompt or the completion."""
    turns = Turns()
    turns.begin("Weather?", True, 0, SimpleNamespace(model_id="gpt-test"))
    step = action({**WEATHER, "tool_calls": None, "observations": None})
    turns.step_begins(step)
    raw = SimpleNamespace(id="chatcmpl-1", choices=[SimpleNamespace(finish_reason="tool_calls")],
                          usage=SimpleNamespace(prompt_tokens_details=SimpleNamespace(cached_tokens=64)))
    step.model_output_message = ChatMessage(role=MessageRole.ASSISTANT, content="", raw=raw)
    step.token_usage = TokenUsage(input_tokens=120, output_tokens=7)
    turns.model_answered()
    turns.model_answered()  # the first answer counts
    events = turns.step_finished(step)
    [call_event] = [event for event in events if event["type"] == "model/call"]
    assert [event["type"] for event in events][:2] == ["step/start", "model/call"]
    data = call_event.pop("data")
    assert call_event == {"type": "model/call", "ignorable": True, "time": call_event["time"]}
    latency = data.pop("latency_ms")
    assert data == {"model": "gpt-test", "input_tokens": 120, "output_tokens": 7, "cached_tokens": 64,
                    "finish_reason": "tool_calls", "response_id": "chatcmpl-1"}
    assert 0 <= latency < 60_000


def test_a_model_call_that_raised_is_recorded_with_its_error() -> None:
    """In the failed step's append (its `step_finished`), the model's own error."""
    turns = Turns()
    turns.begin("Try.", True, 0, SimpleNamespace(model_id="down"))
    step = action({"step_number": 1, "timing": TIMING})
    turns.step_begins(step)
    try:
        try:
            raise ConnectionError("the model is down")
        except ConnectionError as cause:
            quiet = SimpleNamespace(log_error=lambda message: None)  # smolagents' errors log as they are made
            raise AgentGenerationError(f"Error in generating model output:\n{cause}", quiet) from cause
    except AgentGenerationError as error:
        turns.model_failed(error)
    events = turns.step_finished(step)
    assert shape(events) == [
        ("step/start", {"turn": 0, "step": 0}),
        ("model/call", {"model": "down", "error": {"code": "model_error", "name": "ConnectionError",
                                                   "message": "the model is down"}}),
        (STEP, None), ("step/end", {"turn": 0, "step": 0})]
    # A step that raised after its model answered (its code did not parse): no error.
    turns.begin("Parse.", False, 0)
    step = action({"step_number": 1, "timing": TIMING, "model_output": "no code"})
    turns.step_begins(step)
    step.model_output_message = ChatMessage(role=MessageRole.ASSISTANT, content="no code")
    turns.model_failed(ValueError("no code blob"))
    assert shape(turns.step_finished(step))[1] == ("model/call", {"model": "unknown"})


def test_a_step_that_is_one_model_call_is_timed_by_its_timing() -> None:
    """smolagents' max-steps answer (no `_step_stream`) and a planning step."""
    turns = Turns()
    turns.begin("Never finish.", True, 0, SimpleNamespace(model_id="m"))
    answer = turns.step_finished(action({**MAX_STEPS, "token_usage": {"input_tokens": 9, "output_tokens": 3}}))[1]
    plan = turns.planned(planning(PLAN))[0]
    for event in (answer, plan):
        assert event["type"] == "model/call" and event["time"] == int(TIMING["end_time"] * 1000)
        assert event["data"]["latency_ms"] == round((TIMING["end_time"] - TIMING["start_time"]) * 1000, 3)
    assert (answer["data"]["model"], answer["data"]["input_tokens"], answer["data"]["output_tokens"]) == ("m", 9, 3)


def event(seq: int, kind: str, data: dict[str, Any], time: int = 1_000) -> Any:
    return SimpleNamespace(seq=seq, type=kind, data=data, time=time)


def repaired(call_id: str, code: str = "TOOL_OUTCOME_UNKNOWN") -> dict[str, Any]:
    """A tool/result as berth's repair writes it."""
    name = "ToolOutcomeUnknownError" if code == "TOOL_OUTCOME_UNKNOWN" else "ToolNotStartedError"
    content = UNKNOWN if code == "TOOL_OUTCOME_UNKNOWN" else (
        "The tool call was interrupted before it started. Retry it if it is still needed.")
    return {"call_id": call_id, "content": content, "is_error": True, "error": {"code": code, "name": name}, "turn": 0}


FOLD_CASES = [
    ("tool-calling: one call outcome-unknown, one never started", "calling",
     {**PARALLEL, "tool_calls": PARALLEL["tool_calls"], "observations": None},
     [("tool/call", call("call-1-0", "charge_card", {"amount": 5}))],
     [repaired("call-1-0"), repaired("call-1-1", "TOOL_NOT_STARTED")],
     AgentToolExecutionError,
     [f"Error executing tool 'charge_card' with arguments {{'amount': 5}}: ToolOutcomeUnknownError: {UNKNOWN}",
      "Please try again or use another tool",
      "Error executing tool 'lookup' with arguments {'city': 'Oslo'}: ToolNotStartedError: The tool call was "
      "interrupted before it started. Retry it if it is still needed.",
      "Please try again or use another tool"]),
    ("code: the tool the code was running", "code",
     {**CODE_PRINT, "observations": None},
     [("tool/call", call("call_6", "python_interpreter", "x = 21")), ("tool/call", call("call_6.1", "charge_card",
                                                                                         {"amount": 30}))],
     [repaired("call_6"), repaired("call_6.1")],
     AgentExecutionError,
     [f"Code execution failed at line 'charge_card(amount=30)' due to: ToolOutcomeUnknownError: {UNKNOWN}"]),
]


@pytest.mark.parametrize("case", FOLD_CASES, ids=[case[0] for case in FOLD_CASES])
def test_the_loader_rebuilds_an_interrupted_step(case: Any) -> None:
    _, _, partial, started, closers, error_type, lines = case
    old_task = event(0, "user/message", {"content": "Old layout.", "smolagents": {"reset": True, "images_dropped": 0}})
    old_step = event(1, "smol/step", {"kind": "action", "step": WEATHER}, time=900)
    log = [old_task, old_step, event(2, "assistant/message", {"content": "It is sunny."}),
           event(3, "turn/start", {"turn": 0}),
           event(4, "user/message", {"content": "Pay.", "smolagents": {"reset": False, "images_dropped": 0}}),
           event(5, "step/start", {"turn": 0, "step": 0}),
           event(6, "assistant/message", {"content": "", "smolagents": {"step": partial}, "tool_calls": [
               call(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in partial["tool_calls"]]}),
           *[event(7 + index, kind, data) for index, (kind, data) in enumerate(started)]]
    # Before the repair the step is open (its process may be running it): not in memory.
    assert [type(step) for step in fold(log).steps] == [TaskStep, ActionStep, TaskStep]
    seq = len(log)
    log += [event(seq + index, "tool/result", data, time=2_500) for index, data in enumerate(closers)]
    log += [event(len(log), "step/end", {"turn": 0, "step": 0}, time=2_500),
            event(len(log) + 1, "turn/end", {"turn": 0, "reason": "interrupted"}, time=2_500)]
    folded = fold(log)
    assert folded.next_turn == 1
    steps = folded.steps
    assert [type(step) for step in steps] == [TaskStep, ActionStep, TaskStep, ActionStep]
    assert steps[1].dict() == action(WEATHER).dict()  # the old layout, exactly
    last = steps[-1]
    assert type(last.error) is error_type and str(last.error).splitlines() == lines
    assert last.tool_calls == action(partial).tool_calls and last.timing.end_time == 2.5
    assert last.to_messages()[-1].content[0]["text"].startswith(f"Call id: {last.tool_calls[0].id}\nError:\n")


def test_a_step_that_ended_is_read_from_its_record_not_its_pre_tool_record() -> None:
    partial = {**WEATHER, "observations": None}
    log = [event(0, "turn/start", {"turn": 7}),
           event(1, "user/message", {"content": "Go.", "smolagents": {"reset": True, "images_dropped": 0}}),
           event(2, "step/start", {"turn": 7, "step": 0}),
           event(3, "assistant/message", {"content": "", "smolagents": {"step": partial}}),
           event(4, "tool/call", call("call-1", "get_weather", {"city": "Paris"})),
           event(5, "tool/result", {"call_id": "call-1", "content": "sunny and 21 °C in Paris"}),
           event(6, "smol/step", {"kind": "action", "step": WEATHER}),
           event(7, "step/end", {"turn": 7, "step": 0}),
           event(8, "smol/step", {"kind": "planning", "step": PLAN})]
    folded = fold(log)
    assert folded.next_turn == 8
    assert [step.dict() for step in folded.steps[1:]] == [action(WEATHER).dict(), planning(PLAN).dict()]
    assert isinstance(folded.steps[2], PlanningStep)
