//! How the CLI prints: plain text for people, JSON (`--json`) for scripts.
//!
//! Every byte for stdout goes through [`write_stdout`] (never `print!`/`println!`, which
//! panic when stdout is closed; `clippy::print_stdout` is denied in the CLI). A write to
//! a closed stdout (`berth … | head -1`) is an `Error::Io` that [`is_closed_stdout`]
//! recognizes, and `main` ends the command quietly with the status of the work already
//! done (docs/reference/cli.md: 0 — an append that was stored stays stored and is reported as
//! success, so a caller trusting the exit status does not retry and duplicate it).

use berth_catalog::{AuditEntry, AuditVerification, RunRecord, SessionRecord};
use berth_core::Error;
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

/// An error on stderr (never panics, even with stderr closed).
pub fn print_error(error: &Error, json: bool) {
    let text = if json {
        let class = error.class();
        serde_json::json!({"error": {"code": class.code(), "message": error.to_string(), "retryable": class.retryable()}})
            .to_string()
    } else {
        format!("berth: {error}")
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
        record.last_activity.0,
    )
}

pub fn session_detail(record: &SessionRecord) -> String {
    serde_json::to_string_pretty(&wire::session(record)).unwrap_or_default()
}
