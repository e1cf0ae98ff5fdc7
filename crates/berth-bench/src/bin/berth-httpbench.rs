//! `berth-httpbench`: the Rust HTTP client (`berth_server::client::Client`, hyper with a
//! keep-alive pool) running one workload against a given `berth serve`, so another
//! client of the same server — the Python package's benchmark (`python/bench`) — can be
//! measured beside it in the same run. It sends the request bodies it is given, byte
//! for byte, and prints one JSON line: `{"workload", "operations", "items", "seconds"}`.
//!
//! ```text
//! berth-httpbench --url http://127.0.0.1:7420 --key KEY --workload w1 --session s1 \
//!     --body-file append.json --count 2000
//! ```
//! Workloads: `w1`/`w2` append the body `--count` times to `--session` (one writer);
//! `w5` appends it `--count` times split over `--sessions` sessions named
//! `<session>-<n>`, `--writers` concurrent writers each; `w4` reads `--session` from
//! seq 0 to its end in pages of 1,000.

use berth_server::client::Client;
use hyper::Method;
use std::sync::Arc;
use std::time::Instant;

struct Options {
    url: String,
    key: String,
    workload: String,
    session: String,
    body: Vec<u8>,
    count: usize,
    sessions: usize,
    writers: usize,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        url: String::new(),
        key: String::new(),
        workload: String::new(),
        session: String::new(),
        body: Vec::new(),
        count: 1,
        sessions: 8,
        writers: 8,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || value.parse::<usize>().map_err(|error| format!("{flag} {value}: {error}"));
        match flag.as_str() {
            "--url" => options.url = value,
            "--key" => options.key = value,
            "--workload" => options.workload = value,
            "--session" => options.session = value,
            "--body-file" => options.body = std::fs::read(&value).map_err(|error| format!("{value}: {error}"))?,
            "--count" => options.count = number()?,
            "--sessions" => options.sessions = number()?.max(1),
            "--writers" => options.writers = number()?.max(1),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if options.url.is_empty()
        || options.session.is_empty()
        || !["w1", "w2", "w4", "w5"].contains(&options.workload.as_str())
    {
        return Err("usage: berth-httpbench --url URL --key KEY --workload w1|w2|w4|w5 --session ID [--body-file F] \
                    [--count N] [--sessions N] [--writers N]"
            .into());
    }
    Ok(options)
}

async fn append_times(client: &Client, session: &str, body: &[u8], times: usize) -> Result<(), String> {
    let path = format!("/v1/sessions/{session}/events");
    for _ in 0..times {
        let response = client.send(Method::POST, &path, Some(body.to_vec()), &[]).await.map_err(|e| e.to_string())?;
        if response.status != 200 {
            return Err(format!("append answered {}: {}", response.status, String::from_utf8_lossy(&response.body)));
        }
    }
    Ok(())
}

async fn read_all(client: &Client, session: &str) -> Result<usize, String> {
    let id = berth_core::SessionId::parse(session).map_err(|error| error.to_string())?;
    let mut from = 0;
    loop {
        let events = client.read(&id, from, Some(1000)).await.map_err(|error| error.to_string())?;
        from += events.len() as u64;
        if events.len() < 1000 {
            return Ok(from as usize);
        }
    }
}

async fn run(options: Options) -> Result<(usize, usize, f64), String> {
    let client = Arc::new(Client::new(&options.url, Some(options.key.clone())).map_err(|error| error.to_string())?);
    let started = Instant::now();
    let (operations, items) = match options.workload.as_str() {
        "w4" => (1, read_all(&client, &options.session).await?),
        "w5" => {
            let per_writer = options.count / (options.sessions * options.writers);
            let mut tasks = Vec::new();
            for session in 0..options.sessions {
                for _ in 0..options.writers {
                    let (client, body) = (client.clone(), options.body.clone());
                    let session = format!("{}-{session}", options.session);
                    tasks.push(tokio::spawn(async move { append_times(&client, &session, &body, per_writer).await }));
                }
            }
            for task in tasks {
                task.await.map_err(|error| error.to_string())??;
            }
            let operations = per_writer * options.sessions * options.writers;
            (operations, operations)
        }
        _ => {
            append_times(&client, &options.session, &options.body, options.count).await?;
            (options.count, options.count)
        }
    };
    Ok((operations, items, started.elapsed().as_secs_f64()))
}

fn main() {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let workload = options.workload.clone();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("berth-httpbench: {error}");
            std::process::exit(1);
        }
    };
    match runtime.block_on(run(options)) {
        Ok((operations, items, seconds)) => println!(
            "{}",
            serde_json::json!({"workload": workload, "operations": operations, "items": items, "seconds": seconds})
        ),
        Err(message) => {
            eprintln!("berth-httpbench: {message}");
            std::process::exit(1);
        }
    }
}
