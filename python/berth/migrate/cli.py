"""`berth-migrate`: the arguments, the berth to open, and the run.

    berth-migrate SOURCE [berth]          import SOURCE into berth
    berth-migrate --to TARGET [berth]     export berth into TARGET

SOURCE / TARGET: `openai-sqlite:PATH`, `openai-sqlalchemy:URL` (an async SQLAlchemy URL:
`sqlite+aiosqlite:///PATH`, `postgresql+asyncpg://…`, `postgresql+psycopg://…`), `langgraph-sqlite:PATH`,
`langgraph-postgres:URL` (`postgresql://…`) or `adk:URL` (the URL ADK's services take:
`sqlite:///PATH` for `SqliteSessionService`; `sqlite+aiosqlite:///PATH`,
`postgresql+asyncpg://…` or `postgresql+psycopg://…` for `DatabaseSessionService`).
A URL's password is never printed. The berth: `--server
URL --api-key KEY` (HTTP; `BERTH_API_KEY` too) or `--data DIR --tenant T --user U` (the
embedded store, as a `service` principal unless `--role`). `--dry-run` writes nothing
and reports what would be written; `--json` prints the final report as JSON.
Whose sessions an import makes (`users`): `--user-from caller` (OpenAI, LangGraph: the
caller's own user, the default), `--user-from adk-user` (ADK: each session's ADK user,
its default and only choice), or `--user-map FILE.json` (OpenAI, LangGraph: source
session/thread id -> berth user, with a service key).

Exit status: 0 when the target holds everything, 1 when records were skipped or found
changed (the report says which and why) or the run failed (a missing file, berth's
error, the framework not installed: said on stderr), 2 on a usage error (a bad
`--user-map` file, or a user key importing for others, included: nothing written).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
from typing import Any

import berth

from . import users as owners
from .report import Report
from .source import redact

#: Each kind of store, and the URL schemes it takes (None: a file path).
KINDS: dict[str, tuple[str, ...] | None] = {
    "openai-sqlite": None,
    "openai-sqlalchemy": ("sqlite+", "postgresql+"),
    "langgraph-sqlite": None,
    "langgraph-postgres": ("postgres://", "postgresql://"),
    "adk": ("sqlite:", "sqlite+", "postgresql+"),
}
USAGE = ("openai-sqlite:PATH, openai-sqlalchemy:URL, langgraph-sqlite:PATH, langgraph-postgres:URL "
         "or adk:URL")


def _store(spec: str) -> tuple[str, str]:
    kind, _, where = spec.partition(":")
    schemes = KINDS.get(kind, ())
    if kind not in KINDS or not where or (schemes is not None and not where.startswith(schemes)):
        raise argparse.ArgumentTypeError(
            f"{redact(spec)!r}: expected {USAGE} (openai-sqlalchemy:sqlite+aiosqlite:///PATH, "
            "openai-sqlalchemy:postgresql+asyncpg://…, langgraph-postgres:postgresql://…, adk:sqlite:///PATH, "
            "adk:sqlite+aiosqlite:///PATH, adk:postgresql+asyncpg://…)")
    return kind, where


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="berth-migrate",
        description="Move an agent framework's stored sessions into berth (SOURCE) or back out (--to TARGET), "
                    "through the framework's own classes.",
    )
    parser.add_argument("source", nargs="?", type=_store,
                        help=f"{USAGE} to import")
    parser.add_argument("--to", dest="target", type=_store,
                        help=f"{USAGE} to export to")
    parser.add_argument("--server", help="berth server URL (HTTP)")
    parser.add_argument("--api-key", default=os.environ.get("BERTH_API_KEY"), help="its API key (or BERTH_API_KEY)")
    parser.add_argument("--data", help="embedded store directory (instead of --server)")
    parser.add_argument("--tenant", help="embedded: the tenant")
    parser.add_argument("--user", default="agent", help="embedded: the user (default agent)")
    parser.add_argument("--role", default="service", choices=["user", "service", "admin"],
                        help="embedded: the role (default service)")
    parser.add_argument("--user-from", choices=["caller", "adk-user"],
                        help="import: whose sessions they become: the caller's user (OpenAI, LangGraph: the "
                             "default) or each ADK session's user_id (adk: the default)")
    parser.add_argument("--user-map", metavar="FILE.json",
                        help="import (OpenAI, LangGraph): a JSON object of source session/thread id -> berth user; "
                             "sessions it does not name are skipped (needs a service key)")
    parser.add_argument("--dry-run", action="store_true", help="write nothing; report what would be written")
    parser.add_argument("--json", action="store_true", help="print the final report as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    return parser


def _client(args: argparse.Namespace, parser: argparse.ArgumentParser) -> berth.Client:
    if bool(args.server) == bool(args.data):
        parser.error("name the berth: --server URL --api-key KEY, or --data DIR --tenant T --user U")
    if args.server:
        if not args.api_key:
            parser.error("--server needs --api-key (or BERTH_API_KEY)")
        return berth.Client(args.server, api_key=args.api_key)
    if not args.tenant:
        parser.error("--data needs --tenant")
    return berth.open(args.data, tenant=args.tenant, user=args.user, role=args.role)


def _check_users(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Which `--user-from` / `--user-map` the direction and the source take."""
    if args.user_from is None and args.user_map is None:
        return
    if args.source is None:
        parser.error("--user-from and --user-map are for an import (a SOURCE); an export keeps each session's own")
    if args.user_from is not None and args.user_map is not None:
        parser.error("give --user-from or --user-map, not both")
    if args.source[0] == "adk":
        if args.user_map is not None or args.user_from != "adk-user":
            parser.error("adk: sessions are imported under their own ADK user_id (--user-from adk-user): berth's "
                         "ADK drop-in keys each session and its user: state by it")
    elif args.user_from == "adk-user":
        parser.error(f"--user-from adk-user is for an adk: source; {args.source[0]} keeps no user "
                     "(--user-from caller, or --user-map FILE.json)")


