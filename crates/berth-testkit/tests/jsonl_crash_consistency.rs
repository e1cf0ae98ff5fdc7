//! Crash consistency of the JSONL backend (reliability plan §6 A, tests 1–5): what a
//! crash, a zero-filled or garbage tail, a flipped bit, or a seq gap does to a log, as
//! seen by read handles, write opens and the pure scanner.

mod jsonl_common;

use berth_core::{Epoch, Error, Event};
use berth_jsonl::format::{self, ScanStatus};
use berth_jsonl::{Durability, JsonlBackend};
use berth_store::{LogReader, LogWriter};
use berth_testkit::fault_fs::FaultFs;
use jsonl_common::*;
use rand::{Rng, SeedableRng};

fn kept_copy_path(
    backend: &JsonlBackend,
    key: &berth_core::SessionKey,
    epoch: Epoch,
    committed: usize,
) -> std::path::PathBuf {
    backend.session_dir(key).join(format!("{}{epoch}-{committed}", format::BROKEN_PREFIX))
}

/// Checks one crashed prefix of `bytes` planted under `backend`: readers see exactly the
/// records whose `\n` is inside it; a write open truncates the rest on its first append
/// (keeping a copy) and continues at the right seq; a second open is a no-op.
async fn check_prefix(backend: &JsonlBackend, bytes: &[u8], ends: &[usize], events: &[Event], prefix_len: usize) {
    let key = key("t", "s");
    plant_log(backend, &key, &bytes[..prefix_len]);
    let complete = ends.iter().filter(|end| **end <= prefix_len).count();
    if complete == 0 {
        // No complete header: publication is atomic, so this is damage, not a crash.
        let read_error = backend.open_jsonl_reader(&key).await.err().expect("reader refused");
        assert!(is_corrupt_at(&read_error, None), "{prefix_len}: {read_error}");
        let write_error = backend.open_jsonl_writer(&key).await.err().expect("writer refused");
        assert!(is_corrupt_at(&write_error, None), "{prefix_len}: {write_error}");
        return;
    }
    let expected = complete - 1;
    let committed = ends[complete - 1];
    let mut reader = backend.open_jsonl_reader(&key).await.unwrap();
    let read = reader.read(0, u64::MAX).await.unwrap();
    assert!(read == events[..expected], "prefix {prefix_len}: read {} events, expected {expected}", read.len());
    assert_eq!(std::fs::read(backend.log_path(&key)).unwrap(), &bytes[..prefix_len], "readers never modify");

    let mut writer = backend.open_jsonl_writer(&key).await.unwrap();
    assert_eq!(writer.next_seq(), expected as u64, "prefix {prefix_len}");
    let torn = prefix_len - committed;
    assert_eq!(writer.recovery().map(|recovery| recovery.torn_bytes), (torn > 0).then_some(torn as u64));
    let epoch = writer.epoch();
    let next = message(expected as u64, "after the crash");
    writer.append(std::slice::from_ref(&next)).await.unwrap();
    writer.release().await.unwrap();
    let mut repaired = bytes[..committed].to_vec();
    repaired.extend(format::encode_event_line(&next, epoch));
    let on_disk = std::fs::read(backend.log_path(&key)).unwrap();
    assert!(on_disk == repaired, "prefix {prefix_len}: log after repair and append");
    let copy = kept_copy_path(backend, &key, epoch, committed);
    if torn > 0 {
        assert_eq!(std::fs::read(&copy).unwrap(), &bytes[committed..prefix_len], "kept copy of the torn tail");
    } else {
        assert!(!copy.exists());
    }

    let mut again = backend.open_jsonl_writer(&key).await.unwrap();
    assert_eq!(again.recovery(), None, "a second open finds nothing to repair");
    assert_eq!(again.next_seq(), expected as u64 + 1);
    assert_eq!(again.epoch(), Epoch(epoch.0 + 1));
    again.release().await.unwrap();
    assert!(std::fs::read(backend.log_path(&key)).unwrap() == repaired, "opening again changes nothing");
}

