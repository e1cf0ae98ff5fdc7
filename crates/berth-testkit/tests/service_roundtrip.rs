//! R-S13 across backends: export → import → export is byte-identical from memory to
//! embedded, from embedded to memory, and between two embedded data roots — single
//! session JSONL and the ZIP of a session with its forks.

use async_trait::async_trait;
use berth_catalog::Catalog;
use berth_core::TenantId;
use berth_sqlite::{SqliteCatalog, CATALOG_FILE_NAME};
use berth_testkit::catalog_conformance::{AuditTamper, AuditTamperer};
use berth_testkit::service_conformance::export::roundtrip_between;
use berth_testkit::service_conformance::{EmbeddedService, MemoryService};
use std::path::Path;
use std::sync::Arc;

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

#[tokio::test]
async fn memory_to_embedded() {
    roundtrip_between(&MemoryService::new(), &EmbeddedService::new(open_sqlite)).await;
}

#[tokio::test]
async fn embedded_to_memory() {
    roundtrip_between(&EmbeddedService::new(open_sqlite), &MemoryService::new()).await;
}

#[tokio::test]
async fn embedded_to_embedded() {
    roundtrip_between(&EmbeddedService::new(open_sqlite), &EmbeddedService::new(open_sqlite)).await;
}

#[tokio::test]
async fn memory_to_memory() {
    roundtrip_between(&MemoryService::new(), &MemoryService::new()).await;
}
