"""What must run at interpreter exit before the embedded stores close.

`berth._transport` is imported lazily (on the first client), so an integration imported
before it registers its `atexit` handler first — and `atexit` runs handlers last-in,
first-out: the stores would close before the integration could release what it holds
through them (the OpenAI drop-in's idle runs stayed attached until their leases lapsed).
The transport runs these hooks itself, first, from every exit path that closes stores
(its `atexit` handler and the finalizers multiprocessing's children run instead).
"""

from __future__ import annotations

import threading
from typing import Callable

_HOOKS: list[Callable[[], None]] = []
_LOCK = threading.Lock()


def before_stores_close(hook: Callable[[], None]) -> None:
    """Runs `hook` once at exit, before any embedded store closes."""
    with _LOCK:
        _HOOKS.append(hook)


def run_hooks() -> None:
    """Runs the registered hooks once each (later calls find none); a hook's failure
    never stops the others or the stores' closing."""
    with _LOCK:
        hooks = list(_HOOKS)
        _HOOKS.clear()
    for hook in hooks:
        try:
            hook()
        except Exception:
            pass
