//! `JsonlBackend`: the `LogBackend` of the embedded store. One directory per session,
//! `<root>/tenants/<tenant>/sessions/<id>/`, holding the log, the lock file, the epoch
//! file and any kept torn-tail copies. Paths use the tenant and the session id because
//! that pair is the session's key (ids are unique per tenant); the user and project live
//! in the header, so a session never moves when they are looked up differently.

use crate::dir_sync::GroupDirSync;
use crate::format::{self, LineCursor, LineFault, NextLine, LOG_FILE, LOG_TEMP_PREFIX, SESSIONS_DIR, TENANTS_DIR};
use crate::fs::{write_all_at, Fs, FsFile, OpenOptions, OsFs};
use crate::idle_tails::IdleTails;
use crate::lease;
use crate::log::{FileSource, LogView, SparseIndex};
use crate::prealloc::Prealloc;
use crate::writer::{JsonlWriter, PendingTruncation, WriterCore};
use async_trait::async_trait;
use berth_core::{Epoch, Error, Event, Location, Result, SessionHeader, SessionId, SessionKey};
use berth_store::{ChangeToken, ListQuery, LogBackend, LogReader, LogStat, LogWriter};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// When appends reach stable storage (R-J5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// `fdatasync` before every append returns: an acknowledged append survives power
    /// loss (on a medium that honours flushes).
    #[default]
    PerAppend,
    /// Appends are written but synced only at flush and close: an acknowledged append
    /// survives a process crash, but only a completed flush survives power loss.
    Barrier,
}

/// Configuration of a `JsonlBackend`.
#[derive(Clone)]
pub struct JsonlOptions {
    pub durability: Durability,
    /// Create logs that grow in preallocated, zero-filled extents (log format version
    /// 2), so that a `PerAppend` append's `fdatasync` flushes data without a metadata
    /// commit. On by default (`PREALLOCATE_DEFAULT`). Logs created without it stay
    /// classic (version 1); a log of either version is read and written correctly whatever the setting.
    pub preallocate: bool,
    /// Appends a write handle makes before it starts preallocating (so a short-lived
    /// handle never does); tests set 0 to preallocate from the first append.
    pub preallocate_after_appends: u64,
    /// The file system (the real one, or a fault-injecting one in tests).
    pub fs: Arc<dyn Fs>,
}

/// Whether new logs are preallocated by default (`JsonlOptions::preallocate`).
pub const PREALLOCATE_DEFAULT: bool = true;

impl Default for JsonlOptions {
    fn default() -> Self {
        JsonlOptions {
            durability: Durability::PerAppend,
            preallocate: PREALLOCATE_DEFAULT,
            preallocate_after_appends: crate::prealloc::APPENDS_BEFORE,
            fs: Arc::new(OsFs),
        }
    }
}

impl std::fmt::Debug for JsonlOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonlOptions")
            .field("durability", &self.durability)
            .field("preallocate", &self.preallocate)
            .finish_non_exhaustive()
    }
}

/// The embedded JSONL backend over one data root. Cheap to clone.
#[derive(Clone, Debug)]
pub struct JsonlBackend {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    options: JsonlOptions,
    /// Directories whose entry in their parent this process made durable (`ensure_dir`).
    durable_dirs: DurableDirs,
    /// The open write handles on version-2 logs, whose idle tails a sweeper gives back.
    idle_tails: Arc<IdleTails>,
    /// Parent-directory syncs shared by concurrent creates (`ensure_dir`).
    dir_syncs: GroupDirSync,
}

impl Inner {
    fn new(root: PathBuf, options: JsonlOptions) -> Inner {
        Inner {
            root,
            options,
            durable_dirs: DurableDirs::default(),
            idle_tails: Arc::default(),
            dir_syncs: GroupDirSync::default(),
        }
    }
}

/// Runs blocking file work off the async runtime.
pub(crate) async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|join| Err(Error::Unavailable { reason: format!("storage task failed: {join}") }))
}

/// Runs a short piece of file work (an append's write and `fdatasync`, a read of a
/// range) on the calling thread. On a multi-thread runtime, `block_in_place` first hands
/// this worker's other tasks to another thread, so they keep running while it waits on
/// the disk. Handing the work to the blocking pool instead costs two thread hops per
/// operation, which on a fast disk is as long as the `fdatasync` itself (a W1 profile of
/// `berth bench`, 2026-11-30).
pub(crate) fn in_place<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

