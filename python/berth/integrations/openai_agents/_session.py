"""`BerthSession`: the SDK's `Session` protocol, its lifecycle and its writes (the
reads and pops are `_Reads`')."""

from __future__ import annotations

import functools
import random
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any

from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit

import berth
from berth import _calls as calls

from .._runpool import chain_after_resume
from ._binding import _POOL, KIND, RUN_LEASE_TTL_MS_DEFAULT, _beat, _Binding, _release, _Release
from ._errors import SessionClosed, SessionModeMismatch
from ._hooks import BerthRunHooks
from ._reads import _Reads
from ._records import (
    ACTIVITY_TTL_MS_FOREVER,
    CLEAR_TYPE,
    LABEL,
    decode_session_id,
    encode_session_id,
    event_for_item,
)
from ._view import _dumps
from ._workers import _on_worker


class BerthSession(_Reads):
    """The SDK's `Session` protocol on berth. See the package's docstring.

    - `client`: a `berth.Client` (HTTP or embedded); or `url=` / `api_key=` to make one
      (closed with the session).
    - `exclusive=True`: single-writer mode. The session is created `serial`, attached
      with `on_busy="reject"`, so a second object or process gets `berth.Busy`, and a
      displaced holder `berth.OwnershipLost`. Default: `parallel` (up to `runs_max`
      objects write at once, as the SDK allows). The mode is fixed when the berth session
      is created; opening it in the other mode raises `SessionModeMismatch`.
    - `run_lease_ttl_ms`: the run lease; a crashed process's open turn is repaired by the
      next object that attaches after it lapsed (the worst-case wait).
    - `client_for_context`: `wrapper -> berth.Client`, to pick the tenant's key from the
      run context (the SDK passes `wrapper=` to sessions whose four methods take it).
      Return one long-lived client per tenant: the object holds a run per client.
    - `id_prefix`: prepended to `session_id` before encoding (to share one tenant).
    """

    session_id: str
    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        client: berth.Client | None = None,
        *,
        url: str | None = None,
        api_key: str | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        exclusive: bool = False,
        runs_max: int = 64,
        run_lease_ttl_ms: int = RUN_LEASE_TTL_MS_DEFAULT,
        activity_ttl_ms: int = ACTIVITY_TTL_MS_FOREVER,
        labels: list[str] | None = None,
        id_prefix: str = "",
        client_for_context: Callable[[Any], berth.Client] | None = None,
    ) -> None:
        if not isinstance(session_id, str):
            raise TypeError(f"session_id must be a str, not {type(session_id).__name__}")
        if isinstance(client, berth.AsyncClient):
            raise TypeError("BerthSession takes a berth.Client (its calls run on worker threads), not an AsyncClient")
        self.session_id = session_id
        self.session_settings = (
            coerce_session_settings(session_settings) if session_settings is not None else SessionSettings()
        )
        self._owns_client = client is None
        self._client = client if client is not None else berth.Client(url, api_key=api_key)
        self.exclusive = exclusive
        self.berth_id = encode_session_id(id_prefix + session_id)
        self._make_probe()
        concurrency = {"mode": "serial"} if exclusive else {"mode": "parallel", "runs_max": runs_max}
        self._policy = {
            "concurrency": concurrency,
            "activity_ttl_ms": activity_ttl_ms,
            "run_lease_ttl_ms": run_lease_ttl_ms,
        }
        self._labels = [LABEL, *(calls.listed("labels", labels) if labels is not None else [])]
        self._heartbeat_s = max(0.05, run_lease_ttl_ms / 3000)
        self._client_for_context = client_for_context
        self._bindings: dict[int, _Binding] = {}
        self._bindings_lock = threading.Lock()
        self._release_how = _Release(self._heartbeat_s, not exclusive and client is not None)
        self._finalizer = weakref.finalize(self, _release, self._bindings, self.berth_id, self._release_how)
        self._closed = False

    # -- the protocol ---------------------------------------------------------------

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[Any]:
        """The latest `limit` live items (all when None), oldest first."""
        self._check_open()
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit <= 0:
            return []
        binding = self._binding(wrapper)
        if binding.joined() or (not self.exclusive and binding.lost is None and binding.view is not None):
            # The common case, on the loop: the view this object keeps, checked against
            # the log's newest events (one read). (A parallel object reads without a run.)
            view = binding.take_view()
            if view is not None and view.covers(limit):
                probe = await binding.client._aexecute(self._probe())
                answer = self._answer_from_view(binding, view, probe, limit)
                if answer is not None:
                    return answer
        return await _on_worker(self._get_items, binding, limit)

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        """Appends `items` as one atomic, durable batch."""
        self._check_open()  # before the empty batch's shortcut, as `SQLiteSession` checks
        if not items:
            return
        binding = self._binding(wrapper)
        if not binding.joined():
            await _on_worker(self._join, binding, True)
        items = list(items)
        events = [event_for_item(item) for item in items]
        # The turn and step markers ride in this batch (`_turns`).
        before, after, token = binding.turns.plan_items(items, events)
        batch = [*before, *events, *after] if before or after else events
        key = uuid.uuid4().hex
        view = binding.take_view()
        try:
            outcome = await self._aappend(binding, batch, idempotency_key=key)
        except BaseException:
            binding.turns.rollback(token)
            raise
        if view is not None and not outcome.duplicate and outcome.first_seq == view.end:
            # Nobody appended in between: the view extends by what was just stored.
            first = outcome.first_seq + len(before)
            view.items.extend((first + index, _dumps(item)) for index, item in enumerate(items))
            view.end, view.last_key = outcome.next_seq, key
            binding.keep_view(view)

    async def continue_from(self, source_session_id: str) -> list[dict[str, Any]]:
        """Continues berth session `source_session_id` — a conversation any drop-in wrote
        (its berth id, as `berth sessions ls` lists it) — in this session, which must not
        exist yet: forks the source at 0 into this session's berth session (its header
        names the source; this object's title, labels and policy), then adds the source's
        conversation as SDK items (`berth.history.openai.items_of`). The source is only
        read. Returns the items added."""
        from ...history import conversation
        from ...history.openai import items_of

        self._check_open()
        client = self._binding(None).client
        items = items_of(await _on_worker(conversation, client, source_session_id))
        await _on_worker(functools.partial(client.fork_session, source_session_id, upto_seq=0, **self.fork_target()))
        await self.add_items(items)
        return items

    def fork_target(self) -> dict[str, Any]:
        """What a fork this object adopts takes (`Client.fork_session`'s keyword arguments
        besides the cut): this session's berth id, title, labels and policy."""
        return {"new_id": self.berth_id, "title": self.session_id, "labels": self._labels,
                "policy": self._policy}

    async def pop_item(self, *, wrapper: Any = None) -> Any | None:
        """Removes and returns the latest live item (None when there is none); racing
        callers, in any process, each get a different item."""
        binding = self._binding(wrapper)
        return await _on_worker(self._pop_item, binding)

    async def clear_session(self, *, wrapper: Any = None) -> None:
        """Removes every item (a marker: the log and its audit trail stay)."""
        binding = self._binding(wrapper)
        await _on_worker(self._clear, binding)

    # -- beyond the protocol --------------------------------------------------------

    def run_hooks(self, *, run_config: Any = None) -> BerthRunHooks:
        """Run hooks that end each run's turn exactly at its final output, record each
        tool's start durably before the tool runs, and record each model call as a
        `model/call` event in the appends the session makes anyway
        (`Runner.run(agent, input, session=session, hooks=session.run_hooks())`).
        `run_config`: the run's `RunConfig`, when it names the model (`RunConfig(model=…)`
        overrides the agent's, and run hooks are not told)."""
        return BerthRunHooks(self, run_config)

    async def delete(self, *, wrapper: Any = None) -> None:
        """Deletes the berth session, reclaiming its storage (history and markers)."""
        binding = self._binding(wrapper)
        await _on_worker(self._delete, binding)

    @staticmethod
    def list_session_ids(client: berth.Client, **filters: Any) -> list[str]:
        """The SDK session ids of the tenant's `openai-agents` sessions (from titles)."""
        ids = []
        for session in client.iter_sessions(label=LABEL, include_blank=True, **filters):
            ids.append(session.title if session.title is not None else (decode_session_id(session.id) or session.id))
        return ids

    def close(self) -> None:
        """Detaches this object's runs and stops their heartbeats (idempotent). Every
        later call raises `SessionClosed`, as `SQLiteSession`'s do after its `close()`."""
        self._closed = True
        # A parallel object's run, its turns all closed, may go to the next object of this
        # process on the same session and client (`_binding`); an exclusive one's is
        # released for the other processes.
        self._release_how.hand_on = self._release_how.may_hand_on
        self._finalizer()
        if self._owns_client:
            self._client.close()

    async def aclose(self) -> None:
        await _on_worker(self.close)

    def __enter__(self) -> BerthSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> BerthSession:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- internals (run on worker threads) ------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosed()

    def _binding(self, wrapper: Any) -> _Binding:
        self._check_open()
        client = self._client
        if wrapper is not None and self._client_for_context is not None:
            client = self._client_for_context(wrapper)
        with self._bindings_lock:
            binding = self._bindings.get(id(client))
            if binding is None:
                binding = self._bindings[id(client)] = _Binding(client)
            return binding

    def _look(self, binding: _Binding, create: bool) -> berth.Session | None:
        """The session's catalog record (read again unless the binding read it just now),
        created if missing and `create`; None when missing. Checks its mode."""
        client = binding.client
        session = binding.fresh_seen()
        if session is None:
            try:
                session = client.get_session(self.berth_id)
            except berth.NotFound:
                if not create:
                    return None
                try:
                    session = client.create_session(
                        self.berth_id, title=self.session_id, labels=self._labels, policy=self._policy
                    )
                except berth.AlreadyExists:
                    session = client.get_session(self.berth_id)
            binding.seen = (session, time.monotonic())
        mode = (session.header.policy.concurrency or {}).get("mode", "serial")
        wanted = self._policy["concurrency"]["mode"]
        if mode != wanted:
            raise SessionModeMismatch(
                f"session {self.session_id!r} was created {mode!r}; this BerthSession is "
                f"{'exclusive (serial)' if self.exclusive else 'parallel'}: open it with exclusive={mode == 'serial'}"
            )
        return session

    def _join(self, binding: _Binding, create: bool) -> bool:
        """Attaches this object's run (creating the session if `create`); False when the
        session does not exist and was not created. Attaching is a `resume`: turns left
        open by runs that are gone are closed before this object writes (or reads, when it
        must: `_Reads`). A parallel object takes an idle run this process's objects
        released instead, when the catalog shows nothing changed since that run's resume
        (`_binding`)."""
        with binding.lock:
            self._check_open()  # closed while this call waited: attach nothing
            if binding.lost is not None:
                raise binding.lost
            if binding.run_id is not None:
                return True
            client = binding.client
            session = self._look(binding, create)
            if session is None:
                return False
            binding.repaired = 0
            pooled = None
            if self._release_how.may_hand_on:
                pooled = _POOL.take(KIND, client, self.berth_id, session, lambda: self._log_end(binding))
            binding.seen = None  # attaching changes the record
            if pooled is not None:
                binding.turns.saw(pooled.carried - 1)
                binding.run_id = pooled.run_id
                binding.chain, binding.lease_from = pooled.chain, pooled.lease_from
            else:
                started = time.monotonic()
                outcome = self._resume(client)
                for closer in outcome.repaired:  # turns the repair ended: the next one follows
                    if closer.type == "turn/end" and isinstance(closer.data, dict):
                        binding.turns.saw(closer.data.get("turn"))
                binding.repaired = len(outcome.repaired)
                binding.run_id = outcome.attachment.run_id
                binding.lease_from = started
                binding.chain = None
                if self._release_how.may_hand_on:
                    # The run may be handed on if no other run is attached and nothing
                    # changed since the resume (`_runpool`).
                    binding.chain = chain_after_resume(client, self.berth_id, outcome)
            binding.stop = threading.Event()  # a fresh one: the last run's heartbeat may still be stopping
            binding.stop.clear()
            binding.heartbeat = threading.Thread(
                target=_beat,
                args=(client, self.berth_id, binding, self._heartbeat_s),
                name=f"berth-heartbeat-{self.berth_id}",
                daemon=True,
            )
            binding.heartbeat.start()
            return True

    def _resume(self, client: berth.Client) -> berth.ResumeOutcome:
        """`resume`, waiting out another process's write handle on an embedded store (the
        client waits so for appends; a resume that found the log busy detached its run
        again, so it is safe to repeat). A `Busy` from the concurrency policy — another
        object holds an exclusive session — is raised at once."""
        wait_s = getattr(getattr(client, "_transport", None), "busy_wait_s", 10.0)
        deadline = time.monotonic() + wait_s
        delay = 0.02
        while True:
            try:
                return client.resume(self.berth_id, on_busy="reject")
            except berth.WriterBusy:
                # Another process's write handle (`writer_busy`); the policy's refusal is
                # a plain `Busy` and is raised at once.
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay * (0.5 + random.random()))
                delay = min(0.5, delay * 2)

    def _log_end(self, binding: _Binding) -> int:
        """Where the log ends: from the read this object made just now, else a probe."""
        view = binding.view
        if view is not None and binding.fresh_seen() is not None:
            return view.end
        return binding.client._execute(calls.read(self.berth_id, before=berth.SEQ_END, limit=1)).next_seq

    def _run_id(self, binding: _Binding) -> str | None:
        """The binding's run for a write; `SessionClosed` when `close()` released it after
        this call attached (the write would go out with no run)."""
        run_id = binding.run_id
        if run_id is None:
            self._check_open()
        return run_id

    def _append(self, binding: _Binding, events: list[dict[str, Any]], **options: Any) -> berth.AppendOutcome:
        try:
            outcome = binding.client.append(self.berth_id, events, run=self._run_id(binding), **options)
        except berth.OwnershipLost as error:
            binding.lost = error
            raise
        binding.appended(outcome)
        return outcome

    async def _aappend(self, binding: _Binding, events: list[dict[str, Any]], **options: Any) -> berth.AppendOutcome:
        try:
            call = calls.append(self.berth_id, events, run=self._run_id(binding), **options)
            outcome = await binding.client._aexecute(call)
        except berth.OwnershipLost as error:
            binding.lost = error
            raise
        binding.appended(outcome)
        return outcome

    def _clear(self, binding: _Binding) -> None:
        if not self._join(binding, create=False):
            return
        claim = uuid.uuid4().hex
        closing, token = binding.turns.plan_clear()  # an open turn ends before the marker
        try:
            self._append(binding, [*closing, {"type": CLEAR_TYPE, "data": {"claim": claim}, "ignorable": True}])
        except BaseException:
            binding.turns.rollback(token)
            raise

    def _delete(self, binding: _Binding) -> None:
        self._finalizer()
        _POOL.drop(KIND, binding.client, self.berth_id)
        binding.seen = None
        try:
            binding.client.delete_session(self.berth_id)
        except berth.NotFound:
            pass
        self._release_how = _Release(self._heartbeat_s, self._release_how.may_hand_on)
        self._finalizer = weakref.finalize(self, _release, self._bindings, self.berth_id, self._release_how)

    def _record_tool_start(self, binding: _Binding, call_id: str, name: str, arguments: Any) -> None:
        """The pre-tool record (`_turns`): durable before the tool runs."""
        self._join(binding, create=True)
        turns = binding.turns
        with turns.write_lock:  # parallel tools: their records land in the order planned
            events, token = turns.plan_tool_start(call_id, name, arguments)
            key = uuid.uuid4().hex
            view = binding.take_view()
            try:
                outcome = self._append(binding, events, idempotency_key=key)
            except BaseException:
                turns.rollback(token)
                raise
            if view is not None and not outcome.duplicate and outcome.first_seq == view.end:
                view.end, view.last_key = outcome.next_seq, key  # no items: the view still holds
                binding.keep_view(view)
