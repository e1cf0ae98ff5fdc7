//! Generic conformance bodies for the LogStore seam (R-Q1): one `pub async fn` per
//! clause, run against every backend through a `ConformanceBackend` factory.
//!
//! - [`logstore`]: the 20 storage-contract clauses of `reference/dsh.md` §3.1, adapted to
//!   the Rust API, plus the SPEC extras (cross-instance ownership, limits, parallel
//!   policy, pagination, monotonic reads, materialization races).
//! - [`live`]: the 11 live-write-path clauses of `reference/dsh.md` §3.2 (R-P5), plus
//!   byte bounds, publish validation and publish-during-close.
//! - [`model`]: a state-machine model of the seam for the proptest in
//!   `tests/logstore_model.rs`.
//! - [`jsonl`]: `JsonlConformance`, the embedded backend in a temporary data root (the
//!   memory backend's `MemoryConformance` lives here in `mod.rs`).
//! - [`fault`]: `FaultyBackend`, a wrapper over any `LogBackend` that fails, panics or
//!   holds appends on demand (the live clauses' failure injection).
//!
//! A backend's test file is two macro calls:
//!
//! ```ignore
//! berth_testkit::logstore_conformance!(MemoryConformance::new());
//! berth_testkit::live_write_conformance!(MemoryConformance::new());
//! ```
//!
//! Each expands into one `#[tokio::test(start_paused = true)]` per clause, so every
//! clause shows up under its own name (`logstore::<clause>`, `live::<clause>`). Time is
//! paused in every clause: waits are `eventually` polls whose 1 ms sleeps and deadline
//! are virtual, and tokio does not auto-advance the clock while `spawn_blocking` work
//! (the JSONL backend's file I/O) is in flight.
//!
//! # Hooks and what happens without them
//!
//! `reopen`, `corrupt_tail`, `inject_stored_event` and `damage_record` return `None` when
//! a backend cannot provide them; the clause (or the part of it that needs the hook) then
//! prints `skipped: backend <name> has no <hook>` and still runs everything else.
//!
//! # Known divergences
//!
//! They are data: [`divergence::DIVERGENCES`] (memory: 3 clauses, postgres: 2 — the
//! torn-tail clauses, as neither has a physical tail; JSONL supports every hook and has
//! none). A skip that is not declared there fails its clause; each suite's generated
//! `declared_divergences_name_real_clauses` test checks every entry names one of its
//! clauses; `scripts/test` prints the per-backend count
//! (`cargo run -p berth-testkit --bin conformance-divergences`).

pub mod divergence;
pub mod fault;
pub mod fixtures;
pub mod jsonl;
pub mod live;
pub mod logstore;
pub mod model;
pub mod positions;

use async_trait::async_trait;
use berth_core::{Event, SessionKey};
use berth_store::memory::{MemoryBackend, MemoryStorage};
use berth_store::LogStore;
use std::sync::Arc;

pub use fault::{FaultPlan, FaultyBackend};
pub use jsonl::JsonlConformance;

/// A backend under test: hands out `LogStore` instances over one storage, plus the
/// physical hooks some clauses need. Every instance it hands out must route its appends
/// through a `FaultyBackend` driven by `faults()`.
#[async_trait]
pub trait ConformanceBackend: Send + Sync {
    fn name(&self) -> &str;

    /// A new `LogStore` instance over this backend's storage.
    async fn store(&self) -> LogStore;

    /// A fresh instance over the SAME storage ("another process"): its own registry and
    /// pending sessions, the same durable logs and writer leases. `None` if unsupported.
    async fn reopen(&self) -> Option<LogStore>;

    /// Appends a torn, partial record to the session's physical log (as a crash in the
    /// middle of a write leaves it). `None` if the backend has no physical tail.
    async fn corrupt_tail(&self, key: &SessionKey) -> Option<()>;

    /// Stores `event` after the session's last record verbatim, bypassing validation (as a
    /// newer berth would have written it). The session must have no open writer.
    async fn inject_stored_event(&self, key: &SessionKey, event: Event) -> Option<()>;

    /// The failure plan every instance's appends go through.
    fn faults(&self) -> Arc<FaultPlan>;

    /// Damages the stored record of `seq` in place (as a bad sector or a stray write
    /// would), leaving the records around it intact. `None` if the backend cannot (the
    /// memory "disk" stores whole events).
    async fn damage_record(&self, key: &SessionKey, seq: u64) -> Option<()> {
        let _ = (key, seq);
        None
    }
}

/// The in-memory backend: several `LogStore`s over one `MemoryStorage` behave like
/// several processes over one disk.
pub struct MemoryConformance {
    storage: Arc<MemoryStorage>,
    faults: Arc<FaultPlan>,
}

impl MemoryConformance {
    pub fn new() -> MemoryConformance {
        MemoryConformance { storage: MemoryStorage::new(), faults: FaultPlan::new() }
    }

    pub fn storage(&self) -> &Arc<MemoryStorage> {
        &self.storage
    }

    fn instance(&self) -> LogStore {
        let backend = FaultyBackend::new(MemoryBackend::new(self.storage.clone()), self.faults.clone());
        LogStore::new(Arc::new(backend))
    }
}

impl Default for MemoryConformance {
    fn default() -> Self {
        MemoryConformance::new()
    }
}

#[async_trait]
impl ConformanceBackend for MemoryConformance {
    fn name(&self) -> &str {
        "memory"
    }

    async fn store(&self) -> LogStore {
        self.instance()
    }

