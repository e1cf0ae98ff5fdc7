//! The live write path (R-P5): `reference/dsh.md` §3.2 (clauses 1–11, in order)
//! adapted to `SessionHandle::publish`, then byte bounds, publish validation and
//! publish-during-close.
//!
//! The dsh routing events map onto the Rust API as: `session/event` = `publish`,
//! `session/flush` = `SessionHandle::flush`, service flush = `LogStore::flush`,
//! `session/disposed` = `close` or dropping the last clone, backend teardown =
//! `LogStore::close_all`. Failures are injected with `FaultyBackend` (transient
//! `Unavailable` before the real append, so no backend handle is poisoned), and the
//! clauses count append attempts at that seam to prove what did *not* happen.
//!
//! Every clause runs on a paused clock: `advance` moves time exactly, `settle` lets
//! fired timers and their drains run without moving it.

use super::fixtures::*;
use super::ConformanceBackend;
use crate::assert_matches;
use berth_core::limits::{LIVE_BUFFER_BYTES_MAX, LIVE_WINDOW_BYTES_MAX, LIVE_WINDOW_MS};
use berth_core::{Error, Event, Timestamp};
use berth_store::Access;
use std::time::Duration;

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

fn markers(range: std::ops::Range<u64>) -> Vec<Event> {
    range.map(marker).collect()
}

/// dsh §3.2 #1: published events are stored within one window and not before: nothing
/// at `LIVE_WINDOW_MS - 1`, everything (one batch) at `LIVE_WINDOW_MS`. A later publish
/// does not push the deadline out (bounded coalescing, not debounce).
pub async fn published_events_land_within_one_window(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let faults = backend.faults();
    let header = header("live-window");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    writer.publish(marker(0)).unwrap();
    tokio::time::advance(ms(150)).await;
    writer.publish(marker(1)).unwrap();
    assert_eq!(writer.next_seq(), 2, "published events count towards the next seq");
    tokio::time::advance(ms(LIVE_WINDOW_MS - 1 - 150)).await;
    settle().await;
    assert_eq!(faults.append_attempts(&key), 0, "nothing is written before the window ends");
    assert_eq!(stored_events(&store, &key).await, []);
    tokio::time::advance(ms(1)).await;
    eventually("the window's events are stored", || async { stored_events(&store, &key).await.len() == 2 }).await;
    assert_eq!(stored_events(&store, &key).await, markers(0..2));
    assert_eq!(faults.append_attempts(&key), 1, "one window drains as one batch");

    // The next window starts with the next publish.
    writer.publish(marker(2)).unwrap();
    tokio::time::advance(ms(LIVE_WINDOW_MS - 1)).await;
    settle().await;
    assert_eq!(stored_events(&store, &key).await.len(), 2);
    tokio::time::advance(ms(1)).await;
    eventually("the second window is stored", || async { stored_events(&store, &key).await.len() == 3 }).await;
    assert_eq!(faults.append_attempts(&key), 2);
    writer.close().await.unwrap();
    assert_eq!(stored_events(&store, &key).await, markers(0..3));
}

/// dsh §3.2 #2, adapted: events can only be published through an active write handle;
/// a closed handle refuses (`HandleClosed`), a read handle refuses (`ReadOnly`), and
/// nothing reaches storage, not even after a window.
pub async fn session_without_active_write_handle_persists_nothing(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let faults = backend.faults();
    let erased = header("live-no-writer-erased");
    let creator = store.create(erased.clone()).await.unwrap();
    creator.close().await.unwrap();
    assert_matches!(creator.publish(marker(0)), Err(Error::HandleClosed { .. }));

    let kept = header("live-no-writer-kept");
    let creator = store.create(kept.clone()).await.unwrap();
    creator.flush().await.unwrap();
    creator.close().await.unwrap();
    assert_matches!(creator.publish(marker(0)), Err(Error::HandleClosed { .. }));
    let reader = store.open(&kept.key(), Access::Read).await.unwrap();
    assert_matches!(reader.publish(marker(0)), Err(Error::ReadOnly { .. }));

    tokio::time::advance(ms(LIVE_WINDOW_MS * 2)).await;
    settle().await;
    assert!(store.stat(&erased.key()).await.unwrap().is_none());
    assert_eq!(stored_events(&store, &kept.key()).await, []);
    assert_eq!(faults.append_attempts(&erased.key()) + faults.append_attempts(&kept.key()), 0);
    if let Some(other) = backend.reopen().await {
        assert!(other.stat(&erased.key()).await.unwrap().is_none());
        assert_eq!(stored_events(&other, &kept.key()).await, []);
    }
}

