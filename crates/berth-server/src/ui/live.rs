//! Live mode: `GET /ui/sessions/{id}/live?from=N` streams the session's new events as
//! Server-Sent Events whose data is the event rendered by the timeline's own renderer
//! (escaped HTML; `live.js` inserts it). Like the API's tail it subscribes to the change
//! feed before each read and sleeps until an append, re-reads through the service as the
//! viewer (re-authorized each time), and re-checks the sign-in at every recheck interval.

use super::session_page::{event_view, Times};
use super::signin::Viewer;
use crate::api::{call, Shared};
use crate::error::ApiError;
use crate::feed::Subscription;
use axum::extract::{Path, Query, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use berth_core::{Event, SessionId, SessionKey};
use serde::Deserialize;
use std::collections::VecDeque;
use std::convert::Infallible;

/// Events read per page while catching up.
const LIVE_PAGE_EVENTS: u64 = 200;

#[derive(Deserialize)]
pub struct LiveQuery {
    from: Option<u64>,
}

struct Live {
    state: Shared,
    viewer: Viewer,
    id: SessionId,
    next_seq: u64,
    /// Events to send, each with whether a resume's repair wrote it (judged per page
    /// read: a repair's closers are one append, so they arrive together).
    pending: VecDeque<(Event, bool)>,
    more: bool,
    done: bool,
    subscription: Subscription,
}

async fn read_page(state: &Shared, viewer: &Viewer, id: &SessionId, from: u64) -> Result<Vec<Event>, ApiError> {
    let (principal, id) = (viewer.principal.clone(), id.clone());
    call(state, |s| async move { s.read(&principal, &id, from, Some(LIVE_PAGE_EVENTS)).await }).await
}

fn message(event: &str, data: &str) -> SseEvent {
    SseEvent::default().event(event).data(data)
}

impl Live {
    fn take(&mut self, events: Vec<Event>) {
        self.more = events.len() as u64 == LIVE_PAGE_EVENTS;
        self.next_seq += events.len() as u64;
        let repaired = super::timeline::repaired_events(&events);
        self.pending.extend(events.into_iter().zip(repaired));
    }

    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if self.done || *self.state.shutdown.borrow() {
                return None;
            }
            if let Some((event, repaired)) = self.pending.pop_front() {
                let times = Times { now: self.state.service.now(), base: None, run: None };
                let fragment = event_view(&self.viewer, &self.id, &event, repaired, &times).into_string();
                return Some(message("fragment", &fragment).id(event.seq.get().to_string()));
            }
            if !self.more {
                let mut shutdown = self.state.shutdown.clone();
                tokio::select! {
                    _ = self.subscription.changed() => {}
                    _ = tokio::time::sleep(self.state.config.tail_recheck) => {
                        if !self.viewer.still_signed_in(&self.state) {
                            self.done = true;
                            return Some(message("signed-out", "signed out"));
                        }
                        continue;
                    }
                    _ = shutdown.changed() => return None,
                }
            }
            self.subscription.mark_seen();
            match read_page(&self.state, &self.viewer, &self.id, self.next_seq).await {
                Ok(events) => self.take(events),
                Err(error) => {
                    self.done = true;
                    return Some(message("failed", &error.body.message));
                }
            }
        }
    }
}

pub async fn live_feed(
    State(state): State<Shared>,
    viewer: Viewer,
    Path(id): Path<String>,
    Query(query): Query<LiveQuery>,
) -> Response {
    let id = match crate::api::session_id(&id) {
        Ok(id) => id,
        Err(error) => return super::layout::fail(&viewer, error),
    };
    let from = query.from.unwrap_or(0);
    let key = SessionKey::new(viewer.principal.tenant.clone(), id.clone());
    let mut subscription = match state.feed.subscribe(&key).await {
        Ok(subscription) => subscription,
        Err(error) => return super::layout::fail(&viewer, ApiError::from(error)),
    };
    subscription.mark_seen();
    // The first read answers authorization and existence with a real status (404).
    let first = match read_page(&state, &viewer, &id, from).await {
        Ok(events) => events,
        Err(error) => return super::layout::fail(&viewer, error),
    };
    let heartbeat = state.config.tail_heartbeat;
    let mut live =
        Live { state, viewer, id, next_seq: from, pending: VecDeque::new(), more: false, done: false, subscription };
    live.take(first);
    let stream = futures_util::stream::unfold(live, |mut live| async move {
        live.next().await.map(|event| (Ok::<_, Infallible>(event), live))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(heartbeat).text("heartbeat")).into_response()
}
