//! Reads by position on the JSONL backend (R-S15), against what a full forward read
//! returns: a cold tail read and a cold read from an arbitrary seq read a small bounded
//! part of a 100,000-event log (bytes counted through the `Fs` seam), and a property
//! test over random logs (torn tails included) compares `read_before` and `read(from)`
//! on fresh and reused read handles with slices of the full read.

use berth_core::{Event, Scope, SessionHeader, SessionId, SessionKey, TenantId, Timestamp, UserId};
use berth_jsonl::fs::{FileMeta, Fs, FsFile, OpenOptions, OsFs};
use berth_jsonl::{format, Durability, JsonlBackend, JsonlOptions};
use berth_store::{Access, LogStore, SessionHandle};
use proptest::prelude::*;
use std::ffi::OsString;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The real file system, counting the bytes every `read_at` returned; `len` can be
/// made to report a file longer than it is, once (what a reader sees when a writer
/// truncates a torn tail right after the reader took the length).
#[derive(Default)]
struct ByteCountingFs {
    bytes_read: Arc<AtomicU64>,
    stale_len_extra_bytes: Arc<AtomicU64>,
}

struct CountingFile {
    inner: Box<dyn FsFile>,
    bytes_read: Arc<AtomicU64>,
    stale_len_extra_bytes: Arc<AtomicU64>,
}

impl Fs for ByteCountingFs {
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Box<dyn FsFile>> {
        let inner = OsFs.open(path, options)?;
        let (bytes_read, stale_len_extra_bytes) = (self.bytes_read.clone(), self.stale_len_extra_bytes.clone());
        Ok(Box::new(CountingFile { inner, bytes_read, stale_len_extra_bytes }))
    }
    fn open_dir(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        OsFs.open_dir(path)
    }
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        OsFs.create_dir(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        OsFs.sync_dir(path)
    }
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        OsFs.hard_link(from, to)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        OsFs.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        OsFs.remove_file(path)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        OsFs.remove_dir(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        OsFs.read_dir(path)
    }
    fn metadata(&self, path: &Path) -> io::Result<FileMeta> {
        OsFs.metadata(path)
    }
}

impl FsFile for CountingFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let read = self.inner.read_at(buf, offset)?;
        self.bytes_read.fetch_add(read as u64, Ordering::Relaxed);
        Ok(read)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.inner.write_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.inner.sync_all()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.inner.len()? + self.stale_len_extra_bytes.swap(0, Ordering::Relaxed))
    }
    fn try_lock(&self) -> io::Result<bool> {
        self.inner.try_lock()
    }
    fn metadata(&self) -> io::Result<FileMeta> {
        self.inner.metadata()
    }
}

fn header(id: &str) -> SessionHeader {
    let scope =
        Scope { tenant: TenantId::parse("tenant-a").unwrap(), user: UserId::parse("user-a").unwrap(), project: None };
    SessionHeader::new(SessionId::parse(id).unwrap(), scope, Timestamp(1_000))
}

fn event(seq: u64, padding: usize) -> Event {
    let data = serde_json::json!({"n": seq, "text": "x".repeat(padding)});
    Event::new(seq, "test/marker", Timestamp(1_000 + seq), data).unwrap()
}

async fn write_log(store: &LogStore, id: &str, log: &[Event]) -> SessionKey {
    let writer = store.create(header(id)).await.unwrap();
    writer.flush().await.unwrap();
    for batch in log.chunks(1_000) {
        writer.append(batch).await.unwrap();
    }
    writer.close().await.unwrap();
    header(id).key()
}

/// Appends the first half of a well-formed next record, without its `\n`.
fn tear_tail(backend: &JsonlBackend, key: &SessionKey, next_seq: u64) {
    let line = format::encode_event_line(&event(next_seq, 10), berth_core::Epoch(1));
    let mut file = std::fs::OpenOptions::new().append(true).open(backend.log_path(key)).unwrap();
    file.write_all(&line[..line.len() / 2]).unwrap();
}

