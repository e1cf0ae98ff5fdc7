//! Scoped memory at scale (issue 11's targets; `berth bench`'s W8 runs the same shapes on
//! the embedded catalog, interleaved with its reference): ITEMS items in one namespace of one
//! tenant, then the median of repeated search pages of 50 (unfiltered, filtered at
//! several selectivities, full text with a rare and a common term, in key and relevance
//! order), and durable puts beside a plain SQLite `synchronous=FULL` upsert of the
//! same bytes. On SQLite (DIR/catalog.sqlite), and with `--pg` on PostgreSQL: a
//! scratch database on the test server (`BERTH_TEST_PG`, default 127.0.0.1:5432), served
//! through an app role so row-level security binds every statement; dropped at the end.
//!
//! `cargo run -p berth-bench --example memory_bench -- DIR [ITEMS] [--pg] [--no-sqlite]`

use berth_bench::workloads::memory::{forget_audit, item, quota, shapes, value, NAMESPACE};
use berth_catalog::scoped::{MemoryItem, MemoryPut, Namespace};
use berth_catalog::MemoryStore;
use berth_core::{TenantId, Timestamp};
use std::time::Instant;

const ROUNDS: usize = 30;
const PUTS: usize = 200;

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

async fn measure(store: &dyn MemoryStore, tenant: &TenantId, label: &str, items: usize) {
    println!("== {label}");
    for shape in shapes(items) {
        let (name, search) = (shape.name, shape.search);
        let mut samples = Vec::with_capacity(ROUNDS);
        let mut found = 0;
        for _ in 0..ROUNDS {
            let started = Instant::now();
            found = store.memory_search(tenant, &search, Timestamp(10_000_000)).await.expect("search").len();
            samples.push(started.elapsed().as_secs_f64() * 1e3);
        }
        println!("{name}: median {:.2} ms ({found} items)", median(samples));
    }
    let mut samples = Vec::with_capacity(PUTS);
    for i in 0..PUTS {
        let write = MemoryPut {
            namespace: Namespace::parse(NAMESPACE).expect("namespace"),
            key: format!("put-{i}"),
            value: value(i),
            expected_revision: None,
            ttl_ms: None,
            bound_to: None,
        };
        let started = Instant::now();
        store.memory_put(tenant, &write, Timestamp(20_000_000), &quota()).await.expect("put");
        samples.push(started.elapsed().as_secs_f64() * 1e3);
    }
    println!("durable put (new key): median {:.2} ms over {PUTS}", median(samples));
    let namespace = Namespace::parse(NAMESPACE).expect("namespace");
    let mut samples = Vec::with_capacity(PUTS);
    for i in 0..PUTS {
        let key = format!("item-{:08}", (i * 7919) % 1_000);
        let started = Instant::now();
        let found = store.memory_get(tenant, &namespace, &key, Timestamp(20_000_000), false).await.expect("get");
        samples.push(started.elapsed().as_secs_f64() * 1e3);
        assert!(found.is_some(), "{key}");
    }
    println!("get (existing key): median {:.3} ms over {PUTS}", median(samples));
    // `forget` of a 10,000-item scope: one statement in SQL, nothing loaded into memory.
    let scope: Vec<MemoryItem> = (0..10_000)
        .map(|i| MemoryItem { namespace: Namespace::parse("user/forgotten/notes").expect("namespace"), ..item(i) })
        .collect();
    for chunk in scope.chunks(2_000) {
        for entry in chunk {
            store.memory_import(tenant, entry, &quota()).await.expect("seed forget scope");
        }
    }
    let audit = forget_audit(tenant);
    let started = Instant::now();
    let (outcome, _) =
        store.memory_forget(tenant, &Namespace::parse("user/forgotten").expect("prefix"), audit).await.expect("forget");
    println!("forget of a {}-item scope: {:.1} ms", outcome.items, started.elapsed().as_secs_f64() * 1e3);
}

/// The reference for gets: point reads of the plain table's rows by primary key.
fn plain_sqlite_gets(dir: &std::path::Path) -> f64 {
    let connection = rusqlite::Connection::open(dir.join("plain.sqlite")).expect("open");
    let mut statement = connection.prepare("SELECT value FROM kv WHERE ns = ?1 AND key = ?2").expect("prepare");
    let mut samples = Vec::with_capacity(PUTS);
    for i in 0..PUTS {
        let key = format!("put-{}", (i * 7919) % PUTS);
        let started = Instant::now();
        let value: String = statement.query_row((NAMESPACE, key), |row| row.get(0)).expect("get");
        samples.push(started.elapsed().as_secs_f64() * 1e3);
        assert!(!value.is_empty());
    }
    median(samples)
}

