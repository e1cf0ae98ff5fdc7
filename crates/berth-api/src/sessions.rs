//! Sessions on the wire: the session body (header, status, metadata, attached runs), a
//! listing page, and the bodies of create, update, close and fork.

use crate::runs::RunBody;
use berth_core::{ProjectId, Revision, SessionId, TenantId, Timestamp, UserId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// An id: 1–128 bytes of `[A-Za-z0-9._~-]`, never `.` or `..` (schema only: ids are the
/// core's strictly parsed newtypes).
pub struct Id;

impl utoipa::PartialSchema for Id {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(crate::ID_PATTERN))
            .min_length(Some(1))
            .max_length(Some(berth_core::limits::ID_BYTES_MAX))
            .examples(["chat-1"])
            .into()
    }
}

impl utoipa::ToSchema for Id {}

/// A label: 1–128 bytes without control characters (schema only).
pub struct Label;

impl utoipa::PartialSchema for Label {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(r"^[^\x00-\x1f\x7f-\x9f]+$"))
            .min_length(Some(1))
            .max_length(Some(berth_core::limits::LABEL_BYTES_MAX))
            .into()
    }
}

impl utoipa::ToSchema for Label {}

/// A session's status. `creating` is a create that has not finished (an import or a
/// create interrupted by a crash; the sweeper removes abandoned ones); listings never
/// filter on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    Creating,
    Active,
    Idle,
    Closed,
    Expired,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScopeBody {
    #[schema(value_type = Id)]
    pub tenant: TenantId,
    #[schema(value_type = Id)]
    pub user: UserId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Id>)]
    pub project: Option<ProjectId>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ParentBody {
    #[schema(value_type = Id)]
    pub session: SessionId,
    /// The parent's events before this seq were copied.
    pub cut_seq: u64,
}

/// `{"mode":"serial"}` (one run at a time) or `{"mode":"parallel","runs_max":N}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode", deny_unknown_fields)]
pub enum ConcurrencyBody {
    /// A struct variant, not a unit one: serde's `deny_unknown_fields` does not reach the
    /// unit variants of an internally tagged enum, so `{"mode":"serial","x":1}` would be
    /// accepted silently (schemathesis found it).
    Serial {},
    Parallel {
        #[serde(deserialize_with = "crate::int64::u32")]
        runs_max: u32,
    },
}

impl Default for ConcurrencyBody {
    fn default() -> ConcurrencyBody {
        ConcurrencyBody::Serial {}
    }
}

/// Written by hand: the derive leaves out `additionalProperties: false` on the variants of
/// an internally tagged enum, and the server refuses unknown fields there too.
impl utoipa::PartialSchema for ConcurrencyBody {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, OneOfBuilder, Type};
        let mode = |name: &str| ObjectBuilder::new().schema_type(Type::String).enum_values(Some([name]));
        let closed = || Some(AdditionalProperties::FreeForm(false));
        let serial =
            ObjectBuilder::new().property("mode", mode("serial")).required("mode").additional_properties(closed());
        let runs_max = ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(utoipa::openapi::KnownFormat::Int32)))
            .minimum(Some(1))
            .maximum(Some(berth_core::limits::PARALLEL_RUNS_MAX));
        let parallel = ObjectBuilder::new()
            .property("mode", mode("parallel"))
            .property("runs_max", runs_max)
            .required("mode")
            .required("runs_max")
            .additional_properties(closed());
        OneOfBuilder::new()
            .item(serial)
            .item(parallel)
            .description(Some(r#"`{"mode":"serial"}` (one run at a time) or `{"mode":"parallel","runs_max":N}`."#))
            .into()
    }
}

impl utoipa::ToSchema for ConcurrencyBody {}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyBody {
    #[serde(default)]
    pub concurrency: ConcurrencyBody,
    /// How long the session stays live without activity (ms).
    #[serde(deserialize_with = "crate::int64::u64")]
    #[schema(minimum = 1)]
    pub activity_ttl_ms: u64,
    /// How long a run's attachment lasts without a heartbeat (ms).
    #[serde(deserialize_with = "crate::int64::u64")]
    #[schema(minimum = 1)]
    pub run_lease_ttl_ms: u64,
}

/// The immutable header, fixed at create.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeaderBody {
    /// The session format version.
    pub version: u32,
    #[schema(value_type = Id)]
    pub id: SessionId,
    pub scope: ScopeBody,
    #[schema(value_type = u64)]
    pub created_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentBody>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    pub delegation_depth: u32,
    pub policy: PolicyBody,
}

