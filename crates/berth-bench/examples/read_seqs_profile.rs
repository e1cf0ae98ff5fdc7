//! Timing aid for point reads (`SessionHandle::read_seqs`): writes a 16,000-event log of
//! ~1 KiB events once per backend, then reads 2,000 seqs 8 apart (7, 15, …, 15,999) in
//! pages of `READ_SEQS_MAX`, as LangGraph's drop-in does for the message versions a
//! checkpoint names. Prints the median and the fastest of `ROUNDS` rounds per variant:
//!
//! - `cold reader`: each page on a new read handle (what `GET …/events?seqs=` does);
//! - `warm writer`: every page on one open write handle (a validated log);
//! - `memory`: the in-memory backend, each page on a new read handle (the floor of the
//!   front's own work).
//!
//! `cargo run --release -p berth-bench --example read_seqs_profile -- [ROUNDS] [PG_URL]`
//! (with a PostgreSQL URL, its `cold reader` too).

use berth_bench::fixtures::{header, jsonl_store_unsynced, memory_store};
use berth_bench::payload::chat_event;
use berth_core::{Event, Result};
use berth_store::{Access, LogStore, SessionHandle, READ_SEQS_MAX};
use std::time::Instant;

const EVENTS: u64 = 16_000;
const STRIDE: u64 = 8;

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|text| text.parse().ok()).unwrap_or(30);
    let pg_url = args.next();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(run(rounds, pg_url)).expect("read_seqs profile");
}

fn wanted() -> Vec<u64> {
    (0..EVENTS / STRIDE).map(|index| index * STRIDE + STRIDE - 1).collect()
}

async fn write_log(store: &LogStore, id: &str) -> Result<SessionHandle> {
    let writer = store.create(header(id)).await?;
    let events: Vec<Event> = (0..EVENTS).map(chat_event).collect();
    for batch in events.chunks(500) {
        writer.append(batch).await?;
    }
    writer.flush().await?;
    Ok(writer)
}

/// Reads every page of `wanted`, each on the handle `handle` gives; checks the seqs.
async fn read_pages<F, Fut>(wanted: &[u64], handle: F) -> Result<f64>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(SessionHandle, bool)>>,
{
    let started = Instant::now();
    let mut read = 0;
    for page in wanted.chunks(READ_SEQS_MAX) {
        let (handle, close) = handle().await?;
        let events = handle.read_seqs(page).await?;
        if close {
            handle.close().await?;
        }
        assert!(events.iter().map(|event| event.seq.get()).eq(page.iter().copied()), "wrong events");
        read += events.len();
    }
    assert_eq!(read, wanted.len());
    Ok(started.elapsed().as_secs_f64() * 1e3)
}

fn report(variant: &str, mut timings: Vec<f64>) {
    timings.sort_by(f64::total_cmp);
    println!(
        "{variant:<24} median {:>8.2} ms   min {:>8.2} ms   ({} rounds, {} seqs {STRIDE} apart of {EVENTS})",
        timings[timings.len() / 2],
        timings[0],
        timings.len(),
        EVENTS / STRIDE,
    );
}

async fn run(rounds: usize, pg_url: Option<String>) -> Result<()> {
    let wanted = wanted();
    let dir = tempfile::tempdir().map_err(|error| berth_core::Error::io("tempdir", &error))?;
    let (jsonl, _) = jsonl_store_unsynced(dir.path())?;
    let writer = write_log(&jsonl, "read-seqs-jsonl").await?;
    let key = writer.key().clone();
    let memory = memory_store();
    let memory_writer = write_log(&memory, "read-seqs-memory").await?;
    let memory_key = memory_writer.key().clone();
    let postgres = match &pg_url {
        Some(url) => {
            let backend = berth_postgres::PostgresBackend::connect(url, Default::default()).await?;
            backend.migrate().await?;
            let store = LogStore::new(std::sync::Arc::new(backend));
            let id = berth_bench::fixtures::unique_id("read-seqs-pg");
            let pg_writer = write_log(&store, &id).await?;
            let pg_key = pg_writer.key().clone();
            pg_writer.close().await?;
            Some((store, pg_key))
        }
        None => None,
    };
    let (mut cold, mut warm, mut in_memory, mut pg) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        cold.push(read_pages(&wanted, || async { Ok((jsonl.open(&key, Access::Read).await?, true)) }).await?);
        warm.push(read_pages(&wanted, || async { Ok((writer.clone(), false)) }).await?);
        in_memory
            .push(read_pages(&wanted, || async { Ok((memory.open(&memory_key, Access::Read).await?, true)) }).await?);
        if let Some((store, pg_key)) = &postgres {
            pg.push(read_pages(&wanted, || async { Ok((store.open(pg_key, Access::Read).await?, true)) }).await?);
        }
    }
    report("jsonl cold reader", cold);
    report("jsonl warm writer", warm);
    report("memory reader", in_memory);
    if !pg.is_empty() {
        report("postgres cold reader", pg);
    }
    writer.close().await?;
    memory_writer.close().await?;
    Ok(())
}
