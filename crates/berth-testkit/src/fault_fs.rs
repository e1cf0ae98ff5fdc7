//! `FaultFs`: the JSONL backend's `Fs` over the real file system, failing the N-th
//! matching operation on request (reliability plan §6 B), and counting every operation
//! so tests can assert what the backend did *not* do (e.g. "sync was never called
//! again after the failure").
//!
//! A fault matches an operation kind and, optionally, a substring of the path. It fires
//! once at the N-th match counted from when it was injected, or on every match from the
//! N-th on (`persistent`). A fault can return an errno / error kind, or make a write
//! short: half the bytes are really written and reported, and the next write on the
//! same path fails with `EIO` (what a full disk or a failing device looks like).

use berth_jsonl::fs::{FileMeta, Fs, FsFile, OpenOptions, OsFs};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// Every operation of the `Fs` / `FsFile` traits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FsOp {
    Open,
    OpenDir,
    CreateDir,
    SyncDir,
    HardLink,
    Rename,
    RemoveFile,
    RemoveDir,
    ReadDir,
    Metadata,
    ReadAt,
    WriteAt,
    SyncData,
    SyncAll,
    SetLen,
    Len,
    TryLock,
    FileMetadata,
}

impl FsOp {
    /// `sync_data`, `sync_all` and `sync_dir`.
    pub fn is_sync(self) -> bool {
        matches!(self, FsOp::SyncData | FsOp::SyncAll | FsOp::SyncDir)
    }
}

/// What a firing fault does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// Fail with this errno (e.g. `libc::EIO`, `libc::ENOSPC`).
    Errno(i32),
    /// Fail with an error of this kind.
    Kind(io::ErrorKind),
    /// `WriteAt` only: write half the bytes, report that, and fail the next write on the
    /// same path with `EIO`.
    ShortWrite,
}

/// One scripted fault.
#[derive(Clone, Debug)]
pub struct Fault {
    pub op: FsOp,
    pub path_contains: Option<String>,
    /// Fire at the N-th matching operation after injection (1-based).
    pub nth: u64,
    pub action: FaultAction,
    /// Keep failing every matching operation from the N-th on.
    pub persistent: bool,
}

impl Fault {
    /// Fails the next `op` with `action`.
    pub fn new(op: FsOp, action: FaultAction) -> Fault {
        Fault { op, path_contains: None, nth: 1, action, persistent: false }
    }

    /// Fails the next `op` with `EIO`.
    pub fn eio(op: FsOp) -> Fault {
        Fault::new(op, FaultAction::Errno(libc::EIO))
    }

    pub fn on_path(mut self, path_contains: &str) -> Fault {
        self.path_contains = Some(path_contains.to_owned());
        self
    }

    pub fn nth(mut self, nth: u64) -> Fault {
        self.nth = nth.max(1);
        self
    }

    pub fn persistent(mut self) -> Fault {
        self.persistent = true;
        self
    }

    fn matches(&self, op: FsOp, path: &Path) -> bool {
        self.op == op && self.path_contains.as_deref().is_none_or(|needle| path.to_string_lossy().contains(needle))
    }
}

struct Armed {
    fault: Fault,
    seen: u64,
    fired: u64,
}

#[derive(Default)]
struct State {
    faults: Vec<Armed>,
    /// Every operation performed (or attempted), in order.
    log: Vec<(FsOp, PathBuf)>,
    /// Paths whose next write fails after a short write.
    fail_next_write: Vec<PathBuf>,
    fired: u64,
    skip_syncs: bool,
}

/// A fault-injecting `Fs` over the real file system. Cheap to clone (shared state).
#[derive(Clone)]
pub struct FaultFs {
    inner: Arc<dyn Fs>,
    state: Arc<Mutex<State>>,
    gate: Arc<SyncGate>,
}

/// Holds syncs back while `hold` is set (`FaultFs::hold_syncs`), so a test can stop a
/// durable write between its write and its sync, with its caller's locks held.
#[derive(Default)]
struct SyncGate {
    state: Mutex<GateState>,
    opened: std::sync::Condvar,
}

