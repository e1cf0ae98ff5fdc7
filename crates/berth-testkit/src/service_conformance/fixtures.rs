//! Shared fixtures of the service clauses: principals, ids, policies, canned events,
//! storage snapshots, audit readers and the outcome labels the tables compare.

use berth_catalog::{AuditEntry, Catalog, ListCursor, SessionQuery, SessionRecord};
use berth_core::lifecycle::Status;
use berth_core::limits::PAGE_SIZE_MAX;
use berth_core::{Concurrency, Error, Event, ProjectId, RunId, SessionId, SessionKey, SessionPolicy, TenantId, UserId};
use berth_service::{
    AppendOutcome, AppendRequest, AttachRequest, Attachment, CreateSession, NewEvent, OnBusy, Principal, Role,
    SessionService,
};
use berth_store::Access;
use serde_json::{json, Value};
use std::collections::BTreeMap;

pub const TENANT_A: &str = "tenant-a";
pub const TENANT_B: &str = "tenant-b";
/// A tenant no principal of the matrix belongs to.
pub const TENANT_Z: &str = "tenant-z";
pub const OWNER: &str = "alice";
pub const OTHER_USER: &str = "bob";
pub const PROJECT: &str = "p1";
pub const OTHER_PROJECT: &str = "p2";

pub fn tenant(text: &str) -> TenantId {
    TenantId::parse(text).expect("valid tenant id")
}

pub fn user(text: &str) -> UserId {
    UserId::parse(text).expect("valid user id")
}

pub fn project(text: &str) -> ProjectId {
    ProjectId::parse(text).expect("valid project id")
}

pub fn sid(text: &str) -> SessionId {
    SessionId::parse(text).expect("valid session id")
}

pub fn run(text: &str) -> RunId {
    RunId::parse(text).expect("valid run id")
}

pub fn key(tenant_id: &str, id: &str) -> SessionKey {
    SessionKey::new(tenant(tenant_id), sid(id))
}

/// A `user` principal (`project` narrows what it sees).
pub fn user_principal(tenant_id: &str, user_id: &str, project_id: Option<&str>) -> Principal {
    Principal::user(tenant(tenant_id), user(user_id), project_id.map(project))
}

/// The owner of the sessions most clauses work on: alice in project p1 of tenant-a.
pub fn owner() -> Principal {
    user_principal(TENANT_A, OWNER, Some(PROJECT))
}

pub fn service_principal(tenant_id: &str) -> Principal {
    Principal { tenant: tenant(tenant_id), user: user("svc"), project: None, role: Role::Service }
}

pub fn admin(tenant_id: &str) -> Principal {
    Principal { tenant: tenant(tenant_id), user: user("root"), project: None, role: Role::Admin }
}

/// A serial session policy with explicit TTLs.
pub fn serial(activity_ttl_ms: u64, run_lease_ttl_ms: u64) -> SessionPolicy {
    SessionPolicy { concurrency: Concurrency::Serial, activity_ttl_ms, run_lease_ttl_ms }
}

pub fn parallel(runs_max: u32, activity_ttl_ms: u64, run_lease_ttl_ms: u64) -> SessionPolicy {
    SessionPolicy { concurrency: Concurrency::Parallel { runs_max }, activity_ttl_ms, run_lease_ttl_ms }
}

pub const HOUR_MS: u64 = 60 * 60 * 1000;
pub const DAY_MS: u64 = 24 * HOUR_MS;

/// Creates `id` owned by `principal` (its user and project) with `policy`.
pub async fn create(service: &SessionService, principal: &Principal, id: &str, policy: SessionPolicy) -> SessionRecord {
    service
        .create(principal, CreateSession { id: Some(sid(id)), policy: Some(policy), ..CreateSession::default() })
        .await
        .unwrap_or_else(|error| panic!("create {id}: {error}"))
}

pub fn event(event_type: &str, data: Value) -> NewEvent {
    NewEvent::new(event_type, data)
}

pub fn user_message(text: &str) -> NewEvent {
    event("user/message", json!({ "content": text }))
}

/// Appends `events` as `principal` for `run_id` (if any) at the current end.
pub async fn append(
    service: &SessionService,
    principal: &Principal,
    id: &str,
    run_id: Option<&str>,
    events: Vec<NewEvent>,
) -> AppendOutcome {
    service
        .append(
            principal,
            &sid(id),
            AppendRequest {
                memory: Vec::new(),
                run: run_id.map(run),
                expected_seq: None,
                events,
                idempotency_key: None,
            },
        )
        .await
        .unwrap_or_else(|error| panic!("append to {id}: {error}"))
}

pub fn attach_request(run_id: &str, on_busy: OnBusy) -> AttachRequest {
    AttachRequest { run_id: Some(run(run_id)), expected_revision: None, on_busy }
}

pub async fn attach(service: &SessionService, principal: &Principal, id: &str, run_id: &str) -> Attachment {
    service
        .attach(principal, &sid(id), attach_request(run_id, OnBusy::Reject))
        .await
        .unwrap_or_else(|error| panic!("attach {run_id} to {id}: {error}"))
}

/// The stored record, read from the catalog directly (no expiry side effect).
pub async fn stored(service: &SessionService, tenant_id: &str, id: &str) -> Option<SessionRecord> {
    // The activity of recent appends may be held in memory for a moment; the catalog
    // holds everything once it is written.
    service.flush_activity().await.expect("write held activity");
    service.catalog().get(&key(tenant_id, id)).await.expect("catalog get")
}

