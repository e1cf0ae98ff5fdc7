//! The embedded backend's on-disk format: every file name, magic string and version
//! constant, the record codec, and the recovery scanner. Pure: the only input is bytes
//! (or a `ReadAt` source the caller hands in); nothing here opens a file.
//!
//! A log is JSON Lines. Line 1 is the header record, each later line one event record.
//! Every record ends with `,"crc":"<8 lowercase hex>"}` and `\n`; the CRC32C covers every
//! byte of the line before `,"crc":"`, and the `\n` is the commit marker. See
//! `docs/reference/storage-format.md` for the byte-level description and the recovery rules.

use berth_core::vocabulary;
use berth_core::{Epoch, Error, Event, EventType, Location, RunId, SessionHeader, Timestamp, SESSION_FORMAT_VERSION};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::io;

/// Directory under the root holding one directory per tenant.
pub const TENANTS_DIR: &str = "tenants";
/// Directory under a tenant holding one directory per session.
pub const SESSIONS_DIR: &str = "sessions";
/// The session log.
pub const LOG_FILE: &str = "session.jsonl";
/// The writer lease's lock file: never unlinked while the session exists.
pub const LOCK_FILE: &str = "session.lock";
/// The durable writer epoch.
pub const EPOCH_FILE: &str = "session.epoch";
/// Temp file the epoch is written to before its atomic rename.
pub const EPOCH_TEMP_FILE: &str = "session.epoch.tmp";
/// Prefix of the temp file a log is built in before it is published (`<prefix><epoch>`).
pub const LOG_TEMP_PREFIX: &str = "session.jsonl.tmp-";
/// Prefix of a kept copy of a truncated torn tail (`<prefix><epoch>-<offset>`).
pub const BROKEN_PREFIX: &str = "session.jsonl.broken-";

/// The `berth` field of a header record.
pub const HEADER_MAGIC: &str = "session";
/// The `berth` field of an epoch record.
pub const EPOCH_MAGIC: &str = "epoch";
/// The newest log format version this build reads (the header line's `version`). Log
/// versions 0 and 1 are session format versions 0 and 1; log version 2
/// (`LOG_FORMAT_VERSION_ZERO_TAIL`) holds session format version 1 in a file that may end
/// in a zero-filled, preallocated tail (`zero_tail`). A berth that reads only up to
/// version 1 refuses a version-2 log as "written by a newer berth".
pub const LOG_FORMAT_VERSION: u32 = LOG_FORMAT_VERSION_ZERO_TAIL;
/// The log format version of a log that may carry a zero-filled, preallocated tail.
pub const LOG_FORMAT_VERSION_ZERO_TAIL: u32 = 2;
const _: () = assert!(SESSION_FORMAT_VERSION == 1, "a new session format version needs a new log version");

/// The log format version a header of session format `session_version` is written with.
/// Only a log of the current session format can be preallocated.
pub fn log_version(session_version: u32, zero_tail: bool) -> u32 {
    if zero_tail && session_version == SESSION_FORMAT_VERSION {
        LOG_FORMAT_VERSION_ZERO_TAIL
    } else {
        session_version
    }
}

pub mod zero_tail;

/// Every record ends with `CRC_OPEN`, 8 lowercase hex digits, `CRC_CLOSE`, then `\n`.
pub const CRC_OPEN: &[u8] = b",\"crc\":\"";
pub const CRC_CLOSE: &[u8] = b"\"}";
/// Bytes of the trailer after the checksummed body (without the `\n`).
pub const CRC_TRAILER_BYTES: usize = CRC_OPEN.len() + 8 + CRC_CLOSE.len();
/// Every event record starts with these bytes (the encoder's fixed field order).
pub const EVENT_RECORD_PREFIX: &[u8] = b"{\"seq\":";

/// The longest line the scanner accepts. An event is at most `EVENT_BYTES_MAX` (data,
/// type and 64 bytes of envelope); the rest covers the run id, epoch and trailer.
pub const LINE_BYTES_MAX: usize = berth_core::limits::EVENT_BYTES_MAX + 4096;
/// Bytes a scan reads per system call.
pub const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Bytes a read of a few lines (the header at open, a short range) reads per call.
pub const SHORT_READ_CHUNK_BYTES: usize = 8 * 1024;

// ---------------------------------------------------------------------------------------
// Path segments

fn is_plain_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'~' | b'-')
}

