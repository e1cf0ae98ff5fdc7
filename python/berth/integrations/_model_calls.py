"""`model/call`: one event per LLM call a drop-in saw, built in one place.

The shape (docs/reference/storage-format.md, "model/call"): `model` (a non-empty string;
`"unknown"` when the framework does not say), and, each optional, `provider`,
`input_tokens`, `output_tokens`, `cached_tokens` (non-negative integers), `latency_ms`
(a non-negative number), `finish_reason` (a string), `error` (`{code, name, message?}`,
as a `tool/result`'s), `response_id` (the provider's id of the response). Never the
prompt or the completion: the messages are their own events.

Drop-ins write it `ignorable` (a berth older than the type skips it rather than refusing
the session) and carry it in the append they already make for the call's result, so
recording a model call costs no durable write of its own.
"""

from __future__ import annotations

import math
import time
from typing import Any

MODEL_CALL_TYPE = "model/call"

_TOKEN_FIELDS = ("input_tokens", "output_tokens", "cached_tokens")


def _count(value: Any) -> int | None:
    """A token count as the framework gave it, or None when it is not a count."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and math.isfinite(value) and value >= 0 and value.is_integer():
        return int(value)
    return None


def model_call_event(
    *,
    model: Any,
    provider: str | None = None,
    input_tokens: Any = None,
    output_tokens: Any = None,
    cached_tokens: Any = None,
    latency_ms: float | None = None,
    finish_reason: Any = None,
    error: BaseException | dict[str, Any] | None = None,
    response_id: Any = None,
    time_ms: int | None = None,
) -> dict[str, Any]:
    """The `model/call` event (a dict for `append`) for one LLM call. Values a framework
    gives in odd shapes (a token count that is not a count, an empty model name) are left
    out or named `"unknown"`, never refused: recording a call must not fail the run."""
    data: dict[str, Any] = {"model": model if isinstance(model, str) and model else "unknown"}
    if isinstance(provider, str) and provider:
        data["provider"] = provider
    for field, value in zip(_TOKEN_FIELDS, (input_tokens, output_tokens, cached_tokens)):
        count = _count(value)
        if count is not None:
            data[field] = count
    if latency_ms is not None and math.isfinite(latency_ms) and latency_ms >= 0:
        data["latency_ms"] = round(float(latency_ms), 3)
    if finish_reason is not None:
        data["finish_reason"] = str(getattr(finish_reason, "value", finish_reason))
    if error is not None:
        data["error"] = _error(error)
    if isinstance(response_id, str) and response_id:
        data["response_id"] = response_id
    event: dict[str, Any] = {"type": MODEL_CALL_TYPE, "data": data, "ignorable": True}
    if time_ms is not None:
        event["time"] = int(time_ms)
    return event


def _error(error: BaseException | dict[str, Any]) -> dict[str, Any]:
    if isinstance(error, dict):
        code = error.get("code")
        name = error.get("name")
        shaped: dict[str, Any] = {
            "code": str(code) if code is not None else "model_error",
            "name": str(name) if name is not None else "ModelError",
        }
        if error.get("message") is not None:
            shaped["message"] = str(error["message"])[:2000]
        return shaped
    return {"code": "model_error", "name": type(error).__name__, "message": str(error)[:2000]}


class CallTimer:
    """Times one model call: `start()` where the framework says it begins, `elapsed_ms()`
    where it ends (monotonic clock), `started_ms` the wall-clock start for the event."""

    __slots__ = ("_t0", "started_ms")

    def __init__(self) -> None:
        self._t0 = time.monotonic()
        self.started_ms = int(time.time() * 1000)

    def elapsed_ms(self) -> float:
        return (time.monotonic() - self._t0) * 1000.0
