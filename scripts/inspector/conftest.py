"""Fixtures of the inspector's browser tests: a real `berth serve` (the debug binary
scripts/test builds) on a scratch data directory, seeded through the HTTP API with the
sessions the tests read, and Chromium from Debian driven by Playwright (never
Playwright's own browser download)."""

import hashlib
import http.client
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
BERTH = Path(os.environ.get("BERTH_BINARY", TARGET / "debug" / "berth"))
ARTIFACTS = TARGET / "inspector-artifacts"
CHROMIUM = os.environ.get("BERTH_CHROMIUM", "/usr/bin/chromium")


class Api:
    """The /v1 API as one key sees it."""

    def __init__(self, url, key):
        self.url, self.key = url, key

    def call(self, method, path, body=None, raw=False):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", "Bearer " + self.key)
        try:
            with urllib.request.urlopen(request) as response:
                payload = response.read()
        except urllib.error.HTTPError as error:
            raise AssertionError(f"{method} {path}: {error.code} {error.read()[:500]!r}") from None
        return payload if raw else (json.loads(payload) if payload else None)

    def create(self, session_id, **fields):
        return self.call("POST", "/v1/sessions", {"id": session_id, **fields})

    def append(self, session_id, events, run=None, memory=None):
        # An entry is (type, data), (type, data, "ignorable"), or an event object as sent.
        body = {"events": [entry if isinstance(entry, dict) else
                           {"type": entry[0], "data": entry[1], **({"ignorable": True} if entry[2:] == ("ignorable",) else {})}
                           for entry in events]}
        if run:
            body["run"] = run
        if memory:
            body["memory"] = memory
            body["idempotency_key"] = "memory-" + hashlib.sha256(json.dumps(body).encode()).hexdigest()[:16]
        return self.call("POST", f"/v1/sessions/{session_id}/events", body)

    def import_export(self, jsonl):
        """Imports a session as `berth export` wrote it (`POST /v1/import`)."""
        request = urllib.request.Request(self.url + "/v1/import", data=jsonl, method="POST")
        request.add_header("Authorization", "Bearer " + self.key)
        request.add_header("Content-Type", "application/x-ndjson")
        with urllib.request.urlopen(request) as response:
            return json.loads(response.read())

    def attach(self, session_id, run_id):
        return self.call("POST", f"/v1/sessions/{session_id}/runs", {"run_id": run_id})


class Server:
    def __init__(self, process, url, keys, data):
        self.process, self.url, self.keys, self.data = process, url, keys, data
        self.api = {name: Api(url, key) for name, key in keys.items()}
        self.port = int(url.rsplit(":", 1)[1])


def create_key(data, tenant, user, role):
    out = subprocess.run(
        [str(BERTH), "--data", str(data), "keys", "create", "--tenant", tenant, "--user", user, "--role", role],
        check=True, capture_output=True, text=True,
    )
    return out.stdout.strip()


HUGE = "x" * 200_000


