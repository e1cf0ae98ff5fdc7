//! Generic conformance bodies for the `SessionService` (SPEC §7, R-Q1): one `pub async
//! fn` per clause, run against every backend through a `ServiceBackend` factory.
//!
//! - [`lifecycle`]: every (state, operation) pair as a written-out table (R-C4, R-S3),
//!   expiry on access, admin reopen.
//! - [`authorization`]: the matrix operation × principal × target (R-S1), denials
//!   audited in the caller's tenant and leaving stored data untouched; role-only
//!   operations; listing scope; create and import scope.
//! - [`runs`]: serial/parallel policy, interrupt, abandoned-run takeover, symmetric
//!   detach checks, who may append (R-S4, R-S5, R-S7).
//! - [`resume`]: crash (`restart`) with an open turn, then resume with repair (R-S6,
//!   R-C5).
//! - [`events`]: idempotent append retries, close with runs, close is terminal, delete,
//!   fork (R-S7, R-S8, R-S9).
//! - [`idempotency`]: caller idempotency keys — retries by key after later appends, a
//!   closed writer and a restart, key reuse, keyless retries over keyed batches, the
//!   claim race, the lost index write, the bounded index lag, fork/import/delete (R-S14).
//! - [`audit`]: tamper detection through `verify_audit` (R-S10).
//! - [`retention`]: the bounded sweeper and listing (R-S11, R-S12).
//! - [`export`]: export → import → export byte identity, single session and ZIP with
//!   forks, within one backend and between two (R-S13).
//! - [`exact_data`]: event data comes back exactly as submitted minus whitespace, from
//!   the log, after a restart, through export and import; strict refusals; version-0
//!   exports import unchanged (R-C9, R-C2).
//! - [`activity`]: the activity of busy sessions' appends is written coalesced, always
//!   lands, and never lets a stored lease run short.
//! - [`usage`]: a session's usage from its `model/call` and tool events, authorized as
//!   a read; a tenant's totals over a time range, over the sessions the caller may list.
//! - [`memory`]: scoped memory through the service — an import's bindings held to a
//!   put's rule, what a session's delete counts of its memory, the audit records of every
//!   deletion of memory, a tenant's own quota.
//!
//! A backend's test file is one macro call:
//!
//! ```ignore
//! berth_testkit::service_conformance!(MemoryService::new());
//! ```
//!
//! It expands into one `#[tokio::test]` per clause, grouped in one module per area
//! (`lifecycle::every_state_operation_pair`, …). All time comes from the backend's
//! `FakeClock`; no clause sleeps on the wall clock. The one real-time wait is
//! `restart`'s wait for the dropped instance's writer leases to be released (a killed
//! process frees them at once; here the release runs on a background task), bounded by
//! `RESTART_RELEASE_DEADLINE`.
//!
//! # Decisions these clauses pin down
//!
//! Where SPEC §7 is silent, the clauses assert what the service does, so a change is
//! a visible decision rather than drift:
//! - `update_metadata` (title, labels) is allowed on closed and expired sessions: it
//!   neither reactivates them nor touches the log.
//! - A denied `resume` is audited as a denied `attach` (resume is an attach first).
//! - Denied-call snapshots compare every other tenant's audit log by its head
//!   (seq, hash): the catalog only appends, so an unchanged head means no new entry.
//! - A fork of a `parallel` session gives its `session/end-seed` marker a fresh run id
//!   (every event of a parallel log carries a run).
//! - The `bytes` of a delete's audit record are physical where the backend knows them
//!   (JSONL) and logical (canonical event lines) where it does not (memory).
//!
//! # Known divergences
//!
//! None: every clause runs on every backend (memory; embedded = JSONL logs + SQLite
//! catalog).

pub mod activity;
pub mod audit;
pub mod authorization;
pub mod events;
pub mod exact_data;
pub mod export;
pub mod fixtures;
pub mod idempotency;
pub mod lifecycle;
pub mod memory;
pub mod resume;
pub mod retention;
pub mod runs;
pub mod usage;

