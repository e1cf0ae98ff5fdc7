//! The server's edge: conversions between the wire types of `berth-api` and the
//! service's and catalog's types, both ways (the server answers with wire types; the
//! client behind `berth --server` turns them back into the types its callers use).

use berth_api as wire;
use berth_catalog::{AuditDraft, AuditEntry, AuditVerification, RetentionPolicy, RunRecord, RunStatus, SessionRecord};
use berth_core::lifecycle::Status;
use berth_core::{Concurrency, Event, ParentRef, Revision, Scope, SessionHeader, SessionPolicy};
use berth_service::{
    AppendOutcome, AppendRequest, AttachRequest, Attachment, ClosePolicy, CreateSession, ForkSession, MetadataUpdate,
    NewEvent, OnBusy, Principal, ResumeOutcome, Role, SessionPage,
};

// ----- sessions ------------------------------------------------------------------------

pub fn status(status: Status) -> wire::SessionStatus {
    match status {
        Status::Creating => wire::SessionStatus::Creating,
        Status::Active => wire::SessionStatus::Active,
        Status::Idle => wire::SessionStatus::Idle,
        Status::Closed => wire::SessionStatus::Closed,
        Status::Expired => wire::SessionStatus::Expired,
    }
}

pub fn status_from(status: wire::SessionStatus) -> Status {
    match status {
        wire::SessionStatus::Creating => Status::Creating,
        wire::SessionStatus::Active => Status::Active,
        wire::SessionStatus::Idle => Status::Idle,
        wire::SessionStatus::Closed => Status::Closed,
        wire::SessionStatus::Expired => Status::Expired,
    }
}

pub fn policy(policy: &SessionPolicy) -> wire::PolicyBody {
    wire::PolicyBody {
        concurrency: match policy.concurrency {
            Concurrency::Serial => wire::ConcurrencyBody::Serial {},
            Concurrency::Parallel { runs_max } => wire::ConcurrencyBody::Parallel { runs_max },
        },
        activity_ttl_ms: policy.activity_ttl_ms,
        run_lease_ttl_ms: policy.run_lease_ttl_ms,
    }
}

pub fn policy_from(policy: wire::PolicyBody) -> SessionPolicy {
    SessionPolicy {
        concurrency: match policy.concurrency {
            wire::ConcurrencyBody::Serial {} => Concurrency::Serial,
            wire::ConcurrencyBody::Parallel { runs_max } => Concurrency::Parallel { runs_max },
        },
        activity_ttl_ms: policy.activity_ttl_ms,
        run_lease_ttl_ms: policy.run_lease_ttl_ms,
    }
}

pub fn header(header: &SessionHeader) -> wire::HeaderBody {
    wire::HeaderBody {
        version: header.version,
        id: header.id.clone(),
        scope: wire::ScopeBody {
            tenant: header.scope.tenant.clone(),
            user: header.scope.user.clone(),
            project: header.scope.project.clone(),
        },
        created_at: header.created_at,
        parent: header
            .parent
            .as_ref()
            .map(|parent| wire::ParentBody { session: parent.session.clone(), cut_seq: parent.cut_seq }),
        origin: header.origin.clone(),
        delegation_depth: header.delegation_depth,
        policy: policy(&header.policy),
    }
}

pub fn header_from(header: wire::HeaderBody) -> SessionHeader {
    SessionHeader {
        version: header.version,
        id: header.id,
        scope: Scope { tenant: header.scope.tenant, user: header.scope.user, project: header.scope.project },
        created_at: header.created_at,
        parent: header.parent.map(|parent| ParentRef { session: parent.session, cut_seq: parent.cut_seq }),
        origin: header.origin,
        delegation_depth: header.delegation_depth,
        policy: policy_from(header.policy),
    }
}

pub fn session(record: &SessionRecord) -> wire::SessionBody {
    wire::SessionBody {
        header: header(&record.header),
        status: status(record.status),
        lease_until: record.lease_until,
        last_activity: record.last_activity,
        revision: record.revision,
        title: record.title.clone(),
        labels: record.labels.clone(),
        event_count: record.event_count,
        blank: record.blank,
        runs: record.runs.iter().map(run).collect(),
        status_changed_at: record.status_changed_at,
    }
}

