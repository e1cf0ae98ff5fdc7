"""`BerthMemoryService`: each event with text is an item of
`user/<user>/adk/<app>/memory`, searched with berth's full text search, scoped to the
app and the user."""

from __future__ import annotations

import asyncio
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from google.adk.events.event import Event
from google.adk.memory import _utils as _memory_utils
from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions.session import Session
from google.genai import types

import berth

from . import _pages
from ._records import decode_key, encode_key, memory_namespace


_MAX_SEARCH_RESULTS = 10
_BERTH_TERM = re.compile(r"[^\W_]", re.UNICODE)


class BerthMemoryService(BaseMemoryService):
    """ADK's `BaseMemoryService` on berth memory: one item per event with text, in
    `user/<user>/adk/<app>/memory`, key = the event id; `search_memory` ranks the items
    by how many of the query's words they contain (berth full text search, one query per
    word) and returns the ten best, as `InMemoryMemoryService` does. Each word brings at
    most `candidates_per_word` items (its most relevant), so a search is bounded however
    large the memory grows."""

    def __init__(self, client: berth.Client, *, candidates_per_word: int = _pages._PAGE) -> None:
        if isinstance(client, berth.AsyncClient):
            raise TypeError("BerthMemoryService takes a berth.Client (its calls run on worker threads)")
        if not 1 <= candidates_per_word <= _pages._PAGE:
            raise ValueError(f"candidates_per_word must be 1–{_pages._PAGE}")
        self._client = client
        self._candidates_per_word = candidates_per_word

    async def add_session_to_memory(self, session: Session) -> None:
        await asyncio.to_thread(self._add, session.app_name, session.user_id, session.id, list(session.events))

    async def add_events_to_memory(self, *, app_name: str, user_id: str, events: Sequence[Event],
                                   session_id: str | None = None,
                                   custom_metadata: Mapping[str, object] | None = None) -> None:
        await asyncio.to_thread(self._add, app_name, user_id, session_id, list(events))

    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        return await asyncio.to_thread(self._find, app_name, user_id, query)

    async def delete_memory(self, *, app_name: str, user_id: str, memory_id: str | None = None) -> None:
        if not memory_id:
            return
        await asyncio.to_thread(self._forget_one, app_name, user_id, memory_id)

    def _add(self, app_name: str, user_id: str, session_id: str | None, events: list[Event]) -> None:
        namespace = memory_namespace(app_name, user_id)
        wanted: dict[str, dict[str, Any]] = {}
        for event in events:
            if not event.content or not event.content.parts or not event.id:
                continue
            text = " ".join(part.text for part in event.content.parts if part.text)
            if not text.strip():
                continue  # nothing a search could match
            wanted[encode_key(event.id)] = {
                "text": text,
                "author": event.author,
                "timestamp": event.timestamp,
                "session": session_id,
                "content": event.content.model_dump(mode="json", exclude_none=True),
            }
        if not wanted:
            return
        # What is stored already (this session's items, and every tombstone of the
        # user's memory for the app): two searches, then a put per new or changed event.
        stored: dict[str, Any] = {}
        for conditions in ({"session": session_id}, {"deleted": True}):
            for item in self._search(namespace, conditions):
                if item.namespace == namespace:
                    stored[item.key] = item.value
        for key, value in wanted.items():
            existing = stored.get(key)
            if existing == value or (isinstance(existing, dict) and existing.get("deleted")):
                continue  # already stored, or deleted (never ingested again)
            self._client.memory_put(namespace, key, value)

    def _search(self, prefix: str, conditions: Mapping[str, Any]) -> list[berth.MemoryItem]:
        items: list[berth.MemoryItem] = []
        cursor = None
        while True:
            page = self._client.memory_search(prefix, filter=conditions, cursor=cursor, limit=_pages._PAGE)
            items.extend(page.items)
            if not page.next_cursor:
                return items
            cursor = page.next_cursor

    def _find(self, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        namespace = memory_namespace(app_name, user_id)
        words = {word.lower() for word in re.findall(r"\w+", unicodedata.normalize("NFC", query))}
        scores: dict[str, int] = {}
        found: dict[str, berth.MemoryItem] = {}
        for word in sorted(words):
            if not _BERTH_TERM.search(word):
                continue  # no letter or digit: berth has no term for it
            page = self._client.memory_search(namespace, query=word, order="relevance",
                                              limit=self._candidates_per_word)
            for item in page.items:
                if item.namespace != namespace or not isinstance(item.value, dict):
                    continue
                found[item.key] = item
                scores[item.key] = scores.get(item.key, 0) + 1
        ranked = sorted(found.values(), key=lambda item: (-scores[item.key], item.value.get("timestamp", 0),
                                                          item.key))
        memories = []
        for item in ranked[:_MAX_SEARCH_RESULTS]:
            value = item.value
            memories.append(MemoryEntry(
                id=decode_key(item.key),
                content=types.Content.model_validate(value["content"]),
                author=value.get("author"),
                timestamp=_memory_utils.format_timestamp(value.get("timestamp", 0.0)),
            ))
        return SearchMemoryResponse(memories=memories)

    def _forget_one(self, app_name: str, user_id: str, memory_id: str) -> None:
        namespace = memory_namespace(app_name, user_id)
        try:
            self._client.memory_get(namespace, encode_key(memory_id))
        except berth.NotFound:
            return
        # A tombstone: a later add_session_to_memory does not ingest the event again.
        self._client.memory_put(namespace, encode_key(memory_id), {"deleted": True})