/// dsh §3.2 #3: a failed background drain keeps its events; the handle's flush drains at
/// once, retries once and surfaces the failure while it persists; after recovery a
/// flush stores the events exactly once.
pub async fn handle_flush_drains_and_surfaces_retained_background_failure(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let faults = backend.faults();
    let header = header("live-flush-failure");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    writer.flush().await.unwrap();
    faults.fail_next_appends(&key, 2);
    writer.publish(marker(0)).unwrap();
    tokio::time::advance(ms(LIVE_WINDOW_MS)).await;
    eventually("the background drain was attempted", || async { faults.append_attempts(&key) == 1 }).await;
    assert_eq!(stored_events(&store, &key).await, []);
    assert_matches!(writer.flush().await, Err(Error::Unavailable { .. }));
    assert_eq!(faults.append_attempts(&key), 2, "the flush retried exactly once");
    writer.flush().await.expect("the flush after recovery succeeds");
    assert_eq!(faults.append_attempts(&key), 3);
    writer.flush().await.unwrap();
    assert_eq!(faults.append_attempts(&key), 3, "nothing is left to write");
    assert_eq!(stored_events(&store, &key).await, [marker(0)]);
    writer.close().await.unwrap();
    assert_eq!(stored_events(&store, &key).await, [marker(0)], "stored exactly once");
}

/// dsh §3.2 #4: the store-wide flush drains every write handle at once (no window
/// elapsed), reports each failing session in one `Error::Many` without abandoning the
/// healthy ones, and flushes the failed one exactly once after recovery.
pub async fn store_flush_drains_every_handle_and_aggregates_failures(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let faults = backend.faults();
    let healthy = store.create(header("live-all-healthy")).await.unwrap();
    let failing = store.create(header("live-all-failing")).await.unwrap();
    for handle in [&healthy, &failing] {
        handle.flush().await.unwrap();
        handle.publish(marker(0)).unwrap();
    }
    faults.fail_next_appends(failing.key(), 1);
    match store.flush().await {
        Err(Error::Many(failures)) => {
            assert_eq!(failures.len(), 1, "{failures:?}");
            assert!(failures[0].0.contains("live-all-failing"), "{failures:?}");
            assert_matches!(failures[0].1, Error::Unavailable { .. });
        }
        other => panic!("expected one aggregated failure, got {other:?}"),
    }
    assert_eq!(stored_events(&store, healthy.key()).await, [marker(0)]);
    assert_eq!(stored_events(&store, failing.key()).await, []);
    store.flush().await.expect("the store flush after recovery succeeds");
    assert_eq!(stored_events(&store, failing.key()).await, [marker(0)]);
    assert_eq!(faults.append_attempts(failing.key()), 2);
    assert_eq!(faults.append_attempts(healthy.key()), 1);
    store.close_all().await.unwrap();
}

/// dsh §3.2 #5, adapted: `close` drains buffered events before it closes the handle
/// (which then refuses everything), and so does dropping the last clone.
pub async fn close_and_drop_drain_buffered_events(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("live-close-drains");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    writer.publish(marker(0)).unwrap();
    writer.close().await.unwrap();
    assert_eq!(stored_events(&store, &key).await, [marker(0)]);
    assert_matches!(writer.append(&[]).await, Err(Error::HandleClosed { .. }));
    assert_matches!(writer.publish(marker(1)), Err(Error::HandleClosed { .. }));

    let writer = store.open(&key, Access::Write).await.unwrap();
    writer.publish(marker(1)).unwrap();
    writer.publish(marker(2)).unwrap();
    drop(writer);
    let writer = open_write_eventually(&store, &key).await;
    assert_eq!(writer.next_seq(), 3);
    writer.close().await.unwrap();
    assert_eq!(stored_events(&store, &key).await, markers(0..3));
}

/// dsh §3.2 #6, adapted: a final drain that fails after the last clone was dropped is
/// logged, not raised (nobody awaits it); ownership is still released, and the failed
/// events (never acknowledged as durable) are not half-stored.
pub async fn failing_final_drain_on_drop_is_contained(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let faults = backend.faults();
    let header = header("live-drop-failure");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    writer.append(&[marker(0)]).await.unwrap();
    let attempts_before = faults.append_attempts(&key);
    faults.fail_next_appends(&key, 1);
    writer.publish(marker(1)).unwrap();
    drop(writer);
    let writer = open_write_eventually(&store, &key).await;
    assert_eq!(faults.append_attempts(&key), attempts_before + 1, "the final drain ran once");
    assert_eq!(writer.next_seq(), 1);
    writer.close().await.unwrap();
    assert_eq!(stored_events(&store, &key).await, [marker(0)]);
}

