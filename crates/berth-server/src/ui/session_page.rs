//! The session page: header (title, or the first user message of an untitled
//! conversation; scope, policy, parent, origin, forks), metadata (editable
//! with the revision check), runs (attached now; attached, detached, abandoned and
//! repaired from the session's audit entries), the timeline (read from the tail, older
//! pages by `before`, never the whole log; in chat order — oldest to newest, opening at
//! the latest turn — or newest first with `?order=newest`), each turn's trace
//! (`waterfall`), a link to the usage totals (`usage_totals`), live mode, export and
//! fork-at-this-event. Also the single-event page ("show all" of a cut event).
//!
//! Turn and step boundaries are the headers of their groups, not rows; times read
//! relative (the absolute time on hover); each event's actions (fork here, raw JSON)
//! sit in a small menu; bookkeeping (framework records, `session/memory`, checkpoints)
//! is folded behind a count per group. No script is needed to read any of it.

use super::layout::{
    self, ago_element, clock_element, cut_text, duration_text, html, offset_element, pretty_json, status_badge,
    time_element, JSON_SHOWN_BYTES_MAX,
};
use super::security::csrf_matches;
use super::signin::Viewer;
use super::timeline::{self, Item, RepairedBy, Step, Timeline, ToolPairing, Turn};
use crate::api::{call, Shared};
use crate::error::ApiError;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use berth_api::int64::WIRE_INT_MAX;
use berth_catalog::{AuditEntry, SessionRecord};
use berth_core::content::content_text;
use berth_core::vocabulary as vocab;
use berth_core::{Event, Revision, RunId, SessionId, Timestamp};
use berth_service::{ListRequest, MetadataUpdate};
use maud::{html as markup, Markup};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeSet;

/// Events read for one page of the timeline.
pub const TIMELINE_PAGE_EVENTS: u64 = 200;
/// A tool call's arguments shown beside its name, in characters (all of them one click
/// away).
const ARGUMENTS_INLINE_CHARS: usize = 80;
/// Forks listed on a session page.
pub const FORKS_SHOWN_MAX: usize = 50;

fn parse_id(text: &str) -> Result<SessionId, ApiError> {
    crate::api::session_id(text)
}

#[derive(Deserialize, Default)]
pub struct PageQuery {
    /// Show the events before this seq (paging back); absent: the tail.
    before: Option<u64>,
    /// `newest`: the latest turn first; absent (or `chat`): oldest to newest.
    order: Option<String>,
    /// A LangGraph thread: the checkpoint (its event's seq) whose state is shown.
    cp: Option<u64>,
    /// A LangGraph thread: the checkpoint `cp` is compared with (else its parent).
    vs: Option<u64>,
}

/// The order the timeline's turns are shown in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    /// Oldest to newest, as a conversation reads; the page opens at the latest turn.
    Chat,
    /// The latest turn first (events inside a turn stay oldest first).
    Newest,
}

impl Order {
    fn parse(text: Option<&str>) -> Result<Order, ApiError> {
        match text {
            None | Some("" | "chat") => Ok(Order::Chat),
            Some("newest") => Ok(Order::Newest),
            Some(_) => Err(ApiError::bad_request("order: use chat or newest")),
        }
    }
}

/// The session page in `order`, before `before` (paging back) or at the tail. In chat
/// order it opens at the latest turn of the page (`#latest`).
fn page_href(id: &SessionId, order: Order, before: Option<u64>) -> String {
    let mut query = Vec::new();
    if let Some(before) = before {
        query.push(format!("before={before}"));
    }
    if order == Order::Newest {
        query.push("order=newest".to_owned());
    }
    let query = if query.is_empty() { String::new() } else { format!("?{}", query.join("&")) };
    let anchor = if order == Order::Chat { "#latest" } else { "" };
    format!("/ui/sessions/{id}{query}{anchor}")
}

/// What rendering an event needs besides the event: the clock, the moment its times
/// are offsets from (its turn's start; none in live mode: "ago"), and its turn's run
/// (an event of another run names its own).
#[derive(Clone, Copy)]
pub(super) struct Times<'a> {
    pub now: Timestamp,
    pub base: Option<Timestamp>,
    pub run: Option<&'a RunId>,
}

impl Times<'_> {
    fn of(&self, time: Timestamp) -> Markup {
        match self.base {
            Some(base) => offset_element(base, time),
            None => ago_element(self.now, time),
        }
    }
}

/// One page of the timeline: its events (turn-aligned) and where older ones start.
struct TimelinePage {
    events: Vec<Event>,
    /// `Some(seq)`: older events exist; the "older" link reads before `seq`.
    older_before: Option<u64>,
}

