//! The berth inspector (SPEC R-A6): server-rendered pages under `/ui` to find a session,
//! read its conversation as a timeline, follow it live, export or fork it, and read the
//! tenant's audit log.
//!
//! Layout: `signin` (an API key exchanged for a server-side inspector session; the
//! `Viewer` extractor every page takes), `security` (the Host allowlist, CSRF checks and
//! the headers every response carries), `layout` (the page shell, formatting helpers),
//! `list`, `preview` (an untitled session's first user message, read on demand),
//! `session_page` (header, metadata, runs, timeline, export, fork), `langgraph` (a
//! LangGraph thread's checkpoints, channels and changed channels, read from the drop-in's
//! records), `timeline` (the pure grouping the session page renders), `live` (the SSE feed of rendered
//! groups and of the header's state), `waterfall` (a turn's trace: its model calls and tool
//! executions on a time axis, from the page's events), `usage_totals` (the session's usage totals
//! on a page of their own, from the service's usage computation), `audit_page`, and `assets` (the stylesheet and the one script, compiled in).
//!
//! Every data call goes through `SessionService` as the signed-in key's principal, the
//! same calls the `/v1` handlers make, so a user key sees only its own sessions and
//! another tenant's session is the same 404 as a missing one.

mod assets;
mod audit_page;
mod langgraph;
mod layout;
mod list;
mod live;
mod preview;
mod security;
mod session_page;
mod signin;
pub mod timeline;
mod usage_totals;
mod waterfall;

use crate::api::Shared;
use axum::middleware;
use axum::routing::{get, post};
use axum::Router;
use std::net::SocketAddr;

pub use signin::{InspectorSessions, INSPECTOR_SESSIONS_MAX, INSPECTOR_SESSION_IDLE_MS, INSPECTOR_SESSION_LIFETIME_MS};

/// How the inspector is served (`berth serve --ui …`).
#[derive(Clone, Debug, Default)]
pub struct UiConfig {
    /// `Host` values accepted besides the listen address's own (and, on loopback,
    /// `localhost:<port>`): the names a proxy or a browser reaches this server by.
    pub extra_hosts: Vec<String>,
    /// Mark cookies `Secure`: on for any listen address but loopback (the browser then
    /// reaches the server through a TLS proxy).
    pub secure_cookies: bool,
}

/// The inspector's runtime state.
pub struct UiState {
    /// Accepted `Host` header values, lowercase.
    pub allowed_hosts: Vec<String>,
    pub secure_cookies: bool,
    pub sessions: InspectorSessions,
}

impl UiState {
    /// The allowlist for a server bound to `local_addr`: the address itself, and on
    /// loopback `localhost`, `127.0.0.1` and `[::1]` with its port, plus `extra_hosts`.
    pub fn new(config: &UiConfig, local_addr: SocketAddr) -> UiState {
        let port = local_addr.port();
        let mut allowed_hosts = vec![local_addr.to_string().to_ascii_lowercase()];
        if local_addr.ip().is_loopback() {
            for host in ["localhost", "127.0.0.1", "[::1]"] {
                allowed_hosts.push(format!("{host}:{port}"));
            }
        }
        allowed_hosts.extend(config.extra_hosts.iter().map(|host| host.to_ascii_lowercase()));
        allowed_hosts.dedup();
        UiState { allowed_hosts, secure_cookies: config.secure_cookies, sessions: InspectorSessions::default() }
    }
}

/// The `/ui` routes, behind the Host allowlist and the security headers. Live feeds
/// are exempt from the request timeout (they run while the page is open).
pub fn router(state: &Shared) -> Router<Shared> {
    let pages = Router::new()
        .route("/ui", get(signin::home))
        .route("/ui/", get(signin::home))
        .route("/ui/sign-in", get(signin::sign_in_page).post(signin::sign_in))
        .route("/ui/sign-out", post(signin::sign_out))
        .route("/ui/sessions", get(list::sessions_page))
        .route("/ui/sessions/{id}", get(session_page::session_page))
        .route("/ui/sessions/{id}/events/{seq}", get(session_page::event_page))
        .route("/ui/sessions/{id}/metadata", post(session_page::update_metadata))
        .route("/ui/sessions/{id}/fork", post(session_page::fork))
        .route("/ui/sessions/{id}/export", get(session_page::export))
        .route("/ui/sessions/{id}/usage", get(usage_totals::usage_page))
        .route("/ui/audit", get(audit_page::audit_page))
        .route("/ui/assets/{name}", get(assets::asset))
        .layer(middleware::from_fn_with_state(state.clone(), crate::request_timeout));
    let feeds = Router::new().route("/ui/sessions/{id}/live", get(live::live_feed));
    pages
        .merge(feeds)
        .layer(middleware::from_fn(security::headers))
        .layer(middleware::from_fn_with_state(state.clone(), security::host_allowlist))
}
