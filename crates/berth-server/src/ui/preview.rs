//! Previews of untitled sessions (issue 52, R-A7): where a session has no title but a
//! conversation happened, the list and the session page show its first user message,
//! on one line and cut (`berth_core::content::first_user_message_preview`).
//!
//! Computed on read, never stored: an old session gets one with no migration, and an
//! append writes nothing more. The cost is bounded per page: for each untitled,
//! non-blank session shown, one read of at most `PREVIEW_SCAN_EVENTS` events from its
//! log's start (a few at a time), never the whole log; titled and blank sessions read
//! nothing. A preview that cannot be read (a damaged log) is left out, not an error.

use super::signin::Viewer;
use crate::api::{call, Shared};
use berth_catalog::SessionRecord;
use berth_core::content::{first_user_message_preview, PREVIEW_SCAN_EVENTS};
use berth_core::Event;
use futures_util::stream::{self, StreamExt};

/// Logs one list page reads at once for its previews.
pub const PREVIEW_READS_CONCURRENT: usize = 4;

/// The preview of one session (`None` when it has a title, is blank, or has no user
/// message among its first events). `start`: the log's first events when the caller
/// already read them (a session page whose timeline starts at seq 0).
pub async fn preview(
    state: &Shared,
    viewer: &Viewer,
    record: &SessionRecord,
    start: Option<&[Event]>,
) -> Option<String> {
    if !record.wants_preview() {
        return None;
    }
    if let Some(events) = start.filter(|events| events.first().is_some_and(|event| event.seq.get() == 0)) {
        // The same events the list reads, so a session has one name in both places.
        return first_user_message_preview(&events[..events.len().min(PREVIEW_SCAN_EVENTS as usize)]);
    }
    let (principal, id) = (viewer.principal.clone(), record.header.id.clone());
    let events = call(state, |s| async move { s.read(&principal, &id, 0, Some(PREVIEW_SCAN_EVENTS)).await }).await;
    match events {
        Ok(events) => first_user_message_preview(&events),
        Err(error) => {
            tracing::debug!(session = %record.header.id, error = %error.body.message, "no preview");
            None
        }
    }
}

/// The previews of a page of records, in its order.
pub async fn previews(state: &Shared, viewer: &Viewer, records: &[SessionRecord]) -> Vec<Option<String>> {
    // The futures are made first (lazy until polled): a closure inside the stream would
    // have to return a future borrowing its argument for any lifetime.
    let reads: Vec<_> = records.iter().map(|record| preview(state, viewer, record, None)).collect();
    stream::iter(reads).buffered(PREVIEW_READS_CONCURRENT).collect().await
}
