"""Runs an adapter's operation written once as a generator of `_calls.Call`s (it yields
each call and receives its answer, or has the call's `BerthError` thrown in), on either
client: blocking (`drive_sync`) or awaited (`drive_async`). Shared by the LangGraph
saver and store. `execute_on_loop`: one call of a sync client from a coroutine, for the
adapters whose async methods hold a sync client (OpenAI Agents SDK, ADK)."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Generator

import berth
from berth._errors import BerthError

Io = Generator[Any, Any, Any]


def drive_sync(client: berth.Client, io: Io) -> Any:
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            call = io.send(answer) if error is None else io.throw(error)
        except StopIteration as stop:
            return stop.value
        try:
            answer, error = client._execute(call), None
        except BerthError as failure:
            answer, error = None, failure


async def drive_async(client: berth.AsyncClient, io: Io) -> Any:
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            call = io.send(answer) if error is None else io.throw(error)
        except StopIteration as stop:
            return stop.value
        try:
            answer, error = await client._execute(call), None
        except BerthError as failure:
            answer, error = None, failure


async def execute_on_loop(client: berth.Client, call: Any,
                          on_thread: Callable[[Callable[..., Any], Any], Awaitable[Any]]) -> Any:
    """`client`'s answer to `call`, awaited on the running loop: submitted to the store
    without a thread where the transport can (`Client._aexecute`: the embedded store),
    else the blocking call run by `on_thread(function, call)` (a worker thread)."""
    if getattr(client._transport, "asend", None) is not None:
        return await client._aexecute(call)
    return await on_thread(client._execute, call)