/// dsh §3.2 #7: store teardown (`close_all`) drains every buffered event through the
/// close sweep; the handles are closed afterwards and a fresh instance reads the events.
pub async fn close_all_drains_through_the_close_sweep(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let created = store.create(header("live-teardown-created")).await.unwrap();
    created.publish(marker(0)).unwrap();
    let opened = store.create(header("live-teardown-opened")).await.unwrap();
    opened.append(&[marker(0)]).await.unwrap();
    opened.publish(marker(1)).unwrap();
    store.close_all().await.expect("close_all");
    for handle in [&created, &opened] {
        assert_matches!(handle.append(&[]).await, Err(Error::HandleClosed { .. }));
    }
    let observer = backend.reopen().await.unwrap_or_else(|| store.clone());
    assert_eq!(stored_events(&observer, created.key()).await, [marker(0)]);
    assert_eq!(stored_events(&observer, opened.key()).await, markers(0..2));
    store.open(opened.key(), Access::Write).await.expect("close_all released ownership").close().await.unwrap();
}

/// dsh §3.2 #8: `close` surfaces a failing drain, yet releases ownership: a session that
/// never materialized can be created again, a materialized one opened for write again.
pub async fn close_surfaces_failing_drain_and_releases_ownership(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let faults = backend.faults();
    let pending = header("live-close-failure-pending");
    let writer = store.create(pending.clone()).await.unwrap();
    writer.publish(marker(0)).unwrap();
    faults.fail_next_appends(&pending.key(), 1);
    assert_matches!(writer.close().await, Err(Error::Unavailable { .. }));
    assert_matches!(writer.flush().await, Err(Error::HandleClosed { .. }));
    store.create(pending.clone()).await.expect("the id is free again").close().await.unwrap();

    let stored = header("live-close-failure-stored");
    let writer = store.create(stored.clone()).await.unwrap();
    writer.append(&[marker(0)]).await.unwrap();
    writer.publish(marker(1)).unwrap();
    faults.fail_next_appends(&stored.key(), 1);
    assert_matches!(writer.close().await, Err(Error::Unavailable { .. }));
    let again = store.open(&stored.key(), Access::Write).await.expect("ownership was released");
    assert_eq!(again.next_seq(), 1);
    again.close().await.unwrap();
    assert_eq!(stored_events(&store, &stored.key()).await, [marker(0)]);
}

/// dsh §3.2 #9, adapted: dsh normalizes a non-`Error` rejection; the Rust analogue of a
/// drain failing outside the error vocabulary is a backend that panics. `close` turns
/// the panic into a typed error, leaves the handle closed and releases ownership.
pub async fn close_turns_a_panicking_drain_into_an_error(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let faults = backend.faults();
    let header = header("live-close-panic");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    writer.append(&[marker(0)]).await.unwrap();
    writer.publish(marker(1)).unwrap();
    faults.panic_next_append(&key);
    assert_matches!(writer.close().await, Err(Error::Unavailable { .. }));
    assert_matches!(writer.read(0, None).await, Err(Error::HandleClosed { .. }));
    assert_matches!(writer.publish(marker(1)), Err(Error::HandleClosed { .. }));
    let again = open_write_eventually(&store, &key).await;
    assert_eq!(again.next_seq(), 1);
    again.close().await.unwrap();
    assert_eq!(stored_events(&store, &key).await, [marker(0)]);
}

