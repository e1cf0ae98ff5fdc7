//! The Catalog conformance suite on the SQLite catalog (a fresh database file per
//! test, and the in-memory variant), plus SQLite-only clauses: several connections to
//! one file racing on compare-and-set and on the audit chain, and reopening.

mod audit_tamper;

use async_trait::async_trait;
use berth_catalog::{audit, Catalog, SessionQuery};
use berth_core::{Revision, TenantId};
use berth_sqlite::{SqliteCatalog, CATALOG_FILE_NAME};
use berth_testkit::catalog_conformance::{sample_record, tenant, AuditTamper, AuditTamperer, CatalogFixture};
use std::sync::Arc;

struct SqliteFixture {
    catalog: SqliteCatalog,
    _dir: Option<tempfile::TempDir>,
}

impl CatalogFixture for SqliteFixture {
    fn catalog(&self) -> Arc<dyn Catalog> {
        Arc::new(self.catalog.clone())
    }
}

#[async_trait]
impl AuditTamperer for SqliteFixture {
    async fn tamper(&self, tenant: &TenantId, tamper: AuditTamper) {
        self.catalog.execute_for_tests(&audit_tamper::sqlite(tenant, tamper)).await.expect("tamper");
    }
}

fn sqlite_file() -> SqliteFixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).expect("open");
    SqliteFixture { catalog, _dir: Some(dir) }
}

fn sqlite_in_memory() -> SqliteFixture {
    SqliteFixture { catalog: SqliteCatalog::open_in_memory().expect("open"), _dir: None }
}

mod file {
    use super::*;
    berth_testkit::catalog_conformance!(sqlite_file());
    berth_testkit::memory_conformance!(sqlite_file());
}

mod in_memory {
    use super::*;
    berth_testkit::catalog_conformance!(sqlite_in_memory());
    berth_testkit::memory_conformance!(sqlite_in_memory());
}

