//! Scoped memory on PostgreSQL (placeholder until the implementation lands: every call
//! reports the store unavailable; no conformance test runs against it yet).

use crate::PostgresCatalog;
use async_trait::async_trait;
use berth_catalog::audit::AuditEntry;
use berth_catalog::scoped::{ForgetAudit, ForgetOutcome, MemoryItem, MemoryPut, MemoryQuota, MemorySearch};
use berth_catalog::scoped::{MemoryStore, MemoryUsage, Namespace, NamespaceQuery};
use berth_core::{Error, Result, SessionId, TenantId, Timestamp};

fn missing<T>() -> Result<T> {
    Err(Error::Unavailable { reason: "scoped memory is not implemented on PostgreSQL yet".into() })
}

#[async_trait]
impl MemoryStore for PostgresCatalog {
    async fn memory_put(&self, _: &TenantId, _: &MemoryPut, _: Timestamp, _: &MemoryQuota) -> Result<MemoryItem> {
        missing()
    }
    async fn memory_get(
        &self,
        _: &TenantId,
        _: &Namespace,
        _: &str,
        _: Timestamp,
        _: bool,
    ) -> Result<Option<MemoryItem>> {
        missing()
    }
    async fn memory_delete(
        &self,
        _: &TenantId,
        _: &Namespace,
        _: &str,
        _: Option<u64>,
        _: Timestamp,
    ) -> Result<MemoryItem> {
        missing()
    }
    async fn memory_search(&self, _: &TenantId, _: &MemorySearch, _: Timestamp) -> Result<Vec<MemoryItem>> {
        missing()
    }
    async fn memory_namespaces(&self, _: &TenantId, _: &NamespaceQuery, _: Timestamp) -> Result<Vec<Namespace>> {
        missing()
    }
    async fn memory_scan(
        &self,
        _: &TenantId,
        _: Option<(&Namespace, &str)>,
        _: usize,
        _: Timestamp,
    ) -> Result<Vec<MemoryItem>> {
        missing()
    }
    async fn memory_forget(&self, _: &TenantId, _: &Namespace, _: ForgetAudit) -> Result<(ForgetOutcome, AuditEntry)> {
        missing()
    }
    async fn memory_import(&self, _: &TenantId, _: &MemoryItem, _: &MemoryQuota) -> Result<()> {
        missing()
    }
    async fn memory_usage(&self, _: &TenantId) -> Result<MemoryUsage> {
        Ok(MemoryUsage::default())
    }
    async fn memory_bound_count(&self, _: &TenantId, _: &SessionId) -> Result<u64> {
        Ok(0)
    }
    async fn memory_remove_expired(&self, _: Timestamp, _: usize) -> Result<u64> {
        Ok(0)
    }
    async fn memory_remove_stale(&self, _: &TenantId, _: Timestamp, _: usize) -> Result<u64> {
        Ok(0)
    }
}