/// A session as `GET /v1/sessions/{id}` returns it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SessionBody {
    pub header: HeaderBody,
    pub status: SessionStatus,
    /// The session's activity lease: live until then without activity (ms).
    #[schema(value_type = u64)]
    pub lease_until: Timestamp,
    #[schema(value_type = u64)]
    pub last_activity: Timestamp,
    /// Compare-and-set token of the metadata (`expected_revision`).
    #[schema(value_type = u64)]
    pub revision: Revision,
    /// `null` when unset.
    pub title: Option<String>,
    pub labels: BTreeSet<String>,
    /// Events in the log (the catalog may lag the log by a moment on busy sessions).
    pub event_count: u64,
    /// No conversation event yet (hidden from default listings).
    pub blank: bool,
    /// The attached runs.
    pub runs: Vec<RunBody>,
    #[schema(value_type = u64)]
    pub status_changed_at: Timestamp,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SessionPage {
    pub items: Vec<SessionBody>,
    /// Pass as `cursor` for the next page; `null` on the last one.
    pub next_cursor: Option<String>,
}

/// `POST /v1/sessions`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSessionBody {
    /// Client-chosen id; a time-ordered id (UUIDv7) is generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Id>)]
    pub id: Option<SessionId>,
    /// Owner; defaults to the caller (service and admin keys only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Id>)]
    pub user: Option<UserId>,
    /// Defaults to the caller's project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Id>)]
    pub project: Option<ProjectId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyBody>,
    /// At most 512 bytes (a JSON Schema `maxLength` counts characters: a title of 512
    /// characters may still be over 512 bytes, answered 413).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 512)]
    pub title: Option<String>,
    /// At most 64 distinct labels of 1–128 bytes without control characters.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty", deserialize_with = "distinct_labels")]
    #[schema(value_type = BTreeSet<Label>, max_items = 64)]
    pub labels: BTreeSet<String>,
    /// Where the session came from: 1–128 bytes, no control characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 128, pattern = r"^[^\x00-\x1f\x7f-\x9f]+$")]
    pub origin: Option<String>,
    #[serde(default, deserialize_with = "crate::int64::u32")]
    #[schema(maximum = 64)]
    pub delegation_depth: u32,
}

/// `PATCH /v1/sessions/{id}`: sets title and/or labels.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateSessionBody {
    /// A string sets the title, `null` clears it, absent leaves it.
    #[serde(default, with = "double_option", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, max_length = 512)]
    pub title: Option<Option<String>>,
    /// Replaces the labels (distinct, as at create).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "option_distinct_labels")]
    #[schema(value_type = Option<BTreeSet<Label>>, max_items = 64)]
    pub labels: Option<BTreeSet<String>>,
    /// Compare-and-set: 412 unless the session is at this revision.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int64::option_u64")]
    pub expected_revision: Option<u64>,
}

/// Labels are a set: a request that names one twice is refused (400), not silently
/// deduplicated.
fn distinct_labels<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<BTreeSet<String>, D::Error> {
    let listed = Vec::<String>::deserialize(deserializer)?;
    let count = listed.len();
    let labels: BTreeSet<String> = listed.into_iter().collect();
    if labels.len() != count {
        return Err(serde::de::Error::custom("labels must be distinct"));
    }
    Ok(labels)
}

fn option_distinct_labels<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<BTreeSet<String>>, D::Error> {
    #[derive(Deserialize)]
    struct Labels(#[serde(deserialize_with = "distinct_labels")] BTreeSet<String>);
    Option::<Labels>::deserialize(deserializer).map(|labels| labels.map(|Labels(labels)| labels))
}

mod double_option {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    pub fn serialize<S: Serializer>(value: &Option<Option<String>>, s: S) -> Result<S::Ok, S::Error> {
        value.serialize(s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
        Option::<String>::deserialize(d).map(Some)
    }
}

/// How `close` treats attached runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClosePolicy {
    /// 409 `busy` while runs are attached.
    #[default]
    Refuse,
    /// Detach them as `cancelled` (audited), then close.
    CancelRuns,
}

/// `POST /v1/sessions/{id}/close`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CloseBody {
    #[serde(default)]
    pub policy: ClosePolicy,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int64::option_u64")]
    pub expected_revision: Option<u64>,
}

/// `POST /v1/sessions/{id}/fork`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkBody {
    /// Copy the events before this seq (default: all). `0` copies nothing: the fork is an
    /// empty session whose header names its parent (no `session/end-seed` marker), which
    /// a drop-in then writes in its own layout — how a conversation continues in another
    /// framework.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int64::option_u64")]
    pub upto_seq: Option<u64>,
    /// The new session's id (generated when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Id>)]
    pub new_id: Option<SessionId>,
    /// The new session's owner, in the parent's tenant and project (default: the
    /// parent's; service and admin keys only, as at create).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Id>)]
    pub user: Option<UserId>,
    /// The new session's policy (default: the parent's). A fork that copies events keeps
    /// the parent's concurrency mode (409 otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyBody>,
    /// The new session's title (default: the parent's). At most 512 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 512)]
    pub title: Option<String>,
    /// The new session's labels (default: the parent's), distinct, as at create.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "option_distinct_labels")]
    #[schema(value_type = Option<BTreeSet<Label>>, max_items = 64)]
    pub labels: Option<BTreeSet<String>>,
}