fn symlink_refused(artifact: String) -> Error {
    Error::Corrupt {
        reason: "a symlink inside the data root; refusing to follow it".into(),
        location: Location { artifact, offset: None, seq: None },
    }
}

/// Maps an error opening a session file: `NotFound` for a missing session, `Corrupt` for a
/// symlink (`ELOOP` under `O_NOFOLLOW`), `Io` otherwise.
fn open_error(error: &io::Error, key: &SessionKey, artifact: &str, operation: &'static str) -> Error {
    if error.kind() == io::ErrorKind::NotFound {
        return Error::session_not_found(&key.id);
    }
    if error.raw_os_error() == Some(libc::ELOOP) {
        return symlink_refused(artifact.to_owned());
    }
    Error::io(operation, error)
}

fn header_error(fault: LineFault, artifact: &str) -> Error {
    let location = Location { artifact: artifact.to_owned(), offset: Some(0), seq: None };
    match fault {
        LineFault::Damaged => Error::Corrupt { reason: "header record fails its checksum".into(), location },
        LineFault::Invalid(reason) => Error::Corrupt { reason, location },
        LineFault::Unsupported(reason) => Error::FormatUnsupported { reason, location: Some(location) },
    }
}

/// Reads and decodes line 1 of an open log; returns it and its length.
fn read_header(file: &dyn FsFile, key: &SessionKey, artifact: &str) -> Result<(format::HeaderRecord, u64)> {
    let len = file.len().map_err(|error| Error::io("stat log", &error))?;
    let mut cursor = LineCursor::with_chunk_bytes(0, len, format::SHORT_READ_CHUNK_BYTES);
    let record = match cursor.next_line(&FileSource(file)).map_err(|error| Error::io("read log", &error))? {
        NextLine::Line { bytes, .. } => {
            format::decode_header_line(bytes).map_err(|fault| header_error(fault, artifact))?
        }
        NextLine::Unterminated { .. } | NextLine::End => {
            return Err(header_error(LineFault::Invalid("header record is missing or incomplete".into()), artifact))
        }
    };
    check_header_key(&record.header, key, artifact)?;
    Ok((record, cursor.position()))
}

fn check_header_key(header: &SessionHeader, key: &SessionKey, artifact: &str) -> Result<()> {
    if header.key() != *key {
        return Err(Error::Corrupt {
            reason: format!("header names session {} but the log is stored as {key}", header.key()),
            location: Location { artifact: artifact.to_owned(), offset: Some(0), seq: None },
        });
    }
    Ok(())
}

impl JsonlBackend {
    /// Opens the data root, creating it (mode 0700) if missing.
    pub fn open(root: impl Into<PathBuf>, options: JsonlOptions) -> Result<JsonlBackend> {
        let root = root.into();
        let created = JsonlBackend { inner: Arc::new(Inner::new(root, options)) };
        created.create_root()?;
        // Every path the backend builds starts at the root's canonical path: a symlink
        // above the root (a data directory reached through one) is resolved here, once,
        // and every open below refuses a symlink in any component (see `fs`).
        let root = created.fs().canonicalize(created.root()).map_err(|error| Error::io("resolve data root", &error))?;
        let options = created.inner.options.clone();
        let backend = JsonlBackend { inner: Arc::new(Inner::new(root, options)) };
        if let Some(kind) = backend.network_filesystem() {
            tracing::warn!(
                root = %backend.root().display(),
                filesystem = kind,
                "the data root is on a network file system: fsync, flock and link there do not give the \
                 durability and single-writer guarantees berth's embedded backend relies on; use a local disk \
                 (or PostgreSQL for shared storage)"
            );
        }
        Ok(backend)
    }