/// dsh §3.2 #10: after a failed background drain, later events queue behind the failed
/// batch in order, no timer fires again (no append attempt over four windows), and the
/// next explicit flush writes everything once, in order.
pub async fn failed_drain_keeps_order_quiets_timer_and_recovers_once(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let faults = backend.faults();
    let header = header("live-quiet-timer");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    writer.flush().await.unwrap();
    faults.fail_next_appends(&key, 1);
    writer.publish(marker(0)).unwrap();
    tokio::time::advance(ms(LIVE_WINDOW_MS)).await;
    eventually("the background drain failed", || async { faults.append_attempts(&key) == 1 }).await;
    for seq in 1..4 {
        writer.publish(marker(seq)).unwrap();
    }
    for _ in 0..4 {
        tokio::time::advance(ms(LIVE_WINDOW_MS)).await;
        settle().await;
    }
    assert_eq!(faults.append_attempts(&key), 1, "the timer stays quiet after a failed drain");
    assert_eq!(stored_events(&store, &key).await, []);
    writer.flush().await.expect("the explicit flush recovers");
    assert_eq!(faults.append_attempts(&key), 2, "one retry carries everything");
    assert_eq!(stored_events(&store, &key).await, markers(0..4));

    // The timer works again after recovery.
    writer.publish(marker(4)).unwrap();
    tokio::time::advance(ms(LIVE_WINDOW_MS)).await;
    eventually("the timer drains again", || async { stored_events(&store, &key).await.len() == 5 }).await;
    writer.close().await.unwrap();
    assert_eq!(stored_events(&store, &key).await, markers(0..5));
}

/// dsh §3.2 #11: after create → publish → flush → close, a second write handle routes
/// the following events; the closed first handle routes nothing.
pub async fn second_write_handle_after_close_routes_events(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("live-second-handle");
    let key = header.key();
    let first = store.create(header).await.unwrap();
    first.publish(marker(0)).unwrap();
    first.flush().await.unwrap();
    first.close().await.unwrap();
    let second = store.open(&key, Access::Write).await.unwrap();
    assert_eq!(second.next_seq(), 1);
    second.publish(marker(1)).unwrap();
    assert_matches!(first.publish(marker(1)), Err(Error::HandleClosed { .. }));
    tokio::time::advance(ms(LIVE_WINDOW_MS)).await;
    eventually("the second handle's event is stored", || async { stored_events(&store, &key).await.len() == 2 }).await;
    second.close().await.unwrap();
    assert_eq!(stored_events(&store, &key).await, markers(0..2));
}

/// R-P5 "also bounded in bytes": a buffer holding `LIVE_WINDOW_BYTES_MAX` drains without
/// waiting for the window; while drains are failing, `publish` refuses (back-pressure)
/// past `LIVE_BUFFER_BYTES_MAX`, and everything it accepted lands after recovery.
pub async fn window_and_buffer_are_bounded_in_bytes(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let faults = backend.faults();
    let header = header("live-bytes");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    writer.flush().await.unwrap();
    let chunk_bytes = LIVE_WINDOW_BYTES_MAX / 4;
    let started = tokio::time::Instant::now();
    for seq in 0..4 {
        writer.publish(bulky(seq, chunk_bytes)).unwrap();
    }
    eventually("a full window drains early", || async { faults.append_attempts(&key) >= 1 }).await;
    eventually("the full window is stored", || async { stored_events(&store, &key).await.len() == 4 }).await;
    assert!(started.elapsed() < ms(LIVE_WINDOW_MS), "drained after {:?}", started.elapsed());

    faults.fail_next_appends(&key, u32::MAX);
    let mut accepted = 4;
    let refused = loop {
        match writer.publish(bulky(accepted, chunk_bytes)) {
            Ok(()) => accepted += 1,
            Err(error) => break error,
        }
        settle().await;
        assert!(accepted < 4 + 2 * (LIVE_BUFFER_BYTES_MAX / chunk_bytes) as u64, "publish never pushed back");
    };
    assert_matches!(refused, Error::LimitExceeded { what: berth_core::limits::Limit::LiveBufferBytes, .. });
    let buffered = accepted - 4;
    assert!(buffered as usize * chunk_bytes <= LIVE_BUFFER_BYTES_MAX, "{buffered} events buffered");
    assert!((buffered as usize + 1) * (chunk_bytes + 64) > LIVE_BUFFER_BYTES_MAX, "refused too early");
    faults.heal(&key);
    writer.flush().await.expect("recovered");
    writer.close().await.unwrap();
    let stored = stored_events(&store, &key).await;
    assert_eq!(seqs(&stored), (0..accepted).collect::<Vec<_>>());
}

/// `publish` validates like `append`: an invalid or non-contiguous event is refused at
/// once, nothing is buffered, and published events precede a later `append`.
pub async fn publish_validates_and_checks_contiguity(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("live-validation");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    let newer = Event::new(0, "turn/pause", Timestamp(1_000), serde_json::json!({})).unwrap();
    assert_matches!(writer.publish(newer), Err(Error::Invalid { .. }));
    assert_matches!(writer.publish(marker(5)), Err(Error::SeqConflict { expected: 0, actual: 5 }));
    assert_eq!(writer.next_seq(), 0);
    writer.publish(marker(0)).unwrap();
    assert_matches!(writer.publish(marker(0)), Err(Error::SeqConflict { expected: 1, actual: 0 }));
    assert_matches!(writer.append(&[marker(0)]).await, Err(Error::SeqConflict { expected: 1, actual: 0 }));
    writer.append(&markers(1..3)).await.expect("append continues after the published event");
    assert_eq!(stored_events(&store, &key).await, markers(0..3), "the published event was drained first");
    writer.close().await.unwrap();
}

