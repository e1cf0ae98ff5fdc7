//! The audit page (admin keys): the tenant's audit log filtered by action, session,
//! actor and time (`SessionService::audit_search`, the call behind
//! `GET /v1/audit/search`), paged forward, with the chain's verification result.

use super::layout::{self, filled, html, time_element};
use super::list::parse_time;
use super::signin::Viewer;
use crate::api::{audit_filter, call, Shared};
use crate::error::ApiError;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use berth_api::AuditSearchParams;
use maud::html as markup;
use serde::Deserialize;

/// Entries per audit page.
pub const AUDIT_PAGE_ENTRIES: usize = 100;

#[derive(Clone, Debug, Default, Deserialize)]
pub struct AuditQuery {
    action: Option<String>,
    session: Option<String>,
    actor: Option<String>,
    since: Option<String>,
    before: Option<String>,
    from: Option<u64>,
}

fn search_params(query: &AuditQuery) -> Result<AuditSearchParams, ApiError> {
    Ok(AuditSearchParams {
        from: query.from,
        limit: Some(AUDIT_PAGE_ENTRIES),
        action: filled(&query.action).map(str::to_owned),
        session: filled(&query.session).map(str::to_owned),
        actor: filled(&query.actor).map(str::to_owned),
        since: filled(&query.since).map(parse_time).transpose()?.map(|time| time.0),
        before: filled(&query.before).map(parse_time).transpose()?.map(|time| time.0),
    })
}

fn next_href(query: &AuditQuery, next_from: u64) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (name, value) in [
        ("action", &query.action),
        ("session", &query.session),
        ("actor", &query.actor),
        ("since", &query.since),
        ("before", &query.before),
    ] {
        if let Some(value) = filled(value) {
            out.append_pair(name, value);
        }
    }
    out.append_pair("from", &next_from.to_string());
    format!("/ui/audit?{}", out.finish())
}

pub async fn audit_page(State(state): State<Shared>, viewer: Viewer, Query(query): Query<AuditQuery>) -> Response {
    let outcome = async {
        let params = search_params(&query)?;
        let filter = audit_filter(&params)?;
        let from = params.from.unwrap_or(0);
        let principal = viewer.principal.clone();
        let page =
            call(&state, move |s| async move { s.audit_search(&principal, &filter, from, AUDIT_PAGE_ENTRIES).await })
                .await?;
        let principal = viewer.principal.clone();
        let verdict = call(&state, move |s| async move { s.verify_audit(&principal).await }).await?;
        Ok::<_, ApiError>((page, verdict))
    }
    .await;
    let (page, verdict) = match outcome {
        Ok(found) => found,
        Err(error) => return layout::fail(&viewer, error),
    };
    let field = |id: &'static str, label: &'static str, value: &Option<String>, kind: &'static str| {
        markup! { div.field { label for=(id) { (label) } input id=(id) name=(id) type=(kind) value=[filled(value)]; } }
    };
    let body = markup! {
        h1 { "Audit log" }
        @match &verdict.broken_at {
            None => p.chain.chain-ok role="status" { "Chain verified: " (verdict.entries) " entries, intact." },
            Some(seq) => p.chain.chain-broken role="alert" {
                "Chain broken at entry " (seq) ": " (verdict.reason.as_deref().unwrap_or("unknown reason"))
            },
        }
        form.filters method="get" action="/ui/audit" aria-label="Filter the audit log" {
            (field("action", "Action", &query.action, "text"))
            (field("session", "Session", &query.session, "text"))
            (field("actor", "Actor (e.g. user:alice)", &query.actor, "text"))
            (field("since", "Since (UTC)", &query.since, "datetime-local"))
            (field("before", "Before (UTC)", &query.before, "datetime-local"))
            button type="submit" { "Filter" }
            a.reset href="/ui/audit" { "Reset" }
        }
        @if page.entries.is_empty() { p.empty { "No matching entries in this stretch of the log." } }
        @else {
            table.audit {
                caption.visually-hidden { "Audit entries in stored order" }
                thead { tr {
                    th scope="col" { "#" } th scope="col" { "Time" } th scope="col" { "Actor" } th scope="col" { "Action" }
                    th scope="col" { "Session" } th scope="col" { "Outcome" } th scope="col" { "Details" }
                } }
                tbody { @for entry in &page.entries {
                    tr {
                        td.number { (entry.seq) }
                        td { (time_element(entry.draft.time)) }
                        td { (entry.draft.actor) }
                        td { span class={"badge action-" (entry.draft.action)} { (entry.draft.action) } }
                        td { @if let Some(session) = &entry.draft.session { a href={"/ui/sessions/" (session)} { (session) } } }
                        td { (entry.draft.outcome) }
                        td { code { (entry.draft.details.to_string()) } }
                    }
                } }
            }
        }
        @if let Some(next_from) = page.next_from {
            nav.paging aria-label="Audit pages" { a rel="next" href=(next_href(&query, next_from)) { "Later entries" } }
        }
    };
    html(StatusCode::OK, layout::page("Audit", Some(&viewer), body))
}
