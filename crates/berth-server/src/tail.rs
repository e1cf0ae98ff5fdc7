//! Live tail (R-A1): a session's events as Server-Sent Events from a given seq.
//!
//! `id:` of every SSE event is the event's seq, so a client that reconnects with
//! `Last-Event-ID: N` continues at N + 1 with nothing lost or repeated. The stream
//! subscribes to the change feed *before* each read, so an append that lands between a
//! read and the wait still wakes it; between notifications it sleeps (heartbeat comments
//! keep proxies from closing it). Each wake re-reads through the service, which
//! re-authorizes; the bearer token itself is re-checked at every recheck interval, so a
//! revoked key's stream ends.

use crate::api::{Caller, SessionPath, Shared};
use crate::error::ApiError;
use crate::feed::Subscription;
use crate::limits::StrictQuery;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use berth_api::TailParams;
use berth_core::{Error, Event, SessionId, SessionKey};
use berth_service::Principal;
use std::collections::VecDeque;
use std::convert::Infallible;

/// The longest `idle_timeout_ms` a bounded tail takes (a day).
const TAIL_IDLE_TIMEOUT_MS_MAX: u64 = 24 * 60 * 60 * 1000;

/// Events read per page while catching up.
const TAIL_PAGE_EVENTS: u64 = 500;

/// Streams events as `event: event`, `id: <seq>`, `data: <event JSON>`. A stream that
/// cannot go on sends one `event: error` with the error body and ends; a bounded one
/// (`max_events`, `idle_timeout_ms`) ends with `event: end`, `{"reason", "next_seq"}`.
#[utoipa::path(get, path = "/v1/sessions/{id}/events/stream", tag = "events",
    params(("id" = berth_api::sessions::Id, Path, description = "session id"), TailParams,
        ("Last-Event-ID" = Option<u64>, Header, nullable = false, minimum = 0,
            description = "resume after this seq (wins over `from`)")),
    responses((status = 200, content_type = "text/event-stream", body = berth_api::events::SseMessage),
        (status = 404, body = berth_api::ErrorBody)),
    security(("bearer" = [])))]
pub async fn tail_events(
    State(state): State<Shared>,
    Caller(principal): Caller,
    SessionPath(id): SessionPath,
    headers: HeaderMap,
    in_process: Option<axum::Extension<crate::in_process::InProcessPrincipal>>,
    StrictQuery(params): StrictQuery<TailParams>,
) -> Result<Response, ApiError> {
    let from = match headers.get("last-event-id") {
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .filter(|seq| *seq <= berth_api::int64::WIRE_INT_MAX)
            .and_then(|seq| seq.checked_add(1))
            .ok_or_else(|| ApiError::bad_request("Last-Event-ID must be an event seq"))?,
        None => params.from.unwrap_or(0),
    };
    if params.max_events == Some(0) || params.idle_timeout_ms.is_some_and(|ms| ms == 0 || ms > TAIL_IDLE_TIMEOUT_MS_MAX)
    {
        return Err(ApiError::bad_request(format!(
            "max_events is at least 1; idle_timeout_ms is 1..={TAIL_IDLE_TIMEOUT_MS_MAX}"
        )));
    }
    // An in-process caller has no token to re-check: its principal was given by the host.
    let token = in_process.is_none().then(|| {
        headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(crate::auth::bearer_token)
            .unwrap_or_default()
            .to_owned()
    });
    let key = SessionKey::new(principal.tenant.clone(), id.clone());
    let mut subscription = state.feed.subscribe(&key).await?;
    subscription.mark_seen();
    // The first read answers authorization and existence with a real HTTP status.
    let first = read_page(&state, &principal, &id, from).await?;
    state.metrics.tails_open.inc();
    let mut tail = Tail {
        state: state.clone(),
        principal,
        id,
        token,
        next_seq: from,
        pending: VecDeque::new(),
        more: false,
        done: false,
        subscription,
        shutdown: state.shutdown.clone(),
        events_left: params.max_events,
        idle: params.idle_timeout_ms.map(std::time::Duration::from_millis),
        idle_deadline: None,
    };
    tail.reset_idle();
    tail.take(first);
    let heartbeat = state.config.tail_heartbeat;
    let stream = futures_util::stream::unfold(tail, |mut tail| async move {
        tail.next().await.map(|event| (Ok::<_, Infallible>(event), tail))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(heartbeat).text("heartbeat")).into_response())
}

