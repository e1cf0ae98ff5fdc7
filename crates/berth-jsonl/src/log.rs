//! Reading an open log with memory bounded by a constant: a sparse seq → byte-offset
//! index with a fixed number of entries, and forward scans from the nearest entry with a
//! bounded buffer. Shared by read handles (which re-check the file length on every read)
//! and write handles (which know their own committed end). A read that starts past what
//! the view has validated, and a read of the tail, go through `seek` instead (a backward
//! scan from the end, a bisection over byte offsets), so they never scan from the header.

mod lines;
mod points;
mod seek;

use crate::format::{self, LineCursor, LineFault, NextLine, ReadAt, ScanStatus};
use crate::fs::FsFile;
use berth_core::{Epoch, Error, Event, Location, Result};
use std::collections::BTreeMap;
use std::io;

/// Most entries the sparse index keeps; when full, the stride doubles.
pub const INDEX_ENTRIES_MAX: usize = 1024;

/// A sparse map from seq to the byte offset where that seq's line starts. Holds the
/// seqs that are multiples of `stride`; at most `INDEX_ENTRIES_MAX` of them.
#[derive(Clone, Debug)]
pub struct SparseIndex {
    stride: u64,
    entries: Vec<(u64, u64)>,
}

impl SparseIndex {
    pub fn new() -> SparseIndex {
        SparseIndex { stride: 1, entries: Vec::new() }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Records that `seq`'s line starts at `offset` (seqs arrive in increasing order).
    pub fn note(&mut self, seq: u64, offset: u64) {
        // The stride is a power of two.
        if seq & (self.stride - 1) != 0 || self.entries.last().is_some_and(|(last, _)| *last >= seq) {
            return;
        }
        self.entries.push((seq, offset));
        if self.entries.len() > INDEX_ENTRIES_MAX {
            self.stride *= 2;
            let stride = self.stride;
            self.entries.retain(|(seq, _)| seq & (stride - 1) == 0);
        }
        debug_assert!(self.entries.len() <= INDEX_ENTRIES_MAX);
    }

    /// The entry with the largest seq ≤ `seq`.
    pub fn floor(&self, seq: u64) -> Option<(u64, u64)> {
        let after = self.entries.partition_point(|(entry, _)| *entry <= seq);
        after.checked_sub(1).map(|index| self.entries[index])
    }

    /// Forgets entries for seqs ≥ `events` (the log shrank).
    pub fn truncate(&mut self, events: u64) {
        let keep = self.entries.partition_point(|(entry, _)| *entry < events);
        self.entries.truncate(keep);
    }
}

impl Default for SparseIndex {
    fn default() -> Self {
        SparseIndex::new()
    }
}

/// Adapts an open file to the scanner's byte source.
pub struct FileSource<'a>(pub &'a dyn FsFile);

impl ReadAt for FileSource<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
}

/// Damage found at the end of the known prefix; sticky until the file shrinks.
#[derive(Clone, Debug)]
struct Damage {
    /// File length when the damage was classified.
    file_len: u64,
    error: Error,
}

/// The validated view of one open log file.
pub struct LogView {
    pub file: Box<dyn FsFile>,
    /// Path relative to the data root, for error locations.
    pub artifact: String,
    /// End of the header line: where seq 0 starts.
    pub header_len: u64,
    pub header_epoch: Epoch,
    index: SparseIndex,
    /// Events `0..known_events` were validated and end at `known_end`.
    known_events: u64,
    known_end: u64,
    last_epoch: Epoch,
    damage: Option<Damage>,
    /// Record starts (seq → byte offset) past the validated prefix that reads through
    /// `seek` verified, at most `seek::MARKS_MAX`: later reads start from them.
    marks: BTreeMap<u64, u64>,
    /// The log may end in a zero-filled, preallocated tail (log format version 2).
    zero_tail: bool,
}

impl LogView {
    pub fn new(file: Box<dyn FsFile>, artifact: String, header_len: u64, header_epoch: Epoch) -> LogView {
        let mut index = SparseIndex::new();
        index.note(0, header_len);
        LogView {
            file,
            artifact,
            header_len,
            header_epoch,
            index,
            known_events: 0,
            known_end: header_len,
            last_epoch: header_epoch,
            damage: None,
            marks: BTreeMap::new(),
            zero_tail: false,
        }
    }

    /// Marks the log as one that may end in a zero-filled tail (log format version 2).
    pub fn set_zero_tail(&mut self, zero_tail: bool) {
        self.zero_tail = zero_tail;
    }

    /// Where the log's data ends now, as a reader that does not write it sees it: the
    /// file's length, or, for a log that may carry a zero tail, the first `\0` from the
    /// end of the validated prefix on (`zero_tail::first_nul`): the bytes before it are
    /// records and perhaps an append in progress, the bytes after it unwritten space.
    pub fn data_end_now(&self) -> io::Result<u64> {
        let len = self.file.len()?;
        if !self.zero_tail || len <= self.known_end {
            return Ok(len);
        }
        let from = self.marks.values().copied().filter(|offset| *offset <= len).max().unwrap_or(0).max(self.known_end);
        format::zero_tail::first_nul(&FileSource(self.file.as_ref()), from, len)
    }

