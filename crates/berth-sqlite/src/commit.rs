//! Group commit: concurrent catalog writes share one `BEGIN IMMEDIATE … COMMIT`, so one
//! WAL sync, while each caller's outcome stays its own.
//!
//! A write is queued as a job. If no commit is under way the caller leads at once: it
//! takes everything queued (its own job, alone when it is the only writer, so a lone
//! caller waits for nobody) and runs it as one transaction on the writer connection.
//! Writes that arrive while that transaction runs and syncs queue up; when it is done the
//! leader hands the lead to the oldest of them, which takes the whole queue as the next
//! batch. No timer: a batch is what queued while the previous commit synced.
//!
//! In a batch of several jobs each runs inside its own `SAVEPOINT`: a job that fails (a
//! compare-and-set miss, a duplicate id, a constraint) is rolled back to its savepoint,
//! so none of its changes stay, and its error goes to its caller alone; the others
//! commit. The jobs run in queue order, so each sees the ones before it — an audit record
//! chains from the head the previous job of the batch left, and revisions and the audit
//! chain's order are those of one-at-a-time commits in that order. `BEGIN IMMEDIATE` is
//! still the cross-process lock, taken once per batch. A batch commits whole or not at
//! all: if its `COMMIT` fails, every job that had succeeded in it gets that error.
//!
//! Forks. Catalog work runs inside `fork::Working`; a queued caller waits outside it (it
//! would otherwise hold a fork back while waiting for a leader that waits for the fork),
//! and the queue remembers the process it belongs to, so a forked child drops its
//! parent's queued jobs instead of running them a second time.

use crate::error::Failure;
use crate::{fork, lock, Immediate, Shared};
use berth_core::Error;
use rusqlite::Connection;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// The queue of catalog writes waiting for a commit (one per catalog).
pub(crate) struct Committer {
    /// `SqliteOptions::group_commit`.
    enabled: bool,
    state: Mutex<State>,
    /// Transactions committed or rolled back by the committer: for tests.
    batches: AtomicU64,
}

#[derive(Default)]
struct State {
    /// The process this state belongs to (a forked child starts afresh).
    pid: u32,
    /// A leader is running a batch (or has been handed the lead and is about to).
    leading: bool,
    queue: Vec<Box<dyn Queued>>,
}

/// One caller's write, type-erased so writes of every result type share one queue.
trait Queued: Send {
    /// Runs the write on `connection` (inside the batch's transaction); true when it
    /// succeeded and its changes are to be committed.
    fn run(&mut self, connection: &Connection) -> bool;
    /// Delivers the outcome to the caller: its own, or `overriding` (the batch's
    /// failure to commit) when its write had succeeded or never ran.
    fn settle(self: Box<Self>, overriding: Option<Error>, artifact: &str);
    /// Tells the waiting caller to lead the next batch.
    fn hand_over(&self);
}

/// Where a queued caller waits for its outcome.
struct Done<T> {
    step: Mutex<Step<T>>,
    changed: Condvar,
}

enum Step<T> {
    Waiting,
    Lead,
    Settled(Result<T, Error>),
}

struct Job<T, F> {
    operation: &'static str,
    work: Option<F>,
    value: Option<Result<T, Failure>>,
    /// Taken when the outcome is delivered.
    done: Option<Arc<Done<T>>>,
}

impl<T, F> Job<T, F> {
    fn deliver(&mut self, outcome: Result<T, Error>) {
        let Some(done) = self.done.take() else { return };
        let mut step = lock(&done.step);
        *step = Step::Settled(outcome);
        done.changed.notify_one();
    }
}

impl<T, F> Drop for Job<T, F> {
    /// A job dropped undelivered (its leader panicked outside any write) still answers
    /// its caller, who would otherwise wait forever.
    fn drop(&mut self) {
        let reason = format!("catalog writer failed before {} committed", self.operation);
        self.deliver(Err(Error::Unavailable { reason }));
    }
}

