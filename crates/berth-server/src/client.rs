//! A small HTTP client for the `/v1` API: what `berth --server URL` uses, and what the
//! tests and the load generator drive the server with. Plain HTTP/1.1 with keep-alive
//! (put TLS in front of the server with a reverse proxy).
//!
//! Error responses come back as `berth_core::Error` kinds chosen by their stable
//! `code`, so callers (and the CLI's exit codes) branch on the same vocabulary as with
//! the library.

use crate::error::ErrorBody;
use crate::wire as convert;
use berth_api as wire;
use berth_catalog::{AuditEntry, AuditVerification, RetentionPolicy, RunRecord, SessionRecord};
use berth_core::limits::Limit;
use berth_core::{Error, ErrorClass, Event, Result, Revision, RunId, SessionId, WriteHolder};
use berth_service::{
    AppendOutcome, AppendRequest, AttachRequest, Attachment, ClosePolicy, CreateSession, ListRequest, MetadataUpdate,
    Principal, ResumeOutcome, SessionPage,
};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Longest response body the client accepts.
const RESPONSE_BYTES_MAX: usize = 512 * 1024 * 1024;

#[derive(Clone)]
pub struct Client {
    base: String,
    api_key: Option<String>,
    http: HyperClient<HttpConnector, Full<Bytes>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Client({})", self.base)
    }
}

/// A raw answer: status, headers and body.
#[derive(Debug)]
pub struct RawResponse {
    pub status: StatusCode,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|error| Error::invalid("request", error.to_string()))
}

fn query_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

impl Client {
    /// `base` is `http://host:port`; `api_key` the bearer key (or JWT).
    pub fn new(base: &str, api_key: Option<String>) -> Result<Client> {
        let base = base.trim_end_matches('/').to_owned();
        if !base.starts_with("http://") {
            return Err(Error::invalid(
                "server url",
                format!("{base:?}: use http://host:port (put TLS in a reverse proxy in front of berth serve)"),
            ));
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let http = HyperClient::builder(TokioExecutor::new()).pool_max_idle_per_host(64).build(connector);
        Ok(Client { base, api_key, http })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends one request and returns whatever came back.
    pub async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Result<RawResponse> {
        let mut request = hyper::Request::builder().method(method).uri(format!("{}{}", self.base, path_and_query));
        if let Some(key) = &self.api_key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|error| Error::invalid("request", error.to_string()))?;
        let response = self
            .http
            .request(request)
            .await
            .map_err(|error| Error::Unavailable { reason: format!("cannot reach {}: {error}", self.base) })?;
        let (parts, body) = response.into_parts();
        let body = http_body_util::Limited::new(body, RESPONSE_BYTES_MAX)
            .collect()
            .await
            .map_err(|error| Error::Unavailable { reason: format!("reading the response failed: {error}") })?
            .to_bytes();
        Ok(RawResponse { status: parts.status, headers: parts.headers, body })
    }

    /// Sends and decodes a JSON answer, turning an error answer into its error kind.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        context: &str,
    ) -> Result<T> {
        let response = self.checked(method, path, body, context).await?;
        serde_json::from_slice(&response.body)
            .map_err(|error| Error::invalid("response", format!("unexpected answer from the server: {error}")))
    }

    async fn checked(&self, method: Method, path: &str, body: Option<Vec<u8>>, context: &str) -> Result<RawResponse> {
        let response = self.send(method, path, body, &[]).await?;
        if response.status.is_success() {
            Ok(response)
        } else {
            Err(error_of(&response, context))
        }
    }

    pub async fn whoami(&self) -> Result<Principal> {
        let body: wire::PrincipalBody = self.call(Method::GET, "/v1/whoami", None, "").await?;
        Ok(convert::principal_from(body))
    }

    pub async fn create(&self, request: &CreateSession) -> Result<SessionRecord> {
        let context = request.id.as_ref().map(|id| id.to_string()).unwrap_or_default();
        let body = encode(&convert::create(request))?;
        self.session_call(Method::POST, "/v1/sessions", Some(body), &context).await
    }