    pub fn known_events(&self) -> u64 {
        self.known_events
    }

    pub fn known_end(&self) -> u64 {
        self.known_end
    }

    pub fn last_epoch(&self) -> Epoch {
        self.last_epoch
    }

    pub fn index_len(&self) -> usize {
        self.index.len()
    }

    /// Marks `events` events ending at `end` as validated (after a full scan).
    pub fn set_known(&mut self, events: u64, end: u64, last_epoch: Epoch) {
        self.known_events = events;
        self.known_end = end;
        self.last_epoch = last_epoch;
    }

    /// Takes an index built by a full scan (which notes seq 0 only if it exists).
    pub fn set_index(&mut self, mut index: SparseIndex) {
        if index.is_empty() {
            index.note(0, self.header_len);
        }
        self.index = index;
    }

    /// Records appended by this process's writer: line start offsets, then the new end.
    pub fn note_appended(&mut self, first_seq: u64, line_offsets: &[u64], end: u64, epoch: Epoch) {
        debug_assert_eq!(first_seq, self.known_events);
        for (index, offset) in line_offsets.iter().enumerate() {
            self.index.note(first_seq + index as u64, *offset);
        }
        self.known_events = first_seq + line_offsets.len() as u64;
        self.known_end = end;
        self.last_epoch = epoch;
    }

    /// Forgets everything from event `events` on (the writer rolled back, or the file
    /// shrank under a reader).
    pub fn forget_from(&mut self, events: u64, end: u64, last_epoch: Epoch) {
        self.index.truncate(events);
        self.index.note(0, self.header_len);
        self.known_events = events;
        self.known_end = end;
        self.last_epoch = last_epoch;
        self.damage = None;
        self.marks.retain(|seq, _| *seq <= events);
    }

    fn corrupt(&self, reason: String, offset: u64, seq: u64) -> Error {
        Error::Corrupt {
            reason,
            location: Location { artifact: self.artifact.clone(), offset: Some(offset), seq: Some(seq) },
        }
    }

    /// Forgets what a change of the file length made stale.
    fn refresh(&mut self, visible_end: u64) {
        if visible_end < self.known_end {
            // The file shrank below what was validated: start over from the header.
            self.forget_from(0, self.header_len, self.header_epoch);
        }
        self.marks.retain(|_, offset| *offset <= visible_end);
        if let Some(damage) = &self.damage {
            if damage.file_len != visible_end {
                self.damage = None;
            }
        }
    }

    /// Whether everything inside `0..visible_end` is validated (always, for a writer).
    fn all_known(&self, visible_end: u64) -> bool {
        visible_end == self.known_end && self.damage.is_none()
    }

    /// Events `offset .. offset + length` of the valid prefix inside `0..visible_end`.
    /// Stops quietly at a torn tail (or an append in progress); fails `Corrupt` when the
    /// range reaches damage that a valid record follows. A range that starts past the
    /// validated prefix is found from the end of the file (`seek`), not by scanning
    /// forward to it.
    pub fn read(&mut self, offset: u64, length: u64, visible_end: u64) -> Result<Vec<Event>> {
        self.refresh(visible_end);
        if length == 0 || (offset >= self.known_events && self.all_known(visible_end)) {
            return Ok(Vec::new());
        }
        if offset > self.known_events {
            let end = self.committed_end(visible_end)?;
            return self.read_located(offset, length, end);
        }
        self.read_forward(offset, length, visible_end)
    }

    /// Up to `limit` events before seq `before`, in ascending order (the tail when
    /// `before` is at or past the end), reading only near them.
    pub fn read_before(&mut self, before: u64, limit: u64, visible_end: u64) -> Result<Vec<Event>> {
        self.refresh(visible_end);
        let end = match self.all_known(visible_end) {
            true => seek::Position { seq: self.known_events, offset: self.known_end },
            false => self.committed_end(visible_end)?,
        };
        let stop = before.min(end.seq);
        let start = stop.saturating_sub(limit);
        if start <= self.known_events {
            return self.read_forward(start, stop - start, visible_end);
        }
        self.read_located(start, stop - start, end)
    }

