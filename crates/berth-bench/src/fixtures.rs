//! Shared set-up for the workloads: ids and headers, the stores under test, the SQLite
//! reference connection, error mapping, and a file layer that skips `fsync` for
//! *populating* data that no timed durable figure depends on.

use berth_core::{Error, Result, Scope, SessionHeader, SessionId, SessionKey, TenantId, Timestamp, UserId};
use berth_jsonl::fs::{FileMeta, Fs, FsFile, OpenOptions, OsFs};
use berth_jsonl::{JsonlBackend, JsonlOptions};
use berth_service::{Principal, Role};
use berth_store::memory::{MemoryBackend, MemoryStorage};
use berth_store::LogStore;
use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

/// The tenant every workload writes under.
pub const TENANT: &str = "bench";
/// Creation time of every bench session (a fixed instant keeps runs comparable).
pub const BENCH_EPOCH_MS: u64 = 1_790_000_000_000;

pub fn io(operation: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |error| Error::io(operation, &error)
}

pub fn sql(error: rusqlite::Error) -> Error {
    Error::Unavailable { reason: format!("sqlite: {error}") }
}

pub fn invalid(reason: impl Into<String>) -> Error {
    Error::invalid("bench", reason.into())
}

pub fn tenant() -> TenantId {
    TenantId::parse(TENANT).expect("constant tenant id is valid")
}

pub fn scope() -> Scope {
    Scope { tenant: tenant(), user: UserId::parse("bench").expect("constant user id is valid"), project: None }
}

/// A header of the bench tenant; `id` is built by the bench and always valid.
pub fn header(id: &str) -> SessionHeader {
    SessionHeader::new(SessionId::parse(id).expect("bench session id is valid"), scope(), Timestamp(BENCH_EPOCH_MS))
}

pub fn key(id: &str) -> SessionKey {
    header(id).key()
}

/// A session id no earlier round or run used (`prefix-<run start ms>-<n>`): stores that
/// outlive a round (PostgreSQL) refuse to create an id twice.
pub fn unique_id(prefix: &str) -> String {
    static RUN_START_MS: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let start = RUN_START_MS.get_or_init(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_millis())
    });
    format!("{prefix}-{start}-{}", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

/// A `service` principal of the bench tenant: may append without attaching a run.
pub fn service_principal() -> Principal {
    Principal { role: Role::Service, ..Principal::user(tenant(), scope().user, None) }
}

/// The embedded backend as shipped: `fdatasync` on every append, preallocated logs
/// (`JsonlOptions::preallocate`). `BERTH_BENCH_PREALLOCATE=0` (or `1`) turns
/// preallocation off (or on), to measure it against the same run without.
pub fn jsonl_store(dir: &Path) -> Result<LogStore> {
    let preallocate = match std::env::var("BERTH_BENCH_PREALLOCATE").as_deref() {
        Err(_) => berth_jsonl::PREALLOCATE_DEFAULT,
        Ok("0") => false,
        Ok("1") => true,
        Ok(other) => return Err(Error::invalid("BERTH_BENCH_PREALLOCATE", format!("0 or 1, not {other:?}"))),
    };
    let options = JsonlOptions { preallocate, ..JsonlOptions::default() };
    Ok(LogStore::new(Arc::new(JsonlBackend::open(dir, options)?)))
}

/// The embedded backend on a file layer whose syncs are no-ops: only for populating
/// sessions that a workload then reads, lists or opens (never for a timed write).
pub fn jsonl_store_unsynced(dir: &Path) -> Result<(LogStore, JsonlBackend)> {
    let options = JsonlOptions { fs: Arc::new(UnsyncedFs), ..JsonlOptions::default() };
    let backend = JsonlBackend::open(dir, options)?;
    Ok((LogStore::new(Arc::new(backend.clone())), backend))
}

pub fn memory_store() -> LogStore {
    LogStore::new(Arc::new(MemoryBackend::new(MemoryStorage::new())))
}

/// The SQLite reference: WAL with `synchronous=FULL`, the durability berth gives.
pub fn sqlite_open(path: &Path) -> Result<rusqlite::Connection> {
    let connection = rusqlite::Connection::open(path).map_err(sql)?;
    connection
        .execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS events (session TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
                                                PRIMARY KEY (session, seq)) WITHOUT ROWID;",
        )
        .map_err(sql)?;
    Ok(connection)
}