def seed(server):
    alice, bob, globex = server.api["alice"], server.api["bob"], server.api["globex"]
    # A completed turn with a successful and a failing tool call, labelled, then forked.
    alice.create("alice-chat", title="Support chat", labels=["support"])
    alice.attach("alice-chat", "run-1")
    alice.append("alice-chat", [
        ("turn/start", {"turn": 0}),
        ("user/message", {"content": "What is in the repo?"}),
        ("step/start", {"turn": 0, "step": 0}),
        ("assistant/message", {"content": "", "tool_calls": [
            {"call_id": "ok-1", "name": "ls", "arguments": {"path": "."}},
            {"call_id": "bad-1", "name": "cat", "arguments": {"path": "missing"}},
        ]}),
        ("tool/call", {"call_id": "ok-1", "name": "ls", "arguments": {"path": "."}}),
        ("tool/result", {"call_id": "ok-1", "content": "README.md\nsrc"}),
        ("tool/call", {"call_id": "bad-1", "name": "cat", "arguments": {"path": "missing"}}),
        ("tool/result", {"call_id": "bad-1", "is_error": True, "content": "no such file"}),
        ("step/end", {"turn": 0, "step": 0}),
        ("assistant/message", {"content": "The repo has a README and src."}),
        ("checkpoint", {"state": {"messages": 4, "cursor": "abc"}}),
        ("turn/end", {"turn": 0, "reason": "completed"}),
    ], run="run-1")
    alice.call("POST", "/v1/sessions/alice-chat/fork", {"upto_seq": 2, "new_id": "alice-chat-fork"})
    # A turn a crash left open, then resumed: the repair closes it.
    # An attach before the session exists is refused (404), and audited as refused.
    try:
        alice.attach("alice-crash", "run-early")
    except AssertionError as refused:
        assert ": 404 " in str(refused), refused
    else:
        raise AssertionError("an attach to a missing session was accepted")
    alice.create("alice-crash", title="Crashed run")
    alice.attach("alice-crash", "run-a")
    alice.append("alice-crash", [
        ("turn/start", {"turn": 0}),
        ("user/message", {"content": "list files"}),
        ("step/start", {"turn": 0, "step": 0}),
        ("assistant/message", {"content": "", "tool_calls": [{"call_id": "c1", "name": "ls", "arguments": {}}]}),
        ("tool/call", {"call_id": "c1", "name": "ls", "arguments": {}}),
    ], run="run-a")
    alice.call("POST", "/v1/sessions/alice-crash/resume", {"run_id": "run-b", "on_busy": "interrupt"})
    # A support agent's session as people debug it (37 events): a system prompt, a
    # completed turn of two steps with a tool call, memory, a checkpoint and a framework
    # record; a turn whose run crashed mid-tool, then a resume by run-b (whose repair
    # closes it) and a third turn by run-b.
    alice.create("alice-support", title="Refund for order 1042")
    alice.attach("alice-support", "run-a")

    def support_turn(run, turn, question, call_id, tool, arguments, result, answer):
        alice.append("alice-support", [
            ("turn/start", {"turn": turn}), ("user/message", {"content": question}),
            ("step/start", {"turn": turn, "step": 0}),
            ("assistant/message", {"content": "", "tool_calls": [{"call_id": call_id, "name": tool, "arguments": arguments}]}),
            ("tool/call", {"call_id": call_id, "name": tool, "arguments": arguments}),
            ("tool/result", {"call_id": call_id, "content": result}),
            ("step/end", {"turn": turn, "step": 0}),
            ("step/start", {"turn": turn, "step": 1}), ("assistant/message", {"content": answer}),
            ("step/end", {"turn": turn, "step": 1}),
            ("agentkit/state", {"cursor": turn, "scratch": {"notes": ["a", "b"]}}, "ignorable"),
        ], run=run, memory=[{"namespace": "user/alice/support", "key": f"turn-{turn}", "value": {"customer": "C-77"}}])
        alice.append("alice-support", [
            ("checkpoint", {"state": {"turn": turn, "messages": 4}}), ("turn/end", {"turn": turn, "reason": "completed"}),
        ], run=run)

    alice.append("alice-support", [("system/message", {"content": "You are Acme's support agent. Be brief."})], run="run-a")
    support_turn("run-a", 0, "Where is my order 1042?", "look-1", "lookup_order", {"order": 1042},
                 '{"status": "shipped", "carrier": "UPS"}', "Order 1042 shipped with UPS yesterday.")
    alice.append("alice-support", [
        ("turn/start", {"turn": 1}), ("user/message", {"content": "It arrived broken. I want a refund."}),
        ("step/start", {"turn": 1, "step": 0}),
        ("assistant/message", {"content": "", "tool_calls": [
            {"call_id": "refund-1", "name": "issue_refund", "arguments": {"order": 1042, "amount": 59.0}}]}),
        ("tool/call", {"call_id": "refund-1", "name": "issue_refund", "arguments": {"order": 1042, "amount": 59.0}}),
    ], run="run-a")
    alice.call("POST", "/v1/sessions/alice-support/resume", {"run_id": "run-b", "on_busy": "interrupt"})
    support_turn("run-b", 2, "Did the refund go through?", "check-1", "refund_status", {"order": 1042},
                 '{"refunded": false}', "No refund was recorded; the earlier attempt was cut off. I've queued it again.")
    # Hostile content: markup, a javascript: link, a huge string, an opaque event.
    alice.create("alice-hostile", title="<img src=x onerror=alert(1)>", labels=["hostile"])
    alice.attach("alice-hostile", "w")
    alice.append("alice-hostile", run="w", events=[
        ("user/message", {"content": "<script>window.__pwned = 1; alert('pwned')</script>"}),
        ("assistant/message", {"content": "[click me](javascript:alert(1)) <a href=\"javascript:alert(2)\">link</a>"}),
        ("acme/opaque", {"html": "<script>alert(3)</script>", "nested": {"list": [1, 2, {"k": "v"}]}}),
        ("acme/huge", {"blob": HUGE}),
    ])
    # An untitled conversation stored as the OpenAI Agents drop-in stores Responses
    # items: content as typed parts (issue 52). Named by its first user message.
    alice.create("alice-parts")
    alice.attach("alice-parts", "w")
    alice.append("alice-parts", run="w", events=[
        ("turn/start", {"turn": 0}),
        ("user/message", {"content": [
            {"type": "input_text", "text": "What is in this picture?"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"},
            {"type": "input_file", "filename": "notes.pdf", "file_data": "data:application/pdf;base64,JVBERi0="},
        ], "role": "user", "type": "message", "openai_item": True}),
        ("assistant/message", {"id": "msg_1", "content": [
            {"type": "output_text", "text": "A cat asleep on a mat.", "annotations": []},
        ], "role": "assistant", "status": "completed", "type": "message", "openai_item": True}),
        ("user/message", {"content": [{"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}]}),
        ("assistant/message", {"content": [{"type": "refusal", "refusal": "I can't transcribe that recording."}]}),
        ("turn/end", {"turn": 0, "reason": "completed"}),
    ])
    # A LangGraph thread of alice's as the drop-in stores it (examples/langgraph/graph.py
    # run twice, exported): `lg/*` records beside the conversation vocabulary.
    server.api["admin"].import_export((HERE / "fixtures" / "langgraph-weather.jsonl").read_bytes())
    # A session to watch live, a closed one, and other owners' sessions.
    for api, session_id, content in [
        (alice, "alice-live", "first"), (alice, "alice-closed", "bye"),
        (bob, "bob-secret", "bob only"), (globex, "globex-1", "globex only"),
    ]:
        api.create(session_id, title=session_id.replace("-", " "))
        api.attach(session_id, "w")
        api.append(session_id, [("user/message", {"content": content})], run="w")
    alice.call("POST", "/v1/sessions/alice-closed/close", {"policy": "cancel_runs"})


@pytest.fixture(scope="session")
def server():
    assert BERTH.exists(), f"no berth binary at {BERTH} (scripts/test builds it)"
    scratch = Path(tempfile.mkdtemp(prefix="berth-inspector-"))
    data = scratch / "data"
    keys = {
        "admin": create_key(data, "acme", "ops", "admin"),
        "alice": create_key(data, "acme", "alice", "user"),
        "bob": create_key(data, "acme", "bob", "user"),
        "carol": create_key(data, "acme", "carol", "user"),
        "globex": create_key(data, "globex", "gina", "user"),
    }
    log = open(scratch / "serve.log", "w+")
    process = subprocess.Popen(
        [str(BERTH), "--data", str(data), "serve", "--listen", "127.0.0.1:0", "--sweep-interval-s", "0"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "BERTH_LOG": "warn"},
    )
    url = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and url is None:
        log.seek(0)
        found = re.search(r"listening on (http://\S+)", log.read())
        url = found.group(1) if found else None
        if url is None:
            time.sleep(0.05)
    assert url, "berth serve did not start"
    running = Server(process, url, keys, data)
    seed(running)
    yield running
    process.terminate()
    process.wait(timeout=20)
    shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(scope="session")
def browser():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def context(browser):
    context = browser.new_context(accept_downloads=True, viewport={"width": 1280, "height": 900})
    yield context
    context.close()


def sign_in(page, server, who):
    page.goto(server.url + "/ui")
    page.get_by_label("API key").fill(server.keys[who])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r".*/ui/sessions$"))
    return page


def raw_request(server, method, path, headers=None, body=None):
    """One HTTP request with exactly these headers (no browser: to forge a Host)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    for name, value in (headers or {}).items():
        connection.putheader(name, value)
    if body is not None:
        connection.putheader("Content-Length", str(len(body)))
    connection.endheaders(body)
    response = connection.getresponse()
    payload = response.read()
    connection.close()
    return response.status, dict(response.getheaders()), payload


def screenshot(page, name):
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
