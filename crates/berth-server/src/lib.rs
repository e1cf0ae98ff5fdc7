//! `berth serve`: the HTTP/JSON API over `SessionService` (SPEC §8, R-A1–R-A3).
//!
//! Layout: `api` (one handler per service operation), `tail` (live tail over SSE),
//! `feed` (the change-notification seam tails sleep on), `auth` (API keys, JWT),
//! `limits` (rate limits, strict body decoding, per-session append order), `error`
//! (status and `{code, message}` per error kind), `metrics`, `openapi`, and `client`
//! (the HTTP client behind `berth --server`); `in_process` answers the same routes
//! without a socket, for hosts that embed berth.
//!
//! The accept loop is our own (hyper's HTTP/1.1 connection builder under axum's
//! router) rather than `axum::serve`, because it sets what `axum::serve` does not: a
//! header-read timeout against slowloris clients and a bound on open connections.

pub mod api;
pub mod auth;
pub mod backup;
pub mod client;
pub mod error;
pub mod feed;
pub mod in_process;
pub mod limits;
pub mod memory_api;
pub mod metrics;
pub mod openapi;
pub mod tail;
mod to_completion;
pub mod ui;
pub mod wire;

use crate::api::Shared;
use crate::auth::Authenticator;
use crate::error::ApiError;
use crate::feed::{ChangeFeed, LocalFeed};
use crate::limits::{BodyLimit, RateLimit, TenantLimiter};
use crate::metrics::Metrics;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Extension, Router};
use berth_core::limits::BATCH_BYTES_MAX;
use berth_service::SessionService;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

/// The port `berth serve` listens on by default.
pub const DEFAULT_PORT: u16 = 7420;

/// Limits and timeouts of one server. Every field has a default that "just works".
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// Largest request body (the import endpoint has its own limit).
    pub body_bytes_max: usize,
    /// Largest import body (a JSONL export or a ZIP of sessions).
    pub import_bytes_max: usize,
    /// Longest time to answer a request (live tails excepted).
    pub request_timeout: Duration,
    /// Longest time a client may take to send a request's headers (slowloris).
    pub header_read_timeout: Duration,
    /// Most open connections; more wait in the kernel's accept queue.
    pub connections_max: usize,
    /// Per-tenant request rate; `None` disables rate limiting.
    pub rate_limit: Option<RateLimit>,
    /// Interval of heartbeat comments on live tails.
    pub tail_heartbeat: Duration,
    /// Interval at which an idle live tail re-reads and re-checks its key.
    pub tail_recheck: Duration,
    /// Interval of the background retention sweeper; `None` disables it.
    pub sweep_interval: Option<Duration>,
    /// Most sweeper actions per batch.
    pub sweep_batch: usize,
    /// How long shutdown waits for open requests and streams to finish.
    pub shutdown_grace: Duration,
    /// Write handles idle this long are closed, releasing their sessions' writer leases
    /// (so another server on a shared PostgreSQL store can write them); `None` keeps them
    /// until the service's cache bound evicts them.
    pub writer_idle_close: Option<Duration>,
    /// The inspector (`/ui`); `None` serves no `/ui` routes. `berth serve` enables it on
    /// loopback, and elsewhere only with `--ui on`.
    pub ui: Option<ui::UiConfig>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            // A full batch plus JSON overhead (escapes, whitespace, envelope fields).
            body_bytes_max: BATCH_BYTES_MAX + 1024 * 1024,
            import_bytes_max: 256 * 1024 * 1024,
            request_timeout: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(10),
            connections_max: 512,
            rate_limit: Some(RateLimit { per_second: 2_000, burst: 4_000 }),
            tail_heartbeat: Duration::from_secs(15),
            tail_recheck: Duration::from_secs(15),
            sweep_interval: Some(Duration::from_secs(60)),
            sweep_batch: 500,
            shutdown_grace: Duration::from_secs(10),
            writer_idle_close: Some(Duration::from_secs(10)),
            ui: Some(ui::UiConfig::default()),
        }
    }
}

/// Everything a handler can reach.
pub struct AppState {
    pub service: Arc<SessionService>,
    pub auth: Authenticator,
    pub limiter: Option<TenantLimiter>,
    pub metrics: Arc<Metrics>,
    pub feed: Arc<dyn ChangeFeed>,
    pub config: ServerConfig,
    pub shutdown: watch::Receiver<bool>,
    /// The inspector's state, when it is enabled.
    pub ui: Option<ui::UiState>,
    /// Backups through `POST /v1/admin/backup`, when the server takes them.
    pub backups: Option<backup::Backups>,
    draining: AtomicBool,
}

impl AppState {
    /// Open live tails (SSE streams).
    pub fn tails_open(&self) -> usize {
        self.metrics.tails_open.get().max(0) as usize
    }
}

