//! HTTP errors: a JSON body `{code, message, …}` with a stable `code` and the right
//! status for every kind of `berth_core::Error`.
//!
//! Internal failures (I/O, corruption, poisoned handles, backend trouble) are logged in
//! full and answered with a generic message: a response never carries a file path, a
//! SQL statement or a storage location. A missing session and another tenant's session
//! give byte-identical bodies (the id is not echoed).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
pub use berth_api::ErrorBody;
use berth_core::{Error, ErrorClass};

/// An error on its way to becoming a response.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub status: StatusCode,
    /// Boxed: errors travel in every handler's `Result`, which should stay small.
    pub body: Box<ErrorBody>,
    /// `Retry-After` in seconds (429, 503).
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> ApiError {
        ApiError { status, body: Box::new(ErrorBody::new(code, message)), retry_after_s: None }
    }

    /// A request the server cannot parse (JSON syntax, depth, unknown fields, bad ids).
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid", message)
    }

    pub fn unauthenticated(message: &str) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", message)
    }

    pub fn payload_too_large(limit: usize) -> ApiError {
        let mut error = ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request body larger than {limit} bytes"),
        );
        error.body.limit = Some(limit as u64);
        error.body.limit_name = Some(berth_core::limits::Limit::RequestBytes.name().to_owned());
        error
    }

    pub fn rate_limited(retry_after_s: u64) -> ApiError {
        let mut error = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "too many requests for this tenant; retry later",
        );
        error.retry_after_s = Some(retry_after_s.max(1));
        error
    }

    pub fn timeout() -> ApiError {
        let mut error = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "timeout",
            "the request did not finish in time; its outcome is unknown (appends: retry with expected_seq)",
        );
        error.retry_after_s = Some(1);
        error
    }

    pub fn not_found_route() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
    }

    /// Maps a service error to its status and body through its class
    /// (`berth_core::ErrorClass`); internal details go to the log only.
    pub fn from_core(error: &Error) -> ApiError {
        let class = error.class();
        let status = StatusCode::from_u16(class.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut api = ApiError::new(status, class.code(), public_message(error, class));
        match error {
            Error::RevisionConflict { expected, actual } | Error::SeqConflict { expected, actual } => {
                api.body.expected = Some(*expected);
                api.body.actual = Some(*actual);
            }
            Error::IdempotencyKeyReused { first_seq, .. } => {
                api.body.actual = Some(*first_seq);
            }
            // A point read's seq at or past the log's end (the session's own id is never
            // echoed; this is a position the caller asked for).
            Error::NotFound { what: "event", id } => api.body.actual = id.parse().ok(),
            Error::Terminal { state } => api.body.state = Some(state.clone()),
            Error::RunNotAttached { run, .. } => api.body.run = Some(run.clone()),
            Error::RateLimited { retry_after_s } => api.retry_after_s = Some((*retry_after_s).max(1)),
            Error::LimitExceeded { what, limit, actual } => {
                api.body.limit = Some(*limit);
                api.body.actual = Some(*actual);
                api.body.limit_name = Some(what.name().to_owned());
            }
            _ => {}
        }
        match class {
            ErrorClass::Timeout => api.retry_after_s = Some(1),
            ErrorClass::Unavailable => {
                tracing::warn!(%error, "unavailable");
                api.retry_after_s = Some(1);
            }
            ErrorClass::Damaged => tracing::error!(%error, "damaged data"),
            ErrorClass::Internal => tracing::error!(%error, code = error.code(), "internal error"),
            _ => {}
        }
        api
    }
}

/// The message a remote caller may see: the error's own text, except for classes whose
/// details (paths, SQL, storage locations, other writers) stay in the server's log, and
/// for not-found, which never echoes the id (a missing session and another tenant's
/// session answer byte-identically).
fn public_message(error: &Error, class: ErrorClass) -> String {
    match (class, error) {
        (ErrorClass::NotFound, Error::NotFound { what, .. }) => format!("{what} not found"),
        (ErrorClass::AlreadyExists, Error::AlreadyExists { what, .. }) => format!("{what} already exists"),
        (ErrorClass::Busy, Error::Busy { reason, .. }) => format!("session is busy: {reason}"),
        (ErrorClass::Busy, _) => "session is being written by another process".to_owned(),
        (ErrorClass::WriterBusy, Error::WriterBusy { holder: berth_core::WriteHolder::ThisProcess, .. }) => {
            "session is busy: its log is open for writing by another handle in this server".to_owned()
        }
        (ErrorClass::WriterBusy, _) => "session is busy: its log is open for writing by another process".to_owned(),
        (ErrorClass::Fenced, _) => "another writer took over this session's log; retry".to_owned(),
        (ErrorClass::Unavailable, _) => "the store is temporarily unavailable; retry".to_owned(),
        (ErrorClass::Damaged, _) => {
            "the session's stored data is damaged or of a newer format; an operator must run berth fsck".to_owned()
        }
        (ErrorClass::Internal, _) => "internal error".to_owned(),
        _ => error.to_string(),
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> ApiError {
        ApiError::from_core(&error)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.body).unwrap_or_else(|_| b"{}".to_vec());
        let mut response = (self.status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"berth\""));
        }
        if let Some(seconds) = self.retry_after_s {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_errors_do_not_leak_paths() {
        let error = Error::Io {
            operation: "open log",
            kind: std::io::ErrorKind::Other,
            message: "/secret/data/tenants/a/x: permission denied".into(),
        };
        let api = ApiError::from_core(&error);
        assert_eq!(api.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!api.body.message.contains("/secret"));
        let corrupt = Error::Corrupt {
            reason: "bad".into(),
            location: berth_core::Location {
                artifact: "tenants/a/sessions/x/session.jsonl".into(),
                offset: Some(3),
                seq: None,
            },
        };
        assert!(!ApiError::from_core(&corrupt).body.message.contains("tenants"));
    }

    #[test]
    fn not_found_does_not_echo_the_id() {
        let a = ApiError::from_core(&Error::session_not_found("a"));
        let b = ApiError::from_core(&Error::session_not_found("b"));
        assert_eq!(a.body, b.body);
        assert_eq!(a.status, StatusCode::NOT_FOUND);
    }

    #[test]
    fn statuses_of_conflicts_and_limits() {
        let revision = Error::RevisionConflict { expected: 1, actual: 2 };
        assert_eq!(ApiError::from_core(&revision).status, StatusCode::PRECONDITION_FAILED);
        let limit = Error::LimitExceeded { what: berth_core::limits::Limit::EventBytes, limit: 1, actual: 2 };
        assert_eq!(ApiError::from_core(&limit).status, StatusCode::PAYLOAD_TOO_LARGE);
        let busy = Error::Busy { id: "x".into(), reason: "r".into() };
        assert_eq!(ApiError::from_core(&busy).status, StatusCode::CONFLICT);
        let writer =
            ApiError::from_core(&Error::WriterBusy { id: "x".into(), holder: berth_core::WriteHolder::AnotherProcess });
        assert_eq!((writer.status, writer.body.code.as_str()), (StatusCode::CONFLICT, "writer_busy"));
    }
}
