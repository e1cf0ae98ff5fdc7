//! Memory writes carried by an append, through a SIGKILL of a real `berth serve`
//! between the log append and the apply (issue 11, `docs/reference/memory.md`): after a restart
//! the writes are in the log but not yet applied; finishing them (a retry of the keyed
//! append, or a resume) applies each exactly once, and again changes nothing; a `forget`
//! of a scope before the finish cancels that scope's writes, so nothing forgotten comes
//! back. On the embedded store and on PostgreSQL.

mod common;

use berth::postgres::testing::TestDatabase;
use berth_api::PutMemoryBody;
use berth_core::{JsonText, SessionId, TenantId, UserId};
use berth_server::auth::KeyStore;
use berth_server::client::Client;
use berth_service::{AttachRequest, CreateSession, OnBusy, Principal, Role};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const KEYS_FILE: &str = "keys.sqlite";

fn serve(store: &str, keys: &Path, pause_file: Option<&Path>) -> (common::Server, String) {
    let mut command: Command = common::berth(Path::new(store));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--rate-per-tenant", "0", "--sweep-interval-s", "0"])
        .arg("--keys-file")
        .arg(keys)
        .env("BERTH_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(path) = pause_file {
        command.env(berth_service::PAUSE_HOOK_ENV, path);
    }
    let mut child = command.spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("listening on"), "{line:?}");
    std::thread::spawn(move || for _ in stdout.lines() {});
    let url = line.split_whitespace().find(|word| word.starts_with("http://")).unwrap().to_owned();
    (common::Server(child), url)
}

fn service_key(keys: &Path) -> String {
    let principal = Principal {
        tenant: TenantId::parse("acme").unwrap(),
        user: UserId::parse("agent").unwrap(),
        project: None,
        role: Role::Service,
    };
    KeyStore::open(keys).unwrap().create(&principal, None).unwrap().1
}

fn write(namespace: &str, key: &str, value: &str) -> PutMemoryBody {
    PutMemoryBody {
        namespace: namespace.into(),
        key: key.into(),
        value: JsonText::parse(value).unwrap(),
        expected_revision: None,
        ttl_ms: None,
        bound_to: None,
    }
}