async fn timeline_page(state: &Shared, viewer: &Viewer, id: &SessionId, before: u64) -> Result<TimelinePage, ApiError> {
    let (principal, id) = (viewer.principal.clone(), id.clone());
    let mut events =
        call(state, |s| async move { s.read_before(&principal, &id, before, TIMELINE_PAGE_EVENTS).await }).await?;
    let first_seq = events.first().map_or(0, |event| event.seq.get());
    if first_seq > 0 {
        // Older events exist: start the page at its first turn, so no turn is split.
        let start = timeline::turn_aligned_start(&events);
        events.drain(..start);
    }
    let older_before = events.first().map(|event| event.seq.get()).filter(|seq| *seq > 0);
    Ok(TimelinePage { events, older_before })
}

pub async fn session_page(
    State(state): State<Shared>,
    viewer: Viewer,
    Path(id): Path<String>,
    Query(query): Query<PageQuery>,
) -> Response {
    match render_session(&state, &viewer, &id, query).await {
        Ok(body) => body,
        Err(error) => layout::fail(&viewer, error),
    }
}

async fn render_session(state: &Shared, viewer: &Viewer, id: &str, query: PageQuery) -> Result<Response, ApiError> {
    let id = parse_id(id)?;
    let order = Order::parse(query.order.as_deref())?;
    let before = query.before;
    let principal = viewer.principal.clone();
    let (get_id, history_id) = (id.clone(), id.clone());
    let record = call(state, |s| async move { s.get(&principal, &get_id).await }).await?;
    let principal = viewer.principal.clone();
    let history = call(state, |s| async move { s.run_history(&principal, &history_id).await }).await?;
    let principal = viewer.principal.clone();
    let forks_request = ListRequest {
        parent: Some(id.clone()),
        include_blank: true,
        limit: Some(FORKS_SHOWN_MAX),
        ..ListRequest::default()
    };
    let forks = call(state, |s| async move { s.list(&principal, &forks_request).await }).await?.items;
    let page = timeline_page(state, viewer, &id, before.unwrap_or(WIRE_INT_MAX)).await?;
    let preview = super::preview::preview(state, viewer, &record, Some(&page.events)).await;
    let built = timeline::build(&page.events);
    let live_from = page.events.last().map_or(0, |event| event.seq.get() + 1);
    let now = state.service.now();
    let selection = (query.cp, query.vs);
    let langgraph = langgraph_section(state, viewer, &record, &page.events, (order, before), selection).await?;
    let body = markup! {
        (session_header(&record, preview.as_deref(), &forks, now))
        (super::usage_totals::usage_link(&record.header.id))
        div.columns {
            (metadata_form(viewer, &record))
            (runs_section(&record, &history))
        }
        (export_section(&record))
        @if let Some(langgraph) = langgraph { (langgraph) }
        (timeline_section(&TimelineView {
            viewer,
            id: &record.header.id,
            events: &page.events,
            built: &built,
            now,
        }, order, before, page.older_before, live_from))
    };
    let named = record.title.as_deref().filter(|title| !title.trim().is_empty()).or(preview.as_deref());
    let page_title = match named {
        Some(name) => format!("{name} · {}", record.header.id),
        None => record.header.id.to_string(),
    };
    Ok(html(StatusCode::OK, layout::page(&page_title, Some(viewer), body)))
}

/// A LangGraph thread's state section (None for any other session), its links keeping
/// the timeline's page and order.
async fn langgraph_section(
    state: &Shared,
    viewer: &Viewer,
    record: &SessionRecord,
    events: &[Event],
    (order, before): (Order, Option<u64>),
    selection: (Option<u64>, Option<u64>),
) -> Result<Option<Markup>, ApiError> {
    if !super::langgraph::is_langgraph(record, events) {
        return Ok(None);
    }
    let mut kept = Vec::new();
    if let Some(before) = before {
        kept.push(("before", before.to_string()));
    }
    if order == Order::Newest {
        kept.push(("order", "newest".to_owned()));
    }
    let links = super::langgraph::Links { path: format!("/ui/sessions/{}", record.header.id), kept: &kept };
    Ok(Some(super::langgraph::section(state, viewer, record, events, &links, selection).await?))
}

/// The part of the header that changes as the session is written (live mode sends it
/// again after each batch of events and every few seconds): status, the list's run
/// badges by the service's clock, event count, revision, each attached run's lease.
pub(super) fn session_state(record: &SessionRecord, now: Timestamp) -> Markup {
    let attached = record.runs.iter().filter(|run| run.status == berth_catalog::RunStatus::Attached);
    markup! {
        p #session-state.session-state data-event-count=(record.event_count) data-revision=(record.revision.0) {
            (status_badge(record.status)) (super::list::run_badges(record, now))
            span.count { (record.event_count) @if record.event_count == 1 { " event" } @else { " events" } }
            span.revision { "revision " (record.revision.0) }
            @for run in attached {
                span.lease {
                    "run " code { (run.run_id) }
                    @if run.lease_until >= now { ", lease until " (clock_element(run.lease_until)) }
                    @else { ", lease ended " (ago_element(now, run.lease_until)) }
                }
            }
        }
    }
}

