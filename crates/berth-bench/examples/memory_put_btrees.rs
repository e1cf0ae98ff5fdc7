//! What a durable put costs by the number of B-trees its transaction writes (issue 11's
//! put row: berth's put writes five where W8's reference upsert writes two). Plain SQLite,
//! WAL, `synchronous=FULL`, no berth code: seven tables of `ITEMS` seeded rows, each put
//! one `BEGIN IMMEDIATE` … `COMMIT` of a new key with W8's value, in rounds of `PUTS`
//! interleaved across the seven so the disk's moods fall on all of them:
//!
//! - 2: the reference's shape, a rowid table with a unique `(ns, key)` index;
//! - 3: and an updated-order index (berth's `memory_items_by_updated`);
//! - 4: and a per-tenant usage row changed by every put (`memory_usage`);
//! - 5: and a queue row of the item waiting for its search rows (`memory_unindexed`);
//!
//! all in SQLite's default 4,096-byte pages, and then 5 in 2,048- and 1,024-byte pages
//! and 2 in 1,024-byte pages: a commit's WAL frames are whole pages, so smaller pages
//! write fewer bytes for the same rows.
//!
//! Prints the median µs a put and its ratio to the first (the reference's shape and
//! page size; throughput, as `berth bench` reports W8's put), over `ROUNDS` rounds.
//!
//!     cargo run --release -p berth-bench --example memory_put_btrees -- DIR [ITEMS] [PUTS] [ROUNDS]

use berth_bench::median;
use berth_bench::workloads::memory::{value, NAMESPACE};
use berth_bench::workloads::rotation;
use std::time::Instant;

fn table(path: &std::path::Path, btrees: usize, page_size: usize, items: usize) -> rusqlite::Connection {
    let mut connection = rusqlite::Connection::open(path).expect("open");
    connection
        .execute_batch(&format!("PRAGMA page_size={page_size}; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"))
        .expect("pragmas");
    connection
        .execute_batch(
            "CREATE TABLE kv (id INTEGER PRIMARY KEY, ns TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
                              updated_at INTEGER NOT NULL, UNIQUE (ns, key));",
        )
        .expect("table");
    if btrees >= 3 {
        connection.execute_batch("CREATE INDEX kv_by_updated ON kv (updated_at DESC, ns, key);").expect("index");
    }
    if btrees >= 4 {
        connection
            .execute_batch(
                "CREATE TABLE usage (tenant TEXT NOT NULL PRIMARY KEY, items INTEGER NOT NULL, bytes INTEGER NOT NULL)
                 WITHOUT ROWID; INSERT INTO usage VALUES ('t', 0, 0);",
            )
            .expect("usage");
    }
    if btrees >= 5 {
        connection.execute_batch("CREATE TABLE unindexed (item INTEGER PRIMARY KEY);").expect("queue");
    }
    let transaction = connection.transaction().expect("seed");
    for i in 0..items {
        transaction
            .execute(
                "INSERT INTO kv (ns, key, value, updated_at) VALUES (?1, ?2, ?3, ?4)",
                (NAMESPACE, format!("item-{i:08}"), value(i).as_str(), i as i64),
            )
            .expect("seed row");
    }
    transaction.commit().expect("seeded");
    connection
}

fn put(connection: &rusqlite::Connection, btrees: usize, i: usize) {
    let value = value(i);
    connection.execute_batch("BEGIN IMMEDIATE").expect("begin");
    connection
        .prepare_cached("INSERT INTO kv (ns, key, value, updated_at) VALUES (?1, ?2, ?3, ?4)")
        .expect("insert")
        .execute((NAMESPACE, format!("put-{i:08}"), value.as_str(), 1_000_000 + i as i64))
        .expect("put");
    if btrees >= 4 {
        connection
            .prepare_cached("UPDATE usage SET items = items + 1, bytes = bytes + ?1 WHERE tenant = 't'")
            .expect("usage")
            .execute([value.as_str().len() as i64])
            .expect("usage row");
    }
    if btrees >= 5 {
        connection
            .prepare_cached("INSERT INTO unindexed (item) VALUES (last_insert_rowid())")
            .expect("queue")
            .execute([])
            .expect("queue row");
    }
    connection.execute_batch("COMMIT").expect("commit");
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().expect("DIR");
    let items: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let puts: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(500);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);
    let temp = tempfile::tempdir_in(dir).expect("tempdir");
    // (B-trees, page size)
    let shapes = [(2usize, 4096usize), (3, 4096), (4, 4096), (5, 4096), (5, 2048), (5, 1024), (2, 1024)];
    let connections: Vec<_> = shapes
        .iter()
        .map(|&(btrees, page)| table(&temp.path().join(format!("b{btrees}-{page}.sqlite")), btrees, page, items))
        .collect();
    let mut samples = vec![Vec::new(); shapes.len()];
    let mut next = 0;
    for round in 0..rounds {
        // A different shape goes first each round.
        for index in rotation(shapes.len(), round) {
            let started = Instant::now();
            for _ in 0..puts {
                put(&connections[index], shapes[index].0, next);
                next += 1;
            }
            samples[index].push(started.elapsed().as_secs_f64() * 1e6 / puts as f64);
        }
    }
    let reference = median(&samples[0]).expect("rounds");
    for (index, (btrees, page)) in shapes.iter().enumerate() {
        let us = median(&samples[index]).expect("rounds");
        println!("{btrees} B-trees, {page} B pages: median {us:.0} µs ({:.2}× the first)", reference / us);
    }
}
