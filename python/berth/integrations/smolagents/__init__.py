"""Durable smolagents runs on berth: `BerthAgentLog` (smolagents 1.26.0).

smolagents keeps an agent's memory in-process only (`agent.memory.steps`) and has no
store interface, so this is a persistence helper, not a drop-in (docs/guides/smolagents.md):

```python
log = BerthAgentLog(berth.Client(url), "job-42")   # or berth.open(...)
log.attach(agent)              # rebuilds agent.memory.steps from the session, holds its run
agent.run(task, reset=False)   # continues after a crash (reset=True starts over, recorded too)
log.close()
```

The package: `_log` holds the session and records the agent's run (`BerthAgentLog`);
`_records` is what the log holds and how it is folded back into `agent.memory.steps`.
"""

from __future__ import annotations

# The public names of the module this package was, and the private ones tests use, from
# where they live now (`__all__` is the public API).
from ._log import BerthAgentLog  # noqa: F401
from ._records import (  # noqa: F401
    ACTIVITY_TTL_MS_FOREVER,
    FINAL_TYPE,
    LABEL,
    STEP_TYPE,
    TASK_TYPE,
    steps_from_events,
)

__all__ = ["ACTIVITY_TTL_MS_FOREVER", "BerthAgentLog", "LABEL", "STEP_TYPE", "steps_from_events"]
