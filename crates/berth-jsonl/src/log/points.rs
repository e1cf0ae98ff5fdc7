//! Point reads (`read_seqs`): the events at many seqs of one log in one forward pass.
//! Each returned event is decoded and checked as a `read` of its run would check it,
//! but the pass pays once what a `read` pays per call (the file length, the committed
//! end, a new cursor and its first chunk), steps over the records between two wanted
//! seqs by their line ends without decoding or checking them, and jumps (by the sparse
//! index inside the validated prefix, by `seek::locate` past it) only where the gap is
//! wide. What that verifies is in `docs/reference/storage-format.md` (*Point reads*).

use super::seek::{Position, SHORT_RANGE_RECORDS_MAX, WALK_FORWARD_RECORDS_MAX};
use super::{validate_new, FileSource, LogView};
use crate::format::{LineCursor, LineFault, NextLine, READ_CHUNK_BYTES, SHORT_READ_CHUNK_BYTES};
use berth_core::{Error, Event, Result};

/// How a forward pass over the validated prefix ended.
enum Forward {
    /// Every seq was read, or the log ends before the next one.
    Done,
    /// `seqs[n..]` start past the validated prefix: a seek reads them.
    Past(usize),
}

impl LogView {
    /// The events at `seqs` (distinct, ascending) of the valid prefix inside
    /// `0..visible_end`: those of the longest prefix of `seqs` below its end, in order.
    /// A run of consecutive seqs that starts inside the validated prefix (or at its end)
    /// is read forward, as `read` reads it; the runs after the first that starts past
    /// it are found from the end of the file (`seek`), as `read` finds such a run.
    pub fn read_seqs(&mut self, seqs: &[u64], visible_end: u64) -> Result<Vec<Event>> {
        self.refresh(visible_end);
        let mut events = Vec::with_capacity(seqs.len());
        let rest = match seqs.first() {
            None => return Ok(events),
            Some(&first) if first > self.known_events => seqs,
            Some(_) => match self.forward_seqs(seqs, visible_end, &mut events)? {
                Forward::Done => return Ok(events),
                Forward::Past(read) => &seqs[read..],
            },
        };
        let end = self.committed_end(visible_end)?;
        self.located_seqs(rest, end, &mut events)?;
        Ok(events)
    }

    /// Reads `seqs` forward from the validated prefix (extending it through a run that
    /// reaches past its end), until a run starts past it.
    fn forward_seqs(&mut self, seqs: &[u64], visible_end: u64, events: &mut Vec<Event>) -> Result<Forward> {
        let first = seqs[0];
        let (mut seq, start) = if first < self.known_events {
            self.index.floor(first).unwrap_or((0, self.header_len))
        } else {
            (self.known_events, self.known_end)
        };
        let mut cursor = LineCursor::new(start, visible_end);
        let mut next = 0;
        while let Some(&target) = seqs.get(next) {
            if target > seq {
                // A run starts here: where `read` of it would start, as it would.
                if target > self.known_events {
                    return Ok(Forward::Past(next));
                }
                if target == self.known_events && self.all_known(visible_end) {
                    return Ok(Forward::Done);
                }
                let (floor_seq, floor_offset) = if target < self.known_events {
                    self.index.floor(target).unwrap_or((0, self.header_len))
                } else {
                    (self.known_events, self.known_end)
                };
                if floor_seq > seq {
                    seq = floor_seq;
                    cursor.skip_to(floor_offset);
                }
            }
            if seq >= self.known_events {
                if let Some(damage) = &self.damage {
                    return Err(damage.error.clone());
                }
            }
            let source = FileSource(self.file.as_ref());
            let (line_offset, line) = match cursor.next_line(&source).map_err(|error| Error::io("read log", &error))? {
                NextLine::End => return Ok(Forward::Done),
                NextLine::Unterminated { offset: line_offset } if seq >= self.known_events => {
                    self.fault_at(line_offset, seq, LineFault::Damaged, visible_end)?;
                    return Ok(Forward::Done);
                }
                NextLine::Unterminated { offset: line_offset } => {
                    return Err(self.corrupt("validated record changed on disk".into(), line_offset, seq));
                }
                NextLine::Line { offset: line_offset, bytes } => (line_offset, bytes),
            };
            let wanted = seq == target;
            if seq < self.known_events {
                if wanted {
                    events.push(self.reread(line, line_offset, seq)?);
                }
            } else {
                let line_end = line_offset + line.len() as u64 + 1;
                match validate_new(line, seq, self.last_epoch, wanted) {
                    Ok((event, epoch)) => {
                        self.accept(seq, line_offset, line_end, epoch);
                        events.extend(event);
                    }
                    Err(fault) => {
                        self.fault_at(line_offset, seq, fault, visible_end)?;
                        return Ok(Forward::Done);
                    }
                }
            }
            if wanted {
                next += 1;
            }
            seq += 1;
        }
        Ok(Forward::Done)
    }

    /// Reads `seqs` (all past the validated prefix) below `end`, the committed end:
    /// finds the first with `seek::locate`, then walks forward line by line, decoding and
    /// checking the wanted records (checksum, seq, epoch order among them, vocabulary) and
    /// stepping over the others by their line ends, as the validated prefix is stepped
    /// over; a gap wider than a short walk is crossed by `locate` again.
    fn located_seqs(&mut self, seqs: &[u64], end: Position, events: &mut Vec<Event>) -> Result<()> {
        let seqs = &seqs[..seqs.partition_point(|seq| *seq < end.seq)];
        let (Some(&first), Some(&last)) = (seqs.first(), seqs.last()) else {
            return Ok(());
        };
        let span = last - first + 1;
        // A dense set reads in a scan's chunks; a short or sparse one in short chunks.
        let dense = span > SHORT_RANGE_RECORDS_MAX && span / seqs.len() as u64 <= WALK_FORWARD_RECORDS_MAX;
        let chunk_bytes = if dense { READ_CHUNK_BYTES } else { SHORT_READ_CHUNK_BYTES };
        let start = self.locate_below(first, end)?;
        self.remember(start);
        let mut cursor = LineCursor::with_chunk_bytes(start.offset, end.offset, chunk_bytes);
        let mut seq = start.seq;
        let mut previous_epoch = self.header_epoch;
        for &target in seqs {
            if target - seq > WALK_FORWARD_RECORDS_MAX {
                self.remember(Position { seq, offset: cursor.position() });
                let found = self.locate_below(target, end)?;
                cursor.skip_to(found.offset);
                seq = found.seq;
            }
            let source = FileSource(self.file.as_ref());
            loop {
                let (offset, bytes) = match cursor.next_line(&source).map_err(|error| Error::io("read log", &error))? {
                    NextLine::Line { offset, bytes } => (offset, bytes),
                    NextLine::Unterminated { offset } => {
                        return Err(self.fault_inside(LineFault::Damaged, offset, Some(seq)))
                    }
                    NextLine::End => {
                        return Err(self.corrupt_at(format!("no record for seq {seq}"), end.offset, Some(seq)))
                    }
                };
                if seq == target {
                    let (event, epoch) = super::decode_checked(bytes, seq, previous_epoch)
                        .map_err(|fault| self.fault_inside(fault, offset, Some(seq)))?;
                    previous_epoch = epoch;
                    events.push(event);
                    seq += 1;
                    break;
                }
                // Stepped over by its line end, unchecked: a lost or extra line end
                // shifts the count, and the next wanted record's seq check fails.
                seq += 1;
            }
        }
        self.remember(Position { seq, offset: cursor.position() });
        Ok(())
    }
}
