//! Real server responses are the pinned wire bodies: a server whose clock is fixed
//! answers `GET /v1/sessions/{id}` and `GET /v1/sessions/{id}/events` with exactly the
//! bytes of `tests/golden/` (regenerate with
//! `BERTH_BLESS=1 cargo test -p berth-server --test wire_golden` and review the diff), and
//! each body decodes as its `berth_api` type. The `berth-api` golden files pin the types;
//! these pin what the handlers actually send.

mod common;

use berth_core::{Clock, Timestamp};
use berth_service::Role;
use common::TestServer;
use hyper::Method;
use serde_json::json;
use std::sync::Arc;

/// A clock that never moves.
#[derive(Debug)]
struct FixedClock(u64);

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0)
    }
}

const T0: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

fn assert_golden(name: &str, bytes: &[u8]) {
    berth_golden::assert_golden(&berth_golden::golden_path(env!("CARGO_MANIFEST_DIR"), name), name, bytes);
}

async fn send(client: &berth_server::client::Client, method: Method, path: &str, body: serde_json::Value) -> Vec<u8> {
    let body = (!body.is_null()).then(|| serde_json::to_vec(&body).unwrap());
    let response = client.send(method, path, body, &[]).await.unwrap();
    assert!(response.status.is_success(), "{path}: {} {:?}", response.status, response.body);
    response.body.to_vec()
}

#[tokio::test]
async fn a_session_and_its_events_are_served_as_the_golden_bodies() {
    let server = TestServer::start_with_clock(Arc::new(FixedClock(T0))).await;
    let alice = server.client(&server.key("acme", "alice", Some("support"), Role::User));
    let create = json!({"id": "chat-1", "title": "Refund", "labels": ["vip", "billing"], "origin": "subagent"});
    send(&alice, Method::POST, "/v1/sessions", create).await;
    send(&alice, Method::POST, "/v1/sessions/chat-1/runs", json!({"run_id": "run-1"})).await;
    let events = json!({
        "run": "run-1",
        "expected_seq": 0,
        "idempotency_key": "batch-1",
        "events": [
            {"type": "turn/start", "data": {"turn": 0}, "time": T0 + 1_000},
            {"type": "user/message", "data": {"content": "hi", "z": 1.5}, "time": T0 + 1_500, "ignorable": true},
        ],
    });
    let outcome = send(&alice, Method::POST, "/v1/sessions/chat-1/events", events).await;
    assert_golden("append-outcome.json", &outcome);

    let session = send(&alice, Method::GET, "/v1/sessions/chat-1", serde_json::Value::Null).await;
    assert_golden("get-session.json", &session);
    let decoded: berth_api::SessionBody = serde_json::from_slice(&session).unwrap();
    assert_eq!(serde_json::to_vec(&decoded).unwrap(), session, "the body is a SessionBody's serialization");

    let page = send(&alice, Method::GET, "/v1/sessions/chat-1/events", serde_json::Value::Null).await;
    assert_golden("get-events.json", &page);
    let decoded: berth_api::EventPage = serde_json::from_slice(&page).unwrap();
    assert_eq!(serde_json::to_vec(&decoded).unwrap(), page, "the body is an EventPage's serialization");
}
