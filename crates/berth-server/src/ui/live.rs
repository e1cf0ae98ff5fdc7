//! Live mode: `GET /ui/sessions/{id}/live?from=N[&group=G]` streams the session's new
//! events as Server-Sent Events that `live.js` only places: each `group` event is one turn
//! (or one group of events outside a turn) rendered whole by the session page's own
//! renderer, naming itself by its first seq (`data-group`), so the script replaces the
//! section of that name or adds it; each `header` event is the header's changing part
//! (`#session-state`: count, revision, leases, the list's run badges), sent after each
//! batch of events and every `LIVE_HEADER_INTERVAL`, so a lease that lapses with no new
//! event still shows. `group=G` is the page's last group, if it may continue: the feed
//! reads from G, so what arrives lands in it.
//!
//! Like the API's tail it subscribes to the change feed before each read and sleeps
//! until an append, re-reads through the service as the viewer (re-authorized each
//! time), and re-checks the sign-in at every recheck interval.

use super::session_page::{live_groups, session_state};
use super::signin::Viewer;
use crate::api::{call, Shared};
use crate::error::ApiError;
use crate::feed::Subscription;
use axum::extract::{Path, Query, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use berth_core::vocabulary as vocab;
use berth_core::{Event, SessionId, SessionKey};
use serde::Deserialize;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;
use tokio::time::Instant;

/// Events read per page while catching up.
const LIVE_PAGE_EVENTS: u64 = 200;
/// The events of one group re-rendered on each batch at most; a longer turn continues
/// in a group of its own (drawn as a page that starts inside a turn is).
pub const LIVE_GROUP_EVENTS_MAX: usize = 1_000;
/// How often the header is sent when no event arrives (a lease lapses on the clock).
pub const LIVE_HEADER_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Deserialize)]
pub struct LiveQuery {
    from: Option<u64>,
    /// The first seq of the page's last group, when it may continue.
    group: Option<u64>,
}

/// The feed's events split into groups as `timeline::build` groups a page: a
/// `turn/start` opens a group; after its `turn/end`, the next event opens one of events
/// outside a turn, which lasts until a `turn/start`.
#[derive(Default)]
struct Groups {
    /// The events of the group still open (the last one).
    open: Vec<Event>,
    /// The open group is a turn whose `turn/end` arrived.
    ended: bool,
    /// The open group gained events since it was last drawn.
    changed: bool,
}

impl Groups {
    /// Adds `events`; returns the groups they closed that changed since last drawn,
    /// oldest first (the open one is drawn by `open_changed`).
    fn add(&mut self, events: Vec<Event>) -> Vec<Vec<Event>> {
        let mut closed = Vec::new();
        for event in events {
            let kind = event.event_type.as_str();
            let splits = kind == vocab::TURN_START || self.ended || self.open.len() >= LIVE_GROUP_EVENTS_MAX;
            if splits && !self.open.is_empty() {
                let group = std::mem::take(&mut self.open);
                if self.changed {
                    closed.push(group);
                }
                self.ended = false;
            }
            let in_turn = self.open.first().is_some_and(|first| first.event_type.as_str() == vocab::TURN_START);
            self.ended = kind == vocab::TURN_END && in_turn;
            self.open.push(event);
            self.changed = true;
        }
        closed
    }

    /// The open group, if it gained events since it was last drawn.
    fn open_changed(&mut self) -> Option<Vec<Event>> {
        std::mem::take(&mut self.changed).then(|| self.open.clone())
    }
}

