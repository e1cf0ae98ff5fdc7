//! The in-memory catalog (tests and embedding). Several services over one
//! `Arc<MemoryCatalog>` share it like several processes share a database.

use crate::audit::{self, AuditDraft, AuditEntry};
use crate::scoped::TenantQuota;
use crate::scoped::{self, DeleteAudit, ForgetAudit, ForgetOutcome, MemoryDelete, MemoryItem, MemoryPut, MemoryQuota};
use crate::scoped::{MemorySearch, MemoryStore, MemoryUsage, Namespace, NamespaceQuery, Removed, SweepAudit};
use crate::{Catalog, RetentionPolicy, SessionQuery, SessionRecord};
use async_trait::async_trait;
use berth_core::{Error, IdempotencyKey, KeyedBatch, Result, Revision, SessionId, SessionKey, TenantId, Timestamp};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

#[derive(Debug, Default)]
struct State {
    sessions: BTreeMap<SessionKey, SessionRecord>,
    audit: BTreeMap<TenantId, Vec<AuditEntry>>,
    audit_heads: BTreeMap<TenantId, (u64, String)>,
    retention: BTreeMap<TenantId, RetentionPolicy>,
    idempotency: BTreeMap<SessionKey, IdempotencyIndex>,
    /// Per tenant, (namespace, key) → item, in the order of the key-ordered search.
    memory: BTreeMap<TenantId, BTreeMap<(String, String), MemoryItem>>,
    /// Per tenant, its own memory quota (set by an admin).
    quotas: BTreeMap<TenantId, TenantQuota>,
}

impl State {
    fn items(&mut self, tenant: &TenantId) -> &mut BTreeMap<(String, String), MemoryItem> {
        self.memory.entry(tenant.clone()).or_default()
    }

    fn usage(&self, tenant: &TenantId) -> MemoryUsage {
        let charged =
            || self.memory.get(tenant).into_iter().flat_map(|items| items.values()).filter(|i| i.is_charged());
        MemoryUsage { items: charged().count() as u64, bytes: charged().map(MemoryItem::bytes).sum() }
    }

    /// The quota that applies to `tenant`: its own over `default`.
    fn quota(&self, tenant: &TenantId, default: &MemoryQuota) -> MemoryQuota {
        self.quotas.get(tenant).copied().unwrap_or_default().over(default)
    }

    /// Appends the audit record of a sweep's batch in each tenant something was removed from.
    fn audit_removed(&mut self, removed: BTreeMap<TenantId, Removed>, audit: &SweepAudit) {
        for (tenant, removed) in removed {
            append_audit_in(self, audit(&tenant, &removed));
        }
    }
}

fn item_key(namespace: &Namespace, key: &str) -> (String, String) {
    (namespace.as_str().to_owned(), key.to_owned())
}

/// One session's idempotency index.
#[derive(Debug, Default)]
struct IdempotencyIndex {
    indexed_until: u64,
    batches: BTreeMap<IdempotencyKey, KeyedBatch>,
}

#[derive(Debug, Default)]
pub struct MemoryCatalog {
    state: Mutex<State>,
}

impl MemoryCatalog {
    pub fn new() -> MemoryCatalog {
        MemoryCatalog::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Test hook: direct access to a tenant's stored audit entries (to tamper with them).
    pub fn with_audit_entries<T>(&self, tenant: &TenantId, f: impl FnOnce(&mut Vec<AuditEntry>) -> T) -> T {
        f(self.state().audit.entry(tenant.clone()).or_default())
    }
}

fn update_in(state: &mut State, record: &SessionRecord, expected: Revision) -> Result<()> {
    let key = record.key();
    let stored = state.sessions.get_mut(&key).ok_or_else(|| Error::session_not_found(&key.id))?;
    check_cas(stored.revision, expected, record)?;
    *stored = record.clone();
    Ok(())
}

fn remove_in(state: &mut State, key: &SessionKey, expected: Revision) -> Result<()> {
    let stored = state.sessions.get(key).ok_or_else(|| Error::session_not_found(&key.id))?;
    if stored.revision != expected {
        return Err(Error::RevisionConflict { expected: expected.0, actual: stored.revision.0 });
    }
    state.sessions.remove(key);
    state.idempotency.remove(key);
    if let Some(items) = state.memory.get_mut(&key.tenant) {
        items.retain(|_, item| item.bound_to.as_ref() != Some(&key.id));
    }
    Ok(())
}

fn append_audit_in(state: &mut State, draft: AuditDraft) -> AuditEntry {
    // Chain from the separately kept head, not from the last stored entry, so a
    // truncated log stays detectable after later appends.
    let head = state.audit_heads.get(&draft.tenant).cloned();
    let entry = audit::chain(draft, head.as_ref().map(|(seq, hash)| (*seq, hash.as_str())));
    state.audit.entry(entry.draft.tenant.clone()).or_default().push(entry.clone());
    state.audit_heads.insert(entry.draft.tenant.clone(), (entry.seq, entry.hash.clone()));
    entry
}

pub(crate) fn check_cas(stored: Revision, expected: Revision, record: &SessionRecord) -> Result<()> {
    if stored != expected {
        return Err(Error::RevisionConflict { expected: expected.0, actual: stored.0 });
    }
    if record.revision.0 != expected.0 + 1 {
        return Err(Error::invalid("revision", "an update must carry expected + 1"));
    }
    Ok(())
}

#[async_trait]
impl Catalog for MemoryCatalog {
    fn name(&self) -> &'static str {
        "memory"
    }

