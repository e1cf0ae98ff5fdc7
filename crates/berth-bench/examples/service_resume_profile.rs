//! A service resume (attach, read the whole log, repair, report the checkpoint) of a
//! long session, then its detach, timed: what a framework's first call on a session
//! costs (a fresh `BerthSession`'s `get_items`, a `BerthSaver`'s resume). A profiling
//! aid, not a benchmark with targets:
//!
//!     cargo run --release -p berth-bench --example service_resume_profile -- [DIR] [EVENTS] [ROUNDS]
//!     valgrind --tool=callgrind --toggle-collect='*repair_after_attach*' \
//!         target/release/examples/service_resume_profile DIR 10000 3

use berth_core::SessionId;
use berth_service::{AppendRequest, AttachRequest, CreateSession, NewEvent};
use std::time::Instant;

fn main() -> berth_core::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().map(std::path::PathBuf::from);
    let events: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let temp = tempfile::tempdir_in(dir.unwrap_or_else(std::env::temp_dir))
        .map_err(|e| berth_core::Error::io("tempdir", &e))?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let principal = berth_bench::fixtures::service_principal();
    let service = runtime.block_on(berth_bench::loadgen::open_service(&temp.path().join("service")))?;
    let id = SessionId::parse("long")?;
    runtime.block_on(service.create(&principal, CreateSession { id: Some(id.clone()), ..CreateSession::default() }))?;
    // A chat's shape: user and assistant messages of ~1 KiB, as the drop-ins store them.
    let message = |n: usize| {
        let (kind, role) =
            if n.is_multiple_of(2) { ("user/message", "user") } else { ("assistant/message", "assistant") };
        let item = serde_json::json!({"role": role, "type": "message", "content": "x".repeat(1000)});
        NewEvent::new(kind, serde_json::json!({"content": "x".repeat(200), "item": item}))
    };
    for batch in 0..events.div_ceil(1000) {
        let count = 1000.min(events - batch * 1000);
        let request = AppendRequest {
            run: None,
            expected_seq: None,
            events: (0..count).map(|n| message(batch * 1000 + n)).collect(),
            idempotency_key: None,
            memory: Vec::new(),
        };
        runtime.block_on(service.append(&principal, &id, request))?;
    }
    let mut timings = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        let outcome = runtime.block_on(service.resume(&principal, &id, AttachRequest::default()))?;
        timings.push(started.elapsed().as_secs_f64() * 1000.0);
        let run = outcome.attachment.run.run_id;
        runtime.block_on(service.detach(&principal, &id, &run, "done", None))?;
    }
    timings.sort_by(f64::total_cmp);
    println!("resume of {events} events: median {:.1} ms, min {:.1} ms over {rounds}", timings[rounds / 2], timings[0]);
    Ok(())
}
