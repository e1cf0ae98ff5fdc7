//! Line access for reads that do not start at the validated prefix: walking lines
//! backwards from an end offset, and finding the first line that starts after an
//! arbitrary byte offset. Bounded buffers; pure over a `ReadAt` source.

use crate::format::{ReadAt, LINE_BYTES_MAX};
use std::io;

/// Bytes a backward walk reads per system call.
pub const REVERSE_CHUNK_BYTES: usize = 8 * 1024;
/// Bytes a probe reads first; doubled while they do not hold a whole line.
pub const PROBE_READ_BYTES: usize = 4 * 1024;

/// Reads exactly `buf.len()` bytes at `offset`: these bytes were inside the file when its
/// length was taken, so a short read means the file shrank under the reader.
fn read_exact_at<S: ReadAt + ?Sized>(source: &S, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        match source.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the log shrank while it was read")),
            Ok(read) => filled += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// One step of `ReverseLines`, from the end of the range towards its start.
#[derive(Debug, PartialEq, Eq)]
pub enum PreviousLine<'a> {
    /// A complete line starting at `offset`, without its `\n`.
    Line { offset: u64, bytes: &'a [u8] },
    /// The bytes from `offset` to the end of the range, which have no `\n`: only ever
    /// the first step. Never a record.
    Unterminated { offset: u64 },
    /// A line starting at `offset` longer than `LINE_BYTES_MAX`: never a record.
    Overlong { offset: u64 },
    /// The start of the range was reached.
    Start,
}

/// Where the last `\n` below an offset is.
enum Newline {
    /// At `offset`; `overlong` when it is more than one line's length below.
    At { offset: u64, overlong: bool },
    /// None down to the start of the range.
    None { overlong: bool },
}

/// Walks the lines of `source[floor..end]` from the last one back, holding at most one
/// line plus one chunk.
pub struct ReverseLines {
    floor: u64,
    /// File offset of `buf[0]`.
    buf_offset: u64,
    buf: Vec<u8>,
    /// End of the part of the range not returned yet.
    region_end: u64,
    started: bool,
}

impl ReverseLines {
    pub fn new(floor: u64, end: u64) -> ReverseLines {
        let end = end.max(floor);
        ReverseLines { floor, buf_offset: end, buf: Vec::new(), region_end: end, started: false }
    }

    pub fn previous<S: ReadAt + ?Sized>(&mut self, source: &S) -> io::Result<PreviousLine<'_>> {
        self.buf.truncate(usize::try_from(self.region_end.saturating_sub(self.buf_offset)).unwrap_or(usize::MAX));
        if self.region_end <= self.floor {
            return Ok(PreviousLine::Start);
        }
        if !self.started {
            self.started = true;
            let region_end = self.region_end;
            match self.last_newline_below(source, region_end)? {
                Newline::At { offset, .. } if offset + 1 == region_end => {}
                Newline::At { offset, .. } => {
                    return Ok(self.cut(offset + 1, PreviousLine::Unterminated { offset: offset + 1 }))
                }
                Newline::None { .. } => {
                    return Ok(self.cut(self.floor, PreviousLine::Unterminated { offset: self.floor }))
                }
            }
        }
        // The region ends with the `\n` of its last line.
        let line_end = self.region_end - 1;
        let start = match self.last_newline_below(source, line_end)? {
            Newline::At { offset, overlong: true } => {
                return Ok(self.cut(offset + 1, PreviousLine::Overlong { offset: offset + 1 }))
            }
            Newline::None { overlong: true } => {
                return Ok(self.cut(self.floor, PreviousLine::Overlong { offset: self.floor }))
            }
            Newline::At { offset, overlong: false } => offset + 1,
            Newline::None { overlong: false } => self.floor,
        };
        self.region_end = start;
        let from = usize::try_from(start - self.buf_offset).unwrap_or(usize::MAX);
        let to = usize::try_from(line_end - self.buf_offset).unwrap_or(usize::MAX);
        Ok(PreviousLine::Line { offset: start, bytes: &self.buf[from..to] })
    }

    /// Ends the unreturned region at `region_end` and returns `step`.
    fn cut(&mut self, region_end: u64, step: PreviousLine<'static>) -> PreviousLine<'static> {
        self.region_end = region_end;
        step
    }

    /// The last `\n` in `floor..below`, loading chunks backwards. Past one line's length
    /// the bytes in between are dropped (they are one overlong line, never returned).
    fn last_newline_below<S: ReadAt + ?Sized>(&mut self, source: &S, below: u64) -> io::Result<Newline> {
        let mut searched_below = below;
        loop {
            let upto = usize::try_from(searched_below - self.buf_offset).unwrap_or(usize::MAX).min(self.buf.len());
            if let Some(index) = memchr::memrchr(b'\n', &self.buf[..upto]) {
                let offset = self.buf_offset + index as u64;
                return Ok(Newline::At { offset, overlong: below - offset > LINE_BYTES_MAX as u64 + 1 });
            }
            let overlong = below - self.buf_offset > LINE_BYTES_MAX as u64 + 1;
            if self.buf_offset == self.floor {
                return Ok(Newline::None { overlong });
            }
            searched_below = self.buf_offset;
            if overlong {
                self.buf.clear(); // bounded memory: these bytes are never returned
            }
            self.load_chunk_before(source)?;
        }
    }

    fn load_chunk_before<S: ReadAt + ?Sized>(&mut self, source: &S) -> io::Result<()> {
        let start = self.buf_offset.saturating_sub(REVERSE_CHUNK_BYTES as u64).max(self.floor);
        let mut chunk = vec![0u8; usize::try_from(self.buf_offset - start).unwrap_or(REVERSE_CHUNK_BYTES)];
        read_exact_at(source, &mut chunk, start)?;
        chunk.extend_from_slice(&self.buf);
        self.buf = chunk;
        self.buf_offset = start;
        Ok(())
    }
}

/// What `line_after` found.
#[derive(Debug, PartialEq, Eq)]
pub enum Probe {
    /// No line starts in `from..limit`.
    Nothing,
    /// The first line starting in `from..limit`, at `offset`, without its `\n`.
    Line { offset: u64, bytes: Vec<u8> },
    /// The line around `from` (or the one after it) is longer than `LINE_BYTES_MAX`.
    Overlong { offset: u64 },
}

/// The first line that starts in `from..limit` (`from > 0`): the line after the first
/// `\n` at or after `from - 1`. `end` (≥ `limit`) is a line start the line ends by.
/// Reads `PROBE_READ_BYTES` first and doubles until the line is in the buffer.
pub fn line_after<S: ReadAt + ?Sized>(source: &S, from: u64, limit: u64, end: u64) -> io::Result<Probe> {
    let begin = from.saturating_sub(1);
    let available = end.saturating_sub(begin);
    let most = 2 * (LINE_BYTES_MAX as u64 + 1);
    let mut want = (PROBE_READ_BYTES as u64).min(available);
    loop {
        let mut buf = vec![0u8; usize::try_from(want).unwrap_or(usize::MAX)];
        read_exact_at(source, &mut buf, begin)?;
        let whole = want == available || want >= most;
        let first = memchr::memchr(b'\n', &buf);
        match first {
            Some(first) if begin + first as u64 + 1 >= limit => return Ok(Probe::Nothing),
            Some(first) if first > LINE_BYTES_MAX + 1 => return Ok(Probe::Overlong { offset: from }),
            Some(first) => {
                let offset = begin + first as u64 + 1;
                match memchr::memchr(b'\n', &buf[first + 1..]) {
                    Some(length) if length > LINE_BYTES_MAX => return Ok(Probe::Overlong { offset }),
                    Some(length) => {
                        return Ok(Probe::Line { offset, bytes: buf[first + 1..first + 1 + length].to_vec() })
                    }
                    None if whole => return Ok(Probe::Overlong { offset }),
                    None => {}
                }
            }
            None if want == available => return Ok(Probe::Nothing),
            None if whole => return Ok(Probe::Overlong { offset: from }),
            None => {}
        }
        want = (want * 2).min(available).min(most);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backwards(bytes: &[u8], floor: u64) -> Vec<String> {
        let mut lines = ReverseLines::new(floor, bytes.len() as u64);
        let mut seen = Vec::new();
        loop {
            match lines.previous(bytes).unwrap() {
                PreviousLine::Start => return seen,
                PreviousLine::Line { offset, bytes } => {
                    seen.push(format!("{offset}:{}", String::from_utf8_lossy(bytes)))
                }
                PreviousLine::Unterminated { offset } => seen.push(format!("{offset}:unterminated")),
                PreviousLine::Overlong { offset } => seen.push(format!("{offset}:overlong")),
            }
        }
    }

    #[test]
    fn walks_lines_backwards_with_an_unterminated_suffix_first() {
        assert_eq!(backwards(b"ab\ncd\nef", 0), ["6:unterminated", "3:cd", "0:ab"]);
        assert_eq!(backwards(b"ab\ncd\n", 0), ["3:cd", "0:ab"]);
        assert_eq!(backwards(b"ab\ncd\n", 3), ["3:cd"]);
        assert_eq!(backwards(b"abc", 0), ["0:unterminated"]);
        assert_eq!(backwards(b"", 0), Vec::<String>::new());
        assert_eq!(backwards(b"\n\n", 0), ["1:", "0:"]);
    }

    proptest::proptest! {
        /// The backward walk yields exactly the lines a forward split finds, last first,
        /// with an unterminated suffix first, from any floor that is a line start.
        #[test]
        fn backward_walk_mirrors_a_forward_split(
            lines in proptest::collection::vec(proptest::collection::vec(0u8..=255, 0..3_000), 0..40),
            suffix in proptest::collection::vec(0u8..=255, 0..100),
            skip in 0usize..40,
        ) {
            let lines: Vec<Vec<u8>> = lines.into_iter().map(|line| line.into_iter().filter(|b| *b != b'\n').collect()).collect();
            let suffix: Vec<u8> = suffix.into_iter().filter(|b| *b != b'\n').collect();
            let mut bytes = Vec::new();
            let mut expected = Vec::new();
            let skip = skip.min(lines.len());
            let mut floor = 0;
            for (index, line) in lines.iter().enumerate() {
                if index == skip {
                    floor = bytes.len() as u64;
                }
                if index >= skip {
                    expected.push(format!("{}:{}", bytes.len(), String::from_utf8_lossy(line)));
                }
                bytes.extend_from_slice(line);
                bytes.push(b'\n');
            }
            if skip == lines.len() {
                floor = bytes.len() as u64;
            }
            if !suffix.is_empty() {
                expected.push(format!("{}:unterminated", bytes.len()));
                bytes.extend_from_slice(&suffix);
            }
            expected.reverse();
            proptest::prop_assert_eq!(backwards(&bytes, floor), expected);
        }
    }

    #[test]
    fn walks_lines_across_chunk_boundaries() {
        let mut bytes = Vec::new();
        let mut expected = Vec::new();
        for index in 0..2_000u64 {
            let line = format!("line-{index}-{}", "x".repeat((index % 37) as usize));
            expected.push(format!("{}:{line}", bytes.len()));
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
        }
        expected.reverse();
        assert_eq!(backwards(&bytes, 0), expected);
    }

    #[test]
    fn an_overlong_line_is_reported_with_its_start() {
        let mut bytes = b"ab\n".to_vec();
        bytes.extend(std::iter::repeat_n(b'x', LINE_BYTES_MAX + 10));
        bytes.extend_from_slice(b"\ncd\n");
        let seen = backwards(&bytes, 0);
        assert_eq!(seen, [format!("{}:cd", LINE_BYTES_MAX + 14), "3:overlong".to_owned(), "0:ab".to_owned()]);
    }

    #[test]
    fn line_after_finds_the_next_line_start() {
        let bytes = b"aaaa\nbbbb\ncccc\n";
        let line = |offset: u64, text: &str| Probe::Line { offset, bytes: text.as_bytes().to_vec() };
        assert_eq!(line_after(&bytes[..], 1, 15, 15).unwrap(), line(5, "bbbb"));
        assert_eq!(line_after(&bytes[..], 5, 15, 15).unwrap(), line(5, "bbbb"));
        assert_eq!(line_after(&bytes[..], 6, 15, 15).unwrap(), line(10, "cccc"));
        assert_eq!(line_after(&bytes[..], 6, 10, 15).unwrap(), Probe::Nothing);
        assert_eq!(line_after(&bytes[..], 11, 15, 15).unwrap(), Probe::Nothing);
        // The line may end past `limit` (a probe bound that is not a line start).
        assert_eq!(line_after(&bytes[..], 6, 12, 15).unwrap(), line(10, "cccc"));
    }
}
