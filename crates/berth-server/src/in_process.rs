//! The server's whole `/v1` surface without a socket, for hosts that embed berth in
//! their own process (the Python package's native transport). A request goes through
//! the same router, handlers, wire types, limits and error mapping as one that came
//! over HTTP, so the two transports cannot drift apart; only authentication differs:
//! the host states its principal once, when it opens the store, and every request
//! carries it as a request extension — which nothing arriving over the network can set.

use crate::api::Shared;
use crate::auth::{Authenticator, KeyStore};
use crate::feed::{ChangeFeed, LocalFeed};
use crate::metrics::Metrics;
use crate::{router, spawn_background, AppState, ServerConfig};
use axum::body::Body;
use axum::http::Request;
use axum::response::Response;
use axum::Router;
use berth_service::{Principal, SessionService};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tower::ServiceExt;

/// The principal of an in-process request, set by the embedding host (never by a
/// client: HTTP requests cannot carry extensions).
#[derive(Clone, Debug)]
pub struct InProcessPrincipal(pub Principal);

/// A server that answers requests handed to it in-process.
pub struct InProcessServer {
    state: Shared,
    app: Router,
    shutdown: watch::Sender<bool>,
    /// The background tasks (`start`), awaited by `shutdown`.
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The calls answering now, which `shutdown` waits for before it closes the
    /// service's write handles (an append must not find its handle closed under it).
    in_flight: Arc<InFlight>,
}

/// How long `shutdown` waits for the calls in flight before closing the service anyway.
pub const SHUTDOWN_CALLS_WAIT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct InFlight {
    calls: AtomicUsize,
    idle: Notify,
}

/// One call in flight; its drop wakes a waiting `shutdown` once none is left.
struct CallGuard(Arc<InFlight>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        if self.0.calls.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl InProcessServer {
    /// Builds the router over `service` and starts the background tasks `config` asks
    /// for (the sweeper, the idle-writer closer). Must be called inside a tokio runtime.
    pub fn start(config: ServerConfig, service: Arc<SessionService>, feed: Option<Arc<dyn ChangeFeed>>) -> Self {
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let keys = KeyStore::in_memory().unwrap_or_else(|error| panic!("an in-memory key store opens: {error}"));
        let state = Arc::new(AppState {
            service,
            auth: Authenticator::new(keys, None),
            limiter: None,
            metrics: Arc::new(Metrics::new()),
            feed: feed.unwrap_or_else(|| Arc::new(LocalFeed::new())),
            config: config.clone(),
            shutdown: shutdown_rx.clone(),
            draining: AtomicBool::new(false),
            // The inspector needs a browser, hence a socket: never in-process.
            ui: None,
            // A backup of the store is its host's to take (`berth backup`).
            backups: None,
        });
        let tasks = spawn_background(&state, &config, &shutdown_rx);
        InProcessServer {
            app: router(state.clone()),
            state,
            shutdown: shutdown_tx,
            tasks: Mutex::new(tasks),
            in_flight: Arc::default(),
        }
    }

    /// Answers one request as `principal`. Once `shutdown` has begun, a new call is
    /// answered `unavailable` (the store is closing) without reaching the service.
    pub async fn call(&self, principal: Principal, mut request: Request<Body>) -> Response {
        // Counted before the check, and `shutdown` marks `draining` before it counts:
        // either this call sees the mark, or `shutdown` waits for it.
        self.in_flight.calls.fetch_add(1, Ordering::SeqCst);
        let _guard = CallGuard(self.in_flight.clone());
        if self.state.draining.load(Ordering::SeqCst) {
            let closing = berth_core::Error::Unavailable { reason: "the store is closing".into() };
            return axum::response::IntoResponse::into_response(crate::error::ApiError::from_core(&closing));
        }
        request.extensions_mut().insert(InProcessPrincipal(principal));
        match self.app.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }

    /// The service behind the router.
    pub fn service(&self) -> &Arc<SessionService> {
        &self.state.service
    }

    /// Refuses new calls, waits for the calls in flight (up to `SHUTDOWN_CALLS_WAIT`),
    /// ends live tails and background tasks, waiting for the tasks to return
    /// (`spawn_background`), then closes the service's write handles (flushing what they
    /// hold). A host may drop its runtime right after.
    pub async fn shutdown(&self) -> berth_core::Result<()> {
        self.state.draining.store(true, Ordering::SeqCst);
        let in_flight = self.in_flight.clone();
        let drained = async move {
            loop {
                let idle = in_flight.idle.notified();
                if in_flight.calls.load(Ordering::SeqCst) == 0 {
                    return;
                }
                idle.await;
            }
        };
        if tokio::time::timeout(SHUTDOWN_CALLS_WAIT, drained).await.is_err() {
            tracing::warn!("closing the store with calls still in flight");
        }
        let _ = self.shutdown.send(true);
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
        for task in tasks {
            let _ = task.await;
        }
        self.state.service.shutdown().await
    }

    /// How many of the background tasks `start` spawned are still running (none once
    /// `shutdown` has returned).
    pub fn background_tasks(&self) -> usize {
        let tasks = self.tasks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        tasks.iter().filter(|task| !task.is_finished()).count()
    }
}
