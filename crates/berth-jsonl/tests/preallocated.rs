//! Preallocated logs (log format version 2) on the real file system: the zero tail an
//! open log carries is bounded, read past by every reader, never reported by `fsck`,
//! given back at close; a tail a crash left is reused, not copied aside; a torn append
//! into preallocated space is truncated with a copy of its written bytes only; an idle
//! open log gives its tail back (but never a pending torn tail) and extends again.

use berth_core::{Event, Scope, SessionHeader, SessionId, SessionKey, TenantId, Timestamp, UserId};
use berth_jsonl::format::zero_tail::{EXTENT_BYTES_MIN, TAIL_BYTES_MAX};
use berth_jsonl::fsck::{self, SessionStatus};
use berth_jsonl::{format, JsonlBackend, JsonlOptions, IDLE_GIVE_BACK};
use berth_store::{Access, LogBackend, LogStore};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

fn key() -> SessionKey {
    SessionKey::new(TenantId::parse("t").unwrap(), SessionId::parse("s").unwrap())
}

fn header() -> SessionHeader {
    let scope = Scope { tenant: TenantId::parse("t").unwrap(), user: UserId::parse("u").unwrap(), project: None };
    SessionHeader::new(SessionId::parse("s").unwrap(), scope, Timestamp(1_000))
}

fn event(seq: u64) -> Event {
    let text = format!("e{seq}-{}", "x".repeat(900 + (seq % 200) as usize));
    Event::new(seq, "user/message", Timestamp(1_000 + seq), serde_json::json!({ "content": text })).unwrap()
}

fn backend(root: &Path, preallocate: bool) -> JsonlBackend {
    let options = JsonlOptions { preallocate, preallocate_after_appends: 0, ..JsonlOptions::default() };
    JsonlBackend::open(root, options).unwrap()
}