    /// The network file system the data root is on (NFS, SMB, …), if any: berth's
    /// embedded backend assumes a local one and warns at open.
    pub fn network_filesystem(&self) -> Option<&'static str> {
        self.fs().network_filesystem(self.root()).ok().flatten()
    }

    fn create_root(&self) -> Result<()> {
        let fs = self.fs();
        let mut missing = Vec::new();
        let mut path = self.inner.root.as_path();
        loop {
            match fs.metadata(path) {
                Ok(meta) if meta.is_dir || meta.is_symlink => break,
                Ok(_) => return Err(Error::invalid("data root", format!("{} is not a directory", path.display()))),
                Err(error) if error.kind() == io::ErrorKind::NotFound => missing.push(path.to_path_buf()),
                Err(error) => return Err(Error::io("stat data root", &error)),
            }
            match path.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => path = parent,
                _ => break,
            }
        }
        for directory in missing.iter().rev() {
            ensure_dir(fs, directory, &self.inner)?;
        }
        Ok(())
    }

    /// Creates now waiting for a shared sync of a parent directory to finish (a test
    /// watches it to crash at a chosen point of a group sync).
    pub fn directory_syncs_waiting(&self) -> usize {
        self.inner.dir_syncs.waiting()
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    pub fn options(&self) -> &JsonlOptions {
        &self.inner.options
    }

    fn fs(&self) -> &dyn Fs {
        self.inner.options.fs.as_ref()
    }

    fn tenant_sessions_dir(&self, tenant: &berth_core::TenantId) -> PathBuf {
        self.inner.root.join(TENANTS_DIR).join(format::encode_segment(tenant.as_str())).join(SESSIONS_DIR)
    }

    /// `<root>/tenants/<tenant>/sessions/<id>`.
    pub fn session_dir(&self, key: &SessionKey) -> PathBuf {
        self.inner.root.join(format::session_dir_in_root(key))
    }

    /// `<session dir>/session.jsonl`.
    pub fn log_path(&self, key: &SessionKey) -> PathBuf {
        self.session_dir(key).join(LOG_FILE)
    }

    /// The log's path relative to the root: how errors name it (never an absolute path).
    pub fn artifact(&self, key: &SessionKey) -> String {
        format!(
            "{TENANTS_DIR}/{}/{SESSIONS_DIR}/{}/{LOG_FILE}",
            format::encode_segment(key.tenant.as_str()),
            format::encode_segment(key.id.as_str())
        )
    }

    /// The directories between the root and the session directory, outermost first.
    fn session_dir_chain(&self, key: &SessionKey) -> [PathBuf; 4] {
        let tenants = self.inner.root.join(TENANTS_DIR);
        let tenant = tenants.join(format::encode_segment(key.tenant.as_str()));
        let sessions = tenant.join(SESSIONS_DIR);
        let session = sessions.join(format::encode_segment(key.id.as_str()));
        [tenants, tenant, sessions, session]
    }

    /// Checks that no directory between the root and the session is a symlink.
    /// `Ok(false)` if one is missing.
    fn check_session_dirs(&self, key: &SessionKey) -> Result<bool> {
        for directory in self.session_dir_chain(key) {
            match self.fs().metadata(&directory) {
                Ok(meta) if meta.is_dir => {}
                Ok(meta) if meta.is_symlink => return Err(symlink_refused(self.relative(&directory))),
                Ok(_) => {
                    return Err(Error::invalid(
                        "data root",
                        format!("{} is not a directory", self.relative(&directory)),
                    ))
                }
                Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
                Err(error) => return Err(Error::io("stat session directory", &error)),
            }
        }
        Ok(true)
    }

    fn relative(&self, path: &Path) -> String {
        path.strip_prefix(&self.inner.root).unwrap_or(path).display().to_string()
    }

    // -----------------------------------------------------------------------------------
    // Blocking implementations

    /// `stat` without the runtime: reads only the header line and file metadata.
    pub fn stat_blocking(&self, key: &SessionKey) -> Result<Option<LogStat>> {
        if !self.check_session_dirs(key)? {
            return Ok(None);
        }
        let artifact = self.artifact(key);
        let file = match self.fs().open(&self.log_path(key), OpenOptions::read_only()) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(open_error(&error, key, &artifact, "open log")),
        };
        let meta = file.metadata().map_err(|error| Error::io("stat log", &error))?;
        let (record, header_len) = read_header(file.as_ref(), key, &artifact)?;
        // The size of the data: an append into a preallocated tail changes it, not the
        // file's length (one byte read when the log has no tail).
        let size = match record.zero_tail {
            true => format::zero_tail::first_nul(&FileSource(file.as_ref()), header_len, meta.len)
                .map_err(|error| Error::io("read log", &error))?,
            false => meta.len,
        };
        // Only the log's own identity, data size and times: the lock and epoch files are
        // separate, so ownership churn never changes the token.
        let token = format!("jsonl:{}:{}:{}:{}:{}", meta.dev, meta.ino, size, meta.mtime_ns, meta.ctime_ns);
        Ok(Some(LogStat {
            header: record.header,
            change_token: ChangeToken(token),
            event_count: None,
            size_bytes: Some(size),
        }))
    }

    /// `list` without the runtime: reads header lines only, in id order, stopping at
    /// `limit` matches. A session whose header cannot be read is skipped with a warning
    /// (`fsck` reports it) so one damaged log does not hide a tenant's others.
    pub fn list_blocking(&self, query: &ListQuery) -> Result<Vec<LogStat>> {
        let directory = self.tenant_sessions_dir(&query.tenant);
        // A symlinked `tenants`, tenant or `sessions` directory would list (names of)
        // directories outside the root: refused like every other path through one.
        let tenant = directory.parent().map(Path::to_path_buf).unwrap_or_default();
        let tenants = tenant.parent().map(Path::to_path_buf).unwrap_or_default();
        for chain in [&tenants, &tenant, &directory] {
            match self.fs().metadata(chain) {
                Ok(meta) if meta.is_symlink => return Err(symlink_refused(self.relative(chain))),
                Ok(_) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(error) => return Err(Error::io("list sessions", &error)),
            }
        }
        let names = match self.fs().read_dir(&directory) {
            Ok(names) => names,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(Error::io("list sessions", &error)),
        };
        let mut ids: Vec<SessionId> = names
            .iter()
            .filter_map(|name| name.to_str())
            .filter_map(format::decode_segment)
            .filter_map(|id| SessionId::parse(&id).ok())
            .filter(|id| query.after.as_ref().is_none_or(|after| id > after))
            .collect();
        ids.sort();
        let mut items = Vec::new();
        for id in ids {
            if items.len() >= query.limit {
                break;
            }
            let key = SessionKey::new(query.tenant.clone(), id);
            match self.stat_blocking(&key) {
                Ok(Some(stat)) if query.matches(&stat.header) => items.push(stat),
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(session = %key, %error, "listing skips a session whose header is unreadable")
                }
            }
        }
        Ok(items)
    }

    fn open_reader_blocking(&self, key: &SessionKey) -> Result<JsonlReader> {
        if !self.check_session_dirs(key)? {
            return Err(Error::session_not_found(&key.id));
        }
        let artifact = self.artifact(key);
        let file = self
            .fs()
            .open(&self.log_path(key), OpenOptions::read_only())
            .map_err(|error| open_error(&error, key, &artifact, "open log"))?;
        let (record, header_len) = read_header(file.as_ref(), key, &artifact)?;
        let mut view = LogView::new(file, artifact, header_len, record.epoch);
        view.set_zero_tail(record.zero_tail);
        Ok(JsonlReader { header: record.header, view: Arc::new(Mutex::new(view)) })
    }

    /// The write open, synchronously: lease, full scan, durable epoch bump.
    pub(crate) fn open_writer_blocking(&self, key: &SessionKey) -> Result<WriterCore> {
        if !self.check_session_dirs(key)? {
            return Err(Error::session_not_found(&key.id));
        }
        let fs = self.fs();
        let session_dir = self.session_dir(key);
        let log_path = self.log_path(key);
        let artifact = self.artifact(key);
        match fs.metadata(&log_path) {
            Ok(meta) if meta.is_symlink => return Err(symlink_refused(artifact)),
            Ok(_) => {}
            Err(error) => return Err(open_error(&error, key, &artifact, "stat log")),
        }
        let lease = lease::acquire(fs, &session_dir, key.id.as_str())?;
        let file = fs
            .open(&log_path, OpenOptions::read_write())
            .map_err(|error| open_error(&error, key, &artifact, "open log"))?;
        let len = file.len().map_err(|error| Error::io("stat log", &error))?;
        let mut index = SparseIndex::new();
        let outcome = format::scan_source(&FileSource(file.as_ref()), len, &mut |seq, offset| index.note(seq, offset))
            .map_err(|error| Error::io("scan log", &error))?;
        if let Some(error) = outcome.error(&artifact) {
            return Err(error);
        }
        let Some(record) = outcome.header.clone() else {
            return Err(header_error(LineFault::Invalid("header record is missing".into()), &artifact));
        };
        check_header_key(&record.header, key, &artifact)?;
        let torn = match outcome.status {
            format::ScanStatus::TornTail { torn_bytes } => {
                Some(PendingTruncation { committed_len: outcome.committed_len, torn_bytes })
            }
            _ => None,
        };
        let stored_epoch = lease::read_epoch(fs, &session_dir, &self.relative(&session_dir))?;
        let epoch = Epoch(stored_epoch.0.max(outcome.last_epoch.0) + 1);
        lease::write_epoch(fs, &session_dir, epoch)?;
        remove_leftover_temp_logs(fs, &session_dir);
        let mut view = LogView::new(file, artifact, outcome.header_len, record.epoch);
        view.set_index(index);
        view.set_known(outcome.events, outcome.committed_len, outcome.last_epoch);
        view.set_zero_tail(record.zero_tail);
        let options = &self.inner.options;
        let prealloc =
            record.zero_tail.then(|| Prealloc::new(options.preallocate, options.preallocate_after_appends, len));
        Ok(WriterCore::new(
            self.inner.options.fs.clone(),
            key.id.to_string(),
            session_dir,
            lease,
            view,
            record.header,
            epoch,
            self.inner.options.durability,
            torn,
            prealloc,
        ))
    }

    /// Materialization, synchronously: directories, lease, temp file with the header and
    /// first batch (stamped with the next epoch), fsync, no-overwrite publish (`link`),
    /// directory fsync.
    pub(crate) fn materialize_blocking(&self, header: &SessionHeader, first_batch: &[Event]) -> Result<WriterCore> {
        let key = header.key();
        let fs = self.fs();
        let already_exists = || Error::AlreadyExists { what: "session", id: key.id.to_string() };
        let chain = self.session_dir_chain(&key);
        for directory in &chain {
            ensure_dir(fs, directory, &self.inner)?;
        }
        let session_dir = self.session_dir(&key);
        let log_path = self.log_path(&key);
        let artifact = self.artifact(&key);
        if log_exists(fs, &log_path)? {
            return Err(already_exists());
        }
        // Another holder means the session exists or is being created elsewhere.
        let lease = lease::acquire(fs, &session_dir, key.id.as_str()).map_err(|error| match error {
            Error::AlreadyOwned { .. } => already_exists(),
            other => other,
        })?;
        if log_exists(fs, &log_path)? {
            return Err(already_exists());
        }
        remove_leftover_temp_logs(fs, &session_dir);
        // Not written to `session.epoch`: the published header carries it, and every
        // later writer takes the larger of the two (§5 of docs/reference/storage-format.md). An
        // unpublished attempt's epoch was never seen, so reusing it after a crash is safe.
        let epoch = Epoch(lease::read_epoch(fs, &session_dir, &self.relative(&session_dir))?.0 + 1);
        let zero_tail = self.inner.options.preallocate
            && format::log_version(header.version, true) == format::LOG_FORMAT_VERSION_ZERO_TAIL;
        let mut bytes = format::encode_header_line_for(header, epoch, zero_tail);
        let header_len = bytes.len() as u64;
        let mut line_offsets = Vec::with_capacity(first_batch.len());
        for event in first_batch {
            line_offsets.push(bytes.len() as u64);
            bytes.extend_from_slice(&format::encode_event_line(event, epoch));
        }
        let temp_path = session_dir.join(format!("{LOG_TEMP_PREFIX}{epoch}"));
        publish_new_file(fs, &temp_path, &log_path, &bytes).map_err(|error| match error {
            Error::Io { kind: io::ErrorKind::AlreadyExists, .. } => already_exists(),
            other => other,
        })?;
        fs.sync_dir(&session_dir).map_err(|error| Error::io("sync session directory", &error))?;
        if let Err(error) = fs.remove_file(&temp_path) {
            tracing::warn!(path = %temp_path.display(), %error, "could not remove a published temp file");
        }
        let file = fs
            .open(&log_path, OpenOptions::read_write())
            .map_err(|error| open_error(&error, &key, &artifact, "open log"))?;
        let mut view = LogView::new(file, artifact, header_len, epoch);
        view.note_appended(0, &line_offsets, bytes.len() as u64, epoch);
        view.set_zero_tail(zero_tail);
        let after = self.inner.options.preallocate_after_appends;
        let prealloc = zero_tail.then(|| Prealloc::new(true, after, bytes.len() as u64));
        Ok(WriterCore::new(
            self.inner.options.fs.clone(),
            key.id.to_string(),
            session_dir,
            lease,
            view,
            header.clone(),
            epoch,
            self.inner.options.durability,
            None,
            prealloc,
        ))
    }

    /// Deletes a session's directory (the service's delete). Takes the writer lease
    /// first, so a session with a live writer anywhere is refused (`AlreadyOwned`).
    /// `Ok(false)` if there was nothing to delete. The log is removed first (and that
    /// made durable): from then on the session does not exist, whatever happens next.
    pub async fn erase(&self, key: &SessionKey) -> Result<bool> {
        let backend = self.clone();
        let key = key.clone();
        blocking(move || backend.erase_blocking(&key)).await
    }

    /// `erase` without the runtime.
    pub fn erase_blocking(&self, key: &SessionKey) -> Result<bool> {
        if !self.check_session_dirs(key)? {
            return Ok(false);
        }
        let fs = self.fs();
        let session_dir = self.session_dir(key);
        let lease = match lease::acquire(fs, &session_dir, key.id.as_str()) {
            Ok(lease) => lease,
            Err(Error::NotFound { .. }) => return Ok(false),
            Err(error) => return Err(error),
        };
        let log_path = self.log_path(key);
        let existed = match fs.remove_file(&log_path) {
            Ok(()) => true,
            Err(error) if error.kind() == io::ErrorKind::NotFound => false,
            Err(error) => return Err(Error::io("remove log", &error)),
        };
        fs.sync_dir(&session_dir).map_err(|error| Error::io("sync session directory", &error))?;
        let names = fs.read_dir(&session_dir).map_err(|error| Error::io("list session directory", &error))?;
        // The lock file goes last, while we still hold its lock.
        let (lock, others): (Vec<_>, Vec<_>) = names.into_iter().partition(|name| name == format::LOCK_FILE);
        for name in others.iter().chain(lock.iter()) {
            if let Err(error) = fs.remove_file(&session_dir.join(name)) {
                if error.kind() != io::ErrorKind::NotFound {
                    return Err(Error::io("remove session file", &error));
                }
            }
        }
        match fs.remove_dir(&session_dir) {
            Ok(()) => {
                let sessions_dir = self.tenant_sessions_dir(&key.tenant);
                fs.sync_dir(&sessions_dir).map_err(|error| Error::io("sync sessions directory", &error))?;
            }
            // A concurrent opener re-created the lock file: the directory stays, empty of
            // any log, which is a session that does not exist.
            Err(error) => tracing::warn!(session = %key, %error, "session directory left in place after erase"),
        }
        drop(lease);
        Ok(existed)
    }
}