    pub async fn list(&self, request: &ListRequest) -> Result<SessionPage> {
        let mut query = Vec::new();
        let mut push = |name: &str, value: String| query.push(format!("{name}={}", query_escape(&value)));
        if let Some(user) = &request.user {
            push("user", user.to_string());
        }
        if let Some(project) = &request.project {
            push("project", project.to_string());
        }
        if !request.statuses.is_empty() {
            let statuses: Vec<&str> = request.statuses.iter().map(|status| status.as_str()).collect();
            push("status", statuses.join(","));
        }
        if let Some(label) = &request.label {
            push("label", label.clone());
        }
        if let Some(since) = request.active_since {
            push("active_since", since.0.to_string());
        }
        if let Some(before) = request.active_before {
            push("active_before", before.0.to_string());
        }
        if request.include_blank {
            push("include_blank", "true".into());
        }
        if let Some(search) = &request.search {
            push("q", search.clone());
        }
        if let Some(cursor) = &request.cursor {
            push("cursor", cursor.clone());
        }
        if let Some(limit) = request.limit {
            push("limit", limit.to_string());
        }
        let path =
            if query.is_empty() { "/v1/sessions".to_owned() } else { format!("/v1/sessions?{}", query.join("&")) };
        let page: wire::SessionPage = self.call(Method::GET, &path, None, "").await?;
        Ok(convert::session_page_from(page))
    }

    pub async fn get(&self, id: &SessionId) -> Result<SessionRecord> {
        self.session_call(Method::GET, &format!("/v1/sessions/{id}"), None, id.as_str()).await
    }

    pub async fn update_metadata(&self, id: &SessionId, update: &MetadataUpdate) -> Result<SessionRecord> {
        let body = encode(&convert::update(update))?;
        self.session_call(Method::PATCH, &format!("/v1/sessions/{id}"), Some(body), id.as_str()).await
    }

    pub async fn delete(&self, id: &SessionId, expected_revision: Option<Revision>) -> Result<()> {
        let query = expected_revision.map(|revision| format!("?expected_revision={}", revision.0)).unwrap_or_default();
        self.checked(Method::DELETE, &format!("/v1/sessions/{id}{query}"), None, id.as_str()).await.map(drop)
    }

    pub async fn close(
        &self,
        id: &SessionId,
        policy: ClosePolicy,
        expected_revision: Option<Revision>,
    ) -> Result<SessionRecord> {
        let body = wire::CloseBody {
            policy: convert::close_policy(policy),
            expected_revision: expected_revision.map(|revision| revision.0),
        };
        self.session_call(Method::POST, &format!("/v1/sessions/{id}/close"), Some(encode(&body)?), id.as_str()).await
    }

    pub async fn fork(
        &self,
        id: &SessionId,
        upto_seq: Option<u64>,
        new_id: Option<&SessionId>,
    ) -> Result<SessionRecord> {
        let fork = berth_service::ForkSession { upto_seq, new_id: new_id.cloned(), ..Default::default() };
        self.fork_with(id, &fork).await
    }

    /// A fork with the new session's owner, policy, title or labels of its own.
    pub async fn fork_with(&self, id: &SessionId, fork: &berth_service::ForkSession) -> Result<SessionRecord> {
        let body = convert::fork(fork);
        self.session_call(Method::POST, &format!("/v1/sessions/{id}/fork"), Some(encode(&body)?), id.as_str()).await
    }

    pub async fn reopen(&self, id: &SessionId) -> Result<SessionRecord> {
        self.session_call(Method::POST, &format!("/v1/sessions/{id}/reopen"), None, id.as_str()).await
    }

    /// Reads `[from, from + limit)`, following pages until `limit` (or the end).
    pub async fn read(&self, id: &SessionId, from: u64, limit: Option<u64>) -> Result<Vec<Event>> {
        let mut events = Vec::new();
        let mut next = from;
        loop {
            let want = limit.map(|limit| limit - events.len() as u64);
            if want == Some(0) {
                return Ok(events);
            }
            let query = match want {
                Some(want) => format!("?from={next}&limit={want}"),
                None => format!("?from={next}"),
            };
            let page: wire::EventPage =
                self.call(Method::GET, &format!("/v1/sessions/{id}/events{query}"), None, id.as_str()).await?;
            if page.events.is_empty() {
                return Ok(events);
            }
            next = page.next_seq;
            events.extend(page.events.into_iter().map(convert::event_from));
        }
    }

