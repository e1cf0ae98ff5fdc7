"""Old layouts keep reading (issue 52, item 7): sessions written by the drop-in before it
wrote one turn per `Runner.run` (berth main at ca6ed18: messages and calls marked or
nested, the user's message before a hooks-only `turn/start`, two `tool/call`s for one
call, a crash repaired by berth, pops and a clear), exported as berth's JSONL into
scripts/dropins/openai/fixtures/ by its `capture.py`. Each is imported into a fresh store:
today's `BerthSession` reads exactly what that code's did, a new run continues it, and
berth's readers render it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from berth.integrations.openai_agents import LABEL, BerthSession
from conftest import ROOT, Place

from .conftest import plain
from .readers import inspector_page, listed, transcript

FIXTURES = ROOT / "scripts" / "dropins" / "openai" / "fixtures"
NAMES = ["example-hooks", "runner-no-hooks", "crash-repaired", "direct-items"]


def load(place: Place, name: str) -> tuple[dict[str, Any], str]:
    """Imports fixture `name` into the place's tenant: its expectations and berth id."""
    expect = json.loads((FIXTURES / f"{name}.expect.json").read_text())
    client = place.connect()
    # The export names its tenant (acme): the copy imported is the place's tenant's.
    first, _, events = (FIXTURES / f"{name}.jsonl").read_bytes().partition(b"\n")
    head = json.loads(first)
    head["header"]["scope"]["tenant"] = place.tenant
    imported = client.import_sessions(json.dumps(head).encode() + b"\n" + events)
    berth_id = BerthSession(expect["session_id"], client).berth_id
    assert [session.id for session in imported.sessions] == [berth_id]
    return expect, berth_id


def texts(items: list[Any], role: str) -> list[str]:
    """The text of every `role` message among SDK items."""
    found = []
    for item in items:
        if item.get("role") != role:
            continue
        content = item["content"]
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        if content:
            found.append(content)
    return found


@pytest.mark.parametrize("name", NAMES)
def test_an_old_session_reads_as_it_did(oai_place: Place, name: str) -> None:
    expect, berth_id = load(oai_place, name)
    client = oai_place.connect()
    with BerthSession(expect["session_id"], client) as reader:
        assert plain(asyncio.run(reader.get_items())) == expect["items"]
        assert plain(asyncio.run(reader.get_items(2))) == expect["last2"]
    # A fresh object again (a backward read from scratch, after the first one's resume).
    with BerthSession(expect["session_id"], oai_place.connect()) as again:
        assert plain(asyncio.run(again.get_items())) == expect["items"]
        if expect["items"]:
            assert plain(asyncio.run(again.pop_item())) == expect["items"][-1]
            assert plain(asyncio.run(again.get_items())) == expect["items"][:-1]


@pytest.mark.parametrize("name", NAMES)
def test_berths_readers_render_an_old_session(oai_place: Place, name: str) -> None:
    expect, berth_id = load(oai_place, name)
    shown = transcript(oai_place, berth_id)
    for role in ("user", "assistant"):
        for text in texts(expect["items"], role):
            assert f"{role}/message" in shown and text in shown, (text, shown)
    # Messages read as their text, never as the item's JSON.
    for line in shown.splitlines():
        if "/message" in line.split(":")[0]:
            assert '"openai_item"' not in line and '"content"' not in line, line
    if expect["items"]:
        assert berth_id in listed(oai_place, LABEL)  # a conversation: listed without --all
    if oai_place.transport == "http":
        page = inspector_page(oai_place, berth_id)
        for text in texts(expect["items"], "user") + texts(expect["items"], "assistant"):
            assert text in page, text


def test_a_new_run_continues_an_old_session(oai_place: Place) -> None:
    """A `Runner.run` with today's drop-in on the old example's session: the model sees the
    old conversation then the new input, and the new turn is numbered after the old ones."""
    from agents import Agent, Runner, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    expect, berth_id = load(oai_place, "example-hooks")
    client = oai_place.connect()

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"rain in {city}"

    model = ScriptedModel()
    model.enqueue([function_call("get_weather", {"city": "Oslo"}, call_id="call-new")])
    model.enqueue([assistant_message("It rains in Oslo.")])
    agent = Agent(name="weather", model=model, tools=[get_weather])
    with BerthSession(expect["session_id"], client) as session:
        asyncio.run(Runner.run(agent, "And in Oslo?", session=session, hooks=session.run_hooks()))
        items = plain(asyncio.run(session.get_items()))
    seen = plain(list(model.calls[0].input))
    assert seen[: len(expect["items"])] == expect["items"] and seen[-1]["content"] == "And in Oslo?"
    assert items[: len(expect["items"])] == expect["items"] and len(items) == len(expect["items"]) + 4
    events = client.read(berth_id).events
    old_turns = {event.data["turn"] for event in events if event.type == "turn/start" and event.seq < 14}
    new_starts = [event.data["turn"] for event in events if event.type == "turn/start" and event.seq >= 14]
    assert new_starts == [max(old_turns) + 1]
    assert events[-1].type == "turn/end" and events[-1].data["reason"] == "completed"
    assert "It rains in Oslo." in transcript(oai_place, berth_id)


def test_the_fixtures_are_small_and_complete() -> None:
    for name in NAMES:
        assert (FIXTURES / f"{name}.jsonl").stat().st_size < 16 * 1024
        expect = json.loads((FIXTURES / f"{name}.expect.json").read_text())
        assert set(expect) == {"session_id", "items", "last2"}
    assert Path(FIXTURES / "capture.py").exists()
