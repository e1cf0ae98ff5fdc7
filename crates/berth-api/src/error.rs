//! The body of every error response: `{code, message, retryable, …}`. `code` is the wire
//! code of the error's class (`berth_core::ErrorClass`), the one vocabulary clients
//! branch on.

use berth_core::ErrorClass;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// Stable, machine-readable: branch on this. `/v1` may add codes, each within an
    /// existing HTTP status; treat an unknown code as its status's class.
    #[schema(example = "seq_conflict")]
    pub code: String,
    /// For people; may change between versions.
    pub message: String,
    /// Sending the same request again, unchanged, may succeed and is safe (with an
    /// idempotency key or `expected_seq` for appends): `rate_limited`, `timeout`,
    /// `unavailable`, `fenced`.
    pub retryable: bool,
    /// `revision_conflict`: the revision the caller expected (`expected_revision`).
    /// `seq_conflict`: the seq the log expected, i.e. its next seq (append there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<u64>,
    /// `revision_conflict`: the stored revision. `seq_conflict`: the seq the request
    /// gave (`expected_seq`, or where a keyed batch asked to start). Limits: the actual
    /// size or count. `not_found` of a point read (`seqs=`): the first seq at or past
    /// the log's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual: Option<u64>,
    /// Limits: the limit that was exceeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Limits: which one (`event_bytes`, `batch_events`, `page_size`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_name: Option<String>,
    /// `terminal`: the session's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// `run_not_attached`: the run named by the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
}

impl ErrorBody {
    /// A body with `retryable` taken from the code's class.
    pub fn new(code: &str, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            code: code.to_owned(),
            message: message.into(),
            retryable: ErrorClass::from_code(code).is_some_and(ErrorClass::retryable),
            expected: None,
            actual: None,
            limit: None,
            limit_name: None,
            state: None,
            run: None,
        }
    }
}
