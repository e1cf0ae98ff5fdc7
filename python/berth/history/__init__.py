"""Any berth conversation as each framework's own history (docs/guides/cross-framework.md).

Every drop-in writes berth's conversation vocabulary beside its framework's own record
(`user/message`, `assistant/message {tool_calls?}`, `tool/call`, `tool/result`, …), so a
session written by one framework can be read by another. `conversation(client,
session_id)` is the neutral reading — `Message`s (user, system, assistant, with their
`ToolCall`s) and `ToolResult`s in log order — and one module per framework presents it
in that framework's types, importing the framework only when called:

| function | gives |
|---|---|
| `berth.history.openai.openai_items` | OpenAI Agents SDK input items (plain dicts) for `Runner.run` |
| `berth.history.langchain.langchain_messages` | `langchain_core.messages` for a LangGraph `MessagesState` |
| `berth.history.adk.adk_events` | `google.adk.events.Event`s for an ADK session |
| `berth.history.smolagents.smolagents_steps` | smolagents memory steps for `agent.memory.steps` |

Read-only: nothing is written. Markers (`turn/*`, `step/*`) and every framework's own
records (`openai/item`, `lg/*`, `adk/event`, `smol/step`, `model/call`) are skipped:
reasoning items, framework state and anything else outside the vocabulary do not cross.
"""

from __future__ import annotations

from typing import Any

from .._errors import BerthError
from ._content import Text, content_text
from ._read import Item, Message, Reader, ToolCall, ToolResult, arguments_value, read_events, result_output


class FrameworkMissing(BerthError, ImportError):
    """A presenter's framework is not installed in this interpreter (also an
    `ImportError`); the message names the package and the extra that installs it."""

    code = "framework_missing"

    def __init__(self, message: str) -> None:
        BerthError.__init__(self, message, status=0)


def _framework(module: str, package: str, extra: str) -> Any:
    """The framework's `module`, imported; `FrameworkMissing` when it does not import.
    (Imported by name, so the type checker of berth's own suite needs no framework.)"""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise FrameworkMissing(
            f"berth.history needs {package} for this: pip install '{package}' "
            f"(or berth-store's extra: pip install './python[{extra}]'); {error}") from error


def conversation(client: Any, session_id: str) -> list[Item]:
    """The conversation of session `session_id`, read through `client` (a `berth.Client`,
    HTTP or embedded) page by page: `Message`s and `ToolResult`s in log order."""
    reader = Reader()
    for event in client.iter_events(session_id):
        reader.feed(event.type, event.data, event.seq, event.time)
    return reader.items


async def aconversation(client: Any, session_id: str) -> list[Item]:
    """`conversation` through a `berth.AsyncClient`."""
    reader = Reader()
    async for event in client.iter_events(session_id):
        reader.feed(event.type, event.data, event.seq, event.time)
    return reader.items


__all__ = [
    "FrameworkMissing", "Item", "Message", "Reader", "Text", "ToolCall", "ToolResult", "aconversation",
    "arguments_value", "content_text", "conversation", "read_events", "result_output",
]
