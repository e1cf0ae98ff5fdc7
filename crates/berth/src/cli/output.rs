//! How the CLI prints: plain text for people, JSON (`--json`) for scripts.
//!
//! Every byte for stdout goes through [`write_stdout`] (never `print!`/`println!`, which
//! panic when stdout is closed; `clippy::print_stdout` is denied in the CLI). A write to
//! a closed stdout (`berth … | head -1`) is an `Error::Io` that [`is_closed_stdout`]
//! recognizes, and `main` ends the command quietly with the status of the work already
//! done (docs/reference/cli.md: 0 — an append that was stored stays stored and is reported as
//! success, so a caller trusting the exit status does not retry and duplicate it).
//!
//! Times: text output writes every time as RFC 3339 in UTC with milliseconds
//! ([`time_text`], the one place that formats one); `--json` keeps the API's epoch
//! milliseconds.

use super::usage::Failure;
use berth_catalog::{AuditEntry, AuditVerification, RunRecord, SessionRecord};
use berth_core::{Error, Event, EventType, IdempotencyMark, JsonText, RunId, Seq, Timestamp};
use berth_server::wire;
use berth_service::{AppendOutcome, Attachment, ResumeOutcome, SessionPage, SweepReport};
use serde::Serialize;
use std::io::Write;

/// The operation of every failed write to stdout (what `is_closed_stdout` matches).
const WRITE_STDOUT: &str = "write stdout";

/// Writes `bytes` to stdout and flushes them (a live tail's reader sees each line at once).
pub fn write_stdout(bytes: &[u8]) -> Result<(), Error> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(bytes).and_then(|()| stdout.flush()).map_err(|error| Error::io(WRITE_STDOUT, &error))
}

/// One line on stdout.
pub fn print_line(text: impl std::fmt::Display) -> Result<(), Error> {
    write_stdout(format!("{text}\n").as_bytes())
}

/// Whether `error` is a write to a stdout whose reader has gone (`EPIPE`).
pub fn is_closed_stdout(error: &Error) -> bool {
    matches!(error, Error::Io { operation: WRITE_STDOUT, kind: std::io::ErrorKind::BrokenPipe, .. })
}

/// `result`, with a closed stdout counted as done: for commands whose exit status
/// reports a finding (`fsck`, `audit verify`), which a closed pipe must not turn into 0.
pub fn unless_closed_stdout(result: Result<(), Error>) -> Result<(), Error> {
    match result {
        Err(error) if is_closed_stdout(&error) => Ok(()),
        other => other,
    }
}

/// A failure on stderr (never panics, even with stderr closed): `berth: message`, or with
/// `--json` the API's error body (`code` `usage` for a usage error, which has no HTTP
/// counterpart).
pub fn print_failure(failure: &Failure, json: bool) {
    let (code, message, retryable) = match failure {
        Failure::Usage(usage) => (berth::exit::USAGE_CODE, usage.to_string(), false),
        Failure::Error(error) => (error.class().code(), error.to_string(), error.class().retryable()),
    };
    let text = if json {
        serde_json::json!({"error": {"code": code, "message": message, "retryable": retryable}}).to_string()
    } else if let Failure::Usage(_) = failure {
        format!("berth: {message}\nFor more information, try '--help'.")
    } else {
        format!("berth: {message}")
    };
    let _ = writeln!(std::io::stderr(), "{text}");
}

pub fn print_json<T: Serialize>(value: &T) -> Result<(), Error> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Error::invalid("output", e.to_string()))?;
    print_line(text)
}

/// What `--json` prints for a value: its `/v1` wire body (`berth_api`), the format of
/// the HTTP API's bodies, so a data directory, `--server` and the API print the same
/// JSON for the same session (never the catalog's or the service's own encodings).
pub trait WireBody {
    type Body: Serialize;
    fn wire_body(&self) -> Self::Body;
}

macro_rules! wire_body {
    ($($value:ty => $body:ty = $convert:path;)*) => {$(
        impl WireBody for $value {
            type Body = $body;
            fn wire_body(&self) -> $body {
                $convert(self)
            }
        }
    )*};
}

