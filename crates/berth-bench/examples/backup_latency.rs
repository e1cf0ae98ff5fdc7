//! Live append latency during a hot backup (issue 50): a store of SESSIONS sessions of
//! EVENTS events each (~600 bytes per event), served by `berth serve` in-process on
//! loopback; one client appends one durable event at a time to a hot session through
//! HTTP. Each round measures the client idle for a few seconds, then while a backup of
//! the data directory runs in the same process (as `POST /v1/admin/backup` runs it), at
//! each copy rate asked for; rounds alternate, so drift hits both sides alike. Prints
//! the copy rate and the append p50/p99 idle and during each backup. Nothing asserted.
//!
//! `cargo run --release -p berth-bench --example backup_latency -- DIR [SESSIONS]
//! [EVENTS] [ROUNDS] [RATE_MIB_S,…]` (rate 0: unlimited; default `0,64`).

use berth_assemble::backup::{self, BackupOptions, NoProgress};
use berth_bench::loadgen::{loopback_server, open_service};
use berth_core::{SessionId, TenantId, UserId};
use berth_server::client::Client;
use berth_service::{AppendRequest, CreateSession, NewEvent, Principal, Role, SessionService};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const IDLE: Duration = Duration::from_secs(5);

fn principal() -> Principal {
    Principal {
        tenant: TenantId::parse("bench").expect("id"),
        user: UserId::parse("bench").expect("id"),
        project: None,
        role: Role::Service,
    }
}

fn events(first: u64, count: u64) -> Vec<NewEvent> {
    let pad = "x".repeat(500);
    (first..first + count).map(|i| NewEvent::new("note/bench", serde_json::json!({"i": i, "pad": pad}))).collect()
}

fn append_request(events: Vec<NewEvent>) -> AppendRequest {
    AppendRequest { run: None, expected_seq: None, events, idempotency_key: None, memory: Vec::new() }
}

async fn fill(service: &SessionService, sessions: u64, per_session: u64) {
    for index in 0..sessions {
        let id = SessionId::parse(&format!("s{index:05}")).expect("id");
        let create = CreateSession { id: Some(id.clone()), ..CreateSession::default() };
        service.create(&principal(), create).await.expect("create");
        let mut written = 0;
        while written < per_session {
            let count = (per_session - written).min(200);
            service.append(&principal(), &id, append_request(events(written, count))).await.expect("append");
            written += count;
        }
    }
    let hot = CreateSession { id: Some(SessionId::parse("hot").expect("id")), ..CreateSession::default() };
    service.create(&principal(), hot).await.expect("create");
}

/// Appends one event at a time to the hot session until `done`, returning latencies.
async fn live_appends(client: Client, done: Arc<AtomicBool>) -> Vec<Duration> {
    let id = SessionId::parse("hot").expect("id");
    let request = append_request(events(0, 1));
    let mut latencies = Vec::new();
    while !done.load(Ordering::Acquire) {
        let started = Instant::now();
        client.append(&id, &request).await.expect("live append");
        latencies.push(started.elapsed());
    }
    latencies
}

fn percentile_ms(latencies: &mut [Duration], fraction: f64) -> f64 {
    latencies.sort();
    let index = ((latencies.len() as f64 * fraction).ceil() as usize).clamp(1, latencies.len()) - 1;
    latencies[index].as_secs_f64() * 1e3
}

struct Sample {
    label: String,
    appends: usize,
    p50_ms: f64,
    p99_ms: f64,
    copy_mib_s: Option<f64>,
    copied_mib: Option<f64>,
}

async fn idle(client: &Client) -> Sample {
    let done = Arc::new(AtomicBool::new(false));
    let task = tokio::spawn(live_appends(client.clone(), Arc::clone(&done)));
    tokio::time::sleep(IDLE).await;
    done.store(true, Ordering::Release);
    let mut latencies = task.await.expect("live task");
    let (p50_ms, p99_ms) = (percentile_ms(&mut latencies, 0.5), percentile_ms(&mut latencies, 0.99));
    Sample { label: "idle".into(), appends: latencies.len(), p50_ms, p99_ms, copy_mib_s: None, copied_mib: None }
}

async fn during_backup(client: &Client, data: &Path, out: PathBuf, rate_mib_s: u64) -> Sample {
    let done = Arc::new(AtomicBool::new(false));
    let task = tokio::spawn(live_appends(client.clone(), Arc::clone(&done)));
    let mut options = BackupOptions::new(berth_assemble::system_clock());
    options.rate_bytes_per_s = (rate_mib_s > 0).then_some(rate_mib_s * 1024 * 1024);
    let data = data.to_path_buf();
    let summary = tokio::task::spawn_blocking(move || {
        let summary = backup::backup(&data, &out, &options, &mut NoProgress).expect("backup");
        std::fs::remove_dir_all(&out).expect("remove the backup");
        summary
    })
    .await
    .expect("backup task");
    done.store(true, Ordering::Release);
    let mut latencies = task.await.expect("live task");
    let (p50_ms, p99_ms) = (percentile_ms(&mut latencies, 0.5), percentile_ms(&mut latencies, 0.99));
    let rate = if rate_mib_s == 0 { "unlimited".to_owned() } else { format!("{rate_mib_s} MiB/s") };
    Sample {
        label: format!("backup at {rate}"),
        appends: latencies.len(),
        p50_ms,
        p99_ms,
        copy_mib_s: Some(summary.bytes_per_s / (1024.0 * 1024.0)),
        copied_mib: Some(summary.bytes as f64 / (1024.0 * 1024.0)),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = PathBuf::from(args.first().expect("DIR"));
    let sessions: u64 = args.get(1).map_or(200, |text| text.parse().expect("SESSIONS"));
    let per_session: u64 = args.get(2).map_or(1000, |text| text.parse().expect("EVENTS"));
    let rounds: usize = args.get(3).map_or(3, |text| text.parse().expect("ROUNDS"));
    let rates: Vec<u64> =
        args.get(4).map_or(vec![0, 64], |text| text.split(',').map(|rate| rate.parse().expect("RATE_MIB_S")).collect());
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    let service: Arc<SessionService> = open_service(&data).await.expect("open");
    let started = Instant::now();
    fill(&service, sessions, per_session).await;
    eprintln!("filled {sessions} sessions × {per_session} events in {:.1} s", started.elapsed().as_secs_f64());
    let (server, key) = loopback_server(&service, &principal()).await.expect("server");
    let client = Client::new(&server.url(), Some(key)).expect("client");
    let mut samples = Vec::new();
    for round in 0..rounds {
        samples.push(idle(&client).await);
        for rate in &rates {
            samples.push(during_backup(&client, &data, dir.join(format!("backup-{round}-{rate}")), *rate).await);
        }
    }
    println!("| round | phase | live appends | p50 ms | p99 ms | copied MiB | copy MiB/s |");
    println!("|---|---|---|---|---|---|---|");
    let per_round = 1 + rates.len();
    for (index, sample) in samples.iter().enumerate() {
        let copied = sample.copied_mib.map_or("".to_owned(), |mib| format!("{mib:.0}"));
        let rate = sample.copy_mib_s.map_or("".to_owned(), |rate| format!("{rate:.0}"));
        println!(
            "| {} | {} | {} | {:.2} | {:.2} | {copied} | {rate} |",
            index / per_round + 1,
            sample.label,
            sample.appends,
            sample.p50_ms,
            sample.p99_ms
        );
    }
    server.shutdown().await.expect("shutdown");
    std::fs::remove_dir_all(&dir).expect("remove the bench directory");
}
