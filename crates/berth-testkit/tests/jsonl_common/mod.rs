//! Helpers shared by the JSONL fault tests (`tests/jsonl_*.rs`).
#![allow(dead_code)]

use berth_core::{Event, Scope, SessionHeader, SessionId, SessionKey, TenantId, Timestamp, UserId};
use berth_jsonl::{Durability, JsonlBackend, JsonlOptions};
use berth_store::LogStore;
use berth_testkit::fault_fs::FaultFs;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;

pub fn header(tenant: &str, id: &str) -> SessionHeader {
    SessionHeader::new(
        SessionId::parse(id).unwrap(),
        Scope { tenant: TenantId::parse(tenant).unwrap(), user: UserId::parse("u").unwrap(), project: None },
        Timestamp(1_000),
    )
}

pub fn key(tenant: &str, id: &str) -> SessionKey {
    header(tenant, id).key()
}

/// A small `user/message` event.
pub fn message(seq: u64, text: &str) -> Event {
    Event::new(seq, "user/message", Timestamp(2_000 + seq), json!({ "content": text })).unwrap()
}

/// Event `seq` of a varied log: sizes from 1 byte to `size_max` bytes of content,
/// with multi-byte UTF-8, escapes and control characters, and some non-message types.
pub fn varied_event(seq: u64, size_max: usize) -> Event {
    let sizes = [1usize, 0, 7, 64, 200, 1_000, 4_096, 16_384, 65_536];
    let size = sizes[(seq as usize) % sizes.len()].min(size_max);
    let alphabet = ["a", "é", "\"", "\\", "\n", "\u{1F600}", "\t", "\u{0}", "ß", "{", "}", ","];
    let mut text = String::new();
    let mut index = seq as usize;
    while text.len() < size {
        text.push_str(alphabet[index % alphabet.len()]);
        index = (index * 7 + 3) % 1_000_003;
    }
    match seq % 5 {
        3 => Event::new(
            seq,
            "tool/result",
            Timestamp(3_000 + seq),
            json!({"call_id": format!("c{seq}"), "content": text}),
        )
        .unwrap(),
        4 => Event::new(
            seq,
            "my-app/note",
            Timestamp(3_000 + seq),
            json!({"n": seq, "x": [1.5, -2, null, true], "t": text}),
        )
        .unwrap()
        .with_ignorable(seq & 1 == 0),
        _ => message(seq, &text),
    }
}

/// Classic (version-1) logs: the tests over these helpers plant and inspect them byte by
/// byte, count their syncs, and rely on a run of zeros after the last record being a
/// torn tail. Preallocated logs (version 2, the default) have their own tests
/// (berth-jsonl's `tests/preallocated.rs`, the `_preallocated` sweeps and suites).
fn classic() -> JsonlOptions {
    JsonlOptions { preallocate: false, ..JsonlOptions::default() }
}

pub fn backend(root: &Path) -> JsonlBackend {
    JsonlBackend::open(root, classic()).unwrap()
}

pub fn backend_with(root: &Path, fs: &FaultFs, durability: Durability) -> JsonlBackend {
    JsonlBackend::open(root, JsonlOptions { durability, fs: fs.shared(), ..classic() }).unwrap()
}

pub fn store(backend: &JsonlBackend) -> LogStore {
    LogStore::new(Arc::new(backend.clone()))
}

/// Writes a session through the real store (header, then the events in batches of
/// `batch_size`) and returns the log's bytes and, for each record, the offset just
/// after its `\n` (index 0 = the header).
pub async fn write_session(
    root: &Path,
    key: &SessionKey,
    events: &[Event],
    batch_size: usize,
) -> (Vec<u8>, Vec<usize>) {
    let backend = backend(root);
    let store = store(&backend);
    let handle = store.create(header(key.tenant.as_str(), key.id.as_str())).await.unwrap();
    handle.flush().await.unwrap();
    for batch in events.chunks(batch_size.max(1)) {
        handle.append(batch).await.unwrap();
    }
    handle.close().await.unwrap();
    let bytes = std::fs::read(backend.log_path(key)).unwrap();
    let mut ends = Vec::new();
    for (index, byte) in bytes.iter().enumerate() {
        if *byte == b'\n' {
            ends.push(index + 1);
        }
    }
    assert_eq!(ends.len(), events.len() + 1);
    (bytes, ends)
}

/// Puts `bytes` as the log of `key` under a fresh `root` (no lock or epoch file, as if
/// copied from a crashed machine).
pub fn plant_log(backend: &JsonlBackend, key: &SessionKey, bytes: &[u8]) {
    let dir = backend.session_dir(key);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(backend.log_path(key), bytes).unwrap();
}

/// A scratch directory for sweeps that create thousands of roots: on tmpfs when the
/// machine has one (the sweeps test recovery logic, not the medium), else a tempdir.
pub fn sweep_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().unwrap()
}

/// A runtime for sweeps that call the async backend many times.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

pub fn is_corrupt_at(error: &berth_core::Error, seq: Option<u64>) -> bool {
    matches!(error, berth_core::Error::Corrupt { location, .. } if location.seq == seq)
}