#[derive(Default)]
struct GateState {
    hold: bool,
    waiting: u64,
}

impl Default for FaultFs {
    fn default() -> Self {
        FaultFs::new()
    }
}

impl std::fmt::Debug for FaultFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FaultFs")
    }
}

impl FaultFs {
    pub fn new() -> FaultFs {
        FaultFs::wrapping(Arc::new(OsFs))
    }

    pub fn wrapping(inner: Arc<dyn Fs>) -> FaultFs {
        FaultFs { inner, state: Arc::new(Mutex::new(State::default())), gate: Arc::default() }
    }

    /// This file system as the backend option wants it.
    pub fn shared(&self) -> Arc<dyn Fs> {
        Arc::new(self.clone())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn inject(&self, fault: Fault) {
        self.state().faults.push(Armed { fault, seen: 0, fired: 0 });
    }

    /// Removes every fault (counters stay).
    pub fn clear_faults(&self) {
        let mut state = self.state();
        state.faults.clear();
        state.fail_next_write.clear();
    }

    /// How many faults fired so far.
    pub fn fired(&self) -> u64 {
        self.state().fired
    }

    /// Makes every sync a counted no-op: for sweeps that test recovery logic, not
    /// durability, and would otherwise spend their time in `fsync`.
    pub fn skip_syncs(&self, skip: bool) {
        self.state().skip_syncs = skip;
    }

    /// While `hold` is set, every sync (`sync_data`, `sync_all`, `sync_dir`) waits, on its
    /// caller's thread, until it is cleared. Clearing it lets every held sync go on.
    pub fn hold_syncs(&self, hold: bool) {
        let mut gate = self.gate.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        gate.hold = hold;
        if !hold {
            self.gate.opened.notify_all();
        }
    }

    /// How many syncs are waiting for `hold_syncs(false)` now.
    pub fn held_syncs(&self) -> u64 {
        self.gate.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).waiting
    }

    fn wait_at_gate(&self) {
        let mut gate = self.gate.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if !gate.hold {
            return;
        }
        gate.waiting += 1;
        while gate.hold {
            gate = self.gate.opened.wait(gate).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        gate.waiting -= 1;
    }

    /// Operations of kind `op` so far.
    pub fn count(&self, op: FsOp) -> u64 {
        self.state().log.iter().filter(|(logged, _)| *logged == op).count() as u64
    }

    /// Operations of kind `op` on paths containing `path_contains` so far.
    pub fn count_on(&self, op: FsOp, path_contains: &str) -> u64 {
        self.state()
            .log
            .iter()
            .filter(|(logged, path)| *logged == op && path.to_string_lossy().contains(path_contains))
            .count() as u64
    }

    /// All operations so far.
    pub fn total(&self) -> u64 {
        self.state().log.len() as u64
    }

    /// Counts per kind (for diagnostics).
    pub fn counts(&self) -> HashMap<FsOp, u64> {
        let mut counts = HashMap::new();
        for (op, _) in &self.state().log {
            *counts.entry(*op).or_insert(0) += 1;
        }
        counts
    }

    pub fn reset_counts(&self) {
        self.state().log.clear();
    }

    /// Records the operation and returns the fault to apply, if one fires.
    fn check(&self, op: FsOp, path: &Path) -> Option<FaultAction> {
        let mut state = self.state();
        state.log.push((op, path.to_path_buf()));
        if op == FsOp::WriteAt {
            if let Some(index) = state.fail_next_write.iter().position(|pending| pending == path) {
                state.fail_next_write.remove(index);
                state.fired += 1;
                return Some(FaultAction::Errno(libc::EIO));
            }
        }
        let mut action = None;
        for armed in state.faults.iter_mut().filter(|armed| armed.fault.matches(op, path)) {
            armed.seen += 1;
            let fires = if armed.fault.persistent {
                armed.seen >= armed.fault.nth
            } else {
                armed.seen == armed.fault.nth && armed.fired == 0
            };
            if fires && action.is_none() {
                armed.fired += 1;
                action = Some(armed.fault.action.clone());
            }
        }
        if action.is_some() {
            state.fired += 1;
        }
        action
    }

    fn run<T>(&self, op: FsOp, path: &Path, real: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        match self.check(op, path) {
            Some(action) => Err(error_of(&action)),
            None => real(),
        }
    }

    /// Waits at the gate (`hold_syncs`), then says whether syncs are skipped.
    fn sync_skipped(&self) -> bool {
        self.wait_at_gate();
        self.state().skip_syncs
    }
}

fn error_of(action: &FaultAction) -> io::Error {
    match action {
        FaultAction::Errno(errno) => io::Error::from_raw_os_error(*errno),
        FaultAction::Kind(kind) => io::Error::new(*kind, "injected fault"),
        FaultAction::ShortWrite => io::Error::from_raw_os_error(libc::EIO),
    }
}

impl Fs for FaultFs {
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Box<dyn FsFile>> {
        let file = self.run(FsOp::Open, path, || self.inner.open(path, options))?;
        Ok(Box::new(FaultFile { inner: file, path: path.to_path_buf(), fs: self.clone() }))
    }

