//! Abuse limits (R-A3) and request decoding: per-tenant token buckets and the strict
//! JSON body and query extractors. (Appends to one session are serialized by the
//! service's own per-session append lock, not here.)
//!
//! Bodies are never decoded by `axum::Json`: `berth-core` builds `serde_json` with
//! `unbounded_depth` (the strict minifier bounds depth), so a plain `serde_json::from_slice`
//! would recurse without limit on `[[[[…`. Every body goes through
//! `berth_core::json::minify_strict` (depth ≤ 128, no duplicate keys, no lone
//! surrogates, valid UTF-8, no trailing bytes) and only then, from the same bytes, into
//! the request type — never through a `Value`, which would re-print event data (R-C9).

use crate::error::ApiError;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use berth_core::TenantId;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use serde::de::DeserializeOwned;
use std::num::NonZeroU32;

/// Requests per second per tenant, with a burst allowance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    pub per_second: u32,
    pub burst: u32,
}

/// Per-tenant token buckets (GCRA). One flooding tenant exhausts only its own bucket.
pub struct TenantLimiter {
    limiter: DefaultKeyedRateLimiter<TenantId>,
    clock: DefaultClock,
}

impl TenantLimiter {
    pub fn new(limit: RateLimit) -> TenantLimiter {
        let per_second = NonZeroU32::new(limit.per_second.max(1)).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(limit.burst.max(1)).unwrap_or(NonZeroU32::MIN);
        TenantLimiter {
            limiter: RateLimiter::keyed(Quota::per_second(per_second).allow_burst(burst)),
            clock: DefaultClock::default(),
        }
    }

    /// `Err(seconds to wait)` when the tenant is over its rate.
    pub fn check(&self, tenant: &TenantId) -> Result<(), u64> {
        self.limiter.check_key(tenant).map_err(|not_until| {
            let wait = not_until.wait_time_from(self.clock.now());
            wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
        })
    }

    /// Forgets tenants whose buckets are full again (bounded memory).
    pub fn forget_idle(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }
}

/// Decodes untrusted JSON bytes strictly into `T` (400 on any defect). Every request
/// body is a JSON object; an empty body and a JSON `null` read as `{}` (the documented
/// optional bodies), anything else that is not an object is refused (serde would
/// otherwise read a struct from an array).
pub fn decode_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // No body at all is `{}`; a body of white space alone is not JSON (400), like any
    // other text that is not.
    let bytes = if bytes.is_empty() { &b"{}"[..] } else { bytes };
    let minimal = berth_core::json::minify_strict(bytes)
        .map_err(|error| ApiError::bad_request(format!("malformed JSON body: {error}")))?;
    let bytes = match minimal.as_bytes().first() {
        _ if minimal == "null" => &b"{}"[..],
        Some(b'{') => bytes,
        _ => return Err(ApiError::bad_request("invalid request body: expected a JSON object")),
    };
    berth_core::json::deserialize_checked(bytes)
        .map_err(|error| ApiError::bad_request(format!("invalid request body: {error}")))
}

/// A JSON body decoded by `decode_json`; an empty body or `null` reads as `{}`.
pub struct StrictJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for StrictJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = body_bytes(request, state).await?;
        decode_json(&bytes).map(StrictJson)
    }
}

/// A JSON body as `StrictJson` reads it, for the operations whose body is required: no
/// body at all, or `null`, is a 400 instead of `{}` (a `PUT` of nothing must not reset
/// what it sets).
pub struct RequiredJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for RequiredJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = body_bytes(request, state).await?;
        if matches!(bytes.trim_ascii(), b"" | b"null") {
            return Err(ApiError::bad_request("this operation needs a JSON object body"));
        }
        decode_json(&bytes).map(RequiredJson)
    }
}

