//! `berth fsck`: verify every session log under a data root, and repair what is safe to
//! repair — torn tails, and nothing else. A corrupt log (damage followed by valid
//! records, a bad header, a seq gap) is reported with its location and never modified:
//! deciding what to keep needs an operator.

use crate::backend::JsonlBackend;
use crate::format::{self, ScanStatus, LOG_FILE, SESSIONS_DIR, TENANTS_DIR};
use crate::fs::{Fs, OpenOptions, OsFs};
use crate::lease;
use crate::log::FileSource;
use berth_core::{Error, Location, Result, SessionId, SessionKey, TenantId};
use berth_store::{LogWriter, TailRecovery};
use std::io;
use std::path::Path;

/// What `check` found for one session.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionStatus {
    /// Every byte is a valid record.
    Ok { events: u64 },
    /// Valid up to `committed_len`; the `torn_bytes` after it are a crash tail that the
    /// next write open (or `repair_torn_tail`) truncates, keeping a copy.
    TornTail { events: u64, committed_len: u64, torn_bytes: u64 },
    /// Damaged in a way a crash cannot explain; read-only until an operator acts.
    Corrupt { location: Location, reason: String },
    /// Written by a newer berth (or holds an unknown reserved event type).
    Unsupported { reason: String },
    /// The log could not be read at all (permissions, I/O error).
    Unreadable { reason: String },
}

impl SessionStatus {
    /// Whether the log needs no attention.
    pub fn is_ok(&self) -> bool {
        matches!(self, SessionStatus::Ok { .. })
    }
}

/// One session's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionReport {
    pub key: SessionKey,
    /// The log's path relative to the data root.
    pub artifact: String,
    pub status: SessionStatus,
}

/// Checks every session under `root` on the real file system.
pub fn check_root(root: &Path) -> Result<Vec<SessionReport>> {
    check_root_with(&OsFs, root)
}

/// Checks every session under `root`, in tenant then id order. Reads each log once with
/// a bounded buffer; modifies nothing; takes no lock (a session being written shows its
/// state at the moment it is read).
pub fn check_root_with(fs: &dyn Fs, root: &Path) -> Result<Vec<SessionReport>> {
    let mut reports = Vec::new();
    let tenants_dir = root.join(TENANTS_DIR);
    for tenant in sorted_ids(fs, &tenants_dir, TenantId::parse)? {
        let sessions_dir = tenants_dir.join(format::encode_segment(tenant.as_str())).join(SESSIONS_DIR);
        for id in sorted_ids(fs, &sessions_dir, SessionId::parse)? {
            let key = SessionKey::new(tenant.clone(), id);
            let session_dir = sessions_dir.join(format::encode_segment(key.id.as_str()));
            match fs.metadata(&session_dir.join(LOG_FILE)) {
                Ok(meta) if meta.is_file => {}
                // A directory without a log is a creation that never published: not a
                // session.
                _ => continue,
            }
            let artifact = format!(
                "{TENANTS_DIR}/{}/{SESSIONS_DIR}/{}/{LOG_FILE}",
                format::encode_segment(key.tenant.as_str()),
                format::encode_segment(key.id.as_str())
            );
            let status = check_session(fs, &session_dir, &key, &artifact);
            reports.push(SessionReport { key, artifact, status });
        }
    }
    Ok(reports)
}

fn sorted_ids<T: Ord>(fs: &dyn Fs, directory: &Path, parse: impl Fn(&str) -> Result<T>) -> Result<Vec<T>> {
    let names = match fs.read_dir(directory) {
        Ok(names) => names,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(Error::io("list directory", &error)),
    };
    let mut ids = Vec::new();
    for name in names {
        let decoded = name.to_str().and_then(format::decode_segment).and_then(|text| parse(&text).ok());
        match decoded {
            Some(id) => ids.push(id),
            None => {
                tracing::warn!(directory = %directory.display(), name = ?name, "fsck skips an entry berth did not create")
            }
        }
    }
    ids.sort();
    Ok(ids)
}

/// Runs the recovery scanner over the log file at `path` as it is now: where its
/// committed prefix ends, and whether what follows is a torn tail or corruption. What
/// `check` reports and `repair_torn_tail` truncates to; `berth restore` truncates the
/// logs it restores with it too.
pub fn scan_log(fs: &dyn Fs, path: &Path) -> io::Result<format::ScanOutcome> {
    let file = fs.open(path, OpenOptions::read_only())?;
    let len = file.len()?;
    format::scan_source(&FileSource(file.as_ref()), len, &mut |_, _| {})
}

fn check_session(fs: &dyn Fs, session_dir: &Path, key: &SessionKey, artifact: &str) -> SessionStatus {
    let outcome = match scan_log(fs, &session_dir.join(LOG_FILE)) {
        Ok(outcome) => outcome,
        Err(error) => return SessionStatus::Unreadable { reason: format!("read: {error}") },
    };
    if let Some(record) = &outcome.header {
        if record.header.key() != *key {
            return SessionStatus::Corrupt {
                location: Location { artifact: artifact.to_owned(), offset: Some(0), seq: None },
                reason: format!("header names session {} but the log is stored as {key}", record.header.key()),
            };
        }
    }
    let epoch_problem = match lease::read_epoch(fs, session_dir, artifact) {
        Err(Error::Corrupt { location, reason }) => Some(SessionStatus::Corrupt { location, reason }),
        Err(error) => Some(SessionStatus::Unreadable { reason: error.to_string() }),
        Ok(_) => None,
    };
    let status = match outcome.status {
        ScanStatus::Clean => SessionStatus::Ok { events: outcome.events },
        ScanStatus::TornTail { torn_bytes } => {
            SessionStatus::TornTail { events: outcome.events, committed_len: outcome.committed_len, torn_bytes }
        }
        ScanStatus::Corrupt { reason, offset, seq } => SessionStatus::Corrupt {
            location: Location { artifact: artifact.to_owned(), offset: Some(offset), seq },
            reason,
        },
        ScanStatus::Unsupported { reason, .. } => SessionStatus::Unsupported { reason },
    };
    match (status, epoch_problem) {
        (SessionStatus::Ok { .. } | SessionStatus::TornTail { .. }, Some(problem)) => problem,
        (status, _) => status,
    }
}

/// Truncates a session's torn tail now, keeping a copy of the discarded bytes, under
/// the writer lease (`AlreadyOwned` while a writer is active). Refuses (`Corrupt`,
/// `FormatUnsupported`) and changes nothing for anything but a torn tail. `Ok(None)` if
/// the log was clean.
pub async fn repair_torn_tail(backend: &JsonlBackend, key: &SessionKey) -> Result<Option<TailRecovery>> {
    let mut writer = backend.open_jsonl_writer(key).await?;
    let repaired = writer.repair_torn_tail().await;
    let released = writer.release().await;
    let repaired = repaired?;
    released?;
    Ok(repaired)
}
