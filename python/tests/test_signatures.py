"""The clients' methods spell out their parameters, with types, so editors complete them and
type checkers check them: no `**fields` on any public method, every parameter annotated,
`AsyncClient` the same as `Client` but awaited, and each operation forwarding every
parameter to its call (`berth._calls`). Then mypy, on code a user writes, proves it: a
misspelt keyword, a wrong type and a forgotten `await` are errors, the right code is not."""

from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import berth
from berth import _calls as calls


def public_methods(cls: type) -> list[str]:
    return sorted(name for name, value in vars(cls).items() if not name.startswith("_") and callable(value))


#: The methods that are iterators and streams, which are async generators (or plain, for
#: `stream`) on `AsyncClient` rather than coroutines.
NOT_COROUTINES = {"iter_sessions", "iter_events", "stream"}
#: The methods with no call of their own in `_calls`: made of other operations, or sharing
#: one (`read` and `read_before` are both `_calls.read`; `REQUESTS` checks what they send).
COMPOSED = {"iter_sessions", "iter_events", "tail", "stream", "close", "read", "read_before"}


def test_both_clients_have_the_same_methods() -> None:
    assert public_methods(berth.Client) == public_methods(berth.AsyncClient)
    assert len(public_methods(berth.Client)) >= 40


@pytest.mark.parametrize("name", public_methods(berth.Client))
def test_every_parameter_is_named_and_typed(name: str) -> None:
    for cls in (berth.Client, berth.AsyncClient):
        signature = inspect.signature(getattr(cls, name))
        for parameter in list(signature.parameters.values())[1:]:
            assert parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL), (cls, name, parameter)
            assert parameter.annotation is not parameter.empty, (cls, name, parameter)
        assert signature.return_annotation is not signature.empty, (cls, name)


@pytest.mark.parametrize("name", public_methods(berth.Client))
def test_the_async_method_is_the_sync_one_awaited(name: str) -> None:
    sync, awaited = getattr(berth.Client, name), getattr(berth.AsyncClient, name)
    sync_signature, async_signature = inspect.signature(sync), inspect.signature(awaited)
    assert list(sync_signature.parameters.values()) == list(async_signature.parameters.values())
    assert sync.__doc__ == awaited.__doc__
    if name in NOT_COROUTINES:
        return
    assert inspect.iscoroutinefunction(awaited) and not inspect.iscoroutinefunction(sync)
    assert sync_signature.return_annotation == async_signature.return_annotation


@pytest.mark.parametrize("name", sorted(set(public_methods(berth.Client)) - COMPOSED))
def test_each_operation_forwards_every_parameter_to_its_call(name: str) -> None:
    """The method and its call take the same parameters, with the same defaults (a
    parameter the method took but did not forward would be silently dropped)."""
    method = list(inspect.signature(getattr(berth.Client, name)).parameters.values())[1:]
    call = list(inspect.signature(getattr(calls, name)).parameters.values())
    assert [(p.name, p.kind, p.default) for p in method] == [(p.name, p.kind, p.default) for p in call]


class _Sent(Exception):
    """What a client sent, raised by `_Recorder` instead of an answer."""

    def __init__(self, method: str, path: str, body: bytes | None) -> None:
        super().__init__(method, path)
        self.method, self.path, self.body = method, path, body


class _Recorder:
    busy_wait_s = 0.0

    def send(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes | None) -> calls.Answer:
        raise _Sent(method, path, body)

    def close(self) -> None:
        pass


class _AsyncRecorder(_Recorder):
    async def send(self, method: str, path: str, headers: list[tuple[str, str]],  # type: ignore[override]
                   body: bytes | None) -> calls.Answer:
        raise _Sent(method, path, body)

    async def close(self) -> None:  # type: ignore[override]
        pass


