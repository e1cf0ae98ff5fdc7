"""The berth run a `BerthAgentLog` holds its session with, and its heartbeat: a second
process gets `berth.Busy`; a crashed holder's run is ended when its lease lapses
(`run_lease_ttl_ms`), and the next `attach` takes over. Referenced by the log's
finalizer, never the log itself."""

from __future__ import annotations

import threading

import berth


class Hold:
    """The run this log holds and its heartbeat (referenced by the finalizer, never the log)."""

    def __init__(self, client: berth.Client, session_id: str) -> None:
        self.client = client
        self.session_id = session_id
        self.run_id: str | None = None
        self.lost: BaseException | None = None
        self.stop = threading.Event()

    def beat(self, interval_s: float) -> None:
        run_id = self.run_id
        while not self.stop.wait(interval_s):
            try:
                self.client.heartbeat(self.session_id, run_id)  # type: ignore[arg-type]
            except (berth.OwnershipLost, berth.NotFound, berth.Terminal) as error:
                self.lost = error
                return
            except (berth.BerthError, OSError):
                continue  # transient: the next beat tries again

    def release(self) -> None:
        self.stop.set()
        run_id, self.run_id = self.run_id, None
        if run_id is not None and self.lost is None:
            try:
                self.client.detach(self.session_id, run_id, outcome="completed")
            except (berth.BerthError, OSError):
                pass  # gone already: the lease lapses on its own
