//! The give-back of idle logs' zero tails: a write handle that stays open with no append
//! for `prealloc::IDLE_GIVE_BACK` (a service may hold one for minutes) truncates its log
//! back to the data end, so an idle log keeps no preallocated space.
//!
//! An idle handle runs no code of its own, so a sweeper thread does it: one per backend,
//! started when the first write handle on a version-2 log opens and ended when none is
//! left (a process that never preallocates never starts it). The backend holds its
//! handles weakly: a closed or dropped handle just disappears from the list. The sweep
//! takes a handle's own lock with `try_lock`, so it never waits for, nor races, an
//! operation in progress: a busy handle is not idle, and is looked at again next time.
//!
//! Rejected: checking at the handle's next operation (an idle handle has none); a tokio
//! task (the backend needs no runtime: `backend::in_place` runs file work on the calling
//! thread when there is none; and the truncation is blocking file work, which would
//! need `spawn_blocking` anyway).

use crate::writer::WriterCore;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::time::{Duration, Instant};

/// How often the sweeper looks: a tail is given back between `IDLE_GIVE_BACK` and
/// `IDLE_GIVE_BACK + SWEEP_EVERY` after a handle's last append.
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// The open write handles on version-2 logs of one backend.
#[derive(Default)]
pub(crate) struct IdleTails {
    registry: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    writers: Vec<Weak<Mutex<WriterCore>>>,
    sweeper_running: bool,
}

impl std::fmt::Debug for IdleTails {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let registry = self.lock();
        f.debug_struct("IdleTails")
            .field("writers", &registry.writers.len())
            .field("sweeper_running", &registry.sweeper_running)
            .finish()
    }
}

impl IdleTails {
    /// Adds a handle to sweep (one whose log may carry a zero tail), and starts the
    /// sweeper if it is not running.
    pub fn register(self: &Arc<Self>, core: &Arc<Mutex<WriterCore>>) {
        let mut registry = self.lock();
        registry.writers.retain(|writer| writer.strong_count() > 0);
        registry.writers.push(Arc::downgrade(core));
        if registry.sweeper_running {
            return;
        }
        let tails = Arc::clone(self);
        match std::thread::Builder::new().name("berth-idle-tails".into()).spawn(move || tails.sweep_while_open()) {
            Ok(_) => registry.sweeper_running = true,
            // Without it, tails are still given back at close.
            Err(error) => tracing::warn!(%error, "could not start the idle-tail sweeper"),
        }
    }

    /// Gives back the tail of every open handle idle at `now` that is not busy; how many.
    pub fn give_back_idle(&self, now: Instant) -> usize {
        let writers: Vec<Arc<Mutex<WriterCore>>> = {
            let mut registry = self.lock();
            registry.writers.retain(|writer| writer.strong_count() > 0);
            registry.writers.iter().filter_map(Weak::upgrade).collect()
        };
        writers.iter().filter(|core| give_back_unless_busy(core, now)).count()
    }

    /// The sweeper: every `SWEEP_EVERY`, until no handle is left.
    fn sweep_while_open(self: Arc<Self>) {
        loop {
            std::thread::sleep(SWEEP_EVERY);
            self.give_back_idle(Instant::now());
            let mut registry = self.lock();
            if registry.writers.iter().all(|writer| writer.strong_count() == 0) {
                registry.writers.clear();
                registry.sweeper_running = false;
                return;
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn give_back_unless_busy(core: &Mutex<WriterCore>, now: Instant) -> bool {
    let mut core = match core.try_lock() {
        Ok(core) => core,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => return false,
    };
    core.give_back_if_idle(now)
}

#[cfg(test)]
mod tests {
    use crate::writer::encode_batch;
    use crate::{JsonlBackend, JsonlOptions, IDLE_GIVE_BACK};
    use berth_core::{Event, Scope, SessionHeader, SessionId, TenantId, Timestamp, UserId};
    use std::time::Instant;

    fn header() -> SessionHeader {
        let scope = Scope { tenant: TenantId::parse("t").unwrap(), user: UserId::parse("u").unwrap(), project: None };
        SessionHeader::new(SessionId::parse("s").unwrap(), scope, Timestamp(1_000))
    }

    fn event(seq: u64) -> Event {
        Event::new(seq, "user/message", Timestamp(1_000 + seq), serde_json::json!({ "content": "x" })).unwrap()
    }

    #[test]
    fn the_sweep_skips_a_busy_handle_and_forgets_a_dropped_one() {
        let dir = tempfile::tempdir().unwrap();
        let options = JsonlOptions { preallocate: true, preallocate_after_appends: 0, ..JsonlOptions::default() };
        let backend = JsonlBackend::open(dir.path(), options).unwrap();
        let mut core = backend.materialize_blocking(&header(), &[event(0)]).unwrap();
        core.append(&encode_batch(&[event(1)], core.epoch)).unwrap();
        assert!(core.allocated_end() > core.view.known_end(), "the append extended the log");
        let writer = backend.writer_over(core);
        let later = Instant::now() + IDLE_GIVE_BACK;
        {
            let _busy = writer.core().lock().unwrap();
            assert_eq!(backend.give_back_idle_tails(later), 0, "an operation in progress is never waited for");
        }
        assert_eq!(backend.give_back_idle_tails(later), 1);
        let (data, allocated) = writer.data_and_allocated_len();
        assert_eq!(data, allocated);
        drop(writer);
        assert_eq!(backend.give_back_idle_tails(later), 0);
        assert!(format!("{backend:?}").contains("writers: 0"), "a dropped handle leaves the list: {backend:?}");
    }
}
