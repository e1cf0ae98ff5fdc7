"""Durable smolagents runs on berth: `BerthAgentLog` (smolagents 1.26.0).

smolagents keeps an agent's memory in-process only (`agent.memory.steps`) and has no
store interface, so this is a persistence helper, not a drop-in (docs/guides/smolagents.md):

```python
log = BerthAgentLog(berth.Client(url), "job-42")   # or berth.open(...)
agent = CodeAgent(tools=durable_tools([charge_card], log), model=model)  # optional
log.attach(agent)              # rebuilds agent.memory.steps from the session, holds its run
agent.run(task, reset=False)   # continues after a crash (reset=True starts over, recorded too)
log.close()
```

The session reads as a conversation in berth's readers: one `run()` is a turn, each
`ActionStep` a step, with the task, the model's messages, tool calls and results and
the final answer in berth's vocabulary, beside the `smol/step` records that restore the
memory exactly.

The package, one concern a file: `_log` (the session, hooking the agent), `_hold` (the
run it holds), `_turns` (what each moment of a run appends, and turn and step numbers),
`_vocabulary` (smolagents records → berth events), `_records` (the records that restore
the memory), `_fold` (the loader), `_repair` (a step a crash interrupted, as smolagents
words a failed tool), `_tools` (durable tools: the call recorded before the tool runs).
"""

from __future__ import annotations

# The public names of the module this package was, and the private ones tests use, from
# where they live now (`__all__` is the public API).
from ._fold import steps_from_events  # noqa: F401
from ._log import BerthAgentLog  # noqa: F401
from ._records import (  # noqa: F401
    ACTIVITY_TTL_MS_FOREVER,
    FINAL_TYPE,
    LABEL,
    STEP_TYPE,
    TASK_TYPE,
)
from ._tools import DurableTool, durable_tools  # noqa: F401

__all__ = [
    "ACTIVITY_TTL_MS_FOREVER",
    "BerthAgentLog",
    "DurableTool",
    "LABEL",
    "STEP_TYPE",
    "durable_tools",
    "steps_from_events",
]
