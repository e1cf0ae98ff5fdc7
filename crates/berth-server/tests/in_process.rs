//! The in-process server (the Python package's embedded transport): `shutdown` returns
//! only once its background tasks have ended, so a host that drops its runtime right
//! after never has one of them polled mid-shutdown (tokio's timer panics then: seen in
//! CI as the sweeper's `Interval::tick` panicking during a store's close).

mod common;

use berth_server::in_process::InProcessServer;
use berth_server::metrics::Metrics;
use common::{open_service_with, test_config};
use std::time::Duration;

#[test]
fn shutdown_waits_for_the_background_tasks_before_the_runtime_goes() {
    for _ in 0..20 {
        let scratch = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let server = runtime.block_on(async {
            let service = open_service_with(scratch.path(), &Metrics::new(), |service| service).await;
            let config = berth_server::ServerConfig {
                sweep_interval: Some(Duration::from_millis(1)),
                writer_idle_close: Some(Duration::from_millis(1)),
                ..test_config()
            };
            InProcessServer::start(config, service, None)
        });
        runtime.block_on(async { tokio::time::sleep(Duration::from_millis(5)).await }); // both tasks ticked
        assert_eq!(server.background_tasks(), 2);
        runtime.block_on(server.shutdown()).unwrap();
        assert_eq!(server.background_tasks(), 0);
        drop(runtime);
    }
}

async fn call_json(
    server: &InProcessServer,
    principal: &berth_service::Principal,
    method: axum::http::Method,
    path: String,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let request = axum::http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap();
    let response = server.call(principal.clone(), request).await;
    let status = response.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null))
}

/// A host may close the store with calls still answering (an asyncio caller's appends in
/// flight). `shutdown` waits for them before it closes the write handles: each append is
/// stored or refused as `unavailable`, never failed with the handle closed under it (a
/// 500 `internal` before the wait), and a call after shutdown is refused the same way.
#[test]
fn shutdown_lets_the_calls_in_flight_finish_and_refuses_new_ones() {
    let scratch = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let principal = common::principal("closing", "agent", None, berth_service::Role::Service);
    let server = std::sync::Arc::new(runtime.block_on(async {
        let service = open_service_with(scratch.path(), &Metrics::new(), |service| service).await;
        InProcessServer::start(test_config(), service, None)
    }));
    let sessions = 8;
    runtime.block_on(async {
        for n in 0..sessions {
            let body = serde_json::json!({"id": format!("s{n}")});
            let (status, _) =
                call_json(&server, &principal, axum::http::Method::POST, "/v1/sessions".into(), body).await;
            assert_eq!(status, 201);
        }
    });
    let appends: Vec<_> = (0..200)
        .map(|n| {
            let (server, principal) = (server.clone(), principal.clone());
            runtime.spawn(async move {
                let path = format!("/v1/sessions/s{}/events", n % sessions);
                let body = serde_json::json!({"events": [{"type": "note/n", "data": {"n": n}}]});
                call_json(&server, &principal, axum::http::Method::POST, path, body).await
            })
        })
        .collect();
    runtime.block_on(async { tokio::time::sleep(Duration::from_millis(2)).await });
    runtime.block_on(server.shutdown()).unwrap();
    let mut stored = 0;
    for append in appends {
        let (status, body) = runtime.block_on(append).unwrap();
        match status {
            200 | 201 => stored += 1,
            503 => assert_eq!(body["code"], "unavailable", "{body}"),
            other => panic!("an append in flight at shutdown answered {other}: {body}"),
        }
    }
    assert!(stored > 0, "some appends were in flight, not all refused");
    let late = runtime.block_on(call_json(
        &server,
        &principal,
        axum::http::Method::GET,
        "/v1/sessions/s0".into(),
        serde_json::Value::Null,
    ));
    assert_eq!((late.0, late.1["code"].as_str()), (503, Some("unavailable")));
}