/// Encodes an id as one path segment, injectively and traversal-proof: every byte
/// outside `[A-Za-z0-9._~-]`, and a leading `.`, becomes `%XX`. Valid ids never contain
/// `%`, so the map is injective; the result of a valid id (≤ 128 bytes) is ≤ 130 bytes.
pub fn encode_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    for (index, byte) in text.bytes().enumerate() {
        if is_plain_byte(byte) && !(index == 0 && byte == b'.') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The inverse of `encode_segment`; `None` for a name it could not have produced.
pub fn decode_segment(name: &str) -> Option<String> {
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = std::str::from_utf8(bytes.get(index + 1..index + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    let text = String::from_utf8(out).ok()?;
    (encode_segment(&text) == name).then_some(text)
}

/// A session's directory relative to the data root: `tenants/<tenant>/sessions/<id>`,
/// each id one encoded segment.
pub fn session_dir_in_root(key: &berth_core::SessionKey) -> std::path::PathBuf {
    [TENANTS_DIR, &encode_segment(key.tenant.as_str()), SESSIONS_DIR, &encode_segment(key.id.as_str())].iter().collect()
}

// ---------------------------------------------------------------------------------------
// Encoding

fn seal(mut line: Vec<u8>) -> Vec<u8> {
    let crc = crc32c::crc32c(&line);
    line.extend_from_slice(CRC_OPEN);
    line.extend_from_slice(format!("{crc:08x}").as_bytes());
    line.extend_from_slice(CRC_CLOSE);
    line.push(b'\n');
    line
}

/// Replaces the closing `}` of a serialized object with `,"epoch":N` (still unsealed).
fn with_epoch(mut object: Vec<u8>, epoch: Epoch) -> Vec<u8> {
    if object.last() == Some(&b'}') {
        object.pop();
    }
    object.extend_from_slice(format!(",\"epoch\":{}", epoch.0).as_bytes());
    object
}

/// The header record: `{"berth":"session","version":…,…header fields…,"epoch":N,"crc":"…"}\n`,
/// of a classic log (no zero tail; its `version` is the session format version).
pub fn encode_header_line(header: &SessionHeader, epoch: Epoch) -> Vec<u8> {
    encode_header_line_for(header, epoch, false)
}

/// The header record of a log that may carry a zero-filled tail (`zero_tail`; log
/// format version 2 for a header of the current session format), or of a classic log.
pub fn encode_header_line_for(header: &SessionHeader, epoch: Epoch, zero_tail: bool) -> Vec<u8> {
    // Serializing a header (strings, integers, plain structs) into memory cannot fail.
    let mut fields = serde_json::to_vec(header).unwrap_or_else(|_| b"{}".to_vec());
    let version = log_version(header.version, zero_tail);
    if version != header.version {
        // `version` is the header's first field (`SessionHeader`'s serde order).
        let old = format!("{{\"version\":{},", header.version);
        if fields.starts_with(old.as_bytes()) {
            let new = format!("{{\"version\":{version},");
            fields.splice(..old.len(), new.into_bytes());
        }
    }
    let mut line = format!("{{\"berth\":\"{HEADER_MAGIC}\"").into_bytes();
    if fields.len() > 2 {
        line.push(b',');
        line.extend_from_slice(&fields[1..fields.len() - 1]);
    }
    line.push(b'}');
    seal(with_epoch(line, epoch))
}

/// One event record: the canonical envelope, then `"epoch":N,"crc":"…"}\n`.
pub fn encode_event_line(event: &Event, epoch: Epoch) -> Vec<u8> {
    // The envelope holds validated strings, integers and raw JSON: cannot fail.
    let envelope = serde_json::to_vec(event).unwrap_or_else(|_| b"{}".to_vec());
    seal(with_epoch(envelope, epoch))
}

/// The epoch record stored in `session.epoch`.
pub fn encode_epoch_record(epoch: Epoch) -> Vec<u8> {
    seal(format!("{{\"berth\":\"{EPOCH_MAGIC}\",\"epoch\":{}", epoch.0).into_bytes())
}

// ---------------------------------------------------------------------------------------
// Decoding one record

/// The checksummed body of a complete line (without its `\n`), or `None` if the trailer
/// is malformed or the checksum does not match.
pub fn checked_body(line: &[u8]) -> Option<&[u8]> {
    if line.len() < CRC_TRAILER_BYTES + 2 {
        return None;
    }
    let (body, trailer) = line.split_at(line.len() - CRC_TRAILER_BYTES);
    if &trailer[..CRC_OPEN.len()] != CRC_OPEN || &trailer[CRC_OPEN.len() + 8..] != CRC_CLOSE {
        return None;
    }
    let hex = &trailer[CRC_OPEN.len()..CRC_OPEN.len() + 8];
    if !hex.iter().all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(byte)) {
        return None;
    }
    let stored = u32::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
    (crc32c::crc32c(body) == stored).then_some(body)
}

/// Why one line is not a valid record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LineFault {
    /// The line is incomplete or fails its checksum: what a crash can leave behind.
    Damaged,
    /// The checksum holds but the content is wrong (parse, seq, epoch): a crash cannot
    /// produce this, so it is corruption wherever it is.
    Invalid(String),
    /// A valid record this build cannot interpret.
    Unsupported(String),
}

/// A decoded header record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderRecord {
    pub header: SessionHeader,
    pub epoch: Epoch,
    /// Log format version 2: the file may end in a zero-filled, preallocated tail, which
    /// is unwritten space, never data and never damage.
    pub zero_tail: bool,
}

