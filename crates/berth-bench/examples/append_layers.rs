//! Where a single durable embedded append spends its time, layer by layer, as the Python
//! package's embedded transport calls it: a foreign thread `block_on`s into a two-worker
//! runtime. Layers (interleaved rounds, medians of wall time and of the process's CPU
//! time per append):
//! - `service`: `SessionService::append` with an idempotency key;
//! - `keyless`: the same without a key;
//! - `carried`: the same carrying one memory write (`app/bench : state`, as ADK's
//!   `append_event` with an `app:` state delta);
//! - `in-process`: the same append as `POST /v1/sessions/{id}/events` through the
//!   server's router (`berth_server::in_process`), the JSON body the Python client sends.
//!
//!     cargo run --release -p berth-bench --example append_layers -- [DIR] [APPENDS] [ROUNDS] [LAYERS] [BATCH]
//!
//! `BATCH` events an append (default 1), each the same ~1 KiB user message.
//!
//! A profiling aid (`perf record -g` around it), not a benchmark with targets.

use berth_catalog::scoped::{MemoryPut, Namespace};
use berth_core::{JsonText, SessionId};
use berth_server::in_process::InProcessServer;
use berth_server::ServerConfig;
use berth_service::{AppendRequest, CreateSession, NewEvent};
use hyper::Method;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn item() -> serde_json::Value {
    serde_json::json!({"role": "user", "type": "message", "content": "x".repeat(1000)})
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() -> berth_core::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().map(std::path::PathBuf::from);
    let appends: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let only = args.next();
    let batch: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let layers: Vec<&str> = ["service", "keyless", "carried", "in-process"]
        .into_iter()
        .filter(|layer| only.as_deref().is_none_or(|o| o.contains(layer)))
        .collect();
    let temp = tempfile::tempdir_in(dir.unwrap_or_else(std::env::temp_dir))
        .map_err(|e| berth_core::Error::io("tempdir", &e))?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let principal = berth_bench::fixtures::service_principal();

    let service = runtime.block_on(berth_bench::loadgen::open_service(&temp.path().join("service")))?;
    let server = runtime.block_on(async {
        Arc::new(InProcessServer::start(
            ServerConfig { rate_limit: None, sweep_interval: None, ..ServerConfig::default() },
            service.clone(),
            None,
        ))
    });

    let create = |name: &str| -> berth_core::Result<SessionId> {
        let id = SessionId::parse(name)?;
        let request = CreateSession { id: Some(id.clone()), ..CreateSession::default() };
        runtime.block_on(service.create(&principal, request))?;
        Ok(id)
    };
    let service_id = create("service")?;
    let keyless_id = create("keyless")?;
    let carried_id = create("carried")?;
    let process_id = create("inprocess")?;
    let body = serde_json::to_vec(
        &serde_json::json!({"events": vec![serde_json::json!({"type": "user/message", "data": item()}); batch]}),
    )
    .expect("json");

    let mut wall: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    let mut cpu: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for round in 0..rounds {
        for &layer in &layers {
            let started = Instant::now();
            let cpu_started = berth_bench::fixtures::cpu_time();
            for n in 0..appends {
                let key = format!("k{round}-{n}-{layer}");
                match layer {
                    "service" | "keyless" | "carried" => {
                        let memory = match layer {
                            "carried" => vec![MemoryPut {
                                namespace: Namespace::parse("app/bench").expect("namespace"),
                                key: "state".into(),
                                value: JsonText::from(&serde_json::json!({"n": n})),
                                expected_revision: None,
                                ttl_ms: None,
                                bound_to: None,
                            }],
                            _ => Vec::new(),
                        };
                        let request = AppendRequest {
                            run: None,
                            expected_seq: None,
                            events: (0..batch).map(|_| NewEvent::new("user/message", item())).collect(),
                            idempotency_key: (layer != "keyless").then_some(key),
                            memory,
                        };
                        let id = match layer {
                            "service" => &service_id,
                            "carried" => &carried_id,
                            _ => &keyless_id,
                        };
                        runtime.block_on(service.append(&principal, id, request))?;
                    }
                    _ => {
                        // The key spliced in as text: the example's own JSON work stays out
                        // of the layer's time.
                        let mut keyed = format!("{{\"idempotency_key\":\"{key}\",").into_bytes();
                        keyed.extend_from_slice(&body[1..]);
                        let request = axum::http::Request::builder()
                            .method(Method::POST)
                            .uri(format!("/v1/sessions/{process_id}/events"))
                            .header("content-type", "application/json")
                            .body(axum::body::Body::from(keyed))
                            .expect("request");
                        let status = runtime.block_on(async {
                            let response = server.call(principal.clone(), request).await;
                            let status = response.status();
                            let _ = http_body_util::BodyExt::collect(response.into_body()).await;
                            status
                        });
                        assert!(status.is_success(), "{status}");
                    }
                }
            }
            let per = |d: Duration| d.as_secs_f64() * 1e6 / appends as f64;
            wall.entry(layer).or_default().push(per(started.elapsed()));
            cpu.entry(layer).or_default().push(per(berth_bench::fixtures::cpu_time() - cpu_started));
        }
    }
    println!("| layer | wall µs/append | CPU µs/append |");
    println!("|---|---|---|");
    for layer in &layers {
        println!("| {layer} | {:.0} | {:.0} |", median(wall[layer].clone()), median(cpu[layer].clone()));
    }
    runtime.block_on(server.shutdown())?;
    Ok(())
}
