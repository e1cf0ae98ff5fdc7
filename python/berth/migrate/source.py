"""Reading a source store without writing it: a consistent copy of a SQLite file, made
with SQLite's online backup from a read-only connection, for the framework's own
classes to read (they open their files for writing and may change a file's journal
mode; a live store is read as one snapshot). A PostgreSQL store is read in place,
through connections the server itself holds read-only (each importer says how), and
named by its URL without the password (`redact`)."""

from __future__ import annotations

import os
import re
import sqlite3


def snapshot(path: str, directory: str) -> str:
    """A consistent copy of the SQLite file at `path` in `directory`, read through a
    read-only connection (the source is never written)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such SQLite file: {path}")
    copy = os.path.join(directory, "snapshot.sqlite")
    source = sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True)
    target = sqlite3.connect(copy)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()
    return copy


def redact(url: str) -> str:
    """`url` (or `KIND:URL`) without its password (what a report prints, and what names a
    server store in an import's bookkeeping: the same database under another password is
    the same)."""
    return _PASSWORD.sub(r"\1@", url, count=1)


#: `scheme://user:password@`: the password, up to the userinfo's end.
_PASSWORD = re.compile(r"(://[^/@:]*):[^/@]*@")
