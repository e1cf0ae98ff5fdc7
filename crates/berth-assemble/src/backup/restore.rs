//! Restoring a backup (`berth restore`) into a new data directory.
//!
//! Everything is built in a staging directory beside the target and checked there
//! before one `rename` publishes it, so a restore that fails or is killed leaves the
//! target as it was:
//!
//! 1. The manifest is read, and the chain of earlier backups an incremental one names,
//!    each manifest checked (same store, ids that match).
//! 2. Every file is copied from the backup that holds it, its size and SHA-256 checked
//!    against the manifest as it is copied.
//! 3. Each log is scanned with the recovery scanner `berth fsck` uses and truncated to
//!    its last complete record: a copy may end inside an append that was in progress
//!    after the snapshot (never one acknowledged before it). Its committed events must
//!    cover what the catalog's record says.
//! 4. The catalog is opened (which builds the search file from the items: it is never
//!    in a backup), its audit heads checked against the manifest's position, the
//!    sessions deleted during the backup removed (audited, as a delete is), and every
//!    tenant's audit chain verified; then `fsck` must find every log clean.
//! 5. Published: the staging directory renamed onto the target (an empty directory or a
//!    missing one; a non-empty one only with `force`, after it is moved aside, never
//!    deleted).

use super::manifest::{self, LogCopy, Manifest, MANIFEST_FILE};
use super::pace::{self, Copied, Pace, Progress};
use berth_catalog::audit::AuditDraft;
use berth_catalog::Catalog;
use berth_core::{Clock, Error, Location, Result, SessionKey};
use berth_jsonl::format::ScanStatus;
use berth_sqlite::SqliteCatalog;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How a restore runs.
#[derive(Clone, Debug)]
pub struct RestoreOptions {
    /// Restore over a non-empty target: its contents are moved aside first, to
    /// `<target>.replaced-<time>`.
    pub force: bool,
    /// At most this many bytes per second (`None`: as fast as the disks go).
    pub rate_bytes_per_s: Option<u64>,
    /// Dates the audit records of the deletions restore completes.
    pub clock: Arc<dyn Clock>,
}

/// What a restore did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RestoreSummary {
    /// The restored backup's id.
    pub id: String,
    /// Ids of the backups read, the restored one first.
    pub chain: Vec<String>,
    pub dir: PathBuf,
    /// When the restored backup's catalog snapshot was taken.
    pub snapshot_at: u64,
    pub sessions: u64,
    pub logs: u64,
    pub events: u64,
    /// Logs whose copy ended inside an append, truncated to their last complete record.
    pub logs_truncated: u64,
    pub bytes_truncated: u64,
    /// Sessions deleted during the backup whose deletion the restore completed.
    pub vanished_removed: u64,
    /// Tenants whose audit chain was verified.
    pub audit_tenants_verified: u64,
    /// Where a non-empty target was moved (with `force`).
    pub moved_aside: Option<PathBuf>,
    pub bytes: u64,
    pub seconds: f64,
}

/// Restores the backup in `from` (and the earlier backups it names) into `to`.
pub async fn restore(
    from: &Path,
    to: &Path,
    options: &RestoreOptions,
    progress: &mut (dyn Progress + Send),
) -> Result<RestoreSummary> {
    let from = from.canonicalize().map_err(|error| Error::io("open the backup", &error))?;
    let manifest = Manifest::read(&from)?;
    let chain = read_chain(&from, &manifest)?;
    let target = Target::check(to, &from, options.force)?;
    let staging = target.staging(&manifest.id)?;
    let outcome = async {
        let mut pace = Pace::new(options.rate_bytes_per_s);
        let copied = blocking(|| copy_all(&manifest, &chain, &staging, &mut pace, progress))?;
        let checked = check_catalog(&staging, &manifest, options.clock.as_ref()).await?;
        blocking(|| check_logs(&staging))?;
        Ok::<_, Error>((copied, checked, pace))
    }
    .await;
    let (copied, checked, pace) = match outcome {
        Ok(done) => done,
        Err(error) => {
            // Ours alone, never published: removed so a retry starts clean.
            let _ = std::fs::remove_dir_all(&staging);
            return Err(error);
        }
    };
    let moved_aside = blocking(|| target.publish(&staging, options.clock.now().0))?;
    progress.finish();
    Ok(RestoreSummary {
        id: manifest.id.clone(),
        chain: chain.order.clone(),
        dir: target.path.clone(),
        snapshot_at: manifest.snapshot_at,
        sessions: manifest.catalog.sessions,
        logs: manifest.logs.len() as u64,
        events: copied.events,
        logs_truncated: copied.logs_truncated,
        bytes_truncated: copied.bytes_truncated,
        vanished_removed: checked.vanished_removed,
        audit_tenants_verified: checked.tenants,
        moved_aside,
        bytes: pace.bytes(),
        seconds: pace.elapsed().as_secs_f64(),
    })
}

