"""`before_tool_recorder(service)`: an ADK before-tool callback that makes sure a call's
`tool/call` is durable in berth before its tool runs (`_Recording`, mixed into
`BerthSessionService`, does the work).

ADK 2.13's `Runner` appends a model's function-call event before it runs any of its
tools (a node waits in `InvocationContext._enqueue_event` until the Runner appended the
event), and that append carries the calls' `tool/call` records (`_mapping`): with the
Runner, the callback finds the call recorded by the object and returns at once, with no
I/O. Where a tool can run before its call's event was appended by this service object
(another orchestration, an ADK whose Runner appends later), the callback appends the
`tool/call` itself — one durable append, naming the call's invocation and agent — and
the call's event, when this object appends it, leaves that call's `tool/call` out: one
`tool/call` per call id. Either way, a process killed while the tool runs leaves a
started call that berth's repair answers `TOOL_OUTCOME_UNKNOWN`, which `get_session`
presents to the next process's model as the call's function response.

    agent = Agent(..., tools=[charge_card], before_tool_callback=before_tool_recorder(service))

Put it last among an agent's before-tool callbacks (an earlier one that answers the call
means the tool never runs); it always returns None, so it never answers a call itself.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Coroutine

from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.sessions.session import Session

import berth

from ._records import session_berth_id

if TYPE_CHECKING:
    from ._append import _Cached
    from ._kept import _Events
    from ._runs import _Hold
    from ._service import BerthSessionService


def before_tool_recorder(service: BerthSessionService) -> Callable[..., Coroutine[Any, Any, None]]:
    """A `before_tool_callback` for an ADK agent (`Agent(before_tool_callback=...)`) run on
    `service`: before each tool runs, its call's `tool/call` is durable in berth."""

    async def record_tool_start(tool: Any, args: dict[str, Any], tool_context: Any) -> None:
        call_id = tool_context.function_call_id
        if call_id:
            await service._record_tool_start(tool_context.session, call_id, tool.name, args,
                                             tool_context.invocation_id, tool_context.agent_name)
        return None

    return record_tool_start


class _Recording:
    """Recording a tool's start, for `BerthSessionService` (its `_client`, `_lock`,
    `_recording`, `_cache`, `_events`; `_held`, `_hold`, `_cached_copy`, `_refused`)."""

    _client: berth.Client
    _lock: threading.Lock
    _recording: threading.Lock
    _cache: dict[str, _Cached]
    _events: OrderedDict[str, _Events]

    async def _record_tool_start(self, session: Session, call_id: str, name: str, arguments: dict[str, Any],
                                 invocation_id: str, author: str) -> None:
        berth_id = session_berth_id(session.app_name, session.user_id, session.id)
        hold = self._held(berth_id)  # type: ignore[attr-defined]
        if hold is not None and call_id in hold.started:
            return  # the call's event carried it (ADK's Runner appends it before the tool runs)
        await asyncio.to_thread(self._record_started, session, berth_id, call_id, name, arguments, invocation_id,
                                author)

    def _record_started(self, session: Session, berth_id: str, call_id: str, name: str, arguments: dict[str, Any],
                        invocation_id: str, author: str) -> None:
        """Appends the call's `tool/call` (after the session copy's last event, as any
        append of it: a stale copy is refused) and moves the copy's marker past it."""
        with self._recording:  # one at a time: parallel calls' records each follow the last
            hold: _Hold | None
            hold, _ = self._hold(berth_id)  # type: ignore[attr-defined]
            if hold is None:
                raise SessionNotFoundError(f"Session {session.id} not found.")
            if call_id in hold.started:
                return
            expected, cached = self._cached_copy(session, berth_id)  # type: ignore[attr-defined]
            time_ms = max(cached[3] if cached is not None else 0, int(time.time() * 1000))
            record = {"type": "tool/call", "time": time_ms,
                      "data": {"call_id": call_id, "name": name, "arguments": dict(arguments or {}),
                               "invocation_id": invocation_id, "author": author}}
            with self._refused(session, berth_id):  # type: ignore[attr-defined]
                with hold.writing() as run_id:
                    outcome = self._client.append(berth_id, [record], expected_seq=expected, run=run_id)
            hold.appended(outcome)
            hold.started.add(call_id)
            if cached is not None:
                self._cache[berth_id] = (outcome.next_seq, *cached[1:])
            with self._lock:
                events = self._events.get(berth_id)
                if events is not None and expected is not None and events.next_seq == expected:
                    events.next_seq = outcome.next_seq  # nothing to present: the kept events still hold
            session._storage_update_marker = str(outcome.next_seq)