    /// The `limit` events before seq `before` (`u64::MAX`: the tail), in ascending
    /// order, following pages backwards (`before=<first_seq>`) past the page size.
    pub async fn read_before(&self, id: &SessionId, before: u64, limit: u64) -> Result<Vec<Event>> {
        let mut pages = Vec::new();
        // The wire's integers are int64: any seq past the end reads the tail.
        let (mut before, mut remaining) = (before.min(wire::int64::WIRE_INT_MAX), limit);
        while remaining > 0 {
            let want = remaining.min(berth_core::limits::PAGE_SIZE_MAX as u64);
            let query = format!("?before={before}&limit={want}");
            let page: wire::EventPage =
                self.call(Method::GET, &format!("/v1/sessions/{id}/events{query}"), None, id.as_str()).await?;
            if page.events.is_empty() {
                break;
            }
            remaining = remaining.saturating_sub(page.events.len() as u64);
            before = page.first_seq;
            pages.push(page.events.into_iter().map(convert::event_from).collect::<Vec<_>>());
            if before == 0 {
                break;
            }
        }
        Ok(pages.into_iter().rev().flatten().collect())
    }

    pub async fn append(&self, id: &SessionId, request: &AppendRequest) -> Result<AppendOutcome> {
        let body = encode(&convert::append(request))?;
        let outcome: Result<wire::AppendOutcomeBody> =
            self.call(Method::POST, &format!("/v1/sessions/{id}/events"), Some(body), id.as_str()).await;
        outcome.map(convert::append_outcome_from).map_err(|error| match error {
            // The answer names the stored seq; the key is the one this request sent.
            Error::IdempotencyKeyReused { first_seq, .. } => {
                Error::IdempotencyKeyReused { key: request.idempotency_key.clone().unwrap_or_default(), first_seq }
            }
            other => other,
        })
    }

    pub async fn attach(&self, id: &SessionId, request: &AttachRequest) -> Result<Attachment> {
        let body = encode(&convert::attach(request))?;
        let attachment: wire::AttachmentBody =
            self.call(Method::POST, &format!("/v1/sessions/{id}/runs"), Some(body), id.as_str()).await?;
        Ok(convert::attachment_from(attachment))
    }

    pub async fn heartbeat(&self, id: &SessionId, run: &RunId) -> Result<RunRecord> {
        let path = format!("/v1/sessions/{id}/runs/{run}/heartbeat");
        let record: wire::RunBody = self.call(Method::POST, &path, None, id.as_str()).await?;
        Ok(convert::run_from(record))
    }

    pub async fn detach(
        &self,
        id: &SessionId,
        run: &RunId,
        outcome: &str,
        expected_revision: Option<Revision>,
    ) -> Result<SessionRecord> {
        let body = wire::DetachBody {
            outcome: outcome.to_owned(),
            expected_revision: expected_revision.map(|revision| revision.0),
        };
        let path = format!("/v1/sessions/{id}/runs/{run}/detach");
        self.session_call(Method::POST, &path, Some(encode(&body)?), id.as_str()).await
    }

    pub async fn resume(&self, id: &SessionId, request: &AttachRequest) -> Result<ResumeOutcome> {
        let body = encode(&convert::attach(request))?;
        let outcome: wire::ResumeOutcomeBody =
            self.call(Method::POST, &format!("/v1/sessions/{id}/resume"), Some(body), id.as_str()).await?;
        Ok(convert::resume_outcome_from(outcome))
    }

    pub async fn export(&self, id: &SessionId, zip: bool) -> Result<Vec<u8>> {
        let format = if zip { "zip" } else { "jsonl" };
        let response =
            self.checked(Method::GET, &format!("/v1/sessions/{id}/export?format={format}"), None, id.as_str()).await?;
        Ok(response.body.to_vec())
    }

