//! The page shell every inspector page shares (navigation, sign-out form, stylesheet and
//! script links — no inline script or style), and the small formatting helpers of the
//! pages: times, status badges, error pages, truncated JSON.

use super::signin::Viewer;
use crate::error::ApiError;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use berth_core::lifecycle::Status;
use berth_core::Timestamp;
use berth_service::Role;
use maud::{html as markup, Markup, DOCTYPE};

/// JSON longer than this is cut on the timeline, with a link to the whole event.
pub const JSON_SHOWN_BYTES_MAX: usize = 4 * 1024;

/// A full page.
pub fn page(title: &str, viewer: Option<&Viewer>, body: Markup) -> Markup {
    markup! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · berth inspector" }
                link rel="stylesheet" href="/ui/assets/inspector.css";
                script src="/ui/assets/live.js" defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/ui/sessions" { "berth inspector" }
                    @if let Some(viewer) = viewer {
                        nav aria-label="Main" {
                            a href="/ui/sessions" { "Sessions" }
                            @if viewer.principal.role == Role::Admin {
                                a href="/ui/audit" { "Audit" }
                            }
                        }
                        span.whoami {
                            (viewer.principal.tenant) " / " (viewer.principal.user) " (" (viewer.principal.role.as_str()) ")"
                        }
                        form.sign-out method="post" action="/ui/sign-out" {
                            input type="hidden" name="csrf" value=(viewer.csrf);
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main #main tabindex="-1" { (body) }
            }
        }
    }
}

/// An HTML response.
pub fn html(status: StatusCode, markup: Markup) -> Response {
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"))], markup.into_string())
        .into_response()
}

/// The page for an error of a service call: the API's status and message (a 404 for
/// another tenant's or user's session reads exactly like a missing one).
pub fn fail(viewer: &Viewer, error: ApiError) -> Response {
    let body = markup! {
        h1 { (error.status.as_u16()) " · " (error.body.code) }
        p.problem role="alert" { (error.body.message) }
        p { a href="/ui/sessions" { "Back to the sessions" } }
    };
    html(error.status, page("Error", Some(viewer), body))
}

pub fn csrf_refused(viewer: &Viewer) -> Response {
    fail(viewer, ApiError::new(StatusCode::FORBIDDEN, "forbidden", "the form's CSRF token is missing or stale"))
}

/// `2026-12-01T11:06:15.123Z`.
pub fn time_text(time: Timestamp) -> String {
    let nanos = i128::from(time.0) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|moment| moment.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| format!("{} ms", time.0))
}

pub fn time_element(time: Timestamp) -> Markup {
    let text = time_text(time);
    markup! { time datetime=(text) { (text) } }
}

/// How long before `now` a moment was, as people say it (`14 min ago`); a moment after
/// `now` (another clock) reads as `just now`.
pub fn ago_text(now: Timestamp, time: Timestamp) -> String {
    let ms = now.0.saturating_sub(time.0);
    match ms {
        0..10_000 => "just now".to_owned(),
        10_000..60_000 => format!("{} s ago", ms / 1000),
        60_000..3_600_000 => format!("{} min ago", ms / 60_000),
        3_600_000..86_400_000 => format!("{} h ago", ms / 3_600_000),
        _ => format!("{} d ago", ms / 86_400_000),
    }
}

/// A moment as "14 min ago", the absolute time on hover (and in `datetime`).
pub fn ago_element(now: Timestamp, time: Timestamp) -> Markup {
    let text = time_text(time);
    markup! { time datetime=(text) title=(text) { (ago_text(now, time)) } }
}

/// A moment as its time of day in UTC ("05:00:03 UTC"), the absolute time on hover.
pub fn clock_element(time: Timestamp) -> Markup {
    let text = time_text(time);
    let clock = text.get(11..19).map_or_else(|| text.clone(), |clock| format!("{clock} UTC"));
    markup! { time datetime=(text) title=(text) { (clock) } }
}

/// A moment as its offset from `base` ("+1.2 s"), the absolute time on hover.
pub fn offset_element(base: Timestamp, time: Timestamp) -> Markup {
    let text = time_text(time);
    let offset = if time.0 >= base.0 {
        format!("+{}", duration_text(time.0 - base.0))
    } else {
        format!("−{}", duration_text(base.0 - time.0))
    };
    markup! { time datetime=(text) title=(text) { (offset) } }
}

/// A duration in ms as people read it.
pub fn duration_text(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000),
        _ => format!("{} h {} min", ms / 3_600_000, (ms % 3_600_000) / 60_000),
    }
}

pub fn status_badge(status: Status) -> Markup {
    markup! { span class={"badge status-" (status.as_str())} { (status.as_str()) } }
}

/// Pretty JSON of `text` (already valid JSON), and whether it was cut at
/// `JSON_SHOWN_BYTES_MAX` (on a character boundary).
pub fn pretty_json(text: &str, cut: bool) -> (String, bool) {
    let pretty = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| text.to_owned());
    if !cut || pretty.len() <= JSON_SHOWN_BYTES_MAX {
        return (pretty, false);
    }
    let mut end = JSON_SHOWN_BYTES_MAX;
    while !pretty.is_char_boundary(end) {
        end -= 1;
    }
    (pretty[..end].to_owned(), true)
}

/// A text field cut at `JSON_SHOWN_BYTES_MAX`, and whether it was cut.
pub fn cut_text(text: &str) -> (&str, bool) {
    if text.len() <= JSON_SHOWN_BYTES_MAX {
        return (text, false);
    }
    let mut end = JSON_SHOWN_BYTES_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

/// A query parameter a form left empty is no filter.
pub fn filled(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|text| !text.is_empty())
}
