//! Reads that start past what a view has validated (R-S15): the tail found by a backward
//! scan from the end of the file, and the line of an arbitrary seq found by bisecting
//! over byte offsets, so neither reads the log from its header. Every record such a read
//! returns or steps on is checked (checksum, seq, content); records it skips over unread
//! are not. `docs/reference/storage-format.md` (*Partial reads*) says what this does and does not
//! verify, and why bisection was chosen over a persisted index.

use super::lines::{line_after, PreviousLine, Probe, ReverseLines};
use super::{FileSource, LogView};
use crate::format::{self, LineCursor, LineFault, NextLine, ScanStatus, READ_CHUNK_BYTES, SHORT_READ_CHUNK_BYTES};
use berth_core::{Error, Event, Location, Result};

/// A bisection stops when its bracket holds at most this many records…
pub const BISECT_RECORDS_MIN: u64 = 32;
/// …or at most this many bytes; a forward walk covers the rest.
pub const BISECT_BYTES_MIN: u64 = 16 * 1024;
/// A seq at most this many records below a known record start is reached by walking
/// back from it rather than by bisecting.
pub const WALK_BACK_RECORDS_MAX: u64 = 128;
/// A seq at most this many records above a verified position is reached by walking
/// forward from it rather than by bisecting (the next of several point reads in order).
pub const WALK_FORWARD_RECORDS_MAX: u64 = BISECT_RECORDS_MIN;
/// A range of at most this many records is read in `SHORT_READ_CHUNK_BYTES` chunks.
pub const SHORT_RANGE_RECORDS_MAX: u64 = 64;
/// Most record starts a view remembers from reads past its validated prefix.
pub const MARKS_MAX: usize = 64;

/// Seq `seq` starts at byte `offset` (or would, when `seq` is the log's length): every
/// record before it ends at or before `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub seq: u64,
    pub offset: u64,
}

fn io_error(error: std::io::Error) -> Error {
    Error::io("read log", &error)
}

impl LogView {
    /// The verified position nearest at or below `seq`: a remembered mark, or the end
    /// of the validated prefix (or its sparse index inside it).
    fn floor_position(&self, seq: u64) -> Position {
        let known = if seq >= self.known_events {
            Position { seq: self.known_events, offset: self.known_end }
        } else {
            let (seq, offset) = self.index.floor(seq).unwrap_or((0, self.header_len));
            Position { seq, offset }
        };
        match self.marks.range(..=seq).next_back() {
            Some((&seq, &offset)) if seq > known.seq => Position { seq, offset },
            _ => known,
        }
    }

    pub(super) fn remember(&mut self, position: Position) {
        if position.seq <= self.known_events {
            return; // the validated prefix and its index cover it
        }
        self.marks.insert(position.seq, position.offset);
        if self.marks.len() > MARKS_MAX {
            self.marks.pop_first();
        }
    }

    pub(super) fn corrupt_at(&self, reason: String, offset: u64, seq: Option<u64>) -> Error {
        Error::Corrupt { reason, location: Location { artifact: self.artifact.clone(), offset: Some(offset), seq } }
    }

    /// The error for a bad line that valid records follow (it is not a tail).
    pub(super) fn fault_inside(&self, fault: LineFault, offset: u64, seq: Option<u64>) -> Error {
        match fault {
            LineFault::Damaged => self.corrupt_at("damaged record inside the log".into(), offset, seq),
            LineFault::Invalid(reason) => self.corrupt_at(reason, offset, seq),
            LineFault::Unsupported(reason) => Error::FormatUnsupported {
                reason,
                location: Some(Location { artifact: self.artifact.clone(), offset: Some(offset), seq }),
            },
        }
    }

    /// The committed end of the log as it is now: the position after its last valid
    /// record, found by scanning back from `visible_end` to the nearest verified
    /// position. Bytes after that record must be a torn tail (or an append in progress),
    /// exactly as the forward scanner decides; anything else is `Corrupt`.
    pub(super) fn committed_end(&mut self, visible_end: u64) -> Result<Position> {
        if let Some(damage) = &self.damage {
            return Err(damage.error.clone()); // known damage at the end of the validated prefix
        }
        let floor = self.floor_position(u64::MAX);
        let source = FileSource(self.file.as_ref());
        let mut lines = ReverseLines::new(floor.offset, visible_end);
        let mut damaged_from = None;
        let last = loop {
            match lines.previous(&source).map_err(io_error)? {
                PreviousLine::Start => break None,
                PreviousLine::Unterminated { offset } | PreviousLine::Overlong { offset } => {
                    damaged_from = Some(offset)
                }
                PreviousLine::Line { offset, bytes } => match format::peek_event_line(bytes) {
                    Err(LineFault::Damaged) => damaged_from = Some(offset),
                    Err(fault) => return Err(self.fault_inside(fault, offset, None)),
                    Ok(peek) => break Some((Position { seq: peek.seq, offset }, offset + bytes.len() as u64 + 1)),
                },
            }
        };
        let end = match last {
            None => floor,
            Some((record, line_end)) => {
                self.check_after(floor, record)?;
                Position { seq: record.seq + 1, offset: line_end }
            }
        };
        if let Some(from) = damaged_from {
            self.check_torn(from, end.seq, visible_end)?;
        }
        self.remember(end);
        Ok(end)
    }

