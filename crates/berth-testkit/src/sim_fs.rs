//! `SimFs`: an in-memory implementation of the JSONL backend's `Fs` trait that models
//! what survives a power loss (reliability plan §6 A, tests 6, 7 and 10; failure model in
//! §1.1).
//!
//! Two states are kept side by side:
//!
//! - the **volatile** state, which the running program sees: every write, truncation and
//!   directory change applies at once;
//! - the **durable** state, which a power loss leaves: a file's data becomes durable only
//!   at `sync_data` / `sync_all` on (any handle of) that file; a directory entry created
//!   or removed by `open` (create), `create_dir`, `hard_link`, `rename`, `remove_file` or
//!   `remove_dir` becomes durable only when the parent directory is synced (`sync_dir`,
//!   or `sync_all` / `sync_data` on a handle from `open_dir`).
//!
//! `crash_image(seed)` builds the file system a power loss at this instant leaves: the
//! durable directory entries only (an entry added since the directory's last sync
//! vanishes, one removed since then reappears), and for each surviving file its durable
//! contents plus every write made since its last sync, each independently applied,
//! dropped, torn to a prefix (at a 512- or 4096-byte boundary relative to the write's
//! start), or torn with the rest zero-filled or garbage-filled (a pending truncation is
//! independently applied or dropped). The choices come from a splitmix64 seeded with
//! `seed`, so an image is reproducible. No lock survives.
//!
//! Inodes are modelled (hard links share data; an unlinked file stays usable through its
//! open handles), `flock` belongs to the open handle (released when it is dropped),
//! `metadata` and `identity` report a fixed fake device and stable inode numbers, and
//! errors carry the errno the OS would return (`ENOENT`, `EEXIST`, `ENOTDIR`, `EISDIR`,
//! `ENOTEMPTY`, `EBADF`, ...). Symlinks are not modelled. Paths must be absolute.
//!
//! Two test switches:
//!
//! - `freeze(Freeze::AtOp(n))` / `freeze(Freeze::AtSync(n))`: the n-th operation (or the
//!   n-th sync) and every later operation fail with `EIO`, so the program stops making
//!   progress exactly there; take a `crash_image` afterwards to crash at that point.
//! - `thaw()`: ends a freeze without a crash image, i.e. a process crash and restart
//!   (the volatile state survives), to combine process crashes with a later power loss.
//! - `skip_dir_syncs(..)`: a mutation knob that makes directory syncs no-ops (as if the
//!   backend forgot its directory `fsync`s), to show a harness catches the bug.

use crate::fault_fs::FsOp;
use berth_jsonl::fs::{FileMeta, Fs, FsFile, OpenOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The fake device number every `SimFs` file reports.
pub const SIM_DEV: u64 = 0x51_4d;
const ROOT_INO: u64 = 1;
const DIR_SIZE: u64 = 4096;

/// Where a frozen `SimFs` stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freeze {
    /// The n-th operation of any kind (1-based, counted from `freeze`) fails, and every
    /// later one.
    AtOp(u64),
    /// The n-th sync (`sync_data`, `sync_all`, `sync_dir`; 1-based, counted from
    /// `freeze`) fails, and every later operation of any kind.
    AtSync(u64),
    /// Only the n-th operation of any kind fails (a transient `EIO`); every other one
    /// works, and the file system never counts as frozen.
    OnlyOp(u64),
}

/// Which directory syncs the mutation knob turns into no-ops.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SkipDirSyncs {
    /// Directory syncs work (the default).
    #[default]
    Off,
    /// Every directory sync is a no-op.
    All,
    /// Syncs of directories whose path ends with this suffix are no-ops.
    PathEndsWith(String),
    /// Syncs of directories whose path contains this substring are no-ops.
    PathContains(String),
}

impl SkipDirSyncs {
    fn skips(&self, path: &Path) -> bool {
        let text = path.to_string_lossy();
        match self {
            SkipDirSyncs::Off => false,
            SkipDirSyncs::All => true,
            SkipDirSyncs::PathEndsWith(suffix) => text.ends_with(suffix.as_str()),
            SkipDirSyncs::PathContains(needle) => text.contains(needle.as_str()),
        }
    }
}

