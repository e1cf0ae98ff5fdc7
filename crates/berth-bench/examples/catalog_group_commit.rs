//! What group commit buys the catalog's share of a session create, on the SQLite catalog
//! (`berth-sqlite`'s `commit.rs`: every write queues to one committer) or on PostgreSQL
//! (`berth-postgres`'s `commit.rs`: one tenant's audited changes share a transaction).
//! The service's two catalog writes per create — the record inserted as `creating`, then
//! its final revision with an audit record (`update_audited`) — by 1 and by 8 concurrent
//! clients of one tenant, with the catalog's `group_commit` option on and off, rounds
//! alternating (on/off, off/on, …), each on a fresh catalog file or database (PostgreSQL:
//! on `BERTH_TEST_PG`'s server). Prints each configuration's median creates/s. A figure
//! for the report, not a pass/fail test.
//!
//! ```text
//! cargo run --release -p berth-bench --example catalog_group_commit -- sqlite            # 400 creates a round, 5 rounds
//! cargo run --release -p berth-bench --example catalog_group_commit -- postgres 1000 7   # creates a round, rounds
//! ```

use berth_catalog::audit::AuditDraft;
use berth_catalog::{Catalog, SessionRecord};
use berth_core::lifecycle::Status;
use berth_core::{Revision, Timestamp};
use berth_testkit::catalog_conformance::sample_record;
use std::sync::Arc;
use std::time::Instant;

/// The catalog conformance suite's record of `id`, at `revision` in `status`.
fn record(id: &str, revision: u64, status: Status) -> SessionRecord {
    let mut record = sample_record("bench", id, "u", 1_000);
    record.revision = Revision(revision);
    record.status = status;
    record
}

/// The catalog writes of one service create.
async fn create(catalog: &dyn Catalog, id: &str) {
    catalog.insert(&record(id, 1, Status::Creating)).await.expect("insert");
    let done = record(id, 2, Status::Active);
    let draft = AuditDraft {
        tenant: done.header.scope.tenant.clone(),
        time: Timestamp(2),
        actor: "service:bench".into(),
        action: "create".into(),
        session: Some(done.header.id.clone()),
        revision: Some(Revision(2)),
        outcome: "ok".into(),
        details: serde_json::json!({"events": 0}),
    };
    catalog.update_audited(&done, Revision(1), vec![draft]).await.expect("update");
}

/// A fresh catalog of `kind`, and what must live as long as it (a directory, a database).
async fn fresh(kind: &str, group_commit: bool, clients: usize) -> (Arc<dyn Catalog>, Box<dyn std::any::Any>) {
    match kind {
        "sqlite" => {
            let dir = tempfile::tempdir_in(".").expect("temp dir");
            let options = berth_sqlite::SqliteOptions { group_commit, ..Default::default() };
            let path = dir.path().join(berth_sqlite::CATALOG_FILE_NAME);
            let catalog = berth_sqlite::SqliteCatalog::open_with(path, options).expect("open");
            (Arc::new(catalog), Box::new(dir))
        }
        "postgres" => {
            let database = berth_postgres::testing::TestDatabase::create().await;
            let options =
                berth_postgres::PostgresOptions { group_commit, pool_size: clients.max(1), ..Default::default() };
            let backend = berth_postgres::PostgresBackend::connect(&database.url(), options).await.expect("connect");
            (Arc::new(backend.catalog()), Box::new(database))
        }
        other => panic!("catalog {other:?}: sqlite or postgres"),
    }
}

/// Creates/s of `creates` creates split over `clients` concurrent tasks.
async fn round(kind: &str, group_commit: bool, clients: usize, creates: usize) -> f64 {
    let (catalog, _keep) = fresh(kind, group_commit, clients).await;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..clients {
        let catalog = catalog.clone();
        tasks.spawn(async move {
            for n in (client..creates).step_by(clients) {
                create(catalog.as_ref(), &format!("s{n}")).await;
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("client");
    }
    creates as f64 / started.elapsed().as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| "sqlite".to_owned());
    let creates: usize = args.next().map_or(400, |arg| arg.parse().expect("creates a round"));
    let rounds: usize = args.next().map_or(5, |arg| arg.parse().expect("rounds"));
    for clients in [1, 8] {
        let (mut on, mut off) = (Vec::new(), Vec::new());
        for index in 0..rounds {
            let order = if index % 2 == 0 { [true, false] } else { [false, true] };
            for group_commit in order {
                let rate = round(&kind, group_commit, clients, creates).await;
                if group_commit {
                    on.push(rate)
                } else {
                    off.push(rate)
                }
            }
        }
        let (on, off) = (median(on), median(off));
        println!(
            "{kind}, {clients} client(s): group commit {on:.0} creates/s, one transaction a write {off:.0} creates/s ({:.2}×)",
            on / off
        );
    }
}