use crate::catalog_conformance::{AuditTamper, AuditTamperer};
use crate::clock::FakeClock;
use async_trait::async_trait;
use berth_catalog::memory::MemoryCatalog;
use berth_catalog::Catalog;
use berth_core::{Error, TenantId};
use berth_jsonl::{JsonlBackend, JsonlOptions};
use berth_service::SessionService;
use berth_store::memory::{MemoryBackend, MemoryStorage};
use berth_store::{Access, LogStore};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where every backend's `FakeClock` starts (2023-11-14, in ms).
pub const CLOCK_START_MS: u64 = 1_700_000_000_000;

/// How long `restart` waits for the dropped instance's writer leases to be released.
pub const RESTART_RELEASE_DEADLINE: Duration = Duration::from_secs(10);

/// A backend under test: the current `SessionService` instance over one storage, the
/// clock it runs on, and the hooks the crash and tamper clauses need.
#[async_trait]
pub trait ServiceBackend: Send + Sync {
    fn name(&self) -> &str;

    /// The current service instance. Fetch it again after `restart`: holding on to an
    /// old instance keeps its write handles (and their leases) alive.
    fn service(&self) -> Arc<SessionService>;

    /// The clock every instance of this backend reads.
    fn clock(&self) -> Arc<FakeClock>;

    /// Simulates a crash and a restart: drops the current instance *without*
    /// `shutdown` (its write handles are dropped, not closed) and builds a fresh one
    /// over the same storage, as a new process would. Returns once the dropped
    /// instance's writer leases are free, as a killed process's are.
    async fn restart(&self);

    /// Damages the tenant's stored audit log behind the catalog's back.
    async fn tamper_audit(&self, tenant: &TenantId, how: AuditTamper);
}

// ---------------------------------------------------------------------------------
// Memory backend.

/// The in-memory backend: `MemoryStorage` is the disk, `MemoryCatalog` the database;
/// `restart` builds a new `LogStore` (new registry, same storage) and service over them.
pub struct MemoryService {
    storage: Arc<MemoryStorage>,
    catalog: Arc<MemoryCatalog>,
    clock: Arc<FakeClock>,
    current: Mutex<Option<Arc<SessionService>>>,
}

impl MemoryService {
    pub fn new() -> MemoryService {
        let backend = MemoryService {
            storage: MemoryStorage::new(),
            catalog: Arc::new(MemoryCatalog::new()),
            clock: FakeClock::new(CLOCK_START_MS),
            current: Mutex::new(None),
        };
        *lock(&backend.current) = Some(backend.instance());
        backend
    }

    fn instance(&self) -> Arc<SessionService> {
        let store = LogStore::new(Arc::new(MemoryBackend::new(self.storage.clone())));
        Arc::new(SessionService::new(store, self.catalog.clone(), self.clock.clone()))
    }
}

impl Default for MemoryService {
    fn default() -> Self {
        MemoryService::new()
    }
}

#[async_trait]
impl ServiceBackend for MemoryService {
    fn name(&self) -> &str {
        "memory"
    }

    fn service(&self) -> Arc<SessionService> {
        lock(&self.current).clone().expect("a current instance")
    }

    fn clock(&self) -> Arc<FakeClock> {
        self.clock.clone()
    }

    async fn restart(&self) {
        drop(lock(&self.current).take());
        let fresh = self.instance();
        wait_for_released_writers(&fresh).await;
        *lock(&self.current) = Some(fresh);
    }

    async fn tamper_audit(&self, tenant: &TenantId, how: AuditTamper) {
        self.catalog.with_audit_entries(tenant, |entries| match how {
            AuditTamper::ChangeField { seq } => {
                entries[seq as usize].draft.action = "forged".into();
            }
            AuditTamper::DeleteEntry { seq } => {
                entries.remove(seq as usize);
            }
            AuditTamper::DeleteLast => {
                entries.pop();
            }
            AuditTamper::Swap { first, second } => {
                entries.swap(first as usize, second as usize);
            }
        });
    }
}

// ---------------------------------------------------------------------------------
// Embedded backend.

/// Opens a fresh instance of the embedded catalog in a data root, together with the
/// hook that tampers with that instance's stored audit rows. The test file supplies it
/// (the SQLite catalog is a dev-dependency of this crate).
pub type OpenCatalog = fn(&Path) -> (Arc<dyn Catalog>, Arc<dyn AuditTamperer>);

