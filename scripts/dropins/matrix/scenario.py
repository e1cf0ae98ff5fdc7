"""The one conversation every framework of the matrix writes through its drop-in (its
capture script, fixtures/capture_<framework>.py) and every presenter reads back
(test_matrix_read.py): a question, two tool calls with their results, an answer.

Framework-free: the capture scripts and the reader test import it in any venv.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
FRAMEWORKS = ("openai", "langgraph", "adk", "smolagents", "dsh")
TENANT = "acme"

QUESTION = "What's the weather in Paris and in Rome?"
#: The assistant's text beside its first call.
FIRST_STEP_TEXT = "Checking Paris first."
#: (call id, tool, arguments, result) of the two calls, one model step each.
CALLS = [
    ("call-paris", "get_weather", {"city": "Paris"}, "sunny, 21 °C at Paris-Orly"),
    ("call-rome", "get_weather", {"city": "Rome"}, "cloudy, 18 °C at Roma-Fiumicino"),
]
ANSWER = "Paris is sunny, 21 °C; Rome is cloudy, 18 °C."
WEATHER = {arguments["city"]: result for _call_id, _name, arguments, result in CALLS}
#: The user's next question, asked of each framework's agent after the foreign history.
FOLLOW_UP = "And tomorrow?"
FOLLOW_UP_ANSWER = "Tomorrow looks the same."


def weather(city: str) -> str:
    """The scripted tool: the weather in a city (canned)."""
    return WEATHER.get(city, "unknown")


def expectation(framework: str, session_id: str) -> dict[str, Any]:
    """The neutral reading every presenter must agree with: what the script made the
    framework do, not what a reader made of its log."""
    conversation: list[dict[str, Any]] = [{"role": "user", "text": QUESTION, "tool_calls": []}]
    for index, (call_id, name, arguments, result) in enumerate(CALLS):
        conversation.append({"role": "assistant", "text": FIRST_STEP_TEXT if index == 0 else "",
                             "tool_calls": [{"call_id": call_id, "name": name, "arguments": arguments}]})
        conversation.append({"result": {"call_id": call_id, "name": name, "output": result, "is_error": False}})
    conversation.append({"role": "assistant", "text": ANSWER, "tool_calls": []})
    return {"framework": framework, "session_id": session_id, "conversation": conversation}


def write_fixture(framework: str, session_id: str, export: bytes) -> None:
    """Writes `<framework>.jsonl` (the session's export) and `<framework>.expect.json`."""
    FIXTURES.mkdir(parents=True, exist_ok=True)
    (FIXTURES / f"{framework}.jsonl").write_bytes(export)
    text = json.dumps(expectation(framework, session_id), indent=1, ensure_ascii=False) + "\n"
    (FIXTURES / f"{framework}.expect.json").write_text(text)
    events = export.count(b"\n") - 1
    print(f"{framework}: {events} events in {FIXTURES / (framework + '.jsonl')}")