pub fn session_from(body: wire::SessionBody) -> SessionRecord {
    SessionRecord {
        header: header_from(body.header),
        status: status_from(body.status),
        lease_until: body.lease_until,
        last_activity: body.last_activity,
        revision: body.revision,
        title: body.title,
        labels: body.labels,
        event_count: body.event_count,
        blank: body.blank,
        runs: body.runs.into_iter().map(run_from).collect(),
        status_changed_at: body.status_changed_at,
        resume_mark: Default::default(),
        repair: Default::default(),
        creator: None,
    }
}

pub fn session_page(page: &SessionPage) -> wire::SessionPage {
    wire::SessionPage { items: page.items.iter().map(session).collect(), next_cursor: page.next_cursor.clone() }
}

pub fn session_page_from(page: wire::SessionPage) -> SessionPage {
    SessionPage { items: page.items.into_iter().map(session_from).collect(), next_cursor: page.next_cursor }
}

pub fn create_from(body: wire::CreateSessionBody) -> CreateSession {
    CreateSession {
        id: body.id,
        user: body.user,
        project: body.project,
        policy: body.policy.map(policy_from),
        title: body.title,
        labels: body.labels,
        origin: body.origin,
        delegation_depth: body.delegation_depth,
    }
}

pub fn fork_from(body: wire::ForkBody) -> ForkSession {
    ForkSession {
        upto_seq: body.upto_seq,
        new_id: body.new_id,
        user: body.user,
        policy: body.policy.map(policy_from),
        title: body.title,
        labels: body.labels,
    }
}

pub fn fork(request: &ForkSession) -> wire::ForkBody {
    wire::ForkBody {
        upto_seq: request.upto_seq,
        new_id: request.new_id.clone(),
        user: request.user.clone(),
        policy: request.policy.as_ref().map(policy),
        title: request.title.clone(),
        labels: request.labels.clone(),
    }
}

pub fn create(request: &CreateSession) -> wire::CreateSessionBody {
    wire::CreateSessionBody {
        id: request.id.clone(),
        user: request.user.clone(),
        project: request.project.clone(),
        policy: request.policy.as_ref().map(policy),
        title: request.title.clone(),
        labels: request.labels.clone(),
        origin: request.origin.clone(),
        delegation_depth: request.delegation_depth,
    }
}

pub fn update_from(body: wire::UpdateSessionBody) -> MetadataUpdate {
    MetadataUpdate { title: body.title, labels: body.labels, expected_revision: body.expected_revision.map(Revision) }
}

pub fn update(update: &MetadataUpdate) -> wire::UpdateSessionBody {
    wire::UpdateSessionBody {
        title: update.title.clone(),
        labels: update.labels.clone(),
        expected_revision: update.expected_revision.map(|revision| revision.0),
    }
}

pub fn close_policy_from(policy: wire::ClosePolicy) -> ClosePolicy {
    match policy {
        wire::ClosePolicy::Refuse => ClosePolicy::Refuse,
        wire::ClosePolicy::CancelRuns => ClosePolicy::CancelRuns,
    }
}

pub fn close_policy(policy: ClosePolicy) -> wire::ClosePolicy {
    match policy {
        ClosePolicy::Refuse => wire::ClosePolicy::Refuse,
        ClosePolicy::CancelRuns => wire::ClosePolicy::CancelRuns,
    }
}

// ----- events --------------------------------------------------------------------------

/// An event as its wire body, owned (inside other bodies: a resume's outcome). `EventOf`
/// writes the same JSON without the copy.
pub fn event(event: &Event) -> wire::EventBody {
    wire::EventBody {
        seq: event.seq,
        event_type: event.event_type.clone(),
        time: event.time,
        run: event.run.clone(),
        data: event.data.clone(),
        ignorable: event.ignorable,
        idempotency_key: event.idempotency.as_ref().map(|mark| mark.key.as_str().to_owned()),
    }
}