/// A file change made since the file's last sync.
#[derive(Clone, Debug)]
enum Pending {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

#[derive(Clone, Debug)]
enum Body {
    File {
        /// What the program sees.
        data: Vec<u8>,
        /// What the last sync made durable.
        durable: Vec<u8>,
        /// Changes since the last sync, in order (`data` = `durable` + these).
        pending: Vec<Pending>,
    },
    Dir {
        entries: BTreeMap<OsString, u64>,
        durable: BTreeMap<OsString, u64>,
    },
}

#[derive(Clone, Debug)]
struct Inode {
    body: Body,
    mtime_ns: i128,
    ctime_ns: i128,
    /// The open handle (file description) holding the `flock`.
    lock_owner: Option<u64>,
}

impl Inode {
    fn file(now: i128) -> Inode {
        Inode {
            body: Body::File { data: Vec::new(), durable: Vec::new(), pending: Vec::new() },
            mtime_ns: now,
            ctime_ns: now,
            lock_owner: None,
        }
    }

    fn dir(now: i128) -> Inode {
        Inode {
            body: Body::Dir { entries: BTreeMap::new(), durable: BTreeMap::new() },
            mtime_ns: now,
            ctime_ns: now,
            lock_owner: None,
        }
    }

    fn is_dir(&self) -> bool {
        matches!(self.body, Body::Dir { .. })
    }

    fn len(&self) -> u64 {
        match &self.body {
            Body::File { data, .. } => data.len() as u64,
            Body::Dir { .. } => DIR_SIZE,
        }
    }
}

struct State {
    inodes: BTreeMap<u64, Inode>,
    next_ino: u64,
    next_handle: u64,
    /// Logical clock for mtime / ctime (nanoseconds).
    clock: i128,
    ops: u64,
    syncs: u64,
    freeze: Option<(Freeze, u64, u64)>,
    frozen: bool,
    skip_dir_syncs: SkipDirSyncs,
    log: Vec<(FsOp, PathBuf)>,
}

impl State {
    fn empty() -> State {
        State {
            inodes: BTreeMap::new(),
            next_ino: ROOT_INO + 1,
            next_handle: 1,
            clock: 1_000_000_000,
            ops: 0,
            syncs: 0,
            freeze: None,
            frozen: false,
            skip_dir_syncs: SkipDirSyncs::Off,
            log: Vec::new(),
        }
    }

    fn tick(&mut self) -> i128 {
        self.clock += 1_000;
        self.clock
    }

    fn inode(&self, ino: u64) -> &Inode {
        self.inodes.get(&ino).expect("SimFs: dangling inode")
    }

    fn inode_mut(&mut self, ino: u64) -> &mut Inode {
        self.inodes.get_mut(&ino).expect("SimFs: dangling inode")
    }

    fn entries(&self, dir: u64) -> io::Result<&BTreeMap<OsString, u64>> {
        match &self.inode(dir).body {
            Body::Dir { entries, .. } => Ok(entries),
            Body::File { .. } => Err(errno(libc::ENOTDIR)),
        }
    }

    fn entries_mut(&mut self, dir: u64) -> io::Result<&mut BTreeMap<OsString, u64>> {
        match &mut self.inode_mut(dir).body {
            Body::Dir { entries, .. } => Ok(entries),
            Body::File { .. } => Err(errno(libc::ENOTDIR)),
        }
    }

    /// The inode `path` names (volatile view).
    fn lookup(&self, path: &Path) -> io::Result<u64> {
        let mut ino = ROOT_INO;
        for name in components(path)? {
            ino = *self.entries(ino)?.get(&name).ok_or_else(|| errno(libc::ENOENT))?;
        }
        Ok(ino)
    }

    /// The parent directory's inode and the final name of `path`.
    fn parent_of(&self, path: &Path) -> io::Result<(u64, OsString)> {
        let mut names = components(path)?;
        let name = names.pop().ok_or_else(|| errno(libc::EBUSY))?;
        let mut ino = ROOT_INO;
        for component in names {
            ino = *self.entries(ino)?.get(&component).ok_or_else(|| errno(libc::ENOENT))?;
        }
        if !self.inode(ino).is_dir() {
            return Err(errno(libc::ENOTDIR));
        }
        Ok((ino, name))
    }

    fn add_inode(&mut self, inode: Inode) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.inodes.insert(ino, inode);
        ino
    }

    fn touch_dir(&mut self, dir: u64) {
        let now = self.tick();
        let inode = self.inode_mut(dir);
        inode.mtime_ns = now;
        inode.ctime_ns = now;
    }

    fn touch_ctime(&mut self, ino: u64) {
        let now = self.tick();
        self.inode_mut(ino).ctime_ns = now;
    }