fn session_header(record: &SessionRecord, preview: Option<&str>, forks: &[SessionRecord], now: Timestamp) -> Markup {
    let header = &record.header;
    let named = record.title.as_deref().is_some_and(|title| !title.trim().is_empty()) || preview.is_some();
    markup! {
        header.session-header {
            h1 { "Session " code { (header.id) } }
            @if named { p.session-title { (super::list::title_or_preview(record, preview)) } }
            (session_state(record, now))
            dl.facts {
                dt { "Scope" } dd { (header.scope.tenant) " / " (header.scope.user)
                    @if let Some(project) = &header.scope.project { " / " (project) } }
                dt { "Created" } dd { (time_element(header.created_at)) }
                dt { "Policy" } dd { (format!("{:?}", header.policy.concurrency).to_lowercase())
                    ", activity TTL " (duration_text(header.policy.activity_ttl_ms))
                    ", run lease " (duration_text(header.policy.run_lease_ttl_ms)) }
                @if let Some(origin) = &header.origin { dt { "Origin" } dd { (origin) } }
                @if let Some(parent) = &header.parent {
                    dt { "Forked from" }
                    dd {
                        a href={"/ui/sessions/" (parent.session)} { (parent.session) }
                        @if parent.cut_seq == 0 {
                            " (no events copied: its conversation continued here, written anew)"
                        } @else {
                            " (first " (parent.cut_seq) " events)"
                        }
                    }
                }
                dt { "Forks" }
                dd {
                    @if forks.is_empty() { "none" }
                    ul.forks { @for fork in forks {
                        li { a href={"/ui/sessions/" (fork.header.id)} { (fork.header.id) } " "
                            @if let Some(parent) = &fork.header.parent { "(at " (parent.cut_seq) ")" } }
                    } }
                }
            }
        }
    }
}

fn metadata_form(viewer: &Viewer, record: &SessionRecord) -> Markup {
    let labels = record.labels.iter().cloned().collect::<Vec<_>>().join(", ");
    markup! {
        section.metadata aria-labelledby="metadata-title" {
            h2 #metadata-title { "Metadata" }
            // Status, count and revision are in the header, which live mode keeps current;
            // the revision here is the one this form was rendered at.
            dl.facts {
                dt { "Activity lease until" } dd { (time_element(record.lease_until)) }
                dt { "Last activity" } dd { (time_element(record.last_activity)) }
            }
            form method="post" action={"/ui/sessions/" (record.header.id) "/metadata"} {
                input type="hidden" name="csrf" value=(viewer.csrf);
                input type="hidden" name="expected_revision" value=(record.revision.0);
                label for="title" { "Title" }
                input #title name="title" type="text" maxlength="512" value=(record.title.as_deref().unwrap_or(""));
                label for="labels" { "Labels (comma-separated)" }
                input #labels name="labels" type="text" value=(labels);
                button type="submit" { "Save metadata" }
                p.hint { "Saved against revision " (record.revision.0) ": if the session changed since, the save is refused (412) rather than overwriting." }
            }
        }
    }
}

fn runs_section(record: &SessionRecord, history: &[AuditEntry]) -> Markup {
    markup! {
        section.runs aria-labelledby="runs-title" {
            h2 #runs-title { "Runs" }
            h3 { "Attached now" }
            @if record.runs.is_empty() { p.empty { "No run is attached." } }
            ul { @for run in &record.runs {
                li { code { (run.run_id) } " by " (run.attached_by) ", since " (time_element(run.attached_at))
                    ", lease until " (time_element(run.lease_until)) }
            } }
            h3 { "History" }
            @if history.is_empty() { p.empty { "No run changes recorded (among the tenant's latest audit entries)." } }
            ol.run-history { @for entry in history {
                li class={"run-" (entry.draft.action)} {
                    span class={"badge action-" (entry.draft.action)} { (entry.draft.action) } " "
                    // A refused attempt (an attach before the session existed, a busy one)
                    // says so: it changed nothing.
                    @if entry.draft.outcome != "ok" {
                        span.badge.refused { (entry.draft.outcome) } " "
                        @if let Some(code) = entry.draft.details.get("code").and_then(Value::as_str) { "(" (code) ") " }
                    }
                    @if let Some(run) = entry.draft.details.get("run").and_then(Value::as_str) { code { (run) } " " }
                    @if let Some(status) = entry.draft.details.get("status").and_then(Value::as_str) { "(" (status) ") " }
                    @if let Some(outcome) = entry.draft.details.get("outcome").and_then(Value::as_str) { "outcome: " (outcome) " " }
                    @if let Some(closers) = entry.draft.details.get("closers") { (closers.to_string()) " closers " }
                    "by " (entry.draft.actor) ", " (time_element(entry.draft.time))
                }
            } }
        }
    }
}

fn export_section(record: &SessionRecord) -> Markup {
    let id = &record.header.id;
    markup! {
        section.export aria-labelledby="export-title" {
            h2 #export-title { "Export" }
            a.button #export-jsonl href={"/ui/sessions/" (id) "/export?format=jsonl"} download { "Export JSONL" }
            " "
            a.button #export-zip href={"/ui/sessions/" (id) "/export?format=zip"} download { "Export ZIP (with forks)" }
        }
    }
}

