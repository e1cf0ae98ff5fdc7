"""What a saver remembers of a list it stored, to recognize it in the next version by
identity: a snapshot of each item's fields, so an unchanged prefix of the same objects
is not serialized again (`_builds`)."""

from __future__ import annotations

import operator
from typing import Any


_IMMUTABLE = (str, int, float, bool, bytes, type(None))
#: The snapshot of an immutable item: identity says it all.
_SAME: Any = object()


def _snapshot(item: Any) -> Any:
    """What `_unchanged` compares an item against later: its fields (an object's
    `__dict__`, a dict's items, a list's or tuple's elements), lists and dicts among them
    copied one level. None: an item whose changes cannot be seen this way (it is then
    serialized again)."""
    if isinstance(item, _IMMUTABLE):
        return _SAME
    kind = type(item)
    if kind is dict:
        fields = item
    elif kind is list or kind is tuple:
        return [value.copy() if type(value) in (list, dict) else value for value in item]
    elif isinstance(item, (dict, list, tuple)):
        return None  # a subclass: its contents and its attributes are not both seen here
    else:
        fields = getattr(item, "__dict__", None)
        if type(fields) is not dict:
            return None
    return {key: value.copy() if type(value) in (list, dict) else value for key, value in fields.items()}


def _unchanged(snapshot: Any, item: Any) -> bool:
    if snapshot is _SAME:
        return True
    if snapshot is None:
        return False
    kind = type(item)
    if kind is dict:
        return item == snapshot
    if kind is list or kind is tuple:
        return list(item) == snapshot
    return vars(item) == snapshot


def _prefix_unchanged(value: list[Any], objects: list[Any], snapshots: list[Any]) -> bool:
    """`value` starts with `objects` (the same objects), each unchanged since its
    snapshot. Loops in C where it can: this runs on every put, over the whole list."""
    count = len(objects)
    prefix = value[:count]
    if not all(map(operator.is_, prefix, objects)):
        return False
    try:
        # Objects with fields (messages): their `__dict__` against the snapshot.
        return all(map(operator.eq, map(vars, prefix), snapshots))
    except TypeError:  # an item without `__dict__` (a str, a dict…): one by one
        return all(map(_unchanged, snapshots, prefix))