#[test]
fn test_01_truncation_at_every_byte_offset() {
    let runtime = runtime();
    let source = tempfile::tempdir().unwrap();
    let key = key("t", "s");
    // Debug-build-friendly sizes (up to 300 bytes) so that every offset is checked; the
    // 64 KiB records are swept at their boundaries in the next test.
    let events: Vec<Event> = (0..30).map(|seq| varied_event(seq, 200)).collect();
    let (bytes, ends) = runtime.block_on(write_session(source.path(), &key, &events, 3));
    let work = sweep_dir();
    // Two sweepers (one per core), each over every other offset.
    std::thread::scope(|scope| {
        for lane in 0..2usize {
            let (runtime, bytes, ends, events, work) = (&runtime, &bytes, &ends, &events, work.path());
            scope.spawn(move || {
                let fs = FaultFs::new();
                fs.skip_syncs(true); // recovery logic, not durability, is under test here
                for prefix_len in (lane..=bytes.len()).step_by(2) {
                    let root = work.join(prefix_len.to_string());
                    let backend = backend_with(&root, &fs, Durability::PerAppend);
                    runtime.block_on(check_prefix(&backend, bytes, ends, events, prefix_len));
                    std::fs::remove_dir_all(&root).unwrap();
                    fs.reset_counts();
                }
            });
        }
    });
}

#[test]
fn test_01_truncation_of_large_records_at_their_boundaries() {
    let runtime = runtime();
    let source = tempfile::tempdir().unwrap();
    let key = key("t", "s");
    let events: Vec<Event> = (0..30).map(|seq| varied_event(seq, 64 * 1024)).collect();
    let (bytes, ends) = runtime.block_on(write_session(source.path(), &key, &events, 4));
    assert!(bytes.len() > 200_000);
    let mut offsets: Vec<usize> = vec![0, 1, bytes.len()];
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    for window in ends.windows(2) {
        let (start, end) = (window[0], window[1]);
        offsets.extend([start + 1, end - 2, end - 1, end, end + 1].into_iter().filter(|offset| *offset <= bytes.len()));
        offsets.extend((0..3).map(|_| rng.gen_range(start..end)));
    }
    offsets.sort_unstable();
    offsets.dedup();
    let fs = FaultFs::new();
    fs.skip_syncs(true);
    let work = sweep_dir();
    for prefix_len in offsets {
        let root = work.path().join(prefix_len.to_string());
        let backend = backend_with(&root, &fs, Durability::PerAppend);
        runtime.block_on(check_prefix(&backend, &bytes, &ends, &events, prefix_len));
        std::fs::remove_dir_all(&root).unwrap();
        fs.reset_counts();
    }
}

/// The small log most tail tests start from.
fn small_log(runtime: &tokio::runtime::Runtime, events: u64) -> (Vec<u8>, Vec<usize>, Vec<Event>) {
    let source = tempfile::tempdir().unwrap();
    let events: Vec<Event> = (0..events).map(|seq| varied_event(seq, 300)).collect();
    let (bytes, ends) = runtime.block_on(write_session(source.path(), &key("t", "s"), &events, 2));
    (bytes, ends, events)
}

/// Plants `damaged` and checks that it behaves as a torn tail after `events` records.
async fn check_torn(damaged: &[u8], committed: usize, events: &[Event]) {
    let root = tempfile::tempdir().unwrap();
    let backend = backend(root.path());
    let key = key("t", "s");
    plant_log(&backend, &key, damaged);
    let mut reader = backend.open_jsonl_reader(&key).await.unwrap();
    assert!(reader.read(0, u64::MAX).await.unwrap() == events, "reader sees the valid prefix only");
    let mut writer = backend.open_jsonl_writer(&key).await.unwrap();
    assert_eq!(writer.next_seq(), events.len() as u64);
    assert_eq!(writer.recovery().unwrap().torn_bytes, (damaged.len() - committed) as u64);
    writer.append(&[message(events.len() as u64, "next")]).await.unwrap();
    let epoch = writer.epoch();
    writer.release().await.unwrap();
    assert_eq!(std::fs::read(kept_copy_path(&backend, &key, epoch, committed)).unwrap(), &damaged[committed..]);
    let mut reader = backend.open_jsonl_reader(&key).await.unwrap();
    assert_eq!(reader.read(0, u64::MAX).await.unwrap().len(), events.len() + 1);
}

