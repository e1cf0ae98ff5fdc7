"""The documented encodings: ADK user ids and app names as berth ids, state keys as
memory keys; reversible, within berth's grammar, typed errors past the limits."""

from __future__ import annotations

import re

import pytest

from berth.integrations.adk import IdTooLong, decode_id, decode_key, encode_id, encode_key, session_berth_id

BERTH_ID = re.compile(r"[A-Za-z0-9._~-]{1,128}")
NAMES = ["alice", "a.b-c_d", "alice@example.com", "", ".", "..", "~x", "ünïcode", "a/b", "sp ace", "\x00nul",
         "x" * 128, "é" * 47, "a" * 94 + "/"]


@pytest.mark.parametrize("name", NAMES)
def test_ids_round_trip_within_the_grammar(name: str) -> None:
    encoded = encode_id(name)
    assert BERTH_ID.fullmatch(encoded) and encoded not in (".", "..")
    assert decode_id(encoded) == name


def test_safe_names_are_kept_as_they_are() -> None:
    assert encode_id("alice") == "alice" and encode_id("shop.v2") == "shop.v2"
    assert encode_id("alice@example.com") == "~YWxpY2VAZXhhbXBsZS5jb20"


def test_too_long_names_are_a_typed_error() -> None:
    with pytest.raises(IdTooLong):
        encode_id("/" * 97)
    with pytest.raises(TypeError):
        encode_id(7)  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["plain", "", "~tilde", "tab\there", "ключ", "k" * 512])
def test_keys_round_trip(key: str) -> None:
    encoded = encode_key(key)
    assert 0 < len(encoded.encode()) <= 512 and not any(ord(c) < 32 for c in encoded)
    assert decode_key(encoded) == key


def test_session_ids_are_distinct_per_app_and_user() -> None:
    ids = {session_berth_id(app, user, "s") for app in ("a", "b") for user in ("u1", "u2")}
    assert len(ids) == 4 and all(BERTH_ID.fullmatch(i) for i in ids)
    assert session_berth_id("a|b", "c", "d") != session_berth_id("a", "b|c", "d")
