//! Group `fsync` of a directory: concurrent creates that each add an entry to the same
//! directory (a new session directory in a tenant's `sessions/`) share one sync of it
//! instead of making one each.
//!
//! The rule is group commit's: a caller's change is durable only after a sync that
//! *started* after the change. A sync already running when the caller arrives may have
//! begun before the change, so it does not count: the caller waits for it to finish,
//! then leads the next sync or joins it if another caller led it first. Every caller
//! that arrived while one sync ran is covered by the single sync that follows.
//!
//! Each caller gets the outcome of the sync that covers its own change: a failed sync
//! fails every caller it was to cover (never a later sync's success instead — after a
//! failed `fsync` a retry may "succeed" without the data, PostgreSQL's fsyncgate).

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

/// Directories with their own sync state kept at once; past it, idle ones are dropped
/// (an idle directory's state holds nothing a fresh one would not).
const DIRECTORIES_MAX: usize = 1_024;

/// The group syncs of every directory a backend syncs this way.
#[derive(Debug, Default)]
pub(crate) struct GroupDirSync {
    directories: Mutex<HashMap<PathBuf, Arc<Directory>>>,
}

/// One directory's syncs: the generation that starts next, and whether one is running.
#[derive(Debug, Default)]
struct Directory {
    state: Mutex<State>,
    finished: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// The sync that starts next: every caller arriving now is covered by it.
    next: Arc<Generation>,
    running: bool,
    /// Callers waiting for a sync to finish (tests watch it).
    waiting: usize,
}

/// One sync: its outcome, once it finished.
#[derive(Debug, Default)]
struct Generation {
    outcome: OnceLock<Result<(), SyncFailure>>,
}

/// A failed sync's error, kept to give to each caller it covered.
#[derive(Clone, Debug)]
struct SyncFailure {
    kind: io::ErrorKind,
    os_error: Option<i32>,
    message: String,
}

impl SyncFailure {
    fn of(error: &io::Error) -> SyncFailure {
        SyncFailure { kind: error.kind(), os_error: error.raw_os_error(), message: error.to_string() }
    }

