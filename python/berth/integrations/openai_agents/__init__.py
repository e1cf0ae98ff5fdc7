"""`BerthSession`: the OpenAI Agents SDK's `Session` protocol (openai-agents 0.24.0) on berth.

The one-line swap::

    from berth.integrations.openai_agents import BerthSession
    session = BerthSession("user-123", client)   # was SQLiteSession("user-123", "chat.db")
    await Runner.run(agent, "hi", session=session)

`client` is a `berth.Client`: HTTP (`berth.Client(url, api_key=...)`) or the embedded
store (`berth.open(path, tenant=..., user=..., role=...)`); every call runs on a worker
thread, so one `BerthSession` may be used from any event loop or thread (the SDK's
`run_sync` and threaded callers each bring their own loop).

The package:

- `_records`: how the SDK's history lives in berth (one session, one event per item,
  pops and clears as markers), and the session id's encoding;
- `_session` (`BerthSession`): the protocol, each writing object through a berth run
  of its own (`_binding`: the run, its heartbeat and release; the idle runs a process
  hands from one object to the next are `berth.integrations._runpool`'s), with its reads and pops
  in `_reads` (over the view of the newest items it keeps, `_view`), its calls on
  worker threads (`_workers`), and its errors (`_errors`);
- `_turns`: the turn and step markers around the items (one turn per `Runner.run`, one
  step per model response), riding in the appends the session makes;
- `_hooks` (`BerthRunHooks`): each run's exact end, durable in-flight tool calls,
  whose repair `_repair` presents to the SDK, and each model call (`model/call`, in the
  next append the session makes).

Not supported: `OpenAIResponsesCompactionAwareSession` / `run_compaction`, and the
SDK's private compaction hook (`_get_compaction_snapshot` / `replace_suffix`).
"""

from __future__ import annotations

# The public names of the module this package was, and the private ones tests use, from
# where they live now (`__all__` is the public API).
from ._binding import RUN_LEASE_TTL_MS_DEFAULT  # noqa: F401
from ._errors import SessionClosed, SessionModeMismatch  # noqa: F401
from ._hooks import BerthRunHooks  # noqa: F401
from ._records import (  # noqa: F401
    ACTIVITY_TTL_MS_FOREVER,
    CLEAR_TYPE,
    ITEM_MARK,
    ITEM_TYPE,
    LABEL,
    POP_TYPE,
    decode_session_id,
    encode_session_id,
    event_for_item,
)
from ._session import BerthSession  # noqa: F401
from ._view import POP_VIEW_ITEMS, PROBE_EVENTS  # noqa: F401
from ._workers import WORKER_THREADS_MAX  # noqa: F401

__all__ = [
    "ACTIVITY_TTL_MS_FOREVER", "BerthRunHooks", "BerthSession", "CLEAR_TYPE", "ITEM_TYPE", "LABEL", "POP_TYPE",
    "RUN_LEASE_TTL_MS_DEFAULT", "SessionClosed", "SessionModeMismatch", "decode_session_id", "encode_session_id", "event_for_item",
]
