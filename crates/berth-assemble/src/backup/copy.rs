//! Taking a backup of a live data directory (`berth backup`).
//!
//! The order is what makes the copy consistent:
//!
//! 1. **The catalog first**, through SQLite's online backup API inside one read
//!    transaction (`berth_sqlite::snapshot`): the snapshot point. The sessions, runs,
//!    audit chain, retention policies and scoped memory are all as of that moment.
//! 2. **Then every session the snapshot lists, its log copied from byte 0 to its length
//!    when the copy starts** (to the end of its data: a preallocated log's zero tail is
//!    left out). Logs are append-only and the catalog lags its log, never
//!    leads it, so a log copied after the snapshot holds at least every event the
//!    snapshot implies (checked: the copy's committed events ≥ the record's count); it
//!    may hold more — later events, and maybe part of an append in progress, which
//!    restore truncates to the last complete record.
//! 3. **Reconciliation against the snapshot**: a session created after the snapshot is
//!    not in it and is not copied; a `creating` record's log is copied if it exists (what
//!    a crash at that point leaves, which the sweeper handles); a listed session whose log
//!    is gone, or whose log now carries another header (deleted and its id reused), was
//!    deleted during the backup and is named in the manifest's `vanished`, whose deletion
//!    restore completes.
//! 4. **The manifest last**, atomically, after every file is synced.
//!
//! Nothing is written under the live data directory, and nothing there is locked: the
//! catalog is read through a read-only connection, logs through read-only opens.

use super::manifest::{
    self, AuditPosition, BackupKind, CatalogCopy, FileCopy, LogCopy, Manifest, PreviousBackup, SessionName,
    MANIFEST_FORMAT, MANIFEST_VERSION,
};
use super::pace::{self, Pace, Progress};
use super::BackupOptions;
use berth_core::{Error, Location, Result, SessionKey};
use berth_jsonl::format::ScanStatus;
use berth_sqlite::snapshot::{CatalogSnapshot, SnapshotSession, SNAPSHOT_PAGES_PER_STEP};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// What a backup did (the CLI's `--json` and the server's answer).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BackupSummary {
    pub id: String,
    pub dir: PathBuf,
    pub kind: BackupKind,
    /// The backup an incremental one builds on.
    pub previous: Option<String>,
    /// When the catalog's snapshot was taken (ms since the epoch).
    pub snapshot_at: u64,
    pub sessions: u64,
    /// Logs copied by this backup.
    pub logs_copied: u64,
    /// Unchanged logs left in an earlier backup of the chain.
    pub logs_unchanged: u64,
    /// Sessions deleted while the backup ran.
    pub vanished: u64,
    /// Bytes this backup wrote (catalog, logs, other files).
    pub bytes: u64,
    pub seconds: f64,
    pub bytes_per_s: f64,
}

/// A log's earlier copy in the chain, and the backup holding it.
type Earlier = BTreeMap<SessionKey, LogCopy>;

/// Takes a backup of the data directory `root` into `to` (missing or empty). Blocking.
pub fn backup(root: &Path, to: &Path, options: &BackupOptions, progress: &mut dyn Progress) -> Result<BackupSummary> {
    let root = root.canonicalize().map_err(|error| Error::io("open the data directory", &error))?;
    let catalog_path = root.join(crate::CATALOG_FILE);
    if !catalog_path.is_file() {
        return Err(Error::invalid(
            "data directory",
            format!("{} holds no {}: not a berth data directory", root.display(), crate::CATALOG_FILE),
        ));
    }
    let since = options.since.as_deref().map(read_previous).transpose()?;
    let to = prepare_target(&root, to)?;
    let started_at = options.clock.now().0;
    let mut pace = Pace::new(options.rate_bytes_per_s);
    progress.plan(file_len(&catalog_path) + file_len(&with_suffix(&catalog_path, "-wal")));
    let snapshot_at = options.clock.now().0;
    let snapshot = snapshot(&catalog_path, &to, &mut pace, progress)?;
    check_chain(since.as_ref(), &snapshot)?;
    let catalog = catalog_copy(&to, &snapshot)?;
    let mut files = Vec::new();
    for name in &options.extra_files {
        files.extend(copy_sqlite_file(&root, &to, name)?);
    }
    let earlier: Earlier = since.as_ref().map(|(_, manifest)| earlier_copies(manifest)).unwrap_or_default();
    let mut copier = LogCopier { root: &root, to: &to, made: &mut BTreeSet::new(), pace: &mut pace, progress };
    let (logs, vanished) = copier.every_session(&snapshot, &earlier)?;
    let (kind, previous) = match &since {
        None => (BackupKind::Full, None),
        Some((dir, manifest)) => {
            (BackupKind::Incremental, Some(PreviousBackup { id: manifest.id.clone(), dir: relative_dir(&to, dir) }))
        }
    };
    let manifest = Manifest {
        format: MANIFEST_FORMAT.to_owned(),
        version: MANIFEST_VERSION,
        id: options.id.clone().unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
        kind,
        previous,
        store: snapshot.store_token.clone(),
        berth_version: env!("CARGO_PKG_VERSION").to_owned(),
        started_at,
        snapshot_at,
        finished_at: options.clock.now().0,
        catalog,
        files,
        logs,
        vanished,
    };
    manifest.write(&to)?;
    progress.finish();
    Ok(summary(&manifest, &to, &pace))
}