    pub async fn import(&self, bytes: Vec<u8>) -> Result<Vec<SessionRecord>> {
        let imported: wire::ImportedBody = self.call(Method::POST, "/v1/import", Some(bytes), "").await?;
        Ok(imported.sessions.into_iter().map(convert::session_from).collect())
    }

    pub async fn audit_log(&self, from: u64, limit: usize) -> Result<Vec<AuditEntry>> {
        let entries: Vec<wire::AuditEntryBody> =
            self.call(Method::GET, &format!("/v1/audit?from={from}&limit={limit}"), None, "").await?;
        Ok(entries.into_iter().map(convert::audit_entry_from).collect())
    }

    pub async fn verify_audit(&self) -> Result<AuditVerification> {
        let verdict: wire::AuditVerificationBody = self.call(Method::GET, "/v1/audit/verify", None, "").await?;
        Ok(convert::audit_verification_from(verdict))
    }

    pub async fn set_retention(&self, policy: &RetentionPolicy) -> Result<()> {
        self.checked(Method::PUT, "/v1/retention", Some(encode(&convert::retention(policy))?), "").await.map(drop)
    }

    // ----- scoped memory (answers in wire types: the CLI prints them as they are) -----

    pub async fn memory_put(&self, body: &wire::PutMemoryBody) -> Result<wire::MemoryItemBody> {
        self.call(Method::PUT, "/v1/memory/items", Some(encode(body)?), &body.key).await
    }

    pub async fn memory_get(&self, namespace: &str, key: &str) -> Result<wire::MemoryItemBody> {
        let path = format!("/v1/memory/items?namespace={}&key={}", query_escape(namespace), query_escape(key));
        self.call(Method::GET, &path, None, key).await
    }

    pub async fn memory_delete(
        &self,
        namespace: &str,
        key: &str,
        expected: Option<u64>,
    ) -> Result<wire::MemoryItemBody> {
        let mut path = format!("/v1/memory/items?namespace={}&key={}", query_escape(namespace), query_escape(key));
        if let Some(expected) = expected {
            path.push_str(&format!("&expected_revision={expected}"));
        }
        self.call(Method::DELETE, &path, None, key).await
    }

    pub async fn memory_search(&self, body: &wire::MemorySearchBody) -> Result<wire::MemoryPageBody> {
        self.call(Method::POST, "/v1/memory/search", Some(encode(body)?), "").await
    }

    pub async fn memory_namespaces(&self, params: &wire::NamespaceParams) -> Result<wire::NamespacePageBody> {
        let mut path = format!("/v1/memory/namespaces?prefix={}", query_escape(&params.prefix));
        if let Some(depth) = params.max_depth {
            path.push_str(&format!("&max_depth={depth}"));
        }
        if let Some(cursor) = &params.cursor {
            path.push_str(&format!("&cursor={}", query_escape(cursor)));
        }
        if let Some(limit) = params.limit {
            path.push_str(&format!("&limit={limit}"));
        }
        self.call(Method::GET, &path, None, "").await
    }

    pub async fn memory_forget(&self, prefix: &str) -> Result<wire::ForgetReportBody> {
        let body = encode(&wire::ForgetBody { prefix: prefix.to_owned() })?;
        self.call(Method::POST, "/v1/memory/forget", Some(body), "").await
    }

    pub async fn memory_delete_many(&self, body: &wire::DeleteMemoryBody) -> Result<wire::MemoryDeletedBody> {
        self.call(Method::POST, "/v1/memory/delete", Some(encode(body)?), "").await
    }

    pub async fn session_usage(&self, id: &SessionId) -> Result<wire::SessionUsageBody> {
        self.call(Method::GET, &format!("/v1/sessions/{id}/usage"), None, id.as_str()).await
    }

    pub async fn tenant_usage(&self, since: u64, before: u64) -> Result<wire::UsageBody> {
        self.call(Method::GET, &format!("/v1/usage?since={since}&before={before}"), None, "").await
    }

    pub async fn memory_usage(&self) -> Result<wire::MemoryUsageBody> {
        self.call(Method::GET, "/v1/memory/usage", None, "").await
    }