    /// `read` scanning forward from the validated prefix (extending it).
    fn read_forward(&mut self, offset: u64, length: u64, visible_end: u64) -> Result<Vec<Event>> {
        let want_end = offset.saturating_add(length);
        let mut events = Vec::new();
        if length == 0 {
            return Ok(events);
        }
        let (mut seq, start) = if offset < self.known_events {
            self.index.floor(offset).unwrap_or((0, self.header_len))
        } else {
            (self.known_events, self.known_end)
        };
        let mut cursor = LineCursor::new(start, visible_end);
        while seq < want_end {
            if seq >= self.known_events {
                if let Some(damage) = &self.damage {
                    return Err(damage.error.clone());
                }
            }
            let source = FileSource(self.file.as_ref());
            let (line_offset, line) = match cursor.next_line(&source).map_err(|error| Error::io("read log", &error))? {
                NextLine::End => break,
                NextLine::Unterminated { offset: line_offset } if seq >= self.known_events => {
                    self.fault_at(line_offset, seq, LineFault::Damaged, visible_end)?;
                    break;
                }
                NextLine::Unterminated { offset: line_offset } => {
                    return Err(self.corrupt("validated record changed on disk".into(), line_offset, seq));
                }
                NextLine::Line { offset: line_offset, bytes } => (line_offset, bytes),
            };
            let line_end = line_offset + line.len() as u64 + 1;
            if seq < self.known_events {
                if seq >= offset {
                    events.push(self.reread(line, line_offset, seq)?);
                }
            } else {
                match validate_new(line, seq, self.last_epoch, seq >= offset) {
                    Ok((event, epoch)) => {
                        self.accept(seq, line_offset, line_end, epoch);
                        events.extend(event);
                    }
                    Err(fault) => {
                        self.fault_at(line_offset, seq, fault, visible_end)?;
                        break;
                    }
                }
            }
            seq += 1;
        }
        Ok(events)
    }

    /// Decodes a line of the already validated prefix (its checksum is checked again).
    /// Record `seq` (its line at `line_offset..line_end`, of `epoch`) is validated: the
    /// view now knows the log up to its end.
    fn accept(&mut self, seq: u64, line_offset: u64, line_end: u64, epoch: Epoch) {
        self.index.note(seq, line_offset);
        self.known_events = seq + 1;
        self.known_end = line_end;
        self.last_epoch = epoch;
    }

    fn reread(&self, line: &[u8], line_offset: u64, seq: u64) -> Result<Event> {
        match format::decode_event_line(line) {
            Ok((event, _)) if event.seq.get() == seq => Ok(event),
            _ => Err(self.corrupt("validated record changed on disk".into(), line_offset, seq)),
        }
    }

    /// Classifies a bad line at the end of the known prefix: a torn tail is not an error
    /// (the read stops there); corruption is remembered and returned.
    fn fault_at(&mut self, offset: u64, seq: u64, fault: LineFault, visible_end: u64) -> Result<()> {
        let source = FileSource(self.file.as_ref());
        let status = format::classify_fault(&source, visible_end, offset, seq, fault)
            .map_err(|error| Error::io("read log", &error))?;
        let error = match status {
            ScanStatus::Clean | ScanStatus::TornTail { .. } => return Ok(()),
            ScanStatus::Corrupt { reason, offset, seq } => Error::Corrupt {
                reason,
                location: Location { artifact: self.artifact.clone(), offset: Some(offset), seq },
            },
            ScanStatus::Unsupported { reason, seq } => Error::FormatUnsupported {
                reason,
                location: Some(Location { artifact: self.artifact.clone(), offset: Some(offset), seq }),
            },
        };
        self.damage = Some(Damage { file_len: visible_end, error: error.clone() });
        Err(error)
    }
}

/// Validates a line past the known prefix; decodes it fully only when it is returned.
fn validate_new(line: &[u8], seq: u64, last_epoch: Epoch, decode: bool) -> Result<(Option<Event>, Epoch), LineFault> {
    if !decode {
        return format::check_event(line, seq, last_epoch).map(|epoch| (None, epoch));
    }
    let (event, epoch) = decode_checked(line, seq, last_epoch)?;
    Ok((Some(event), epoch))
}

/// Fully decodes a line that must be seq `seq`, not older than `last_epoch`, and
/// readable by this build.
fn decode_checked(line: &[u8], seq: u64, last_epoch: Epoch) -> Result<(Event, Epoch), LineFault> {
    let (event, epoch) = format::decode_event_line(line)?;
    check_seq_epoch(event.seq.get(), epoch, seq, last_epoch)?;
    berth_core::vocabulary::check_stored(&event).map_err(|error| LineFault::Unsupported(error.to_string()))?;
    Ok((event, epoch))
}

fn check_seq_epoch(found_seq: u64, epoch: Epoch, expected_seq: u64, previous_epoch: Epoch) -> Result<(), LineFault> {
    if found_seq != expected_seq {
        return Err(LineFault::Invalid(format!(
            "seq {found_seq} where seq {expected_seq} was expected (a gap or a duplicate)"
        )));
    }
    if epoch < previous_epoch {
        return Err(LineFault::Invalid(format!("epoch {epoch} after epoch {previous_epoch} (epochs never go back)")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_stays_bounded_and_floors_correctly() {
        let mut index = SparseIndex::new();
        for seq in 0..100_000u64 {
            index.note(seq, seq * 10);
            assert!(index.len() <= INDEX_ENTRIES_MAX);
        }
        for probe in [0u64, 1, 127, 128, 5_000, 99_999] {
            let (seq, offset) = index.floor(probe).unwrap();
            assert!(seq <= probe && probe - seq < 256, "{probe} -> {seq}");
            assert_eq!(offset, seq * 10);
        }
        index.truncate(500);
        assert!(index.floor(99_999).unwrap().0 < 500);
    }
}
