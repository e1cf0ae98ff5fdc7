"""Fresh PostgreSQL databases for the drop-in suites' migrate tests, on the local server
(`BERTH_TEST_PG`, default the one on 127.0.0.1:5432, trust auth): `Databases.make()`
creates one and answers its name; `drop()` drops every one it made (also while
connected: `WITH (FORCE)`)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import uuid

#: The server, as a libpq URL of its maintenance database.
PG_SERVER = os.environ.get("BERTH_TEST_PG", "postgres://postgres@127.0.0.1:5432/postgres")


def psql(url: str, sql: str) -> str:
    """One statement through `psql` (unaligned, tuples only): its output."""
    return subprocess.run(["psql", url, "-qAtc", sql], check=True, capture_output=True, text=True).stdout


def libpq_url(name: str) -> str:
    """The libpq URL of database `name` on the test server."""
    return f"{PG_SERVER.rpartition('/')[0]}/{name}"


def sqlalchemy_url(name: str, driver: str) -> str:
    """The SQLAlchemy URL of database `name` through `driver` (asyncpg, psycopg)."""
    return f"postgresql+{driver}://{PG_SERVER.rpartition('/')[0].split('://', 1)[1]}/{name}"


def rows_digest(name: str) -> dict[str, str]:
    """A digest of every table's rows of database `name` (a stable order): what a
    read-only import must leave as it was."""
    url = libpq_url(name)
    out = {}
    for table in psql(url, "SELECT table_name FROM information_schema.tables "
                           "WHERE table_schema = 'public' ORDER BY 1").split():
        rows = psql(url, f'SELECT md5(string_agg(t::text, \'|\' ORDER BY t::text)) FROM "{table}" t')
        out[table] = hashlib.sha256(rows.encode()).hexdigest()
    return out


class Databases:
    """The databases one test made."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.made: list[str] = []

    def make(self, timezone: str | None = None) -> str:
        """A new empty database (its sessions' `TimeZone` set when `timezone`): its name."""
        name = f"{self.prefix}{uuid.uuid4().hex[:12]}"
        psql(PG_SERVER, f'CREATE DATABASE "{name}"')
        self.made.append(name)
        if timezone is not None:
            psql(PG_SERVER, f"ALTER DATABASE \"{name}\" SET timezone TO '{timezone}'")
        return name

    def drop(self) -> None:
        for name in self.made:
            subprocess.run(["psql", PG_SERVER, "-qc", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'],
                           capture_output=True)
        self.made.clear()
