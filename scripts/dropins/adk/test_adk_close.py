"""Closing `BerthSessionService` as code written for ADK's `DatabaseSessionService` does:
`async with service:` and `await service.close()`. The same lines run on
`DatabaseSessionService` (sqlite+aiosqlite) first, as the reference; on berth the runs
are released by the time `close()` returns, before its answer is awaited — handed on to
the next service object of the process on the same client (detached when that client
closes, as `DatabaseSessionService` leaves an engine it was given to its owner), or with
`hand_on=False` detached — and the plain `service.close()` of sync code keeps working (no
"never awaited" warning)."""

from __future__ import annotations

import asyncio
import gc
import warnings
from pathlib import Path
from typing import Any

from google.adk.sessions import DatabaseSessionService

from berth.integrations._runpool import POOL
from berth.integrations.adk import BerthSessionService, session_berth_id


async def _use_as_database_session_service(service: Any, session_id: str = "in-context") -> None:
    """What moves over from `DatabaseSessionService`: a context manager, then an awaited close."""
    async with service as entered:
        assert entered is service
        await service.create_session(app_name="app", user_id="u", session_id=session_id, state={"k": 1})
    await service.close()  # again, awaited: idempotent


async def test_async_with_and_awaited_close_as_database_session_service(adk_place: Any, tmp_path: Path) -> None:
    await _use_as_database_session_service(DatabaseSessionService(f"sqlite+aiosqlite:///{tmp_path / 'adk.db'}"))

    client = adk_place.client()
    await _use_as_database_session_service(BerthSessionService(client, hand_on=False))
    # Leaving the `async with` detached the service's run.
    assert client.get_session(session_berth_id("app", "u", "in-context")).runs == []
    service = BerthSessionService(client)
    await _use_as_database_session_service(service, "handed-on")
    # Or handed it on: idle, no longer the closed object's (which holds none).
    assert len(client.get_session(session_berth_id("app", "u", "handed-on")).runs) == 1
    assert service._holds == {} and POOL.holds("adk", client, session_berth_id("app", "u", "handed-on"))
    POOL.release_all()

    service = BerthSessionService(client, hand_on=False)
    await service.create_session(app_name="app", user_id="u", session_id="closed-at-once")
    berth_id = session_berth_id("app", "u", "closed-at-once")
    assert len(client.get_session(berth_id).runs) == 1
    closing = service.close()
    assert client.get_session(berth_id).runs == []  # done before the answer is awaited
    assert await closing is None
    assert await service.close() is None


def test_closing_the_client_detaches_the_runs_its_services_handed_on(adk_place: Any) -> None:
    # A script that closes its services and its client, then exits, leaves no run attached.
    client = adk_place.client()
    service = BerthSessionService(client)
    asyncio.run(service.create_session(app_name="app", user_id="u", session_id="handed-on"))
    service.close()
    reader = adk_place.client()
    assert len(reader.get_session(session_berth_id("app", "u", "handed-on")).runs) == 1
    client.close()
    assert reader.get_session(session_berth_id("app", "u", "handed-on")).runs == []


def test_sync_close_still_closes_and_warns_nothing(adk_place: Any) -> None:
    client = adk_place.client()
    service = BerthSessionService(client, hand_on=False)
    asyncio.run(service.create_session(app_name="app", user_id="u", session_id="sync-close"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        service.close()  # the answer dropped, as sync code does
        gc.collect()
    assert client.get_session(session_berth_id("app", "u", "sync-close")).runs == []
