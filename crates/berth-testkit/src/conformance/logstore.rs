//! The LogStore storage contract: `reference/dsh.md` §3.1 (clauses 1–20, in order)
//! adapted to the Rust API, then the SPEC §4 extras. Each clause is one generic body.

use super::fixtures::*;
use super::ConformanceBackend;
use crate::assert_matches;
use berth_core::limits::{BATCH_EVENTS_MAX, EVENT_BYTES_MAX, JSON_DEPTH_MAX, PAGE_SIZE_MAX};
use berth_core::{Concurrency, Error, Event, EventType, JsonText, RunId, Seq, Timestamp};
use berth_store::{Access, ListQuery};
use serde_json::json;

pub use super::positions::{
    partial_reads_report_damage_inside_their_range_only, read_before_returns_the_events_before_a_seq_in_order,
    read_before_sees_appends_by_another_handle, read_before_skips_a_torn_tail, read_seqs_match_reads_of_each_seq,
    reads_at_any_position_match_the_full_log,
};

/// dsh §3.1 #1: a write handle reads its own appends; `append([])` is a no-op; offset
/// and length default to "from 0" and "to the end".
pub async fn round_trips_through_one_write_handle(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("round-trip");
    let handle = store.create(header.clone()).await.expect("create");
    assert_eq!(handle.access(), Access::Write);
    assert_eq!(handle.key(), &header.key());
    assert_eq!(handle.header(), &header);
    assert_eq!(handle.next_seq(), 0);

    handle.append(&[]).await.expect("an empty append is a no-op");
    assert_eq!(handle.next_seq(), 0);
    match backend.reopen().await {
        Some(other) => assert!(other.stat(&header.key()).await.unwrap().is_none(), "append([]) materialized"),
        None => skipped(backend.name(), "round_trips_through_one_write_handle", "reopen"),
    }

    let log = one_turn_log();
    handle.append(&log).await.expect("append");
    assert_eq!(handle.next_seq(), 6);
    assert_eq!(handle.read(0, None).await.unwrap(), log);
    assert_eq!(handle.read(3, None).await.unwrap(), log[3..]);
    assert_eq!(handle.read(0, Some(2)).await.unwrap(), log[..2]);
    assert_eq!(handle.read(1, Some(3)).await.unwrap(), log[1..4]);
    assert_eq!(handle.read(2, Some(0)).await.unwrap(), []);
    assert_eq!(handle.read(6, None).await.unwrap(), []);
    assert_eq!(handle.read(106, None).await.unwrap(), []);
    handle.flush().await.expect("flush after append");
    handle.close().await.expect("close");
}

/// dsh §3.1 #2, adapted: negative and fractional offsets are unrepresentable (`u64`), so
/// the clause becomes "every offset/length combination, up to `u64::MAX`, returns the
/// matching slice or `[]` without panicking or overflowing", on write and read handles.
pub async fn reads_out_of_range_return_empty(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("out-of-range");
    let writer = store.create(header.clone()).await.unwrap();
    let pending_reader = store.open(&header.key(), Access::Read).await.unwrap();
    let offsets = [0, 1, 5, 6, 7, u64::MAX / 2, u64::MAX - 1, u64::MAX];
    let lengths = [None, Some(0), Some(1), Some(5), Some(u64::MAX - 1), Some(u64::MAX)];
    for offset in offsets {
        for length in lengths {
            assert_eq!(writer.read(offset, length).await.unwrap(), [], "pending writer {offset} {length:?}");
            assert_eq!(pending_reader.read(offset, length).await.unwrap(), [], "pending reader");
        }
    }
    let log = one_turn_log();
    writer.append(&log).await.unwrap();
    let reader = store.open(&header.key(), Access::Read).await.unwrap();
    for offset in offsets {
        for length in lengths {
            let start = usize::try_from(offset).unwrap_or(usize::MAX).min(log.len());
            let end = length
                .map_or(log.len(), |length| start.saturating_add(usize::try_from(length).unwrap_or(usize::MAX)))
                .min(log.len());
            let expected = &log[start..end];
            assert_eq!(writer.read(offset, length).await.unwrap(), expected, "writer {offset} {length:?}");
            assert_eq!(reader.read(offset, length).await.unwrap(), expected, "reader {offset} {length:?}");
        }
    }
    writer.close().await.unwrap();
}

/// dsh §3.1 #3: a second `create` of a pending id is `AlreadyExists`; closing the
/// never-appended creator erases it, so the id can be created again.
pub async fn duplicate_create_rejects_pending_and_allows_id_after_erasing_close(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("dup-pending");
    let first = store.create(header.clone()).await.unwrap();
    assert_matches!(store.create(header.clone()).await, Err(Error::AlreadyExists { .. }));
    first.close().await.unwrap();
    let again = store.create(header.clone()).await.expect("the id is free after an erasing close");
    again.append(&one_turn_log()[..1]).await.unwrap();
    again.close().await.unwrap();
    assert_matches!(store.create(header).await, Err(Error::AlreadyExists { .. }));
}

/// dsh §3.1 #4: two concurrent creates of one id: exactly one wins, the loser gets
/// `AlreadyExists`.
pub async fn concurrent_duplicate_creates_one_wins(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("dup-concurrent");
    let (first, second) = tokio::join!(store.create(header.clone()), store.create(header.clone()));
    let (winner, loser) = match (first, second) {
        (Ok(winner), loser) | (loser, Ok(winner)) => (winner, loser),
        (first, second) => panic!("both creates failed: {first:?} / {second:?}"),
    };
    assert_matches!(loser, Err(Error::AlreadyExists { .. }));
    winner.append(&one_turn_log()).await.expect("the winner owns the session");
    winner.close().await.unwrap();
}

