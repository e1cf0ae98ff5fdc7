//! The session list: the listing's text search (`q`) and filters as a GET form, kept
//! across its pages, per-status counts (capped, as
//! `GET /v1/sessions/counts` answers them), status badges, and keyset paging by the
//! listing's cursor (so the hundredth page costs what the first does), and for an
//! untitled conversation the preview of its first user message (`preview`), and per
//! row the badges its catalog record tells (a writer attached, a run's lease lapsed by
//! the service's clock, a turn interrupted and repaired).

use super::layout::{self, filled, html, status_badge, time_element};
use super::signin::Viewer;
use crate::api::{call, Shared, SESSION_COUNT_CAP};
use crate::error::ApiError;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use berth_catalog::{RepairNote, RunStatus, SessionRecord};
use berth_core::lifecycle::Status;
use berth_core::{ProjectId, SessionId, Timestamp, UserId};
use berth_service::{ListRequest, StatusCount, LISTABLE_STATUSES};
use maud::{html as markup, Markup};
use serde::{Deserialize, Serialize};

/// Sessions per page of the list.
pub const LIST_PAGE_SESSIONS: usize = 50;

/// The list's query string (every field as the form sends it: empty means unset).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct ListQuery {
    /// The text search (`berth_catalog::SessionSearch`), kept across pages.
    pub q: Option<String>,
    pub status: Option<String>,
    pub label: Option<String>,
    pub user: Option<String>,
    pub project: Option<String>,
    pub parent: Option<String>,
    /// `YYYY-MM-DDTHH:MM` (UTC), as a `datetime-local` input sends it.
    pub active_since: Option<String>,
    pub active_before: Option<String>,
    pub include_blank: Option<String>,
    pub cursor: Option<String>,
}

fn bad(error: berth_core::Error) -> ApiError {
    ApiError::bad_request(error.to_string())
}

/// A `datetime-local` value (UTC) or milliseconds since the epoch.
pub fn parse_time(text: &str) -> Result<Timestamp, ApiError> {
    if let Ok(ms) = text.parse::<u64>() {
        return Ok(Timestamp(ms));
    }
    let format = time::format_description::well_known::Iso8601::DEFAULT;
    let moment = time::PrimitiveDateTime::parse(text, &format)
        .map_err(|_| ApiError::bad_request(format!("{text:?} is not a time (YYYY-MM-DDTHH:MM, UTC)")))?;
    let ms = moment.assume_utc().unix_timestamp_nanos() / 1_000_000;
    u64::try_from(ms).map(Timestamp).map_err(|_| ApiError::bad_request("times before 1970 are not kept"))
}

fn list_request(query: &ListQuery) -> Result<ListRequest, ApiError> {
    let statuses = match filled(&query.status) {
        Some(text) => vec![berth_service::parse_listable_status(text).map_err(bad)?],
        None => Vec::new(),
    };
    Ok(ListRequest {
        user: filled(&query.user).map(UserId::parse).transpose().map_err(bad)?,
        project: filled(&query.project).map(ProjectId::parse).transpose().map_err(bad)?,
        statuses,
        label: filled(&query.label).map(str::to_owned),
        parent: filled(&query.parent).map(SessionId::parse).transpose().map_err(bad)?,
        active_since: filled(&query.active_since).map(parse_time).transpose()?,
        active_before: filled(&query.active_before).map(parse_time).transpose()?,
        include_blank: filled(&query.include_blank).is_some(),
        search: crate::api::search_param(filled(&query.q).map(str::to_owned))?,
        cursor: filled(&query.cursor).map(str::to_owned),
        limit: Some(LIST_PAGE_SESSIONS),
    })
}

/// The query string of `query` with `change` applied (for paging and count links).
fn href(query: &ListQuery, change: impl FnOnce(&mut ListQuery)) -> String {
    let mut query = query.clone();
    change(&mut query);
    let text = serde_urlencoded_pairs(&query);
    if text.is_empty() {
        "/ui/sessions".to_owned()
    } else {
        format!("/ui/sessions?{text}")
    }
}

