//! The strict minifier's speed on a batch like a drop-in's (`berth_core::json::minify_strict`):
//! 100 OpenAI-style message items of ~1 KiB each (the `ITEM` of `python/bench/bench.py`,
//! verbatim inside the event data as `BerthSession` stores it), minified one by one, as an
//! append does; and the same 100 data as a request body's array of `JsonText`s,
//! deserialized (serde_json's read, then the minifier). Prints the medians of `ROUNDS`
//! rounds in µs per batch and per item, and MB/s.
//!
//!     cargo run --release -p berth-bench --example minify_speed [-- ROUNDS]

use std::time::Instant;

fn main() {
    let rounds: usize = std::env::args().nth(1).map_or(21, |text| text.parse().expect("ROUNDS is a count"));
    let content: String = "The quick brown fox jumps over the lazy dog. ".repeat(23).chars().take(1000).collect();
    let item = serde_json::json!({"role": "user", "content": content, "type": "message"});
    let data = serde_json::json!({"content": content, "item": item}).to_string();
    let batch: Vec<&[u8]> = (0..100).map(|_| data.as_bytes()).collect();
    let bytes: usize = batch.iter().map(|text| text.len()).sum();
    let mut micros = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        for _ in 0..100 {
            for text in &batch {
                std::hint::black_box(berth_core::json::minify_strict(text).expect("valid"));
            }
        }
        micros.push(started.elapsed().as_secs_f64() * 1e6 / 100.0);
    }
    report("minify_strict", bytes, &mut micros);
    let body = format!("[{}]", vec![data.as_str(); 100].join(","));
    let mut micros = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        for _ in 0..100 {
            let texts: Vec<berth_core::JsonText> = serde_json::from_str(&body).expect("valid");
            std::hint::black_box(texts);
        }
        micros.push(started.elapsed().as_secs_f64() * 1e6 / 100.0);
    }
    report("a body's Vec<JsonText>, deserialized", body.len(), &mut micros);
}

fn report(what: &str, bytes: usize, micros: &mut [f64]) {
    micros.sort_by(f64::total_cmp);
    let batch_us = micros[micros.len() / 2];
    println!(
        "{what}, a batch of 100 items ({bytes} bytes): median {batch_us:.1} µs a batch, {:.2} µs an item, {:.0} MB/s",
        batch_us / 100.0,
        bytes as f64 / batch_us
    );
}