/// A `wire::EventPage` of the store's events, written straight from them (`EventOf`
/// each): the same JSON, field for field, as the `EventPage` of their `EventBody`s (a
/// test holds them equal), without first copying every event's data — a page of a
/// long session is megabytes of data, read most often whole (a drop-in's first
/// `get_items`).
pub struct EventPageOf<'a> {
    pub events: &'a [Event],
    pub next_seq: u64,
    pub first_seq: u64,
}

impl EventPageOf<'_> {
    /// About the bytes its JSON takes, for the answer's buffer: each event's data and
    /// room for its other fields.
    pub fn size_hint(&self) -> usize {
        64 + self.events.iter().map(|event| event.data.as_str().len() + 256).sum::<usize>()
    }
}

impl serde::Serialize for EventPageOf<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut page = serializer.serialize_struct("EventPage", 3)?;
        page.serialize_field("events", &EventsOf(self.events))?;
        page.serialize_field("next_seq", &self.next_seq)?;
        page.serialize_field("first_seq", &self.first_seq)?;
        page.end()
    }
}

struct EventsOf<'a>(&'a [Event]);

impl serde::Serialize for EventsOf<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(EventOf))
    }
}

/// An event as its wire body, `wire::EventBody`, writes it (its field names, order and
/// omissions), borrowed: what a page, the live tail and `berth … --json` send.
pub struct EventOf<'a>(pub &'a Event);

impl serde::Serialize for EventOf<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let event = self.0;
        let mut body = serializer.serialize_struct("EventBody", 7)?;
        body.serialize_field("seq", &event.seq)?;
        body.serialize_field("type", &event.event_type)?;
        body.serialize_field("time", &event.time)?;
        match &event.run {
            Some(run) => body.serialize_field("run", run)?,
            None => body.skip_field("run")?,
        }
        body.serialize_field("data", &event.data)?;
        if event.ignorable {
            body.serialize_field("ignorable", &true)?;
        } else {
            body.skip_field("ignorable")?;
        }
        match &event.idempotency {
            Some(mark) => body.serialize_field("idempotency_key", mark.key.as_str())?,
            None => body.skip_field("idempotency_key")?,
        }
        body.end()
    }
}

pub fn event_from(body: wire::EventBody) -> Event {
    Event {
        seq: body.seq,
        event_type: body.event_type,
        time: body.time,
        run: body.run,
        data: body.data,
        ignorable: body.ignorable,
        // The wire carries the key only; the batch's length and digest stay in the log.
        idempotency: body
            .idempotency_key
            .and_then(|key| berth_core::IdempotencyKey::parse(&key).ok())
            .map(|key| Box::new(berth_core::IdempotencyMark { key, events: None, digest: None })),
    }
}

pub fn append_from(body: wire::AppendBody) -> berth_core::Result<AppendRequest> {
    let memory = body.memory.into_iter().map(memory_put_from).collect::<berth_core::Result<Vec<_>>>()?;
    Ok(AppendRequest {
        memory,
        run: body.run,
        expected_seq: body.expected_seq,
        idempotency_key: body.idempotency_key,
        events: body
            .events
            .into_iter()
            .map(|event| NewEvent {
                event_type: event.event_type,
                data: event.data,
                time: event.time,
                ignorable: event.ignorable,
            })
            .collect(),
    })
}

pub fn memory_put(put: &berth_catalog::scoped::MemoryPut) -> wire::PutMemoryBody {
    wire::PutMemoryBody {
        namespace: put.namespace.as_str().to_owned(),
        key: put.key.clone(),
        value: put.value.clone(),
        expected_revision: put.expected_revision,
        ttl_ms: put.ttl_ms,
        bound_to: put.bound_to.clone(),
    }
}

pub fn append(request: &AppendRequest) -> wire::AppendBody {
    wire::AppendBody {
        run: request.run.clone(),
        expected_seq: request.expected_seq,
        idempotency_key: request.idempotency_key.clone(),
        memory: request.memory.iter().map(memory_put).collect(),
        events: request
            .events
            .iter()
            .map(|event| wire::NewEventBody {
                event_type: event.event_type.clone(),
                data: event.data.clone(),
                time: event.time,
                ignorable: event.ignorable,
            })
            .collect(),
    }
}