/// A page's events and what was built of them, as the timeline renders them.
struct TimelineView<'a> {
    viewer: &'a Viewer,
    id: &'a SessionId,
    events: &'a [Event],
    built: &'a Timeline,
    now: Timestamp,
}

fn timeline_section(
    view: &TimelineView,
    order: Order,
    before: Option<u64>,
    older_before: Option<u64>,
    live_from: u64,
) -> Markup {
    let id = view.id;
    let latest = view.built.turns.len().checked_sub(1);
    let older = markup! {
        @if let Some(older) = older_before {
            nav.paging aria-label="Timeline pages" {
                a rel="prev" href=(page_href(id, order, Some(older))) { "Older events" }
            }
        }
    };
    // Live mode replaces a group it continues in place and puts new ones here.
    let live_list = markup! {
        @if before.is_none() {
            @if order == Order::Chat {
                div #live-events data-order="chat" { }
            } @else {
                div #live-events data-order="newest" { }
            }
        } @else {
            p.back { a href=(page_href(id, order, None)) { "Back to the latest events" } }
        }
    };
    let turns = view.built.turns.iter().enumerate();
    // The page's last group, unless a turn that ended: live mode continues it.
    let open_group =
        view.built.turns.last().filter(|turn| turn.end.is_none()).map(|turn| view.events[turn.first].seq.get());
    markup! {
        section.timeline aria-labelledby="timeline-title" data-order=(if order == Order::Chat { "chat" } else { "newest" }) {
            div.timeline-bar {
                h2 #timeline-title { "Timeline" }
                nav.order aria-label="Timeline order" {
                    @for (shown, label, title) in [
                        (Order::Chat, "Oldest first", "The conversation top to bottom, opening at the latest turn"),
                        (Order::Newest, "Newest first", "The latest turn first"),
                    ] {
                        @if shown == order {
                            a aria-current="page" href=(page_href(id, shown, before)) title=(title) { (label) }
                        } @else {
                            a href=(page_href(id, shown, before)) title=(title) { (label) }
                        }
                    }
                }
                @if before.is_none() {
                    div.live-controls {
                        button #live-toggle type="button" aria-pressed="false"
                            data-session=(id) data-next-seq=(live_from) data-group=[open_group] { "Follow live" }
                        span #live-status role="status" aria-live="polite" { }
                    }
                }
            }
            @if view.events.is_empty() {
                p.empty { "No events yet." }
            }
            @if order == Order::Chat {
                (older)
                @for (index, turn) in turns {
                    (turn_view(view, turn, Some(index) == latest))
                }
                (live_list)
            } @else {
                (live_list)
                @for (index, turn) in turns.rev() {
                    (turn_view(view, turn, Some(index) == latest))
                }
                (older)
            }
        }
    }
}

/// "repaired by run-b at 05:00:03 UTC, 14 min 0 s later": who closed what a crash left
/// open, when, and how long after the crashed run's last event (`data.repaired_by`).
fn repaired_by_note(by: &RepairedBy, at: bool) -> Markup {
    markup! {
        span.repaired-by title="closed by a resume's repair; the closer keeps the crashed run and its last event's time" {
            "repaired by " code { (by.run) }
            @if at { " at " (clock_element(by.at)) }
            ", " (duration_text(by.later_ms)) " later"
        }
    }
}

/// A `<details>` menu of actions (fork, raw JSON), folded by default.
fn actions_menu(label: &str, body: Markup) -> Markup {
    markup! {
        details.actions {
            summary aria-label=(label) title=(label) { "⋯" }
            div.menu { (body) }
        }
    }
}

fn raw_link(id: &SessionId, event: &Event, label: &str) -> Markup {
    markup! {
        a.raw href={"/ui/sessions/" (id) "/events/" (event.seq.get())} { (label) " (#" (event.seq.get()) ")" }
    }
}