    pub async fn set_memory_quota(&self, body: &wire::MemoryQuotaBody) -> Result<wire::MemoryUsageBody> {
        self.call(Method::PUT, "/v1/memory/quota", Some(encode(body)?), "").await
    }

    /// A call answered with a session body.
    async fn session_call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        context: &str,
    ) -> Result<SessionRecord> {
        let session: wire::SessionBody = self.call(method, path, body, context).await?;
        Ok(convert::session_from(session))
    }
}

/// One Server-Sent Event (comments and heartbeats are skipped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseMessage {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

/// An open live tail.
pub struct SseStream {
    body: hyper::body::Incoming,
    buffer: Vec<u8>,
}

/// Longest SSE message the client buffers.
const SSE_MESSAGE_BYTES_MAX: usize = 8 * 1024 * 1024;

impl SseStream {
    /// The next message; `None` when the server ended the stream.
    pub async fn next(&mut self) -> Result<Option<SseMessage>> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|window| window == b"\n\n") {
                let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
                if let Some(message) = parse_sse_block(&block) {
                    return Ok(Some(message));
                }
                continue;
            }
            if self.buffer.len() > SSE_MESSAGE_BYTES_MAX {
                return Err(Error::invalid("stream", "event too large"));
            }
            match self.body.frame().await {
                None => return Ok(None),
                Some(Err(error)) => return Err(Error::Unavailable { reason: format!("stream broken: {error}") }),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// The next `event: event` as a stored event (an `event: error` becomes its error).
    pub async fn next_event(&mut self) -> Result<Option<Event>> {
        while let Some(message) = self.next().await? {
            match message.event.as_deref() {
                Some("event") => {
                    return serde_json::from_str(&message.data)
                        .map(Some)
                        .map_err(|error| Error::invalid("stream", error.to_string()))
                }
                Some("error") => {
                    let response = RawResponse {
                        status: StatusCode::OK,
                        headers: hyper::HeaderMap::new(),
                        body: Bytes::from(message.data.into_bytes()),
                    };
                    return Err(error_of(&response, ""));
                }
                _ => continue,
            }
        }
        Ok(None)
    }
}

fn parse_sse_block(block: &[u8]) -> Option<SseMessage> {
    let text = String::from_utf8_lossy(block);
    let mut message = SseMessage { id: None, event: None, data: String::new() };
    let mut has_data = false;
    for line in text.lines() {
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => message.id = Some(value.to_owned()),
            "event" => message.event = Some(value.to_owned()),
            "data" => {
                if has_data {
                    message.data.push('\n');
                }
                message.data.push_str(value);
                has_data = true;
            }
            _ => {}
        }
    }
    (has_data || message.event.is_some()).then_some(message)
}

impl Client {
    /// Opens a live tail from `from` (or after `last_event_id`).
    pub async fn tail(&self, id: &SessionId, from: Option<u64>, last_event_id: Option<u64>) -> Result<SseStream> {
        let query = from.map(|from| format!("?from={from}")).unwrap_or_default();
        let mut request = hyper::Request::builder()
            .method(Method::GET)
            .uri(format!("{}/v1/sessions/{id}/events/stream{query}", self.base))
            .header("accept", "text/event-stream");
        if let Some(key) = &self.api_key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        if let Some(seq) = last_event_id {
            request = request.header("last-event-id", seq.to_string());
        }
        let request =
            request.body(Full::new(Bytes::new())).map_err(|error| Error::invalid("request", error.to_string()))?;
        let response = self
            .http
            .request(request)
            .await
            .map_err(|error| Error::Unavailable { reason: format!("cannot reach {}: {error}", self.base) })?;
        let (parts, body) = response.into_parts();
        if !parts.status.is_success() {
            let body = http_body_util::Limited::new(body, RESPONSE_BYTES_MAX)
                .collect()
                .await
                .map(|collected| collected.to_bytes())
                .unwrap_or_default();
            let raw = RawResponse { status: parts.status, headers: parts.headers, body };
            return Err(error_of(&raw, id.as_str()));
        }
        Ok(SseStream { body, buffer: Vec::new() })
    }
}

