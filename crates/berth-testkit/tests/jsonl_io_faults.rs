//! I/O errors in the JSONL backend (reliability plan §6 B, tests 11, 12, 14, 15) and the
//! two durability settings, through `FaultFs`: a failed write or sync is never retried,
//! the file is rolled back, the handle is poisoned without touching the disk again, and
//! a reopen finds every acknowledged batch and nothing of the failed one.

mod jsonl_common;

use berth_core::{Error, Event};
use berth_jsonl::Durability;
use berth_store::{Access, LogStore, SessionHandle};
use berth_testkit::fault_fs::{Fault, FaultAction, FaultFs, FsOp};
use jsonl_common::*;

fn batch(start: u64, len: u64) -> Vec<Event> {
    (start..start + len)
        .map(|seq| message(seq, &format!("event {seq} {}", "x".repeat(seq as usize * 13 % 200))))
        .collect()
}

/// A materialized session with `acknowledged` events written in batches of 2.
async fn session_with(store: &LogStore, acknowledged: u64) -> SessionHandle {
    let handle = store.create(header("t", "s")).await.unwrap();
    handle.flush().await.unwrap();
    let mut seq = 0;
    while seq < acknowledged {
        let len = 2.min(acknowledged - seq);
        handle.append(&batch(seq, len)).await.unwrap();
        seq += len;
    }
    handle
}

fn log_len(backend: &berth_jsonl::JsonlBackend) -> u64 {
    std::fs::metadata(backend.log_path(&key("t", "s"))).unwrap().len()
}

/// After the fault: reopen on a clean file system and return what is stored.
async fn recovered(root: &std::path::Path) -> Vec<Event> {
    let backend = backend(root);
    let store = store(&backend);
    let handle = store.open(&key("t", "s"), Access::Write).await.unwrap();
    let events = handle.read(0, None).await.unwrap();
    assert_eq!(handle.next_seq(), events.len() as u64);
    handle.close().await.unwrap();
    events
}

/// Asserts the handle is poisoned and that being poisoned touches nothing on disk.
async fn assert_poisoned_without_disk_io(handle: &SessionHandle, fs: &FaultFs, next_seq: u64) {
    let before = fs.total();
    let syncs_before = fs.count(FsOp::SyncData) + fs.count(FsOp::SyncAll);
    let error = handle.append(&batch(next_seq, 1)).await.unwrap_err();
    assert!(matches!(error, Error::Poisoned { .. }), "{error}");
    let error = handle.flush().await.unwrap_err();
    assert!(matches!(error, Error::Poisoned { .. }), "{error}");
    assert_eq!(fs.total(), before, "a poisoned handle performs no file operation");
    assert_eq!(fs.count(FsOp::SyncData) + fs.count(FsOp::SyncAll), syncs_before, "sync is never called again");
    // Close still releases ownership (reporting the poison).
    assert!(matches!(handle.close().await, Err(Error::Poisoned { .. })));
}

#[tokio::test]
async fn test_11_fsync_eio_rolls_back_and_poisons() {
    let root = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let backend = backend_with(root.path(), &fs, Durability::PerAppend);
    let store = store(&backend);
    let handle = session_with(&store, 5).await;
    let acknowledged_len = log_len(&backend);
    fs.inject(Fault::eio(FsOp::SyncData).on_path("session.jsonl"));
    let error = handle.append(&batch(5, 3)).await.unwrap_err();
    assert!(matches!(error, Error::Io { kind: std::io::ErrorKind::Other, .. } | Error::Io { .. }), "{error}");
    assert_eq!(error.code(), "io");
    assert_eq!(fs.fired(), 1);
    assert_eq!(log_len(&backend), acknowledged_len, "truncated back to the last durable length");
    assert_poisoned_without_disk_io(&handle, &fs, 5).await;
    // Another instance acquires at once and finds exactly the acknowledged batches.
    assert!(recovered(root.path()).await == batch(0, 5));
}

#[tokio::test]
async fn test_11_fsync_eio_with_failed_rollback_leaves_the_batch_whole_or_absent() {
    let root = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let backend = backend_with(root.path(), &fs, Durability::PerAppend);
    let store = store(&backend);
    let handle = session_with(&store, 4).await;
    fs.inject(Fault::eio(FsOp::SyncData).on_path("session.jsonl"));
    fs.inject(Fault::eio(FsOp::SetLen).on_path("session.jsonl"));
    assert_eq!(handle.append(&batch(4, 3)).await.unwrap_err().code(), "io");
    assert_eq!(fs.fired(), 2);
    assert_poisoned_without_disk_io(&handle, &fs, 4).await;
    let events = recovered(root.path()).await;
    assert!(events == batch(0, 4) || events == batch(0, 7), "recovered {} events", events.len());
}

