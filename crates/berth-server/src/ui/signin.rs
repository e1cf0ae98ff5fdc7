//! Sign-in: an API key is exchanged for an inspector session — a random id (the
//! cookie's value) mapped on the server to the key's id and principal, with an idle and
//! an absolute expiry, ended by signing out. The key itself is never stored: not in a
//! cookie, not in a URL, not in this map (which is keyed by the SHA-256 of the id, so not
//! even the cookie value is kept). Every request re-checks that the key is not revoked.
//!
//! Sessions live in this process's memory: a restart signs everyone out, and behind a
//! load balancer with several replicas the inspector needs sticky sessions (documented
//! in `docs/reference/inspector.md`).

use super::layout::{self, html};
use super::security::{csrf_matches, random_token};
use crate::api::Shared;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use berth_core::Timestamp;
use berth_service::Principal;
use maud::html as markup;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;

/// The most inspector sessions held; signing in past it drops the oldest.
pub const INSPECTOR_SESSIONS_MAX: usize = 10_000;
/// An inspector session unused this long ends.
pub const INSPECTOR_SESSION_IDLE_MS: u64 = 60 * 60 * 1000;
/// Any inspector session ends this long after sign-in.
pub const INSPECTOR_SESSION_LIFETIME_MS: u64 = 12 * 60 * 60 * 1000;
/// The cookie holding the inspector session's id.
pub const SESSION_COOKIE: &str = "berth_ui_session";
/// The cookie of the sign-in form's CSRF token (double submit: no session exists yet).
pub const SIGN_IN_COOKIE: &str = "berth_ui_signin";

struct InspectorSession {
    key_id: String,
    principal: Principal,
    csrf: String,
    created_at: Timestamp,
    last_seen: Timestamp,
}

/// The signed-in inspector sessions of this server.
#[derive(Default)]
pub struct InspectorSessions {
    by_id_hash: Mutex<HashMap<[u8; 32], InspectorSession>>,
}

fn id_hash(session_id: &str) -> [u8; 32] {
    Sha256::digest(session_id.as_bytes()).into()
}

impl InspectorSessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], InspectorSession>> {
        self.by_id_hash.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts a session; returns its id (the cookie value).
    fn start(&self, key_id: String, principal: Principal, now: Timestamp) -> String {
        let session_id = random_token();
        let mut sessions = self.lock();
        sessions.retain(|_, session| !expired(session, now));
        if sessions.len() >= INSPECTOR_SESSIONS_MAX {
            let oldest = sessions.iter().min_by_key(|(_, session)| session.last_seen).map(|(hash, _)| *hash);
            if let Some(oldest) = oldest {
                sessions.remove(&oldest);
            }
        }
        let session = InspectorSession { key_id, principal, csrf: random_token(), created_at: now, last_seen: now };
        sessions.insert(id_hash(&session_id), session);
        session_id
    }

    /// The live session's (key id, principal, CSRF token), touching it; `None` when
    /// unknown or expired (an expired one is removed).
    fn touch(&self, session_id: &str, now: Timestamp) -> Option<(String, Principal, String)> {
        let mut sessions = self.lock();
        let hash = id_hash(session_id);
        let session = sessions.get_mut(&hash)?;
        if expired(session, now) {
            sessions.remove(&hash);
            return None;
        }
        session.last_seen = now;
        Some((session.key_id.clone(), session.principal.clone(), session.csrf.clone()))
    }

    fn end(&self, session_id: &str) {
        self.lock().remove(&id_hash(session_id));
    }

