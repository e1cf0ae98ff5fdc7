//! The SQLite catalog stores a session record as exactly the golden encoding of
//! `crates/berth-catalog/tests/golden/SessionRecord.jsonl`: each golden record inserted
//! through the catalog reads back, from the `record_json` column itself, as the same
//! bytes (and through the catalog as the same record).

use berth_catalog::{Catalog, SessionRecord};
use berth_sqlite::SqliteCatalog;
use std::path::PathBuf;

#[tokio::test]
async fn record_json_is_the_golden_encoding() {
    let golden_path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../berth-catalog/tests/golden/SessionRecord.jsonl");
    let golden = std::fs::read_to_string(golden_path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("catalog.sqlite");
    let catalog = SqliteCatalog::open(path.clone()).unwrap();
    let mut lines: Vec<(&str, SessionRecord)> =
        golden.lines().map(|line| (line, serde_json::from_str(line).unwrap())).collect();
    // One row per id: the bare top-level record (the fork's parent) first, then the fork.
    lines.sort_by_key(|(_, record)| record.header.parent.is_some());
    lines.dedup_by(|(_, a), (_, b)| a.header.id == b.header.id);
    assert_eq!(lines.len(), 2);
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