struct Live {
    state: Shared,
    viewer: Viewer,
    id: SessionId,
    next_seq: u64,
    groups: Groups,
    /// Messages rendered and not yet sent.
    pending: VecDeque<SseEvent>,
    header_due: bool,
    /// The header last sent (an unchanged one is not sent again).
    header_sent: String,
    more: bool,
    done: bool,
    subscription: Subscription,
    signin_checked: Instant,
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
        let mut groups = self.groups.add(events);
        // While catching up, the open group is drawn once, when the feed has caught up.
        groups.extend(self.groups.open_changed().filter(|_| !self.more));
        let now = self.state.service.now();
        for group in groups {
            let Some(last) = group.last() else { continue };
            let fragment = live_groups(&self.viewer, &self.id, &group, now).into_string();
            self.pending.push_back(message("group", &fragment).id(last.seq.get().to_string()));
            self.header_due = true;
        }
    }

    /// The header's changing part, re-read as the viewer; none if unchanged.
    async fn header(&mut self) -> Option<SseEvent> {
        let (principal, id) = (self.viewer.principal.clone(), self.id.clone());
        match call(&self.state, |s| async move { s.get(&principal, &id).await }).await {
            Ok(record) => {
                let state = session_state(&record, self.state.service.now()).into_string();
                (state != self.header_sent).then(|| {
                    let sent = message("header", &state);
                    self.header_sent = state;
                    sent
                })
            }
            Err(error) => {
                self.done = true;
                Some(message("failed", &error.body.message))
            }
        }
    }

    /// Sleeps until an append, the header's interval or shutdown; `Some` ends the feed.
    async fn wait(&mut self) -> Option<Option<SseEvent>> {
        let mut shutdown = self.state.shutdown.clone();
        let recheck = self.state.config.tail_recheck;
        tokio::select! {
            _ = self.subscription.changed() => None,
            _ = tokio::time::sleep(LIVE_HEADER_INTERVAL.min(recheck)) => {
                if self.signin_checked.elapsed() >= recheck {
                    self.signin_checked = Instant::now();
                    if !self.viewer.still_signed_in(&self.state) {
                        self.done = true;
                        return Some(Some(message("signed-out", "signed out")));
                    }
                }
                self.header_due = true;
                None
            }
            _ = shutdown.changed() => Some(None),
        }
    }

    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if self.done || *self.state.shutdown.borrow() {
                return None;
            }
            if let Some(message) = self.pending.pop_front() {
                return Some(message);
            }
            if !self.more {
                if std::mem::take(&mut self.header_due) {
                    if let Some(header) = self.header().await {
                        return Some(header);
                    }
                    continue;
                }
                if let Some(end) = self.wait().await {
                    return end;
                }
                if self.header_due {
                    continue;
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
    // The page's open group is read again (bounded), so what arrives is drawn in it.
    let from = match query.group {
        Some(group) if group <= from && from - group <= LIVE_GROUP_EVENTS_MAX as u64 => group,
        _ => from,
    };
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
    let mut live = Live {
        state,
        viewer,
        id,
        next_seq: from,
        groups: Groups::default(),
        pending: VecDeque::new(),
        header_due: false,
        header_sent: String::new(),
        more: false,
        done: false,
        subscription,
        signin_checked: Instant::now(),
    };
    live.take(first);
    let stream = futures_util::stream::unfold(live, |mut live| async move {
        live.next().await.map(|event| (Ok::<_, Infallible>(event), live))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(heartbeat).text("heartbeat")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::Timestamp;
    use serde_json::json;

    fn events(kinds: &[&str]) -> Vec<Event> {
        let data = |kind: &str| if kind == "turn/end" { json!({"reason": "completed"}) } else { json!({}) };
        kinds
            .iter()
            .enumerate()
            .map(|(seq, kind)| Event::new(seq as u64, kind, Timestamp(1), data(kind)).unwrap())
            .collect()
    }

    /// The seqs of each group a batch touched: those it closed, then the open one.
    fn touched(groups: &mut Groups, batch: &[Event]) -> Vec<Vec<u64>> {
        let mut drawn = groups.add(batch.to_vec());
        drawn.extend(groups.open_changed());
        drawn.iter().map(|group| group.iter().map(|event| event.seq.get()).collect()).collect()
    }

    #[test]
    fn the_feed_splits_into_groups_as_the_page_groups_them() {
        let all = events(&[
            "acme/note",
            "turn/start",
            "user/message",
            "turn/end",
            "checkpoint",
            "acme/note",
            "turn/start",
            "step/start",
        ]);
        let mut groups = Groups::default();
        assert_eq!(touched(&mut groups, &all[..3]), vec![vec![0], vec![1, 2]]);
        // A batch that ends a turn and starts the loose group after it.
        assert_eq!(touched(&mut groups, &all[3..5]), vec![vec![1, 2, 3], vec![4]]);
        assert_eq!(touched(&mut groups, &all[5..]), vec![vec![4, 5], vec![6, 7]]);
        assert!(touched(&mut groups, &[]).is_empty(), "nothing new: nothing drawn");
        // A batch that opens a turn leaves the group drawn before as it was.
        assert_eq!(touched(&mut groups, &events(&["turn/start"])), vec![vec![0]]);
        // An orphan turn/end (its start on an older page) leaves a loose group open.
        let mut groups = Groups::default();
        assert_eq!(touched(&mut groups, &events(&["turn/end", "acme/note"])), vec![vec![0, 1]]);
        assert!(!groups.ended);
    }

    #[test]
    fn while_catching_up_the_open_group_waits_and_closed_ones_are_drawn_once() {
        let all = events(&["turn/start", "user/message", "turn/end", "acme/note", "acme/note"]);
        let mut groups = Groups::default();
        // A first page that stops inside the turn: nothing closed, the open turn waits.
        assert!(groups.add(all[..2].to_vec()).is_empty());
        // The next page closes it (drawn whole) and opens the loose group after it.
        let closed = groups.add(all[2..].to_vec());
        assert_eq!(closed.iter().map(Vec::len).collect::<Vec<_>>(), vec![3]);
        assert_eq!(groups.open_changed().map(|group| group.len()), Some(2));
        assert_eq!(groups.open_changed().map(|group| group.len()), None);
    }

    #[test]
    fn a_turn_longer_than_the_bound_continues_in_a_group_of_its_own() {
        let mut kinds = vec!["turn/start"];
        kinds.extend(std::iter::repeat_n("acme/note", LIVE_GROUP_EVENTS_MAX));
        let mut groups = Groups::default();
        let drawn = touched(&mut groups, &events(&kinds));
        assert_eq!(drawn.iter().map(Vec::len).collect::<Vec<_>>(), vec![LIVE_GROUP_EVENTS_MAX, 1]);
    }
}
