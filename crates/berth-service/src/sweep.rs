//! Retention (R-S11): a sweeper that applies each tenant's policy in bounded batches.
//! It expires (never reactivates) and deletes; every action is audited as `system`.

use crate::types::SweepReport;
use crate::{apply_expire, SessionService, ABANDONED_CREATE_MS};
use berth_catalog::scoped::{Removed, SweepAudit};
use berth_catalog::{SessionQuery, SessionRecord};
use berth_core::lifecycle::Status;
use berth_core::{Error, Result, Timestamp};

impl SessionService {
    /// One bounded sweep: at most `batch_max` actions across all tenants. Returns what it
    /// did and whether more candidates remain (call again).
    pub async fn sweep(&self, batch_max: usize) -> Result<SweepReport> {
        let mut report = SweepReport::default();
        // Held activity first, so the sweep judges what this process knows.
        if let Err(error) = self.flush_activity().await {
            tracing::warn!(%error, "writing held activity before a sweep failed");
        }
        let now = self.now();
        for tenant in self.catalog.tenants().await? {
            let policy = self.catalog.retention(&tenant).await?.unwrap_or_default();
            for (mut query, action) in sweep_queries(&tenant, &policy, now) {
                query.limit = batch_max.saturating_sub(actions(&report)) + 1;
                for record in self.catalog.list(&query).await? {
                    if actions(&report) >= batch_max {
                        report.more = true;
                        return Ok(report);
                    }
                    let done = match action {
                        SweepAction::Expire => self.expire_by_policy(record).await?,
                        SweepAction::DeleteTerminal | SweepAction::RemoveAbandonedCreate => {
                            self.delete_by_policy(record).await?
                        }
                    };
                    match (done, action) {
                        (false, _) => {}
                        (true, SweepAction::Expire) => report.expired += 1,
                        (true, SweepAction::DeleteTerminal) => report.deleted += 1,
                        (true, SweepAction::RemoveAbandonedCreate) => report.abandoned_creates += 1,
                    }
                }
            }
            // Markers of carried memory writes a crash left (only those sessions are visited).
            let room = batch_max.saturating_sub(actions(&report));
            report.carried_finished += self.sweep_carried(&tenant, room).await?;
            if let Some(max_age_ms) = policy.memory_max_age_ms {
                let room = batch_max.saturating_sub(actions(&report));
                let before = Timestamp(now.0.saturating_sub(max_age_ms));
                let audit = self.memory_sweep_audit("memory.retention", serde_json::json!({"max_age_ms": max_age_ms}));
                let removed = self.catalog.memory_remove_stale(&tenant, before, room, audit).await?;
                report.memory_removed += removed;
                if actions(&report) >= batch_max {
                    report.more = true;
                    return Ok(report);
                }
            }
        }
        // Memory items past their TTL (every tenant), in the same bounded batch.
        let room = batch_max.saturating_sub(actions(&report));
        let audit = self.memory_sweep_audit("memory.expire", serde_json::json!({"reason": "ttl"}));
        let removed = self.catalog.memory_remove_expired(now, room, audit).await?;
        report.memory_removed += removed;
        if removed > 0 && actions(&report) >= batch_max {
            report.more = true;
        }
        Ok(report)
    }

    /// The audit record of one batch of a memory sweep in a tenant (`action`, by
    /// `system:memory`): `details` with the items and bytes removed, in all and per scope.
    fn memory_sweep_audit(&self, action: &'static str, details: serde_json::Value) -> SweepAudit {
        let clock = std::sync::Arc::clone(&self.clock);
        std::sync::Arc::new(move |tenant: &berth_core::TenantId, removed: &Removed| {
            let mut counts = serde_json::to_value(removed).unwrap_or_default();
            if let (Some(counts), Some(extra)) = (counts.as_object_mut(), details.as_object()) {
                counts.extend(extra.clone());
            }
            berth_catalog::AuditDraft {
                tenant: tenant.clone(),
                time: clock.now(),
                actor: "system:memory".into(),
                action: action.to_owned(),
                session: None,
                revision: None,
                outcome: "ok".to_owned(),
                details: counts,
            }
        })
    }

