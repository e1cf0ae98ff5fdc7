//! HTTP errors: a JSON body `{code, message, …}` with a stable `code` and the right
//! status for every kind of `berth_core::Error`.
//!
//! Internal failures (I/O, corruption, poisoned handles, backend trouble) are logged in
//! full and answered with a generic message: a response never carries a file path, a
//! SQL statement or a storage location. A missing session and another tenant's session
//! give byte-identical bodies (the id is not echoed).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use berth_core::Error;
use serde::{Deserialize, Serialize};

/// The JSON body of every error response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// Stable, machine-readable: branch on this.
    pub code: String,
    /// For people; may change between versions.
    pub message: String,
    /// Conflicts: the revision or seq the caller expected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<u64>,
    /// Conflicts: the actual revision or seq; limits: the actual size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual: Option<u64>,
    /// Limits: the limit that was exceeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// `terminal`: the session's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

impl ErrorBody {
    fn new(code: &str, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            code: code.to_owned(),
            message: message.into(),
            expected: None,
            actual: None,
            limit: None,
            state: None,
        }
    }
}

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

    /// Maps a service error to its status and body; internal details go to the log only.
    pub fn from_core(error: &Error) -> ApiError {
        use StatusCode as S;
        let message = error.to_string();
        let mut api = match error {
            Error::NotFound { what, .. } => ApiError::new(S::NOT_FOUND, "not_found", format!("{what} not found")),
            Error::AlreadyExists { what, .. } => {
                ApiError::new(S::CONFLICT, "already_exists", format!("{what} already exists"))
            }
            Error::RevisionConflict { expected, actual } => {
                let mut api = ApiError::new(S::PRECONDITION_FAILED, error.code(), message);
                api.body.expected = Some(*expected);
                api.body.actual = Some(*actual);
                api
            }
            Error::SeqConflict { expected, actual } => {
                let mut api = ApiError::new(S::CONFLICT, error.code(), message);
                api.body.expected = Some(*expected);
                api.body.actual = Some(*actual);
                api
            }
            Error::IdempotencyKeyReused { first_seq, .. } => {
                let mut api = ApiError::new(S::CONFLICT, error.code(), message);
                api.body.actual = Some(*first_seq);
                api
            }
            Error::Terminal { state } => {
                let mut api = ApiError::new(S::CONFLICT, error.code(), message);
                api.body.state = Some(state.clone());
                api
            }
            Error::Busy { .. } | Error::AlreadyOwned { .. } => ApiError::new(
                S::CONFLICT,
                "busy",
                match error {
                    Error::Busy { reason, .. } => format!("session is busy: {reason}"),
                    _ => "session is being written by another process".to_owned(),
                },
            ),
            Error::InvalidTransition { .. } => ApiError::new(S::CONFLICT, error.code(), message),
            Error::Fenced { .. } | Error::OwnershipLost { .. } => {
                ApiError::new(S::CONFLICT, "fenced", "another writer took over this session's log; retry")
            }
            Error::LimitExceeded { what, limit, actual } => {
                let status = if what.contains("bytes") || what.starts_with("batch") {
                    S::PAYLOAD_TOO_LARGE
                } else if *what == "json depth" {
                    S::BAD_REQUEST
                } else {
                    S::UNPROCESSABLE_ENTITY
                };
                let mut api = ApiError::new(status, error.code(), message);
                api.body.limit = Some(*limit);
                api.body.actual = Some(*actual);
                api
            }
            Error::Invalid { .. } => ApiError::new(S::UNPROCESSABLE_ENTITY, error.code(), message),
            Error::Forbidden { .. } => ApiError::new(S::FORBIDDEN, error.code(), message),
            Error::Unavailable { .. } | Error::Poisoned { .. } => {
                tracing::warn!(%error, "unavailable");
                let mut api =
                    ApiError::new(S::SERVICE_UNAVAILABLE, "unavailable", "the store is temporarily unavailable; retry");
                api.retry_after_s = Some(1);
                api
            }
            // Content the service refuses to reconstruct (an unknown, non-ignorable event
            // type): the caller's data, not storage damage, and no storage location.
            Error::FormatUnsupported { location: None, .. } => {
                ApiError::new(S::UNPROCESSABLE_ENTITY, error.code(), message)
            }
            Error::Corrupt { .. } | Error::FormatUnsupported { .. } => {
                tracing::error!(%error, "damaged data");
                ApiError::new(
                    S::INTERNAL_SERVER_ERROR,
                    error.code(),
                    "the session's stored data is damaged or of a newer format; an operator must run berth fsck",
                )
            }
            _ => {
                tracing::error!(%error, code = error.code(), "internal error");
                ApiError::new(S::INTERNAL_SERVER_ERROR, "internal", "internal error")
            }
        };
        if api.status == S::INTERNAL_SERVER_ERROR || api.status == S::SERVICE_UNAVAILABLE {
            api.body.expected = None;
            api.body.actual = None;
        }
        api
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
        let limit = Error::LimitExceeded { what: "event bytes", limit: 1, actual: 2 };
        assert_eq!(ApiError::from_core(&limit).status, StatusCode::PAYLOAD_TOO_LARGE);
        let busy = Error::Busy { id: "x".into(), reason: "r".into() };
        assert_eq!(ApiError::from_core(&busy).status, StatusCode::CONFLICT);
    }
}