fn serde_urlencoded_pairs(query: &ListQuery) -> String {
    let fields = [
        ("q", &query.q),
        ("status", &query.status),
        ("label", &query.label),
        ("user", &query.user),
        ("project", &query.project),
        ("parent", &query.parent),
        ("active_since", &query.active_since),
        ("active_before", &query.active_before),
        ("include_blank", &query.include_blank),
        ("cursor", &query.cursor),
    ];
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (name, value) in fields {
        if let Some(value) = filled(value) {
            out.append_pair(name, value);
        }
    }
    out.finish()
}

pub async fn sessions_page(State(state): State<Shared>, viewer: Viewer, Query(query): Query<ListQuery>) -> Response {
    let request = match list_request(&query) {
        Ok(request) => request,
        Err(error) => return layout::fail(&viewer, error),
    };
    let principal = viewer.principal.clone();
    let counted = ListRequest { cursor: None, statuses: Vec::new(), ..request.clone() };
    let request_statuses = request.statuses.clone();
    let with_blank = (!request.include_blank).then(|| ListRequest { include_blank: true, ..counted.clone() });
    let page = call(&state, |s| async move { s.list(&principal, &request).await }).await;
    let principal = viewer.principal.clone();
    let counts = call(&state, |s| async move { s.count(&principal, &counted, SESSION_COUNT_CAP).await }).await;
    let (page, counts) = match (page, counts) {
        (Ok(page), Ok(counts)) => (page, counts),
        (Err(error), _) | (_, Err(error)) => return layout::fail(&viewer, error),
    };
    // Blank sessions hidden: the same bounded counts with them, less the counts without.
    let hidden = match with_blank {
        None => None,
        Some(with_blank) => {
            let principal = viewer.principal.clone();
            match call(&state, |s| async move { s.count(&principal, &with_blank, SESSION_COUNT_CAP).await }).await {
                Ok(with_blank) => Some(HiddenBlank::of(&with_blank, &counts, &request_statuses)),
                Err(error) => return layout::fail(&viewer, error),
            }
        }
    };
    let previews = super::preview::previews(&state, &viewer, &page.items).await;
    let now = state.service.now();
    let body = markup! {
        h1 { "Sessions" }
        (filter_form(&query))
        (counts_bar(&query, &counts))
        @if let Some(hidden) = hidden { (hidden_blank(&query, hidden)) }
        @if let Some(q) = filled(&query.q) {
            p.search-note { "Sessions whose title, a label or id holds " q.searched { (q) } " (ignoring case)." }
        }
        @if page.items.is_empty() {
            p.empty { "No sessions match." }
        } @else {
            (sessions_table(&page.items, &previews, now))
        }
        nav.paging aria-label="Pages" {
            @if filled(&query.cursor).is_some() {
                a href=(href(&query, |q| q.cursor = None)) { "First page" }
            }
            @if let Some(cursor) = &page.next_cursor {
                a rel="next" href=(href(&query, |q| q.cursor = Some(cursor.clone()))) { "Next page" }
            }
        }
    };
    html(StatusCode::OK, layout::page("Sessions", Some(&viewer), body))
}

fn text_input(id: &str, label: &str, value: &Option<String>) -> Markup {
    markup! {
        div.field {
            label for=(id) { (label) }
            input id=(id) name=(id) type="text" value=[filled(value)];
        }
    }
}