impl<T, F> Queued for Job<T, F>
where
    T: Send,
    F: FnOnce(&Connection) -> Result<T, Failure> + Send,
{
    fn run(&mut self, connection: &Connection) -> bool {
        let Some(work) = self.work.take() else { return false };
        // A panicking write fails its own caller, not the batch (nor the leader's thread).
        let value = std::panic::catch_unwind(AssertUnwindSafe(|| work(connection))).unwrap_or_else(|_| {
            Err(Failure::Berth(Error::Unavailable {
                reason: format!("catalog write panicked during {}", self.operation),
            }))
        });
        let succeeded = value.is_ok();
        self.value = Some(value);
        succeeded
    }

    fn settle(mut self: Box<Self>, overriding: Option<Error>, artifact: &str) {
        let outcome = match (self.value.take(), overriding) {
            (Some(Err(failure)), _) => Err(failure.into_error(self.operation, artifact)),
            (_, Some(error)) => Err(error),
            (Some(Ok(value)), None) => Ok(value),
            (None, None) => Err(Error::Unavailable { reason: "catalog write was never run".into() }),
        };
        self.deliver(outcome);
    }

    fn hand_over(&self) {
        let Some(done) = &self.done else { return };
        let mut step = lock(&done.step);
        if matches!(*step, Step::Waiting) {
            *step = Step::Lead;
        }
        done.changed.notify_one();
    }
}

impl Shared {
    /// Runs `work` in a catalog transaction, batched with the writes queued beside it
    /// (see the module docs). Blocking: call inside `blocking`.
    pub(crate) fn commit<T, F>(&self, operation: &'static str, work: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Failure> + Send + 'static,
    {
        if !self.committer.enabled {
            let _working = fork::Working::enter();
            let outcome = self.writer().and_then(|connection| self.transact(&connection, work));
            return outcome.map_err(|failure| failure.into_error(operation, &self.artifact));
        }
        let done = Arc::new(Done { step: Mutex::new(Step::Waiting), changed: Condvar::new() });
        let job = Box::new(Job { operation, work: Some(work), value: None, done: Some(Arc::clone(&done)) });
        let working = fork::Working::enter();
        let lead = {
            let mut state = self.committer.state();
            state.queue.push(job);
            !std::mem::replace(&mut state.leading, true)
        };
        if lead {
            self.lead();
            drop(working);
        } else {
            drop(working);
            let mut step = lock(&done.step);
            while matches!(*step, Step::Waiting) {
                step = done.changed.wait(step).unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            if matches!(*step, Step::Lead) {
                drop(step);
                let _working = fork::Working::enter();
                self.lead();
            }
        }
        let mut step = lock(&done.step);
        match std::mem::replace(&mut *step, Step::Waiting) {
            Step::Settled(outcome) => outcome,
            _ => Err(Error::Unavailable { reason: format!("catalog write was not settled during {operation}") }),
        }
    }

    /// Runs everything queued as one batch, then hands the lead to the oldest write that
    /// queued meanwhile (or gives it up). Call inside `fork::Working`, as the leader.
    fn lead(&self) {
        /// Passes the lead on also when the batch panicked, so no write waits forever.
        struct PassOn<'a>(&'a Committer);
        impl Drop for PassOn<'_> {
            fn drop(&mut self) {
                let mut state = self.0.state();
                match state.queue.first() {
                    Some(next) => next.hand_over(),
                    None => state.leading = false,
                }
            }
        }
        let _pass_on = PassOn(&self.committer);
        let batch = std::mem::take(&mut self.committer.state().queue);
        self.run_batch(batch);
    }