#[test]
fn test_02_zero_filled_tails_are_torn_tails() {
    let runtime = runtime();
    let (bytes, ends, events) = small_log(&runtime, 10);
    for zeros in 1..=8192usize {
        let mut damaged = bytes.clone();
        damaged.resize(bytes.len() + zeros, 0);
        let outcome = format::scan(&damaged);
        assert_eq!(outcome.status, ScanStatus::TornTail { torn_bytes: zeros as u64 }, "{zeros} zeros");
        assert_eq!((outcome.events, outcome.committed_len), (10, bytes.len() as u64));
        if [1, 2, 511, 512, 513, 4096, 8192].contains(&zeros) {
            runtime.block_on(check_torn(&damaged, bytes.len(), &events));
        }
    }
    // The last record's bytes zeroed in place, length kept (ext4 delayed allocation).
    let mut zeroed = bytes.clone();
    zeroed[ends[9]..].fill(0);
    assert!(matches!(format::scan(&zeroed).status, ScanStatus::TornTail { .. }));
    runtime.block_on(check_torn(&zeroed, ends[9], &events[..9]));
    // Zeros over the last two records: still only a tail.
    let mut zeroed = bytes.clone();
    zeroed[ends[8]..].fill(0);
    runtime.block_on(check_torn(&zeroed, ends[8], &events[..8]));
}

fn garbage_tail(rng: &mut rand::rngs::StdRng, kind: u32) -> Vec<u8> {
    let len = rng.gen_range(1..2_000);
    match kind {
        0 => (0..len).map(|_| rng.gen()).collect(),
        1 => (0..len).map(|_| if rng.gen_ratio(1, 20) { b'\n' } else { rng.gen() }).collect(),
        2 => {
            // JSON-looking records with wrong checksums, some complete, some not.
            let mut tail = Vec::new();
            for seq in 10..10 + rng.gen_range(1..4) {
                let crc: u32 = rng.gen();
                tail.extend(
                    format!(
                        "{{\"seq\":{seq},\"type\":\"user/message\",\"time\":1,\"data\":{{\"content\":\"{}\"}},\"epoch\":1,\"crc\":\"{crc:08x}\"}}\n",
                        "x".repeat(rng.gen_range(0..50))
                    )
                    .into_bytes(),
                );
            }
            let cut = rng.gen_range(1..=tail.len());
            tail.truncate(cut);
            tail
        }
        _ => {
            // Printable noise full of braces, quotes and newlines.
            let alphabet = b"{}[]\":,\n0123456789seqcrc ";
            (0..len).map(|_| alphabet[rng.gen_range(0..alphabet.len())]).collect()
        }
    }
}

#[test]
fn test_03_garbage_tails_are_torn_tails() {
    let runtime = runtime();
    let (bytes, _ends, events) = small_log(&runtime, 10);
    for seed in 0..400u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let tail = garbage_tail(&mut rng, (seed % 4) as u32);
        let mut damaged = bytes.clone();
        damaged.extend_from_slice(&tail);
        let outcome = format::scan(&damaged);
        assert_eq!(outcome.status, ScanStatus::TornTail { torn_bytes: tail.len() as u64 }, "seed {seed}");
        assert_eq!(outcome.events, 10);
        if seed % 25 == 0 {
            runtime.block_on(check_torn(&damaged, bytes.len(), &events));
        }
    }
}

