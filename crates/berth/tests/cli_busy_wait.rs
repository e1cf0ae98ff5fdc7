//! `berth append` waits out another process's write handle on the session
//! (`--busy-wait`, 10 s by default) instead of failing at once with `writer_busy` (exit
//! 4): many concurrent single-event appends on one session all land, and a held lease is
//! waited for until released, or reported (naming another process) when the wait is 0.

mod common;

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TENANT: &str = "acme";

/// `berth --data DATA` acting in tenant `acme` (hermetic otherwise: `common::berth`).
fn berth(data: &Path) -> Command {
    let mut command = common::berth(data);
    command.env("BERTH_TENANT", TENANT);
    command
}

fn append(data: &Path, extra: &[&str], text: &str) -> std::process::Child {
    let mut command = berth(data);
    command.args(["append", "s"]).args(extra);
    let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let line = format!("{{\"type\":\"user/message\",\"data\":{{\"content\":\"{text}\"}}}}\n");
    child.stdin.take().unwrap().write_all(line.as_bytes()).unwrap();
    child
}

fn events_of(data: &Path) -> usize {
    let output = berth(data).args(["--json", "sessions", "show", "s"]).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let shown: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    shown["event_count"].as_u64().expect("event_count") as usize
}

fn create(data: &Path) {
    let output = berth(data).args(["sessions", "new", "--id", "s"]).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn concurrent_appends_on_one_session_all_land() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    create(&data);
    let before = events_of(&data);
    let appends = 24;
    let children: Vec<_> = (0..appends).map(|i| append(&data, &[], &format!("m{i}"))).collect();
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "exit {:?}: {}",
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert_eq!(events_of(&data), before + appends);
}

/// Holds the session's writer lease as another process would (the `flock` on
/// `session.lock`, docs/reference/storage-format.md).
fn hold_lease(data: &Path) -> std::fs::File {
    let lock = data.join("tenants").join(TENANT).join("sessions").join("s").join("session.lock");
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&lock).unwrap();
    // SAFETY: a valid descriptor owned by `file` for the call's duration.
    assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
    file
}

#[test]
fn a_held_writer_lease_is_waited_out_or_reported_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    create(&data);
    let before = events_of(&data);
    let lease = hold_lease(&data);
    let refused = append(&data, &["--busy-wait", "0"], "now").wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("open for writing by another process"), "{stderr}");
    // A wait longer than the hold lands the event once the lease is let go.
    let started = Instant::now();
    let waiting = append(&data, &["--busy-wait", "30"], "later");
    std::thread::sleep(Duration::from_millis(600));
    drop(lease);
    let output = waiting.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(started.elapsed() >= Duration::from_millis(600));
    assert_eq!(events_of(&data), before + 1);
    for bad in ["-1", "nan", "soon", "3601"] {
        let output = berth(&data).args(["append", "s", "--busy-wait", bad]).stdin(Stdio::null()).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "--busy-wait {bad}: a usage error");
    }
}
