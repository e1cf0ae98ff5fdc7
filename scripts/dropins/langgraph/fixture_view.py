"""What LangGraph sees of a thread, as plain JSON that compares exactly: every
checkpoint `saver.list` returns (newest first: config, the checkpoint with its channel
values, metadata, parent, pending writes) and the graph's `get_state` (values, next
nodes, tasks and interrupts). Used to capture the old-layout fixtures
(`fixtures/capture.py`) and to check today's saver against them
(`test_langgraph_fixtures.py`)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
from typing import Any, Callable

from pydantic import BaseModel


def view(value: Any) -> Any:
    """`value` as JSON: native values as they are, everything else tagged with its type
    (`{"__t": name, …}`), so two views are equal exactly when the values are."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"__t": "float", "repr": repr(value)}
    if isinstance(value, bytes):
        return {"__t": "bytes", "b64": base64.b64encode(value).decode("ascii")}
    if type(value) is list:
        return [view(item) for item in value]
    if type(value) is tuple:
        return {"__t": "tuple", "items": [view(item) for item in value]}
    if isinstance(value, (set, frozenset)):
        return {"__t": type(value).__name__, "items": sorted((view(item) for item in value), key=repr)}
    if type(value) is dict:
        if all(isinstance(key, str) and key != "__t" for key in value):
            return {key: view(item) for key, item in value.items()}
        return {"__t": "dict", "items": [[view(key), view(item)] for key, item in value.items()]}
    name = f"{type(value).__module__}.{type(value).__qualname__}"
    if isinstance(value, BaseModel):
        return {"__t": name, "fields": view(value.model_dump())}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"__t": name, "fields": view({field.name: getattr(value, field.name)
                                            for field in dataclasses.fields(value)})}
    if isinstance(value, BaseException):
        return {"__t": name, "args": view(list(value.args))}
    if hasattr(value, "_asdict"):  # a NamedTuple
        return {"__t": name, "fields": view(dict(value._asdict()))}
    if isinstance(value, dict):
        return {"__t": name, "items": view(dict(value))}
    if isinstance(value, (list, tuple)):
        return {"__t": name, "items": view(list(value))}
    return {"__t": name, "repr": repr(value)}


def checkpoint_view(found: Any) -> Any:
    """One `CheckpointTuple`."""
    return view({"config": found.config, "checkpoint": dict(found.checkpoint), "metadata": found.metadata,
                 "parent_config": found.parent_config, "pending_writes": list(found.pending_writes or [])})


def state_view(snapshot: Any) -> Any:
    """A graph's `StateSnapshot`, without its timestamps' own formatting concerns (they
    are the stored checkpoint's, so they are kept)."""
    tasks = [{"id": task.id, "name": task.name, "path": task.path, "error": task.error,
              "interrupts": task.interrupts, "result": task.result} for task in snapshot.tasks]
    return view({"values": snapshot.values, "next": snapshot.next, "config": snapshot.config,
                 "metadata": snapshot.metadata, "created_at": snapshot.created_at,
                 "parent_config": snapshot.parent_config, "tasks": tasks,
                 "interrupts": snapshot.interrupts})


def digest(value: Any) -> str:
    """The sha256 of a view's canonical JSON: equal exactly when the views are."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def thread_view(saver: Any, build: Callable[[Any], Any], thread: str) -> dict[str, Any]:
    """Everything LangGraph reads of `thread` through `saver` (a fresh one: a cold read
    first, then the fold); `build(saver)` compiles the thread's graph. The latest
    checkpoint and the state in full; every checkpoint of the list and the history by
    digest (a history holds the list of messages once per step: quadratic in full)."""
    config = {"configurable": {"thread_id": thread}}
    latest = saver.get_tuple(config)  # a fresh saver: the tail and point reads
    return {
        "latest": checkpoint_view(latest) if latest is not None else None,
        "list": [digest(checkpoint_view(found)) for found in saver.list(config)],
        "state": state_view(build(saver).get_state(config)),
        "history": [digest(state_view(snapshot)) for snapshot in build(saver).get_state_history(config)],
    }
