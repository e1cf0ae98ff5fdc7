"""SIGKILL a child process part-way, for the drop-in suites' crash tests (ADK's tool
killed mid-call, `berth-migrate` killed between appends): `kill_when` starts the child,
waits until `ready()` says it got far enough, and SIGKILLs it."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable


def kill_when(args: list[str], ready: Callable[[], bool], *, what: str, timeout_s: float = 120,
              poll_s: float = 0.02) -> None:
    """Runs `args` and SIGKILLs it once `ready()` (polled every `poll_s`). The child must
    not end before that (an AssertionError with its stderr), nor take longer than
    `timeout_s` to get there; `what` names the point it must reach, for those messages.
    The child is never left running."""
    child = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if child.poll() is not None:
                assert child.stderr is not None
                raise AssertionError(f"the child ended before {what}: {child.stderr.read().decode()[-3000:]}")
            assert time.monotonic() < deadline, f"the child never reached {what}"
            time.sleep(poll_s)
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL, child.returncode
