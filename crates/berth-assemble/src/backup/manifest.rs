//! The manifest (`manifest.json`): what a backup holds and the point it was taken at.
//!
//! It is written last, atomically (a temp file synced, renamed into place, the
//! directory synced), after every file it names is synced: a directory without one is
//! not a backup — an interrupted `berth backup` leaves none — and `berth restore`
//! refuses it. Every path in it is derived from the ids it names and checked against
//! that derivation when read, so a manifest cannot point a restore outside a backup.

use berth_core::{Error, Location, Result, SessionId, SessionKey, TenantId};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The manifest's file name in a backup directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// What the manifest is written to before its rename.
const MANIFEST_TEMP_FILE: &str = "manifest.json.tmp";
/// The manifest's `format`.
pub const MANIFEST_FORMAT: &str = "berth-backup";
/// The manifest version this build writes and reads.
pub const MANIFEST_VERSION: u32 = 1;

/// A full backup holds every file; an incremental one only the catalog and the logs
/// that changed since `previous`, naming the backup that holds each of the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackupKind {
    Full,
    Incremental,
}

/// Everything a backup holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always `berth-backup`.
    pub format: String,
    /// `MANIFEST_VERSION` of the berth that wrote it.
    pub version: u32,
    /// This backup's id (a UUIDv7): how later backups of a chain name it.
    pub id: String,
    pub kind: BackupKind,
    /// The backup an incremental one was taken `--since`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<PreviousBackup>,
    /// The store's identity (its catalog's token): a chain is of one store.
    pub store: Option<String>,
    /// The berth version that took it.
    pub berth_version: String,
    /// When the backup began (ms since the epoch).
    pub started_at: u64,
    /// When the catalog's snapshot was taken: every catalog change committed before
    /// this time is in the backup, and every event appended before it too.
    pub snapshot_at: u64,
    pub finished_at: u64,
    pub catalog: CatalogCopy,
    /// Other SQLite files of the data directory copied beside it (the server's keys).
    pub files: Vec<FileCopy>,
    /// Every session's log, in (tenant, id) order.
    pub logs: Vec<LogCopy>,
    /// Sessions the snapshot lists whose logs were deleted before they could be copied
    /// (a delete running during the backup): restore finishes their deletion.
    pub vanished: Vec<SessionName>,
}

/// Where the backup an incremental one builds on is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreviousBackup {
    pub id: String,
    /// Its directory: relative to this backup's directory when they are siblings
    /// (`../nightly-1`), so a chain can be moved as a whole; absolute otherwise.
    pub dir: String,
}

/// The catalog's copy and the point it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogCopy {
    pub file: String,
    pub bytes: u64,
    pub sha256: String,
    pub schema_version: i64,
    pub sessions: u64,
    /// The catalog position: every tenant's audit head at the snapshot (each change of
    /// a session is audited in its transaction, so the heads place the snapshot in
    /// every tenant's history).
    pub position: Vec<AuditPosition>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditPosition {
    pub tenant: TenantId,
    pub seq: u64,
    pub hash: String,
}

/// A copied file: its name, size and SHA-256.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileCopy {
    pub file: String,
    pub bytes: u64,
    pub sha256: String,
}

/// One session's log copy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogCopy {
    pub tenant: TenantId,
    pub session: SessionId,
    /// Path relative to the backup (and data) directory.
    pub file: String,
    /// Bytes copied: at least the committed log as of the snapshot; possibly more,
    /// ending in the part of an append in progress.
    pub bytes: u64,
    pub sha256: String,
    /// Where the copy's last complete record ends (what restore truncates it to).
    pub committed_bytes: u64,
    /// Events in the committed part.
    pub events: u64,
    /// Events the snapshot's record says the log holds (never more than `events`).
    pub catalog_events: u64,
    /// The header line's length and SHA-256: which session of this id the log is.
    pub header_bytes: u64,
    pub header_sha256: String,
    /// The writer epoch file, when the session had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<FileCopy>,
    /// The id of the earlier backup of the chain that holds this copy (an unchanged
    /// log in an incremental backup); absent when this backup holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_in: Option<String>,
}

impl LogCopy {
    pub fn key(&self) -> SessionKey {
        SessionKey::new(self.tenant.clone(), self.session.clone())
    }
}

/// A session named by the manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionName {
    pub tenant: TenantId,
    pub session: SessionId,
}

/// A log's file relative to the data directory (and to a backup directory).
pub fn log_file(key: &SessionKey) -> String {
    session_dir(key).join(berth_jsonl::format::LOG_FILE).to_string_lossy().into_owned()
}

/// A log's epoch file relative to the data directory.
pub fn epoch_file(key: &SessionKey) -> String {
    session_dir(key).join(berth_jsonl::format::EPOCH_FILE).to_string_lossy().into_owned()
}