/// Byte offsets inside record `k` (its line, `\n` included) whose flip keeps the JSON
/// valid: a digit of `time`, and a letter inside a string.
fn json_preserving_offsets(bytes: &[u8], ends: &[usize], k: usize) -> Vec<usize> {
    let line = &bytes[ends[k]..ends[k + 1]];
    let text = String::from_utf8_lossy(line);
    let time_digit = text.find("\"time\":").map(|at| ends[k] + at + 7).unwrap();
    let type_letter = text.find("\"type\":\"").map(|at| ends[k] + at + 8).unwrap();
    vec![time_digit, type_letter]
}

#[test]
fn test_04_bit_flips_mid_log_are_corruption_never_truncated() {
    let runtime = runtime();
    let (bytes, ends, events) = small_log(&runtime, 12);
    let n = events.len();
    // Pure scanner: every byte of every record but the last, one bit each (cycling
    // through the bit positions), plus all eight bits of every seventh byte.
    for k in 0..n - 1 {
        for at in ends[k]..ends[k + 1] {
            let bits: Vec<u32> = if at % 7 == 0 { (0..8).collect() } else { vec![(at % 8) as u32] };
            for bit in bits {
                let mut flipped = bytes.clone();
                flipped[at] ^= 1 << bit;
                let outcome = format::scan(&flipped);
                match &outcome.status {
                    ScanStatus::Corrupt { seq, offset, .. } => {
                        assert_eq!((*seq, *offset), (Some(k as u64), ends[k] as u64), "record {k} byte {at} bit {bit}");
                    }
                    other => panic!("record {k} byte {at} bit {bit}: {other:?}"),
                }
                assert_eq!(outcome.events, k as u64);
            }
        }
    }
    // Through the backend: read-only, readable up to the damage, nothing truncated.
    for k in 0..n - 1 {
        let mut offsets = json_preserving_offsets(&bytes, &ends, k);
        offsets.push(ends[k + 1] - 1); // the record's `\n`
        offsets.push((ends[k] + ends[k + 1]) / 2);
        for at in offsets {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x01;
            runtime.block_on(check_corrupt(&flipped, k as u64, &events));
        }
    }
    // The last record has nothing valid after it: a flip there is indistinguishable from
    // a torn write, and is treated as one (documented in docs/reference/storage-format.md).
    let mut flipped = bytes.clone();
    flipped[(ends[n - 1] + ends[n]) / 2] ^= 0x04;
    assert!(matches!(format::scan(&flipped).status, ScanStatus::TornTail { .. }));
}

/// Plants `damaged` (corrupt at `seq`) and checks the read-only behaviour.
async fn check_corrupt(damaged: &[u8], seq: u64, events: &[Event]) {
    let root = tempfile::tempdir().unwrap();
    let backend = backend(root.path());
    let key = key("t", "s");
    plant_log(&backend, &key, damaged);
    let mut reader = backend.open_jsonl_reader(&key).await.unwrap();
    assert!(reader.read(0, seq).await.unwrap() == events[..seq as usize], "the valid prefix reads");
    let error = reader.read(0, u64::MAX).await.unwrap_err();
    assert!(is_corrupt_at(&error, Some(seq)), "{error}");
    let error = reader.read(seq, 1).await.unwrap_err();
    assert!(is_corrupt_at(&error, Some(seq)), "{error}");
    let error = backend.open_jsonl_writer(&key).await.err().expect("write open refused");
    assert!(is_corrupt_at(&error, Some(seq)), "{error}");
    assert!(matches!(error, Error::Corrupt { ref location, .. } if location.artifact.ends_with("session.jsonl")));
    // Still refused the second time, and the file is byte for byte what it was.
    assert!(backend.open_jsonl_writer(&key).await.is_err());
    assert_eq!(std::fs::read(backend.log_path(&key)).unwrap(), damaged, "never truncated");
    assert!(backend.stat_blocking(&key).unwrap().is_some(), "stat reads the header only");
    // The store refuses write opens too, and leaves the id unowned.
    let store = store(&backend);
    let error = store.open(&key, berth_store::Access::Write).await.unwrap_err();
    assert_eq!(error.code(), "corrupt");
    let reader = store.open(&key, berth_store::Access::Read).await.unwrap();
    assert_eq!(reader.read(0, Some(seq)).await.unwrap().len() as u64, seq);
}