/// The embedded backend: JSONL logs and a catalog in one temporary data root;
/// `restart` reopens both from disk.
pub struct EmbeddedService {
    root: tempfile::TempDir,
    open_catalog: OpenCatalog,
    clock: Arc<FakeClock>,
    current: Mutex<Option<EmbeddedInstance>>,
}

/// One "process" of the embedded backend: its service and its catalog's tamper hook.
struct EmbeddedInstance {
    service: Arc<SessionService>,
    tamperer: Arc<dyn AuditTamperer>,
}

impl EmbeddedService {
    pub fn new(open_catalog: OpenCatalog) -> EmbeddedService {
        let backend = EmbeddedService {
            root: tempfile::tempdir().expect("temporary data root"),
            open_catalog,
            clock: FakeClock::new(CLOCK_START_MS),
            current: Mutex::new(None),
        };
        *lock(&backend.current) = Some(backend.instance());
        backend
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }

    fn instance(&self) -> EmbeddedInstance {
        let backend = JsonlBackend::open(self.root.path(), JsonlOptions::default()).expect("open the JSONL backend");
        let (catalog, tamperer) = (self.open_catalog)(self.root.path());
        let service = SessionService::new(LogStore::new(Arc::new(backend)), catalog, self.clock.clone());
        EmbeddedInstance { service: Arc::new(service), tamperer }
    }
}

#[async_trait]
impl ServiceBackend for EmbeddedService {
    fn name(&self) -> &str {
        "embedded"
    }

    fn service(&self) -> Arc<SessionService> {
        lock(&self.current).as_ref().expect("a current instance").service.clone()
    }

    fn clock(&self) -> Arc<FakeClock> {
        self.clock.clone()
    }

    async fn restart(&self) {
        drop(lock(&self.current).take());
        let fresh = self.instance();
        wait_for_released_writers(&fresh.service).await;
        *lock(&self.current) = Some(fresh);
    }

