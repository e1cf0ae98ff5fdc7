//! Runs (R-S4, R-S5) and resume with repair (R-S6).
//!
//! Attaching is an explicit, side-effecting operation — never a hidden effect of
//! reading. A lease is not authorization: every run operation re-checks the scope, and
//! `detach` requires the same run and the same user that attached it (symmetric checks).

use crate::types::{AttachRequest, Attachment, OnBusy, ResumeOutcome};
use crate::writers::TrackedTurns;
use crate::{Durability, Principal, SessionService};
use berth_catalog::{RepairNote, ResumeMark, RunAt, RunRecord, RunStatus, SessionRecord};
use berth_core::lifecycle::{self, LifecycleEvent};
use berth_core::limits::OUTCOME_BYTES_MAX;
use berth_core::repair::{mark_repaired_by, repair};
use berth_core::vocabulary::CHECKPOINT;
use berth_core::{Concurrency, Error, Event, Result, Revision, RunId, Seq, SessionId, SessionKey, Timestamp};
use std::collections::HashSet;

/// The outcome recorded for the run a failed resume attached and then detached.
pub const RESUME_FAILED_OUTCOME: &str = "resume-failed";

impl SessionService {
    /// Attaches a run: checks scope, status, the activity lease and the concurrency
    /// policy; detaches lapsed runs as `abandoned` (and, with `on_busy = interrupt`, the
    /// oldest run as `interrupted`); records the run and returns its lease.
    pub async fn attach(&self, principal: &Principal, id: &SessionId, request: AttachRequest) -> Result<Attachment> {
        let run_id = request.run_id.clone().unwrap_or_else(|| RunId::generate(self.now()));
        // The displaced runs' and the attachment's audit records go with the change.
        let audit = |record: &SessionRecord, displaced: &Vec<RunRecord>| {
            let mut drafts: Vec<_> = displaced
                .iter()
                .map(|run| {
                    let action = if run.status == RunStatus::Abandoned { "abandon" } else { "detach" };
                    let details = serde_json::json!({"run": run.run_id, "status": run.status});
                    self.draft_ok(principal, action, record, details)
                })
                .collect();
            drafts.push(self.draft_ok(principal, "attach", record, serde_json::json!({"run": run_id})));
            drafts
        };
        let attach = |record: &mut SessionRecord, now| attach_in(record, principal, &run_id, request.on_busy, now);
        // Under the append lock: an append of a run this displaces is stored before the
        // change or refused after it (`append` checks its run under the same lock).
        let key = SessionKey::new(principal.tenant.clone(), id.clone());
        let attached = self.mutate_audited(principal, id, "attach", request.expected_revision, attach, &audit);
        let (record, displaced) = self.under_append_lock(&key, attached).await?;
        let run = record.runs.iter().find(|run| run.run_id == run_id).cloned().expect("attached above");
        Ok(Attachment { run, revision: record.revision, session_lease_until: record.lease_until, displaced })
    }

    /// Extends a run's attachment lease (and the session's activity lease).
    pub async fn heartbeat(&self, principal: &Principal, id: &SessionId, run_id: &RunId) -> Result<RunRecord> {
        let (_, run) = self
            .mutate(principal, id, "heartbeat", None, |record, now| {
                let ttl_ms = record.header.policy.activity_ttl_ms;
                let run_ttl_ms = record.header.policy.run_lease_ttl_ms;
                let index = find_own_run(record, principal, run_id)?;
                let next = lifecycle::transition(record.lifecycle(), LifecycleEvent::Heartbeat { ttl_ms }, now)?;
                record.lease_until = next.lease_until;
                record.last_activity = now;
                let run = &mut record.runs[index];
                run.lease_until = now.plus_ms(run_ttl_ms);
                Ok(run.clone())
            })
            .await?;
        Ok(run)
    }

