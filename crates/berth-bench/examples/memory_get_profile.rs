//! Point gets of memory items on the embedded catalog beside a select by primary key on
//! a plain table of the same rows (a profiling aid for issue 11's get row: run it under
//! `valgrind --tool=callgrind`, whose counts do not move with the machine's load).
//!
//!     cargo run --release -p berth-bench --example memory_get_profile -- DIR [ITEMS] [GETS] [berth|plain|both]

use berth_bench::workloads::memory::{item, seeded_catalog, NAMESPACE};
use berth_catalog::scoped::{MemoryItem, Namespace};
use berth_catalog::MemoryStore;
use berth_core::Timestamp;
use std::time::Instant;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().expect("DIR");
    let items: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let gets: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let which = args.next().unwrap_or_else(|| "both".into());
    let temp = tempfile::tempdir_in(dir).expect("tempdir");
    let path = temp.path().join(berth_sqlite::CATALOG_FILE_NAME);
    let (catalog, tenant) = seeded_catalog(&path, items).await.expect("seeded");
    let all: Vec<MemoryItem> = (0..items).map(item).collect();
    let plain = berth_bench::fixtures::sqlite_open(&temp.path().join("plain.sqlite")).expect("plain");
    plain
        .execute_batch(
            "CREATE TABLE kv (ns TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (ns, key))",
        )
        .expect("table");
    plain.execute_batch("BEGIN").expect("begin");
    for item in &all {
        plain
            .execute("INSERT INTO kv VALUES (?1, ?2, ?3)", (item.namespace.as_str(), &item.key, item.value.as_str()))
            .expect("insert");
    }
    plain.execute_batch("COMMIT").expect("commit");
    let namespace = Namespace::parse(NAMESPACE).expect("namespace");
    let keys: Vec<String> = (0..gets).map(|get| format!("item-{:08}", (get * 7919) % items)).collect();
    if which != "plain" {
        let started = Instant::now();
        for key in &keys {
            let found = catalog.memory_get(&tenant, &namespace, key, Timestamp(10_000_000), false).await.expect("get");
            assert!(found.is_some());
        }
        println!("berth: {:.2} µs a get", started.elapsed().as_secs_f64() * 1e6 / gets as f64);
    }
    if which != "berth" {
        let started = Instant::now();
        for key in &keys {
            let mut statement =
                plain.prepare_cached("SELECT value FROM kv WHERE ns = ?1 AND key = ?2").expect("prepare");
            let value: String = statement.query_row((NAMESPACE, key), |row| row.get(0)).expect("get");
            assert!(!value.is_empty());
        }
        println!("plain: {:.2} µs a get", started.elapsed().as_secs_f64() * 1e6 / gets as f64);
    }
}
