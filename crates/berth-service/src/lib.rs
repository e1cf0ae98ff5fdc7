//! `SessionService`: the public Rust API the server and CLI use (SPEC §7).
//!
//! Every operation takes a `Principal` and authorizes it against the session's scope
//! *before* looking at status (R-S1). Sessions are looked up by (caller's tenant, id),
//! so another tenant's session and a missing one take the same path and give the same
//! `NotFound`. Every denial is audited. Metadata changes are compare-and-set on
//! `revision` in the `Catalog`; events go through the `LogStore`'s write handle, which
//! this service caches per session while it is in use.

mod activity;
mod export;
mod idempotency;
mod principal;
mod runs;
mod sweep;
mod types;

pub use activity::ACTIVITY_WINDOW_DEFAULT;
pub use export::{EXPORT_VERSION, EXPORT_VERSION_OLDEST};
pub use idempotency::IDEMPOTENCY_INDEX_LAG_EVENTS_MAX;
pub use principal::{Principal, Role};
pub use runs::RESUME_FAILED_OUTCOME;
pub use types::*;

use berth_catalog::{AuditDraft, AuditEntry, AuditVerification, Catalog, ListCursor, RetentionPolicy, RunStatus};
use berth_catalog::{RunRecord, SessionQuery, SessionRecord};
use berth_core::lifecycle::{self, LifecycleEvent, Status};
use berth_core::limits::{
    BATCH_BYTES_MAX, BATCH_EVENTS_MAX, LABELS_MAX, LABEL_BYTES_MAX, PAGE_SIZE_DEFAULT, PAGE_SIZE_MAX, TITLE_BYTES_MAX,
};
use berth_core::{Clock, Error, Event, EventType, ParentRef, Result, Revision, Scope, Seq, SessionHeader, SessionId};
use berth_core::{SessionKey, Timestamp};
use berth_store::{Access, LogStore, SessionHandle};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// How a metadata write must reach storage.
enum Durability<'a, T> {
    /// Durable before the operation returns (every state change), with the audit
    /// records (drafted from the stored record and the change's result) in the same
    /// catalog transaction.
    Durable(&'a (dyn Fn(&SessionRecord, &T) -> Vec<AuditDraft> + Sync)),
    /// Activity caused by an append (counts, last activity, lease extension): the
    /// events themselves are already durable, so the catalog may commit lazily.
    Relaxed,
}

/// Internal compare-and-set retries before giving up with the conflict.
const CAS_RETRIES_MAX: usize = 16;

/// Write handles a service keeps open by default. Each holds the session's writer lease
/// and, on the embedded backend, three file descriptors: 256 stay well inside the usual
/// 1,024-descriptor soft limit next to a server's connections.
pub const WRITERS_CACHED_MAX_DEFAULT: usize = 256;

/// The service's open write handles, with when each was last used.
#[derive(Default)]
struct WriterCache {
    handles: HashMap<SessionKey, CachedWriter>,
}

struct CachedWriter {
    handle: SessionHandle,
    last_used: std::time::Instant,
    /// The keyed batches the catalog's index does not hold yet (`idempotency.rs`); built
    /// by the first append through the handle, outside the cache's lock.
    ledger: Option<idempotency::KeyLedger>,
}

impl WriterCache {
    fn get(&mut self, key: &SessionKey) -> Option<SessionHandle> {
        self.handles.get_mut(key).map(|cached| {
            cached.last_used = std::time::Instant::now();
            cached.handle.clone()
        })
    }

    fn insert(&mut self, key: SessionKey, handle: SessionHandle) {
        self.handles.insert(key, CachedWriter { handle, last_used: std::time::Instant::now(), ledger: None });
    }

    /// Keys not used for at least `idle`.
    fn idle_for(&self, idle: std::time::Duration) -> Vec<SessionKey> {
        self.handles
            .iter()
            .filter(|(_, cached)| cached.last_used.elapsed() >= idle)
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// The least recently used keys beyond `max` (oldest first).
    fn beyond(&self, max: usize) -> Vec<SessionKey> {
        let excess = self.handles.len().saturating_sub(max);
        if excess == 0 {
            return Vec::new();
        }
        let mut by_use: Vec<(&SessionKey, std::time::Instant)> =
            self.handles.iter().map(|(key, cached)| (key, cached.last_used)).collect();
        by_use.sort_unstable_by_key(|(_, last_used)| *last_used);
        by_use.into_iter().take(excess).map(|(key, _)| key.clone()).collect()
    }
}

/// The action name of appends (audit, and `load`'s choice of how to read activity).
const APPEND_ACTION: &str = "append";

/// A `creating` record older than this is an abandoned create (crash mid-create).
pub const ABANDONED_CREATE_MS: u64 = 60 * 60 * 1000;

pub struct SessionService {
    store: LogStore,
    catalog: Arc<dyn Catalog>,
    clock: Arc<dyn Clock>,
    writers: tokio::sync::Mutex<WriterCache>,
    /// Cached write handles kept open at most (least recently used closed first).
    writers_cached_max: usize,
    /// One append at a time per session, so `next_seq` is read and used atomically.
    append_locks: std::sync::Mutex<HashMap<SessionKey, std::sync::Weak<tokio::sync::Mutex<()>>>>,
    /// Activity of recent appends not yet written to the catalog (`activity.rs`).
    activity: activity::ActivityHold,
    /// Most bytes one import may inflate (`IMPORT_INFLATED_BYTES_MAX`).
    import_inflated_bytes_max: u64,
}

impl std::fmt::Debug for SessionService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SessionService({}, {})", self.store.backend_name(), self.catalog.name())
    }
}

impl SessionService {
    pub fn new(store: LogStore, catalog: Arc<dyn Catalog>, clock: Arc<dyn Clock>) -> SessionService {
        SessionService {
            store,
            activity: activity::ActivityHold::new(Arc::clone(&catalog), ACTIVITY_WINDOW_DEFAULT),
            catalog,
            clock,
            writers: tokio::sync::Mutex::new(WriterCache::default()),
            writers_cached_max: WRITERS_CACHED_MAX_DEFAULT,
            append_locks: std::sync::Mutex::new(HashMap::new()),
            import_inflated_bytes_max: berth_core::limits::IMPORT_INFLATED_BYTES_MAX as u64,
        }
    }

