"""berth's repair of a tool call a dead process left in flight, as the SDK sees it.

If the process dies while a tool runs (its start recorded by `BerthRunHooks`), the next
object to use the session (once the dead object's run lease has lapsed) gets berth's
repair: a `tool/result` saying the outcome is unknown, which `get_items` presents as
the call plus a `function_call_output`, so the model sees that the tool may have run.
(A call whose own item was stored before its start — the model's request, approved
later — is presented once, as that item: `_reads`.)
"""

from __future__ import annotations

import json
from typing import Any

from ._records import _nonempty


_REPAIR_CODES = frozenset(["TOOL_OUTCOME_UNKNOWN", "TOOL_NOT_STARTED"])


def _presented_item(event_type: str, data: Any, repaired_calls: set[str]) -> Any | None:
    """The SDK item an event that stores none (`_stores_item`) presents, or None
    (markers, turn bookkeeping). Repair closers become `function_call_output`s; an
    in-flight call record becomes its `function_call` only when a closer answers it
    (otherwise the turn was saved whole)."""
    if not isinstance(data, dict):
        return None
    if event_type == "tool/result":
        error = data.get("error")
        if isinstance(error, dict) and error.get("code") in _REPAIR_CODES and _nonempty(data.get("call_id")):
            repaired_calls.add(data["call_id"])
            return {"type": "function_call_output", "call_id": data["call_id"], "output": data.get("content", "")}
        return None
    if event_type == "tool/call" and data.get("in_flight") and data.get("call_id") in repaired_calls:
        arguments = data.get("arguments")
        return {
            "type": "function_call",
            "call_id": data["call_id"],
            "name": data.get("name", ""),
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False),
        }
    return None
