//! The `/v1/memory/...` handlers (scoped memory; `docs/reference/memory.md`): one per
//! `SessionService` memory operation, parsing namespaces, keys, filters and queries
//! strictly before any storage call (a typed 400/422 with nothing stored).

use crate::api::{call, json, Caller, Shared};
use crate::error::ApiError;
use crate::limits::{body_bytes, RequiredJson, StrictJson, StrictQuery};
use crate::wire;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use berth_api::{
    DeleteMemoryBody, DeleteMemoryParams, ErrorBody, ForgetBody, ForgetReportBody, MemoryDeletedBody,
    MemoryExportParams, MemoryImportedBody, MemoryItemBody, MemoryItemParams, MemoryPageBody, MemoryQuotaBody,
    MemorySearchBody, MemoryUsageBody, NamespacePageBody, NamespaceParams, PutMemoryBody,
};
use berth_catalog::scoped::{MemoryQuota, MemoryUsage, Namespace, TenantQuota};

type ApiResult<T> = Result<T, ApiError>;

fn namespace(text: &str) -> ApiResult<Namespace> {
    Namespace::parse(text).map_err(ApiError::from)
}

/// Creates or replaces one item (compare-and-set with `expected_revision`).
#[utoipa::path(put, path = "/v1/memory/items", tag = "memory", request_body = PutMemoryBody,
    responses((status = 200, body = MemoryItemBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 412, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn put_memory(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictJson(body): StrictJson<PutMemoryBody>,
) -> ApiResult<Response> {
    let put = wire::memory_put_from(body)?;
    let item = call(&state, move |s| async move { s.memory_put(&principal, put).await }).await?;
    Ok(json(StatusCode::OK, &wire::memory_item(&item)))
}

/// One live item.
#[utoipa::path(get, path = "/v1/memory/items", tag = "memory", params(MemoryItemParams),
    responses((status = 200, body = MemoryItemBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_memory(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictQuery(params): StrictQuery<MemoryItemParams>,
) -> ApiResult<Response> {
    let ns = namespace(&params.namespace)?;
    let refresh = params.refresh.unwrap_or(false);
    let item = call(&state, move |s| async move { s.memory_get(&principal, &ns, &params.key, refresh).await }).await?;
    Ok(json(StatusCode::OK, &wire::memory_item(&item)))
}

/// Deletes one item; answers with what was deleted.
#[utoipa::path(delete, path = "/v1/memory/items", tag = "memory", params(DeleteMemoryParams),
    responses((status = 200, body = MemoryItemBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 412, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn delete_memory(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictQuery(params): StrictQuery<DeleteMemoryParams>,
) -> ApiResult<Response> {
    let ns = namespace(&params.namespace)?;
    let expected = params.expected_revision;
    let item =
        call(&state, move |s| async move { s.memory_delete(&principal, &ns, &params.key, expected).await }).await?;
    Ok(json(StatusCode::OK, &wire::memory_item(&item)))
}

/// Deletes the live items named (an absent one is skipped), with one audit record for
/// them all; answers with what was deleted.
#[utoipa::path(post, path = "/v1/memory/delete", tag = "memory", request_body = DeleteMemoryBody,
    responses((status = 200, body = MemoryDeletedBody), (status = 403, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn delete_memory_items(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictJson(body): StrictJson<DeleteMemoryBody>,
) -> ApiResult<Response> {
    let keys =
        body.items.into_iter().map(|item| Ok((namespace(&item.namespace)?, item.key))).collect::<ApiResult<_>>()?;
    let deleted = call(&state, move |s| async move { s.memory_delete_many(&principal, keys).await }).await?;
    Ok(json(StatusCode::OK, &MemoryDeletedBody { deleted: deleted.iter().map(wire::memory_item).collect() }))
}

/// Items within a namespace matching a filter and a full-text query, one page.
#[utoipa::path(post, path = "/v1/memory/search", tag = "memory", request_body = MemorySearchBody,
    responses((status = 200, body = MemoryPageBody), (status = 403, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn search_memory(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictJson(body): StrictJson<MemorySearchBody>,
) -> ApiResult<Response> {
    let search = wire::memory_search_from(body)?;
    let page = call(&state, move |s| async move { s.memory_search(&principal, &search).await }).await?;
    Ok(json(StatusCode::OK, &wire::memory_page(&page)))
}

/// The namespaces of live items within a prefix, cut to a depth, one page.
#[utoipa::path(get, path = "/v1/memory/namespaces", tag = "memory", params(NamespaceParams),
    responses((status = 200, body = NamespacePageBody), (status = 403, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_namespaces(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictQuery(params): StrictQuery<NamespaceParams>,
) -> ApiResult<Response> {
    let query = wire::namespace_query_from(params)?;
    let page = call(&state, move |s| async move { s.memory_namespaces(&principal, &query).await }).await?;
    Ok(json(StatusCode::OK, &wire::namespace_page(&page)))
}

/// Deletes exactly one scope, or a namespace inside one, with one audit record.
#[utoipa::path(post, path = "/v1/memory/forget", tag = "memory", request_body = ForgetBody,
    responses((status = 200, body = ForgetReportBody), (status = 403, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn forget_memory(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictJson(body): StrictJson<ForgetBody>,
) -> ApiResult<Response> {
    let prefix = namespace(&body.prefix)?;
    let report = call(&state, move |s| async move { s.memory_forget(&principal, &prefix).await }).await?;
    Ok(json(StatusCode::OK, &wire::forget_report(&report)))
}

/// The tenant's memory usage and quota (service and admin keys).
#[utoipa::path(get, path = "/v1/memory/usage", tag = "memory",
    responses((status = 200, body = MemoryUsageBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn memory_usage(State(state): State<Shared>, Caller(principal): Caller) -> ApiResult<Response> {
    let (usage, quota) = call(&state, move |s| async move { s.memory_usage(&principal).await }).await?;
    Ok(json(StatusCode::OK, &usage_body(usage, quota)))
}

fn usage_body(usage: MemoryUsage, quota: MemoryQuota) -> MemoryUsageBody {
    MemoryUsageBody { items: usage.items, bytes: usage.bytes, quota_items: quota.items, quota_bytes: quota.bytes }
}

/// Sets the tenant's own memory quota (admin keys); answers with the usage and the
/// quota that now applies.
#[utoipa::path(put, path = "/v1/memory/quota", tag = "memory", request_body = MemoryQuotaBody,
    responses((status = 200, body = MemoryUsageBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn set_memory_quota(
    State(state): State<Shared>,
    Caller(principal): Caller,
    RequiredJson(body): RequiredJson<MemoryQuotaBody>,
) -> ApiResult<Response> {
    let quota = TenantQuota { items: body.items, bytes: body.bytes };
    let (usage, quota) = call(&state, move |s| async move { s.set_memory_quota(&principal, quota).await }).await?;
    Ok(json(StatusCode::OK, &usage_body(usage, quota)))
}

/// Exports a namespace (or, for service and admin keys, every namespace) as JSONL.
#[utoipa::path(get, path = "/v1/memory/export", tag = "memory", params(MemoryExportParams),
    responses((status = 200, description = "a header line, then one item per line", content((String = "application/x-ndjson"))),
        (status = 403, body = ErrorBody), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn export_memory(
    State(state): State<Shared>,
    Caller(principal): Caller,
    StrictQuery(params): StrictQuery<MemoryExportParams>,
) -> ApiResult<Response> {
    let prefix = params.prefix.as_deref().map(namespace).transpose()?;
    let bytes = call(&state, move |s| async move { s.memory_export(&principal, prefix.as_ref()).await }).await?;
    let content_type = HeaderValue::from_static("application/x-ndjson");
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, content_type)], bytes).into_response())
}

/// Imports a memory export into the caller's tenant (items kept exactly).
#[utoipa::path(post, path = "/v1/memory/import", tag = "memory",
    request_body(description = "a memory export (JSONL)", content((String = "application/x-ndjson"))),
    responses((status = 201, body = MemoryImportedBody), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn import_memory(
    State(state): State<Shared>,
    Caller(principal): Caller,
    request: Request,
) -> ApiResult<Response> {
    let bytes = body_bytes(request, &state).await?;
    let imported = call(&state, move |s| async move { s.memory_import(&principal, &bytes).await }).await?;
    Ok(json(StatusCode::CREATED, &MemoryImportedBody { imported }))
}
