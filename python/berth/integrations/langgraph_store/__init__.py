"""LangGraph's long-term memory store on berth's scoped memory: `BerthStore` (sync) and
`AsyncBerthStore` (asyncio), implementing `langgraph.store.base.BaseStore`.

The one-line swap: `graph.compile(store=BerthStore(berth.Client(url)))` instead of
`InMemoryStore()`. docs/guides/langgraph.md has the mapping and every divergence.

The package: `_records` maps LangGraph's namespaces, items and filters to berth's
memory; `_core` is the store's logic, written once as generators of berth calls;
`_store` drives it with a sync or an async client (`BerthStore`, `AsyncBerthStore`).
"""

from __future__ import annotations

# The public names of the module this package was, and the private ones tests use, from
# where they live now (`__all__` is the public API).
from ._core import DELETE_MAX, PAGE_MAX  # noqa: F401
from ._records import (  # noqa: F401
    DEFAULT_ROOT,
    FREE_SEGMENTS_MAX,
    NAMESPACE_BYTES_MAX,
    SEGMENT_CHARS_MAX,
    NamespaceTooLong,
    StoreUnsupported,
    label_of,
    segment_of,
)
from ._store import AsyncBerthStore, BerthStore  # noqa: F401

__all__ = [
    "AsyncBerthStore",
    "BerthStore",
    "DEFAULT_ROOT",
    "NamespaceTooLong",
    "StoreUnsupported",
    "label_of",
    "segment_of",
]
