"""`berth-migrate` (also `python -m berth.migrate`): an agent team's existing history
into berth from the store its framework gave it, and back out again.

Sources and targets (each read and written through the framework's own classes):

- `openai-sqlite:PATH`: the OpenAI Agents SDK's `SQLiteSession` file, into
  `berth.integrations.openai_agents.BerthSession` (`openai`);
- `langgraph-sqlite:PATH`: LangGraph's `SqliteSaver` file, into
  `berth.integrations.langgraph.BerthSaver` (`langgraph`).

The package: `cli` (arguments, the berth to open, the run), `report` (what happened, the
progress line and the final report), `keys` (content digests, idempotency keys and the
per-session import state), `source` (a read-only snapshot of a source file), `openai`
and `langgraph` (one framework each, both ways).
docs/guides/migration.md is the guide.
"""

from __future__ import annotations

from .cli import main

__all__ = ["main"]
