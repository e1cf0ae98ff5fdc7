"""berth's readers of a session, as a user runs them: `berth sessions cat --transcript`,
`berth sessions ls` (the CLI, on the place's store) and the inspector's session page
(over HTTP, signed in with a key as the sign-in form does)."""

from __future__ import annotations

import html
import re
import subprocess
from typing import Any

import httpx

from conftest import dropin_place


def cli(place: Any, *arguments: str) -> str:
    """The output of `berth [connection] ARGUMENTS`, as the place's service principal."""
    if place.transport == "http":
        key = place.key("reader", "service")
        command = [dropin_place.berth_binary(), "--server", place.server.url, "--api-key", key, *arguments]
    else:
        # The connection options follow the subcommand for a data directory.
        command = [dropin_place.berth_binary(), *arguments, "--data", str(place.store), "--tenant", place.tenant,
                   "--user", "reader", "--role", "service"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (command, done.stderr)
    return done.stdout


def transcript(place: Any, berth_id: str) -> str:
    return cli(place, "sessions", "cat", berth_id, "--transcript")


def listed(place: Any, label: str) -> str:
    return cli(place, "sessions", "ls", "--label", label)


def inspector_page(place: Any, berth_id: str) -> str:
    """The inspector's page of a session (http places only), its text unescaped."""
    key = place.key("reader", "service")
    with httpx.Client(base_url=place.server.url, follow_redirects=True, timeout=30) as browser:
        form = browser.get("/ui/sign-in").text
        token = re.search(r'name="csrf" value="([^"]+)"', form)
        assert token is not None, form[:500]
        signed_in = browser.post("/ui/sign-in", data={"key": key, "csrf": token.group(1)})
        assert signed_in.status_code == 200, signed_in.text[:500]
        page = browser.get(f"/ui/sessions/{berth_id}")
        assert page.status_code == 200, page.text[:500]
        return html.unescape(page.text)
