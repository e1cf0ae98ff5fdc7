"""A smolagents job that dies: a CodeAgent with a scripted model, logged to berth by
BerthAgentLog, SIGKILLs itself when the model is asked for step KILL_AT (after the
steps before it were finalized and stored). Used by test_smolagents.py.

Usage: smol_child.py http URL KEY SESSION KILL_AT | embedded STORE TENANT SESSION KILL_AT
"""

from __future__ import annotations

import os
import signal
import sys

import berth
from berth.integrations.smolagents import BerthAgentLog
from smol_fakes import SCRIPT, TASK, ScriptedModel, make_agent


def main() -> None:
    transport, where, credential, session_id, kill_at = sys.argv[1:6]
    if transport == "http":
        client = berth.Client(where, api_key=credential)
    else:
        client = berth.open(where, tenant=credential, user="agent", role="service")

    def die() -> None:
        sys.stdout.write("dying\n")
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    model = ScriptedModel(SCRIPT, on_call={int(kill_at): die})
    agent = make_agent(model)
    log = BerthAgentLog(client, session_id, run_lease_ttl_ms=1500)
    log.attach(agent)
    agent.run(TASK)
    raise SystemExit("the scripted model should have killed this process")


if __name__ == "__main__":
    main()