    fn open_dir(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let file = self.run(FsOp::OpenDir, path, || self.inner.open_dir(path))?;
        Ok(Box::new(FaultFile { inner: file, path: path.to_path_buf(), fs: self.clone() }))
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.run(FsOp::CreateDir, path, || self.inner.create_dir(path))
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.run(FsOp::SyncDir, path, || if self.sync_skipped() { Ok(()) } else { self.inner.sync_dir(path) })
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.run(FsOp::HardLink, to, || self.inner.hard_link(from, to))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.run(FsOp::Rename, to, || self.inner.rename(from, to))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.run(FsOp::RemoveFile, path, || self.inner.remove_file(path))
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.run(FsOp::RemoveDir, path, || self.inner.remove_dir(path))
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        self.run(FsOp::ReadDir, path, || self.inner.read_dir(path))
    }

    fn metadata(&self, path: &Path) -> io::Result<FileMeta> {
        self.run(FsOp::Metadata, path, || self.inner.metadata(path))
    }

    /// Not a fault point: resolved once, when a backend opens its root.
    fn canonicalize(&self, path: &Path) -> io::Result<std::path::PathBuf> {
        self.inner.canonicalize(path)
    }
}

/// An open file of a `FaultFs`.
struct FaultFile {
    inner: Box<dyn FsFile>,
    path: PathBuf,
    fs: FaultFs,
}

impl FsFile for FaultFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.fs.run(FsOp::ReadAt, &self.path, || self.inner.read_at(buf, offset))
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        match self.fs.check(FsOp::WriteAt, &self.path) {
            None => self.inner.write_at(buf, offset),
            Some(FaultAction::ShortWrite) if buf.len() > 1 => {
                let written = self.inner.write_at(&buf[..buf.len() / 2], offset)?;
                self.fs.state().fail_next_write.push(self.path.clone());
                Ok(written)
            }
            Some(action) => Err(error_of(&action)),
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        self.fs.run(FsOp::SyncData, &self.path, || if self.fs.sync_skipped() { Ok(()) } else { self.inner.sync_data() })
    }

    fn sync_all(&self) -> io::Result<()> {
        self.fs.run(FsOp::SyncAll, &self.path, || if self.fs.sync_skipped() { Ok(()) } else { self.inner.sync_all() })
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.fs.run(FsOp::SetLen, &self.path, || self.inner.set_len(len))
    }

    fn len(&self) -> io::Result<u64> {
        self.fs.run(FsOp::Len, &self.path, || self.inner.len())
    }

    fn try_lock(&self) -> io::Result<bool> {
        self.fs.run(FsOp::TryLock, &self.path, || self.inner.try_lock())
    }

    fn metadata(&self) -> io::Result<FileMeta> {
        self.fs.run(FsOp::FileMetadata, &self.path, || self.inner.metadata())
    }
}
