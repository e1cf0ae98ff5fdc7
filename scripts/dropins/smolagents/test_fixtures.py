"""Old layouts keep reading (issue 52, item 7): sessions written by earlier versions of
`BerthAgentLog` (`fixtures/<layout>/`, written by `fixtures/capture.py` with that version:
`step-dicts/` by the package before the conversation vocabulary, `vocabulary/` by the
package with it) are imported into a fresh store, on both transports, and

- the drop-in rebuilds exactly the memory it rebuilt then (`<name>.memory.json`: every
  step's type, fields and `to_messages()`, i.e. the model's view of the history), by
  `steps_from_events` and by `attach` — and the job continues from it;
- berth's readers render them: `berth sessions ls --label smolagents` lists the session
  (it is not blank), `berth sessions cat --transcript` shows its tasks, the inspector's
  page too (HTTP)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from smolagents.memory import ActionStep, TaskStep

import berth
import readers
from berth.integrations.smolagents import LABEL, BerthAgentLog, steps_from_events
from fixtures.capture import TENANT, USER, memory_view
from smol_fakes import ScriptedModel, make_agent

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CASES = sorted(path.with_suffix("") for path in FIXTURES.glob("*/*.jsonl"))


def client_of(place: Any) -> berth.Client:
    """A client of the fixtures' tenant (an import keeps the export's tenant)."""
    if place.transport == "http":
        client = berth.Client(place.server.url, api_key=place.server.key(TENANT, USER, "service"))
    else:
        client = berth.open(str(place.store), tenant=TENANT, user=USER, role="service")
    place.clients.append(client)
    return client


@pytest.mark.parametrize("case", CASES, ids=[f"{case.parent.name}/{case.name}" for case in CASES])
def test_old_layout_reads_and_renders(place: Any, case: Path) -> None:
    session_id = case.name
    expected = json.loads(case.with_suffix(".memory.json").read_text())
    client = client_of(place)
    client.import_sessions(case.with_suffix(".jsonl").read_bytes())

    assert memory_view(steps_from_events(client.iter_events(session_id))) == expected
    agent = make_agent(ScriptedModel(["Thought: done.\n<code>\nfinal_answer('again')\n</code>"]))
    with BerthAgentLog(client, session_id) as log:
        log.attach(agent)
        assert memory_view(agent.memory.steps) == expected
        assert agent.run("Once more.", reset=False) == "again"
    # The old layout followed by today's: the memory is the old one and the new run.
    grown = steps_from_events(client.iter_events(session_id))
    assert memory_view(grown[: len(expected)]) == expected
    assert [type(step) for step in grown[len(expected):]] == [TaskStep, ActionStep]

    tasks = [step["fields"]["task"].splitlines()[0] for step in expected if step["type"] == "TaskStep"]
    assert session_id in readers.listed(place, TENANT, LABEL)
    text = readers.transcript(place, TENANT, session_id)
    assert all(task in text for task in tasks), text
    if case.parent.name != "step-dicts":  # written with turns: no event outside one
        assert "turn/start" in text and "turn/end" in text
    if place.transport == "http":
        page = readers.inspector_page(place, TENANT, session_id)
        assert all(task in page for task in tasks)
        assert "Turn " in page