fn turn_view(view: &TimelineView, turn: &Turn, latest: bool) -> Markup {
    let (events, built) = (view.events, view.built);
    let first = turn.start.or_else(|| {
        turn.steps.iter().find_map(|step| {
            let item = step.items.first().map(|item| item_index(built, item));
            step.start.into_iter().chain(item).chain(step.bookkeeping.first().copied()).min()
        })
    });
    let title = match (turn.start, turn.number) {
        (Some(_), Some(number)) => format!("Turn {number}"),
        (Some(_), None) => "Turn".to_owned(),
        (None, _) => "Events outside a turn".to_owned(),
    };
    // A closer's time is the last real event's, not when the turn ended: no duration.
    let duration = match (turn.start, turn.end) {
        (Some(start), Some(end)) if !turn.repaired => Some(events[end].time.0.saturating_sub(events[start].time.0)),
        _ => None,
    };
    let run = first.and_then(|first| events[first].run.as_ref());
    let times = Times { now: view.now, base: first.map(|first| events[first].time), run };
    let anchor = match (latest, first) {
        (true, _) => "latest".to_owned(),
        (false, Some(first)) => format!("turn-{}", events[first].seq.get()),
        (false, None) => String::new(),
    };
    markup! {
        section class={"turn" @if turn.repaired { " repaired" }} id=[(!anchor.is_empty()).then_some(&anchor)] aria-label=(title)
            data-group=(events[turn.first].seq.get()) data-open[turn.end.is_none()] {
            header.turn-header {
                h3 { (title) }
                @match (&turn.end_reason, turn.start.is_some() && turn.end.is_none()) {
                    (Some(reason), _) => { span class={"badge reason-" (reason)} { (reason) } }
                    (None, true) => { span.badge.reason-open { "open" } }
                    _ => {}
                }
                @match (&turn.repaired_by, turn.repaired) {
                    (Some(by), _) => (repaired_by_note(by, true)),
                    (None, true) => { span.badge.repair title="closed by a resume's repair" { "repaired" } }
                    _ => {}
                }
                @if let Some(duration) = duration { span.duration title="from turn/start to turn/end" { "took " (duration_text(duration)) } }
                @if let Some(first) = first { span.when { (ago_element(view.now, events[first].time)) } }
                @if let Some(run) = run { span.run { "run " code { (run) } } }
                @if turn.start.is_some() || turn.end.is_some() {
                    (actions_menu(&format!("Actions for {}", title.to_lowercase()), markup! {
                        @if let Some(start) = turn.start { (raw_link(view.id, &events[start], "turn/start JSON")) }
                        @if let Some(end) = turn.end {
                            (raw_link(view.id, &events[end], "turn/end JSON"))
                            (fork_button(view.viewer, view.id, events[end].seq.get(), "Fork after this turn"))
                        }
                    }))
                }
            }
            @if let Some(trace) = super::waterfall::trace(events, built, turn) { (super::waterfall::trace_view(&trace)) }
            @for step in &turn.steps {
                (step_view(view, step, &times))
            }
        }
    }
}

/// Live mode's rendering of the events of one group (a turn, or events outside a turn;
/// `live::Groups` splits the feed as `timeline::build` groups a page): the same
/// sections the page draws, each naming its group (`data-group`, its first seq).
pub(super) fn live_groups(viewer: &Viewer, id: &SessionId, events: &[Event], now: Timestamp) -> Markup {
    let built = timeline::build(events);
    let view = TimelineView { viewer, id, events, built: &built, now };
    markup! {
        @for turn in &built.turns { (turn_view(&view, turn, false)) }
    }
}

fn step_view(view: &TimelineView, step: &Step, times: &Times) -> Markup {
    let (events, built) = (view.events, view.built);
    let closed_by_repair = step.end.is_some_and(|end| built.repaired[end]);
    let duration = match (step.start, step.end) {
        (Some(start), Some(end)) if !closed_by_repair => Some(events[end].time.0.saturating_sub(events[start].time.0)),
        _ => None,
    };
    let kinds: BTreeSet<&str> = step.bookkeeping.iter().map(|index| events[*index].event_type.as_str()).collect();
    markup! {
        div.step {
            @if let Some(start) = step.start {
                div.step-header {
                    h4 { "Step" @if let Some(number) = step.number { " " (number) } }
                    (times.of(events[start].time))
                    @if let Some(duration) = duration { span.duration title="from step/start to step/end" { "took " (duration_text(duration)) } }
                    @if step.end.is_none() { span.badge.reason-open { "open" } }
                    @if closed_by_repair { span.badge.repair title="closed by a resume's repair" { "repair" } }
                    (actions_menu(&format!("Actions for step {}", events[start].seq.get()), markup! {
                        (raw_link(view.id, &events[start], "step/start JSON"))
                        @if let Some(end) = step.end { (raw_link(view.id, &events[end], "step/end JSON")) }
                    }))
                }
            }
            @if !step.items.is_empty() {
                ol.events {
                    @for item in &step.items {
                        @match item {
                            Item::Event(index) => (event_view(view.viewer, view.id, &events[*index], built.repaired[*index], times)),
                            Item::Tool(tool) => (tool_view(view, &built.tools[*tool], times)),
                        }
                    }
                }
            }
            @if !step.bookkeeping.is_empty() {
                details.bookkeeping {
                    summary {
                        (step.bookkeeping.len()) @if step.bookkeeping.len() == 1 { " bookkeeping record" } @else { " bookkeeping records" }
                        " "
                        span.kinds { "(" (kinds.into_iter().collect::<Vec<_>>().join(", ")) ")" }
                    }
                    ol.events {
                        @for index in &step.bookkeeping {
                            (event_view(view.viewer, view.id, &events[*index], built.repaired[*index], times))
                        }
                    }
                }
            }
        }
    }
}

fn item_index(built: &Timeline, item: &Item) -> usize {
    match item {
        Item::Event(index) => *index,
        Item::Tool(tool) => {
            let pairing = &built.tools[*tool];
            pairing.requested_at.or(pairing.started_at).or(pairing.result_at).unwrap_or(0)
        }
    }
}

