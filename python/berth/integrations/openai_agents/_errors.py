"""What a `BerthSession` raises beside berth's own errors."""

from __future__ import annotations

import berth


class SessionModeMismatch(berth.BerthError):
    """The berth session exists with the other concurrency mode (`exclusive=` differs
    from the mode it was created with, which is fixed at creation)."""

    code = "session_mode_mismatch"

    def __init__(self, message: str) -> None:
        super().__init__(message, status=409)


class SessionClosed(berth.ClientClosed, RuntimeError):
    """A call on a `BerthSession` after its `close()`. A `RuntimeError`, as `SQLiteSession`
    raises after its own `close()` ("SQLiteSession is closed"), and a `berth.ClientClosed`:
    a closed object attaches no run again (its `close()` released it); make a new one."""

    def __init__(self) -> None:
        super().__init__("BerthSession is closed")
