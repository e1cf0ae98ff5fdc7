"""How LangGraph's namespaces, items and filters map to berth's scoped memory.

A store object has one berth namespace `root` (default `app/langgraph`; a scope —
`user/<id>`, `project/<id>` or `app/<name>` — plus optional free segments). A LangGraph
namespace tuple `(l1, …, ln)` is the berth namespace `root/seg(l1)/…/seg(ln)`, where
`seg` percent-encodes `%`, `/` and every control character (Unicode category Cc) as
`%XX` (UTF-8 bytes, upper-case hex) and keeps everything else. LangGraph already refuses
labels that are empty or hold `.`, so `.` and `..` cannot occur. The encoding is
reversible (`label_of(segment_of(l)) == l`), and a prefix of tuples is a prefix of berth
namespaces. Keys and values are stored as they are (values must be JSON).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from langgraph.store.base import InvalidNamespaceError, MatchCondition


#: Where a store keeps its tuples unless told otherwise: tenant-wide (needs a `service`
#: or `admin` key to write; a `user` key writes only `user/<itself>` and its project).
DEFAULT_ROOT = "app/langgraph"
SEGMENT_CHARS_MAX = 128
FREE_SEGMENTS_MAX = 14
NAMESPACE_BYTES_MAX = 512

_ID = re.compile(r"[A-Za-z0-9._~-]{1,128}")
_SCOPES = ("user", "project", "app")
_OPERATORS = {"$eq": "eq", "$ne": "ne", "$gt": "gt", "$gte": "gte", "$lt": "lt", "$lte": "lte"}
#: A full-text term: a maximal run of Unicode letters and digits (docs/reference/memory.md).
_TERM = re.compile(r"[^\W_]+")


class StoreUnsupported(NotImplementedError):
    """What `BerthStore` does not do (semantic search with an embedding `index`, a
    nested partial-match filter): refused before any berth call."""


class NamespaceTooLong(InvalidNamespaceError):
    """A tuple berth cannot hold: a label over 128 characters once encoded, more labels
    than the root leaves free (14 free segments in all), or over 512 bytes in all."""


def _escape(char: str) -> str:
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8"))


def segment_of(label: str) -> str:
    """One LangGraph namespace label as a berth namespace segment (reversible)."""
    return "".join(
        _escape(char) if char in "%/" or unicodedata.category(char) == "Cc" else char for char in label
    )


_ESCAPED = re.compile(r"(?:%[0-9A-F]{2})+")


def label_of(segment: str) -> str:
    """The label `segment_of` encoded."""
    return _ESCAPED.sub(lambda match: bytes.fromhex(match.group(0).replace("%", "")).decode("utf-8"), segment)


def _check_root(root: str) -> int:
    """The root's number of segments; a typed `ValueError` if it is not a berth namespace."""
    parts = root.split("/")
    if len(parts) < 2 or parts[0] not in _SCOPES or not _ID.fullmatch(parts[1]) or parts[1] in (".", ".."):
        raise ValueError(f"root {root!r}: a berth scope (user/<id>, project/<id> or app/<name>) and free segments")
    for part in parts[2:]:
        if not part or part in (".", "..") or len(part) > SEGMENT_CHARS_MAX or any(
            char == "/" or unicodedata.category(char) == "Cc" for char in part
        ):
            raise ValueError(f"root {root!r}: segment {part!r} is not a berth namespace segment")
    return len(parts)


def _ms(moment: int) -> datetime:
    return datetime.fromtimestamp(moment / 1000, tz=timezone.utc)


def _matches(condition: MatchCondition, labels: tuple[str, ...]) -> bool:
    path = condition.path
    if len(labels) < len(path):
        return False
    pairs = zip(labels, path) if condition.match_type == "prefix" else zip(reversed(labels), reversed(path))
    return all(wanted == "*" or label == wanted for label, wanted in pairs)


def _conditions(filter: Mapping[str, Any] | None) -> list[tuple[str, str, Any]]:
    """LangGraph's filter as berth conditions: `{field: value}` is `eq` (exact, on the
    whole value), `{field: {"$op": operand, …}}` one condition per operator."""
    conditions: list[tuple[str, str, Any]] = []
    for field, wanted in (filter or {}).items():
        if isinstance(wanted, Mapping):
            if not any(str(name).startswith("$") for name in wanted):
                raise StoreUnsupported(
                    f"filter {field!r}: a nested partial match ({{field: {{…}}}}) is not a berth filter; "
                    "berth compares top-level fields (use {field: {'$eq': {…}}} for an exact object)"
                )
            for name, operand in wanted.items():
                if name not in _OPERATORS:
                    raise ValueError(f"Unsupported operator: {name}")
                conditions.append((field, _OPERATORS[name], _plain(operand)))
        else:
            conditions.append((field, "eq", _plain(wanted)))
    return conditions


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value
