//! Issue 52 (R-A7), the CLI's readers: sessions stored with `content` as a string and as
//! OpenAI-style typed parts (`berth-testkit/fixtures/content/`, imported as they are —
//! no migration) read as text in `berth sessions cat --transcript`, and `berth sessions
//! ls` names an untitled conversation by its first user message; on a data directory
//! and through a server alike.

mod common;

use common::{as_alice, berth, start_server, stdout_ok as ok};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../berth-testkit/fixtures/content").join(name)
}

/// The fixtures imported, a titled conversation and a blank session beside them.
fn seeded(data: &Path) {
    for name in ["chat-strings.jsonl", "chat-parts.jsonl"] {
        ok(as_alice(data, &["import", fixture(name).to_str().unwrap()]));
    }
    ok(as_alice(data, &["sessions", "new", "--id", "titled", "--title", "Named by hand"]));
    let message =
        "{\"type\":\"user/message\",\"data\":{\"content\":[{\"type\":\"input_text\",\"text\":\"not the title\"}]}}\n";
    let mut append = berth(data);
    append.args(["append", "titled", "-"]).env("BERTH_TENANT", "acme").env("BERTH_USER", "alice");
    let mut child = append.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::null()).spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), message.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());
    ok(as_alice(data, &["sessions", "new", "--id", "empty"]));
}

const PARTS_TRANSCRIPT: &str = "\
#0 turn/start: turn 0
#1 user/message: What is in this picture?
    [image]
    [file: notes.pdf]
#2 assistant/message: hi
#3 tool/call: get_weather call_w1: {\"city\":\"Paris\"}
#4 tool/result: call_w1: Sunny, 21 °C
    [image]
#5 user/message: [audio]
#6 assistant/message: [refusal] I can't transcribe that recording.
#7 turn/end: turn 0, completed
";

const STRINGS_TRANSCRIPT: &str = "\
#0 system/message: You are a helpful assistant.
#1 turn/start: turn 0
#2 user/message: What is in the repo?
    Short answer, please.
#3 assistant/message: → ls call-1: {\"path\":\".\"}
#4 tool/call: ls call-1: {\"path\":\".\"}
#5 tool/result: call-1: README.md
    src
#6 assistant/message: A README and a src directory.
#7 turn/end: turn 0, completed
";

fn check_listing(listed: &str) {
    let line = |id: &str| listed.lines().find(|line| line.starts_with(&format!("{id} "))).unwrap_or("").to_owned();
    assert!(line("chat-parts").ends_with("  user: \"What is in this picture? [image] [file: notes.pdf]\""), "{listed}");
    assert!(line("chat-strings").ends_with("  user: \"What is in the repo? Short answer, please.\""), "{listed}");
    assert!(line("titled").ends_with("  \"Named by hand\""), "a title wins over the preview: {listed}");
    assert!(!listed.contains("empty"), "a blank session stays hidden: {listed}");
}

#[test]
fn old_sessions_in_both_shapes_read_as_text_on_a_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    seeded(&data);
    assert_eq!(ok(as_alice(&data, &["sessions", "cat", "chat-parts", "--transcript"])), PARTS_TRANSCRIPT);
    assert_eq!(ok(as_alice(&data, &["sessions", "cat", "chat-strings", "--transcript"])), STRINGS_TRANSCRIPT);
    let part = ok(as_alice(&data, &["sessions", "cat", "chat-parts", "--transcript", "--from", "5", "--limit", "1"]));
    assert_eq!(part, "#5 user/message: [audio]\n");
    // The JSON lines keep the stored data exactly; only `time` reads as RFC 3339 in text.
    let lines = ok(as_alice(&data, &["sessions", "cat", "chat-parts"]));
    let exported = std::fs::read_to_string(fixture("chat-parts.jsonl")).unwrap();
    let data_of = |line: &str| {
        let event: serde_json::Value = serde_json::from_str(line).unwrap();
        (event["seq"].clone(), event["type"].clone(), event["data"].to_string())
    };
    assert_eq!(
        lines.lines().map(data_of).collect::<Vec<_>>(),
        exported.lines().skip(1).map(data_of).collect::<Vec<_>>()
    );
    assert!(lines.lines().all(|line| line.contains("\"time\":\"2026-")), "{lines}");
    let refused = as_alice(&data, &["--json", "sessions", "cat", "chat-parts", "--transcript"]);
    assert_eq!(refused.status.code(), Some(2), "--transcript is text: {}", String::from_utf8_lossy(&refused.stderr));
    check_listing(&ok(as_alice(&data, &["sessions", "ls"])));
    let all = ok(as_alice(&data, &["sessions", "ls", "--all"]));
    let empty = all.lines().find(|line| line.starts_with("empty ")).unwrap();
    assert!(!empty.contains('"'), "a blank session has no preview: {empty}");
    // `--json` prints the wire bodies unchanged: no preview field is invented there.
    let json = ok(as_alice(&data, &["--json", "sessions", "ls"]));
    assert!(!json.contains("What is in"), "{json}");
}

#[test]
fn old_sessions_in_both_shapes_read_as_text_through_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    seeded(&data);
    let (_server, url, _admin) = start_server(&data);
    let key = ok(berth(&data)
        .args(["keys", "create", "--tenant", "acme", "--user", "alice", "--role", "user"])
        .output()
        .unwrap());
    let remote = |args: &[&str]| {
        ok(berth(&data).arg("--server").arg(&url).args(args).env("BERTH_API_KEY", key.trim()).output().unwrap())
    };
    assert_eq!(remote(&["sessions", "cat", "chat-parts", "--transcript"]), PARTS_TRANSCRIPT);
    assert_eq!(remote(&["sessions", "cat", "chat-strings", "--transcript"]), STRINGS_TRANSCRIPT);
    check_listing(&remote(&["sessions", "ls"]));
}
