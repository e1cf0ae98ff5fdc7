//! The inspector's browser-facing defences: the `Host` allowlist (a DNS-rebinding page
//! must not reach a loopback inspector under its own name), the origin check and CSRF
//! tokens of state-changing forms, and the headers every `/ui` response carries (a
//! strict Content-Security-Policy with no inline script, `nosniff`, frame denial, no
//! cross-site referrer, no caching of pages that show session data).

use crate::api::Shared;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

/// Scripts and styles only from this server (`/ui/assets/…`); nothing inline, nothing
/// framed, forms only to this server, no plugins, no `<base>` rewriting.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

fn refusal(status: StatusCode, message: &'static str) -> Response {
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"))], message).into_response()
}

/// The request's `Host`, lowercase, if it is one the inspector answers to.
fn allowed_host<'a>(headers: &HeaderMap, allowed: &'a [String]) -> Option<&'a str> {
    let host = headers.get(header::HOST)?.to_str().ok()?.to_ascii_lowercase();
    allowed.iter().find(|candidate| **candidate == host).map(String::as_str)
}

/// Refuses (421) a request whose `Host` is not on the allowlist, and (403) a
/// state-changing request sent from another origin.
pub async fn host_allowlist(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let Some(ui) = state.ui.as_ref() else {
        return refusal(StatusCode::NOT_FOUND, "the inspector is not enabled on this server");
    };
    let Some(host) = allowed_host(request.headers(), &ui.allowed_hosts) else {
        return refusal(StatusCode::MISDIRECTED_REQUEST, "this Host is not one the inspector answers to");
    };
    if request.method() != Method::GET && request.method() != Method::HEAD && !same_origin(request.headers(), host) {
        return refusal(StatusCode::FORBIDDEN, "cross-origin form submission refused");
    }
    next.run(request).await
}

/// A form post comes from a page of this server: `Sec-Fetch-Site: same-origin` when the
/// browser sends it (every current one does); otherwise an `Origin` naming this host.
/// Without either (a non-browser client) the CSRF token alone decides.
fn same_origin(headers: &HeaderMap, host: &str) -> bool {
    let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    if let Some(site) = text("sec-fetch-site") {
        return site == "same-origin";
    }
    text("origin").is_none_or(|origin| {
        let origin = origin.to_ascii_lowercase();
        origin == format!("http://{host}") || origin == format!("https://{host}")
    })
}

/// The security headers of every inspector response, and `Server-Timing` (the time the
/// server took to produce the response's head: for a page, rendering it whole).
pub async fn headers(request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let mut response = next.run(request).await;
    let server_ms = started.elapsed().as_secs_f64() * 1000.0;
    let headers = response.headers_mut();
    if let Ok(timing) = HeaderValue::from_str(&format!("app;dur={server_ms:.2}")) {
        headers.insert("server-timing", timing);
    }
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    headers.insert("cross-origin-resource-policy", HeaderValue::from_static("same-origin"));
    headers.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
}

/// A form's CSRF token equals the expected one (constant time).
pub fn csrf_matches(expected: &str, presented: &str) -> bool {
    !expected.is_empty() && expected.as_bytes().ct_eq(presented.as_bytes()).into()
}

/// A random token for a session id or a CSRF token: 32 bytes, hex.
pub fn random_token() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}
