//! Every error class survives the trip through HTTP: the response the server sends for
//! an error of a class (status, `retryable`, `Retry-After`) is the one `ErrorClass::TABLE`
//! gives, and the client decodes it back to an error of the same class. In process for
//! every row of the table, then for real against a server for every class a request
//! can produce.

mod common;

use axum::response::IntoResponse;
use berth_core::limits::{Limit, EVENT_BYTES_MAX, IDEMPOTENCY_KEY_BYTES_MAX};
use berth_core::{Error, ErrorClass, Location, RunId, SessionId};
use berth_server::client::{error_of, Client, RawResponse};
use berth_server::error::ApiError;
use berth_server::limits::RateLimit;
use berth_service::{AppendRequest, AttachRequest, ClosePolicy, CreateSession, MetadataUpdate, NewEvent, Role};
use common::{test_config, TestServer};
use hyper::Method;
use serde_json::json;

fn sid(text: &str) -> SessionId {
    SessionId::parse(text).unwrap()
}

fn rid(text: &str) -> RunId {
    RunId::parse(text).unwrap()
}

/// One error of `class`, as the service would raise it. Panics for a class without one:
/// a class added to the table must get a representative here.
fn representative(class: ErrorClass) -> Error {
    let id = || "chat-1".to_owned();
    match class {
        ErrorClass::NotFound => Error::session_not_found("chat-1"),
        ErrorClass::AlreadyExists => Error::AlreadyExists { what: "session", id: id() },
        ErrorClass::Busy => Error::Busy { id: id(), reason: "run \"run-1\" is attached".into() },
        ErrorClass::WriterBusy => Error::WriterBusy { id: id(), holder: berth_core::WriteHolder::Unknown },
        ErrorClass::RunNotAttached => Error::RunNotAttached { id: id(), run: "run-1".into() },
        ErrorClass::Fenced => Error::Fenced { id: id(), epoch: 1, current: 2 },
        ErrorClass::RevisionConflict => Error::RevisionConflict { expected: 3, actual: 4 },
        ErrorClass::SeqConflict => Error::SeqConflict { expected: 3, actual: 5 },
        ErrorClass::IdempotencyKeyReused => Error::IdempotencyKeyReused { key: "k1".into(), first_seq: 2 },
        ErrorClass::InvalidTransition => Error::InvalidTransition { from: "closed".into(), event: "attach".into() },
        ErrorClass::Terminal => Error::Terminal { state: "closed".into() },
        ErrorClass::PayloadTooLarge => Error::LimitExceeded { what: Limit::EventBytes, limit: 10, actual: 11 },
        ErrorClass::LimitExceeded => Error::LimitExceeded { what: Limit::PageSize, limit: 1000, actual: 2000 },
        ErrorClass::Invalid => Error::invalid("session id", "empty"),
        ErrorClass::Forbidden => Error::Forbidden { reason: "admin only".into() },
        ErrorClass::Unauthenticated => Error::Unauthenticated { reason: "no key".into() },
        ErrorClass::RateLimited => Error::RateLimited { retry_after_s: 5 },
        ErrorClass::Timeout => Error::Timeout { reason: "took too long".into() },
        ErrorClass::Unavailable => Error::Unavailable { reason: "catalog down".into() },
        ErrorClass::Unsupported => Error::FormatUnsupported { reason: "event type x/y".into(), location: None },
        ErrorClass::Damaged => Error::Corrupt {
            reason: "bad crc".into(),
            location: Location {
                artifact: "tenants/acme/sessions/chat-1/session.jsonl".into(),
                offset: Some(9),
                seq: None,
            },
        },
        ErrorClass::Internal => Error::Io {
            operation: "open log",
            kind: std::io::ErrorKind::PermissionDenied,
            message: "/secret/path: permission denied".into(),
        },
        other => panic!("no representative error for {other:?}: add one to this test"),
    }
}

/// The response the server sends for `error`, as the client receives it.
async fn response_for(error: &Error) -> RawResponse {
    let response = ApiError::from_core(error).into_response();
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    RawResponse { status: parts.status, headers: parts.headers, body }
}

/// Errors whose body carries every field: the client rebuilds them exactly.
fn decodes_exactly(class: ErrorClass) -> bool {
    matches!(
        class,
        ErrorClass::RevisionConflict
            | ErrorClass::SeqConflict
            | ErrorClass::Terminal
            | ErrorClass::PayloadTooLarge
            | ErrorClass::LimitExceeded
            | ErrorClass::RateLimited
            | ErrorClass::RunNotAttached
            | ErrorClass::WriterBusy
    )
}