#: (method, arguments with every keyword given, the request it must send).
REQUESTS: list[tuple[str, tuple[Any, ...], dict[str, Any], str, bytes | None]] = [
    ("create_session", ("s-1",),
     dict(title="t", labels=["l"], user="u", project="p", policy={"run_lease_ttl_ms": 5}, origin="o",
          delegation_depth=2),
     "/v1/sessions",
     b'{"id":"s-1","title":"t","labels":["l"],"user":"u","project":"p","policy":{"run_lease_ttl_ms":5},'
     b'"origin":"o","delegation_depth":2}'),
    ("list_sessions", (),
     dict(status=["active", "idle"], label="l", user="u", project="p", parent="s-0", active_since=1,
          active_before=2, include_blank=True, q="50%", cursor="c", limit=3),
     "/v1/sessions?status=active%2Cidle&label=l&user=u&project=p&parent=s-0&active_since=1&active_before=2"
     "&include_blank=true&q=50%25&cursor=c&limit=3", None),
    ("count_sessions", (),
     dict(user="u", project="p", label="l", parent="s-0", active_since=1, active_before=2, include_blank=False,
          q="x"),
     "/v1/sessions/counts?user=u&project=p&label=l&parent=s-0&active_since=1&active_before=2&include_blank=false"
     "&q=x",
     None),
    ("update_session", ("s-1",), dict(title=None, labels=["x"], expected_revision=4),
     "/v1/sessions/s-1", b'{"title":null,"labels":["x"],"expected_revision":4}'),
    ("close_session", ("s-1",), dict(policy="cancel_runs", expected_revision=4),
     "/v1/sessions/s-1/close", b'{"policy":"cancel_runs","expected_revision":4}'),
    ("fork_session", ("s-1",), dict(upto_seq=3, new_id="s-2"), "/v1/sessions/s-1/fork",
     b'{"upto_seq":3,"new_id":"s-2"}'),
    ("append", ("s-1", [("note/x", 1)]), dict(expected_seq=0, run="r", idempotency_key="k",
                                              memory=[{"namespace": "app", "key": "k", "value": 1}]),
     "/v1/sessions/s-1/events",
     b'{"events":[{"type":"note/x","data":1}],"expected_seq":0,"run":"r","idempotency_key":"k",'
     b'"memory":[{"namespace":"app","key":"k","value":1}]}'),
    ("read", ("s-1",), dict(from_seq=2, limit=5, types=["a/b"]), "/v1/sessions/s-1/events?from=2&limit=5&types=a%2Fb",
     None),
    ("read_before", ("s-1", 9), dict(limit=5, types=["a/b"]), "/v1/sessions/s-1/events?before=9&limit=5&types=a%2Fb",
     None),
    ("attach", ("s-1",), dict(run_id="r", on_busy="interrupt", expected_revision=1), "/v1/sessions/s-1/runs",
     b'{"run_id":"r","on_busy":"interrupt","expected_revision":1}'),
    ("detach", ("s-1", "r"), dict(outcome="failed", expected_revision=1), "/v1/sessions/s-1/runs/r/detach",
     b'{"outcome":"failed","expected_revision":1}'),
    ("resume", ("s-1",), dict(run_id="r", on_busy="reject", expected_revision=1), "/v1/sessions/s-1/resume",
     b'{"run_id":"r","on_busy":"reject","expected_revision":1}'),
    ("export", ("s-1",), dict(format="zip"), "/v1/sessions/s-1/export?format=zip", None),
    ("audit_search", (), dict(from_seq=1, limit=2, action="a", session="s", actor="x", since=3, before=4),
     "/v1/audit/search?from=1&limit=2&action=a&session=s&actor=x&since=3&before=4", None),
    ("set_retention", (), dict(idle_ttl_ms=1, max_age_ms=2, delete_terminal_after_ms=3, memory_max_age_ms=4),
     "/v1/retention", b'{"idle_ttl_ms":1,"max_age_ms":2,"delete_terminal_after_ms":3,"memory_max_age_ms":4}'),
    ("memory_put", ("app", "k", None), dict(expected_revision=0, ttl_ms=5, bound_to="s-1"), "/v1/memory/items",
     b'{"namespace":"app","key":"k","value":null,"expected_revision":0,"ttl_ms":5,"bound_to":"s-1"}'),
    ("memory_search", ("app",), dict(filter=[("kind", "eq", 1)], query="q", order="key", cursor="c", limit=4),
     "/v1/memory/search",
     b'{"prefix":"app","filter":[{"field":"kind","op":"eq","value":1}],"query":"q","order":"key","cursor":"c",'
     b'"limit":4}'),
    ("memory_namespaces", ("app",), dict(max_depth=3, cursor="c", limit=4),
     "/v1/memory/namespaces?prefix=app&max_depth=3&cursor=c&limit=4", None),
    ("memory_set_quota", (), dict(items=1, bytes=2), "/v1/memory/quota", b'{"items":1,"bytes":2}'),
    ("session_usage", ("s-1",), dict(), "/v1/sessions/s-1/usage", None),
    ("usage", (), dict(since=1, before=2), "/v1/usage?since=1&before=2", None),
]


