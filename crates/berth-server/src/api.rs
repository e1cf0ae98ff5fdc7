//! The `/v1` handlers: one per `SessionService` operation. Each authenticates the
//! caller (the `Caller` extractor: bearer key or JWT, then the tenant's rate limit),
//! parses ids from the path with the strict id grammar (400 before any storage call),
//! decodes the body strictly, and runs the service call as its own task — so a client
//! that disconnects or a request that times out never cancels a write half-way.

use crate::error::ApiError;
use crate::limits::{body_bytes, StrictJson, StrictQuery};
use crate::{wire, AppState};
use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use berth_api::{
    AppendBody, AppendOutcomeBody, AttachBody, AttachmentBody, AuditEntryBody, AuditParams, AuditSearchPage,
    AuditSearchParams, AuditVerificationBody, CloseBody, CountParams, CreateSessionBody, DetachBody, ErrorBody,
    EventPage, ExportParams, ForkBody, ImportedBody, ListParams, PrincipalBody, ReadParams, ResumeOutcomeBody,
    RetentionPolicyBody, RevisionParams, RunBody, SessionBody, SessionCountsBody, SessionPage, SessionUsageBody,
    UpdateSessionBody, UsageBody, UsageParams,
};
use berth_core::limits::PAGE_SIZE_MAX;
use berth_core::{Revision, RunId, SessionId, SessionKey, Timestamp, UserId};
use berth_service::{ListRequest, Principal, ReadRange, SessionService};
use serde::Serialize;
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
        if let Some(crate::in_process::InProcessPrincipal(principal)) = parts.extensions.get() {
            return Ok(Caller(principal.clone()));
        }
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

pub(crate) fn session_id(text: &str) -> ApiResult<SessionId> {
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

/// Runs a service call to completion whatever happens to the request: polled on the
/// request's own task (no hop to another thread and back: issue 17 measured two such
/// wakes per embedded call), and, only if the request is dropped part-way, finished on
/// a task of its own (`to_completion.rs`).
pub(crate) async fn call<T, F>(state: &Shared, operation: impl FnOnce(Arc<SessionService>) -> F) -> ApiResult<T>
where
    T: Send + 'static,
    F: Future<Output = berth_core::Result<T>> + Send + 'static,
{
    match crate::to_completion::ToCompletion::new(operation(state.service.clone())).await {
        Ok(outcome) => outcome.map_err(ApiError::from),
        Err(panic) => {
            tracing::error!(panic, "service call panicked");
            Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error"))
        }
    }
}

/// A page size within `PAGE_SIZE_MAX` (422 `limit_exceeded` above it, as the listing does).
fn page_size(limit: u64) -> ApiResult<u64> {
    if limit > PAGE_SIZE_MAX as u64 {
        let limit_exceeded = berth_core::Error::LimitExceeded {
            what: berth_core::limits::Limit::PageSize,
            limit: PAGE_SIZE_MAX as u64,
            actual: limit,
        };
        return Err(ApiError::from(limit_exceeded));
    }
    Ok(limit)
}

pub(crate) fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    json_sized(status, value, 128)
}

