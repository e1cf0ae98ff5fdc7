//! The Catalog seam (R-S2, R-S10, R-S11, R-S12; R-J4): everything about a session that
//! is not its event log — metadata with compare-and-set on `revision`, attached runs,
//! the per-tenant tamper-evident audit log, retention policies and the listing index.
//! Listing never reads a log body.

pub mod audit;
pub mod memory;
pub mod scoped;
mod search;
mod types;

pub use audit::{AuditDraft, AuditEntry, AuditVerification};
pub use scoped::MemoryStore;
pub use search::{fold, search_column, SessionSearch, SEARCH_CHARS_MAX};
pub use types::*;

use async_trait::async_trait;
use berth_core::{IdempotencyKey, KeyedBatch, Result, Revision, SessionKey, TenantId};

#[async_trait]
pub trait Catalog: MemoryStore + Send + Sync + 'static {
    /// Short name for diagnostics (`memory`, `sqlite`, `postgres`).
    fn name(&self) -> &'static str;

    /// Inserts a new session record. `AlreadyExists` if the key exists.
    async fn insert(&self, record: &SessionRecord) -> Result<()>;

    async fn get(&self, key: &SessionKey) -> Result<Option<SessionRecord>>;

    /// Compare-and-set: stores `record` iff the stored revision equals `expected`
    /// (atomic across processes). `record.revision` must be `expected + 1`.
    /// `RevisionConflict {expected, actual}` otherwise; `NotFound` if the session is gone.
    async fn update(&self, record: &SessionRecord, expected: Revision) -> Result<()>;

    /// `update` for activity caused by appends (counts, last activity, the lease
    /// extension, the blank flag), whose events are already durable in the log. A backend
    /// may commit it without waiting for durability (SQLite `synchronous=NORMAL` for the
    /// commit, PostgreSQL `synchronous_commit = off`): a power loss can then lose the
    /// latest activity, never a state change, and never corrupt anything.
    async fn update_activity(&self, record: &SessionRecord, expected: Revision) -> Result<()> {
        self.update(record, expected).await
    }

    /// Removes a session's record iff its revision equals `expected`, and with it the
    /// memory items bound to the session (`MemoryStore`), in one transaction.
    async fn remove(&self, key: &SessionKey, expected: Revision) -> Result<()>;

    /// `update` and the audit records of that change in one transaction: both or neither
    /// (R-S10: a crash can never leave a change without its audit record). The drafts are
    /// chained in order. The default runs `update`, then `append_audit` for each, which
    /// is not atomic: a catalog that can do better overrides it (every catalog here does).
    async fn update_audited(
        &self,
        record: &SessionRecord,
        expected: Revision,
        audits: Vec<AuditDraft>,
    ) -> Result<Vec<AuditEntry>> {
        self.update(record, expected).await?;
        let mut entries = Vec::with_capacity(audits.len());
        for draft in audits {
            entries.push(self.append_audit(draft).await?);
        }
        Ok(entries)
    }

    /// `remove` and its audit records in one transaction (see `update_audited`).
    async fn remove_audited(
        &self,
        key: &SessionKey,
        expected: Revision,
        audits: Vec<AuditDraft>,
    ) -> Result<Vec<AuditEntry>> {
        self.remove(key, expected).await?;
        let mut entries = Vec::with_capacity(audits.len());
        for draft in audits {
            entries.push(self.append_audit(draft).await?);
        }
        Ok(entries)
    }

    /// Sessions matching `query`, sorted by `last_activity` descending then id
    /// descending, starting after `query.cursor`, at most `query.limit` items.
    async fn list(&self, query: &SessionQuery) -> Result<Vec<SessionRecord>>;

    /// Every tenant that has sessions, an audit log, a retention policy or memory.
    async fn tenants(&self) -> Result<Vec<TenantId>>;

    /// Appends to the tenant's audit log, chaining the hash of the previous entry
    /// atomically (concurrent appenders never fork the chain).
    async fn append_audit(&self, draft: AuditDraft) -> Result<AuditEntry>;

    /// A tenant's audit entries in stored order, starting at position `from_seq`
    /// (entry seqs are positions in an intact log), at most `limit`.
    async fn read_audit(&self, tenant: &TenantId, from_seq: u64, limit: usize) -> Result<Vec<AuditEntry>>;

    /// The latest audit entry's (seq, hash), kept separately so that removing entries
    /// from the end of the log is detectable.
    async fn audit_head(&self, tenant: &TenantId) -> Result<Option<(u64, String)>>;

    async fn retention(&self, tenant: &TenantId) -> Result<Option<RetentionPolicy>>;

    async fn set_retention(&self, tenant: &TenantId, policy: &RetentionPolicy) -> Result<()>;

    // ----- the idempotency index (R-S14) ---------------------------------------------
    //
    // The log is the source of truth for keys (every event of a keyed batch carries its
    // mark); this index only saves reading the log to find one. It may lag the log,
    // never lead it: `indexed_until` says below which seq it holds every keyed batch,
    // and the service reads the log from there. A session's index goes with its record
    // (`remove`, `remove_audited`).

    /// The seq below which the index holds every keyed batch of the session's log;
    /// `None` if no index was ever written for it (a session older than keys).
    async fn idempotency_indexed_until(&self, session: &SessionKey) -> Result<Option<u64>>;

    /// The indexed batch appended with `key`, if any.
    async fn idempotency_batch(&self, session: &SessionKey, key: &IdempotencyKey) -> Result<Option<KeyedBatch>>;

    /// Every indexed key of the session, in no particular order, if there are at most
    /// `max`; `None` if there are more. A writer holding them knows a new key is new
    /// without asking the index at every append.
    async fn idempotency_keys(&self, session: &SessionKey, max: usize) -> Result<Option<Vec<IdempotencyKey>>>;

    /// Adds `batches` (a key already indexed keeps its first batch) and raises
    /// `indexed_until` to `indexed_until` (never lowers it), in one durable transaction.
    /// `NotFound` if the session has no record.
    async fn index_idempotency(&self, session: &SessionKey, batches: &[KeyedBatch], indexed_until: u64) -> Result<()>;
}
