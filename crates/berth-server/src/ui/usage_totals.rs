//! A session's usage totals: model calls, errors, tokens per model, model time and tool
//! time — the service's usage computation (the one behind `GET /v1/sessions/{id}/usage`,
//! which reads the log's `model/call`, `tool/call` and `tool/result` events), never a
//! read of the inspector's own.
//!
//! Shown on demand, on a page of its own (`/ui/sessions/{id}/usage`, linked from the
//! session's header), not on the session page: the usage read scans the whole log, so
//! its cost grows with the log (80–100 ms on a 10,000-event session, debug build),
//! while the session page reads only its last 200 events whatever the log's length.

use super::layout::{self, duration_text, html};
use super::signin::Viewer;
use crate::api::{call, Shared};
use crate::error::ApiError;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use berth_core::SessionId;
use berth_service::{SessionUsage, UsageTotals};
use maud::{html as markup, Markup};

/// The link the session's header carries to the totals.
pub fn usage_link(id: &SessionId) -> Markup {
    markup! {
        p.usage-link { a #usage-link href={"/ui/sessions/" (id) "/usage"} { "Usage totals" }
            " " span.hint { "(model calls, tokens by model, model and tool time; reads the whole log)" } }
    }
}

/// `/ui/sessions/{id}/usage`: the session's totals, authorized as reading its events.
pub async fn usage_page(State(state): State<Shared>, viewer: Viewer, Path(id): Path<String>) -> Response {
    let outcome = async {
        let id: SessionId = crate::api::session_id(&id)?;
        let (principal, usage_id) = (viewer.principal.clone(), id.clone());
        let usage = call(&state, |s| async move { s.session_usage(&principal, &usage_id).await }).await?;
        let body = markup! {
            p { a href={"/ui/sessions/" (id)} { "Back to session " (id) } }
            h1 { "Usage of session " code { (id) } }
            (usage_view(&usage))
        };
        Ok::<_, ApiError>(html(StatusCode::OK, layout::page(&format!("Usage · {id}"), Some(&viewer), body)))
    }
    .await;
    outcome.unwrap_or_else(|error| layout::fail(&viewer, error))
}

fn tokens_text(totals: &UsageTotals) -> String {
    format!("{} in / {} out / {} cached", totals.input_tokens, totals.output_tokens, totals.cached_tokens)
}

fn ms_text(ms: f64) -> String {
    duration_text(ms.round().max(0.0) as u64)
}

/// The totals as a definition list, and per model a table.
fn usage_view(usage: &SessionUsage) -> Markup {
    let totals = &usage.totals;
    markup! {
        section.usage aria-labelledby="usage-title" data-calls=(totals.calls) data-errors=(totals.errors)
            data-model-ms=(totals.model_ms) data-tool-calls=(usage.tool_calls) data-tool-ms=(usage.tool_ms) {
            h2 #usage-title { "Totals" }
            @if totals.calls == 0 && usage.tool_calls == 0 { p.empty { "No model call (model/call) or tool call recorded." } }
            dl.facts {
                dt { "Model calls" }
                dd.usage-calls { (totals.calls) @if totals.errors > 0 { " (" span.badge.state-error { (totals.errors) " failed" } ")" } }
                dt { "Tokens" } dd.usage-tokens { (tokens_text(totals)) }
                dt { "Model time" } dd.usage-model-ms { (ms_text(totals.model_ms)) }
                dt { "Tool time" } dd.usage-tool-ms { (duration_text(usage.tool_ms)) " over " (usage.tool_calls)
                    @if usage.tool_calls == 1 { " tool call" } @else { " tool calls" } }
            }
            @if !usage.by_model.is_empty() {
                table.usage-models {
                    thead { tr { th { "Model" } th { "Calls" } th { "Tokens" } th { "Time" } } }
                    tbody { @for model in &usage.by_model {
                        tr {
                            td { (model.model) @if let Some(provider) = &model.provider { " (" (provider) ")" } }
                            td { (model.totals.calls) @if model.totals.errors > 0 { " (" (model.totals.errors) " failed)" } }
                            td { (tokens_text(&model.totals)) }
                            td { (ms_text(model.totals.model_ms)) }
                        }
                    } }
                }
            }
        }
    }
}
