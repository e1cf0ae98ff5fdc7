//! What `berth` prints for people: every time as RFC 3339 in UTC with milliseconds
//! (the same instant `--json` gives in epoch milliseconds, which stays the API's
//! format), and `berth fsck` as one readable line per log and a summary, `--json` as one
//! object per log, with exit codes 0, 10 and 11 for what it found.

mod common;

use common::berth;
use std::io::Write;
use std::path::Path;
use std::process::{Output, Stdio};

const TENANT: &str = "acme";

/// `berth ARGS` as an admin of `TENANT`, with `stdin`.
fn run(data: &Path, args: &[&str], stdin: &str) -> Output {
    let mut child = berth(data)
        .args(args)
        .env("BERTH_TENANT", TENANT)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn ok(data: &Path, args: &[&str]) -> String {
    ok_with(data, args, "")
}

fn ok_with(data: &Path, args: &[&str], stdin: &str) -> String {
    let output = run(data, args, stdin);
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

fn json(data: &Path, args: &[&str]) -> serde_json::Value {
    let mut with_json = vec!["--json"];
    with_json.extend_from_slice(args);
    serde_json::from_str(&ok(data, &with_json)).unwrap()
}

/// The RFC 3339 text of an epoch-milliseconds time, from its calendar fields.
fn rfc3339(ms: &serde_json::Value) -> String {
    let ms = ms.as_u64().unwrap_or_else(|| panic!("{ms} is not epoch milliseconds"));
    let moment = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        moment.year(),
        u8::from(moment.month()),
        moment.day(),
        moment.hour(),
        moment.minute(),
        moment.second(),
        moment.millisecond()
    )
}

/// Whether `text` holds a number of 13 digits or more: a time in epoch milliseconds.
fn has_epoch_ms(text: &str) -> bool {
    text.split(|c: char| !c.is_ascii_digit()).any(|digits| digits.len() >= 13)
}

#[test]
fn text_output_prints_times_as_rfc3339_and_json_keeps_milliseconds() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    ok(&data, &["sessions", "new", "--id", "chat-1", "--title", "demo"]);
    let attached = ok(&data, &["runs", "attach", "chat-1", "--run", "run-1"]);
    let events = concat!(
        r#"{"type":"turn/start","data":{"turn":0},"time":1767225601000}"#,
        "\n",
        r#"{"type":"user/message","data":{"content":"hi","n":1.50},"time":1767225601500}"#,
        "\n",
    );
    ok_with(&data, &["append", "chat-1", "--run", "run-1"], events);

    // `sessions cat` (and `tail`): the canonical envelope, its time in RFC 3339, the data
    // exactly as stored; `--json` the /v1 event body in milliseconds.
    let cat = ok(&data, &["sessions", "cat", "chat-1"]);
    assert_eq!(
        cat,
        concat!(
            r#"{"seq":0,"type":"turn/start","time":"2026-01-01T00:00:01.000Z","run":"run-1","data":{"turn":0}}"#,
            "\n",
            r#"{"seq":1,"type":"user/message","time":"2026-01-01T00:00:01.500Z","run":"run-1","data":{"content":"hi","n":1.50}}"#,
            "\n",
        )
    );
    let tailed = ok(&data, &["sessions", "tail", "chat-1", "--until", "2"]);
    assert_eq!(tailed, cat);
    let json_cat = ok(&data, &["--json", "sessions", "cat", "chat-1"]);
    let first: serde_json::Value = serde_json::from_str(json_cat.lines().next().unwrap()).unwrap();
    assert_eq!(first["time"], 1_767_225_601_000u64);
    assert_eq!(ok(&data, &["log", "cat", "--tenant", TENANT, "chat-1"]), cat, "log cat prints the same lines");

    // `sessions ls`, `show` and `stat`: the times of the JSON body, as text.
    let session = json(&data, &["sessions", "show", "chat-1"]);
    let listed = ok(&data, &["sessions", "ls"]);
    assert!(listed.contains(&format!("last_activity {}", rfc3339(&session["last_activity"]))), "{listed}");
    let shown = ok(&data, &["sessions", "show", "chat-1"]);
    for (field, ms) in [
        ("created_at", &session["header"]["created_at"]),
        ("lease_until", &session["lease_until"]),
        ("last_activity", &session["last_activity"]),
        ("status_changed_at", &session["status_changed_at"]),
        ("attached_at", &session["runs"][0]["attached_at"]),
        ("lease_until", &session["runs"][0]["lease_until"]),
    ] {
        assert!(shown.contains(&format!("\"{field}\": \"{}\"", rfc3339(ms))), "{field} in {shown}");
    }
    let stat = ok(&data, &["sessions", "stat", "chat-1"]);
    assert!(stat.contains(&format!("\"created_at\": \"{}\"", rfc3339(&session["header"]["created_at"]))), "{stat}");
    assert!(json(&data, &["sessions", "stat", "chat-1"])["session"]["header"]["created_at"].is_u64());
    let log_stat = ok(&data, &["log", "stat", "--tenant", TENANT, "chat-1"]);
    assert!(log_stat.contains(&format!("\"created_at\": \"{}\"", rfc3339(&session["header"]["created_at"]))));

    // Runs: the lease as text.
    assert!(attached.starts_with("run-1 lease_until 20") && attached.contains("Z revision"), "{attached}");
    let beat = ok(&data, &["runs", "heartbeat", "chat-1", "run-1"]);
    let run = &json(&data, &["sessions", "show", "chat-1"])["runs"][0];
    assert_eq!(beat.trim(), format!("run-1 lease_until {}", rfc3339(&run["lease_until"])));

    // The audit log: each entry's time.
    let entries = json(&data, &["audit", "log"]);
    let audit = ok(&data, &["audit", "log"]);
    for (line, entry) in audit.lines().zip(entries.as_array().unwrap()) {
        assert!(line.contains(&rfc3339(&entry["time"])), "{line}");
    }

    // Keys: when each was made.
    ok(&data, &["keys", "create", "--tenant", TENANT, "--user", "bob"]);
    let keys = json(&data, &["keys", "list"]);
    let listed_keys = ok(&data, &["keys", "list"]);
    assert!(listed_keys.contains(&format!("created {}", rfc3339(&keys[0]["created_at_ms"]))), "{listed_keys}");

    // No time left in milliseconds (a change token's numbers and a key's hex id aside).
    let key_lines = listed_keys.lines().map(|line| line.split_once(' ').unwrap().1.to_owned()).collect::<Vec<_>>();
    for text in [&cat, &listed, &shown, &stat, &log_stat, &attached, &beat, &audit, &key_lines.join("\n")] {
        let lines = text.lines().filter(|line| !line.contains("\"change_token\""));
        let text = lines.collect::<Vec<_>>().join("\n");
        assert!(!has_epoch_ms(&text), "a time in milliseconds left in text output:\n{text}");
    }
}