fn fork_button(viewer: &Viewer, id: &SessionId, seq: u64, text: &str) -> Markup {
    markup! {
        form.fork method="post" action={"/ui/sessions/" (id) "/fork"} {
            input type="hidden" name="csrf" value=(viewer.csrf);
            input type="hidden" name="upto_seq" value=(seq + 1);
            button type="submit" title={"Fork a new session with events 0–" (seq)} aria-label={"Fork at event " (seq)} { (text) }
        }
    }
}

/// Pretty JSON, cut with a "show all" link to the single-event page when long.
fn json_block(id: &SessionId, seq: u64, text: &str) -> Markup {
    let (shown, cut) = pretty_json(text, true);
    markup! {
        pre.json { code { (shown) } }
        @if cut { a.show-all href={"/ui/sessions/" (id) "/events/" (seq)} { "Show all (" (text.len()) " bytes)" } }
    }
}

fn event_head(viewer: &Viewer, id: &SessionId, event: &Event, repaired: bool, times: &Times) -> Markup {
    markup! {
        div.event-head {
            span.type { (event.event_type.as_str()) }
            (times.of(event.time))
            @if let Some(run) = event.run.as_ref().filter(|run| Some(*run) != times.run) { span.run { "run " code { (run) } } }
            @if event.ignorable { span.badge.ignorable { "ignorable" } }
            @if repaired { span.badge.repair title="written by a resume's repair" { "repair" } }
            span.seq { "#" (event.seq.get()) }
            (actions_menu(&format!("Actions for event {}", event.seq.get()), markup! {
                (raw_link(id, event, "Raw JSON"))
                (fork_button(viewer, id, event.seq.get(), "Fork here"))
            }))
        }
    }
}

pub(super) fn event_view(viewer: &Viewer, id: &SessionId, event: &Event, repaired: bool, times: &Times) -> Markup {
    let data = event.data.to_value();
    let kind = event.event_type.as_str();
    let class = format!("event type-{}{}", kind.replace('/', "-"), if repaired { " repair" } else { "" });
    markup! {
        li class=(class) id={"event-" (event.seq.get())} {
            (event_head(viewer, id, event, repaired, times))
            @match kind {
                vocab::USER_MESSAGE | vocab::ASSISTANT_MESSAGE | vocab::SYSTEM_MESSAGE => {
                    (content_view(id, event, data.get("content")))
                }
                vocab::TURN_START | vocab::TURN_END | vocab::STEP_START | vocab::STEP_END => {
                    @if let Some(reason) = data.get("reason").and_then(Value::as_str) { span.reason { (reason) } }
                }
                vocab::CHECKPOINT => {
                    details.checkpoint {
                        summary { "Checkpoint (" (event.data.len_bytes()) " bytes)" }
                        (json_block(id, event.seq.get(), event.data.as_str()))
                    }
                }
                // One LLM call (ignorable, but berth's own): its figures on one line, the
                // record one click away.
                vocab::MODEL_CALL => {
                    details.record {
                        summary { "Model call: " (berth_core::model_call::summary(&data)) }
                        (json_block(id, event.seq.get(), event.data.as_str()))
                    }
                }
                // A framework's own record (an ignorable event: `smol/step`, `lg/writes`,
                // `openai/pop`…) is what the framework reads back, not what people read:
                // folded, one click away.
                _ if event.ignorable => {
                    details.record {
                        summary { "Record kept for " (namespace(kind)) " (" (event.data.len_bytes()) " bytes)" }
                        (json_block(id, event.seq.get(), event.data.as_str()))
                    }
                }
                _ => (json_block(id, event.seq.get(), event.data.as_str())),
            }
        }
    }
}

/// The namespace of an event type (`smol` of `smol/step`), or the type itself.
fn namespace(kind: &str) -> &str {
    kind.split_once('/').map_or(kind, |(namespace, _)| namespace)
}

/// A message's (or a tool result's) `content`: a string as it is; typed parts as their
/// text with placeholders (`berth_core::content`), the event's JSON one click away;
/// anything else (no content, `null`) as the event's JSON.
fn content_view(id: &SessionId, event: &Event, content: Option<&Value>) -> Markup {
    let seq = event.seq.get();
    let show_all = |bytes: usize| {
        markup! {
            a.show-all href={"/ui/sessions/" (id) "/events/" (seq)} { "Show all (" (bytes) " bytes)" }
        }
    };
    match content {
        Some(Value::String(text)) => {
            let (shown, cut) = cut_text(text);
            markup! { div.content { (shown) } @if cut { (show_all(text.len())) } }
        }
        Some(content) if !content.is_null() => {
            let shown = content_text(content, JSON_SHOWN_BYTES_MAX);
            markup! {
                @if !shown.text.is_empty() { div.content.parts { (shown.text) } }
                @if shown.cut { (show_all(event.data.len_bytes())) }
                details.raw-json { summary { "JSON" } (json_block(id, seq, event.data.as_str())) }
            }
        }
        _ => json_block(id, seq, event.data.as_str()),
    }
}

