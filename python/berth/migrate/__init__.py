"""`berth-migrate` (also `python -m berth.migrate`): an agent team's existing history
into berth from the store its framework gave it, and back out again.

Sources and targets (each read and written through the framework's own classes):

- `openai-sqlite:PATH`, `openai-sqlalchemy:URL`: the OpenAI Agents SDK's `SQLiteSession`
  file, or its `SQLAlchemySession` database (SQLite or PostgreSQL), into
  `berth.integrations.openai_agents.BerthSession` (`openai`);
- `langgraph-sqlite:PATH`, `langgraph-postgres:URL`: LangGraph's `SqliteSaver` file, or
  its `PostgresSaver` database, into `berth.integrations.langgraph.BerthSaver`
  (`langgraph`);
- `adk:URL`: Google ADK's `SqliteSessionService` or `DatabaseSessionService` (SQLite or
  PostgreSQL), into `berth.integrations.adk.BerthSessionService` (`adk`).

The package: `cli` (arguments, the berth to open, the run), `report` (what happened, the
progress line and the final report), `keys` (content digests, idempotency keys and the
per-session import state), `source` (a read-only snapshot of a source file; a URL
without its password), `users` (whose sessions an import makes: `--user-from`,
`--user-map`), `openai`, `langgraph` and `adk` (one framework each, both ways).
docs/guides/migration.md is the guide.
"""

from __future__ import annotations

from .cli import main

__all__ = ["main"]
