//! What the session, run, append, export/import, audit and retention commands run
//! against: the service over a data directory (acting as `--tenant`/`--user`/`--role`),
//! or a running `berth serve` through its HTTP API (`--server URL`; the principal comes
//! from the API key, so the principal flags are ignored). `commands.rs` dispatches every
//! such command once, over `SessionTarget`.
//!
//! The operations are the service's, one for one. Where a data directory and a server
//! genuinely differ, the trait says so: the log's storage stat is visible only locally
//! (`log_stat`), a tail polls the directory but streams from a server (`follow`), an
//! import file is split into session or ZIP locally and sent as is to a server, and a
//! server sweeps on its own (`sweep` is `None`).

use super::output::{event_line, print_line};
use super::usage::Usage;
use super::PrincipalArgs;
use async_trait::async_trait;
use berth_api as wire;
use berth_catalog::scoped::Namespace;
use berth_catalog::{AuditEntry, AuditVerification, RetentionPolicy, RunRecord, SessionRecord};
use berth_core::{Event, Result, Revision, RunId, SessionId};
use berth_server::client::Client;
use berth_server::wire as convert;
use berth_service::{
    AppendOutcome, AppendRequest, AttachRequest, Attachment, ClosePolicy, CreateSession, ListRequest, MetadataUpdate,
    Principal, ResumeOutcome, SessionPage, SessionService, SweepReport,
};

/// How often `sessions tail` on a data directory looks for new events (another process
/// appends; there is no notification across processes on local files).
const TAIL_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);

/// Events one per line, flushed (a tail's reader sees each at once): the canonical
/// envelope with its time in RFC 3339 (`output::event_line`), or with `--json` the `/v1`
/// event body (`GET …/events`), the same in both modes.
pub fn print_events(events: &[Event], json: bool) -> Result<()> {
    events.iter().try_for_each(|event| {
        if json {
            let body = serde_json::to_string(&berth_server::wire::EventOf(event))
                .map_err(|error| berth_core::Error::invalid("output", error.to_string()))?;
            print_line(body)
        } else {
            print_line(event_line(event))
        }
    })
}