/// A tool call's arguments as a framework stored them: some keep the model's raw JSON
/// text (the OpenAI Agents SDK's `arguments: "{\"city\": …}"`); such a string is read as
/// the JSON object or array it holds, anything else as it is.
fn parsed_arguments(arguments: Value) -> Value {
    match &arguments {
        Value::String(text) if text.trim_start().starts_with(['{', '[']) => serde_json::from_str::<Value>(text)
            .ok()
            .filter(|value| value.is_object() || value.is_array())
            .unwrap_or(arguments),
        _ => arguments,
    }
}

fn tool_view(view: &TimelineView, tool: &ToolPairing, times: &Times) -> Markup {
    let (viewer, id, events) = (view.viewer, view.id, view.events);
    let result = tool.result_at.map(|index| &events[index]);
    let state = match (result, tool.is_error) {
        (None, _) => "pending",
        (Some(_), true) => "error",
        (Some(_), false) => "ok",
    };
    let arguments = tool
        .started_at
        .map(|index| events[index].data.to_value())
        .and_then(|data| data.get("arguments").cloned())
        .or_else(|| {
            let request = events[tool.requested_at?].data.to_value();
            request
                .get("tool_calls")?
                .as_array()?
                .iter()
                .find(|call| call.get("call_id").and_then(Value::as_str) == Some(&tool.call_id))?
                .get("arguments")
                .cloned()
        })
        .map(parsed_arguments);
    let anchor = tool.requested_at.or(tool.started_at).or(tool.result_at).unwrap_or(0);
    // Beside the name, cut; in full (pretty) one click away when cut or nested.
    let (inline_arguments, arguments_folded) = match &arguments {
        Some(arguments) => {
            let text = arguments.to_string();
            let nested =
                arguments.as_object().is_some_and(|object| object.values().any(|v| v.is_object() || v.is_array()));
            match text.char_indices().nth(ARGUMENTS_INLINE_CHARS) {
                Some((end, _)) => (Some(format!("({}…)", &text[..end])), true),
                None => (Some(format!("({text})")), nested),
            }
        }
        None => (None, false),
    };
    // A repair's closer carries the last real event's time: no duration from it.
    let duration = tool.duration_ms.filter(|_| !tool.repaired);
    markup! {
        li class={"tool tool-" (state) @if tool.repaired { " repair" }} id={"tool-" (events[anchor].seq.get()) "-" (tool.call_id)} {
            div.tool-head {
                span.badge.tool-badge { "tool" } " "
                strong { (tool.name.as_deref().unwrap_or("(unnamed)")) }
                @if let Some(inline) = &inline_arguments { code.args-inline { (inline) } } " "
                span class={"badge state-" (state)} { (state) }
                @if let Some(ms) = duration { " " span.duration title="from the request to the result" { "took " (duration_text(ms)) } }
                @if tool.repaired { " " span.badge.repair title="result written by a resume's repair" { "repair" } }
                @if let Some(by) = &tool.repaired_by { " " (repaired_by_note(by, false)) }
                " " code.call-id { (tool.call_id) }
            }
            dl.tool-parts {
                dt { "requested" } dd { @match tool.requested_at { Some(i) => { "#" (events[i].seq.get()) }, None => "—" } }
                dt { "started" } dd { @match tool.started_at { Some(i) => { "#" (events[i].seq.get()) " " (times.of(events[i].time)) }, None => "not recorded" } }
                dt { "result" } dd { @match result { Some(event) => { "#" (event.seq.get()) " " (times.of(event.time)) }, None => "none yet" } }
            }
            @if let Some(arguments) = arguments.filter(|_| arguments_folded) {
                details.arguments { summary { "Arguments" } (json_block(id, events[anchor].seq.get(), &arguments.to_string())) }
            }
            @if let Some(event) = result {
                div.result {
                    (event_head(viewer, id, event, tool.repaired, times))
                    @match event.data.to_value().get("content") {
                        Some(content @ (Value::Array(_) | Value::Object(_))) => (content_view(id, event, Some(content))),
                        // A string result is read as text; the event's JSON (the framework's
                        // own item, an error) is one click away.
                        Some(content @ Value::String(_)) => {
                            (content_view(id, event, Some(content)))
                            details.raw-json { summary { "JSON" } (json_block(id, event.seq.get(), event.data.as_str())) }
                        }
                        _ => (json_block(id, event.seq.get(), event.data.as_str())),
                    }
                }
            }
        }
    }
}