fn log_exists(fs: &dyn Fs, log_path: &Path) -> Result<bool> {
    match fs.metadata(log_path) {
        Ok(_) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(Error::io("stat log", &error)),
    }
}

/// The directories whose entry in their parent this process has made durable, so that
/// `ensure_dir` syncs a parent once per process, not once per session. Bounded: past
/// `DURABLE_DIRS_MAX` it starts over (costing syncs again, never durability).
#[derive(Debug, Default)]
struct DurableDirs(std::sync::Mutex<std::collections::HashSet<PathBuf>>);

const DURABLE_DIRS_MAX: usize = 10_000;

impl DurableDirs {
    fn contains(&self, directory: &Path) -> bool {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).contains(directory)
    }

    fn insert(&self, directory: &Path) {
        let mut known = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if known.len() >= DURABLE_DIRS_MAX {
            known.clear();
        }
        known.insert(directory.to_path_buf());
    }
}

/// Makes `directory` exist with its entry durable in its parent: created, or found, and
/// then the parent synced. A directory found already there is not known to be durable —
/// a process may have died between its `mkdir` and the parent's sync, and a power loss
/// would then drop it with every session published inside since — so its parent is
/// synced too, once per process (`DurableDirs`).
///
/// The parent's sync is a group sync (`dir_sync`): concurrent creates of sessions in one
/// tenant each add a directory to its `sessions/` and share the syncs of it.
fn ensure_dir(fs: &dyn Fs, directory: &Path, inner: &Inner) -> Result<()> {
    let durable = &inner.durable_dirs;
    let sync_parent = || -> Result<()> {
        if let Some(parent) = directory.parent().filter(|parent| !parent.as_os_str().is_empty()) {
            inner
                .dir_syncs
                .sync(parent, || fs.sync_dir(parent))
                .map_err(|error| Error::io("sync parent directory", &error))?;
        }
        durable.insert(directory);
        Ok(())
    };
    match fs.create_dir(directory) {
        Ok(()) => sync_parent(),
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => match fs.metadata(directory) {
            Ok(meta) if meta.is_dir && durable.contains(directory) => Ok(()),
            Ok(meta) if meta.is_dir => sync_parent(),
            Ok(meta) if meta.is_symlink => Err(symlink_refused(directory.display().to_string())),
            Ok(_) => Err(Error::invalid("data root", format!("{} is not a directory", directory.display()))),
            Err(error) => Err(Error::io("stat directory", &error)),
        },
        Err(error) => Err(Error::io("create directory", &error)),
    }
}

