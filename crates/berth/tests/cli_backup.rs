//! `berth backup` and `berth restore`, black box: only the `berth` binary (a `berth
//! serve` child taking appends and memory writes through `berth --server` while
//! `berth backup` copies its data directory; restore, fsck, audit verify and a server on
//! the restored directory), and a `berth backup` killed with SIGKILL midway. And the
//! PostgreSQL recipe docs/backup.md gives (`postgres`), which `berth backup` points to.

mod common;

use common::{berth, start_server, Server};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn remote(url: &str, key: &str) -> Command {
    let mut command = berth(Path::new("unused"));
    command.args(["--server", url, "--api-key", key]);
    command
}

fn run(mut command: Command) -> Output {
    command.stdin(Stdio::null()).output().unwrap()
}

fn with_stdin(mut command: Command, input: &str) -> Output {
    let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn ok(output: &Output) -> &Output {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    output
}

fn event_line(i: u64) -> String {
    format!("{{\"type\":\"note/x\",\"data\":{{\"i\":{i},\"pad\":\"{}\"}}}}\n", "x".repeat(500))
}

/// Events of `id` in the data directory `data`: each `{"i": seq, …}`; returns the count.
fn check_events(data: &Path, tenant: &str, id: &str) -> u64 {
    let output = run({
        let mut command = berth(data);
        command.args(["sessions", "cat", "--tenant", tenant, id]);
        command
    });
    let text = String::from_utf8(ok(&output).stdout.clone()).unwrap();
    let mut count = 0;
    for (seq, line) in text.lines().enumerate() {
        let event: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(event["seq"], seq as u64, "{id}: {line}");
        assert_eq!(event["data"]["i"], seq as u64, "{id}: {line}");
        count += 1;
    }
    count
}

/// `berth serve` on a directory that already has its keys (no first-start key).
fn serve_existing(data: &Path) -> (Server, String) {
    let mut child = berth(data)
        .args(["serve", "--listen", "127.0.0.1:0", "--sweep-interval-s", "0"])
        .env("BERTH_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    std::thread::spawn(move || for _ in stdout.lines() {});
    let url = line.split_whitespace().find(|word| word.starts_with("http://")).unwrap().to_owned();
    (Server(child), url)
}

/// While three writers append and one puts memory items through `berth --server`,
/// `berth backup` copies the server's data directory (slowly, to overlap them). The
/// restore holds every event and item acknowledged before the backup began, `berth
/// fsck` finds it clean, `berth audit verify` passes, and a server on it (with the
/// restored keys) serves every session and accepts appends.
#[test]
fn a_backup_of_a_live_server_restores_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let (data, out, restored) = (dir.path().join("data"), dir.path().join("backup"), dir.path().join("restored"));
    let (server, url, key) = start_server(&data);
    let ids: [&'static str; 3] = ["s1", "s2", "s3"];
    for id in ids {
        ok(&run({
            let mut command = remote(&url, &key);
            command.args(["sessions", "new", "--id", id]);
            command
        }));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..=ids.len()).map(|_| AtomicU64::new(0)).collect());
    let mut writers = Vec::new();
    for (index, id) in ids.into_iter().enumerate() {
        let (url, key, stop, acked) = (url.clone(), key.clone(), Arc::clone(&stop), Arc::clone(&acked));
        writers.push(std::thread::spawn(move || {
            let mut next = 0;
            while !stop.load(Ordering::Acquire) {
                let mut command = remote(&url, &key);
                command.args(["append", id]);
                let batch: String = (next..next + 10).map(event_line).collect();
                ok(&with_stdin(command, &batch));
                next += 10;
                acked[index].store(next, Ordering::Release);
            }
        }));
    }
    let (memory_url, memory_key, memory_stop, memory_acked) =
        (url.clone(), key.clone(), Arc::clone(&stop), Arc::clone(&acked));
    writers.push(std::thread::spawn(move || {
        let mut next = 0_u64;
        while !memory_stop.load(Ordering::Acquire) {
            let mut command = remote(&memory_url, &memory_key);
            command.args(["memory", "put", "app/main", &format!("k{next}"), &next.to_string()]);
            ok(&run(command));
            next += 1;
            memory_acked[ids.len()].store(next, Ordering::Release);
        }
    }));
    let deadline = Instant::now() + Duration::from_secs(120);
    while acked.iter().any(|count| count.load(Ordering::Acquire) < 3) {
        assert!(Instant::now() < deadline, "the writers made no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before: Vec<u64> = acked.iter().map(|count| count.load(Ordering::Acquire)).collect();
    let backup = run({
        let mut command = berth(&data);
        command.args(["--json", "backup", "--to"]).arg(&out).args(["--rate-mib-s", "1"]);
        command
    });
    let summary: serde_json::Value = serde_json::from_slice(&ok(&backup).stdout).unwrap();
    stop.store(true, Ordering::Release);
    for writer in writers {
        writer.join().unwrap();
    }
    drop(server);
    assert_eq!(summary["sessions"], 3, "{summary}");

    let restore = run({
        let mut command = berth(Path::new("unused"));
        command.args(["--json", "restore", "--from"]).arg(&out).arg("--to").arg(&restored);
        command
    });
    let report: serde_json::Value = serde_json::from_slice(&ok(&restore).stdout).unwrap();
    assert_eq!(report["logs"], 3, "{report}");
    ok(&run({
        let mut command = berth(&restored);
        command.arg("fsck");
        command
    }));
    ok(&run({
        let mut command = berth(&restored);
        command.args(["audit", "verify", "--tenant", "default"]);
        command
    }));
    let mut counts = BTreeMap::new();
    for (index, id) in ids.iter().enumerate() {
        let count = check_events(&restored, "default", id);
        assert!(count >= before[index], "{id}: {count} restored, {} acknowledged before the backup", before[index]);
        counts.insert(*id, count);
    }
    for item in 0..before[ids.len()] {
        let output = run({
            let mut command = berth(&restored);
            command.args(["--json", "memory", "get", "--tenant", "default", "app/main", &format!("k{item}")]);
            command
        });
        let value: serde_json::Value = serde_json::from_slice(&ok(&output).stdout).unwrap();
        assert_eq!(value["value"], item, "k{item}");
    }

    // The restored directory serves, with the keys it was backed up with.
    let (_restored_server, restored_url) = serve_existing(&restored);
    for id in ids {
        let mut command = remote(&restored_url, &key);
        command.args(["append", id]);
        ok(&with_stdin(command, &event_line(counts[id])));
    }
    drop(_restored_server);
    for id in ids {
        assert_eq!(check_events(&restored, "default", id), counts[id] + 1);
    }
}

/// Every file of a data directory but SQLite's transient WAL and shared-memory files,
/// with its bytes.
fn snapshot_files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                pending.push(path);
            } else if !name.ends_with("-wal") && !name.ends_with("-shm") {
                files.insert(path.strip_prefix(dir).unwrap().to_path_buf(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// `berth backup` killed with SIGKILL while it copies the logs: the live directory is
/// byte for byte what it was (fsck clean, audit intact), the partial backup has no
/// manifest and `berth restore` refuses it (exit 5) without creating its target, the
/// partial directory is not reused, and a new backup then works.
#[test]
fn a_backup_killed_midway_leaves_the_store_untouched_and_is_refused_by_restore() {
    let dir = tempfile::tempdir().unwrap();
    let (data, out, target) = (dir.path().join("data"), dir.path().join("partial"), dir.path().join("target"));
    let sessions = 12;
    for session in 0..sessions {
        let id = format!("s{session:02}");
        ok(&run({
            let mut command = berth(&data);
            command.args(["sessions", "new", "--tenant", "acme", "--id", &id]);
            command
        }));
        let mut command = berth(&data);
        command.args(["append", "--tenant", "acme", &id]);
        ok(&with_stdin(command, &(0..400).map(event_line).collect::<String>()));
    }
    let before = snapshot_files(&data);

    // 1 MiB/s over a few MiB of logs: seconds of copying to be killed in.
    let mut child = berth(&data)
        .args(["backup", "--to"])
        .arg(&out)
        .args(["--rate-mib-s", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let first_log = out.join("tenants/acme/sessions/s00/session.jsonl");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !first_log.exists() {
        assert!(Instant::now() < deadline, "the backup never started copying logs");
        assert!(child.try_wait().unwrap().is_none(), "the backup ended before it could be killed");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "killed by SIGKILL");

    assert_eq!(snapshot_files(&data), before, "the live directory is untouched");
    ok(&run({
        let mut command = berth(&data);
        command.arg("fsck");
        command
    }));
    ok(&run({
        let mut command = berth(&data);
        command.args(["audit", "verify", "--tenant", "acme"]);
        command
    }));
    assert!(!out.join("manifest.json").exists());
    let refused = run({
        let mut command = berth(Path::new("unused"));
        command.args(["restore", "--from"]).arg(&out).arg("--to").arg(&target);
        command
    });
    assert_eq!(refused.status.code(), Some(5), "{}", String::from_utf8_lossy(&refused.stderr));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("did not finish"));
    assert!(!target.exists());
    let reused = run({
        let mut command = berth(&data);
        command.args(["backup", "--to"]).arg(&out);
        command
    });
    assert_eq!(reused.status.code(), Some(4), "a partial backup's directory is not written into");

    let fresh = dir.path().join("fresh");
    ok(&run({
        let mut command = berth(&data);
        command.args(["backup", "--to"]).arg(&fresh);
        command
    }));
    ok(&run({
        let mut command = berth(Path::new("unused"));
        command.args(["restore", "--from"]).arg(&fresh).arg("--to").arg(&target);
        command
    }));
    assert_eq!(check_events(&target, "acme", "s11"), 400);
}

/// `berth backup` on a PostgreSQL store names the tools to use instead, and touches
/// nothing (no connection is made: the URL need not even resolve).
#[test]
fn a_postgres_store_is_sent_to_its_own_tools() {
    let dir = tempfile::tempdir().unwrap();
    let output = run({
        let mut command = Command::new(env!("CARGO_BIN_EXE_berth"));
        command.args(["--data", "postgres://nobody@invalid.invalid/berth", "backup", "--to"]).arg(dir.path().join("b"));
        command
    });
    assert_eq!(output.status.code(), Some(5));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("pg_dump") && stderr.contains("point-in-time"), "{stderr}");
    assert!(!dir.path().join("b").exists());
}

/// A PostgreSQL store is backed up with PostgreSQL's own tools (docs/backup.md), and
/// this is the tested recipe: `pg_dump --format=custom` of a live berth database (an
/// app role serving, a writer appending throughout the dump), `pg_restore --no-owner
/// --no-privileges` into a new database, `berth migrate --app-role` to grant the serving
/// role again, then `berth serve` on it as that role: every session reads back whole,
/// every event and memory item acknowledged before the dump began is there, and `berth
/// audit verify` passes. Runs against the local server (`BERTH_TEST_PG`), in databases
/// of its own.
mod postgres {
    use super::common;
    use berth::postgres::testing::{TestDatabase, TestServer};
    use berth_catalog::scoped::{MemoryPut, Namespace};
    use berth_core::{JsonText, SessionId, TenantId, UserId};
    use berth_service::{AppendRequest, CreateSession, NewEvent, Principal, Role, SessionService};
    use std::path::Path;
    use std::process::{Command, Output, Stdio};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    const SESSIONS: u64 = 4;

    fn admin() -> Principal {
        Principal {
            tenant: TenantId::parse("default").unwrap(),
            user: UserId::parse("ops").unwrap(),
            project: None,
            role: Role::Admin,
        }
    }

    fn sid(index: u64) -> SessionId {
        SessionId::parse(&format!("s{index}")).unwrap()
    }

    async fn append(service: &SessionService, index: u64, first: u64, count: u64) {
        let events = (first..first + count).map(|i| NewEvent::new("note/x", serde_json::json!({ "i": i }))).collect();
        let request =
            AppendRequest { run: None, expected_seq: Some(first), events, idempotency_key: None, memory: Vec::new() };
        service.append(&admin(), &sid(index), request).await.unwrap();
    }

    fn ok(output: Output) -> Output {
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        output
    }

    fn remote(url: &str, key: &str, args: &[&str]) -> Output {
        ok(common::berth(Path::new("unused")).args(["--server", url, "--api-key", key]).args(args).output().unwrap())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pg_dump_of_a_live_store_restores_into_a_new_database_that_serves() {
        let source = TestDatabase::with_app_role().await;
        let service = Arc::new(berth::open_service(&source.app_url(), berth::system_clock()).await.unwrap());
        for index in 0..SESSIONS {
            let request = CreateSession { id: Some(sid(index)), ..CreateSession::default() };
            service.create(&admin(), request).await.unwrap();
            append(&service, index, 0, 20).await;
        }
        let namespace = Namespace::parse("app/main").unwrap();
        for item in 0..10_u64 {
            let put = MemoryPut {
                namespace: namespace.clone(),
                key: format!("k{item}"),
                value: JsonText::parse(&item.to_string()).unwrap(),
                expected_revision: None,
                ttl_ms: None,
                bound_to: None,
            };
            service.memory_put(&admin(), put).await.unwrap();
        }
        // A writer appends to s0 throughout the dump.
        let (stop, acked) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(20)));
        let writer = {
            let (service, stop, acked) = (Arc::clone(&service), Arc::clone(&stop), Arc::clone(&acked));
            tokio::spawn(async move {
                while !stop.load(Ordering::Acquire) {
                    let next = acked.load(Ordering::Acquire);
                    append(&service, 0, next, 2).await;
                    acked.store(next + 2, Ordering::Release);
                }
            })
        };
        let scratch = tempfile::tempdir().unwrap();
        let dump = scratch.path().join("berth.dump");
        let before = acked.load(Ordering::Acquire);
        let (source_url, dump_path) = (source.url(), dump.clone());
        tokio::task::spawn_blocking(move || {
            ok(Command::new("pg_dump")
                .args(["--format=custom", "--file"])
                .arg(&dump_path)
                .arg(&source_url)
                .output()
                .unwrap())
        })
        .await
        .unwrap();
        stop.store(true, Ordering::Release);
        writer.await.unwrap();
        service.shutdown().await.unwrap();

        let target = TestDatabase::create().await;
        ok(Command::new("pg_restore")
            .args(["--no-owner", "--no-privileges", "--exit-on-error", "--single-transaction", "--dbname"])
            .arg(target.url())
            .arg(&dump)
            .output()
            .unwrap());
        let role = source.app_role().to_owned();
        ok(common::berth(Path::new(&target.url())).args(["migrate", "--app-role", &role]).output().unwrap());
        let password = source.app_url().parse::<berth::postgres::testing::tokio_postgres::Config>().unwrap();
        let app_url = TestServer {
            user: role,
            password: password.get_password().map(|bytes| String::from_utf8_lossy(bytes).into_owned()),
            ..target.server().clone()
        }
        .url(target.name(), None);

        let keys = scratch.path().join("keys.sqlite");
        let keys = keys.to_str().unwrap();
        let (_server, url, key) = common::start_server_with(Path::new(&app_url), &["--keys-file", keys]);

        for index in 0..SESSIONS {
            let id = format!("s{index}");
            let text = String::from_utf8(remote(&url, &key, &["sessions", "cat", &id]).stdout).unwrap();
            let events: Vec<serde_json::Value> = text.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
            for (seq, event) in events.iter().enumerate() {
                assert_eq!((event["seq"].as_u64(), event["data"]["i"].as_u64()), (Some(seq as u64), Some(seq as u64)));
            }
            let acknowledged = if index == 0 { before } else { 20 };
            assert!(events.len() as u64 >= acknowledged, "{id}: {} events, {acknowledged} acknowledged", events.len());
        }
        for item in 0..10 {
            let output = remote(&url, &key, &["--json", "memory", "get", "app/main", &format!("k{item}")]);
            let value: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
            assert_eq!(value["value"], item);
        }
        let verdict = remote(&url, &key, &["--json", "audit", "verify"]);
        let verdict: serde_json::Value = serde_json::from_slice(&verdict.stdout).unwrap();
        assert_eq!(verdict["broken_at"], serde_json::Value::Null, "{verdict}");
        assert!(verdict["entries"].as_u64().unwrap() >= SESSIONS, "{verdict}");
        // And it takes appends. The dump copied the source server's writer lease on the
        // sessions it was writing, so they are busy until that lease lapses (10 s by
        // default), as the guide says; then an append goes through.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let appended = common::berth(Path::new("unused"))
                .args(["--server", &url, "--api-key", &key, "append", "s1"])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .and_then(|mut child| {
                    use std::io::Write;
                    child.stdin.take().unwrap().write_all(b"{\"type\":\"note/x\",\"data\":{\"i\":20}}\n")?;
                    child.wait_with_output()
                })
                .unwrap();
            if appended.status.success() {
                break;
            }
            let stderr = String::from_utf8_lossy(&appended.stderr).into_owned();
            assert!(stderr.contains("busy"), "an append to the restored store failed: {stderr}");
            assert!(std::time::Instant::now() < deadline, "s1 stayed busy past the copied lease: {stderr}");
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }
}