/// The real file system with every sync turned into a no-op (see `jsonl_store_unsynced`).
#[derive(Debug)]
struct UnsyncedFs;

impl Fs for UnsyncedFs {
    fn open(&self, path: &Path, options: OpenOptions) -> std::io::Result<Box<dyn FsFile>> {
        Ok(Box::new(UnsyncedFile(OsFs.open(path, options)?)))
    }
    fn open_dir(&self, path: &Path) -> std::io::Result<Box<dyn FsFile>> {
        Ok(Box::new(UnsyncedFile(OsFs.open_dir(path)?)))
    }
    fn create_dir(&self, path: &Path) -> std::io::Result<()> {
        OsFs.create_dir(path)
    }
    fn sync_dir(&self, _path: &Path) -> std::io::Result<()> {
        Ok(())
    }
    fn hard_link(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        OsFs.hard_link(from, to)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        OsFs.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        OsFs.remove_file(path)
    }
    fn remove_dir(&self, path: &Path) -> std::io::Result<()> {
        OsFs.remove_dir(path)
    }
    fn read_dir(&self, path: &Path) -> std::io::Result<Vec<OsString>> {
        OsFs.read_dir(path)
    }
    fn metadata(&self, path: &Path) -> std::io::Result<FileMeta> {
        OsFs.metadata(path)
    }
}

struct UnsyncedFile(Box<dyn FsFile>);

impl FsFile for UnsyncedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<usize> {
        self.0.write_at(buf, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn sync_all(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
    fn len(&self) -> std::io::Result<u64> {
        self.0.len()
    }
    fn try_lock(&self) -> std::io::Result<bool> {
        self.0.try_lock()
    }
    fn metadata(&self) -> std::io::Result<FileMeta> {
        self.0.metadata()
    }
}

/// `VmRSS` of this process in bytes (Linux), from `/proc/self/status`.
/// This process's CPU time so far (user + system, all threads), in microseconds.
pub fn process_cpu_us() -> f64 {
    // SAFETY: `rusage` is plain data (all-zero is a valid value), and `getrusage` writes
    // only into the struct it is given.
    let (status, usage) = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        (libc::getrusage(libc::RUSAGE_SELF, &mut usage), usage)
    };
    if status != 0 {
        return 0.0;
    }
    let micros = |time: libc::timeval| time.tv_sec as f64 * 1e6 + time.tv_usec as f64;
    micros(usage.ru_utime) + micros(usage.ru_stime)
}

pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Open file descriptors of this process (Linux), from `/proc/self/fd`.
pub fn open_descriptors() -> Option<u64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as u64)
}

/// Descriptors wanted for W7's idle write handles (10,000 handles × 3 each, and room).
const DESCRIPTORS_WANTED: u64 = 65_536;

/// The limit on open descriptors after raising it: to `DESCRIPTORS_WANTED` where this
/// process may (root), else the soft limit to the hard one.
pub fn raise_descriptor_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed in.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        let wanted = DESCRIPTORS_WANTED.max(limit.rlim_max);
        let raised = libc::rlimit { rlim_cur: wanted, rlim_max: wanted };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
            return wanted;
        }
        let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
            limit = raised;
        }
    }
    limit.rlim_cur
}

/// CPU time this process has used so far (user and system), for profiling examples that
/// print CPU per operation beside wall time.
pub fn cpu_time() -> std::time::Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    // SAFETY: initialised by getrusage above (zeroed before).
    let usage = unsafe { usage.assume_init() };
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    std::time::Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
}