pub fn append_outcome(outcome: &AppendOutcome) -> wire::AppendOutcomeBody {
    wire::AppendOutcomeBody { first_seq: outcome.first_seq, next_seq: outcome.next_seq, duplicate: outcome.duplicate }
}

pub fn append_outcome_from(body: wire::AppendOutcomeBody) -> AppendOutcome {
    AppendOutcome { first_seq: body.first_seq, next_seq: body.next_seq, duplicate: body.duplicate }
}

// ----- runs ----------------------------------------------------------------------------

pub fn run(run: &RunRecord) -> wire::RunBody {
    wire::RunBody {
        run_id: run.run_id.clone(),
        attached_by: run.attached_by.clone(),
        attached_at: run.attached_at,
        lease_until: run.lease_until,
        status: match run.status {
            RunStatus::Attached => wire::RunStatus::Attached,
            RunStatus::Detached => wire::RunStatus::Detached,
            RunStatus::Abandoned => wire::RunStatus::Abandoned,
            RunStatus::Interrupted => wire::RunStatus::Interrupted,
            RunStatus::Cancelled => wire::RunStatus::Cancelled,
        },
    }
}

pub fn run_from(body: wire::RunBody) -> RunRecord {
    RunRecord {
        run_id: body.run_id,
        attached_by: body.attached_by,
        attached_at: body.attached_at,
        lease_until: body.lease_until,
        status: match body.status {
            wire::RunStatus::Attached => RunStatus::Attached,
            wire::RunStatus::Detached => RunStatus::Detached,
            wire::RunStatus::Abandoned => RunStatus::Abandoned,
            wire::RunStatus::Interrupted => RunStatus::Interrupted,
            wire::RunStatus::Cancelled => RunStatus::Cancelled,
        },
    }
}

pub fn attach_from(body: wire::AttachBody) -> AttachRequest {
    AttachRequest {
        run_id: body.run_id,
        expected_revision: body.expected_revision.map(Revision),
        on_busy: match body.on_busy {
            wire::OnBusy::Reject => OnBusy::Reject,
            wire::OnBusy::Interrupt => OnBusy::Interrupt,
        },
    }
}

pub fn attach(request: &AttachRequest) -> wire::AttachBody {
    wire::AttachBody {
        run_id: request.run_id.clone(),
        expected_revision: request.expected_revision.map(|revision| revision.0),
        on_busy: match request.on_busy {
            OnBusy::Reject => wire::OnBusy::Reject,
            OnBusy::Interrupt => wire::OnBusy::Interrupt,
        },
    }
}

pub fn attachment(attachment: &Attachment) -> wire::AttachmentBody {
    wire::AttachmentBody {
        run: run(&attachment.run),
        revision: attachment.revision,
        session_lease_until: attachment.session_lease_until,
        displaced: attachment.displaced.iter().map(run).collect(),
    }
}

pub fn attachment_from(body: wire::AttachmentBody) -> Attachment {
    Attachment {
        run: run_from(body.run),
        revision: body.revision,
        session_lease_until: body.session_lease_until,
        displaced: body.displaced.into_iter().map(run_from).collect(),
    }
}

pub fn resume_outcome(outcome: &ResumeOutcome) -> wire::ResumeOutcomeBody {
    wire::ResumeOutcomeBody {
        attachment: attachment(&outcome.attachment),
        repaired: outcome.repaired.iter().map(event).collect(),
        checkpoint: outcome.checkpoint.as_ref().map(event),
        next_seq: outcome.next_seq,
    }
}

pub fn resume_outcome_from(body: wire::ResumeOutcomeBody) -> ResumeOutcome {
    ResumeOutcome {
        attachment: attachment_from(body.attachment),
        repaired: body.repaired.into_iter().map(event_from).collect(),
        checkpoint: body.checkpoint.map(event_from),
        next_seq: body.next_seq,
    }
}