/// The catalog copy's entry: its checksum, and the snapshot's position.
fn catalog_copy(to: &Path, snapshot: &CatalogSnapshot) -> Result<CatalogCopy> {
    let copied =
        pace::hash_file(&to.join(crate::CATALOG_FILE)).map_err(|error| Error::io("hash the catalog copy", &error))?;
    Ok(CatalogCopy {
        file: crate::CATALOG_FILE.to_owned(),
        bytes: copied.bytes,
        sha256: copied.sha256,
        schema_version: snapshot.schema_version,
        sessions: snapshot.sessions.len() as u64,
        position: snapshot
            .audit_heads
            .iter()
            .map(|head| AuditPosition { tenant: head.tenant.clone(), seq: head.seq, hash: head.hash.clone() })
            .collect(),
    })
}

fn summary(manifest: &Manifest, to: &Path, pace: &Pace) -> BackupSummary {
    let seconds = pace.elapsed().as_secs_f64();
    BackupSummary {
        id: manifest.id.clone(),
        dir: to.to_path_buf(),
        kind: manifest.kind,
        previous: manifest.previous.as_ref().map(|previous| previous.id.clone()),
        snapshot_at: manifest.snapshot_at,
        sessions: manifest.catalog.sessions,
        logs_copied: manifest.logs.iter().filter(|log| log.stored_in.is_none()).count() as u64,
        logs_unchanged: manifest.logs.iter().filter(|log| log.stored_in.is_some()).count() as u64,
        vanished: manifest.vanished.len() as u64,
        bytes: pace.bytes(),
        seconds,
        bytes_per_s: if seconds > 0.0 { pace.bytes() as f64 / seconds } else { 0.0 },
    }
}

/// The backup directory: created (owner-only) if missing; if it exists, it must be an
/// empty directory. Never inside the data directory (nor the data directory inside it).
fn prepare_target(root: &Path, to: &Path) -> Result<PathBuf> {
    let mut made = BTreeSet::new();
    pace::create_dirs(to, &mut made)
        .and_then(|()| pace::sync_dirs(&made))
        .map_err(|error| Error::io("create the backup directory", &error))?;
    let to = to.canonicalize().map_err(|error| Error::io("open the backup directory", &error))?;
    if to.starts_with(root) || root.starts_with(&to) {
        return Err(Error::invalid(
            "--to",
            format!("the backup directory {} overlaps the data directory {}", to.display(), root.display()),
        ));
    }
    let mut entries = std::fs::read_dir(&to).map_err(|error| Error::io("list the backup directory", &error))?;
    if entries.next().is_some() {
        return Err(Error::AlreadyExists { what: "non-empty backup directory", id: to.display().to_string() });
    }
    Ok(to)
}

fn read_previous(dir: &Path) -> Result<(PathBuf, Manifest)> {
    let dir = dir.canonicalize().map_err(|error| match error.kind() {
        io::ErrorKind::NotFound => Error::NotFound { what: "backup", id: dir.display().to_string() },
        _ => Error::io("open the --since backup", &error),
    })?;
    let manifest = Manifest::read(&dir)?;
    Ok((dir, manifest))
}

/// An incremental backup is of the store its previous backup is of.
fn check_chain(since: Option<&(PathBuf, Manifest)>, snapshot: &CatalogSnapshot) -> Result<()> {
    match since {
        Some((dir, manifest)) if manifest.store != snapshot.store_token => Err(Error::invalid(
            "--since",
            format!("{} is a backup of another store (its catalog's identity differs)", dir.display()),
        )),
        _ => Ok(()),
    }
}

