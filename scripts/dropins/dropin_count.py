"""Counting a client's calls by kind, for the drop-in suites' request-pattern tests
(what a chat turn or a per-request object costs in round trips)."""

from __future__ import annotations

import collections
from typing import Any

import berth


def count_calls(client: berth.Client) -> collections.Counter[str]:
    """Counts `client`'s calls from now on by kind: `create`, `get_session`, `runs`
    (attach), `resume`, `detach`, `append`, `read`, `read_at` (a read of given seqs), …"""
    counts: collections.Counter[str] = collections.Counter()
    original = client._execute

    def kind(call: Any) -> str:
        path = call.path.partition("?")[0]
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

    client._execute = counting  # type: ignore[method-assign]
    return counts
