//! Events on the wire: the event as it travels (reads, the live tail, resume), the
//! append request and its outcome, and the read and tail parameters.

use crate::sessions::Id;
use berth_core::{EventType, JsonText, RunId, Seq, Timestamp};
use serde::{Deserialize, Serialize};

/// Any JSON value: object, array, string, number, boolean or null (schema only).
pub struct AnyJson;

impl utoipa::PartialSchema for AnyJson {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, SchemaType};
        ObjectBuilder::new()
            .schema_type(SchemaType::AnyValue)
            .description(Some("any JSON value: object, array, string, number, boolean or null"))
            .into()
    }
}

impl utoipa::ToSchema for AnyJson {}

/// One message of the live tail (`text/event-stream`). `event: event` carries an
/// [`EventBody`] as JSON in `data` and its seq in `id`; `event: error` an [`ErrorBody`]
/// (the stream then ends); `event: end` `{"reason": "max_events" | "idle_timeout",
/// "next_seq"}` (the stream then ends). Comments (`: heartbeat`) keep idle streams open.
///
/// [`ErrorBody`]: crate::ErrorBody
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SseMessage {
    #[schema(pattern = "^(event|error|end)$")]
    pub event: Option<String>,
    /// The event's seq (`event: event` only): send it back as `Last-Event-ID`.
    #[schema(pattern = "^[0-9]+$")]
    pub id: Option<String>,
    /// JSON text.
    pub data: String,
}

/// One event of a session's log as it travels: `seq, type, time, run?, data, ignorable?`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EventBody {
    /// Position in the log, contiguous from 0.
    #[schema(value_type = u64)]
    pub seq: Seq,
    #[serde(rename = "type")]
    #[schema(value_type = String, pattern = r"^[a-z0-9_.-]+(/[a-z0-9_.-]+)*$", max_length = 64)]
    pub event_type: EventType,
    /// When it happened (ms since the epoch).
    #[schema(value_type = u64)]
    pub time: Timestamp,
    /// The run that appended it; always present in `parallel` sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Id>)]
    pub run: Option<RunId>,
    #[schema(value_type = AnyJson)]
    pub data: JsonText,
    /// Readers that do not know the type may skip it; omitted when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignorable: bool,
    /// The idempotency key of the append that stored it; omitted for keyless appends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9._:+/=-]+$")]
    pub idempotency_key: Option<String>,
}

/// An event to append: the server assigns `seq` (and `time` when absent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewEventBody {
    #[serde(rename = "type")]
    #[schema(value_type = String, pattern = r"^[a-z0-9_.-]+(/[a-z0-9_.-]+)*$", max_length = 64)]
    pub event_type: String,
    /// Any JSON value (default `null`); at most 128 levels deep, no duplicate keys.
    #[serde(default = "JsonText::null")]
    #[schema(value_type = AnyJson)]
    pub data: JsonText,
    /// When it happened (ms since the epoch; default: the server's clock).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int64::option_timestamp")]
    #[schema(value_type = Option<u64>)]
    pub time: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignorable: bool,
}

/// `POST /v1/sessions/{id}/events`: one atomic, durable batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppendBody {
    /// The attached run appending (required for user keys and `parallel` sessions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Id>)]
    pub run: Option<RunId>,
    /// The seq the first event must get (409 `seq_conflict` otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::int64::option_u64")]
    pub expected_seq: Option<u64>,
    /// At most 1000 events, 8 MiB in all, 1 MiB each.
    #[schema(max_items = 1000)]
    pub events: Vec<NewEventBody>,
    /// Caller idempotency (also the `Idempotency-Key` header): a retry with the same key
    /// answers the original outcome (`duplicate: true`), with or without `expected_seq`;
    /// the same key with other events is 409 `idempotency_key_reused`. Per session, for
    /// its life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9._:+/=-]+$")]
    pub idempotency_key: Option<String>,
    /// Scoped-memory writes carried by this append (docs/reference/memory.md): authorized and
    /// compare-and-set checked before the log append, applied before the answer, and
    /// finished after a crash — atomic with the events. Needs an idempotency key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 100)]
    pub memory: Vec<crate::memory::PutMemoryBody>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AppendOutcomeBody {
    /// The seq of the batch's first event.
    pub first_seq: u64,
    /// The seq after the batch's last event.
    pub next_seq: u64,
    /// The batch was already stored (a retry); nothing was written.
    pub duplicate: bool,
}

