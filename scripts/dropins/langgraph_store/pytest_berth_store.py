"""pytest plugin: runs langgraph-checkpoint 4.3.2's own `tests/test_store.py` (from the
sdist, never committed here) with `InMemoryStore` swapped for `BerthStore`, on the
transport `BERTH_LG_TRANSPORT` names (`http`: a real `berth serve` this plugin starts;
`embedded`: a temporary data directory).

The swap is a subclass of `BerthStore` bound to that module's `InMemoryStore` name, so
the upstream spies (`mocker.spy(InMemoryStore, "batch")`) watch berth's store. Each test
gets its own root (`app/lgstore-<n>`). The tests that need what BerthStore refuses are
listed in `DIVERGENT` and run as strict expected failures, each with its reason. After
each test the plugin checks that the test made a BerthStore, and (for the tests that
store something) that berth's memory holds items under the test's root or that the
test's berth calls wrote there — so a green run cannot be InMemoryStore's.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

import berth
from berth.integrations.langgraph_store import BerthStore

ROOT = Path(__file__).resolve().parents[3]
TRANSPORT = os.environ.get("BERTH_LG_TRANSPORT", "embedded")

_EMBEDDING = "needs an embedding `index` (semantic search): BerthStore raises StoreUnsupported"
#: Upstream test (by name, parameters stripped) → why BerthStore does not pass it.
DIVERGENT = {
    "test_vector_search_scores_every_item": _EMBEDDING,
    "test_vector_store_initialization": _EMBEDDING,
    "test_vector_insert_with_auto_embedding": _EMBEDDING,
    "test_async_vector_insert_with_auto_embedding": _EMBEDDING,
    "test_vector_update_with_embedding": _EMBEDDING,
    "test_async_vector_update_with_embedding": _EMBEDDING,
    "test_vector_search_with_filters": _EMBEDDING,
    "test_async_vector_search_with_filters": _EMBEDDING,
    "test_async_batched_vector_search_concurrent": _EMBEDDING,
    "test_vector_search_pagination": _EMBEDDING,
    "test_async_vector_search_pagination": _EMBEDDING,
    "test_embed_with_path": _EMBEDDING,
    "test_non_ascii": _EMBEDDING,
}
#: Tests that never reach a store's storage (they check validation before `batch`, or
#: test LangGraph's own batching helpers with a mock store).
NO_STORAGE = {
    "test_dedupe_ops_maps_repeated_reads_and_puts_to_one_op",
    "test_get_text_at_path",
    "test_get_text_at_path_with_non_dict_mapping",
    "test_async_batch_store",
    "test_async_batch_store_handles_cancellation",
    "test_rejects_invalid_namespace_labels",
    "test_async_rejects_invalid_namespace_labels",
    "test_validate_op_namespace_rejects_invalid_labels",
    "test_validate_op_namespace_allows_empty_prefix_and_wildcards",
    "test_list_namespaces_empty_store",
}


def _server_class() -> Any:
    spec = importlib.util.spec_from_file_location("berth_python_suite_fixtures", ROOT / "python" / "tests" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Server


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        reason = DIVERGENT.get(item.originalname if isinstance(item, pytest.Function) else item.name)
        if reason:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True, raises=NotImplementedError))


class _Counting:
    """The client, counting the calls BerthStore makes through it."""

    def __init__(self, client: berth.Client) -> None:
        self.client = client
        self.calls: list[tuple[str, str]] = []

    def _execute(self, call: Any) -> Any:
        self.calls.append((call.method, call.path))
        return self.client._execute(call)


@pytest.fixture(scope="session")
def berth_store_client() -> Iterator[berth.Client]:
    scratch = Path(tempfile.mkdtemp(prefix="berth-lg-store-"))
    server = None
    try:
        if TRANSPORT == "http":
            server = _server_class()(scratch / "served", ["--rate-per-tenant", "0"])
            server.start()
            client = berth.Client(server.url, api_key=server.key("lgstore", "agent", "service"))
        elif TRANSPORT == "embedded":
            client = berth.open(str(scratch / "store"), tenant="lgstore", user="agent", role="service")
        else:
            raise pytest.UsageError(f"BERTH_LG_TRANSPORT is http or embedded, not {TRANSPORT!r}")
        yield client
        client.close()
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(autouse=True)
def berth_instead_of_memory(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, berth_store_client: berth.Client
) -> Iterator[None]:
    import tests.test_store as upstream

    root = f"app/lgstore-{uuid.uuid4().hex[:10]}"
    made: list[BerthStore] = []
    counting = _Counting(berth_store_client)

    class SwappedStore(BerthStore):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(counting, root=root, **kwargs)  # type: ignore[arg-type]
            made.append(self)

    monkeypatch.setattr(upstream, "InMemoryStore", SwappedStore)
    yield
    name = request.node.originalname
    if name in NO_STORAGE or name in DIVERGENT:
        return
    assert made, "the test never made a store: the swap did not take effect"
    writes = [path for method, path in counting.calls if method in ("PUT", "DELETE") and path.startswith("/v1/memory/items")]
    assert writes, f"no berth memory write under {root}: the test did not store through BerthStore"
    left = berth_store_client.memory_search(root, limit=1000).items
    assert all(item.namespace.startswith(root + "/") for item in left)