    /// The most bytes one import may inflate (`IMPORT_INFLATED_BYTES_MAX`): a ZIP's
    /// entries in total, or one JSONL export. Beyond it an import is refused whole.
    pub fn with_import_inflated_bytes_max(mut self, max: u64) -> SessionService {
        self.import_inflated_bytes_max = max;
        self
    }

    /// How long the activity of a steady stream of appends may be held before it is
    /// written to the catalog (`ACTIVITY_WINDOW_DEFAULT`; zero writes every append's
    /// activity at once). See `activity.rs` for the rules that keep it safe.
    pub fn with_activity_window(mut self, window: std::time::Duration) -> SessionService {
        self.activity = activity::ActivityHold::new(Arc::clone(&self.catalog), window);
        self
    }

    /// How many write handles this service keeps open between appends
    /// (`WRITERS_CACHED_MAX_DEFAULT`); beyond it, the least recently used idle ones are
    /// closed, and reopened when their session is next written.
    pub fn with_writers_cached_max(mut self, max: usize) -> SessionService {
        self.writers_cached_max = max.max(1);
        self
    }

    /// Write handles open in this service's cache (tests, metrics).
    pub async fn writers_cached(&self) -> usize {
        self.writers.lock().await.handles.len()
    }

    /// Writes the activity held for recent appends to the catalog now (what listing, the
    /// sweeper and `shutdown` do first). For tests and tools that read the catalog
    /// directly.
    pub async fn flush_activity(&self) -> Result<()> {
        self.activity.write_all(None).await
    }

    pub fn store(&self) -> &LogStore {
        &self.store
    }

    pub fn catalog(&self) -> &Arc<dyn Catalog> {
        &self.catalog
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    // ----- audit -------------------------------------------------------------------

    /// A draft audit record for `action` by `actor`, stamped now; callers fill the rest.
    fn audit_draft(&self, tenant: &berth_core::TenantId, actor: String, action: &str) -> AuditDraft {
        AuditDraft {
            tenant: tenant.clone(),
            time: self.now(),
            actor,
            action: action.to_owned(),
            session: None,
            revision: None,
            outcome: "ok".to_owned(),
            details: serde_json::Value::Null,
        }
    }

    /// Appends to the audit log. The operation it records already happened, so a
    /// failure here is logged loudly rather than turned into the operation's error.
    async fn audit(&self, draft: AuditDraft) {
        let (tenant, action) = (draft.tenant.clone(), draft.action.clone());
        if let Err(error) = self.catalog.append_audit(draft).await {
            tracing::error!(%tenant, action, %error, "audit append failed");
        }
    }

    async fn audit_ok(&self, principal: &Principal, action: &str, record: &SessionRecord, details: serde_json::Value) {
        self.audit(self.draft_ok(principal, action, record, details)).await;
    }

    /// The audit record of `principal`'s successful `action` on `record` (as stored).
    fn draft_ok(
        &self,
        principal: &Principal,
        action: &str,
        record: &SessionRecord,
        details: serde_json::Value,
    ) -> AuditDraft {
        let mut draft = self.audit_draft(&principal.tenant, principal.actor(), action);
        draft.session = Some(record.header.id.clone());
        draft.revision = Some(record.revision);
        draft.details = details;
        draft
    }

    /// The audit record of a lifecycle action the service took by itself.
    fn draft_system(&self, record: &SessionRecord, action: &str, details: serde_json::Value) -> AuditDraft {
        let key = record.key();
        let mut draft = self.audit_draft(&key.tenant, "system:lifecycle".into(), action);
        draft.session = Some(key.id);
        draft.revision = Some(record.revision);
        draft.details = details;
        draft
    }

    async fn denied(&self, principal: &Principal, action: &str, id: &SessionId, error: Error) -> Error {
        self.denied_in_tenant(principal, action, Some(id), error).await
    }

    /// Audits a denial (R-S10: every denied access is recorded) in the caller's tenant,
    /// for operations that may not name a session (create, import, the admin-only
    /// operations), and returns the error.
    async fn denied_in_tenant(
        &self,
        principal: &Principal,
        action: &str,
        id: Option<&SessionId>,
        error: Error,
    ) -> Error {
        let mut draft = self.audit_draft(&principal.tenant, principal.actor(), action);
        draft.session = id.cloned();
        draft.outcome = "denied".to_owned();
        draft.details = serde_json::json!({"code": error.code()});
        self.audit(draft).await;
        error
    }

    /// `require_admin`, with a refusal audited as a denial.
    async fn require_admin(&self, principal: &Principal, action: &str) -> Result<()> {
        match principal.require_admin(action) {
            Ok(()) => Ok(()),
            Err(error) => Err(self.denied_in_tenant(principal, action, None, error).await),
        }
    }

    // ----- lookup, authorization, expiry -------------------------------------------

    /// Loads a session the principal may access, marking a lapsed one expired first
    /// (R-S3, audited). Missing, other tenant's, and out-of-scope sessions are all
    /// `NotFound` (audited as denials).
    ///
    /// Activity held for recent appends (`activity.rs`) is written first, so the record
    /// (and its revision) is what the catalog holds; only the append path reads it
    /// overlaid instead, to keep its own activity writes coalesced.
    async fn load(&self, principal: &Principal, id: &SessionId, action: &str) -> Result<SessionRecord> {
        let key = SessionKey::new(principal.tenant.clone(), id.clone());
        let appending = action == APPEND_ACTION;
        if !appending {
            self.activity.write_one(&key).await?;
        }
        let mut record = match self.catalog.get(&key).await? {
            Some(record) if record.status != Status::Creating && principal.can_access(&record.header.scope) => record,
            _ => return Err(self.denied(principal, action, id, Error::session_not_found(id)).await),
        };
        if appending {
            self.activity.overlay(&mut record);
        }
        let mut record = self.observe_expiry(record).await?;
        if let Some(next_seq) = self.cached_next_seq(&key).await {
            record.event_count = record.event_count.max(next_seq);
        }
        Ok(record)
    }

    /// The next seq of this process's cached write handle for `key`, if it holds one.
    async fn cached_next_seq(&self, key: &SessionKey) -> Option<u64> {
        self.writers.lock().await.handles.get(key).map(|cached| cached.handle.next_seq())
    }

    fn append_lock(&self, key: &SessionKey) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.append_locks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(lock) = locks.get(key).and_then(std::sync::Weak::upgrade) {
            return lock;
        }
        if locks.len() >= 1024 {
            locks.retain(|_, lock| lock.strong_count() > 0);
        }
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        locks.insert(key.clone(), Arc::downgrade(&lock));
        lock
    }

