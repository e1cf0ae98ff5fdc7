//! `SessionService`: the public Rust API the server and CLI use (SPEC §7).
//!
//! Every operation takes a `Principal` and authorizes it against the session's scope
//! *before* looking at status (R-S1). Sessions are looked up by (caller's tenant, id),
//! so another tenant's session and a missing one take the same path and give the same
//! `NotFound`. Every denial is audited. Metadata changes are compare-and-set on
//! `revision` in the `Catalog`; events go through the `LogStore`'s write handle, which
//! this service caches per session while it is in use.
//!
//! The operations are split by concern, each module an `impl SessionService` block:
//! `sessions` (create, get, list, metadata), `events` (read, append, retry), `runs`
//! (attach, heartbeat, finish, resume), `close_fork` (close, delete, fork, reopen),
//! `audit` (audit records, the audit log, retention), `export`, `sweep` (the retention
//! sweeper); beneath them `records` (lookup with authorization and expiry, CAS writes),
//! `writers` (the write-handle cache and the per-session append lock), `activity` and
//! `idempotency`; `usage` (a session's and a tenant's LLM and tool usage, computed from
//! the log).

mod activity;
mod audit;
mod carried;
mod close_fork;
mod creator;
mod events;
mod export;
mod idempotency;
mod memory;
mod principal;
mod records;
mod runs;
mod sessions;
mod sweep;
mod types;
mod usage;
mod writers;

pub use activity::ACTIVITY_WINDOW_DEFAULT;
pub use carried::{CARRIED_GRACE_MS, CARRIED_WRITES_MAX, PAUSE_HOOK_ENV};
pub use creator::this_process as creator_of_this_process;
pub use export::{EXPORT_VERSION, EXPORT_VERSION_OLDEST};
pub use idempotency::IDEMPOTENCY_INDEX_LAG_EVENTS_MAX;
pub use memory::{ForgetReport, MemoryAccess, MemoryExportHeader, MemoryPage, NamespacePage, MEMORY_EXPORT_VERSION};
pub use principal::{Principal, Role};
pub use runs::RESUME_FAILED_OUTCOME;
pub use types::*;

pub use audit::verify_tenant_audit;
pub use audit::{AuditFilter, AuditSearch, AUDIT_SCAN_ENTRIES_MAX};
pub use sessions::{parse_listable_status, StatusCount, COUNT_CAP_MAX, LISTABLE_STATUSES};
pub use writers::WRITERS_CACHED_MAX_DEFAULT;

pub(crate) use events::append_chunked;
pub(crate) use sessions::{apply_expire, new_record};
use writers::WriterCache;

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

/// The action name of appends (audit, and `load`'s choice of how to read activity).
const APPEND_ACTION: &str = "append";
/// The action of the log's reads (events, usage).
const READ_ACTION: &str = "read";

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
    /// Imports decoding on the blocking pool now (`export::decode_import`).
    import_decodes: tokio::sync::Semaphore,
    /// The per-tenant scoped-memory quota.
    memory_quota: berth_catalog::scoped::MemoryQuota,
    /// This process's lock per memory scope (carried writes and `forget`).
    scope_locks: std::sync::Mutex<HashMap<String, std::sync::Weak<tokio::sync::Mutex<()>>>>,
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
            import_decodes: tokio::sync::Semaphore::new(export::IMPORT_DECODES_CONCURRENT_MAX),
            memory_quota: berth_catalog::scoped::MemoryQuota::default(),
            scope_locks: std::sync::Mutex::new(HashMap::new()),
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

    /// Changes each time held activity's timer write finishes (written, or failed and
    /// logged): lets a caller see held activity reach the catalog on its own by waiting
    /// for that event instead of polling the wall clock (the conformance clauses).
    pub fn held_activity_timer_writes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.activity.timer_writes()
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
}
