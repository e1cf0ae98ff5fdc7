//! `berth-loadgen`: durable appends through HTTP beside the same workload through the
//! library, in one run (R-Q3). Loopback only, bounded in time.
//!
//! Workload: `--clients` concurrent clients, each appending one event (~256 bytes of
//! data) per call, fsync on every append (the embedded default), round-robin over
//! `--sessions` sessions (appends to one session are serialized by the server; the
//! library figure serializes them the same way). Each configuration is measured in
//! `--rounds` interleaved rounds (library, HTTP, HTTP, library, …) on fresh data
//! directories, after a warm-up; it reports throughput, p50 and p99 per mode.
//!
//! ```text
//! cargo run --release -p berth-server --bin berth-loadgen -- --clients 32 --sessions 8,64
//! ```

use berth_core::{SessionId, SessionKey, SystemClock, TenantId, UserId};
use berth_server::auth::{Authenticator, KeyStore};
use berth_server::client::Client;
use berth_server::limits::SessionLocks;
use berth_server::metrics::Metrics;
use berth_server::{ServerConfig, ServerParts};
use berth_service::{AppendRequest, CreateSession, NewEvent, Principal, Role, SessionService};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Options {
    clients: usize,
    sessions: Vec<usize>,
    seconds: u64,
    warmup_seconds: u64,
    rounds: usize,
    dir: PathBuf,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        clients: 32,
        sessions: vec![8, 64],
        seconds: 5,
        warmup_seconds: 1,
        rounds: 2,
        dir: std::env::temp_dir(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |text: String| text.parse::<u64>().map_err(|e| format!("{text}: {e}"));
        match flag.as_str() {
            "--clients" => options.clients = number(value()?)? as usize,
            "--sessions" => {
                options.sessions = value()?
                    .split(',')
                    .map(|part| part.parse::<usize>().map_err(|e| format!("{part}: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--seconds" => options.seconds = number(value()?)?,
            "--warmup-seconds" => options.warmup_seconds = number(value()?)?,
            "--rounds" => options.rounds = number(value()?)? as usize,
            "--dir" => options.dir = PathBuf::from(value()?),
            "--help" | "-h" => {
                return Err("usage: berth-loadgen [--clients N] [--sessions N,M] [--seconds S] \
                            [--warmup-seconds S] [--rounds R] [--dir DIR]"
                    .into())
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if options.clients == 0 || options.sessions.contains(&0) || options.seconds == 0 {
        return Err("clients, sessions and seconds must be positive".into());
    }
    // Loads stay bounded: at most 10 minutes of measuring in total.
    options.seconds = options.seconds.min(60);
    Ok(options)
}

fn principal() -> Principal {
    Principal {
        tenant: TenantId::parse("bench").unwrap(),
        user: UserId::parse("loadgen").unwrap(),
        project: None,
        role: Role::Service,
    }
}

fn open_service(root: &Path) -> Arc<SessionService> {
    let jsonl = berth_jsonl::JsonlBackend::open(root.to_path_buf(), Default::default()).unwrap();
    let catalog = berth_sqlite::SqliteCatalog::open(root.join("catalog.sqlite")).unwrap();
    Arc::new(SessionService::new(berth_store::LogStore::new(Arc::new(jsonl)), Arc::new(catalog), Arc::new(SystemClock)))
}

fn request() -> AppendRequest {
    let pad = "x".repeat(240);
    AppendRequest {
        run: None,
        expected_seq: None,
        events: vec![NewEvent::new("note/bench", serde_json::json!({"pad": pad}))],
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Library,
    Http,
}

#[derive(Debug)]
struct Figures {
    appends: usize,
    seconds: f64,
    p50_ms: f64,
    p99_ms: f64,
}

fn percentile(sorted: &[Duration], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index].as_secs_f64() * 1000.0
}

/// One measurement: `clients` loops over `sessions` sessions for warm-up + `seconds`.
async fn measure(mode: Mode, options: &Options, sessions: usize, root: &Path) -> Figures {
    std::fs::create_dir_all(root).unwrap();
    let service = open_service(root);
    let ids: Vec<SessionId> = (0..sessions).map(|i| SessionId::parse(&format!("s{i}")).unwrap()).collect();
    for id in &ids {
        let create = CreateSession { id: Some(id.clone()), ..CreateSession::default() };
        service.create(&principal(), create).await.unwrap();
    }
    let locks = Arc::new(SessionLocks::new());
    let mut server = None;
    let mut key = String::new();
    if mode == Mode::Http {
        let keys = KeyStore::in_memory().unwrap();
        key = keys.create(&principal(), None).unwrap().1;
        let config = ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            rate_limit: None,
            sweep_interval: None,
            ..ServerConfig::default()
        };
        let parts = ServerParts {
            service: service.clone(),
            auth: Authenticator::new(keys, None),
            metrics: Arc::new(Metrics::new()),
            feed: None,
        };
        server = Some(berth_server::start(config, parts).await.unwrap());
    }
    let url = server.as_ref().map(|server| server.url());
    let warmup_end = Instant::now() + Duration::from_secs(options.warmup_seconds);
    let end = warmup_end + Duration::from_secs(options.seconds);
    let tasks: Vec<_> = (0..options.clients)
        .map(|client_index| {
            let id = ids[client_index % sessions].clone();
            let service = service.clone();
            let locks = locks.clone();
            let client = url.as_ref().map(|url| Client::new(url, Some(key.clone())).unwrap());
            tokio::spawn(async move {
                let request = request();
                let key = SessionKey::new(principal().tenant, id.clone());
                let mut latencies = Vec::new();
                loop {
                    let started = Instant::now();
                    if started >= end {
                        break;
                    }
                    match &client {
                        Some(client) => {
                            client.append(&id, &request).await.unwrap();
                        }
                        None => {
                            let _serialized = locks.lock(&key).await;
                            service.append(&principal(), &id, request.clone()).await.unwrap();
                        }
                    }
                    if started >= warmup_end {
                        latencies.push(started.elapsed());
                    }
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    if let Some(server) = server {
        server.shutdown().await.unwrap();
    } else {
        service.shutdown().await.unwrap();
    }
    latencies.sort_unstable();
    let _ = std::fs::remove_dir_all(root);
    Figures {
        appends: latencies.len(),
        seconds: options.seconds as f64,
        p50_ms: percentile(&latencies, 0.50),
        p99_ms: percentile(&latencies, 0.99),
    }
}

fn main() {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let base = options.dir.join(format!("berth-loadgen-{}", std::process::id()));
    println!("berth-loadgen: {} clients, one event (~256 B) per durable append, {} s per measurement after {} s warm-up, {} interleaved rounds", options.clients, options.seconds, options.warmup_seconds, options.rounds);
    println!();
    println!("| sessions | mode | appends/s | p50 ms | p99 ms | HTTP / library |");
    println!("|---:|---|---:|---:|---:|---:|");
    for &sessions in &options.sessions {
        let mut library = Vec::new();
        let mut http = Vec::new();
        for round in 0..options.rounds {
            let order = if round % 2 == 0 { [Mode::Library, Mode::Http] } else { [Mode::Http, Mode::Library] };
            for mode in order {
                let root = base.join(format!("{sessions}-{round}-{mode:?}"));
                let figures = runtime.block_on(measure(mode, &options, sessions, &root));
                eprintln!("  sessions {sessions} round {round} {mode:?}: {figures:?}");
                match mode {
                    Mode::Library => library.push(figures),
                    Mode::Http => http.push(figures),
                }
            }
        }
        let summary = |all: &[Figures]| {
            let appends: usize = all.iter().map(|f| f.appends).sum();
            let seconds: f64 = all.iter().map(|f| f.seconds).sum();
            let median = |pick: fn(&Figures) -> f64| {
                let mut values: Vec<f64> = all.iter().map(pick).collect();
                values.sort_by(|a, b| a.total_cmp(b));
                values[values.len() / 2]
            };
            (appends as f64 / seconds, median(|f| f.p50_ms), median(|f| f.p99_ms))
        };
        let (library_rate, library_p50, library_p99) = summary(&library);
        let (http_rate, http_p50, http_p99) = summary(&http);
        println!("| {sessions} | library | {library_rate:.0} | {library_p50:.2} | {library_p99:.2} | |");
        println!(
            "| {sessions} | HTTP | {http_rate:.0} | {http_p50:.2} | {http_p99:.2} | {:.2}x |",
            http_rate / library_rate
        );
    }
    let _ = std::fs::remove_dir_all(&base);
}
