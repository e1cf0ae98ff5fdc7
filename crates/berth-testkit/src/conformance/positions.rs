//! Reads by position (R-S15): `read_before` (the N events before a seq, or the tail),
//! reads from an arbitrary seq and point reads (`read_seqs`), on write handles, warm read handles and read handles of
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
use berth_store::{Access, LogStore, SessionHandle, READ_SEQS_MAX};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

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

/// A set of seqs a caller may ask a point read for, drawn from a log of `len` events:
/// random seqs, runs, strides (with seq 0 or without), duplicates, any order, and now
/// and then seqs at or past the end.
fn random_seqs(rng: &mut StdRng, len: u64) -> Vec<u64> {
    let mut seqs: Vec<u64> = match rng.gen_range(0..4) {
        0 => (0..rng.gen_range(1..40)).map(|_| rng.gen_range(0..len)).collect(),
        1 => {
            let mut runs = Vec::new();
            for _ in 0..rng.gen_range(1..6) {
                let start = rng.gen_range(0..len);
                runs.extend(start..(start + rng.gen_range(1..30)).min(len));
            }
            runs
        }
        2 => {
            let stride = rng.gen_range(2..40);
            let start = rng.gen_range(0..stride);
            (start..len).step_by(stride as usize).take(READ_SEQS_MAX).collect()
        }
        _ => {
            let start = rng.gen_range(0..len / 2);
            let count = rng.gen_range(1..200);
            (start..len).filter(|_| rng.gen_bool(0.3)).take(count).collect()
        }
    };
    if rng.gen_bool(0.3) {
        let twice: Vec<u64> = seqs.iter().copied().filter(|_| rng.gen_bool(0.2)).collect();
        seqs.extend(twice);
    }
    if rng.gen_bool(0.2) {
        seqs.push([len, len + 1, len + rng.gen_range(2..1_000), u64::MAX][rng.gen_range(0..4)]);
    }
    if rng.gen_bool(0.5) {
        seqs.shuffle(rng);
    }
    seqs
}

/// What `read_seqs(seqs)` must answer on a log: the events at the distinct seqs,
/// ascending, or `NotFound` naming the first seq at or past the end.
fn expected_at(log: &[Event], seqs: &[u64]) -> Result<Vec<Event>, String> {
    let mut wanted = seqs.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    match wanted.iter().find(|seq| **seq >= log.len() as u64) {
        Some(past) => Err(past.to_string()),
        None => Ok(wanted.iter().map(|seq| log[*seq as usize].clone()).collect()),
    }
}

/// `read_seqs`, with `NotFound` as the seq it names (any other error fails the test).
async fn point_read(handle: &SessionHandle, asked: &[u64], what: &str) -> Result<Vec<Event>, String> {
    match handle.read_seqs(asked).await {
        Ok(events) => Ok(events),
        Err(Error::NotFound { what: "event", id }) => Err(id),
        Err(error) => panic!("{what}: {error}"),
    }
}

async fn check_at(handle: &SessionHandle, log: &[Event], asked: &[u64], what: &str) {
    let what = format!("{what}: {} seqs from {:?}", asked.len(), &asked[..asked.len().min(8)]);
    let outcome = point_read(handle, asked, &what).await;
    let expected = expected_at(log, asked);
    if let (Ok(events), Ok(expected)) = (&outcome, &expected) {
        assert_eq!(seqs(events), seqs(expected), "{what}");
    }
    assert_eq!(outcome, expected, "{what}");
}

/// Reads each asked seq on its own (`read(seq, 1)`), as a point read must answer.
async fn per_seq_reads(handle: &SessionHandle, asked: &[u64]) -> Result<Vec<Event>, String> {
    let mut wanted = asked.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    let mut events = Vec::new();
    for seq in wanted {
        match handle.read(seq, Some(1)).await.expect("one-event read").pop() {
            Some(event) => events.push(event),
            None => return Err(seq.to_string()),
        }
    }
    Ok(events)
}