    /// Detaches a run with an outcome (1 to `OUTCOME_BYTES_MAX` bytes, no control
    /// characters: it is kept in the audit log). Requires the same run, attached by the
    /// same user (or a service/admin principal), and `expected_revision` when given.
    pub async fn detach(
        &self,
        principal: &Principal,
        id: &SessionId,
        run_id: &RunId,
        outcome: &str,
        expected_revision: Option<Revision>,
    ) -> Result<SessionRecord> {
        validate_outcome(outcome)?;
        let audit = |record: &SessionRecord, _: &()| {
            let details = serde_json::json!({"run": run_id, "status": "detached", "outcome": outcome});
            vec![self.draft_ok(principal, "detach", record, details)]
        };
        let key = SessionKey::new(principal.tenant.clone(), id.clone());
        let detached = async {
            // The log's end, for the next resume to read from, when every turn in it is
            // closed (followed through this process's appends since its last resume).
            let mark = self.mark_at_end(&key).await;
            let detach = |record: &mut SessionRecord, now| {
                let index = find_own_run(record, principal, run_id)?;
                let next = lifecycle::transition(record.lifecycle(), LifecycleEvent::Detached, now)?;
                record.runs.remove(index);
                record.status = next.status;
                record.last_activity = now;
                if let Some(mark) = &mark {
                    // At the log's end: at or past any stored mark the log still holds
                    // (one past the end is replaced too).
                    record.resume_mark = mark.clone();
                }
                Ok(())
            };
            self.mutate_audited(principal, id, "detach", expected_revision, detach, &audit).await
        };
        let (record, ()) = self.under_append_lock(&key, detached).await?;
        if record.runs.is_empty() {
            // Nobody is writing: release the writer lease so other processes can.
            self.close_writer(&record.key()).await;
        }
        Ok(record)
    }

    /// Resume after a crash: a new legal attachment first, then read the log through the
    /// write handle, append the R-C5 closers for every run that is no longer attached
    /// (once: a second resume finds nothing open), and return the latest checkpoint.
    ///
    /// A resume that fails after attaching (a log it cannot read or extend) detaches the
    /// run it attached, audited as a detach with outcome `RESUME_FAILED_OUTCOME`, so the
    /// session is not left busy for the run lease and a retry can attach again. The runs
    /// the attach displaced stay displaced: their leases had lapsed, or the caller asked
    /// to interrupt them.
    pub async fn resume(&self, principal: &Principal, id: &SessionId, request: AttachRequest) -> Result<ResumeOutcome> {
        let attachment = self.attach(principal, id, request).await?;
        let run_id = attachment.run.run_id.clone();
        let outcome = self.repair_after_attach(principal, id, attachment).await;
        if let Err(error) = &outcome {
            let undone = self.detach(principal, id, &run_id, RESUME_FAILED_OUTCOME, None).await;
            match undone {
                Ok(_) => tracing::warn!(session = %id, run = %run_id, %error, "resume failed; its run was detached"),
                Err(detach_error) => tracing::warn!(
                    session = %id, run = %run_id, %error, %detach_error,
                    "resume failed and its run could not be detached; it stays attached until its lease lapses"
                ),
            }
        }
        outcome
    }

