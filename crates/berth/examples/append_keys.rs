//! Append figures for caller idempotency keys (a measurement, not a test): durable
//! single-event appends to one session without a key and with a fresh key each, in
//! interleaved rounds; then a keyed retry found in the writer's ledger, one found in
//! the catalog's index (writer closed), and the first append after a crash-like
//! restart that must read the unindexed tail — on the embedded backend (JSONL logs +
//! SQLite catalog), medians over the rounds.
//!
//! `cargo run --release -p berth --example append_keys [-- APPENDS_PER_ROUND]`

use berth_core::{SessionId, TenantId, UserId};
use berth_service::{AppendRequest, CreateSession, NewEvent, Principal, Role, SessionService};
use std::time::{Duration, Instant};

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn request(key: Option<String>, text: &str) -> AppendRequest {
    let events = vec![NewEvent::new("user/message", serde_json::json!({"content": text}))];
    AppendRequest { memory: Vec::new(), run: None, expected_seq: None, events, idempotency_key: key }
}

async fn open(dir: &std::path::Path) -> berth_core::Result<SessionService> {
    let url = dir.to_str().unwrap_or(".").to_owned();
    let backends = berth::open_backends(&berth::StoreUrl::parse(&url)?).await?;
    Ok(SessionService::new(backends.store, backends.catalog, berth::system_clock()))
}

/// Appends per second over `appends` single-event appends, keyed or not.
async fn round(
    service: &SessionService,
    admin: &Principal,
    id: &SessionId,
    appends: usize,
    keyed: bool,
    tag: usize,
) -> f64 {
    let started = Instant::now();
    for i in 0..appends {
        let key = keyed.then(|| format!("k-{tag}-{i}"));
        service.append(admin, id, request(key, "hello")).await.expect("append");
    }
    appends as f64 / started.elapsed().as_secs_f64()
}

fn micros(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1e6
}

#[tokio::main]
async fn main() -> berth_core::Result<()> {
    let appends: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(2_000);
    let dir = tempfile::tempdir().map_err(|e| berth_core::Error::io("tempdir", &e))?;
    let service = open(dir.path()).await?;
    let admin = Principal {
        tenant: TenantId::parse("bench")?,
        user: UserId::parse("admin")?,
        project: None,
        role: Role::Admin,
    };
    let id = SessionId::parse("s")?;
    service.create(&admin, CreateSession { id: Some(id.clone()), ..CreateSession::default() }).await?;
    let (mut keyless, mut keyed) = (Vec::new(), Vec::new());
    for tag in 0..5 {
        keyless.push(round(&service, &admin, &id, appends, false, tag).await);
        keyed.push(round(&service, &admin, &id, appends, true, tag).await);
    }
    println!("durable appends/s, one session, {appends} per round, 5 interleaved rounds (median):");
    println!("  without a key  {:>8.0}", median(keyless));
    println!("  with a key     {:>8.0}", median(keyed));

    let mut in_ledger = Vec::new();
    let mut in_index = Vec::new();
    for i in 0..21 {
        let started = Instant::now();
        let retry = service.append(&admin, &id, request(Some(format!("k-0-{i}")), "hello")).await?;
        assert!(retry.duplicate);
        in_ledger.push(micros(started.elapsed()));
    }
    service.close_idle_writers(Duration::ZERO).await;
    for i in 0..21 {
        service.close_idle_writers(Duration::ZERO).await;
        let started = Instant::now();
        let retry = service.append(&admin, &id, request(Some(format!("k-1-{i}")), "hello")).await?;
        assert!(retry.duplicate);
        in_index.push(micros(started.elapsed()));
    }
    let mut reopened_keyless = Vec::new();
    for _ in 0..21 {
        service.close_idle_writers(Duration::ZERO).await;
        let started = Instant::now();
        service.append(&admin, &id, request(None, "hello")).await?;
        reopened_keyless.push(micros(started.elapsed()));
    }
    println!("latency, µs (median of 21):");
    println!("  keyed retry found in the writer's ledger            {:>8.0}", median(in_ledger));
    println!("  keyed retry found in the catalog's index (reopen)   {:>8.0}", median(in_index));
    println!("  keyless durable append after a reopen (reference)   {:>8.0}", median(reopened_keyless));

    // A crash-like restart after 200 unindexed keyed appends: the next writer reads them.
    for i in 0..200 {
        service.append(&admin, &id, request(Some(format!("tail-{i}")), "hello")).await?;
    }
    drop(service);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let service = open(dir.path()).await?;
    let started = Instant::now();
    let retry = service.append(&admin, &id, request(Some("tail-199".into()), "hello")).await?;
    assert!(retry.duplicate);
    println!("first keyed retry after a restart with 200 unindexed keyed events: {:.0} µs", micros(started.elapsed()));
    service.shutdown().await?;
    let service = open(dir.path()).await?;
    let started = Instant::now();
    service.append(&admin, &id, request(None, "hello")).await?;
    println!("first keyless durable append after a clean restart (reference): {:.0} µs", micros(started.elapsed()));
    service.shutdown().await
}