    async fn expire_by_policy(&self, record: SessionRecord) -> Result<bool> {
        let mut next = record.clone();
        apply_expire(&mut next, self.now());
        let expire =
            |next: &SessionRecord| vec![self.draft_system(next, "expire", serde_json::json!({"reason": "retention"}))];
        match self.save_audited(&mut next, record.revision, expire).await {
            Ok(()) => {
                self.close_writer(&next.key()).await;
                Ok(true)
            }
            Err(Error::RevisionConflict { .. } | Error::NotFound { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    async fn delete_by_policy(&self, record: SessionRecord) -> Result<bool> {
        let key = record.key();
        self.close_writer(&key).await;
        let size_bytes = self.stored_bytes(&key).await?;
        let memory_items = self.catalog.memory_bound_count(&key.tenant, &key.id).await?;
        let details = serde_json::json!({
            "reason": "retention",
            "memory_items": memory_items,
            "events": record.event_count,
            "bytes": size_bytes,
            "status": record.status,
            "owner": record.header.scope.user,
        });
        // The compare-and-set removal decides: a session changed since it was listed (an
        // admin reopened it, say) is skipped with nothing lost. Only then is the log erased.
        // The removal and its audit record are one catalog transaction.
        let audit = vec![self.draft_system(&record, "delete", details)];
        match self.catalog.remove_audited(&key, record.revision, audit).await {
            Ok(_) => {}
            Err(Error::RevisionConflict { .. } | Error::NotFound { .. }) => return Ok(false),
            Err(error) => return Err(error),
        }
        if let Err(error) = self.store.erase(&key).await {
            // The record is gone, so the session no longer exists for anyone; the log is
            // an orphan that still holds the bytes. Say so loudly; the audit keeps it too.
            tracing::warn!(session = %key, %error, "retention removed the record but could not erase the log");
        }
        Ok(true)
    }
}

/// What the sweeper does with the sessions a query finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SweepAction {
    Expire,
    DeleteTerminal,
    RemoveAbandonedCreate,
}

/// A tenant's sweep, as (candidates, action) pairs in the order they run: live sessions
/// whose activity lease lapsed, or idle / too old by policy, expire; terminal sessions
/// past their retention are deleted; creates a crash abandoned are removed.
fn sweep_queries(
    tenant: &berth_core::TenantId,
    policy: &berth_catalog::RetentionPolicy,
    now: Timestamp,
) -> Vec<(SessionQuery, SweepAction)> {
    let live = || base(tenant, vec![Status::Active, Status::Idle]);
    let before = |ms: u64| Timestamp(now.0.saturating_sub(ms));
    let mut queries = vec![(SessionQuery { lease_before: Some(now), ..live() }, SweepAction::Expire)];
    if let Some(idle_ttl_ms) = policy.idle_ttl_ms {
        queries.push((SessionQuery { active_before: Some(before(idle_ttl_ms)), ..live() }, SweepAction::Expire));
    }
    if let Some(max_age_ms) = policy.max_age_ms {
        queries.push((SessionQuery { created_before: Some(before(max_age_ms)), ..live() }, SweepAction::Expire));
    }
    if let Some(after_ms) = policy.delete_terminal_after_ms {
        let terminal = base(tenant, vec![Status::Closed, Status::Expired]);
        let query = SessionQuery { status_changed_before: Some(before(after_ms)), ..terminal };
        queries.push((query, SweepAction::DeleteTerminal));
    }
    let creating = base(tenant, vec![Status::Creating]);
    // Dated from when the create began (`status_changed_at` of the `creating` record),
    // not the header's `created_at`, which an import carries over from its export.
    let query = SessionQuery { status_changed_before: Some(before(ABANDONED_CREATE_MS)), ..creating };
    queries.push((query, SweepAction::RemoveAbandonedCreate));
    queries
}

fn base(tenant: &berth_core::TenantId, statuses: Vec<Status>) -> SessionQuery {
    SessionQuery { statuses, include_blank: true, ..SessionQuery::tenant(tenant.clone()) }
}

fn actions(report: &SweepReport) -> usize {
    (report.expired + report.deleted + report.abandoned_creates + report.memory_removed + report.carried_finished)
        as usize
}