    /// Sessions held (for tests and metrics).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn expired(session: &InspectorSession, now: Timestamp) -> bool {
    now.0 >= session.last_seen.0.saturating_add(INSPECTOR_SESSION_IDLE_MS)
        || now.0 >= session.created_at.0.saturating_add(INSPECTOR_SESSION_LIFETIME_MS)
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

fn set_cookie(state: &Shared, name: &str, value: &str, max_age_s: u64) -> HeaderValue {
    let secure = if state.ui.as_ref().is_some_and(|ui| ui.secure_cookies) { "; Secure" } else { "" };
    let text = format!("{name}={value}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={max_age_s}{secure}");
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The signed-in viewer of a page: the principal every service call acts as, and the
/// CSRF token its forms carry. Without a live session a page redirects to sign-in.
pub struct Viewer {
    pub principal: Principal,
    pub csrf: String,
    session_id: String,
}

impl FromRequestParts<Shared> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> Result<Viewer, Response> {
        let to_sign_in = || Redirect::to("/ui/sign-in").into_response();
        let (Some(ui), Some(session_id)) = (state.ui.as_ref(), cookie(&parts.headers, SESSION_COOKIE)) else {
            return Err(to_sign_in());
        };
        let Some((key_id, principal, csrf)) = ui.sessions.touch(session_id, state.service.now()) else {
            return Err(to_sign_in());
        };
        // A revoked key (or one rebound to another principal) ends its sessions at once.
        match state.auth.keys().live_key_principal(&key_id) {
            Ok(Some(live)) if live == principal => {}
            _ => {
                ui.sessions.end(session_id);
                return Err(to_sign_in());
            }
        }
        if let Some(limiter) = &state.limiter {
            if let Err(retry_after_s) = limiter.check(&principal.tenant) {
                state.metrics.rate_limited.inc();
                return Err(crate::error::ApiError::rate_limited(retry_after_s).into_response());
            }
        }
        Ok(Viewer { principal, csrf, session_id: session_id.to_owned() })
    }
}

impl Viewer {
    /// The inspector session still stands and its key still names the same principal
    /// (a live feed re-checks this while it runs).
    pub fn still_signed_in(&self, state: &Shared) -> bool {
        let Some(ui) = state.ui.as_ref() else { return false };
        let Some((key_id, principal, _)) = ui.sessions.touch(&self.session_id, state.service.now()) else {
            return false;
        };
        principal == self.principal
            && matches!(state.auth.keys().live_key_principal(&key_id), Ok(Some(live)) if live == principal)
    }
}

/// `/ui`: the session list, or the sign-in page.
pub async fn home(viewer: Result<Viewer, Response>) -> Response {
    match viewer {
        Ok(_) => Redirect::to("/ui/sessions").into_response(),
        Err(_) => Redirect::to("/ui/sign-in").into_response(),
    }
}

fn sign_in_form(token: &str, problem: Option<&str>) -> maud::Markup {
    markup! {
        section.sign-in aria-labelledby="sign-in-title" {
            h1 #sign-in-title { "Sign in to the berth inspector" }
            @if let Some(problem) = problem {
                p.problem role="alert" { (problem) }
            }
            form method="post" action="/ui/sign-in" {
                input type="hidden" name="csrf" value=(token);
                label for="key" { "API key" }
                input #key type="password" name="key" required autocomplete="off" spellcheck="false"
                    placeholder="berth_…";
                p.hint { "The key is checked once and never stored: the server keeps a session for you, "
                    "bound to the key's principal, until you sign out or it expires." }
                button type="submit" { "Sign in" }
            }
        }
    }
}

fn sign_in_response(state: &Shared, status: StatusCode, problem: Option<&str>) -> Response {
    let token = random_token();
    let page = layout::page("Sign in", None, sign_in_form(&token, problem));
    let mut response = html(status, page);
    response.headers_mut().append(header::SET_COOKIE, set_cookie(state, SIGN_IN_COOKIE, &token, 3600));
    response
}

pub async fn sign_in_page(State(state): State<Shared>) -> Response {
    sign_in_response(&state, StatusCode::OK, None)
}

#[derive(Deserialize)]
pub struct SignInForm {
    key: String,
    csrf: String,
}

/// Checks the key once, starts an inspector session, and sets its cookie.
pub async fn sign_in(State(state): State<Shared>, headers: HeaderMap, Form(form): Form<SignInForm>) -> Response {
    let Some(ui) = state.ui.as_ref() else { return StatusCode::NOT_FOUND.into_response() };
    if !cookie(&headers, SIGN_IN_COOKIE).is_some_and(|expected| csrf_matches(expected, &form.csrf)) {
        return sign_in_response(&state, StatusCode::FORBIDDEN, Some("The form expired; please sign in again."));
    }
    let key = form.key.trim();
    let Some(key_id) = crate::auth::key_id_of(key) else {
        state.metrics.unauthenticated.inc();
        return sign_in_response(&state, StatusCode::UNAUTHORIZED, Some("That is not a berth API key (berth_…)."));
    };
    let principal = match state.auth.keys().verify(key) {
        Ok(Some(principal)) => principal,
        Ok(None) => {
            state.metrics.unauthenticated.inc();
            return sign_in_response(&state, StatusCode::UNAUTHORIZED, Some("Unknown or revoked API key."));
        }
        Err(error) => {
            tracing::error!(%error, "inspector sign-in: key lookup failed");
            return sign_in_response(&state, StatusCode::SERVICE_UNAVAILABLE, Some("The key store is unavailable."));
        }
    };
    let session_id = ui.sessions.start(key_id.to_owned(), principal, state.service.now());
    let mut response = Redirect::to("/ui/sessions").into_response();
    let lifetime_s = INSPECTOR_SESSION_LIFETIME_MS / 1000;
    response.headers_mut().append(header::SET_COOKIE, set_cookie(&state, SESSION_COOKIE, &session_id, lifetime_s));
    response.headers_mut().append(header::SET_COOKIE, set_cookie(&state, SIGN_IN_COOKIE, "", 0));
    response
}

#[derive(Deserialize)]
pub struct CsrfForm {
    csrf: String,
}

/// Ends the inspector session (CSRF-checked) and clears its cookie.
pub async fn sign_out(State(state): State<Shared>, viewer: Viewer, Form(form): Form<CsrfForm>) -> Response {
    if !csrf_matches(&viewer.csrf, &form.csrf) {
        return layout::csrf_refused(&viewer);
    }
    if let Some(ui) = state.ui.as_ref() {
        ui.sessions.end(&viewer.session_id);
    }
    let mut response = Redirect::to("/ui/sign-in").into_response();
    response.headers_mut().append(header::SET_COOKIE, set_cookie(&state, SESSION_COOKIE, "", 0));
    response
}