    fn run_batch(&self, batch: Vec<Box<dyn Queued>>) {
        self.committer.batches.fetch_add(1, Ordering::Relaxed);
        let connection = match self.writer() {
            Ok(connection) => connection,
            Err(failure) => return self.fail_all(batch, failure.into_error("open catalog writer", &self.artifact)),
        };
        let trim = self.indexer.trim_due();
        let alone = batch.len() == 1;
        let mut jobs = batch.into_iter();
        let mut succeeded: Vec<Box<dyn Queued>> = Vec::new();
        'transactions: loop {
            let began = Immediate::begin(&connection).and_then(|transaction| {
                if let Some(below) = trim {
                    // The change at `below` stays, so SQLite numbers the next one past it.
                    connection.prepare_cached("DELETE FROM memory_changes WHERE seq < ?1")?.execute([below])?;
                }
                Ok(transaction)
            });
            let transaction = match began {
                Ok(transaction) => transaction,
                Err(failure) => {
                    let error = failure.into_error("begin catalog transaction", &self.artifact);
                    return self.fail_all(jobs.collect(), error);
                }
            };
            while let Some(mut job) = jobs.next() {
                let kept = match alone {
                    true => job.run(&connection),
                    false => match run_in_savepoint(&connection, job.as_mut()) {
                        Ok(kept) => kept,
                        Err(failure) => {
                            // The transaction is in a state no savepoint statement fixes:
                            // nothing of it is committed.
                            let error = failure.into_error("roll back a catalog write", &self.artifact);
                            drop(transaction);
                            succeeded.push(job);
                            return self.fail_all(succeeded.into_iter().chain(jobs).collect(), error);
                        }
                    },
                };
                if connection.is_autocommit() {
                    // SQLite rolled the whole transaction back (an I/O error, a full
                    // disk): the writes before this one are lost with it; the rest get a
                    // transaction of their own.
                    job.settle(None, &self.artifact);
                    let error = Error::Unavailable {
                        reason: "catalog transaction was rolled back by a failure of another write in its batch".into(),
                    };
                    self.fail_all(std::mem::take(&mut succeeded), error);
                    continue 'transactions;
                }
                match kept {
                    true => succeeded.push(job),
                    false => job.settle(None, &self.artifact),
                }
            }
            if succeeded.is_empty() {
                // Dropping the transaction rolls back what little it holds.
                return;
            }
            match transaction.commit() {
                Ok(()) => {
                    if let Some(below) = trim {
                        self.indexer.trimmed(below);
                    }
                    succeeded.into_iter().for_each(|job| job.settle(None, &self.artifact));
                }
                Err(failure) => self.fail_all(succeeded, failure.into_error("commit catalog writes", &self.artifact)),
            }
            return;
        }
    }

    fn fail_all(&self, jobs: Vec<Box<dyn Queued>>, error: Error) {
        for job in jobs {
            job.settle(Some(error.clone()), &self.artifact);
        }
    }
}

/// Runs `job` inside a savepoint of the open transaction, releasing it when the job
/// succeeded and rolling back to it when it failed. `Err` when a savepoint statement
/// itself failed.
fn run_in_savepoint(connection: &Connection, job: &mut dyn Queued) -> Result<bool, Failure> {
    connection.prepare_cached("SAVEPOINT batched_write")?.execute([])?;
    let kept = job.run(connection);
    if connection.is_autocommit() {
        // Rolled back entirely by SQLite: the caller sees it.
        return Ok(kept);
    }
    if !kept {
        connection.prepare_cached("ROLLBACK TO batched_write")?.execute([])?;
    }
    connection.prepare_cached("RELEASE batched_write")?.execute([])?;
    Ok(kept)
}

impl Committer {
    pub(crate) fn new(enabled: bool) -> Committer {
        Committer { enabled, state: Mutex::default(), batches: AtomicU64::new(0) }
    }

    /// The queue's state, reset in a forked child (its parent's queued writes are the
    /// parent's to run).
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        let mut state = lock(&self.state);
        let pid = std::process::id();
        if state.pid != pid {
            *state = State { pid, leading: false, queue: Vec::new() };
        }
        state
    }

    /// Transactions run so far (for tests).
    #[cfg(test)]
    pub(crate) fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }

    /// Writes queued behind the batch under way (for tests).
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.state().queue.len()
    }
}
