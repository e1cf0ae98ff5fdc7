//! Measures listing at scale (R-S12 "fast at 100,000 sessions"): inserts N sessions into
//! a fresh catalog file (1,000 per transaction), then times listing pages through the
//! `Catalog` trait (blocking-pool hop and JSON decoding included) and prints medians.
//! A figure for the report, not a pass/fail test.
//!
//! ```text
//! cargo run --release -p berth-sqlite --example list_100k            # 100,000 sessions
//! cargo run --release -p berth-sqlite --example list_100k -- 10000   # another size
//! ```

use berth_catalog::{Catalog, ListCursor, SessionQuery, SessionRecord};
use berth_core::lifecycle::Status;
use berth_core::{Revision, Scope, SessionHeader, SessionId, TenantId, Timestamp, UserId};
use berth_sqlite::{SqliteCatalog, CATALOG_FILE_NAME};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const BATCH_SESSIONS: usize = 1_000;
const RUNS: usize = 101;
const LABELS: u64 = 20;
const USERS: u64 = 100;

/// A deterministic pseudo-random number (SplitMix64), so runs are comparable.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn session(tenant: &TenantId, index: u64) -> SessionRecord {
    let random = mix(index);
    let last_activity = Timestamp(1_700_000_000_000 + random % 30_000_000_000);
    let scope = Scope {
        tenant: tenant.clone(),
        user: UserId::parse(&format!("user-{}", random % USERS)).expect("user"),
        project: None,
    };
    let header = SessionHeader::new(SessionId::parse(&format!("s-{index:07}")).expect("id"), scope, last_activity);
    let status = match (random >> 8) % 10 {
        0 | 1 => Status::Active,
        2..=6 => Status::Idle,
        7 | 8 => Status::Closed,
        _ => Status::Expired,
    };
    let labels: BTreeSet<String> =
        [(random >> 16) % LABELS, (random >> 24) % LABELS].iter().map(|label| format!("label-{label}")).collect();
    SessionRecord {
        header,
        status,
        lease_until: last_activity.plus_ms(86_400_000),
        last_activity,
        revision: Revision(0),
        title: Some(format!("session {index}")),
        labels,
        event_count: random % 500,
        blank: (random >> 32) % 10 < 1,
        runs: Vec::new(),
        status_changed_at: last_activity,
        resume_mark: Default::default(),
        repair: Default::default(),
        creator: None,
    }
}

async fn median_of(catalog: &SqliteCatalog, query: &SessionQuery) -> (Duration, usize) {
    let mut times = Vec::with_capacity(RUNS);
    let mut items = 0;
    for _ in 0..RUNS {
        let started = Instant::now();
        items = catalog.list(query).await.expect("list").len();
        times.push(started.elapsed());
    }
    times.sort();
    (times[RUNS / 2], items)
}

#[tokio::main]
async fn main() {
    let sessions: u64 = std::env::args().nth(1).map_or(100_000, |text| text.parse().expect("a session count"));
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).expect("open");
    let tenant = TenantId::parse("tenant-a").expect("tenant");

    let started = Instant::now();
    let records: Vec<SessionRecord> = (0..sessions).map(|index| session(&tenant, index)).collect();
    for batch in records.chunks(BATCH_SESSIONS) {
        catalog.insert_many(batch.to_vec()).await.expect("insert batch");
    }
    let inserted = started.elapsed();
    println!("inserted {sessions} sessions in {inserted:?} ({BATCH_SESSIONS} per transaction)");

    let base = SessionQuery::tenant(tenant.clone());
    let first_page = catalog.list(&base).await.expect("list");
    let mut deep = base.clone();
    let middle = catalog.list(&SessionQuery { limit: 1_000, ..base.clone() }).await.expect("list");
    deep.cursor = Some(ListCursor::of(&middle[999]));
    let status_label = SessionQuery { statuses: vec![Status::Active], label: Some("label-3".into()), ..base.clone() };
    let visible = vec![Status::Active, Status::Idle, Status::Closed, Status::Expired];
    let service_default = SessionQuery { statuses: visible, limit: 51, ..base.clone() };
    let user = first_page.first().map(|record| record.header.scope.user.clone());
    let shapes = [
        ("first page (tenant, 50, newest first)", base.clone()),
        ("page after 1,000 (cursor)", deep),
        ("status=active", SessionQuery { statuses: vec![Status::Active], ..base.clone() }),
        ("status=active + label", status_label.clone()),
        ("status=active + label, blank included", SessionQuery { include_blank: true, ..status_label }),
        ("label", SessionQuery { label: Some("label-7".into()), ..base.clone() }),
        ("user", SessionQuery { user: user.clone(), ..base.clone() }),
        ("status in (active, idle)", SessionQuery { statuses: vec![Status::Active, Status::Idle], ..base.clone() }),
        ("service default (4 statuses, limit 51)", service_default.clone()),
        ("service default for a user", SessionQuery { user, ..service_default }),
    ];
    for (name, query) in &shapes {
        let (median, items) = median_of(&catalog, query).await;
        println!("{name:<42} median {:>8.3} ms over {RUNS} runs ({items} items)", median.as_secs_f64() * 1e3);
    }
}
