//! Scoped memory on the wire (`/v1/memory/...`; `docs/reference/memory.md`).
//!
//! A namespace is `user/<id>`, `project/<id>` or `app/<name>` followed by free
//! segments; values are any JSON, kept exactly as sent (numbers are never converted).

use crate::events::AnyJson;
use crate::sessions::Id;
use berth_core::{JsonText, SessionId, Timestamp};
use serde::{Deserialize, Serialize};

/// The namespace grammar: a scope (`user/<id>`, `project/<id>`, `app/<name>`, ids by
/// the id grammar), then at most 14 free segments of 1–128 characters without `/` or
/// control characters, never `.` or `..`; 512 bytes in all (over it: 413).
pub const NAMESPACE_PATTERN: &str = r"^(user|project|app)/([A-Za-z0-9_~-][A-Za-z0-9._~-]{0,127}|\.[A-Za-z0-9_~-][A-Za-z0-9._~-]{0,126}|\.\.[A-Za-z0-9._~-]{1,126})(/([^/.\x00-\x1f\x7f-\x9f][^/\x00-\x1f\x7f-\x9f]{0,127}|\.[^/.\x00-\x1f\x7f-\x9f][^/\x00-\x1f\x7f-\x9f]{0,126}|\.\.[^/\x00-\x1f\x7f-\x9f]{1,126})){0,14}$";

/// A memory namespace in a request (schema only: the server parses it with
/// `berth_catalog::scoped::Namespace::parse`), like `sessions::Id` for ids.
pub struct MemoryNamespace;

impl utoipa::PartialSchema for MemoryNamespace {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(NAMESPACE_PATTERN))
            .max_length(Some(berth_core::limits::MEMORY_NAMESPACE_BYTES_MAX))
            .examples(["user/alice/preferences"])
            .into()
    }
}

impl utoipa::ToSchema for MemoryNamespace {}

/// A memory item's key: 1–512 bytes without control characters (schema only).
pub struct MemoryKey;

impl utoipa::PartialSchema for MemoryKey {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(r"^[^\x00-\x1f\x7f-\x9f]+$"))
            .min_length(Some(1))
            .max_length(Some(berth_core::limits::MEMORY_KEY_BYTES_MAX))
            .into()
    }
}

impl utoipa::ToSchema for MemoryKey {}

/// A stored item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MemoryItemBody {
    pub namespace: String,
    pub key: String,
    /// Exactly as written.
    #[schema(value_type = AnyJson)]
    pub value: JsonText,
    /// 1 on creation, +1 per put.
    #[schema(value_type = u64)]
    pub revision: u64,
    #[schema(value_type = u64)]
    pub created_at: Timestamp,
    #[schema(value_type = u64)]
    pub updated_at: Timestamp,
    /// Invisible from then on (ms), when written with a TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub expires_at: Option<Timestamp>,
    /// The TTL it was written with (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Deleted with this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Id>)]
    pub bound_to: Option<SessionId>,
}

/// `PUT /v1/memory/items`: creates or replaces one item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutMemoryBody {
    #[schema(value_type = MemoryNamespace)]
    pub namespace: String,
    #[schema(value_type = MemoryKey)]
    pub key: String,
    #[schema(value_type = AnyJson)]
    pub value: JsonText,
    /// Compare-and-set: 0 = only if absent; n = only if at revision n (412 otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int64::option_u64")]
    pub expected_revision: Option<u64>,
    /// Time to live (ms, at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int64::option_u64")]
    #[schema(minimum = 1)]
    pub ttl_ms: Option<u64>,
    /// Delete the item with this session (one the caller may access).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Id>)]
    pub bound_to: Option<SessionId>,
}

/// `GET /v1/memory/items`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct MemoryItemParams {
    #[param(value_type = MemoryNamespace)]
    pub namespace: String,
    #[param(value_type = MemoryKey)]
    pub key: String,
    /// Extend the item's TTL from now (an item written with one).
    pub refresh: Option<bool>,
}

/// `DELETE /v1/memory/items`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeleteMemoryParams {
    #[param(value_type = MemoryNamespace)]
    pub namespace: String,
    #[param(value_type = MemoryKey)]
    pub key: String,
    /// Only if the item is at this revision (412 otherwise).
    #[serde(default, deserialize_with = "crate::int64::query_u64")]
    pub expected_revision: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FilterOpBody {
    Eq,
    Ne,
    Gt,
    Gte,
    Lt,
    Lte,
    In,
}