fn carried_append() -> berth_api::AppendBody {
    berth_api::AppendBody {
        run: None,
        expected_seq: None,
        events: vec![berth_api::NewEventBody {
            event_type: "user/message".into(),
            data: JsonText::parse(r#"{"content":"remember"}"#).unwrap(),
            time: None,
            ignorable: false,
        }],
        idempotency_key: Some("carry-1".into()),
        memory: vec![
            write("user/alice/prefs", "tone", r#"{"style":"terse","n":18446744073709551617}"#),
            write("app/faq", "hours", r#""9-5""#),
        ],
    }
}

async fn revision(client: &Client, namespace: &str, key: &str) -> Option<u64> {
    match client.memory_get(namespace, key).await {
        Ok(item) => Some(item.revision),
        Err(error) if error.code() == "not_found" => None,
        Err(error) => panic!("get {namespace}:{key}: {error}"),
    }
}

/// On PostgreSQL the killed server's writer lease holds until it lapses (10 s): a
/// write is answered busy until then.
async fn until_not_busy<T, F, Fut>(mut call: F) -> berth_core::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = berth_core::Result<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match call().await {
            Err(berth_core::Error::Busy { .. } | berth_core::Error::WriterBusy { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            other => return other,
        }
    }
}

async fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(Instant::now() < deadline, "the server never reached the pause point");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A carried append that completes before the one the test interrupts: it leaves the
/// session's marker, which the next carried append reuses ("unapplied from here").
fn earlier_append() -> berth_api::AppendBody {
    berth_api::AppendBody {
        idempotency_key: Some("carry-0".into()),
        memory: vec![write("app/faq", "days", r#""mon-fri""#)],
        ..carried_append()
    }
}

/// Runs the scenario on `store`; `forget_first` forgets `user/alice` before finishing;
/// `earlier`: a carried append completes first, so the interrupted one reuses its marker.
async fn scenario(store: &str, scratch: &Path, forget_first: bool, earlier: bool) {
    let keys = scratch.join(KEYS_FILE);
    let key = service_key(&keys);
    let pause = scratch.join("paused");
    let session = SessionId::parse("chat-1").unwrap();

    let (mut server, url) = serve(store, &keys, Some(&pause));
    let client = Client::new(&url, Some(key.clone())).unwrap();
    client.create(&CreateSession { id: Some(session.clone()), ..CreateSession::default() }).await.unwrap();
    let body = serde_json::to_vec(&carried_append()).unwrap();
    let path = format!("/v1/sessions/{session}/events");
    let mut stored = vec!["user/message", "session/memory"];
    if earlier {
        std::fs::write(scratch.join("paused.skip"), b"").unwrap();
        let first = serde_json::to_vec(&earlier_append()).unwrap();
        let response = client.send(hyper::Method::POST, &path, Some(first), &[]).await.unwrap();
        assert_eq!(response.status.as_u16(), 200, "{:?}", String::from_utf8_lossy(&response.body));
        assert_eq!(revision(&client, "app/faq", "days").await, Some(1), "read its own write");
        stored.extend(["user/message", "session/memory"]);
    }
    let hanging = {
        let client = client.clone();
        let (path, body) = (path.clone(), body.clone());
        tokio::spawn(async move { client.send(hyper::Method::POST, &path, Some(body), &[]).await })
    };
    wait_for(&pause).await;
    server.0.kill().unwrap(); // SIGKILL: between the log append and the apply
    server.0.wait().unwrap();
    let _ = hanging.await;
    drop(server);

    let (_server, url) = serve(store, &keys, None);
    let client = Client::new(&url, Some(key)).unwrap();
    let events = client.read(&session, 0, None).await.unwrap();
    let types: Vec<&str> = events.iter().map(|event| event.event_type.as_str()).collect();
    assert_eq!(types, stored, "the batch is durable, with its writes");
    assert_eq!(revision(&client, "user/alice/prefs", "tone").await, None, "not applied before the crash");
    assert_eq!(revision(&client, "app/faq", "hours").await, None);

    if forget_first {
        let report = client.memory_forget("user/alice").await.unwrap();
        assert_eq!(report.sessions_holding_values, vec![session.clone()], "the log still holds the value");
        let resume = AttachRequest { on_busy: OnBusy::Interrupt, ..AttachRequest::default() };
        until_not_busy(|| client.resume(&session, &resume)).await.unwrap();
        assert_eq!(revision(&client, "user/alice/prefs", "tone").await, None, "a forgotten write is not resurrected");
        assert_eq!(revision(&client, "app/faq", "hours").await, Some(1), "the other scope's write is applied");
        return;
    }
    // A retry of the keyed append is answered as the original, and reads its writes.
    let response = until_not_busy(|| async {
        let response = client.send(hyper::Method::POST, &path, Some(body.clone()), &[]).await?;
        match response.status.as_u16() {
            409 => Err(berth_core::Error::Busy { id: String::new(), reason: "lease".into() }),
            _ => Ok(response),
        }
    })
    .await
    .unwrap();
    assert_eq!(response.status.as_u16(), 200, "{:?}", String::from_utf8_lossy(&response.body));
    let outcome: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
    assert_eq!(outcome["duplicate"], true);
    let item = client.memory_get("user/alice/prefs", "tone").await.unwrap();
    assert_eq!((item.revision, item.value.as_str()), (1, r#"{"style":"terse","n":18446744073709551617}"#));
    assert_eq!(revision(&client, "app/faq", "hours").await, Some(1));
    // Finishing again (a resume, another retry) applies nothing twice.
    let resume = AttachRequest { on_busy: OnBusy::Interrupt, ..AttachRequest::default() };
    client.resume(&session, &resume).await.unwrap();
    client.send(hyper::Method::POST, &path, Some(body), &[]).await.unwrap();
    assert_eq!(revision(&client, "user/alice/prefs", "tone").await, Some(1), "applied exactly once");
    assert_eq!(revision(&client, "app/faq", "hours").await, Some(1), "applied exactly once");
    let events = client.read(&session, 0, None).await.unwrap();
    let carried = events.iter().filter(|event| event.event_type.as_str() == "session/memory").count();
    assert_eq!(carried, stored.len() / 2, "the batch is stored once");
    if earlier {
        assert_eq!(revision(&client, "app/faq", "days").await, Some(1), "the earlier write, once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn carried_writes_survive_a_sigkill_embedded() {
    for (forget_first, earlier) in [(false, false), (true, false), (false, true), (true, true)] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        scenario(data.to_str().unwrap(), dir.path(), forget_first, earlier).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn carried_writes_survive_a_sigkill_postgres() {
    for (forget_first, earlier) in [(false, false), (true, false), (false, true), (true, true)] {
        let database = TestDatabase::with_app_role().await;
        let dir = tempfile::tempdir().unwrap();
        scenario(&database.app_url(), dir.path(), forget_first, earlier).await;
    }
}
