//! Measures reads by position (R-S15) on a 100,000-event JSONL log: a cold tail read of
//! 20 events, a cold read of 20 events from the middle, and a cold full read, each on a
//! read handle of a fresh backend instance (nothing cached in berth; the page cache is
//! warm, so these are CPU and system-call costs, not disk seeks).
//!
//! `cargo run --release -p berth-jsonl --example tail_read [events]`

use berth_core::{Event, Scope, SessionHeader, SessionId, SessionKey, TenantId, Timestamp, UserId};
use berth_jsonl::{Durability, JsonlBackend, JsonlOptions};
use berth_store::{Access, LogStore};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROUNDS: usize = 21;

fn header() -> SessionHeader {
    let scope = Scope { tenant: TenantId::parse("bench").unwrap(), user: UserId::parse("u").unwrap(), project: None };
    SessionHeader::new(SessionId::parse("long").unwrap(), scope, Timestamp(1))
}

fn event(seq: u64) -> Event {
    let data = serde_json::json!({"role": "assistant", "content": format!("message number {seq} with some text")});
    Event::new(seq, "assistant/message", Timestamp(1_000 + seq), data).unwrap()
}

fn store(root: &Path) -> LogStore {
    let options = JsonlOptions { durability: Durability::Barrier, ..JsonlOptions::default() };
    LogStore::new(Arc::new(JsonlBackend::open(root, options).unwrap()))
}

/// The median of `ROUNDS` runs of `read` on a fresh instance's fresh read handle.
async fn median<F, Fut>(root: &Path, key: &SessionKey, expected: usize, read: F) -> Duration
where
    F: Fn(berth_store::SessionHandle) -> Fut,
    Fut: std::future::Future<Output = Vec<Event>>,
{
    let mut times = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let handle = store(root).open(key, Access::Read).await.unwrap();
        let events = read(handle).await;
        times.push(started.elapsed());
        assert_eq!(events.len(), expected);
    }
    times.sort();
    times[ROUNDS / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let events: u64 = std::env::args().nth(1).map_or(100_000, |count| count.parse().expect("an event count"));
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("data");
    let writer = store(&root).create(header()).await.unwrap();
    let log: Vec<Event> = (0..events).map(event).collect();
    for batch in log.chunks(1_000) {
        writer.append(batch).await.unwrap();
    }
    writer.close().await.unwrap();
    let key = header().key();
    let bytes =
        std::fs::metadata(JsonlBackend::open(&root, JsonlOptions::default()).unwrap().log_path(&key)).unwrap().len();
    let count = usize::try_from(events).unwrap();
    let middle = events / 2;
    let tail = median(&root, &key, 20.min(count), |h| async move { h.read_before(u64::MAX, 20).await.unwrap() }).await;
    let from =
        median(&root, &key, 20.min(count - count / 2), |h| async move { h.read(middle, Some(20)).await.unwrap() })
            .await;
    let full = median(&root, &key, count, |h| async move { h.read(0, None).await.unwrap() }).await;
    println!("log: {events} events, {bytes} bytes; median of {ROUNDS} cold reads (open included)");
    println!("  tail, 20 events (read_before):  {:>10.3} ms", tail.as_secs_f64() * 1e3);
    println!("  from seq {middle}, 20 events:    {:>10.3} ms", from.as_secs_f64() * 1e3);
    println!("  full read:                      {:>10.3} ms", full.as_secs_f64() * 1e3);
    println!("  full / tail: {:.0}x", full.as_secs_f64() / tail.as_secs_f64());
}