/// A session's directory relative to the data directory.
pub fn session_dir(key: &SessionKey) -> PathBuf {
    berth_jsonl::format::session_dir_in_root(key)
}

fn manifest_error(dir: &Path, reason: impl Into<String>) -> Error {
    Error::Corrupt {
        reason: reason.into(),
        location: Location { artifact: dir.join(MANIFEST_FILE).display().to_string(), offset: None, seq: None },
    }
}

impl Manifest {
    /// Reads and checks the manifest of the backup in `dir`.
    pub fn read(dir: &Path) -> Result<Manifest> {
        let path = dir.join(MANIFEST_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::invalid(
                    "backup",
                    format!(
                        "{} holds no {MANIFEST_FILE}: it is not a backup, or one that did not finish \
                         (a backup writes its manifest last)",
                        dir.display()
                    ),
                ))
            }
            Err(error) => return Err(Error::io("read the backup manifest", &error)),
        };
        let value: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|error| manifest_error(dir, format!("not JSON ({error})")))?;
        if value.get("format").and_then(|format| format.as_str()) != Some(MANIFEST_FORMAT) {
            return Err(Error::invalid("backup", format!("{} is not a berth backup manifest", path.display())));
        }
        let version = value.get("version").and_then(|version| version.as_u64()).unwrap_or(0);
        if version > u64::from(MANIFEST_VERSION) {
            return Err(Error::FormatUnsupported {
                reason: format!(
                    "backup manifest version {version} was written by a newer berth (this build reads up to \
                     {MANIFEST_VERSION})"
                ),
                location: Some(Location { artifact: path.display().to_string(), offset: None, seq: None }),
            });
        }
        let manifest: Manifest =
            serde_json::from_value(value).map_err(|error| manifest_error(dir, format!("does not decode ({error})")))?;
        manifest.check(dir)?;
        Ok(manifest)
    }

    /// The manifest's own consistency: paths are the ones its ids derive, every log
    /// named once, counts that add up.
    fn check(&self, dir: &Path) -> Result<()> {
        if self.catalog.file != crate::CATALOG_FILE {
            return Err(manifest_error(dir, format!("the catalog copy is named {:?}", self.catalog.file)));
        }
        for file in &self.files {
            if !is_plain_file_name(&file.file) || file.file == crate::CATALOG_FILE || file.file == MANIFEST_FILE {
                return Err(manifest_error(dir, format!("a copied file is named {:?}", file.file)));
            }
        }
        let mut previous: Option<SessionKey> = None;
        for log in &self.logs {
            let key = log.key();
            if previous.as_ref().is_some_and(|previous| *previous >= key) {
                return Err(manifest_error(dir, format!("session {key} is out of order or listed twice")));
            }
            if log.file != log_file(&key) || log.epoch.as_ref().is_some_and(|epoch| epoch.file != epoch_file(&key)) {
                return Err(manifest_error(dir, format!("the copy of session {key} is not where its id puts it")));
            }
            let consistent = log.header_bytes <= log.committed_bytes
                && log.committed_bytes <= log.bytes
                && log.catalog_events <= log.events;
            if !consistent {
                return Err(manifest_error(dir, format!("the sizes of session {key}'s copy contradict each other")));
            }
            if log.stored_in.as_ref().is_some_and(|holder| *holder == self.id) {
                return Err(manifest_error(dir, format!("session {key} names its own backup as an earlier one")));
            }
            previous = Some(key);
        }
        if self.kind == BackupKind::Full
            && (self.previous.is_some() || self.logs.iter().any(|log| log.stored_in.is_some()))
        {
            return Err(manifest_error(dir, "a full backup names an earlier one"));
        }
        Ok(())
    }

    /// Writes the manifest into `dir` atomically (temp file, sync, rename, directory
    /// sync): the last step of a backup.
    pub fn write(&self, dir: &Path) -> Result<()> {
        use std::io::Write;
        let text = serde_json::to_vec_pretty(self).map_err(|error| Error::invalid("manifest", error.to_string()))?;
        let temp = dir.join(MANIFEST_TEMP_FILE);
        let written = (|| {
            let _ = std::fs::remove_file(&temp);
            let mut file = super::pace::create_new(&temp)?;
            file.write_all(&text)?;
            file.write_all(b"\n")?;
            file.sync_all()?;
            std::fs::rename(&temp, dir.join(MANIFEST_FILE))?;
            std::fs::File::open(dir)?.sync_all()
        })();
        written.map_err(|error| Error::io("write the backup manifest", &error))
    }
}

/// One path segment a backup may hold at its top level: no separator, no `..`.
pub fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.starts_with('.')
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
}