// ----- audit, retention, principals ---------------------------------------------------

pub fn audit_entry(entry: &AuditEntry) -> wire::AuditEntryBody {
    let draft = &entry.draft;
    wire::AuditEntryBody {
        seq: entry.seq,
        tenant: draft.tenant.clone(),
        time: draft.time,
        actor: draft.actor.clone(),
        action: draft.action.clone(),
        session: draft.session.clone(),
        revision: draft.revision,
        outcome: draft.outcome.clone(),
        details: draft.details.clone(),
        prev_hash: entry.prev_hash.clone(),
        hash: entry.hash.clone(),
    }
}

pub fn audit_entry_from(body: wire::AuditEntryBody) -> AuditEntry {
    AuditEntry {
        seq: body.seq,
        draft: AuditDraft {
            tenant: body.tenant,
            time: body.time,
            actor: body.actor,
            action: body.action,
            session: body.session,
            revision: body.revision,
            outcome: body.outcome,
            details: body.details,
        },
        prev_hash: body.prev_hash,
        hash: body.hash,
    }
}

pub fn audit_verification(verdict: &AuditVerification) -> wire::AuditVerificationBody {
    wire::AuditVerificationBody {
        entries: verdict.entries,
        broken_at: verdict.broken_at,
        reason: verdict.reason.clone(),
    }
}

pub fn audit_verification_from(body: wire::AuditVerificationBody) -> AuditVerification {
    AuditVerification { entries: body.entries, broken_at: body.broken_at, reason: body.reason }
}

pub fn retention_from(body: wire::RetentionPolicyBody) -> RetentionPolicy {
    RetentionPolicy {
        idle_ttl_ms: body.idle_ttl_ms,
        max_age_ms: body.max_age_ms,
        delete_terminal_after_ms: body.delete_terminal_after_ms,
        memory_max_age_ms: body.memory_max_age_ms,
    }
}

pub fn retention(policy: &RetentionPolicy) -> wire::RetentionPolicyBody {
    wire::RetentionPolicyBody {
        idle_ttl_ms: policy.idle_ttl_ms,
        max_age_ms: policy.max_age_ms,
        delete_terminal_after_ms: policy.delete_terminal_after_ms,
        memory_max_age_ms: policy.memory_max_age_ms,
    }
}

pub fn principal(principal: &Principal) -> wire::PrincipalBody {
    wire::PrincipalBody {
        tenant: principal.tenant.clone(),
        user: principal.user.clone(),
        project: principal.project.clone(),
        role: match principal.role {
            Role::User => wire::Role::User,
            Role::Service => wire::Role::Service,
            Role::Admin => wire::Role::Admin,
        },
    }
}

pub fn principal_from(body: wire::PrincipalBody) -> Principal {
    Principal {
        tenant: body.tenant,
        user: body.user,
        project: body.project,
        role: match body.role {
            wire::Role::User => Role::User,
            wire::Role::Service => Role::Service,
            wire::Role::Admin => Role::Admin,
        },
    }
}

pub fn session_counts(counts: &[berth_service::StatusCount], cap: usize) -> wire::SessionCountsBody {
    wire::SessionCountsBody {
        counts: counts
            .iter()
            .map(|count| wire::StatusCountBody { status: status(count.status), count: count.count, more: count.more })
            .collect(),
        cap: cap as u64,
    }
}

// ----- scoped memory -------------------------------------------------------------------------

pub fn memory_item(item: &berth_catalog::scoped::MemoryItem) -> wire::MemoryItemBody {
    wire::MemoryItemBody {
        namespace: item.namespace.as_str().to_owned(),
        key: item.key.clone(),
        value: item.value.clone(),
        revision: item.revision,
        created_at: item.created_at,
        updated_at: item.updated_at,
        expires_at: item.expires_at,
        ttl_ms: item.ttl_ms,
        bound_to: item.bound_to.clone(),
    }
}

