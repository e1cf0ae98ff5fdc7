"""`list_sessions` over many pages of the app's index items: the cursor each page ends
with is read from the page's end (`_page_cursor`), and must be the page's own even when
an item's value holds a `next_cursor` key of its own; the listing's `Session`s are
validated in one call and must equal one `Session(...)` each."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.adk.sessions.session import Session

from berth.integrations import adk
from berth.integrations.adk import BerthSessionService
from test_adk_differential import APP


def page(items: list[Any], cursor: str | None) -> bytes:
    body: dict[str, Any] = {"items": [{"namespace": "app/x", "key": f"k{n}", "value": value}
                                      for n, value in enumerate(items)]}
    if cursor is not None:
        body["next_cursor"] = cursor
    return json.dumps(body, separators=(",", ":")).encode()


PAGES = [
    page([], None),
    page([{"a": 1}], "c1"),
    page([{"a": 1}], None),
    # An item's own `next_cursor` key, last in the page, with and without the page's.
    page([{"next_cursor": "not-this"}], None),
    page([{"next_cursor": "not-this"}], "c2"),
    page([{"deep": {"next_cursor": "not-this"}}], None),
    page([{"next_cursor": None}], None),
    # The key's bytes inside a string value (its quotes escaped).
    page(['"next_cursor":"not-this"}'], None),
    page(['"next_cursor":"not-this"}'], "c3"),
    page([{"text": 'x","next_cursor":"not-this"}'}], None),
    # A cursor with escapes in it.
    page([{"a": 1}], 'c"4\\'),
]


@pytest.mark.parametrize("body", PAGES)
def test_the_cursor_read_from_the_end_is_the_whole_parse_s(body: bytes) -> None:
    assert adk._page_cursor(body) == adk._PageCursor.model_validate_json(body).next_cursor


async def test_a_listing_over_many_pages_is_every_session_once(adk_place: Any, monkeypatch: Any) -> None:
    """Pages of 3 index items, sessions whose state holds a `next_cursor` key (so some
    pages end with an item's own key), listed whole and per user, against one
    `Session(...)` per session built from `get_session`'s answers."""
    monkeypatch.setattr(adk._pages, "_PAGE", 3)
    with BerthSessionService(adk_place.client()) as svc:
        for n in range(11):
            state = {"n": n, "next_cursor": f"mine-{n}" if n % 2 else None, "user:seen": n, "app:x": 1}
            await svc.create_session(app_name=APP, user_id=f"u{n % 3}", session_id=f"s{n:02}", state=state)
        listed = (await svc.list_sessions(app_name=APP)).sessions
        assert sorted(session.id for session in listed) == [f"s{n:02}" for n in range(11)]
        assert all(type(session) is Session for session in listed)
        for session in listed:
            got = await svc.get_session(app_name=APP, user_id=session.user_id, session_id=session.id)
            one = Session(app_name=got.app_name, user_id=got.user_id, id=got.id, state=got.state,
                          last_update_time=got.last_update_time)
            assert session == one
        assert [s.id for s in listed] == [s.id for s in sorted(listed, key=adk._LISTING_ORDER)]
        mine = (await svc.list_sessions(app_name=APP, user_id="u1")).sessions
        assert [s.id for s in mine] == [s.id for s in listed if s.user_id == "u1"]