/// The stored log, read through a fresh read handle (`None` if there is none).
pub async fn stored_log(service: &SessionService, tenant_id: &str, id: &str) -> Option<Vec<Event>> {
    stored_log_of(service, &key(tenant_id, id)).await
}

async fn stored_log_of(service: &SessionService, key: &SessionKey) -> Option<Vec<Event>> {
    let handle = match service.store().open(key, Access::Read).await {
        Ok(handle) => handle,
        Err(Error::NotFound { .. }) => return None,
        Err(error) => panic!("open {key} for reading: {error}"),
    };
    let events = handle.read(0, None).await.expect("read the stored log");
    handle.close().await.expect("close a read handle");
    Some(events)
}

/// Every record in the catalog (every tenant, every status, blank or not).
pub async fn all_records(catalog: &dyn Catalog) -> Vec<SessionRecord> {
    let mut records = Vec::new();
    for tenant_id in catalog.tenants().await.expect("catalog tenants") {
        let mut query = SessionQuery { include_blank: true, limit: PAGE_SIZE_MAX, ..SessionQuery::tenant(tenant_id) };
        loop {
            let page = catalog.list(&query).await.expect("catalog list");
            let full = page.len() == PAGE_SIZE_MAX;
            query.cursor = page.last().map(ListCursor::of);
            records.extend(page);
            if !full {
                break;
            }
        }
    }
    records
}

/// A tenant's whole audit log.
pub async fn audit_entries(service: &SessionService, tenant_id: &str) -> Vec<AuditEntry> {
    audit_from(service, tenant_id, 0).await
}

/// A tenant's audit log from position `from`.
pub async fn audit_from(service: &SessionService, tenant_id: &str, from: u64) -> Vec<AuditEntry> {
    let mut entries = Vec::new();
    loop {
        let position = from + entries.len() as u64;
        let page = service.catalog().read_audit(&tenant(tenant_id), position, PAGE_SIZE_MAX).await.expect("read audit");
        let full = page.len() == PAGE_SIZE_MAX;
        entries.extend(page);
        if !full {
            return entries;
        }
    }
}

/// The audit entries of `tenant_id` with this action (in order).
pub async fn audited(service: &SessionService, tenant_id: &str, action: &str) -> Vec<AuditEntry> {
    audit_entries(service, tenant_id).await.into_iter().filter(|entry| entry.draft.action == action).collect()
}

/// Everything stored: every catalog record and event log, and every tenant's audit
/// head (the audit log is append-only through the catalog, so an unchanged head means
/// nothing was appended).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub records: BTreeMap<SessionKey, SessionRecord>,
    pub logs: BTreeMap<SessionKey, Option<Vec<Event>>>,
    pub audit_heads: BTreeMap<TenantId, Option<(u64, String)>>,
}

impl Snapshot {
    /// The snapshot without one tenant's audit head.
    pub fn without_audit_of(mut self, tenant_id: &TenantId) -> Snapshot {
        self.audit_heads.remove(tenant_id);
        self
    }
}

pub async fn snapshot(service: &SessionService) -> Snapshot {
    let catalog = service.catalog();
    let mut snapshot = Snapshot { records: BTreeMap::new(), logs: BTreeMap::new(), audit_heads: BTreeMap::new() };
    for record in all_records(catalog.as_ref()).await {
        let key = record.key();
        snapshot.logs.insert(key.clone(), stored_log_of(service, &key).await);
        snapshot.records.insert(key, record);
    }
    for tenant_id in catalog.tenants().await.expect("catalog tenants") {
        let head = catalog.audit_head(&tenant_id).await.expect("audit head");
        snapshot.audit_heads.insert(tenant_id, head);
    }
    snapshot
}

/// An outcome label the tables compare: `ok`, an error code, or
/// `not_found(session)`, `run_not_attached`.
pub fn label<T>(result: &Result<T, Error>) -> String {
    match result {
        Ok(_) => "ok".to_owned(),
        Err(Error::NotFound { what, .. }) => format!("not_found({what})"),
        Err(error) => error.code().to_owned(),
    }
}

/// The status label of a stored session (`gone` when it no longer exists).
pub fn status_label(record: Option<&SessionRecord>) -> &'static str {
    record.map_or("gone", |record| record.status.as_str())
}

/// Panics with every mismatch of a table at once, so one run shows the whole picture.
pub fn assert_no_mismatches(backend: &str, table: &str, mismatches: &[String]) {
    assert!(
        mismatches.is_empty(),
        "{backend}: {} mismatch(es) in {table}:\n  {}",
        mismatches.len(),
        mismatches.join("\n  ")
    );
}

/// Checks that a session's status is `status` in the catalog.
pub async fn assert_status(service: &SessionService, tenant_id: &str, id: &str, status: Status) {
    let record = stored(service, tenant_id, id).await;
    assert_eq!(record.as_ref().map(|record| record.status), Some(status), "status of {tenant_id}/{id}");
}

/// One balanced turn as `NewEvent`s (turn `turn`).
pub fn balanced_turn(turn: u64, text: &str) -> Vec<NewEvent> {
    vec![
        event("turn/start", json!({ "turn": turn })),
        user_message(text),
        event("step/start", json!({ "turn": turn, "step": 0 })),
        event("assistant/message", json!({ "content": format!("re: {text}") })),
        event("step/end", json!({ "turn": turn, "step": 0 })),
        event("turn/end", json!({ "turn": turn, "reason": "completed" })),
    ]
}

/// The data of a stored event as JSON.
pub fn data(event: &Event) -> Value {
    event.data.to_value()
}
