"""A berth conversation as OpenAI Agents SDK input items (plain dicts), to pass as
`Runner.run(agent, items + [{"role": "user", "content": …}])` or to `add_items` of any
SDK session:

| reading | item |
|---|---|
| user / system message | `{"role": "user" \\| "system", "content": text}` |
| assistant message | `{"role": "assistant", "content": text}` (when it has text), then per call `{"type": "function_call", "call_id", "name", "arguments": <JSON text>}` |
| tool result | `{"type": "function_call_output", "call_id", "output": text}` |

Arguments are JSON text, as the SDK keeps them (a call whose arguments are a plain string,
a smolagents `CodeAgent`'s code, becomes that string as JSON). Images, files and other
non-text parts are their placeholders in the text (`[image]`); reasoning items and other
SDK-only items are not in berth's vocabulary and do not cross.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from . import _framework, conversation
from ._read import Item, ToolResult


def items_of(conversation_items: Iterable[Item]) -> list[dict[str, Any]]:
    """The SDK input items of a neutral reading (pure; needs no framework)."""
    items: list[dict[str, Any]] = []
    for item in conversation_items:
        if isinstance(item, ToolResult):
            items.append({"type": "function_call_output", "call_id": item.call_id, "output": item.output})
            continue
        if item.text or not item.tool_calls:
            items.append({"role": item.role, "content": item.text})
        for call in item.tool_calls:
            items.append({"type": "function_call", "call_id": call.call_id, "name": call.name,
                          "arguments": json.dumps(call.arguments, ensure_ascii=False)})
    return items


def openai_items(client: Any, session_id: str) -> list[dict[str, Any]]:
    """Session `session_id`'s conversation as OpenAI Agents SDK input items. Raises
    `berth.history.FrameworkMissing` when `openai-agents` is not installed."""
    _framework("agents.items", "openai-agents", "openai-agents")
    return items_of(conversation(client, session_id))


__all__ = ["items_of", "openai_items"]