/// The error kind of an error answer, chosen by its stable code through the one class
/// table (`berth_core::ErrorClass`); an unknown code falls back to its HTTP status's class.
pub fn error_of(response: &RawResponse, context: &str) -> Error {
    let body: Option<ErrorBody> = serde_json::from_slice(&response.body).ok();
    let (code, message) = match &body {
        Some(body) => (body.code.as_str(), body.message.clone()),
        None => ("", format!("HTTP {}", response.status)),
    };
    let class = ErrorClass::from_code(code).unwrap_or_else(|| ErrorClass::from_http_status(response.status.as_u16()));
    let field = |pick: fn(&ErrorBody) -> Option<u64>| body.as_ref().and_then(pick).unwrap_or_default();
    let retry_after_s = response
        .headers
        .get(hyper::header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.parse().ok())
        .unwrap_or(1);
    let id = context.to_owned();
    match class {
        ErrorClass::NotFound => Error::NotFound { what: "session", id },
        ErrorClass::AlreadyExists => Error::AlreadyExists { what: "session", id },
        // The server words it "session is busy: {reason}" (its id not echoed); the error
        // displays as "session \"{id}\" is busy: {reason}" on both sides.
        ErrorClass::Busy => {
            Error::Busy { id, reason: message.strip_prefix("session is busy: ").unwrap_or(&message).to_owned() }
        }
        ErrorClass::WriterBusy => Error::WriterBusy { id, holder: WriteHolder::Unknown },
        ErrorClass::RunNotAttached => {
            Error::RunNotAttached { id, run: body.as_ref().and_then(|b| b.run.clone()).unwrap_or(message) }
        }
        ErrorClass::Fenced => Error::OwnershipLost { id, reason: message },
        ErrorClass::RevisionConflict => {
            Error::RevisionConflict { expected: field(|b| b.expected), actual: field(|b| b.actual) }
        }
        ErrorClass::SeqConflict => Error::SeqConflict { expected: field(|b| b.expected), actual: field(|b| b.actual) },
        ErrorClass::IdempotencyKeyReused => {
            Error::IdempotencyKeyReused { key: String::new(), first_seq: field(|b| b.actual) }
        }
        ErrorClass::InvalidTransition => Error::InvalidTransition { from: String::new(), event: message },
        ErrorClass::Terminal => {
            Error::Terminal { state: body.as_ref().and_then(|b| b.state.clone()).unwrap_or_default() }
        }
        ErrorClass::PayloadTooLarge | ErrorClass::LimitExceeded => {
            let limit_name = body.as_ref().and_then(|b| b.limit_name.as_deref()).and_then(Limit::parse);
            match limit_name {
                Some(what) => Error::LimitExceeded { what, limit: field(|b| b.limit), actual: field(|b| b.actual) },
                None => Error::Invalid { what: "request", reason: message },
            }
        }
        ErrorClass::Invalid => Error::Invalid { what: "request", reason: message },
        ErrorClass::Forbidden => Error::Forbidden { reason: message },
        ErrorClass::Unauthenticated => Error::Unauthenticated { reason: message },
        ErrorClass::RateLimited => Error::RateLimited { retry_after_s },
        ErrorClass::Timeout => Error::Timeout { reason: message },
        ErrorClass::Unavailable => Error::Unavailable { reason: message },
        ErrorClass::Unsupported => Error::FormatUnsupported { reason: message, location: None },
        ErrorClass::Damaged => Error::Corrupt {
            reason: message,
            location: berth_core::Location { artifact: "server".into(), offset: None, seq: None },
        },
        // The server's own failure, described only in its log: an internal error here too
        // (exit code 1, not retried), never mistaken for a retryable `unavailable`. A bare
        // 5xx without berth's code (a proxy's 502) stays `unavailable` below.
        ErrorClass::Internal if code == ErrorClass::Internal.code() => Error::Io {
            operation: "a request to the server",
            kind: std::io::ErrorKind::Other,
            message: format!("{message} ({code}, HTTP {})", response.status),
        },
        _ => Error::Unavailable { reason: format!("{message} ({code}, HTTP {})", response.status) },
    }
}
