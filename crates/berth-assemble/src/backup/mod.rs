//! Hot backup and restore of an embedded data directory (`berth backup`, `berth
//! restore`, `POST /v1/admin/backup`): a consistent copy taken while `berth serve` keeps
//! writing, and a restore that loses nothing acknowledged before the copy began.
//!
//! - `manifest`: what a backup holds (`manifest.json`, written last, atomically).
//! - `copy`: taking a backup — the catalog's snapshot first, then the logs, reconciled
//!   against it; the order is explained there.
//! - `restore`: checking a backup (and its chain) and restoring it into a new data
//!   directory, published by one rename.
//! - `pace`: chunked, hashed, rate-limited copying, and progress.
//!
//! A PostgreSQL store is backed up with PostgreSQL's own tools (`pg_dump`, or base
//! backups with WAL archiving for point-in-time recovery); `backup_store` says so.

pub mod copy;
pub mod manifest;
pub mod pace;
pub mod restore;

pub use copy::{backup, BackupSummary};
pub use manifest::{BackupKind, Manifest, MANIFEST_FILE};
pub use pace::{NoProgress, Progress};
pub use restore::{restore, RestoreOptions, RestoreSummary};

use crate::StoreUrl;
use berth_core::{Clock, Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The copy rate `berth backup` and `berth restore` keep to by default, in bytes per
/// second: what leaves a live server's appends their latency (docs/backup.md has the
/// measurement).
pub const RATE_BYTES_PER_S_DEFAULT: u64 = 64 * 1024 * 1024;

/// How a backup runs.
#[derive(Clone, Debug)]
pub struct BackupOptions {
    /// An incremental backup on top of the backup in this directory.
    pub since: Option<PathBuf>,
    /// At most this many bytes per second (`None`: as fast as the disks go).
    pub rate_bytes_per_s: Option<u64>,
    /// SQLite files of the data directory copied beside the catalog, by name (the
    /// server's API keys, `keys.sqlite`), when they exist.
    pub extra_files: Vec<String>,
    /// The backup's id (default: a new UUIDv7).
    pub id: Option<String>,
    /// Dates the manifest.
    pub clock: Arc<dyn Clock>,
}

impl BackupOptions {
    pub fn new(clock: Arc<dyn Clock>) -> BackupOptions {
        BackupOptions {
            since: None,
            rate_bytes_per_s: Some(RATE_BYTES_PER_S_DEFAULT),
            extra_files: Vec::new(),
            id: None,
            clock,
        }
    }
}

/// Backs up the store at `url` into `to`. Blocking (call it off an async runtime's
/// workers: `spawn_blocking`). Only embedded data directories: a PostgreSQL store is
/// refused with what to use instead.
pub fn backup_store(
    url: &StoreUrl,
    to: &Path,
    options: &BackupOptions,
    progress: &mut dyn Progress,
) -> Result<BackupSummary> {
    match url {
        StoreUrl::Embedded(root) => backup(root, to, options, progress),
        StoreUrl::Postgres(_) => Err(postgres_refusal()),
        StoreUrl::Memory => Err(Error::invalid("store", "a memory: store keeps nothing to back up")),
    }
}

/// What `berth backup` says on a PostgreSQL store.
pub fn postgres_refusal() -> Error {
    Error::invalid(
        "store",
        "berth backup copies an embedded data directory; back up a PostgreSQL store with PostgreSQL's own \
         tools: pg_dump (a logical copy: pg_dump -Fc, restored with pg_restore) or a base backup with WAL \
         archiving (pg_basebackup, for point-in-time recovery); see docs/backup.md",
    )
}