    /// A record found at or after the verified position `floor` carries a seq that fits.
    fn check_after(&self, floor: Position, record: Position) -> Result<()> {
        let fits = if record.offset == floor.offset { record.seq == floor.seq } else { record.seq > floor.seq };
        if fits {
            return Ok(());
        }
        Err(self.corrupt_at(
            format!("seq {} at byte {} where seqs from {} were expected", record.seq, record.offset, floor.seq),
            record.offset,
            Some(record.seq),
        ))
    }

    /// The bytes from `from` to `visible_end` hold no valid record: a torn tail.
    fn check_torn(&self, from: u64, seq: u64, visible_end: u64) -> Result<()> {
        let source = FileSource(self.file.as_ref());
        match format::classify_fault(&source, visible_end, from, seq, LineFault::Damaged).map_err(io_error)? {
            ScanStatus::Clean | ScanStatus::TornTail { .. } => Ok(()),
            ScanStatus::Corrupt { reason, offset, seq } => Err(self.corrupt_at(reason, offset, seq)),
            ScanStatus::Unsupported { reason, seq } => Err(Error::FormatUnsupported {
                reason,
                location: Some(Location { artifact: self.artifact.clone(), offset: Some(from), seq }),
            }),
        }
    }

    /// Events `offset .. offset + length` (clipped to `end`, the committed end found by
    /// `committed_end`), reading only near them.
    pub(super) fn read_located(&mut self, offset: u64, length: u64, end: Position) -> Result<Vec<Event>> {
        if offset >= end.seq || length == 0 {
            return Ok(Vec::new());
        }
        let length = length.min(end.seq - offset);
        let start = self.locate_below(offset, end)?;
        self.remember(start);
        let (events, after) = self.read_range(start, length, end.offset)?;
        self.remember(after);
        Ok(events)
    }

    /// Where seq `target` (below `end`, the committed end) starts, found between the
    /// nearest verified positions around it.
    pub(super) fn locate_below(&self, target: u64, end: Position) -> Result<Position> {
        let lower = self.floor_position(target);
        let upper = match self.marks.range(target..=end.seq).next() {
            Some((&seq, &byte)) => Position { seq, offset: byte },
            None => end,
        };
        self.locate(target, lower, upper)
    }

    /// Where seq `target` starts, between the verified positions `lower ≤ target ≤ upper`.
    fn locate(&self, target: u64, lower: Position, upper: Position) -> Result<Position> {
        if lower.seq == target {
            return Ok(lower);
        }
        if upper.seq == target {
            return Ok(upper);
        }
        if target - lower.seq <= WALK_FORWARD_RECORDS_MAX {
            return self.walk_forward(target, lower, upper);
        }
        if upper.seq - target <= WALK_BACK_RECORDS_MAX {
            return self.walk_back(target, lower, upper);
        }
        let lower = self.bisect(target, lower, upper)?;
        self.walk_forward(target, lower, upper)
    }

    /// Walks lines back from `upper`, each checked and one seq lower, down to `target`.
    fn walk_back(&self, target: u64, lower: Position, upper: Position) -> Result<Position> {
        let source = FileSource(self.file.as_ref());
        let mut lines = ReverseLines::new(lower.offset, upper.offset);
        let mut expected = upper.seq;
        loop {
            expected -= 1;
            let offset = match lines.previous(&source).map_err(io_error)? {
                PreviousLine::Line { offset, bytes } => {
                    let peek = format::peek_event_line(bytes)
                        .map_err(|fault| self.fault_inside(fault, offset, Some(expected)))?;
                    self.check_seq(peek.seq, expected, offset)?;
                    offset
                }
                PreviousLine::Unterminated { offset } | PreviousLine::Overlong { offset } => {
                    return Err(self.fault_inside(LineFault::Damaged, offset, Some(expected)))
                }
                PreviousLine::Start => {
                    return Err(self.corrupt_at(
                        format!("no record for seq {expected} before byte {}", upper.offset),
                        lower.offset,
                        Some(expected),
                    ))
                }
            };
            if expected == target {
                return Ok(Position { seq: target, offset });
            }
        }
    }