#[tokio::test]
async fn test_12_write_eio_rolls_back_and_poisons() {
    let root = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let backend = backend_with(root.path(), &fs, Durability::PerAppend);
    let store = store(&backend);
    let handle = session_with(&store, 3).await;
    let acknowledged_len = log_len(&backend);
    fs.inject(Fault::eio(FsOp::WriteAt).on_path("session.jsonl"));
    let syncs = fs.count(FsOp::SyncData);
    assert_eq!(handle.append(&batch(3, 2)).await.unwrap_err().code(), "io");
    assert_eq!(fs.count(FsOp::SyncData), syncs, "a failed write is not followed by a data sync");
    assert_eq!(log_len(&backend), acknowledged_len);
    assert_poisoned_without_disk_io(&handle, &fs, 3).await;
    assert!(recovered(root.path()).await == batch(0, 3));
}

#[tokio::test]
async fn test_12_short_write_then_eio_leaves_nothing_partial_visible() {
    let root = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let backend = backend_with(root.path(), &fs, Durability::PerAppend);
    let store = store(&backend);
    let handle = session_with(&store, 3).await;
    let reader = store.open(&key("t", "s"), Access::Read).await.unwrap();
    assert_eq!(reader.read(0, None).await.unwrap().len(), 3);
    let acknowledged_len = log_len(&backend);
    fs.inject(Fault::new(FsOp::WriteAt, FaultAction::ShortWrite).on_path("session.jsonl"));
    assert_eq!(handle.append(&batch(3, 4)).await.unwrap_err().code(), "io");
    assert_eq!(fs.fired(), 2, "half written, then the rest failed");
    assert_eq!(log_len(&backend), acknowledged_len, "the partial batch was truncated away");
    assert!(reader.read(0, None).await.unwrap() == batch(0, 3), "no partial record is visible");
    assert_poisoned_without_disk_io(&handle, &fs, 3).await;
    assert!(recovered(root.path()).await == batch(0, 3));
}

#[tokio::test]
async fn test_14_enospc_is_an_io_error_and_other_sessions_stay_readable() {
    let root = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let backend = backend_with(root.path(), &fs, Durability::PerAppend);
    let store = store(&backend);
    let other = store.create(header("t", "other")).await.unwrap();
    other.append(&batch(0, 2)).await.unwrap();
    other.close().await.unwrap();
    let handle = session_with(&store, 2).await;
    fs.inject(Fault::new(FsOp::WriteAt, FaultAction::Errno(libc::ENOSPC)).on_path("sessions/s/"));
    match handle.append(&batch(2, 2)).await.unwrap_err() {
        Error::Io { kind, .. } => assert_eq!(kind, std::io::ErrorKind::StorageFull),
        other => panic!("{other}"),
    }
    let reader = store.open(&key("t", "other"), Access::Read).await.unwrap();
    assert_eq!(reader.read(0, None).await.unwrap().len(), 2);
    assert_poisoned_without_disk_io(&handle, &fs, 2).await;
}

#[tokio::test]
async fn test_15_read_eio_during_recovery_fails_the_open_and_modifies_nothing() {
    let root = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let backend = backend_with(root.path(), &fs, Durability::PerAppend);
    let key = key("t", "s");
    {
        let handle = session_with(&store(&backend), 4).await;
        handle.close().await.unwrap();
    }
    let mut torn = std::fs::read(backend.log_path(&key)).unwrap();
    torn.extend_from_slice(b"{\"seq\":4,\"type\":\"user/mess");
    std::fs::write(backend.log_path(&key), &torn).unwrap();
    fs.inject(Fault::eio(FsOp::ReadAt).on_path("session.jsonl").nth(2));
    let store = store(&backend);
    let error = store.open(&key, Access::Write).await.unwrap_err();
    assert_eq!(error.code(), "io", "{error}");
    assert_eq!(std::fs::read(backend.log_path(&key)).unwrap(), torn, "nothing truncated or modified");
    // Without the fault the same open recovers (the failed open released the lease).
    let handle = store.open(&key, Access::Write).await.unwrap();
    assert_eq!(handle.recovery().unwrap().torn_bytes, 26);
    handle.append(&batch(4, 1)).await.unwrap();
    handle.close().await.unwrap();
    assert_eq!(recovered(root.path()).await.len(), 5);
}

#[tokio::test]
async fn failed_torn_tail_truncation_poisons_and_keeps_the_tail() {
    let root = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let backend = backend_with(root.path(), &fs, Durability::PerAppend);
    let key = key("t", "s");
    session_with(&store(&backend), 2).await.close().await.unwrap();
    let mut torn = std::fs::read(backend.log_path(&key)).unwrap();
    torn.extend_from_slice(&[0; 300]);
    std::fs::write(backend.log_path(&key), &torn).unwrap();
    let store = store(&backend);
    let handle = store.open(&key, Access::Write).await.unwrap();
    fs.inject(Fault::eio(FsOp::SyncAll).on_path("broken"));
    assert_eq!(handle.append(&batch(2, 1)).await.unwrap_err().code(), "io");
    assert_eq!(std::fs::read(backend.log_path(&key)).unwrap(), torn, "not truncated without a durable copy");
    assert_poisoned_without_disk_io(&handle, &fs, 2).await;
    assert!(recovered(root.path()).await == batch(0, 2));
}

