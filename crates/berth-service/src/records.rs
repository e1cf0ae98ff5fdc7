//! Session records: lookup by (caller's tenant, id) with authorization and expiry on
//! access, and compare-and-set writes of the record (with their audit records in the
//! same catalog transaction), retried on internal conflicts.

use super::*;

impl SessionService {
    /// Loads a session the principal may access, marking a lapsed one expired first
    /// (R-S3, audited). Missing, other tenant's, and out-of-scope sessions are all
    /// `NotFound` (audited as denials).
    ///
    /// Activity held for recent appends (`activity.rs`) is written first, so the record
    /// (and its revision) is what the catalog holds; only the append path reads it
    /// overlaid instead, to keep its own activity writes coalesced.
    pub(crate) async fn load(&self, principal: &Principal, id: &SessionId, action: &str) -> Result<SessionRecord> {
        let key = SessionKey::new(principal.tenant.clone(), id.clone());
        // An append, or a read of the log, uses the record only to authorize the call and
        // to observe its expiry: held activity is overlaid, not written first (a turn's
        // read right after its append would pay a catalog commit for it). Every other
        // action writes it first, so the records and revisions it sees are the catalog's.
        let overlaid = action == APPEND_ACTION || action == READ_ACTION;
        if !overlaid {
            self.activity.write_one(&key).await?;
        }
        let mut record = match self.catalog.get(&key).await? {
            Some(record) if record.status != Status::Creating && principal.can_access(&record.header.scope) => record,
            _ => return Err(self.denied(principal, action, id, Error::session_not_found(id)).await),
        };
        if overlaid {
            self.activity.overlay(&mut record);
        }
        let mut record = self.observe_expiry(record).await?;
        if let Some(next_seq) = self.cached_next_seq(&key).await {
            record.event_count = record.event_count.max(next_seq);
        }
        Ok(record)
    }

    pub(crate) async fn observe_expiry(&self, mut record: SessionRecord) -> Result<SessionRecord> {
        for _ in 0..CAS_RETRIES_MAX {
            let now = self.now();
            if !record.lifecycle().is_lapsed(now) {
                return Ok(record);
            }
            let expected = record.revision;
            let mut next = record.clone();
            apply_expire(&mut next, now);
            let expire = |next: &SessionRecord| {
                vec![self.draft_system(next, "expire", serde_json::json!({"reason": "activity lease lapsed"}))]
            };
            match self.save_audited(&mut next, expected, expire).await {
                Ok(()) => {
                    // Not while an append, attach or detach holds the append lock (it may
                    // be the caller's own): that holder closes it once it lets go.
                    self.close_writer_if_free(&next.key()).await;
                    return Ok(next);
                }
                Err(Error::RevisionConflict { .. }) => {
                    record = self.reload(&record.key()).await?;
                }
                Err(error) => return Err(error),
            }
        }
        Err(Error::Unavailable { reason: "metadata kept changing; retry".into() })
    }

    pub(crate) async fn reload(&self, key: &SessionKey) -> Result<SessionRecord> {
        self.activity.write_one(key).await?;
        self.catalog.get(key).await?.ok_or_else(|| Error::session_not_found(&key.id))
    }

    /// Bumps the revision and stores `record` iff the stored revision is `expected`
    /// (bringing `event_count` up to date from the cached write handle on the way).
    pub(crate) async fn save(&self, record: &mut SessionRecord, expected: Revision) -> Result<()> {
        self.save_audited(record, expected, |_| Vec::new()).await
    }