/// Bytes a fresh read handle (of a fresh backend instance) reads, open included, to
/// run `read`.
async fn cold_bytes<F, Fut>(root: &Path, key: &SessionKey, read: F) -> (u64, Vec<Event>)
where
    F: FnOnce(SessionHandle) -> Fut,
    Fut: std::future::Future<Output = Vec<Event>>,
{
    let fs = ByteCountingFs::default();
    let counter = fs.bytes_read.clone();
    let options = JsonlOptions { durability: Durability::Barrier, fs: Arc::new(fs), ..JsonlOptions::default() };
    let store = LogStore::new(Arc::new(JsonlBackend::open(root, options).unwrap()));
    let handle = store.open(key, Access::Read).await.unwrap();
    let events = read(handle).await;
    (counter.load(Ordering::Relaxed), events)
}

/// R-S15 on a 100,000-event log: a cold tail read of 20 events and cold reads of 20
/// events from the middle each read a small, bounded part of the file (a full read
/// reads all of it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_partial_reads_of_a_long_log_read_a_bounded_part_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("data");
    let options = JsonlOptions { durability: Durability::Barrier, ..JsonlOptions::default() };
    let backend = JsonlBackend::open(&root, options).unwrap();
    let store = LogStore::new(Arc::new(backend.clone()));
    let log: Vec<Event> = (0..100_000).map(|seq| event(seq, 40)).collect();
    let key = write_log(&store, "long", &log).await;
    let file_bytes = std::fs::metadata(backend.log_path(&key)).unwrap().len();

    let (full, events) = cold_bytes(&root, &key, |handle| async move { handle.read(0, None).await.unwrap() }).await;
    assert_eq!(events.len(), 100_000);
    assert!(full >= file_bytes, "a full read reads the whole file ({full} of {file_bytes})");

    let (tail, events) =
        cold_bytes(&root, &key, |handle| async move { handle.read_before(u64::MAX, 20).await.unwrap() }).await;
    assert_eq!(events, log[99_980..]);
    let (middle, events) =
        cold_bytes(&root, &key, |handle| async move { handle.read(50_000, Some(20)).await.unwrap() }).await;
    assert_eq!(events, log[50_000..50_020]);
    let (before_middle, events) =
        cold_bytes(&root, &key, |handle| async move { handle.read_before(31_337, 20).await.unwrap() }).await;
    assert_eq!(events, log[31_317..31_337]);
    eprintln!(
        "log {file_bytes} B; bytes read: full {full}, tail {tail}, from 50000 {middle}, before 31337 {before_middle}"
    );
    for (what, bytes) in [("tail", tail), ("from the middle", middle), ("before a seq", before_middle)] {
        assert!(bytes < 256 * 1024 && bytes * 50 < file_bytes, "a cold read {what} read {bytes} of {file_bytes} bytes");
    }
}

/// A point read of many seqs in order (a LangGraph saver's resume reads every fifth
/// event of a thread) is one forward pass over the span they cover, not a read per seq:
/// a cold read of 1,000 seqs spaced 5 apart reads the span once (~1.1× its bytes, with
/// the seek to its start and the committed end), where a read per seq read two short
/// chunks (8 KiB) a seq, ~23× the span, and a bisection per seq ~64×.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_point_read_of_many_seqs_walks_forward_between_them() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("data");
    let options = JsonlOptions { durability: Durability::Barrier, ..JsonlOptions::default() };
    let backend = JsonlBackend::open(&root, options).unwrap();
    let store = LogStore::new(Arc::new(backend.clone()));
    let log: Vec<Event> = (0..20_000).map(|seq| event(seq, 40)).collect();
    let key = write_log(&store, "spaced", &log).await;
    let file_bytes = std::fs::metadata(backend.log_path(&key)).unwrap().len();
    let seqs: Vec<u64> = (5_000..10_000).step_by(5).collect();
    let wanted = seqs.clone();
    let (bytes, events) =
        cold_bytes(&root, &key, |handle| async move { handle.read_seqs(&wanted).await.unwrap() }).await;
    assert_eq!(events, seqs.iter().map(|&seq| log[seq as usize].clone()).collect::<Vec<_>>());
    let span_bytes = file_bytes * 5_000 / 20_000;
    eprintln!("log {file_bytes} B, span {span_bytes} B; a point read of {} seqs read {bytes} B", seqs.len());
    assert!(bytes < span_bytes * 3 / 2, "a point read of spaced seqs read {bytes} B for a span of {span_bytes} B");
}