    async fn insert(&self, record: &SessionRecord) -> Result<()> {
        let mut state = self.state();
        let key = record.key();
        if state.sessions.contains_key(&key) {
            return Err(Error::AlreadyExists { what: "session", id: key.id.to_string() });
        }
        state.sessions.insert(key, record.clone());
        Ok(())
    }

    async fn get(&self, key: &SessionKey) -> Result<Option<SessionRecord>> {
        Ok(self.state().sessions.get(key).cloned())
    }

    async fn update(&self, record: &SessionRecord, expected: Revision) -> Result<()> {
        update_in(&mut self.state(), record, expected)
    }

    async fn remove(&self, key: &SessionKey, expected: Revision) -> Result<()> {
        remove_in(&mut self.state(), key, expected)
    }

    async fn update_audited(
        &self,
        record: &SessionRecord,
        expected: Revision,
        audits: Vec<AuditDraft>,
    ) -> Result<Vec<AuditEntry>> {
        // One lock for both: nobody sees the change without its audit records.
        let mut state = self.state();
        update_in(&mut state, record, expected)?;
        Ok(audits.into_iter().map(|draft| append_audit_in(&mut state, draft)).collect())
    }

    async fn remove_audited(
        &self,
        key: &SessionKey,
        expected: Revision,
        audits: Vec<AuditDraft>,
    ) -> Result<Vec<AuditEntry>> {
        let mut state = self.state();
        remove_in(&mut state, key, expected)?;
        Ok(audits.into_iter().map(|draft| append_audit_in(&mut state, draft)).collect())
    }

    async fn list(&self, query: &SessionQuery) -> Result<Vec<SessionRecord>> {
        let state = self.state();
        let mut items: Vec<&SessionRecord> = state.sessions.values().filter(|r| query.matches(r)).collect();
        items.sort_by(|a, b| (b.last_activity, &b.header.id).cmp(&(a.last_activity, &a.header.id)));
        Ok(items.into_iter().take(query.limit).cloned().collect())
    }

    async fn tenants(&self) -> Result<Vec<TenantId>> {
        let state = self.state();
        let mut tenants: BTreeSet<TenantId> = state.sessions.keys().map(|key| key.tenant.clone()).collect();
        tenants.extend(state.audit.keys().cloned());
        tenants.extend(state.retention.keys().cloned());
        tenants.extend(state.memory.iter().filter(|(_, items)| !items.is_empty()).map(|(tenant, _)| tenant.clone()));
        Ok(tenants.into_iter().collect())
    }

    async fn append_audit(&self, draft: AuditDraft) -> Result<AuditEntry> {
        Ok(append_audit_in(&mut self.state(), draft))
    }

    async fn read_audit(&self, tenant: &TenantId, from_seq: u64, limit: usize) -> Result<Vec<AuditEntry>> {
        let state = self.state();
        let log = state.audit.get(tenant).map(Vec::as_slice).unwrap_or_default();
        // Positional scan (not by seq value) so a tampered seq is returned as stored.
        Ok(log.iter().skip(usize::try_from(from_seq).unwrap_or(usize::MAX)).take(limit).cloned().collect())
    }

    async fn audit_head(&self, tenant: &TenantId) -> Result<Option<(u64, String)>> {
        // The head is tracked separately from the entries, so truncation is detectable.
        Ok(self.state().audit_heads.get(tenant).cloned())
    }

    async fn retention(&self, tenant: &TenantId) -> Result<Option<RetentionPolicy>> {
        Ok(self.state().retention.get(tenant).cloned())
    }