#[derive(Deserialize)]
struct HeaderProbe<'a> {
    #[serde(borrow)]
    berth: Option<Cow<'a, str>>,
    version: Option<u64>,
}

/// Decodes line 1 (without its `\n`). The version gate runs *before* the checksum, so a
/// newer berth may change everything after `"berth"` and `"version"` and still be
/// refused as "written by a newer berth", never misread as corruption.
pub fn decode_header_line(line: &[u8]) -> Result<HeaderRecord, LineFault> {
    if let Ok(probe) = serde_json::from_slice::<HeaderProbe<'_>>(line) {
        if probe.berth.as_deref() == Some(HEADER_MAGIC) {
            if let Some(version) = probe.version {
                if version > u64::from(LOG_FORMAT_VERSION) {
                    return Err(LineFault::Unsupported(format!(
                        "session log format version {version} was written by a newer berth (this build reads \
                         log versions up to {LOG_FORMAT_VERSION}); upgrade berth to open it"
                    )));
                }
            }
        }
    }
    let Some(body) = checked_body(line) else {
        return Err(LineFault::Damaged);
    };
    let mut fields: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(line)
        .map_err(|error| LineFault::Invalid(format!("header is not a JSON object: {error}")))?;
    debug_assert!(body.len() < line.len());
    if fields.remove("berth").as_ref().and_then(|value| value.as_str()) != Some(HEADER_MAGIC) {
        return Err(LineFault::Invalid(format!("line 1 is not a berth header (no \"berth\":\"{HEADER_MAGIC}\")")));
    }
    fields.remove("crc");
    let zero_tail =
        fields.get("version").and_then(|value| value.as_u64()) == Some(u64::from(LOG_FORMAT_VERSION_ZERO_TAIL));
    if zero_tail {
        // Log version 2 holds a header of session format version 1.
        fields.insert("version".into(), serde_json::Value::from(SESSION_FORMAT_VERSION));
    }
    let epoch = fields
        .remove("epoch")
        .and_then(|value| value.as_u64())
        .filter(|epoch| *epoch > 0)
        .ok_or_else(|| LineFault::Invalid("header has no positive epoch".into()))?;
    let header: SessionHeader = serde_json::from_value(serde_json::Value::Object(fields))
        .map_err(|error| LineFault::Invalid(format!("header fields: {error}")))?;
    if let Err(error) = berth_core::header::check_version(header.version, None) {
        return Err(LineFault::Unsupported(error.to_string()));
    }
    header.validate().map_err(|error| LineFault::Invalid(format!("header: {error}")))?;
    Ok(HeaderRecord { header, epoch: Epoch(epoch), zero_tail })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventRecordWire<'a> {
    seq: u64,
    #[serde(rename = "type", borrow)]
    event_type: Cow<'a, str>,
    time: Timestamp,
    #[serde(default)]
    run: Option<RunId>,
    data: Box<RawValue>,
    #[serde(default)]
    ignorable: Option<bool>,
    #[serde(default)]
    idempotency: Option<Box<berth_core::IdempotencyMark>>,
    epoch: u64,
    #[serde(rename = "crc", borrow)]
    _crc: Cow<'a, str>,
}