    async fn repair_after_attach(
        &self,
        principal: &Principal,
        id: &SessionId,
        mut attachment: Attachment,
    ) -> Result<ResumeOutcome> {
        let record = self.load(principal, id, "resume").await?;
        let key = record.key();
        // Like an append: the repair reads and extends the log at its current end.
        let append_lock = self.append_lock(&key);
        let _one_append_at_a_time = append_lock.lock().await;
        let writer = self.writer(&key).await?;
        // Memory writes a crashed append carried are finished first (`carried.rs`); a
        // marker at the log's end has nothing to finish and is kept.
        self.finish_carried(&key, Some(writer.next_seq())).await?;
        // From the mark the last resume left (`ResumeMark`), not from the log's start: no
        // turn before it is open. It is trusted while the event before it is the one it
        // fingerprinted (read with the rest, then left out).
        let (mark, read) = self.read_from_mark(&writer, &record.resume_mark).await?;
        let skip = usize::from(mark.from > 0);
        let events = &read[skip..];
        let attached: HashSet<&RunId> = record.runs.iter().map(|run| &run.run_id).collect();
        let scan = repair(events, |run| run.is_none_or(|run| !attached.contains(run)))?;
        let mut closers = scan.closers;
        let next_seq = writer.next_seq();
        for (index, closer) in closers.iter_mut().enumerate() {
            closer.seq = Seq(next_seq + index as u64);
        }
        // They keep the crashed run and its last event's time; who repaired them, when,
        // is `data.repaired_by`.
        mark_repaired_by(&mut closers, &attachment.run.run_id, self.now());
        let new_next = next_seq + closers.len() as u64;
        // The latest checkpoint (closers never are one): in what was read, else the one
        // before the mark, read by its seq (and checked: the next mark keeps what was found).
        let latest_read = events.iter().rev().find(|event| is_checkpoint(event));
        let (checkpoint, checkpoint_before) = match latest_read {
            Some(event) => (Some(event.clone()), mark.checkpoint),
            None => {
                let earlier = self.checkpoint_before(&writer, &mark).await?;
                let seq = earlier.as_ref().map(|event| event.seq.get());
                (earlier, seq)
            }
        };
        let from = scan.oldest_open.unwrap_or(new_next);
        // The event before the new mark: in what was read (the mark's own event included:
        // the new mark is never before the old one) or the closers, which continue it.
        let first = read.first().map_or(next_seq, |event| event.seq.get());
        let before_from = (from.checked_sub(1))
            .and_then(|seq| seq.checked_sub(first))
            .and_then(|index| read.iter().chain(&closers).nth(index as usize));
        let next_mark = ResumeMark {
            from,
            checkpoint: events
                .iter()
                .rev()
                .find(|event| event.seq.get() < from && is_checkpoint(event))
                .map_or(checkpoint_before, |event| Some(event.seq.get())),
            last: before_from.map(ResumeMark::fingerprint),
        };
        // Forward only, but a stored mark past the log's end is replaced.
        let keep_mark = |record: &mut SessionRecord| {
            if next_mark.from >= record.resume_mark.from || record.resume_mark.from > new_next {
                record.resume_mark = next_mark.clone();
            }
        };
        if !closers.is_empty() {
            writer.append(&closers).await?;
            // The record's note of it (`RepairNote`), in the same write: the run that
            // left a turn open (the latest, if several did) and the one repairing it.
            let interrupted = closers
                .iter()
                .max_by_key(|closer| closer.time)
                .and_then(|closer| closer.run.clone().map(|run| RunAt { run, at: closer.time }));
            let repairing = attachment.run.run_id.clone();
            let repaired = |record: &mut SessionRecord, now| {
                record.event_count = record.event_count.max(new_next);
                record.last_activity = now;
                keep_mark(record);
                record.repair = RepairNote {
                    interrupted: interrupted.clone(),
                    repaired_by: Some(RunAt { run: repairing.clone(), at: now }),
                };
                Ok(())
            };
            let details = serde_json::json!({"closers": closers.len(), "first_seq": next_seq});
            let audit = |_: &SessionRecord, _: &()| vec![self.draft_ok(principal, "repair", &record, details.clone())];
            let (stored, ()) = self.mutate_audited(principal, id, "resume", None, repaired, &audit).await?;
            attachment.revision = stored.revision;
        } else if next_mark != record.resume_mark {
            // A hint, written lazily: losing it to a crash only makes the next resume
            // read more.
            let marked = |record: &mut SessionRecord, _| {
                keep_mark(record);
                Ok(())
            };
            let (stored, ()) = self.mutate_with(principal, id, "resume", None, Durability::Relaxed, marked).await?;
            attachment.revision = stored.revision;
        }
        // With no turn left open, this process's appends from here on are followed (for
        // the mark a detach may leave); else not until a resume finds them all closed.
        // (`before_from` is then the log's last event: the mark is at its end.)
        let turns = scan.oldest_open.is_none().then(|| TrackedTurns {
            open: Default::default(),
            last: before_from.cloned(),
            checkpoint: next_mark.checkpoint,
        });
        self.track_turns(&key, turns).await;
        let next_seq = writer.next_seq();
        Ok(ResumeOutcome { attachment, repaired: closers, checkpoint, next_seq })
    }

    /// The log from `stored`'s `from - 1` on, and the mark to use: `stored` if the event
    /// there is the one it fingerprinted, else no mark (the whole log, from 0).
    async fn read_from_mark(
        &self,
        writer: &berth_store::SessionHandle,
        stored: &ResumeMark,
    ) -> Result<(ResumeMark, Vec<Event>)> {
        if stored.from > 0 && stored.from <= writer.next_seq() {
            let read = writer.read(stored.from - 1, None).await?;
            let same = read.first().is_some_and(|event| {
                event.seq.get() == stored.from - 1 && stored.last.as_deref() == Some(&*ResumeMark::fingerprint(event))
            });
            if same {
                return Ok((stored.clone(), read));
            }
            tracing::warn!(from = stored.from, "a resume mark does not match its log; reading the whole log");
        }
        Ok((ResumeMark::default(), writer.read(0, None).await?))
    }