/// Where each log of the previous backup's chain is: its entries, each naming the
/// backup that holds its bytes.
fn earlier_copies(previous: &Manifest) -> Earlier {
    previous
        .logs
        .iter()
        .map(|log| {
            let mut log = log.clone();
            log.stored_in = Some(log.stored_in.unwrap_or_else(|| previous.id.clone()));
            (log.key(), log)
        })
        .collect()
}

/// `dir` as the manifest of the backup in `to` names it: `../name` for a sibling.
fn relative_dir(to: &Path, dir: &Path) -> String {
    match (to.parent(), dir.parent(), dir.file_name()) {
        (Some(a), Some(b), Some(name)) if a == b => Path::new("..").join(name).to_string_lossy().into_owned(),
        _ => dir.to_string_lossy().into_owned(),
    }
}

fn snapshot(catalog: &Path, to: &Path, pace: &mut Pace, progress: &mut dyn Progress) -> Result<CatalogSnapshot> {
    let mut reported = 0;
    berth_sqlite::snapshot::snapshot_catalog(
        catalog,
        &to.join(crate::CATALOG_FILE),
        SNAPSHOT_PAGES_PER_STEP,
        &mut |copied, _total| {
            let step = copied.saturating_sub(reported);
            reported = copied;
            progress.advance(step);
            pace.account(step);
        },
    )
}

/// Copies the SQLite file `name` of the data directory, if there is one.
fn copy_sqlite_file(root: &Path, to: &Path, name: &str) -> Result<Option<FileCopy>> {
    if !manifest::is_plain_file_name(name) {
        return Err(Error::invalid("file", format!("{name:?} is not a plain file name")));
    }
    let source = root.join(name);
    if !source.is_file() {
        return Ok(None);
    }
    let dest = to.join(name);
    berth_sqlite::snapshot::online_copy(&source, &dest)?;
    let copied = pace::hash_file(&dest).map_err(|error| Error::io("hash a copied file", &error))?;
    Ok(Some(FileCopy { file: name.to_owned(), bytes: copied.bytes, sha256: copied.sha256 }))
}

/// Each listed session's log size now, for the progress's total (the copy takes the
/// size again when it opens the log).
fn plan_logs(root: &Path, sessions: &[SnapshotSession]) -> BTreeMap<SessionKey, u64> {
    sessions
        .iter()
        .filter_map(|session| {
            let len = std::fs::symlink_metadata(root.join(manifest::log_file(&session.key))).ok()?.len();
            Some((session.key.clone(), len))
        })
        .collect()
}

fn open_read_only(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path)
}

enum Outcome {
    Copied(Box<LogCopy>),
    /// A `creating` record whose log was never published: nothing to copy.
    NoLog,
    Vanished,
}

struct LogCopier<'a> {
    root: &'a Path,
    to: &'a Path,
    made: &'a mut BTreeSet<PathBuf>,
    pace: &'a mut Pace,
    progress: &'a mut dyn Progress,
}