/// dsh §3.1 #5: `create` of an id that another instance materialized (durably, or
/// just now with its writer still open) is `AlreadyExists`.
pub async fn duplicate_create_rejects_session_materialized_by_another_instance(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let Some(other) = backend.reopen().await else {
        return skipped(backend.name(), "duplicate_create_rejects_session_materialized_by_another_instance", "reopen");
    };
    let closed = header("dup-materialized-closed");
    let handle = store.create(closed.clone()).await.unwrap();
    handle.append(&one_turn_log()).await.unwrap();
    handle.close().await.unwrap();
    assert_matches!(other.create(closed).await, Err(Error::AlreadyExists { .. }));

    let open = header("dup-materialized-open");
    let handle = store.create(open.clone()).await.unwrap();
    handle.flush().await.unwrap();
    assert_matches!(other.create(open).await, Err(Error::AlreadyExists { .. }));
    handle.close().await.unwrap();
}

/// dsh §3.1 #6: opening an absent session is `NotFound` for both accesses, including an
/// id that exists only in another tenant.
pub async fn open_of_absent_session_is_not_found_for_both_accesses(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let absent = key("absent");
    assert_matches!(store.open(&absent, Access::Read).await, Err(Error::NotFound { .. }));
    assert_matches!(store.open(&absent, Access::Write).await, Err(Error::NotFound { .. }));

    let elsewhere = header_in("tenant-b", USER, "same-id");
    let handle = store.create(elsewhere).await.unwrap();
    handle.append(&one_turn_log()).await.unwrap();
    let here = key("same-id");
    assert_matches!(store.open(&here, Access::Read).await, Err(Error::NotFound { .. }));
    assert_matches!(store.open(&here, Access::Write).await, Err(Error::NotFound { .. }));
    assert!(store.stat(&here).await.unwrap().is_none());
    handle.close().await.unwrap();
    // The failed write opens left no claim behind.
    assert_matches!(store.open(&here, Access::Write).await, Err(Error::NotFound { .. }));
}

/// dsh §3.1 #7: the creator owns the id before and after materialization; a write open
/// is `AlreadyOwned` until `close`, after which it succeeds and continues the log.
pub async fn write_ownership_is_single_holder_and_released_by_close(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("ownership");
    let key = header.key();
    let creator = store.create(header).await.unwrap();
    assert_matches!(store.open(&key, Access::Write).await, Err(Error::AlreadyOwned { .. }));
    creator.append(&one_turn_log()).await.unwrap();
    assert_matches!(store.open(&key, Access::Write).await, Err(Error::AlreadyOwned { .. }));
    assert!(creator.epoch().is_some(), "a materialized write handle has an epoch");
    creator.close().await.unwrap();

    let writer = store.open(&key, Access::Write).await.expect("ownership released by close");
    assert_eq!(writer.next_seq(), 6);
    assert!(writer.epoch() > creator.epoch(), "the fencing epoch grows with every write open");
    writer.append(&second_turn()).await.unwrap();
    assert_eq!(seqs(&writer.read(0, None).await.unwrap()), (0..8).collect::<Vec<_>>());
    writer.close().await.unwrap();
}

/// dsh §3.1 #8: a read handle refuses append, publish and flush with `ReadOnly`, and the
/// log is unchanged afterwards.
pub async fn read_handle_refuses_mutation(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("read-only");
    let writer = store.create(header.clone()).await.unwrap();
    writer.append(&one_turn_log()).await.unwrap();
    let reader = store.open(&header.key(), Access::Read).await.unwrap();
    assert_eq!(reader.access(), Access::Read);
    assert_matches!(reader.append(&second_turn()).await, Err(Error::ReadOnly { .. }));
    assert_matches!(reader.append(&[]).await, Err(Error::ReadOnly { .. }));
    assert_matches!(reader.publish(second_turn()[0].clone()), Err(Error::ReadOnly { .. }));
    assert_matches!(reader.flush().await, Err(Error::ReadOnly { .. }));
    assert_eq!(reader.read(0, None).await.unwrap(), one_turn_log());
    assert_eq!(writer.next_seq(), 6, "a refused mutation does not move the writer");
    writer.close().await.unwrap();
    assert_eq!(stored_events(&store, &header.key()).await, one_turn_log());
}

/// dsh §3.1 #9, adapted: double close is fine; every operation after close is
/// `HandleClosed` (on every clone); dropping the last clone of a write handle without
/// close releases ownership (awaited with a deadline) and keeps what was appended.
pub async fn closed_handle_rejects_operations_close_is_idempotent_and_drop_releases(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("closed-handle");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    writer.append(&one_turn_log()).await.unwrap();
    let clone = writer.clone();
    writer.close().await.unwrap();
    writer.close().await.expect("close is idempotent");
    clone.close().await.expect("close through a clone is idempotent too");
    for handle in [&writer, &clone] {
        assert_matches!(handle.read(0, None).await, Err(Error::HandleClosed { .. }));
        assert_matches!(handle.append(&second_turn()).await, Err(Error::HandleClosed { .. }));
        assert_matches!(handle.append(&[]).await, Err(Error::HandleClosed { .. }));
        assert_matches!(handle.flush().await, Err(Error::HandleClosed { .. }));
        assert_matches!(handle.publish(second_turn()[0].clone()), Err(Error::HandleClosed { .. }));
    }
    let reader = store.open(&key, Access::Read).await.unwrap();
    reader.close().await.unwrap();
    reader.close().await.unwrap();
    assert_matches!(reader.read(0, None).await, Err(Error::HandleClosed { .. }));

    // Dropping: ownership stays while any clone lives, and goes with the last one.
    let dropped = store.open(&key, Access::Write).await.unwrap();
    dropped.append(&second_turn()).await.unwrap();
    let survivor = dropped.clone();
    drop(dropped);
    settle().await;
    assert_matches!(store.open(&key, Access::Write).await, Err(Error::AlreadyOwned { .. }));
    drop(survivor);
    let reopened = open_write_eventually(&store, &key).await;
    assert_eq!(reopened.next_seq(), 8, "appends acknowledged before the drop are kept");
    reopened.close().await.unwrap();

    // A dropped creator that never appended erases its session, like close.
    let never = store.create(super::fixtures::header("dropped-creator")).await.unwrap();
    drop(never);
    eventually("the dropped creator's session is gone", || async {
        store.stat(&super::fixtures::key("dropped-creator")).await.unwrap().is_none()
    })
    .await;
    store
        .create(super::fixtures::header("dropped-creator"))
        .await
        .expect("the id is free again")
        .close()
        .await
        .unwrap();
}

