//! The inspector's static assets, compiled into the binary (no CDN, nothing read from
//! disk at run time): one stylesheet and one script (live mode). No inline script or
//! style exists anywhere, so the CSP can say `script-src 'self'; style-src 'self'`.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

const STYLESHEET: &str = include_str!("assets/inspector.css");
const LIVE_SCRIPT: &str = include_str!("assets/live.js");

pub async fn asset(Path(name): Path<String>) -> Response {
    let (body, content_type) = match name.as_str() {
        "inspector.css" => (STYLESHEET, "text/css; charset=utf-8"),
        "live.js" => (LIVE_SCRIPT, "text/javascript; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "no such asset").into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            // Assets change only with the binary; a short cache keeps upgrades visible.
            (header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=300")),
        ],
        body,
    )
        .into_response()
}