/// A log as a property case: event sizes, whether a torn record follows, the reads,
/// and how many events another writer appends between rounds.
#[derive(Clone, Debug)]
struct Case {
    paddings: Vec<usize>,
    torn: bool,
    before_queries: Vec<(u64, u64)>,
    from_queries: Vec<(u64, u64)>,
    appended: usize,
}

fn case() -> impl Strategy<Value = Case> {
    let paddings = prop::collection::vec(prop_oneof![4 => 0usize..60, 1 => 60usize..2_000], 0..700);
    let query = (0u64..760, prop_oneof![0u64..40, 40u64..800]);
    let queries = prop::collection::vec(query, 1..12);
    (paddings, any::<bool>(), queries.clone(), queries, 0usize..40).prop_map(
        |(paddings, torn, before_queries, from_queries, appended)| Case {
            paddings,
            torn,
            before_queries,
            from_queries,
            appended,
        },
    )
}

fn slice_before(log: &[Event], before: u64, limit: u64) -> &[Event] {
    let end = (before as usize).min(log.len());
    &log[end.saturating_sub(limit as usize)..end]
}

fn slice_from(log: &[Event], from: u64, length: u64) -> &[Event] {
    let start = (from as usize).min(log.len());
    &log[start..(start + length as usize).min(log.len())]
}

async fn check_queries(reader_store: &LogStore, shared: &SessionHandle, key: &SessionKey, log: &[Event], case: &Case) {
    for &(before, limit) in &case.before_queries {
        let cold = reader_store.open(key, Access::Read).await.unwrap();
        let expected = slice_before(log, before, limit);
        assert_eq!(cold.read_before(before, limit).await.unwrap(), expected, "cold before {before} {limit}");
        assert_eq!(shared.read_before(before, limit).await.unwrap(), expected, "shared before {before} {limit}");
    }
    for &(from, length) in &case.from_queries {
        let cold = reader_store.open(key, Access::Read).await.unwrap();
        let expected = slice_from(log, from, length);
        assert_eq!(cold.read(from, Some(length)).await.unwrap(), expected, "cold from {from} {length}");
        assert_eq!(shared.read(from, Some(length)).await.unwrap(), expected, "shared from {from} {length}");
    }
}

async fn check_case(case: Case) {
    let dir = tempfile::tempdir().unwrap();
    let options = JsonlOptions { durability: Durability::Barrier, ..JsonlOptions::default() };
    let backend = JsonlBackend::open(dir.path().join("data"), options).unwrap();
    let store = LogStore::new(Arc::new(backend.clone()));
    let mut log: Vec<Event> = case.paddings.iter().enumerate().map(|(seq, pad)| event(seq as u64, *pad)).collect();
    let key = write_log(&store, "random", &log).await;
    if case.torn {
        tear_tail(&backend, &key, log.len() as u64);
    }
    let reader_store = LogStore::new(Arc::new(JsonlBackend::open(backend.root(), JsonlOptions::default()).unwrap()));
    let shared = reader_store.open(&key, Access::Read).await.unwrap();
    for _round in 0..2 {
        check_queries(&reader_store, &shared, &key, &log, &case).await;
        // Another writer appends (truncating a torn tail first): the shared handle's
        // remembered positions must not hide the new events.
        let writer = store.open(&key, Access::Write).await.unwrap();
        let more: Vec<Event> = (0..case.appended).map(|index| event((log.len() + index) as u64, index * 7)).collect();
        writer.append(&more).await.unwrap();
        writer.close().await.unwrap();
        log.extend(more);
    }
    check_queries(&reader_store, &shared, &key, &log, &case).await;
    assert_eq!(shared.read(0, None).await.unwrap(), log, "and the full read");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// `read_before` and `read(from, length)` equal slices of the full read, on fresh
    /// and reused read handles, with and without a torn tail, before and after appends.
    #[test]
    fn partial_reads_equal_slices_of_the_full_read(case in case()) {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(check_case(case));
    }
}

