"""`berth-migrate`: the arguments, the berth to open, and the run.

    berth-migrate SOURCE [berth]          import SOURCE into berth
    berth-migrate --to TARGET [berth]     export berth into TARGET

SOURCE / TARGET: `openai-sqlite:PATH`, `langgraph-sqlite:PATH` or `adk:URL` (ADK's SQLite
URL: `sqlite:///PATH` for `SqliteSessionService`, `sqlite+aiosqlite:///PATH` for
`DatabaseSessionService`). The berth: `--server
URL --api-key KEY` (HTTP; `BERTH_API_KEY` too) or `--data DIR --tenant T --user U` (the
embedded store, as a `service` principal unless `--role`). `--dry-run` writes nothing
and reports what would be written; `--json` prints the final report as JSON.

Exit status: 0 when the target holds everything, 1 when records were skipped or found
changed (the report says which and why) or the run failed (a missing file, berth's
error, the framework not installed: said on stderr), 2 on a usage error.
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

from .report import Report

KINDS = ("openai-sqlite", "langgraph-sqlite", "adk")


def _store(spec: str) -> tuple[str, str]:
    kind, _, where = spec.partition(":")
    if kind not in KINDS or not where or (kind == "adk" and not where.startswith(("sqlite:", "sqlite+"))):
        raise argparse.ArgumentTypeError(f"{spec!r}: expected openai-sqlite:PATH, langgraph-sqlite:PATH or "
                                         "adk:sqlite:///PATH (adk:sqlite+aiosqlite:///PATH)")
    return kind, where


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="berth-migrate",
        description="Move an agent framework's stored sessions into berth (SOURCE) or back out (--to TARGET), "
                    "through the framework's own classes.",
    )
    parser.add_argument("source", nargs="?", type=_store,
                        help="openai-sqlite:PATH, langgraph-sqlite:PATH or adk:URL to import")
    parser.add_argument("--to", dest="target", type=_store,
                        help="openai-sqlite:PATH, langgraph-sqlite:PATH or adk:URL to export to")
    parser.add_argument("--server", help="berth server URL (HTTP)")
    parser.add_argument("--api-key", default=os.environ.get("BERTH_API_KEY"), help="its API key (or BERTH_API_KEY)")
    parser.add_argument("--data", help="embedded store directory (instead of --server)")
    parser.add_argument("--tenant", help="embedded: the tenant")
    parser.add_argument("--user", default="agent", help="embedded: the user (default agent)")
    parser.add_argument("--role", default="service", choices=["user", "service", "admin"],
                        help="embedded: the role (default service)")
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


def run(args: argparse.Namespace, client: berth.Client) -> Report:
    where = args.server or args.data
    if args.source is not None:
        kind, path = args.source
        report = Report("import", f"{kind}:{path}", f"berth:{where}", dry_run=args.dry_run)
    else:
        kind, path = args.target
        report = Report("export", f"berth:{where}", f"{kind}:{path}", dry_run=args.dry_run)
    if not args.no_progress and sys.stderr.isatty():
        report.progress = sys.stderr
    # Each framework's module imports its framework: by name, on demand (a team with one
    # framework installed uses that one's).
    if kind == "openai-sqlite":
        openai: Any = importlib.import_module("berth.migrate.openai")
        work = openai.import_store(path, client, report) if args.source else openai.export_store(client, path, report)
        asyncio.run(work)
    elif kind == "adk":
        adk: Any = importlib.import_module("berth.migrate.adk")
        asyncio.run(adk.import_store(path, client, report) if args.source else adk.export_store(client, path, report))
    else:
        langgraph: Any = importlib.import_module("berth.migrate.langgraph")
        report.unit = "checkpoints"
        if args.source:
            langgraph.import_store(path, client, report)
        else:
            langgraph.export_store(client, path, report)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if (args.source is None) == (args.target is None):
        parser.error("give a SOURCE to import, or --to TARGET to export (one of them)")
    client = _client(args, parser)
    try:
        report = run(args, client)
    except (FileNotFoundError, berth.BerthError, ImportError) as error:
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
