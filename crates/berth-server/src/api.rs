//! The `/v1` handlers: one per `SessionService` operation. Each authenticates the
//! caller (the `Caller` extractor: bearer key or JWT, then the tenant's rate limit),
//! parses ids from the path with the strict id grammar (400 before any storage call),
//! decodes the body strictly, and runs the service call as its own task — so a client
//! that disconnects or a request that times out never cancels a write half-way.

use crate::error::{ApiError, ErrorBody};
use crate::limits::{body_bytes, StrictJson, StrictQuery};
use crate::openapi as doc;
use crate::AppState;
use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use berth_catalog::RetentionPolicy;
use berth_core::lifecycle::Status;
use berth_core::limits::PAGE_SIZE_MAX;
use berth_core::{Revision, RunId, SessionId, SessionKey, Timestamp, UserId};
use berth_service::{
    AppendRequest, AttachRequest, ClosePolicy, CreateSession, ListRequest, MetadataUpdate, Principal, SessionService,
};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::sync::Arc;

pub type Shared = Arc<AppState>;
type ApiResult<T> = Result<T, ApiError>;

/// The authenticated principal of a request (401 without a valid token, 429 over the
/// tenant's rate).
pub struct Caller(pub Principal);

impl FromRequestParts<Shared> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> ApiResult<Caller> {
        let token = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(crate::auth::bearer_token)
            .map(str::to_owned);
        let principal = match token {
            Some(token) => state.auth.authenticate(&token).await?,
            None => None,
        };
        let Some(principal) = principal else {
            state.metrics.unauthenticated.inc();
            return Err(ApiError::unauthenticated("a valid bearer token (API key or JWT) is required"));
        };
        if let Some(limiter) = &state.limiter {
            if let Err(retry_after_s) = limiter.check(&principal.tenant) {
                state.metrics.rate_limited.inc();
                return Err(ApiError::rate_limited(retry_after_s));
            }
        }
        Ok(Caller(principal))
    }
}

fn session_id(text: &str) -> ApiResult<SessionId> {
    SessionId::parse(text).map_err(|error| ApiError::bad_request(error.to_string()))
}

fn run_id(text: &str) -> ApiResult<RunId> {
    RunId::parse(text).map_err(|error| ApiError::bad_request(error.to_string()))
}

/// A `{id}` path segment, percent-decoded by axum, then parsed by the id grammar.
pub struct SessionPath(pub SessionId);

impl FromRequestParts<Shared> for SessionPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> ApiResult<SessionPath> {
        let Path(text) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::bad_request(rejection.body_text()))?;
        session_id(&text).map(SessionPath)
    }
}

/// `{id}/runs/{run}` path segments.
pub struct RunPath(pub SessionId, pub RunId);

impl FromRequestParts<Shared> for RunPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> ApiResult<RunPath> {
        let Path((session, run)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::bad_request(rejection.body_text()))?;
        Ok(RunPath(session_id(&session)?, run_id(&run)?))
    }
}

/// Runs a service call to completion on its own task, whatever happens to the request.
async fn call<T, F>(state: &Shared, operation: impl FnOnce(Arc<SessionService>) -> F) -> ApiResult<T>
where
    T: Send + 'static,
    F: Future<Output = berth_core::Result<T>> + Send + 'static,
{
    let task = tokio::spawn(operation(state.service.clone()));
    match task.await {
        Ok(outcome) => outcome.map_err(ApiError::from),
        Err(join) => {
            tracing::error!(%join, "service task failed");
            Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error"))
        }
    }
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => {
            (status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()
        }
        Err(error) => {
            tracing::error!(%error, "response encoding failed");
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error").into_response()
        }
    }
}

// ----- sessions -------------------------------------------------------------------------

