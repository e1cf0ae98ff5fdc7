#!/usr/bin/env python3
"""CI for examples/: runs one example twice per transport, from fresh processes, and
checks that the second run continued the first run's conversation.

Every example ends by printing its conversation as a line `conversation …:` followed by
one indented line per message. The check: the first run printed at least one message;
the second run, same session id, printed more, and its first messages are exactly the
first run's (the history came back from berth, not from the process).

Transports: `http` — a `berth serve` of its own on a free loopback port over a temporary
data directory, with a service key of tenant acme, user alice, in BERTH_URL and
BERTH_API_KEY; `embedded` — BERTH_DATA, a temporary directory (Python's `berth.open`).
Both are torn down afterwards. The session id is the last argument given to the example.

Usage: examples/run_examples.py --berth BERTH_BINARY [--transports http,embedded] \
           [--name NAME] -- COMMAND [ARGS…]
(stdlib only; called at the end of scripts/dropins/*/run, scripts/python/run and
scripts/typescript/run with the venv's python or node as COMMAND)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

RUN_TIMEOUT_S = 180
SERVER_START_S = 30


def conversation(output: str) -> list[str] | None:
    """The indented lines after the last `conversation …` line, or None if there is none."""
    lines = output.splitlines()
    starts = [index for index, line in enumerate(lines) if line.startswith("conversation ")]
    if not starts:
        return None
    messages = []
    for line in lines[starts[-1] + 1:]:
        if not line.startswith("  "):
            break
        messages.append(line.strip())
    return messages


def start_server(berth: str, data: Path) -> tuple[subprocess.Popen[str], str, str]:
    """`berth serve` on 127.0.0.1:0; returns the process, its URL and a service key."""
    key = subprocess.run([berth, "--data", str(data), "keys", "create", "--tenant", "acme", "--user", "alice",
                          "--role", "service"], check=True, capture_output=True, text=True).stdout.strip()
    server = subprocess.Popen([berth, "--data", str(data), "serve", "--listen", "127.0.0.1:0"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + SERVER_START_S
    assert server.stdout is not None
    for line in server.stdout:  # the server says where it listens once it is ready
        found = re.search(r"listening on (http://\S+)", line)
        if found:
            # Keep draining its log so a chatty server never blocks on a full pipe.
            threading.Thread(target=server.stdout.read, daemon=True).start()
            return server, found.group(1), key
        if time.monotonic() > deadline:
            break
    server.kill()
    raise SystemExit(f"examples: berth serve did not start (exit {server.wait()})")


def run_twice(name: str, command: list[str], env: dict[str, str], session: str, transport: str) -> None:
    started = time.monotonic()
    outputs = []
    for attempt in (1, 2):
        try:
            done = subprocess.run([*command, session], env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            fail(name, transport, f"run {attempt} took over {RUN_TIMEOUT_S} s", outputs)
        outputs.append(done.stdout + done.stderr)
        if done.returncode != 0:
            fail(name, transport, f"run {attempt} exited {done.returncode}", outputs)
    first, second = conversation(outputs[0]), conversation(outputs[1])
    if not first:
        fail(name, transport, "run 1 printed no conversation", outputs)
    if second is None or len(second) <= len(first) or second[:len(first)] != first:
        fail(name, transport, "run 2 did not show run 1's history before its own turn", outputs)
    print(f"examples: ok {name} on {transport}: run 1 printed {len(first)} messages, run 2 {len(second)}, "
          f"the first {len(first)} restored from berth ({time.monotonic() - started:.1f} s)")
    if os.environ.get("BERTH_EXAMPLES_VERBOSE"):
        print("\n".join("  > " + line for line in outputs[1].splitlines()))


def fail(name: str, transport: str, why: str, outputs: list[str]) -> None:
    print(f"examples: FAILED {name} on {transport}: {why}", file=sys.stderr)
    for attempt, output in enumerate(outputs, 1):
        print(f"  run {attempt}'s output:", file=sys.stderr)
        print("\n".join("  > " + line for line in output.splitlines()), file=sys.stderr)
    raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--berth", required=True, help="the berth binary (for `berth serve` and its key)")
    parser.add_argument("--transports", default="http,embedded")
    parser.add_argument("--name", help="the example's name in messages (default: the last argument)")
    parser.add_argument("command", nargs="+")
    options = parser.parse_args()
    name = options.name or "/".join(Path(options.command[-1]).parts[-2:])
    session = "ci-" + re.sub(r"[^A-Za-z0-9-]", "-", name)
    # Only what a transport sets reaches the example: no BERTH_* of the caller's.
    base = {key: value for key, value in os.environ.items() if not key.startswith("BERTH_")}
    started = time.monotonic()
    for transport in options.transports.split(","):
        scratch = Path(tempfile.mkdtemp(prefix="berth-example-"))
        server = None
        try:
            if transport == "http":
                server, url, key = start_server(options.berth, scratch / "berth-data")
                env = {**base, "BERTH_URL": url, "BERTH_API_KEY": key}
            elif transport == "embedded":
                env = {**base, "BERTH_DATA": str(scratch / "berth-data")}
            else:
                raise SystemExit(f"examples: unknown transport {transport!r}")
            run_twice(name, options.command, env, session, transport)
        finally:
            if server is not None:
                server.terminate()
                try:
                    server.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"examples: {name}: {options.transports}, twice each, in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
