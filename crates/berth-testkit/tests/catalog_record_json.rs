//! The SQLite and PostgreSQL catalogs store a session record as exactly the golden
//! encoding of `crates/berth-catalog/tests/golden/SessionRecord.jsonl`: each golden
//! record inserted through the catalog reads back, from the `record_json` column itself,
//! as the same bytes (and through the catalog as the same record).

use berth_catalog::{Catalog, SessionRecord};
use berth_postgres::testing::TestDatabase;
use berth_postgres::{PostgresBackend, PostgresOptions};
use berth_sqlite::SqliteCatalog;
use std::path::PathBuf;

/// The golden lines with their records, one per id: the bare top-level record (the
/// fork's parent) first, then the fork.
fn golden_records(golden: &str) -> Vec<(&str, SessionRecord)> {
    let mut lines: Vec<(&str, SessionRecord)> =
        golden.lines().map(|line| (line, serde_json::from_str(line).unwrap())).collect();
    lines.sort_by_key(|(_, record)| record.header.parent.is_some());
    lines.dedup_by(|(_, a), (_, b)| a.header.id == b.header.id);
    assert_eq!(lines.len(), 2);
    lines
}

fn golden_text() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../berth-catalog/tests/golden/SessionRecord.jsonl");
    std::fs::read_to_string(path).unwrap()
}

#[tokio::test]
async fn postgres_record_json_is_the_golden_encoding() {
    let golden = golden_text();
    let lines = golden_records(&golden);
    let database = TestDatabase::create().await;
    let options = PostgresOptions { pool_size: 2, ..PostgresOptions::default() };
    let catalog = PostgresBackend::connect(&database.url(), options).await.expect("connect").catalog();
    for (_, record) in &lines {
        catalog.insert(record).await.unwrap();
    }
    let client = database.client().await;
    for (line, record) in &lines {
        let row = client
            .query_one(
                "SELECT record_json FROM sessions WHERE tenant = $1 AND id = $2",
                &[&record.header.scope.tenant.as_str(), &record.header.id.as_str()],
            )
            .await
            .unwrap();
        let stored: String = row.get(0);
        assert_eq!(&stored, line, "PostgreSQL stores another encoding than the golden file");
        assert_eq!(catalog.get(&record.key()).await.unwrap().as_ref(), Some(record));
    }
}

#[tokio::test]
async fn sqlite_record_json_is_the_golden_encoding() {
    let golden = golden_text();
    let lines = golden_records(&golden);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("catalog.sqlite");
    let catalog = SqliteCatalog::open(path.clone()).unwrap();
    for (_, record) in &lines {
        catalog.insert(record).await.unwrap();
    }
    let connection = rusqlite::Connection::open(&path).unwrap();
    for (line, record) in &lines {
        let stored: String = connection
            .query_row(
                "SELECT record_json FROM sessions WHERE tenant = ?1 AND id = ?2",
                (record.header.scope.tenant.as_str(), record.header.id.as_str()),
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(&stored, line, "SQLite stores another encoding than the golden file");
        assert_eq!(catalog.get(&record.key()).await.unwrap().as_ref(), Some(record));
    }
}