/// Runs file work on this thread; on a multi-thread runtime its worker's other tasks
/// are handed to another thread first (`block_in_place`), as the catalog's writes are.
fn blocking<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

/// The backups of a chain: id → directory, and the ids from the newest.
struct Chain {
    dirs: BTreeMap<String, PathBuf>,
    order: Vec<String>,
}

/// Follows `previous` from the newest backup to the full one at the chain's start.
fn read_chain(from: &Path, newest: &Manifest) -> Result<Chain> {
    let mut chain = Chain { dirs: BTreeMap::new(), order: Vec::new() };
    chain.dirs.insert(newest.id.clone(), from.to_path_buf());
    chain.order.push(newest.id.clone());
    let (mut dir, mut manifest) = (from.to_path_buf(), newest.clone());
    while let Some(previous) = manifest.previous.clone() {
        let earlier_dir = dir.join(&previous.dir);
        let earlier = Manifest::read(&earlier_dir).map_err(|error| {
            Error::invalid(
                "backup chain",
                format!(
                    "backup {} builds on {} at {}, which cannot be read ({error}); keep a chain's directories \
                     side by side",
                    manifest.id,
                    previous.id,
                    earlier_dir.display()
                ),
            )
        })?;
        if earlier.id != previous.id || earlier.store != newest.store {
            return Err(Error::invalid(
                "backup chain",
                format!("{} is not backup {} of this store", earlier_dir.display(), previous.id),
            ));
        }
        if chain.dirs.insert(earlier.id.clone(), earlier_dir.clone()).is_some() {
            return Err(Error::invalid("backup chain", format!("backup {} appears twice in its chain", earlier.id)));
        }
        chain.order.push(earlier.id.clone());
        (dir, manifest) = (earlier_dir, earlier);
    }
    for log in &newest.logs {
        if let Some(holder) = &log.stored_in {
            if !chain.dirs.contains_key(holder) {
                return Err(Error::invalid(
                    "backup chain",
                    format!("session {} is kept in backup {holder}, which is not in the chain", log.key()),
                ));
            }
        }
    }
    Ok(chain)
}

/// The directory restored into.
struct Target {
    path: PathBuf,
    /// It exists with something in it (restored over only with `force`).
    occupied: bool,
}

impl Target {
    fn check(to: &Path, from: &Path, force: bool) -> Result<Target> {
        let parent = match to.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let name = to.file_name().ok_or_else(|| Error::invalid("--to", "names no directory"))?;
        let parent = parent.canonicalize().map_err(|error| Error::io("open the target's parent directory", &error))?;
        let path = parent.join(name);
        if path.starts_with(from) || from.starts_with(&path) {
            return Err(Error::invalid("--to", "the target overlaps the backup"));
        }
        let occupied = match std::fs::read_dir(&path) {
            Ok(mut entries) => entries.next().is_some(),
            Err(error) if error.kind() == io::ErrorKind::NotFound => false,
            Err(error) => return Err(Error::io("list the target directory", &error)),
        };
        if occupied && !force {
            return Err(Error::AlreadyExists { what: "non-empty data directory", id: path.display().to_string() });
        }
        Ok(Target { path, occupied })
    }

