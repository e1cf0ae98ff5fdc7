"""Fixtures for the ADK drop-in suite: every berth case runs on both transports
(`adk_place`: `http` against a real `berth serve`, `embedded` on a fresh directory; each
test its own tenant and a `service` key — ADK's `app:` state is tenant-wide memory).
Shared with the other drop-in suites: `scripts/dropins/dropin_place.py`."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dropin_place  # noqa: E402

Server = dropin_place.Server


class AdkPlace(dropin_place.Place):
    """Where one test's services connect."""

    tenant_prefix = "adk"


adk_scratch, adk_server, adk_place = dropin_place.fixtures("adk_", AdkPlace)


#: Child-process code: `connect(argv)` builds the client `AdkPlace.child_args` describes.
CONNECT = '''
import berth
def connect(argv):
    transport, where, credential = argv[:3]
    if transport == "http":
        return berth.Client(where, api_key=credential)
    return berth.open(where, tenant=credential, user="agent", role="service")
'''
