//! The embedded JSONL backend as a conformance backend: one temporary data root per
//! test; every `LogStore` instance is a separate `JsonlBackend` over that root (its own
//! open files and `flock`s, as another process would have), wrapped in `FaultyBackend`.
//! The physical hooks write bytes straight into `session.jsonl`.

use super::{ConformanceBackend, FaultPlan, FaultyBackend};
use async_trait::async_trait;
use berth_core::{Epoch, Event, SessionKey};
use berth_jsonl::{format, JsonlBackend, JsonlOptions};
use berth_store::LogStore;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub struct JsonlConformance {
    // Kept for its lifetime: the data root is removed when the backend is dropped.
    _dir: tempfile::TempDir,
    root: PathBuf,
    options: JsonlOptions,
    faults: Arc<FaultPlan>,
}

impl JsonlConformance {
    /// A fresh data root with the default options (fsync per append, the real fs).
    pub fn new() -> JsonlConformance {
        JsonlConformance::with_options(JsonlOptions::default())
    }

    pub fn with_options(options: JsonlOptions) -> JsonlConformance {
        let dir = tempfile::tempdir().expect("temporary data root");
        let root = dir.path().join("data");
        JsonlConformance { root, _dir: dir, options, faults: FaultPlan::new() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn backend(&self) -> JsonlBackend {
        JsonlBackend::open(&self.root, self.options.clone()).expect("open the JSONL data root")
    }

    fn instance(&self) -> LogStore {
        LogStore::new(Arc::new(FaultyBackend::new(self.backend(), self.faults.clone())))
    }

    /// The complete records of a session's log (without their `\n`) and the count of
    /// bytes after the last `\n`.
    fn records(&self, key: &SessionKey) -> (PathBuf, Vec<Vec<u8>>, usize) {
        let path = self.backend().log_path(key);
        let mut bytes = std::fs::read(&path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
        // A preallocated log's zero tail is unwritten space, not part of any record.
        bytes.truncate(bytes.iter().rposition(|byte| *byte != 0).map_or(0, |last| last + 1));
        let complete = bytes.iter().rposition(|byte| *byte == b'\n').map_or(0, |end| end + 1);
        let records =
            bytes[..complete].split(|byte| *byte == b'\n').filter(|line| !line.is_empty()).map(<[u8]>::to_vec);
        (path, records.collect(), bytes.len() - complete)
    }

    /// Writes `bytes` where the log's data ends (before a preallocated zero tail, whose
    /// zeros after them stay; at the end of a classic log).
    fn append_bytes(path: &Path, bytes: &[u8]) {
        use std::os::unix::fs::FileExt;
        let data = std::fs::read(path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
        let end = data.iter().rposition(|byte| *byte != 0).map_or(0, |last| last + 1) as u64;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .unwrap_or_else(|error| panic!("open {}: {error}", path.display()));
        file.write_all_at(bytes, end).and_then(|()| file.sync_all()).expect("append to the log");
    }
}

impl Default for JsonlConformance {
    fn default() -> Self {
        JsonlConformance::new()
    }
}

/// The epoch field of a record line (header or event).
fn record_epoch(line: &[u8]) -> Epoch {
    let value: serde_json::Value = serde_json::from_slice(line).expect("a record is a JSON object");
    Epoch(value["epoch"].as_u64().expect("every record carries its epoch"))
}

#[async_trait]
impl ConformanceBackend for JsonlConformance {
    fn name(&self) -> &str {
        "jsonl"
    }

    async fn store(&self) -> LogStore {
        self.instance()
    }

    async fn reopen(&self) -> Option<LogStore> {
        Some(self.instance())
    }

    /// Appends the first half of a correctly encoded next record, without its `\n`.
    async fn corrupt_tail(&self, key: &SessionKey) -> Option<()> {
        let (path, records, torn) = self.records(key);
        assert_eq!(torn, 0, "the log already has a torn tail");
        let last = records.last().expect("a log has a header record");
        let next_seq = records.len() as u64 - 1;
        let event = super::fixtures::marker(next_seq);
        let line = format::encode_event_line(&event, record_epoch(last));
        Self::append_bytes(&path, &line[..line.len() / 2]);
        Some(())
    }

    /// Appends a complete, checksummed record of `event` with the log's current epoch.
    async fn inject_stored_event(&self, key: &SessionKey, event: Event) -> Option<()> {
        let (path, records, torn) = self.records(key);
        assert_eq!(torn, 0, "cannot inject after a torn tail");
        let epoch = record_epoch(records.last().expect("a log has a header record"));
        Self::append_bytes(&path, &format::encode_event_line(&event, epoch));
        Some(())
    }

    fn faults(&self) -> Arc<FaultPlan> {
        self.faults.clone()
    }

    /// Changes one byte in the middle of the record's line (its length and `\n` stay),
    /// so its checksum fails while the records around it stay valid.
    async fn damage_record(&self, key: &SessionKey, seq: u64) -> Option<()> {
        let (path, records, _) = self.records(key);
        let index = usize::try_from(seq).expect("a small seq") + 1;
        let offset: usize =
            records[..index].iter().map(|line| line.len() + 1).sum::<usize>() + records[index].len() / 2;
        let mut bytes = std::fs::read(&path).expect("read the log");
        bytes[offset] = if bytes[offset] == b'0' { b'1' } else { b'0' };
        std::fs::write(&path, &bytes).expect("write the damaged log");
        Some(())
    }
}
