//! Catalogs across `fork`.
//!
//! SQLite's unix VFS keeps one process-wide table of the files it has open (one entry
//! per inode: the POSIX locks it believes it holds, its descriptors, the WAL index's
//! shared memory). A forked child inherits that table but not the locks (POSIX record
//! locks belong to a process), so a child that opens a catalog its parent has open
//! finds the parent's entry and trusts it: it skips locks it does not hold, or fails
//! with `SQLITE_PROTOCOL` once the inherited descriptors are closed. SQLite's advice is
//! to carry no open connection across a fork.
//!
//! So no connection to a catalog file is open while a process forks: a `pthread_atfork`
//! handler (registered when the first file catalog opens) waits for the catalog work in
//! flight to finish, holds new work back, and closes every connection to a catalog
//! file, which empties SQLite's table. After the fork both processes let the work go on;
//! each connection is opened again when next needed (the writer on its next write, a
//! reader on its next read). A child then opens its own catalogs on a clean table. An
//! in-memory catalog touches no file and is left open (closing it would lose it).
//!
//! Catalog work holds the gate only while it runs SQLite: it never awaits inside, so a
//! fork waits at most for the statements in flight (or a lock wait, up to the busy
//! timeout).

use crate::Shared;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Once, Weak};

struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Default)]
struct GateState {
    /// Catalog calls running SQLite now.
    working: usize,
    /// A fork is being prepared or is under way: new work waits.
    forking: bool,
    /// Forks prepared (each closes every file catalog's connections): for tests.
    forks: u64,
}

static GATE: Gate =
    Gate { state: Mutex::new(GateState { working: 0, forking: false, forks: 0 }), changed: Condvar::new() };

/// Every file catalog opened in this process (dead ones are pruned as others open).
static OPEN: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

static REGISTER: Once = Once::new();

fn state() -> MutexGuard<'static, GateState> {
    GATE.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Held by catalog work while it runs SQLite; a fork waits until none is held. Never
/// nested: a thread holding one must not ask for another (a fork between would wait
/// for the first while the second waits for the fork).
pub(crate) struct Working(());

impl Working {
    pub(crate) fn enter() -> Working {
        let mut state = state();
        while state.forking {
            state = GATE.changed.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        state.working += 1;
        Working(())
    }
}

impl Drop for Working {
    fn drop(&mut self) {
        let mut state = state();
        state.working -= 1;
        // Only a fork being prepared waits for the work to end (`prepare`, which sets
        // `forking` under this mutex before it waits). Not notifying otherwise matters:
        // the standard condvar's `notify_all` is a `futex` wake syscall whether or not
        // anyone waits, and this runs at the end of every catalog call (in `perf` of
        // memory point gets: ~2 % of the time, a fifth of what they cost beyond a plain
        // table's select).
        if state.working == 0 && state.forking {
            GATE.changed.notify_all();
        }
    }
}

/// Registers a file catalog, so a fork closes its connections first.
pub(crate) fn register(shared: &Arc<Shared>) {
    REGISTER.call_once(|| {
        // SAFETY: the handlers are plain `extern "C"` functions with no arguments; they
        // only lock this module's mutexes and close SQLite connections, in the forking
        // thread before the fork and in each process after it.
        let registered = unsafe { libc::pthread_atfork(Some(prepare), Some(resume), Some(resume)) };
        if registered != 0 {
            tracing::warn!(code = registered, "pthread_atfork failed: a forked child must not open this store");
        }
    });
    let mut open = OPEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    open.retain(|weak| weak.strong_count() > 0);
    open.push(Arc::downgrade(shared));
}

/// How many forks this process has prepared (each closed every file catalog's
/// connections): for tests.
#[cfg(test)]
pub(crate) fn forks_prepared() -> u64 {
    state().forks
}

/// Before `fork`, in the forking thread: waits for catalog work in flight, holds new
/// work back, and closes every connection to a catalog file.
pub(crate) extern "C" fn prepare() {
    let mut state = state();
    state.forking = true;
    while state.working > 0 {
        state = GATE.changed.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
    }
    state.forks += 1;
    drop(state);
    let open: Vec<Arc<Shared>> = {
        let open = OPEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        open.iter().filter_map(Weak::upgrade).collect()
    };
    for shared in &open {
        shared.close_connections();
    }
    // The `Arc`s are dropped here, before the fork: a catalog whose last other owner
    // went meanwhile is closed in this process, not half in each.
    drop(open);
}

/// After `fork`, in the parent and in the child: lets catalog work go on. Connections
/// are reopened as they are needed.
pub(crate) extern "C" fn resume() {
    let mut state = state();
    state.forking = false;
    drop(state);
    GATE.changed.notify_all();
}