/// Fully decodes an event record (without its `\n`): checksum, then envelope. `data` is
/// kept as the raw text the checksum covered (no `Value` is built).
pub fn decode_event_line(line: &[u8]) -> Result<(Event, Epoch), LineFault> {
    if checked_body(line).is_none() {
        return Err(LineFault::Damaged);
    }
    let wire: EventRecordWire<'_> =
        serde_json::from_slice(line).map_err(|error| LineFault::Invalid(format!("event record: {error}")))?;
    let event_type =
        EventType::parse(&wire.event_type).map_err(|error| LineFault::Invalid(format!("event record: {error}")))?;
    let event = Event {
        seq: berth_core::Seq(wire.seq),
        event_type,
        time: wire.time,
        run: wire.run,
        data: berth_core::JsonText::from_trusted_raw(wire.data),
        ignorable: wire.ignorable.unwrap_or(false),
        idempotency: wire.idempotency,
    };
    Ok((event, Epoch(wire.epoch)))
}

/// What the scanner needs from an event record without decoding its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordPeek {
    pub seq: u64,
    pub epoch: Epoch,
}

fn parse_digits(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || bytes.len() > 20 || (bytes.len() > 1 && bytes[0] == b'0') {
        return None;
    }
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// Reads `seq`, `type` and `epoch` from the fixed layout the encoder writes, without
/// touching `data`. `None` if the line does not have that layout.
fn peek_fixed_layout(body: &[u8]) -> Option<(u64, &str, u64)> {
    let rest = body.strip_prefix(EVENT_RECORD_PREFIX)?;
    let digits = rest.iter().take_while(|byte| byte.is_ascii_digit()).count();
    let seq = parse_digits(&rest[..digits])?;
    let rest = rest[digits..].strip_prefix(b",\"type\":\"")?;
    let type_len = rest.iter().position(|byte| *byte == b'"')?;
    let event_type = std::str::from_utf8(&rest[..type_len]).ok()?;
    let epoch_digits = body.iter().rev().take_while(|byte| byte.is_ascii_digit()).count();
    let epoch = parse_digits(&body[body.len() - epoch_digits..])?;
    body[..body.len() - epoch_digits].strip_suffix(b",\"epoch\":")?;
    Some((seq, event_type, epoch))
}

/// Checks an event record (without its `\n`) cheaply: checksum, seq, epoch and the
/// read-side vocabulary rule. Falls back to a full decode when the layout is unusual or
/// the type needs the `ignorable` flag.
pub fn peek_event_line(line: &[u8]) -> Result<RecordPeek, LineFault> {
    let Some(body) = checked_body(line) else {
        return Err(LineFault::Damaged);
    };
    if let Some((seq, event_type, epoch)) = peek_fixed_layout(body) {
        let readable = vocabulary::is_known(event_type) || !vocabulary::is_reserved(event_type);
        let plain = readable && EventType::parse(event_type).is_ok();
        if plain {
            return Ok(RecordPeek { seq, epoch: Epoch(epoch) });
        }
    }
    let (event, epoch) = decode_event_line(line)?;
    vocabulary::check_stored(&event).map_err(|error| LineFault::Unsupported(error.to_string()))?;
    Ok(RecordPeek { seq: event.seq.get(), epoch })
}

/// Decodes `session.epoch`'s content.
pub fn decode_epoch_record(bytes: &[u8]) -> Option<Epoch> {
    let line = bytes.strip_suffix(b"\n")?;
    let body = checked_body(line)?;
    let prefix = format!("{{\"berth\":\"{EPOCH_MAGIC}\",\"epoch\":");
    parse_digits(body.strip_prefix(prefix.as_bytes())?).map(Epoch)
}

// ---------------------------------------------------------------------------------------
// Reading lines from a source with a bounded buffer

/// A byte source the scanner reads from: a slice in memory, or an open file.
pub trait ReadAt {
    /// Reads up to `buf.len()` bytes at `offset`; 0 at end.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
}

impl ReadAt for [u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(self.len());
        let count = buf.len().min(self.len() - start);
        buf[..count].copy_from_slice(&self[start..start + count]);
        Ok(count)
    }
}

impl ReadAt for std::fs::File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, offset)
    }
}