/// Writes `bytes` to a fresh temp file, fsyncs it, and links it to `final_path`, which
/// fails (`AlreadyExists`) instead of replacing an existing file.
fn publish_new_file(fs: &dyn Fs, temp_path: &Path, final_path: &Path, bytes: &[u8]) -> Result<()> {
    let temp = match fs.open(temp_path, OpenOptions::write_new()) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            // A leftover from a crashed materialization with the same epoch: never
            // published, so it is garbage.
            fs.remove_file(temp_path).map_err(|error| Error::io("remove temp log", &error))?;
            fs.open(temp_path, OpenOptions::write_new()).map_err(|error| Error::io("create temp log", &error))?
        }
        Err(error) => return Err(Error::io("create temp log", &error)),
    };
    let written = write_all_at(temp.as_ref(), bytes, 0)
        .and_then(|()| temp.sync_all())
        .map_err(|error| Error::io("write temp log", &error));
    drop(temp);
    let published =
        written.and_then(|()| fs.hard_link(temp_path, final_path).map_err(|error| Error::io("publish log", &error)));
    if published.is_err() {
        let _ = fs.remove_file(temp_path);
    }
    published
}

/// Removes temp logs a crashed materialization left behind. Only a lease holder calls
/// this; failures are harmless (temp files are never read).
fn remove_leftover_temp_logs(fs: &dyn Fs, session_dir: &Path) {
    let Ok(names) = fs.read_dir(session_dir) else {
        return;
    };
    for name in names {
        if name.to_str().is_some_and(|name| name.starts_with(LOG_TEMP_PREFIX)) {
            let _ = fs.remove_file(&session_dir.join(name));
        }
    }
}