/// The raw body, with the body limit's rejection turned into a JSON 413.
pub async fn body_bytes<S: Send + Sync>(request: Request, state: &S) -> Result<bytes::Bytes, ApiError> {
    let limit = request.extensions().get::<BodyLimit>().map_or(0, |limit| limit.0);
    bytes::Bytes::from_request(request, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::payload_too_large(limit)
        } else {
            ApiError::bad_request(format!("cannot read the request body: {rejection}"))
        }
    })
}

/// The body limit in force for a route (for the 413 message).
#[derive(Clone, Copy, Debug)]
pub struct BodyLimit(pub usize);

/// Refuses, on every route, a query string whose escapes decode to bytes that are not
/// UTF-8 (400): the query parsers would read them as U+FFFD, so `key=%FE` would name the
/// item whose key is "\u{fffd}".
pub(crate) async fn refuse_undecodable_query(request: Request, next: Next) -> Response {
    match request.uri().query() {
        Some(query) if !query_is_utf8(query) => {
            ApiError::bad_request("the query string's escapes do not decode to UTF-8").into_response()
        }
        _ => next.run(request).await,
    }
}

/// Whether every `%XX` escape of `query` decodes, with the rest, to UTF-8. The whole
/// string at once is enough: `&` and `=` are ASCII, never inside a multi-byte sequence.
fn query_is_utf8(query: &str) -> bool {
    // Borrows the query when it has no escapes: no copy on the common path.
    percent_encoding::percent_decode_str(query).decode_utf8().is_ok()
}

/// Query parameters; unknown parameters are refused (400), never ignored.
pub struct StrictQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for StrictQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        serde_urlencoded_from_str(query).map(StrictQuery)
    }
}

fn serde_urlencoded_from_str<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    axum::extract::Query::<T>::try_from_uri(
        &format!("/?{query}").parse().map_err(|_| ApiError::bad_request("malformed query string"))?,
    )
    .map(|axum::extract::Query(value)| value)
    .map_err(|error| ApiError::bad_request(format!("invalid query: {}", error.body_text())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_body_reads_as_an_empty_object_and_white_space_alone_is_refused() {
        let empty: serde_json::Map<String, serde_json::Value> = decode_json(b"").unwrap();
        assert!(empty.is_empty());
        for blank in [&b"\r"[..], b" ", b"\n\t "] {
            let error = decode_json::<serde_json::Value>(blank).unwrap_err();
            assert_eq!(error.status, StatusCode::BAD_REQUEST, "{blank:?}");
        }
    }

    #[test]
    fn a_query_must_decode_to_utf8() {
        for good in ["", "a=b", "key=%C3%A9", "key=é", "a=%25FE", "a=%2", "a=%zz", "a=+"] {
            assert!(query_is_utf8(good), "{good}");
        }
        for bad in ["key=%FE", "label=%FF", "a=%E2&b=%82%AC", "a=%C3"] {
            assert!(!query_is_utf8(bad), "{bad}");
        }
    }

    #[test]
    fn deep_json_is_refused_without_overflowing_the_stack() {
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        let error = decode_json::<serde_json::Value>(deep.as_bytes()).unwrap_err();
        assert_eq!(error.status, StatusCode::BAD_REQUEST);
        let error = decode_json::<serde_json::Value>(b"{\"a\":1,\"a\":2}").unwrap_err();
        assert_eq!(error.status, StatusCode::BAD_REQUEST);
        let error = decode_json::<serde_json::Value>(b"\"\xff\"").unwrap_err();
        assert_eq!(error.status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn flooding_one_tenant_leaves_the_other_alone() {
        let limiter = TenantLimiter::new(RateLimit { per_second: 1, burst: 3 });
        let a = TenantId::parse("a").unwrap();
        let b = TenantId::parse("b").unwrap();
        for _ in 0..3 {
            assert!(limiter.check(&a).is_ok());
        }
        let wait = limiter.check(&a).unwrap_err();
        assert!((1..=2).contains(&wait));
        assert!(limiter.check(&b).is_ok());
    }
}
