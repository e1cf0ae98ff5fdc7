//! Group commit of audited changes (`commit.rs`) on a real database: concurrent changes
//! of one tenant share transactions, a failing change fails only its caller, and the
//! tenant's audit chain is the one-at-a-time chain.

use crate::testing::TestDatabase;
use crate::{PostgresBackend, PostgresOptions};
use berth_catalog::audit::{self, AuditDraft};
use berth_catalog::{Catalog, SessionRecord};
use berth_core::lifecycle::Status;
use berth_core::{Error, Revision, Scope, SessionHeader, SessionId, TenantId, Timestamp, UserId};

const TENANT: &str = "tenant-gc";

fn record(id: &str, revision: u64) -> SessionRecord {
    let scope = Scope { tenant: TenantId::parse(TENANT).unwrap(), user: UserId::parse("u").unwrap(), project: None };
    SessionRecord {
        header: SessionHeader::new(SessionId::parse(id).unwrap(), scope, Timestamp(1)),
        status: Status::Active,
        lease_until: Timestamp(10),
        last_activity: Timestamp(1),
        revision: Revision(revision),
        title: None,
        labels: Default::default(),
        event_count: 0,
        blank: false,
        runs: Vec::new(),
        status_changed_at: Timestamp(1),
        resume_mark: Default::default(),
        repair: Default::default(),
        creator: None,
    }
}

fn draft(id: &str) -> AuditDraft {
    AuditDraft {
        tenant: TenantId::parse(TENANT).unwrap(),
        time: Timestamp(2),
        actor: "service:test".into(),
        action: "update".into(),
        session: Some(SessionId::parse(id).unwrap()),
        revision: Some(Revision(1)),
        outcome: "ok".into(),
        details: serde_json::json!({}),
    }
}

/// 48 concurrent audited updates, every third with a stale revision: the stale ones get
/// their own `RevisionConflict` and leave no audit record, every other one is stored
/// with its record; fewer transactions than changes ran (they were grouped); the audit
/// chain verifies. Without the per-change savepoints a failed change would abort its
/// batch's transaction and fail its neighbours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_audited_changes_share_transactions_and_keep_their_own_outcomes() {
    let database = TestDatabase::create().await;
    let backend = PostgresBackend::connect(&database.url(), PostgresOptions::default()).await.unwrap();
    let catalog = backend.catalog();
    let ids: Vec<String> = (0..48).map(|n| format!("s{n}")).collect();
    for id in &ids {
        catalog.insert(&record(id, 0)).await.unwrap();
    }
    let before = backend.db.audited.batches();
    let mut tasks = tokio::task::JoinSet::new();
    for (index, id) in ids.iter().enumerate() {
        let (catalog, id) = (catalog.clone(), id.clone());
        tasks.spawn(async move {
            let stale = index % 3 == 0;
            let expected = if stale { Revision(7) } else { Revision(0) };
            let mut changed = record(&id, expected.0 + 1);
            changed.title = Some(format!("title {id}"));
            (index, catalog.update_audited(&changed, expected, vec![draft(&id)]).await)
        });
    }
    let mut stored = 0;
    while let Some(joined) = tasks.join_next().await {
        let (index, outcome) = joined.unwrap();
        if index % 3 == 0 {
            assert!(matches!(outcome, Err(Error::RevisionConflict { expected: 7, actual: 0 })), "{index}: {outcome:?}");
        } else {
            let entries = outcome.unwrap_or_else(|error| panic!("{index}: {error:?}"));
            assert_eq!(entries.len(), 1);
            stored += 1;
        }
    }
    let batches = backend.db.audited.batches() - before;
    assert!(batches < ids.len() as u64, "{batches} transactions for {} changes: none grouped", ids.len());
    let tenant = TenantId::parse(TENANT).unwrap();
    let entries = catalog.read_audit(&tenant, 0, 1_000).await.unwrap();
    assert_eq!(entries.len(), stored);
    let head = catalog.audit_head(&tenant).await.unwrap();
    assert_eq!(audit::verify(&entries, head).broken_at, None);
    for (index, id) in ids.iter().enumerate() {
        let key = record(id, 0).key();
        let got = catalog.get(&key).await.unwrap().unwrap();
        let audited = entries.iter().any(|entry| entry.draft.session.as_ref().map(|s| s.as_str()) == Some(id));
        if index % 3 == 0 {
            assert_eq!((got.revision, got.title, audited), (Revision(0), None, false), "{id}");
        } else {
            assert_eq!(
                (got.revision, got.title.as_deref(), audited),
                (Revision(1), Some(format!("title {id}").as_str()), true),
                "{id}"
            );
        }
    }
}

/// A lone change commits at once, and with `group_commit` off every change commits on
/// its own: the same outcomes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_off_commits_each_change_alone() {
    let database = TestDatabase::create().await;
    let options = PostgresOptions { group_commit: false, ..PostgresOptions::default() };
    let backend = PostgresBackend::connect(&database.url(), options).await.unwrap();
    let catalog = backend.catalog();
    catalog.insert(&record("alone", 0)).await.unwrap();
    catalog.update_audited(&record("alone", 1), Revision(0), vec![draft("alone")]).await.unwrap();
    let stale = catalog.update_audited(&record("alone", 1), Revision(0), vec![draft("alone")]).await;
    assert!(matches!(stale, Err(Error::RevisionConflict { expected: 0, actual: 1 })), "{stale:?}");
    assert_eq!(backend.db.audited.batches(), 0);
    let entries = catalog.read_audit(&TenantId::parse(TENANT).unwrap(), 0, 10).await.unwrap();
    assert_eq!(entries.len(), 1);
}
