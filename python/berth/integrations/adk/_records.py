"""How ADK's sessions, events and state map to berth (docs/guides/adk.md has the whole of it):

- an ADK session `(app_name, user_id, id)` is one berth session, id `adk~` + the first
  40 hex digits of the SHA-256 of `[app_name, user_id, id]` (ADK allows one id under two
  users; berth ids are unique per tenant), owned by the berth user `encode_id(user_id)`
  (reversible: `decode_id`), labelled `adk`, titled `app/user/id` (sessions created by earlier versions keep
  the JSON triple `[app, user, id]` they were titled with);
- the log: seq 0 is `adk/create` (ignorable); then every ADK event as berth's
  vocabulary, the ADK event verbatim in the first berth event's `adk` (`_mapping`),
  inside one berth turn per invocation and one step per model call (`_turns`). Event
  times are the ADK timestamps in ms, kept non-decreasing;
- state: unprefixed keys live in the session (folded into its index item, below);
  `app:` keys are memory items in `app/<encode_id(app_name)>/adk/state`, `user:` keys in
  `user/<encode_id(user_id)>/adk/<encode_id(app_name)>/state`, one item per key
  (`encode_key`); `temp:` keys are never persisted. Every write is **carried by the
  append of its event** (`append(memory=...)`), so the event and its state change are
  one atomic step, even across a crash;
- an index item per session, `app/<app>/adk/sessions` / `<berth id>`, bound to the
  session (deleted with it), holds its ids, session state, last update time, next turn
  number (`turns`) and latest turn (`turn`; both absent in items written by earlier
  versions) and is rewritten by the carried write of each event: `list_sessions` is one
  memory search (plus one per user for `user:` state), never a read per session.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import unicodedata
from collections.abc import Mapping
from typing import Any

from google.adk.sessions.state import State


#: The label of every session this service creates.
LABEL = "adk"
CREATE_TYPE = "adk/create"
ACTIVITY_TTL_MS_FOREVER = 10 * 365 * 24 * 3600 * 1000
RUN_LEASE_TTL_MS_DEFAULT = 30_000
#: berth carries at most 100 memory writes per append; one is the session's index.
STATE_KEYS_PER_EVENT_MAX = 99

_ID_BYTES_MAX = 128
_KEY_BYTES_MAX = 512
_SAFE_ID_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._~-")


class StateDeltaTooLarge(ValueError):
    """An event's `app:`/`user:` delta has more keys than one append can carry."""


class IdTooLong(ValueError):
    """An ADK name berth cannot hold reversibly (its encoding is over 128 bytes)."""


# ----- encodings ------------------------------------------------------------------------


def encode_id(name: str) -> str:
    """A berth id (`[A-Za-z0-9._~-]`, 1–128 bytes, never `.`/`..`) for an ADK user id or
    app name, reversibly: the name itself when the grammar allows it and it does not
    start with `~`; otherwise `~` and its UTF-8 in unpadded base64url (names up to 95
    bytes). Longer names that need encoding raise `IdTooLong`."""
    if not isinstance(name, str):
        raise TypeError(f"an ADK id must be a str, not {type(name).__name__}")
    raw = name.encode("utf-8")
    if (
        0 < len(raw) <= _ID_BYTES_MAX
        and not raw.startswith(b"~")
        and name not in (".", "..")
        and all(byte in _SAFE_ID_BYTES for byte in raw)
    ):
        return name
    encoded = "~" + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
    if len(encoded) > _ID_BYTES_MAX:
        raise IdTooLong(f"{name[:40]!r}… needs {len(encoded)} bytes as a berth id, at most {_ID_BYTES_MAX}")
    return encoded


def decode_id(encoded: str) -> str:
    """The ADK name behind `encode_id`'s answer."""
    if encoded.startswith("~"):
        body = encoded[1:]
        try:
            return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError) as error:
            raise ValueError(f"{encoded!r} is not an encoded ADK id") from error
    return encoded


def encode_key(key: str) -> str:
    """A memory key (1–512 bytes, no control characters) for an ADK state key (without
    its prefix), reversibly: the key itself, or `~` + base64url."""
    raw = key.encode("utf-8")
    if 0 < len(raw) <= _KEY_BYTES_MAX and not key.startswith("~") and not any(
        unicodedata.category(char) == "Cc" for char in key
    ):
        return key
    encoded = "~" + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
    if len(encoded) > _KEY_BYTES_MAX:
        raise IdTooLong(f"state key {key[:40]!r}… is too long for berth memory ({len(encoded)} bytes encoded)")
    return encoded


def decode_key(key: str) -> str:
    return decode_id(key) if key.startswith("~") else key


def session_berth_id(app_name: str, user_id: str, session_id: str) -> str:
    """The berth session id of an ADK session."""
    digest = hashlib.sha256(json.dumps([app_name, user_id, session_id], ensure_ascii=False).encode()).hexdigest()
    return "adk~" + digest[:40]


def app_state_namespace(app_name: str) -> str:
    return f"app/{encode_id(app_name)}/adk/state"


def user_state_namespace(app_name: str, user_id: str) -> str:
    return f"user/{encode_id(user_id)}/adk/{encode_id(app_name)}/state"


def index_namespace(app_name: str) -> str:
    return f"app/{encode_id(app_name)}/adk/sessions"


def memory_namespace(app_name: str, user_id: str) -> str:
    return f"user/{encode_id(user_id)}/adk/{encode_id(app_name)}/memory"


# ----- state ----------------------------------------------------------------------------


def _split(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in state.items():
        if key.startswith(State.APP_PREFIX):
            app[key[len(State.APP_PREFIX):]] = value
        elif key.startswith(State.USER_PREFIX):
            user[key[len(State.USER_PREFIX):]] = value
        elif not key.startswith(State.TEMP_PREFIX):
            session[key] = value
    return app, user, session


def _state_writes(app_name: str, user_id: str, app_delta: Mapping[str, Any],
                  user_delta: Mapping[str, Any]) -> list[dict[str, Any]]:
    if len(app_delta) + len(user_delta) > STATE_KEYS_PER_EVENT_MAX:
        raise StateDeltaTooLarge(
            f"{len(app_delta) + len(user_delta)} app:/user: keys in one event; berth carries at most "
            f"{STATE_KEYS_PER_EVENT_MAX} with an append"
        )
    writes = [{"namespace": app_state_namespace(app_name), "key": encode_key(key), "value": value}
              for key, value in app_delta.items()]
    writes += [{"namespace": user_state_namespace(app_name, user_id), "key": encode_key(key), "value": value}
               for key, value in user_delta.items()]
    return writes