    fn sync_file_or_dir(&mut self, ino: u64, path: &Path) {
        let skip = self.skip_dir_syncs.skips(path);
        match &mut self.inode_mut(ino).body {
            Body::File { data, durable, pending } => {
                durable.clone_from(data);
                pending.clear();
            }
            Body::Dir { entries, durable } => {
                if !skip {
                    durable.clone_from(entries);
                }
            }
        }
    }

    /// Counts an operation and fails it if the file system is (or now becomes) frozen.
    fn begin(&mut self, op: FsOp, path: &Path) -> io::Result<()> {
        self.ops += 1;
        if op.is_sync() {
            self.syncs += 1;
        }
        self.log.push((op, path.to_path_buf()));
        if self.frozen {
            return Err(errno(libc::EIO));
        }
        if let Some((freeze, ops_base, syncs_base)) = self.freeze {
            let reached = match freeze {
                Freeze::AtOp(n) => self.ops - ops_base >= n,
                Freeze::AtSync(n) => op.is_sync() && self.syncs - syncs_base >= n,
                Freeze::OnlyOp(n) => {
                    if self.ops - ops_base == n {
                        return Err(errno(libc::EIO));
                    }
                    false
                }
            };
            if reached {
                self.frozen = true;
                return Err(errno(libc::EIO));
            }
        }
        Ok(())
    }

    /// Inodes reachable from the root through durable entries, in a deterministic order.
    fn durable_reachable(&self) -> Vec<u64> {
        let mut seen = BTreeSet::new();
        let mut order = Vec::new();
        let mut stack = vec![ROOT_INO];
        while let Some(ino) = stack.pop() {
            if !seen.insert(ino) {
                continue;
            }
            order.push(ino);
            if let Body::Dir { durable, .. } = &self.inode(ino).body {
                for child in durable.values().rev() {
                    stack.push(*child);
                }
            }
        }
        order
    }
}

fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// The normal components of an absolute path (`.` skipped; `..` refused).
fn components(path: &Path) -> io::Result<Vec<OsString>> {
    let mut parts = path.components();
    if parts.next() != Some(Component::RootDir) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("SimFs needs an absolute path: {}", path.display()),
        ));
    }
    let mut names = Vec::new();
    for part in parts {
        match part {
            Component::Normal(name) => names.push(name.to_os_string()),
            Component::CurDir => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("SimFs does not resolve `..`: {}", path.display()),
                ))
            }
        }
    }
    Ok(names)
}

