//! Requests and results of the service's operations.

use berth_catalog::{RunRecord, SessionRecord};
use berth_core::lifecycle::Status;
use berth_core::{Event, JsonText, ProjectId, Revision, RunId, SessionId, SessionPolicy, Timestamp, UserId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// Client-chosen id; a time-ordered id is generated when absent.
    #[serde(default)]
    pub id: Option<SessionId>,
    /// Owner; defaults to the caller. Only `service`/`admin` may create for another user.
    #[serde(default)]
    pub user: Option<UserId>,
    /// Defaults to the caller's project.
    #[serde(default)]
    pub project: Option<ProjectId>,
    #[serde(default)]
    pub policy: Option<SessionPolicy>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub labels: BTreeSet<String>,
    #[serde(default)]
    pub origin: Option<String>,
    #[serde(default)]
    pub delegation_depth: u32,
}

/// A fork: where to cut the parent's log, and what the new session changes from the
/// parent's header and metadata (each absent field is the parent's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ForkSession {
    /// Copy the events before this seq (default: all); `0` copies nothing and writes no
    /// `session/end-seed` marker.
    pub upto_seq: Option<u64>,
    pub new_id: Option<SessionId>,
    /// Another owner in the parent's tenant and project: service and admin principals only.
    pub user: Option<UserId>,
    pub policy: Option<SessionPolicy>,
    pub title: Option<String>,
    pub labels: Option<BTreeSet<String>>,
}

/// An event to append: the service assigns `seq` (and `time` when absent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewEvent {
    #[serde(rename = "type")]
    pub event_type: String,
    #[serde(default = "JsonText::null")]
    pub data: JsonText,
    #[serde(default)]
    pub time: Option<Timestamp>,
    #[serde(default)]
    pub ignorable: bool,
}

impl NewEvent {
    pub fn new(event_type: &str, data: serde_json::Value) -> NewEvent {
        NewEvent { event_type: event_type.to_owned(), data: JsonText::from(&data), time: None, ignorable: false }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppendRequest {
    /// The attached run appending (required for `user` principals).
    #[serde(default)]
    pub run: Option<RunId>,
    /// The seq the first event must get; makes retries idempotent.
    #[serde(default)]
    pub expected_seq: Option<u64>,
    pub events: Vec<NewEvent>,
    /// Caller idempotency (R-S14): a retry with the same key returns the original
    /// outcome (with or without `expected_seq`); the same key with other content is
    /// `IdempotencyKeyReused`. Keys are per session, honoured for its life.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Scoped-memory writes carried by the append (`docs/reference/memory.md`): applied atomically
    /// with the events. Needs an idempotency key.
    #[serde(skip)]
    pub memory: Vec<berth_catalog::scoped::MemoryPut>,
}

/// The seqs a filtered read (`SessionService::read_types`) scans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadRange {
    /// Forward from `from`, up to `before` (exclusive) or the log's end.
    Forward { from: u64, before: Option<u64> },
    /// Backward from `before` (exclusive; at or past the end: from the end) to seq 0.
    Backward { before: u64 },
}

/// A page of a filtered read: the events of the asked types, ascending, among the seqs
/// `[first_seq, next_seq)` it scanned. It holds fewer than `limit` events when the scan
/// reached the end of its range or `TYPED_READ_SCAN_MAX` events: go on from `next_seq`
/// (forward) until a page scans nothing (`next_seq` = `from`), or before `first_seq`
/// (backward) until `first_seq` is 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypedPage {
    pub events: Vec<Event>,
    pub first_seq: u64,
    pub next_seq: u64,
}

/// Most events one filtered read scans.
pub const TYPED_READ_SCAN_MAX: u64 = 100_000;
/// Most event types one filtered read asks for.
pub const READ_TYPES_MAX: usize = 32;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppendOutcome {
    pub first_seq: u64,
    pub next_seq: u64,
    /// The events were already stored identically (a retry); nothing was written.
    pub duplicate: bool,
}