/// Creates a session owned by the caller (service and admin keys may name another `user`).
#[utoipa::path(post, path = "/v1/sessions", tag = "sessions",
    request_body = doc::CreateSessionDoc,
    responses((status = 201, body = doc::SessionRecordDoc), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 429, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn create_session(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictJson(request): StrictJson<CreateSession>,
) -> ApiResult<Response> {
    let record = call(&state, |s| async move { s.create(&principal, request).await }).await?;
    Ok(json(StatusCode::CREATED, &record))
}

/// Listing filters. `status` is a comma-separated list.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Owner filter (service and admin keys; a user key always sees only its own).
    pub user: Option<String>,
    pub project: Option<String>,
    /// Comma-separated: active,idle,closed,expired (default: all).
    pub status: Option<String>,
    pub label: Option<String>,
    /// Last activity at or after (ms since the epoch).
    pub active_since: Option<u64>,
    /// Last activity before (ms since the epoch).
    pub active_before: Option<u64>,
    /// Include blank sessions (no conversation events yet).
    pub include_blank: Option<bool>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size, 1–1000 (default 50).
    pub limit: Option<usize>,
}

fn list_request(params: ListParams) -> ApiResult<ListRequest> {
    let statuses = params
        .status
        .as_deref()
        .map(|text| {
            text.split(',').filter(|part| !part.is_empty()).map(Status::parse).collect::<berth_core::Result<Vec<_>>>()
        })
        .transpose()
        .map_err(|error| ApiError::bad_request(error.to_string()))?
        .unwrap_or_default();
    let bad = |error: berth_core::Error| ApiError::bad_request(error.to_string());
    Ok(ListRequest {
        user: params.user.as_deref().map(UserId::parse).transpose().map_err(bad)?,
        project: params.project.as_deref().map(berth_core::ProjectId::parse).transpose().map_err(bad)?,
        statuses,
        label: params.label,
        active_since: params.active_since.map(Timestamp),
        active_before: params.active_before.map(Timestamp),
        include_blank: params.include_blank.unwrap_or(false),
        cursor: params.cursor,
        limit: params.limit,
    })
}