/// What the server is built from.
pub struct ServerParts {
    pub service: Arc<SessionService>,
    pub auth: Authenticator,
    pub metrics: Arc<Metrics>,
    /// `None`: the in-process feed (one server per store).
    pub feed: Option<Arc<dyn ChangeFeed>>,
    /// `None`: `POST /v1/admin/backup` is refused (`berth serve` without `--backup-dir`).
    pub backups: Option<backup::Backups>,
}

/// A running server: its address, and the handle to stop it.
pub struct RunningServer {
    pub local_addr: SocketAddr,
    pub state: Shared,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    background: Vec<tokio::task::JoinHandle<()>>,
}

impl RunningServer {
    pub fn url(&self) -> String {
        format!("http://{}", self.local_addr)
    }

    /// Graceful shutdown: stop accepting, end live tails, drain open requests (up to the
    /// grace period), wait for the background tasks to return, then close the service's
    /// write handles.
    pub async fn shutdown(self) -> berth_core::Result<()> {
        self.state.draining.store(true, Ordering::Release);
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
        for task in self.background {
            let _ = task.await;
        }
        self.state.service.shutdown().await
    }

    /// Waits until `signal` resolves, then shuts down.
    pub async fn run_until(self, signal: impl std::future::Future<Output = ()>) -> berth_core::Result<()> {
        signal.await;
        tracing::info!("shutting down: draining open requests");
        self.shutdown().await
    }
}

/// Binds `config.listen` and starts serving (and sweeping) in the background.
pub async fn start(config: ServerConfig, parts: ServerParts) -> std::io::Result<RunningServer> {
    let listener = TcpListener::bind(config.listen).await?;
    let local_addr = listener.local_addr()?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let state = Arc::new(AppState {
        service: parts.service,
        auth: parts.auth,
        limiter: config.rate_limit.map(TenantLimiter::new),
        metrics: parts.metrics,
        feed: parts.feed.unwrap_or_else(|| Arc::new(LocalFeed::new())),
        config: config.clone(),
        shutdown: shutdown_rx.clone(),
        ui: config.ui.as_ref().map(|ui| ui::UiState::new(ui, local_addr)),
        backups: parts.backups,
        draining: AtomicBool::new(false),
    });
    let app = router(state.clone());
    let background = spawn_background(&state, &config, &shutdown_rx);
    let task = tokio::spawn(accept_loop(listener, app, config, shutdown_rx));
    Ok(RunningServer { local_addr, state, shutdown: shutdown_tx, task, background })
}

/// Starts the background tasks `config` asks for (the retention sweeper, the idle-writer
/// closer), which end when `shutdown` changes. Both servers' `shutdown` awaits them, so
/// none is still running when the service closes or its host drops the runtime (a task
/// polled while the runtime shuts down panics in tokio's timer).
pub(crate) fn spawn_background(
    state: &Shared,
    config: &ServerConfig,
    shutdown: &watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    if let Some(interval) = config.sweep_interval {
        tasks.push(tokio::spawn(sweeper(state.clone(), interval, shutdown.clone())));
    }
    if let Some(idle) = config.writer_idle_close {
        tasks.push(tokio::spawn(idle_writer_closer(state.clone(), idle, shutdown.clone())));
    }
    tasks
}

async fn accept_loop(listener: TcpListener, app: Router, config: ServerConfig, mut shutdown: watch::Receiver<bool>) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let connections = Arc::new(Semaphore::new(config.connections_max.max(1)));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(config.header_read_timeout).keep_alive(true);
    loop {
        let permit = tokio::select! {
            permit = connections.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = shutdown.changed() => break,
        };
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
            drop(permit);
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(config.shutdown_grace) => {
            tracing::warn!("shutdown grace period over; closing the remaining connections");
        }
    }
}

/// Closes write handles idle for `idle`, releasing their sessions' writer locks.
pub(crate) async fn idle_writer_closer(state: Shared, idle: Duration, mut shutdown: watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval((idle / 2).max(Duration::from_millis(10)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        let closed = state.service.close_idle_writers(idle).await;
        if closed > 0 {
            tracing::debug!(closed, "closed idle write handles");
        }
    }
}

/// The background retention sweeper (R-S11): bounded batches, at most a few per tick.
pub(crate) async fn sweeper(state: Shared, interval: Duration, mut shutdown: watch::Receiver<bool>) {
    const BATCHES_PER_TICK_MAX: usize = 10;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        for _ in 0..BATCHES_PER_TICK_MAX {
            match state.service.sweep(state.config.sweep_batch).await {
                Ok(report) => {
                    if report.expired + report.deleted + report.abandoned_creates > 0 {
                        tracing::info!(?report, "retention sweep");
                    }
                    if !report.more {
                        break;
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "retention sweep failed");
                    break;
                }
            }
        }
        if let Some(limiter) = &state.limiter {
            limiter.forget_idle();
        }
    }
}

