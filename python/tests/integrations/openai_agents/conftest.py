"""Fixtures of the OpenAI Agents SDK drop-in's tests (run by scripts/dropins/openai/run,
whose venv has openai-agents; without it these modules are not collected at all)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import Place, _place

if importlib.util.find_spec("agents") is None:
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(params=["http", "embedded"])
def oai_place(request: pytest.FixtureRequest, scratch: Path) -> Iterator[Place]:
    """A tenant on a real `berth serve`, or on the embedded store in a temp directory."""
    yield from _place(request, scratch)


def child_connection(place: Place) -> list[str]:
    """Arguments that let a child process connect as the place's service principal."""
    if place.transport == "http":
        assert place.server is not None
        return ["http", place.server.url, place.server.key(place.tenant, "agent", "service")]
    assert place.store_url is not None
    return ["embedded", place.store_url, place.tenant]


#: Child-process code: `connect(argv)` builds the client `child_connection` describes.
CONNECT = '''
import berth
def connect(argv):
    transport, where, credential = argv[:3]
    if transport == "http":
        return berth.Client(where, api_key=credential)
    return berth.open(where, tenant=credential, user="agent", role="service")
'''


def plain(value: Any) -> Any:
    """SDK items (dicts or pydantic models) as plain JSON values."""
    if hasattr(value, "model_dump"):
        return value.model_dump(exclude_unset=True)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value
