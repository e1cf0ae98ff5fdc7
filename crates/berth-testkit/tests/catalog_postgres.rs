//! The Catalog conformance suite on PostgreSQL: every test gets a database of its own
//! (`berth_postgres::testing::TestDatabase`, dropped at the end), on the server named by
//! `BERTH_TEST_PG`. No known divergence: every clause runs.

mod audit_tamper;

use async_trait::async_trait;
use berth_catalog::Catalog;
use berth_core::TenantId;
use berth_postgres::testing::TestDatabase;
use berth_postgres::{PostgresBackend, PostgresCatalog, PostgresOptions};
use berth_testkit::catalog_conformance::{AuditTamper, AuditTamperer, CatalogFixture};
use std::sync::Arc;

struct PostgresFixture {
    catalog: PostgresCatalog,
    database: TestDatabase,
}

impl CatalogFixture for PostgresFixture {
    fn catalog(&self) -> Arc<dyn Catalog> {
        Arc::new(self.catalog.clone())
    }
}

#[async_trait]
impl AuditTamperer for PostgresFixture {
    async fn tamper(&self, tenant: &TenantId, tamper: AuditTamper) {
        let client = self.database.client().await;
        client.batch_execute(&audit_tamper::postgres(tenant, tamper)).await.expect("tamper");
    }
}

async fn postgres() -> PostgresFixture {
    let database = TestDatabase::with_app_role().await;
    let options = PostgresOptions { pool_size: 4, ..PostgresOptions::default() };
    let backend = PostgresBackend::connect(&database.app_url(), options).await.expect("connect");
    PostgresFixture { catalog: backend.catalog(), database }
}

berth_testkit::catalog_conformance!(postgres().await);
berth_testkit::memory_conformance!(postgres().await);
