//! The reads behind a selected checkpoint, all bounded: the checkpoint (and the one it is
//! compared with) by seq, the `WINDOW_EVENTS` events before it — its batch's blobs, its
//! parent (usually the previous checkpoint) and the conversation up to it — and the
//! blobs of the channel versions stored in earlier batches, by the seqs its record names
//! (`at`). Never a scan of the log.

use super::decode::{self, BlobSummary, CheckpointSummary};
use super::CHECKPOINT;
use crate::api::{call, Shared};
use crate::error::ApiError;
use crate::ui::signin::Viewer;
use berth_core::vocabulary as vocab;
use berth_core::{Event, SessionId};
use serde_json::Value;

/// Events read before a selected checkpoint (its batch, its parent, its messages).
pub const WINDOW_EVENTS: u64 = 200;
/// Channels of one checkpoint shown (and blobs read for them).
pub const CHANNELS_SHOWN_MAX: usize = 100;
/// Messages shown at a checkpoint (the latest).
pub const MESSAGES_SHOWN_MAX: usize = 30;

/// A checkpoint as read: where it is and what it says.
#[derive(Clone, Debug)]
pub struct Located {
    pub seq: u64,
    pub summary: CheckpointSummary,
}

/// One channel of the selected checkpoint, with its value's record when found.
#[derive(Clone, Debug)]
pub struct ChannelRow {
    pub channel: String,
    pub version: String,
    /// The seq of the blob holding this version, and what it holds.
    pub blob: Option<(u64, BlobSummary)>,
}

/// What the state section shows of a selected checkpoint.
#[derive(Clone, Debug)]
pub struct Selected {
    pub checkpoint: Located,
    pub channels: Vec<ChannelRow>,
    /// Channels past `CHANNELS_SHOWN_MAX`, not shown.
    pub channels_not_shown: usize,
    /// The conversation's message events before it (the latest `MESSAGES_SHOWN_MAX`).
    pub messages: Vec<Event>,
    /// What it is compared with: the checkpoint asked for (`vs`), else its parent.
    pub compared: Option<Located>,
    /// `vs` was asked for (else the parent, when found among the window).
    pub compared_chosen: bool,
}

fn located(event: &Event) -> Result<Located, ApiError> {
    let seq = event.seq.get();
    if event.event_type.as_str() != CHECKPOINT {
        return Err(ApiError::bad_request(format!("cp: event #{seq} is not an {CHECKPOINT}")));
    }
    let summary = decode::checkpoint_summary(&event.data.to_value())
        .ok_or_else(|| ApiError::bad_request(format!("cp: event #{seq} is not a readable {CHECKPOINT}")))?;
    Ok(Located { seq, summary })
}

async fn read_seqs(state: &Shared, viewer: &Viewer, id: &SessionId, seqs: Vec<u64>) -> Result<Vec<Event>, ApiError> {
    if seqs.is_empty() {
        return Ok(Vec::new());
    }
    let (principal, id) = (viewer.principal.clone(), id.clone());
    call(state, |s| async move { s.read_seqs(&principal, &id, &seqs).await }).await
}

/// Reads checkpoint `seq` (compared with `vs`, else its parent) and what it shows.
pub async fn read_selected(
    state: &Shared,
    viewer: &Viewer,
    id: &SessionId,
    seq: u64,
    vs: Option<u64>,
) -> Result<Selected, ApiError> {
    let asked: Vec<u64> = std::iter::once(seq).chain(vs).collect();
    let events = read_seqs(state, viewer, id, asked).await?;
    let find = |wanted: u64| events.iter().find(|event| event.seq.get() == wanted).map(located).transpose();
    let checkpoint = find(seq)?.ok_or_else(|| ApiError::bad_request(format!("cp: no event #{seq}")))?;
    let chosen = match vs {
        Some(vs) => Some(find(vs)?.ok_or_else(|| ApiError::bad_request(format!("vs: no event #{vs}")))?),
        None => None,
    };
    let (principal, window_id) = (viewer.principal.clone(), id.clone());
    let window =
        call(state, |s| async move { s.read_before(&principal, &window_id, seq, WINDOW_EVENTS).await }).await?;
    let summary = &checkpoint.summary;
    let shown = summary.channel_versions.len().min(CHANNELS_SHOWN_MAX);
    let channels = channel_rows(state, viewer, id, summary, &window).await?;
    let compared_chosen = chosen.is_some();
    let compared = chosen.or_else(|| parent_in(&window, summary));
    Ok(Selected {
        channels_not_shown: summary.channel_versions.len() - shown,
        channels,
        messages: messages_in(&window),
        compared,
        compared_chosen,
        checkpoint,
    })
}

