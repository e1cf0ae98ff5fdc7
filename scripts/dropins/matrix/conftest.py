"""Fixtures for the matrix's reader test: every test runs on both transports (`place`:
`http` against a real `berth serve`, `embedded` on a fresh directory; each test its own
tenant). Shared with the other drop-in suites: `scripts/dropins/dropin_place.py`."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import dropin_place  # noqa: E402


class Place(dropin_place.Place):
    """Where one test's logs connect."""

    tenant_prefix = "mx"


scratch, server, place = dropin_place.fixtures("", Place)
