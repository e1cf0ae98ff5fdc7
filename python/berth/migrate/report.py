"""What a run did: counts, the records it skipped and why, a progress line on stderr
(rate and ETA), and the final report (text, or JSON with `--json`)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO


@dataclass
class Report:
    """One run's outcome. `sessions`: source sessions (OpenAI) or threads (LangGraph)
    seen; `imported`/`unchanged`: how many of them got new records / had none to take;
    `records`: items or checkpoints written; `writes`: LangGraph pending-write groups
    written; `skipped`: records not written, each with its reason; `changed`: sessions
    whose source changed since the last run (or whose target already differs), left as
    they are."""

    direction: str  # "import" or "export"
    source: str
    target: str
    dry_run: bool = False
    unit: str = "items"
    sessions: int = 0
    imported: int = 0
    unchanged: int = 0
    records: int = 0
    records_unchanged: int = 0
    writes: int = 0
    bytes: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)
    changed: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    progress: TextIO | None = None
    total: int | None = None
    #: With `--user-map`: sessions per berth user they were (or would be) imported under.
    users: dict[str, int] | None = None
    _last_line: float = 0.0

    def skip(self, session: str, record: Any, reason: str) -> None:
        self.skipped.append({"session": session, "record": record, "reason": reason})

    def owned(self, user: str) -> None:
        """One more session imported under `user` (`--user-map`)."""
        if self.users is not None:
            self.users[user] = self.users.get(user, 0) + 1

    def change(self, session: str, record: Any, reason: str) -> None:
        self.changed.append({"session": session, "record": record, "reason": reason})

    def tick(self, force: bool = False) -> None:
        """The progress line (at most ten a second): sessions done, records, rate, ETA."""
        if self.progress is None:
            return
        now = time.monotonic()
        if not force and now - self._last_line < 0.1:
            return
        self._last_line = now
        elapsed = max(now - self.started, 1e-6)
        rate = self.records / elapsed
        line = f"\r{self.direction}: {self.sessions}"
        if self.total:
            done = self.sessions / self.total
            eta = elapsed / done - elapsed if done else 0.0
            line += f"/{self.total} sessions ({done:.0%}), ETA {eta:.0f}s"
        else:
            line += " sessions"
        line += f", {self.records} {self.unit} ({rate:.0f}/s)"
        self.progress.write(line)
        self.progress.flush()
        if force:
            self.progress.write("\n")

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "direction": self.direction,
            "source": self.source,
            "target": self.target,
            "dry_run": self.dry_run,
            "sessions": self.sessions,
            "sessions_imported": self.imported,
            "sessions_unchanged": self.unchanged,
            self.unit: self.records,
            f"{self.unit}_unchanged": self.records_unchanged,
            "pending_write_groups": self.writes,
            "bytes": self.bytes,
            "skipped": self.skipped,
            "changed": self.changed,
            "seconds": round(time.monotonic() - self.started, 3),
        }
        if self.users is not None:
            out["users"] = dict(sorted(self.users.items()))
        return out

    @property
    def clean(self) -> bool:
        """Nothing skipped and nothing changed: the target holds everything."""
        return not self.skipped and not self.changed

    def write_text(self, out: TextIO | None = None) -> None:
        out = out if out is not None else sys.stdout
        data = self.as_dict()
        verb = "would write" if self.dry_run else "wrote"
        out.write(
            f"berth-migrate {self.direction} {self.source} -> {self.target}: {data['sessions']} sessions "
            f"({self.imported} with new records, {self.unchanged} unchanged); {verb} {self.records} {self.unit}"
            + (f" and {self.writes} pending-write groups" if self.unit == "checkpoints" else "")
            + f" ({self.bytes} bytes), {self.records_unchanged} already there, in {data['seconds']}s\n"
        )
        if self.users is not None:
            out.write("  users: " + (", ".join(f"{user} {count}" for user, count in sorted(self.users.items()))
                                     or "none") + "\n")
        for entry in self.changed:
            out.write(f"  changed: {entry['session']} {entry['record']}: {entry['reason']}\n")
        for entry in self.skipped:
            out.write(f"  skipped: {entry['session']} {entry['record']}: {entry['reason']}\n")