/// dsh §3.1 #9, continued: a dropped write handle's session stays owned by this
/// instance until its background final drain has finished with the backend writer: a
/// `create` of the id meanwhile is `AlreadyExists` (never a second pending session that
/// the drain's materialization would then collide with), and the drained events land.
pub async fn dropped_handle_keeps_ownership_until_its_final_drain_ends(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("dropped-with-buffer");
    let key = header.key();
    let writer = store.create(header.clone()).await.unwrap();
    writer.publish(marker(0)).unwrap();
    drop(writer);
    assert_matches!(store.create(header.clone()).await, Err(Error::AlreadyExists { .. }));
    let reopened = open_write_eventually(&store, &key).await;
    assert_eq!(reopened.next_seq(), 1);
    reopened.close().await.unwrap();
    assert_eq!(stored_events(&store, &key).await, [marker(0)]);
    assert_matches!(store.create(header).await, Err(Error::AlreadyExists { .. }));
}

/// Cancellation safety of ownership: a `create` or `open(write)` future dropped while
/// its claim is in flight (e.g. by a request timeout) leaves nothing behind; the id can
/// be created or opened right after.
pub async fn cancelled_create_or_open_releases_its_claim(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let faults = backend.faults();
    let stored = header("cancelled-open");
    let writer = store.create(stored.clone()).await.unwrap();
    writer.append(&one_turn_log()).await.unwrap();
    writer.close().await.unwrap();
    let fresh = header("cancelled-create");

    faults.hold_claims();
    let deadline = std::time::Duration::from_millis(10);
    assert!(tokio::time::timeout(deadline, store.open(&stored.key(), Access::Write)).await.is_err());
    assert!(tokio::time::timeout(deadline, store.create(fresh.clone())).await.is_err());
    faults.release_claims();

    let writer = store.open(&stored.key(), Access::Write).await.expect("the cancelled open left no claim");
    assert_eq!(writer.next_seq(), 6);
    writer.close().await.unwrap();
    let creator = store.create(fresh).await.expect("the cancelled create left no claim");
    creator.close().await.unwrap();
}

/// Cancellation safety of writes: an `append` or `flush` whose caller gives up while the
/// write is in flight still completes (it is never abandoned half-way), so the handle's
/// next seq matches the stored log and nothing published is lost.
pub async fn cancelled_append_or_flush_still_completes(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let faults = backend.faults();
    let header = header("cancelled-append");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    writer.append(&one_turn_log()).await.unwrap();
    let deadline = std::time::Duration::from_millis(10);

    faults.hold_appends();
    assert!(tokio::time::timeout(deadline, writer.append(&second_turn())).await.is_err(), "the append was held");
    faults.release_appends();
    eventually("the abandoned append completes", || async { stored_events(&store, &key).await.len() == 8 }).await;
    assert_eq!(writer.next_seq(), 8);
    writer.append(&[marker(8)]).await.expect("the handle continues at the stored next seq");

    writer.publish(marker(9)).unwrap();
    faults.hold_appends();
    assert!(tokio::time::timeout(deadline, writer.flush()).await.is_err(), "the flush was held");
    faults.release_appends();
    eventually("the abandoned flush completes", || async { stored_events(&store, &key).await.len() == 10 }).await;
    writer.close().await.unwrap();
    assert_eq!(seqs(&stored_events(&store, &key).await), (0..10).collect::<Vec<_>>());
}

/// dsh §3.1 #10: the store-wide flush materializes every active write handle and counts
/// a handle that is closing concurrently as flushed; a fresh instance then sees the
/// flushed empty session but not the one closed without an append.
pub async fn store_flush_materializes_every_handle_and_counts_closing_as_flushed(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let faults = backend.faults();
    let flushed = store.create(header("flush-empty")).await.unwrap();
    let erased = store.create(header("flush-erased")).await.unwrap();
    let closing = store.create(header("flush-closing")).await.unwrap();
    closing.append(&one_turn_log()[..1]).await.unwrap();
    closing.publish(one_turn_log()[1].clone()).unwrap();

    // Hold the closing handle inside its final drain while the store-wide flush runs.
    let closing_key = closing.key().clone();
    let attempts_before = faults.append_attempts(&closing_key);
    faults.hold_appends();
    let close_task = tokio::spawn(async move { closing.close().await });
    eventually("the close is draining", || async { faults.append_attempts(&closing_key) > attempts_before }).await;
    erased.close().await.unwrap();
    let flushing_store = store.clone();
    let flush_task = tokio::spawn(async move { flushing_store.flush().await });
    settle().await;
    faults.release_appends();
    flush_task.await.unwrap().expect("store flush counts a closing handle as flushed");
    close_task.await.unwrap().expect("close");

    let observer = match backend.reopen().await {
        Some(observer) => observer,
        None => {
            skipped(backend.name(), "store_flush_materializes_every_handle_and_counts_closing_as_flushed", "reopen");
            store.clone()
        }
    };
    let stat = observer.stat(flushed.key()).await.unwrap().expect("the flushed empty session exists");
    assert_eq!(&stat.header, flushed.header());
    assert_eq!(stored_events(&observer, flushed.key()).await, []);
    assert!(observer.stat(&key("flush-erased")).await.unwrap().is_none());
    assert_eq!(stored_events(&observer, &key("flush-closing")).await, one_turn_log()[..2]);
    flushed.close().await.unwrap();
}

