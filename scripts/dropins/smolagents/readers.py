"""berth's readers of a smolagents session, as a user runs them: `berth sessions cat
--transcript` and `berth sessions ls` (the CLI, on the place's store) and the inspector's
session page (over HTTP, signed in with a key as the sign-in form does)."""

from __future__ import annotations

import html
import re
import subprocess
from typing import Any

import httpx

import dropin_place


def cli(place: Any, tenant: str, *arguments: str) -> str:
    """The output of `berth [connection] ARGUMENTS` as a service principal of `tenant`."""
    if place.transport == "http":
        key = place.server.key(tenant, "reader", "service")
        command = [dropin_place.berth_binary(), "--server", place.server.url, "--api-key", key, *arguments]
    else:
        command = [dropin_place.berth_binary(), *arguments, "--data", str(place.store), "--tenant", tenant,
                   "--user", "reader", "--role", "service"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (command, done.stderr)
    return done.stdout


def transcript(place: Any, tenant: str, session_id: str) -> str:
    return cli(place, tenant, "sessions", "cat", session_id, "--transcript")


def listed(place: Any, tenant: str, label: str) -> str:
    """`berth sessions ls --label LABEL`, without `--all`: blank sessions are not listed."""
    return cli(place, tenant, "sessions", "ls", "--label", label)


def inspector_page(place: Any, tenant: str, session_id: str) -> str:
    """The inspector's page of a session (http places only), its text unescaped."""
    key = place.server.key(tenant, "reader", "service")
    with httpx.Client(base_url=place.server.url, follow_redirects=True, timeout=30) as browser:
        form = browser.get("/ui/sign-in").text
        token = re.search(r'name="csrf" value="([^"]+)"', form)
        assert token is not None, form[:500]
        signed_in = browser.post("/ui/sign-in", data={"key": key, "csrf": token.group(1)})
        assert signed_in.status_code == 200, signed_in.text[:500]
        page = browser.get(f"/ui/sessions/{session_id}")
        assert page.status_code == 200, page.text[:500]
        return html.unescape(page.text)