    fn check_seq(&self, found: u64, expected: u64, offset: u64) -> Result<()> {
        if found == expected {
            return Ok(());
        }
        Err(self.corrupt_at(format!("seq {found} where seq {expected} was expected"), offset, Some(expected)))
    }

    /// Narrows `lower` towards `target` by probing the line after the middle byte of the
    /// bracket, until the bracket is small; returns the best lower position.
    fn bisect(&self, target: u64, lower: Position, upper: Position) -> Result<Position> {
        let source = FileSource(self.file.as_ref());
        let (mut low, mut high) = (lower, upper);
        // No record at or below `target` starts at or after `high_bytes`.
        let mut high_bytes = upper.offset;
        while high.seq - low.seq > BISECT_RECORDS_MIN && high_bytes - low.offset > BISECT_BYTES_MIN {
            let middle = low.offset + (high_bytes - low.offset) / 2;
            let (offset, bytes) = match line_after(&source, middle, high_bytes, high.offset).map_err(io_error)? {
                Probe::Nothing => {
                    high_bytes = middle;
                    continue;
                }
                Probe::Overlong { offset } => return Err(self.fault_inside(LineFault::Damaged, offset, None)),
                Probe::Line { offset, bytes } => (offset, bytes),
            };
            let peek = format::peek_event_line(&bytes).map_err(|fault| self.fault_inside(fault, offset, None))?;
            if peek.seq <= low.seq || peek.seq >= high.seq {
                return Err(self.corrupt_at(
                    format!("seq {} at byte {offset}, between seqs {} and {}", peek.seq, low.seq, high.seq),
                    offset,
                    Some(peek.seq),
                ));
            }
            let found = Position { seq: peek.seq, offset };
            if found.seq <= target {
                low = found;
            } else {
                high = found;
                high_bytes = offset;
            }
            if found.seq == target {
                break;
            }
        }
        Ok(low)
    }

    /// Walks lines forward from `lower`, each checked and one seq higher, up to `target`.
    fn walk_forward(&self, target: u64, lower: Position, upper: Position) -> Result<Position> {
        let source = FileSource(self.file.as_ref());
        let mut cursor = LineCursor::with_chunk_bytes(lower.offset, upper.offset, SHORT_READ_CHUNK_BYTES);
        let mut expected = lower.seq;
        while expected < target {
            let (offset, bytes) = match cursor.next_line(&source).map_err(io_error)? {
                NextLine::Line { offset, bytes } => (offset, bytes),
                NextLine::Unterminated { offset } => {
                    return Err(self.fault_inside(LineFault::Damaged, offset, Some(expected)))
                }
                NextLine::End => {
                    return Err(self.corrupt_at(
                        format!("no record for seq {expected} before byte {}", upper.offset),
                        upper.offset,
                        Some(expected),
                    ))
                }
            };
            let peek =
                format::peek_event_line(bytes).map_err(|fault| self.fault_inside(fault, offset, Some(expected)))?;
            self.check_seq(peek.seq, expected, offset)?;
            expected += 1;
        }
        Ok(Position { seq: target, offset: cursor.position() })
    }

    /// Decodes `length` records from `start`, none past `end_offset`: each checksum,
    /// seq, epoch order (within the range; never below the header's) and the read-side
    /// vocabulary rule is checked. Returns them and the position after the last.
    fn read_range(&self, start: Position, length: u64, end_offset: u64) -> Result<(Vec<Event>, Position)> {
        let source = FileSource(self.file.as_ref());
        // A page of a few events should not read far past it; a long range reads in the
        // chunks a scan uses.
        let chunk_bytes = if length <= SHORT_RANGE_RECORDS_MAX { SHORT_READ_CHUNK_BYTES } else { READ_CHUNK_BYTES };
        let mut cursor = LineCursor::with_chunk_bytes(start.offset, end_offset, chunk_bytes);
        let mut events = Vec::with_capacity(usize::try_from(length).unwrap_or(0).min(1024));
        let mut previous_epoch = self.header_epoch;
        for seq in start.seq..start.seq + length {
            let (offset, bytes) = match cursor.next_line(&source).map_err(io_error)? {
                NextLine::Line { offset, bytes } => (offset, bytes),
                NextLine::Unterminated { offset } => {
                    return Err(self.fault_inside(LineFault::Damaged, offset, Some(seq)))
                }
                NextLine::End => {
                    return Err(self.corrupt_at(format!("no record for seq {seq}"), end_offset, Some(seq)))
                }
            };
            let (event, epoch) = super::decode_checked(bytes, seq, previous_epoch)
                .map_err(|fault| self.fault_inside(fault, offset, Some(seq)))?;
            previous_epoch = epoch;
            events.push(event);
        }
        Ok((events, Position { seq: start.seq + length, offset: cursor.position() }))
    }
}
