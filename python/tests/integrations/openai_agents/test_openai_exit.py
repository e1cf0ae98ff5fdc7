"""A script that ends without closing its client leaves no run attached: the idle run a
closed `BerthSession` handed on is detached at exit, before the embedded store closes.

`berth._transport` is imported on the first client, after the drop-in, so the drop-in's
`atexit` handler ran after the store had closed and its detach failed (the run stayed
attached until its lease lapsed: `berth sessions ls` said `active, runs 1`, the inspector
'writer attached'). The child here is examples/openai_agents/agent.py, run as a user
runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import berth

from conftest import Place

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "openai_agents" / "agent.py"


def test_a_script_that_exits_without_closing_its_client_leaves_no_run_attached(oai_place: Place) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("BERTH_")}
    if oai_place.transport == "http":
        assert oai_place.server is not None
        env["BERTH_URL"] = oai_place.server.url
        env["BERTH_API_KEY"] = oai_place.server.key(oai_place.tenant, "alice", "service")
        reader = berth.Client(oai_place.server.url, api_key=oai_place.server.key(oai_place.tenant, "alice", "service"))
    else:
        assert oai_place.store_url is not None
        env["BERTH_DATA"] = oai_place.store_url
    for _ in range(2):
        subprocess.run([sys.executable, str(EXAMPLE), "exits"], env=env, check=True, timeout=120,
                       stdout=subprocess.DEVNULL)
    if oai_place.transport != "http":
        assert oai_place.store_url is not None
        reader = berth.open(oai_place.store_url, tenant="acme", user="alice", role="service")
    with reader:
        session = reader.get_session("exits")
    assert session.event_count > 0
    assert session.runs == [], [run.run_id for run in session.runs]
