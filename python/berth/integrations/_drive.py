"""Runs an adapter's operation written once as a generator of `_calls.Call`s (it yields
each call and receives its answer, or has the call's `BerthError` thrown in), on either
client: blocking (`drive_sync`) or awaited (`drive_async`). Shared by the LangGraph
saver and store."""

from __future__ import annotations

from typing import Any, Generator

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