    async fn set_retention(&self, tenant: &TenantId, policy: &RetentionPolicy) -> Result<()> {
        self.state().retention.insert(tenant.clone(), policy.clone());
        Ok(())
    }

    async fn idempotency_indexed_until(&self, session: &SessionKey) -> Result<Option<u64>> {
        Ok(self.state().idempotency.get(session).map(|index| index.indexed_until))
    }

    async fn idempotency_batch(&self, session: &SessionKey, key: &IdempotencyKey) -> Result<Option<KeyedBatch>> {
        Ok(self.state().idempotency.get(session).and_then(|index| index.batches.get(key).cloned()))
    }

    async fn idempotency_keys(&self, session: &SessionKey, max: usize) -> Result<Option<Vec<IdempotencyKey>>> {
        let state = self.state();
        let Some(index) = state.idempotency.get(session) else { return Ok(Some(Vec::new())) };
        Ok((index.batches.len() <= max).then(|| index.batches.keys().cloned().collect()))
    }

    async fn index_idempotency(&self, session: &SessionKey, batches: &[KeyedBatch], indexed_until: u64) -> Result<()> {
        let mut state = self.state();
        if !state.sessions.contains_key(session) {
            return Err(Error::session_not_found(&session.id));
        }
        let index = state.idempotency.entry(session.clone()).or_default();
        for batch in batches {
            index.batches.entry(batch.key.clone()).or_insert_with(|| batch.clone());
        }
        index.indexed_until = index.indexed_until.max(indexed_until);
        Ok(())
    }
}

#[async_trait]
impl MemoryStore for MemoryCatalog {
    async fn memory_put(
        &self,
        tenant: &TenantId,
        put: &MemoryPut,
        now: Timestamp,
        quota: &MemoryQuota,
    ) -> Result<MemoryItem> {
        put.check()?;
        let mut state = self.state();
        let (usage, quota) = (state.usage(tenant), state.quota(tenant, quota));
        let items = state.items(tenant);
        let slot = item_key(&put.namespace, &put.key);
        let plan = put.plan(items.get(&slot), &usage, &quota, now)?;
        items.insert(slot, plan.item.clone());
        Ok(plan.item)
    }

    async fn memory_get(
        &self,
        tenant: &TenantId,
        namespace: &Namespace,
        key: &str,
        now: Timestamp,
        refresh: bool,
    ) -> Result<Option<MemoryItem>> {
        let mut state = self.state();
        let Some(item) = state.items(tenant).get_mut(&item_key(namespace, key)).filter(|item| item.is_live(now)) else {
            return Ok(None);
        };
        if let (true, Some(ttl)) = (refresh, item.ttl_ms) {
            item.expires_at = Some(now.plus_ms(ttl));
        }
        Ok(Some(item.clone()))
    }

    async fn memory_delete(
        &self,
        tenant: &TenantId,
        namespace: &Namespace,
        key: &str,
        expected: Option<u64>,
        now: Timestamp,
    ) -> Result<MemoryItem> {
        let mut state = self.state();
        let items = state.items(tenant);
        let slot = item_key(namespace, key);
        scoped::check_delete(namespace, key, items.get(&slot).filter(|item| item.is_live(now)), expected)?;
        Ok(items.remove(&slot).expect("checked above"))
    }

    async fn memory_delete_audited(
        &self,
        tenant: &TenantId,
        deletes: &[MemoryDelete],
        skip_absent: bool,
        now: Timestamp,
        audit: DeleteAudit,
    ) -> Result<(Vec<MemoryItem>, Option<AuditEntry>)> {
        let mut state = self.state();
        let items = state.items(tenant);
        let mut slots = Vec::with_capacity(deletes.len());
        for delete in deletes {
            let slot = item_key(&delete.namespace, &delete.key);
            if delete.takes(items.get(&slot).filter(|item| item.is_live(now)), skip_absent)? {
                slots.push(slot);
            }
        }
        let deleted: Vec<MemoryItem> = slots.iter().filter_map(|slot| items.remove(slot)).collect();
        if deleted.is_empty() {
            return Ok((deleted, None));
        }
        let entry = append_audit_in(&mut state, audit(&deleted));
        Ok((deleted, Some(entry)))
    }

    async fn memory_search(&self, tenant: &TenantId, search: &MemorySearch, now: Timestamp) -> Result<Vec<MemoryItem>> {
        search.check()?;
        let state = self.state();
        let items = state.memory.get(tenant).into_iter().flat_map(|items| items.values().cloned());
        Ok(search.page(items, now))
    }