/// What to do when a `serial` session (or a full `parallel` one) already has a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnBusy {
    #[default]
    Reject,
    /// Detach the current (oldest) run as `interrupted` first.
    Interrupt,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachRequest {
    #[serde(default)]
    pub run_id: Option<RunId>,
    #[serde(default)]
    pub expected_revision: Option<Revision>,
    #[serde(default)]
    pub on_busy: OnBusy,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    pub run: RunRecord,
    pub revision: Revision,
    /// The session's activity lease after the attach.
    pub session_lease_until: Timestamp,
    /// Runs detached to make room (`abandoned` or `interrupted`).
    pub displaced: Vec<RunRecord>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeOutcome {
    pub attachment: Attachment,
    /// The closers appended to repair interrupted turns (empty if none were open).
    pub repaired: Vec<Event>,
    /// The latest `checkpoint` event, if any.
    pub checkpoint: Option<Event>,
    pub next_seq: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetadataUpdate {
    /// `Some(None)` clears the title.
    #[serde(default, with = "double_option")]
    pub title: Option<Option<String>>,
    #[serde(default)]
    pub labels: Option<BTreeSet<String>>,
    #[serde(default)]
    pub expected_revision: Option<Revision>,
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClosePolicy {
    /// Refuse (`Busy`) while runs are attached.
    #[default]
    Refuse,
    /// Detach them as `cancelled` (audited), then close.
    CancelRuns,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListRequest {
    #[serde(default)]
    pub user: Option<UserId>,
    #[serde(default)]
    pub project: Option<ProjectId>,
    #[serde(default)]
    pub statuses: Vec<Status>,
    #[serde(default)]
    pub label: Option<String>,
    /// Forks of this session only.
    #[serde(default)]
    pub parent: Option<SessionId>,
    #[serde(default)]
    pub active_since: Option<Timestamp>,
    #[serde(default)]
    pub active_before: Option<Timestamp>,
    #[serde(default)]
    pub include_blank: bool,
    /// Sessions whose id, title or a label holds this text, case-insensitively
    /// (`berth_catalog::SessionSearch`: 1 to 256 characters, no control characters).
    #[serde(default)]
    pub search: Option<String>,
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    pub limit: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionPage {
    pub items: Vec<SessionRecord>,
    pub next_cursor: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepReport {
    pub expired: u64,
    pub deleted: u64,
    pub abandoned_creates: u64,
    /// Memory items removed: past their TTL, or by the tenant's memory retention.
    pub memory_removed: u64,
    /// Sessions whose carried memory writes a crash left unapplied, finished.
    pub carried_finished: u64,
    /// More candidates remain beyond this batch.
    pub more: bool,
}

/// Totals over `model/call` events (issue 54). A field a call left out or `null`
/// counts 0; `errors` counts the calls with a non-null `error`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageTotals {
    pub calls: u64,
    pub errors: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_tokens: u64,
    /// The sum of the calls' `latency_ms` (fractional).
    pub model_ms: f64,
}

/// The totals of one (provider, model) pair.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelUsage {
    pub provider: Option<String>,
    pub model: String,
    pub totals: UsageTotals,
}

/// A log's usage: its model calls' totals, per (provider, model) in that order, and its
/// tool time — `tool_calls` `tool/call` events, `tool_ms` the time from each to the
/// `tool/result` with its `call_id` (none for a result without its call, or written by a
/// repair: `repaired_by`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionUsage {
    pub totals: UsageTotals,
    pub by_model: Vec<ModelUsage>,
    pub tool_calls: u64,
    pub tool_ms: u64,
}

/// A caller's usage over event times in `[since, before)`; `sessions` counts the
/// sessions with a model call in it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TenantUsage {
    pub since: Timestamp,
    pub before: Timestamp,
    pub sessions: u64,
    pub usage: SessionUsage,
}
