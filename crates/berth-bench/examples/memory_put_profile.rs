//! Durable memory puts on the embedded catalog, timed one by one over W8's seeded
//! namespace (a profiling aid for issue 11's put row; `perf record -g` around it):
//! mean, p50 and p99 of `PUTS` new keys after `ITEMS` imported items.
//!
//!     cargo run --release -p berth-bench --example memory_put_profile -- DIR [ITEMS] [PUTS]
//!
//! Instructions of the puts alone, without the seeding (repeatable on a noisy machine):
//!
//!     valgrind --tool=callgrind --toggle-collect='*memory_put::*' \
//!         target/release/examples/memory_put_profile DIR 20000 640

use berth_bench::fixtures::cpu_time;
use berth_bench::workloads::memory::{quota, seeded_catalog, value, NAMESPACE};
use berth_catalog::scoped::{MemoryPut, Namespace};
use berth_catalog::MemoryStore;
use berth_core::Timestamp;
use std::time::Instant;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().expect("DIR");
    let items: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let puts: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5_000);
    let temp = tempfile::tempdir_in(dir).expect("tempdir");
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
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    println!("puts {puts}: mean {total:.0} µs, p50 {:.0} µs, p99 {:.0} µs, CPU {cpu:.0} µs a put", at(0.5), at(0.99));
}