/// Three events per log, so damage in the second line is followed by valid records.
fn make_logs(data: &Path, ids: &[&str]) {
    let events = "{\"type\":\"note/x\",\"data\":{}}\n".repeat(3);
    for id in ids {
        ok(data, &["sessions", "new", "--id", id]);
        ok_with(data, &["append", id], &events);
    }
}

fn log_path(data: &Path, id: &str) -> std::path::PathBuf {
    data.join("tenants").join(TENANT).join("sessions").join(id).join("session.jsonl")
}

#[test]
fn fsck_prints_a_line_per_log_and_exits_with_what_it_found() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    make_logs(&data, &["clean", "torn"]);
    let clean = run(&data, &["fsck"], "");
    assert_eq!(clean.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(clean.stdout).unwrap(),
        "acme/clean  ok           3 events\nacme/torn   ok           3 events\n2 logs: 2 ok\n"
    );

    let committed = std::fs::metadata(log_path(&data, "torn")).unwrap().len();
    std::fs::OpenOptions::new()
        .append(true)
        .open(log_path(&data, "torn"))
        .unwrap()
        .write_all(b"{\"seq\":3,\"ty")
        .unwrap();
    let torn = run(&data, &["fsck"], "");
    assert_eq!(torn.status.code(), Some(10));
    let text = String::from_utf8(torn.stdout).unwrap();
    let expected = format!(
        "acme/torn   torn tail    3 events; 12 torn bytes after byte {committed} (repairable: berth fsck --repair)"
    );
    assert!(text.lines().any(|line| line == expected), "{text}");
    assert!(text.ends_with("2 logs: 1 ok, 1 torn tail(s) left (berth fsck --repair cuts them)\n"), "{text}");
    let report: serde_json::Value = serde_json::from_slice(&run(&data, &["--json", "fsck"], "").stdout).unwrap();
    assert_eq!(report["torn_tails"], 1);
    assert_eq!(report["damaged"], 0);
    let row = &report["sessions"][1];
    assert_eq!(
        (row["tenant"].as_str(), row["session"].as_str(), row["status"].as_str()),
        (Some(TENANT), Some("torn"), Some("torn_tail"))
    );
    assert_eq!(
        (row["events"].as_u64(), row["committed_len"].as_u64(), row["torn_bytes"].as_u64()),
        (Some(3), Some(committed), Some(12))
    );

    let mut corrupt = std::fs::read(log_path(&data, "clean")).unwrap();
    let second_line = corrupt.iter().position(|byte| *byte == b'\n').unwrap() + 10;
    corrupt[second_line] ^= 0x01;
    std::fs::write(log_path(&data, "clean"), &corrupt).unwrap();
    let damaged = run(&data, &["fsck", "--repair"], "");
    assert_eq!(damaged.status.code(), Some(11), "a corrupt log outranks a repaired tail");
    let text = String::from_utf8(damaged.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("acme/clean  corrupt      ")
            && lines[0].contains("at byte ")
            && lines[0].contains("(seq 0): ")
            && lines[0].contains("never modified"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("acme/torn   repaired     3 events; 12 torn bytes") && lines[1].contains("a copy kept in"),
        "{text}"
    );
    assert_eq!(lines[2], "2 logs: 0 ok, 1 repaired, 1 damaged (never modified)");
    assert_eq!(std::fs::read(log_path(&data, "clean")).unwrap(), corrupt, "a corrupt log is never modified");
    assert_eq!(std::fs::metadata(log_path(&data, "torn")).unwrap().len(), committed, "the torn tail was cut");

    std::fs::remove_dir_all(log_path(&data, "clean").parent().unwrap()).unwrap();
    assert_eq!(run(&data, &["fsck"], "").status.code(), Some(0), "repaired: clean again");
}