/// One event in full (the "show all" of a cut one).
pub async fn event_page(State(state): State<Shared>, viewer: Viewer, Path((id, seq)): Path<(String, u64)>) -> Response {
    let outcome = async {
        let id = parse_id(&id)?;
        let principal = viewer.principal.clone();
        let read_id = id.clone();
        let events = call(&state, |s| async move { s.read(&principal, &read_id, seq, Some(1)).await }).await?;
        let event = events
            .into_iter()
            .next()
            .ok_or_else(|| ApiError::from(berth_core::Error::NotFound { what: "event", id: seq.to_string() }))?;
        let (shown, _) = pretty_json(event.data.as_str(), false);
        let body = markup! {
            p { a href={"/ui/sessions/" (id) "#event-" (seq)} { "Back to session " (id) } }
            h1 { "Event #" (seq) " · " (event.event_type.as_str()) }
            p { (time_element(event.time)) @if let Some(run) = &event.run { " · run " code { (run) } } }
            pre.json.full { code { (shown) } }
        };
        Ok::<_, ApiError>(html(StatusCode::OK, layout::page("Event", Some(&viewer), body)))
    }
    .await;
    outcome.unwrap_or_else(|error| layout::fail(&viewer, error))
}

#[derive(Deserialize)]
pub struct MetadataForm {
    csrf: String,
    expected_revision: u64,
    title: String,
    labels: String,
}

/// Saves title and labels with the revision the form was rendered at (412 if the
/// session changed since).
pub async fn update_metadata(
    State(state): State<Shared>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(form): Form<MetadataForm>,
) -> Response {
    if !csrf_matches(&viewer.csrf, &form.csrf) {
        return layout::csrf_refused(&viewer);
    }
    let outcome = async {
        let id = parse_id(&id)?;
        let title = form.title.trim();
        let labels: BTreeSet<String> =
            form.labels.split(',').map(str::trim).filter(|label| !label.is_empty()).map(str::to_owned).collect();
        let update = MetadataUpdate {
            title: Some((!title.is_empty()).then(|| title.to_owned())),
            labels: Some(labels),
            expected_revision: Some(Revision(form.expected_revision)),
        };
        let principal = viewer.principal.clone();
        let update_id = id.clone();
        call(&state, |s| async move { s.update_metadata(&principal, &update_id, update).await }).await?;
        Ok::<_, ApiError>(Redirect::to(&format!("/ui/sessions/{id}")).into_response())
    }
    .await;
    outcome.unwrap_or_else(|error| layout::fail(&viewer, error))
}

#[derive(Deserialize)]
pub struct ForkForm {
    csrf: String,
    upto_seq: u64,
}

/// Forks the session with its events before `upto_seq`, then opens the fork.
pub async fn fork(
    State(state): State<Shared>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(form): Form<ForkForm>,
) -> Response {
    if !csrf_matches(&viewer.csrf, &form.csrf) {
        return layout::csrf_refused(&viewer);
    }
    let outcome = async {
        let id = parse_id(&id)?;
        let principal = viewer.principal.clone();
        let record = call(&state, |s| async move { s.fork(&principal, &id, Some(form.upto_seq), None).await }).await?;
        Ok::<_, ApiError>(Redirect::to(&format!("/ui/sessions/{}", record.header.id)).into_response())
    }
    .await;
    outcome.unwrap_or_else(|error| layout::fail(&viewer, error))
}

#[derive(Deserialize, Default)]
pub struct ExportQuery {
    format: Option<String>,
}

/// The same bytes as `GET /v1/sessions/{id}/export`, as a download.
pub async fn export(
    State(state): State<Shared>,
    viewer: Viewer,
    Path(id): Path<String>,
    Query(query): Query<ExportQuery>,
) -> Response {
    let outcome = async {
        let id = parse_id(&id)?;
        let zip = match query.format.as_deref() {
            None | Some("jsonl") => false,
            Some("zip") => true,
            Some(_) => return Err(ApiError::bad_request("format: use jsonl or zip")),
        };
        let principal = viewer.principal.clone();
        let export_id = id.clone();
        let bytes = call(&state, move |s| async move {
            if zip {
                s.export_zip(&principal, &export_id).await
            } else {
                s.export(&principal, &export_id).await
            }
        })
        .await?;
        let (content_type, extension) =
            if zip { ("application/zip", "zip") } else { ("application/x-ndjson", "jsonl") };
        // Session ids are [A-Za-z0-9._~-]: safe inside a quoted filename.
        let disposition = HeaderValue::from_str(&format!("attachment; filename=\"{id}.{extension}\""))
            .unwrap_or_else(|_| HeaderValue::from_static("attachment"));
        Ok((
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
                (header::CONTENT_DISPOSITION, disposition),
            ],
            bytes,
        )
            .into_response())
    }
    .await;
    outcome.unwrap_or_else(|error| layout::fail(&viewer, error))
}

#[cfg(test)]
mod tests {
    use super::parsed_arguments;
    use serde_json::json;

    #[test]
    fn arguments_kept_as_json_text_read_as_json() {
        assert_eq!(parsed_arguments(json!("{\"city\": \"Paris\"}")), json!({"city": "Paris"}));
        assert_eq!(parsed_arguments(json!(" [1, 2]")), json!([1, 2]));
        for kept in [json!("Paris"), json!("{not json"), json!("\"quoted\""), json!({"city": "Paris"}), json!(null)] {
            assert_eq!(parsed_arguments(kept.clone()), kept);
        }
    }
}
