//! The Catalog conformance suite on PostgreSQL: every test gets a database of its own
//! (`berth_postgres::testing::TestDatabase`, dropped at the end), on the server named by
//! `BERTH_TEST_PG`. No known divergence: every clause runs.

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

/// The SQL that damages one tenant's audit rows. Tenant ids are `[A-Za-z0-9._~-]`, so
/// quoting them is safe.
fn tamper_sql(tenant: &TenantId, tamper: AuditTamper) -> String {
    let rows = format!("FROM audit WHERE tenant = '{tenant}'");
    match tamper {
        AuditTamper::ChangeField { seq } => format!(
            "UPDATE audit SET entry_json = jsonb_set(entry_json::jsonb, '{{action}}', '\"forged\"')::text \
             WHERE tenant = '{tenant}' AND seq = {seq}"
        ),
        AuditTamper::DeleteEntry { seq } => format!("DELETE {rows} AND seq = {seq}"),
        AuditTamper::DeleteLast => format!("DELETE {rows} AND seq = (SELECT max(seq) {rows})"),
        AuditTamper::Swap { first, second } => format!(
            "UPDATE audit AS a SET entry_json = b.entry_json FROM audit AS b \
             WHERE a.tenant = '{tenant}' AND b.tenant = '{tenant}' \
               AND ((a.seq = {first} AND b.seq = {second}) OR (a.seq = {second} AND b.seq = {first}))"
        ),
    }
}

#[async_trait]
impl AuditTamperer for PostgresFixture {
    async fn tamper(&self, tenant: &TenantId, tamper: AuditTamper) {
        let client = self.database.client().await;
        client.batch_execute(&tamper_sql(tenant, tamper)).await.expect("tamper");
    }
}

async fn postgres() -> PostgresFixture {
    let database = TestDatabase::create().await;
    let options = PostgresOptions { pool_size: 4, ..PostgresOptions::default() };
    let backend = PostgresBackend::connect(&database.url(), options).await.expect("connect");
    PostgresFixture { catalog: backend.catalog(), database }
}

berth_testkit::catalog_conformance!(postgres().await);
