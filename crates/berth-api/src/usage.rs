//! Usage (issue 54): a session's LLM calls and tool time, and the caller's totals over a
//! range of event times — computed by the server from the `model/call`, `tool/call` and
//! `tool/result` events when asked.

use berth_core::{SessionId, Timestamp};
use serde::{Deserialize, Serialize};

/// `GET /v1/usage`: the range of event times `[since, before)`, in ms since the epoch
/// (the names and unit of the audit search's range).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct UsageParams {
    /// Events at or after this time (ms since the epoch).
    #[serde(deserialize_with = "crate::int64::query_u64_required")]
    #[param(example = 1_767_225_600_000u64)]
    pub since: u64,
    /// Events before this time (ms since the epoch); after `since`.
    #[serde(deserialize_with = "crate::int64::query_u64_required")]
    #[param(example = 1_767_312_000_000u64)]
    pub before: u64,
}

/// The totals of one (provider, model) pair.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ModelUsageBody {
    /// The calls' `provider` (`null`: not given).
    pub provider: Option<String>,
    pub model: String,
    #[schema(value_type = u64)]
    pub calls: u64,
    /// Calls with a non-null `error`.
    #[schema(value_type = u64)]
    pub errors: u64,
    #[schema(value_type = u64)]
    pub input_tokens: u64,
    #[schema(value_type = u64)]
    pub output_tokens: u64,
    #[schema(value_type = u64)]
    pub cached_tokens: u64,
    /// The sum of the calls' `latency_ms` (may be fractional).
    pub model_ms: f64,
}

/// `GET /v1/sessions/{id}/usage`: totals over the session's `model/call` events (a field
/// a call left out or `null` counts 0), per (provider, model) sorted by provider (none
/// first) then model, and its tool time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SessionUsageBody {
    #[schema(value_type = crate::sessions::Id)]
    pub session: SessionId,
    #[schema(value_type = u64)]
    pub calls: u64,
    #[schema(value_type = u64)]
    pub errors: u64,
    #[schema(value_type = u64)]
    pub input_tokens: u64,
    #[schema(value_type = u64)]
    pub output_tokens: u64,
    #[schema(value_type = u64)]
    pub cached_tokens: u64,
    /// The sum of the calls' `latency_ms`.
    pub model_ms: f64,
    /// `tool/call` events.
    #[schema(value_type = u64)]
    pub tool_calls: u64,
    /// The time from each `tool/call` to the `tool/result` with its `call_id` (a result
    /// without its call, or written by a repair, adds nothing).
    #[schema(value_type = u64)]
    pub tool_ms: u64,
    pub by_model: Vec<ModelUsageBody>,
}

/// `GET /v1/usage`: the caller's totals over event times in `[since, before)` — over
/// every session it may list (an admin or service key: the tenant's; a user key: its
/// own) whose activity overlaps the range. A model call or tool call counts when its
/// time is in the range; a tool call's duration when its result's time is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UsageBody {
    #[schema(value_type = u64)]
    pub since: Timestamp,
    #[schema(value_type = u64)]
    pub before: Timestamp,
    /// Sessions with a model call in the range.
    #[schema(value_type = u64)]
    pub sessions: u64,
    #[schema(value_type = u64)]
    pub calls: u64,
    #[schema(value_type = u64)]
    pub errors: u64,
    #[schema(value_type = u64)]
    pub input_tokens: u64,
    #[schema(value_type = u64)]
    pub output_tokens: u64,
    #[schema(value_type = u64)]
    pub cached_tokens: u64,
    pub model_ms: f64,
    #[schema(value_type = u64)]
    pub tool_calls: u64,
    #[schema(value_type = u64)]
    pub tool_ms: u64,
    pub by_model: Vec<ModelUsageBody>,
}
