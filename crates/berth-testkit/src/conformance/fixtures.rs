//! Shared fixtures of the conformance suites: headers, canned logs, and the few waiting
//! and reading helpers every clause uses.

use berth_core::{Event, Scope, SessionHeader, SessionId, SessionKey, TenantId, Timestamp, UserId};
use berth_store::{Access, ListQuery, LogStore, SessionHandle};
use serde_json::json;
use std::future::Future;
use std::time::Duration;

/// The tenant every clause works in unless it tests isolation.
pub const TENANT: &str = "tenant-a";
pub const USER: &str = "user-a";

/// How long `eventually` waits. Clause runners pause tokio time, so this is virtual
/// time: it only passes while the runtime is idle (and never during `spawn_blocking`
/// work), which means "this will not happen" rather than "this is slow".
pub const EVENTUALLY_DEADLINE: Duration = Duration::from_secs(30);

pub fn tenant() -> TenantId {
    TenantId::parse(TENANT).expect("valid tenant")
}

pub fn scope(tenant: &str, user: &str) -> Scope {
    Scope {
        tenant: TenantId::parse(tenant).expect("valid tenant"),
        user: UserId::parse(user).expect("valid user"),
        project: None,
    }
}

/// A top-level header in `TENANT` / `USER`.
pub fn header(id: &str) -> SessionHeader {
    header_in(TENANT, USER, id)
}

pub fn header_in(tenant: &str, user: &str, id: &str) -> SessionHeader {
    SessionHeader::new(SessionId::parse(id).expect("valid session id"), scope(tenant, user), Timestamp(1_000))
}

pub fn key(id: &str) -> SessionKey {
    SessionKey::new(tenant(), SessionId::parse(id).expect("valid session id"))
}

fn event(seq: u64, event_type: &str, data: serde_json::Value) -> Event {
    Event::new(seq, event_type, Timestamp(1_000 + seq), data).expect("valid fixture event")
}

/// One balanced turn, seqs 0..=5: turn/start, user/message, step/start,
/// assistant/message, step/end, turn/end.
pub fn one_turn_log() -> Vec<Event> {
    vec![
        event(0, "turn/start", json!({"turn": 0})),
        event(1, "user/message", json!({"content": "hello"})),
        event(2, "step/start", json!({"turn": 0, "step": 0})),
        event(3, "assistant/message", json!({"content": "hi there"})),
        event(4, "step/end", json!({"turn": 0, "step": 0})),
        event(5, "turn/end", json!({"turn": 0, "reason": "completed"})),
    ]
}

/// A second (empty) turn continuing `one_turn_log`: seqs 6 and 7.
pub fn second_turn() -> Vec<Event> {
    vec![event(6, "turn/start", json!({"turn": 1})), event(7, "turn/end", json!({"turn": 1, "reason": "completed"}))]
}

/// A small extension event, as the live clauses publish them.
pub fn marker(seq: u64) -> Event {
    event(seq, "test/marker", json!({"n": seq}))
}

/// An extension event whose data is a string of `bytes` bytes.
pub fn bulky(seq: u64, bytes: usize) -> Event {
    event(seq, "test/bulky", json!({"blob": "x".repeat(bytes)}))
}

pub fn seqs(events: &[Event]) -> Vec<u64> {
    events.iter().map(|event| event.seq.get()).collect()
}

/// Reads the whole log through a fresh read handle of `store` (which is closed again).
pub async fn stored_events(store: &LogStore, key: &SessionKey) -> Vec<Event> {
    let reader = store.open(key, Access::Read).await.unwrap_or_else(|error| panic!("open {key} for read: {error}"));
    let events = reader.read(0, None).await.unwrap_or_else(|error| panic!("read {key}: {error}"));
    reader.close().await.expect("closing a read handle");
    events
}

/// Ids listed for `TENANT` (first page of the maximum size).
pub async fn listed_ids(store: &LogStore) -> Vec<String> {
    let mut query = ListQuery::tenant(tenant());
    query.limit = berth_core::limits::PAGE_SIZE_MAX;
    let page = store.list(&query).await.expect("list");
    page.items.iter().map(|stat| stat.header.id.to_string()).collect()
}

/// Polls `condition` until it holds, failing the test after `EVENTUALLY_DEADLINE`.
/// Between polls it sleeps 1 ms of tokio time (virtual under a paused clock).
pub async fn eventually<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let polled = tokio::time::timeout(EVENTUALLY_DEADLINE, async {
        while !condition().await {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    if polled.is_err() {
        panic!("timed out waiting until {what}");
    }
}

/// Lets every task that is ready run (timers that fired, spawned drains), without
/// moving the clock.
pub async fn settle() {
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
}

/// Waits until a write open of `key` succeeds on `store`, then returns that handle.
/// Used after a handle is dropped without `close` (ownership is released in the
/// background).
pub async fn open_write_eventually(store: &LogStore, key: &SessionKey) -> SessionHandle {
    let polled = tokio::time::timeout(EVENTUALLY_DEADLINE, async {
        loop {
            match store.open(key, Access::Write).await {
                Ok(handle) => return handle,
                Err(berth_core::Error::AlreadyOwned { .. }) => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(error) => panic!("write open of {key} failed with {error}"),
            }
        }
    })
    .await;
    polled.unwrap_or_else(|_| panic!("timed out waiting until a write open of {key} succeeds"))
}

/// Reports a clause (or part of one) a backend cannot run. Only a divergence declared in
/// `divergence::DIVERGENCES` may be skipped: any other skip fails the clause, so a
/// backend that loses a hook cannot pass silently.
pub fn skipped(backend: &str, clause: &str, missing_hook: &str) {
    match super::divergence::declared(backend, clause, missing_hook) {
        Some(divergence) => eprintln!(
            "skipped: backend {backend} has no {missing_hook}; clause {clause} (or this part of it) not run: {}",
            divergence.why
        ),
        None => panic!(
            "backend {backend} has no {missing_hook}, so clause {clause} would not run, and that divergence is not \
             declared in berth_testkit::conformance::divergence::DIVERGENCES"
        ),
    }
}

/// `assert!(matches!(..))` that prints the value on failure.
#[macro_export]
macro_rules! assert_matches {
    ($value:expr, $pattern:pat $(if $guard:expr)? $(,)?) => {
        match $value {
            $pattern $(if $guard)? => {}
            ref other => panic!(
                "expected {} but got {:?} ({}:{})",
                stringify!($pattern),
                other,
                file!(),
                line!()
            ),
        }
    };
}
