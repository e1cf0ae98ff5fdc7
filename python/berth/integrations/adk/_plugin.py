"""`model/call` events from ADK's model callbacks: `ModelCallRecorder`, the plugin an app
is given (`service.model_calls()`), and `_PendingCalls`, the calls it saw that wait for
the service's next append to their session.

    app = App(name="shop", root_agent=agent, plugins=[service.model_calls()])
    runner = Runner(app=app, session_service=service)

The plugin times each model call from `before_model_callback` to the first complete
(not `partial`) response's `after_model_callback`, or to `on_model_error_callback`, and
reads the response's `usage_metadata` (`prompt_token_count`, `candidates_token_count`,
`cached_content_token_count`), `model_version`, `finish_reason` and `error_code`. The
call's event waits with the service until `append_event` appends the session's next
event — with ADK's Runner, the event the response became (`_AppendPlan` carries it):
no durable write of its own. A call whose session gets no further event in this
process (it ends first) is not recorded.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, NamedTuple, Optional

from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin

from .._model_calls import CallTimer, model_call_event
from ._records import session_berth_id

#: Calls kept per session until an append carries them (the oldest are dropped beyond).
CALLS_PER_SESSION_MAX = 256
#: Sessions with calls waiting (the least recently added to are dropped beyond): calls of
#: sessions another service stores are never carried.
SESSIONS_MAX = 1024
#: Calls started and not ended that are remembered (a call whose end never came).
STARTED_MAX = 4096
#: The provider of ADK's model classes (by class name, through subclasses).
_PROVIDERS = {"Gemini": "google", "AnthropicLlm": "anthropic"}


class Ended(NamedTuple):
    """A call that ended: its `model/call` event and the invocation it ran in."""

    event: dict[str, Any]
    invocation_id: str


class _PendingCalls:
    """The calls that ended and wait for an append to their session, oldest first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_session: OrderedDict[str, list[Ended]] = OrderedDict()

    def add(self, berth_id: str, call: Ended) -> None:
        with self._lock:
            waiting = self._by_session.setdefault(berth_id, [])
            waiting.append(call)
            del waiting[:-CALLS_PER_SESSION_MAX]
            self._by_session.move_to_end(berth_id)
            while len(self._by_session) > SESSIONS_MAX:
                self._by_session.popitem(last=False)

    def waiting(self, berth_id: str) -> list[Ended]:
        with self._lock:
            return list(self._by_session.get(berth_id, ()))

    def carried(self, berth_id: str, calls: list[Ended]) -> None:
        """`calls` (of `waiting`) are in the log now: no later append carries them."""
        if not calls:
            return
        stored = {id(call) for call in calls}
        with self._lock:
            waiting = self._by_session.get(berth_id)
            if waiting is None:
                return
            waiting[:] = [call for call in waiting if id(call) not in stored]
            if not waiting:
                del self._by_session[berth_id]


class _Started(NamedTuple):
    timer: CallTimer
    model: Any
    provider: str | None


class ModelCallRecorder(BasePlugin):
    """An ADK plugin recording each model call of the agents a `Runner` runs on a
    `BerthSessionService` as a `model/call` event in the session (model, provider, token
    counts, latency, finish reason, error — never the prompt or the response, which
    are the session's events). Get it from the service (`service.model_calls()`), which
    carries its events in the appends it makes anyway; put it first among the app's
    plugins (a plugin before it that answers a callback hides the call from it). Its
    callbacks always return None: it changes nothing."""

    def __init__(self, pending: _PendingCalls) -> None:
        super().__init__(name="berth_model_calls")
        self._pending = pending
        self._lock = threading.Lock()
        self._started: OrderedDict[tuple[str, str, str], _Started] = OrderedDict()

    async def before_model_callback(self, *, callback_context: CallbackContext,
                                    llm_request: LlmRequest) -> Optional[LlmResponse]:
        started = _Started(CallTimer(), llm_request.model, _provider(callback_context))
        with self._lock:
            self._started[_call_key(callback_context)] = started
            while len(self._started) > STARTED_MAX:
                self._started.popitem(last=False)
        return None

    async def after_model_callback(self, *, callback_context: CallbackContext,
                                   llm_response: LlmResponse) -> Optional[LlmResponse]:
        if llm_response.partial:
            return None  # a streamed fragment: the call ends with its complete response
        started = self._take(callback_context)
        if started is None:
            return None
        usage = llm_response.usage_metadata
        error = None
        if llm_response.error_code:
            error = {"code": llm_response.error_code, "name": "ModelError", "message": llm_response.error_message}
        self._add(callback_context, model_call_event(
            model=llm_response.model_version or started.model, provider=started.provider,
            input_tokens=getattr(usage, "prompt_token_count", None),
            output_tokens=getattr(usage, "candidates_token_count", None),
            cached_tokens=getattr(usage, "cached_content_token_count", None),
            latency_ms=started.timer.elapsed_ms(), finish_reason=llm_response.finish_reason, error=error,
            time_ms=int(time.time() * 1000)))
        return None

    async def on_model_error_callback(self, *, callback_context: CallbackContext, llm_request: LlmRequest,
                                      error: Exception) -> Optional[LlmResponse]:
        started = self._take(callback_context)
        if started is not None:
            self._add(callback_context, model_call_event(
                model=started.model, provider=started.provider, latency_ms=started.timer.elapsed_ms(),
                error=error, time_ms=int(time.time() * 1000)))
        return None

    def _take(self, callback_context: CallbackContext) -> _Started | None:
        with self._lock:
            return self._started.pop(_call_key(callback_context), None)

    def _add(self, callback_context: CallbackContext, event: dict[str, Any]) -> None:
        session = callback_context.session
        berth_id = session_berth_id(session.app_name, session.user_id, session.id)
        self._pending.add(berth_id, Ended(event, callback_context.invocation_id))


def _call_key(callback_context: CallbackContext) -> tuple[str, str, str]:
    """A model call in flight: one at a time per agent of an invocation of a session."""
    session = callback_context.session
    return (session.id, callback_context.invocation_id, callback_context.agent_name)


def _provider(callback_context: CallbackContext) -> str | None:
    """The provider of the agent's model, when its ADK class says (Gemini, Claude; a
    LiteLLM `provider/model` name), else None."""
    agent = getattr(getattr(callback_context, "_invocation_context", None), "agent", None)
    model = getattr(agent, "model", None)
    if isinstance(model, str):  # resolved by ADK's registry: Gemini's names are theirs
        return "google" if model.startswith("gemini") else None
    for kind in type(model).__mro__:
        if kind.__name__ in _PROVIDERS:
            return _PROVIDERS[kind.__name__]
        if kind.__name__ == "LiteLlm":
            name = getattr(model, "model", "")
            return name.split("/", 1)[0] if isinstance(name, str) and "/" in name else None
    return None