fn read_fully<S: ReadAt + ?Sized>(source: &S, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match source.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

/// One step of a `LineCursor`.
#[derive(Debug, PartialEq, Eq)]
pub enum NextLine<'a> {
    /// A complete line starting at `offset`, without its `\n`.
    Line {
        offset: u64,
        bytes: &'a [u8],
    },
    /// Bytes from `offset` to the end with no `\n` (or more than `LINE_BYTES_MAX` without
    /// one): never a record.
    Unterminated {
        offset: u64,
    },
    End,
}

/// Walks the lines of `source[start..end]` holding at most one line plus one chunk.
pub struct LineCursor {
    /// File offset of `buf[0]`.
    buf_offset: u64,
    buf: Vec<u8>,
    consumed: usize,
    end: u64,
    /// Bytes read per system call.
    chunk_bytes: usize,
}

impl LineCursor {
    /// A cursor for scans: reads `READ_CHUNK_BYTES` at a time.
    pub fn new(start: u64, end: u64) -> LineCursor {
        LineCursor::with_chunk_bytes(start, end, READ_CHUNK_BYTES)
    }

    /// A cursor for a few lines (a header, a short range): reads `chunk_bytes` (≥ 1)
    /// at a time, so it does not read far past what it returns.
    pub fn with_chunk_bytes(start: u64, end: u64, chunk_bytes: usize) -> LineCursor {
        LineCursor {
            buf_offset: start,
            buf: Vec::new(),
            consumed: 0,
            end: end.max(start),
            chunk_bytes: chunk_bytes.max(1),
        }
    }

    /// Offset of the next unread byte.
    pub fn position(&self) -> u64 {
        self.buf_offset + self.consumed as u64
    }

    /// Moves the cursor forward to `offset` (a line start at or after its position),
    /// keeping what it has loaded beyond `offset`.
    pub fn skip_to(&mut self, offset: u64) {
        debug_assert!(offset >= self.position());
        let loaded_end = self.buf_offset + self.buf.len() as u64;
        if offset <= loaded_end {
            self.consumed = usize::try_from(offset - self.buf_offset).unwrap_or(self.buf.len());
        } else {
            self.buf.clear();
            self.buf_offset = offset;
            self.consumed = 0;
        }
    }

    pub fn next_line<S: ReadAt + ?Sized>(&mut self, source: &S) -> io::Result<NextLine<'_>> {
        let mut searched = self.consumed;
        loop {
            if let Some(found) = memchr::memchr(b'\n', &self.buf[searched..]) {
                let newline = searched + found;
                let offset = self.position();
                let start = self.consumed;
                self.consumed = newline + 1;
                if newline - start > LINE_BYTES_MAX {
                    return Ok(NextLine::Unterminated { offset });
                }
                return Ok(NextLine::Line { offset, bytes: &self.buf[start..newline] });
            }
            searched = self.buf.len();
            let loaded_end = self.buf_offset + self.buf.len() as u64;
            let pending = self.buf.len() - self.consumed;
            if loaded_end >= self.end || pending > LINE_BYTES_MAX {
                if pending == 0 {
                    return Ok(NextLine::End);
                }
                let offset = self.position();
                self.consumed = self.buf.len();
                return Ok(NextLine::Unterminated { offset });
            }
            // Drop consumed bytes so the buffer holds at most one line plus one chunk.
            if self.consumed > 0 {
                self.buf.drain(..self.consumed);
                self.buf_offset += self.consumed as u64;
                searched -= self.consumed;
                self.consumed = 0;
            }
            let want = usize::try_from(self.end - loaded_end).unwrap_or(usize::MAX).min(self.chunk_bytes);
            let old_len = self.buf.len();
            self.buf.resize(old_len + want, 0);
            let read = read_fully(source, &mut self.buf[old_len..], loaded_end)?;
            self.buf.truncate(old_len + read);
            if read < want {
                // The source is shorter than promised (it shrank): stop there.
                self.end = loaded_end + read as u64;
            }
        }
    }
}