/// dsh §3.1 #11: a created, never-appended session is visible to its own instance
/// (creator reads `[]`, `stat`, `list`, `open(read)`) and invisible to a fresh one.
pub async fn created_unappended_session_is_visible_here_and_invisible_to_fresh_instance(
    backend: &dyn ConformanceBackend,
) {
    let store = backend.store().await;
    let header = header("pending-visible");
    let key = header.key();
    let creator = store.create(header.clone()).await.unwrap();
    assert_eq!(creator.read(0, None).await.unwrap(), []);
    let stat = store.stat(&key).await.unwrap().expect("stat sees the pending session");
    assert_eq!(stat.header, header);
    assert!(listed_ids(&store).await.contains(&"pending-visible".to_string()));
    let reader = store.open(&key, Access::Read).await.expect("open(read) of a pending session");
    assert_eq!(reader.read(0, None).await.unwrap(), []);

    match backend.reopen().await {
        Some(other) => {
            assert!(other.stat(&key).await.unwrap().is_none());
            assert!(!listed_ids(&other).await.contains(&"pending-visible".to_string()));
            assert_matches!(other.open(&key, Access::Read).await, Err(Error::NotFound { .. }));
            assert_matches!(other.open(&key, Access::Write).await, Err(Error::NotFound { .. }));
        }
        None => skipped(backend.name(), "created_unappended_session_is_visible_here…", "reopen"),
    }
    creator.close().await.unwrap();
}

/// dsh §3.1 #12: closing a created session that never appended erases it: `stat` is
/// `None`, `list` lacks it, both opens are `NotFound`, and an old read handle reads `[]`.
pub async fn close_without_append_erases_created_session(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("erased-by-close");
    let key = header.key();
    let creator = store.create(header).await.unwrap();
    let reader = store.open(&key, Access::Read).await.unwrap();
    creator.close().await.unwrap();
    assert!(store.stat(&key).await.unwrap().is_none());
    assert!(!listed_ids(&store).await.contains(&"erased-by-close".to_string()));
    assert_matches!(store.open(&key, Access::Read).await, Err(Error::NotFound { .. }));
    assert_matches!(store.open(&key, Access::Write).await, Err(Error::NotFound { .. }));
    assert_eq!(reader.read(0, None).await.unwrap(), []);
    if let Some(other) = backend.reopen().await {
        assert!(other.stat(&key).await.unwrap().is_none());
    }
}

/// dsh §3.1 #13: `flush` materializes an empty session durably: a fresh instance lists
/// it, `stat` matches, it reads `[]` and can be opened for write at seq 0.
pub async fn flush_materializes_empty_session_durably(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("flushed-empty");
    let key = header.key();
    let creator = store.create(header.clone()).await.unwrap();
    creator.flush().await.unwrap();
    creator.close().await.unwrap();
    let Some(other) = backend.reopen().await else {
        return skipped(backend.name(), "flush_materializes_empty_session_durably", "reopen");
    };
    assert!(listed_ids(&other).await.contains(&"flushed-empty".to_string()));
    assert_eq!(other.stat(&key).await.unwrap().expect("stat").header, header);
    assert_eq!(stored_events(&other, &key).await, []);
    let writer = other.open(&key, Access::Write).await.unwrap();
    assert_eq!(writer.next_seq(), 0);
    writer.close().await.unwrap();
}

/// dsh §3.1 #14: once an append resolves, reads started afterwards on the same instance
/// see at least that prefix, through an older read handle and a new one alike.
pub async fn reads_after_append_observe_prefix_on_any_handle(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("freshness");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    writer.append(&one_turn_log()).await.unwrap();
    let older = store.open(&key, Access::Read).await.unwrap();
    assert_eq!(older.read(0, None).await.unwrap(), one_turn_log());
    writer.append(&second_turn()).await.unwrap();
    let expected: Vec<u64> = (0..8).collect();
    assert_eq!(seqs(&older.read(0, None).await.unwrap()), expected);
    let newer = store.open(&key, Access::Read).await.unwrap();
    assert_eq!(seqs(&newer.read(0, None).await.unwrap()), expected);
    assert_eq!(seqs(&writer.read(0, None).await.unwrap()), expected);
    writer.close().await.unwrap();
}

/// dsh §3.1 #15: a fresh instance continues the stored log at the committed next seq.
pub async fn fresh_instance_continues_at_committed_next_seq(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("continue");
    let key = header.key();
    let creator = store.create(header).await.unwrap();
    creator.append(&one_turn_log()).await.unwrap();
    creator.close().await.unwrap();
    let Some(other) = backend.reopen().await else {
        return skipped(backend.name(), "fresh_instance_continues_at_committed_next_seq", "reopen");
    };
    let writer = other.open(&key, Access::Write).await.unwrap();
    assert_eq!(writer.next_seq(), 6);
    writer.append(&second_turn()).await.unwrap();
    writer.close().await.unwrap();
    let third = backend.reopen().await.expect("reopen worked once");
    let mut expected = one_turn_log();
    expected.extend(second_turn());
    assert_eq!(stored_events(&third, &key).await, expected);
}