/// splitmix64: a small, fast, deterministic PRNG (no crate dependency).
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound` (`bound > 0`; the modulo bias is irrelevant here).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }
}

/// What a power loss did to one pending write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Applied,
    Dropped,
    /// Only the first `keep` bytes reached the disk; the size ends there.
    Torn {
        keep: usize,
    },
    /// The first `keep` bytes reached the disk; the rest of the write's range reads as
    /// zeros (the size was updated before the data: ext4 delayed allocation).
    ZeroFilled {
        keep: usize,
    },
    /// The first `keep` bytes reached the disk; the rest is garbage.
    GarbageFilled {
        keep: usize,
    },
}

fn choose_fate(rng: &mut SplitMix64, len: usize) -> Fate {
    let kind = rng.below(5);
    let boundary = if rng.below(2) == 0 { 512 } else { 4096 };
    let cuts = (len.saturating_sub(1) / boundary) as u64;
    let keep = (rng.below(cuts + 1) as usize) * boundary;
    match kind {
        0 => Fate::Applied,
        1 => Fate::Dropped,
        2 => Fate::Torn { keep },
        3 => Fate::ZeroFilled { keep },
        _ => Fate::GarbageFilled { keep },
    }
}

fn write_into(data: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let start = usize::try_from(offset).expect("SimFs: offset fits in memory");
    let end = start + bytes.len();
    if data.len() < end {
        data.resize(end, 0);
    }
    data[start..end].copy_from_slice(bytes);
}

/// The contents a power loss leaves of a file: its durable data plus each pending change
/// with an independent fate.
fn crashed_contents(durable: &[u8], pending: &[Pending], rng: &mut SplitMix64) -> Vec<u8> {
    let mut data = durable.to_vec();
    for change in pending {
        match change {
            Pending::SetLen(len) => {
                if rng.below(2) == 0 {
                    data.resize(usize::try_from(*len).expect("SimFs: length fits in memory"), 0);
                }
            }
            Pending::Write { offset, bytes } => match choose_fate(rng, bytes.len()) {
                Fate::Applied => write_into(&mut data, *offset, bytes),
                Fate::Dropped => {}
                Fate::Torn { keep } => {
                    if keep > 0 {
                        write_into(&mut data, *offset, &bytes[..keep]);
                    }
                }
                Fate::ZeroFilled { keep } => {
                    let mut torn = bytes[..keep].to_vec();
                    torn.resize(bytes.len(), 0);
                    write_into(&mut data, *offset, &torn);
                }
                Fate::GarbageFilled { keep } => {
                    let mut torn = bytes[..keep].to_vec();
                    while torn.len() < bytes.len() {
                        torn.push(rng.next_u64() as u8);
                    }
                    write_into(&mut data, *offset, &torn);
                }
            },
        }
    }
    data
}

/// An in-memory, power-loss-modelling `Fs`. Cheap to clone (clones share the state).
#[derive(Clone)]
pub struct SimFs {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for SimFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("SimFs").field("inodes", &state.inodes.len()).field("ops", &state.ops).finish()
    }
}

impl Default for SimFs {
    fn default() -> Self {
        SimFs::new()
    }
}

impl SimFs {
    /// An empty file system: only `/`, durable.
    pub fn new() -> SimFs {
        let mut state = State::empty();
        let now = state.tick();
        state.inodes.insert(ROOT_INO, Inode::dir(now));
        SimFs { state: Arc::new(Mutex::new(state)) }
    }

    /// A file system in which every directory of `root` (absolute) exists durably, e.g.
    /// `SimFs::with_root("/sim")` for a data root. Not counted as operations.
    pub fn with_root(root: impl AsRef<Path>) -> SimFs {
        let fs = SimFs::new();
        {
            let mut state = fs.state();
            let mut dir = ROOT_INO;
            for name in components(root.as_ref()).expect("SimFs::with_root needs an absolute path") {
                let existing = state.entries(dir).expect("a directory").get(&name).copied();
                let child = match existing {
                    Some(child) => child,
                    None => {
                        let now = state.tick();
                        let child = state.add_inode(Inode::dir(now));
                        state.entries_mut(dir).expect("a directory").insert(name, child);
                        child
                    }
                };
                if let Body::Dir { entries, durable } = &mut state.inode_mut(dir).body {
                    durable.clone_from(entries);
                }
                dir = child;
            }
        }
        fs
    }

    /// This file system as `JsonlOptions::fs` wants it.
    pub fn shared(&self) -> Arc<dyn Fs> {
        Arc::new(self.clone())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Freezes the file system at the given point, counted from now (see `Freeze`).
    pub fn freeze(&self, at: Freeze) {
        let mut state = self.state();
        let (ops, syncs) = (state.ops, state.syncs);
        state.freeze = Some((at, ops, syncs));
    }

    /// Ends a freeze without a power loss: a process crash and restart, where the page
    /// cache (the volatile state) survives. The dead process's locks go with its handles,
    /// so drop them (its store) first.
    pub fn thaw(&self) {
        let mut state = self.state();
        state.freeze = None;
        state.frozen = false;
    }

    /// Whether the freeze point was reached (every operation now fails with `EIO`).
    pub fn is_frozen(&self) -> bool {
        self.state().frozen
    }

    /// The mutation knob: which directory syncs become no-ops from now on.
    pub fn skip_dir_syncs(&self, skip: SkipDirSyncs) {
        self.state().skip_dir_syncs = skip;
    }

    /// Operations attempted so far (including failed ones).
    pub fn ops(&self) -> u64 {
        self.state().ops
    }

    /// Syncs (`sync_data`, `sync_all`, `sync_dir`) attempted so far.
    pub fn syncs(&self) -> u64 {
        self.state().syncs
    }

    /// Every operation attempted so far, in order, with the path it named (`to` for
    /// `hard_link` and `rename`).
    pub fn op_log(&self) -> Vec<(FsOp, PathBuf)> {
        self.state().log.clone()
    }

    /// Pending (unsynced) file changes a crash image would decide the fate of: when 0,
    /// every seed gives the same image.
    pub fn pending_changes(&self) -> usize {
        let state = self.state();
        state
            .durable_reachable()
            .into_iter()
            .map(|ino| match &state.inode(ino).body {
                Body::File { pending, .. } => pending.len(),
                Body::Dir { .. } => 0,
            })
            .sum()
    }

    /// The volatile contents of the file at `path` (not counted as an operation).
    pub fn read_file(&self, path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
        let state = self.state();
        let ino = state.lookup(path.as_ref())?;
        match &state.inode(ino).body {
            Body::File { data, .. } => Ok(data.clone()),
            Body::Dir { .. } => Err(errno(libc::EISDIR)),
        }
    }

    /// The volatile entries of the directory at `path`, sorted (not counted).
    pub fn list_dir(&self, path: impl AsRef<Path>) -> io::Result<Vec<OsString>> {
        let state = self.state();
        let ino = state.lookup(path.as_ref())?;
        Ok(state.entries(ino)?.keys().cloned().collect())
    }

    /// Whether `path` names something (volatile view; not counted).
    pub fn exists(&self, path: impl AsRef<Path>) -> bool {
        self.state().lookup(path.as_ref()).is_ok()
    }

    /// What a power loss at this instant leaves, as a fresh `SimFs` (every entry and byte
    /// durable, no locks, no freeze, no mutation, counters at zero). Deterministic in
    /// `seed`.
    pub fn crash_image(&self, seed: u64) -> SimFs {
        let state = self.state();
        let mut rng = SplitMix64::new(seed);
        let mut image = State::empty();
        image.next_ino = state.next_ino;
        image.clock = state.clock;
        for ino in state.durable_reachable() {
            let inode = state.inode(ino);
            let body = match &inode.body {
                Body::File { durable, pending, .. } => {
                    let data = crashed_contents(durable, pending, &mut rng);
                    Body::File { durable: data.clone(), data, pending: Vec::new() }
                }
                Body::Dir { durable, .. } => Body::Dir { entries: durable.clone(), durable: durable.clone() },
            };
            image
                .inodes
                .insert(ino, Inode { body, mtime_ns: inode.mtime_ns, ctime_ns: inode.ctime_ns, lock_owner: None });
        }
        SimFs { state: Arc::new(Mutex::new(image)) }
    }

    fn handle(&self, ino: u64, path: &Path, read: bool, write: bool, state: &mut State) -> Box<dyn FsFile> {
        let id = state.next_handle;
        state.next_handle += 1;
        Box::new(SimFile { fs: self.clone(), ino, id, path: path.to_path_buf(), read, write })
    }
}

impl Fs for SimFs {
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Box<dyn FsFile>> {
        let mut state = self.state();
        state.begin(FsOp::Open, path)?;
        let creates = options.create || options.create_new;
        if !options.read && !options.write {
            return Err(errno(libc::EINVAL));
        }
        if (creates || options.truncate) && !options.write {
            return Err(errno(libc::EINVAL));
        }
        let (parent, name) = state.parent_of(path)?;
        let existing = state.entries(parent)?.get(&name).copied();
        let ino = match existing {
            Some(_) if options.create_new => return Err(errno(libc::EEXIST)),
            Some(ino) => {
                if state.inode(ino).is_dir() && options.write {
                    return Err(errno(libc::EISDIR));
                }
                if options.truncate {
                    let now = state.tick();
                    let inode = state.inode_mut(ino);
                    if let Body::File { data, pending, .. } = &mut inode.body {
                        if !data.is_empty() {
                            data.clear();
                            pending.push(Pending::SetLen(0));
                            inode.mtime_ns = now;
                            inode.ctime_ns = now;
                        }
                    }
                }
                ino
            }
            None if creates => {
                let now = state.tick();
                let ino = state.add_inode(Inode::file(now));
                state.entries_mut(parent)?.insert(name, ino);
                state.touch_dir(parent);
                ino
            }
            None => return Err(errno(libc::ENOENT)),
        };
        Ok(self.handle(ino, path, options.read, options.write, &mut state))
    }

    fn open_dir(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        let mut state = self.state();
        state.begin(FsOp::OpenDir, path)?;
        let ino = state.lookup(path)?;
        if !state.inode(ino).is_dir() {
            return Err(errno(libc::ENOTDIR));
        }
        Ok(self.handle(ino, path, true, false, &mut state))
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state();
        state.begin(FsOp::CreateDir, path)?;
        let (parent, name) = state.parent_of(path)?;
        if state.entries(parent)?.contains_key(&name) {
            return Err(errno(libc::EEXIST));
        }
        let now = state.tick();
        let ino = state.add_inode(Inode::dir(now));
        state.entries_mut(parent)?.insert(name, ino);
        state.touch_dir(parent);
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state();
        state.begin(FsOp::SyncDir, path)?;
        let ino = state.lookup(path)?;
        if !state.inode(ino).is_dir() {
            return Err(errno(libc::ENOTDIR));
        }
        state.sync_file_or_dir(ino, path);
        Ok(())
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.state();
        state.begin(FsOp::HardLink, to)?;
        let ino = state.lookup(from)?;
        if state.inode(ino).is_dir() {
            return Err(errno(libc::EPERM));
        }
        let (parent, name) = state.parent_of(to)?;
        if state.entries(parent)?.contains_key(&name) {
            return Err(errno(libc::EEXIST));
        }
        state.entries_mut(parent)?.insert(name, ino);
        state.touch_dir(parent);
        state.touch_ctime(ino);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.state();
        state.begin(FsOp::Rename, to)?;
        let (from_parent, from_name) = state.parent_of(from)?;
        let ino = *state.entries(from_parent)?.get(&from_name).ok_or_else(|| errno(libc::ENOENT))?;
        let (to_parent, to_name) = state.parent_of(to)?;
        let moving_dir = state.inode(ino).is_dir();
        if moving_dir && to.starts_with(from) && to != from {
            return Err(errno(libc::EINVAL));
        }
        if let Some(target) = state.entries(to_parent)?.get(&to_name).copied() {
            if target == ino {
                return Ok(());
            }
            let target_inode = state.inode(target);
            match (moving_dir, target_inode.is_dir()) {
                (false, true) => return Err(errno(libc::EISDIR)),
                (true, false) => return Err(errno(libc::ENOTDIR)),
                (true, true) if !state.entries(target)?.is_empty() => return Err(errno(libc::ENOTEMPTY)),
                _ => {}
            }
        }
        state.entries_mut(from_parent)?.remove(&from_name);
        state.entries_mut(to_parent)?.insert(to_name, ino);
        state.touch_dir(from_parent);
        state.touch_dir(to_parent);
        state.touch_ctime(ino);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state();
        state.begin(FsOp::RemoveFile, path)?;
        let (parent, name) = state.parent_of(path)?;
        let ino = *state.entries(parent)?.get(&name).ok_or_else(|| errno(libc::ENOENT))?;
        if state.inode(ino).is_dir() {
            return Err(errno(libc::EISDIR));
        }
        state.entries_mut(parent)?.remove(&name);
        state.touch_dir(parent);
        state.touch_ctime(ino);
        Ok(())
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state();
        state.begin(FsOp::RemoveDir, path)?;
        let (parent, name) = state.parent_of(path)?;
        let ino = *state.entries(parent)?.get(&name).ok_or_else(|| errno(libc::ENOENT))?;
        if !state.entries(ino)?.is_empty() {
            return Err(errno(libc::ENOTEMPTY));
        }
        state.entries_mut(parent)?.remove(&name);
        state.touch_dir(parent);
        Ok(())
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        let mut state = self.state();
        state.begin(FsOp::ReadDir, path)?;
        let ino = state.lookup(path)?;
        Ok(state.entries(ino)?.keys().cloned().collect())
    }

    fn metadata(&self, path: &Path) -> io::Result<FileMeta> {
        let mut state = self.state();
        state.begin(FsOp::Metadata, path)?;
        let ino = state.lookup(path)?;
        Ok(meta_of(ino, state.inode(ino)))
    }
}

fn meta_of(ino: u64, inode: &Inode) -> FileMeta {
    FileMeta {
        is_dir: inode.is_dir(),
        is_file: !inode.is_dir(),
        is_symlink: false,
        len: inode.len(),
        dev: SIM_DEV,
        ino,
        mtime_ns: inode.mtime_ns,
        ctime_ns: inode.ctime_ns,
    }
}

/// An open handle (one open file description) of a `SimFs`.
struct SimFile {
    fs: SimFs,
    ino: u64,
    /// The open file description, for `flock` ownership.
    id: u64,
    path: PathBuf,
    read: bool,
    write: bool,
}

impl SimFile {
    fn begin(&self, op: FsOp) -> io::Result<MutexGuard<'_, State>> {
        let mut state = self.fs.state();
        state.begin(op, &self.path)?;
        Ok(state)
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let mut state = self.fs.state();
        if let Some(inode) = state.inodes.get_mut(&self.ino) {
            if inode.lock_owner == Some(self.id) {
                inode.lock_owner = None;
            }
        }
    }
}

impl FsFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let state = self.begin(FsOp::ReadAt)?;
        if !self.read {
            return Err(errno(libc::EBADF));
        }
        match &state.inode(self.ino).body {
            Body::File { data, .. } => {
                let start = usize::try_from(offset).unwrap_or(usize::MAX).min(data.len());
                let count = buf.len().min(data.len() - start);
                buf[..count].copy_from_slice(&data[start..start + count]);
                Ok(count)
            }
            Body::Dir { .. } => Err(errno(libc::EISDIR)),
        }
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let mut state = self.begin(FsOp::WriteAt)?;
        if !self.write {
            return Err(errno(libc::EBADF));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let now = state.tick();
        let inode = state.inode_mut(self.ino);
        match &mut inode.body {
            Body::File { data, pending, .. } => {
                write_into(data, offset, buf);
                pending.push(Pending::Write { offset, bytes: buf.to_vec() });
            }
            Body::Dir { .. } => return Err(errno(libc::EISDIR)),
        }
        inode.mtime_ns = now;
        inode.ctime_ns = now;
        Ok(buf.len())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut state = self.begin(FsOp::SyncData)?;
        state.sync_file_or_dir(self.ino, &self.path);
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        let mut state = self.begin(FsOp::SyncAll)?;
        state.sync_file_or_dir(self.ino, &self.path);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut state = self.begin(FsOp::SetLen)?;
        if !self.write {
            return Err(errno(libc::EINVAL));
        }
        let now = state.tick();
        let inode = state.inode_mut(self.ino);
        match &mut inode.body {
            Body::File { data, pending, .. } => {
                data.resize(usize::try_from(len).map_err(|_| errno(libc::EFBIG))?, 0);
                pending.push(Pending::SetLen(len));
            }
            Body::Dir { .. } => return Err(errno(libc::EISDIR)),
        }
        inode.mtime_ns = now;
        inode.ctime_ns = now;
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let state = self.begin(FsOp::Len)?;
        Ok(state.inode(self.ino).len())
    }

    fn try_lock(&self) -> io::Result<bool> {
        let mut state = self.begin(FsOp::TryLock)?;
        let inode = state.inode_mut(self.ino);
        match inode.lock_owner {
            Some(owner) if owner != self.id => Ok(false),
            _ => {
                inode.lock_owner = Some(self.id);
                Ok(true)
            }
        }
    }

    fn metadata(&self) -> io::Result<FileMeta> {
        let state = self.begin(FsOp::FileMetadata)?;
        Ok(meta_of(self.ino, state.inode(self.ino)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(path: &str) -> &Path {
        Path::new(path)
    }

    fn write(fs: &SimFs, path: &str, bytes: &[u8]) -> Box<dyn FsFile> {
        let file = fs.open(p(path), OpenOptions::write_truncate()).unwrap();
        berth_jsonl::fs::write_all_at(file.as_ref(), bytes, 0).unwrap();
        file
    }

    #[test]
    fn unsynced_entries_vanish_and_unsynced_removals_reappear() {
        let fs = SimFs::with_root("/r");
        let file = write(&fs, "/r/a", b"hello");
        file.sync_all().unwrap();
        assert!(!fs.crash_image(0).exists("/r/a"), "entry not durable without a directory sync");
        fs.sync_dir(p("/r")).unwrap();
        assert_eq!(fs.crash_image(0).read_file("/r/a").unwrap(), b"hello");
        fs.remove_file(p("/r/a")).unwrap();
        assert_eq!(fs.crash_image(0).read_file("/r/a").unwrap(), b"hello", "removal not durable");
        fs.sync_dir(p("/r")).unwrap();
        assert!(!fs.crash_image(0).exists("/r/a"));
    }

    #[test]
    fn unsynced_writes_get_independent_fates() {
        let fs = SimFs::with_root("/r");
        let file = write(&fs, "/r/a", b"durable|");
        file.sync_data().unwrap();
        fs.sync_dir(p("/r")).unwrap();
        let tail = vec![b'x'; 5000];
        berth_jsonl::fs::write_all_at(file.as_ref(), &tail, 8).unwrap();
        assert_eq!(fs.pending_changes(), 1);
        let mut seen = BTreeSet::new();
        for seed in 0..200 {
            let data = fs.crash_image(seed).read_file("/r/a").unwrap();
            assert_eq!(&data[..8], b"durable|", "durable data always survives");
            let rest = &data[8..];
            let kind = if rest.is_empty() {
                "dropped"
            } else if rest == tail.as_slice() {
                "applied"
            } else if rest.iter().all(|byte| *byte == b'x') {
                assert!(rest.len().is_multiple_of(512), "torn at a sector boundary");
                "torn"
            } else if rest.len() == tail.len() && rest.iter().skip_while(|byte| **byte == b'x').all(|byte| *byte == 0) {
                "zeros"
            } else {
                assert_eq!(rest.len(), tail.len());
                "garbage"
            };
            seen.insert(kind);
            assert_eq!(fs.crash_image(seed).read_file("/r/a").unwrap(), data, "deterministic");
        }
        assert_eq!(seen.len(), 5, "{seen:?}");
        file.sync_data().unwrap();
        assert_eq!(fs.pending_changes(), 0);
    }

    #[test]
    fn hard_links_share_data_and_locks_follow_handles() {
        let fs = SimFs::with_root("/r");
        let first = write(&fs, "/r/a", b"x");
        fs.hard_link(p("/r/a"), p("/r/b")).unwrap();
        assert_eq!(fs.hard_link(p("/r/a"), p("/r/b")).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        berth_jsonl::fs::write_all_at(first.as_ref(), b"yz", 1).unwrap();
        assert_eq!(fs.read_file("/r/b").unwrap(), b"xyz");
        assert_eq!(fs.metadata(p("/r/a")).unwrap().ino, fs.metadata(p("/r/b")).unwrap().ino);
        assert_eq!(first.identity().unwrap(), (SIM_DEV, fs.metadata(p("/r/b")).unwrap().ino));
        let second = fs.open(p("/r/b"), OpenOptions::read_write_create()).unwrap();
        assert!(first.try_lock().unwrap());
        assert!(first.try_lock().unwrap(), "the holder may lock again");
        assert!(!second.try_lock().unwrap());
        drop(first);
        assert!(second.try_lock().unwrap());
        assert_eq!(fs.open(p("/r/a"), OpenOptions::write_new()).err().unwrap().kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs.open(p("/r/c"), OpenOptions::read_only()).err().unwrap().kind(), io::ErrorKind::NotFound);
        assert_eq!(fs.remove_dir(p("/r")).unwrap_err().raw_os_error(), Some(libc::ENOTEMPTY));
    }

    #[test]
    fn rename_replaces_atomically_and_durably_only_after_the_directory_sync() {
        let fs = SimFs::with_root("/r");
        write(&fs, "/r/e", b"1").sync_all().unwrap();
        fs.sync_dir(p("/r")).unwrap();
        write(&fs, "/r/e.tmp", b"2").sync_all().unwrap();
        fs.rename(p("/r/e.tmp"), p("/r/e")).unwrap();
        assert_eq!(fs.read_file("/r/e").unwrap(), b"2");
        assert!(!fs.exists("/r/e.tmp"));
        let image = fs.crash_image(3);
        assert_eq!(image.read_file("/r/e").unwrap(), b"1");
        assert!(!image.exists("/r/e.tmp"));
        fs.sync_dir(p("/r")).unwrap();
        assert_eq!(fs.crash_image(3).read_file("/r/e").unwrap(), b"2");
    }

    #[test]
    fn freeze_stops_every_later_operation() {
        let fs = SimFs::with_root("/r");
        fs.freeze(Freeze::AtSync(2));
        let file = write(&fs, "/r/a", b"x");
        file.sync_all().unwrap();
        assert_eq!(fs.sync_dir(p("/r")).unwrap_err().raw_os_error(), Some(libc::EIO));
        assert!(fs.is_frozen());
        assert!(fs.metadata(p("/r/a")).is_err());
        let fs = SimFs::with_root("/r");
        fs.freeze(Freeze::AtOp(1));
        assert!(fs.create_dir(p("/r/d")).is_err());
        assert!(!fs.exists("/r/d"));
    }

    #[test]
    fn skipped_directory_syncs_make_nothing_durable() {
        let fs = SimFs::with_root("/r");
        fs.skip_dir_syncs(SkipDirSyncs::PathEndsWith("/r".into()));
        fs.create_dir(p("/r/d")).unwrap();
        fs.sync_dir(p("/r")).unwrap();
        assert!(!fs.crash_image(0).exists("/r/d"));
        fs.skip_dir_syncs(SkipDirSyncs::Off);
        fs.sync_dir(p("/r")).unwrap();
        assert!(fs.crash_image(0).exists("/r/d"));
    }
}
