//! Group commit (`commit.rs`): writes queued behind a commit share one transaction, and
//! each caller gets its own outcome — a failed write rolls back to its own savepoint.

use super::*;
use berth_catalog::audit::{self, AuditDraft};
use berth_catalog::{Catalog, SessionRecord};
use berth_core::lifecycle::Status;
use berth_core::{Revision, SessionId, TenantId, Timestamp, UserId};
use std::time::{Duration, Instant};

fn record(id: &str) -> SessionRecord {
    let scope = berth_core::Scope {
        tenant: TenantId::parse("t").expect("tenant"),
        user: UserId::parse("u").expect("user"),
        project: None,
    };
    SessionRecord {
        header: berth_core::SessionHeader::new(SessionId::parse(id).expect("id"), scope, Timestamp(1)),
        status: Status::Active,
        lease_until: Timestamp(10),
        last_activity: Timestamp(1),
        revision: Revision(0),
        title: None,
        labels: ["blue".to_owned()].into_iter().collect(),
        event_count: 0,
        blank: false,
        runs: Vec::new(),
        status_changed_at: Timestamp(1),
        resume_mark: Default::default(),
        repair: Default::default(),
        creator: None,
    }
}

fn draft(record: &SessionRecord) -> AuditDraft {
    AuditDraft {
        tenant: record.header.scope.tenant.clone(),
        time: Timestamp(2),
        actor: "service:test".into(),
        action: "update".into(),
        session: Some(record.header.id.clone()),
        revision: Some(record.revision),
        outcome: "ok".into(),
        details: serde_json::json!({}),
    }
}

type Outcome = berth_core::Result<()>;

/// Runs `write` on a thread of its own (a current-thread runtime: the write then runs
/// on that thread, as `block_in_place` would have it).
fn spawn(
    catalog: &SqliteCatalog,
    write: impl FnOnce(SqliteCatalog) -> std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send>>
        + Send
        + 'static,
) -> std::thread::JoinHandle<Outcome> {
    let catalog = catalog.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        runtime.block_on(write(catalog))
    })
}

/// Waits (with a deadline) until `count` writes queue behind the batch under way.
fn wait_queued(catalog: &SqliteCatalog, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while catalog.shared.committer.queued() < count {
        assert!(Instant::now() < deadline, "{count} writes never queued");
        std::thread::yield_now();
    }
}

/// Waits (with a deadline) until a leader has taken its batch (`batches` past `before`):
/// writes started after this queue behind it. (Its job in the queue is no sign: until the
/// leader takes the queue, a write that arrives joins its batch instead of queueing.)
fn wait_leading(catalog: &SqliteCatalog, before: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while catalog.shared.committer.batches() <= before {
        assert!(Instant::now() < deadline, "no leader took its batch");
        std::thread::yield_now();
    }
}