/// A search body as the service's search, every part checked (422 on a bad one).
pub fn memory_search_from(body: wire::MemorySearchBody) -> berth_core::Result<berth_catalog::scoped::MemorySearch> {
    use berth_catalog::scoped::TextQuery;
    use berth_catalog::scoped::{Condition, Filter, FilterOp, MemorySearch, Namespace, SearchCursor, SearchOrder};
    let conditions = body
        .filter
        .into_iter()
        .map(|condition| Condition {
            field: condition.field,
            op: match condition.op {
                wire::FilterOpBody::Eq => FilterOp::Eq,
                wire::FilterOpBody::Ne => FilterOp::Ne,
                wire::FilterOpBody::Gt => FilterOp::Gt,
                wire::FilterOpBody::Gte => FilterOp::Gte,
                wire::FilterOpBody::Lt => FilterOp::Lt,
                wire::FilterOpBody::Lte => FilterOp::Lte,
                wire::FilterOpBody::In => FilterOp::In,
            },
            operand: condition.value,
        })
        .collect();
    let order = match body.order {
        wire::MemoryOrder::Key => SearchOrder::Key,
        wire::MemoryOrder::UpdatedAt => SearchOrder::UpdatedAt,
        wire::MemoryOrder::Relevance => SearchOrder::Relevance,
    };
    let search = MemorySearch {
        prefix: Namespace::parse(&body.prefix)?,
        filter: Filter::new(conditions)?,
        query: body.query.as_deref().map(TextQuery::parse).transpose()?,
        order,
        cursor: body.cursor.as_deref().map(SearchCursor::decode).transpose()?,
        limit: body
            .limit
            .map_or(berth_core::limits::PAGE_SIZE_DEFAULT, |limit| usize::try_from(limit).unwrap_or(usize::MAX)),
    };
    search.check()?;
    Ok(search)
}

pub fn memory_put_from(body: wire::PutMemoryBody) -> berth_core::Result<berth_catalog::scoped::MemoryPut> {
    Ok(berth_catalog::scoped::MemoryPut {
        namespace: berth_catalog::scoped::Namespace::parse(&body.namespace)?,
        key: body.key,
        value: body.value,
        expected_revision: body.expected_revision,
        ttl_ms: body.ttl_ms,
        bound_to: body.bound_to,
    })
}

pub fn memory_page(page: &berth_service::MemoryPage) -> wire::MemoryPageBody {
    wire::MemoryPageBody {
        items: page.items.iter().map(memory_item).collect(),
        next_cursor: page.next_cursor.as_ref().map(|cursor| cursor.encode()),
    }
}

pub fn namespace_query_from(
    params: wire::NamespaceParams,
) -> berth_core::Result<berth_catalog::scoped::NamespaceQuery> {
    let size = |value: u64| usize::try_from(value).unwrap_or(usize::MAX);
    Ok(berth_catalog::scoped::NamespaceQuery {
        prefix: berth_catalog::scoped::Namespace::parse(&params.prefix)?,
        max_depth: params.max_depth.map(size),
        cursor: params.cursor,
        limit: params.limit.map_or(berth_core::limits::PAGE_SIZE_DEFAULT, size),
    })
}

pub fn namespace_page(page: &berth_service::NamespacePage) -> wire::NamespacePageBody {
    wire::NamespacePageBody {
        namespaces: page.namespaces.iter().map(|ns| ns.as_str().to_owned()).collect(),
        next_cursor: page.next_cursor.clone(),
    }
}

pub fn forget_report(report: &berth_service::ForgetReport) -> wire::ForgetReportBody {
    wire::ForgetReportBody {
        prefix: report.prefix.as_str().to_owned(),
        items: report.outcome.items,
        bytes: report.outcome.bytes,
        audit_seq: report.audit_seq,
        sessions_holding_values: report.sessions_holding_values.clone(),
    }
}

// ----- usage ------------------------------------------------------------------------------

