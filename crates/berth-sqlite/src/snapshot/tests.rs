//! The catalog's online copy is one snapshot, taken while another connection writes.

use super::*;
use crate::{SqliteCatalog, CATALOG_FILE_NAME};
use berth_catalog::Catalog;
use berth_core::{Revision, Scope, SessionId, Timestamp, UserId};

fn record(id: &str) -> SessionRecord {
    let scope =
        Scope { tenant: TenantId::parse("t").expect("tenant"), user: UserId::parse("u").expect("user"), project: None };
    SessionRecord {
        header: SessionHeader::new(SessionId::parse(id).expect("id"), scope, Timestamp(1)),
        status: Status::Active,
        lease_until: Timestamp(10),
        last_activity: Timestamp(1),
        revision: Revision(0),
        // Long titles: the catalog spans many pages, so the copy takes many steps.
        title: Some("x".repeat(2_000)),
        labels: Default::default(),
        event_count: 3,
        blank: false,
        runs: Vec::new(),
        status_changed_at: Timestamp(1),
        resume_mark: Default::default(),
        repair: Default::default(),
        creator: None,
    }
}

fn ids_in(path: &Path) -> Vec<String> {
    let connection = Connection::open(path).expect("open copy");
    let mut statement = connection.prepare("SELECT id FROM sessions ORDER BY tenant, id").expect("prepare");
    let ids = statement.query_map([], |row| row.get(0)).expect("query").collect::<rusqlite::Result<Vec<String>>>();
    ids.expect("ids")
}

/// Between every step of the copy another connection inserts a session. The copy, and
/// the sessions the snapshot is described by, are exactly what was committed before the
/// copy began. (Without the read transaction held across the steps, SQLite restarts the
/// copy after each write and the description is read at another moment than the pages.)
#[test]
fn the_copy_and_its_description_are_one_snapshot_while_another_connection_writes() {
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let live = dir.path().join(CATALOG_FILE_NAME);
    let catalog = SqliteCatalog::open(&live).expect("open");
    let before: Vec<String> = (0..200).map(|i| format!("s{i:04}")).collect();
    for id in &before {
        runtime.block_on(catalog.insert(&record(id))).expect("insert");
    }
    let copy = dir.path().join("copy.sqlite");
    let mut written = 0;
    let mut steps = 0;
    let snapshot = snapshot_catalog(&live, &copy, 8, &mut |_, _| {
        steps += 1;
        // Bounded, so a copy that restarts at every write still ends (and fails below).
        if written < 40 {
            written += 1;
            runtime.block_on(catalog.insert(&record(&format!("late{written:04}")))).expect("insert during the copy");
        }
    })
    .expect("snapshot");
    assert!(steps > 10, "the copy took {steps} steps: too few to interleave");
    let described: Vec<String> = snapshot.sessions.iter().map(|session| session.key.id.to_string()).collect();
    assert_eq!(described, before, "the description is the snapshot's");
    assert_eq!(ids_in(&copy), before, "the copy is the snapshot's");
    let live_count = ids_in(&live).len();
    assert_eq!(live_count, before.len() + written, "the live catalog kept every write");
    let check: String = Connection::open(&copy)
        .expect("open copy")
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .expect("integrity");
    assert_eq!(check, "ok");
    assert!(snapshot.sessions.iter().all(|session| session.event_count == 3 && !session.creating));
}

/// The copy is one self-contained file: no WAL beside it, its journal mode a rollback
/// journal, and a catalog opens it.
#[test]
fn the_copy_is_a_self_contained_catalog() {
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let live = dir.path().join(CATALOG_FILE_NAME);
    let catalog = SqliteCatalog::open(&live).expect("open");
    runtime.block_on(catalog.insert(&record("one"))).expect("insert");
    let out = dir.path().join("out");
    std::fs::create_dir(&out).expect("mkdir");
    let copy = out.join(CATALOG_FILE_NAME);
    let snapshot = snapshot_catalog(&live, &copy, SNAPSHOT_PAGES_PER_STEP, &mut |_, _| {}).expect("snapshot");
    assert_eq!(snapshot.schema_version, SCHEMA_VERSION);
    assert!(snapshot.store_token.is_some());
    assert_eq!(snapshot.bytes, std::fs::metadata(&copy).expect("stat").len());
    let names: Vec<_> = std::fs::read_dir(&out).expect("list").map(|entry| entry.expect("entry").file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from(CATALOG_FILE_NAME)], "one file");
    let mode: String =
        Connection::open(&copy).expect("open").query_row("PRAGMA journal_mode", [], |row| row.get(0)).expect("mode");
    assert_eq!(mode, "delete");
    let reopened = SqliteCatalog::open(&copy).expect("a catalog opens the copy");
    let key = record("one").key();
    assert!(runtime.block_on(reopened.get(&key)).expect("get").is_some());
}

/// A file that is not a berth catalog, a missing one and an existing destination are
/// refused with typed errors, and nothing is written.
#[test]
fn bad_sources_and_destinations_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = snapshot_catalog(&dir.path().join("none.sqlite"), &dir.path().join("a"), 8, &mut |_, _| {});
    assert_eq!(missing.expect_err("missing").code(), "not_found");
    let foreign = dir.path().join("foreign.sqlite");
    Connection::open(&foreign).expect("open").execute_batch("CREATE TABLE t (x)").expect("create");
    let refused = snapshot_catalog(&foreign, &dir.path().join("b"), 8, &mut |_, _| {}).expect_err("foreign");
    assert_eq!(refused.code(), "corrupt", "{refused}");
    let live = dir.path().join(CATALOG_FILE_NAME);
    drop(SqliteCatalog::open(&live).expect("open"));
    let taken = dir.path().join("taken");
    std::fs::write(&taken, b"keep").expect("write");
    let refused = snapshot_catalog(&live, &taken, 8, &mut |_, _| {}).expect_err("existing destination");
    assert_eq!(refused.code(), "already_exists", "{refused}");
    assert_eq!(std::fs::read(&taken).expect("read"), b"keep");
}