wire_body! {
    SessionRecord => berth_api::SessionBody = wire::session;
    SessionPage => berth_api::SessionPage = wire::session_page;
    Attachment => berth_api::AttachmentBody = wire::attachment;
    RunRecord => berth_api::RunBody = wire::run;
    AppendOutcome => berth_api::AppendOutcomeBody = wire::append_outcome;
    ResumeOutcome => berth_api::ResumeOutcomeBody = wire::resume_outcome;
    AuditVerification => berth_api::AuditVerificationBody = wire::audit_verification;
}

impl WireBody for Vec<AuditEntry> {
    type Body = Vec<berth_api::AuditEntryBody>;
    fn wire_body(&self) -> Self::Body {
        self.iter().map(wire::audit_entry).collect()
    }
}

/// CLI-only reports with no HTTP body print as they are.
impl WireBody for serde_json::Value {
    type Body = serde_json::Value;
    fn wire_body(&self) -> serde_json::Value {
        self.clone()
    }
}

impl WireBody for SweepReport {
    type Body = serde_json::Value;
    fn wire_body(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

pub fn print_value<T: WireBody>(value: &T, json: bool, text: impl FnOnce(&T) -> String) -> Result<(), Error> {
    if json {
        print_json(&value.wire_body())
    } else {
        print_line(text(value))
    }
}

/// A time as people read it: RFC 3339, UTC, milliseconds (`2026-12-07T01:23:45.678Z`).
/// The calendar is the `time` crate's; the fixed width keeps columns aligned. A time
/// past the year 9999, which RFC 3339 cannot write, prints as its milliseconds.
pub fn time_text(time: Timestamp) -> String {
    let Ok(moment) = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(time.0) * 1_000_000) else {
        return format!("{} ms", time.0);
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        moment.year(),
        u8::from(moment.month()),
        moment.day(),
        moment.hour(),
        moment.minute(),
        moment.second(),
        moment.millisecond()
    )
}

pub fn session_line(record: &SessionRecord) -> String {
    session_line_with_preview(record, None)
}

/// A session on one line; its title quoted, or for an untitled conversation the preview
/// of its first user message as `user: "…"` (quoted and escaped like a title).
pub fn session_line_with_preview(record: &SessionRecord, preview: Option<&str>) -> String {
    let name = match (record.title.as_deref().filter(|title| !title.trim().is_empty()), preview) {
        (Some(title), _) => format!("  {title:?}"),
        (None, Some(preview)) => format!("  user: {preview:?}"),
        (None, None) => record.title.as_deref().map(|title| format!("  {title:?}")).unwrap_or_default(),
    };
    format!(
        "{:<40} {:<8} rev {:<4} events {:<6} runs {} last_activity {}{name}",
        record.header.id.as_str(),
        record.status.as_str(),
        record.revision.0,
        record.event_count,
        record.runs.len(),
        time_text(record.last_activity),
    )
}

/// `sessions show` in text: the session's `/v1` body, pretty, its times in RFC 3339.
pub fn session_detail(record: &SessionRecord) -> String {
    pretty_with_times(serde_json::to_value(wire::session(record)).unwrap_or_default())
}

/// The fields of berth's bodies that hold a time (every `Timestamp` field of `berth_api`,
/// checked by a test).
const TIME_FIELDS: &[&str] = &[
    "time",
    "created_at",
    "updated_at",
    "expires_at",
    "attached_at",
    "lease_until",
    "session_lease_until",
    "last_activity",
    "status_changed_at",
    "snapshot_at",
    // The range of a usage body (`GET /v1/usage`).
    "since",
    "before",
];

/// A body's pretty JSON for people, each time (a number under a key of `TIME_FIELDS`) in
/// RFC 3339. Only for bodies that carry no caller JSON (sessions, runs, log headers and
/// stats), where such a key is always one of berth's times.
pub fn pretty_with_times(mut value: serde_json::Value) -> String {
    times_as_text(&mut value);
    serde_json::to_string_pretty(&value).unwrap_or_default()
}

fn times_as_text(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(fields) => {
            for (name, field) in fields.iter_mut() {
                match field.as_u64() {
                    Some(ms) if TIME_FIELDS.contains(&name.as_str()) => {
                        *field = serde_json::Value::String(time_text(Timestamp(ms)));
                    }
                    _ => times_as_text(field),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(times_as_text),
        _ => {}
    }
}

/// An event as text output prints it (`sessions cat`, `tail`, `log cat`, the repairs of
/// `runs resume`): the canonical envelope — the same fields in the same order, `data`
/// exactly as stored — with its time in RFC 3339. `--json` prints the `/v1` event body.
pub fn event_line(event: &Event) -> String {
    #[derive(Serialize)]
    struct EventText<'a> {
        seq: Seq,
        #[serde(rename = "type")]
        event_type: &'a EventType,
        time: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        run: Option<&'a RunId>,
        data: &'a JsonText,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        ignorable: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        idempotency: Option<&'a IdempotencyMark>,
    }
    let text = EventText {
        seq: event.seq,
        event_type: &event.event_type,
        time: time_text(event.time),
        run: event.run.as_ref(),
        data: &event.data,
        ignorable: event.ignorable,
        idempotency: event.idempotency.as_deref(),
    };
    serde_json::to_string(&text).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc_with_milliseconds() {
        for (ms, text) in [
            (0, "1970-01-01T00:00:00.000Z"),
            (1_796_606_625_678, "2026-12-07T01:23:45.678Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_767_225_599_999, "2025-12-31T23:59:59.999Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
        ] {
            assert_eq!(time_text(Timestamp(ms)), text, "{ms}");
        }
        assert_eq!(time_text(Timestamp(253_402_300_800_000)), "253402300800000 ms");
        assert_eq!(time_text(Timestamp(u64::MAX)), format!("{} ms", u64::MAX));
    }

    #[test]
    fn an_event_line_is_the_canonical_envelope_with_its_time_as_text() {
        let line = r#"{"seq":3,"type":"user/message","time":1796606625678,"run":"r-1","data":{"z":1.50,"a":[]},"ignorable":true,"idempotency":{"key":"k","events":2}}"#;
        let event: Event = serde_json::from_str(line).unwrap();
        assert_eq!(event.to_canonical_json(), line, "the fixture is canonical");
        let expected = line.replace("1796606625678", r#""2026-12-07T01:23:45.678Z""#);
        assert_eq!(event_line(&event), expected);
        let bare: Event = serde_json::from_str(r#"{"seq":0,"type":"note/x","time":0,"data":{}}"#).unwrap();
        assert_eq!(event_line(&bare), r#"{"seq":0,"type":"note/x","time":"1970-01-01T00:00:00.000Z","data":{}}"#);
    }

    #[test]
    fn pretty_bodies_show_their_times_as_text_and_nothing_else_changes() {
        let body = serde_json::json!({
            "header": {"created_at": 0, "version": 1},
            "runs": [{"attached_at": 1000, "lease_until": 2000}],
            "event_count": 7,
            "title": "time",
        });
        let text = pretty_with_times(body);
        for expected in [
            r#""created_at": "1970-01-01T00:00:00.000Z""#,
            r#""attached_at": "1970-01-01T00:00:01.000Z""#,
            r#""lease_until": "1970-01-01T00:00:02.000Z""#,
            r#""event_count": 7"#,
            r#""version": 1"#,
        ] {
            assert!(text.contains(expected), "{expected} in {text}");
        }
    }

    /// Every `Timestamp` field of the wire bodies is one `TIME_FIELDS` names, so a new one
    /// is not left in milliseconds in text output.
    #[test]
    fn every_time_field_of_the_wire_bodies_is_known() {
        let sources = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../berth-api/src");
        let mut seen = 0;
        for entry in std::fs::read_dir(sources).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            for line in text.lines().map(str::trim) {
                let Some((name, kind)) = line.strip_prefix("pub ").and_then(|field| field.split_once(": ")) else {
                    continue;
                };
                let is_field = name.bytes().all(|byte| byte.is_ascii_lowercase() || byte == b'_');
                if is_field && (kind.trim_end_matches(',').ends_with("Timestamp") || kind.contains("Option<Timestamp>"))
                {
                    assert!(TIME_FIELDS.contains(&name), "berth_api field {name} is a time: add it to TIME_FIELDS");
                    seen += 1;
                }
            }
        }
        assert!(seen >= 9, "found only {seen} time fields: has the source layout changed?");
    }
}