async fn read_page(state: &Shared, principal: &Principal, id: &SessionId, from: u64) -> Result<Vec<Event>, ApiError> {
    let service = state.service.clone();
    let (principal, id) = (principal.clone(), id.clone());
    tokio::spawn(async move { service.read(&principal, &id, from, Some(TAIL_PAGE_EVENTS)).await })
        .await
        .unwrap_or_else(|_| Err(Error::Unavailable { reason: "read task failed".into() }))
        .map_err(ApiError::from)
}

struct Tail {
    state: Shared,
    principal: Principal,
    id: SessionId,
    /// The bearer token to re-check; `None` for in-process callers.
    token: Option<String>,
    next_seq: u64,
    pending: VecDeque<Event>,
    /// The last read filled a page: read again before waiting.
    more: bool,
    done: bool,
    subscription: Subscription,
    shutdown: tokio::sync::watch::Receiver<bool>,
    /// `max_events`: how many more events this stream sends before it ends.
    events_left: Option<u64>,
    /// `idle_timeout_ms`: the stream ends after this long without a new event.
    idle: Option<std::time::Duration>,
    idle_deadline: Option<tokio::time::Instant>,
}

impl Drop for Tail {
    fn drop(&mut self) {
        self.state.metrics.tails_open.dec();
    }
}

fn error_event(error: &ApiError) -> SseEvent {
    let body = serde_json::to_string(&error.body).unwrap_or_default();
    SseEvent::default().event("error").data(body)
}

impl Tail {
    fn take(&mut self, events: Vec<Event>) {
        self.more = events.len() as u64 == TAIL_PAGE_EVENTS;
        self.next_seq += events.len() as u64;
        self.pending.extend(events);
    }

    fn reset_idle(&mut self) {
        self.idle_deadline = self.idle.map(|idle| tokio::time::Instant::now() + idle);
    }

    /// The last message of a bounded stream: `event: end`, `{reason, next_seq}`.
    fn end_event(&mut self, reason: &str) -> SseEvent {
        self.done = true;
        let next_seq = self.next_seq - self.pending.len() as u64;
        SseEvent::default().event("end").data(serde_json::json!({"reason": reason, "next_seq": next_seq}).to_string())
    }

    /// The next SSE event to send, or `None` to end the stream.
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if self.done || *self.shutdown.borrow() {
                return None;
            }
            if self.events_left == Some(0) {
                return Some(self.end_event("max_events"));
            }
            if let Some(event) = self.pending.pop_front() {
                self.events_left = self.events_left.map(|left| left - 1);
                self.reset_idle();
                return Some(
                    SseEvent::default()
                        .id(event.seq.to_string())
                        .event("event")
                        .data(serde_json::to_string(&crate::wire::EventOf(&event)).unwrap_or_default()),
                );
            }
            if !self.more {
                let recheck = self.state.config.tail_recheck;
                let idle_deadline = self.idle_deadline;
                tokio::select! {
                    _ = async { tokio::time::sleep_until(idle_deadline.unwrap_or_else(tokio::time::Instant::now)).await },
                        if idle_deadline.is_some() => return Some(self.end_event("idle_timeout")),
                    _ = self.subscription.changed() => {}
                    _ = tokio::time::sleep(recheck) => {
                        if let Some(event) = self.recheck_token().await {
                            self.done = true;
                            return Some(event);
                        }
                    }
                    _ = self.shutdown.changed() => return None,
                }
            }
            self.subscription.mark_seen();
            match read_page(&self.state, &self.principal, &self.id, self.next_seq).await {
                Ok(events) => self.take(events),
                Err(error) => {
                    self.done = true;
                    return Some(error_event(&error));
                }
            }
        }
    }

    /// `Some(error event)` when the bearer token no longer authenticates this principal.
    async fn recheck_token(&self) -> Option<SseEvent> {
        let token = self.token.as_deref()?;
        let principal = self.state.auth.authenticate(token).await.ok().flatten();
        if principal.as_ref() == Some(&self.principal) {
            return None;
        }
        Some(error_event(&ApiError::unauthenticated("the key or token of this stream is no longer valid")))
    }
}
