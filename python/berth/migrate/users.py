"""Whose sessions an import makes: the berth user each source session is imported under.

- `--user-from caller` (the default for OpenAI and LangGraph sources, which keep no
  user): every session under the caller's own user, as the drop-in makes them.
- `--user-from adk-user` (ADK's default, and its only choice): each session under its
  ADK `user_id`, as berth's ADK drop-in makes them (its sessions, and its `user:` state,
  are keyed by the ADK user id, so another owner would part them from what the drop-in
  writes later).
- `--user-map FILE.json` (OpenAI and LangGraph): a JSON object mapping source session
  (OpenAI) or thread (LangGraph) ids to berth user ids; a session it does not name is
  skipped and reported. The sessions are made for their users under the caller's tenant
  (`user` in the create, as the drop-in would make them otherwise), which takes a
  `service` (or `admin`) key: `check_role` refuses a `user` key before anything is
  written. A berth session that already belongs to another user is reported and left
  as it is.

A bad mapping file (unreadable, not JSON, not an object of strings, a user id outside
berth's id grammar) is `UserMapError` before anything is written.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import berth

#: berth's id grammar (users, tenants, sessions): 1–128 bytes of `[A-Za-z0-9._~-]`.
_ID = re.compile(r"[A-Za-z0-9._~-]{1,128}")


class UserMapError(ValueError):
    """A `--user-map` file berth-migrate cannot use, or a caller that cannot act for its
    users; nothing was written."""


@dataclass(frozen=True)
class UserMap:
    """Source session or thread id -> berth user (`--user-map`)."""

    path: str
    users: dict[str, str]

    def user_for(self, source_id: str) -> str | None:
        return self.users.get(source_id)


def load(path: str) -> UserMap:
    """The mapping in `path`, checked whole (`UserMapError` names what is wrong)."""
    try:
        with open(path, "rb") as file:
            text = file.read()
    except OSError as error:
        raise UserMapError(f"--user-map {path}: cannot read it: {error.strerror or error}") from None
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UserMapError(f"--user-map {path}: not JSON: {error}") from None
    if not isinstance(value, dict):
        raise UserMapError(f"--user-map {path}: expected a JSON object of source id -> berth user, "
                           f"not {type(value).__name__}")
    if not value:
        raise UserMapError(f"--user-map {path}: maps no session")
    for source_id, user in value.items():
        if not isinstance(user, str):
            raise UserMapError(f"--user-map {path}: {source_id!r} maps to {json.dumps(user)}, not a user id (a string)")
        if not _ID.fullmatch(user) or user in (".", "..") or len(user.encode()) > 128:
            raise UserMapError(f"--user-map {path}: {source_id!r} maps to {user!r}, not a berth user id "
                               "(1-128 bytes of A-Z a-z 0-9 . _ ~ -, never . or ..)")
    return UserMap(path, dict(value))


def check_role(client: berth.Client) -> None:
    """Refuses a `user` key (it acts only for itself) before an import for other users."""
    principal = client.whoami()
    if principal.role not in ("service", "admin"):
        raise UserMapError(f"--user-map: the caller is a {principal.role!r} key (user {principal.user!r}), "
                           "which makes sessions only for itself: import with a service key")


def owner_of(client: berth.Client, berth_id: str) -> str | None:
    """The user whose session `berth_id` is, or None when berth holds no such session."""
    try:
        return client.get_session(berth_id).header.scope.user
    except berth.NotFound:
        return None


def make_for(client: berth.Client, berth_id: str, user: str, *, title: str, labels: list[str],
             policy: dict[str, Any]) -> str:
    """Makes the session `berth_id` for `user`, as the drop-in would make it (its title,
    labels and policy; the drop-in then finds it and writes on); answers its owner (another
    user's when someone made it meanwhile)."""
    try:
        return client.create_session(berth_id, title=title, labels=labels, policy=policy, user=user).header.scope.user
    except berth.AlreadyExists:
        return client.get_session(berth_id).header.scope.user


def claim(client: berth.Client, berth_id: str, user: str, dry_run: bool, *, title: str, labels: list[str],
          policy: dict[str, Any]) -> str | None:
    """The session `berth_id` for `user`: made for it when missing (not on a dry run).
    None when it is (or would be) `user`'s; else the user it belongs to."""
    held = owner_of(client, berth_id)
    if held is None and not dry_run:
        held = make_for(client, berth_id, user, title=title, labels=labels, policy=policy)
    return None if held in (None, user) else held


def elsewhere(user: str, held: str) -> str:
    """The reason a session under another user is left as it is."""
    return f"berth holds this session under user {held!r}, the user map names {user!r}: left as it is"
