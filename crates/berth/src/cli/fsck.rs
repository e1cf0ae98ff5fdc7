//! `berth fsck`: verify every log under a data directory; `--repair` truncates torn tails
//! and nothing else (keeping a copy of the bytes it cuts). People get one line per log
//! and a summary; `--json` gives one object per log and the counts. The exit status is
//! the finding (`berth::exit`): 0 clean (or every torn tail repaired), 10 torn tails
//! left, 11 damaged logs — corrupt, unsupported or unreadable, never modified.

use super::data_root;
use super::output::{print_json, print_line, unless_closed_stdout};
use super::usage::Result;
use berth_jsonl::fsck::{SessionReport, SessionStatus};
use berth_store::TailRecovery;
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct FsckArgs {
    /// Data directory (default: --data).
    dir: Option<PathBuf>,
    /// Truncate torn tails (keeping a copy of the discarded bytes). Never touches
    /// corrupt logs.
    #[arg(long)]
    repair: bool,
}

/// One log's line of the report: what the check found and what `--repair` did.
#[derive(Serialize)]
struct LogRow {
    tenant: String,
    session: String,
    /// The log's path relative to the data directory.
    artifact: String,
    /// `ok`, `torn_tail`, `repaired`, `corrupt`, `unsupported` or `unreadable`.
    status: &'static str,
    /// The line people read after the status.
    detail: String,
    /// What `--repair` cut (`null` if it found nothing left to cut).
    repaired: Option<TailRecovery>,
    /// Valid events in the log (`ok`, `torn_tail`, `repaired`).
    #[serde(skip_serializing_if = "Option::is_none")]
    events: Option<u64>,
    /// Bytes of valid records before the torn tail.
    #[serde(skip_serializing_if = "Option::is_none")]
    committed_len: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    torn_bytes: Option<u64>,
    /// Where a corrupt log is damaged.
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seq: Option<u64>,
    /// Why a log is corrupt, unsupported or unreadable.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

impl LogRow {
    fn damaged(&self) -> bool {
        matches!(self.status, "corrupt" | "unsupported" | "unreadable")
    }
}

/// The counts of the summary line and of `--json`.
#[derive(Default, Serialize)]
struct Summary {
    logs: usize,
    ok: usize,
    repaired: usize,
    /// Torn tails found and not repaired (exit 10).
    torn_tails: usize,
    /// Corrupt, unsupported or unreadable logs (exit 11).
    damaged: usize,
}

pub async fn fsck(data: &str, args: FsckArgs, json: bool) -> Result<ExitCode> {
    let root = match args.dir {
        Some(dir) => dir,
        None => data_root(data, "fsck")?,
    };
    let reports = berth_jsonl::fsck::check_root(&root)?;
    let backend =
        if args.repair { Some(berth_jsonl::JsonlBackend::open(root.clone(), Default::default())?) } else { None };
    let mut rows = Vec::new();
    for report in reports {
        let repaired = match (&backend, &report.status) {
            (Some(backend), SessionStatus::TornTail { .. }) => {
                Some(berth_jsonl::fsck::repair_torn_tail(backend, &report.key).await?)
            }
            _ => None,
        };
        rows.push(row(report, repaired));
    }
    let summary = summarize(&rows);
    // The status reports what was found, so a closed stdout must not turn it into 0.
    unless_closed_stdout(print_report(&rows, &summary, json))?;
    Ok(if summary.damaged > 0 {
        ExitCode::from(berth::exit::FSCK_DAMAGED)
    } else if summary.torn_tails > 0 {
        ExitCode::from(berth::exit::FSCK_TORN_TAILS)
    } else {
        ExitCode::SUCCESS
    })
}

/// The row of `report`; `repaired` is `Some` when `--repair` ran on its torn tail.
fn row(report: SessionReport, repaired: Option<Option<TailRecovery>>) -> LogRow {
    let mut row = LogRow {
        tenant: report.key.tenant.to_string(),
        session: report.key.id.to_string(),
        artifact: report.artifact,
        status: "ok",
        detail: String::new(),
        repaired: None,
        events: None,
        committed_len: None,
        torn_bytes: None,
        offset: None,
        seq: None,
        reason: None,
    };
    match report.status {
        SessionStatus::Ok { events } => {
            row.events = Some(events);
            row.detail = events_text(events);
        }
        SessionStatus::TornTail { events, committed_len, torn_bytes } => {
            (row.events, row.committed_len, row.torn_bytes) = (Some(events), Some(committed_len), Some(torn_bytes));
            let found = format!("{}; {torn_bytes} torn bytes after byte {committed_len}", events_text(events));
            (row.status, row.detail) = match &repaired {
                None => ("torn_tail", format!("{found} (repairable: berth fsck --repair)")),
                Some(recovery) => ("repaired", repaired_text(&found, recovery.as_ref())),
            };
            row.repaired = repaired.flatten();
        }
        SessionStatus::Corrupt { location, reason } => {
            row.status = "corrupt";
            row.detail = format!(
                "{}{reason}; never modified: an operator decides (docs/reference/storage-format.md)",
                place(&location)
            );
            (row.offset, row.seq, row.reason) = (location.offset, location.seq, Some(reason));
        }
        SessionStatus::Unsupported { reason } => {
            row.status = "unsupported";
            row.detail = format!("{reason}; never modified");
            row.reason = Some(reason);
        }
        SessionStatus::Unreadable { reason } => {
            row.status = "unreadable";
            row.detail = reason.clone();
            row.reason = Some(reason);
        }
        // A status this build does not know is not a clean log.
        other => {
            row.status = "unreadable";
            row.detail = format!("{other:?}");
        }
    }
    row
}

/// `at byte 120 (seq 3): ` — where in its log the damage starts (the path is the row's
/// `artifact`).
fn place(location: &berth_core::Location) -> String {
    match (location.offset, location.seq) {
        (Some(offset), Some(seq)) => format!("at byte {offset} (seq {seq}): "),
        (Some(offset), None) => format!("at byte {offset}: "),
        (None, Some(seq)) => format!("at seq {seq}: "),
        (None, None) => String::new(),
    }
}

fn events_text(events: u64) -> String {
    if events == 1 {
        "1 event".to_owned()
    } else {
        format!("{events} events")
    }
}

fn repaired_text(found: &str, recovery: Option<&TailRecovery>) -> String {
    match recovery {
        Some(TailRecovery { kept_copy: Some(copy), .. }) => format!("{found}: cut, a copy kept in {copy}"),
        Some(TailRecovery { kept_copy: None, .. }) => format!("{found}: cut"),
        None => format!("{found}: nothing left to cut when repaired"),
    }
}

fn summarize(rows: &[LogRow]) -> Summary {
    let mut summary = Summary { logs: rows.len(), ..Summary::default() };
    for row in rows {
        match row.status {
            "ok" => summary.ok += 1,
            "repaired" => summary.repaired += 1,
            "torn_tail" => summary.torn_tails += 1,
            _ if row.damaged() => summary.damaged += 1,
            _ => {}
        }
    }
    summary
}

fn print_report(rows: &[LogRow], summary: &Summary, json: bool) -> berth_core::Result<()> {
    if json {
        return print_json(&serde_json::json!({
            "sessions": rows,
            "logs": summary.logs,
            "ok": summary.ok,
            "repaired": summary.repaired,
            "torn_tails": summary.torn_tails,
            "damaged": summary.damaged,
        }));
    }
    let names: Vec<String> = rows.iter().map(|row| format!("{}/{}", row.tenant, row.session)).collect();
    let width = names.iter().map(String::len).max().unwrap_or(0);
    for (name, row) in names.iter().zip(rows) {
        let status = row.status.replace('_', " ");
        print_line(format_args!("{name:<width$}  {status:<11}  {}", row.detail))?;
    }
    print_line(summary_text(summary))
}

/// `4 logs: 2 ok, 1 torn tail left, 1 damaged` and what to do about it.
fn summary_text(summary: &Summary) -> String {
    let mut parts = vec![format!("{} ok", summary.ok)];
    if summary.repaired > 0 {
        parts.push(format!("{} repaired", summary.repaired));
    }
    if summary.torn_tails > 0 {
        parts.push(format!("{} torn tail(s) left (berth fsck --repair cuts them)", summary.torn_tails));
    }
    if summary.damaged > 0 {
        parts.push(format!("{} damaged (never modified)", summary.damaged));
    }
    let logs = if summary.logs == 1 { "log" } else { "logs" };
    format!("{} {logs}: {}", summary.logs, parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::{Location, SessionId, SessionKey, TenantId};

    fn report(status: SessionStatus) -> SessionReport {
        let key = SessionKey::new(TenantId::parse("acme").unwrap(), SessionId::parse("chat-1").unwrap());
        SessionReport { key, artifact: "tenants/acme/sessions/chat-1/session.jsonl".to_owned(), status }
    }

    #[test]
    fn each_status_reads_as_a_sentence() {
        let torn = SessionStatus::TornTail { events: 5, committed_len: 1234, torn_bytes: 12 };
        let location =
            Location { artifact: "tenants/acme/sessions/chat-1/session.jsonl".into(), offset: Some(120), seq: Some(3) };
        for (status, repaired, expected) in [
            (SessionStatus::Ok { events: 8 }, None, ("ok", "8 events")),
            (SessionStatus::Ok { events: 1 }, None, ("ok", "1 event")),
            (
                torn.clone(),
                None,
                ("torn_tail", "5 events; 12 torn bytes after byte 1234 (repairable: berth fsck --repair)"),
            ),
            (
                torn,
                Some(Some(TailRecovery { torn_bytes: 12, kept_copy: Some("broken-1.jsonl".into()) })),
                ("repaired", "5 events; 12 torn bytes after byte 1234: cut, a copy kept in broken-1.jsonl"),
            ),
            (
                SessionStatus::Corrupt { location, reason: "checksum mismatch".into() },
                None,
                (
                    "corrupt",
                    "at byte 120 (seq 3): checksum mismatch; never modified: an operator decides \
                     (docs/reference/storage-format.md)",
                ),
            ),
            (SessionStatus::Unreadable { reason: "open: denied".into() }, None, ("unreadable", "open: denied")),
        ] {
            let row = row(report(status), repaired);
            assert_eq!((row.status, row.detail.as_str()), expected);
        }
    }

    #[test]
    fn the_summary_counts_what_decides_the_exit_code() {
        let rows = vec![
            row(report(SessionStatus::Ok { events: 1 }), None),
            row(report(SessionStatus::TornTail { events: 1, committed_len: 9, torn_bytes: 2 }), None),
            row(report(SessionStatus::Unsupported { reason: "newer".into() }), None),
        ];
        let summary = summarize(&rows);
        assert_eq!((summary.logs, summary.ok, summary.torn_tails, summary.damaged), (3, 1, 1, 1));
        assert_eq!(
            summary_text(&summary),
            "3 logs: 1 ok, 1 torn tail(s) left (berth fsck --repair cuts them), 1 damaged (never modified)"
        );
    }
}
