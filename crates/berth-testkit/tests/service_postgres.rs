//! The `SessionService` conformance suite on PostgreSQL (the log and the catalog on one
//! database of its own per test), and R-S13 across backends: export from the embedded
//! backend (JSONL + SQLite) → import into PostgreSQL → export is byte-identical, and
//! back. `restart` builds a new backend instance (new pool, new lease holder identity)
//! over the same database, as a new process would. No known divergence.

mod audit_tamper;

use async_trait::async_trait;
use berth_catalog::Catalog;
use berth_core::TenantId;
use berth_postgres::testing::TestDatabase;
use berth_postgres::{PostgresBackend, PostgresOptions};
use berth_service::SessionService;
use berth_sqlite::{SqliteCatalog, CATALOG_FILE_NAME};
use berth_store::LogStore;
use berth_testkit::catalog_conformance::{AuditTamper, AuditTamperer};
use berth_testkit::service_conformance::export::roundtrip_between;
use berth_testkit::service_conformance::{wait_for_released_writers, EmbeddedService, ServiceBackend, CLOCK_START_MS};
use berth_testkit::FakeClock;
use std::path::Path;
use std::sync::{Arc, Mutex};

struct PostgresService {
    database: TestDatabase,
    clock: Arc<FakeClock>,
    current: Mutex<Option<Arc<SessionService>>>,
}

impl PostgresService {
    async fn new() -> PostgresService {
        let backend = PostgresService {
            database: TestDatabase::with_app_role().await,
            clock: FakeClock::new(CLOCK_START_MS),
            current: Mutex::new(None),
        };
        let first = backend.instance().await;
        *backend.current() = Some(first);
        backend
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Option<Arc<SessionService>>> {
        self.current.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn instance(&self) -> Arc<SessionService> {
        let options = PostgresOptions { pool_size: 4, ..PostgresOptions::default() };
        let backend = PostgresBackend::connect(&self.database.app_url(), options).await.expect("connect");
        let catalog: Arc<dyn Catalog> = Arc::new(backend.catalog());
        Arc::new(SessionService::new(LogStore::new(Arc::new(backend)), catalog, self.clock.clone()))
    }
}

#[async_trait]
impl ServiceBackend for PostgresService {
    fn name(&self) -> &str {
        "postgres"
    }

    fn service(&self) -> Arc<SessionService> {
        self.current().clone().expect("a current instance")
    }

    fn clock(&self) -> Arc<FakeClock> {
        self.clock.clone()
    }

    async fn restart(&self) {
        drop(self.current().take());
        let fresh = self.instance().await;
        wait_for_released_writers(&fresh).await;
        *self.current() = Some(fresh);
    }

    async fn tamper_audit(&self, tenant: &TenantId, how: AuditTamper) {
        let client = self.database.client().await;
        client.batch_execute(&audit_tamper::postgres(tenant, how)).await.expect("tamper with the audit rows");
    }
}

berth_testkit::service_conformance!(PostgresService::new().await);

/// The round trips never tamper with the audit log.
struct NoTamper;

#[async_trait]
impl AuditTamperer for NoTamper {
    async fn tamper(&self, _tenant: &TenantId, _how: AuditTamper) {
        unreachable!("the round-trip tests do not tamper with audit logs")
    }
}

fn open_sqlite(root: &Path) -> (Arc<dyn Catalog>, Arc<dyn AuditTamperer>) {
    let catalog = SqliteCatalog::open(root.join(CATALOG_FILE_NAME)).expect("open the catalog");
    (Arc::new(catalog), Arc::new(NoTamper))
}

mod roundtrip {
    use super::*;

    /// Export from embedded → import to PostgreSQL → export: byte-identical.
    #[tokio::test]
    async fn embedded_to_postgres() {
        roundtrip_between(&EmbeddedService::new(open_sqlite), &PostgresService::new().await).await;
    }

    #[tokio::test]
    async fn postgres_to_embedded() {
        roundtrip_between(&PostgresService::new().await, &EmbeddedService::new(open_sqlite)).await;
    }
}