/// A reader racing an appender in the same process (the appender's writes land while
/// the reader scans backwards) only ever returns whole, committed events: every tail
/// read and read from a seq is a contiguous slice of what was appended, and the tails
/// it sees never go back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_racing_an_appender_return_only_whole_committed_events() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("data");
    let options = JsonlOptions { durability: Durability::Barrier, ..JsonlOptions::default() };
    let store = LogStore::new(Arc::new(JsonlBackend::open(&root, options).unwrap()));
    let log: Vec<Event> = (0..3_000).map(|seq| event(seq, (seq as usize * 37) % 900)).collect();
    let key = write_log(&store, "racing", &log[..1]).await;
    let appender = {
        let (store, log, key) = (store.clone(), log.clone(), key.clone());
        tokio::spawn(async move {
            let writer = store.open(&key, Access::Write).await.unwrap();
            for batch in log[1..].chunks(7) {
                writer.append(batch).await.unwrap();
            }
            writer.close().await.unwrap();
        })
    };
    let readers = LogStore::new(Arc::new(JsonlBackend::open(&root, JsonlOptions::default()).unwrap()));
    let shared = readers.open(&key, Access::Read).await.unwrap();
    let mut tail_seen = 0u64;
    while !appender.is_finished() || tail_seen < 3_000 {
        let cold = readers.open(&key, Access::Read).await.unwrap();
        for (what, events) in [
            ("cold tail", cold.read_before(u64::MAX, 9).await.unwrap()),
            ("shared tail", shared.read_before(u64::MAX, 9).await.unwrap()),
            ("cold from", cold.read(tail_seen / 2, Some(11)).await.unwrap()),
        ] {
            let first = events.first().map_or(0, |event| event.seq.get()) as usize;
            assert_eq!(events, log[first..first + events.len()], "{what}: a slice of what was appended");
        }
        let end = shared.read_before(u64::MAX, 1).await.unwrap().last().map_or(0, |event| event.seq.get() + 1);
        assert!(end >= tail_seen, "the tail went back from {tail_seen} to {end}");
        tail_seen = end;
    }
    appender.await.unwrap();
}

/// A partial read that finds the file shorter than the length it took (a writer
/// truncated a torn tail in between) reads again against the new length instead of
/// failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_read_retries_when_the_file_shrank_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("data");
    let log: Vec<Event> = (0..500).map(|seq| event(seq, 30)).collect();
    let fs = ByteCountingFs::default();
    let stale = fs.stale_len_extra_bytes.clone();
    let options = JsonlOptions { durability: Durability::Barrier, fs: Arc::new(fs), ..JsonlOptions::default() };
    let store = LogStore::new(Arc::new(JsonlBackend::open(&root, options).unwrap()));
    let key = write_log(&store, "shrinks", &log).await;
    let reader = store.open(&key, Access::Read).await.unwrap();
    stale.store(100, Ordering::Relaxed);
    assert_eq!(reader.read_before(u64::MAX, 3).await.unwrap(), log[497..]);
    let reader = store.open(&key, Access::Read).await.unwrap();
    stale.store(100, Ordering::Relaxed);
    assert_eq!(reader.read(250, Some(3)).await.unwrap(), log[250..253]);
}
