//! A mistake in the command line exits 2, as clap's own errors do: a missing or invalid
//! flag, argument or principal part, or a command given a store it cannot work on, is
//! reported with the flag (and environment variable) to set; `--json` reports it with the
//! code `usage`. What a store or server refuses keeps its own exit code.

mod common;

use common::berth;
use std::path::Path;
use std::process::{Output, Stdio};

fn run(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = berth(data);
    command.args(args).stdin(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

/// Asserts `args` exits 2 with a message holding each of `mentions`; returns stderr.
fn assert_usage(data: &Path, args: &[&str], env: &[(&str, &str)], mentions: &[&str]) -> String {
    let output = run(data, args, env);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(2), "{args:?} {env:?}: {stderr}");
    assert!(output.stdout.is_empty(), "{args:?}: nothing on stdout");
    for mention in mentions {
        assert!(stderr.contains(mention), "{args:?}: {mention:?} in {stderr}");
    }
    stderr
}

#[test]
fn a_missing_or_invalid_principal_names_its_flag_and_variable() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let stderr = assert_usage(&data, &["sessions", "ls"], &[], &["--tenant is required", "BERTH_TENANT"]);
    assert!(stderr.starts_with("berth: "), "{stderr}");
    for (variable, value, flag) in [
        ("BERTH_TENANT", "a b", "--tenant"),
        ("BERTH_USER", "a/b", "--user"),
        ("BERTH_PROJECT", "..", "--project"),
        ("BERTH_ROLE", "owner", "--role"),
    ] {
        let mut env = vec![("BERTH_TENANT", "acme")];
        env.push((variable, value));
        assert_usage(&data, &["sessions", "ls"], &env, &[flag, variable]);
    }
    // Every principal-taking command checks the same way, `--json` in the API's error shape.
    let output = run(&data, &["--json", "audit", "verify"], &[]);
    assert_eq!(output.status.code(), Some(2));
    let error: serde_json::Value = serde_json::from_slice(&output.stderr).unwrap();
    assert_eq!(error["error"]["code"], "usage");
    assert_eq!(error["error"]["retryable"], false);
    assert!(error["error"]["message"].as_str().unwrap().contains("BERTH_TENANT"), "{error}");
}

#[test]
fn invalid_arguments_and_misplaced_commands_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let acme = [("BERTH_TENANT", "acme")];
    assert_usage(&data, &["sessions", "show", "bad id"], &acme, &["<ID>", "\"bad id\""]);
    assert_usage(&data, &["sessions", "new", "--id", "a/b"], &acme, &["--id"]);
    assert_usage(&data, &["sessions", "ls", "--status", "sleeping"], &acme, &["--status"]);
    assert_usage(&data, &["runs", "heartbeat", "chat-1", "bad run"], &acme, &["<RUN>"]);
    assert_usage(&data, &["append", "chat-1", "--run", "bad run"], &acme, &["--run"]);
    assert_usage(&data, &["memory", "put", "user/alice", "k", "{not json"], &acme, &["<VALUE>"]);
    assert_usage(&data, &["memory", "search", "app", "--where", "n"], &acme, &["--where"]);
    assert_usage(&data, &["memory", "search", "app", "--order", "size"], &acme, &["--order"]);
    assert_usage(&data, &["log", "ls", "--tenant", "a b"], &[], &["--tenant"]);
    assert_usage(&data, &["serve", "--preallocate-logs", "maybe"], &[], &["--preallocate-logs", "on, off"]);
    assert_usage(&data, &["serve"], &[("BERTH_PREALLOCATE_LOGS", "1")], &["--preallocate-logs"]);
    assert_usage(&data, &["keys", "create", "--tenant", "acme", "--user", "bob", "--role", "root"], &[], &["--role"]);
    // Commands given a store they cannot work on.
    let memory = Path::new("memory:");
    assert_usage(memory, &["fsck"], &[], &["fsck needs a data directory", "BERTH_DATA"]);
    assert_usage(Path::new("ftp://host/x"), &["sessions", "ls"], &acme, &["--data", "BERTH_DATA"]);
    assert_usage(memory, &["migrate", "--app-role", "app"], &[], &["--app-role"]);
    assert_usage(memory, &["keys", "list"], &[], &["--keys-file"]);
    // `--server`: a URL berth cannot use, a data-directory command, a gc with no policy.
    let nowhere = "http://127.0.0.1:9";
    assert_usage(&data, &["--server", "ftp://host", "sessions", "ls"], &[], &["--server", "BERTH_SERVER"]);
    assert_usage(&data, &["--server", nowhere, "fsck"], &[], &["drop --server", "BERTH_SERVER"]);
    assert_usage(&data, &["--server", nowhere, "log", "ls", "--tenant", "acme"], &[], &["drop --server"]);
    assert_usage(&data, &["--server", nowhere, "gc"], &[], &["--idle-ttl-ms"]);
    // clap's own: an unknown flag, a value of the wrong kind.
    assert_usage(&data, &["sessions", "ls", "--bogus"], &acme, &["--bogus"]);
    assert_usage(&data, &["sessions", "cat", "s", "--from", "x"], &acme, &["--from"]);
}

#[test]
fn what_a_store_refuses_keeps_its_own_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let acme = [("BERTH_TENANT", "acme")];
    assert_eq!(run(&data, &["sessions", "show", "missing"], &acme).status.code(), Some(3), "not found");
    assert_eq!(run(&data, &["sessions", "new", "--id", "s"], &acme).status.code(), Some(0));
    assert_eq!(run(&data, &["sessions", "new", "--id", "s"], &acme).status.code(), Some(4), "already exists");
    let long_title = "t".repeat(600);
    assert_eq!(run(&data, &["sessions", "new", "--title", &long_title], &acme).status.code(), Some(5), "limit");
    let user = [("BERTH_TENANT", "acme"), ("BERTH_ROLE", "user")];
    assert_eq!(run(&data, &["sessions", "reopen", "s"], &user).status.code(), Some(5), "forbidden for the role");
}