#[async_trait]
impl LogBackend for JsonlBackend {
    fn name(&self) -> &'static str {
        "jsonl"
    }

    async fn stat(&self, key: &SessionKey) -> Result<Option<LogStat>> {
        let backend = self.clone();
        let key = key.clone();
        blocking(move || backend.stat_blocking(&key)).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<LogStat>> {
        let backend = self.clone();
        let query = query.clone();
        blocking(move || backend.list_blocking(&query)).await
    }

    async fn open_reader(&self, key: &SessionKey) -> Result<Box<dyn LogReader>> {
        Ok(Box::new(self.open_jsonl_reader(key).await?))
    }

    async fn open_writer(&self, key: &SessionKey) -> Result<Box<dyn LogWriter>> {
        Ok(Box::new(self.open_jsonl_writer(key).await?))
    }

    async fn materialize(&self, header: &SessionHeader, first_batch: &[Event]) -> Result<Box<dyn LogWriter>> {
        let backend = self.clone();
        let header = header.clone();
        let first_batch = first_batch.to_vec();
        let core = blocking(move || backend.materialize_blocking(&header, &first_batch)).await?;
        Ok(Box::new(self.writer_over(core)))
    }

    async fn erase(&self, key: &SessionKey) -> Result<bool> {
        JsonlBackend::erase(self, key).await
    }
}

