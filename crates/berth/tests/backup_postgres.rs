//! A PostgreSQL store is backed up with PostgreSQL's own tools (docs/backup.md), and
//! this is the tested recipe: `pg_dump --format=custom` of a live berth database (an
//! app role serving, a writer appending throughout the dump), `pg_restore --no-owner
//! --no-privileges` into a new database, `berth migrate --app-role` to grant the serving
//! role again, then `berth serve` on it as that role: every session reads back whole,
//! every event and memory item acknowledged before the dump began is there, and `berth
//! audit verify` passes. Runs against the local server (`BERTH_TEST_PG`), in databases
//! of its own.

mod common;

use berth::postgres::testing::{TestDatabase, TestServer};
use berth_catalog::scoped::{MemoryPut, Namespace};
use berth_core::{JsonText, SessionId, TenantId, UserId};
use berth_service::{AppendRequest, CreateSession, NewEvent, Principal, Role, SessionService};
use std::io::{BufRead, BufReader};
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
    let mut child = common::berth(Path::new(&app_url))
        .args(["serve", "--listen", "127.0.0.1:0", "--sweep-interval-s", "0", "--keys-file"])
        .arg(&keys)
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
    std::thread::spawn(move || for _ in stdout.lines() {});
    let _server = common::Server(child);
    let url = lines[0].split_whitespace().find(|word| word.starts_with("http://")).unwrap().to_owned();
    let key = lines[2].trim().to_owned();

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
    // And it takes appends.
    let appended = common::berth(Path::new("unused"))
        .args(["--server", &url, "--api-key", &key, "append", "s1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(b"{\"type\":\"note/x\",\"data\":{\"i\":20}}\n")?;
            child.wait()
        })
        .unwrap();
    assert!(appended.success());
}
