//! Session-service figures for the issue notes (a measurement, not a test):
//! listing at 100,000 sessions (first page, filtered page), attach+detach pairs per
//! second, and export of a 10,000-event session — on the embedded backend (JSONL logs +
//! SQLite catalog), medians over repeated runs in one process.
//!
//! `cargo run --release -p berth --example service_ops [-- SESSIONS]`

use berth_catalog::{RunRecord, SessionRecord};
use berth_core::lifecycle::Status;
use berth_core::{Revision, Scope, SessionHeader, SessionId, TenantId, Timestamp, UserId};
use berth_service::{AppendRequest, AttachRequest, CreateSession, ListRequest, NewEvent, Principal, Role};
use std::collections::BTreeSet;
use std::time::Instant;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

#[tokio::main]
async fn main() -> berth_core::Result<()> {
    let sessions: usize = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let dir = tempfile::tempdir().map_err(|e| berth_core::Error::io("tempdir", &e))?;
    let url = dir.path().to_str().unwrap_or(".").to_owned();
    let backends = berth::open_backends(&berth::StoreUrl::parse(&url)?).await?;
    let sqlite = berth_sqlite::SqliteCatalog::open(dir.path().join(berth::CATALOG_FILE))?;
    let service = berth_service::SessionService::new(backends.store, backends.catalog, berth::system_clock());
    let tenant = TenantId::parse("bench")?;
    let admin = Principal { tenant: tenant.clone(), user: UserId::parse("admin")?, project: None, role: Role::Admin };

    // Seed the catalog directly (metadata only: listing never reads a log body).
    let seeding = Instant::now();
    let now = service.now();
    let labels = ["billing", "support", "research", "ops"];
    for chunk in (0..sessions).collect::<Vec<_>>().chunks(1_000) {
        let records = chunk
            .iter()
            .map(|&i| {
                let scope = Scope {
                    tenant: tenant.clone(),
                    user: UserId::parse(&format!("u{}", i % 100)).unwrap(),
                    project: None,
                };
                let header = SessionHeader::new(
                    SessionId::parse(&format!("s{i:07}")).unwrap(),
                    scope,
                    Timestamp(now.0 - 1_000_000 + i as u64),
                );
                SessionRecord {
                    header,
                    status: if i % 3 == 0 { Status::Idle } else { Status::Active },
                    lease_until: Timestamp(now.0 + 86_400_000),
                    last_activity: Timestamp(now.0 - (i as u64 * 7919) % 1_000_000),
                    revision: Revision(1),
                    title: None,
                    labels: BTreeSet::from([labels[i % 4].to_owned()]),
                    event_count: 10,
                    blank: i % 10 == 0,
                    runs: Vec::<RunRecord>::new(),
                    status_changed_at: now,
                    resume_mark: Default::default(),
                    repair: Default::default(),
                    creator: None,
                }
            })
            .collect();
        sqlite.insert_many(records).await?;
    }
    eprintln!("seeded {sessions} sessions in {:.1} s", seeding.elapsed().as_secs_f64());

    let mut first_page = Vec::new();
    let mut filtered = Vec::new();
    for _ in 0..51 {
        let started = Instant::now();
        let page = service.list(&admin, &ListRequest { limit: Some(50), ..ListRequest::default() }).await?;
        first_page.push(started.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(page.items.len(), 50);
        let request = ListRequest {
            statuses: vec![Status::Idle],
            label: Some("support".into()),
            limit: Some(50),
            ..ListRequest::default()
        };
        let started = Instant::now();
        let page = service.list(&admin, &request).await?;
        filtered.push(started.elapsed().as_secs_f64() * 1000.0);
        assert!(!page.items.is_empty());
    }
    println!(
        "listing at {sessions} sessions: first page (50) median {:.3} ms; status+label page median {:.3} ms",
        median(first_page),
        median(filtered)
    );

    // Attach + detach pairs on one session.
    let record = service
        .create(&admin, CreateSession { id: Some(SessionId::parse("runs")?), ..CreateSession::default() })
        .await?;
    let pairs = 300;
    let started = Instant::now();
    for _ in 0..pairs {
        let attachment = service.attach(&admin, &record.header.id, AttachRequest::default()).await?;
        service.detach(&admin, &record.header.id, &attachment.run.run_id, "completed", None).await?;
    }
    println!("attach+detach: {:.0} pairs/s ({pairs} pairs)", pairs as f64 / started.elapsed().as_secs_f64());

    // Export of a 10,000-event session.
    let long = service
        .create(&admin, CreateSession { id: Some(SessionId::parse("long")?), ..CreateSession::default() })
        .await?;
    let content = "x".repeat(900);
    for batch in 0..10 {
        let events =
            (0..1_000).map(|_| NewEvent::new("user/message", serde_json::json!({"content": content}))).collect();
        let request = AppendRequest {
            memory: Vec::new(),
            run: None,
            expected_seq: Some(batch * 1_000),
            events,
            idempotency_key: None,
        };
        service.append(&admin, &long.header.id, request).await?;
    }
    let mut exports = Vec::new();
    let mut bytes = 0;
    for _ in 0..11 {
        let started = Instant::now();
        bytes = service.export(&admin, &long.header.id).await?.len();
        exports.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    println!("export of a 10,000-event session ({bytes} bytes): median {:.1} ms", median(exports));
    service.shutdown().await
}
