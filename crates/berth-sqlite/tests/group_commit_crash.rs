//! A process killed (SIGKILL) while its catalog commits batches of concurrent writes
//! (group commit) leaves each batched write wholly there or wholly absent: a session's
//! row, its label row and its audit record together, and the audit chain verified.
//!
//! The test re-runs its own binary as the child (`group_commit_child`, which does
//! nothing unless `BERTH_GROUP_COMMIT_CHILD` names a catalog file): eight tasks create
//! sessions the way the service does — the record inserted at revision 1 (`creating`),
//! then updated to revision 2 with its audit record — and print each id once its second
//! write returned. The parent kills the child after some hundreds, mid-stream.

use berth_catalog::audit::{self, AuditDraft};
use berth_catalog::{Catalog, SessionRecord};
use berth_core::lifecycle::Status;
use berth_core::{Revision, SessionId, TenantId, Timestamp, UserId};
use berth_sqlite::SqliteCatalog;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::process::{Command, Stdio};

const CHILD_ENV: &str = "BERTH_GROUP_COMMIT_CHILD";
const TASKS: usize = 8;
/// Creates acknowledged before the kill.
const ACKNOWLEDGED_BEFORE_KILL: usize = 300;

fn tenant() -> TenantId {
    TenantId::parse("crash").expect("tenant")
}

fn record(id: &str, revision: u64, status: Status) -> SessionRecord {
    let scope = berth_core::Scope { tenant: tenant(), user: UserId::parse("u").expect("user"), project: None };
    SessionRecord {
        header: berth_core::SessionHeader::new(SessionId::parse(id).expect("id"), scope, Timestamp(1)),
        status,
        lease_until: Timestamp(10),
        last_activity: Timestamp(1),
        revision: Revision(revision),
        title: None,
        labels: BTreeSet::from(["batched".to_owned()]),
        event_count: 0,
        blank: false,
        runs: Vec::new(),
        status_changed_at: Timestamp(1),
        resume_mark: Default::default(),
        repair: Default::default(),
        creator: None,
    }
}

/// The child: creates sessions from eight tasks until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_child() {
    let Some(path) = std::env::var_os(CHILD_ENV) else { return };
    let catalog = SqliteCatalog::open(path).expect("open");
    let stdout = std::sync::Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..TASKS {
        let (catalog, stdout) = (catalog.clone(), stdout.clone());
        tasks.spawn(async move {
            for n in 0.. {
                let id = format!("c{task}-{n}");
                catalog.insert(&record(&id, 1, Status::Creating)).await.expect("insert");
                let done = record(&id, 2, Status::Active);
                let draft = AuditDraft {
                    tenant: tenant(),
                    time: Timestamp(2),
                    actor: "service:crash".into(),
                    action: "create".into(),
                    session: Some(done.header.id.clone()),
                    revision: Some(Revision(2)),
                    outcome: "ok".into(),
                    details: serde_json::json!({}),
                };
                catalog.update_audited(&done, Revision(1), vec![draft]).await.expect("update");
                let mut out = stdout.lock().expect("stdout");
                writeln!(out, "created {id}").and_then(|()| out.flush()).expect("print");
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("task");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_batched_creates_leaves_each_create_whole_and_the_chain_verified() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(berth_sqlite::CATALOG_FILE_NAME);
    drop(SqliteCatalog::open(&path).expect("create the catalog"));
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["group_commit_child", "--exact", "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let mut acknowledged = BTreeSet::new();
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    while acknowledged.len() < ACKNOWLEDGED_BEFORE_KILL {
        let line = lines.next().expect("the child stopped early").expect("read");
        if let Some(id) = line.strip_prefix("created ") {
            acknowledged.insert(id.to_owned());
        }
    }
    // SIGKILL: `Child::kill` sends it on Unix.
    child.kill().expect("kill");
    child.wait().expect("reap");

    let raw = rusqlite::Connection::open(&path).expect("raw");
    let mut statement = raw.prepare("SELECT id, revision FROM sessions WHERE tenant = 'crash'").expect("prepare");
    let sessions: BTreeMap<String, i64> = statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .expect("query")
        .collect::<rusqlite::Result<_>>()
        .expect("rows");
    let labelled: i64 = raw
        .query_row("SELECT count(*) FROM session_labels WHERE tenant = 'crash' AND label = 'batched'", [], |row| {
            row.get(0)
        })
        .expect("labels");
    assert_eq!(labelled as usize, sessions.len(), "each stored session has its label row, and only those");

    let catalog = SqliteCatalog::open(&path).expect("reopen");
    let entries = catalog.read_audit(&tenant(), 0, 1_000_000).await.expect("audit");
    let head = catalog.audit_head(&tenant()).await.expect("head");
    let verification = audit::verify(&entries, head);
    assert_eq!(verification.broken_at, None, "{verification:?}");
    let audited: BTreeSet<String> =
        entries.iter().filter_map(|entry| entry.draft.session.as_ref().map(|id| id.to_string())).collect();
    assert_eq!(audited.len(), entries.len(), "one audit record per create");
    for (id, revision) in &sessions {
        match revision {
            2 => assert!(audited.contains(id), "{id} was finished without its audit record"),
            1 => assert!(!audited.contains(id), "{id} has an audit record but not its final revision"),
            other => panic!("{id} at revision {other}"),
        }
    }
    for id in &audited {
        assert_eq!(sessions.get(id), Some(&2), "{id}'s audit record without its final record");
    }
    for id in &acknowledged {
        assert_eq!(sessions.get(id), Some(&2), "acknowledged create {id} lost");
    }
}
