//! Group commit for audited changes: concurrent audited changes of one tenant (a
//! session's create or lifecycle change with its audit records, a delete, a bare audit
//! record) share one transaction, so the tenant's audit head is locked once and the WAL
//! flushed once for all of them, while each caller's outcome stays its own.
//!
//! Why: every audited change locks its tenant's audit head row until it commits (the
//! chain is computed under that lock), so one tenant's audited changes commit one at a
//! time however many connections there are — each paying its own commit and WAL flush.
//! PostgreSQL shares WAL flushes between *concurrent* commits, but these are never
//! concurrent.
//!
//! How: a change is queued on its tenant's lane. If the lane has no batch under way, the
//! caller starts a lane task, which takes everything queued and runs it as one
//! transaction: the tenant setting and the head lock once, then each change in queue
//! order. Changes that arrive while that transaction runs queue up and form the next
//! batch, run by the same task; the task ends when the lane is empty. No timer: a lone
//! change commits at once. The task is spawned, not run by the caller, so a caller that
//! stops waiting (a dropped request) never strands the changes queued behind it.
//!
//! In a batch of several changes each runs inside its own `SAVEPOINT`: a change that
//! fails (a compare-and-set miss, a missing session) is rolled back to its savepoint and
//! its error goes to its caller alone; the head it would have advanced is not advanced.
//! The batch commits whole or not at all: if `COMMIT` (or anything outside a savepoint)
//! fails, every change of the batch gets that error. Lanes are per tenant, so a batch
//! takes the same lock order as one change — the tenant's audit head, then its session
//! rows — and two processes' batches never deadlock.

use crate::catalog::{apply_audited, AuditedChange};
use crate::db::{Database, Failure};
use berth_catalog::audit::{AuditDraft, AuditEntry};
use berth_core::{Error, Result};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

/// One caller's audited change, waiting for its batch.
struct Job {
    change: Option<AuditedChange>,
    audits: Vec<AuditDraft>,
    reply: oneshot::Sender<Result<Vec<AuditEntry>>>,
}

/// The queues of audited changes, one lane per tenant with changes waiting or running.
#[derive(Default)]
pub(crate) struct AuditedCommitter {
    lanes: Mutex<HashMap<String, Vec<Job>>>,
    /// Transactions run by lane tasks: for tests.
    batches: AtomicU64,
}

const OPERATION: &str = "audited change";

impl AuditedCommitter {
    fn lanes(&self) -> MutexGuard<'_, HashMap<String, Vec<Job>>> {
        self.lanes.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Transactions run so far.
    #[cfg(test)]
    pub(crate) fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }

    /// Queues `change` (None: audit records alone) with `audits` on `tenant`'s lane and
    /// waits for its own outcome: the audit entries appended, in `audits`' order.
    pub(crate) async fn submit(
        db: &Arc<Database>,
        tenant: String,
        change: Option<AuditedChange>,
        audits: Vec<AuditDraft>,
    ) -> Result<Vec<AuditEntry>> {
        if !db.options.group_commit {
            let mut outcomes = execute(db, &tenant, vec![(change, audits)]).await?;
            return outcomes.pop().unwrap_or_else(|| Err(stopped()));
        }
        let (reply, outcome) = oneshot::channel();
        let job = Job { change, audits, reply };
        // A lane is in the map exactly while a task runs it (or is about to).
        let start_lane = match db.audited.lanes().entry(tenant.clone()) {
            Entry::Occupied(mut lane) => {
                lane.get_mut().push(job);
                false
            }
            Entry::Vacant(lane) => {
                lane.insert(vec![job]);
                true
            }
        };
        if start_lane {
            let db = Arc::clone(db);
            tokio::spawn(async move { run_lane(db, tenant).await });
        }
        outcome.await.unwrap_or_else(|_| Err(stopped()))
    }
}

fn stopped() -> Error {
    Error::Unavailable { reason: format!("postgres: {OPERATION}: the batch stopped before its outcome") }
}

/// Runs `tenant`'s lane until it is empty, a batch at a time.
async fn run_lane(db: Arc<Database>, tenant: String) {
    loop {
        let jobs = {
            let mut lanes = db.audited.lanes();
            match lanes.get_mut(&tenant) {
                Some(queue) if !queue.is_empty() => std::mem::take(queue),
                _ => {
                    lanes.remove(&tenant);
                    return;
                }
            }
        };
        db.audited.batches.fetch_add(1, Ordering::Relaxed);
        run_batch(&db, &tenant, jobs).await;
    }
}

/// One transaction for `jobs`; every job's caller gets its outcome.
async fn run_batch(db: &Arc<Database>, tenant: &str, jobs: Vec<Job>) {
    let (work, replies): (Vec<_>, Vec<_>) = jobs.into_iter().map(|job| ((job.change, job.audits), job.reply)).unzip();
    match execute(db, tenant, work).await {
        Ok(outcomes) => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                let _ = reply.send(outcome);
            }
        }
        Err(error) => {
            for reply in replies {
                let _ = reply.send(Err(error.clone()));
            }
        }
    }
}

type Work = Vec<(Option<AuditedChange>, Vec<AuditDraft>)>;

/// The batch's transaction: each job's own outcome, or the batch's failure.
async fn execute(db: &Arc<Database>, tenant: &str, work: Work) -> Result<Vec<Result<Vec<AuditEntry>>>> {
    let outcome: std::result::Result<_, Failure> = async {
        let mut client = db.pooled(OPERATION).await?;
        let run = async {
            let transaction = client.transaction().await?;
            transaction
                .batch_execute(&crate::db::tenant_sql(tenant, false, true, db.skipping_tenant_setting())?)
                .await?;
            let mut head = crate::catalog::lock_audit_head(&transaction, tenant).await?;
            let alone = work.len() == 1;
            let mut outcomes = Vec::with_capacity(work.len());
            for (change, audits) in work {
                if alone {
                    // One change: its failure is the transaction's (no savepoint to pay for).
                    outcomes.push(Ok(apply_audited(&transaction, tenant, change, audits, &mut head).await?));
                    continue;
                }
                transaction.batch_execute("SAVEPOINT change").await?;
                match apply_audited(&transaction, tenant, change, audits, &mut head).await {
                    Ok(entries) => {
                        transaction.batch_execute("RELEASE SAVEPOINT change").await?;
                        outcomes.push(Ok(entries));
                    }
                    Err(failure) if failure.poisons_connection() => return Err(failure),
                    Err(failure) => {
                        transaction.batch_execute("ROLLBACK TO SAVEPOINT change; RELEASE SAVEPOINT change").await?;
                        outcomes.push(Err(failure.into_error(OPERATION)));
                    }
                }
            }
            transaction.commit().await?;
            Ok(outcomes)
        };
        let outcome = db.timed(OPERATION, db.options.statement_timeout, run).await;
        db.settle(client, &outcome);
        outcome
    }
    .await;
    outcome.map_err(|failure| failure.into_error(OPERATION))
}