/// A point read (`read_seqs`) answers exactly what a one-event `read` of each asked seq
/// answers — each once, ascending, whatever the order or repetition asked; `NotFound`
/// naming the first seq at or past the end — for random sets (runs, gaps, strides,
/// duplicates, past the end) on the write handle, a read handle that read the whole
/// log, read handles that read half of it, and read handles of a fresh instance (a new
/// one per read, and one for every read). Above `READ_SEQS_MAX` distinct seqs it is
/// `LimitExceeded`, nothing read.
pub async fn read_seqs_match_reads_of_each_seq(backend: &dyn ConformanceBackend) {
    let store = backend.store().await;
    let len = 1_500u64;
    let log = marker_log(len);
    let header = header("point-reads");
    let key = header.key();
    let writer = store.create(header).await.unwrap();
    for batch in log.chunks(500) {
        writer.append(batch).await.unwrap();
    }
    writer.flush().await.unwrap();
    let warm = store.open(&key, Access::Read).await.unwrap();
    assert_eq!(warm.read(0, None).await.unwrap(), log);
    let other = backend.reopen().await;
    let shared_cold = match &other {
        Some(other) => Some(other.open(&key, Access::Read).await.unwrap()),
        None => None,
    };
    let mut rng = StdRng::seed_from_u64(53);
    for case in 0..40 {
        let asked = random_seqs(&mut rng, len);
        let what = |handle: &str| format!("case {case}, {handle}");
        let single = store.open(&key, Access::Read).await.unwrap();
        let one_by_one = per_seq_reads(&single, &asked).await;
        let fresh = store.open(&key, Access::Read).await.unwrap();
        let what_fresh = what("a fresh reader against one-event reads");
        assert_eq!(point_read(&fresh, &asked, &what_fresh).await, one_by_one, "{what_fresh}");
        check_at(&writer, &log, &asked, &what("writer")).await;
        check_at(&warm, &log, &asked, &what("warm reader")).await;
        let half = store.open(&key, Access::Read).await.unwrap();
        assert_eq!(half.read(0, Some(len / 2)).await.unwrap(), log[..len as usize / 2]);
        check_at(&half, &log, &asked, &what("half-read reader")).await;
        if let (Some(other), Some(shared_cold)) = (&other, &shared_cold) {
            let cold = other.open(&key, Access::Read).await.unwrap();
            check_at(&cold, &log, &asked, &what("cold reader")).await;
            cold.close().await.unwrap();
            check_at(shared_cold, &log, &asked, &what("shared cold reader")).await;
        }
    }
    if other.is_none() {
        skipped(backend.name(), "read_seqs_match_reads_of_each_seq", "reopen");
    }
    // The limit counts distinct seqs, and refuses before reading.
    let page: Vec<u64> = (0..READ_SEQS_MAX as u64).chain(0..10).collect();
    check_at(&warm, &log, &page, "a full page with repeats").await;
    let over: Vec<u64> = (0..=READ_SEQS_MAX as u64).collect();
    assert_matches!(warm.read_seqs(&over).await, Err(Error::LimitExceeded { .. }));
    // An empty set reads nothing; a closed handle refuses.
    assert_eq!(warm.read_seqs(&[]).await.unwrap(), []);
    warm.close().await.unwrap();
    assert_matches!(warm.read_seqs(&[1]).await, Err(Error::HandleClosed { .. }));
    writer.close().await.unwrap();
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
    let cold = other.open(&key, Access::Read).await.unwrap();
    assert_eq!(
        cold.read_seqs(&[280, 299]).await.unwrap(),
        [log[280].clone(), log[299].clone()],
        "point reads before it"
    );
    // A point read of the torn record's seq: `NotFound`, as a seq past the end.
    assert_matches!(cold.read_seqs(&[290, 299, 300]).await, Err(Error::NotFound { id, .. }) if id == "300");
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
    assert_matches!(cold().await.read_seqs(&[10, 200, 300]).await, Err(Error::Corrupt { .. }));
    assert_matches!(cold().await.read_seqs(&[198, 199, 200]).await, Err(Error::Corrupt { .. }));
    // Outside the range, and away from the records a seek steps on: not noticed. (A
    // read just after the damage may step on it while it seeks, and then reports it.)
    check_before(&cold().await, &log, u64::MAX, 20, "the tail, far from the damage").await;
    check_before(&cold().await, &log, 200, 10, "just before the damage").await;
    assert_eq!(cold().await.read(300, Some(10)).await.unwrap(), log[300..310], "well after the damage");
    assert_eq!(cold().await.read_seqs(&[300, 305]).await.unwrap(), [log[300].clone(), log[305].clone()]);
}