#[tokio::test]
async fn every_class_of_the_table_round_trips_through_http() {
    for row in ErrorClass::TABLE {
        let error = representative(row.class);
        assert_eq!(error.class(), row.class, "{error:?} is not a representative of {:?}", row.class);
        let response = response_for(&error).await;
        assert_eq!(response.status.as_u16(), row.http_status, "{:?}", row.class);
        let body: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
        assert_eq!(body["code"], row.code, "{:?}", row.class);
        assert_eq!(body["retryable"], row.retryable, "{:?}", row.class);
        let has_retry_after = response.headers.contains_key(hyper::header::RETRY_AFTER);
        assert_eq!(has_retry_after, row.retryable && row.class != ErrorClass::Fenced, "Retry-After of {:?}", row.class);

        let decoded = error_of(&response, "chat-1");
        // Damaged data is an operator's matter on either side: the client gets a corrupt
        // error (exit code 6), located at "the server" rather than at a file it cannot see.
        if row.class == ErrorClass::Damaged {
            assert!(
                matches!(&decoded, Error::Corrupt { location, .. } if location.artifact == "server"),
                "{decoded:?}"
            );
        }
        assert_eq!(decoded.class(), row.class, "{:?} came back as {decoded:?}", row.class);
        assert_eq!(decoded.class().exit_code(), row.exit_code);
        if decodes_exactly(row.class) {
            assert_eq!(decoded, error, "{:?} lost information on the way", row.class);
        }
    }
}

/// Internal details never reach the client, whatever the class's decoding keeps.
#[tokio::test]
async fn internal_and_damaged_stay_collapsed_to_generic_messages() {
    for class in [ErrorClass::Internal, ErrorClass::Damaged] {
        let response = response_for(&representative(class)).await;
        let text = String::from_utf8(response.body.to_vec()).unwrap();
        assert!(!text.contains("secret") && !text.contains("tenants/"), "{text}");
    }
    // A bare 5xx without berth's code (a proxy's 502) is unavailable, as before.
    let proxy = RawResponse {
        status: hyper::StatusCode::BAD_GATEWAY,
        headers: hyper::HeaderMap::new(),
        body: bytes_of("<html>bad gateway</html>"),
    };
    assert_eq!(error_of(&proxy, "").class(), ErrorClass::Unavailable);
}

fn bytes_of(text: &str) -> hyper::body::Bytes {
    hyper::body::Bytes::copy_from_slice(text.as_bytes())
}

/// Asserts `result` failed with `class`.
#[track_caller]
fn assert_class<T: std::fmt::Debug>(result: berth_core::Result<T>, class: ErrorClass) {
    match result {
        Ok(value) => panic!("expected {class:?}, got {value:?}"),
        Err(error) => assert_eq!(error.class(), class, "{error:?}"),
    }
}

async fn raw_error(client: &Client, method: Method, path: &str, body: &[u8]) -> Error {
    let response = client.send(method, path, Some(body.to_vec()), &[]).await.unwrap();
    assert!(!response.status.is_success(), "{path}: {}", response.status);
    error_of(&response, "")
}

fn append(run: Option<&str>, expected_seq: Option<u64>, events: Vec<NewEvent>, key: Option<&str>) -> AppendRequest {
    AppendRequest {
        memory: Vec::new(),
        run: run.map(rid),
        expected_seq,
        events,
        idempotency_key: key.map(str::to_owned),
    }
}

fn note(text: &str) -> NewEvent {
    NewEvent::new("note/text", json!({"text": text}))
}

