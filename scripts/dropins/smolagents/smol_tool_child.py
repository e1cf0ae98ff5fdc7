"""A smolagents job killed inside a durable tool: `charge_card` (wrapped by
`durable_tools`) SIGKILLs the process when it runs (SMOL_DIE_IN_TOOL=charge_card), after
the pre-tool record was stored. Used by test_durable_tools.py.

Usage: smol_tool_child.py http URL KEY SESSION KIND | embedded STORE TENANT SESSION KIND
KIND: `calling` (a ToolCallingAgent: a lookup step, then the charge) or `code` (a
CodeAgent whose code looks up, prints, then charges).
"""

from __future__ import annotations

import sys

import berth
from berth.integrations.smolagents import BerthAgentLog, durable_tools
from smol_fakes import TASK, CallingModel, ScriptedModel, charge_card, lookup, make_agent, make_calling_agent

CALLING_SCRIPT = [[("lookup", {"city": "Paris"})], [("charge_card", {"amount": 30})]]
CODE_SCRIPT = ["Thought: look up, then charge.\n<code>\nprint(lookup(city='Paris'))\ncharge_card(amount=30)\n</code>"]


def main() -> None:
    transport, where, credential, session_id, kind = sys.argv[1:6]
    if transport == "http":
        client = berth.Client(where, api_key=credential)
    else:
        client = berth.open(where, tenant=credential, user="agent", role="service")
    log = BerthAgentLog(client, session_id, run_lease_ttl_ms=1500)
    if kind == "calling":
        agent = make_calling_agent(CallingModel(CALLING_SCRIPT), durable_tools([charge_card], log) + [lookup])
    else:
        agent = make_agent(ScriptedModel(CODE_SCRIPT), durable_tools([charge_card, lookup], log))
    log.attach(agent)
    agent.run(TASK)
    raise SystemExit("charge_card should have killed this process")


if __name__ == "__main__":
    main()
