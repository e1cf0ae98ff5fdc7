//! The loopback load generator behind `berth-loadgen` (and `berth bench`'s W6): durable
//! appends through HTTP beside the same workload through the library. It lives with the
//! benchmarks, not in the server: it assembles a store (`berth-assemble`), which the
//! server never does.
//!
//! Workload: `clients` concurrent clients, each appending one event (~256 bytes of data)
//! per call with fsync on every append (the embedded default), round-robin over
//! `sessions` sessions. Appends to one session are serialized by the service's own
//! per-session append lock, in both modes (the server adds no lock of its own). Every measurement runs on a
//! fresh data directory, for a warm-up and then a fixed time: bounded, loopback only.

use berth_assemble::{AssembleOptions, StoreUrl};
use berth_core::{SessionId, SystemClock, TenantId, UserId};
use berth_server::auth::{Authenticator, KeyStore};
use berth_server::client::Client;
use berth_server::metrics::Metrics;
use berth_server::{RunningServer, ServerConfig, ServerParts};
use berth_service::{AppendRequest, CreateSession, NewEvent, Principal, Role, SessionService};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest measurement accepted, in seconds (loads stay bounded).
pub const MEASURE_SECONDS_MAX: u64 = 60;

/// One measurement's shape.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub clients: usize,
    pub sessions: usize,
    pub seconds: u64,
    pub warmup_seconds: u64,
}

/// Through the library (`SessionService::append`) or through HTTP (`berth serve`
/// in-process on 127.0.0.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Library,
    Http,
}

#[derive(Clone, Debug)]
pub struct Figures {
    /// Appends completed after the warm-up.
    pub appends: usize,
    pub seconds: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl Figures {
    pub fn appends_per_second(&self) -> f64 {
        self.appends as f64 / self.seconds
    }
}

fn principal() -> Principal {
    Principal {
        tenant: TenantId::parse("bench").unwrap_or_else(|_| unreachable!("a valid id")),
        user: UserId::parse("loadgen").unwrap_or_else(|_| unreachable!("a valid id")),
        project: None,
        role: Role::Service,
    }
}

/// The service as `berth serve` opens it on an embedded data directory (JSONL logs, the
/// SQLite catalog); shared with `berth bench`'s W6.
pub async fn open_service(root: &Path) -> berth_core::Result<Arc<SessionService>> {
    let url = StoreUrl::Embedded(root.to_path_buf());
    let service = berth_assemble::open_service_with(&url, AssembleOptions::default(), Arc::new(SystemClock)).await?;
    Ok(Arc::new(service))
}

/// `berth serve` over `service` on a random loopback port, with no rate limit and no
/// sweeper, and an API key for `principal` (shared with `berth bench`'s W6).
pub async fn loopback_server(
    service: &Arc<SessionService>,
    principal: &Principal,
) -> berth_core::Result<(RunningServer, String)> {
    let keys = KeyStore::in_memory()?;
    let key = keys.create(principal, None)?.1;
    let config = ServerConfig {
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        rate_limit: None,
        sweep_interval: None,
        ..ServerConfig::default()
    };
    let parts = ServerParts {
        service: service.clone(),
        auth: Authenticator::new(keys, None),
        metrics: Arc::new(Metrics::new()),
        feed: None,
        backups: None,
    };
    let server = berth_server::start(config, parts).await.map_err(|e| berth_core::Error::io("listen", &e))?;
    Ok((server, key))
}

fn request() -> AppendRequest {
    let pad = "x".repeat(240);
    AppendRequest {
        memory: Vec::new(),
        run: None,
        expected_seq: None,
        events: vec![NewEvent::new("note/bench", serde_json::json!({"pad": pad}))],
        idempotency_key: None,
    }
}

fn percentile(sorted: &[Duration], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index].as_secs_f64() * 1000.0
}

/// One client's loop until `end`; latencies after `warmup_end`.
async fn client_loop(
    target: Target,
    id: SessionId,
    warmup_end: Instant,
    end: Instant,
) -> berth_core::Result<Vec<Duration>> {
    let request = request();
    let mut latencies = Vec::new();
    loop {
        let started = Instant::now();
        if started >= end {
            return Ok(latencies);
        }
        match &target {
            Target::Http(client) => {
                client.append(&id, &request).await?;
            }
            Target::Library(service) => {
                service.append(&principal(), &id, request.clone()).await?;
            }
        }
        if started >= warmup_end {
            latencies.push(started.elapsed());
        }
    }
}

enum Target {
    Http(Client),
    Library(Arc<SessionService>),
}

/// One measurement on a fresh data directory `root` (created, and removed after).
pub async fn measure(mode: Mode, options: &LoadOptions, root: &Path) -> berth_core::Result<Figures> {
    let sessions = options.sessions.max(1);
    let seconds = options.seconds.clamp(1, MEASURE_SECONDS_MAX);
    std::fs::create_dir_all(root).map_err(|e| berth_core::Error::io("create load directory", &e))?;
    let service = open_service(root).await?;
    let mut ids = Vec::new();
    for index in 0..sessions {
        let id = SessionId::parse(&format!("s{index}"))?;
        let create = CreateSession { id: Some(id.clone()), ..CreateSession::default() };
        service.create(&principal(), create).await?;
        ids.push(id);
    }
    let (server, key) = match mode {
        Mode::Http => {
            let (server, key) = loopback_server(&service, &principal()).await?;
            (Some(server), key)
        }
        Mode::Library => (None, String::new()),
    };
    let url = server.as_ref().map(|server| server.url());
    let warmup_end = Instant::now() + Duration::from_secs(options.warmup_seconds);
    let end = warmup_end + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for index in 0..options.clients.max(1) {
        let target = match &url {
            Some(url) => Target::Http(Client::new(url, Some(key.clone()))?),
            None => Target::Library(service.clone()),
        };
        tasks.push(tokio::spawn(client_loop(target, ids[index % sessions].clone(), warmup_end, end)));
    }
    let mut latencies = Vec::new();
    let mut failure = None;
    for task in tasks {
        match task.await {
            Ok(Ok(measured)) => latencies.extend(measured),
            Ok(Err(error)) => failure = Some(error),
            Err(join) => failure = Some(berth_core::Error::Unavailable { reason: join.to_string() }),
        }
    }
    match server {
        Some(server) => server.shutdown().await?,
        None => service.shutdown().await?,
    }
    let _ = std::fs::remove_dir_all(root);
    if let Some(error) = failure {
        return Err(error);
    }
    latencies.sort_unstable();
    Ok(Figures {
        appends: latencies.len(),
        seconds: seconds as f64,
        p50_ms: percentile(&latencies, 0.50),
        p99_ms: percentile(&latencies, 0.99),
    })
}