impl JsonlBackend {
    /// `open_reader` returning the concrete reader (for tests and tools).
    pub async fn open_jsonl_reader(&self, key: &SessionKey) -> Result<JsonlReader> {
        // In place, like the reads it is for: a few `stat`s, an `open` and the header's
        // read. Through the blocking pool its two thread hops cost more than the work
        // (a read of one event from Python: 0.29 ms that way).
        in_place(|| self.open_reader_blocking(key))
    }

    /// `open_writer` returning the concrete writer (for `fsck` and tests).
    pub async fn open_jsonl_writer(&self, key: &SessionKey) -> Result<JsonlWriter> {
        let backend = self.clone();
        let key = key.clone();
        let core = blocking(move || backend.open_writer_blocking(&key)).await?;
        Ok(self.writer_over(core))
    }

    /// The handle over an opened `core`, swept for an idle tail if its log may carry one.
    pub(crate) fn writer_over(&self, core: WriterCore) -> JsonlWriter {
        let sweep = core.has_zero_tail_format();
        let writer = JsonlWriter::new(core);
        if sweep {
            self.inner.idle_tails.register(writer.core());
        }
        writer
    }

    /// Gives back the zero tail of every open write handle of this backend that has had
    /// no append for `IDLE_GIVE_BACK` before `now` and is not busy; returns how many.
    /// A background sweeper calls it every `SWEEP_EVERY` with the current time; tests
    /// call it with a time of their own.
    pub fn give_back_idle_tails(&self, now: std::time::Instant) -> usize {
        self.inner.idle_tails.give_back_idle(now)
    }
}

