"""LangGraph checkpointers on berth: `BerthSaver` (sync) and `AsyncBerthSaver` (async).

The one-line swap: `graph.compile(checkpointer=BerthSaver(berth.Client(url)))` instead of
`InMemorySaver()` / `SqliteSaver(...)`.

One LangGraph thread = one berth session, labelled `langgraph`, titled with the thread
id; every saver call is one atomic append. The package:

- `_records`: the log's layout (its event types, limits and ids);
- `_fold`: a thread's log folded into the index a saver keeps (`_Thread`);
- `_snapshots`: a list the saver stored before, recognized by identity;
- `_core`: the saver's logic, written once as generators of berth calls (`_Core`),
  with its reads (`_reads`), the batches a put makes (`_builds`) and their appends
  (`_appends`, group commit included), at the times `_times` gives them (a checkpoint's
  `ts`; the process's clock for writes and tool calls);
- `_saver` (`BerthSaver`) and `_async_saver` (`AsyncBerthSaver`): the checkpointers,
  which drive the core with a sync or an async client, and `_shared`, what both do;
- berth's conversation vocabulary beside the record, in the same appends:
  `_messages` (a LangChain message as events), `_vocabulary` (what each saver call adds:
  messages, turns, steps) and `_talk` (what the log says of them, folded);
- `_tools`: `durable_tool_node`, a `ToolNode` recording each call before it runs;
- `_callbacks`: `ModelCallRecorder` (`saver.model_calls()`), the LangChain callback
  handler that records each LLM call as a `model/call`, carried by the saver's appends.

`BerthStore` / `AsyncBerthStore` (LangGraph's long-term memory) are in
`berth.integrations.langgraph_store`, and importable from here too.
"""

from __future__ import annotations

# The public names of the module this package was, and the private ones tests use, from
# where they live now (`__all__` is the public API).
from ._appends import WRITES_WAIT_S  # noqa: F401
from ._async_saver import AsyncBerthSaver  # noqa: F401
from ._callbacks import ModelCallRecorder  # noqa: F401
from ._records import (  # noqa: F401
    ANCHOR_EVERY,
    BATCH_BYTES_MAX,
    BATCH_EVENTS_MAX,
    EVENT_BYTES_MAX,
    FOREVER_MS,
    LABEL,
    PART_CHARS,
    TAIL_SCAN_EVENTS_MAX,
    VERSIONS_KEPT,
    ModeMismatch,
    thread_session_id,
)
from ._saver import BerthSaver  # noqa: F401
from ._tools import OUTCOME_UNKNOWN_TEXT, DurableToolCalls, durable_tool_node  # noqa: F401

# LangGraph's long-term memory (`BaseStore`) on berth's scoped memory: docs/guides/langgraph.md.
from ..langgraph_store import AsyncBerthStore, BerthStore  # noqa: F401

__all__ = ["AsyncBerthSaver", "AsyncBerthStore", "BerthSaver", "BerthStore", "DurableToolCalls", "ModeMismatch",
           "ModelCallRecorder", "durable_tool_node", "thread_session_id"]