/// `close` drains until the buffer is empty: an event published while the final drain is
/// in flight is either refused (`HandleClosed`) or stored, never acknowledged and lost.
pub async fn publish_during_close_is_stored_or_refused(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let faults = backend.faults();
    let header = header("live-publish-during-close");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    writer.flush().await.unwrap();
    writer.publish(marker(0)).unwrap();
    faults.hold_appends();
    let closing = writer.clone();
    let close_task = tokio::spawn(async move { closing.close().await });
    eventually("the close is draining", || async { faults.append_attempts(&key) == 1 }).await;
    let late = writer.publish(marker(1));
    faults.release_appends();
    close_task.await.unwrap().expect("close");
    let stored = stored_events(&store, &key).await;
    match late {
        Ok(()) => assert_eq!(stored, markers(0..2), "an accepted publish was lost"),
        Err(Error::HandleClosed { .. }) => assert_eq!(stored, [marker(0)]),
        Err(other) => panic!("unexpected publish error {other:?}"),
    }
}

/// `append` is not cancellable once validated: a caller that drops its future while the
/// backend write is in flight does not abandon the write half-way. The write finishes in
/// the background, and the handle's next seq matches what was stored, so the next append
/// follows it. (The store polls the write on the caller's task and hands the remainder to
/// a task of its own only when the caller gives up.)
pub async fn append_whose_caller_gives_up_still_completes(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let faults = backend.faults();
    let header = header("live-append-given-up");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    writer.append(&[marker(0)]).await.unwrap();
    faults.hold_appends();
    let given_up = [marker(1)];
    {
        let append = writer.append(&given_up);
        tokio::pin!(append);
        let outcome = tokio::time::timeout(ms(50), &mut append).await;
        assert!(outcome.is_err(), "the append waits at the gate");
        assert_eq!(faults.append_attempts(&key), 2, "the write reached the backend");
    } // the caller gives up here, with the write in flight
    faults.release_appends();
    eventually("the given-up append completes", || async { stored_events(&store, &key).await.len() == 2 }).await;
    assert_eq!(writer.next_seq(), 2);
    writer.append(&[marker(2)]).await.expect("the next append follows the given-up one");
    writer.close().await.unwrap();
    assert_eq!(stored_events(&store, &key).await, markers(0..3));
}

/// Group commit (`SessionHandle::flush`): a flush whose events an earlier flush already
/// drained and synced returns without draining or syncing again. Three flushes queue
/// while the first one's drain is held at the gate; the first drains everything published
/// meanwhile too (its drain loops until the buffer is empty) and syncs once; the other two
/// find their events durable — one sync, not three. Without it, concurrent publishers of
/// one session convoy: every queued flush syncs again (W5 measured 0.86 syncs per event).
pub async fn queued_flushes_share_one_drain_and_sync(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let faults = backend.faults();
    let header = header("live-group-commit");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    writer.flush().await.unwrap();
    let (attempts_before, syncs_before) = (faults.append_attempts(&key), faults.sync_calls(&key));
    faults.hold_appends();
    let flush = |handle: &berth_store::SessionHandle| {
        let handle = handle.clone();
        tokio::spawn(async move { handle.flush().await })
    };
    writer.publish(marker(0)).unwrap();
    let first = flush(&writer);
    eventually("the first drain waits at the gate", || async { faults.append_attempts(&key) == attempts_before + 1 })
        .await;
    writer.publish(marker(1)).unwrap();
    let second = flush(&writer);
    writer.publish(marker(2)).unwrap();
    let third = flush(&writer);
    settle().await;
    faults.release_appends();
    for queued in [first, second, third] {
        queued.await.unwrap().unwrap();
    }
    assert_eq!(faults.append_attempts(&key) - attempts_before, 2, "one batch for the first event, one for the rest");
    assert_eq!(faults.sync_calls(&key) - syncs_before, 1, "the queued flushes found their events already synced");
    writer.close().await.unwrap();
    assert_eq!(stored_events(&store, &key).await, markers(0..3));
}