@pytest.mark.parametrize("name, args, keywords, path, body", REQUESTS, ids=[row[0] for row in REQUESTS])
def test_every_keyword_reaches_the_request(name: str, args: tuple[Any, ...], keywords: dict[str, Any], path: str,
                                           body: bytes | None) -> None:
    with pytest.raises(_Sent) as sync:
        getattr(berth.Client(transport=_Recorder()), name)(*args, **keywords)
    with pytest.raises(_Sent) as awaited:
        asyncio.run(getattr(berth.AsyncClient(transport=_AsyncRecorder()), name)(*args, **keywords))
    for sent in (sync.value, awaited.value):
        assert (sent.path, sent.body) == (path, body)


#: What a user writes, and what mypy must say of each line (None: nothing).
USER_CODE: list[tuple[str, str | None]] = [
    ('session = client.create_session("chat-1", title="hello", labels=["a"])', None),
    ('reveal_type(session)', 'Revealed type is "berth._models.Session"'),
    ('client.create_session("chat-1", titel="hello")', 'Unexpected keyword argument "titel"'),
    ('client.create_session("chat-1", labels=3)', 'Argument "labels" to "create_session" of "Client"'),
    ('client.attach("chat-1", on_busy="wait")', 'Argument "on_busy" to "attach" of "Client"'),
    ('client.read("chat-1", from_seq="0")', 'Argument "from_seq" to "read" of "Client"'),
    ('client.memory_search("app", order="newest")', 'Argument "order" to "memory_search" of "Client"'),
    ('page: berth.EventPage = client.read("chat-1", types=["user/message"])', None),
    ('client.update_session("chat-1", title=None, labels=berth.UNSET)', None),
    ('reveal_type(aclient.get_session("chat-1"))',
     'Revealed type is "typing.Coroutine[Any, Any, berth._models.Session]"'),
    ('session = aclient.get_session("chat-1")', 'Incompatible types in assignment'),
    ('aclient.append("chat-1", [("user/message", {})], expected_sq=0)', 'Unexpected keyword argument "expected_sq"'),
]


def test_a_type_checker_checks_what_users_write(tmp_path: Path) -> None:
    lines = ["import berth", "", "async def main(client: berth.Client, aclient: berth.AsyncClient) -> None:"]
    lines += [f"    {code}" for code, _ in USER_CODE]
    first = 4  # the line number of USER_CODE[0]
    (tmp_path / "user.py").write_text("\n".join(lines) + "\n")
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull, "user.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    said: dict[int, list[tuple[str, str]]] = {}
    for line in checked.stdout.splitlines():
        parts = line.split(":", 3)
        if len(parts) == 4 and parts[0] == "user.py":
            said.setdefault(int(parts[1]) - first, []).append((parts[2].strip(), parts[3].strip()))
    for index, (code, expected) in enumerate(USER_CODE):
        messages = said.get(index, [])
        if expected is None:
            assert not [message for severity, message in messages if severity == "error"], (code, messages)
        else:
            assert any(expected in message for _, message in messages), (code, messages, checked.stdout)


def test_the_package_says_it_is_typed() -> None:
    assert (Path(berth.__file__).parent / "py.typed").is_file()