    fn to_error(&self) -> io::Error {
        match self.os_error {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::new(self.kind, self.message.clone()),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl GroupDirSync {
    /// Makes every change the caller made to `directory` before this call durable, by
    /// `sync` (the directory's `fsync`) run by this caller or shared with others.
    pub(crate) fn sync(&self, directory: &Path, sync: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let slot = self.directory(directory);
        slot.sync(sync)
    }

    /// Callers now waiting for a sync of some directory to finish.
    pub(crate) fn waiting(&self) -> usize {
        lock(&self.directories).values().map(|slot| lock(&slot.state).waiting).sum()
    }

    fn directory(&self, directory: &Path) -> Arc<Directory> {
        let mut directories = lock(&self.directories);
        if let Some(slot) = directories.get(directory) {
            return slot.clone();
        }
        if directories.len() >= DIRECTORIES_MAX {
            // Only the map holds an idle directory's state.
            directories.retain(|_, slot| Arc::strong_count(slot) > 1);
        }
        directories.entry(directory.to_path_buf()).or_default().clone()
    }
}

impl Directory {
    fn sync(&self, sync: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let mut state = lock(&self.state);
        // Any sync running now may have started before the caller's change: the one
        // that covers it is the next to start.
        let mine = state.next.clone();
        loop {
            if let Some(outcome) = mine.outcome.get() {
                return outcome.clone().map_err(|failure| failure.to_error());
            }
            if !state.running {
                // Nothing runs and ours has not finished, so it has not started: lead it.
                state.running = true;
                state.next = Arc::default();
                drop(state);
                return self.lead(&mine, sync);
            }
            state.waiting += 1;
            state = self.finished.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
            state.waiting -= 1;
        }
    }

    /// Runs the sync of generation `mine` for everyone it covers.
    fn lead(&self, mine: &Generation, sync: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let finish = Finish { directory: self, generation: mine };
        let outcome = sync();
        let _ = mine.outcome.set(outcome.as_ref().map(|_| ()).map_err(SyncFailure::of));
        drop(finish);
        outcome
    }
}

/// Ends a led sync, also when it panicked (its generation then fails): the next one may
/// start, and the callers waiting for this one wake.
struct Finish<'a> {
    directory: &'a Directory,
    generation: &'a Generation,
}

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        let panicked =
            SyncFailure { kind: io::ErrorKind::Other, os_error: None, message: "directory sync panicked".into() };
        let _ = self.generation.outcome.set(Err(panicked));
        lock(&self.directory.state).running = false;
        self.directory.finished.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    /// Waits (deadline 10 s) until `condition` holds; the threads it waits for are
    /// blocked on a condition variable, so there is no event to wait on instead.
    fn wait_until(condition: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !condition() {
            assert!(Instant::now() < deadline, "timed out");
            std::thread::yield_now();
        }
    }

    /// A directory model: `changes` counts entries made, `durable` how many the last
    /// finished sync covered (what the sync saw when it started).
    #[derive(Default)]
    struct Model {
        changes: AtomicU64,
        durable: AtomicU64,
        syncs: AtomicU64,
    }

    impl Model {
        fn sync(&self, gate: Option<&mpsc::Receiver<()>>) -> io::Result<()> {
            self.syncs.fetch_add(1, Ordering::SeqCst);
            let seen = self.changes.load(Ordering::SeqCst);
            if let Some(gate) = gate {
                gate.recv().expect("released");
            }
            self.durable.fetch_max(seen, Ordering::SeqCst);
            Ok(())
        }
    }

    /// A caller whose change came after a running sync started is not covered by it:
    /// it waits, and a sync that starts after its change covers it (and every caller
    /// that arrived meanwhile: one sync for all of them).
    #[test]
    fn a_caller_arriving_during_a_sync_waits_for_the_next_one_which_the_others_share() {
        let group = Arc::new(GroupDirSync::default());
        let model = Arc::new(Model::default());
        let dir = Path::new("/d");
        let (release, gate) = mpsc::channel();
        model.changes.fetch_add(1, Ordering::SeqCst);
        let first = {
            let (group, model) = (group.clone(), model.clone());
            std::thread::spawn(move || group.sync(dir, || model.sync(Some(&gate))))
        };
        wait_until(|| model.syncs.load(Ordering::SeqCst) == 1);
        let later: Vec<_> = (0..4)
            .map(|_| {
                let (group, model) = (group.clone(), model.clone());
                std::thread::spawn(move || {
                    let change = model.changes.fetch_add(1, Ordering::SeqCst) + 1;
                    group.sync(dir, || model.sync(None)).expect("sync");
                    assert!(model.durable.load(Ordering::SeqCst) >= change, "acknowledged before its sync");
                })
            })
            .collect();
        wait_until(|| group.waiting() == 4);
        release.send(()).expect("gate");
        first.join().expect("first").expect("first sync");
        for caller in later {
            caller.join().expect("a later caller");
        }
        assert_eq!(model.syncs.load(Ordering::SeqCst), 2, "the four later callers shared one sync");
    }

    /// A failed sync fails every caller it was to cover with its error, the ones that
    /// did not run it too; a caller that came after it gets a sync of its own.
    #[test]
    fn a_failed_sync_fails_everyone_it_covered_and_only_them() {
        let group = Arc::new(GroupDirSync::default());
        let dir = Path::new("/d");
        let (release, gate) = mpsc::channel::<()>();
        let leader = {
            let group = group.clone();
            std::thread::spawn(move || group.sync(dir, || gate.recv().map_err(|_| io::ErrorKind::BrokenPipe.into())))
        };
        wait_until(|| lock(&group.directories).values().any(|slot| lock(&slot.state).running));
        let failing_syncs = Arc::new(AtomicU64::new(0));
        let followers: Vec<_> = (0..3)
            .map(|_| {
                let (group, failing_syncs) = (group.clone(), failing_syncs.clone());
                std::thread::spawn(move || {
                    group.sync(dir, || {
                        failing_syncs.fetch_add(1, Ordering::SeqCst);
                        Err(io::Error::from_raw_os_error(libc::EIO))
                    })
                })
            })
            .collect();
        wait_until(|| group.waiting() == 3);
        release.send(()).expect("gate");
        leader.join().expect("leader").expect("the first sync worked");
        for follower in followers {
            let error = follower.join().expect("follower").expect_err("the sync that covered them failed");
            assert_eq!(error.raw_os_error(), Some(libc::EIO));
        }
        assert_eq!(failing_syncs.load(Ordering::SeqCst), 1, "one sync covered the three");
        assert!(group.sync(dir, || Ok(())).is_ok(), "a later caller's own sync");
    }
}