/// Offset of the first checksum-valid event record that starts after `from` (inside
/// `source[from + 1 .. end]`), found by looking at every `{"seq":` in that range, also
/// in the middle of a damaged line (a flipped `\n` merges two records into one line).
pub fn find_valid_record_after<S: ReadAt + ?Sized>(source: &S, from: u64, end: u64) -> io::Result<Option<u64>> {
    let window_bytes = 2 * LINE_BYTES_MAX + READ_CHUNK_BYTES;
    let mut window_start = from.saturating_add(1);
    let mut buf = Vec::new();
    while window_start < end {
        let want = usize::try_from(end - window_start).unwrap_or(usize::MAX).min(window_bytes);
        buf.resize(want, 0);
        let read = read_fully(source, &mut buf, window_start)?;
        buf.truncate(read);
        let at_end = window_start + read as u64 >= end || read < want;
        // Candidates starting past this point may be cut by the window: next window.
        let candidate_limit = if at_end { buf.len() } else { buf.len() - LINE_BYTES_MAX - 1 };
        let mut index = 0;
        while index < candidate_limit {
            let Some(found) = memchr::memmem::find(&buf[index..candidate_limit], EVENT_RECORD_PREFIX) else {
                break;
            };
            let start = index + found;
            let line_end = memchr::memchr(b'\n', &buf[start..buf.len().min(start + LINE_BYTES_MAX + 1)]);
            if let Some(line_len) = line_end {
                if checked_body(&buf[start..start + line_len]).is_some() {
                    return Ok(Some(window_start + start as u64));
                }
            }
            index = start + 1;
        }
        if at_end {
            break;
        }
        window_start += candidate_limit as u64;
    }
    Ok(None)
}

// ---------------------------------------------------------------------------------------
// The recovery scanner

/// How a log ends, as the scanner classifies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScanStatus {
    /// Every byte belongs to a valid record.
    Clean,
    /// Bytes after the last valid record that no valid record follows: what a crash
    /// leaves. Never served; truncated by the write path (a copy is kept).
    TornTail { torn_bytes: u64 },
    /// Damage followed by a valid record, a checksum-valid record with wrong content, or
    /// a bad header. Never truncated.
    Corrupt { reason: String, offset: u64, seq: Option<u64> },
    /// A record this build cannot interpret (a newer format or an unknown reserved type).
    Unsupported { reason: String, seq: Option<u64> },
}

/// What `scan` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanOutcome {
    /// The header, when line 1 is valid.
    pub header: Option<HeaderRecord>,
    /// Byte length of the header line (its `\n` included); 0 without a valid header.
    pub header_len: u64,
    /// Valid events in the committed prefix (they are seqs `0..events`).
    pub events: u64,
    /// End of the last valid record: the committed prefix is `0..committed_len`.
    pub committed_len: u64,
    /// Largest epoch in the committed prefix (header included).
    pub last_epoch: Epoch,
    pub status: ScanStatus,
    /// Zero-filled bytes after the committed prefix of a preallocated log (log format
    /// version 2) whose status is `Clean`: unwritten space, neither data nor damage.
    pub zero_tail: u64,
}

impl ScanOutcome {
    /// The status as an error for `artifact`, if it is one (`TornTail` is not).
    pub fn error(&self, artifact: &str) -> Option<Error> {
        match &self.status {
            ScanStatus::Clean | ScanStatus::TornTail { .. } => None,
            ScanStatus::Corrupt { reason, offset, seq } => Some(Error::Corrupt {
                reason: reason.clone(),
                location: Location { artifact: artifact.to_owned(), offset: Some(*offset), seq: *seq },
            }),
            ScanStatus::Unsupported { reason, seq } => Some(Error::FormatUnsupported {
                reason: reason.clone(),
                location: Some(Location { artifact: artifact.to_owned(), offset: None, seq: *seq }),
            }),
        }
    }
}

/// Scans a whole log held in memory. Never panics, whatever the bytes.
pub fn scan(bytes: &[u8]) -> ScanOutcome {
    // A slice source cannot fail.
    scan_source(bytes, bytes.len() as u64, &mut |_, _| {}).unwrap_or_else(|error| ScanOutcome {
        header: None,
        header_len: 0,
        events: 0,
        committed_len: 0,
        last_epoch: Epoch(0),
        status: ScanStatus::Corrupt { reason: error.to_string(), offset: 0, seq: None },
        zero_tail: 0,
    })
}