    /// `.<name>.restoring-<id>` beside the target, made afresh.
    fn staging(&self, id: &str) -> Result<PathBuf> {
        let mut name = std::ffi::OsString::from(".");
        name.push(self.path.file_name().unwrap_or_default());
        name.push(format!(".restoring-{id}"));
        let staging = self.path.with_file_name(name);
        match std::fs::remove_dir_all(&staging) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => {
                return Err(Error::io("remove an earlier restore's staging directory", &error))
            }
            _ => {}
        }
        pace::create_dirs(&staging, &mut BTreeSet::new())
            .map_err(|error| Error::io("create the staging directory", &error))?;
        Ok(staging)
    }

    /// Renames `staging` onto the target; a non-empty target is first moved aside.
    fn publish(&self, staging: &Path, now: u64) -> Result<Option<PathBuf>> {
        let io_error = |operation| move |error: io::Error| Error::io(operation, &error);
        let mut moved_aside = None;
        if self.occupied {
            let mut name = self.path.file_name().unwrap_or_default().to_os_string();
            name.push(format!(".replaced-{now}"));
            let aside = self.path.with_file_name(name);
            std::fs::rename(&self.path, &aside).map_err(io_error("move the target aside"))?;
            moved_aside = Some(aside);
        }
        // Onto a missing or empty directory: `rename` replaces an empty one.
        std::fs::rename(staging, &self.path).map_err(io_error("publish the restored directory"))?;
        let parent = self.path.parent().unwrap_or(Path::new("/"));
        std::fs::File::open(parent).and_then(|dir| dir.sync_all()).map_err(io_error("sync the target's parent"))?;
        Ok(moved_aside)
    }
}

/// What the copies held.
struct CopiedLogs {
    events: u64,
    logs_truncated: u64,
    bytes_truncated: u64,
}

fn copy_all(
    manifest: &Manifest,
    chain: &Chain,
    staging: &Path,
    pace: &mut Pace,
    progress: &mut dyn Progress,
) -> Result<CopiedLogs> {
    let total = manifest.catalog.bytes
        + manifest.files.iter().map(|file| file.bytes).sum::<u64>()
        + manifest.logs.iter().map(|log| log.bytes).sum::<u64>();
    progress.plan(total);
    let newest = &chain.dirs[&manifest.id];
    let mut made = BTreeSet::new();
    let catalog = Copied { bytes: manifest.catalog.bytes, sha256: manifest.catalog.sha256.clone() };
    copy_file(newest, staging, crate::CATALOG_FILE, &catalog, pace, progress)?;
    for file in &manifest.files {
        let expected = Copied { bytes: file.bytes, sha256: file.sha256.clone() };
        copy_file(newest, staging, &file.file, &expected, pace, progress)?;
    }
    let mut copied = CopiedLogs { events: 0, logs_truncated: 0, bytes_truncated: 0 };
    for log in &manifest.logs {
        let holder = &chain.dirs[log.stored_in.as_ref().unwrap_or(&manifest.id)];
        let truncated = restore_log(holder, staging, log, &mut made, pace, progress)?;
        copied.events += log.events;
        if truncated > 0 {
            copied.logs_truncated += 1;
            copied.bytes_truncated += truncated;
        }
    }
    made.insert(staging.to_path_buf());
    pace::sync_dirs(&made).map_err(|error| Error::io("sync the restored directories", &error))?;
    Ok(copied)
}

fn copy_file(
    from: &Path,
    to: &Path,
    file: &str,
    expected: &Copied,
    pace: &mut Pace,
    progress: &mut dyn Progress,
) -> Result<()> {
    pace::copy_checked(&from.join(file), &to.join(file), expected, pace, progress).map_err(|error| {
        if error.kind() == io::ErrorKind::InvalidData {
            damaged(&from.join(file), error.to_string())
        } else {
            Error::io("copy a file from the backup", &error)
        }
    })
}

fn damaged(path: &Path, reason: String) -> Error {
    Error::Corrupt { reason, location: Location { artifact: path.display().to_string(), offset: None, seq: None } }
}