    async fn tamper_audit(&self, tenant: &TenantId, how: AuditTamper) {
        let tamperer = lock(&self.current).as_ref().expect("a current instance").tamperer.clone();
        tamperer.tamper(tenant, how).await;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Waits until every session's writer lease can be claimed by `fresh` (claiming and
/// releasing it at once). A dropped write handle releases its lease on a background
/// task; a crashed process's lease is free at once, so this only waits for that task.
pub async fn wait_for_released_writers(fresh: &SessionService) {
    let deadline = Instant::now() + RESTART_RELEASE_DEADLINE;
    for record in fixtures::all_records(fresh.catalog().as_ref()).await {
        let key = record.key();
        loop {
            match fresh.store().open(&key, Access::Write).await {
                Ok(handle) => {
                    handle.close().await.expect("release a probe write handle");
                    break;
                }
                Err(Error::NotFound { .. }) => break,
                Err(Error::AlreadyOwned { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(error) => panic!("after restart, {key}'s writer lease stays taken: {error}"),
            }
        }
    }
}

/// Expands into one `#[tokio::test]` per clause, one module per area.
#[doc(hidden)]
#[macro_export]
macro_rules! __service_conformance_tests {
    ($make:expr, { $($area:ident : [$($clause:ident),* $(,)?]),* $(,)? }) => {
        $(
            mod $area {
                #[allow(unused_imports)]
                use super::*;
                $(
                    #[::tokio::test]
                    async fn $clause() {
                        let backend = $make;
                        $crate::service_conformance::$area::$clause(&backend).await;
                    }
                )*
            }
        )*
    };
}

/// One test per `SessionService` clause for the backend built by `$make` (an
/// expression of a `ServiceBackend` type).
#[macro_export]
macro_rules! service_conformance {
    ($make:expr) => {
        $crate::__service_conformance_tests!($make, {
            lifecycle: [
                every_state_operation_pair,
                lapsed_lease_expires_on_next_access_audited_and_stays_expired,
                reopen_is_admin_only_audited_and_restarts_the_lease,
            ],
            authorization: [
                matrix_session_operations,
                role_only_operations_are_forbidden_and_audited,
                create_and_import_stay_in_the_callers_scope,
                same_id_in_two_tenants_is_two_sessions,
                listing_shows_only_what_the_principal_may_see,
            ],
            runs: [
                serial_second_attach_is_busy_with_reject,
                interrupt_detaches_the_current_run_as_interrupted,
                parallel_runs_up_to_runs_max_and_events_carry_their_run,
                lapsed_run_is_abandoned_by_the_next_attach,
                heartbeat_extends_the_run_lease,
                detach_and_heartbeat_checks_are_symmetric,
                detach_outcome_is_bounded_and_has_no_control_characters,
                append_from_a_user_needs_an_attached_run_of_theirs,
            ],
            resume: [
                crash_with_pending_tool_calls_then_resume_appends_closers_once,
                crash_then_resume_with_interrupt_closes_calls_never_started,
                parallel_resume_repairs_each_detached_run_separately,
                resume_of_a_balanced_log_repairs_nothing,
                resume_reads_from_the_mark_the_last_resume_left,
                a_detach_with_every_turn_closed_marks_the_log_end,
            ],
            events: [
                append_retry_is_idempotent_and_conflicts_are_seq_conflict,
                typed_reads_return_only_those_types_and_bound_what_they_scanned,
                read_before_through_a_kept_writer_equals_a_fresh_read,
                close_refuses_while_runs_are_attached,
                close_with_cancel_runs_detaches_them_as_cancelled,
                closed_session_is_terminal_but_readable_and_forkable,
                delete_erases_only_that_session_and_audits_it,
                fork_copies_the_prefix_and_records_the_parent,
                fork_at_zero_takes_a_header_of_its_own,
            ],
            idempotency: [
                keyed_retry_returns_the_original_outcome,
                key_reused_with_other_content_is_refused,
                keyless_append_is_never_a_duplicate_of_a_keyed_batch,
                racers_claiming_one_seq_with_their_own_keys_have_one_winner,
                a_key_whose_index_write_was_lost_is_still_recognised,
                a_keyed_retry_after_the_session_closed_gets_its_original_outcome,
                the_index_lags_the_log_by_a_bounded_number_of_events,
                keys_stay_with_their_session_across_fork_export_import_and_delete,
                malformed_keys_and_empty_keyed_batches_are_refused,
            ],
            audit: [
                intact_chain_verifies,
                changed_field_is_detected,
                removed_middle_entry_is_detected,
                removed_last_entry_is_detected,
                reordered_entries_are_detected,
            ],
            retention: [
                sweep_is_bounded_and_repeated_sweeps_finish,
                sweep_expires_lapsed_idle_and_old_sessions_and_never_reactivates,
                sweep_deletes_terminal_sessions_after_retention,
                sweep_removes_abandoned_creates,
                a_create_takes_over_a_create_whose_process_is_gone,
                sweep_dates_a_create_from_when_it_began_not_from_its_header,
                list_sorts_by_last_activity_and_pages_with_cursors,
                list_refuses_a_status_filter_of_creating,
                list_filters_by_status_label_user_project_and_time,
                list_hides_blank_sessions_unless_asked,
            ],
            activity: [
                busy_sessions_write_activity_coalesced_and_it_always_lands,
                an_append_near_the_end_of_the_stored_lease_extends_it_at_once,
                reads_of_the_log_overlay_held_activity_and_write_none,
            ],
            exact_data: [
                appended_data_comes_back_byte_exact,
                invalid_data_is_refused_and_nothing_is_stored,
                version_0_exports_import_unchanged,
            ],
            export: [
                export_import_export_is_byte_identical,
                export_zip_holds_the_session_and_its_forks,
            ],
            memory: [
                an_imported_binding_is_held_to_the_puts_rule,
                a_session_delete_counts_the_items_bound_to_it,
                every_deletion_of_memory_is_audited,
                an_admin_sets_the_tenants_memory_quota,
            ],
            usage: [
                session_usage_totals_its_model_calls_and_tool_time,
                tenant_usage_sums_the_callers_sessions_over_the_range,
            ],
        });
    };
}
