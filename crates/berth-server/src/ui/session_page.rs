//! The session page: header (title, or the first user message of an untitled
//! conversation; scope, policy, parent, origin, forks), metadata (editable
//! with the revision check), runs (attached now; attached, detached, abandoned and
//! repaired from the session's audit entries), the timeline (the latest turns first,
//! read from the tail; older pages by `before`, never the whole log), live mode, export
//! and fork-at-this-event. Also the single-event page ("show all" of a cut event).

use super::layout::{
    self, cut_text, duration_text, html, pretty_json, status_badge, time_element, JSON_SHOWN_BYTES_MAX,
};
use super::security::csrf_matches;
use super::signin::Viewer;
use super::timeline::{self, Item, Timeline, ToolPairing, Turn};
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
use berth_core::{Event, Revision, SessionId};
use berth_service::{ListRequest, MetadataUpdate};
use maud::{html as markup, Markup};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeSet;

/// Events read for one page of the timeline.
pub const TIMELINE_PAGE_EVENTS: u64 = 200;
/// Forks listed on a session page.
pub const FORKS_SHOWN_MAX: usize = 50;

fn parse_id(text: &str) -> Result<SessionId, ApiError> {
    crate::api::session_id(text)
}

#[derive(Deserialize, Default)]
pub struct PageQuery {
    /// Show the events before this seq (paging back); absent: the tail.
    before: Option<u64>,
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
    match render_session(&state, &viewer, &id, query.before).await {
        Ok(body) => body,
        Err(error) => layout::fail(&viewer, error),
    }
}

async fn render_session(state: &Shared, viewer: &Viewer, id: &str, before: Option<u64>) -> Result<Response, ApiError> {
    let id = parse_id(id)?;
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
    let body = markup! {
        (session_header(&record, preview.as_deref(), &forks))
        div.columns {
            (metadata_form(viewer, &record))
            (runs_section(&record, &history))
        }
        (export_section(&record))
        section.timeline aria-labelledby="timeline-title" {
            h2 #timeline-title { "Timeline" }
            @if before.is_none() {
                div.live-controls {
                    button #live-toggle type="button" aria-pressed="false"
                        data-session=(record.header.id) data-next-seq=(live_from) { "Follow live" }
                    span #live-status role="status" aria-live="polite" { }
                }
                ol #live-events.events aria-label="Live events (newest first)" reversed { }
            } @else {
                p { a href={"/ui/sessions/" (record.header.id)} { "Back to the latest events" } }
            }
            @if page.events.is_empty() {
                p.empty { "No events yet." }
            }
            @for turn in built.turns.iter().rev() {
                (turn_view(viewer, &record.header.id, &page.events, &built, turn))
            }
            @if let Some(older) = page.older_before {
                nav.paging aria-label="Timeline pages" {
                    a rel="prev" href={"/ui/sessions/" (record.header.id) "?before=" (older)} { "Older events" }
                }
            }
        }
    };
    let named = record.title.as_deref().filter(|title| !title.trim().is_empty()).or(preview.as_deref());
    let page_title = match named {
        Some(name) => format!("{name} · {}", record.header.id),
        None => record.header.id.to_string(),
    };
    Ok(html(StatusCode::OK, layout::page(&page_title, Some(viewer), body)))
}

