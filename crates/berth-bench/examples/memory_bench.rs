//! Scoped memory at scale (issue 11's targets): ITEMS items in one namespace of one
//! tenant, then the median of repeated search pages of 50 (unfiltered, filtered at
//! several selectivities, full text with a rare and a common term, in key and relevance
//! order), and durable puts beside a plain SQLite `synchronous=FULL` upsert of the
//! same bytes. On SQLite (DIR/catalog.sqlite), and with `--pg` on PostgreSQL: a
//! scratch database on the test server (`BERTH_TEST_PG`, default 127.0.0.1:5432), served
//! through an app role so row-level security binds every statement; dropped at the end.
//!
//! `cargo run -p berth-bench --example memory_bench -- DIR [ITEMS] [--pg] [--no-sqlite]`

use berth_catalog::scoped::{Condition, Filter, FilterOp, MemoryItem, MemoryPut, MemoryQuota, MemorySearch};
use berth_catalog::scoped::{Namespace, SearchOrder, TextQuery};
use berth_catalog::MemoryStore;
use berth_core::{JsonText, TenantId, Timestamp};
use std::time::Instant;

const NAMESPACE: &str = "app/bench/items";
const ROUNDS: usize = 30;
const PUTS: usize = 200;

/// Item `i`: ten kinds (10 % each), `n` = i, `rare` on 1 % of items, eight words of a
/// 1,000-word vocabulary (each word on ~0.8 % of items) and `common` on a third.
fn value(i: usize) -> JsonText {
    let words: Vec<String> = (0..8).map(|w| format!("w{}", (i * 7 + w * 131) % 1_000)).collect();
    let common = if i.is_multiple_of(3) { " common" } else { "" };
    let text = format!(
        r#"{{"kind":"k{}","n":{i},"rare":{},"score":{}.{:02},"text":"{}{common}"}}"#,
        i % 10,
        i.is_multiple_of(100),
        i % 977,
        i % 100,
        words.join(" ")
    );
    JsonText::parse(&text).expect("bench value")
}

fn item(i: usize) -> MemoryItem {
    MemoryItem {
        namespace: Namespace::parse(NAMESPACE).expect("namespace"),
        key: format!("item-{i:08}"),
        value: value(i),
        revision: 1,
        created_at: Timestamp(1_000 + i as u64),
        updated_at: Timestamp(1_000 + i as u64),
        expires_at: None,
        ttl_ms: None,
        bound_to: None,
    }
}

fn condition(field: &str, op: FilterOp, operand: &str) -> Filter {
    let operand = JsonText::parse(operand).expect("operand");
    Filter::new(vec![Condition { field: field.into(), op, operand }]).expect("filter")
}

fn searches() -> Vec<(&'static str, MemorySearch)> {
    let base = || MemorySearch { limit: 50, ..MemorySearch::new(Namespace::parse("app/bench").expect("prefix")) };
    let text = |query: &str| Some(TextQuery::parse(query).expect("query"));
    vec![
        ("page, no filter (key order)", base()),
        ("page, no filter (updated order)", MemorySearch { order: SearchOrder::UpdatedAt, ..base() }),
        ("filter kind = k3 (10 %)", MemorySearch { filter: condition("kind", FilterOp::Eq, r#""k3""#), ..base() }),
        ("filter n >= 50000 (50 %)", MemorySearch { filter: condition("n", FilterOp::Gte, "50000"), ..base() }),
        ("filter rare = true (1 %)", MemorySearch { filter: condition("rare", FilterOp::Eq, "true"), ..base() }),
        ("full text, rare term (~0.8 %), key order", MemorySearch { query: text("w500"), ..base() }),
        (
            "full text, rare term, relevance",
            MemorySearch { query: text("w500"), order: SearchOrder::Relevance, ..base() },
        ),
        ("full text, common term (33 %), key order", MemorySearch { query: text("common"), ..base() }),
        (
            "full text, common term, relevance",
            MemorySearch { query: text("common"), order: SearchOrder::Relevance, ..base() },
        ),
        (
            "full text two terms + filter",
            MemorySearch { query: text("common w7"), filter: condition("kind", FilterOp::Ne, r#""k1""#), ..base() },
        ),
    ]
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

async fn measure(store: &dyn MemoryStore, tenant: &TenantId, label: &str) {
    println!("== {label}");
    for (name, search) in searches() {
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
    let audit = Box::new(|outcome: &berth_catalog::scoped::ForgetOutcome| berth_catalog::AuditDraft {
        tenant: TenantId::parse("bench").expect("tenant"),
        time: Timestamp(30_000_000),
        actor: "admin:bench".into(),
        action: "memory.forget".into(),
        session: None,
        revision: None,
        outcome: "ok".into(),
        details: serde_json::json!({"items": outcome.items, "bytes": outcome.bytes}),
    });
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

fn quota() -> MemoryQuota {
    MemoryQuota { items: 10_000_000, bytes: 1 << 40 }
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
        for stale in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{stale}", path.display()));
        }
        let _ = std::fs::remove_file(dir.join("plain.sqlite"));
        let sqlite = berth_sqlite::SqliteCatalog::open(&path).expect("open sqlite");
        let started = Instant::now();
        for chunk in all.chunks(10_000) {
            sqlite.memory_import_many(&tenant, chunk.to_vec(), &quota()).await.expect("seed sqlite");
        }
        println!("sqlite: seeded {items} items in {:.1} s", started.elapsed().as_secs_f64());
        measure(&sqlite, &tenant, &format!("sqlite, {items} items")).await;
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
        measure(&postgres, &tenant, &format!("postgres, {items} items")).await;
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