/// One filter condition on a top-level field of the value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConditionBody {
    #[schema(min_length = 1)]
    pub field: String,
    pub op: FilterOpBody,
    /// The operand (for `in`, an array of values).
    #[schema(value_type = AnyJson)]
    pub value: JsonText,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MemoryOrder {
    /// Namespace, then key, ascending.
    #[default]
    Key,
    /// Most recently updated first.
    UpdatedAt,
    /// Most occurrences of the query's terms first (needs `query`).
    Relevance,
}

/// `POST /v1/memory/search`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySearchBody {
    /// The namespace searched, with everything inside it.
    #[schema(value_type = MemoryNamespace)]
    pub prefix: String,
    /// Conditions ANDed (docs/reference/memory.md: exact numbers, mixed types, missing fields).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filter: Vec<ConditionBody>,
    /// Full text: terms ANDed, case-insensitive, no stemming.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    #[serde(default)]
    pub order: MemoryOrder,
    /// The `next_cursor` of the previous page (same search).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Page size (default 50, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int64::option_u64")]
    #[schema(minimum = 1, maximum = 1000)]
    pub limit: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MemoryPageBody {
    pub items: Vec<MemoryItemBody>,
    /// Present when the page was full: pass it as `cursor` for the next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `GET /v1/memory/namespaces`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct NamespaceParams {
    #[param(value_type = MemoryNamespace)]
    pub prefix: String,
    /// Cut namespaces to this many segments (at least 2).
    #[serde(default, deserialize_with = "crate::int64::query_u64")]
    #[param(minimum = 2)]
    pub max_depth: Option<u64>,
    #[serde(default)]
    pub cursor: Option<String>,
    /// Page size (default 50, at most 1000).
    #[serde(default, deserialize_with = "crate::int64::query_u64")]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NamespacePageBody {
    pub namespaces: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `POST /v1/memory/forget`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgetBody {
    /// A scope (`user/alice`) or a namespace inside one: exactly that is deleted.
    #[schema(value_type = MemoryNamespace)]
    pub prefix: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ForgetReportBody {
    pub prefix: String,
    #[schema(value_type = u64)]
    pub items: u64,
    #[schema(value_type = u64)]
    pub bytes: u64,
    /// The forget's record in the tenant's audit log.
    #[schema(value_type = u64)]
    pub audit_seq: u64,
    /// Sessions whose logs still hold values written into this scope by appends; they
    /// stay there until those sessions are deleted.
    #[schema(value_type = Vec<Id>)]
    pub sessions_holding_values: Vec<SessionId>,
}

/// `GET /v1/memory/usage` (service and admin keys).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MemoryUsageBody {
    #[schema(value_type = u64)]
    pub items: u64,
    #[schema(value_type = u64)]
    pub bytes: u64,
    #[schema(value_type = u64)]
    pub quota_items: u64,
    #[schema(value_type = u64)]
    pub quota_bytes: u64,
}

/// `GET /v1/memory/export`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct MemoryExportParams {
    /// Export this namespace (default: every namespace, service and admin keys).
    #[param(value_type = Option<MemoryNamespace>)]
    pub prefix: Option<String>,
}

/// `POST /v1/memory/import`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MemoryImportedBody {
    #[schema(value_type = u64)]
    pub imported: u64,
}

/// `PUT /v1/memory/quota` (admin keys): the tenant's own quota. Each limit given
/// replaces the server's default for this tenant; each left out (or `null`) is the
/// default again.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"items": 100000, "bytes": 104857600}))]
pub struct MemoryQuotaBody {
    /// Items the tenant may store (`memory_items`).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int64::option_u64")]
    #[schema(value_type = Option<u64>)]
    pub items: Option<u64>,
    /// Bytes of namespaces, keys and values the tenant may store (`memory_bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int64::option_u64")]
    #[schema(value_type = Option<u64>)]
    pub bytes: Option<u64>,
}

/// One item named by `POST /v1/memory/delete`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryKeyBody {
    #[schema(value_type = MemoryNamespace)]
    pub namespace: String,
    #[schema(value_type = MemoryKey)]
    pub key: String,
}

/// `POST /v1/memory/delete`: deletes the live items named (an absent one is skipped),
/// in one transaction with one audit record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteMemoryBody {
    /// At most 1000.
    #[schema(max_items = 1000)]
    pub items: Vec<MemoryKeyBody>,
}

/// What `POST /v1/memory/delete` deleted, in the order named.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MemoryDeletedBody {
    pub deleted: Vec<MemoryItemBody>,
}
