//! Runs on the wire: attach, heartbeat, detach and resume.

use crate::events::EventBody;
use crate::sessions::Id;
use berth_core::{Revision, RunId, Timestamp, UserId};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Attached,
    Detached,
    Abandoned,
    Interrupted,
    Cancelled,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunBody {
    #[schema(value_type = Id)]
    pub run_id: RunId,
    #[schema(value_type = Id)]
    pub attached_by: UserId,
    #[schema(value_type = u64)]
    pub attached_at: Timestamp,
    /// The attachment lasts until then without a heartbeat (ms).
    #[schema(value_type = u64)]
    pub lease_until: Timestamp,
    pub status: RunStatus,
}

/// What to do when a `serial` session (or a full `parallel` one) already has a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnBusy {
    /// 409 `busy`.
    #[default]
    Reject,
    /// Detach the current (oldest) run as `interrupted` first.
    Interrupt,
}

/// `POST /v1/sessions/{id}/runs` and `POST /v1/sessions/{id}/resume`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AttachBody {
    /// Client-chosen run id (generated when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Id>)]
    pub run_id: Option<RunId>,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int64::option_u64")]
    pub expected_revision: Option<u64>,
    #[serde(default)]
    pub on_busy: OnBusy,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AttachmentBody {
    pub run: RunBody,
    /// The session's revision after the attach.
    #[schema(value_type = u64)]
    pub revision: Revision,
    /// The session's activity lease after the attach (ms).
    #[schema(value_type = u64)]
    pub session_lease_until: Timestamp,
    /// Runs detached to make room (`abandoned` or `interrupted`).
    pub displaced: Vec<RunBody>,
}

/// `POST /v1/sessions/{id}/runs/{run}/detach`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"outcome": "completed"}))]
pub struct DetachBody {
    /// `completed` (default), `failed`, …: 1–512 bytes without control characters, kept
    /// in the audit log.
    #[serde(default = "completed")]
    #[schema(min_length = 1, max_length = 512, pattern = r"^[^\x00-\x1f\x7f-\x9f]+$")]
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int64::option_u64")]
    pub expected_revision: Option<u64>,
}

impl Default for DetachBody {
    fn default() -> DetachBody {
        DetachBody { outcome: completed(), expected_revision: None }
    }
}

fn completed() -> String {
    "completed".to_owned()
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ResumeOutcomeBody {
    pub attachment: AttachmentBody,
    /// The closers appended to repair interrupted turns (empty if none were open).
    pub repaired: Vec<EventBody>,
    /// The latest `checkpoint` event, if any.
    pub checkpoint: Option<EventBody>,
    pub next_seq: u64,
}