#[test]
fn test_05_seq_gap_and_duplicate_are_corruption() {
    let runtime = runtime();
    let (bytes, ends, events) = small_log(&runtime, 8);
    let line = |k: usize| &bytes[ends[k]..ends[k + 1]];
    // Record 3 deleted: seq 4 follows seq 2.
    let mut gap = bytes[..ends[3]].to_vec();
    gap.extend_from_slice(&bytes[ends[4]..]);
    runtime.block_on(check_corrupt(&gap, 3, &events));
    // Record 3 duplicated.
    let mut duplicate = bytes[..ends[4]].to_vec();
    duplicate.extend_from_slice(line(3));
    duplicate.extend_from_slice(&bytes[ends[4]..]);
    runtime.block_on(check_corrupt(&duplicate, 4, &events));
    // The last record duplicated at the very end: valid checksums, so still corruption.
    let mut last_duplicate = bytes.clone();
    last_duplicate.extend_from_slice(line(7));
    runtime.block_on(check_corrupt(&last_duplicate, 8, &events));
}

#[test]
fn newer_format_is_refused_as_unsupported_never_misread() {
    let runtime = runtime();
    let (bytes, ends, _) = small_log(&runtime, 2);
    let root = tempfile::tempdir().unwrap();
    let backend = backend(root.path());
    let key = key("t", "s");
    // The next log format version (the header line's `version`; 2 is a preallocated log).
    let version = format::LOG_FORMAT_VERSION + 1;
    let mut newer = format!(
        r#"{{"berth":"session","version":{version},"id":"s","scope":{{"tenant":"t","user":"u"}},"epoch":1,"crc2":"x"}}"#
    )
    .into_bytes();
    newer.push(b'\n');
    newer.extend_from_slice(&bytes[ends[0]..]);
    plant_log(&backend, &key, &newer);
    runtime.block_on(async {
        for error in [
            backend.open_jsonl_reader(&key).await.err().unwrap(),
            backend.open_jsonl_writer(&key).await.err().unwrap(),
            backend.stat_blocking(&key).unwrap_err(),
        ] {
            assert_eq!(error.code(), "format_unsupported", "{error}");
            assert!(error.to_string().contains("newer berth"), "{error}");
        }
    });
    assert_eq!(std::fs::read(backend.log_path(&key)).unwrap(), newer);
}

#[test]
fn unknown_reserved_event_type_refuses_the_write_open() {
    let runtime = runtime();
    let root = tempfile::tempdir().unwrap();
    let backend = backend(root.path());
    let key = key("t", "s");
    let mut log = format::encode_header_line(&header("t", "s"), Epoch(1));
    log.extend(format::encode_event_line(&message(0, "hi"), Epoch(1)));
    let future = berth_core::Event::new(1, "turn/fork", berth_core::Timestamp(1), serde_json::json!({})).unwrap();
    log.extend(format::encode_event_line(&future, Epoch(1)));
    plant_log(&backend, &key, &log);
    runtime.block_on(async {
        let error = backend.open_jsonl_writer(&key).await.err().unwrap();
        assert_eq!(error.code(), "format_unsupported", "{error}");
        let mut reader = backend.open_jsonl_reader(&key).await.unwrap();
        assert_eq!(reader.read(0, 1).await.unwrap().len(), 1);
        assert_eq!(reader.read(0, 2).await.unwrap_err().code(), "format_unsupported");
    });
}
