//! Coalesced activity (`berth-service/src/activity.rs`): the catalog writes that appends
//! cause are held for at most a window while a session is busy, and the rules that keep
//! that safe hold. These clauses read the catalog directly (`raw`), bypassing the
//! service's own record reads, which always write held activity first (its reads of
//! the log overlay it instead).

use super::fixtures::*;
use super::ServiceBackend;
use berth_catalog::SessionRecord;
use berth_core::Clock;
use berth_service::{SessionService, ACTIVITY_WINDOW_DEFAULT};
use std::sync::Arc;
use std::time::Duration;

/// Turns a hang into a failure; never reached when the service works, however slow the
/// machine (the waits it bounds are for events, not for time to pass).
const HANG_GUARD: Duration = Duration::from_secs(120);

/// The stored record, as another process would read it (nothing held is written first).
async fn raw(service: &SessionService, id: &str) -> SessionRecord {
    service.catalog().get(&key(TENANT_A, id)).await.expect("catalog get").expect("stored")
}

fn window_ms() -> u64 {
    ACTIVITY_WINDOW_DEFAULT.as_millis() as u64
}

/// A steady stream of appends writes its activity far less often than once per append;
/// the session's first conversation event is written at once (so listings stop hiding
/// it); every read through the service sees everything; and held activity reaches the
/// catalog on its own, with no further call, within about one window.
pub async fn busy_sessions_write_activity_coalesced_and_it_always_lands(b: &dyn ServiceBackend) {
    let service = b.service();
    create(&service, &owner(), "busy", serial(DAY_MS, DAY_MS)).await;
    attach(&service, &owner(), "busy", "r1").await;
    append(&service, &owner(), "busy", Some("r1"), vec![user_message("first")]).await;
    let first = raw(&service, "busy").await;
    assert_eq!((first.event_count, first.blank), (1, false), "the first conversation event is written at once");

    for i in 0..20 {
        append(&service, &owner(), "busy", Some("r1"), vec![user_message(&format!("m{i}"))]).await;
    }
    let coalesced = raw(&service, "busy").await;
    assert!(
        coalesced.revision.0 - first.revision.0 < 20,
        "20 appends wrote their activity {} times",
        coalesced.revision.0 - first.revision.0
    );
    let seen = service.get(&owner(), &sid("busy")).await.unwrap();
    assert_eq!(seen.event_count, 21, "the service's reads see held activity");
    assert_eq!(raw(&service, "busy").await, seen, "a read through the service writes what was held first");

    let mut timer_writes = service.held_activity_timer_writes();
    for i in 0..5 {
        append(&service, &owner(), "busy", Some("r1"), vec![user_message(&format!("late{i}"))]).await;
    }
    // Event-driven: each round waits for the hold's timer write to finish, then reads
    // the catalog. The bound only turns a hang (a timer that never fires) into a failure;
    // no outcome depends on how fast this machine is.
    while raw(&service, "busy").await.event_count < 26 {
        let finished = tokio::time::timeout(HANG_GUARD, timer_writes.changed()).await;
        assert!(matches!(finished, Ok(Ok(()))), "held activity never reached the catalog on its own");
    }
}

/// Holding activity never lets the stored activity lease run short: an append whose
/// session's stored lease has less than two windows left writes its extension at once,
/// even when the last write was moments ago, so no sweeper in any process can expire a
/// session whose activity is held.
pub async fn an_append_near_the_end_of_the_stored_lease_extends_it_at_once(b: &dyn ServiceBackend) {
    let service = b.service();
    let clock = b.clock();
    let ttl_ms = window_ms() * 5 / 2;
    create(&service, &owner(), "edge", serial(ttl_ms, DAY_MS)).await;
    attach(&service, &owner(), "edge", "r1").await;
    append(&service, &owner(), "edge", Some("r1"), vec![user_message("first")]).await;
    assert_eq!(raw(&service, "edge").await.lease_until, clock.now().plus_ms(ttl_ms));
    // The last write was less than a window ago, but under two windows of lease remain.
    clock.advance_ms(window_ms() * 6 / 10);
    append(&service, &owner(), "edge", Some("r1"), vec![user_message("second")]).await;
    let stored = raw(&service, "edge").await;
    assert_eq!(stored.lease_until, clock.now().plus_ms(ttl_ms), "the extension was held");
    assert_eq!(stored.event_count, 2);
}

/// A read of the log (a range, the events before a seq, a point read, the usage tally)
/// writes no held activity: like an append, it overlays it on the record it authorizes
/// with and observes expiry on, so a turn's read right after its append pays no catalog
/// commit. A read of the record itself still writes it first (the clause above).
pub async fn reads_of_the_log_overlay_held_activity_and_write_none(b: &dyn ServiceBackend) {
    let shared = b.service();
    // A window no timer reaches during the clause: only the reads could write what is held.
    let service = SessionService::new(shared.store().clone(), Arc::clone(shared.catalog()), b.clock())
        .with_activity_window(Duration::from_secs(3600));
    create(&service, &owner(), "reads", serial(DAY_MS, DAY_MS)).await;
    attach(&service, &owner(), "reads", "r1").await;
    append(&service, &owner(), "reads", Some("r1"), vec![user_message("first")]).await;
    append(&service, &owner(), "reads", Some("r1"), vec![user_message("second")]).await;
    let held = raw(&service, "reads").await;
    assert_eq!(held.event_count, 1, "the second append's activity is held");

    let id = sid("reads");
    assert_eq!(service.read(&owner(), &id, 0, None).await.unwrap().len(), 2, "a read sees both appends");
    assert_eq!(service.read_before(&owner(), &id, u64::MAX, 10).await.unwrap().len(), 2);
    assert_eq!(service.read_seqs(&owner(), &id, &[1]).await.unwrap().len(), 1);
    service.session_usage(&owner(), &id).await.unwrap();
    assert_eq!(raw(&service, "reads").await, held, "the log's reads wrote nothing held");

    assert_eq!(service.get(&owner(), &id).await.unwrap().event_count, 2, "a read of the record sees it");
    assert_eq!(raw(&service, "reads").await.event_count, 2, "and writes it first");
}