/// dsh §3.1 #16 (and the SPEC's "seq conflict names expected seq"): a batch that does
/// not continue the log contiguously is `SeqConflict { expected, actual }` naming the
/// expected seq, for a replay, a gap inside the batch and a skipped start; nothing of
/// it is stored and the writer continues at the same seq.
pub async fn append_rejects_non_contiguous_batch_naming_expected_seq(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("contiguity");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    writer.append(&one_turn_log()).await.unwrap();
    assert_matches!(writer.append(&one_turn_log()).await, Err(Error::SeqConflict { expected: 6, actual: 0 }));
    let gapped = [marker(6), marker(8)];
    assert_matches!(writer.append(&gapped).await, Err(Error::SeqConflict { expected: 7, actual: 8 }));
    assert_matches!(writer.append(&[marker(7)]).await, Err(Error::SeqConflict { expected: 6, actual: 7 }));
    assert_matches!(writer.publish(marker(5)), Err(Error::SeqConflict { expected: 6, actual: 5 }));
    assert_eq!(writer.next_seq(), 6);
    assert_eq!(writer.read(0, None).await.unwrap(), one_turn_log());
    writer.append(&second_turn()).await.expect("the expected seq still works");
    writer.close().await.unwrap();
    assert_eq!(seqs(&stored_events(&store, &key).await), (0..8).collect::<Vec<_>>());
}

fn raw_event(seq: u64, event_type: &str, data: JsonText) -> Event {
    Event {
        seq: Seq(seq),
        event_type: EventType::parse(event_type).unwrap(),
        time: Timestamp(1_000),
        run: None,
        data,
        ignorable: false,
        idempotency: None,
    }
}

fn nested_arrays(depth: usize) -> serde_json::Value {
    (0..depth).fold(json!(0), |inner, _| json!([inner]))
}