#[tokio::test]
async fn failed_materialization_leaves_no_session_and_can_be_retried() {
    let root = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let backend = backend_with(root.path(), &fs, Durability::PerAppend);
    let store = store(&backend);
    let key = key("t", "s");
    let handle = store.create(header("t", "s")).await.unwrap();
    fs.inject(Fault::eio(FsOp::SyncAll).on_path("session.jsonl.tmp-"));
    assert_eq!(handle.append(&batch(0, 2)).await.unwrap_err().code(), "io");
    assert!(backend.stat_blocking(&key).unwrap().is_none(), "never published");
    // A fresh instance does not see it; this instance still has it pending and retries.
    assert!(store_of(root.path()).stat(&key).await.unwrap().is_none());
    handle.append(&batch(0, 2)).await.unwrap();
    handle.close().await.unwrap();
    let leftovers: Vec<String> = std::fs::read_dir(backend.session_dir(&key))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert_eq!(recovered(root.path()).await.len(), 2);
}

fn store_of(root: &std::path::Path) -> LogStore {
    store(&backend(root))
}

#[tokio::test]
async fn per_append_durability_syncs_every_append() {
    let root = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let backend = backend_with(root.path(), &fs, Durability::PerAppend);
    let handle = session_with(&store(&backend), 0).await;
    fs.reset_counts();
    for seq in 0..5 {
        handle.append(&batch(seq, 1)).await.unwrap();
    }
    assert_eq!(fs.count_on(FsOp::SyncData, "session.jsonl"), 5);
    handle.close().await.unwrap();
    assert_eq!(fs.count_on(FsOp::SyncData, "session.jsonl"), 5, "close has nothing left to sync");
}

#[tokio::test]
async fn barrier_durability_syncs_only_at_flush_and_close() {
    let root = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let backend = backend_with(root.path(), &fs, Durability::Barrier);
    let handle = session_with(&store(&backend), 0).await;
    fs.reset_counts();
    for seq in 0..5 {
        handle.append(&batch(seq, 1)).await.unwrap();
    }
    let syncs =
        |fs: &FaultFs| fs.count_on(FsOp::SyncData, "session.jsonl") + fs.count_on(FsOp::SyncAll, "session.jsonl");
    assert_eq!(syncs(&fs), 0, "appends are written, not synced");
    assert_eq!(fs.count_on(FsOp::WriteAt, "session.jsonl"), 5);
    handle.flush().await.unwrap();
    assert_eq!(syncs(&fs), 1, "one barrier");
    handle.flush().await.unwrap();
    assert_eq!(syncs(&fs), 1, "nothing new to sync");
    handle.append(&batch(5, 2)).await.unwrap();
    handle.close().await.unwrap();
    assert_eq!(syncs(&fs), 2, "close is a barrier");
    assert_eq!(recovered(root.path()).await.len(), 7);
}

#[tokio::test]
async fn barrier_sync_failure_rolls_back_to_the_last_barrier() {
    let root = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let backend = backend_with(root.path(), &fs, Durability::Barrier);
    let handle = session_with(&store(&backend), 2).await;
    handle.flush().await.unwrap();
    let durable_len = log_len(&backend);
    handle.append(&batch(2, 2)).await.unwrap();
    handle.append(&batch(4, 1)).await.unwrap();
    fs.inject(Fault::eio(FsOp::SyncData).on_path("session.jsonl"));
    assert_eq!(handle.flush().await.unwrap_err().code(), "io");
    assert_eq!(log_len(&backend), durable_len, "everything since the last barrier is discarded");
    assert_poisoned_without_disk_io(&handle, &fs, 5).await;
    assert!(recovered(root.path()).await == batch(0, 2));
}

/// A read error in the middle of a partial read (R-S15: the backward scan of a cold
/// tail read, a bisection probe of a cold read from a seq) is an `io` error, serves
/// nothing and modifies nothing; the same reads succeed once the fault is gone, on the
/// same handle.
#[tokio::test]
async fn read_eio_during_a_partial_read_is_an_io_error_and_the_handle_recovers() {
    let root = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let backend = backend_with(root.path(), &fs, Durability::PerAppend);
    let key = key("t", "s");
    let handle = session_with(&store(&backend), 600).await;
    handle.close().await.unwrap();
    let bytes = std::fs::read(backend.log_path(&key)).unwrap();
    let store = store(&backend);
    // A cold tail read reads at least three times (the backward scan, the walk back,
    // the range), a cold read from seq 123 more (the bisection's probes too).
    for nth in 1..=3 {
        for tail in [true, false] {
            let reader = store.open(&key, Access::Read).await.unwrap();
            fs.inject(Fault::eio(FsOp::ReadAt).on_path("session.jsonl").nth(nth));
            let outcome = match tail {
                true => reader.read_before(u64::MAX, 5).await,
                false => reader.read(123, Some(5)).await,
            };
            fs.clear_faults();
            let error = outcome.unwrap_err();
            assert_eq!(error.code(), "io", "{error}");
            assert_eq!(reader.read_before(u64::MAX, 5).await.unwrap(), batch(595, 5));
            assert_eq!(reader.read(123, Some(5)).await.unwrap(), batch(123, 5));
        }
    }
    assert_eq!(std::fs::read(backend.log_path(&key)).unwrap(), bytes, "nothing modified");
}
