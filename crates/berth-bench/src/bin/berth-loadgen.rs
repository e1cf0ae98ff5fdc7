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
//! cargo run --release -p berth-bench --bin berth-loadgen -- --clients 32 --sessions 8,64
//! ```

use berth_bench::loadgen::{measure, Figures, LoadOptions, Mode};
use std::path::PathBuf;

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
                let load = LoadOptions {
                    clients: options.clients,
                    sessions,
                    seconds: options.seconds,
                    warmup_seconds: options.warmup_seconds,
                };
                let figures = match runtime.block_on(measure(mode, &load, &root)) {
                    Ok(figures) => figures,
                    Err(error) => {
                        eprintln!("berth-loadgen: {error}");
                        std::process::exit(1);
                    }
                };
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
