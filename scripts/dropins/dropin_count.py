"""Counting a client's calls by kind, for the drop-in suites' request-pattern tests
(what a chat turn or a per-request object costs in round trips and durable writes)."""

from __future__ import annotations

import collections
from typing import Any

import berth


#: The kinds of call that make a durable write (the rest read).
WRITES = frozenset({"create", "runs", "resume", "detach", "heartbeat", "append", "memory_put"})


def count_calls(client: berth.Client) -> collections.Counter[str]:
    """Counts `client`'s calls from now on by kind, blocking and awaited alike: `create`,
    `get_session`, `runs` (attach), `resume`, `detach`, `append`, `read`, `read_at` (a
    read of given seqs), `memory_get`, `memory_put`, `search` (memory search), …"""
    counts: collections.Counter[str] = collections.Counter()
    original, original_async = client._execute, client._aexecute

    def kind(call: Any) -> str:
        path = call.path.partition("?")[0]
        if path == "/v1/memory/items":
            return {"GET": "memory_get", "PUT": "memory_put"}.get(call.method, "memory_delete")
        if call.method == "GET":
            if path.endswith("/events"):
                return "read_at" if "seqs=" in call.path else "read"
            return "get_session"
        if path == "/v1/sessions":
            return "create"
        return "append" if path.endswith("/events") else path.rsplit("/", 1)[-1]

    def counting(call: Any) -> Any:
        counts[kind(call)] += 1
        return original(call)

    async def counting_async(call: Any) -> Any:
        counts[kind(call)] += 1
        return await original_async(call)

    client._execute = counting  # type: ignore[method-assign]
    client._aexecute = counting_async  # type: ignore[method-assign]
    return counts


def durable_writes(counts: collections.Counter[str]) -> int:
    """How many of the counted calls made a durable write."""
    return sum(number for kind, number in counts.items() if kind in WRITES)