fn filter_form(query: &ListQuery) -> Markup {
    let status = filled(&query.status).unwrap_or("");
    markup! {
        form.filters method="get" action="/ui/sessions" aria-label="Filter sessions" {
            div.field.search {
                label for="q" { "Search" }
                input #q name="q" type="search" maxlength=(berth_catalog::SEARCH_CHARS_MAX)
                    placeholder="title, label or id" value=[filled(&query.q)];
            }
            div.field {
                label for="status" { "Status" }
                select #status name="status" {
                    option value="" selected[status.is_empty()] { "any" }
                    @for listable in LISTABLE_STATUSES {
                        option value=(listable.as_str()) selected[status == listable.as_str()] { (listable.as_str()) }
                    }
                }
            }
            (text_input("label", "Label", &query.label))
            (text_input("user", "User", &query.user))
            (text_input("project", "Project", &query.project))
            (text_input("parent", "Forked from", &query.parent))
            div.field {
                label for="active_since" { "Active since (UTC)" }
                input #active_since name="active_since" type="datetime-local" value=[filled(&query.active_since)];
            }
            div.field {
                label for="active_before" { "Active before (UTC)" }
                input #active_before name="active_before" type="datetime-local" value=[filled(&query.active_before)];
            }
            div.field.check {
                input #include_blank name="include_blank" type="checkbox" value="1"
                    checked[filled(&query.include_blank).is_some()];
                label for="include_blank" { "Include blank" }
            }
            button type="submit" { "Filter" }
            a.reset href="/ui/sessions" { "Reset" }
        }
    }
}

fn counts_bar(query: &ListQuery, counts: &[StatusCount]) -> Markup {
    markup! {
        ul.counts aria-label="Sessions per status" {
            @for count in counts {
                li {
                    a href=(href(query, |q| { q.status = Some(count.status.as_str().to_owned()); q.cursor = None; })) {
                        (status_badge(count.status)) " "
                        span.count data-status=(count.status.as_str()) {
                            @if count.more { "more than " (count.count) } @else { (count.count) }
                        }
                    }
                }
            }
        }
    }
}

/// How many blank sessions (no conversation event yet) a listing that hides them left
/// out, from the bounded per-status counts with and without them: exact while no count
/// reached the cap. A status whose count with blanks reached the cap but without them
/// did not hides more than the difference; one where both reached it hides an unknown
/// number (at least none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HiddenBlank {
    count: u64,
    /// More than `count` are hidden.
    more: bool,
    /// At least `count` are hidden (a status counted to the cap either way).
    unknown: bool,
}

impl HiddenBlank {
    /// Over `statuses` (all listable ones when empty).
    fn of(with_blank: &[StatusCount], without: &[StatusCount], statuses: &[Status]) -> HiddenBlank {
        let mut hidden = HiddenBlank { count: 0, more: false, unknown: false };
        for with in with_blank.iter().filter(|count| statuses.is_empty() || statuses.contains(&count.status)) {
            let without = without.iter().find(|count| count.status == with.status);
            let (count, more) = without.map_or((0, false), |count| (count.count, count.more));
            hidden.count += with.count.saturating_sub(count);
            match (with.more, more) {
                (true, false) => hidden.more = true,
                (true, true) => hidden.unknown = true,
                _ => {}
            }
        }
        hidden
    }
}

fn hidden_blank(query: &ListQuery, hidden: HiddenBlank) -> Markup {
    let show = href(query, |q| {
        q.include_blank = Some("1".to_owned());
        q.cursor = None;
    });
    let sessions = |count: u64| if count == 1 && !hidden.more { "blank session" } else { "blank sessions" };
    markup! {
        @if hidden.count > 0 || hidden.more || hidden.unknown {
            p.hidden-blank {
                span.hidden-count data-count=(hidden.count) {
                    @if hidden.more { "More than " (hidden.count) } @else if hidden.unknown { "At least " (hidden.count) }
                    @else { (hidden.count) }
                    " " (sessions(hidden.count)) " (no conversation yet) hidden."
                }
                " " a href=(show) { "Show them" }
            }
        }
    }
}

/// A session's title, or (untitled) the preview of its first user message, marked as one.
pub(super) fn title_or_preview(record: &SessionRecord, preview: Option<&str>) -> Markup {
    match (record.title.as_deref().filter(|title| !title.trim().is_empty()), preview) {
        (Some(title), _) => markup! { (title) },
        (None, Some(preview)) => markup! {
            span.preview title="The first user message (the session has no title)" {
                span.visually-hidden { "First user message: " } (preview)
            }
        },
        (None, None) => markup! {},
    }
}

