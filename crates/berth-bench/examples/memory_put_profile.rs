//! Durable memory puts on the embedded catalog, timed one by one over W8's seeded
//! namespace (a profiling aid for issue 11's put row; `perf record -g` around it):
//! mean, p50 and p99 of `PUTS` new keys after `ITEMS` imported items.
//!
//!     cargo run --release -p berth-bench --example memory_put_profile -- DIR [ITEMS] [PUTS] [berth|plain]
//!
//! Sustained puts, beside the reference: `plain` runs the same loop on W8's plain
//! SQLite table (`synchronous=FULL`, an upsert per put). For berth, the search rows the
//! indexing thread had not written when the loop ended are then written by one search
//! (timed), and `with catch-up` is the mean a put including that share: the loop's own
//! time cannot hide work left for later.
//!
//! Instructions of the puts alone, without the seeding (repeatable on a noisy machine):
//!
//!     valgrind --tool=callgrind --toggle-collect='*memory_put::*' \
//!         target/release/examples/memory_put_profile DIR 20000 640

use berth_bench::fixtures::cpu_time;
use berth_bench::workloads::memory::{plain_table, quota, seeded_catalog, value, NAMESPACE};
use berth_catalog::scoped::{MemoryPut, MemorySearch, Namespace, TextQuery};
use berth_catalog::MemoryStore;
use berth_core::Timestamp;
use std::time::Instant;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().expect("DIR");
    let items: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let puts: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5_000);
    let plain = args.next().as_deref() == Some("plain");
    let temp = tempfile::tempdir_in(dir).expect("tempdir");
    if plain {
        return plain_puts(temp.path(), items, puts);
    }
    let path = temp.path().join(berth_sqlite::CATALOG_FILE_NAME);
    let (catalog, tenant) = seeded_catalog(&path, items).await.expect("seeded");
    let mut samples = Vec::with_capacity(puts);
    let started = Instant::now();
    let cpu_started = cpu_time();
    for i in 0..puts {
        let put = MemoryPut {
            namespace: Namespace::parse(NAMESPACE).expect("namespace"),
            key: format!("put-{i:08}"),
            value: value(i),
            expected_revision: None,
            ttl_ms: None,
            bound_to: None,
        };
        let one = Instant::now();
        catalog.memory_put(&tenant, &put, Timestamp(20_000_000), &quota()).await.expect("put");
        samples.push(one.elapsed().as_secs_f64() * 1e6);
    }
    let total = started.elapsed().as_secs_f64() * 1e6 / puts as f64;
    let cpu = (cpu_time() - cpu_started).as_secs_f64() * 1e6 / puts as f64;
    // A full-text search reads the search rows: it first writes those still missing.
    let search = MemorySearch {
        query: Some(TextQuery::parse("zzz").expect("query")),
        ..MemorySearch::new(Namespace::parse(NAMESPACE).expect("namespace"))
    };
    let caught = Instant::now();
    catalog.memory_search(&tenant, &search, Timestamp(20_000_000)).await.expect("search");
    let catch_up = caught.elapsed().as_secs_f64() * 1e6;
    let with = total + catch_up / puts as f64;
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    println!(
        "berth puts {puts}: mean {total:.0} µs, p50 {:.0} µs, p99 {:.0} µs, CPU {cpu:.0} µs a put; \
         then a search caught up in {:.1} ms: with catch-up {with:.0} µs a put",
        at(0.5),
        at(0.99),
        catch_up / 1000.0
    );
}

/// The same loop on the reference: W8's plain table, an upsert per put.
fn plain_puts(dir: &std::path::Path, items: usize, puts: usize) {
    let seeded: Vec<_> = (0..items).map(berth_bench::workloads::memory::item).collect();
    let connection = plain_table(&dir.join("plain.sqlite"), &seeded).expect("plain table");
    let mut samples = Vec::with_capacity(puts);
    let started = Instant::now();
    let cpu_started = cpu_time();
    for i in 0..puts {
        let one = Instant::now();
        connection
            .prepare_cached(
                "INSERT INTO kv (ns, key, value) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value",
            )
            .expect("prepare")
            .execute((NAMESPACE, format!("put-{i:08}"), value(i).as_str()))
            .expect("upsert");
        samples.push(one.elapsed().as_secs_f64() * 1e6);
    }
    let total = started.elapsed().as_secs_f64() * 1e6 / puts as f64;
    let cpu = (cpu_time() - cpu_started).as_secs_f64() * 1e6 / puts as f64;
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    println!(
        "plain puts {puts}: mean {total:.0} µs, p50 {:.0} µs, p99 {:.0} µs, CPU {cpu:.0} µs a put",
        at(0.5),
        at(0.99)
    );
}