/// `json` into a buffer of `capacity` bytes to start with (a body whose size is known
/// roughly is not grown, and copied, from empty).
fn json_sized<T: Serialize>(status: StatusCode, value: &T, capacity: usize) -> Response {
    let mut body = Vec::with_capacity(capacity);
    match serde_json::to_writer(&mut body, value) {
        Ok(()) => {
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
    request_body = Option<CreateSessionBody>,
    responses((status = 201, body = SessionBody), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn create_session(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictJson(body): StrictJson<CreateSessionBody>,
) -> ApiResult<Response> {
    let request = wire::create_from(body);
    let record = call(&state, |s| async move { s.create(&principal, request).await }).await?;
    Ok(json(StatusCode::CREATED, &wire::session(&record)))
}

fn list_request(params: ListParams) -> ApiResult<ListRequest> {
    // Every part must name a listable status: `status=`, `status=,` and `status=creating`
    // are 400s, not "no filter".
    let statuses = params
        .status
        .as_deref()
        .map(|text| text.split(',').map(berth_service::parse_listable_status).collect::<berth_core::Result<Vec<_>>>())
        .transpose()
        .map_err(|error| ApiError::bad_request(error.to_string()))?
        .unwrap_or_default();
    let bad = |error: berth_core::Error| ApiError::bad_request(error.to_string());
    Ok(ListRequest {
        user: params.user.as_deref().map(UserId::parse).transpose().map_err(bad)?,
        project: params.project.as_deref().map(berth_core::ProjectId::parse).transpose().map_err(bad)?,
        statuses,
        label: params.label,
        parent: params.parent.as_deref().map(SessionId::parse).transpose().map_err(bad)?,
        active_since: params.active_since.map(Timestamp),
        active_before: params.active_before.map(Timestamp),
        include_blank: params.include_blank.unwrap_or(false),
        search: search_param(params.q)?,
        cursor: params.cursor,
        limit: params.limit,
    })
}

/// The listing's `q`: empty is no search; a text the search refuses (too long, control
/// characters) is a 400 naming why.
pub(crate) fn search_param(q: Option<String>) -> ApiResult<Option<String>> {
    let Some(q) = q.filter(|q| !q.is_empty()) else { return Ok(None) };
    berth_catalog::SessionSearch::parse(&q).map_err(|error| ApiError::bad_request(error.to_string()))?;
    Ok(Some(q))
}

/// Lists the caller's sessions (a service or admin key: its tenant's), newest activity
/// first, with cursor pagination.
#[utoipa::path(get, path = "/v1/sessions", tag = "sessions", params(ListParams),
    responses((status = 200, body = SessionPage), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_sessions(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictQuery(params): StrictQuery<ListParams>,
) -> ApiResult<Response> {
    let request = list_request(params)?;
    let page = call(&state, |s| async move { s.list(&principal, &request).await }).await?;
    Ok(json(StatusCode::OK, &wire::session_page(&page)))
}

/// The cap of `GET /v1/sessions/counts`: above it a status answers `more: true`.
pub const SESSION_COUNT_CAP: usize = 1_000;

/// Per listable status, how many of the caller's sessions match the listing's filters
/// (exact up to `cap`, then `more: true`).
#[utoipa::path(get, path = "/v1/sessions/counts", tag = "sessions", params(CountParams),
    responses((status = 200, body = SessionCountsBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn count_sessions(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictQuery(params): StrictQuery<CountParams>,
) -> ApiResult<Response> {
    let request = list_request(ListParams {
        user: params.user,
        project: params.project,
        label: params.label,
        parent: params.parent,
        active_since: params.active_since,
        active_before: params.active_before,
        include_blank: params.include_blank,
        q: params.q,
        ..ListParams::default()
    })?;
    let counts = call(&state, |s| async move { s.count(&principal, &request, SESSION_COUNT_CAP).await }).await?;
    Ok(json(StatusCode::OK, &wire::session_counts(&counts, SESSION_COUNT_CAP)))
}

#[utoipa::path(get, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = berth_api::sessions::Id, Path, description = "session id")),
    responses((status = 200, body = SessionBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_session(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
) -> ApiResult<Response> {
    let record = call(&state, |s| async move { s.get(&principal, &id).await }).await?;
    Ok(json(StatusCode::OK, &wire::session(&record)))
}

/// Sets title and/or labels; `expected_revision` makes it a compare-and-set (412 on mismatch).
#[utoipa::path(patch, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = berth_api::sessions::Id, Path, description = "session id")),
    request_body = Option<UpdateSessionBody>,
    responses((status = 200, body = SessionBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 412, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn update_session(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
    StrictJson(body): StrictJson<UpdateSessionBody>,
) -> ApiResult<Response> {
    let update = wire::update_from(body);
    let record = call(&state, |s| async move { s.update_metadata(&principal, &id, update).await }).await?;
    Ok(json(StatusCode::OK, &wire::session(&record)))
}

/// Erases the log and metadata; the audit log keeps a record.
#[utoipa::path(delete, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = berth_api::sessions::Id, Path, description = "session id"), RevisionParams),
    responses((status = 204, description = "deleted"), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 412, body = ErrorBody)),
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

/// Closes a session: terminal; refuses new attach and append.
#[utoipa::path(post, path = "/v1/sessions/{id}/close", tag = "sessions",
    params(("id" = berth_api::sessions::Id, Path, description = "session id")), request_body = Option<CloseBody>,
    responses((status = 200, body = SessionBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 412, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn close_session(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
    StrictJson(body): StrictJson<CloseBody>,
) -> ApiResult<Response> {
    let (policy, expected) = (wire::close_policy_from(body.policy), body.expected_revision.map(Revision));
    let record = call(&state, |s| async move { s.close(&principal, &id, policy, expected).await }).await?;
    Ok(json(StatusCode::OK, &wire::session(&record)))
}

/// Forks a session (also a closed or expired one) into a new session of the same scope.
#[utoipa::path(post, path = "/v1/sessions/{id}/fork", tag = "sessions",
    params(("id" = berth_api::sessions::Id, Path, description = "session id")), request_body = Option<ForkBody>,
    responses((status = 201, body = SessionBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn fork_session(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
    StrictJson(body): StrictJson<ForkBody>,
) -> ApiResult<Response> {
    let fork = wire::fork_from(body);
    let record = call(&state, |s| async move { s.fork_with(&principal, &id, fork).await }).await?;
    Ok(json(StatusCode::CREATED, &wire::session(&record)))
}

/// Admin only: reopens a closed or expired session (audited).
#[utoipa::path(post, path = "/v1/sessions/{id}/reopen", tag = "sessions",
    params(("id" = berth_api::sessions::Id, Path, description = "session id")),
    responses((status = 200, body = SessionBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn reopen_session(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
) -> ApiResult<Response> {
    let record = call(&state, |s| async move { s.reopen(&principal, &id).await }).await?;
    Ok(json(StatusCode::OK, &wire::session(&record)))
}

// ----- events ---------------------------------------------------------------------------

/// Reads a range of events, or the events at given seqs (`seqs=`).
#[utoipa::path(get, path = "/v1/sessions/{id}/events", tag = "events",
    params(("id" = berth_api::sessions::Id, Path, description = "session id"), ReadParams),
    responses((status = 200, body = EventPage), (status = 404, body = ErrorBody),
        (status = 413, body = ErrorBody, description = "a `types` name longer than an event type may be"),
        (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn read_events(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
    StrictQuery(params): StrictQuery<ReadParams>,
) -> ApiResult<Response> {
    let types = params.types.as_deref().map(event_types).transpose()?;
    if let Some(seqs) = params.seqs.as_deref() {
        return read_events_at(&state, principal, id, seqs, &params, types).await;
    }
    let limit = page_size(params.limit.unwrap_or(PAGE_SIZE_MAX as u64))?;
    if let Some(types) = types {
        let range = match (params.from, params.before) {
            (from, None) => ReadRange::Forward { from: from.unwrap_or(0), before: None },
            (Some(from), Some(before)) => ReadRange::Forward { from, before: Some(before) },
            (None, Some(before)) => ReadRange::Backward { before },
        };
        let page = call(&state, |s| async move { s.read_types(&principal, &id, range, &types, limit).await }).await?;
        let (first_seq, next_seq) = (page.first_seq, page.next_seq);
        return Ok(event_page(&wire::EventPageOf { events: &page.events, first_seq, next_seq }));
    }
    let (events, first_seq) = match (params.from, params.before) {
        // Both: the range [from, before), read forward from `from`.
        (Some(from), Some(before)) => {
            let limit = limit.min(before.saturating_sub(from));
            (call(&state, |s| async move { s.read(&principal, &id, from, Some(limit)).await }).await?, from)
        }
        (from, None) => {
            let from = from.unwrap_or(0);
            (call(&state, |s| async move { s.read(&principal, &id, from, Some(limit)).await }).await?, from)
        }
        (None, Some(before)) => {
            let events = call(&state, |s| async move { s.read_before(&principal, &id, before, limit).await }).await?;
            let first_seq = events.first().map_or(if limit == 0 { before } else { 0 }, |event| event.seq.get());
            (events, first_seq)
        }
    };
    let next_seq = first_seq + events.len() as u64;
    Ok(event_page(&wire::EventPageOf { events: &events, first_seq, next_seq }))
}

/// A page of events as its 200 answer: written from the events themselves, into a
/// buffer sized for them up front (a page is up to megabytes; grown from empty it was
/// copied a dozen times over, each time into new, zero-filled memory).
fn event_page(page: &wire::EventPageOf<'_>) -> Response {
    json_sized(StatusCode::OK, page, page.size_hint())
}

/// The event types of `types=`: 400 when one is not an event type or there are more
/// than `READ_TYPES_MAX`, 413 when one is longer than an event type may be.
fn event_types(text: &str) -> ApiResult<Vec<berth_core::EventType>> {
    let names = berth_api::events::parse_types(text).ok_or_else(|| {
        ApiError::bad_request("types: comma-separated event types, e.g. types=user/message,tool/call")
    })?;
    if names.len() > berth_service::READ_TYPES_MAX {
        return Err(ApiError::bad_request(format!("types: at most {} event types", berth_service::READ_TYPES_MAX)));
    }
    let parse = |name: &String| {
        berth_core::EventType::parse(name).map_err(|error| match error {
            berth_core::Error::LimitExceeded { .. } => ApiError::from_core(&error),
            _ => ApiError::bad_request(format!("types: {error}")),
        })
    };
    names.iter().map(parse).collect()
}

/// `GET …/events?seqs=3,17,40`: a point read by position. Only the seqs in
/// `[from, before)` are read, at most the first `limit` of them (so every schema-valid
/// combination is served); more than `READ_SEQS_MAX` distinct seqs left is 422, a seq at
/// or past the end 404 with `actual` = that seq.
async fn read_events_at(
    state: &Shared,
    principal: berth_service::Principal,
    id: SessionId,
    seqs: &str,
    params: &ReadParams,
    types: Option<Vec<berth_core::EventType>>,
) -> ApiResult<Response> {
    let Some(mut seqs) = berth_api::events::parse_seqs(seqs) else {
        return Err(ApiError::bad_request("seqs: comma-separated seqs (decimal integers), e.g. seqs=3,17,40"));
    };
    let (from, before) = (params.from.unwrap_or(0), params.before.unwrap_or(u64::MAX));
    seqs.retain(|seq| (from..before).contains(seq));
    if let Some(limit) = params.limit {
        seqs.truncate(usize::try_from(page_size(limit)?).unwrap_or(usize::MAX));
    }
    let mut events = call(state, |s| async move { s.read_seqs(&principal, &id, &seqs).await }).await?;
    if let Some(types) = types {
        events.retain(|event| types.contains(&event.event_type));
    }
    let first_seq = events.first().map_or(params.from.unwrap_or(0), |event| event.seq.get());
    let next_seq = events.last().map_or(first_seq, |event| event.seq.get() + 1);
    Ok(event_page(&wire::EventPageOf { events: &events, next_seq, first_seq }))
}

/// Appends a batch (durable when answered). `expected_seq` makes a retry idempotent:
/// identical stored events succeed with `duplicate: true`, different ones are 409.
/// `idempotency_key` (or the `Idempotency-Key` header, its alias) makes it idempotent by
/// caller (R-S14): a retry with the key gets the original outcome, the key with other
/// content is 409 `idempotency_key_reused`.
#[utoipa::path(post, path = "/v1/sessions/{id}/events", tag = "events",
    params(("id" = berth_api::sessions::Id, Path, description = "session id"),
        ("Idempotency-Key" = Option<String>, Header, nullable = false, min_length = 1, max_length = 128,
            pattern = r"^[A-Za-z0-9._:+/=-]+$", description = "alias of the body's `idempotency_key`")),
    request_body = AppendBody,
    responses((status = 200, body = AppendOutcomeBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn append_events(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
    headers: axum::http::HeaderMap,
    StrictJson(body): StrictJson<AppendBody>,
) -> ApiResult<Response> {
    let mut request = wire::append_from(body)?;
    request.idempotency_key = idempotency_key(&headers, request.idempotency_key.take())?;
    let events = request.events.len() as u64;
    let task_state = state.clone();
    let outcome = call(&state, move |s| async move {
        let key = SessionKey::new(principal.tenant.clone(), id.clone());
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
    Ok(json(StatusCode::OK, &wire::append_outcome(&outcome)))
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

// ----- usage ------------------------------------------------------------------------------

/// The session's LLM usage and tool time, computed from its `model/call`, `tool/call`
/// and `tool/result` events (authorized as reading its events).
#[utoipa::path(get, path = "/v1/sessions/{id}/usage", tag = "usage",
    params(("id" = berth_api::sessions::Id, Path, description = "session id")),
    responses((status = 200, body = SessionUsageBody), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn session_usage(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
) -> ApiResult<Response> {
    let usage = call(&state, {
        let id = id.clone();
        |s| async move { s.session_usage(&principal, &id).await }
    })
    .await?;
    Ok(json(StatusCode::OK, &wire::session_usage(&id, &usage)))
}

/// The caller's usage over event times in `[since, before)` (ms since the epoch): every
/// session it may list whose activity overlaps the range (a user key: its own), each
/// one's `model/call` and tool events read — the cost grows with the sessions active in
/// the range.
#[utoipa::path(get, path = "/v1/usage", tag = "usage", params(UsageParams),
    responses((status = 200, body = UsageBody)),
    security(("bearer" = [])))]
pub async fn tenant_usage(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictQuery(params): StrictQuery<UsageParams>,
) -> ApiResult<Response> {
    // A malformed query (400), not a refusal of the store: checked here.
    if params.since >= params.before {
        return Err(ApiError::bad_request("since must be before before: the range is [since, before)"));
    }
    let (since, before) = (Timestamp(params.since), Timestamp(params.before));
    let usage = call(&state, move |s| async move { s.tenant_usage(&principal, since, before).await }).await?;
    Ok(json(StatusCode::OK, &wire::tenant_usage(&usage)))
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
    params(("id" = berth_api::sessions::Id, Path, description = "session id", example = "runs-1")),
    request_body(content = Option<AttachBody>, example = json!({"run_id": "chat-1", "on_busy": "interrupt"})),
    responses((status = 201, body = AttachmentBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 412, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn attach_run(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
    StrictJson(body): StrictJson<AttachBody>,
) -> ApiResult<Response> {
    let request = wire::attach_from(body);
    let attachment = call(&state, |s| async move { s.attach(&principal, &id, request).await }).await?;
    count_takeovers(&state, &attachment.displaced);
    Ok(json(StatusCode::CREATED, &wire::attachment(&attachment)))
}

/// Extends a run's attachment lease (and the session's activity lease).
#[utoipa::path(post, path = "/v1/sessions/{id}/runs/{run}/heartbeat", tag = "runs",
    params(("id" = berth_api::sessions::Id, Path, description = "session id", example = "runs-1"),
        ("run" = berth_api::sessions::Id, Path, description = "run id", example = "chat-1")),
    responses((status = 200, body = RunBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn heartbeat_run(
    State(state): State<Shared>,
    Caller(principal): Caller,
    RunPath(id, run): RunPath,
) -> ApiResult<Response> {
    let record = call(&state, |s| async move { s.heartbeat(&principal, &id, &run).await }).await?;
    Ok(json(StatusCode::OK, &wire::run(&record)))
}

/// Detaches a run with an outcome (same run, same user or a service/admin key).
#[utoipa::path(post, path = "/v1/sessions/{id}/runs/{run}/detach", tag = "runs",
    params(("id" = berth_api::sessions::Id, Path, description = "session id", example = "runs-1"),
        ("run" = berth_api::sessions::Id, Path, description = "run id", example = "chat-1")),
    request_body = Option<DetachBody>,
    responses((status = 200, body = SessionBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 412, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn detach_run(
    State(state): State<Shared>,
    Caller(principal): Caller,
    RunPath(id, run): RunPath,
    StrictJson(body): StrictJson<DetachBody>,
) -> ApiResult<Response> {
    let expected = body.expected_revision.map(Revision);
    let record =
        call(&state, |s| async move { s.detach(&principal, &id, &run, &body.outcome, expected).await }).await?;
    Ok(json(StatusCode::OK, &wire::session(&record)))
}

/// Resumes after a crash: attaches a new run, appends closers for interrupted turns,
/// returns what was repaired and the latest checkpoint.
#[utoipa::path(post, path = "/v1/sessions/{id}/resume", tag = "runs",
    params(("id" = berth_api::sessions::Id, Path, description = "session id", example = "runs-1")),
    request_body(content = Option<AttachBody>, example = json!({"on_busy": "interrupt"})),
    responses((status = 200, body = ResumeOutcomeBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 412, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn resume_session(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
    StrictJson(body): StrictJson<AttachBody>,
) -> ApiResult<Response> {
    let request = wire::attach_from(body);
    let task_state = state.clone();
    let outcome = call(&state, move |s| async move {
        let key = SessionKey::new(principal.tenant.clone(), id.clone());
        let outcome = s.resume(&principal, &id, request).await?;
        task_state.feed.publish(&key, outcome.next_seq);
        Ok(outcome)
    })
    .await?;
    count_takeovers(&state, &outcome.attachment.displaced);
    Ok(json(StatusCode::OK, &wire::resume_outcome(&outcome)))
}

// ----- export, import ---------------------------------------------------------------------------

/// Exports a session as canonical JSONL, or a ZIP of it and its forks.
#[utoipa::path(get, path = "/v1/sessions/{id}/export", tag = "export",
    params(("id" = berth_api::sessions::Id, Path, description = "session id"), ExportParams),
    responses((status = 200, description = "the session as JSONL, or a ZIP of it and its forks",
            content((String = "application/x-ndjson"), (Vec<u8> = "application/zip"))),
        (status = 404, body = ErrorBody)),
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

/// Imports a session exported by `berth export` (JSONL) or a ZIP of sessions, into the
/// caller's tenant.
#[utoipa::path(post, path = "/v1/import", tag = "export",
    request_body(description = "a session exported as JSONL, or a ZIP of sessions",
        content((String = "application/x-ndjson"), (Vec<u8> = "application/zip"))),
    responses((status = 201, body = ImportedBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 422, body = ErrorBody)),
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
    Ok(json(StatusCode::CREATED, &ImportedBody { sessions: sessions.iter().map(wire::session).collect() }))
}

// ----- audit, retention, whoami --------------------------------------------------------------

/// Admin only: the tenant's audit log from position `from`.
#[utoipa::path(get, path = "/v1/audit", tag = "admin", params(AuditParams),
    responses((status = 200, body = Vec<AuditEntryBody>), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn audit_log(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictQuery(params): StrictQuery<AuditParams>,
) -> ApiResult<Response> {
    let limit = page_size(params.limit.unwrap_or(100) as u64)? as usize;
    let entries =
        call(&state, move |s| async move { s.audit_log(&principal, params.from.unwrap_or(0), limit).await }).await?;
    Ok(json(StatusCode::OK, &entries.iter().map(wire::audit_entry).collect::<Vec<_>>()))
}

/// The longest `action` filter of `GET /v1/audit/search` (its `maxLength`).
pub const AUDIT_ACTION_CHARS_MAX: usize = 128;
/// The longest `actor` filter of `GET /v1/audit/search` (its `maxLength`).
pub const AUDIT_ACTOR_CHARS_MAX: usize = 300;

/// The audit filter of a search query (400 on a malformed session id).
pub fn audit_filter(params: &AuditSearchParams) -> ApiResult<berth_service::AuditFilter> {
    // An empty filter would match nothing, not everything: refuse it rather than guess.
    if params.action.as_deref() == Some("") || params.actor.as_deref() == Some("") {
        return Err(ApiError::bad_request("action and actor, when given, are not empty"));
    }
    // The documented `maxLength`s, in characters as JSON Schema counts them: no stored
    // action or actor is longer, so a longer filter is a malformed query.
    let too_long = |text: &Option<String>, max: usize| text.as_deref().is_some_and(|text| text.chars().count() > max);
    if too_long(&params.action, AUDIT_ACTION_CHARS_MAX) || too_long(&params.actor, AUDIT_ACTOR_CHARS_MAX) {
        return Err(ApiError::bad_request(format!(
            "action is at most {AUDIT_ACTION_CHARS_MAX} characters, actor at most {AUDIT_ACTOR_CHARS_MAX}"
        )));
    }
    Ok(berth_service::AuditFilter {
        action: params.action.clone(),
        session: params.session.as_deref().map(session_id).transpose()?,
        actor: params.actor.clone(),
        since: params.since.map(Timestamp),
        before: params.before.map(Timestamp),
    })
}

/// Admin only: the tenant's audit entries matching the filters, scanned forward from
/// `from` (at most 10,000 entries per call; continue at `next_from`).
#[utoipa::path(get, path = "/v1/audit/search", tag = "admin", params(AuditSearchParams),
    responses((status = 200, body = AuditSearchPage), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn search_audit(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictQuery(params): StrictQuery<AuditSearchParams>,
) -> ApiResult<Response> {
    let limit = page_size(params.limit.unwrap_or(100) as u64)? as usize;
    if limit == 0 {
        return Err(ApiError::from(berth_core::Error::LimitExceeded {
            what: berth_core::limits::Limit::PageSize,
            limit: PAGE_SIZE_MAX as u64,
            actual: 0,
        }));
    }
    let filter = audit_filter(&params)?;
    let from = params.from.unwrap_or(0);
    let page = call(&state, move |s| async move { s.audit_search(&principal, &filter, from, limit).await }).await?;
    let body =
        AuditSearchPage { entries: page.entries.iter().map(wire::audit_entry).collect(), next_from: page.next_from };
    Ok(json(StatusCode::OK, &body))
}

/// Admin only: verifies the tenant's tamper-evident audit chain.
#[utoipa::path(get, path = "/v1/audit/verify", tag = "admin",
    responses((status = 200, body = AuditVerificationBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn verify_audit(State(state): State<Shared>, Caller(principal): Caller) -> ApiResult<Response> {
    let verdict = call(&state, move |s| async move { s.verify_audit(&principal).await }).await?;
    Ok(json(StatusCode::OK, &wire::audit_verification(&verdict)))
}

/// Admin only: sets the tenant's retention policy (applied by the background sweeper).
#[utoipa::path(put, path = "/v1/retention", tag = "admin", request_body = Option<RetentionPolicyBody>,
    responses((status = 204, description = "stored"), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn set_retention(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictJson(body): StrictJson<RetentionPolicyBody>,
) -> ApiResult<Response> {
    let policy = wire::retention_from(body);
    call(&state, move |s| async move { s.set_retention(&principal, policy).await }).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The principal the presented key or token stands for.
#[utoipa::path(get, path = "/v1/whoami", tag = "admin",
    responses((status = 200, body = PrincipalBody)),
    security(("bearer" = [])))]
pub async fn whoami(Caller(principal): Caller) -> Response {
    json(StatusCode::OK, &wire::principal(&principal))
}
