"""Fixtures for the LangGraph drop-in suite: every test runs on both transports
(`lg_place`: `http` against a real `berth serve`, `embedded` on a fresh directory; each
test its own tenant and `service` key). Shared with the other drop-in suites:
`scripts/dropins/dropin_place.py`."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dropin_place  # noqa: E402

Server = dropin_place.Server
berth_binary = dropin_place.berth_binary
__all__ = ["LgPlace", "berth_binary"]


class LgPlace(dropin_place.Place):
    """Where one test's savers connect."""

    tenant_prefix = "lg"


lg_scratch, lg_server, lg_place = dropin_place.fixtures("lg_", LgPlace)
