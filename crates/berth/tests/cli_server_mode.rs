//! `berth --server URL`: the CLI's session, run, append, export and audit commands
//! against a real `berth serve`, with the same exit codes as on a data directory; and
//! `berth keys` creating, listing and revoking the server's keys while it runs.

mod common;

use common::{berth, start_server, start_server_with};
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

fn remote(data: &Path, url: &str, key: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = berth(data)
        .arg("--server")
        .arg(url)
        .args(args)
        .env("BERTH_API_KEY", key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn ok(output: &Output) -> String {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// Runs `berth ARGS` on a data directory as a principal of `tenant`, feeding `stdin`.
fn on_data_directory(data: &Path, tenant: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = berth(data)
        .args(args)
        .env("BERTH_TENANT", tenant)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn the_cli_works_against_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (_server, url, admin_key) = start_server(&data);
    let created = berth(&data)
        .args(["keys", "create", "--tenant", "default", "--user", "alice", "--role", "user", "--label", "cli test"])
        .output()
        .unwrap();
    let alice = ok(&created).trim().to_owned();

    ok(&remote(&data, &url, &alice, &["sessions", "new", "--id", "chat-1", "--title", "demo"], None));
    ok(&remote(&data, &url, &alice, &["runs", "attach", "chat-1", "--run", "run-1"], None));
    let events =
        "{\"type\":\"turn/start\",\"data\":{\"turn\":0}}\n{\"type\":\"user/message\",\"data\":{\"content\":\"hi\"}}\n";
    let appended = ok(&remote(&data, &url, &alice, &["append", "chat-1", "--run", "run-1"], Some(events)));
    assert!(appended.contains("appended seqs 0..2"), "{appended}");
    let cat = ok(&remote(&data, &url, &alice, &["sessions", "cat", "chat-1"], None));
    assert_eq!(cat.lines().count(), 2);
    let listed = ok(&remote(&data, &url, &alice, &["sessions", "ls"], None));
    assert!(listed.contains("chat-1"), "{listed}");
    let resumed =
        ok(&remote(&data, &url, &alice, &["runs", "resume", "chat-1", "--run", "run-2", "--interrupt"], None));
    assert!(resumed.contains("repaired 1 event(s)"), "{resumed}");
    // One dispatch for both modes: the server path prints what the local one prints (the
    // repaired events), and `stat` through a server shows the metadata it can see.
    assert!(resumed.contains("\n  + {"), "{resumed}");
    let stat = ok(&remote(&data, &url, &alice, &["sessions", "stat", "chat-1"], None));
    assert!(stat.contains("chat-1"), "{stat}");
    let gc = remote(&data, &url, &alice, &["gc"], None);
    assert_eq!(gc.status.code(), Some(2), "gc through a server needs a policy: a usage error");
    assert!(String::from_utf8_lossy(&gc.stderr).contains("--idle-ttl-ms"));
    let export = ok(&remote(&data, &url, &alice, &["export", "chat-1"], None));
    assert_eq!(export.lines().count(), 4);

    // Exit codes match the local mode: 3 not found, 4 conflict, 5 refused; 2 for a
    // command that needs a data directory.
    assert_eq!(remote(&data, &url, &alice, &["sessions", "show", "nope"], None).status.code(), Some(3));
    assert_eq!(remote(&data, &url, &alice, &["runs", "attach", "chat-1"], None).status.code(), Some(4));
    assert_eq!(remote(&data, &url, &alice, &["audit", "verify"], None).status.code(), Some(5));
    assert_eq!(remote(&data, &url, &alice, &["fsck"], None).status.code(), Some(2));
    let verify = ok(&remote(&data, &url, &admin_key, &["audit", "verify"], None));
    assert!(verify.contains("intact"), "{verify}");

    // Keys: listed without secrets; a revoked key is refused at once.
    let listed = ok(&berth(&data).args(["keys", "list"]).output().unwrap());
    assert_eq!(listed.lines().count(), 2, "{listed}");
    assert!(!listed.contains(alice.rsplit('_').next().unwrap()));
    let key_id = alice.split('_').nth(1).unwrap();
    ok(&berth(&data).args(["keys", "revoke", key_id]).output().unwrap());
    assert_eq!(remote(&data, &url, &alice, &["sessions", "ls"], None).status.code(), Some(5));
    assert_eq!(berth(&data).args(["keys", "revoke", key_id]).output().unwrap().status.code(), Some(3));
}

/// Spawns `berth … sessions tail` with its stdout piped.
fn spawn_tail(mut command: Command) -> Child {
    command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

/// The seqs of the canonical event lines a finished tail printed.
fn tailed_seqs(child: Child) -> Vec<u64> {
    let output = child.wait_with_output().unwrap();
    let stdout = ok(&output);
    stdout
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap()["seq"].as_u64().unwrap())
        .collect()
}

const TWO_EVENTS: &str = "{\"type\":\"note/x\",\"data\":{}}\n{\"type\":\"note/x\",\"data\":{}}\n";

/// `berth append --idempotency-key` (R-S14), through a server and on a data directory: a
/// retry with the key reports the original seqs as already stored, even after another
/// append; the key with other events exits 4 (conflict) and stores nothing.
#[test]
fn append_with_an_idempotency_key_is_retried_safely() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (server, url, admin_key) = start_server(&data);
    let through_server = |args: &[&str], stdin: Option<&str>| remote(&data, &url, &admin_key, args, stdin);
    ok(&through_server(&["sessions", "new", "--id", "claims"], None));
    let keyed = ["append", "claims", "--idempotency-key", "pop-1"];
    assert!(ok(&through_server(&keyed, Some(TWO_EVENTS))).contains("appended seqs 0..2"));
    ok(&through_server(&["append", "claims"], Some(TWO_EVENTS)));
    let retried = ok(&through_server(&keyed, Some(TWO_EVENTS)));
    assert!(retried.contains("appended seqs 0..2 (already stored)"), "{retried}");
    let other = "{\"type\":\"note/y\",\"data\":{}}\n";
    assert_eq!(through_server(&keyed, Some(other)).status.code(), Some(4));
    drop(server);

    let local = |args: &[&str], stdin: Option<&str>| on_data_directory(&data, "default", args, stdin);
    let retried = ok(&local(&keyed, Some(TWO_EVENTS)));
    assert!(retried.contains("appended seqs 0..2 (already stored)"), "{retried}");
    assert_eq!(local(&keyed, Some(other)).status.code(), Some(4));
    assert_eq!(ok(&local(&["sessions", "cat", "claims"], None)).lines().count(), 4);
}

/// `berth --server URL sessions tail` streams events as they are appended (SSE) and ends
/// after `--until`.
#[test]
fn sessions_tail_follows_appends_through_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (_server, url, admin_key) = start_server(&data);
    ok(&remote(&data, &url, &admin_key, &["sessions", "new", "--id", "followed"], None));
    ok(&remote(&data, &url, &admin_key, &["append", "followed"], Some(TWO_EVENTS)));
    let mut tail = berth(&data);
    tail.args(["--server", &url, "sessions", "tail", "followed", "--until", "6"]).env("BERTH_API_KEY", &admin_key);
    let tail = spawn_tail(tail);
    for _ in 0..2 {
        ok(&remote(&data, &url, &admin_key, &["append", "followed"], Some(TWO_EVENTS)));
    }
    assert_eq!(tailed_seqs(tail), (0..6).collect::<Vec<u64>>());
}

/// On a data directory, `sessions tail` picks up what another process appends.
#[test]
fn sessions_tail_follows_appends_on_a_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let local = |args: &[&str], stdin: Option<&str>| ok(&on_data_directory(&data, "acme", args, stdin));
    local(&["sessions", "new", "--id", "followed"], None);
    local(&["append", "followed"], Some(TWO_EVENTS));
    let mut tail = berth(&data);
    tail.args(["sessions", "tail", "followed", "--from", "1", "--until", "4"]).env("BERTH_TENANT", "acme");
    let tail = spawn_tail(tail);
    local(&["append", "followed"], Some(TWO_EVENTS));
    assert_eq!(tailed_seqs(tail), vec![1, 2, 3]);
}