#[tokio::test]
async fn a_real_server_produces_each_class_and_the_client_decodes_it() {
    let server = TestServer::start().await;
    let alice = server.client(&server.key("acme", "alice", None, Role::User));
    let service = server.client(&server.key("acme", "svc", None, Role::Service));
    let create = CreateSession { id: Some(sid("chat-1")), ..CreateSession::default() };
    alice.create(&create).await.unwrap();

    assert_class(alice.get(&sid("missing")).await, ErrorClass::NotFound);
    assert_class(alice.create(&create).await, ErrorClass::AlreadyExists);
    let run_1 = AttachRequest { run_id: Some(rid("run-1")), ..AttachRequest::default() };
    alice.attach(&sid("chat-1"), &run_1).await.unwrap();
    assert_class(alice.attach(&sid("chat-1"), &AttachRequest::default()).await, ErrorClass::Busy);
    let ghost = alice.append(&sid("chat-1"), &append(Some("ghost"), None, vec![note("a")], None)).await;
    match &ghost {
        Err(Error::RunNotAttached { run, .. }) => assert_eq!(run, "ghost", "the run id travels"),
        other => panic!("{other:?}"),
    }
    let stale = MetadataUpdate { expected_revision: Some(berth_core::Revision(99)), ..MetadataUpdate::default() };
    assert_class(alice.update_metadata(&sid("chat-1"), &stale).await, ErrorClass::RevisionConflict);
    assert_class(
        alice.append(&sid("chat-1"), &append(Some("run-1"), Some(5), vec![note("a")], None)).await,
        ErrorClass::SeqConflict,
    );
    alice.append(&sid("chat-1"), &append(Some("run-1"), None, vec![note("a")], Some("k1"))).await.unwrap();
    assert_class(
        alice.append(&sid("chat-1"), &append(Some("run-1"), None, vec![note("b")], Some("k1"))).await,
        ErrorClass::IdempotencyKeyReused,
    );
    let huge = NewEvent::new("note/text", json!({"text": "x".repeat(EVENT_BYTES_MAX + 1)}));
    match alice.append(&sid("chat-1"), &append(Some("run-1"), None, vec![huge], None)).await {
        Err(error @ Error::LimitExceeded { what: Limit::EventBytes, .. }) => {
            assert_eq!(error.class(), ErrorClass::PayloadTooLarge)
        }
        other => panic!("{other:?}"),
    }
    let long_key = "k".repeat(IDEMPOTENCY_KEY_BYTES_MAX + 1);
    match alice.append(&sid("chat-1"), &append(Some("run-1"), None, vec![note("c")], Some(&long_key))).await {
        Err(error @ Error::LimitExceeded { .. }) => assert_eq!(error.class(), ErrorClass::LimitExceeded),
        other => panic!("{other:?}"),
    }
    // 400: the body is not JSON; 422: JSON the server refuses.
    let error = raw_error(&alice, Method::POST, "/v1/sessions", b"{not json").await;
    assert_eq!(error.class(), ErrorClass::Invalid, "{error:?}");
    let error = raw_error(
        &alice,
        Method::POST,
        "/v1/sessions/chat-1/events",
        br#"{"run":"run-1","events":[{"type":"Not A Type"}]}"#,
    )
    .await;
    assert_eq!(error.class(), ErrorClass::Invalid, "{error:?}");
    assert_class(alice.audit_log(0, 10).await, ErrorClass::Forbidden);
    assert_class(server.anonymous().get(&sid("chat-1")).await, ErrorClass::Unauthenticated);
    assert_class(
        Client::new(&server.url(), Some("wrong-key".into())).unwrap().whoami().await,
        ErrorClass::Unauthenticated,
    );

    // A session holding an event type this build cannot process, met by a resume.
    service.create(&CreateSession { id: Some(sid("chat-odd")), ..CreateSession::default() }).await.unwrap();
    let odd = append(None, None, vec![NewEvent::new("future/thing", json!({}))], None);
    match service.append(&sid("chat-odd"), &odd).await {
        Ok(_) => {
            assert_class(service.resume(&sid("chat-odd"), &AttachRequest::default()).await, ErrorClass::Unsupported)
        }
        Err(error) => eprintln!("format_unsupported not produced: appending an unknown type is refused ({error})"),
    }

    alice.detach(&sid("chat-1"), &rid("run-1"), "completed", None).await.unwrap();
    alice.close(&sid("chat-1"), ClosePolicy::Refuse, None).await.unwrap();
    assert_class(alice.attach(&sid("chat-1"), &AttachRequest::default()).await, ErrorClass::Terminal);
}

#[tokio::test]
async fn a_tiny_rate_limit_is_rate_limited_with_its_retry_after() {
    let mut config = test_config();
    config.rate_limit = Some(RateLimit { per_second: 1, burst: 1 });
    let server = TestServer::start_with(config).await;
    let alice = server.client(&server.key("acme", "alice", None, Role::User));
    let mut limited = None;
    for _ in 0..5 {
        if let Err(error) = alice.get(&sid("missing")).await {
            if error.class() == ErrorClass::RateLimited {
                limited = Some(error);
                break;
            }
        }
    }
    match limited {
        Some(Error::RateLimited { retry_after_s }) => assert!(retry_after_s >= 1),
        other => panic!("never rate limited: {other:?}"),
    }
}
