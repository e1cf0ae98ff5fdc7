//! Live tail across servers sharing one PostgreSQL database: a tail connected to server
//! A receives, once and in order, the events appended through server B (the server's
//! feed is `berth::PostgresFeed`, fed by `LISTEN`/`NOTIFY`; the in-process feed would
//! never wake for B's appends). Runs against the local PostgreSQL in a database of its
//! own (`BERTH_TEST_PG`).

use berth::postgres::testing::TestDatabase;
use berth_core::{SessionId, TenantId, UserId};
use berth_server::auth::{Authenticator, KeyStore, KEYS_FILE};
use berth_server::client::{Client, SseStream};
use berth_server::metrics::Metrics;
use berth_server::{RunningServer, ServerConfig, ServerParts};
use berth_service::{Principal, Role, SessionService};
use hyper::Method;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

async fn start(url: &str, keys: &KeyStore) -> RunningServer {
    let backends = berth::open_backends(&berth::StoreUrl::parse(url).unwrap()).await.unwrap();
    let feed = berth::change_feed(&backends);
    assert!(feed.is_some(), "a PostgreSQL store brings its own feed");
    let service = SessionService::new(backends.store, backends.catalog, berth::system_clock());
    let config = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        rate_limit: None,
        sweep_interval: None,
        // Far beyond WAIT: the stream may only wake through the feed.
        tail_recheck: Duration::from_secs(120),
        ..ServerConfig::default()
    };
    let parts = ServerParts {
        service: Arc::new(service),
        auth: Authenticator::new(keys.clone(), None),
        metrics: Arc::new(Metrics::new()),
        feed,
        backups: None,
    };
    berth_server::start(config, parts).await.unwrap()
}

async fn append(client: &Client, id: &str, first: usize, count: usize) {
    let events: Vec<_> = (first..first + count).map(|i| json!({"type": "note/x", "data": {"i": i}})).collect();
    let body = serde_json::to_vec(&json!({"events": events})).unwrap();
    let response = client.send(Method::POST, &format!("/v1/sessions/{id}/events"), Some(body), &[]).await.unwrap();
    assert_eq!(response.status.as_u16(), 200, "{:?}", response.body);
}

async fn next_seq(stream: &mut SseStream) -> u64 {
    let event = tokio::time::timeout(WAIT, stream.next_event()).await.expect("no event in time");
    event.unwrap().expect("stream ended").seq.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tail_on_one_server_receives_the_appends_made_through_another() {
    let database = TestDatabase::create().await;
    let dir = tempfile::tempdir().unwrap();
    let keys = KeyStore::open(&dir.path().join(KEYS_FILE)).unwrap();
    let principal = Principal {
        tenant: TenantId::parse("acme").unwrap(),
        user: UserId::parse("svc").unwrap(),
        project: None,
        role: Role::Service,
    };
    let key = keys.create(&principal, None).unwrap().1;
    let (a, b) = (start(&database.url(), &keys).await, start(&database.url(), &keys).await);
    let client_a = Client::new(&a.url(), Some(key.clone())).unwrap();
    let client_b = Client::new(&b.url(), Some(key)).unwrap();

    let body = serde_json::to_vec(&json!({"id": "shared"})).unwrap();
    let created = client_b.send(Method::POST, "/v1/sessions", Some(body), &[]).await.unwrap();
    assert_eq!(created.status.as_u16(), 201, "{:?}", created.body);
    append(&client_b, "shared", 0, 3).await;

    let id = SessionId::parse("shared").unwrap();
    let mut stream = client_a.tail(&id, Some(0), None).await.unwrap();
    let appends = tokio::spawn(async move {
        for batch in 0..20 {
            append(&client_b, "shared", 3 + batch * 2, 2).await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        client_b
    });
    let mut seen = Vec::new();
    while seen.len() < 43 {
        seen.push(next_seq(&mut stream).await);
    }
    assert_eq!(seen, (0..43).collect::<Vec<u64>>(), "a gap or a repeat");
    let client_b = appends.await.unwrap();
    // Caught up and idle: the next event arrives when B appends it.
    append(&client_b, "shared", 43, 1).await;
    assert_eq!(next_seq(&mut stream).await, 43);
    drop(stream);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