    async fn observe_expiry(&self, mut record: SessionRecord) -> Result<SessionRecord> {
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
                    self.close_writer(&next.key()).await;
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

    async fn reload(&self, key: &SessionKey) -> Result<SessionRecord> {
        self.activity.write_one(key).await?;
        self.catalog.get(key).await?.ok_or_else(|| Error::session_not_found(&key.id))
    }

    /// Bumps the revision and stores `record` iff the stored revision is `expected`
    /// (bringing `event_count` up to date from the cached write handle on the way).
    async fn save(&self, record: &mut SessionRecord, expected: Revision) -> Result<()> {
        self.save_audited(record, expected, |_| Vec::new()).await
    }

    /// `save`, with the audit records of the change (drafted from the record as it will
    /// be stored) in the same catalog transaction: a crash never leaves a state change
    /// without its audit record (R-S10).
    async fn save_audited(
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
    async fn mutate<T>(
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
    async fn mutate_audited<T>(
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

    async fn mutate_with<T>(
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
    async fn stored_bytes(&self, key: &SessionKey) -> Result<Option<u64>> {
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

    // ----- write handles -------------------------------------------------------------

    /// The cached write handle of `key`, opened if needed. Callers hold the session's
    /// append lock while they use it (eviction takes that lock before closing a handle).
    async fn writer(&self, key: &SessionKey) -> Result<SessionHandle> {
        let (handle, victims) = {
            let mut writers = self.writers.lock().await;
            if let Some(handle) = writers.get(key) {
                return Ok(handle);
            }
            let handle = self.store.open(key, Access::Write).await.map_err(|error| match error {
                Error::AlreadyOwned { id } => {
                    Error::Busy { id, reason: "its log is open for writing by another process".into() }
                }
                other => other,
            })?;
            writers.insert(key.clone(), handle.clone());
            (handle, writers.beyond(self.writers_cached_max))
        };
        self.evict(victims).await;
        Ok(handle)
    }

    /// Closes the cached write handles not used for `idle` (and not in use now), which
    /// releases their sessions' writer leases: on a store shared by several servers
    /// (PostgreSQL), another server can then write those sessions without waiting for
    /// this one to stop. Returns how many were closed. `berth serve` runs it periodically.
    pub async fn close_idle_writers(&self, idle: std::time::Duration) -> usize {
        let victims = self.writers.lock().await.idle_for(idle);
        self.evict(victims).await
    }

    /// Closes cached write handles nobody is using (their session's append lock is
    /// free), so open handles — and their file descriptors — stay bounded. Returns how
    /// many it closed.
    async fn evict(&self, victims: Vec<SessionKey>) -> usize {
        let mut closed = 0;
        for key in victims {
            let lock = self.append_lock(&key);
            let Ok(_no_append_meanwhile) = lock.try_lock() else { continue };
            let evicted = self.writers.lock().await.handles.remove(&key);
            if let Some(cached) = evicted {
                closed += 1;
                if let Err(error) = self.close_cached(&key, cached).await {
                    tracing::warn!(session = %key, %error, "closing an idle write handle failed");
                }
            }
        }
        closed
    }

    async fn close_writer(&self, key: &SessionKey) {
        let handle = self.writers.lock().await.handles.remove(key);
        if let Some(cached) = handle {
            if let Err(error) = self.close_cached(key, cached).await {
                tracing::warn!(session = %key, %error, "closing write handle failed");
            }
        }
    }

    /// Brings the catalog's idempotency index up to the log's end, then closes the
    /// handle. A failed index write only leaves the index lagging (the next writer reads
    /// the log from where it stops), so the handle is closed either way.
    async fn close_cached(&self, key: &SessionKey, cached: CachedWriter) -> Result<()> {
        // Without a ledger (no append through this handle) nothing is known to index.
        if let Some(mut ledger) = cached.ledger {
            if let Err(error) = ledger.write(self.catalog.as_ref(), key).await {
                tracing::warn!(session = %key, %error, "writing the idempotency index failed (it lags the log)");
            }
        }
        cached.handle.close().await
    }

    /// Builds the cached handle's key ledger if this is its first append (a catalog read
    /// and a bounded log read, done without holding the cache). The caller holds the
    /// session's append lock, so the log cannot move meanwhile.
    async fn open_ledger(&self, key: &SessionKey, writer: &SessionHandle) -> Result<()> {
        let built = self.writers.lock().await.handles.get(key).is_none_or(|cached| cached.ledger.is_some());
        if built {
            return Ok(());
        }
        let ledger = idempotency::KeyLedger::open(self.catalog.as_ref(), key, writer).await?;
        if let Some(cached) = self.writers.lock().await.handles.get_mut(key) {
            cached.ledger.get_or_insert(ledger);
        }
        Ok(())
    }

    /// Closes every cached write handle (draining them), e.g. at shutdown, after writing
    /// the activity that appends left pending to the catalog.
    pub async fn shutdown(&self) -> Result<()> {
        if let Err(error) = self.flush_activity().await {
            tracing::warn!(%error, "could not record held activity at shutdown");
        }
        let keys: Vec<SessionKey> = self.writers.lock().await.handles.keys().cloned().collect();
        for key in keys {
            if let Err(error) = self.sync_activity(&key).await {
                tracing::warn!(session = %key, %error, "could not record pending activity at shutdown");
            }
        }
        let handles: Vec<(SessionKey, CachedWriter)> = self.writers.lock().await.handles.drain().collect();
        let mut failures = Vec::new();
        for (key, cached) in handles {
            if let Err(error) = self.close_cached(&key, cached).await {
                failures.push((key.to_string(), error));
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(Error::Many(failures))
        }
    }

    /// Writes `event_count` (from the cached write handle) if the catalog lags behind it.
    async fn sync_activity(&self, key: &SessionKey) -> Result<()> {
        for _ in 0..CAS_RETRIES_MAX {
            let Some(record) = self.catalog.get(key).await? else { return Ok(()) };
            match self.cached_next_seq(key).await {
                Some(next_seq) if next_seq > record.event_count => {}
                _ => return Ok(()),
            }
            let mut next = record.clone();
            match self.save(&mut next, record.revision).await {
                Err(Error::RevisionConflict { .. }) => continue,
                other => return other,
            }
        }
        Ok(())
    }

    // ----- create, get, list, metadata ---------------------------------------------------

    pub async fn create(&self, principal: &Principal, request: CreateSession) -> Result<SessionRecord> {
        let now = self.now();
        let user = request.user.clone().unwrap_or_else(|| principal.user.clone());
        if user != principal.user && !principal.is_privileged() {
            let error =
                Error::Forbidden { reason: "only service and admin principals create sessions for other users".into() };
            let id = request.id.as_ref();
            return Err(self.denied_in_tenant(principal, "create", id, error).await);
        }
        let project = request.project.clone().or_else(|| principal.project.clone());
        if principal.role == principal::Role::User && principal.project.is_some() && project != principal.project {
            let error =
                Error::Forbidden { reason: "a project-scoped principal creates sessions in its own project".into() };
            let id = request.id.as_ref();
            return Err(self.denied_in_tenant(principal, "create", id, error).await);
        }
        let id = request.id.clone().unwrap_or_else(|| SessionId::generate(now));
        let scope = Scope { tenant: principal.tenant.clone(), user, project };
        let mut header = SessionHeader::new(id, scope, now);
        header.origin = request.origin.clone();
        header.delegation_depth = request.delegation_depth;
        header.policy = request.policy.clone().unwrap_or_default();
        header.validate()?;
        validate_metadata(request.title.as_deref(), &request.labels)?;
        let record = new_record(header, request.title, request.labels, now);
        self.create_from_record(principal, record, &[], "create", |_| Vec::new()).await
    }

    /// Inserts `record` as `creating` (one revision below its final one), materializes
    /// the log with `events`, then stores the final record by compare-and-set. A crash in
    /// between leaves a `creating` record that the sweeper removes.
    ///
    /// The final record and its audit records (`action`, plus whatever `also_audit`
    /// drafts from it) are stored in one catalog transaction.
    async fn create_from_record(
        &self,
        principal: &Principal,
        record: SessionRecord,
        events: &[Event],
        action: &str,
        also_audit: impl FnOnce(&SessionRecord) -> Vec<AuditDraft>,
    ) -> Result<SessionRecord> {
        let key = record.key();
        let creating_revision = Revision(record.revision.0.saturating_sub(1));
        let mut creating = record.clone();
        creating.status = Status::Creating;
        creating.revision = creating_revision;
        self.catalog.insert(&creating).await?;
        let materialized = async {
            let handle = self.store.create(record.header.clone()).await?;
            let outcome = async {
                append_chunked(&handle, events).await?;
                handle.flush().await
            }
            .await;
            let closed = handle.close().await;
            outcome.and(closed)
        }
        .await;
        // An imported log keeps its keys (R-S14): index them before the session goes live.
        let materialized = match materialized {
            Ok(()) => match idempotency::keyed_batches(events) {
                batches if batches.is_empty() => Ok(()),
                batches => self.catalog.index_idempotency(&key, &batches, events.len() as u64).await,
            },
            Err(error) => Err(error),
        };
        if let Err(error) = materialized {
            let _ = self.catalog.remove(&key, creating_revision).await;
            return Err(error);
        }
        let mut audits = vec![self.draft_ok(principal, action, &record, serde_json::json!({"events": events.len()}))];
        audits.extend(also_audit(&record));
        self.catalog.update_audited(&record, creating_revision, audits).await?;
        Ok(record)
    }

    pub async fn get(&self, principal: &Principal, id: &SessionId) -> Result<SessionRecord> {
        self.load(principal, id, "get").await
    }

    pub async fn list(&self, principal: &Principal, request: &ListRequest) -> Result<SessionPage> {
        let limit = request.limit.unwrap_or(PAGE_SIZE_DEFAULT);
        if limit == 0 || limit > PAGE_SIZE_MAX {
            return Err(Error::LimitExceeded {
                what: berth_core::limits::Limit::PageSize,
                limit: PAGE_SIZE_MAX as u64,
                actual: limit as u64,
            });
        }
        let mut query = SessionQuery::tenant(principal.tenant.clone());
        query.user = request.user.clone();
        query.project = request.project.clone();
        if principal.role == principal::Role::User {
            query.user = Some(principal.user.clone());
            if principal.project.is_some() {
                query.project = principal.project.clone();
            }
        }
        if request.statuses.contains(&Status::Creating) {
            return Err(unlistable_status("creating"));
        }
        query.statuses =
            if request.statuses.is_empty() { LISTABLE_STATUSES.to_vec() } else { request.statuses.clone() };
        query.label = request.label.clone();
        query.active_since = request.active_since;
        query.active_before = request.active_before;
        query.include_blank = request.include_blank;
        query.cursor = request.cursor.as_deref().map(ListCursor::decode).transpose()?;
        query.limit = limit + 1;
        // The listing sorts and filters by activity: write what is held first.
        if let Err(error) = self.activity.write_all(Some(&principal.tenant)).await {
            tracing::warn!(%error, "writing held activity before a listing failed (the listing may lag)");
        }
        let mut items = self.catalog.list(&query).await?;
        let next_cursor = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|record| ListCursor::of(record).encode())
        } else {
            None
        };
        Ok(SessionPage { items, next_cursor })
    }

    pub async fn update_metadata(
        &self,
        principal: &Principal,
        id: &SessionId,
        update: MetadataUpdate,
    ) -> Result<SessionRecord> {
        if let Some(Some(title)) = &update.title {
            validate_metadata(Some(title), &BTreeSet::new())?;
        }
        if let Some(labels) = &update.labels {
            validate_metadata(None, labels)?;
        }
        let (record, ()) = self
            .mutate(principal, id, "update", update.expected_revision, |record, _now| {
                if let Some(title) = &update.title {
                    record.title = title.clone();
                }
                if let Some(labels) = &update.labels {
                    record.labels = labels.clone();
                }
                Ok(())
            })
            .await?;
        Ok(record)
    }

    // ----- events --------------------------------------------------------------------

    pub async fn read(
        &self,
        principal: &Principal,
        id: &SessionId,
        offset: u64,
        length: Option<u64>,
    ) -> Result<Vec<Event>> {
        let record = self.load(principal, id, "read").await?;
        let handle = self.store.open(&record.key(), Access::Read).await?;
        let events = handle.read(offset, length).await;
        let _ = handle.close().await;
        events
    }

    /// Up to `limit` events before seq `before`, in ascending order: the last `limit`
    /// events when `before` is at or past the end (R-S15). Authorized like `read`; the
    /// backend reads only near them, also when no handle has the log open.
    pub async fn read_before(
        &self,
        principal: &Principal,
        id: &SessionId,
        before: u64,
        limit: u64,
    ) -> Result<Vec<Event>> {
        let record = self.load(principal, id, "read").await?;
        let handle = self.store.open(&record.key(), Access::Read).await?;
        let events = handle.read_before(before, limit).await;
        let _ = handle.close().await;
        events
    }

    pub async fn append(&self, principal: &Principal, id: &SessionId, request: AppendRequest) -> Result<AppendOutcome> {
        let idempotency_key = check_append_request(&request)?;
        let record = self.load(principal, id, APPEND_ACTION).await?;
        if let Err(error) = self.check_append_allowed(principal, &record, request.run.as_ref()).await {
            return self.refused_append(principal, &record, &request, idempotency_key, error).await;
        }
        let key = record.key();
        let append_lock = self.append_lock(&key);
        let _one_append_at_a_time = append_lock.lock().await;
        let now = self.now();
        let writer = self.writer(&key).await?;
        self.open_ledger(&key, &writer).await?;
        let next_seq = writer.next_seq();
        let start = request.expected_seq.unwrap_or(next_seq);
        let mut events = build_events(&request, start, now)?;
        let keyed = match idempotency_key {
            Some(idempotency_key) => {
                match self.keyed_plan(&key, idempotency_key, &request, next_seq, &mut events).await? {
                    Err(original) => return Ok(original),
                    Ok(batch) => Some(batch),
                }
            }
            None if start != next_seq => return self.check_retry(&writer, &request, start, next_seq, events).await,
            None => None,
        };
        if events.is_empty() {
            return Ok(AppendOutcome { first_seq: start, next_seq, duplicate: false });
        }
        writer.append(&events).await?;
        let new_next = start + events.len() as u64;
        self.ledger_appended(&key, keyed, new_next).await;
        let conversation =
            events.iter().any(|event| berth_core::vocabulary::is_conversation_event(event.event_type.as_str()));
        let ttl_ms = record.header.policy.activity_ttl_ms;
        // The events are durable already; the activity they cause (counts, last activity,
        // the lease extension) is a relaxed write: losing the latest of these to a power
        // loss only makes the metadata lag the log, which the next write corrects.
        let record_activity = |record: &mut SessionRecord, now: Timestamp| -> Result<()> {
            record.event_count = record.event_count.max(new_next);
            record.blank &= !conversation;
            record.last_activity = now;
            let next = lifecycle::transition(record.lifecycle(), LifecycleEvent::Appended { ttl_ms }, now)?;
            record.lease_until = next.lease_until;
            Ok(())
        };
        // Held, when this session's activity was written moments ago (`activity.rs`).
        if self.activity.hold(&record, self.now(), new_next, conversation) {
            return Ok(AppendOutcome { first_seq: start, next_seq: new_next, duplicate: false });
        }
        // First against the record this append already loaded (no second read on the hot
        // path); only a concurrent metadata change sends it through the reload loop.
        let mut next = record.clone();
        record_activity(&mut next, self.now())?;
        next.revision = Revision(record.revision.0 + 1);
        match self.catalog.update_activity(&next, record.revision).await {
            Ok(()) => self.activity.written(&next),
            Err(Error::RevisionConflict { .. }) => {
                self.mutate_with(principal, id, APPEND_ACTION, None, Durability::Relaxed, record_activity).await?;
            }
            Err(error) => return Err(error),
        }
        Ok(AppendOutcome { first_seq: start, next_seq: new_next, duplicate: false })
    }

    /// An append the session refuses (terminal, run gone, forbidden). A keyed retry of a
    /// batch stored before still gets its original outcome — keys are honoured for the
    /// session's life (R-S14) — except for a forbidden caller, whose refusal is audited.
    async fn refused_append(
        &self,
        principal: &Principal,
        record: &SessionRecord,
        request: &AppendRequest,
        idempotency_key: Option<berth_core::IdempotencyKey>,
        error: Error,
    ) -> Result<AppendOutcome> {
        if let Error::Forbidden { .. } = error {
            return Err(self.denied(principal, APPEND_ACTION, &record.header.id, error).await);
        }
        let Some(idempotency_key) = idempotency_key else { return Err(error) };
        let key = record.key();
        match idempotency::find_without_writer(self.catalog.as_ref(), &self.store, &key, &idempotency_key).await? {
            Some(stored) => idempotency::retry_outcome(&stored, &idempotency::batch_digest(request)),
            None => Err(error),
        }
    }

    async fn check_append_allowed(
        &self,
        principal: &Principal,
        record: &SessionRecord,
        run: Option<&berth_core::RunId>,
    ) -> Result<()> {
        if record.status.is_terminal() {
            return Err(Error::Terminal { state: record.status.to_string() });
        }
        let parallel = matches!(record.header.policy.concurrency, berth_core::Concurrency::Parallel { .. });
        match run {
            Some(run) => {
                let attached = record.runs.iter().find(|r| &r.run_id == run && r.status == RunStatus::Attached);
                match attached {
                    Some(r) if principal.is_privileged() || r.attached_by == principal.user => Ok(()),
                    _ => Err(Error::RunNotAttached { id: record.header.id.to_string(), run: run.to_string() }),
                }
            }
            None if parallel => Err(Error::invalid("append", "a parallel session's events carry their run")),
            None if principal.is_privileged() => Ok(()),
            None => {
                Err(Error::Forbidden { reason: "appends come from an attached run (or a service principal)".into() })
            }
        }
    }

    /// What a keyed append does before anything is written: `Err(original outcome)` if
    /// the key is stored with this content (`IdempotencyKeyReused` with other content);
    /// `SeqConflict` for a new key at another seq than the log's end — a new key never
    /// adopts what others stored (the content rule is for keyless retries only);
    /// otherwise `Ok(the batch)`, with `events` (built for it) marked as its own.
    async fn keyed_plan(
        &self,
        key: &SessionKey,
        idempotency_key: berth_core::IdempotencyKey,
        request: &AppendRequest,
        next_seq: u64,
        events: &mut [Event],
    ) -> Result<std::result::Result<berth_core::KeyedBatch, AppendOutcome>> {
        let digest = idempotency::batch_digest(request);
        if let Some(stored) = self.keyed_batch(key, &idempotency_key, next_seq).await? {
            return idempotency::retry_outcome(&stored, &digest).map(Err);
        }
        let start = events.first().map_or(next_seq, |event| event.seq.get());
        if start != next_seq {
            return Err(Error::SeqConflict { expected: next_seq, actual: start });
        }
        let batch =
            berth_core::KeyedBatch { key: idempotency_key, first_seq: start, events: events.len() as u64, digest };
        idempotency::mark(events, &batch);
        Ok(Ok(batch))
    }

    /// The stored batch appended with `idempotency_key`: this writer's ledger first, then
    /// the catalog's index (an entry past the log's end, which only a lost write could
    /// leave, is not trusted).
    async fn keyed_batch(
        &self,
        key: &SessionKey,
        idempotency_key: &berth_core::IdempotencyKey,
        next_seq: u64,
    ) -> Result<Option<berth_core::KeyedBatch>> {
        let in_ledger = self
            .writers
            .lock()
            .await
            .handles
            .get(key)
            .and_then(|cached| cached.ledger.as_ref()?.get(idempotency_key).cloned());
        if in_ledger.is_some() {
            return Ok(in_ledger);
        }
        let indexed = self.catalog.idempotency_batch(key, idempotency_key).await?;
        Ok(indexed.filter(|batch| batch.next_seq() <= next_seq))
    }

    /// Records a keyed batch in the writer's ledger, and brings the catalog's index up to
    /// date when the log has outgrown it by `IDEMPOTENCY_INDEX_LAG_EVENTS_MAX`. A failed
    /// index write is only logged: the log already holds the key.
    async fn ledger_appended(&self, key: &SessionKey, keyed: Option<berth_core::KeyedBatch>, next_seq: u64) {
        let pending = {
            let mut writers = self.writers.lock().await;
            let Some(ledger) = writers.handles.get_mut(key).and_then(|cached| cached.ledger.as_mut()) else { return };
            ledger.appended(keyed, next_seq);
            if !ledger.is_due() {
                return;
            }
            ledger.pending()
        };
        // Written without holding the cache (the caller's append lock keeps this
        // session's ledger still meanwhile).
        match self.catalog.index_idempotency(key, &pending, next_seq).await {
            Ok(()) => {
                if let Some(ledger) = self.writers.lock().await.handles.get_mut(key).and_then(|c| c.ledger.as_mut()) {
                    ledger.written(next_seq);
                }
            }
            Err(error) => {
                tracing::warn!(session = %key, %error, "writing the idempotency index failed (it lags the log)")
            }
        }
    }

    /// `expected_seq` behind the log: identical stored events make the retry a success
    /// without duplicates; anything else is `SeqConflict`. Events of a keyed batch are
    /// never identical to a keyless retry (R-S14).
    async fn check_retry(
        &self,
        writer: &SessionHandle,
        request: &AppendRequest,
        start: u64,
        next_seq: u64,
        events: Vec<Event>,
    ) -> Result<AppendOutcome> {
        let conflict = Error::SeqConflict { expected: next_seq, actual: start };
        if start > next_seq || start + events.len() as u64 > next_seq {
            return Err(conflict);
        }
        let stored = writer.read(start, Some(events.len() as u64)).await?;
        let same = stored.len() == events.len()
            && stored.iter().zip(&events).zip(&request.events).all(|((stored, new), draft)| {
                !idempotency::is_keyed(stored)
                    && stored.event_type == new.event_type
                    && stored.data == new.data
                    && stored.run == new.run
                    && stored.ignorable == new.ignorable
                    && (draft.time.is_none() || stored.time == new.time)
            });
        if same {
            Ok(AppendOutcome { first_seq: start, next_seq, duplicate: true })
        } else {
            Err(conflict)
        }
    }

    // ----- close, delete, fork, reopen -------------------------------------------------------

    pub async fn close(
        &self,
        principal: &Principal,
        id: &SessionId,
        policy: ClosePolicy,
        expected_revision: Option<Revision>,
    ) -> Result<SessionRecord> {
        let audit = |record: &SessionRecord, cancelled: &Vec<RunRecord>| {
            let mut drafts: Vec<AuditDraft> = cancelled
                .iter()
                .map(|run| {
                    let details = serde_json::json!({"run": run.run_id, "status": "cancelled"});
                    self.draft_ok(principal, "detach", record, details)
                })
                .collect();
            let details = serde_json::json!({"cancelled_runs": cancelled.len()});
            drafts.push(self.draft_ok(principal, "close", record, details));
            drafts
        };
        let (record, cancelled) = self
            .mutate_audited(
                principal,
                id,
                "close",
                expected_revision,
                |record, now| {
                    if record.status.is_terminal() {
                        return Err(Error::Terminal { state: record.status.to_string() });
                    }
                    let mut cancelled = Vec::new();
                    if !record.runs.is_empty() {
                        if policy == ClosePolicy::Refuse {
                            return Err(Error::Busy {
                                id: record.header.id.to_string(),
                                reason: format!(
                                    "{} run(s) attached; detach them or close with cancel_runs",
                                    record.runs.len()
                                ),
                            });
                        }
                        for mut run in record.runs.drain(..) {
                            run.status = RunStatus::Cancelled;
                            cancelled.push(run);
                        }
                    }
                    let next = lifecycle::transition(record.lifecycle(), LifecycleEvent::Close, now)?;
                    record.status = next.status;
                    record.status_changed_at = now;
                    Ok(cancelled)
                },
                &audit,
            )
            .await?;
        self.close_writer(&record.key()).await;
        drop(cancelled);
        Ok(record)
    }

    pub async fn delete(
        &self,
        principal: &Principal,
        id: &SessionId,
        expected_revision: Option<Revision>,
    ) -> Result<()> {
        let record = self.load(principal, id, "delete").await?;
        if let Some(expected) = expected_revision {
            if expected != record.revision {
                return Err(Error::RevisionConflict { expected: expected.0, actual: record.revision.0 });
            }
        }
        let key = record.key();
        self.close_writer(&key).await;
        let size_bytes = self.stored_bytes(&key).await?;
        self.store.erase(&key).await.map_err(|error| match error {
            Error::AlreadyOwned { id } => Error::Busy { id, reason: "its log is open for writing".into() },
            other => other,
        })?;
        let details = serde_json::json!({
            "events": record.event_count,
            "bytes": size_bytes,
            "status": record.status,
            "owner": record.header.scope.user,
        });
        let audit = self.draft_ok(principal, "delete", &record, details);
        self.remove_record_after_erase(&key, record.revision, audit).await
    }

    /// Removes a session's record once its log is erased. The erase is the point of no
    /// return, so a concurrent metadata change (a heartbeat, a reopen) must not leave a
    /// record without a log: retry the compare-and-set against the fresh revision.
    /// The removal and its audit record are one catalog transaction.
    async fn remove_record_after_erase(
        &self,
        key: &SessionKey,
        mut revision: Revision,
        audit: AuditDraft,
    ) -> Result<()> {
        for _ in 0..CAS_RETRIES_MAX {
            match self.catalog.remove_audited(key, revision, vec![audit.clone()]).await {
                Ok(_) => return Ok(()),
                Err(Error::NotFound { .. }) => {
                    // Removed meanwhile (by the sweeper, which audited its own removal):
                    // this delete still leaves its record.
                    self.audit(audit).await;
                    return Ok(());
                }
                Err(Error::RevisionConflict { actual, .. }) => revision = Revision(actual),
                Err(error) => return Err(error),
            }
        }
        Err(Error::Unavailable { reason: "metadata kept changing while deleting; retry the delete".into() })
    }

    /// Forks `id` at `upto_seq` (default: the whole log) into a new session of the same
    /// scope whose header records the parent and cut. Allowed from closed and expired
    /// sessions: the explicit way to continue a finished conversation.
    pub async fn fork(
        &self,
        principal: &Principal,
        id: &SessionId,
        upto_seq: Option<u64>,
        new_id: Option<SessionId>,
    ) -> Result<SessionRecord> {
        let source = self.load(principal, id, "fork").await?;
        let handle = self.store.open(&source.key(), Access::Read).await?;
        let all = handle.read(0, upto_seq).await;
        let _ = handle.close().await;
        let mut events = all?;
        // A fork is a new session with its own keys: the copied events lose their marks.
        idempotency::strip(&mut events);
        let cut = events.len() as u64;
        if let Some(upto) = upto_seq {
            if upto > cut {
                // The request is well formed; the log is shorter than it says (409, like an
                // append at a seq the log has not reached).
                return Err(Error::SeqConflict { expected: cut, actual: upto });
            }
        }
        let now = self.now();
        let mut header =
            SessionHeader::new(new_id.unwrap_or_else(|| SessionId::generate(now)), source.header.scope.clone(), now);
        header.parent = Some(ParentRef { session: source.header.id.clone(), cut_seq: cut });
        header.origin = Some("fork".into());
        header.delegation_depth = source.header.delegation_depth;
        header.policy = source.header.policy.clone();
        let last_time = events.last().map_or(now, |event| event.time);
        // Every event of a parallel session carries a run (R-C3), so there the seam
        // marker carries a fresh run id of its own: the fork operation's, never attached.
        let seed_run = match header.policy.concurrency {
            berth_core::Concurrency::Parallel { .. } => Some(berth_core::RunId::generate(now)),
            berth_core::Concurrency::Serial => None,
        };
        events.push(Event {
            seq: Seq(cut),
            event_type: EventType::parse(berth_core::vocabulary::SESSION_END_SEED).expect("reserved type"),
            time: last_time,
            run: seed_run,
            data: berth_core::JsonText::from(&serde_json::json!({"inherited_events": cut, "parent": source.header.id})),
            ignorable: false,
            idempotency: None,
        });
        let mut record = new_record(header, source.title.clone(), source.labels.clone(), now);
        record.event_count = events.len() as u64;
        record.blank = !events.iter().any(|e| berth_core::vocabulary::is_conversation_event(e.event_type.as_str()));
        let forked = |fork: &SessionRecord| {
            vec![self.draft_ok(
                principal,
                "forked",
                &source,
                serde_json::json!({"fork": fork.header.id, "cut_seq": cut}),
            )]
        };
        self.create_from_record(principal, record, &events, "fork", forked).await
    }

    /// Admin only: the one audited way out of `closed` / `expired`.
    pub async fn reopen(&self, principal: &Principal, id: &SessionId) -> Result<SessionRecord> {
        if let Err(error) = principal.require_admin("reopen") {
            return Err(self.denied(principal, "reopen", id, error).await);
        }
        let reopen = |record: &mut SessionRecord, now| {
            let ttl_ms = record.header.policy.activity_ttl_ms;
            let next = lifecycle::transition(record.lifecycle(), LifecycleEvent::Reopen { ttl_ms }, now)?;
            record.status = next.status;
            record.lease_until = next.lease_until;
            record.status_changed_at = now;
            Ok(())
        };
        let audit =
            |record: &SessionRecord, _: &()| vec![self.draft_ok(principal, "reopen", record, serde_json::json!({}))];
        let (record, ()) = self.mutate_audited(principal, id, "reopen", None, reopen, &audit).await?;
        Ok(record)
    }

    // ----- audit, retention ----------------------------------------------------------------

    /// Admin only: the tenant's audit log from position `from`.
    pub async fn audit_log(&self, principal: &Principal, from: u64, limit: usize) -> Result<Vec<AuditEntry>> {
        self.require_admin(principal, "read_audit").await?;
        self.catalog.read_audit(&principal.tenant, from, limit.min(PAGE_SIZE_MAX)).await
    }

    /// Admin only: verifies the tenant's whole audit chain against its head.
    pub async fn verify_audit(&self, principal: &Principal) -> Result<AuditVerification> {
        self.require_admin(principal, "verify_audit").await?;
        verify_tenant_audit(self.catalog.as_ref(), &principal.tenant).await
    }

    pub async fn set_retention(&self, principal: &Principal, policy: RetentionPolicy) -> Result<()> {
        self.require_admin(principal, "retention").await?;
        self.catalog.set_retention(&principal.tenant, &policy).await?;
        let mut draft = self.audit_draft(&principal.tenant, principal.actor(), "retention");
        draft.details = serde_json::to_value(&policy).unwrap_or_default();
        self.audit(draft).await;
        Ok(())
    }
}

/// Reads a tenant's whole audit log and verifies it.
pub async fn verify_tenant_audit(catalog: &dyn Catalog, tenant: &berth_core::TenantId) -> Result<AuditVerification> {
    let mut entries = Vec::new();
    loop {
        let page = catalog.read_audit(tenant, entries.len() as u64, PAGE_SIZE_MAX).await?;
        let done = page.len() < PAGE_SIZE_MAX;
        entries.extend(page);
        if done {
            break;
        }
    }
    let head = catalog.audit_head(tenant).await?;
    Ok(berth_catalog::audit::verify(&entries, head))
}

fn new_record(header: SessionHeader, title: Option<String>, labels: BTreeSet<String>, now: Timestamp) -> SessionRecord {
    let ttl_ms = header.policy.activity_ttl_ms;
    SessionRecord {
        header,
        status: Status::Active,
        lease_until: now.plus_ms(ttl_ms),
        last_activity: now,
        // Revision 0 is the transient `creating` record; the first live revision is 1.
        revision: Revision(1),
        title,
        labels,
        event_count: 0,
        blank: true,
        runs: Vec::new(),
        status_changed_at: now,
    }
}

fn apply_expire(record: &mut SessionRecord, now: Timestamp) {
    record.status = Status::Expired;
    record.status_changed_at = now;
    for run in &mut record.runs {
        run.status = RunStatus::Abandoned;
    }
    record.runs.clear();
}

/// The statuses a listing can filter by (and shows by default): every status but
/// `creating`, which is an unfinished create nobody may see.
pub const LISTABLE_STATUSES: [Status; 4] = [Status::Active, Status::Idle, Status::Closed, Status::Expired];

/// One status of a listing filter, as the HTTP query and the CLI spell it: a listable
/// status, never empty, unknown or `creating` (an empty filter would read as "no filter"
/// and show every status, so it is refused rather than guessed at).
pub fn parse_listable_status(text: &str) -> Result<Status> {
    match Status::parse(text) {
        Ok(status) if LISTABLE_STATUSES.contains(&status) => Ok(status),
        _ => Err(unlistable_status(text)),
    }
}

fn unlistable_status(text: &str) -> Error {
    let listable: Vec<&str> = LISTABLE_STATUSES.iter().map(|status| status.as_str()).collect();
    Error::invalid("status", format!("{text:?} is not listable; the listable statuses are {}", listable.join(", ")))
}

fn validate_metadata(title: Option<&str>, labels: &BTreeSet<String>) -> Result<()> {
    if let Some(title) = title {
        if title.len() > TITLE_BYTES_MAX {
            return Err(Error::LimitExceeded {
                what: berth_core::limits::Limit::TitleBytes,
                limit: TITLE_BYTES_MAX as u64,
                actual: title.len() as u64,
            });
        }
    }
    if labels.len() > LABELS_MAX {
        return Err(Error::LimitExceeded {
            what: berth_core::limits::Limit::Labels,
            limit: LABELS_MAX as u64,
            actual: labels.len() as u64,
        });
    }
    for label in labels {
        berth_core::limits::check_text_line("label", berth_core::limits::Limit::LabelBytes, LABEL_BYTES_MAX, label)?;
    }
    Ok(())
}

/// The checks an append makes before reading anything: the batch limit, and its key
/// (returned parsed).
fn check_append_request(request: &AppendRequest) -> Result<Option<berth_core::IdempotencyKey>> {
    if request.events.len() > BATCH_EVENTS_MAX {
        return Err(Error::LimitExceeded {
            what: berth_core::limits::Limit::BatchEvents,
            limit: BATCH_EVENTS_MAX as u64,
            actual: request.events.len() as u64,
        });
    }
    idempotency::requested_key(request)
}

fn build_events(request: &AppendRequest, start: u64, now: Timestamp) -> Result<Vec<Event>> {
    request
        .events
        .iter()
        .enumerate()
        .map(|(index, draft)| {
            Ok(Event {
                seq: Seq(start + index as u64),
                event_type: EventType::parse(&draft.event_type)?,
                time: draft.time.unwrap_or(now),
                run: request.run.clone(),
                data: draft.data.clone(),
                ignorable: draft.ignorable,
                idempotency: None,
            })
        })
        .collect()
}

/// Appends `events` in batches within the batch limits.
pub(crate) async fn append_chunked(handle: &SessionHandle, events: &[Event]) -> Result<()> {
    let mut start = 0;
    while start < events.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < events.len() && end - start < BATCH_EVENTS_MAX {
            let size = events[end].size_estimate_bytes();
            if end > start && bytes + size > BATCH_BYTES_MAX {
                break;
            }
            bytes += size;
            end += 1;
        }
        handle.append(&events[start..end]).await?;
        start = end;
    }
    Ok(())
}
