//! The OpenAPI document served at `/v1/openapi.json`, generated from the handlers'
//! `#[utoipa::path]` annotations.
//!
//! The request and response types live in `berth-service` / `berth-catalog`, which do
//! not depend on utoipa; the `…Doc` types here describe their JSON shape for the
//! document only. `tests/openapi.rs` checks them against real responses so they cannot
//! drift silently.

#![allow(dead_code)]

use crate::{api, tail};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

type Object = serde_json::Value;

#[derive(ToSchema)]
pub struct SessionPolicyDoc {
    /// `{"mode":"serial"}` (default) or `{"mode":"parallel","runs_max":N}`.
    #[schema(value_type = Object)]
    concurrency: Option<Object>,
    activity_ttl_ms: u64,
    run_lease_ttl_ms: u64,
}

#[derive(ToSchema)]
pub struct CreateSessionDoc {
    /// Client-chosen id (`[A-Za-z0-9._~-]{1,128}`); generated (UUIDv7) when absent.
    id: Option<String>,
    /// Owner; defaults to the caller (service and admin keys only).
    user: Option<String>,
    project: Option<String>,
    policy: Option<SessionPolicyDoc>,
    title: Option<String>,
    labels: Option<Vec<String>>,
    origin: Option<String>,
    delegation_depth: Option<u32>,
}

#[derive(ToSchema)]
pub struct RunRecordDoc {
    run_id: String,
    attached_by: String,
    attached_at: u64,
    lease_until: u64,
    status: String,
}

#[derive(ToSchema)]
pub struct SessionRecordDoc {
    /// The immutable header: format version, id, scope, created_at, parent, policy…
    #[schema(value_type = Object)]
    header: Object,
    /// creating, active, idle, closed, expired.
    status: String,
    lease_until: u64,
    last_activity: u64,
    revision: u64,
    title: Option<String>,
    labels: Vec<String>,
    event_count: u64,
    blank: bool,
    runs: Vec<RunRecordDoc>,
    status_changed_at: u64,
}

#[derive(ToSchema)]
pub struct SessionPageDoc {
    items: Vec<SessionRecordDoc>,
    next_cursor: Option<String>,
}

#[derive(ToSchema)]
pub struct MetadataUpdateDoc {
    /// `null` clears the title.
    title: Option<String>,
    labels: Option<Vec<String>>,
    expected_revision: Option<u64>,
}

#[derive(ToSchema)]
pub struct EventDoc {
    seq: u64,
    #[schema(rename = "type")]
    event_type: String,
    time: u64,
    run: Option<String>,
    #[schema(value_type = Object)]
    data: Object,
    ignorable: Option<bool>,
    /// On events appended with an idempotency key: `{key}`, on the batch's first event
    /// `{key, events, digest}`.
    #[schema(value_type = Option<Object>)]
    idempotency: Option<Object>,
}

#[derive(ToSchema)]
pub struct EventPageDoc {
    events: Vec<EventDoc>,
    next_seq: u64,
}

#[derive(ToSchema)]
pub struct NewEventDoc {
    #[schema(rename = "type")]
    event_type: String,
    #[schema(value_type = Object)]
    data: Option<Object>,
    time: Option<u64>,
    ignorable: Option<bool>,
}

#[derive(ToSchema)]
pub struct AppendRequestDoc {
    /// The attached run appending (required for user keys).
    run: Option<String>,
    /// The seq the first event must get: makes a retry idempotent.
    expected_seq: Option<u64>,
    events: Vec<NewEventDoc>,
    /// Caller idempotency: 1-128 bytes of `[A-Za-z0-9-_.:+/=]`, per session, honoured for
    /// its life. The `Idempotency-Key` header is an alias.
    idempotency_key: Option<String>,
}

#[derive(ToSchema)]
pub struct AppendOutcomeDoc {
    first_seq: u64,
    next_seq: u64,
    duplicate: bool,
}

#[derive(ToSchema)]
pub struct AttachRequestDoc {
    run_id: Option<String>,
    expected_revision: Option<u64>,
    /// `reject` (default) or `interrupt`.
    on_busy: Option<String>,
}

#[derive(ToSchema)]
pub struct AttachmentDoc {
    run: RunRecordDoc,
    revision: u64,
    session_lease_until: u64,
    displaced: Vec<RunRecordDoc>,
}

#[derive(ToSchema)]
pub struct ResumeOutcomeDoc {
    attachment: AttachmentDoc,
    repaired: Vec<EventDoc>,
    checkpoint: Option<EventDoc>,
    next_seq: u64,
}

#[derive(ToSchema)]
pub struct ImportedDoc {
    sessions: Vec<SessionRecordDoc>,
}

#[derive(ToSchema)]
pub struct AuditEntryDoc {
    seq: u64,
    tenant: String,
    time: u64,
    actor: String,
    action: String,
    session: Option<String>,
    revision: Option<u64>,
    outcome: String,
    #[schema(value_type = Object)]
    details: Object,
    prev_hash: String,
    hash: String,
}

#[derive(ToSchema)]
pub struct AuditVerificationDoc {
    entries: u64,
    broken_at: Option<u64>,
    reason: Option<String>,
}

#[derive(ToSchema)]
pub struct RetentionPolicyDoc {
    idle_ttl_ms: Option<u64>,
    max_age_ms: Option<u64>,
    delete_terminal_after_ms: Option<u64>,
}

#[derive(ToSchema)]
pub struct PrincipalDoc {
    tenant: String,
    user: String,
    project: Option<String>,
    /// user, service or admin.
    role: String,
}

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An API key (`berth keys create`) or, when configured, a JWT"))
                    .build(),
            ),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "berth",
        description = "A durable, multi-tenant session store for AI-agent runtimes. The tenant of every request comes from its bearer key or token. Errors are JSON {code, message} with a stable code."
    ),
    paths(
        api::create_session, api::list_sessions, api::get_session, api::update_session,
        api::delete_session, api::close_session, api::fork_session, api::reopen_session,
        api::read_events, api::append_events, tail::tail_events,
        api::attach_run, api::heartbeat_run, api::detach_run, api::resume_session,
        api::export_session, api::import_sessions,
        api::audit_log, api::verify_audit, api::set_retention, api::whoami,
    ),
    components(schemas(crate::error::ErrorBody)),
    modifiers(&BearerAuth),
    tags(
        (name = "sessions", description = "Create, list, read metadata, close, fork, reopen, delete"),
        (name = "events", description = "Read, append, live tail"),
        (name = "runs", description = "Attach, heartbeat, detach, resume"),
        (name = "export", description = "Export and import"),
        (name = "admin", description = "Audit log, retention, whoami"),
    )
)]
pub struct ApiDoc;

/// The document as JSON.
pub fn document() -> String {
    ApiDoc::openapi().to_pretty_json().unwrap_or_else(|_| "{}".to_owned())
}
