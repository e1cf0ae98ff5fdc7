"""Google ADK's session and memory services (google-adk 2.13.0) on berth.

The swap::

    from berth.integrations.adk import BerthMemoryService, BerthSessionService
    client = berth.Client(url, api_key=SERVICE_KEY)   # or berth.open(path, tenant=..., user=..., role="service")
    runner = Runner(agent=agent, app_name="shop",
                    session_service=BerthSessionService(client),    # was InMemorySessionService()
                    memory_service=BerthMemoryService(client))      # was InMemoryMemoryService()

The key must have the `service` role: ADK's `app:` state is shared by every user of an
app (tenant-wide memory scope `app/...`, which a `user` key may only read), and the
service creates sessions on behalf of many ADK users.

The package (docs/guides/adk.md has the whole of the mapping):

- `_records`: ids, state and the index item per session;
- `_mapping`: an ADK event as berth's conversation vocabulary (the ADK event verbatim
  in it); `_turns`: one turn per invocation, numbered 0, 1, 2…, one step per model call;
- `_service` (`BerthSessionService`): the session service, with its runs (`_runs`), its
  appends (`_append`; stale writers get `StaleSessionError`), the re-delivery check
  (`_redelivery`), the listing (`_listing`), and the events it keeps for `get_session`
  (`_kept`); reads are pages of the log (`_pages`), presented as ADK events, a repair
  as a function response (`_present`);
- `_recorder` (`before_tool_recorder`): a before-tool callback that makes sure a call's
  `tool/call` is durable before its tool runs;
- `_plugin` (`ModelCallRecorder`, `service.model_calls()`): a plugin recording each model
  call as a `model/call` event, carried by the append of the session's next event;
- `_memory` (`BerthMemoryService`): the memory service.
"""

from __future__ import annotations

# The public names of the module this package was, and the private ones tests use, from
# where they live now (`__all__` is the public API).
from ._kept import EVENTS_CACHE_BYTES_DEFAULT  # noqa: F401
from ._listing import _LISTING_ORDER, _page_cursor, _PageCursor  # noqa: F401
from ._memory import BerthMemoryService  # noqa: F401
from ._pages import ReadOutOfStep  # noqa: F401
from ._mapping import EVENT_TYPE, berth_events_for  # noqa: F401
from ._plugin import ModelCallRecorder  # noqa: F401
from ._recorder import before_tool_recorder  # noqa: F401
from ._records import (  # noqa: F401
    ACTIVITY_TTL_MS_FOREVER,
    CREATE_TYPE,
    LABEL,
    RUN_LEASE_TTL_MS_DEFAULT,
    STATE_KEYS_PER_EVENT_MAX,
    IdTooLong,
    StateDeltaTooLarge,
    app_state_namespace,
    decode_id,
    decode_key,
    encode_id,
    encode_key,
    index_namespace,
    memory_namespace,
    session_berth_id,
    user_state_namespace,
)
from ._service import BerthSessionService  # noqa: F401

__all__ = [
    "ACTIVITY_TTL_MS_FOREVER", "BerthMemoryService", "BerthSessionService", "IdTooLong", "LABEL",
    "ModelCallRecorder",
    "STATE_KEYS_PER_EVENT_MAX", "StateDeltaTooLarge", "app_state_namespace", "before_tool_recorder",
    "berth_events_for", "decode_id",
    "decode_key", "encode_id", "encode_key", "index_namespace", "memory_namespace", "session_berth_id",
    "user_state_namespace",
]
