//! PostgreSQL backend figures beside the database's own limit on this machine (a plain
//! `INSERT` loop with the same durability: `synchronous_commit = on`, one commit per
//! append), rounds interleaved, medians printed as a Markdown table.
//!
//! ```text
//! cargo run --release -p berth-postgres --example pg_bench            # full
//! BERTH_PG_BENCH_QUICK=1 cargo run --release -p berth-postgres --example pg_bench
//! ```
//!
//! Uses a database of its own on the server named by `BERTH_TEST_PG`, dropped at the end;
//! berth connects as that database's app role, so row-level security is on.

use berth_catalog::{Catalog, ListCursor, SessionQuery};
use berth_core::{Event, Scope, SessionHeader, SessionId, SessionKey, TenantId, Timestamp, UserId};
use berth_postgres::testing::{tokio_postgres::Client, TestDatabase};
use berth_postgres::{PostgresBackend, PostgresOptions};
use berth_store::LogBackend;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROUNDS: usize = 3;

struct Sizes {
    single_appends: u64,
    bulk_events: u64,
    resume_events: u64,
    listing_sessions: i64,
    concurrent_seconds: f64,
}

fn sizes() -> Sizes {
    if std::env::var("BERTH_PG_BENCH_QUICK").is_ok() {
        Sizes {
            single_appends: 300,
            bulk_events: 10_000,
            resume_events: 2_000,
            listing_sessions: 10_000,
            concurrent_seconds: 2.0,
        }
    } else {
        Sizes {
            single_appends: 2_000,
            bulk_events: 100_000,
            resume_events: 10_000,
            listing_sessions: 100_000,
            concurrent_seconds: 5.0,
        }
    }
}

fn key(tenant: &str, session: &str) -> SessionKey {
    SessionKey::new(TenantId::parse(tenant).unwrap(), SessionId::parse(session).unwrap())
}

fn header(key: &SessionKey) -> SessionHeader {
    let scope = Scope { tenant: key.tenant.clone(), user: UserId::parse("bench").unwrap(), project: None };
    SessionHeader::new(key.id.clone(), scope, Timestamp(1))
}

/// An assistant-message-sized event (~300 bytes of data).
fn event(seq: u64) -> Event {
    let content = "x".repeat(256);
    Event::new(seq, "assistant/message", Timestamp(1_700_000_000_000 + seq), serde_json::json!({"content": content}))
        .unwrap()
}

