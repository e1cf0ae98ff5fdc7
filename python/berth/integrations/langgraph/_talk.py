"""What a thread's log says of its conversation (`_Talk`): the vocabulary events the
saver wrote beside its `lg/*` record, folded as the saver folds the rest (`_Thread`).

The saver writes each message once (by its LangChain id), numbers turns 0, 1, 2 per
thread, and records a tool call's start once per turn; it decides all three from this
state, which is the log's (its own appends folded in), so a saver in a new process
continues where the last one stopped. Never read back for LangGraph: its channels are
the `lg/*` record's.
"""

from __future__ import annotations

from typing import Any


#: The vocabulary types `_Talk` folds (others are not its concern).
TALK_TYPES = frozenset([
    "turn/start", "turn/end", "step/start", "step/end", "user/message", "system/message",
    "assistant/message", "tool/call", "tool/result",
])
#: berth's repair codes: a `tool/result` a resume wrote for a call left in flight.
REPAIR_CODES = frozenset(["TOOL_OUTCOME_UNKNOWN", "TOOL_NOT_STARTED"])


class _Talk:
    """The conversation state of a thread's log, folded event by event."""

    __slots__ = ("turn", "next_turn", "step", "epoch", "messages", "requested", "calls", "results", "repaired")

    def __init__(self) -> None:
        #: The open turn's number (None: no turn is open).
        self.turn: int | None = None
        #: The number the next turn gets: one past the largest seen.
        self.next_turn = 0
        #: The open step's number within the open turn (None: none).
        self.step: int | None = None
        #: Counts turn boundaries (each `turn/start` and `turn/end`): a tool call recorded
        #: at the current epoch was recorded in the turn still open, none ending since.
        self.epoch = 0
        #: The LangChain ids of the messages recorded.
        self.messages: set[str] = set()
        #: call id -> (name, arguments): calls an assistant message requested, no result yet.
        self.requested: dict[str, tuple[str, Any]] = {}
        #: call id -> (run, epoch) of its latest `tool/call` since it was requested (a tool started).
        self.calls: dict[str, tuple[str | None, int]] = {}
        #: call ids with a `tool/result` since they were requested.
        self.results: set[str] = set()
        #: call id -> the data of a repair's `tool/result` (berth's resume closed the call).
        self.repaired: dict[str, dict[str, Any]] = {}

    def apply(self, kind: str, data: Any, run: str | None) -> None:
        if not isinstance(data, dict):
            return
        if kind == "turn/start":
            turn = data.get("turn")
            if isinstance(turn, int):
                self.turn, self.step = turn, None
                self.next_turn = max(self.next_turn, turn + 1)
                self.epoch += 1
        elif kind == "turn/end":
            if self.turn is not None and data.get("turn") == self.turn:
                self.turn = self.step = None
                self.epoch += 1
        elif kind == "step/start":
            step = data.get("step")
            if self.turn is not None and isinstance(step, int):
                self.step = step
        elif kind == "step/end":
            if data.get("step") == self.step:
                self.step = None
        elif kind == "tool/call":
            call_id = data.get("call_id")
            if isinstance(call_id, str):
                self.calls[call_id] = (run, self.epoch)
        elif kind == "tool/result":
            call_id = data.get("call_id")
            if isinstance(call_id, str):
                self.results.add(call_id)
                self.requested.pop(call_id, None)
                error = data.get("error")
                if isinstance(error, dict) and error.get("code") in REPAIR_CODES:
                    self.repaired[call_id] = data
            self._message(data)
        else:  # user/, system/, assistant/message
            self._message(data)
            if kind == "assistant/message":
                for call in data.get("tool_calls") or ():
                    if isinstance(call, dict) and isinstance(call.get("call_id"), str):
                        # A new request: what an earlier call of the same id did is not its
                        # (models, and scripted ones most, may reuse ids).
                        call_id = call["call_id"]
                        self.requested[call_id] = (str(call.get("name") or "tool"), call.get("arguments"))
                        self.calls.pop(call_id, None)
                        self.results.discard(call_id)
                        self.repaired.pop(call_id, None)

    def _message(self, data: dict[str, Any]) -> None:
        message_id = data.get("message_id")
        if isinstance(message_id, str):
            self.messages.add(message_id)

    def in_doubt(self, call_id: str, run_id: str) -> dict[str, Any] | None:
        """Whether a tool call must not run again, and why: the data of the repair's
        `tool/result` when berth's resume closed it; `{}` when another run recorded its
        start in the turn still open and no result since (that process died while the
        tool ran: its outcome is unknown); None when the tool may run."""
        repaired = self.repaired.get(call_id)
        if repaired is not None:
            return repaired
        record = self.calls.get(call_id)
        if record is None or call_id in self.results:
            return None
        run, epoch = record
        if run != run_id and epoch == self.epoch and self.turn is not None:
            return {}
        return None

    def recorded_here(self, call_id: str) -> bool:
        """A `tool/call` of this call in the turn still open (a retry need not record it again)."""
        record = self.calls.get(call_id)
        return record is not None and record[1] == self.epoch and self.turn is not None