/// A read handle's backend half: re-checks the file length on every read, so it sees
/// appends made by a writer in this or another process; never modifies anything.
pub struct JsonlReader {
    header: SessionHeader,
    view: Arc<Mutex<LogView>>,
}

impl JsonlReader {
    /// Entries in this reader's sparse seq index (bounded by `INDEX_ENTRIES_MAX`).
    pub fn index_entries(&self) -> usize {
        lock_view(&self.view).index_len()
    }
}

fn lock_view(view: &Mutex<LogView>) -> MutexGuard<'_, LogView> {
    view.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[async_trait]
impl LogReader for JsonlReader {
    fn header(&self) -> &SessionHeader {
        &self.header
    }

    // Reads run in place, like a writer's (`in_place`): through the blocking pool each
    // costs two thread hops (when a point read of 1,000 seqs was one read per seq, from
    // Python: 54 ms that way, 11 ms in place).
    async fn read(&mut self, offset: u64, length: u64) -> Result<Vec<Event>> {
        in_place(|| read_current(&self.view, |view, len| view.read(offset, length, len)))
    }

    async fn read_before(&mut self, before: u64, limit: u64) -> Result<Vec<Event>> {
        in_place(|| read_current(&self.view, |view, len| view.read_before(before, limit, len)))
    }

    /// One pass over the log for all of them (`LogView::read_seqs`), not a `read` per run.
    async fn read_seqs(&mut self, seqs: &[u64]) -> Result<Vec<Event>> {
        in_place(|| read_current(&self.view, |view, len| view.read_seqs(seqs, len)))
    }
}

/// Runs `read` against the file's current length. A partial read that finds the file
/// shorter than that length (a writer truncated a torn tail meanwhile: `UnexpectedEof`)
/// runs once more against the new length.
fn read_current(view: &Mutex<LogView>, read: impl Fn(&mut LogView, u64) -> Result<Vec<Event>>) -> Result<Vec<Event>> {
    let mut view = lock_view(view);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let len = view.data_end_now().map_err(|error| Error::io("stat log", &error))?;
        match read(&mut view, len) {
            Err(Error::Io { kind: io::ErrorKind::UnexpectedEof, .. }) if attempts < 2 => continue,
            outcome => return outcome,
        }
    }
}
