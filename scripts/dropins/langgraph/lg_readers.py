"""berth's readers of a thread's session, as a user runs them: `berth sessions cat
--transcript` and `berth sessions ls` (the CLI, on the test's store) and the inspector's
session page (over HTTP, signed in with a key as the sign-in form does)."""

from __future__ import annotations

import html
import re
import subprocess
from typing import Any

import httpx

from conftest import berth_binary


def cli(place: Any, *arguments: str) -> str:
    """The output of `berth [connection] ARGUMENTS`, as the place's service principal."""
    if place.transport == "http":
        command = [berth_binary(), "--server", place.server.url, "--api-key", place.key(), *arguments]
    else:
        # The connection options follow the subcommand for a data directory.
        command = [berth_binary(), *arguments, "--data", str(place.store), "--tenant", place.tenant,
                   "--user", "reader", "--role", "service"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (command, done.stderr)
    return done.stdout


def transcript(place: Any, session_id: str) -> str:
    return cli(place, "sessions", "cat", session_id, "--transcript")


def listed(place: Any, label: str, *more: str) -> str:
    return cli(place, "sessions", "ls", "--label", label, *more)


def inspector_page(place: Any, session_id: str) -> str:
    """The inspector's page of a session (http places only), its text unescaped."""
    with httpx.Client(base_url=place.server.url, follow_redirects=True, timeout=30) as browser:
        form = browser.get("/ui/sign-in").text
        token = re.search(r'name="csrf" value="([^"]+)"', form)
        assert token is not None, form[:500]
        signed_in = browser.post("/ui/sign-in", data={"key": place.key(), "csrf": token.group(1)})
        assert signed_in.status_code == 200, signed_in.text[:500]
        page = browser.get(f"/ui/sessions/{session_id}")
        assert page.status_code == 200, page.text[:500]
        return html.unescape(page.text)
