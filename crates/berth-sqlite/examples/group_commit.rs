//! What group commit (`commit.rs`) buys the catalog's share of a session create: the
//! service's two catalog writes per create — the record inserted as `creating`, then
//! its final revision with an audit record (`update_audited`) — by 1 and by 8 concurrent
//! clients, with `SqliteOptions::group_commit` on and off, rounds alternating (on/off,
//! off/on, …) on fresh catalog files. Prints each configuration's median creates/s.
//! A figure for the report, not a pass/fail test.
//!
//! ```text
//! cargo run --release -p berth-sqlite --example group_commit            # 400 creates a round, 5 rounds
//! cargo run --release -p berth-sqlite --example group_commit -- 1000 7  # creates a round, rounds
//! ```

use berth_catalog::audit::AuditDraft;
use berth_catalog::{Catalog, SessionRecord};
use berth_core::lifecycle::Status;
use berth_core::{Revision, Scope, SessionHeader, SessionId, TenantId, Timestamp, UserId};
use berth_sqlite::{SqliteCatalog, SqliteOptions, CATALOG_FILE_NAME};
use std::collections::BTreeSet;
use std::time::Instant;

fn record(id: &str, revision: u64, status: Status) -> SessionRecord {
    let scope = Scope {
        tenant: TenantId::parse("bench").expect("tenant"),
        user: UserId::parse("u").expect("user"),
        project: None,
    };
    SessionRecord {
        header: SessionHeader::new(SessionId::parse(id).expect("id"), scope, Timestamp(1)),
        status,
        lease_until: Timestamp(10),
        last_activity: Timestamp(1),
        revision: Revision(revision),
        title: None,
        labels: BTreeSet::new(),
        event_count: 0,
        blank: false,
        runs: Vec::new(),
        status_changed_at: Timestamp(1),
        resume_mark: Default::default(),
        repair: Default::default(),
    }
}

/// The catalog writes of one service create.
async fn create(catalog: &SqliteCatalog, id: &str) {
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

/// Creates/s of `creates` creates split over `clients` concurrent tasks.
async fn round(group_commit: bool, clients: usize, creates: usize) -> f64 {
    let dir = tempfile::tempdir_in(".").expect("temp dir");
    let options = SqliteOptions { group_commit, ..SqliteOptions::default() };
    let catalog = SqliteCatalog::open_with(dir.path().join(CATALOG_FILE_NAME), options).expect("open");
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for client in 0..clients {
        let catalog = catalog.clone();
        tasks.spawn(async move {
            for n in (client..creates).step_by(clients) {
                create(&catalog, &format!("s{n}")).await;
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

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let creates: usize = args.next().map_or(400, |arg| arg.parse().expect("creates a round"));
    let rounds: usize = args.next().map_or(5, |arg| arg.parse().expect("rounds"));
    for clients in [1, 8] {
        let (mut on, mut off) = (Vec::new(), Vec::new());
        for index in 0..rounds {
            let order = if index % 2 == 0 { [true, false] } else { [false, true] };
            for group_commit in order {
                let rate = round(group_commit, clients, creates).await;
                if group_commit {
                    on.push(rate)
                } else {
                    off.push(rate)
                }
            }
        }
        let (on, off) = (median(on), median(off));
        println!(
            "{clients} client(s): group commit {on:.0} creates/s, one transaction a write {off:.0} creates/s ({:.2}×)",
            on / off
        );
    }
}
