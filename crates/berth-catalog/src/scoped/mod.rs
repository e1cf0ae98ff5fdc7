//! Scoped memory (R-M1, R-M2): long-term items owned by a user, a project or the app
//! (tenant-wide), whose life is not a session's. The `MemoryStore` seam sits beside the
//! `Catalog` and is implemented by every catalog, in the catalog's own storage, so that
//! deleting a session deletes the memory bound to it in the same transaction and a
//! `forget` commits with its audit record. The semantics are defined once here
//! (`MemorySearch::page`, `Filter::matches`, `TextQuery`, `MemoryPut::apply`) and every
//! backend must return exactly what they return (`berth_testkit::memory_conformance`).
//! See `docs/reference/memory.md`.

pub mod fields;
mod filter;
mod item;
mod namespace;
mod text;

pub use filter::{Condition, Decimal, Filter, FilterOp};
pub use item::*;
pub use namespace::{check_key, is_within, scope_of, MemoryScope, Namespace, SYSTEM_NAMESPACES, SYSTEM_NAMESPACES_END};
pub use text::{index_terms, value_words, words, IndexTerms, TextQuery};

use crate::audit::{AuditDraft, AuditEntry};
use async_trait::async_trait;
use berth_core::{Result, SessionId, TenantId, Timestamp};

/// Builds the audit record of a `forget` once its counts are known (inside the
/// backend's transaction).
pub type ForgetAudit = Box<dyn FnOnce(&ForgetOutcome) -> AuditDraft + Send>;

/// Builds the audit record of a delete from the items it deleted (inside the backend's
/// transaction; never called when nothing was deleted).
pub type DeleteAudit = Box<dyn FnOnce(&[MemoryItem]) -> AuditDraft + Send>;

/// Builds the audit record of one sweep's batch in one tenant from its counts (inside
/// the backend's transaction; never called for a tenant nothing was removed from).
pub type SweepAudit = std::sync::Arc<dyn Fn(&TenantId, &Removed) -> AuditDraft + Send + Sync>;

