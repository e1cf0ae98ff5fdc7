"""A scripted smolagents model (no network) and the agent the tests use."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from smolagents import CodeAgent
from smolagents.models import ChatMessage, MessageRole, Model

TASK = "Compute twice twenty-one, step by step."
SCRIPT = [
    "Thought: set x.\n<code>\nx = 21\nprint('x is', x)\n</code>",
    "Thought: double it.\n<code>\nprint('y is', 21 * 2)\n</code>",
    "Thought: done.\n<code>\nfinal_answer('42')\n</code>",
]


class ScriptedModel(Model):
    """Answers call n (1-based) with script[n-1]; `on_call[n]` runs first (e.g. dies).
    Keeps every prompt it was given, as text."""

    def __init__(self, script: list[str], on_call: dict[int, Callable[[], None]] | None = None) -> None:
        super().__init__(model_id="scripted")
        self.script = script
        self.on_call = on_call or {}
        self.prompts: list[str] = []

    def generate(self, messages: list[Any], stop_sequences: Any = None, response_format: Any = None,
                 tools_to_call_from: Any = None, **kwargs: Any) -> ChatMessage:
        call = len(self.prompts) + 1
        self.prompts.append("\n".join(str(getattr(message, "content", message)) for message in messages))
        if call in self.on_call:
            self.on_call[call]()
        return ChatMessage(role=MessageRole.ASSISTANT, content=self.script[min(call, len(self.script)) - 1])


def make_agent(model: Model) -> CodeAgent:
    return CodeAgent(tools=[], model=model, max_steps=6, verbosity_level=0)