fn model_usage(usage: &berth_service::ModelUsage) -> wire::ModelUsageBody {
    let totals = &usage.totals;
    wire::ModelUsageBody {
        provider: usage.provider.clone(),
        model: usage.model.clone(),
        calls: totals.calls,
        errors: totals.errors,
        input_tokens: totals.input_tokens,
        output_tokens: totals.output_tokens,
        cached_tokens: totals.cached_tokens,
        model_ms: totals.model_ms,
    }
}

pub fn session_usage(id: &berth_core::SessionId, usage: &berth_service::SessionUsage) -> wire::SessionUsageBody {
    let totals = &usage.totals;
    wire::SessionUsageBody {
        session: id.clone(),
        calls: totals.calls,
        errors: totals.errors,
        input_tokens: totals.input_tokens,
        output_tokens: totals.output_tokens,
        cached_tokens: totals.cached_tokens,
        model_ms: totals.model_ms,
        tool_calls: usage.tool_calls,
        tool_ms: usage.tool_ms,
        by_model: usage.by_model.iter().map(model_usage).collect(),
    }
}

pub fn tenant_usage(usage: &berth_service::TenantUsage) -> wire::UsageBody {
    let totals = &usage.usage.totals;
    wire::UsageBody {
        since: usage.since,
        before: usage.before,
        sessions: usage.sessions,
        calls: totals.calls,
        errors: totals.errors,
        input_tokens: totals.input_tokens,
        output_tokens: totals.output_tokens,
        cached_tokens: totals.cached_tokens,
        model_ms: totals.model_ms,
        tool_calls: usage.usage.tool_calls,
        tool_ms: usage.usage.tool_ms,
        by_model: usage.usage.by_model.iter().map(model_usage).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::{EventType, IdempotencyKey, IdempotencyMark, JsonText, RunId, Seq, Timestamp};

    fn event(seq: u64, run: bool, ignorable: bool, key: bool, data: &str) -> Event {
        Event {
            seq: Seq(seq),
            event_type: EventType::parse(if ignorable { "app/note" } else { "user/message" }).expect("type"),
            time: Timestamp(1_796_000_000_000 + seq),
            run: run.then(|| RunId::parse("01a24075-bbcd-761e-9f6a-3856a84a9273").expect("run")),
            data: JsonText::parse(data).expect("data"),
            ignorable,
            idempotency: key.then(|| {
                let key = IdempotencyKey::parse("batch-7:x+y/z=").expect("key");
                Box::new(IdempotencyMark { key, events: Some(3), digest: None })
            }),
        }
    }

    /// A page written from the events is byte for byte the page of their `EventBody`s,
    /// with every optional field present and absent, and data that must come back exact.
    #[test]
    fn a_page_written_from_the_events_is_the_page_of_their_bodies() {
        let datas = [
            "null",
            r#"{"content":"héllo \"quoted\" \u0001 ✓","n":123456789012345678901234567890,"f":1.50}"#,
            r#"[1,{"a":[]},"x"]"#,
        ];
        let mut events = Vec::new();
        for (index, data) in datas.iter().enumerate() {
            for flags in 0..8u8 {
                let seq = (index * 8 + usize::from(flags)) as u64;
                events.push(event(seq, flags & 1 != 0, flags & 2 != 0, flags & 4 != 0, data));
            }
        }
        for slice in [&events[..0], &events[..1], &events[..]] {
            let (first_seq, next_seq) = (slice.first().map_or(5, |e| e.seq.get()), 5 + slice.len() as u64);
            let owned = wire::EventPage { events: slice.iter().map(super::event).collect(), next_seq, first_seq };
            let borrowed = EventPageOf { events: slice, next_seq, first_seq };
            let (owned, borrowed) =
                (serde_json::to_vec(&owned).expect("owned"), serde_json::to_vec(&borrowed).expect("borrowed"));
            assert_eq!(String::from_utf8(borrowed).expect("utf-8"), String::from_utf8(owned).expect("utf-8"));
        }
        // And the hint covers the page (the buffer is not grown while writing).
        let page = EventPageOf { events: &events, next_seq: 24, first_seq: 0 };
        assert!(serde_json::to_vec(&page).expect("page").len() <= page.size_hint());
    }
}