/// `GET /v1/sessions` filters. `status` is a comma-separated list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Owner filter (service and admin keys; a user key always sees only its own).
    #[param(value_type = Option<Id>)]
    pub user: Option<String>,
    #[param(value_type = Option<Id>)]
    pub project: Option<String>,
    /// Comma-separated: `active`, `idle`, `closed`, `expired` (default: all).
    #[param(pattern = r"^(active|idle|closed|expired)(,(active|idle|closed|expired))*$")]
    pub status: Option<String>,
    /// Sessions carrying this label.
    #[param(max_length = 128)]
    pub label: Option<String>,
    /// Forks of this session (whose `header.parent.session` is it).
    #[param(value_type = Option<Id>)]
    pub parent: Option<String>,
    /// Last activity at or after (ms since the epoch).
    #[serde(default, deserialize_with = "crate::int64::query_u64")]
    pub active_since: Option<u64>,
    /// Last activity before (ms since the epoch).
    #[serde(default, deserialize_with = "crate::int64::query_u64")]
    pub active_before: Option<u64>,
    /// Include blank sessions (no conversation events yet).
    pub include_blank: Option<bool>,
    /// Sessions whose id, title or one of its labels holds this text, ignoring case
    /// (Unicode lowercase, NFC) and matching `%`, `_` and `\` literally; at most 256
    /// characters, no control characters (else 400). Empty: no search.
    #[param(max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub q: Option<String>,
    /// The `next_cursor` of the previous page.
    #[param(
        pattern = r"^[0-9]{1,18}\.([A-Za-z0-9_~-][A-Za-z0-9._~-]{0,127}|\.[A-Za-z0-9_~-][A-Za-z0-9._~-]{0,126}|\.\.[A-Za-z0-9._~-]{1,126})$"
    )]
    pub cursor: Option<String>,
    /// Page size (default 50).
    #[serde(default, deserialize_with = "crate::int64::query_usize")]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

/// `DELETE /v1/sessions/{id}?expected_revision=N`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RevisionParams {
    /// Compare-and-set: 412 unless the session is at this revision.
    #[serde(default, deserialize_with = "crate::int64::query_u64")]
    #[param(example = 2)]
    pub expected_revision: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unknown fields are refused in every variant, the unit-like `serial` too.
    #[test]
    fn concurrency_refuses_unknown_fields_in_every_mode() {
        let decode = |text: &str| serde_json::from_str::<ConcurrencyBody>(text);
        assert_eq!(decode(r#"{"mode":"serial"}"#).unwrap(), ConcurrencyBody::Serial {});
        assert_eq!(decode(r#"{"mode":"parallel","runs_max":3}"#).unwrap(), ConcurrencyBody::Parallel { runs_max: 3 });
        assert!(decode(r#"{"mode":"serial","x":1}"#).is_err());
        assert!(decode(r#"{"mode":"parallel","runs_max":3,"x":1}"#).is_err());
        assert_eq!(serde_json::to_string(&ConcurrencyBody::Serial {}).unwrap(), r#"{"mode":"serial"}"#);
    }
}

/// `GET /v1/sessions/counts`: the listing's filters, without status, cursor and limit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CountParams {
    /// Owner filter (service and admin keys; a user key always counts only its own).
    #[param(value_type = Option<Id>)]
    pub user: Option<String>,
    #[param(value_type = Option<Id>)]
    pub project: Option<String>,
    /// Sessions carrying this label.
    #[param(max_length = 128)]
    pub label: Option<String>,
    /// Forks of this session.
    #[param(value_type = Option<Id>)]
    pub parent: Option<String>,
    /// Last activity at or after (ms since the epoch).
    #[serde(default, deserialize_with = "crate::int64::query_u64")]
    pub active_since: Option<u64>,
    /// Last activity before (ms since the epoch).
    #[serde(default, deserialize_with = "crate::int64::query_u64")]
    pub active_before: Option<u64>,
    /// Count blank sessions too.
    pub include_blank: Option<bool>,
    /// The listing's text search (`GET /v1/sessions`' `q`).
    #[param(max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub q: Option<String>,
}

/// One status's count: exact up to `cap`, else `more: true` and `count` = `cap`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct StatusCountBody {
    pub status: SessionStatus,
    pub count: u64,
    /// More than `count` sessions have this status (the count stopped at the cap).
    pub more: bool,
}

/// `GET /v1/sessions/counts`: per listable status, how many sessions match, counted by
/// the same keyset index the listing reads and stopped at `cap` (an exact count over
/// every session would not be a bounded operation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SessionCountsBody {
    pub counts: Vec<StatusCountBody>,
    pub cap: u64,
}
