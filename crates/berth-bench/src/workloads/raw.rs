//! The raw file references of the write workloads (W1, W2, W5): the same bytes berth
//! writes, on a plain file, `fdatasync` after each record. Two of them, measured in the
//! same run:
//!
//! - **growing file**: each record appended (`write` at the end), so every `fdatasync`
//!   also commits the file's new size (and any newly allocated block) to the journal;
//! - **overwrite**: the file is written with zeros and synced first (untimed), then the
//!   records are written with `pwrite` from offset 0 into that space, so an `fdatasync`
//!   flushes data only — what SQLite's WAL does once it wraps after a checkpoint.
//!
//! Targets are judged against the faster of the two (`Goal::RatioToFasterAtLeast`).

use super::elapsed_us;
use crate::fixtures::io;
use crate::payload::chat_line;
use berth_core::Result;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

/// How the ratio column names the growing-file reference beside the other one.
pub const GROWING_TAG: &str = "growing";
/// How the ratio column names the overwrite reference beside the other one.
pub const OVERWRITE_TAG: &str = "overwrite";

/// Where a raw reference writes its records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawFile {
    /// Appended to a file that grows with every record.
    Growing,
    /// Written with `pwrite` from offset 0 into a file already zeroed and synced.
    Overwrite,
}

impl RawFile {
    pub fn tag(self) -> &'static str {
        match self {
            RawFile::Growing => GROWING_TAG,
            RawFile::Overwrite => OVERWRITE_TAG,
        }
    }
}

/// Bytes written with zeros at a time while pre-zeroing.
const ZERO_CHUNK: usize = 1 << 20;
/// Pre-zeroed files are rounded up to whole pages.
const PAGE: u64 = 4096;

/// Creates `path` holding `len` zero bytes (rounded up to a whole page), written — not
/// a hole, not a `fallocate`d unwritten extent — and synced with its size, so that
/// writes inside it change no metadata that `fdatasync` has to commit.
pub fn prezeroed(path: &Path, len: u64) -> Result<File> {
    let len = len.div_ceil(PAGE) * PAGE;
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(path)
        .map_err(io("open pre-zeroed file"))?;
    let zeros = vec![0u8; ZERO_CHUNK];
    let mut written = 0u64;
    while written < len {
        let chunk = (len - written).min(ZERO_CHUNK as u64) as usize;
        file.write_all(&zeros[..chunk]).map_err(io("pre-zero write"))?;
        written += chunk as u64;
    }
    file.sync_all().map_err(io("pre-zero fsync"))?;
    if let Some(parent) = path.parent() {
        File::open(parent).and_then(|dir| dir.sync_all()).map_err(io("pre-zero directory fsync"))?;
    }
    Ok(file)
}

/// Bytes of the lines with sequence numbers `seqs` (what a reference will write).
pub fn lines_len(seqs: impl IntoIterator<Item = u64>) -> u64 {
    seqs.into_iter().map(|seq| chat_line(seq).len() as u64).sum()
}

/// `operations` records of `events_per_op` lines each (seq 0, 1, …) written to
/// `dir/raw.jsonl`, `fdatasync` after each record; per-record latency in µs (the write
/// and its sync; building the lines and pre-zeroing are not timed).
pub fn appends(file_kind: RawFile, dir: &Path, operations: usize, events_per_op: usize) -> Result<Vec<f64>> {
    let path = dir.join("raw.jsonl");
    let events = (operations * events_per_op) as u64;
    let mut writer = RecordWriter::open(file_kind, &path, || lines_len(0..events))?;
    let mut latencies = Vec::with_capacity(operations);
    let mut seq = 0;
    for _ in 0..operations {
        let mut buffer = Vec::with_capacity(events_per_op * 1200);
        for _ in 0..events_per_op {
            buffer.extend_from_slice(&chat_line(seq));
            seq += 1;
        }
        let started = Instant::now();
        writer.write_synced(&buffer)?;
        latencies.push(elapsed_us(started));
    }
    Ok(latencies)
}

/// One reference's file and where its next record goes.
pub struct RecordWriter {
    file: File,
    kind: RawFile,
    offset: u64,
}

impl RecordWriter {
    /// Opens `path` for `kind`: a new empty file to append to, or a pre-zeroed file of
    /// at least `len()` bytes to overwrite from offset 0.
    pub fn open(kind: RawFile, path: &Path, len: impl FnOnce() -> u64) -> Result<RecordWriter> {
        let file = match kind {
            RawFile::Growing => OpenOptions::new().create(true).append(true).open(path).map_err(io("open raw file"))?,
            RawFile::Overwrite => prezeroed(path, len())?,
        };
        Ok(RecordWriter { file, kind, offset: 0 })
    }

    /// Writes `record` after the previous one and `fdatasync`s.
    pub fn write_synced(&mut self, record: &[u8]) -> Result<()> {
        match self.kind {
            RawFile::Growing => self.file.write_all(record).map_err(io("raw write"))?,
            RawFile::Overwrite => self.file.write_all_at(record, self.offset).map_err(io("raw pwrite"))?,
        }
        self.offset += record.len() as u64;
        self.file.sync_data().map_err(io("raw fdatasync"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expected_lines(events: u64) -> Vec<u8> {
        (0..events).flat_map(chat_line).collect()
    }

    #[test]
    fn prezeroed_file_is_written_zeros_to_a_whole_page() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("zeros");
        prezeroed(&path, 5000).expect("pre-zero");
        let bytes = std::fs::read(&path).expect("read");
        assert_eq!(bytes.len(), 8192);
        assert!(bytes.iter().all(|&b| b == 0));
        // Larger than a chunk: written in several writes, still exact.
        prezeroed(&path, ZERO_CHUNK as u64 + 1).expect("pre-zero again");
        assert_eq!(std::fs::metadata(&path).expect("metadata").len(), ZERO_CHUNK as u64 + PAGE);
    }

    #[test]
    fn growing_reference_appends_the_records() {
        let dir = tempfile::tempdir().expect("tempdir");
        let latencies = appends(RawFile::Growing, dir.path(), 3, 2).expect("appends");
        assert_eq!(latencies.len(), 3);
        assert_eq!(std::fs::read(dir.path().join("raw.jsonl")).expect("read"), expected_lines(6));
    }

    #[test]
    fn overwrite_reference_writes_the_same_bytes_from_offset_zero_without_growing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let latencies = appends(RawFile::Overwrite, dir.path(), 4, 3).expect("appends");
        assert_eq!(latencies.len(), 4);
        assert!(latencies.iter().all(|us| us.is_finite() && *us >= 0.0));
        let bytes = std::fs::read(dir.path().join("raw.jsonl")).expect("read");
        let expected = expected_lines(12);
        assert_eq!(expected.len() as u64, lines_len(0..12));
        // The file keeps its pre-zeroed size: the records, then the zeros not yet reached.
        assert_eq!(bytes.len() as u64, (expected.len() as u64).div_ceil(PAGE) * PAGE);
        assert_eq!(&bytes[..expected.len()], &expected[..]);
        assert!(bytes[expected.len()..].iter().all(|&b| b == 0));
    }

    #[test]
    fn overwrite_writer_never_writes_past_the_prezeroed_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let mut writer = RecordWriter::open(RawFile::Overwrite, &path, || 10).expect("open");
        writer.write_synced(b"hello").expect("write");
        writer.write_synced(b"world").expect("write");
        let bytes = std::fs::read(&path).expect("read");
        assert_eq!(bytes.len() as u64, PAGE);
        assert_eq!(&bytes[..10], b"helloworld");
    }
}