    async fn memory_namespaces(
        &self,
        tenant: &TenantId,
        query: &NamespaceQuery,
        now: Timestamp,
    ) -> Result<Vec<Namespace>> {
        let state = self.state();
        let live =
            state.memory.get(tenant).into_iter().flat_map(|items| items.values()).filter(|item| item.is_live(now));
        Ok(query.page(live.map(|item| &item.namespace)))
    }

    async fn memory_scan(
        &self,
        tenant: &TenantId,
        after: Option<(&Namespace, &str)>,
        limit: usize,
        now: Timestamp,
    ) -> Result<Vec<MemoryItem>> {
        let state = self.state();
        let Some(items) = state.memory.get(tenant) else { return Ok(Vec::new()) };
        let start = after.map(|(namespace, key)| item_key(namespace, key));
        let range = items.iter().filter(|(slot, _)| start.as_ref().is_none_or(|start| *slot > start));
        Ok(range.map(|(_, item)| item).filter(|item| item.is_live(now)).take(limit).cloned().collect())
    }

    async fn memory_forget(
        &self,
        tenant: &TenantId,
        prefix: &Namespace,
        audit: ForgetAudit,
    ) -> Result<(ForgetOutcome, AuditEntry)> {
        let mut state = self.state();
        let mut outcome = ForgetOutcome::default();
        state.items(tenant).retain(|_, item| {
            let forget = item.namespace.is_within(prefix);
            if forget {
                outcome.items += 1;
                outcome.bytes += item.bytes();
            }
            !forget
        });
        let entry = append_audit_in(&mut state, audit(&outcome));
        Ok((outcome, entry))
    }

    async fn memory_import(&self, tenant: &TenantId, item: &MemoryItem, quota: &MemoryQuota) -> Result<()> {
        item.check()?;
        let mut state = self.state();
        let (usage, quota) = (state.usage(tenant), state.quota(tenant, quota));
        let items = state.items(tenant);
        let slot = item_key(&item.namespace, &item.key);
        if items.contains_key(&slot) {
            return Err(Error::AlreadyExists { what: "memory item", id: format!("{}:{}", item.namespace, item.key) });
        }
        if item.is_charged() {
            usage.check_put(&quota, true, 0, item.bytes())?;
        }
        items.insert(slot, item.clone());
        Ok(())
    }

    async fn memory_usage(&self, tenant: &TenantId) -> Result<MemoryUsage> {
        Ok(self.state().usage(tenant))
    }

    async fn memory_quota(&self, tenant: &TenantId) -> Result<TenantQuota> {
        Ok(self.state().quotas.get(tenant).copied().unwrap_or_default())
    }

    async fn set_memory_quota(&self, tenant: &TenantId, quota: &TenantQuota) -> Result<()> {
        self.state().quotas.insert(tenant.clone(), *quota);
        Ok(())
    }

    async fn memory_bound_count(&self, tenant: &TenantId, session: &SessionId) -> Result<u64> {
        let state = self.state();
        let items = state.memory.get(tenant).into_iter().flat_map(|items| items.values());
        Ok(items.filter(|item| item.is_charged() && item.bound_to.as_ref() == Some(session)).count() as u64)
    }

    async fn memory_remove_expired(&self, now: Timestamp, limit: usize, audit: SweepAudit) -> Result<u64> {
        let mut state = self.state();
        let mut removed: BTreeMap<TenantId, Removed> = BTreeMap::new();
        let mut count = 0usize;
        for (tenant, items) in state.memory.iter_mut() {
            items.retain(|_, item| {
                let remove = count < limit && !item.is_live(now);
                if remove {
                    count += 1;
                    removed.entry(tenant.clone()).or_default().add(item.namespace.as_str(), item.bytes());
                }
                !remove
            });
        }
        state.audit_removed(removed, &audit);
        Ok(count as u64)
    }

    async fn memory_remove_stale(
        &self,
        tenant: &TenantId,
        updated_before: Timestamp,
        limit: usize,
        audit: SweepAudit,
    ) -> Result<u64> {
        let mut state = self.state();
        let mut removed = Removed::default();
        state.items(tenant).retain(|_, item| {
            let remove = (removed.items as usize) < limit && item.is_charged() && item.updated_at < updated_before;
            if remove {
                removed.add(item.namespace.as_str(), item.bytes());
            }
            !remove
        });
        let count = removed.items;
        if count > 0 {
            state.audit_removed(BTreeMap::from([(tenant.clone(), removed)]), &audit);
        }
        Ok(count)
    }
}
