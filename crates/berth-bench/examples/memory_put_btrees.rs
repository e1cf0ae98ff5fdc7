//! What a durable put costs by the number of B-trees its transaction writes (issue 11's
//! put row: berth's put writes five where W8's reference upsert writes two). Plain SQLite,
//! WAL, `synchronous=FULL`, no berth code: seven tables of `ITEMS` seeded rows, each put
//! one `BEGIN IMMEDIATE` … `COMMIT` of a new key with W8's value, in rounds of `PUTS`
//! interleaved across the seven so the disk's moods fall on all of them:
//!
//! - 2: the reference's shape, a rowid table with a unique `(ns, key)` index;
//! - 3: and an updated-order index (berth's `memory_items_by_updated`);
//! - 4: and a per-tenant usage row changed by every put (`memory_usage`);
//! - 5: and a queue row of the item waiting for its search rows (`memory_unindexed`;
//!   `memory_changes` from schema V9);
//!
//! all in SQLite's default 4,096-byte pages, and then 5 in 2,048- and 1,024-byte pages
//! and 2 in 1,024-byte pages: a commit's WAL frames are whole pages, so smaller pages
//! write fewer bytes for the same rows. Last, 5 and 2 *journaled*: committed with
//! `synchronous=NORMAL` (no fsync) after the put's entry (~1 KiB of JSON) is written
//! into a zero-filled journal file and `fdatasync`ed, and a journal row (its sequence
//! and offset) updated in the transaction: the redo log a put could be made durable by
//! instead of the WAL's sync.
//!
//! Prints the median µs a put and its ratio to the first (the reference's shape and
//! page size; throughput, as `berth bench` reports W8's put), over `ROUNDS` rounds.
//!
//!     cargo run --release -p berth-bench --example memory_put_btrees -- DIR [ITEMS] [PUTS] [ROUNDS]

use berth_bench::median;
use berth_bench::workloads::memory::{value, NAMESPACE};
use berth_bench::workloads::rotation;
use std::time::Instant;

fn table(
    path: &std::path::Path,
    btrees: usize,
    page_size: usize,
    items: usize,
    journaled: bool,
) -> rusqlite::Connection {
    let mut connection = rusqlite::Connection::open(path).expect("open");
    let synchronous = if journaled { "NORMAL" } else { "FULL" };
    connection
        .execute_batch(&format!(
            "PRAGMA page_size={page_size}; PRAGMA journal_mode=WAL; PRAGMA synchronous={synchronous};"
        ))
        .expect("pragmas");
    if journaled {
        connection
            .execute_batch("CREATE TABLE journal (id INTEGER PRIMARY KEY, seq INTEGER NOT NULL, offset INTEGER NOT NULL); INSERT INTO journal VALUES (1, 0, 0);")
            .expect("journal row");
    }
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

/// A journal file, zero-filled and synced once, so an entry's fdatasync writes data only.
struct Journal {
    file: std::fs::File,
    offset: u64,
}

impl Journal {
    fn new(path: &std::path::Path) -> Journal {
        let file =
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path).expect("journal");
        std::io::Write::write_all(&mut &file, &vec![0u8; 8 << 20]).expect("zeros");
        file.sync_all().expect("sync");
        Journal { file, offset: 0 }
    }

    fn append(&mut self, bytes: &[u8]) {
        use std::os::unix::fs::FileExt;
        if self.offset + bytes.len() as u64 > 8 << 20 {
            self.offset = 0;
        }
        self.file.write_all_at(bytes, self.offset).expect("entry");
        self.file.sync_data().expect("fdatasync");
        self.offset += bytes.len() as u64;
    }
}

/// One put in its own transaction. With a `journal`, its entry is written there and
/// `fdatasync`ed, and the journal row updated, before the commit (which is then NORMAL).
fn put(connection: &rusqlite::Connection, btrees: usize, journal: Option<&mut Journal>, i: usize) {
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
    if let Some(journal) = journal {
        let entry =
            format!("{{\"seq\":{i},\"ns\":\"{NAMESPACE}\",\"key\":\"put-{i:08}\",\"value\":{}}}\n", value.as_str());
        journal.append(entry.as_bytes());
        connection
            .prepare_cached("UPDATE journal SET seq = ?1, offset = ?2 WHERE id = 1")
            .expect("journal row")
            .execute((i as i64, journal.offset as i64))
            .expect("journal row");
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
    // (B-trees, page size, journaled: committed NORMAL after a journal entry's fdatasync)
    let shapes = [
        (2usize, 4096usize, false),
        (3, 4096, false),
        (4, 4096, false),
        (5, 4096, false),
        (5, 2048, false),
        (5, 1024, false),
        (2, 1024, false),
        (5, 4096, true),
        (2, 4096, true),
    ];
    let connections: Vec<_> = shapes
        .iter()
        .map(|&(btrees, page, journaled)| {
            table(&temp.path().join(format!("b{btrees}-{page}-{journaled}.sqlite")), btrees, page, items, journaled)
        })
        .collect();
    // A journal only for the journaled shapes (each is 8 MiB of zeros, synced).
    let mut journals: Vec<Option<Journal>> = shapes
        .iter()
        .enumerate()
        .map(|(index, shape)| shape.2.then(|| Journal::new(&temp.path().join(format!("j{index}")))))
        .collect();
    let mut samples = vec![Vec::new(); shapes.len()];
    let mut next = 0;
    for round in 0..rounds {
        // A different shape goes first each round.
        for index in rotation(shapes.len(), round) {
            let started = Instant::now();
            for _ in 0..puts {
                put(&connections[index], shapes[index].0, journals[index].as_mut(), next);
                next += 1;
            }
            samples[index].push(started.elapsed().as_secs_f64() * 1e6 / puts as f64);
        }
    }
    let reference = median(&samples[0]).expect("rounds");
    for (index, (btrees, page, journaled)) in shapes.iter().enumerate() {
        let us = median(&samples[index]).expect("rounds");
        println!(
            "{btrees} B-trees, {page} B pages, journaled {journaled}: median {us:.0} µs ({:.2}× the first)",
            reference / us
        );
    }
}