/// The session operations the CLI runs, against a data directory or a server.
#[async_trait]
pub trait SessionTarget: Send + Sync {
    async fn create(&self, request: CreateSession) -> Result<SessionRecord>;
    async fn list(&self, request: &ListRequest) -> Result<SessionPage>;
    async fn get(&self, id: &SessionId) -> Result<SessionRecord>;
    /// The log's storage stat (change token, event count, size) as JSON, where this
    /// target can see storage (`Some`, `null` for a session without a log); `None`
    /// through a server, which shows metadata only.
    async fn log_stat(&self, record: &SessionRecord) -> Result<Option<serde_json::Value>>;
    async fn read(&self, id: &SessionId, from: u64, limit: Option<u64>) -> Result<Vec<Event>>;
    /// Prints the session's events from `from` on as they are appended, until `until`
    /// (exclusive) or forever.
    async fn follow(&self, id: &SessionId, from: u64, until: Option<u64>, json: bool) -> Result<()>;
    async fn close(&self, id: &SessionId, policy: ClosePolicy, expected: Option<Revision>) -> Result<SessionRecord>;
    async fn fork(&self, id: &SessionId, upto: Option<u64>, new_id: Option<SessionId>) -> Result<SessionRecord>;
    async fn reopen(&self, id: &SessionId) -> Result<SessionRecord>;
    async fn update_metadata(&self, id: &SessionId, update: MetadataUpdate) -> Result<SessionRecord>;
    async fn delete(&self, id: &SessionId, expected: Option<Revision>) -> Result<()>;
    async fn attach(&self, id: &SessionId, request: AttachRequest) -> Result<Attachment>;
    async fn heartbeat(&self, id: &SessionId, run: &RunId) -> Result<RunRecord>;
    async fn detach(
        &self,
        id: &SessionId,
        run: &RunId,
        outcome: &str,
        expected: Option<Revision>,
    ) -> Result<SessionRecord>;
    async fn resume(&self, id: &SessionId, request: AttachRequest) -> Result<ResumeOutcome>;
    async fn append(&self, id: &SessionId, request: AppendRequest) -> Result<AppendOutcome>;
    async fn export(&self, id: &SessionId, zip: bool) -> Result<Vec<u8>>;
    /// Imports an export file (one session's JSONL, or a ZIP of a session and its forks).
    async fn import(&self, bytes: Vec<u8>) -> Result<Vec<SessionRecord>>;
    async fn audit_log(&self, from: u64, limit: usize) -> Result<Vec<AuditEntry>>;
    async fn verify_audit(&self) -> Result<AuditVerification>;
    async fn set_retention(&self, policy: RetentionPolicy) -> Result<()>;
    /// One bounded retention sweep; `None` where the target sweeps on its own (a server).
    async fn sweep(&self, batch: usize) -> Result<Option<SweepReport>>;
    // Scoped memory, in wire types (what `--json` prints).
    async fn memory_put(&self, body: wire::PutMemoryBody) -> Result<wire::MemoryItemBody>;
    async fn memory_get(&self, namespace: &str, key: &str) -> Result<wire::MemoryItemBody>;
    async fn memory_delete(&self, namespace: &str, key: &str, expected: Option<u64>) -> Result<wire::MemoryItemBody>;
    async fn memory_search(&self, body: wire::MemorySearchBody) -> Result<wire::MemoryPageBody>;
    async fn memory_namespaces(&self, params: wire::NamespaceParams) -> Result<wire::NamespacePageBody>;
    async fn memory_forget(&self, prefix: &str) -> Result<wire::ForgetReportBody>;
    async fn memory_usage(&self) -> Result<wire::MemoryUsageBody>;
    /// Admin: the tenant's own memory quota (each limit not given: the default).
    async fn set_memory_quota(&self, body: wire::MemoryQuotaBody) -> Result<wire::MemoryUsageBody>;
    // Usage (model calls and tool time), in wire types.
    async fn session_usage(&self, id: &SessionId) -> Result<wire::SessionUsageBody>;
    /// The caller's totals over event times in `[since, before)` (ms).
    async fn tenant_usage(&self, since: u64, before: u64) -> Result<wire::UsageBody>;
}

/// Where the commands run: the data directory's service or a server's client.
pub enum Targets<'a> {
    Local(&'a SessionService),
    Remote(Client),
}

impl Targets<'_> {
    /// The target as the principal `principal` names (locally), or as the API key's
    /// principal (through a server, which takes the principal from the key alone).
    pub fn acting_as(&self, principal: &PrincipalArgs) -> std::result::Result<Box<dyn SessionTarget + '_>, Usage> {
        match self {
            Targets::Local(service) => Ok(Box::new(Local { service, principal: principal.principal()? })),
            Targets::Remote(client) => Ok(Box::new(client.clone())),
        }
    }
}

fn usage_body(
    usage: berth_catalog::scoped::MemoryUsage,
    quota: berth_catalog::scoped::MemoryQuota,
) -> wire::MemoryUsageBody {
    wire::MemoryUsageBody { items: usage.items, bytes: usage.bytes, quota_items: quota.items, quota_bytes: quota.bytes }
}

/// The service over a data directory, acting as one principal.
struct Local<'a> {
    service: &'a SessionService,
    principal: Principal,
}

