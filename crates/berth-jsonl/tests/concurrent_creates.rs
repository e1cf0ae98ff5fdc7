//! Concurrent creates in one tenant share the syncs of its `sessions/` directory (the
//! group sync of `dir_sync`): counted with `CountingFs` on the real file system.

use berth_core::{Scope, SessionHeader, SessionId, TenantId, Timestamp, UserId};
use berth_jsonl::fs::{FileMeta, Fs, FsFile, OpenOptions, OsFs};
use berth_jsonl::{CountingFs, FsEvent, FsObserver, JsonlBackend, JsonlOptions};
use berth_store::LogBackend;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Concurrent creates of the test.
const CREATES: usize = 8;

fn header(id: &str) -> SessionHeader {
    let scope = Scope { tenant: TenantId::parse("t").unwrap(), user: UserId::parse("u").unwrap(), project: None };
    SessionHeader::new(SessionId::parse(id).unwrap(), scope, Timestamp(1_000))
}

/// Says a held sync started; waits for its release.
type Gate = (Sender<()>, Receiver<()>);

/// The real file system, with the first sync of one directory held until released, so
/// that the other creates arrive while it runs.
struct HeldSync {
    directory: PathBuf,
    gate: Arc<Mutex<Option<Gate>>>,
}

impl Fs for HeldSync {
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Box<dyn FsFile>> {
        OsFs.open(path, options)
    }
    fn open_dir(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        OsFs.open_dir(path)
    }
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        OsFs.create_dir(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let gate = if path == self.directory { self.gate.lock().unwrap().take() } else { None };
        if let Some((held, release)) = gate {
            held.send(()).unwrap();
            release.recv().unwrap();
        }
        OsFs.sync_dir(path)
    }
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        OsFs.hard_link(from, to)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        OsFs.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        OsFs.remove_file(path)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        OsFs.remove_dir(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        OsFs.read_dir(path)
    }
    fn metadata(&self, path: &Path) -> io::Result<FileMeta> {
        OsFs.metadata(path)
    }
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        OsFs.canonicalize(path)
    }
}

/// `CREATES` creates arriving while a sync of `sessions/` runs share the one sync that
/// follows it: 2 syncs of `sessions/` for all of them, not one each. Each create's own
/// log and directory take 2 syncs more (the temp log's, the session directory's).
#[test]
fn concurrent_creates_share_the_syncs_of_their_sessions_directory() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let gate = Arc::new(Mutex::new(None));
    let held_fs = HeldSync { directory: root.join("tenants/t/sessions"), gate: gate.clone() };
    let syncs = Arc::new(AtomicU64::new(0));
    let counted = syncs.clone();
    let observer: FsObserver = Arc::new(move |event| {
        if event == FsEvent::Synced {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    let fs = Arc::new(CountingFs::new(Arc::new(held_fs), observer));
    let backend = JsonlBackend::open(&root, JsonlOptions { fs, ..JsonlOptions::default() }).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // The directories down to `sessions/` exist (and were synced) before the count.
    runtime.block_on(backend.materialize(&header("seed"), &[])).unwrap();
    let (held_sender, held) = std::sync::mpsc::channel();
    let (release, release_receiver) = std::sync::mpsc::channel();
    *gate.lock().unwrap() = Some((held_sender, release_receiver));
    syncs.store(0, Ordering::SeqCst);

    let creates: Vec<_> = (0..CREATES)
        .map(|index| {
            let backend = backend.clone();
            runtime.spawn(async move { backend.materialize(&header(&format!("s{index}")), &[]).await.map(drop) })
        })
        .collect();
    held.recv_timeout(Duration::from_secs(30)).expect("one create's sync of sessions/ is held");
    let started = Instant::now();
    // They wait on a condition variable: no event to wait on, so poll (with a deadline).
    while backend.directory_syncs_waiting() < CREATES - 1 {
        assert!(started.elapsed() < Duration::from_secs(30), "the other creates wait for the sync");
        std::thread::yield_now();
    }
    release.send(()).unwrap();
    for create in creates {
        runtime.block_on(create).unwrap().unwrap();
    }
    let per_create = 2 * CREATES as u64;
    assert_eq!(syncs.load(Ordering::SeqCst), per_create + 2, "two syncs of sessions/ for {CREATES} creates");
}