/// Eight catalogs (eight writer connections) on one file: each round all of them try
/// the same compare-and-set; exactly one wins, the others see the winner's revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cas_across_connections_has_one_winner_per_round() {
    const CONNECTIONS: usize = 8;
    const ROUNDS: u64 = 30;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let catalogs: Vec<SqliteCatalog> = (0..CONNECTIONS).map(|_| SqliteCatalog::open(&path).expect("open")).collect();
    let record = sample_record("t-race", "contended", "alice", 100);
    catalogs[0].insert(&record).await.expect("insert");
    for round in 0..ROUNDS {
        let mut attempts = Vec::new();
        for (index, catalog) in catalogs.iter().enumerate() {
            let catalog = catalog.clone();
            let mut next = record.clone();
            next.revision = Revision(round + 1);
            next.title = Some(format!("round {round} by {index}"));
            attempts.push(tokio::spawn(async move { (index, catalog.update(&next, Revision(round)).await) }));
        }
        let mut winners = Vec::new();
        for attempt in attempts {
            match attempt.await.expect("task") {
                (index, Ok(())) => winners.push(index),
                (_, Err(error)) => assert_eq!(
                    error,
                    berth_core::Error::RevisionConflict { expected: round, actual: round + 1 },
                    "round {round}"
                ),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let stored = catalogs[0].get(&record.key()).await.expect("get").expect("stored");
        assert_eq!(stored.title, Some(format!("round {round} by {}", winners[0])));
    }
    let stored = catalogs[3].get(&record.key()).await.expect("get").expect("stored");
    assert_eq!(stored.revision, Revision(ROUNDS));
}

/// Eight catalogs on one file append to one tenant's audit log at once: one chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn audit_appends_across_connections_form_one_chain() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let tenant_id = tenant("t-chain");
    let mut tasks = Vec::new();
    for task in 0..8u64 {
        let catalog = SqliteCatalog::open(&path).expect("open");
        let tenant_id = tenant_id.clone();
        tasks.push(tokio::spawn(async move {
            for number in 0..20u64 {
                let draft = audit::AuditDraft {
                    tenant: tenant_id.clone(),
                    time: berth_core::Timestamp(number),
                    actor: format!("system:task-{task}"),
                    action: "append".into(),
                    session: None,
                    revision: None,
                    outcome: "ok".into(),
                    details: serde_json::json!({ "task": task, "number": number }),
                };
                catalog.append_audit(draft).await.expect("append");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let catalog = SqliteCatalog::open(&path).expect("open");
    let entries = catalog.read_audit(&tenant_id, 0, usize::MAX).await.expect("read");
    assert_eq!(entries.len(), 160);
    let verdict = audit::verify(&entries, catalog.audit_head(&tenant_id).await.expect("head"));
    assert_eq!(verdict.broken_at, None, "{verdict:?}");
}

/// Everything written is there after the catalog is dropped and the file reopened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_keeps_records_audit_and_retention() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let mut record = sample_record("t-reopen", "s1", "alice", 100);
    record.labels.insert("red".into());
    let policy = berth_catalog::RetentionPolicy { idle_ttl_ms: Some(5), ..Default::default() };
    let entry = {
        let catalog = SqliteCatalog::open(&path).expect("open");
        catalog.insert(&record).await.expect("insert");
        catalog.set_retention(&tenant("t-reopen"), &policy).await.expect("set");
        let draft = audit::AuditDraft {
            tenant: tenant("t-reopen"),
            time: berth_core::Timestamp(1),
            actor: "system:test".into(),
            action: "create".into(),
            session: Some(record.header.id.clone()),
            revision: Some(Revision(0)),
            outcome: "ok".into(),
            details: serde_json::Value::Null,
        };
        catalog.append_audit(draft).await.expect("append")
    };
    let catalog = SqliteCatalog::open(&path).expect("reopen");
    assert_eq!(catalog.get(&record.key()).await.expect("get"), Some(record.clone()));
    let query = SessionQuery { label: Some("red".into()), ..SessionQuery::tenant(tenant("t-reopen")) };
    assert_eq!(catalog.list(&query).await.expect("list"), vec![record]);
    assert_eq!(catalog.retention(&tenant("t-reopen")).await.expect("get"), Some(policy));
    assert_eq!(catalog.read_audit(&tenant("t-reopen"), 0, 10).await.expect("read"), vec![entry.clone()]);
    assert_eq!(catalog.audit_head(&tenant("t-reopen")).await.expect("head"), Some((0, entry.hash)));
}

/// Eight catalogs on one file race the same memory compare-and-set each round: one
/// winner, the others a conflict naming the winner's revision; usage counts one item,
/// and the item and its terms are there after reopening.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_cas_across_connections_has_one_winner_per_round() {
    use berth_catalog::scoped::{MemoryPut, MemoryQuota, MemorySearch, TextQuery};
    use berth_catalog::MemoryStore;
    use berth_testkit::memory_conformance::{json, ns};
    const ROUNDS: u64 = 10;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let catalogs: Vec<SqliteCatalog> = (0..8).map(|_| SqliteCatalog::open(&path).expect("open")).collect();
    let t = tenant("t-memory");
    for round in 0..ROUNDS {
        let mut attempts = Vec::new();
        for (index, catalog) in catalogs.iter().enumerate() {
            let (catalog, t) = (catalog.clone(), t.clone());
            let write = MemoryPut {
                namespace: ns("user/alice"),
                key: "k".into(),
                value: json(&format!(r#""round {round} by {index}""#)),
                expected_revision: Some(round),
                ttl_ms: None,
                bound_to: None,
            };
            let now = berth_core::Timestamp(round);
            attempts.push(tokio::spawn(async move {
                (index, catalog.memory_put(&t, &write, now, &MemoryQuota::default()).await)
            }));
        }
        let mut winners = Vec::new();
        for attempt in attempts {
            match attempt.await.expect("task") {
                (index, Ok(item)) => {
                    assert_eq!(item.revision, round + 1);
                    winners.push(index)
                }
                (_, Err(error)) => assert_eq!(
                    error,
                    berth_core::Error::RevisionConflict { expected: round, actual: round + 1 },
                    "round {round}"
                ),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
    }
    drop(catalogs);
    let catalog = SqliteCatalog::open(&path).expect("reopen");
    assert_eq!(catalog.memory_usage(&t).await.expect("usage").items, 1);
    let search = MemorySearch {
        query: Some(TextQuery::parse(&format!("round {}", ROUNDS - 1)).expect("query")),
        ..MemorySearch::new(ns("user/alice"))
    };
    let found = catalog.memory_search(&t, &search, berth_core::Timestamp(ROUNDS)).await.expect("search");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].revision, ROUNDS);
}