/// `berth sessions usage` (issue 54), through a server and on a data directory: a
/// session's table by model with its totals and tool time, `--json` the `/v1` body (the
/// same in both modes); `--all --since` the caller's totals; usage errors exit 2, a
/// missing session 3.
#[test]
fn sessions_usage_reports_model_calls_and_tool_time_in_both_modes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (server, url, admin_key) = start_server(&data);
    let through_server = |args: &[&str], stdin: Option<&str>| remote(&data, &url, &admin_key, args, stdin);
    ok(&through_server(&["sessions", "new", "--id", "spend"], None));
    let t0 = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let events = [
        serde_json::json!({"type": "model/call", "time": t0, "ignorable": true, "data": {"model": "gpt-4o",
            "provider": "openai", "input_tokens": 1200, "output_tokens": 80, "cached_tokens": 1000, "latency_ms": 850.5}}),
        serde_json::json!({"type": "tool/call", "time": t0 + 1, "data": {"call_id": "c1", "name": "ls", "arguments": {}}}),
        serde_json::json!({"type": "tool/result", "time": t0 + 41, "data": {"call_id": "c1", "content": "a b"}}),
        serde_json::json!({"type": "model/call", "time": t0 + 50, "ignorable": true, "data": {"model": "gpt-4o",
            "provider": "openai", "latency_ms": 12, "error": {"code": "rate_limited", "name": "RateLimitError"}}}),
    ];
    let lines: String = events.iter().map(|event| format!("{event}\n")).collect();
    ok(&through_server(&["append", "spend"], Some(&lines)));

    let text = ok(&through_server(&["sessions", "usage", "spend"], None));
    let expected = "\
PROVIDER  MODEL   CALLS  ERRORS  INPUT  OUTPUT  CACHED  MODEL_MS
openai    gpt-4o      2       1   1200      80    1000     862.5
total                 2       1   1200      80    1000     862.5
tools: 1 calls, 40 ms
";
    assert_eq!(text, expected);
    let remote_json = ok(&through_server(&["--json", "sessions", "usage", "spend"], None));
    let body: serde_json::Value = serde_json::from_str(&remote_json).unwrap();
    assert_eq!(
        (body["session"].as_str(), body["calls"].as_u64(), body["tool_ms"].as_u64()),
        (Some("spend"), Some(2), Some(40))
    );
    // The events are timed up to 50 ms ahead of the clock: the range reaches past them.
    let (since, before) = (t0.to_string(), (t0 + 60_000).to_string());
    let all =
        ok(&through_server(&["--json", "sessions", "usage", "--all", "--since", &since, "--before", &before], None));
    let all: serde_json::Value = serde_json::from_str(&all).unwrap();
    assert_eq!((all["sessions"].as_u64(), all["calls"].as_u64(), all["errors"].as_u64()), (Some(1), Some(2), Some(1)));
    let missing = through_server(&["sessions", "usage", "nope"], None);
    assert_eq!(missing.status.code(), Some(3));
    drop(server);

    let local = |args: &[&str]| on_data_directory(&data, "default", args, None);
    assert_eq!(ok(&local(&["--json", "sessions", "usage", "spend"])), remote_json, "one body in both modes");
    let rfc3339 = ok(&local(&[
        "sessions",
        "usage",
        "--all",
        "--since",
        "2000-01-01T00:00:00Z",
        "--until",
        "2100-01-01T00:00:00Z",
    ]));
    assert!(
        rfc3339.starts_with("1 sessions with model calls from 2000-01-01T00:00:00.000Z to 2100-01-01T00:00:00.000Z\n"),
        "{rfc3339}"
    );
    assert!(rfc3339.contains("\ntotal                 2       1   1200"), "{rfc3339}");
    assert_eq!(local(&["sessions", "usage", "nope"]).status.code(), Some(3));
    for usage_error in [
        &["sessions", "usage"][..],
        &["sessions", "usage", "--all"],
        &["sessions", "usage", "spend", "--all", "--since", "0"],
        &["sessions", "usage", "spend", "--since", "0"],
        &["sessions", "usage", "--all", "--since", "yesterday"],
        &["sessions", "usage", "--all", "--since", "2100-01-01T00:00:00Z", "--before", "2000-01-01T00:00:00Z"],
    ] {
        let output = local(usage_error);
        assert_eq!(output.status.code(), Some(2), "{usage_error:?}: {}", String::from_utf8_lossy(&output.stderr));
    }
}

#[test]
fn serve_creates_logs_preallocated_or_classic_as_its_flag_says() {
    for (switch, version) in [("on", 2), ("off", 1)] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let (_server, url, admin_key) = start_server_with(&data, &["--preallocate-logs", switch]);
        ok(&remote(&data, &url, &admin_key, &["sessions", "new", "--id", "grown"], None));
        ok(&remote(&data, &url, &admin_key, &["append", "grown"], Some(TWO_EVENTS)));
        let log = std::fs::read(data.join("tenants/default/sessions/grown/session.jsonl")).unwrap();
        let header = String::from_utf8_lossy(&log[..log.iter().position(|byte| *byte == b'\n').unwrap()]).into_owned();
        assert!(header.contains(&format!("\"version\":{version},")), "--preallocate-logs {switch}: {header}");
    }
}
