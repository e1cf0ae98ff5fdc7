//! Live tail over SSE: every appended event arrives once, in order; a reconnect with
//! `Last-Event-ID` resumes exactly after the last event seen; a revoked key's or a
//! deleted session's stream ends with an error event; shutdown ends open streams.

mod common;

use berth_core::SessionId;
use berth_server::client::{Client, SseStream};
use berth_service::Role;
use common::{test_config, TestServer};
use hyper::Method;
use serde_json::json;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

async fn create(client: &Client, id: &str) {
    let body = serde_json::to_vec(&json!({"id": id})).unwrap();
    let response = client.send(Method::POST, "/v1/sessions", Some(body), &[]).await.unwrap();
    assert_eq!(response.status.as_u16(), 201);
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
async fn a_tail_gets_every_event_once_in_order_and_resumes_from_last_event_id() {
    let server = TestServer::start().await;
    let client = server.client(&server.key("acme", "svc", None, Role::Service));
    let id = SessionId::parse("live").unwrap();
    create(&client, "live").await;
    append(&client, "live", 0, 3).await;

    let mut stream = client.tail(&id, Some(0), None).await.unwrap();
    let writer = client.clone();
    let appends = tokio::spawn(async move {
        for batch in 0..40 {
            append(&writer, "live", 3 + batch * 2, 2).await;
        }
    });
    let mut seen = Vec::new();
    while seen.len() < 50 {
        seen.push(next_seq(&mut stream).await);
    }
    assert_eq!(seen, (0..50).collect::<Vec<u64>>());
    // Disconnect mid-stream; appends go on.
    drop(stream);
    appends.await.unwrap();
    let last_seen = *seen.last().unwrap();
    let mut resumed = client.tail(&id, None, Some(last_seen)).await.unwrap();
    while seen.len() < 83 {
        seen.push(next_seq(&mut resumed).await);
    }
    assert_eq!(seen, (0..83).collect::<Vec<u64>>(), "a gap or a repeat across the reconnect");
    // Caught up: the next event arrives only when appended.
    append(&client, "live", 83, 1).await;
    assert_eq!(next_seq(&mut resumed).await, 83);
    // `from` starts anywhere.
    let mut late = client.tail(&id, Some(80), None).await.unwrap();
    assert_eq!(next_seq(&mut late).await, 80);
    // A bad Last-Event-ID is a 400, not a stream.
    let response =
        client.send(Method::GET, "/v1/sessions/live/events/stream", None, &[("last-event-id", "x")]).await.unwrap();
    assert_eq!(response.status.as_u16(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_key_or_a_deleted_session_ends_the_stream_and_shutdown_ends_the_rest() {
    let mut config = test_config();
    config.tail_recheck = Duration::from_millis(200);
    let server = TestServer::start_with(config).await;
    let service = server.client(&server.key("acme", "svc", None, Role::Service));
    let admin = server.client(&server.key("acme", "root", None, Role::Admin));
    create(&service, "a").await;
    create(&service, "b").await;
    create(&service, "c").await;

    let (info, token) = server.keys.create(&common::principal("acme", "temp", None, Role::Service), None).unwrap();
    let temporary = server.client(&token);
    let mut revoked_stream = temporary.tail(&SessionId::parse("a").unwrap(), None, None).await.unwrap();
    server.keys.revoke(&info.key_id).unwrap();
    let ended = tokio::time::timeout(WAIT, revoked_stream.next_event()).await.unwrap();
    assert_eq!(ended.unwrap_err().code(), "unauthenticated");

    let mut deleted_stream = service.tail(&SessionId::parse("b").unwrap(), None, None).await.unwrap();
    let response = admin.send(Method::DELETE, "/v1/sessions/b", None, &[]).await.unwrap();
    assert_eq!(response.status.as_u16(), 204);
    let ended = tokio::time::timeout(WAIT, deleted_stream.next_event()).await.unwrap();
    assert_eq!(ended.unwrap_err().code(), "not_found");

    let mut open_stream = service.tail(&SessionId::parse("c").unwrap(), None, None).await.unwrap();
    let state = server.server.state.clone();
    assert_eq!(state.tails_open(), 1);
    tokio::time::timeout(WAIT, server.server.shutdown()).await.unwrap().unwrap();
    let ended = tokio::time::timeout(WAIT, open_stream.next_event()).await.unwrap();
    assert!(matches!(ended, Ok(None) | Err(_)));
}

/// A bounded tail ends by itself, so scripts and tests can use it: `max_events` after that
/// many events, `idle_timeout_ms` after that long without one, each with one `event: end`
/// saying why and where to resume. Without the bounds both streams would stay open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_tail_ends_after_max_events_or_an_idle_timeout() {
    let server = TestServer::start().await;
    let client = server.client(&server.key("acme", "svc", None, Role::Service));
    create(&client, "bounded").await;
    append(&client, "bounded", 0, 5).await;
    let read_all = |query: &'static str| {
        let client = client.clone();
        async move {
            let path = format!("/v1/sessions/bounded/events/stream?{query}");
            let response = tokio::time::timeout(WAIT, client.send(Method::GET, &path, None, &[]))
                .await
                .expect("the bounded stream did not end")
                .unwrap();
            assert_eq!(response.status.as_u16(), 200);
            String::from_utf8(response.body.to_vec()).unwrap()
        }
    };
    let capped = read_all("from=1&max_events=3").await;
    assert_eq!(capped.matches("event: event").count(), 3, "{capped}");
    assert!(capped.contains("id: 3") && !capped.contains("id: 4"), "{capped}");
    assert!(capped.contains(r#"data: {"reason":"max_events","next_seq":4}"#), "{capped}");
    let idle = read_all("from=4&idle_timeout_ms=200").await;
    assert_eq!(idle.matches("event: event").count(), 1, "{idle}");
    assert!(idle.contains(r#"data: {"reason":"idle_timeout","next_seq":5}"#), "{idle}");
    let (status, _) = {
        let response =
            client.send(Method::GET, "/v1/sessions/bounded/events/stream?max_events=0", None, &[]).await.unwrap();
        (response.status.as_u16(), response.body)
    };
    assert_eq!(status, 400, "max_events is at least 1");
}

/// Appends to one session from many concurrent clients are stored one after another
/// (contiguous seqs, no 409: the service's per-session append lock; the server has none
/// of its own) and a tail that only wakes on the feed (no recheck within the test) sees
/// every one of them in order: publishes that arrive out of order never hide an event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_to_one_session_are_stored_in_turn_and_a_tail_sees_every_event() {
    const WRITERS: usize = 8;
    const APPENDS_EACH: usize = 10;
    let mut config = test_config();
    config.tail_recheck = Duration::from_secs(3600);
    let server = TestServer::start_with(config).await;
    let client = server.client(&server.key("acme", "svc", None, Role::Service));
    let id = SessionId::parse("busy").unwrap();
    create(&client, "busy").await;
    let mut stream = client.tail(&id, Some(0), None).await.unwrap();
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let client = client.clone();
        writers.push(tokio::spawn(async move {
            for append_index in 0..APPENDS_EACH {
                append(&client, "busy", writer * 1000 + append_index, 1).await;
            }
        }));
    }
    let mut seen = Vec::new();
    while seen.len() < WRITERS * APPENDS_EACH {
        seen.push(next_seq(&mut stream).await);
    }
    assert_eq!(seen, (0..(WRITERS * APPENDS_EACH) as u64).collect::<Vec<u64>>());
    for writer in writers {
        writer.await.unwrap();
    }
    let response = client.send(Method::GET, "/v1/sessions/busy/events?limit=1000", None, &[]).await.unwrap();
    let page: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
    let mut marks: Vec<u64> =
        page["events"].as_array().unwrap().iter().map(|e| e["data"]["i"].as_u64().unwrap()).collect();
    assert_eq!(marks.len(), WRITERS * APPENDS_EACH);
    let in_stored_order = marks.clone();
    marks.sort_unstable();
    marks.dedup();
    assert_eq!(marks.len(), WRITERS * APPENDS_EACH, "an append was stored twice or lost");
    for writer in 0..WRITERS as u64 {
        let own: Vec<u64> = in_stored_order.iter().copied().filter(|mark| mark / 1000 == writer).collect();
        assert!(own.windows(2).all(|pair| pair[0] < pair[1]), "writer {writer}'s appends out of order: {own:?}");
    }
}
