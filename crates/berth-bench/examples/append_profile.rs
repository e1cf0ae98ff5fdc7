//! Profiling aid: W1 alone (durable single-event appends to one JSONL session), so
//! `strace -f -c` or `perf` see the append path without the other workloads.
//!
//! `cargo run --release -p berth-bench --example append_profile -- DIR [APPENDS]`

use berth_bench::{fixtures, payload::chat_event};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| "/tmp/berth-append-profile".into()));
    let appends: u64 = args.next().and_then(|text| text.parse().ok()).unwrap_or(2_000);
    std::fs::create_dir_all(&dir).expect("data directory");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let mut latencies = runtime.block_on(async {
        let store = fixtures::jsonl_store(&dir).expect("store");
        let handle = store.create(fixtures::header(&fixtures::unique_id("p"))).await.expect("create");
        handle.flush().await.expect("materialize");
        let mut latencies = Vec::with_capacity(appends as usize);
        for seq in 0..appends {
            let event = chat_event(seq);
            let started = Instant::now();
            handle.append(std::slice::from_ref(&event)).await.expect("append");
            latencies.push(started.elapsed().as_secs_f64() * 1e6);
        }
        handle.close().await.expect("close");
        latencies
    });
    let mut raw = raw_appends(&dir, appends);
    for (label, latencies) in [("berth jsonl", &mut latencies), ("raw write+fdatasync", &mut raw)] {
        latencies.sort_by(f64::total_cmp);
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
        println!("{label}: {appends} appends, p50 {:.0} µs, p99 {:.0} µs", at(0.5), at(0.99));
    }
}

/// The reference: the same bytes appended to a plain file, `fdatasync` each time.
fn raw_appends(dir: &std::path::Path, appends: u64) -> Vec<f64> {
    use std::io::Write;
    let path = dir.join("raw.jsonl");
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path).expect("raw file");
    let latencies = (0..appends)
        .map(|seq| {
            let line = berth_bench::payload::chat_line(seq);
            let started = Instant::now();
            file.write_all(&line).expect("write");
            file.sync_data().expect("fdatasync");
            started.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    std::fs::remove_file(path).expect("remove raw file");
    latencies
}
