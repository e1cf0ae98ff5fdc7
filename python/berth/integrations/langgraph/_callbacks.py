"""`model/call` events from LangChain's callbacks: `ModelCallRecorder`, the handler a graph
is given (`BerthSaver.model_calls()`), and `_PendingCalls`, the calls it saw that wait
for the saver's next append to their thread.

The saver never sees a model call: the handler does, through LangChain's callbacks
(`on_chat_model_start` / `on_llm_start`, then `on_llm_end` or `on_llm_error`, paired by
the call's run id), finds the call's thread, task and super-step in the run's metadata
(LangGraph puts `thread_id`, `langgraph_checkpoint_ns` and `langgraph_step` there; the
thread also from the config of the node the call runs in), and leaves the call's event
with the saver's core. An append the saver makes anyway carries it
(`_Appends.carried_calls`, chosen by `_vocabulary.carries`): the `put_writes` of the
task the call ran in, else the `put` of its super-step's checkpoint, else the `put` that
ends the turn — no durable write of its own, and in the step the call ran in (LangGraph
runs a graph ahead of its writes, so "the next append" could be a step before). A call
whose thread the saver never writes again (the process ends first) is not recorded.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, NamedTuple
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables.config import var_child_runnable_config

from .._model_calls import CallTimer, model_call_event

#: Calls kept per thread until an append carries them (the oldest are dropped beyond).
CALLS_PER_THREAD_MAX = 256
#: Threads with calls waiting (the least recently added to are dropped beyond): a handler
#: given to a graph whose checkpointer is not this saver never sees them carried.
THREADS_MAX = 1024
#: Calls started and not ended that are remembered (a run whose end never comes).
STARTED_MAX = 4096


class Ended(NamedTuple):
    """A call that ended: its `model/call` event, and where it ran — the id of the task
    of the thread's root graph it ran in (None: not in a task) and that task's super-step
    (None: not known, as for a call in a subgraph)."""

    event: dict[str, Any]
    task: str | None
    step: int | None


class _PendingCalls:
    """The calls that ended and wait for an append to their thread's session, oldest
    first (thread-safe: callbacks run on the model's thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_session: OrderedDict[str, list[Ended]] = OrderedDict()

    def add(self, session_id: str, event: Ended) -> None:
        with self._lock:
            waiting = self._by_session.setdefault(session_id, [])
            waiting.append(event)
            del waiting[:-CALLS_PER_THREAD_MAX]
            self._by_session.move_to_end(session_id)
            while len(self._by_session) > THREADS_MAX:
                self._by_session.popitem(last=False)

    def waiting(self, session_id: str) -> list[Ended]:
        with self._lock:
            return list(self._by_session.get(session_id, ()))

    def carried(self, session_id: str, events: list[Ended]) -> None:
        """`events` (of `waiting`) are in the log now: no later append carries them."""
        if not events:
            return
        stored = {id(event) for event in events}
        with self._lock:
            waiting = self._by_session.get(session_id)
            if waiting is None:
                return
            waiting[:] = [event for event in waiting if id(event) not in stored]
            if not waiting:
                del self._by_session[session_id]


class _Started:
    """What a call's start said: its thread's session, task and step, its model and
    provider as the model declared them, and its timer."""

    __slots__ = ("session_id", "task", "step", "model", "provider", "timer")

    def __init__(self, session_id: str, metadata: dict[str, Any], model: Any) -> None:
        self.session_id, self.model, self.provider = session_id, model, metadata.get("ls_provider")
        self.task, self.step = _task(metadata)
        self.timer = CallTimer()

    def ended(self, event: dict[str, Any]) -> Ended:
        return Ended(event, self.task, self.step)


class ModelCallRecorder(BaseCallbackHandler):
    """A LangChain callback handler that records each LLM call of a graph run on a
    `BerthSaver` / `AsyncBerthSaver` as a `model/call` event in the run's thread:

        graph.invoke(inputs, {"configurable": {"thread_id": "t1"}, "callbacks": [saver.model_calls()]})

    (or once: `graph.with_config(callbacks=[saver.model_calls()])`). It records the model,
    provider, token counts (input, output, cached input), latency, finish reason, the
    provider's response id, and the error of a call that failed — never the prompt or
    the completion, which are the thread's messages. Get it from the saver
    (`model_calls()`), which carries its events in its own appends."""

    run_inline = True  # cheap and thread-safe: no executor hop in async graphs
    raise_error = False  # recording a call never fails the run
    # Only model calls: LangChain then skips this handler for every node's chain events,
    # a graph's most frequent callbacks.
    ignore_chain = True
    ignore_agent = True
    ignore_retriever = True
    ignore_retry = True
    ignore_custom_event = True

    def __init__(self, pending: _PendingCalls, session_id: Any) -> None:
        self._pending = pending
        self._session_id = session_id  # thread id -> session id (the saver's prefix)
        self._lock = threading.Lock()
        self._started: OrderedDict[UUID, _Started] = OrderedDict()

    # the call's start
    def on_chat_model_start(self, serialized: dict[str, Any], messages: Any, *, run_id: UUID,
                            metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._start(run_id, metadata, kwargs.get("invocation_params"))

    def on_llm_start(self, serialized: dict[str, Any], prompts: Any, *, run_id: UUID,
                     metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._start(run_id, metadata, kwargs.get("invocation_params"))

    def _start(self, run_id: UUID, metadata: dict[str, Any] | None, params: Any) -> None:
        thread_id = _thread_id(metadata)
        if thread_id is None:
            return  # not in a LangGraph thread: nothing to carry it
        metadata = metadata or {}
        params = params if isinstance(params, dict) else {}
        model = metadata.get("ls_model_name") or params.get("model") or params.get("model_name")
        started = _Started(self._session_id(thread_id), metadata, model)
        with self._lock:
            self._started[run_id] = started
            while len(self._started) > STARTED_MAX:
                self._started.popitem(last=False)

    # its end
    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        started = self._take(run_id)
        if started is None:
            return
        said = _said(response)
        model = said.pop("model", None) or started.model
        provider = said.pop("provider", None) or started.provider
        self._pending.add(started.session_id, started.ended(model_call_event(
            model=model, provider=provider, latency_ms=started.timer.elapsed_ms(), time_ms=_now_ms(), **said)))

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        started = self._take(run_id)
        if started is None:
            return
        self._pending.add(started.session_id, started.ended(model_call_event(
            model=started.model, provider=started.provider, latency_ms=started.timer.elapsed_ms(),
            error=error, time_ms=_now_ms())))

    def _take(self, run_id: UUID) -> _Started | None:
        with self._lock:
            return self._started.pop(run_id, None)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _thread_id(metadata: dict[str, Any] | None) -> str | None:
    """The LangGraph thread a call runs in: LangGraph's run metadata names it; else the
    config of the node the call runs in (LangChain's context)."""
    found = (metadata or {}).get("thread_id")
    if found is None:
        config = var_child_runnable_config.get() or {}
        found = (config.get("configurable") or {}).get("thread_id")
    return str(found) if found is not None else None


def _task(metadata: dict[str, Any]) -> tuple[str | None, int | None]:
    """The root graph's task a call runs in and its super-step, from LangGraph's run
    metadata: `langgraph_checkpoint_ns` is `node:task_id`, nested `…|node:task_id` in a
    subgraph (whose `langgraph_step` counts the subgraph's steps: not the root's)."""
    namespace = metadata.get("langgraph_checkpoint_ns")
    if not isinstance(namespace, str) or ":" not in namespace:
        return None, None
    root = namespace.split("|", 1)[0]
    step = metadata.get("langgraph_step")
    return root.rsplit(":", 1)[1], step if "|" not in namespace and type(step) is int else None


def _said(response: Any) -> dict[str, Any]:
    """What an `LLMResult` says of its call: the first generation's message's
    `usage_metadata` and `response_metadata` (LangChain's standard fields), else the
    result's `llm_output` (older integrations: `token_usage`, `model_name`)."""
    generations = getattr(response, "generations", None) or []
    generation = generations[0][0] if generations and generations[0] else None
    message = getattr(generation, "message", None)
    usage = getattr(message, "usage_metadata", None) or {}
    metadata = getattr(message, "response_metadata", None) or {}
    info = getattr(generation, "generation_info", None) or {}
    output = getattr(response, "llm_output", None) or {}
    said: dict[str, Any] = {
        "model": metadata.get("model_name") or metadata.get("model") or output.get("model_name"),
        "provider": metadata.get("model_provider"),
        "finish_reason": (metadata.get("finish_reason") or metadata.get("stop_reason")
                          or info.get("finish_reason")),
        "response_id": metadata.get("id"),
    }
    if usage:
        details = usage.get("input_token_details") or {}
        said.update(input_tokens=usage.get("input_tokens"), output_tokens=usage.get("output_tokens"),
                    cached_tokens=details.get("cache_read"))
    else:
        counts = output.get("token_usage") or output.get("usage") or {}
        if isinstance(counts, dict):
            said.update(input_tokens=counts.get("prompt_tokens", counts.get("input_tokens")),
                        output_tokens=counts.get("completion_tokens", counts.get("output_tokens")))
    return said