fn session_header(record: &SessionRecord, preview: Option<&str>, forks: &[SessionRecord]) -> Markup {
    let header = &record.header;
    let named = record.title.as_deref().is_some_and(|title| !title.trim().is_empty()) || preview.is_some();
    markup! {
        header.session-header {
            h1 { "Session " code { (header.id) } " " (status_badge(record.status)) }
            @if named { p.session-title { (super::list::title_or_preview(record, preview)) } }
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
                    dd { a href={"/ui/sessions/" (parent.session)} { (parent.session) } " (first " (parent.cut_seq) " events)" }
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
            dl.facts {
                dt { "Status" } dd { (status_badge(record.status)) }
                dt { "Activity lease until" } dd { (time_element(record.lease_until)) }
                dt { "Last activity" } dd { (time_element(record.last_activity)) }
                dt { "Revision" } dd { (record.revision.0) }
                dt { "Events" } dd { (record.event_count) }
            }
            form method="post" action={"/ui/sessions/" (record.header.id) "/metadata"} {
                input type="hidden" name="csrf" value=(viewer.csrf);
                input type="hidden" name="expected_revision" value=(record.revision.0);
                label for="title" { "Title" }
                input #title name="title" type="text" maxlength="512" value=(record.title.as_deref().unwrap_or(""));
                label for="labels" { "Labels (comma-separated)" }
                input #labels name="labels" type="text" value=(labels);
                button type="submit" { "Save metadata" }
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

fn turn_view(viewer: &Viewer, id: &SessionId, events: &[Event], built: &Timeline, turn: &Turn) -> Markup {
    let first = turn
        .start
        .or_else(|| turn.steps.first().and_then(|step| step.items.first()).map(|item| item_index(built, item)));
    let title = match (turn.start, turn.number) {
        (Some(_), Some(number)) => format!("Turn {number}"),
        (Some(_), None) => "Turn".to_owned(),
        (None, _) => "Events outside a turn".to_owned(),
    };
    let duration = match (turn.start, turn.end) {
        (Some(start), Some(end)) => Some(events[end].time.0.saturating_sub(events[start].time.0)),
        _ => None,
    };
    markup! {
        section class={"turn" @if turn.repaired { " repaired" }} aria-label=(title) {
            header.turn-header {
                h3 { (title) }
                @if let Some(first) = first { " " (time_element(events[first].time)) }
                @if let Some(run) = first.and_then(|first| events[first].run.as_ref()) { " · run " code { (run) } }
                @if let Some(duration) = duration { " · " (duration_text(duration)) }
                @match (&turn.end_reason, turn.start.is_some() && turn.end.is_none()) {
                    (Some(reason), _) => { " " span class={"badge reason-" (reason)} { (reason) } }
                    (None, true) => { " " span.badge.reason-open { "open" } }
                    _ => {}
                }
                @if turn.repaired { " " span.badge.repair title="closed by a resume's repair" { "repaired" } }
            }
            @for step in &turn.steps {
                div.step {
                    @if let Some(number) = step.number { h4 { "Step " (number) } }
                    ol.events {
                        @for item in &step.items {
                            @match item {
                                Item::Event(index) => (event_view(viewer, id, &events[*index], built.repaired[*index])),
                                Item::Tool(tool) => (tool_view(viewer, id, events, &built.tools[*tool])),
                            }
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

fn fork_button(viewer: &Viewer, id: &SessionId, seq: u64) -> Markup {
    markup! {
        form.fork method="post" action={"/ui/sessions/" (id) "/fork"} {
            input type="hidden" name="csrf" value=(viewer.csrf);
            input type="hidden" name="upto_seq" value=(seq + 1);
            button type="submit" title={"Fork a new session with events 0–" (seq)} aria-label={"Fork at event " (seq)} { "Fork here" }
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

fn event_head(viewer: &Viewer, id: &SessionId, event: &Event, repaired: bool) -> Markup {
    markup! {
        div.event-head {
            span.seq { "#" (event.seq.get()) } " "
            span.type { (event.event_type.as_str()) } " "
            (time_element(event.time))
            @if let Some(run) = &event.run { " · " code { (run) } }
            @if event.ignorable { " " span.badge.ignorable { "ignorable" } }
            @if repaired { " " span.badge.repair title="written by a resume's repair" { "repair" } }
            (fork_button(viewer, id, event.seq.get()))
        }
    }
}

pub(super) fn event_view(viewer: &Viewer, id: &SessionId, event: &Event, repaired: bool) -> Markup {
    let data = event.data.to_value();
    let kind = event.event_type.as_str();
    let class = format!("event type-{}{}", kind.replace('/', "-"), if repaired { " repair" } else { "" });
    markup! {
        li class=(class) id={"event-" (event.seq.get())} {
            (event_head(viewer, id, event, repaired))
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

fn tool_view(viewer: &Viewer, id: &SessionId, events: &[Event], tool: &ToolPairing) -> Markup {
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
        });
    let anchor = tool.requested_at.or(tool.started_at).or(tool.result_at).unwrap_or(0);
    markup! {
        li class={"tool tool-" (state) @if tool.repaired { " repair" }} id={"tool-" (events[anchor].seq.get()) "-" (tool.call_id)} {
            div.tool-head {
                span.badge.tool-badge { "tool" } " "
                strong { (tool.name.as_deref().unwrap_or("(unnamed)")) } " "
                code.call-id { (tool.call_id) } " "
                span class={"badge state-" (state)} { (state) }
                @if let Some(ms) = tool.duration_ms { " " span.duration { (duration_text(ms)) } }
                @if tool.repaired { " " span.badge.repair title="result written by a resume's repair" { "repair" } }
            }
            dl.tool-parts {
                dt { "requested" } dd { @match tool.requested_at { Some(i) => { "#" (events[i].seq.get()) }, None => "—" } }
                dt { "started (tool/call)" } dd { @match tool.started_at { Some(i) => { "#" (events[i].seq.get()) " " (time_element(events[i].time)) }, None => "not recorded" } }
                dt { "result (tool/result)" } dd { @match result { Some(event) => { "#" (event.seq.get()) " " (time_element(event.time)) }, None => "none yet" } }
            }
            @if let Some(arguments) = arguments {
                details.arguments { summary { "Arguments" } (json_block(id, events[anchor].seq.get(), &arguments.to_string())) }
            }
            @if let Some(event) = result {
                div.result {
                    (event_head(viewer, id, event, tool.repaired))
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
