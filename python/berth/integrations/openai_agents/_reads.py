"""A `BerthSession`'s reads and pops (`_Reads`, mixed into `BerthSession`): the latest
items read backwards page by page (the page before fetched ahead on a worker thread),
or answered from the kept view (`_view`) once a probe of the log's end shows it still
holds; and a pop's claim."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import berth
from berth import _calls as calls
from berth.integrations._ahead import ahead
from berth.integrations._ahead import pool as read_ahead_pool

from ._binding import _Binding, _lapsing
from ._records import CLEAR_TYPE, POP_TYPE, _stored_item, _stores_item
from ._repair import _presented_item
from ._turns import TURN_END, TURN_START
from ._view import POP_VIEW_ITEMS, PROBE_EVENTS, _dumps, _Unmade, _View


def _fetch_before(client: berth.Client, session_id: str, before: int, limit: int) -> calls.Answer:
    """`client.read_before`'s answer, not decoded yet (`calls.decode_page`): its raw
    bytes are what `_View` keeps."""
    call = calls.read(session_id, before=before, limit=limit)
    return client._execute(call.undecoded())


class _Reads:
    """Reading and popping, for `BerthSession` (`berth_id`, `exclusive`, `_join`, `_look`,
    `_append`).

    A parallel object reads without a run of its own (attaching is for writing): its
    first read checks the catalog record (the mode; a run whose lease lapsed), and the
    newest page it reads (a run whose newest turn marker is not a `turn/end`); either
    sign that a turn may be open attaches it first, by `resume`, so a turn a dead object
    left open is repaired before this object answers, as when every object attached on
    its first read. An exclusive object attaches on its first read: holding the session
    is what it is for."""

    berth_id: str
    exclusive: bool
    _probe_call: calls.Call[calls.Answer]

    def _collect(
        self, binding: _Binding, limit: int | None, open_turns: list[bool] | None = None
    ) -> tuple[list[tuple[int, Any]], int]:
        """The latest `limit` live items as (seq, item), oldest first, and the log's end,
        read backwards page by page (pops are markers after their targets, so reading
        backwards meets a pop before the item it removes). Leaves what it read as the
        binding's view, for the next `get_items`. The collector is paused meanwhile: a
        whole session's items are made and held at once (`calls.collector_paused`)."""
        with calls.collector_paused():
            found, kept, end, last_key, complete = self._read_back(binding, limit, open_turns)
        binding.keep_view(_View(end, last_key, kept, complete))
        return found, end

    def _read_back(
        self, binding: _Binding, limit: int | None, open_turns: list[bool] | None = None
    ) -> tuple[list[tuple[int, Any]], list[tuple[int, str | _Unmade]], int, str | None, bool]:
        """The items as `_collect` says, what the view keeps of each (its text, or where
        it is in its page's raw answer), the log's end, its last key, and `complete`."""
        popped: set[int] = set()
        repaired_calls: set[str] = set()
        turn_seen = False  # the newest turn marker met (this object's next turn follows it)
        # Calls presented from in-flight records (a repair answered them), by where they
        # are in `found`: a call whose item was stored earlier (the model's request, before
        # the user approved it) is presented once, as that item.
        presented: dict[str, int] = {}
        found: list[tuple[int, Any]] = []
        kept: list[tuple[int, str | _Unmade]] = []
        # The first page is twice the items asked for and a little slack (turn and step
        # markers are about as many as a run's items; pops and clears are rare); each
        # further page doubles (berth's read cost grows with the events returned).
        page_size = 1000 if limit is None else min(1000, 2 * limit + 8)
        before = berth.SEQ_END
        end: int | None = None
        last_key: str | None = None
        client = binding.client

        # A whole read fetches the page before this one on a worker thread while this
        # thread decodes and walks this one. Its end is this page's first seq: known now
        # after the first page (seqs are contiguous, so a read of `page_size` before
        # `before` starts at `before - page_size`), once decoded for the first. A
        # prediction the page does not bear out is dropped and the page read again.
        def read_ahead(end: int, size: int) -> tuple[int, Callable[[], calls.Answer]] | None:
            if limit is not None or end == 0:
                return None
            return end, ahead(read_ahead_pool(), _fetch_before, client, self.berth_id, end, size)

        answer = _fetch_before(client, self.berth_id, before, page_size)
        while True:
            next_size = min(1000, page_size * 2)
            predicted = None if before == berth.SEQ_END else max(0, before - page_size)
            upcoming = None if predicted is None else read_ahead(predicted, next_size)
            # The page's events as decoded JSON, not `berth.Event`s: the walk reads only
            # their seq, type and data.
            raw, body = answer.json(), answer.body
            events = raw["events"]
            if predicted is None:
                upcoming = read_ahead(raw["first_seq"], next_size)
            if end is None:
                end = raw["next_seq"]
                last_key = events[-1].get("idempotency_key") if events else None
                if open_turns is not None:
                    open_turns.append(_open_turn_seen(events))
            for position in range(len(events) - 1, -1, -1):
                wire = events[position]
                seq, event_type, data = wire["seq"], wire["type"], wire.get("data")
                if event_type == CLEAR_TYPE:
                    found.reverse()
                    kept.reverse()
                    return found, kept, end, last_key, True
                if event_type == POP_TYPE:
                    if isinstance(data, dict) and isinstance(data.get("target"), int):
                        popped.add(data["target"])
                    continue
                if not turn_seen and (event_type == TURN_END or event_type == TURN_START) and isinstance(data, dict):
                    turn_seen = True
                    binding.turns.saw(data.get("turn"))
                stored = isinstance(data, dict) and _stores_item(event_type, data)
                item = _stored_item(data) if stored else _presented_item(event_type, data, repaired_calls)
                if item is None or seq in popped:
                    continue
                if presented and stored and _drops_presented(item, presented, found, kept):
                    pass  # the call's own item, older: the one presented for it is dropped
                elif not stored and item.get("type") == "function_call":
                    presented[item["call_id"]] = len(found)
                found.append((seq, item))
                # A stored item is made text later, from the raw answer; a presented one
                # (a repair's call or output) is made here.
                kept.append((seq, (body, position) if stored else _dumps(item)))
                if limit is not None and len(found) >= limit:
                    found.reverse()
                    kept.reverse()
                    return found, kept, end, last_key, False
            if raw["first_seq"] == 0 or not events:
                found.reverse()
                kept.reverse()
                return found, kept, end, last_key, True
            before = raw["first_seq"]
            page_size = next_size
            if upcoming is not None and upcoming[0] == before:
                answer = upcoming[1]()
            else:
                answer = _fetch_before(client, self.berth_id, before, page_size)

    def _probe(self) -> calls.Call[calls.Answer]:
        """The read a kept view is checked with: the log's newest `PROBE_EVENTS` events,
        answered undecoded (the check reads a few fields of each; `berth.Event`s would
        cost more than the check). Made once, with the object (`_make_probe`): every
        `get_items` sends it."""
        return self._probe_call

    def _make_probe(self) -> None:
        self._probe_call = calls.read(self.berth_id, before=berth.SEQ_END, limit=PROBE_EVENTS).undecoded()

    @staticmethod
    def _answer_from_view(binding: _Binding, view: _View, probe: calls.Answer, limit: int | None) -> list[Any] | None:
        """The latest `limit` items from `view`, kept again, if the probe shows it still
        describes the log; None when it does not (the view is dropped)."""
        if _Reads._view_matches(view, probe) and view.covers(limit):
            with calls.collector_paused():
                texts = view.texts(limit)
                binding.keep_view(view)
                # One parse of them all: per call, `json.loads` costs as much as the text.
                return json.loads(f"[{','.join(texts)}]")  # type: ignore[no-any-return]
        return None

    @staticmethod
    def _view_matches(view: _View, probe: calls.Answer) -> bool:
        """True when the view still describes the log whose newest events the probe's
        answer holds: it ends with the event the view saw last, or with at most a few
        events after it, folded in now."""
        page = probe.json()
        next_seq, events = page["next_seq"], page["events"]
        if next_seq < view.end:
            return False  # shorter: deleted and made again
        if view.end > 0:
            seen = [event for event in events if event["seq"] == view.end - 1]
            key = seen[0].get("idempotency_key") if seen else None
            if key is None or key != view.last_key:
                return False  # more new events than the probe holds, or another log
        elif next_seq > len(events):
            return False
        return view.fold([event for event in events if event["seq"] >= view.end])

    def _get_items(self, binding: _Binding, limit: int | None) -> list[Any]:
        if binding.joined() or self.exclusive or binding.lost is not None:
            if not self._join(binding, create=False):
                return []
        elif binding.view is None:
            # A parallel object's first read: no run unless a turn may be open.
            session = self._look(binding, create=False)
            if session is None:
                return []
            if _lapsing(session):
                if not self._join(binding, create=False):
                    return []
            else:
                open_turns: list[bool] = []
                items, _ = self._collect(binding, limit, open_turns)
                if not any(open_turns):
                    return [item for _, item in items]
                if not self._join(binding, create=False):
                    return []
                if binding.repaired == 0:
                    return [item for _, item in items]  # the resume appended nothing
                binding.take_view()  # the closers follow what was read: read again
        view = binding.take_view()
        # A view too short for the answer is not checked: a backward read is needed anyway.
        if view is not None and view.covers(limit):
            answer = self._answer_from_view(binding, view, binding.client._execute(self._probe()), limit)
            if answer is not None:
                return answer
        items, _ = self._collect(binding, limit)
        return [item for _, item in items]

    def _pop_item(self, binding: _Binding) -> Any | None:
        if not self._join(binding, create=False):
            return None
        while True:
            taken = self._pop_from_view(binding)
            if taken is not None:
                return taken[0]
            # A backward read, which leaves up to `POP_VIEW_ITEMS` items as the view: the
            # pops after this one claim from it, each after the probe, instead of reading
            # back past every pop before them (their markers and the items they took).
            items, end = self._collect(binding, POP_VIEW_ITEMS)
            if not items:
                return None
            target, item = items[-1]
            if self._claim(binding, target, end):
                # The view `_collect` left ends before the claim: the next read folds it in.
                return item
            binding.take_view()  # someone appended (perhaps popped) first: read again

    def _pop_from_view(self, binding: _Binding) -> tuple[Any | None] | None:
        """Pops from the view this object kept, if the probe shows it still describes the
        log: `(item,)`, or `(None,)` when the view holds every item and there are none;
        None when a backward read must decide (no view, one too short, a claim lost)."""
        view = binding.take_view()
        if view is None or not view.covers(1):
            return None
        if not self._view_matches(view, binding.client._execute(self._probe())) or not view.covers(1):
            return None
        if not view.items:
            binding.keep_view(view)
            return (None,)
        target = view.items[-1][0]
        # The newest items made text together: each page they are in parsed once for all
        # of them, not once a pop.
        text = view.texts(POP_VIEW_ITEMS)[-1]
        if not self._claim(binding, target, view.end):
            return None
        binding.keep_view(view)  # ends before the claim: the next read folds it in
        return (json.loads(text),)

    def _claim(self, binding: _Binding, target: int, end: int) -> bool:
        """Appends the pop of the item at seq `target` if the log still ends at `end`;
        False when someone appended first."""
        # The nonce makes the claim this caller's own: berth answers an identical batch
        # at the same seq as a duplicate, whoever sent it.
        claim = uuid.uuid4().hex
        marker = {"type": POP_TYPE, "data": {"target": target, "claim": claim}, "ignorable": True}
        try:
            self._append(binding, [marker], expected_seq=end, idempotency_key=f"openai-pop-{claim}")
        except berth.SeqConflict:
            return False
        return True


def _open_turn_seen(events: list[dict[str, Any]]) -> bool:
    """Whether some run's newest event in `events` (wire dicts, ascending; pops and
    clears aside) is not a `turn/end`: its turn may be open. (Conservative: a run whose
    events carry no turn markers at all counts as open.)"""
    decided: set[Any] = set()
    for position in range(len(events) - 1, -1, -1):
        wire = events[position]
        run = wire.get("run")
        if run in decided:
            continue
        event_type = wire["type"]
        if event_type == POP_TYPE or event_type == CLEAR_TYPE:
            continue
        if event_type != TURN_END:
            return True
        decided.add(run)
    return False


def _drops_presented(item: Any, presented: dict[str, int], found: list[Any], kept: list[Any]) -> bool:
    """Drops the call presented for `item`'s call id, if `item` is that call's own stored
    `function_call` (met after it, reading backwards); True when one was dropped."""
    if not isinstance(item, dict) or item.get("type") != "function_call":
        return False
    index = presented.pop(item.get("call_id"), None)  # type: ignore[arg-type]
    if index is None:
        return False
    del found[index]
    del kept[index]
    for call_id, later in presented.items():
        if later > index:
            presented[call_id] = later - 1
    return True
