//! Profiling aid: writes a 10,000-event session once, then resumes it (open + read +
//! validate) in a loop, so `perf record` / callgrind see only the read path.
//!
//! `cargo run --release -p berth-bench --example resume_profile -- DIR [ROUNDS]`

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| "/tmp/berth-resume-profile".into()));
    let rounds: usize = args.next().and_then(|text| text.parse().ok()).unwrap_or(50);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let timings = runtime.block_on(berth_bench::profile_resume(&dir, 10_000, rounds)).expect("resume");
    let mut sorted = timings.clone();
    sorted.sort_by(f64::total_cmp);
    println!("rounds {rounds}: median {:.2} ms, min {:.2} ms", sorted[sorted.len() / 2], sorted[0]);
}