/// dsh §3.1 #17, adapted: "non-JSON data" cannot be built through the checked
/// constructors (`JsonText::parse` refuses NaN, duplicate keys, trailing bytes and
/// excess depth; `Event::new` refuses excess depth), so the clause checks those refusals
/// and then that data smuggled past them (`JsonText::from(&Value)` skips the depth check,
/// `from_trusted_raw` skips everything) is refused by `append` and `publish`, in reserved
/// and extension types alike, with nothing of the batch stored.
pub async fn append_rejects_invalid_event_data_without_storing(backend: &dyn ConformanceBackend) {
    let too_deep = nested_arrays(JSON_DEPTH_MAX + 1);
    for text in ["NaN", r#"{"a":1,"a":2}"#, "[1,]", "1 2", "", "{\"a\":Infinity}"] {
        assert!(JsonText::parse(text).is_err(), "JsonText::parse accepted {text:?}");
    }
    assert!(JsonText::parse(&too_deep.to_string()).is_err());
    assert_matches!(
        Event::new(0, "myapp/deep", Timestamp(0), too_deep.clone()),
        Err(Error::LimitExceeded { what: berth_core::limits::Limit::JsonDepth, .. })
    );
    assert!(Event::new(0, "myapp/ok", Timestamp(0), nested_arrays(JSON_DEPTH_MAX)).is_ok());

    let store = backend.store().await;
    let header = header("invalid-data");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    let raw = |text: &str| JsonText::from_trusted_raw(serde_json::value::RawValue::from_string(text.into()).unwrap());
    let deep = raw_event(0, "myapp/deep", JsonText::from(&too_deep));
    assert_matches!(
        writer.append(std::slice::from_ref(&deep)).await,
        Err(Error::LimitExceeded { what: berth_core::limits::Limit::JsonDepth, .. })
    );
    assert_matches!(writer.publish(deep), Err(Error::LimitExceeded { what: berth_core::limits::Limit::JsonDepth, .. }));
    let refused = [
        raw_event(0, "myapp/dup", raw(r#"{"a":1,"a":2}"#)),
        raw_event(0, "myapp/not-minimal", raw(r#"{ "b": 1, "a": 2 }"#)),
        raw_event(0, "user/message", raw(r#"{"content":"x","content":"y"}"#)),
        raw_event(0, "turn/start", JsonText::from(&json!({}))),
        raw_event(0, "turn/start", JsonText::from(&json!({"turn": -1}))),
        raw_event(0, "tool/result", JsonText::from(&json!({"content": "no call id"}))),
    ];
    for event in refused {
        assert_matches!(writer.append(std::slice::from_ref(&event)).await, Err(Error::Invalid { .. }));
        assert_matches!(writer.publish(event), Err(Error::Invalid { .. }));
    }
    let valid_then_invalid = [marker(0), raw_event(1, "myapp/dup", raw(r#"{"k":[],"k":{}}"#))];
    assert_matches!(writer.append(&valid_then_invalid).await, Err(Error::Invalid { .. }));
    assert_eq!(writer.next_seq(), 0, "nothing of a refused batch is accepted");
    assert_eq!(writer.read(0, None).await.unwrap(), []);
    writer.append(&[marker(0)]).await.expect("seq 0 is still free");
    writer.close().await.unwrap();
    assert_eq!(stored_events(&store, &key).await, [marker(0)]);
}

/// R-C9 at the storage seam: data is stored and returned as its exact minimal text —
/// unsorted keys, number lexemes beyond 64 bits, `1.0`, `-0`, escapes — whether it was
/// checked on the way in (`JsonText::parse`) or arrives unverified (`from_trusted_raw`,
/// as a fork copies it), through the writer, a fresh reader and another instance.
pub async fn data_is_stored_and_returned_exactly(backend: &dyn ConformanceBackend) {
    let exact = r#"{"b":1,"a":[1.0,1e2,123456789012345678901234567890,-0],"s":"\u00e9\/","e":1E+400}"#;
    let store = backend.store().await;
    let header = header("exact-data");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    let raw = JsonText::from_trusted_raw(serde_json::value::RawValue::from_string(exact.into()).unwrap());
    let batch = [raw_event(0, "myapp/exact", JsonText::parse(exact).unwrap()), raw_event(1, "myapp/exact", raw)];
    writer.append(&batch).await.expect("minimal, strict data is stored, sorted or not");
    let from_writer: Vec<String> = writer.read(0, None).await.unwrap().iter().map(|e| e.data.to_string()).collect();
    assert_eq!(from_writer, [exact, exact], "{}: writer", backend.name());
    writer.close().await.unwrap();
    let stored: Vec<String> = stored_events(&store, &key).await.iter().map(|e| e.data.to_string()).collect();
    assert_eq!(stored, [exact, exact], "{}: fresh reader", backend.name());
    if let Some(other) = backend.reopen().await {
        let stored: Vec<String> = stored_events(&other, &key).await.iter().map(|e| e.data.to_string()).collect();
        assert_eq!(stored, [exact, exact], "{}: another instance", backend.name());
    }
}

/// dsh §3.1 #18: vocabulary fail-closed. Append refuses an unknown type in a reserved
/// namespace and stores extension types verbatim; a stored unknown reserved type (from
/// a newer berth) makes write opens fail `FormatUnsupported` every time (the failed claim
/// is released) and reads fail `FormatUnsupported` naming the type, unless its writer
/// marked it ignorable.
pub async fn vocabulary_fails_closed_on_unknown_stored_types(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("vocabulary");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    let newer = Event::new(0, "turn/pause", Timestamp(1_000), json!({"turn": 0})).unwrap();
    assert_matches!(writer.append(std::slice::from_ref(&newer)).await, Err(Error::Invalid { .. }));
    let extension = Event::new(0, "myapp/x", Timestamp(1_000), json!({"z": [1, {"y": null}], "a": "é"})).unwrap();
    writer.append(std::slice::from_ref(&extension)).await.expect("extension types are stored");
    writer.close().await.unwrap();
    assert_eq!(stored_events(&store, &key).await, std::slice::from_ref(&extension));

    let mut injected = newer.clone();
    injected.seq = Seq(1);
    if backend.inject_stored_event(&key, injected).await.is_none() {
        return skipped(backend.name(), "vocabulary_fails_closed_on_unknown_stored_types", "inject_stored_event");
    }
    let mut instances = vec![store.clone()];
    instances.extend(backend.reopen().await);
    for instance in &instances {
        for attempt in 0..2 {
            match instance.open(&key, Access::Write).await {
                Err(Error::FormatUnsupported { reason, .. }) => assert!(reason.contains("turn/pause"), "{reason}"),
                other => panic!("write open #{attempt} should be FormatUnsupported, got {other:?}"),
            }
        }
        let read = match instance.open(&key, Access::Read).await {
            Ok(reader) => reader.read(0, None).await,
            Err(error) => Err(error),
        };
        match read {
            Err(Error::FormatUnsupported { reason, .. }) => assert!(reason.contains("turn/pause"), "{reason}"),
            other => panic!("reading a log with an unknown reserved type should fail, got {other:?}"),
        }
    }

    // The same type marked ignorable by its writer is kept and served.
    let tolerant = super::fixtures::header("vocabulary-ignorable");
    let tolerant_key = tolerant.key();
    let writer = store.create(tolerant).await.unwrap();
    writer.append(&[extension]).await.unwrap();
    writer.close().await.unwrap();
    let mut ignorable = newer.with_ignorable(true);
    ignorable.seq = Seq(1);
    backend.inject_stored_event(&tolerant_key, ignorable.clone()).await.expect("inject worked once");
    assert_eq!(stored_events(&store, &tolerant_key).await[1], ignorable);
    let writer = store.open(&tolerant_key, Access::Write).await.expect("ignorable types do not block writes");
    assert_eq!(writer.next_seq(), 2);
    writer.close().await.unwrap();
}

/// dsh §3.1 #19: a torn physical tail is never served; the write path truncates it
/// before its first append (reporting it in `recovery()`), and the result is durable.
pub async fn torn_tail_is_never_served_and_truncated_by_the_write_path(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("torn-tail");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    writer.append(&one_turn_log()).await.unwrap();
    writer.close().await.unwrap();
    if backend.corrupt_tail(&key).await.is_none() {
        return skipped(backend.name(), "torn_tail_is_never_served_and_truncated_by_the_write_path", "corrupt_tail");
    }
    let Some(other) = backend.reopen().await else {
        return skipped(backend.name(), "torn_tail_is_never_served_and_truncated_by_the_write_path", "reopen");
    };
    assert_eq!(stored_events(&other, &key).await, one_turn_log(), "the torn tail is not served");
    let writer = other.open(&key, Access::Write).await.expect("a torn tail does not block the write open");
    let recovery = writer.recovery().expect("the write open reports the torn tail");
    assert!(recovery.torn_bytes > 0, "{recovery:?}");
    assert_eq!(writer.next_seq(), 6);
    writer.append(&second_turn()).await.unwrap();
    writer.close().await.unwrap();
    let third = backend.reopen().await.expect("reopen worked once");
    assert_eq!(seqs(&stored_events(&third, &key).await), (0..8).collect::<Vec<_>>());
    let writer = third.open(&key, Access::Write).await.unwrap();
    assert!(writer.recovery().is_none(), "the tail was truncated durably");
    writer.close().await.unwrap();
}

/// dsh §3.1 #20: `stat` and `list` agree on change tokens that are stable while nothing
/// changes (ownership churn included) and change after an append; snapshot headers are
/// the handle's header; `stat` of an absent id is `None`.
pub async fn stat_and_list_agree_on_change_tokens(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("tokens");
    let key = header.key();
    let listed_token = |id: &'static str| {
        let store = store.clone();
        async move {
            let mut query = ListQuery::tenant(tenant());
            query.limit = PAGE_SIZE_MAX;
            let page = store.list(&query).await.unwrap();
            page.items.into_iter().find(|stat| stat.header.id.as_str() == id).map(|stat| stat.change_token)
        }
    };
    assert!(store.stat(&key).await.unwrap().is_none());
    let writer = store.create(header.clone()).await.unwrap();
    let pending = store.stat(&key).await.unwrap().unwrap().change_token;
    assert_eq!(store.stat(&key).await.unwrap().unwrap().change_token, pending);
    assert_eq!(listed_token("tokens").await, Some(pending.clone()));

    writer.append(&one_turn_log()).await.unwrap();
    let first = store.stat(&key).await.unwrap().unwrap();
    assert_eq!(&first.header, writer.header());
    assert_ne!(first.change_token, pending, "materialization changes the token");
    assert_eq!(store.stat(&key).await.unwrap().unwrap().change_token, first.change_token);
    assert_eq!(listed_token("tokens").await, Some(first.change_token.clone()));
    if let Some(count) = first.event_count {
        assert_eq!(count, 6);
    }

    writer.close().await.unwrap();
    let churn = store.open(&key, Access::Write).await.unwrap();
    churn.close().await.unwrap();
    let reader = store.open(&key, Access::Read).await.unwrap();
    reader.read(0, None).await.unwrap();
    reader.close().await.unwrap();
    assert_eq!(store.stat(&key).await.unwrap().unwrap().change_token, first.change_token, "ownership churn");

    let writer = store.open(&key, Access::Write).await.unwrap();
    writer.append(&second_turn()).await.unwrap();
    let second = store.stat(&key).await.unwrap().unwrap();
    assert_ne!(second.change_token, first.change_token, "an append changes the token");
    assert_eq!(listed_token("tokens").await, Some(second.change_token.clone()));
    assert_eq!(second.header, header);
    if let Some(count) = second.event_count {
        assert_eq!(count, 8);
    }
    writer.close().await.unwrap();
}

/// SPEC R-P3: single writer across instances ("processes"): a second instance's write
/// open is `AlreadyOwned` while the first holds the writer; its readers never take the
/// lease; after the first closes, the second can write with a higher epoch.
pub async fn second_instance_write_open_is_already_owned(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let Some(other) = backend.reopen().await else {
        return skipped(backend.name(), "second_instance_write_open_is_already_owned", "reopen");
    };
    let header = header("two-processes");
    let key = header.key();
    let first = store.create(header).await.unwrap();
    first.append(&one_turn_log()).await.unwrap();
    assert_matches!(other.open(&key, Access::Write).await, Err(Error::AlreadyOwned { .. }));
    assert_matches!(other.open(&key, Access::Write).await, Err(Error::AlreadyOwned { .. }));
    let reader = other.open(&key, Access::Read).await.expect("readers never take the lease");
    assert_eq!(reader.read(0, None).await.unwrap(), one_turn_log());
    first.append(&second_turn()).await.expect("readers elsewhere do not disturb the writer");
    let first_epoch = first.epoch().expect("epoch");
    first.close().await.unwrap();
    let second = other.open(&key, Access::Write).await.expect("released by close");
    assert!(second.epoch().expect("epoch") > first_epoch);
    assert_eq!(second.next_seq(), 8);
    assert_matches!(store.open(&key, Access::Write).await, Err(Error::AlreadyOwned { .. }));
    second.close().await.unwrap();
}

/// SPEC R-P4: a fresh instance sees only materialized sessions (appended or flushed),
/// never another instance's pending ones, in `stat`, `list` and `open`.
pub async fn fresh_instance_lists_only_materialized_sessions(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let Some(other) = backend.reopen().await else {
        return skipped(backend.name(), "fresh_instance_lists_only_materialized_sessions", "reopen");
    };
    let pending = store.create(header("visible-pending")).await.unwrap();
    let appended = store.create(header("visible-appended")).await.unwrap();
    appended.append(&one_turn_log()).await.unwrap();
    let flushed = store.create(header("visible-flushed")).await.unwrap();
    flushed.flush().await.unwrap();
    let mut here = listed_ids(&store).await;
    here.sort();
    assert_eq!(here, ["visible-appended", "visible-flushed", "visible-pending"]);
    let mut there = listed_ids(&other).await;
    there.sort();
    assert_eq!(there, ["visible-appended", "visible-flushed"]);
    assert!(other.stat(pending.key()).await.unwrap().is_none());
    assert_matches!(other.open(pending.key(), Access::Read).await, Err(Error::NotFound { .. }));
    for handle in [pending, appended, flushed] {
        handle.close().await.unwrap();
    }
}

/// SPEC R-P4: two instances may both hold a pending session of one id (neither can see
/// the other's); the first to materialize wins and the other's flush is `AlreadyExists`.
pub async fn racing_materializations_across_instances_one_wins(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let Some(other) = backend.reopen().await else {
        return skipped(backend.name(), "racing_materializations_across_instances_one_wins", "reopen");
    };
    let header = header("race");
    let first = store.create(header.clone()).await.unwrap();
    let second = other.create(header.clone()).await.expect("the other instance cannot see the pending one");
    first.append(&one_turn_log()).await.unwrap();
    assert_matches!(second.flush().await, Err(Error::AlreadyExists { .. }));
    assert_matches!(second.append(&one_turn_log()).await, Err(Error::AlreadyExists { .. }));
    second.close().await.expect("close of the loser still succeeds or reports nothing stored");
    first.close().await.unwrap();
    assert_eq!(stored_events(&other, &header.key()).await, one_turn_log(), "the loser stored nothing");
}

/// SPEC R-C6: a batch over `BATCH_EVENTS_MAX` events, an event over `EVENT_BYTES_MAX`
/// and a batch over `BATCH_BYTES_MAX` are `LimitExceeded`, and nothing of them is stored.
pub async fn limits_reject_whole_batches(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("limits");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    let too_many: Vec<Event> = (0..=BATCH_EVENTS_MAX as u64).map(marker).collect();
    assert_matches!(
        writer.append(&too_many).await,
        Err(Error::LimitExceeded { what: berth_core::limits::Limit::BatchEvents, limit, actual })
            if limit == BATCH_EVENTS_MAX as u64 && actual == BATCH_EVENTS_MAX as u64 + 1
    );
    assert_matches!(
        writer.append(&[bulky(0, EVENT_BYTES_MAX)]).await,
        Err(Error::LimitExceeded { what: berth_core::limits::Limit::EventBytes, .. })
    );
    assert_matches!(writer.publish(bulky(0, EVENT_BYTES_MAX)), Err(Error::LimitExceeded { .. }));
    let nine_mib: Vec<Event> = (0..9).map(|seq| bulky(seq, EVENT_BYTES_MAX - 1024)).collect();
    assert_matches!(
        writer.append(&nine_mib).await,
        Err(Error::LimitExceeded { what: berth_core::limits::Limit::BatchBytes, .. })
    );
    assert_eq!(writer.next_seq(), 0);
    assert_eq!(writer.read(0, None).await.unwrap(), []);
    let exactly_max: Vec<Event> = (0..BATCH_EVENTS_MAX as u64).map(marker).collect();
    writer.append(&exactly_max).await.expect("a batch at the limit is fine");
    writer.close().await.unwrap();
    assert_eq!(stored_events(&store, &key).await.len(), BATCH_EVENTS_MAX);
}

/// SPEC R-C3 / R-S5: in a `parallel` session every event carries its run; an event
/// without one is refused (append and publish) and nothing is stored.
pub async fn parallel_session_events_must_carry_run(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let mut header = header("parallel");
    header.policy.concurrency = Concurrency::Parallel { runs_max: 2 };
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    let run = RunId::parse("run-1").unwrap();
    let batch = [marker(0).with_run(run.clone()), marker(1)];
    assert_matches!(writer.append(&batch).await, Err(Error::Invalid { .. }));
    assert_matches!(writer.publish(marker(0)), Err(Error::Invalid { .. }));
    assert_eq!(writer.next_seq(), 0);
    let with_runs = [marker(0).with_run(run.clone()), marker(1).with_run(RunId::parse("run-2").unwrap())];
    writer.append(&with_runs).await.unwrap();
    writer.close().await.unwrap();
    assert_eq!(stored_events(&store, &key).await, with_runs);
}

/// SPEC R-P1: `list` pages by id with cursors, includes this instance's pending
/// sessions, filters by user, never shows another tenant, and refuses page sizes of 0
/// or over `PAGE_SIZE_MAX`.
pub async fn list_paginates_with_cursors_and_includes_pending(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let mut handles = Vec::new();
    for id in ["page-a", "page-c", "page-e", "page-g", "page-i"] {
        let handle = store.create(header(id)).await.unwrap();
        handle.append(&one_turn_log()[..1]).await.unwrap();
        handles.push(handle);
    }
    for id in ["page-b", "page-h"] {
        handles.push(store.create(header(id)).await.unwrap());
    }
    handles.push(store.create(header_in(TENANT, "user-b", "page-d")).await.unwrap());
    let foreign = store.create(header_in("tenant-b", USER, "page-f")).await.unwrap();
    foreign.append(&one_turn_log()[..1]).await.unwrap();
    handles.push(foreign);

    let mut query = ListQuery::tenant(tenant());
    query.limit = 2;
    let mut pages = Vec::new();
    loop {
        let page = store.list(&query).await.unwrap();
        assert!(page.items.len() <= 2);
        let ids: Vec<String> = page.items.iter().map(|stat| stat.header.id.to_string()).collect();
        pages.push(ids);
        match page.next_cursor {
            Some(cursor) => query.after = Some(cursor),
            None => break,
        }
        assert!(pages.len() < 10, "pagination does not terminate");
    }
    let all: Vec<String> = pages.concat();
    assert_eq!(all, ["page-a", "page-b", "page-c", "page-d", "page-e", "page-g", "page-h", "page-i"]);

    let mut by_user = ListQuery::tenant(tenant());
    by_user.user = Some(berth_core::UserId::parse("user-b").unwrap());
    let page = store.list(&by_user).await.unwrap();
    assert_eq!(page.items.iter().map(|stat| stat.header.id.as_str()).collect::<Vec<_>>(), ["page-d"]);
    assert_eq!(page.next_cursor, None);

    for limit in [0, PAGE_SIZE_MAX + 1] {
        let mut query = ListQuery::tenant(tenant());
        query.limit = limit;
        assert_matches!(
            store.list(&query).await,
            Err(Error::LimitExceeded { what: berth_core::limits::Limit::PageSize, .. })
        );
    }
    for handle in handles {
        handle.close().await.unwrap();
    }
}

/// SPEC R-P2: a read handle is monotonic: later reads never show less than earlier
/// ones, also when it was opened before the session materialized.
pub async fn read_handle_is_monotonic(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("monotonic");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    let early = store.open(&key, Access::Read).await.unwrap();
    assert_eq!(early.read(0, None).await.unwrap(), []);
    let log = one_turn_log();
    let mut seen = 0;
    for end in [1, 3, 6] {
        writer.append(&log[seen..end]).await.unwrap();
        let late = store.open(&key, Access::Read).await.unwrap();
        for reader in [&early, &late] {
            let events = reader.read(0, None).await.unwrap();
            assert_eq!(events, log[..end]);
            assert_eq!(reader.read(end as u64 - 1, None).await.unwrap(), log[end - 1..end]);
        }
        seen = end;
    }
    writer.close().await.unwrap();
    assert_eq!(early.read(0, None).await.unwrap(), log, "closing the writer does not shrink the log");
}
