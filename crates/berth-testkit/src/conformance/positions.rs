//! Reads by position (R-S15): `read_before` (the N events before a seq, or the tail) and
//! reads from an arbitrary seq, on write handles, warm read handles and read handles of
//! a fresh instance (a log no handle of that instance has open). Part of the `logstore`
//! suite (re-exported there), so every backend runs them.
//!
//! What a partial read verifies is backend-specific and documented in
//! `docs/reference/storage-format.md` (*Partial reads*): damage inside the range read is
//! `Corrupt`; damage outside it is not looked at (a full read or `fsck` finds it).

use super::fixtures::*;
use super::ConformanceBackend;
use crate::assert_matches;
use berth_core::{Error, Event};
use berth_store::{Access, LogStore, SessionHandle};

/// A log of `count` small extension events, appended in batches.
pub fn marker_log(count: u64) -> Vec<Event> {
    (0..count).map(marker).collect()
}

async fn write_log(store: &LogStore, id: &str, log: &[Event]) -> berth_core::SessionKey {
    let header = header(id);
    let writer = store.create(header.clone()).await.expect("create");
    for batch in log.chunks(500) {
        writer.append(batch).await.expect("append");
    }
    writer.flush().await.expect("flush");
    writer.close().await.expect("close");
    header.key()
}

/// What `read_before(before, limit)` must return, from the whole log.
pub fn expected_before(log: &[Event], before: u64, limit: u64) -> &[Event] {
    let end = usize::try_from(before).unwrap_or(usize::MAX).min(log.len());
    let start = end.saturating_sub(usize::try_from(limit).unwrap_or(usize::MAX));
    &log[start..end]
}

async fn check_before(handle: &SessionHandle, log: &[Event], before: u64, limit: u64, what: &str) {
    let events = handle.read_before(before, limit).await.unwrap_or_else(|error| panic!("{what}: {error}"));
    assert_eq!(seqs(&events), seqs(expected_before(log, before, limit)), "{what}: before {before} limit {limit}");
    assert_eq!(events, expected_before(log, before, limit), "{what}: before {before} limit {limit}");
}

/// The boundary probes for a log of `len` events.
fn before_probes(len: u64) -> Vec<(u64, u64)> {
    let befores = [0, 1, len.saturating_sub(1), len, len + 1, u64::MAX];
    let limits = [0, 1, 3, len.saturating_sub(1), len, len + 5, u64::MAX];
    befores.iter().flat_map(|before| limits.iter().map(move |limit| (*before, *limit))).collect()
}

/// `read_before` on an empty log (pending and materialized) is empty; on a log it is
/// the `limit` events before `before`, in order, clipped at both ends, the tail when
/// `before` is at or past the end — on the write handle, a read handle and a read
/// handle of a fresh instance.
pub async fn read_before_returns_the_events_before_a_seq_in_order(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let header = header("before-basics");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    let pending_reader = store.open(&key, Access::Read).await.unwrap();
    for (before, limit) in before_probes(0) {
        assert_eq!(writer.read_before(before, limit).await.unwrap(), [], "pending writer");
        assert_eq!(pending_reader.read_before(before, limit).await.unwrap(), [], "pending reader");
    }
    writer.flush().await.unwrap();
    let empty_reader = store.open(&key, Access::Read).await.unwrap();
    assert_eq!(empty_reader.read_before(u64::MAX, 10).await.unwrap(), [], "materialized, empty");
    let log = marker_log(40);
    writer.append(&log).await.unwrap();
    let reader = store.open(&key, Access::Read).await.unwrap();
    for (before, limit) in before_probes(40) {
        check_before(&writer, &log, before, limit, "writer").await;
        check_before(&reader, &log, before, limit, "reader").await;
    }
    writer.close().await.unwrap();
    let Some(other) = backend.reopen().await else {
        return skipped(backend.name(), "read_before_returns_the_events_before_a_seq_in_order", "reopen");
    };
    for (before, limit) in before_probes(40) {
        let cold = other.open(&key, Access::Read).await.unwrap();
        check_before(&cold, &log, before, limit, "cold reader").await;
        cold.close().await.unwrap();
    }
}