    /// `save`, with the audit records of the change (drafted from the record as it will
    /// be stored) in the same catalog transaction: a crash never leaves a state change
    /// without its audit record (R-S10).
    pub(crate) async fn save_audited(
        &self,
        record: &mut SessionRecord,
        expected: Revision,
        audits: impl FnOnce(&SessionRecord) -> Vec<AuditDraft>,
    ) -> Result<()> {
        if let Some(next_seq) = self.cached_next_seq(&record.key()).await {
            record.event_count = record.event_count.max(next_seq);
        }
        record.revision = Revision(expected.0 + 1);
        let drafts = audits(record);
        if drafts.is_empty() {
            self.catalog.update(record, expected).await?;
        } else {
            self.catalog.update_audited(record, expected, drafts).await?;
        }
        self.activity.written(record);
        Ok(())
    }

    /// Load → check `expected_revision` → apply `change` → compare-and-set, retrying
    /// internal conflicts when the caller did not pin a revision.
    pub(crate) async fn mutate<T>(
        &self,
        principal: &Principal,
        id: &SessionId,
        action: &str,
        expected_revision: Option<Revision>,
        change: impl FnMut(&mut SessionRecord, Timestamp) -> Result<T>,
    ) -> Result<(SessionRecord, T)> {
        self.mutate_with(principal, id, action, expected_revision, Durability::Durable(&|_, _| Vec::new()), change)
            .await
    }

    /// `mutate`, storing the audit records `audits` drafts (from the record as stored and
    /// the change's result) in the same catalog transaction as the change.
    pub(crate) async fn mutate_audited<T>(
        &self,
        principal: &Principal,
        id: &SessionId,
        action: &str,
        expected_revision: Option<Revision>,
        change: impl FnMut(&mut SessionRecord, Timestamp) -> Result<T>,
        audits: &(dyn Fn(&SessionRecord, &T) -> Vec<AuditDraft> + Sync),
    ) -> Result<(SessionRecord, T)> {
        self.mutate_with(principal, id, action, expected_revision, Durability::Durable(audits), change).await
    }

    pub(crate) async fn mutate_with<T>(
        &self,
        principal: &Principal,
        id: &SessionId,
        action: &str,
        expected_revision: Option<Revision>,
        durability: Durability<'_, T>,
        mut change: impl FnMut(&mut SessionRecord, Timestamp) -> Result<T>,
    ) -> Result<(SessionRecord, T)> {
        for _ in 0..CAS_RETRIES_MAX {
            let record = self.load(principal, id, action).await?;
            if let Some(expected) = expected_revision {
                if expected != record.revision {
                    return Err(Error::RevisionConflict { expected: expected.0, actual: record.revision.0 });
                }
            }
            let mut next = record.clone();
            let value = change(&mut next, self.now())?;
            let saved = match &durability {
                Durability::Durable(audits) => {
                    self.save_audited(&mut next, record.revision, |next| audits(next, &value)).await
                }
                Durability::Relaxed => {
                    next.revision = Revision(record.revision.0 + 1);
                    let saved = self.catalog.update_activity(&next, record.revision).await;
                    if saved.is_ok() {
                        self.activity.written(&next);
                    }
                    saved
                }
            };
            match saved {
                Ok(()) => return Ok((next, value)),
                Err(Error::RevisionConflict { .. }) if expected_revision.is_none() => continue,
                Err(error) => return Err(error),
            }
        }
        Err(Error::Unavailable { reason: "metadata kept changing; retry".into() })
    }

    /// What deleting a session frees, for its audit record (R-S9: counts and bytes):
    /// the backend's physical size, or for a backend that has none (memory) the logical
    /// size, i.e. its events as canonical JSON lines. `None` when no log exists.
    pub(crate) async fn stored_bytes(&self, key: &SessionKey) -> Result<Option<u64>> {
        let Some(stat) = self.store.stat(key).await? else {
            return Ok(None);
        };
        if let Some(size_bytes) = stat.size_bytes {
            return Ok(Some(size_bytes));
        }
        let handle = self.store.open(key, Access::Read).await?;
        let events = handle.read(0, None).await;
        let _ = handle.close().await;
        let lines_bytes = events?.iter().map(|event| event.to_canonical_json().len() as u64 + 1).sum();
        Ok(Some(lines_bytes))
    }
}