#[async_trait]
impl SessionTarget for Local<'_> {
    async fn session_usage(&self, id: &SessionId) -> Result<wire::SessionUsageBody> {
        let usage = self.service.session_usage(&self.principal, id).await?;
        Ok(convert::session_usage(id, &usage))
    }
    async fn tenant_usage(&self, since: u64, before: u64) -> Result<wire::UsageBody> {
        let (since, before) = (berth_core::Timestamp(since), berth_core::Timestamp(before));
        Ok(convert::tenant_usage(&self.service.tenant_usage(&self.principal, since, before).await?))
    }
    async fn memory_put(&self, body: wire::PutMemoryBody) -> Result<wire::MemoryItemBody> {
        let item = self.service.memory_put(&self.principal, convert::memory_put_from(body)?).await?;
        Ok(convert::memory_item(&item))
    }
    async fn memory_get(&self, namespace: &str, key: &str) -> Result<wire::MemoryItemBody> {
        let item = self.service.memory_get(&self.principal, &Namespace::parse(namespace)?, key, false).await?;
        Ok(convert::memory_item(&item))
    }
    async fn memory_delete(&self, namespace: &str, key: &str, expected: Option<u64>) -> Result<wire::MemoryItemBody> {
        let item = self.service.memory_delete(&self.principal, &Namespace::parse(namespace)?, key, expected).await?;
        Ok(convert::memory_item(&item))
    }
    async fn memory_search(&self, body: wire::MemorySearchBody) -> Result<wire::MemoryPageBody> {
        let page = self.service.memory_search(&self.principal, &convert::memory_search_from(body)?).await?;
        Ok(convert::memory_page(&page))
    }
    async fn memory_namespaces(&self, params: wire::NamespaceParams) -> Result<wire::NamespacePageBody> {
        let page = self.service.memory_namespaces(&self.principal, &convert::namespace_query_from(params)?).await?;
        Ok(convert::namespace_page(&page))
    }
    async fn memory_forget(&self, prefix: &str) -> Result<wire::ForgetReportBody> {
        let report = self.service.memory_forget(&self.principal, &Namespace::parse(prefix)?).await?;
        Ok(convert::forget_report(&report))
    }
    async fn memory_usage(&self) -> Result<wire::MemoryUsageBody> {
        let (usage, quota) = self.service.memory_usage(&self.principal).await?;
        Ok(usage_body(usage, quota))
    }
    async fn set_memory_quota(&self, body: wire::MemoryQuotaBody) -> Result<wire::MemoryUsageBody> {
        let quota = berth_catalog::scoped::TenantQuota { items: body.items, bytes: body.bytes };
        let (usage, quota) = self.service.set_memory_quota(&self.principal, quota).await?;
        Ok(usage_body(usage, quota))
    }
    async fn create(&self, request: CreateSession) -> Result<SessionRecord> {
        self.service.create(&self.principal, request).await
    }
    async fn list(&self, request: &ListRequest) -> Result<SessionPage> {
        self.service.list(&self.principal, request).await
    }
    async fn get(&self, id: &SessionId) -> Result<SessionRecord> {
        self.service.get(&self.principal, id).await
    }
    async fn log_stat(&self, record: &SessionRecord) -> Result<Option<serde_json::Value>> {
        let stat = self.service.store().stat(&record.key()).await?;
        Ok(Some(serde_json::json!(stat.map(|stat| serde_json::json!({
            "change_token": stat.change_token,
            "event_count": stat.event_count,
            "size_bytes": stat.size_bytes,
        })))))
    }
    async fn read(&self, id: &SessionId, from: u64, limit: Option<u64>) -> Result<Vec<Event>> {
        self.service.read(&self.principal, id, from, limit).await
    }
    async fn follow(&self, id: &SessionId, from: u64, until: Option<u64>, json: bool) -> Result<()> {
        let mut next = from;
        while until.is_none_or(|until| next < until) {
            let limit = until.map(|until| until - next);
            let events = self.service.read(&self.principal, id, next, limit).await?;
            if events.is_empty() {
                tokio::time::sleep(TAIL_POLL_INTERVAL).await;
                continue;
            }
            next += events.len() as u64;
            print_events(&events, json)?;
        }
        Ok(())
    }
    async fn close(&self, id: &SessionId, policy: ClosePolicy, expected: Option<Revision>) -> Result<SessionRecord> {
        self.service.close(&self.principal, id, policy, expected).await
    }
    async fn fork(&self, id: &SessionId, upto: Option<u64>, new_id: Option<SessionId>) -> Result<SessionRecord> {
        self.service.fork(&self.principal, id, upto, new_id).await
    }
    async fn reopen(&self, id: &SessionId) -> Result<SessionRecord> {
        self.service.reopen(&self.principal, id).await
    }
    async fn update_metadata(&self, id: &SessionId, update: MetadataUpdate) -> Result<SessionRecord> {
        self.service.update_metadata(&self.principal, id, update).await
    }
    async fn delete(&self, id: &SessionId, expected: Option<Revision>) -> Result<()> {
        self.service.delete(&self.principal, id, expected).await.map(|_| ())
    }
    async fn attach(&self, id: &SessionId, request: AttachRequest) -> Result<Attachment> {
        self.service.attach(&self.principal, id, request).await
    }
    async fn heartbeat(&self, id: &SessionId, run: &RunId) -> Result<RunRecord> {
        self.service.heartbeat(&self.principal, id, run).await
    }
    async fn detach(
        &self,
        id: &SessionId,
        run: &RunId,
        outcome: &str,
        expected: Option<Revision>,
    ) -> Result<SessionRecord> {
        self.service.detach(&self.principal, id, run, outcome, expected).await
    }
    async fn resume(&self, id: &SessionId, request: AttachRequest) -> Result<ResumeOutcome> {
        self.service.resume(&self.principal, id, request).await
    }
    async fn append(&self, id: &SessionId, request: AppendRequest) -> Result<AppendOutcome> {
        self.service.append(&self.principal, id, request).await
    }
    async fn export(&self, id: &SessionId, zip: bool) -> Result<Vec<u8>> {
        if zip {
            self.service.export_zip(&self.principal, id).await
        } else {
            self.service.export(&self.principal, id).await
        }
    }
    async fn import(&self, bytes: Vec<u8>) -> Result<Vec<SessionRecord>> {
        if bytes.starts_with(b"PK") {
            self.service.import_zip(&self.principal, &bytes).await
        } else {
            Ok(vec![self.service.import(&self.principal, &bytes).await?])
        }
    }
    async fn audit_log(&self, from: u64, limit: usize) -> Result<Vec<AuditEntry>> {
        self.service.audit_log(&self.principal, from, limit).await
    }
    async fn verify_audit(&self) -> Result<AuditVerification> {
        self.service.verify_audit(&self.principal).await
    }
    async fn set_retention(&self, policy: RetentionPolicy) -> Result<()> {
        self.service.set_retention(&self.principal, policy).await
    }
    async fn sweep(&self, batch: usize) -> Result<Option<SweepReport>> {
        self.service.sweep(batch).await.map(Some)
    }
}