/// Lists the caller's sessions (a service or admin key: its tenant's), newest activity
/// first, with cursor pagination.
#[utoipa::path(get, path = "/v1/sessions", tag = "sessions", params(ListParams),
    responses((status = 200, body = doc::SessionPageDoc), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_sessions(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictQuery(params): StrictQuery<ListParams>,
) -> ApiResult<Response> {
    let request = list_request(params)?;
    let page = call(&state, |s| async move { s.list(&principal, &request).await }).await?;
    Ok(json(StatusCode::OK, &page))
}

#[utoipa::path(get, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, description = "session id")),
    responses((status = 200, body = doc::SessionRecordDoc), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_session(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
) -> ApiResult<Response> {
    let record = call(&state, |s| async move { s.get(&principal, &id).await }).await?;
    Ok(json(StatusCode::OK, &record))
}

/// Sets title and/or labels; `expected_revision` makes it a compare-and-set (412 on mismatch).
#[utoipa::path(patch, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, description = "session id")),
    request_body = doc::MetadataUpdateDoc,
    responses((status = 200, body = doc::SessionRecordDoc), (status = 404, body = ErrorBody), (status = 412, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn update_session(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
    StrictJson(update): StrictJson<MetadataUpdate>,
) -> ApiResult<Response> {
    let record = call(&state, |s| async move { s.update_metadata(&principal, &id, update).await }).await?;
    Ok(json(StatusCode::OK, &record))
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RevisionParams {
    pub expected_revision: Option<u64>,
}

/// Erases the log and metadata; the audit log keeps a record.
#[utoipa::path(delete, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, description = "session id"), RevisionParams),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 412, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn delete_session(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
    StrictQuery(params): StrictQuery<RevisionParams>,
) -> ApiResult<Response> {
    let key = SessionKey::new(principal.tenant.clone(), id.clone());
    let expected = params.expected_revision.map(Revision);
    call(&state, |s| async move { s.delete(&principal, &id, expected).await }).await?;
    state.feed.publish(&key, u64::MAX);
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CloseBody {
    /// `refuse` (default: 409 while runs are attached) or `cancel_runs`.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub policy: ClosePolicy,
    #[serde(default)]
    #[schema(value_type = Option<u64>)]
    pub expected_revision: Option<Revision>,
}

/// Closes a session: terminal; refuses new attach and append.
#[utoipa::path(post, path = "/v1/sessions/{id}/close", tag = "sessions",
    params(("id" = String, Path, description = "session id")), request_body = CloseBody,
    responses((status = 200, body = doc::SessionRecordDoc), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 412, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn close_session(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
    StrictJson(body): StrictJson<CloseBody>,
) -> ApiResult<Response> {
    let record =
        call(&state, |s| async move { s.close(&principal, &id, body.policy, body.expected_revision).await }).await?;
    Ok(json(StatusCode::OK, &record))
}

#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkBody {
    /// Copy the events before this seq (default: all).
    pub upto_seq: Option<u64>,
    #[schema(value_type = Option<String>)]
    pub new_id: Option<SessionId>,
}

/// Forks a session (also a closed or expired one) into a new session of the same scope.
#[utoipa::path(post, path = "/v1/sessions/{id}/fork", tag = "sessions",
    params(("id" = String, Path, description = "session id")), request_body = ForkBody,
    responses((status = 201, body = doc::SessionRecordDoc), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn fork_session(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
    StrictJson(body): StrictJson<ForkBody>,
) -> ApiResult<Response> {
    let record = call(&state, |s| async move { s.fork(&principal, &id, body.upto_seq, body.new_id).await }).await?;
    Ok(json(StatusCode::CREATED, &record))
}

/// Admin only: reopens a closed or expired session (audited).
#[utoipa::path(post, path = "/v1/sessions/{id}/reopen", tag = "sessions",
    params(("id" = String, Path, description = "session id")),
    responses((status = 200, body = doc::SessionRecordDoc), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn reopen_session(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
) -> ApiResult<Response> {
    let record = call(&state, |s| async move { s.reopen(&principal, &id).await }).await?;
    Ok(json(StatusCode::OK, &record))
}

// ----- events ---------------------------------------------------------------------------

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ReadParams {
    /// First seq to read (default 0).
    pub from: Option<u64>,
    /// Most events to return (default and maximum 1000).
    pub limit: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct EventPage {
    pub events: Vec<berth_core::Event>,
    /// The seq to ask for next (`from` + number of events).
    pub next_seq: u64,
}

/// Reads a range of events.
#[utoipa::path(get, path = "/v1/sessions/{id}/events", tag = "events",
    params(("id" = String, Path, description = "session id"), ReadParams),
    responses((status = 200, body = doc::EventPageDoc), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn read_events(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
    StrictQuery(params): StrictQuery<ReadParams>,
) -> ApiResult<Response> {
    let from = params.from.unwrap_or(0);
    let limit = params.limit.unwrap_or(PAGE_SIZE_MAX as u64).min(PAGE_SIZE_MAX as u64);
    let events = call(&state, |s| async move { s.read(&principal, &id, from, Some(limit)).await }).await?;
    let next_seq = from + events.len() as u64;
    Ok(json(StatusCode::OK, &EventPage { events, next_seq }))
}

/// Appends a batch (durable when answered). `expected_seq` makes a retry idempotent:
/// identical stored events succeed with `duplicate: true`, different ones are 409.
/// `idempotency_key` (or the `Idempotency-Key` header, its alias) makes it idempotent by
/// caller (R-S14): a retry with the key gets the original outcome, the key with other
/// content is 409 `idempotency_key_reused`.
#[utoipa::path(post, path = "/v1/sessions/{id}/events", tag = "events",
    params(("id" = String, Path, description = "session id"),
        ("Idempotency-Key" = Option<String>, Header, description = "alias of the body's idempotency_key")),
    request_body = doc::AppendRequestDoc,
    responses((status = 200, body = doc::AppendOutcomeDoc), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn append_events(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
    headers: axum::http::HeaderMap,
    StrictJson(mut request): StrictJson<AppendRequest>,
) -> ApiResult<Response> {
    request.idempotency_key = idempotency_key(&headers, request.idempotency_key.take())?;
    let events = request.events.len() as u64;
    let task_state = state.clone();
    let outcome = call(&state, move |s| async move {
        let key = SessionKey::new(principal.tenant.clone(), id.clone());
        let _serialized = task_state.append_locks.lock(&key).await;
        let outcome = s.append(&principal, &id, request).await?;
        if !outcome.duplicate {
            task_state.feed.publish(&key, outcome.next_seq);
        }
        Ok(outcome)
    })
    .await?;
    if !outcome.duplicate && events > 0 {
        state.metrics.append_batches.inc();
        state.metrics.appended_events.inc_by(events);
    }
    Ok(json(StatusCode::OK, &outcome))
}

/// The append's idempotency key: the body's `idempotency_key` or the `Idempotency-Key`
/// header (an alias); both, if they differ, are a 400.
fn idempotency_key(headers: &axum::http::HeaderMap, in_body: Option<String>) -> ApiResult<Option<String>> {
    let Some(value) = headers.get("idempotency-key") else { return Ok(in_body) };
    let in_header = value
        .to_str()
        .map_err(|_| ApiError::bad_request("the Idempotency-Key header is not visible ASCII"))?
        .to_owned();
    match in_body {
        Some(in_body) if in_body != in_header => {
            Err(ApiError::bad_request("Idempotency-Key header and body idempotency_key differ"))
        }
        _ => Ok(Some(in_header)),
    }
}

// ----- runs -------------------------------------------------------------------------------

fn count_takeovers(state: &Shared, displaced: &[berth_catalog::RunRecord]) {
    for run in displaced {
        let reason = match run.status {
            berth_catalog::RunStatus::Abandoned => "abandoned",
            _ => "interrupted",
        };
        state.metrics.takeover(reason);
    }
}

/// Attaches a run (`expected_revision`, `on_busy`: `reject` → 409 busy, or `interrupt`).
#[utoipa::path(post, path = "/v1/sessions/{id}/runs", tag = "runs",
    params(("id" = String, Path, description = "session id")), request_body = doc::AttachRequestDoc,
    responses((status = 201, body = doc::AttachmentDoc), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 412, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn attach_run(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
    StrictJson(request): StrictJson<AttachRequest>,
) -> ApiResult<Response> {
    let attachment = call(&state, |s| async move { s.attach(&principal, &id, request).await }).await?;
    count_takeovers(&state, &attachment.displaced);
    Ok(json(StatusCode::CREATED, &attachment))
}

/// Extends a run's attachment lease (and the session's activity lease).
#[utoipa::path(post, path = "/v1/sessions/{id}/runs/{run}/heartbeat", tag = "runs",
    params(("id" = String, Path, description = "session id"), ("run" = String, Path, description = "run id")),
    responses((status = 200, body = doc::RunRecordDoc), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn heartbeat_run(
    State(state): State<Shared>,
    Caller(principal): Caller,
    RunPath(id, run): RunPath,
) -> ApiResult<Response> {
    let record = call(&state, |s| async move { s.heartbeat(&principal, &id, &run).await }).await?;
    Ok(json(StatusCode::OK, &record))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DetachBody {
    /// `completed`, `failed`, … (default `completed`).
    #[serde(default = "completed")]
    pub outcome: String,
    #[serde(default)]
    #[schema(value_type = Option<u64>)]
    pub expected_revision: Option<Revision>,
}

fn completed() -> String {
    "completed".to_owned()
}

/// Detaches a run with an outcome (same run, same user or a service/admin key).
#[utoipa::path(post, path = "/v1/sessions/{id}/runs/{run}/detach", tag = "runs",
    params(("id" = String, Path, description = "session id"), ("run" = String, Path, description = "run id")),
    request_body = DetachBody,
    responses((status = 200, body = doc::SessionRecordDoc), (status = 404, body = ErrorBody), (status = 412, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn detach_run(
    State(state): State<Shared>,
    Caller(principal): Caller,
    RunPath(id, run): RunPath,
    StrictJson(body): StrictJson<DetachBody>,
) -> ApiResult<Response> {
    let record =
        call(&state, |s| async move { s.detach(&principal, &id, &run, &body.outcome, body.expected_revision).await })
            .await?;
    Ok(json(StatusCode::OK, &record))
}

/// Resumes after a crash: attaches a new run, appends closers for interrupted turns,
/// returns what was repaired and the latest checkpoint.
#[utoipa::path(post, path = "/v1/sessions/{id}/resume", tag = "runs",
    params(("id" = String, Path, description = "session id")), request_body = doc::AttachRequestDoc,
    responses((status = 200, body = doc::ResumeOutcomeDoc), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn resume_session(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
    StrictJson(request): StrictJson<AttachRequest>,
) -> ApiResult<Response> {
    let task_state = state.clone();
    let outcome = call(&state, move |s| async move {
        let key = SessionKey::new(principal.tenant.clone(), id.clone());
        let _serialized = task_state.append_locks.lock(&key).await;
        let outcome = s.resume(&principal, &id, request).await?;
        task_state.feed.publish(&key, outcome.next_seq);
        Ok(outcome)
    })
    .await?;
    count_takeovers(&state, &outcome.attachment.displaced);
    Ok(json(StatusCode::OK, &outcome))
}

// ----- export, import ---------------------------------------------------------------------------

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ExportParams {
    /// `jsonl` (default: canonical header line + event lines) or `zip` (with its forks).
    pub format: Option<String>,
}

/// Exports a session as canonical JSONL, or a ZIP of it and its forks.
#[utoipa::path(get, path = "/v1/sessions/{id}/export", tag = "export",
    params(("id" = String, Path, description = "session id"), ExportParams),
    responses((status = 200, content_type = "application/x-ndjson", body = String), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn export_session(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
    StrictQuery(params): StrictQuery<ExportParams>,
) -> ApiResult<Response> {
    let zip = match params.format.as_deref() {
        None | Some("jsonl") => false,
        Some("zip") => true,
        Some(other) => return Err(ApiError::bad_request(format!("format {other:?}: use jsonl or zip"))),
    };
    let bytes = call(&state, move |s| async move {
        if zip {
            s.export_zip(&principal, &id).await
        } else {
            s.export(&principal, &id).await
        }
    })
    .await?;
    let content_type = if zip { "application/zip" } else { "application/x-ndjson" };
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))], bytes).into_response())
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Imported {
    pub sessions: Vec<berth_catalog::SessionRecord>,
}

/// Imports a session exported by `berth export` (JSONL) or a ZIP of sessions, into the
/// caller's tenant.
#[utoipa::path(post, path = "/v1/import", tag = "export",
    request_body(content = String, content_type = "application/x-ndjson"),
    responses((status = 201, body = doc::ImportedDoc), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn import_sessions(
    State(state): State<Shared>,
    Caller(principal): Caller,
    request: Request,
) -> ApiResult<Response> {
    let bytes = body_bytes(request, &state).await?;
    let sessions = call(&state, move |s| async move {
        if bytes.starts_with(b"PK") {
            s.import_zip(&principal, &bytes).await
        } else {
            Ok(vec![s.import(&principal, &bytes).await?])
        }
    })
    .await?;
    Ok(json(StatusCode::CREATED, &Imported { sessions }))
}

// ----- audit, retention, whoami --------------------------------------------------------------

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditParams {
    pub from: Option<u64>,
    /// At most 1000 (default 100).
    pub limit: Option<usize>,
}

/// Admin only: the tenant's audit log from position `from`.
#[utoipa::path(get, path = "/v1/audit", tag = "admin", params(AuditParams),
    responses((status = 200, body = Vec<doc::AuditEntryDoc>), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn audit_log(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictQuery(params): StrictQuery<AuditParams>,
) -> ApiResult<Response> {
    let entries = call(&state, move |s| async move {
        s.audit_log(&principal, params.from.unwrap_or(0), params.limit.unwrap_or(100).min(PAGE_SIZE_MAX)).await
    })
    .await?;
    Ok(json(StatusCode::OK, &entries))
}

/// Admin only: verifies the tenant's tamper-evident audit chain.
#[utoipa::path(get, path = "/v1/audit/verify", tag = "admin",
    responses((status = 200, body = doc::AuditVerificationDoc), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn verify_audit(State(state): State<Shared>, Caller(principal): Caller) -> ApiResult<Response> {
    let verdict = call(&state, move |s| async move { s.verify_audit(&principal).await }).await?;
    Ok(json(StatusCode::OK, &verdict))
}

/// Admin only: sets the tenant's retention policy (applied by the background sweeper).
#[utoipa::path(put, path = "/v1/retention", tag = "admin", request_body = doc::RetentionPolicyDoc,
    responses((status = 204), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn set_retention(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictJson(policy): StrictJson<RetentionPolicy>,
) -> ApiResult<Response> {
    call(&state, move |s| async move { s.set_retention(&principal, policy).await }).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The principal the presented key or token stands for.
#[utoipa::path(get, path = "/v1/whoami", tag = "admin",
    responses((status = 200, body = doc::PrincipalDoc), (status = 401, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn whoami(Caller(principal): Caller) -> Response {
    json(StatusCode::OK, &principal)
}
