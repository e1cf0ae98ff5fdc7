//! The `SessionService` conformance suite on the embedded backend: JSONL logs and the
//! SQLite catalog in one temporary data root; `restart` reopens both from disk.

use async_trait::async_trait;
use berth_catalog::Catalog;
use berth_core::TenantId;
use berth_sqlite::{SqliteCatalog, CATALOG_FILE_NAME};
use berth_testkit::catalog_conformance::{AuditTamper, AuditTamperer};
use berth_testkit::service_conformance::EmbeddedService;
use std::path::Path;
use std::sync::Arc;

/// Edits the catalog's stored audit rows with raw SQL, behind the catalog's back.
struct SqliteTamper(SqliteCatalog);

/// The SQL that damages one tenant's audit rows. Tenant ids are `[A-Za-z0-9._~-]`, so
/// quoting them is safe. A swap renumbers the two rows, so each keeps its own content
/// (and its own `seq` inside the entry) at the other's position.
fn tamper_sql(tenant: &TenantId, how: AuditTamper) -> String {
    let rows = format!("audit WHERE tenant = '{tenant}'");
    match how {
        AuditTamper::ChangeField { seq } => format!(
            "UPDATE audit SET entry_json = json_set(entry_json, '$.action', 'forged') \
             WHERE tenant = '{tenant}' AND seq = {seq}"
        ),
        AuditTamper::DeleteEntry { seq } => format!("DELETE FROM {rows} AND seq = {seq}"),
        AuditTamper::DeleteLast => {
            format!("DELETE FROM {rows} AND seq = (SELECT max(seq) FROM {rows})")
        }
        AuditTamper::Swap { first, second } => format!(
            "UPDATE audit SET seq = -1 WHERE tenant = '{tenant}' AND seq = {first}; \
             UPDATE audit SET seq = {first} WHERE tenant = '{tenant}' AND seq = {second}; \
             UPDATE audit SET seq = {second} WHERE tenant = '{tenant}' AND seq = -1"
        ),
    }
}

#[async_trait]
impl AuditTamperer for SqliteTamper {
    async fn tamper(&self, tenant: &TenantId, how: AuditTamper) {
        self.0.execute_for_tests(&tamper_sql(tenant, how)).await.expect("tamper with the audit rows");
    }
}

fn open_sqlite(root: &Path) -> (Arc<dyn Catalog>, Arc<dyn AuditTamperer>) {
    let catalog = SqliteCatalog::open(root.join(CATALOG_FILE_NAME)).expect("open the catalog");
    (Arc::new(catalog.clone()), Arc::new(SqliteTamper(catalog)))
}

berth_testkit::service_conformance!(EmbeddedService::new(open_sqlite));