    /// The latest checkpoint before the mark's `from`: the one it names, read by its
    /// seq; the whole log's part before `from` is read only if that seq holds no
    /// checkpoint (a mark that does not match its log).
    async fn checkpoint_before(&self, writer: &berth_store::SessionHandle, mark: &ResumeMark) -> Result<Option<Event>> {
        let Some(seq) = mark.checkpoint else {
            return Ok(None);
        };
        let named = writer.read(seq, Some(1)).await?.into_iter().next();
        if let Some(event) = named.filter(|event| event.seq.get() == seq && is_checkpoint(event)) {
            return Ok(Some(event));
        }
        tracing::warn!(seq, "a resume mark names no checkpoint; reading the log before it");
        let before = writer.read(0, Some(mark.from)).await?;
        Ok(before.into_iter().rev().find(is_checkpoint))
    }
}

pub(crate) fn is_checkpoint(event: &Event) -> bool {
    event.event_type.as_str() == CHECKPOINT
}

/// The attach decision on a loaded record (pure apart from its arguments).
fn attach_in(
    record: &mut SessionRecord,
    principal: &Principal,
    run_id: &RunId,
    on_busy: OnBusy,
    now: Timestamp,
) -> Result<Vec<RunRecord>> {
    if record.status.is_terminal() {
        return Err(Error::Terminal { state: record.status.to_string() });
    }
    if record.runs.iter().any(|run| &run.run_id == run_id) {
        return Err(Error::AlreadyExists { what: "run", id: run_id.to_string() });
    }
    let mut displaced = Vec::new();
    // Runs whose lease lapsed are detached as abandoned by this attach.
    let (lapsed, live): (Vec<RunRecord>, Vec<RunRecord>) = record.runs.drain(..).partition(|run| run.lease_until < now);
    record.runs = live;
    displaced.extend(lapsed.into_iter().map(|mut run| {
        run.status = RunStatus::Abandoned;
        run
    }));
    let runs_max = match record.header.policy.concurrency {
        Concurrency::Serial => 1,
        Concurrency::Parallel { runs_max } => runs_max as usize,
    };
    if record.runs.len() >= runs_max {
        match on_busy {
            OnBusy::Reject => {
                return Err(Error::Busy {
                    id: record.header.id.to_string(),
                    reason: format!("{} run(s) attached (policy allows {runs_max})", record.runs.len()),
                });
            }
            OnBusy::Interrupt => {
                let mut oldest = record.runs.remove(0);
                oldest.status = RunStatus::Interrupted;
                displaced.push(oldest);
            }
        }
    }
    let ttl_ms = record.header.policy.activity_ttl_ms;
    let next = lifecycle::transition(record.lifecycle(), LifecycleEvent::Attached { ttl_ms }, now)?;
    record.status = next.status;
    record.lease_until = next.lease_until;
    record.last_activity = now;
    record.runs.push(RunRecord {
        run_id: run_id.clone(),
        attached_by: principal.user.clone(),
        attached_at: now,
        lease_until: now.plus_ms(record.header.policy.run_lease_ttl_ms),
        status: RunStatus::Attached,
    });
    Ok(displaced)
}

/// A detach outcome is free text bounded like a title, and one line like a label.
fn validate_outcome(outcome: &str) -> Result<()> {
    berth_core::limits::check_text_line("outcome", berth_core::limits::Limit::OutcomeBytes, OUTCOME_BYTES_MAX, outcome)
}

/// The index of `run_id` among the attached runs, if the principal may act for it.
fn find_own_run(record: &SessionRecord, principal: &Principal, run_id: &RunId) -> Result<usize> {
    if record.status.is_terminal() {
        return Err(Error::Terminal { state: record.status.to_string() });
    }
    record
        .runs
        .iter()
        .position(|run| &run.run_id == run_id && (principal.is_privileged() || run.attached_by == principal.user))
        .ok_or_else(|| Error::RunNotAttached { id: record.header.id.to_string(), run: run_id.to_string() })
}
