//! The LogStore and live-write-path conformance suites on PostgreSQL: a database of its
//! own per test; every `LogStore` instance is a separate `PostgresBackend` (its own pool
//! and lease holder identity, as another process would have) wrapped in `FaultyBackend`.
//!
//! The clauses run with tokio's clock paused, so the backends use
//! `PostgresOptions::own_runtime`: database I/O, client-side timeouts and lease renewal
//! run on the crate's own runtime in real time, and a paused test clock cannot fire them
//! early (nor auto-advance while a query is in flight).
//!
//! Known divergence (the same as the memory backend's, for the same reason):
//! `logstore::torn_tail_is_never_served_and_truncated_by_the_write_path` reports a skip —
//! rows are committed whole by the database, so there is no physical tail to tear and
//! `corrupt_tail` returns `None` (and `logstore::read_before_skips_a_torn_tail` skips for
//! the same reason). Every other clause runs with every hook.

use async_trait::async_trait;
use berth_core::{Event, SessionKey};
use berth_postgres::testing::TestDatabase;
use berth_postgres::{PostgresBackend, PostgresOptions};
use berth_store::LogStore;
use berth_testkit::conformance::{ConformanceBackend, FaultPlan, FaultyBackend};
use std::sync::Arc;

struct PostgresConformance {
    database: TestDatabase,
    faults: Arc<FaultPlan>,
}

impl PostgresConformance {
    async fn new() -> PostgresConformance {
        PostgresConformance { database: TestDatabase::with_app_role().await, faults: FaultPlan::new() }
    }

    async fn instance(&self) -> LogStore {
        let options = PostgresOptions { pool_size: 4, own_runtime: true, ..PostgresOptions::default() };
        let backend = PostgresBackend::connect(&self.database.app_url(), options).await.expect("connect");
        LogStore::new(Arc::new(FaultyBackend::new(backend, self.faults.clone())))
    }
}

#[async_trait]
impl ConformanceBackend for PostgresConformance {
    fn name(&self) -> &str {
        "postgres"
    }

    async fn store(&self) -> LogStore {
        self.instance().await
    }

    async fn reopen(&self) -> Option<LogStore> {
        Some(self.instance().await)
    }

    async fn corrupt_tail(&self, _key: &SessionKey) -> Option<()> {
        None
    }

    /// Inserts the row and moves the head's next seq past it, as a newer berth's append
    /// would have.
    async fn inject_stored_event(&self, key: &SessionKey, event: Event) -> Option<()> {
        let client = self.database.client().await;
        let seq = event.seq.get() as i64;
        let line = event.to_canonical_json();
        client
            .execute(
                "INSERT INTO events (tenant, session_id, seq, epoch, event_type, ignorable, line) \
                 SELECT tenant, session_id, $3, epoch, $4, $5, $6 FROM session_heads \
                 WHERE tenant = $1 AND session_id = $2",
                &[&key.tenant.as_str(), &key.id.as_str(), &seq, &event.event_type.as_str(), &event.ignorable, &line],
            )
            .await
            .expect("inject event");
        client
            .execute(
                "UPDATE session_heads SET next_seq = $3::bigint + 1 WHERE tenant = $1 AND session_id = $2",
                &[&key.tenant.as_str(), &key.id.as_str(), &seq],
            )
            .await
            .expect("move next seq");
        Some(())
    }

    fn faults(&self) -> Arc<FaultPlan> {
        self.faults.clone()
    }

    /// Overwrites the row's line with text that is not an event.
    async fn damage_record(&self, key: &SessionKey, seq: u64) -> Option<()> {
        let client = self.database.client().await;
        let updated = client
            .execute(
                "UPDATE events SET line = 'damaged' WHERE tenant = $1 AND session_id = $2 AND seq = $3",
                &[&key.tenant.as_str(), &key.id.as_str(), &(seq as i64)],
            )
            .await
            .expect("damage a row");
        assert_eq!(updated, 1, "the row exists");
        Some(())
    }
}

berth_testkit::logstore_conformance!(PostgresConformance::new().await);
berth_testkit::live_write_conformance!(PostgresConformance::new().await);