/// The badges a row shows from its catalog record alone (no log is read per row): a
/// writer attached (a run whose lease holds at `now`), a lease lapsed (a run still
/// recorded attached whose lease ended before `now`: it crashed or stopped without
/// detaching; the next attach detaches it as abandoned), and from `record.repair`
/// (`RepairNote`) interrupted (a run left a turn open; known once a resume read the log)
/// and repaired (a resume closed it).
pub(super) fn run_badges(record: &SessionRecord, now: Timestamp) -> Markup {
    let attached = || record.runs.iter().filter(|run| run.status == RunStatus::Attached);
    let live = attached().any(|run| run.lease_until >= now);
    let lapsed = attached().any(|run| run.lease_until < now);
    markup! {
        @if live {
            " " span.badge.run-writer title="A run is attached and its lease holds" { "writer attached" }
        }
        @if lapsed {
            " " span.badge.run-lapsed title="A run is still attached but its lease has lapsed (it did not detach)" {
                "lease lapsed"
            }
        }
        (repair_badges(&record.repair))
    }
}

/// "interrupted" and "repaired" from the record's `RepairNote`, their runs and times in
/// the title (UTC, as `time_element` shows them).
pub(super) fn repair_badges(note: &RepairNote) -> Markup {
    let when = layout::time_text;
    markup! {
        @if let Some(interrupted) = &note.interrupted {
            " " span.badge.run-interrupted
                title={ "Run " (interrupted.run) " left a turn open (its last event at " (when(interrupted.at)) ")" } {
                "interrupted"
            }
        }
        @if let (true, Some(by)) = (note.is_repaired(), &note.repaired_by) {
            " " span.badge.run-repaired title={ "Repaired by run " (by.run) " at " (when(by.at)) } { "repaired" }
        }
    }
}

fn sessions_table(items: &[SessionRecord], previews: &[Option<String>], now: Timestamp) -> Markup {
    markup! {
        table.sessions {
            caption.visually-hidden { "Sessions, most recent activity first" }
            thead { tr {
                th scope="col" { "Session" } th scope="col" { "Title" } th scope="col" { "Status" }
                th scope="col" { "Owner" } th scope="col" { "Labels" } th scope="col" { "Events" }
                th scope="col" { "Last activity" } th scope="col" { "Forked from" }
            } }
            tbody {
                @for (record, preview) in items.iter().zip(previews) {
                    tr {
                        td { a.session-link href={"/ui/sessions/" (record.header.id)} { (record.header.id) } }
                        td.title { (title_or_preview(record, preview.as_deref())) }
                        td.status { (status_badge(record.status)) (run_badges(record, now)) }
                        td {
                            (record.header.scope.user)
                            @if let Some(project) = &record.header.scope.project { " · " (project) }
                        }
                        td { @for label in &record.labels { span.label { (label) } " " } }
                        td.number { (record.event_count) }
                        td { (time_element(record.last_activity)) }
                        td {
                            @if let Some(parent) = &record.header.parent {
                                a href={"/ui/sessions/" (parent.session)} { (parent.session) }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(rows: &[(Status, u64, bool)]) -> Vec<StatusCount> {
        rows.iter().map(|&(status, count, more)| StatusCount { status, count, more }).collect()
    }

    #[test]
    fn the_hidden_blank_count_is_exact_below_the_cap_and_a_bound_at_it() {
        let without = counts(&[(Status::Active, 3, false), (Status::Idle, 5, false), (Status::Closed, 9, true)]);
        let exact = counts(&[(Status::Active, 4, false), (Status::Idle, 7, false), (Status::Closed, 9, true)]);
        assert_eq!(HiddenBlank::of(&exact, &without, &[]), HiddenBlank { count: 3, more: false, unknown: true });
        assert_eq!(
            HiddenBlank::of(&exact, &without, &[Status::Idle]),
            HiddenBlank { count: 2, more: false, unknown: false }
        );
        let capped = counts(&[(Status::Active, 9, true), (Status::Idle, 5, false)]);
        assert_eq!(
            HiddenBlank::of(&capped, &without, &[Status::Active, Status::Idle]),
            HiddenBlank { count: 6, more: true, unknown: false }
        );
    }
}
