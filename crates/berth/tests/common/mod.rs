//! What the CLI's process tests share: the `berth` binary on a data directory, with no
//! principal or server inherited from the environment, and a `berth serve` child on a
//! free port that is killed when dropped.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

/// `berth --data DATA`, hermetic: no `BERTH_SERVER`, key or principal from the caller's
/// environment.
pub fn berth(data: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_berth"));
    command.arg("--data").arg(data);
    for variable in ["BERTH_SERVER", "BERTH_API_KEY", "BERTH_TENANT", "BERTH_USER", "BERTH_PROJECT", "BERTH_ROLE"] {
        command.env_remove(variable);
    }
    command
}

/// `berth ARGS` on `data` as alice of tenant acme, a `user` principal.
pub fn as_alice(data: &Path, args: &[&str]) -> Output {
    berth(data)
        .args(args)
        .env("BERTH_TENANT", "acme")
        .env("BERTH_USER", "alice")
        .env("BERTH_ROLE", "user")
        .output()
        .unwrap()
}

/// The standard output of a command that must have succeeded (its stderr otherwise).
pub fn stdout_ok(output: Output) -> String {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

/// A running `berth serve`, killed (and reaped) when dropped.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `berth serve` on a fresh data directory and a free port; returns it, its URL
/// and the admin key its first start printed.
pub fn start_server(data: &Path) -> (Server, String, String) {
    start_server_with(data, &[])
}

/// `start_server` with more `berth serve` arguments.
pub fn start_server_with(data: &Path, extra: &[&str]) -> (Server, String, String) {
    let mut child = berth(data)
        .args(["serve", "--listen", "127.0.0.1:0", "--sweep-interval-s", "0"])
        .args(extra)
        .env("BERTH_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    for _ in 0..3 {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        lines.push(line);
    }
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in stdout.lines() {});
    let url = lines[0].split_whitespace().find(|word| word.starts_with("http://")).unwrap().to_owned();
    assert!(lines[1].contains("first start"), "{lines:?}");
    let admin_key = lines[2].trim().to_owned();
    assert!(admin_key.starts_with("berth_"));
    (Server(child), url, admin_key)
}