/// The whole HTTP surface.
pub fn router(state: Shared) -> Router {
    let config = &state.config;
    let api = Router::new()
        .route("/v1/sessions", post(api::create_session).get(api::list_sessions))
        .route("/v1/sessions/counts", get(api::count_sessions))
        .route("/v1/sessions/{id}", get(api::get_session).patch(api::update_session).delete(api::delete_session))
        .route("/v1/sessions/{id}/close", post(api::close_session))
        .route("/v1/sessions/{id}/fork", post(api::fork_session))
        .route("/v1/sessions/{id}/reopen", post(api::reopen_session))
        .route("/v1/sessions/{id}/events", get(api::read_events).post(api::append_events))
        .route("/v1/sessions/{id}/runs", post(api::attach_run))
        .route("/v1/sessions/{id}/runs/{run}/heartbeat", post(api::heartbeat_run))
        .route("/v1/sessions/{id}/runs/{run}/detach", post(api::detach_run))
        .route("/v1/sessions/{id}/resume", post(api::resume_session))
        .route("/v1/sessions/{id}/export", get(api::export_session))
        .route("/v1/sessions/{id}/usage", get(api::session_usage))
        .route("/v1/usage", get(api::tenant_usage))
        .route("/v1/audit", get(api::audit_log))
        .route("/v1/audit/search", get(api::search_audit))
        .route("/v1/audit/verify", get(api::verify_audit))
        .route("/v1/retention", put(api::set_retention))
        .route("/v1/whoami", get(api::whoami))
        .route(
            "/v1/memory/items",
            put(memory_api::put_memory).get(memory_api::get_memory).delete(memory_api::delete_memory),
        )
        .route("/v1/memory/search", post(memory_api::search_memory))
        .route("/v1/memory/namespaces", get(memory_api::list_namespaces))
        .route("/v1/memory/forget", post(memory_api::forget_memory))
        .route("/v1/memory/delete", post(memory_api::delete_memory_items))
        .route("/v1/memory/usage", get(memory_api::memory_usage))
        .route("/v1/memory/quota", put(memory_api::set_memory_quota))
        .route("/v1/memory/export", get(memory_api::export_memory))
        .route("/v1/openapi.json", get(openapi_json))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .layer(DefaultBodyLimit::max(config.body_bytes_max))
        .layer(Extension(BodyLimit(config.body_bytes_max)))
        .layer(middleware::from_fn_with_state(state.clone(), request_timeout));
    let import = Router::new()
        .route("/v1/import", post(api::import_sessions))
        .route("/v1/memory/import", post(memory_api::import_memory))
        .layer(DefaultBodyLimit::max(config.import_bytes_max))
        .layer(Extension(BodyLimit(config.import_bytes_max)))
        .layer(middleware::from_fn_with_state(state.clone(), request_timeout));
    // A backup answers when it is done: no request timeout (it runs on the blocking
    // pool, and goes on if the client leaves).
    let admin = Router::new()
        .route("/v1/admin/backup", post(backup::take_backup))
        .layer(DefaultBodyLimit::max(config.body_bytes_max))
        .layer(Extension(BodyLimit(config.body_bytes_max)));
    // Live tails run as long as the client listens: no request timeout.
    let streams =
        Router::new().route("/v1/sessions/{id}/events/stream", get(tail::tail_events)).layer(DefaultBodyLimit::max(0));
    let inspector = if state.ui.is_some() { ui::router(&state) } else { Router::new() };
    Router::new()
        .merge(api)
        .merge(import)
        .merge(admin)
        .merge(streams)
        .merge(inspector)
        .fallback(|| async { ApiError::not_found_route() })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "method not allowed on this endpoint")
        })
        .layer(middleware::from_fn(limits::refuse_undecodable_query))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state)
}

pub(crate) async fn request_timeout(State(state): State<Shared>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(state.config.request_timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::timeout().into_response(),
    }
}

/// Counts and times every request by route template (never by raw path: bounded labels).
async fn observe(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let response = next.run(request).await;
    state.metrics.observe_request(&method, &route, response.status().as_u16(), started.elapsed().as_secs_f64());
    response
}

async fn openapi_json() -> Response {
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], openapi::document()).into_response()
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready when not draining and the catalog answers.
async fn readyz(State(state): State<Shared>) -> Response {
    if state.draining.load(Ordering::Acquire) || *state.shutdown.borrow() {
        return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "shutting down").into_response();
    }
    let probe = berth_core::SessionKey::new(
        berth_core::TenantId::parse("readyz").unwrap_or_else(|_| unreachable!()),
        berth_core::SessionId::parse("readyz").unwrap_or_else(|_| unreachable!()),
    );
    match state.service.catalog().get(&probe).await {
        Ok(_) => "ready\n".into_response(),
        Err(error) => ApiError::from_core(&error).into_response(),
    }
}

async fn metrics_text(State(state): State<Shared>) -> Response {
    state.metrics.write_handles_open.set(state.service.store().write_handles_open() as i64);
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        )],
        state.metrics.render(),
    )
        .into_response()
}