/// A running `berth serve`, through its HTTP API.
#[async_trait]
impl SessionTarget for Client {
    async fn session_usage(&self, id: &SessionId) -> Result<wire::SessionUsageBody> {
        Client::session_usage(self, id).await
    }
    async fn tenant_usage(&self, since: u64, before: u64) -> Result<wire::UsageBody> {
        Client::tenant_usage(self, since, before).await
    }
    async fn memory_put(&self, body: wire::PutMemoryBody) -> Result<wire::MemoryItemBody> {
        Client::memory_put(self, &body).await
    }
    async fn memory_get(&self, namespace: &str, key: &str) -> Result<wire::MemoryItemBody> {
        Client::memory_get(self, namespace, key).await
    }
    async fn memory_delete(&self, namespace: &str, key: &str, expected: Option<u64>) -> Result<wire::MemoryItemBody> {
        Client::memory_delete(self, namespace, key, expected).await
    }
    async fn memory_search(&self, body: wire::MemorySearchBody) -> Result<wire::MemoryPageBody> {
        Client::memory_search(self, &body).await
    }
    async fn memory_namespaces(&self, params: wire::NamespaceParams) -> Result<wire::NamespacePageBody> {
        Client::memory_namespaces(self, &params).await
    }
    async fn memory_forget(&self, prefix: &str) -> Result<wire::ForgetReportBody> {
        Client::memory_forget(self, prefix).await
    }
    async fn memory_usage(&self) -> Result<wire::MemoryUsageBody> {
        Client::memory_usage(self).await
    }
    async fn set_memory_quota(&self, body: wire::MemoryQuotaBody) -> Result<wire::MemoryUsageBody> {
        Client::set_memory_quota(self, &body).await
    }
    async fn create(&self, request: CreateSession) -> Result<SessionRecord> {
        Client::create(self, &request).await
    }
    async fn list(&self, request: &ListRequest) -> Result<SessionPage> {
        Client::list(self, request).await
    }
    async fn get(&self, id: &SessionId) -> Result<SessionRecord> {
        Client::get(self, id).await
    }
    async fn log_stat(&self, _record: &SessionRecord) -> Result<Option<serde_json::Value>> {
        Ok(None)
    }
    async fn read(&self, id: &SessionId, from: u64, limit: Option<u64>) -> Result<Vec<Event>> {
        Client::read(self, id, from, limit).await
    }
    async fn follow(&self, id: &SessionId, from: u64, until: Option<u64>, json: bool) -> Result<()> {
        let mut stream = self.tail(id, Some(from), None).await?;
        let mut next = from;
        while until.is_none_or(|until| next < until) {
            let Some(event) = stream.next_event().await? else { break };
            next = event.seq.0 + 1;
            print_events(std::slice::from_ref(&event), json)?;
        }
        Ok(())
    }
    async fn close(&self, id: &SessionId, policy: ClosePolicy, expected: Option<Revision>) -> Result<SessionRecord> {
        Client::close(self, id, policy, expected).await
    }
    async fn fork(&self, id: &SessionId, upto: Option<u64>, new_id: Option<SessionId>) -> Result<SessionRecord> {
        Client::fork(self, id, upto, new_id.as_ref()).await
    }
    async fn reopen(&self, id: &SessionId) -> Result<SessionRecord> {
        Client::reopen(self, id).await
    }
    async fn update_metadata(&self, id: &SessionId, update: MetadataUpdate) -> Result<SessionRecord> {
        Client::update_metadata(self, id, &update).await
    }
    async fn delete(&self, id: &SessionId, expected: Option<Revision>) -> Result<()> {
        Client::delete(self, id, expected).await
    }
    async fn attach(&self, id: &SessionId, request: AttachRequest) -> Result<Attachment> {
        Client::attach(self, id, &request).await
    }
    async fn heartbeat(&self, id: &SessionId, run: &RunId) -> Result<RunRecord> {
        Client::heartbeat(self, id, run).await
    }
    async fn detach(
        &self,
        id: &SessionId,
        run: &RunId,
        outcome: &str,
        expected: Option<Revision>,
    ) -> Result<SessionRecord> {
        Client::detach(self, id, run, outcome, expected).await
    }
    async fn resume(&self, id: &SessionId, request: AttachRequest) -> Result<ResumeOutcome> {
        Client::resume(self, id, &request).await
    }
    async fn append(&self, id: &SessionId, request: AppendRequest) -> Result<AppendOutcome> {
        Client::append(self, id, &request).await
    }
    async fn export(&self, id: &SessionId, zip: bool) -> Result<Vec<u8>> {
        Client::export(self, id, zip).await
    }
    async fn import(&self, bytes: Vec<u8>) -> Result<Vec<SessionRecord>> {
        Client::import(self, bytes).await
    }
    async fn audit_log(&self, from: u64, limit: usize) -> Result<Vec<AuditEntry>> {
        Client::audit_log(self, from, limit).await
    }
    async fn verify_audit(&self) -> Result<AuditVerification> {
        Client::verify_audit(self).await
    }
    async fn set_retention(&self, policy: RetentionPolicy) -> Result<()> {
        Client::set_retention(self, &policy).await
    }
    async fn sweep(&self, _batch: usize) -> Result<Option<SweepReport>> {
        Ok(None)
    }
}