impl LogCopier<'_> {
    /// Every session of the snapshot, in its order: the logs copied (or left in an
    /// earlier backup), and the sessions deleted meanwhile. Syncs what it made.
    fn every_session(
        &mut self,
        snapshot: &CatalogSnapshot,
        earlier: &Earlier,
    ) -> Result<(Vec<LogCopy>, Vec<SessionName>)> {
        let plan = plan_logs(self.root, &snapshot.sessions);
        self.progress.plan(snapshot.bytes + plan.values().sum::<u64>());
        let (mut logs, mut vanished) = (Vec::new(), Vec::new());
        for session in &snapshot.sessions {
            match self.session(session, earlier.get(&session.key))? {
                Outcome::Copied(log) => logs.push(*log),
                Outcome::NoLog => {}
                Outcome::Vanished => {
                    vanished.push(SessionName { tenant: session.key.tenant.clone(), session: session.key.id.clone() })
                }
            }
        }
        pace::sync_dirs(self.made).map_err(|error| Error::io("sync the backup's directories", &error))?;
        Ok((logs, vanished))
    }

    fn session(&mut self, session: &SnapshotSession, earlier: Option<&LogCopy>) -> Result<Outcome> {
        let live = match open_read_only(&self.root.join(manifest::log_file(&session.key))) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Ok(if session.creating { Outcome::NoLog } else { Outcome::Vanished });
            }
            Err(error) => return Err(Error::io("open a log", &error)),
        };
        // The length now, after the snapshot: at least every event the snapshot implies.
        // Without a preallocated log's zero tail (unwritten space, never data): a copy
        // holds the log's data only, and an unchanged log compares equal to it.
        let len = live.metadata().map_err(|error| Error::io("stat a log", &error))?.len();
        let len =
            berth_jsonl::format::zero_tail::data_end(&live, 0, len).map_err(|error| Error::io("read a log", &error))?;
        if let Some(earlier) = earlier {
            if unchanged(earlier, &live, len, session.event_count)? {
                self.progress.advance(len);
                let mut log = earlier.clone();
                log.catalog_events = session.event_count;
                return Ok(Outcome::Copied(Box::new(log)));
            }
        }
        let key = &session.key;
        let file = manifest::log_file(key);
        let dest = self.to.join(&file);
        let io_error = |operation| move |error: io::Error| Error::io(operation, &error);
        pace::create_dirs(&self.to.join(manifest::session_dir(key)), self.made)
            .map_err(io_error("create a directory in the backup"))?;
        let copied = pace::copy_prefix(&live, len, &dest, self.pace, self.progress).map_err(io_error("copy a log"))?;
        let scanned =
            berth_jsonl::fsck::scan_log(&berth_jsonl::fs::OsFs, &dest).map_err(io_error("scan a log copy"))?;
        let same_session = scanned.header.as_ref().is_some_and(|record| record.header == session.header);
        if matches!(scanned.status, ScanStatus::Clean | ScanStatus::TornTail { .. }) && !same_session {
            // Another session of this id: the snapshot's was deleted, its id reused.
            std::fs::remove_file(&dest).map_err(io_error("remove a log copy"))?;
            return Ok(Outcome::Vanished);
        }
        if let Some(error) = scanned.error(&file) {
            return Err(error);
        }
        if scanned.events < session.event_count {
            return Err(Error::Corrupt {
                reason: format!(
                    "the log holds {} events but the catalog's record says {}: the catalog leads its log",
                    scanned.events, session.event_count
                ),
                location: Location { artifact: file, offset: None, seq: None },
            });
        }
        let header = read_prefix(&dest, scanned.header_len).map_err(io_error("read a log copy's header"))?;
        let epoch = self.copy_epoch(key)?;
        Ok(Outcome::Copied(Box::new(LogCopy {
            tenant: key.tenant.clone(),
            session: key.id.clone(),
            file,
            bytes: copied.bytes,
            sha256: copied.sha256,
            committed_bytes: scanned.committed_len,
            events: scanned.events,
            catalog_events: session.event_count,
            header_bytes: scanned.header_len,
            header_sha256: pace::sha256_hex(&header),
            epoch,
            stored_in: None,
        })))
    }

    /// The session's epoch file (a few bytes, replaced atomically by rename: whole).
    fn copy_epoch(&mut self, key: &SessionKey) -> Result<Option<FileCopy>> {
        let file = manifest::epoch_file(key);
        let source = match open_read_only(&self.root.join(&file)) {
            Ok(source) => source,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(Error::io("open an epoch file", &error)),
        };
        let copied = pace::copy_prefix(&source, u64::MAX, &self.to.join(&file), self.pace, self.progress)
            .map_err(|error| Error::io("copy an epoch file", &error))?;
        Ok(Some(FileCopy { file, bytes: copied.bytes, sha256: copied.sha256 }))
    }
}

/// Is the live log exactly the earlier copy? Only when that copy was all committed
/// records (no part of an append in progress), the live log has its length, and starts
/// with its header: committed records are never removed, so the bytes are the same.
fn unchanged(earlier: &LogCopy, live: &File, len: u64, catalog_events: u64) -> Result<bool> {
    if earlier.bytes != earlier.committed_bytes || len != earlier.bytes || earlier.events < catalog_events {
        return Ok(false);
    }
    let mut header = vec![0_u8; usize::try_from(earlier.header_bytes).unwrap_or(0)];
    use std::os::unix::fs::FileExt;
    live.read_exact_at(&mut header, 0).map_err(|error| Error::io("read a log's header", &error))?;
    Ok(pace::sha256_hex(&header) == earlier.header_sha256)
}

fn read_prefix(path: &Path, len: u64) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut bytes = vec![0_u8; usize::try_from(len).unwrap_or(0)];
    File::open(path)?.read_exact_at(&mut bytes, 0)?;
    Ok(bytes)
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|meta| meta.len()).unwrap_or(0)
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}