/// Scans `source[0..len]` with a bounded buffer, calling `on_record(seq, offset)` for
/// every valid event record (to build an index). The valid prefix ends at the first line
/// that lacks `\n`, fails its checksum or content check, or breaks seq contiguity or
/// epoch order; what follows decides torn tail versus corruption.
pub fn scan_source<S: ReadAt + ?Sized>(
    source: &S,
    len: u64,
    on_record: &mut dyn FnMut(u64, u64),
) -> io::Result<ScanOutcome> {
    let mut cursor = LineCursor::new(0, len);
    let mut outcome = ScanOutcome {
        header: None,
        header_len: 0,
        events: 0,
        committed_len: 0,
        last_epoch: Epoch(0),
        status: ScanStatus::Clean,
        zero_tail: 0,
    };
    let header_fault = match cursor.next_line(source)? {
        NextLine::Line { bytes, .. } => match decode_header_line(bytes) {
            Ok(record) => {
                outcome.last_epoch = record.epoch;
                outcome.header = Some(record);
                None
            }
            Err(LineFault::Damaged) => Some("header record fails its checksum".to_owned()),
            Err(LineFault::Invalid(reason)) => Some(reason),
            Err(LineFault::Unsupported(reason)) => {
                outcome.status = ScanStatus::Unsupported { reason, seq: None };
                return Ok(outcome);
            }
        },
        NextLine::Unterminated { .. } => Some("header record is incomplete".to_owned()),
        NextLine::End => Some("log is empty (no header record)".to_owned()),
    };
    if let Some(reason) = header_fault {
        outcome.status = ScanStatus::Corrupt { reason, offset: 0, seq: None };
        return Ok(outcome);
    }
    outcome.header_len = cursor.position();
    outcome.committed_len = cursor.position();
    // A preallocated log's data ends where its trailing zeros begin: the records are
    // scanned up to there, and the zeros are unwritten space, not a torn tail.
    let data_end = match &outcome.header {
        Some(record) if record.zero_tail => zero_tail::data_end(source, outcome.header_len, len)?,
        _ => len,
    };
    if data_end < len {
        cursor = LineCursor::new(outcome.header_len, data_end);
    }
    loop {
        let seq = outcome.events;
        let (offset, fault) = match cursor.next_line(source)? {
            NextLine::End => break,
            NextLine::Unterminated { offset } => (offset, LineFault::Damaged),
            NextLine::Line { offset, bytes } => match check_event(bytes, seq, outcome.last_epoch) {
                Ok(epoch) => {
                    on_record(seq, offset);
                    outcome.events += 1;
                    outcome.last_epoch = epoch;
                    outcome.committed_len = cursor.position();
                    continue;
                }
                Err(fault) => (offset, fault),
            },
        };
        outcome.status = match classify_fault(source, data_end, offset, seq, fault)? {
            // What a torn tail's truncation removes includes the zeros after it.
            ScanStatus::TornTail { .. } => ScanStatus::TornTail { torn_bytes: len - offset },
            status => status,
        };
        break;
    }
    if outcome.status == ScanStatus::Clean {
        outcome.zero_tail = len - outcome.committed_len;
    }
    Ok(outcome)
}

/// Checks one event line against its expected seq and the previous epoch; returns its
/// epoch.
pub fn check_event(line: &[u8], expected_seq: u64, previous_epoch: Epoch) -> Result<Epoch, LineFault> {
    let peek = peek_event_line(line)?;
    if peek.seq != expected_seq {
        return Err(LineFault::Invalid(format!(
            "seq {} where seq {expected_seq} was expected (a gap or a duplicate)",
            peek.seq
        )));
    }
    if peek.epoch < previous_epoch {
        return Err(LineFault::Invalid(format!(
            "epoch {} after epoch {previous_epoch} (epochs never go back)",
            peek.epoch
        )));
    }
    Ok(peek.epoch)
}

/// Decides what a bad line at `offset` (expected seq `seq`) means for the log.
pub fn classify_fault<S: ReadAt + ?Sized>(
    source: &S,
    len: u64,
    offset: u64,
    seq: u64,
    fault: LineFault,
) -> io::Result<ScanStatus> {
    Ok(match fault {
        LineFault::Invalid(reason) => ScanStatus::Corrupt { reason, offset, seq: Some(seq) },
        LineFault::Unsupported(reason) => ScanStatus::Unsupported { reason, seq: Some(seq) },
        LineFault::Damaged => match find_valid_record_after(source, offset, len)? {
            None => ScanStatus::TornTail { torn_bytes: len - offset },
            Some(valid_at) => ScanStatus::Corrupt {
                reason: format!("damaged record followed by a valid record at byte {valid_at}"),
                offset,
                seq: Some(seq),
            },
        },
    })
}

#[cfg(test)]
mod tests;
