//! `berth --json` prints the `/v1` wire bodies (`berth_api`), the same JSON on a data
//! directory and with `--server` against a `berth serve` child: one script of commands
//! (create, attach, append, show, ls, cat, two errors) runs in both modes, as real
//! processes, and both transcripts must equal the committed golden file
//! `tests/golden/cli-json.txt` byte for byte (regenerate with
//! `BERTH_BLESS=1 cargo test -p berth --test cli_json_golden` and review the diff).
//!
//! The inputs are deterministic (client-chosen session and run ids, explicit event
//! times, an idempotency key). The one normalization: the times the store assigns from
//! its clock (the fields named in `CLOCK_FIELDS`, on lines of the pretty-printed JSON)
//! are replaced by `<time>`; every other byte is compared as printed.

mod common;

use common::{berth, start_server};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// Fields the store fills from its clock (never the caller's event times).
const CLOCK_FIELDS: &[&str] =
    &["created_at", "lease_until", "last_activity", "status_changed_at", "attached_at", "session_lease_until"];

const EVENTS: &str = concat!(
    r#"{"type":"turn/start","data":{"turn":0},"time":1767225601000}"#,
    "\n",
    r##"{"type":"user/message","data":{"content":"refund \"#12\" ✓","z":1.50},"time":1767225601500}"##,
    "\n",
);

/// The script: (arguments, stdin). Every command gets `--json`.
fn script() -> Vec<(Vec<&'static str>, Option<&'static str>)> {
    vec![
        (vec!["sessions", "new", "--id", "chat-1", "--title", "Refund", "--label", "billing", "--label", "vip"], None),
        (vec!["runs", "attach", "chat-1", "--run", "run-1"], None),
        (
            vec!["append", "chat-1", "--run", "run-1", "--expected-seq", "0", "--idempotency-key", "batch-1"],
            Some(EVENTS),
        ),
        (vec!["append", "chat-1", "--run", "run-1", "--idempotency-key", "batch-1"], Some(EVENTS)),
        (vec!["sessions", "show", "chat-1"], None),
        (vec!["sessions", "ls"], None),
        (vec!["sessions", "cat", "chat-1"], None),
        (vec!["sessions", "show", "missing"], None),
        (vec!["append", "chat-1", "--run", "run-1", "--expected-seq", "7"], Some(EVENTS)),
        (vec!["runs", "attach", "chat-1", "--run", "run-2"], None),
    ]
}

fn run(mut command: Command, stdin: Option<&str>) -> Output {
    let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

/// `text` with the value of every clock field replaced by `<time>`.
fn normalize(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let field = CLOCK_FIELDS.iter().find(|field| trimmed.starts_with(&format!("\"{field}\": ")));
        match field {
            Some(field) => {
                let indent = &line[..line.len() - trimmed.len()];
                let comma = if trimmed.ends_with(',') { "," } else { "" };
                out.push_str(&format!("{indent}\"{field}\": \"<time>\"{comma}"));
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Runs the script through `command_for` and returns the normalized transcript.
fn transcript(command_for: impl Fn() -> Command) -> String {
    let mut out = String::new();
    for (args, stdin) in script() {
        let mut command = command_for();
        command.arg("--json").args(&args);
        let output = run(command, stdin);
        out.push_str(&format!("$ berth --json {}\n", args.join(" ")));
        out.push_str(&format!("exit {}\n", output.status.code().unwrap_or(-1)));
        out.push_str(&normalize(&String::from_utf8(output.stdout).unwrap()));
        let stderr = String::from_utf8(output.stderr).unwrap();
        if !stderr.is_empty() {
            out.push_str("stderr:\n");
            out.push_str(&normalize(&stderr));
        }
    }
    out
}

fn golden_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/cli-json.txt")
}

fn assert_golden(mode: &str, transcript: &str) {
    let path = golden_path();
    if std::env::var_os("BERTH_BLESS").is_some() && mode == "data directory" {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, transcript).unwrap();
    }
    let golden = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        transcript == golden,
        "{mode}: `berth --json` printed other JSON than {}; review and bless\nnow:\n{transcript}",
        path.display()
    );
}

#[test]
fn json_output_is_the_wire_format_in_both_modes() {
    let dir = tempfile::tempdir().unwrap();
    let local_data = dir.path().join("local");
    let local = transcript(|| {
        let mut command = berth(&local_data);
        command.env("BERTH_TENANT", "default").env("BERTH_USER", "alice").env("BERTH_ROLE", "user");
        command
    });
    assert_golden("data directory", &local);

    let server_data = dir.path().join("served");
    let (_server, url, _admin_key) = start_server(&server_data);
    let created = berth(&server_data)
        .args(["keys", "create", "--tenant", "default", "--user", "alice", "--role", "user"])
        .output()
        .unwrap();
    assert!(created.status.success());
    let key = String::from_utf8(created.stdout).unwrap().trim().to_owned();
    let remote = transcript(|| {
        let mut command = berth(&server_data);
        command.arg("--server").arg(&url).env("BERTH_API_KEY", &key);
        command
    });
    assert_golden("--server", &remote);
}

/// The printed session is a `berth_api::SessionBody`: it decodes as one (unknown fields
/// refused in its header), so a client of the HTTP API can read the CLI's output.
#[test]
fn the_golden_json_decodes_as_wire_bodies() {
    let golden = std::fs::read_to_string(golden_path()).unwrap();
    let show = golden.split("$ berth --json ").find(|part| part.starts_with("sessions show chat-1")).unwrap();
    let json: String = show.lines().skip(2).collect::<Vec<_>>().join("\n").replace("\"<time>\"", "0");
    let body: berth_api::SessionBody = serde_json::from_str(&json).unwrap();
    assert_eq!(body.header.id.as_str(), "chat-1");
    assert_eq!(body.event_count, 2);
}
