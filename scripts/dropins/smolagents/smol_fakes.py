"""Scripted smolagents models (no network: a CodeAgent's and a ToolCallingAgent's), the tools
and the agents the tests use."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from smolagents import CodeAgent, ToolCallingAgent, tool
from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model
from smolagents.monitoring import TokenUsage

TASK = "Compute twice twenty-one, step by step."
SCRIPT = [
    "Thought: set x.\n<code>\nx = 21\nprint('x is', x)\n</code>",
    "Thought: double it.\n<code>\nprint('y is', 21 * 2)\n</code>",
    "Thought: done.\n<code>\nfinal_answer('42')\n</code>",
]


def usage_of(call: int, usage: bool) -> TokenUsage | None:
    """The tokens a scripted model reports for call n, when it reports them: n hundred in,
    n ten out."""
    return TokenUsage(input_tokens=100 * call, output_tokens=10 * call) if usage else None


class ScriptedModel(Model):
    """Answers call n (1-based) with script[n-1]; `on_call[n]` runs first (e.g. dies).
    Keeps every prompt it was given, as text. `usage`: reports tokens (`usage_of`)."""

    def __init__(self, script: list[str], on_call: dict[int, Callable[[], None]] | None = None,
                 usage: bool = False) -> None:
        super().__init__(model_id="scripted")
        self.script = script
        self.on_call = on_call or {}
        self.usage = usage
        self.prompts: list[str] = []

    def generate(self, messages: list[Any], stop_sequences: Any = None, response_format: Any = None,
                 tools_to_call_from: Any = None, **kwargs: Any) -> ChatMessage:
        call = len(self.prompts) + 1
        self.prompts.append("\n".join(str(getattr(message, "content", message)) for message in messages))
        if call in self.on_call:
            self.on_call[call]()
        return ChatMessage(role=MessageRole.ASSISTANT, content=self.script[min(call, len(self.script)) - 1],
                           token_usage=usage_of(call, self.usage))


def make_agent(model: Model, tools: list[Any] | None = None) -> CodeAgent:
    return CodeAgent(tools=tools or [], model=model, max_steps=6, verbosity_level=0)


class CallingModel(Model):
    """A tool-calling model: answers call n (1-based) with the tool calls script[n-1], a
    list of `(name, arguments)` (ids `call-<n>-<i>`); `on_call[n]` runs first. Keeps every
    prompt it was given, as text. `usage`: reports tokens (`usage_of`)."""

    def __init__(self, script: list[list[tuple[str, dict[str, Any]]]],
                 on_call: dict[int, Callable[[], None]] | None = None, usage: bool = False) -> None:
        super().__init__(model_id="scripted-calls")
        self.script = script
        self.on_call = on_call or {}
        self.usage = usage
        self.prompts: list[str] = []

    def generate(self, messages: list[Any], stop_sequences: Any = None, response_format: Any = None,
                 tools_to_call_from: Any = None, **kwargs: Any) -> ChatMessage:
        call = len(self.prompts) + 1
        self.prompts.append("\n".join(str(getattr(message, "content", message)) for message in messages))
        if call in self.on_call:
            self.on_call[call]()
        calls = [ChatMessageToolCall(id=f"call-{call}-{index}", type="function",
                                     function=ChatMessageToolCallFunction(name=name, arguments=arguments))
                 for index, (name, arguments) in enumerate(self.script[min(call, len(self.script)) - 1])]
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=calls,
                           token_usage=usage_of(call, self.usage))


#: What the tools did, in this process (the tests' view of side effects).
CHARGES: list[int] = []


@tool
def charge_card(amount: int) -> str:
    """Charges the customer's card (a side effect: not to be repeated blindly).

    Args:
        amount: the amount, in euros.
    """
    if os.environ.get("SMOL_DIE_IN_TOOL") == "charge_card":
        sys.stdout.write("dying in charge_card\n")
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    CHARGES.append(amount)
    return f"charged {amount} EUR"


@tool
def lookup(city: str) -> str:
    """The weather in a city (canned).

    Args:
        city: the city's name.
    """
    return f"sunny in {city}"


def make_calling_agent(model: Model, tools: list[Any]) -> ToolCallingAgent:
    return ToolCallingAgent(tools=tools, model=model, max_steps=6, verbosity_level=0)