/// The checkpoint's parent among the window (the latest of that id and namespace).
fn parent_in(window: &[Event], summary: &CheckpointSummary) -> Option<Located> {
    let parent = summary.parent.as_deref()?;
    window.iter().rev().filter(|event| event.event_type.as_str() == CHECKPOINT).find_map(|event| {
        let found = located(event).ok()?;
        (found.summary.id == parent && found.summary.ns == summary.ns).then_some(found)
    })
}

/// The conversation's messages among the window, the latest `MESSAGES_SHOWN_MAX`.
fn messages_in(window: &[Event]) -> Vec<Event> {
    let kinds = [vocab::USER_MESSAGE, vocab::ASSISTANT_MESSAGE, vocab::SYSTEM_MESSAGE, vocab::TOOL_RESULT];
    let messages: Vec<&Event> = window.iter().filter(|event| kinds.contains(&event.event_type.as_str())).collect();
    let skip = messages.len().saturating_sub(MESSAGES_SHOWN_MAX);
    messages.into_iter().skip(skip).cloned().collect()
}

/// Whether an event is the `lg/blob` of (`ns`, `channel`, `version`).
fn blob_of(event: &Event, data: &Value, ns: &str, channel: &str, version: &str) -> bool {
    event.event_type.as_str() == super::BLOB
        && data.get("ns").and_then(Value::as_str) == Some(ns)
        && data.get("c").and_then(Value::as_str) == Some(channel)
        && data.get("v").map(version_of_json).as_deref() == Some(version)
}

/// A blob's version as the checkpoint's msgpack renders it (a string, or a number).
fn version_of_json(value: &Value) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_owned)
}

/// The blob record of each shown channel: from the window (its batch) or, named by the
/// checkpoint's `at`, by point reads; a split value's parts are joined.
async fn channel_rows(
    state: &Shared,
    viewer: &Viewer,
    id: &SessionId,
    summary: &CheckpointSummary,
    window: &[Event],
) -> Result<Vec<ChannelRow>, ApiError> {
    let shown = &summary.channel_versions[..summary.channel_versions.len().min(CHANNELS_SHOWN_MAX)];
    let mut wanted: Vec<u64> = shown.iter().filter_map(|(channel, _)| summary.at_seq(channel)).collect();
    wanted.sort_unstable();
    wanted.dedup();
    let mut pool: Vec<Event> = read_seqs(state, viewer, id, wanted).await?;
    let missing_parts = missing_part_seqs(&pool, window);
    pool.extend(read_seqs(state, viewer, id, missing_parts).await?);
    pool.extend(window.iter().cloned());
    let parsed: Vec<(u64, Value, &Event)> =
        pool.iter().map(|event| (event.seq.get(), event.data.to_value(), event)).collect();
    Ok(shown
        .iter()
        .map(|(channel, version)| {
            let matching: Vec<&(u64, Value, &Event)> =
                parsed.iter().filter(|(_, data, event)| blob_of(event, data, &summary.ns, channel, version)).collect();
            ChannelRow { channel: channel.clone(), version: version.clone(), blob: summarized(&matching) }
        })
        .collect())
}

/// The seqs of the other parts of split values read by point reads, not yet read.
fn missing_part_seqs(pool: &[Event], window: &[Event]) -> Vec<u64> {
    let have = |seq: u64| pool.iter().chain(window).any(|event| event.seq.get() == seq);
    let mut seqs = Vec::new();
    for event in pool {
        if let BlobSummary::Part { part, of } = decode::blob_summary(&event.data.to_value()) {
            let first = event.seq.get().saturating_sub(part);
            // A part count past the batch limit is not a record the drop-in writes.
            let of = of.min(super::PARTS_MAX);
            seqs.extend((first..first + of).filter(|seq| !have(*seq)));
        }
    }
    seqs.sort_unstable();
    seqs.dedup();
    seqs
}

/// The blob of a channel version from its record(s): one, or the parts of a split value.
fn summarized(matching: &[&(u64, Value, &Event)]) -> Option<(u64, BlobSummary)> {
    let (seq, data, _) = matching.last()?;
    match decode::blob_summary(data) {
        BlobSummary::Part { .. } => {
            let mut parts: Vec<(u64, &Value)> =
                matching.iter().filter_map(|(_, data, _)| Some((data.get("part")?.as_u64()?, data))).collect();
            parts.sort_by_key(|(part, _)| *part);
            parts.dedup_by_key(|(part, _)| *part);
            let values: Vec<&Value> = parts.iter().map(|(_, data)| *data).collect();
            let first = matching.iter().map(|(seq, _, _)| *seq).min().unwrap_or(*seq);
            Some((first, decode::joined_parts(&values)))
        }
        summary => Some((*seq, summary)),
    }
}
