"""Content digests, idempotency keys and the per-session import state.

A source record's identity (the source store, its session or thread, its position) plus
a digest of its content names what an import appends, so a rerun — or a run resumed
after a kill — appends nothing twice: berth answers a reused idempotency key with the
original outcome. What an import has taken from a source session is kept in berth's
scoped memory (`STATE_NAMESPACE`, one item per source session, bound to the berth
session so it goes when the session is deleted): how many records, and a digest chained
over them. A rerun checks the source's first records against that digest: a source
record changed since the last run is reported, never overwritten.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

#: Where the import state lives (app scope: tenant-wide, written by service keys).
STATE_NAMESPACE = "app/berth-migrate"
#: The chained digest of no records.
EMPTY_CHAIN = hashlib.sha256(b"berth-migrate").hexdigest()


def digest(value: Any) -> str:
    """SHA-256 of `value`'s canonical JSON (sorted keys; anything else by its `str`)."""
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()


def digest_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def size(value: Any) -> int:
    """The bytes of `value`'s JSON (what the report counts)."""
    return len(orjson.dumps(value, default=str))


def chain(digests: list[str]) -> list[str]:
    """`out[n]`: the digest chained over the first `n` records' digests (`out[0]` is
    `EMPTY_CHAIN`), so a prefix is checked without hashing it again."""
    out = [EMPTY_CHAIN]
    for each in digests:
        out.append(hashlib.sha256(f"{out[-1]}:{each}".encode()).hexdigest())
    return out


def source_identity(kind: str, path: str, record: str) -> str:
    """A source record's identity: its kind, the source store, the record's name there."""
    return digest([kind, path, record])


def batch_key(identity: str, start: int, contents: list[str]) -> str:
    """The idempotency key of one append: the source session, where the batch starts in
    it, and the digest of the batch's records."""
    return "migrate-" + digest([identity, start, contents])[:48]


def state_key(identity: str) -> str:
    """The memory key of a source session's import state."""
    return identity[:64]