/// Reads from any seq, and `read_before` at any seq, on a longer log through read
/// handles of a fresh instance — one new handle per read (nothing learnt before) and
/// one handle for a whole sequence of reads — return exactly the slices a full read
/// returns.
pub async fn reads_at_any_position_match_the_full_log(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let log = marker_log(1_500);
    let key = write_log(&store, "any-position", &log).await;
    let Some(other) = backend.reopen().await else {
        return skipped(backend.name(), "reads_at_any_position_match_the_full_log", "reopen");
    };
    let shared = other.open(&key, Access::Read).await.unwrap();
    let positions = [1u64, 2, 31, 200, 499, 500, 777, 1_000, 1_300, 1_371, 1_372, 1_400, 1_480, 1_499, 1_500, 1_501];
    for position in positions {
        let start = usize::try_from(position).unwrap().min(log.len());
        let end = (start + 20).min(log.len());
        let cold = other.open(&key, Access::Read).await.unwrap();
        assert_eq!(cold.read(position, Some(20)).await.unwrap(), log[start..end], "cold read from {position}");
        cold.close().await.unwrap();
        assert_eq!(shared.read(position, Some(20)).await.unwrap(), log[start..end], "shared read from {position}");
        assert_eq!(shared.read(position, None).await.unwrap(), log[start..], "shared read to the end");
        let cold = other.open(&key, Access::Read).await.unwrap();
        check_before(&cold, &log, position, 25, "cold read_before").await;
        cold.close().await.unwrap();
        check_before(&shared, &log, position, 25, "shared read_before").await;
    }
    assert_eq!(shared.read(0, None).await.unwrap(), log, "and the whole log still reads");
}

/// Freshness and monotonic reads: a read handle's `read_before` sees events another
/// handle (of this instance or another) appended after its earlier reads.
pub async fn read_before_sees_appends_by_another_handle(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let log = marker_log(30);
    let header = header("before-fresh");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    writer.append(&log[..10]).await.unwrap();
    let here = store.open(&key, Access::Read).await.unwrap();
    let elsewhere = match backend.reopen().await {
        Some(other) => Some(other.open(&key, Access::Read).await.unwrap()),
        None => None,
    };
    let readers: Vec<&SessionHandle> = std::iter::once(&here).chain(elsewhere.as_ref()).collect();
    for reader in &readers {
        check_before(reader, &log[..10], u64::MAX, 4, "before the second append").await;
    }
    writer.append(&log[10..25]).await.unwrap();
    for reader in &readers {
        check_before(reader, &log[..25], u64::MAX, 4, "after the second append").await;
        check_before(reader, &log[..25], 12, 4, "a window across both appends").await;
    }
    writer.append(&log[25..]).await.unwrap();
    writer.close().await.unwrap();
    for reader in &readers {
        check_before(reader, &log, u64::MAX, 100, "after the writer closed").await;
        assert_eq!(reader.read(26, None).await.unwrap(), log[26..], "a read from a seq past what it saw");
    }
}

/// A torn final record (a crash mid-append) is never served by a tail read or a read
/// from a seq, on a handle of a fresh instance; the events before it are.
pub async fn read_before_skips_a_torn_tail(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let log = marker_log(300);
    let key = write_log(&store, "before-torn", &log).await;
    if backend.corrupt_tail(&key).await.is_none() {
        return skipped(backend.name(), "read_before_skips_a_torn_tail", "corrupt_tail");
    }
    let Some(other) = backend.reopen().await else {
        return skipped(backend.name(), "read_before_skips_a_torn_tail", "reopen");
    };
    let cold = other.open(&key, Access::Read).await.unwrap();
    check_before(&cold, &log, u64::MAX, 5, "the tail before a torn record").await;
    check_before(&cold, &log, 300, 5, "before the torn record's seq").await;
    check_before(&cold, &log, 301, 5, "before a seq past it").await;
    let cold = other.open(&key, Access::Read).await.unwrap();
    assert_eq!(cold.read(290, None).await.unwrap(), log[290..], "a cold read from a seq stops before it");
    assert_eq!(cold.read(300, None).await.unwrap(), [], "the torn record is never served");
}

/// Damage inside the range a partial read covers is `Corrupt`; damage outside it is
/// not looked at (documented: a full read, or `fsck`, is what verifies the whole log).
pub async fn partial_reads_report_damage_inside_their_range_only(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let log = marker_log(400);
    let key = write_log(&store, "before-damage", &log).await;
    if backend.damage_record(&key, 200).await.is_none() {
        return skipped(backend.name(), "partial_reads_report_damage_inside_their_range_only", "damage_record");
    }
    let Some(other) = backend.reopen().await else {
        return skipped(backend.name(), "partial_reads_report_damage_inside_their_range_only", "reopen");
    };
    let cold = || async { other.open(&key, Access::Read).await.unwrap() };
    assert_matches!(cold().await.read(0, None).await, Err(Error::Corrupt { .. }));
    assert_matches!(cold().await.read_before(205, 10).await, Err(Error::Corrupt { .. }));
    assert_matches!(cold().await.read_before(201, 1).await, Err(Error::Corrupt { .. }));
    assert_matches!(cold().await.read(195, Some(10)).await, Err(Error::Corrupt { .. }));
    assert_matches!(cold().await.read(200, Some(1)).await, Err(Error::Corrupt { .. }));
    // Outside the range, and away from the records a seek steps on: not noticed. (A
    // read just after the damage may step on it while it seeks, and then reports it.)
    check_before(&cold().await, &log, u64::MAX, 20, "the tail, far from the damage").await;
    check_before(&cold().await, &log, 200, 10, "just before the damage").await;
    assert_eq!(cold().await.read(300, Some(10)).await.unwrap(), log[300..310], "well after the damage");
}