/// (data end, file length) of the log, from its bytes.
fn data_and_len(path: &Path) -> (u64, u64) {
    let bytes = std::fs::read(path).unwrap();
    let data = bytes.iter().rposition(|byte| *byte != 0).map_or(0, |last| last + 1);
    (data as u64, bytes.len() as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_log_carries_a_bounded_tail_that_readers_fsck_and_stat_see_past_and_close_gives_back() {
    let dir = tempfile::tempdir().unwrap();
    let writing = backend(dir.path(), true);
    let path = writing.log_path(&key());
    let store = LogStore::new(Arc::new(writing.clone()));
    let handle = store.create(header()).await.unwrap();
    handle.flush().await.unwrap();
    // Another process's view: its own backend, its own open files.
    let other = backend(dir.path(), false);
    let other_store = LogStore::new(Arc::new(other.clone()));
    let mut largest_tail = 0;
    let mut tokens = Vec::new();
    for seq in 0..3_000u64 {
        handle.append(&[event(seq)]).await.unwrap();
        if seq % 50 != 17 {
            continue;
        }
        let (data, len) = data_and_len(&path);
        assert!(len - data <= TAIL_BYTES_MAX, "after seq {seq}: a tail of {} bytes", len - data);
        largest_tail = largest_tail.max(len - data);
        if seq % 500 == 17 {
            let stat = other.stat(&key()).await.unwrap().unwrap();
            assert_eq!(stat.size_bytes, Some(data), "stat reports the data, not the tail");
            tokens.push(stat.change_token);
            let reader = other_store.open(&key(), Access::Read).await.unwrap();
            let all = reader.read(0, None).await.unwrap();
            assert_eq!(all, (0..=seq).map(event).collect::<Vec<_>>(), "a reader reads every event, none of the tail");
            let last = reader.read_before(u64::MAX, 5).await.unwrap();
            assert_eq!(last, (seq.saturating_sub(4)..=seq).map(event).collect::<Vec<_>>());
            reader.close().await.unwrap();
            let reports = fsck::check_root(dir.path()).unwrap();
            assert_eq!(reports[0].status, SessionStatus::Ok { events: seq + 1 }, "a tail is not damage");
            let scanned = fsck::scan_log(&berth_jsonl::fs::OsFs, &path).unwrap();
            assert_eq!((scanned.committed_len, scanned.zero_tail), (data, len - data));
        }
    }
    assert!(largest_tail > 2 * EXTENT_BYTES_MIN, "a fast writer's extents grew: largest tail {largest_tail}");
    tokens.dedup();
    assert_eq!(tokens.len(), 6, "every append into the tail changes the change token");
    // A reader that follows the log sees each append.
    let reader = other_store.open(&key(), Access::Read).await.unwrap();
    assert_eq!(reader.read(0, None).await.unwrap().len(), 3_000);
    handle.append(&[event(3_000)]).await.unwrap();
    assert_eq!(reader.read(3_000, None).await.unwrap(), vec![event(3_000)]);
    reader.close().await.unwrap();
    handle.close().await.unwrap();
    let (data, len) = data_and_len(&path);
    assert_eq!(data, len, "a closed log carries no tail");
    assert_eq!(format::scan(&std::fs::read(&path).unwrap()).events, 3_001);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_lived_handle_does_not_preallocate_and_a_classic_log_never_does() {
    let dir = tempfile::tempdir().unwrap();
    let options = JsonlOptions { preallocate: true, ..JsonlOptions::default() };
    let store = LogStore::new(Arc::new(JsonlBackend::open(dir.path(), options.clone()).unwrap()));
    let handle = store.create(header()).await.unwrap();
    handle.append(&[event(0)]).await.unwrap();
    handle.append(&[event(1)]).await.unwrap();
    let path = JsonlBackend::open(dir.path(), options).unwrap().log_path(&key());
    let (data, len) = data_and_len(&path);
    assert_eq!(data, len, "two appends: no extent yet");
    handle.close().await.unwrap();
    // A classic log opened by a preallocating backend stays classic.
    let dir = tempfile::tempdir().unwrap();
    let classic = LogStore::new(Arc::new(backend(dir.path(), false)));
    let handle = classic.create(header()).await.unwrap();
    handle.flush().await.unwrap();
    handle.close().await.unwrap();
    let store = LogStore::new(Arc::new(backend(dir.path(), true)));
    let handle = store.open(&key(), Access::Write).await.unwrap();
    for seq in 0..50 {
        handle.append(&[event(seq)]).await.unwrap();
    }
    let path = backend(dir.path(), true).log_path(&key());
    let (data, len) = data_and_len(&path);
    assert_eq!(data, len, "a version-1 log never gets a zero tail");
    assert!(std::fs::read(&path).unwrap().starts_with(b"{\"berth\":\"session\",\"version\":1,"));
    handle.close().await.unwrap();
}

/// Writes `tail` at the data end of the closed log at `path`, then `zeros` zero bytes:
/// what a crash during an append into preallocated space leaves.
fn crash_tail(path: &Path, tail: &[u8], zeros: usize) -> u64 {
    let (data, _) = data_and_len(path);
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let mut bytes = tail.to_vec();
    bytes.resize(tail.len() + zeros, 0);
    file.write_all_at(&bytes, data).unwrap();
    data
}

async fn preallocated_session(root: &Path, events: u64) -> JsonlBackend {
    let backend = backend(root, true);
    let store = LogStore::new(Arc::new(backend.clone()));
    let handle = store.create(header()).await.unwrap();
    handle.flush().await.unwrap();
    for seq in 0..events {
        handle.append(&[event(seq)]).await.unwrap();
    }
    handle.close().await.unwrap();
    backend
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_tail_a_crash_left_is_reused_and_never_copied_aside() {
    let dir = tempfile::tempdir().unwrap();
    let backend = preallocated_session(dir.path(), 10).await;
    let path = backend.log_path(&key());
    let data = crash_tail(&path, b"", 300_000);
    assert_eq!(fsck::check_root(dir.path()).unwrap()[0].status, SessionStatus::Ok { events: 10 });
    let store = LogStore::new(Arc::new(backend.clone()));
    let handle = store.open(&key(), Access::Write).await.unwrap();
    assert!(handle.recovery().is_none(), "a zero tail is not a torn tail");
    handle.append(&[event(10)]).await.unwrap();
    assert_eq!(data_and_len(&path).1, data + 300_000, "the append went into the tail");
    handle.close().await.unwrap();
    let names: Vec<_> =
        std::fs::read_dir(backend.session_dir(&key())).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(
        !names.iter().any(|name| name.to_string_lossy().starts_with(format::BROKEN_PREFIX)),
        "no torn-tail copy: {names:?}"
    );
    let (data, len) = data_and_len(&path);
    assert_eq!(data, len);
    let reader = store.open(&key(), Access::Read).await.unwrap();
    assert_eq!(reader.read(0, None).await.unwrap(), (0..11).map(event).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_append_into_preallocated_space_is_truncated_keeping_only_its_written_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let backend = preallocated_session(dir.path(), 10).await;
    let path = backend.log_path(&key());
    let line = format::encode_event_line(&event(10), berth_core::Epoch(2));
    let torn = &line[..line.len() / 2];
    let data = crash_tail(&path, torn, 100_000);
    match &fsck::check_root(dir.path()).unwrap()[0].status {
        SessionStatus::TornTail { events: 10, committed_len, .. } => assert_eq!(*committed_len, data),
        other => panic!("{other:?}"),
    }
    // A reader never serves it.
    let store = LogStore::new(Arc::new(backend.clone()));
    let reader = store.open(&key(), Access::Read).await.unwrap();
    assert_eq!(reader.read(0, None).await.unwrap().len(), 10);
    assert_eq!(reader.read_before(u64::MAX, 1).await.unwrap(), vec![event(9)]);
    reader.close().await.unwrap();
    let handle = store.open(&key(), Access::Write).await.unwrap();
    handle.append(&[event(10)]).await.unwrap();
    assert!(handle.recovery().is_some(), "the torn append was found");
    let copies: Vec<_> = std::fs::read_dir(backend.session_dir(&key()))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.file_name().unwrap().to_string_lossy().starts_with(format::BROKEN_PREFIX))
        .collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    let copy = std::fs::read(&copies[0]).unwrap();
    assert_eq!(copy, torn, "the copy holds the torn bytes, not the zeros after them");
    handle.close().await.unwrap();
    assert_eq!(fsck::check_root(dir.path()).unwrap()[0].status, SessionStatus::Ok { events: 11 });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_open_log_gives_its_tail_back_and_extends_again_on_its_next_append() {
    let dir = tempfile::tempdir().unwrap();
    let backend = backend(dir.path(), true);
    let path = backend.log_path(&key());
    let store = LogStore::new(Arc::new(backend.clone()));
    let handle = store.create(header()).await.unwrap();
    handle.flush().await.unwrap();
    for seq in 0..20 {
        handle.append(&[event(seq)]).await.unwrap();
    }
    let (data, len) = data_and_len(&path);
    assert!(len > data, "an open log carries a tail");
    let appended = Instant::now();
    assert_eq!(backend.give_back_idle_tails(appended), 0, "a handle that just appended is not idle");
    assert_eq!(data_and_len(&path), (data, len));
    assert_eq!(backend.give_back_idle_tails(appended + IDLE_GIVE_BACK), 1);
    assert_eq!(data_and_len(&path), (data, data), "the idle log's tail was given back");
    assert_eq!(backend.give_back_idle_tails(appended + IDLE_GIVE_BACK), 0, "nothing left to give back");
    let reader = store.open(&key(), Access::Read).await.unwrap();
    assert_eq!(reader.read(0, None).await.unwrap(), (0..20).map(event).collect::<Vec<_>>());
    // Used again: the next append extends again, and reads stay whole.
    handle.append(&[event(20)]).await.unwrap();
    let (data, len) = data_and_len(&path);
    assert!(len > data, "the next append extended again");
    assert_eq!(reader.read(20, None).await.unwrap(), vec![event(20)]);
    reader.close().await.unwrap();
    handle.close().await.unwrap();
    assert_eq!(backend.give_back_idle_tails(Instant::now() + IDLE_GIVE_BACK), 0, "a closed handle is not swept");
    assert_eq!(fsck::check_root(dir.path()).unwrap()[0].status, SessionStatus::Ok { events: 21 });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_torn_tail_is_neither_given_back_when_idle_nor_at_close() {
    let dir = tempfile::tempdir().unwrap();
    let backend = preallocated_session(dir.path(), 10).await;
    let path = backend.log_path(&key());
    let line = format::encode_event_line(&event(10), berth_core::Epoch(2));
    let torn = &line[..line.len() / 2];
    crash_tail(&path, torn, 100_000);
    let before = std::fs::read(&path).unwrap();
    let store = LogStore::new(Arc::new(backend.clone()));
    let handle = store.open(&key(), Access::Write).await.unwrap();
    assert_eq!(backend.give_back_idle_tails(Instant::now() + 10 * IDLE_GIVE_BACK), 0);
    handle.close().await.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), before, "the torn bytes wait for the copy an append makes first");
    assert!(matches!(fsck::check_root(dir.path()).unwrap()[0].status, SessionStatus::TornTail { events: 10, .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_tail_a_crash_left_is_given_back_by_an_idle_handle_that_never_appended() {
    let dir = tempfile::tempdir().unwrap();
    let backend = preallocated_session(dir.path(), 10).await;
    let path = backend.log_path(&key());
    let data = crash_tail(&path, b"", 300_000);
    let store = LogStore::new(Arc::new(backend.clone()));
    let handle = store.open(&key(), Access::Write).await.unwrap();
    assert_eq!(backend.give_back_idle_tails(Instant::now()), 1);
    assert_eq!(data_and_len(&path), (data, data));
    handle.close().await.unwrap();
}
