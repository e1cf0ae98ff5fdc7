"""`langgraph-checkpoint-conformance` 0.0.2 against `AsyncBerthSaver`, on both
transports: all 8 capabilities, 81 tests, level FULL — and the threads it wrote are in
berth afterwards (proof that the saver under test is ours)."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks

import berth
from berth.integrations.langgraph import LABEL, AsyncBerthSaver


async def test_conformance_full(lg_place: Any) -> None:
    client = lg_place.async_client()
    savers: list[AsyncBerthSaver] = []

    @checkpointer_test(name=f"AsyncBerthSaver-{lg_place.transport}")
    async def berth_saver() -> Any:
        saver = AsyncBerthSaver(client, run_lease_ttl_ms=5_000)
        savers.append(saver)
        yield saver
        await saver.aclose()

    report = await validate(berth_saver, progress=ProgressCallbacks.quiet())
    report.print_report()
    summary = report.to_dict()
    capabilities = summary["results"]
    passed = sum(result["tests_passed"] for result in capabilities.values())
    failed = sum(result["tests_failed"] for result in capabilities.values())
    skipped = sum(result["tests_skipped"] for result in capabilities.values())
    assert (passed, failed, skipped) == (81, 0, 0), summary
    assert len(capabilities) == 8, summary
    assert all(result["detected"] and result["passed"] is True for result in capabilities.values()), summary
    assert report.conformance_level() == "FULL" and report.passed_all()
    assert len(savers) == 8

    # The swap took effect: the suite's threads are berth sessions labelled `langgraph`.
    sessions = [session async for session in client.iter_sessions(label=LABEL, include_blank=True)]
    assert len(sessions) >= 20, len(sessions)
    assert all(LABEL in session.labels for session in sessions)
    events = await client.read(sessions[0].id)
    assert any(event.type.startswith("lg/") for event in events.events)
    with_runs = [s for s in sessions if s.runs]
    assert not with_runs, "every saver released its run on close"
    await client.close()
    assert isinstance(client, berth.AsyncClient)
