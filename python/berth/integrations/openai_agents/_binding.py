"""One client's hold on a session (`_Binding`): its berth run, the heartbeat, its turns
(`_turns`) and the kept view.

Every `BerthSession` object writes through a berth run of its own, attached on its first
use (by `resume`, so turns left open by objects whose runs are gone are closed first),
heartbeated in the background and detached by `close()` / leaving its context manager,
or by its lease (`run_lease_ttl_ms`) lapsing if the process dies.
"""

from __future__ import annotations

import threading

import berth

from ._turns import _Turns
from ._view import _View


#: How long a dead process's run keeps its place (and its open turn unrepaired).
RUN_LEASE_TTL_MS_DEFAULT = 30_000


class _Binding:
    """One client's hold on the session: its berth run, the heartbeat, its turns."""

    def __init__(self, client: berth.Client) -> None:
        self.client = client
        self.lock = threading.Lock()
        self.run_id: str | None = None
        self.lost: BaseException | None = None
        self.stop = threading.Event()
        self.heartbeat: threading.Thread | None = None
        self.turns = _Turns()
        self.view: _View | None = None
        self.view_lock = threading.Lock()

    def joined(self) -> bool:
        """Attached and not displaced: writes and reads need no `_join` first."""
        return self.run_id is not None and self.lost is None

    def take_view(self) -> _View | None:
        """The view, now this caller's alone (worker threads share a binding)."""
        with self.view_lock:
            view, self.view = self.view, None
            return view

    def keep_view(self, view: _View) -> None:
        # Any view kept describes a prefix of the log; the next read checks and extends it.
        with self.view_lock:
            self.view = view


def _beat(client: berth.Client, berth_id: str, binding: _Binding, interval_s: float) -> None:
    # Only the binding and the client are referenced here, never the BerthSession, so an
    # unreachable session is collected (and its finalizer detaches the run).
    run_id = binding.run_id
    assert run_id is not None
    while not binding.stop.wait(interval_s):
        try:
            client.heartbeat(berth_id, run_id)
        except (berth.OwnershipLost, berth.NotFound, berth.Terminal) as error:
            binding.lost = error
            return
        except (berth.BerthError, OSError):
            continue  # transient (the client already retried): the next beat tries again


def _release(bindings: dict[int, _Binding], berth_id: str) -> None:
    for binding in list(bindings.values()):
        # After an attach in flight (`_join` holds the lock through it), so its run is
        # released too.
        with binding.lock:
            binding.stop.set()
            run_id, binding.run_id = binding.run_id, None
        if run_id is not None and binding.lost is None:
            try:
                binding.client.detach(berth_id, run_id, outcome="completed")
            except (berth.BerthError, OSError):
                pass  # gone already, or unreachable: the run's lease lapses on its own
    bindings.clear()
