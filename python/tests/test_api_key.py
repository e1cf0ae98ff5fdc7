"""An HTTP client without a usable API key says so when it is made, as `InvalidApiKey` (an
`Unauthenticated` and a `ValueError`) naming what to do, instead of a 401 on the first
call (no key) or a `UnicodeEncodeError` deep in `http.client` (a key like the README's
"…"). Every `/v1` route needs a key, so such a client could do nothing; the embedded
store needs none. The server URL likewise: `InvalidArgument` (a `ValueError`)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

import berth
from conftest import Server

#: (api_key=, BERTH_API_KEY, the reason, where the message says the key came from).
REFUSED: list[tuple[str | None, str | None, str, str]] = [
    (None, None, "missing", "no API key"),
    ("", None, "empty", "(api_key)"),
    ("", "berth_abc_def", "empty", "(api_key)"),  # an explicit empty key is not "use the environment's"
    ("  \n", None, "empty", "(api_key)"),
    (None, "", "empty", "(BERTH_API_KEY)"),
    ("…", None, "not_ascii", "(api_key)"),  # the README's placeholder, pasted
    ("berth_abc…", None, "not_ascii", "(api_key)"),
    (None, "berth_abcé", "not_ascii", "(BERTH_API_KEY)"),
    ("berth_abc def", None, "not_ascii", "(api_key)"),
    ("berth_abc\r\nX-Injected: 1", None, "not_ascii", "(api_key)"),
    ("berth_abc\x00", None, "not_ascii", "(api_key)"),
]
IDS = [f"{reason}-{index}" for index, (_, _, reason, _) in enumerate(REFUSED)]


def _make(cls: type, monkeypatch: pytest.MonkeyPatch, api_key: str | None, env: str | None) -> Any:
    monkeypatch.delenv("BERTH_URL", raising=False)
    if env is None:
        monkeypatch.delenv("BERTH_API_KEY", raising=False)
    else:
        monkeypatch.setenv("BERTH_API_KEY", env)
    return cls("http://127.0.0.1:9", api_key=api_key)


@pytest.mark.parametrize("api_key, env, reason, source", REFUSED, ids=IDS)
@pytest.mark.parametrize("cls", [berth.Client, berth.AsyncClient])
def test_an_unusable_key_is_refused_when_the_client_is_made(
    monkeypatch: pytest.MonkeyPatch, cls: type, api_key: str | None, env: str | None, reason: str, source: str
) -> None:
    with pytest.raises(berth.InvalidApiKey) as refused:
        _make(cls, monkeypatch, api_key, env)
    error = refused.value
    assert isinstance(error, berth.Unauthenticated) and isinstance(error, berth.BerthError)
    assert isinstance(error, ValueError)
    assert (error.reason, error.status, error.code, error.retryable) == (reason, 401, "invalid_api_key", False)
    message = str(error)
    assert source in message and "BERTH_API_KEY" in message and "api_key=" in message
    assert "berth keys create" in message
    for secret in (api_key, env):
        if secret and len(secret.strip()) > 1:  # (the offending character is named)
            assert secret.strip() not in message, message


def test_a_refused_key_is_caught_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """Code that caught the first call's 401, or the `UnicodeEncodeError` (a `ValueError`),
    catches the refusal."""
    for caught in (berth.Unauthenticated, ValueError, berth.BerthError):
        with pytest.raises(caught):
            _make(berth.Client, monkeypatch, None, None)
        with pytest.raises(caught):
            _make(berth.Client, monkeypatch, "…", None)


def test_a_key_from_the_environment_or_with_a_newline_works(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    key = server.key(f"t{uuid.uuid4().hex[:12]}", "agent", "service")
    with berth.Client(server.url, api_key=key + "\n") as client:  # read from a file, newline kept
        assert client.whoami().user == "agent"
    monkeypatch.setenv("BERTH_API_KEY", f"  {key}\n")
    monkeypatch.setenv("BERTH_URL", server.url)
    with berth.Client() as client:
        assert client.whoami().user == "agent"

    async def awaited() -> str:
        async with berth.AsyncClient() as aclient:
            return (await aclient.whoami()).user

    assert asyncio.run(awaited()) == "agent"


def test_a_key_the_server_refuses_is_still_the_servers_answer(server: Server) -> None:
    with berth.Client(server.url, api_key="berth_0000_0000", retries=0) as client:
        with pytest.raises(berth.Unauthenticated) as refused:
            client.whoami()
    assert not isinstance(refused.value, berth.InvalidApiKey) and refused.value.status == 401


def test_the_embedded_store_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BERTH_API_KEY", raising=False)
    with berth.open("memory:", tenant="t", user="u", role="service") as client:
        assert client.whoami().tenant == "t"


#: (url=, BERTH_URL, the class, the built-in it also is).
URLS: list[tuple[Any, str | None, type[berth.BerthError], type[Exception]]] = [
    (None, None, berth.InvalidArgument, ValueError),
    ("", None, berth.InvalidArgument, ValueError),
    ("https://berth.example", None, berth.InvalidArgument, ValueError),
    ("127.0.0.1:7420", None, berth.InvalidArgument, ValueError),
    (None, "ftp://x", berth.InvalidArgument, ValueError),
    (7420, None, berth.WrongType, TypeError),
]


@pytest.mark.parametrize("url, env, cls, builtin", URLS, ids=[f"url-{index}" for index in range(len(URLS))])
@pytest.mark.parametrize("client_cls", [berth.Client, berth.AsyncClient])
def test_an_unusable_url_is_refused(monkeypatch: pytest.MonkeyPatch, client_cls: type, url: Any, env: str | None,
                                    cls: type[berth.BerthError], builtin: type[Exception]) -> None:
    monkeypatch.setenv("BERTH_API_KEY", "berth_abc_def")
    if env is None:
        monkeypatch.delenv("BERTH_URL", raising=False)
    else:
        monkeypatch.setenv("BERTH_URL", env)
    with pytest.raises(cls) as refused:
        client_cls(url)
    assert isinstance(refused.value, builtin) and refused.value.argument == "url"