/// A page of events, in seq order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EventPage {
    pub events: Vec<EventBody>,
    /// The seq after the last event returned: ask `from=<next_seq>` to read on. With no
    /// events, `from` (or, for `before`, `first_seq`).
    pub next_seq: u64,
    /// The seq of the first event returned: ask `before=<first_seq>` to page backwards
    /// (0: the page starts the log). With no events, equals `next_seq`.
    pub first_seq: u64,
}

/// `GET /v1/sessions/{id}/events`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ReadParams {
    /// First seq to read (default 0).
    #[serde(default, deserialize_with = "crate::int64::query_u64")]
    pub from: Option<u64>,
    /// Read the `limit` events before this seq instead (the tail when it is at or past
    /// the end), in ascending order. With `from`: the range `[from, before)`, forward.
    #[serde(default, deserialize_with = "crate::int64::query_u64")]
    pub before: Option<u64>,
    /// Most events to return (default 1000).
    #[serde(default, deserialize_with = "crate::int64::query_u64")]
    #[param(minimum = 0, maximum = 1000)]
    pub limit: Option<u64>,
    /// A point read: the events at these seqs (comma-separated), each once, ascending,
    /// whatever the order or repetition asked. At most 1000 distinct seqs (422
    /// `limit_exceeded`, `limit_name: page_size`); a seq at or past the log's end is 404
    /// `not_found` with `actual` = that seq. With `from` / `before`, only the seqs in
    /// `[from, before)` are read; with `limit`, only the first `limit` of them.
    #[serde(default)]
    #[param(pattern = "^[0-9]+(,[0-9]+)*$", example = "0,1")]
    pub seqs: Option<String>,
    /// Only events of these types (comma-separated exact names, at most 32): `limit`
    /// counts the events returned, and `first_seq` / `next_seq` bound the seqs scanned
    /// (`[first_seq, next_seq)`), at most 100,000 per request. A page may then hold fewer
    /// than `limit` events before the end: read on from `next_seq` until a page scans
    /// nothing (`next_seq` = `from`), or before `first_seq` until it is 0.
    #[serde(default)]
    #[param(
        max_length = 2200,
        pattern = r"^[a-z0-9_.-]+(/[a-z0-9_.-]+)*(,[a-z0-9_.-]+(/[a-z0-9_.-]+)*){0,31}$",
        example = "user/message,tool/call"
    )]
    pub types: Option<String>,
}

/// The event types of a filtered read (`types=user/message,tool/call`), each once, in
/// the order given; `None` when a name is empty.
pub fn parse_types(text: &str) -> Option<Vec<String>> {
    let mut types: Vec<String> = Vec::new();
    for part in text.split(',') {
        if part.is_empty() {
            return None;
        }
        if !types.iter().any(|seen| seen == part) {
            types.push(part.to_owned());
        }
    }
    Some(types)
}

/// The seqs of a point read (`seqs=3,17,40`): ascending, each once. A number past the
/// largest wire integer is a position no log reaches, so it becomes that integer (read
/// as past the end, 404) rather than a parse error. `None` when the text is not
/// comma-separated digits.
pub fn parse_seqs(text: &str) -> Option<Vec<u64>> {
    let mut seqs = Vec::new();
    for part in text.split(',') {
        if part.is_empty() || !part.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        let seq = part.parse::<u64>().map_or(crate::int64::WIRE_INT_MAX, |seq| seq.min(crate::int64::WIRE_INT_MAX));
        seqs.push(seq);
    }
    seqs.sort_unstable();
    seqs.dedup();
    Some(seqs)
}

/// `GET /v1/sessions/{id}/events/stream`: bounded when asked, so scripts and tests end.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TailParams {
    /// First seq to send (default 0). `Last-Event-ID` wins when present.
    #[serde(default, deserialize_with = "crate::int64::query_u64")]
    pub from: Option<u64>,
    /// End the stream (with `event: end`) after sending this many events.
    #[serde(default, deserialize_with = "crate::int64::query_u64")]
    #[param(minimum = 1)]
    pub max_events: Option<u64>,
    /// End the stream (with `event: end`) after this long without a new event (ms).
    #[serde(default, deserialize_with = "crate::int64::query_u64")]
    #[param(minimum = 1, maximum = 86400000)]
    pub idle_timeout_ms: Option<u64>,
}
