//! The OpenAPI document served at `/v1/openapi.json`: the handlers' `#[utoipa::path]`
//! annotations over the wire types of `berth-api` (their schemas are derived from the
//! very types the handlers decode and encode, so they cannot drift). `CommonErrors`
//! adds the answers every operation can give. The document is committed as
//! `crates/berth-api/openapi.json`; `tests/api.rs` fails when the two differ.

use crate::{api, backup, memory_api, tail};
use berth_api::ErrorBody;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{Modify, OpenApi};

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

/// The answers every `/v1` operation can give, whatever it does: a malformed path id,
/// query or body (400), no valid credentials (401), the tenant's rate (429), an internal
/// failure (500), and the store unavailable or the request timed out (503).
struct CommonErrors;

impl CommonErrors {
    const ANSWERS: &'static [(&'static str, &'static str)] = &[
        ("400", "malformed request: path id, query parameter or body (`invalid`)"),
        ("401", "no valid bearer key or token (`unauthenticated`)"),
        ("429", "over the tenant's rate (`rate_limited`; see Retry-After)"),
        ("500", "internal failure or damaged stored data (`internal`, `corrupt`)"),
        ("503", "store unavailable or request timed out (`unavailable`, `timeout`; see Retry-After)"),
    ];

    fn error_response(description: &str) -> RefOr<Response> {
        let content = ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build();
        ResponseBuilder::new().description(description).content("application/json", content).build().into()
    }

    fn add_to(operation: &mut Operation) {
        for (status, description) in CommonErrors::ANSWERS {
            operation
                .responses
                .responses
                .entry((*status).to_owned())
                .or_insert_with(|| CommonErrors::error_response(description));
        }
    }
}

impl Modify for CommonErrors {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for item in openapi.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
                &mut item.head,
                &mut item.options,
                &mut item.trace,
            ];
            for operation in operations.into_iter().flatten() {
                CommonErrors::add_to(operation);
            }
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "berth",
        description = "A durable, multi-tenant session store for AI-agent runtimes. The tenant of every request comes from its bearer key or token. Errors are JSON {code, message, retryable, ...} with a stable code (see docs/reference/http.md for the compatibility rule of /v1)."
    ),
    paths(
        api::create_session, api::list_sessions, api::count_sessions, api::get_session, api::update_session,
        api::delete_session, api::close_session, api::fork_session, api::reopen_session,
        api::read_events, api::append_events, tail::tail_events,
        api::attach_run, api::heartbeat_run, api::detach_run, api::resume_session,
        api::export_session, api::import_sessions,
        api::session_usage, api::tenant_usage,
        api::audit_log, api::search_audit, api::verify_audit, api::set_retention, api::whoami,
        backup::take_backup,
        memory_api::put_memory, memory_api::get_memory, memory_api::delete_memory, memory_api::search_memory,
        memory_api::delete_memory_items, memory_api::list_namespaces, memory_api::forget_memory,
        memory_api::memory_usage, memory_api::set_memory_quota,
        memory_api::export_memory, memory_api::import_memory,
    ),
    components(schemas(ErrorBody)),
    modifiers(&BearerAuth, &CommonErrors),
    tags(
        (name = "sessions", description = "Create, list, read metadata, close, fork, reopen, delete"),
        (name = "events", description = "Read, append, live tail"),
        (name = "runs", description = "Attach, heartbeat, detach, resume"),
        (name = "export", description = "Export and import"),
        (name = "usage", description = "LLM usage and tool time, computed from the model/call and tool events"),
        (name = "admin", description = "Audit log, retention, whoami, backup"),
        (name = "memory", description = "Scoped memory: items of a user, a project or the app that outlive sessions"),
    )
)]
pub struct ApiDoc;

/// The document as JSON (pretty, with a final newline: the committed golden file's form).
pub fn document() -> String {
    let mut text = ApiDoc::openapi().to_pretty_json().unwrap_or_else(|_| "{}".to_owned());
    text.push('\n');
    text
}