fn line(seq: u64) -> String {
    event(seq).to_canonical_json()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn plain_table(admin: &Client) {
    admin
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS plain (s text COLLATE \"C\", seq bigint, line text, PRIMARY KEY (s, seq))",
        )
        .await
        .unwrap();
}

/// Events per second of `count` single-event durable appends.
async fn berth_single(backend: &PostgresBackend, round: usize, count: u64) -> f64 {
    let key = key("t-bench", &format!("single-{round}"));
    let mut writer = backend.materialize(&header(&key), &[]).await.unwrap();
    let started = Instant::now();
    for seq in 0..count {
        writer.append(&[event(seq)]).await.unwrap();
    }
    let rate = count as f64 / started.elapsed().as_secs_f64();
    writer.release().await.unwrap();
    rate
}

async fn plain_single(client: &Client, round: usize, count: u64) -> f64 {
    let statement = client.prepare("INSERT INTO plain (s, seq, line) VALUES ($1, $2, $3)").await.unwrap();
    let session = format!("single-{round}");
    let started = Instant::now();
    for seq in 0..count {
        client.execute(&statement, &[&session, &(seq as i64), &line(seq)]).await.unwrap();
    }
    count as f64 / started.elapsed().as_secs_f64()
}

async fn berth_bulk(backend: &PostgresBackend, session: &str, count: u64) -> f64 {
    let key = key("t-bench", session);
    let mut writer = backend.materialize(&header(&key), &[]).await.unwrap();
    let batches: Vec<Vec<Event>> =
        (0..count / 100).map(|batch| (batch * 100..batch * 100 + 100).map(event).collect()).collect();
    let started = Instant::now();
    for batch in &batches {
        writer.append(batch).await.unwrap();
    }
    let rate = count as f64 / started.elapsed().as_secs_f64();
    writer.release().await.unwrap();
    rate
}

async fn plain_bulk(client: &Client, session: &str, count: u64) -> f64 {
    let statement = client
        .prepare(
            "INSERT INTO plain (s, seq, line) SELECT $1, $2::bigint + ord - 1, l \
             FROM unnest($3::text[]) WITH ORDINALITY AS u(l, ord)",
        )
        .await
        .unwrap();
    let batches: Vec<Vec<String>> =
        (0..count / 100).map(|batch| (batch * 100..batch * 100 + 100).map(line).collect()).collect();
    let started = Instant::now();
    for (index, batch) in batches.iter().enumerate() {
        client.execute(&statement, &[&session, &(index as i64 * 100), batch]).await.unwrap();
    }
    count as f64 / started.elapsed().as_secs_f64()
}

/// Milliseconds to open the session for writing and read its whole log.
async fn berth_resume(backend: &PostgresBackend, session: &str, count: u64) -> f64 {
    let key = key("t-bench", session);
    let started = Instant::now();
    let mut writer = backend.open_writer(&key).await.unwrap();
    let events = writer.read(0, u64::MAX).await.unwrap();
    let elapsed = started.elapsed();
    assert_eq!(events.len() as u64, count);
    writer.release().await.unwrap();
    elapsed.as_secs_f64() * 1_000.0
}

async fn plain_resume(client: &Client, session: &str, count: u64) -> f64 {
    let started = Instant::now();
    let rows = client.query("SELECT line FROM plain WHERE s = $1 ORDER BY seq", &[&session]).await.unwrap();
    let parsed: Vec<serde_json::Value> = rows.iter().map(|row| serde_json::from_str(row.get(0)).unwrap()).collect();
    let elapsed = started.elapsed();
    assert_eq!(parsed.len() as u64, count);
    elapsed.as_secs_f64() * 1_000.0
}

/// Milliseconds per listing page of 50 (20 pages down the cursor).
async fn berth_listing(catalog: &dyn Catalog) -> f64 {
    let mut query = SessionQuery { limit: 50, ..SessionQuery::tenant(TenantId::parse("t-list").unwrap()) };
    let started = Instant::now();
    for _ in 0..20 {
        let page = catalog.list(&query).await.unwrap();
        query.cursor = page.last().map(ListCursor::of);
    }
    started.elapsed().as_secs_f64() * 1_000.0 / 20.0
}

async fn plain_listing(client: &Client) -> f64 {
    let statement = client
        .prepare(
            "SELECT record_json, last_activity, id FROM sessions WHERE tenant = 't-list' AND NOT blank \
             AND (last_activity, id) < ($1, $2) ORDER BY last_activity DESC, id DESC LIMIT 50",
        )
        .await
        .unwrap();
    let mut cursor = (i64::MAX, String::from("~"));
    let started = Instant::now();
    for _ in 0..20 {
        let rows = client.query(&statement, &[&cursor.0, &cursor.1]).await.unwrap();
        let records: Vec<serde_json::Value> =
            rows.iter().map(|row| serde_json::from_str(row.get(0)).unwrap()).collect();
        assert_eq!(records.len(), 50);
        let last = rows.last().unwrap();
        cursor = (last.get(1), last.get(2));
    }
    started.elapsed().as_secs_f64() * 1_000.0 / 20.0
}

async fn seed_listing(admin: &Client, backend: &PostgresBackend, count: i64) {
    let record = berth_catalog::SessionRecord {
        header: header(&key("t-list", "IDX")),
        status: berth_core::lifecycle::Status::Active,
        lease_until: Timestamp(9_000_000),
        last_activity: Timestamp(1_234_567),
        revision: berth_core::Revision(0),
        title: Some("a session".into()),
        labels: Default::default(),
        event_count: 12,
        blank: false,
        runs: Vec::new(),
        status_changed_at: Timestamp(1),
        resume_mark: Default::default(),
        repair: Default::default(),
        creator: None,
    };
    // Through the catalog for a few, in SQL for the bulk (same columns, same JSON).
    backend.catalog().insert(&record).await.unwrap();
    let json = serde_json::to_string(&record).unwrap();
    admin
        .execute(
            "INSERT INTO sessions (tenant, id, user_id, project, status, last_activity, lease_until, created_at, \
                 status_changed_at, revision, blank, parent, record_json) \
             SELECT 't-list', 's' || i, 'user' || (i % 100), NULL, 'active', 1000000 + (i * 7919) % 900000, \
                 9000000, 1, 1, 0, i % 10 = 0, NULL, \
                 replace(replace($2, '\"IDX\"', '\"s' || i || '\"'), '1234567', (1000000 + (i * 7919) % 900000)::text) \
             FROM generate_series(1, $1::bigint) AS i",
            &[&count, &json],
        )
        .await
        .unwrap();
    admin.batch_execute("ANALYZE sessions").await.unwrap();
}

/// Appends per second of 8 instances (pools of 4) × 8 sessions, one writer task per
/// session.
async fn berth_concurrent(url: &str, round: usize, seconds: f64, notify: bool) -> f64 {
    let mut tasks = Vec::new();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    for instance in 0..8 {
        let options = PostgresOptions { pool_size: 4, notify, ..PostgresOptions::default() };
        let backend = PostgresBackend::connect(url, options).await.unwrap();
        for session in 0..8 {
            let backend = backend.clone();
            tasks.push(tokio::spawn(async move {
                let key = key("t-bench", &format!("c{round}-{notify}-{instance}-{session}"));
                let mut writer = backend.materialize(&header(&key), &[]).await.unwrap();
                let mut seq = 0;
                while Instant::now() < deadline {
                    writer.append(&[event(seq)]).await.unwrap();
                    seq += 1;
                }
                writer.release().await.unwrap();
                seq
            }));
        }
    }
    let started = Instant::now();
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    total as f64 / started.elapsed().as_secs_f64()
}

/// The same on 32 plain connections (as many as the 8 pools of 4), 2 writers taking
/// turns on each (no pipelining: at most 32 statements in flight, as for berth).
async fn plain_concurrent(url: &str, round: usize, seconds: f64) -> f64 {
    let mut tasks = Vec::new();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut clients = Vec::new();
    for _ in 0..32 {
        clients.push(Arc::new(tokio::sync::Mutex::new(berth_postgres::testing::connect(url).await)));
    }
    for instance in 0..8 {
        for session in 0..8 {
            let client = clients[(instance * 8 + session) % 32].clone();
            tasks.push(tokio::spawn(async move {
                let statement =
                    client.lock().await.prepare("INSERT INTO plain (s, seq, line) VALUES ($1, $2, $3)").await.unwrap();
                let name = format!("c{round}-{instance}-{session}");
                let mut seq = 0u64;
                while Instant::now() < deadline {
                    let payload = line(seq);
                    client.lock().await.execute(&statement, &[&name, &(seq as i64), &payload]).await.unwrap();
                    seq += 1;
                }
                seq
            }));
        }
    }
    let started = Instant::now();
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    total as f64 / started.elapsed().as_secs_f64()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let sizes = sizes();
    // berth serves as an app role that row-level security binds (the plain SQL loop
    // runs as the owner, on a table without policies: the database's own limit).
    let database = TestDatabase::with_app_role().await;
    let url = database.app_url();
    let owner_url = database.url();
    let admin = database.client().await;
    let backend = PostgresBackend::connect(&url, PostgresOptions::default()).await.unwrap();
    // The same without live-tail notifications, to show what they cost.
    let quiet =
        PostgresBackend::connect(&url, PostgresOptions { notify: false, ..PostgresOptions::default() }).await.unwrap();
    plain_table(&admin).await;
    let plain = Arc::new(database.client().await);
    seed_listing(&admin, &backend, sizes.listing_sessions).await;
    // The resume subject: written once, read every round.
    berth_bulk(&backend, "resume", sizes.resume_events).await;
    plain_bulk(&plain, "resume", sizes.resume_events).await;

    let mut rows: Vec<(&str, &str, Vec<f64>, Vec<f64>)> = vec![
        ("durable single-event appends", "events/s", vec![], vec![]),
        ("bulk, batches of 100", "events/s", vec![], vec![]),
        ("resume (open for write + read all)", "ms", vec![], vec![]),
        ("listing page of 50", "ms", vec![], vec![]),
        ("8 instances x 8 sessions, 1 writer each", "appends/s", vec![], vec![]),
        ("durable single-event appends, no NOTIFY", "events/s", vec![], vec![]),
        ("bulk, batches of 100, no NOTIFY", "events/s", vec![], vec![]),
        ("8 x 8 concurrent, no NOTIFY", "appends/s", vec![], vec![]),
    ];
    for round in 0..ROUNDS {
        eprintln!("round {}/{ROUNDS}", round + 1);
        rows[0].2.push(berth_single(&backend, round, sizes.single_appends).await);
        rows[0].3.push(plain_single(&plain, round, sizes.single_appends).await);
        rows[1].2.push(berth_bulk(&backend, &format!("bulk-{round}"), sizes.bulk_events).await);
        rows[1].3.push(plain_bulk(&plain, &format!("bulk-{round}"), sizes.bulk_events).await);
        rows[2].2.push(berth_resume(&backend, "resume", sizes.resume_events).await);
        rows[2].3.push(plain_resume(&plain, "resume", sizes.resume_events).await);
        let catalog = backend.catalog();
        rows[3].2.push(berth_listing(&catalog).await);
        rows[3].3.push(plain_listing(&plain).await);
        rows[4].2.push(berth_concurrent(&url, round, sizes.concurrent_seconds, true).await);
        // Let the dropped pools close their connections (max_connections is finite).
        tokio::time::sleep(Duration::from_secs(2)).await;
        rows[4].3.push(plain_concurrent(&owner_url, round, sizes.concurrent_seconds).await);
        tokio::time::sleep(Duration::from_secs(1)).await;
        rows[5].2.push(berth_single(&quiet, round + 100, sizes.single_appends).await);
        rows[5].3.push(plain_single(&plain, round + 100, sizes.single_appends).await);
        rows[6].2.push(berth_bulk(&quiet, &format!("bulk-quiet-{round}"), sizes.bulk_events).await);
        rows[6].3.push(plain_bulk(&plain, &format!("bulk-quiet-{round}"), sizes.bulk_events).await);
        rows[7].2.push(berth_concurrent(&url, round, sizes.concurrent_seconds, false).await);
        tokio::time::sleep(Duration::from_secs(2)).await;
        rows[7].3.push(plain_concurrent(&owner_url, round + 100, sizes.concurrent_seconds).await);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!("| workload | unit | berth (median of {ROUNDS}) | plain SQL (median) | berth / plain |");
    println!("|---|---|---|---|---|");
    for (name, unit, berth, plain) in rows {
        let (berth, plain) = (median(berth), median(plain));
        println!("| {name} | {unit} | {berth:.1} | {plain:.1} | {:.2} |", berth / plain);
    }
    println!(
        "\nsizes: {} single appends, {} bulk events, {}-event resume, {} sessions listed, {} s concurrent",
        sizes.single_appends, sizes.bulk_events, sizes.resume_events, sizes.listing_sessions, sizes.concurrent_seconds
    );
}