/// Copies one log (checked), truncates it to its last complete record, and copies its
/// epoch file. Returns the bytes truncated.
fn restore_log(
    holder: &Path,
    staging: &Path,
    log: &LogCopy,
    made: &mut BTreeSet<PathBuf>,
    pace: &mut Pace,
    progress: &mut dyn Progress,
) -> Result<u64> {
    let key = log.key();
    pace::create_dirs(&staging.join(manifest::session_dir(&key)), made)
        .map_err(|error| Error::io("create a session directory", &error))?;
    let expected = Copied { bytes: log.bytes, sha256: log.sha256.clone() };
    copy_file(holder, staging, &log.file, &expected, pace, progress)?;
    let restored = staging.join(&log.file);
    let scanned = berth_jsonl::fsck::scan_log(&berth_jsonl::fs::OsFs, &restored)
        .map_err(|error| Error::io("scan a restored log", &error))?;
    if let Some(error) = scanned.error(&log.file) {
        return Err(error);
    }
    let header_matches = scanned.header.as_ref().is_some_and(|record| record.header.key() == key);
    if !header_matches || scanned.committed_len != log.committed_bytes || scanned.events != log.events {
        return Err(damaged(
            &holder.join(&log.file),
            format!("the copy of session {key} does not hold what the manifest says it does"),
        ));
    }
    let truncated = log.bytes - scanned.committed_len;
    if let ScanStatus::TornTail { .. } = scanned.status {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&restored)
            .map_err(|error| Error::io("open a restored log", &error))?;
        file.set_len(scanned.committed_len)
            .and_then(|()| file.sync_all())
            .map_err(|error| Error::io("truncate a restored log", &error))?;
    }
    if let Some(epoch) = &log.epoch {
        let expected = Copied { bytes: epoch.bytes, sha256: epoch.sha256.clone() };
        copy_file(holder, staging, &epoch.file, &expected, pace, progress)?;
    }
    Ok(truncated)
}

/// What the catalog's checks found.
struct CheckedCatalog {
    vanished_removed: u64,
    tenants: u64,
}

/// Opens the restored catalog (building its search file), checks its position against
/// the manifest, completes the deletions that ran during the backup, and verifies every
/// tenant's audit chain.
async fn check_catalog(staging: &Path, manifest: &Manifest, clock: &dyn Clock) -> Result<CheckedCatalog> {
    let path = staging.join(crate::CATALOG_FILE);
    let catalog = tokio::task::spawn_blocking(move || SqliteCatalog::open(path))
        .await
        .map_err(|error| Error::Unavailable { reason: format!("opening the restored catalog stopped: {error}") })??;
    for position in &manifest.catalog.position {
        let head = catalog.audit_head(&position.tenant).await?;
        if head != Some((position.seq, position.hash.clone())) {
            return Err(Error::Corrupt {
                reason: format!("tenant {}'s audit head is not the one the manifest records", position.tenant),
                location: Location { artifact: MANIFEST_FILE.to_owned(), offset: None, seq: None },
            });
        }
    }
    let mut vanished_removed = 0;
    for name in &manifest.vanished {
        let key = SessionKey::new(name.tenant.clone(), name.session.clone());
        if remove_vanished(&catalog, &key, manifest, clock).await? {
            vanished_removed += 1;
        }
    }
    let tenants = catalog.tenants().await?;
    for tenant in &tenants {
        let verdict = berth_service::verify_tenant_audit(&catalog, tenant).await?;
        if let Some(seq) = verdict.broken_at {
            return Err(Error::Corrupt {
                reason: format!(
                    "tenant {tenant}'s audit chain breaks at entry {seq}: {}",
                    verdict.reason.unwrap_or_default()
                ),
                location: Location { artifact: crate::CATALOG_FILE.to_owned(), offset: None, seq: Some(seq) },
            });
        }
    }
    Ok(CheckedCatalog { vanished_removed, tenants: tenants.len() as u64 })
}

/// Removes the record of a session deleted during the backup (its log was erased
/// before it could be copied), with its audit record, as the delete would have.
async fn remove_vanished(
    catalog: &SqliteCatalog,
    key: &SessionKey,
    manifest: &Manifest,
    clock: &dyn Clock,
) -> Result<bool> {
    let Some(record) = catalog.get(key).await? else { return Ok(false) };
    let draft = AuditDraft {
        tenant: key.tenant.clone(),
        time: clock.now(),
        actor: "system:restore".to_owned(),
        action: "delete".to_owned(),
        session: Some(key.id.clone()),
        revision: Some(record.revision),
        outcome: "ok".to_owned(),
        details: serde_json::json!({
            "reason": "deleted while the backup was taken: its log was erased before it was copied",
            "backup": manifest.id,
            "events": record.event_count,
        }),
    };
    catalog.remove_audited(key, record.revision, vec![draft]).await?;
    Ok(true)
}

/// `berth fsck` over the restored directory: every log clean.
fn check_logs(staging: &Path) -> Result<()> {
    for report in berth_jsonl::fsck::check_root(staging)? {
        if !report.status.is_ok() {
            return Err(Error::Corrupt {
                reason: format!("the restored log is not clean: {:?}", report.status),
                location: Location { artifact: report.artifact, offset: None, seq: None },
            });
        }
    }
    Ok(())
}
