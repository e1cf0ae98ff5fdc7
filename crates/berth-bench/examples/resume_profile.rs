//! Profiling aid: writes a 10,000-event session once, then runs W4 (resume: open, read
//! and validate, beside its references) in a loop, so `perf record` or callgrind see the
//! read path without the other workloads.
//!
//! `cargo run --release -p berth-bench --example resume_profile -- DIR [ROUNDS] [VARIANT]`

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| "/tmp/berth-resume-profile".into()));
    let rounds: usize = args.next().and_then(|text| text.parse().ok()).unwrap_or(50);
    // Only one variant (0 raw, 1 jsonl, 2 memory, 3 SQLite), to profile it alone.
    let only: Option<usize> = args.next().and_then(|text| text.parse().ok());
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let variants = runtime.block_on(berth_bench::profile_resume(&dir, 10_000, rounds, only)).expect("resume");
    for (variant, mut timings) in variants.into_iter().filter(|(_, timings)| !timings.is_empty()) {
        timings.sort_by(f64::total_cmp);
        println!(
            "{variant}: median {:.2} ms, min {:.2} ms over {rounds} rounds",
            timings[timings.len() / 2],
            timings[0]
        );
    }
}