    async fn reopen(&self) -> Option<LogStore> {
        Some(self.instance())
    }

    async fn corrupt_tail(&self, _key: &SessionKey) -> Option<()> {
        None
    }

    async fn inject_stored_event(&self, key: &SessionKey, event: Event) -> Option<()> {
        self.storage.inject_stored_event(key, event).unwrap_or_else(|error| panic!("inject into {key}: {error}"));
        Some(())
    }

    fn faults(&self) -> Arc<FaultPlan> {
        self.faults.clone()
    }
}

/// Expands into one paused-clock `#[tokio::test]` per clause of `$suite`, inside a
/// module of the same name. `$make` is evaluated (and may `.await`) inside each test.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($suite:ident, $make:expr, [$($clause:ident),* $(,)?]) => {
        mod $suite {
            #[allow(unused_imports)]
            use super::*;

            /// Every declared divergence of this backend in this suite names one of
            /// the suite's clauses (so the data cannot drift from the clause list).
            #[::tokio::test(start_paused = true)]
            async fn declared_divergences_name_real_clauses() {
                let backend = $make;
                let name = $crate::conformance::ConformanceBackend::name(&backend).to_owned();
                let clauses = [$(stringify!($clause)),*];
                let declared: Vec<&str> = $crate::conformance::divergence::DIVERGENCES
                    .iter()
                    .filter(|divergence| divergence.backend == name && divergence.suite == stringify!($suite))
                    .map(|divergence| divergence.clause)
                    .collect();
                for clause in &declared {
                    assert!(clauses.contains(clause), "divergence of {name} names no {} clause: {clause}", stringify!($suite));
                }
                eprintln!("conformance: {name}: {} {} clause(s) not applicable: {declared:?}", declared.len(), stringify!($suite));
            }
            $(
                #[::tokio::test(start_paused = true)]
                async fn $clause() {
                    let backend = $make;
                    $crate::conformance::$suite::$clause(&backend).await;
                }
            )*
        }
    };
}

/// One test per LogStore-contract clause (`conformance::logstore`) for the backend
/// built by `$make` (an expression of a `ConformanceBackend` type; may `.await`).
#[macro_export]
macro_rules! logstore_conformance {
    ($make:expr) => {
        $crate::__conformance_tests!(
            logstore,
            $make,
            [
                round_trips_through_one_write_handle,
                reads_out_of_range_return_empty,
                duplicate_create_rejects_pending_and_allows_id_after_erasing_close,
                concurrent_duplicate_creates_one_wins,
                duplicate_create_rejects_session_materialized_by_another_instance,
                open_of_absent_session_is_not_found_for_both_accesses,
                write_ownership_is_single_holder_and_released_by_close,
                read_handle_refuses_mutation,
                closed_handle_rejects_operations_close_is_idempotent_and_drop_releases,
                dropped_handle_keeps_ownership_until_its_final_drain_ends,
                cancelled_create_or_open_releases_its_claim,
                cancelled_append_or_flush_still_completes,
                store_flush_materializes_every_handle_and_counts_closing_as_flushed,
                created_unappended_session_is_visible_here_and_invisible_to_fresh_instance,
                close_without_append_erases_created_session,
                flush_materializes_empty_session_durably,
                reads_after_append_observe_prefix_on_any_handle,
                fresh_instance_continues_at_committed_next_seq,
                append_rejects_non_contiguous_batch_naming_expected_seq,
                append_rejects_invalid_event_data_without_storing,
                data_is_stored_and_returned_exactly,
                vocabulary_fails_closed_on_unknown_stored_types,
                torn_tail_is_never_served_and_truncated_by_the_write_path,
                stat_and_list_agree_on_change_tokens,
                second_instance_write_open_is_already_owned,
                fresh_instance_lists_only_materialized_sessions,
                racing_materializations_across_instances_one_wins,
                limits_reject_whole_batches,
                parallel_session_events_must_carry_run,
                list_paginates_with_cursors_and_includes_pending,
                read_handle_is_monotonic,
                read_before_returns_the_events_before_a_seq_in_order,
                reads_at_any_position_match_the_full_log,
                read_seqs_match_reads_of_each_seq,
                read_before_sees_appends_by_another_handle,
                read_before_skips_a_torn_tail,
                partial_reads_report_damage_inside_their_range_only,
            ]
        );
    };
}

/// One test per live-write-path clause (`conformance::live`) for the backend built by
/// `$make`.
#[macro_export]
macro_rules! live_write_conformance {
    ($make:expr) => {
        $crate::__conformance_tests!(
            live,
            $make,
            [
                published_events_land_within_one_window,
                session_without_active_write_handle_persists_nothing,
                handle_flush_drains_and_surfaces_retained_background_failure,
                store_flush_drains_every_handle_and_aggregates_failures,
                close_and_drop_drain_buffered_events,
                failing_final_drain_on_drop_is_contained,
                close_all_drains_through_the_close_sweep,
                close_surfaces_failing_drain_and_releases_ownership,
                close_turns_a_panicking_drain_into_an_error,
                failed_drain_keeps_order_quiets_timer_and_recovers_once,
                second_write_handle_after_close_routes_events,
                window_and_buffer_are_bounded_in_bytes,
                publish_validates_and_checks_contiguity,
                publish_during_close_is_stored_or_refused,
                append_whose_caller_gives_up_still_completes,
                queued_flushes_share_one_drain_and_sync,
            ]
        );
    };
}
