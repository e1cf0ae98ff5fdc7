//! The `berth` binary as one process in a pipeline: a stdout whose reader has gone
//! (`berth … | true`) ends the command quietly, never with a panic (exit 101) — and for
//! `append`, after the events are stored exactly once, with exit 0 (docs/reference/cli.md); bytes
//! on stdin that are not UTF-8 are invalid input (exit 5).

use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Output, Stdio};

const TENANT: &str = "acme";

fn berth(data: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_berth"));
    command
        .arg("--data")
        .arg(data)
        .env("BERTH_TENANT", TENANT)
        .env_remove("BERTH_SERVER")
        .env_remove("BERTH_API_KEY")
        .env_remove("BERTH_DATA");
    command
}

/// The write end of a pipe whose read end is already closed: every write to it fails
/// with `EPIPE` from the child's first byte on (no race with a reader closing later).
fn stdout_with_no_reader() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors `pipe2` writes.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0, "pipe2");
    // SAFETY: both descriptors were just created by `pipe2` and are owned here alone.
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(reader);
    Stdio::from(writer)
}

/// Runs `command` with `stdin` as its input and a stdout nobody reads.
fn run_with_closed_stdout(mut command: Command, stdin: &[u8]) -> Output {
    let mut child =
        command.stdin(Stdio::piped()).stdout(stdout_with_no_reader()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn run_ok(mut command: Command) -> String {
    let output = command.stdin(Stdio::null()).output().unwrap();
    assert!(output.status.success(), "{command:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

fn assert_quiet_success(output: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{what} panicked: {stderr}");
    assert_eq!(output.status.code(), Some(0), "{what}: {stderr}");
    assert!(stderr.trim().is_empty(), "{what} ends quietly: {stderr}");
}

fn create_session(data: &Path, id: &str) {
    let mut create = berth(data);
    create.args(["sessions", "new", "--id", id]);
    run_ok(create);
}

#[test]
fn read_commands_with_a_closed_stdout_end_quietly_with_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    create_session(&data, "s");
    for args in [
        &["--json", "sessions", "show", "s"][..],
        &["sessions", "show", "s"],
        &["--json", "sessions", "ls", "--all"],
        &["sessions", "ls", "--all"],
        &["sessions", "cat", "s"],
        &["export", "s"],
    ] {
        let mut command = berth(&data);
        command.args(args);
        assert_quiet_success(&run_with_closed_stdout(command, b""), &args.join(" "));
    }
}

#[test]
fn an_append_whose_report_cannot_be_written_is_stored_once_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    create_session(&data, "s");
    let events = b"{\"type\":\"note/a\",\"data\":{}}\n{\"type\":\"note/b\",\"data\":{}}\n";
    for (json, expected_events) in [(false, 2), (true, 4)] {
        let mut append = berth(&data);
        if json {
            append.arg("--json");
        }
        append.args(["append", "s"]);
        assert_quiet_success(&run_with_closed_stdout(append, events), "append");
        let mut cat = berth(&data);
        cat.args(["sessions", "cat", "s"]);
        let stored = run_ok(cat);
        assert_eq!(stored.lines().count(), expected_events, "each append stored exactly once:\n{stored}");
    }
}

/// Events that are not UTF-8 are invalid input (exit 5, naming the line), not an I/O
/// error (exit 1, documented as retryable); nothing is appended. Both from stdin and
/// from a file.
#[test]
fn events_that_are_not_utf8_are_invalid_input_exit_5() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    create_session(&data, "s");
    let events = b"{\"type\":\"note/a\",\"data\":{}}\n{\"type\":\"note/b\",\"data\":{\"text\":\"\xff\xfe\"}}\n";
    let file = dir.path().join("events.jsonl");
    std::fs::write(&file, events).unwrap();
    for from_file in [false, true] {
        let mut append = berth(&data);
        append.args(["--json", "append", "s"]);
        if from_file {
            append.arg(&file);
        }
        let mut child = append.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(if from_file { b"" } else { events }).unwrap();
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(5), "from file {from_file}: {stderr}");
        assert!(stderr.contains(r#""code":"invalid""#) && stderr.contains("line 2"), "{stderr}");
    }
    let mut cat = berth(&data);
    cat.args(["sessions", "cat", "s"]);
    assert_eq!(run_ok(cat), "", "nothing appended");
}
