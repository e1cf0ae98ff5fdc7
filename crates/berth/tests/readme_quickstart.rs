//! The README's quickstart, run as written: the shell lines between the
//! `quickstart:begin` / `quickstart:end` markers against the real `berth` binary, on a free
//! port, in an empty directory — twice in a row, as a user who reruns it would.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const README: &str = include_str!("../../../README.md");

fn quickstart_lines() -> Vec<String> {
    let begin = README.find("<!-- quickstart:begin -->").expect("quickstart:begin marker");
    let end = README.find("<!-- quickstart:end -->").expect("quickstart:end marker");
    README[begin..end].lines().skip(1).filter(|line| !line.starts_with("```")).map(str::to_owned).collect()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn the_readme_quickstart_runs_as_written_twice_in_a_row() {
    let lines = quickstart_lines();
    assert!(lines.iter().any(|line| line.contains("berth serve")));
    assert!(lines.iter().any(|line| line.contains("curl")));
    assert!(!lines.iter().any(|line| line.trim_start().starts_with("alias ")), "aliases do not work in scripts");
    let port = free_port();
    let body = lines.join("\n").replace("127.0.0.1:7420", &format!("127.0.0.1:{port}"));
    let dir = tempfile::tempdir().unwrap();
    for run in 1..=2 {
        let stdout = run_quickstart(&body, dir.path(), run);
        assert!(stdout.contains("listening on http://127.0.0.1:"), "{stdout}");
        // Every JSON answer ends its line.
        assert!(stdout.contains("\"title\":\"hello\"") && stdout.contains("}\n"), "{stdout}");
        assert!(stdout.contains(r#""next_seq":2"#), "append or read missing:\n{stdout}");
        assert!(stdout.contains("id: 0") && stdout.contains("id: 1"), "tail missing:\n{stdout}");
        assert!(stdout.contains(r#""content":"hello!""#), "{stdout}");
    }
    // Nothing left where it ran (the data went to a temp directory of its own).
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    assert!(left.is_empty(), "the quickstart left files behind: {left:?}");
}

fn run_quickstart(body: &str, dir: &std::path::Path, run: u32) -> String {
    let script =
        format!("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT\n{body}\nwait\necho QUICKSTART-DONE\n");
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_berth"));
    let path = format!("{}:{}", binary.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let data = tempfile::tempdir().unwrap();
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(dir)
        .env("PATH", path)
        // mktemp -d: under a directory this test removes.
        .env("TMPDIR", data.path())
        .env_remove("BERTH_DATA")
        .env_remove("BERTH_SERVER")
        .env_remove("BERTH_API_KEY")
        .env_remove("BERTH_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("run {run} of the quickstart did not finish in 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(status.success(), "run {run} failed: {status}\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
    assert!(stdout.contains("QUICKSTART-DONE"), "{stdout}");
    stdout
}