/// The memory seam. Every method is scoped to one tenant (the key's tenant; another
/// tenant is unreachable by construction). Expired items (`expires_at <= now`) are
/// invisible to every read and count as absent for a put, until the sweeper removes
/// them. Authorization is the service's; a backend stores what it is given.
#[async_trait]
pub trait MemoryStore: Send + Sync + 'static {
    /// Creates or replaces one item by `MemoryPut::apply` over the live item, within
    /// `quota` (`LimitExceeded` `memory_items` / `memory_bytes`, nothing stored),
    /// atomically across processes.
    async fn memory_put(
        &self,
        tenant: &TenantId,
        put: &MemoryPut,
        now: Timestamp,
        quota: &MemoryQuota,
    ) -> Result<MemoryItem>;

    /// A carried append's apply (`berth_service::carried`): each put in order, by
    /// `memory_put`, skipping one whose expected revision no longer holds
    /// (`RevisionConflict`: applied already, or superseded — so never applied twice).
    /// Returns how many puts were applied. Any other error is returned; puts before it
    /// may have been applied. A backend may do it all in one transaction (SQLite and
    /// PostgreSQL do: one commit, where the default below commits once per put), and
    /// need not make that commit durable before answering (SQLite does not: a prefix of
    /// its commits survives a power failure, and what it loses of an apply — the writes
    /// and the marker's advance together — the durable marker and log put back when the
    /// marker is finished).
    async fn memory_apply(
        &self,
        tenant: &TenantId,
        puts: &[MemoryPut],
        now: Timestamp,
        quota: &MemoryQuota,
    ) -> Result<u64> {
        let mut applied = 0;
        for put in puts {
            match self.memory_put(tenant, put, now, quota).await {
                Ok(_) => applied += 1,
                Err(berth_core::Error::RevisionConflict { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(applied)
    }

    /// The live item. With `refresh`, an item written with a TTL has its expiry moved to
    /// `now + ttl_ms` (LangGraph's refresh on read); its revision is unchanged.
    async fn memory_get(
        &self,
        tenant: &TenantId,
        namespace: &Namespace,
        key: &str,
        now: Timestamp,
        refresh: bool,
    ) -> Result<Option<MemoryItem>>;

    /// Deletes the live item (`check_delete`: `NotFound` if absent, `RevisionConflict`
    /// if `expected` is given and differs). Returns what was deleted. Not audited: for
    /// berth's own bookkeeping (a carried append's marker) and tools; a caller's delete
    /// is `memory_delete_audited`.
    async fn memory_delete(
        &self,
        tenant: &TenantId,
        namespace: &Namespace,
        key: &str,
        expected: Option<u64>,
        now: Timestamp,
    ) -> Result<MemoryItem>;

    /// Deletes the live items `deletes` name and appends the audit record `audit` builds
    /// from them, in one transaction (no record when nothing was deleted). Every delete
    /// is checked before any item goes (`check_delete`): an absent item is `NotFound` —
    /// skipped instead when `skip_absent` — and a differing expected revision
    /// `RevisionConflict`; a refusal deletes nothing. Returns the items deleted, in the
    /// order named, and the audit entry. The caller names each item once.
    async fn memory_delete_audited(
        &self,
        tenant: &TenantId,
        deletes: &[MemoryDelete],
        skip_absent: bool,
        now: Timestamp,
        audit: DeleteAudit,
    ) -> Result<(Vec<MemoryItem>, Option<AuditEntry>)>;

    /// One page of `search` (exactly `MemorySearch::page` over the tenant's items).
    async fn memory_search(&self, tenant: &TenantId, search: &MemorySearch, now: Timestamp) -> Result<Vec<MemoryItem>>;

    /// One page of namespaces (exactly `NamespaceQuery::page` over the live items).
    async fn memory_namespaces(
        &self,
        tenant: &TenantId,
        query: &NamespaceQuery,
        now: Timestamp,
    ) -> Result<Vec<Namespace>>;

    /// The tenant's live items in (namespace, key) order after `after`, at most `limit`
    /// (export).
    async fn memory_scan(
        &self,
        tenant: &TenantId,
        after: Option<(&Namespace, &str)>,
        limit: usize,
        now: Timestamp,
    ) -> Result<Vec<MemoryItem>>;

    /// Deletes every item within `prefix` (expired ones too) and appends the audit
    /// record `audit` builds from the counts, in one transaction, without holding the
    /// items in memory.
    async fn memory_forget(
        &self,
        tenant: &TenantId,
        prefix: &Namespace,
        audit: ForgetAudit,
    ) -> Result<(ForgetOutcome, AuditEntry)>;

    /// Stores an exported item exactly (revision and times kept), within `quota` and
    /// a put's limits (`MemoryItem::check`). `AlreadyExists` if the key holds an item,
    /// live or expired.
    async fn memory_import(&self, tenant: &TenantId, item: &MemoryItem, quota: &MemoryQuota) -> Result<()>;

    /// The tenant's charged items and bytes (expired items not yet swept included;
    /// berth's own bookkeeping never: `Namespace::is_charged`).
    async fn memory_usage(&self, tenant: &TenantId) -> Result<MemoryUsage>;

    /// The tenant's own quota (`TenantQuota::default()` when none was set). Every write
    /// that takes a `quota` applies this one over it (`TenantQuota::over`), read in its
    /// own transaction.
    async fn memory_quota(&self, tenant: &TenantId) -> Result<TenantQuota>;

    /// Sets the tenant's own quota (replacing the one set before; the items stored stay,
    /// even over it: it refuses the writes after).
    async fn set_memory_quota(&self, tenant: &TenantId, quota: &TenantQuota) -> Result<()>;

    /// How many charged items are bound to `session` (they go with its record:
    /// `Catalog::remove`; so does berth's own bookkeeping of it, not counted).
    async fn memory_bound_count(&self, tenant: &TenantId, session: &SessionId) -> Result<u64>;

    /// Removes up to `limit` items of any tenant that expired at or before `now`, with
    /// one audit record per tenant (`audit`) in the same transaction; returns how many.
    async fn memory_remove_expired(&self, now: Timestamp, limit: usize, audit: SweepAudit) -> Result<u64>;

    /// Removes up to `limit` of the tenant's charged items last updated before
    /// `updated_before` (the tenant's memory retention; berth's own bookkeeping is not the
    /// tenant's to retain), with one audit record (`audit`) in the same transaction;
    /// returns how many.
    async fn memory_remove_stale(
        &self,
        tenant: &TenantId,
        updated_before: Timestamp,
        limit: usize,
        audit: SweepAudit,
    ) -> Result<u64>;
}