def run(args: argparse.Namespace, client: berth.Client) -> Report:
    where = args.server or args.data
    if args.source is not None:
        kind, path = args.source
        report = Report("import", redact(f"{kind}:{path}"), f"berth:{where}", dry_run=args.dry_run)
    else:
        kind, path = args.target
        report = Report("export", f"berth:{where}", redact(f"{kind}:{path}"), dry_run=args.dry_run)
    if not args.no_progress and sys.stderr.isatty():
        report.progress = sys.stderr
    importing = args.source is not None
    users: owners.UserMap | None = getattr(args, "users", None)
    if users is not None:
        owners.check_role(client)
        report.users = {}
    # Each framework's module imports its framework: by name, on demand (a team with one
    # framework installed uses that one's).
    if kind.startswith("openai-"):
        openai: Any = importlib.import_module("berth.migrate.openai")
        if kind == "openai-sqlalchemy":
            work = openai.import_sqlalchemy(path, client, report, users=users) if importing \
                else openai.export_sqlalchemy(client, path, report)
        else:
            work = openai.import_store(path, client, report, users=users) if importing \
                else openai.export_store(client, path, report)
        asyncio.run(work)
    elif kind == "adk":
        adk: Any = importlib.import_module("berth.migrate.adk")
        asyncio.run(adk.import_store(path, client, report) if importing else adk.export_store(client, path, report))
    else:
        langgraph: Any = importlib.import_module("berth.migrate.langgraph")
        report.unit = "checkpoints"
        if kind == "langgraph-postgres" and importing:
            langgraph.import_postgres(path, client, report, users=users)
        elif kind == "langgraph-postgres":
            langgraph.export_postgres(client, path, report)
        elif importing:
            langgraph.import_store(path, client, report, users=users)
        else:
            langgraph.export_store(client, path, report)
    return report


#: The modules of the database drivers whose errors are a failed run, said on stderr (a
#: server that refuses the connection, a database that does not exist), not a traceback.
_DRIVERS = ("psycopg", "asyncpg", "sqlalchemy", "sqlite3")


def _reported(error: Exception) -> bool:
    """A failure the run reports in one line: a missing file, berth's error, the
    framework or its driver not installed, a URL the framework refuses (`ValueError`), the
    database refusing."""
    if isinstance(error, (FileNotFoundError, berth.BerthError, ImportError, ValueError)):
        return True
    return any(each.__module__.split(".")[0] in _DRIVERS for each in type(error).__mro__)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if (args.source is None) == (args.target is None):
        parser.error("give a SOURCE to import, or --to TARGET to export (one of them)")
    _check_users(args, parser)
    try:
        args.users = owners.load(args.user_map) if args.user_map is not None else None
    except owners.UserMapError as error:
        print(f"berth-migrate: UserMapError: {error}", file=sys.stderr)
        return 2
    client = _client(args, parser)
    try:
        report = run(args, client)
    except owners.UserMapError as error:
        print(f"berth-migrate: UserMapError: {error}", file=sys.stderr)
        return 2
    except Exception as error:
        if not _reported(error):
            raise
        print(f"berth-migrate: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    finally:
        client.close()
    if args.json:
        data: dict[str, Any] = report.as_dict()
        print(json.dumps(data, indent=2, default=str))
    else:
        report.write_text()
    return 0 if report.clean else 1
