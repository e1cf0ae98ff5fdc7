//! The Catalog conformance suite on the in-memory reference catalog.

use async_trait::async_trait;
use berth_catalog::memory::MemoryCatalog;
use berth_catalog::Catalog;
use berth_core::TenantId;
use berth_testkit::catalog_conformance::{AuditTamper, AuditTamperer, CatalogFixture};
use std::sync::Arc;

struct MemoryFixture {
    catalog: Arc<MemoryCatalog>,
}

impl CatalogFixture for MemoryFixture {
    fn catalog(&self) -> Arc<dyn Catalog> {
        self.catalog.clone()
    }
}

#[async_trait]
impl AuditTamperer for MemoryFixture {
    async fn tamper(&self, tenant: &TenantId, tamper: AuditTamper) {
        self.catalog.with_audit_entries(tenant, |entries| match tamper {
            AuditTamper::ChangeField { seq } => entries[seq as usize].draft.action = "forged".into(),
            AuditTamper::DeleteEntry { seq } => {
                entries.remove(seq as usize);
            }
            AuditTamper::DeleteLast => {
                entries.pop();
            }
            AuditTamper::Swap { first, second } => entries.swap(first as usize, second as usize),
        });
    }
}

fn memory() -> MemoryFixture {
    MemoryFixture { catalog: Arc::new(MemoryCatalog::new()) }
}

berth_testkit::catalog_conformance!(memory());
berth_testkit::memory_conformance!(memory());
