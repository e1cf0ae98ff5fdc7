//! Export, import, the audit log, retention and `whoami` on the wire.

use crate::sessions::{Id, SessionBody};
use berth_core::{ProjectId, Revision, SessionId, TenantId, Timestamp, UserId};
use serde::{Deserialize, Serialize};

/// `GET /v1/sessions/{id}/export`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ExportParams {
    /// `jsonl` (default: canonical header line + event lines) or `zip` (with its forks).
    #[param(pattern = "^(jsonl|zip)$")]
    pub format: Option<String>,
}

/// `POST /v1/import`: the sessions created.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ImportedBody {
    pub sessions: Vec<SessionBody>,
}

/// `GET /v1/audit`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditParams {
    /// First audit position (default 0).
    #[serde(default, deserialize_with = "crate::int64::query_u64")]
    pub from: Option<u64>,
    /// Most entries (default 100).
    #[serde(default, deserialize_with = "crate::int64::query_usize")]
    #[param(minimum = 0, maximum = 1000)]
    pub limit: Option<usize>,
}

/// `GET /v1/audit/search`: the audit log filtered, scanned forward from `from`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditSearchParams {
    /// First audit position scanned (default 0).
    #[serde(default, deserialize_with = "crate::int64::query_u64")]
    pub from: Option<u64>,
    /// Most matching entries (default 100).
    #[serde(default, deserialize_with = "crate::int64::query_usize")]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// Entries with exactly this action (`create`, `attach`, `detach`, …).
    #[param(min_length = 1, max_length = 128)]
    pub action: Option<String>,
    /// Entries about this session.
    #[param(value_type = Option<crate::sessions::Id>)]
    pub session: Option<String>,
    /// Entries by exactly this actor (`user:alice`, `admin:ops`, `system:sweeper`).
    #[param(min_length = 1, max_length = 300)]
    pub actor: Option<String>,
    /// Entries at or after this time (ms since the epoch).
    #[serde(default, deserialize_with = "crate::int64::query_u64")]
    pub since: Option<u64>,
    /// Entries before this time (ms since the epoch).
    #[serde(default, deserialize_with = "crate::int64::query_u64")]
    pub before: Option<u64>,
}

/// `GET /v1/audit/search`: matching entries in stored order. One call scans a bounded
/// number of entries; `next_from` is where the next call continues (`null`: the scan
/// reached the end of the log).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditSearchPage {
    pub entries: Vec<AuditEntryBody>,
    pub next_from: Option<u64>,
}

/// One entry of a tenant's tamper-evident audit chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditEntryBody {
    pub seq: u64,
    #[schema(value_type = Id)]
    pub tenant: TenantId,
    #[schema(value_type = u64)]
    pub time: Timestamp,
    /// `user:<id>`, `service:<id>`, `admin:<id>` or `system:<component>`.
    pub actor: String,
    pub action: String,
    #[schema(value_type = Option<Id>)]
    pub session: Option<SessionId>,
    #[schema(value_type = Option<u64>)]
    pub revision: Option<Revision>,
    /// `ok`, `denied`, or an error code.
    pub outcome: String,
    /// Free detail (counts, bytes, run ids…).
    #[schema(value_type = crate::events::AnyJson)]
    pub details: serde_json::Value,
    pub prev_hash: String,
    pub hash: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditVerificationBody {
    pub entries: u64,
    /// `null` when the chain is intact; otherwise the first seq where it breaks.
    pub broken_at: Option<u64>,
    pub reason: Option<String>,
}

/// `PUT /v1/retention`: the tenant's retention policy (absent fields: no such rule).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"idle_ttl_ms": 2592000000_u64, "delete_terminal_after_ms": 7776000000_u64}))]
pub struct RetentionPolicyBody {
    /// Expire live sessions with no activity for this long (ms).
    #[serde(default, deserialize_with = "crate::int64::option_u64")]
    pub idle_ttl_ms: Option<u64>,
    /// Expire live sessions older than this, whatever their activity (ms).
    #[serde(default, deserialize_with = "crate::int64::option_u64")]
    pub max_age_ms: Option<u64>,
    /// Delete closed and expired sessions this long after they became terminal (ms).
    #[serde(default, deserialize_with = "crate::int64::option_u64")]
    pub delete_terminal_after_ms: Option<u64>,
    /// Delete memory items not updated for this long (ms).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int64::option_u64")]
    pub memory_max_age_ms: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Service,
    Admin,
}

/// `GET /v1/whoami`: the principal a key or token stands for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PrincipalBody {
    #[schema(value_type = Id)]
    pub tenant: TenantId,
    #[schema(value_type = Id)]
    pub user: UserId,
    #[schema(value_type = Option<Id>)]
    pub project: Option<ProjectId>,
    pub role: Role,
}

/// `POST /v1/admin/backup`: a backup of the whole store (every tenant), written on the
/// server's machine into a new directory under the one `berth serve --backup-dir`
/// names. An admin key of the operator tenant only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BackupRequestBody {
    /// The new backup's directory name under the backup directory: letters, digits,
    /// `.`, `_` and `-`, not starting with `.`; it must not exist yet.
    #[schema(pattern = "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")]
    pub name: String,
    /// Take an incremental backup on top of the earlier backup of this name (only the
    /// catalog and the logs that changed are copied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")]
    pub since: Option<String>,
}

/// `POST /v1/admin/backup`: the backup taken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BackupBody {
    /// The backup's id (in its `manifest.json`).
    pub id: String,
    /// Its directory name under the server's backup directory.
    pub name: String,
    /// `full`, or `incremental` (on top of `previous`).
    #[schema(pattern = "^(full|incremental)$")]
    pub kind: String,
    /// The id of the backup an incremental one builds on.
    pub previous: Option<String>,
    /// When the catalog's snapshot was taken: every change committed and every event
    /// appended before it is in the backup.
    #[schema(value_type = u64)]
    pub snapshot_at: Timestamp,
    pub sessions: u64,
    pub logs_copied: u64,
    /// Logs unchanged since `previous`, left in the earlier backup that holds them.
    pub logs_unchanged: u64,
    /// Sessions deleted while the backup ran (their deletion completes on restore).
    pub vanished: u64,
    /// Bytes written.
    pub bytes: u64,
    pub duration_ms: u64,
}