/// The reference: the same rows upserted into a plain WAL table with
/// `synchronous=FULL`, one transaction each.
fn plain_sqlite_puts(dir: &std::path::Path) -> f64 {
    let connection = rusqlite::Connection::open(dir.join("plain.sqlite")).expect("open");
    connection.pragma_update(None, "journal_mode", "WAL").expect("wal");
    connection.pragma_update(None, "synchronous", "FULL").expect("full");
    connection
        .execute_batch("CREATE TABLE IF NOT EXISTS kv (ns TEXT, key TEXT, value TEXT, PRIMARY KEY (ns, key))")
        .expect("table");
    let mut samples = Vec::with_capacity(PUTS);
    for i in 0..PUTS {
        let started = Instant::now();
        connection
            .execute(
                "INSERT INTO kv (ns, key, value) VALUES (?1, ?2, ?3) ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value",
                (NAMESPACE, format!("put-{i}"), value(i).as_str()),
            )
            .expect("upsert");
        samples.push(started.elapsed().as_secs_f64() * 1e3);
    }
    median(samples)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| "/tmp/berth-memory-bench".into()));
    let mut items = 100_000usize;
    let (mut postgres, mut sqlite) = (false, true);
    for arg in args {
        match arg.as_str() {
            "--pg" => postgres = true,
            "--no-sqlite" => sqlite = false,
            count => items = count.parse().expect("ITEMS is a count"),
        }
    }
    std::fs::create_dir_all(&dir).expect("data directory");
    let tenant = TenantId::parse("bench").expect("tenant");
    let all: Vec<MemoryItem> = (0..items).map(item).collect();

    if sqlite {
        let path = dir.join(berth_sqlite::CATALOG_FILE_NAME);
        for stale in ["", "-wal", "-shm", "-search", "-search-wal", "-search-shm"] {
            let _ = std::fs::remove_file(format!("{}{stale}", path.display()));
        }
        let _ = std::fs::remove_file(dir.join("plain.sqlite"));
        let sqlite = berth_sqlite::SqliteCatalog::open(&path).expect("open sqlite");
        let started = Instant::now();
        for chunk in all.chunks(10_000) {
            sqlite.memory_import_many(&tenant, chunk.to_vec(), &quota()).await.expect("seed sqlite");
        }
        println!("sqlite: seeded {items} items in {:.1} s", started.elapsed().as_secs_f64());
        measure(&sqlite, &tenant, &format!("sqlite, {items} items"), items).await;
        println!("plain sqlite FULL upsert: median {:.2} ms over {PUTS}", plain_sqlite_puts(&dir));
        println!("plain sqlite get by key: median {:.3} ms over {PUTS}", plain_sqlite_gets(&dir));
    }

    if postgres {
        let database = berth_postgres::testing::TestDatabase::with_app_role().await;
        let options = berth_postgres::PostgresOptions { pool_size: 2, ..Default::default() };
        let postgres =
            berth_postgres::PostgresCatalog::connect(&database.app_url(), options).await.expect("connect postgres");
        let started = Instant::now();
        for chunk in all.chunks(2_000) {
            postgres.memory_import_many(&tenant, chunk.to_vec(), &quota()).await.expect("seed postgres");
        }
        println!("postgres: seeded {items} items in {:.1} s", started.elapsed().as_secs_f64());
        if std::env::var_os("BERTH_BENCH_NO_ANALYZE").is_none() {
            database
                .client()
                .await
                .batch_execute("ANALYZE memory_items, memory_terms, memory_fields")
                .await
                .expect("analyze");
        }
        measure(&postgres, &tenant, &format!("postgres, {items} items"), items).await;
        drop(postgres);
        if std::env::var_os("BERTH_BENCH_KEEP").is_some() {
            // Kept for EXPLAIN: the database (and its app role) stay until dropped by hand.
            println!("kept database {} (app role {})", database.name(), database.app_role());
            std::mem::forget(database);
        } else {
            drop(database);
        }
    }
}