/// Eight writes queue behind a commit that holds the writer: they run as one batch (one
/// transaction), in queue order; the ones that fail — a duplicate id, a compare-and-set
/// miss, an `insert_many` whose second record is a duplicate after its first was
/// written — get their own errors and leave nothing behind, the others commit, and the
/// audit chain holds exactly the successful writes' records in queue order.
///
/// Without the per-write savepoint the `insert_many`'s first record ("half") would be
/// committed with its neighbours, and its failure would either be lost or fail them.
#[test]
fn a_batch_commits_its_successes_and_fails_only_its_failures() {
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).expect("open");
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let taken = record("taken");
    let mut updated = record("updated");
    runtime.block_on(catalog.insert(&taken)).expect("seed");
    runtime.block_on(catalog.insert(&updated)).expect("seed");
    let batches_before = catalog.shared.committer.batches();

    // The first write leads and waits for the writer connection; the rest queue.
    let held = lock(&catalog.shared.writer);
    let first = spawn(&catalog, |c| Box::pin(async move { c.insert(&record("first")).await }));
    wait_leading(&catalog, batches_before);
    let mut next = updated.clone();
    next.revision = Revision(1);
    let conflicting = next.clone();
    updated = next.clone();
    let writes: Vec<Box<dyn FnOnce(SqliteCatalog) -> _ + Send>> = vec![
        Box::new(|c: SqliteCatalog| -> std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send>> {
            Box::pin(async move { c.insert(&record("fresh-1")).await })
        }),
        Box::new(|c: SqliteCatalog| {
            Box::pin(async move { c.insert_many(vec![record("half"), record("taken")]).await })
        }),
        Box::new(|c: SqliteCatalog| Box::pin(async move { c.insert(&record("taken")).await })),
        Box::new(move |c: SqliteCatalog| {
            Box::pin(async move { c.update_audited(&next, Revision(0), vec![draft(&next)]).await.map(drop) })
        }),
        Box::new(move |c: SqliteCatalog| {
            // The update before it moved the revision on: a compare-and-set miss.
            Box::pin(
                async move { c.update_audited(&conflicting, Revision(0), vec![draft(&conflicting)]).await.map(drop) },
            )
        }),
        Box::new(|c: SqliteCatalog| Box::pin(async move { c.append_audit(draft(&record("fresh-1"))).await.map(drop) })),
        Box::new(|c: SqliteCatalog| Box::pin(async move { c.insert(&record("fresh-2")).await })),
        Box::new(|c: SqliteCatalog| Box::pin(async move { c.insert(&record("fresh-2")).await })),
    ];
    let mut handles = Vec::new();
    for (queued, write) in writes.into_iter().enumerate() {
        handles.push(spawn(&catalog, write));
        // One at a time, so the queue's order is the list's.
        wait_queued(&catalog, queued + 1);
    }
    drop(held);
    first.join().expect("first").expect("first insert");
    let outcomes: Vec<Outcome> = handles.into_iter().map(|handle| handle.join().expect("thread")).collect();
    assert_eq!(
        catalog.shared.committer.batches() - batches_before,
        2,
        "the first write alone, then the eight queued behind it in one transaction"
    );

    let codes: Vec<&str> =
        outcomes.iter().map(|outcome| outcome.as_ref().map_or_else(|error| error.code(), |()| "ok")).collect();
    assert_eq!(
        codes,
        ["ok", "already_exists", "already_exists", "ok", "revision_conflict", "ok", "ok", "already_exists"],
        "{outcomes:?}"
    );
    let get = |id: &str| runtime.block_on(catalog.get(&record(id).key())).expect("get");
    assert!(get("first").is_some() && get("fresh-1").is_some() && get("fresh-2").is_some());
    assert_eq!(get("half"), None, "a failed write's earlier changes are rolled back to its savepoint");
    assert_eq!(get("updated"), Some(updated.clone()));
    assert_eq!(get("taken"), Some(taken));
    let listed = runtime.block_on(catalog.list(&berth_catalog::SessionQuery {
        label: Some("blue".into()),
        ..berth_catalog::SessionQuery::tenant(TenantId::parse("t").expect("tenant"))
    }));
    assert_eq!(listed.expect("list").len(), 5, "label rows of the committed sessions only");

    // The chain: the update's record, then the standalone audit record, chained in queue
    // order; the compare-and-set miss left none.
    let tenant = TenantId::parse("t").expect("tenant");
    let entries = runtime.block_on(catalog.read_audit(&tenant, 0, 100)).expect("audit");
    let head = runtime.block_on(catalog.audit_head(&tenant)).expect("head");
    let sessions: Vec<_> = entries.iter().map(|entry| entry.draft.session.as_ref().map(|id| id.as_str())).collect();
    assert_eq!(sessions, [Some("updated"), Some("fresh-1")]);
    let verification = audit::verify(&entries, head);
    assert_eq!(verification.broken_at, None, "{verification:?}");
}

/// A lone writer leads at once: one transaction per write, nothing queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_writer_commits_alone() {
    let catalog = SqliteCatalog::open_in_memory().expect("open");
    let before = catalog.shared.committer.batches();
    for n in 0..5 {
        catalog.insert(&record(&format!("s{n}"))).await.expect("insert");
    }
    assert_eq!(catalog.shared.committer.batches() - before, 5);
    assert_eq!(catalog.shared.committer.queued(), 0);
}

/// Many concurrent inserts, a third of them duplicates of another's id: each id is
/// stored once, every caller gets exactly its own outcome, and fewer transactions than
/// writes ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_inserts_with_duplicates_each_get_their_own_outcome() {
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).expect("open");
    let before = catalog.shared.committer.batches();
    let writers = 24;
    let per_writer = 20;
    let mut tasks = tokio::task::JoinSet::new();
    for writer in 0..writers {
        let catalog = catalog.clone();
        tasks.spawn(async move {
            let mut outcomes = Vec::new();
            for n in 0..per_writer {
                // Writers 0 and 1 (and 2 and 3, …) insert the same ids.
                let id = format!("w{}-{n}", writer / 2);
                outcomes.push((id.clone(), catalog.insert(&record(&id)).await.map_err(|error| error.code())));
            }
            outcomes
        });
    }
    let mut stored = std::collections::BTreeMap::<String, usize>::new();
    while let Some(joined) = tasks.join_next().await {
        for (id, outcome) in joined.expect("task") {
            match outcome {
                Ok(()) => *stored.entry(id).or_default() += 1,
                Err(code) => assert_eq!(code, "already_exists"),
            }
        }
    }
    assert_eq!(stored.len(), writers / 2 * per_writer, "every id stored");
    assert!(stored.values().all(|&count| count == 1), "exactly one insert of each id succeeded");
    for id in stored.keys() {
        assert!(catalog.get(&record(id).key()).await.expect("get").is_some());
    }
    let batches = catalog.shared.committer.batches() - before;
    assert!(batches <= (writers * per_writer) as u64, "{batches} transactions");
}
