//! Unit tests: query plans of the listing shapes, schema versioning and identity,
//! error classification, concurrent opening.

use super::*;
use crate::listing::{plan, Driver};
use berth_catalog::{Catalog, ListCursor, SessionQuery};
use berth_core::lifecycle::Status;
use berth_core::{SessionId, TenantId, Timestamp, UserId};

fn tenant_query() -> SessionQuery {
    SessionQuery::tenant(TenantId::parse("t").expect("tenant"))
}

/// `EXPLAIN QUERY PLAN` detail lines of every sub-query of `query`.
fn explain(catalog: &SqliteCatalog, query: &SessionQuery) -> Vec<Vec<String>> {
    let connection = catalog.shared.writer().expect("writer");
    plan(query)
        .iter()
        .map(|sub_query| plan_lines(&connection, &sub_query.sql, rusqlite::params_from_iter(sub_query.params.iter())))
        .collect()
}

/// `EXPLAIN QUERY PLAN` detail lines of `sql` with `params`.
fn plan_lines(connection: &rusqlite::Connection, sql: &str, params: impl rusqlite::Params) -> Vec<String> {
    let mut statement = connection.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).expect("prepare");
    let rows = statement.query_map(params, |row| row.get::<_, String>(3)).expect("explain");
    rows.collect::<rusqlite::Result<Vec<String>>>().expect("plan rows")
}

/// The listing shapes the service uses, with the index each must be answered from.
fn listing_shapes() -> Vec<(&'static str, SessionQuery, &'static str)> {
    let cursor = Some(ListCursor { last_activity: Timestamp(5_000), id: SessionId::parse("s-9").expect("id") });
    let alice = Some(UserId::parse("alice").expect("user"));
    let base = tenant_query();
    let status = SessionQuery { statuses: vec![Status::Active], ..base.clone() };
    let label = SessionQuery { label: Some("red".into()), ..base.clone() };
    let status_label = SessionQuery { label: Some("red".into()), ..status.clone() };
    // What `SessionService::list` sends when the caller names no status, and what the
    // retention sweeper sends.
    let visible = vec![Status::Active, Status::Idle, Status::Closed, Status::Expired];
    let service_default = SessionQuery { statuses: visible, limit: 51, ..base.clone() };
    let sweep = SessionQuery {
        statuses: vec![Status::Active, Status::Idle],
        lease_before: Some(Timestamp(9)),
        include_blank: true,
        ..base.clone()
    };
    vec![
        ("service listing default", service_default.clone(), "sessions_by_status"),
        (
            "service listing default for a user",
            SessionQuery { user: alice.clone(), ..service_default },
            "sessions_by_user",
        ),
        ("retention sweep", sweep, "sessions_by_status"),
        ("tenant", base.clone(), "sessions_by_activity"),
        ("tenant, next page", SessionQuery { cursor: cursor.clone(), ..base.clone() }, "sessions_by_activity"),
        ("tenant, blank included", SessionQuery { include_blank: true, ..base.clone() }, "sessions_by_activity"),
        ("tenant + status", status.clone(), "sessions_by_status"),
        ("tenant + status, next page", SessionQuery { cursor: cursor.clone(), ..status.clone() }, "sessions_by_status"),
        (
            "tenant + 2 statuses",
            SessionQuery { statuses: vec![Status::Active, Status::Idle], ..base.clone() },
            "sessions_by_status",
        ),
        ("tenant + user", SessionQuery { user: alice.clone(), ..base.clone() }, "sessions_by_user"),
        ("tenant + user + status", SessionQuery { user: alice, ..status.clone() }, "sessions_by_user"),
        ("tenant + label", label.clone(), "session_labels_by_activity"),
        ("tenant + label, next page", SessionQuery { cursor: cursor.clone(), ..label }, "session_labels_by_activity"),
        ("tenant + status + label", status_label.clone(), "session_labels_by_status"),
        ("tenant + status + label, next page", SessionQuery { cursor, ..status_label }, "session_labels_by_status"),
        (
            "tenant + project",
            SessionQuery { project: Some(berth_core::ProjectId::parse("p").expect("project")), ..base.clone() },
            "sessions_by_project",
        ),
        (
            "tenant + parent",
            SessionQuery { parent: Some(SessionId::parse("root").expect("id")), ..base },
            "sessions_by_parent",
        ),
    ]
}

/// Every common listing shape is an index range scan: no full scan of a table and no
/// temporary sort, so a page costs `limit` index entries whatever the table size.
#[test]
fn listing_shapes_use_their_index_without_scan_or_sort() {
    let catalog = SqliteCatalog::open_in_memory().expect("open");
    for (name, query, index) in listing_shapes() {
        assert_ne!(Driver::choose(&query), Driver::AnyTenant);
        for lines in explain(&catalog, &query) {
            eprintln!("{name}: {lines:?}");
            assert!(lines[0].starts_with("SEARCH") && lines[0].contains(index), "{name}: {lines:?}");
            for line in &lines {
                assert!(!line.contains("TEMP B-TREE"), "{name}: sorts: {lines:?}");
                assert!(!line.starts_with("SCAN"), "{name}: scans: {lines:?}");
            }
        }
    }
}

#[test]
fn cursor_bounds_the_index_range() {
    let catalog = SqliteCatalog::open_in_memory().expect("open");
    let cursor = Some(ListCursor { last_activity: Timestamp(1), id: SessionId::parse("s").expect("id") });
    let label = SessionQuery { label: Some("red".into()), cursor: cursor.clone(), ..tenant_query() };
    for query in [SessionQuery { cursor, ..tenant_query() }, label] {
        let lines = explain(&catalog, &query).remove(0);
        assert!(lines[0].contains("(last_activity,id)<(?,?)"), "{lines:?}");
    }
}

#[test]
fn reopening_keeps_the_schema_version_wal_and_identity() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    drop(SqliteCatalog::open(&path).expect("create"));
    let catalog = SqliteCatalog::open(&path).expect("reopen");
    let connection = catalog.shared.writer().expect("writer");
    let pragma = |name: &str| -> String {
        connection.query_row(&format!("PRAGMA {name}"), [], |row| row.get::<_, rusqlite::types::Value>(0)).map_or_else(
            |error| panic!("{name}: {error}"),
            |value| match value {
                rusqlite::types::Value::Integer(number) => number.to_string(),
                rusqlite::types::Value::Text(text) => text,
                other => format!("{other:?}"),
            },
        )
    };
    assert_eq!(pragma("user_version"), SCHEMA_VERSION.to_string());
    assert_eq!(pragma("application_id"), schema::APPLICATION_ID.to_string());
    assert_eq!(pragma("journal_mode"), "wal");
    assert_eq!(pragma("synchronous"), "2", "FULL");
    assert_eq!(pragma("foreign_keys"), "1");
}

#[test]
fn a_newer_schema_version_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    drop(SqliteCatalog::open(&path).expect("create"));
    let raw = Connection::open(&path).expect("raw");
    raw.pragma_update(None, "user_version", SCHEMA_VERSION + 1).expect("bump");
    drop(raw);
    let error = SqliteCatalog::open(&path).expect_err("newer schema");
    assert_eq!(error.code(), "format_unsupported", "{error}");
    assert!(error.to_string().contains("newer berth"), "{error}");
}

#[test]
fn another_programs_database_is_refused_untouched() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("other.sqlite");
    let raw = Connection::open(&path).expect("raw");
    raw.execute_batch("CREATE TABLE notes (body TEXT)").expect("create");
    drop(raw);
    let error = SqliteCatalog::open(&path).expect_err("foreign database");
    assert_eq!(error.code(), "format_unsupported", "{error}");
    let raw = Connection::open(&path).expect("raw");
    let tables: i64 = raw.query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0)).expect("count");
    assert_eq!(tables, 1, "nothing was migrated into it");
}

#[test]
fn a_file_that_is_not_a_database_is_corrupt() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    std::fs::write(&path, vec![0x5a; 8192]).expect("write garbage");
    let error = SqliteCatalog::open(&path).expect_err("garbage");
    assert_eq!(error.code(), "corrupt", "{error}");
    let text = error.to_string();
    assert!(text.contains(CATALOG_FILE_NAME) && !text.contains(dir.path().to_str().expect("utf-8")), "{text}");
}

/// A write lock held by another connection beyond the busy timeout is `Unavailable`;
/// reads keep working meanwhile (WAL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_beyond_the_busy_timeout_is_unavailable() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let options = SqliteOptions { busy_timeout: Duration::from_millis(100), ..SqliteOptions::default() };
    let catalog = SqliteCatalog::open_with(&path, options).expect("open");
    let record = berth_testkit_like_record();
    catalog.insert(&record).await.expect("insert");

    let holder = Connection::open(&path).expect("raw");
    holder.execute_batch("BEGIN IMMEDIATE").expect("take the write lock");
    let mut next = record.clone();
    next.revision = berth_core::Revision(1);
    let error = catalog.update(&next, berth_core::Revision(0)).await.expect_err("locked");
    assert_eq!(error.code(), "unavailable", "{error}");
    assert!(!error.to_string().to_lowercase().contains("update sessions"), "no SQL in {error}");
    assert_eq!(catalog.get(&record.key()).await.expect("read while locked"), Some(record.clone()));
    holder.execute_batch("ROLLBACK").expect("release");
    catalog.update(&next, berth_core::Revision(0)).await.expect("update after release");
}

fn berth_testkit_like_record() -> berth_catalog::SessionRecord {
    let scope = berth_core::Scope {
        tenant: TenantId::parse("t").expect("tenant"),
        user: UserId::parse("u").expect("user"),
        project: None,
    };
    berth_catalog::SessionRecord {
        header: berth_core::SessionHeader::new(SessionId::parse("s").expect("id"), scope, Timestamp(1)),
        status: Status::Active,
        lease_until: Timestamp(10),
        last_activity: Timestamp(1),
        revision: berth_core::Revision(0),
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

/// Several processes (here: threads with their own connections) opening one fresh
/// file at once all succeed, and the schema is created once.
#[test]
fn concurrent_first_opens_all_succeed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let barrier = std::sync::Barrier::new(6);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..6)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    SqliteCatalog::open(&path).map(drop)
                })
            })
            .collect();
        for handle in handles {
            handle.join().expect("thread").expect("open");
        }
    });
    let raw = Connection::open(&path).expect("raw");
    let version: i64 = raw.query_row("PRAGMA user_version", [], |row| row.get(0)).expect("version");
    assert_eq!(version, SCHEMA_VERSION);
}

/// A duplicate insert inside `insert_many` rolls the whole batch back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_many_is_all_or_nothing() {
    let catalog = SqliteCatalog::open_in_memory().expect("open");
    let first = berth_testkit_like_record();
    let mut second = first.clone();
    second.header.id = SessionId::parse("s2").expect("id");
    catalog.insert(&second).await.expect("insert");
    let error = catalog.insert_many(vec![first.clone(), second]).await.expect_err("duplicate in batch");
    assert_eq!(error.code(), "already_exists", "{error}");
    assert_eq!(catalog.get(&first.key()).await.expect("get"), None, "rolled back");
}

#[tokio::test]
async fn activity_updates_are_relaxed_and_leave_the_connection_full() {
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).expect("open");
    let mut record = berth_testkit_like_record();
    catalog.insert(&record).await.expect("insert");
    let expected = record.revision;
    record.revision = berth_core::Revision(expected.0 + 1);
    record.event_count = 42;
    catalog.update_activity(&record, expected).await.expect("relaxed update");
    assert_eq!(catalog.get(&record.key()).await.expect("get"), Some(record.clone()));
    let stale = catalog.update_activity(&record, expected).await.unwrap_err();
    assert_eq!(stale.code(), "revision_conflict", "the relaxed write is still a compare-and-set");
    let synchronous: i64 =
        catalog.shared.writer().expect("writer").query_row("PRAGMA synchronous", [], |row| row.get(0)).expect("pragma");
    assert_eq!(synchronous, 2, "every other write is FULL again");
}

/// Past the thresholds where a search walks the ordered index (common terms, common
/// filter values, a large prefix in updated order) instead of reading the few matches
/// through the field or full-text index, every plan returns exactly the reference's
/// pages (the conformance suite's populations are small, so they take the other plans).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_search_plans_at_scale_match_the_reference() {
    use berth_catalog::scoped::{Condition, Filter, FilterOp, MemoryItem, MemoryQuota, MemorySearch, MemoryStore};
    use berth_catalog::scoped::{Namespace, SearchOrder, TextQuery};
    use berth_core::JsonText;
    let catalog = SqliteCatalog::open_in_memory().expect("open");
    let tenant = TenantId::parse("t").expect("tenant");
    let namespaces = ["user/a", "user/a/x", "user/ab", "user/a/x/y"];
    let items: Vec<MemoryItem> = (0..3_000u64)
        .map(|i| {
            let value = format!(
                r#"{{"kind":"k{}","n":{}{},"s":"{}","b":{},"text":"w{} {} {}"}}"#,
                i % 3,
                i % 7,
                if i % 2 == 0 { ".0" } else { "" },
                ["a", "b", "B", "é"][(i % 4) as usize],
                i % 5 == 0,
                i % 11,
                if i % 2 == 0 { "common" } else { "other" },
                // Every item holds 東 and 京 (candidates of 東京), half of them 東京.
                if i % 2 == 0 { "東京都" } else { "京都東" }
            );
            MemoryItem {
                namespace: Namespace::parse(namespaces[(i % 4) as usize]).expect("namespace"),
                key: format!("k{:05}", (i * 7919) % 3_000),
                value: JsonText::parse(&value).expect("value"),
                revision: 1,
                created_at: Timestamp(i),
                updated_at: Timestamp((i * 37) % 500),
                expires_at: (i % 13 == 0).then_some(Timestamp(10)),
                ttl_ms: None,
                bound_to: None,
            }
        })
        .collect();
    catalog.memory_import_many(&tenant, items.clone(), &MemoryQuota::default()).await.expect("seed");
    let now = Timestamp(100);
    let condition = |field: &str, op, operand: &str| {
        Filter::new(vec![Condition { field: field.into(), op, operand: JsonText::parse(operand).expect("operand") }])
            .expect("filter")
    };
    let filters = [
        Filter::default(),
        condition("kind", FilterOp::Eq, r#""k1""#),
        condition("n", FilterOp::Gte, "3"),
        condition("n", FilterOp::Eq, "6e0"),
        condition("n", FilterOp::In, "[1, 2.0]"),
        condition("s", FilterOp::Lt, r#""b""#),
        condition("b", FilterOp::Eq, "true"),
        condition("s", FilterOp::Ne, r#""a""#),
        // Past the field threshold: walked, tested through the index per row.
        condition("n", FilterOp::Gte, "0"),
        condition("kind", FilterOp::In, r#"["k0", "k1", "k9"]"#),
    ];
    for prefix in ["user/a", "user/a/x"] {
        for (f, filter) in filters.iter().enumerate() {
            for (query, order) in [
                (None, SearchOrder::Key),
                (None, SearchOrder::UpdatedAt),
                (Some("common"), SearchOrder::Key),
                (Some("w3"), SearchOrder::UpdatedAt),
                (Some("common w4"), SearchOrder::Relevance),
                // Candidates of the index that are not matches, past the full-text
                // threshold: walked, each checked.
                (Some("東京"), SearchOrder::Key),
                (Some("東京 w4"), SearchOrder::UpdatedAt),
                (Some("京都"), SearchOrder::Relevance),
            ] {
                // Those read every candidate: with a third of the filters only.
                if query.is_some_and(|text| !text.is_ascii()) && f % 3 != 0 {
                    continue;
                }
                let mut search = MemorySearch {
                    filter: filter.clone(),
                    query: query.map(|text| TextQuery::parse(text).expect("query")),
                    order,
                    limit: 40,
                    ..MemorySearch::new(Namespace::parse(prefix).expect("prefix"))
                };
                for page in 0..3 {
                    let expected = search.page(items.iter().cloned(), now);
                    let actual = catalog.memory_search(&tenant, &search, now).await.expect("search");
                    assert_eq!(actual, expected, "page {page} of {search:?}");
                    match search.next_cursor(&actual) {
                        Some(cursor) => search.cursor = Some(cursor),
                        None => break,
                    }
                }
            }
        }
    }
}

/// Every item of `search`, read page by page (`page_size`) through its cursors.
async fn paged_search(
    catalog: &SqliteCatalog,
    tenant: &TenantId,
    search: &berth_catalog::scoped::MemorySearch,
    page_size: usize,
    now: Timestamp,
) -> Vec<berth_catalog::scoped::MemoryItem> {
    use berth_catalog::scoped::{MemorySearch, SearchCursor};
    use berth_catalog::MemoryStore;
    let mut paged = MemorySearch { limit: page_size, ..search.clone() };
    let mut seen = Vec::new();
    loop {
        let page = catalog.memory_search(tenant, &paged, now).await.expect("page");
        let next = paged.next_cursor(&page);
        seen.extend(page);
        match next {
            Some(cursor) => paged.cursor = Some(SearchCursor::decode(&cursor.encode()).expect("cursor")),
            None => return seen,
        }
    }
}

/// A catalog file at schema `version` (its migrations applied raw, as that berth left
/// it), with whatever `fill` stores in it.
fn catalog_at_version(path: &std::path::Path, version: usize, fill: impl FnOnce(&rusqlite::Transaction<'_>)) {
    let mut raw = Connection::open(path).expect("raw");
    let transaction = raw.transaction().expect("transaction");
    for migration in &schema::MIGRATIONS_FOR_TESTS[..version] {
        transaction.execute_batch(migration).expect("older migration");
    }
    transaction.pragma_update(None, "user_version", version as i64).expect("version");
    transaction.pragma_update(None, "application_id", schema::APPLICATION_ID).expect("identity");
    fill(&transaction);
    transaction.commit().expect("commit");
}

/// A V3 catalog's memory items get their `memory_term_counts` rows when V4 is applied,
/// so one-term relevance searches (which walk that index) find items stored before it.
#[tokio::test]
async fn v4_fills_term_counts_for_items_stored_before_it() {
    use berth_catalog::scoped::{MemorySearch, Namespace, SearchOrder, TextQuery};
    use berth_catalog::MemoryStore;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    catalog_at_version(&path, 3, |transaction| {
        for (id, key, value) in [(1, "once", r#"{"text":"tea"}"#), (2, "twice", r#"{"text":"tea tea","n":1}"#)] {
            transaction
                .execute(
                    "INSERT INTO memory_items (id, tenant, namespace, key, value, revision, created_at, updated_at, bytes) \
                     VALUES (?1, 't', 'user/alice', ?2, ?3, 1, 1, 1, 10)",
                    (id, key, value),
                )
                .expect("V3 item");
        }
        // And their full-text rows, as V3 wrote them.
        transaction
            .execute_batch("INSERT INTO memory_terms (rowid, terms) VALUES (1, 'tea'), (2, 'tea tea')")
            .expect("V3 terms");
    });
    let catalog = SqliteCatalog::open(&path).expect("migrate to V4");
    let search = MemorySearch {
        query: Some(TextQuery::parse("tea").expect("query")),
        order: SearchOrder::Relevance,
        ..MemorySearch::new(Namespace::parse("user/alice").expect("namespace"))
    };
    let tenant = TenantId::parse("t").expect("tenant");
    let keys: Vec<String> = catalog
        .memory_search(&tenant, &search, Timestamp(2))
        .await
        .expect("search")
        .into_iter()
        .map(|item| item.key)
        .collect();
    assert_eq!(keys, ["twice", "once"], "ordered by how often the term occurs");
    let connection = catalog.shared.index().expect("index connection");
    let plan: Vec<String> = connection
        .prepare(
            "EXPLAIN QUERY PLAN SELECT c.item FROM memory_term_counts AS c INDEXED BY memory_term_counts_by_rank \
             WHERE c.tenant = 't' AND c.term = 'tea' ORDER BY c.count DESC, c.namespace, c.key LIMIT 5",
        )
        .expect("explain")
        .query_map([], |row| row.get::<_, String>(3))
        .expect("plan")
        .collect::<rusqlite::Result<_>>()
        .expect("plan rows");
    assert!(plan.iter().all(|step| !step.contains("TEMP B-TREE")), "walked in order, never sorted: {plan:?}");
}

/// The changes (schema V9) of memory items put while nothing indexed them — here the
/// test holds the index connection, so the indexing thread cannot — survive the process
/// and are applied by the next process (its indexing thread, or its first search), and
/// with the connection free the thread applies every change without any search.
#[tokio::test]
async fn changes_not_yet_applied_survive_a_reopen_and_the_thread_applies_them() {
    use berth_catalog::scoped::{MemoryPut, MemoryQuota, MemorySearch, Namespace, TextQuery};
    use berth_catalog::MemoryStore;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let tenant = TenantId::parse("t").expect("tenant");
    let namespace = Namespace::parse("user/alice").expect("namespace");
    let put = |i: usize| MemoryPut {
        namespace: namespace.clone(),
        key: format!("k{i:03}"),
        value: berth_core::JsonText::parse(&format!(r#"{{"text":"tea number{i}"}}"#)).expect("value"),
        expected_revision: None,
        ttl_ms: None,
        bound_to: None,
    };
    let total = 150;
    {
        let catalog = SqliteCatalog::open(&path).expect("open");
        let held = catalog.shared.index().expect("index connection");
        for i in 0..total {
            catalog.memory_put(&tenant, &put(i), Timestamp(10), &MemoryQuota::default()).await.expect("put");
        }
        assert_eq!(behind(&held), total as i64, "every put waits for its search rows");
        drop(held);
        // The thread may start on them as the connection is let go; the process "stops".
    }
    let catalog = SqliteCatalog::open(&path).expect("reopen");
    let search = MemorySearch {
        query: Some(TextQuery::parse("tea").expect("query")),
        limit: 1000,
        ..MemorySearch::new(namespace.clone())
    };
    let found = catalog.memory_search(&tenant, &search, Timestamp(11)).await.expect("search");
    assert_eq!(found.len(), total, "every item, the waiting ones too");
    assert_eq!(behind(&catalog.shared.index().expect("index connection")), 0, "applied");
    let last =
        MemorySearch { query: Some(TextQuery::parse(&format!("number{}", total - 1)).expect("query")), ..search };
    assert_eq!(catalog.memory_search(&tenant, &last, Timestamp(11)).await.expect("search").len(), 1);
    // More puts, no search: the thread applies them.
    for i in total..total + 50 {
        catalog.memory_put(&tenant, &put(i), Timestamp(12), &MemoryQuota::default()).await.expect("put");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while behind(&catalog.shared.index().expect("index connection")) > 0 {
        assert!(std::time::Instant::now() < deadline, "the thread applied the changes");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// How many changes and new items the search file does not hold yet (on the index
/// connection).
fn behind(connection: &Connection) -> i64 {
    connection
        .query_row(
            "SELECT (SELECT count(*) FROM main.memory_changes WHERE seq > (SELECT done FROM search.memory_search_state)) \
             + (SELECT count(*) FROM main.memory_items WHERE id > (SELECT items FROM search.memory_search_items))",
            [],
            |row| row.get(0),
        )
        .expect("behind")
}

/// Schema V6 keeps term counts only where a term repeats: a V5 catalog's count-1 rows go,
/// and a one-term relevance search still ranks every match — the repeats from the rank
/// index, then the single occurrences in key order — page by page, over more matches
/// than are read whole (`FEW_TEXT_MATCHES`), exactly as the reference does.
#[tokio::test]
async fn v6_counts_only_repeated_terms_and_relevance_still_ranks_every_match() {
    use berth_catalog::scoped::{MemoryItem, MemoryQuota, MemorySearch, Namespace, SearchOrder, TextQuery};
    use berth_catalog::MemoryStore;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let tenant = TenantId::parse("t").expect("tenant");
    let namespace = Namespace::parse("user/alice").expect("namespace");
    catalog_at_version(&path, 5, |transaction| {
        transaction
            .execute_batch(
                "INSERT INTO memory_items (id, tenant, namespace, key, value, revision, created_at, updated_at, bytes) \
                 VALUES (1, 't', 'user/alice', 'a', '{\"text\":\"tea\"}', 1, 1, 1, 10), \
                        (2, 't', 'user/alice', 'b', '{\"text\":\"tea tea\"}', 1, 1, 1, 10); \
                 INSERT INTO memory_terms (rowid, terms) VALUES (1, 'tea'), (2, 'tea tea'); \
                 INSERT INTO memory_term_counts (item, tenant, term, count, namespace, key) \
                 VALUES (1, 't', 'tea', 1, 'user/alice', 'a'), (2, 't', 'tea', 2, 'user/alice', 'b');",
            )
            .expect("V5 items");
    });
    let catalog = SqliteCatalog::open(&path).expect("migrate to V6");
    let counts: Vec<(i64, i64)> = catalog
        .shared
        .index()
        .expect("index connection")
        .prepare("SELECT item, count FROM memory_term_counts ORDER BY item")
        .expect("select")
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .expect("rows")
        .collect::<rusqlite::Result<_>>()
        .expect("counts");
    assert_eq!(counts, [(2, 2)], "only the repeated term keeps its row");
    // Many matches (single ones read by walking the key order), some repeated.
    let items: Vec<MemoryItem> = (0..(crate::memory::FEW_TEXT_MATCHES as usize + 300))
        .map(|i| {
            let text = match i % 7 {
                0 => "tea tea tea",
                1 | 2 => "tea green tea",
                3 => "coffee",
                _ => "green tea",
            };
            imported_item(
                namespace.as_str(),
                format!("k{:05}", (i * 7919) % 10_000),
                &format!(r#"{{"text":"{text}","i":{i}}}"#),
                Timestamp(5),
            )
        })
        .collect();
    catalog.memory_import_many(&tenant, items.clone(), &MemoryQuota::default()).await.expect("import");
    let mut model = items;
    model.extend(
        catalog
            .memory_search(&tenant, &MemorySearch::new(namespace.clone()), Timestamp(6))
            .await
            .expect("all")
            .into_iter()
            .filter(|item| item.key.len() == 1),
    );
    let rows: i64 =
        crate::search::tests::index_value(&catalog, "SELECT count(*) FROM memory_term_counts WHERE count < 2", []);
    assert_eq!(rows, 0, "no count-1 rows are written either");
    let search = MemorySearch {
        query: Some(TextQuery::parse("tea").expect("query")),
        order: SearchOrder::Relevance,
        ..MemorySearch::new(namespace.clone())
    };
    for page_size in [1000, 333, 50] {
        let whole = MemorySearch { limit: 10_000, ..search.clone() }.page(model.iter().cloned(), Timestamp(6));
        let seen = paged_search(&catalog, &tenant, &search, page_size, Timestamp(6)).await;
        assert_eq!(seen, whole, "pages of {page_size}");
    }
}

/// `memory_fields` rows whose item's block (schema V7) has no range holding them: the
/// one invariant of `blocks.rs`, which must always be 0.
fn uncovered_field_rows(connection: &Connection) -> i64 {
    connection
        .query_row(
            "SELECT count(*) FROM memory_fields AS f CROSS JOIN memory_items AS m ON m.id = f.item \
             WHERE NOT EXISTS (SELECT 1 FROM memory_block_ranges AS r WHERE r.tenant = m.tenant \
               AND r.field = f.field AND r.kind = f.kind AND r.low <= f.sort AND r.high >= f.sort \
               AND (r.namespace, r.key) = (SELECT b.namespace, b.key FROM memory_blocks AS b \
                 WHERE b.tenant = m.tenant AND (b.namespace, b.key) <= (m.namespace, m.key) \
                 ORDER BY b.namespace DESC, b.key DESC LIMIT 1))",
            [],
            |row| row.get(0),
        )
        .expect("uncovered rows")
}

/// A memory item to import: revision 1, written at `time`, no expiry, unbound.
fn imported_item(namespace: &str, key: String, value: &str, time: Timestamp) -> berth_catalog::scoped::MemoryItem {
    berth_catalog::scoped::MemoryItem {
        namespace: berth_catalog::scoped::Namespace::parse(namespace).expect("namespace"),
        key,
        value: memory_value(value),
        revision: 1,
        created_at: time,
        updated_at: time,
        expires_at: None,
        ttl_ms: None,
        bound_to: None,
    }
}

fn memory_value(text: &str) -> berth_core::JsonText {
    berth_core::JsonText::parse(text).expect("value")
}

/// Blocks (schema V7) cover every field row through puts (batched indexing), imports,
/// replacements that move a field's value or kind, deletes and block rebuilds, over two
/// tenants and several namespaces; and filtered key-order searches — walked span by
/// span — page exactly like the reference, cursors included.
#[tokio::test]
async fn blocks_cover_every_field_row_and_filtered_walks_match_the_reference() {
    use berth_catalog::scoped::Namespace;
    use berth_catalog::scoped::{Condition, Filter, FilterOp, MemoryItem, MemoryPut, MemoryQuota, MemorySearch};
    use berth_catalog::MemoryStore;
    use rand::{rngs::StdRng, Rng, SeedableRng};
    use std::collections::BTreeMap;
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).expect("open");
    let tenants = [TenantId::parse("t1").expect("tenant"), TenantId::parse("t2").expect("tenant")];
    let namespaces = ["user/alice", "user/alice/notes", "user/bob", "app/x"];
    let mut model: BTreeMap<(String, String, String), MemoryItem> = BTreeMap::new();
    let mut rng = StdRng::seed_from_u64(11);
    let value = |rng: &mut StdRng, i: usize| -> String {
        match rng.gen_range(0..10) {
            0 => format!(r#"{{"n":"as text {i}","s":"z"}}"#),
            1 => "[1,2]".to_owned(),
            2 => format!(r#"{{"n":{},"b":true}}"#, -(i as i64)),
            _ => format!(r#"{{"n":{i},"s":"{}","b":{}}}"#, ["a", "b", "c"][i % 3], i.is_multiple_of(2)),
        }
    };
    // A bulk import first (indexed at once), in key order like a restore.
    let imported: Vec<MemoryItem> = (0..1500)
        .map(|i| imported_item("user/alice", format!("i{i:05}"), &format!(r#"{{"n":{i},"s":"a"}}"#), Timestamp(1)))
        .collect();
    catalog.memory_import_many(&tenants[0], imported.clone(), &MemoryQuota::default()).await.expect("import");
    for item in imported {
        model.insert(("t1".into(), item.namespace.to_string(), item.key.clone()), item);
    }
    for step in 0..3000usize {
        let tenant = &tenants[usize::from(step % 5 == 0)];
        let namespace = namespaces[rng.gen_range(0..namespaces.len())];
        let key = format!("k{:04}", rng.gen_range(0..1200));
        let id = (tenant.as_str().to_owned(), namespace.to_owned(), key.clone());
        let now = Timestamp(10 + step as u64);
        if rng.gen_range(0..8) == 0 {
            if model.remove(&id).is_some() {
                let namespace = Namespace::parse(namespace).expect("namespace");
                catalog.memory_delete(tenant, &namespace, &key, None, now).await.expect("delete");
            }
            continue;
        }
        let put = MemoryPut {
            namespace: Namespace::parse(namespace).expect("namespace"),
            key,
            value: memory_value(&value(&mut rng, step)),
            expected_revision: None,
            ttl_ms: None,
            bound_to: None,
        };
        model.insert(id, catalog.memory_put(tenant, &put, now, &MemoryQuota::default()).await.expect("put"));
        if step % 500 == 499 {
            let connection = catalog.shared.index().expect("index connection");
            crate::search::catch_up(&connection, crate::search::Sync::Always).expect("index");
            assert_eq!(uncovered_field_rows(&connection), 0, "after step {step}");
        }
    }
    {
        let connection = catalog.shared.index().expect("index connection");
        crate::search::catch_up(&connection, crate::search::Sync::Always).expect("index");
        assert_eq!(uncovered_field_rows(&connection), 0, "at the end");
        let blocks: i64 = connection.query_row("SELECT count(*) FROM memory_blocks", [], |row| row.get(0)).unwrap();
        assert!(blocks > 20, "blocks were rebuilt and cut: {blocks}");
    }
    let condition =
        |field: &str, op, operand: &str| Condition { field: field.into(), op, operand: memory_value(operand) };
    let filters = [
        vec![condition("n", FilterOp::Gte, "1400")],
        vec![condition("n", FilterOp::Lt, "-2000")],
        vec![condition("n", FilterOp::Eq, "7"), condition("s", FilterOp::In, r#"["a","b"]"#)],
        vec![condition("b", FilterOp::Eq, "true"), condition("n", FilterOp::Gt, "2900")],
        vec![condition("s", FilterOp::Eq, r#""z""#)],
        vec![condition("n", FilterOp::Gte, r#""as text 2""#)],
    ];
    for (tenant, prefix) in
        [("t1", "user/alice"), ("t1", "user/alice/notes"), ("t2", "user/bob"), ("t1", "app/x"), ("t2", "app/x")]
    {
        let t = TenantId::parse(tenant).expect("tenant");
        let items: Vec<MemoryItem> =
            model.iter().filter(|((owner, _, _), _)| owner == tenant).map(|(_, item)| item.clone()).collect();
        for conditions in &filters {
            let search = MemorySearch {
                filter: Filter::new(conditions.clone()).expect("filter"),
                ..MemorySearch::new(Namespace::parse(prefix).expect("prefix"))
            };
            for page_size in [7, 50] {
                let whole =
                    MemorySearch { limit: 10_000, ..search.clone() }.page(items.iter().cloned(), Timestamp(9_999));
                let seen = paged_search(&catalog, &t, &search, page_size, Timestamp(9_999)).await;
                assert_eq!(seen, whole, "{tenant} {prefix} {conditions:?} pages of {page_size}");
            }
        }
    }
}

/// A filter whose matches all lie far down the key order is walked from the first block
/// that may hold one (and the walk seeks to it), so its page costs about what a page of
/// matches at the start of the order costs, not a test of every item before them.
#[tokio::test]
async fn a_filter_matching_far_down_the_key_order_skips_the_blocks_before() {
    use berth_catalog::scoped::{Condition, Filter, FilterOp, MemoryItem, MemoryQuota, MemorySearch, Namespace};
    use berth_catalog::MemoryStore;
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).expect("open");
    let tenant = TenantId::parse("t").expect("tenant");
    let namespace = Namespace::parse("user/alice").expect("namespace");
    let items: Vec<MemoryItem> = (0..20_000)
        .map(|i| imported_item(namespace.as_str(), format!("k{i:05}"), &format!(r#"{{"n":{i}}}"#), Timestamp(1)))
        .collect();
    catalog.memory_import_many(&tenant, items, &MemoryQuota::default()).await.expect("import");
    let steps = |threshold: &str| {
        let condition = Condition { field: "n".into(), op: FilterOp::Gte, operand: memory_value(threshold) };
        MemorySearch { filter: Filter::new(vec![condition]).expect("filter"), ..MemorySearch::new(namespace.clone()) }
    };
    let measure = |search: MemorySearch| {
        let catalog = &catalog;
        let tenant = &tenant;
        async move {
            crate::memory::WALK_STEPS.with(|steps| steps.set(0));
            let page = catalog.memory_search(tenant, &search, Timestamp(2)).await.expect("search");
            (page.len(), page.first().map(|item| item.key.clone()), crate::memory::WALK_STEPS.with(|steps| steps.get()))
        }
    };
    let (found, first, at_start) = measure(steps("0")).await;
    assert_eq!((found, first.as_deref()), (50, Some("k00000")));
    // 5,000 matches: too many for the field index to drive the page.
    let (found, first, far_down) = measure(steps("15000")).await;
    assert_eq!((found, first.as_deref()), (50, Some("k15000")));
    assert!(
        far_down < at_start * 4,
        "the walk skipped the 15,000 items before the matches: {far_down} VM steps beside {at_start} at the start"
    );
}

/// The V7 migration builds the blocks of the items a V6 catalog holds, covering every
/// field row, and a filtered walk over them pages like the reference.
#[tokio::test]
async fn v7_builds_blocks_for_items_stored_before_it() {
    use berth_catalog::scoped::{Condition, Filter, FilterOp, MemorySearch, Namespace};
    use berth_catalog::MemoryStore;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    catalog_at_version(&path, 6, |transaction| {
        for i in 0..3000i64 {
            transaction
                .execute(
                    "INSERT INTO memory_items (id, tenant, namespace, key, value, revision, created_at, updated_at, bytes) \
                     VALUES (?1, 't', 'user/alice', printf('k%05d', ?1), printf('{\"n\":%d}', ?1), 1, 1, 1, 10)",
                    [i + 1],
                )
                .expect("V6 item");
            transaction
                .execute(
                    "INSERT INTO memory_fields (item, tenant, field, kind, sort) VALUES (?1, 't', 'n', 'n', ?2)",
                    (
                        i + 1,
                        berth_catalog::scoped::fields::value_fields(&memory_value(&format!(r#"{{"n":{}}}"#, i + 1)))[0]
                            .2
                            .clone(),
                    ),
                )
                .expect("V6 field row");
        }
    });
    let catalog = SqliteCatalog::open(&path).expect("migrate to V7");
    {
        let connection = catalog.shared.index().expect("index connection");
        assert_eq!(uncovered_field_rows(&connection), 0);
        let blocks: i64 = connection.query_row("SELECT count(*) FROM memory_blocks", [], |row| row.get(0)).unwrap();
        assert_eq!(blocks, 3000_usize.div_ceil(crate::blocks::BLOCK_ITEMS) as i64);
    }
    let condition = Condition { field: "n".into(), op: FilterOp::Gt, operand: memory_value("700") };
    let search = MemorySearch {
        filter: Filter::new(vec![condition]).expect("filter"),
        ..MemorySearch::new(Namespace::parse("user/alice").expect("namespace"))
    };
    let keys: Vec<String> = catalog
        .memory_search(&TenantId::parse("t").expect("tenant"), &search, Timestamp(2))
        .await
        .expect("search")
        .into_iter()
        .map(|item| item.key)
        .collect();
    assert_eq!(keys, (701..751).map(|i| format!("k{i:05}")).collect::<Vec<_>>());
}

/// `forget` and deletes leave nothing of what they removed in the block summaries
/// (schema V7): no range holds a removed item's value, no block starts at a removed
/// key, and the blocks still cover every remaining field row.
#[tokio::test]
async fn forget_and_delete_leave_no_trace_in_the_block_ranges() {
    use berth_catalog::scoped::{MemoryQuota, Namespace};
    use berth_catalog::MemoryStore;
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).expect("open");
    let tenant = TenantId::parse("t").expect("tenant");
    let item = |namespace: &str, key: String, value: String| imported_item(namespace, key, &value, Timestamp(1));
    // alice's items sit between bob's and carol's in key order, in blocks they share.
    let mut items = Vec::new();
    for i in 0..700 {
        items.push(item(
            "user/alice",
            format!("a{i:04}"),
            format!(r#"{{"mail":"secret-{i}@alice","n":{}}}"#, 1e6 as i64 + i),
        ));
        items.push(item("user/bob", format!("b{i:04}"), format!(r#"{{"mail":"bob-{i}","n":{i}}}"#)));
        items.push(item("user/carol", format!("c{i:04}"), format!(r#"{{"mail":"carol-{i}","n":{i}}}"#)));
    }
    items.push(item("user/dave", "d".into(), r#"{"mail":"zzz-dave-extreme","n":-5}"#.into()));
    items.sort_by(|a, b| (a.namespace.as_str(), &a.key).cmp(&(b.namespace.as_str(), &b.key)));
    catalog.memory_import_many(&tenant, items, &MemoryQuota::default()).await.expect("import");
    let traces = |catalog: &SqliteCatalog| -> (i64, i64, i64) {
        let connection = catalog.shared.index().expect("index connection");
        crate::search::catch_up(&connection, crate::search::Sync::Always).expect("index");
        let ranges: i64 = connection
            .query_row(
                "SELECT count(*) FROM memory_block_ranges WHERE low LIKE '%alice%' OR high LIKE '%alice%' \
                 OR low LIKE '%dave%' OR high LIKE '%dave%'",
                [],
                |row| row.get(0),
            )
            .expect("ranges");
        let starts: i64 = connection
            .query_row("SELECT count(*) FROM memory_blocks WHERE namespace IN ('user/alice', 'user/dave')", [], |row| {
                row.get(0)
            })
            .expect("starts");
        (ranges, starts, uncovered_field_rows(&connection))
    };
    let (ranges, starts, uncovered) = traces(&catalog);
    assert!(ranges > 0 && starts > 0, "alice's and dave's values and keys are in the blocks before");
    assert_eq!(uncovered, 0);
    let audit = crate::search::tests::forget_audit();
    let (outcome, _) =
        catalog.memory_forget(&tenant, &Namespace::parse("user/alice").expect("scope"), audit).await.expect("forget");
    assert_eq!(outcome.items, 700);
    let dave = Namespace::parse("user/dave").expect("namespace");
    catalog.memory_delete(&tenant, &dave, "d", None, Timestamp(3)).await.expect("delete");
    assert_eq!(
        traces(&catalog),
        (0, 0, 0),
        "(ranges holding a removed value, blocks starting at a removed key, uncovered rows)"
    );
}

fn record_named(id: &str) -> berth_catalog::SessionRecord {
    let mut record = berth_testkit_like_record();
    record.header.id = SessionId::parse(id).expect("id");
    record
}

/// Inserts `count` records named `prefix0…` and reads each back through a reader.
async fn insert_and_read(catalog: &SqliteCatalog, prefix: &str, count: usize) -> Result<()> {
    for n in 0..count {
        let record = record_named(&format!("{prefix}{n}"));
        catalog.insert(&record).await?;
        if catalog.get(&record.key()).await?.as_ref() != Some(&record) {
            return Err(Error::invalid("test", "a record read back differs"));
        }
    }
    Ok(())
}

/// A fork closes every connection to a catalog file (`fork.rs`): the parent's catalog
/// reopens them as it goes on, an in-memory catalog keeps its data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_closes_the_connections_and_the_catalog_reopens_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).expect("open");
    let in_memory = SqliteCatalog::open_in_memory().expect("open in memory");
    insert_and_read(&catalog, "before-", 3).await.expect("before");
    insert_and_read(&in_memory, "before-", 3).await.expect("before, in memory");
    let forks = fork::forks_prepared();
    fork::prepare();
    fork::resume();
    assert_eq!(fork::forks_prepared(), forks + 1);
    assert!(lock(&catalog.shared.writer).is_none(), "the writer was closed");
    assert!(lock(&catalog.shared.readers.as_ref().expect("pool").idle).is_empty(), "the readers were closed");
    assert!(lock(&in_memory.shared.writer).is_some(), "an in-memory catalog stays open");
    insert_and_read(&catalog, "after-", 3).await.expect("after");
    insert_and_read(&in_memory, "after-", 3).await.expect("after, in memory");
    for name in ["before-0", "after-2"] {
        assert!(in_memory.get(&record_named(name).key()).await.expect("get").is_some(), "{name}");
        assert!(catalog.get(&record_named(name).key()).await.expect("get").is_some(), "{name}");
    }
}

/// The writer checkpoints at `WAL_AUTOCHECKPOINT_PAGES` and the WAL then starts again at
/// its beginning: under a steady stream of commits the WAL's file stays at about that many
/// pages (with no checkpoints it would hold every frame: ~3x the limit here).
#[test]
fn the_wal_is_checkpointed_at_its_limit_and_its_file_reused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let catalog = SqliteCatalog::open(&path).expect("open");
    let writer = lock(&catalog.shared.writer);
    let connection = writer.as_ref().expect("writer");
    let limit: i64 = connection.pragma_query_value(None, "wal_autocheckpoint", |row| row.get(0)).expect("pragma");
    assert_eq!(limit, crate::WAL_AUTOCHECKPOINT_PAGES);
    let page: i64 = connection.pragma_query_value(None, "page_size", |row| row.get(0)).expect("page size");
    connection.execute_batch("CREATE TABLE scratch (n INTEGER PRIMARY KEY, bytes BLOB NOT NULL)").expect("table");
    // Each commit a dozen pages (the blob's overflow pages and a leaf), synced: ~3x the limit in all.
    let commits = 3 * limit / 10;
    for n in 0..commits {
        connection.execute("INSERT INTO scratch (n, bytes) VALUES (?1, zeroblob(40000))", [n]).expect("insert");
    }
    let frames_max = (limit + 64) as u64;
    let wal = std::fs::metadata(dir.path().join(format!("{CATALOG_FILE_NAME}-wal"))).expect("wal").len();
    assert!(wal <= 32 + frames_max * (page as u64 + 24), "the WAL grew to {wal} bytes");
    let rows: i64 = connection.query_row("SELECT count(*) FROM scratch", [], |row| row.get(0)).expect("count");
    assert_eq!(rows, commits);
}

/// A fork waits for the catalog work in flight (`fork.rs`), and that work's end wakes it:
/// `prepare` returns once the last `Working` is dropped, and not before. (The drop
/// notifies only while a fork waits; without that notification `prepare` would wait for
/// ever, and this test fails at its second timeout.)
#[test]
fn a_fork_waits_for_the_work_in_flight_and_its_end_wakes_the_fork() {
    use std::time::Duration;
    let working = fork::Working::enter();
    let (prepared, wait) = std::sync::mpsc::channel();
    let forker = std::thread::spawn(move || {
        fork::prepare();
        prepared.send(()).expect("send");
    });
    assert!(wait.recv_timeout(Duration::from_millis(300)).is_err(), "prepare returned while work was in flight");
    drop(working);
    wait.recv_timeout(Duration::from_secs(10)).expect("the end of the work did not wake the waiting fork");
    forker.join().expect("join");
    fork::resume();
    // Work goes on after the fork.
    drop(fork::Working::enter());
}

/// Closes this process's descriptors of files inside `dir`, as a forked child of an
/// embedding does with what it inherited (`berth._native`'s `close_inherited_descriptors`).
fn close_descriptors_inside(dir: &std::path::Path) {
    let entries = std::fs::read_dir("/proc/self/fd").expect("fd list");
    let inside: Vec<libc::c_int> = entries
        .flatten()
        .filter(|entry| std::fs::read_link(entry.path()).is_ok_and(|target| target.starts_with(dir)))
        .filter_map(|entry| entry.file_name().to_str().and_then(|name| name.parse().ok()))
        .collect();
    for fd in inside {
        // SAFETY: the child never uses the parent's connections to these files.
        unsafe { libc::close(fd) };
    }
}

/// A real fork while the parent's catalog is open and in use: the child closes the
/// descriptors it inherited, opens the same file and writes while the parent does, and
/// both see every record. Without the fork handlers the child reuses SQLite's table of
/// the parent's open files — their descriptors closed, their numbers soon another
/// file's, with locks it does not hold — and its writes fail or land elsewhere.
#[test]
fn a_forked_child_writes_the_catalog_its_parent_has_open() {
    // The fork happens outside the parent's runtime: a child inside it could not start
    // its own.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let catalog = SqliteCatalog::open(&path).expect("open");
    runtime.block_on(insert_and_read(&catalog, "parent-before-", 5)).expect("parent, before");
    let count = 40;
    // SAFETY: the child runs only SQLite and a runtime of its own, then `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(|| {
            close_descriptors_inside(dir.path());
            let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
            runtime.block_on(async {
                let catalog = SqliteCatalog::open(&path)?;
                insert_and_read(&catalog, "child-", count).await
            })
        });
        // SAFETY: ends the child without running the parent's atexit handlers or destructors.
        unsafe { libc::_exit(if matches!(code, Ok(Ok(()))) { 0 } else { 1 }) };
    }
    let parent = runtime.block_on(insert_and_read(&catalog, "parent-", count));
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    parent.expect("the parent's writes");
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child's writes failed: {status}");
    runtime.block_on(async {
        for n in 0..count {
            for prefix in ["child-", "parent-"] {
                let record = record_named(&format!("{prefix}{n}"));
                assert_eq!(catalog.get(&record.key()).await.expect("get"), Some(record), "{prefix}{n}");
            }
        }
    });
    let raw = Connection::open(&path).expect("raw");
    let check: String = raw.query_row("PRAGMA integrity_check", [], |row| row.get(0)).expect("integrity check");
    assert_eq!(check, "ok");
}

/// Reader connections get the writer's statement settings: QPSG, so a cached statement
/// with a range on a parameter and an ORDER BY is not parsed and planned again at every
/// reuse (a memory search on a reader was, at every call, until 2026-12-04), and no
/// trusted schema.
#[test]
fn readers_keep_their_plans_and_distrust_the_schema() {
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).expect("open");
    let pool = catalog.shared.readers.as_ref().expect("a file catalog has readers");
    let reader = pool.take().expect("reader");
    let qpsg = reader.db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG).expect("db_config");
    assert!(qpsg, "QPSG on the reader");
    let trusted: i64 = reader.query_row("PRAGMA trusted_schema", [], |row| row.get(0)).expect("pragma");
    assert_eq!(trusted, 0);
    let cached = reader.query_row("PRAGMA query_only", [], |row| row.get::<_, i64>(0)).expect("pragma");
    assert_eq!(cached, 1, "readers never write");
}

/// A batch of deferred search rows costs what its rows cost, not SQLite's planning or
/// FTS5's segments: (1) the catalog's cached statements are not planned again at each
/// reuse — with a range on a parameter and an ORDER BY, SQLite expired such a statement
/// whenever rusqlite's cache cleared its bindings, so every indexed item's block lookup
/// was parsed and planned anew (fails without `SQLITE_DBCONFIG_ENABLE_QPSG`); (2) the
/// batch's full-text rows are written after its other rows, so FTS5 — which writes what
/// it holds at every statement savepoint — makes one segment for the batch instead of one
/// per item (fails with the text rows written item by item among the others).
#[tokio::test]
async fn an_indexed_batch_reuses_its_statements_and_makes_one_text_segment() {
    use berth_catalog::scoped::{MemoryPut, MemoryQuota, Namespace};
    use berth_catalog::MemoryStore;
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).expect("open");
    let tenant = TenantId::parse("t").expect("tenant");
    let namespace = Namespace::parse("user/alice/notes").expect("namespace");
    // FTS5 merges segments as they pile up; without merging (this test's catalog only),
    // every flush leaves a segment of its own, at least one row of the data table past
    // its two fixed rows (the averages and the structure). The test holds the index
    // connection throughout, so the indexing thread applies nothing meanwhile.
    let index = catalog.shared.index().expect("index connection");
    index
        .execute_batch(
            "INSERT INTO memory_terms (memory_terms, rank) VALUES ('automerge', 0);
             INSERT INTO memory_terms (memory_terms, rank) VALUES ('crisismerge', 100000);",
        )
        .expect("no merging");
    let segment_rows = |connection: &Connection| -> i64 {
        connection
            .query_row("SELECT count(*) FROM memory_terms_data WHERE id > 10", [], |row| row.get(0))
            .expect("count")
    };
    assert_eq!(segment_rows(&index), 0);
    let batch = 64;
    for i in 0..batch {
        let put = MemoryPut {
            namespace: namespace.clone(),
            key: format!("k{i:03}"),
            value: memory_value(&format!(r#"{{"kind":"k{}","n":{i},"text":"tea number{i} leaf{i}"}}"#, i % 3)),
            expected_revision: None,
            ttl_ms: None,
            bound_to: None,
        };
        catalog.memory_put(&tenant, &put, Timestamp(10), &MemoryQuota::default()).await.expect("put");
    }
    assert_eq!(
        crate::search::catch_up(&index, crate::search::Sync::Always).expect("index").applied,
        batch,
        "one catch-up applies the batch"
    );
    let reprepared = index
        .prepare_cached(crate::blocks::HOLDING_SQL)
        .expect("cached")
        .get_status(rusqlite::StatementStatus::RePrepare);
    assert_eq!(reprepared, 0, "the block lookup ran once per item without being planned again");
    let rows = segment_rows(&index);
    assert!((1..=2).contains(&rows), "{rows} segment rows for one batch of {batch}");
}

/// A carried append's apply commits without an fsync of its own (`write_relaxed`: the
/// log and the marker are what make it durable), applies every put that still holds as
/// a compare-and-set, and leaves the writer connection `synchronous=FULL` for every
/// other write.
#[tokio::test]
async fn a_carried_apply_is_relaxed_and_leaves_the_connection_full() {
    use berth_catalog::scoped::{MemoryPut, MemoryQuota, Namespace};
    use berth_catalog::MemoryStore;
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).expect("open");
    let tenant = TenantId::parse("t").expect("tenant");
    let put = |key: &str, expected: u64| MemoryPut {
        namespace: Namespace::parse("user/alice/state").expect("namespace"),
        key: key.into(),
        value: memory_value(r#"{"n":1}"#),
        expected_revision: Some(expected),
        ttl_ms: None,
        bound_to: None,
    };
    let quota = MemoryQuota::default();
    assert_eq!(
        catalog.memory_apply(&tenant, &[put("a", 0), put("b", 0)], Timestamp(10), &quota).await.expect("apply"),
        2
    );
    // Again: both are applied already (revision 1), so neither applies twice.
    assert_eq!(
        catalog.memory_apply(&tenant, &[put("a", 0), put("b", 1)], Timestamp(11), &quota).await.expect("apply"),
        1
    );
    let synchronous: i64 =
        catalog.shared.writer().expect("writer").query_row("PRAGMA synchronous", [], |row| row.get(0)).expect("pragma");
    assert_eq!(synchronous, 2, "every other write is FULL again");
}

/// Schema V8 (and V9, which moves the search rows to the search file and builds them
/// there): a V7 catalog's indexed and waiting items are found by a filter and a
/// full-text search; the kind is still checked; a field row's insert builds no
/// ephemeral table (the `IN` check did, at every row); a put over an indexed item
/// records a change (not fresh), and a new item none (V10: it is past the search
/// file's mark).
#[tokio::test]
async fn v8_keeps_field_rows_checks_kinds_without_a_temporary_table_and_queues_only_replacements() {
    use berth_catalog::scoped::TextQuery;
    use berth_catalog::scoped::{Condition, Filter, FilterOp, MemoryPut, MemoryQuota, MemorySearch, Namespace};
    use berth_catalog::MemoryStore;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    catalog_at_version(&path, 7, |transaction| {
        for i in 1..=3i64 {
            transaction
                .execute(
                    "INSERT INTO memory_items (id, tenant, namespace, key, value, revision, created_at, updated_at, bytes) \
                     VALUES (?1, 't', 'user/alice', printf('k%d', ?1), printf('{\"n\":%d,\"t\":\"tea\"}', ?1), 1, 1, 1, 10)",
                    [i],
                )
                .expect("V7 item");
        }
        // Items 1 and 2 indexed (their field rows written as V7 did); item 3 waiting.
        for i in 1..=2i64 {
            let value = memory_value(&format!(r#"{{"n":{i},"t":"tea"}}"#));
            for (field, kind, sort) in berth_catalog::scoped::fields::value_fields(&value) {
                transaction
                    .execute(
                        "INSERT INTO memory_fields (item, tenant, field, kind, sort) VALUES (?1, 't', ?2, ?3, ?4)",
                        (i, field, kind, sort),
                    )
                    .expect("V7 field row");
            }
            transaction.execute("INSERT INTO memory_terms (rowid, terms) VALUES (?1, 'tea')", [i]).expect("V7 terms");
        }
        transaction.execute("INSERT INTO memory_unindexed (item) VALUES (3)", []).expect("V7 waiting item");
    });
    let catalog = SqliteCatalog::open(&path).expect("migrate to V9");
    let index = catalog.shared.index().expect("index connection");
    {
        let connection = &index;
        let rows: i64 = connection.query_row("SELECT count(*) FROM memory_fields", [], |row| row.get(0)).unwrap();
        assert_eq!(rows, 6, "every item's two field rows, the waiting one's too (built from the items)");
        let refused = connection
            .execute("INSERT INTO memory_fields (item, tenant, field, kind, sort) VALUES (1, 't', 'x', 'q', 'a')", []);
        assert!(refused.is_err(), "a kind berth never writes is still refused");
        let plan: Vec<String> = connection
            .prepare("EXPLAIN INSERT OR REPLACE INTO memory_fields (item, tenant, field, kind, sort) VALUES (1, 't', 'x', 'n', 'a')")
            .expect("explain")
            .query_map([], |row| row.get::<_, String>(1))
            .expect("program")
            .collect::<rusqlite::Result<_>>()
            .expect("opcodes");
        assert!(!plan.iter().any(|opcode| opcode == "OpenEphemeral"), "no temporary table per field row: {plan:?}");
    }
    let tenant = TenantId::parse("t").expect("tenant");
    let alice = Namespace::parse("user/alice").expect("namespace");
    let put = |key: &str, value: &str| MemoryPut {
        namespace: alice.clone(),
        key: key.into(),
        value: memory_value(value),
        expected_revision: None,
        ttl_ms: None,
        bound_to: None,
    };
    // k1 is indexed: put over it queues it not fresh (its old rows go when indexed);
    // k4 is new: no change row.
    catalog
        .memory_put(&tenant, &put("k1", r#"{"n":10,"t":"coffee"}"#), Timestamp(2), &MemoryQuota::default())
        .await
        .unwrap();
    catalog
        .memory_put(&tenant, &put("k4", r#"{"n":4,"t":"tea"}"#), Timestamp(2), &MemoryQuota::default())
        .await
        .unwrap();
    {
        let queued: Vec<(String, bool)> = index
            .prepare(
                "SELECT m.key, c.fresh FROM main.memory_changes AS c JOIN main.memory_items AS m ON m.id = c.item \
                 ORDER BY m.key",
            )
            .unwrap()
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(queued, [("k1".into(), false)]);
    }
    drop(index);
    let keys =
        |items: Vec<berth_catalog::scoped::MemoryItem>| items.into_iter().map(|item| item.key).collect::<Vec<_>>();
    let tea = MemorySearch { query: Some(TextQuery::parse("tea").unwrap()), ..MemorySearch::new(alice.clone()) };
    assert_eq!(keys(catalog.memory_search(&tenant, &tea, Timestamp(3)).await.unwrap()), ["k2", "k3", "k4"]);
    let condition = Condition { field: "n".into(), op: FilterOp::Gte, operand: memory_value("3") };
    let filtered = MemorySearch { filter: Filter::new(vec![condition]).unwrap(), ..MemorySearch::new(alice.clone()) };
    assert_eq!(keys(catalog.memory_search(&tenant, &filtered, Timestamp(3)).await.unwrap()), ["k1", "k3", "k4"]);
    let connection = catalog.shared.index().expect("index connection");
    let rows: i64 =
        connection.query_row("SELECT count(*) FROM memory_fields WHERE item = 1", [], |row| row.get(0)).unwrap();
    assert_eq!(rows, 2, "k1's old field rows replaced, not added to");
}

/// A put first checks a bound of the usage that reads none of the items past `counted`
/// (`usage_bound`: each counts at most `ITEM_BYTES_MAX`). A put over the bound but within
/// the quota is checked again against the exact usage and stored; one over the quota is
/// refused with the exact figure. (Without the second check, the first put is refused.)
#[tokio::test]
async fn a_put_over_the_usage_bound_is_checked_against_the_exact_usage() {
    use berth_catalog::scoped::{item_bytes, MemoryPut, MemoryQuota, MemoryStore, Namespace};
    use berth_core::limits::Limit;
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).expect("open");
    let tenant = TenantId::parse("t").expect("tenant");
    let put = |key: &str| MemoryPut {
        namespace: Namespace::parse("user/alice/notes").expect("namespace"),
        key: key.into(),
        value: memory_value(r#"{"p":"y"}"#),
        expected_revision: None,
        ttl_ms: None,
        bound_to: None,
    };
    for key in ["a", "b", "c"] {
        catalog.memory_put(&tenant, &put(key), Timestamp(1_000), &MemoryQuota::default()).await.expect("put");
    }
    let past: i64 = catalog
        .shared
        .writer()
        .expect("writer")
        .query_row("SELECT (SELECT max(id) FROM memory_items) - counted FROM memory_ids", [], |row| row.get(0))
        .expect("past");
    assert_eq!(past, 3, "the items are past `counted`: the bound is 3 × ITEM_BYTES_MAX over the usage");
    let usage = catalog.memory_usage(&tenant).await.expect("usage");
    let one = item_bytes(&put("d").namespace, "d", &put("d").value);
    let exact = MemoryQuota { items: usage.items + 1, bytes: usage.bytes + one };
    catalog.memory_put(&tenant, &put("d"), Timestamp(1_001), &exact).await.expect("fits the exact usage");
    let short = MemoryQuota { items: usage.items + 2, bytes: usage.bytes + 2 * one - 1 };
    let refused = catalog.memory_put(&tenant, &put("e"), Timestamp(1_002), &short).await;
    assert!(
        matches!(refused, Err(berth_core::Error::LimitExceeded { what: Limit::MemoryBytes, actual, .. })
            if actual == usage.bytes + 2 * one),
        "{refused:?}"
    );
    assert_eq!(catalog.memory_usage(&tenant).await.expect("usage").items, usage.items + 1, "nothing more stored");
    // The bound is two seeks: the largest id, and the tenant's row — no item is read.
    let plan = plan_lines(&catalog.shared.writer().expect("writer"), crate::memory::USAGE_BOUND, ["t"]);
    assert!(plan.iter().any(|line| line == "SEARCH memory_items"), "{plan:?}");
    assert!(plan.iter().any(|line| line.starts_with("SEARCH u USING")), "{plan:?}");
    assert!(!plan.iter().any(|line| line.contains("SCAN memory_items") || line.contains("SCAN u")), "{plan:?}");
}

/// Usage (schema V10: a tenant's row plus its items past `memory_ids.counted`) is the
/// exact count and bytes of its stored items after every kind of write — new items
/// past and across a fold, replacements of counted and uncounted items, deletes,
/// `forget`, the expiry sweep, imports — over two tenants and a reopen; the quota
/// counts the uncounted items; and reading it walks only the ids past `counted`
/// (fails if a delete or a replacement changed a row that does not count its item, or
/// if usage ignored the items past `counted`).
#[tokio::test]
async fn usage_is_exact_across_folds_deletes_sweeps_and_reopens() {
    use berth_catalog::scoped::{MemoryItem, MemoryPut, MemoryQuota, Namespace};
    use berth_catalog::MemoryStore;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let tenants = [TenantId::parse("t").expect("tenant"), TenantId::parse("u").expect("tenant")];
    let notes = Namespace::parse("user/alice/notes").expect("namespace");
    let other = Namespace::parse("user/alice/other").expect("namespace");
    let quota = MemoryQuota::default();
    let mut state: u64 = 7;
    let mut next = |bound: u64| {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % bound
    };
    let truth = |catalog: &SqliteCatalog, tenant: &TenantId| -> (u64, u64) {
        let (items, bytes): (i64, i64) = catalog
            .shared
            .writer()
            .expect("writer")
            .query_row(
                "SELECT count(*), coalesce(sum(bytes), 0) FROM memory_items WHERE tenant = ?1",
                [tenant.as_str()],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .expect("truth");
        (items as u64, bytes as u64)
    };
    let mut catalog = SqliteCatalog::open(&path).expect("open");
    for step in 0..400u64 {
        if step == 200 {
            drop(catalog);
            catalog = SqliteCatalog::open(&path).expect("reopen");
        }
        let tenant = &tenants[next(2) as usize];
        let namespace = if next(4) == 0 { &other } else { &notes };
        let key = format!("k{}", next(40));
        let padding = "x".repeat(next(60) as usize);
        let now = Timestamp(1_000 + step);
        match next(10) {
            0..=5 => {
                let ttl_ms = (next(3) == 0).then_some(5);
                let put = MemoryPut {
                    namespace: namespace.clone(),
                    key,
                    value: memory_value(&format!(r#"{{"p":"{padding}"}}"#)),
                    expected_revision: None,
                    ttl_ms,
                    bound_to: None,
                };
                catalog.memory_put(tenant, &put, now, &quota).await.expect("put");
            }
            6 => {
                let _ = catalog.memory_delete(tenant, namespace, &key, None, now).await;
            }
            7 => {
                let audit: berth_catalog::scoped::SweepAudit =
                    std::sync::Arc::new(|tenant, removed| berth_catalog::AuditDraft {
                        tenant: tenant.clone(),
                        time: Timestamp(2),
                        actor: "system:memory".into(),
                        action: "memory.expire".into(),
                        session: None,
                        revision: None,
                        outcome: "ok".into(),
                        details: serde_json::json!({"items": removed.items}),
                    });
                catalog.memory_remove_expired(now, 3, audit).await.expect("sweep");
            }
            8 if next(3) == 0 => {
                let audit = crate::search::tests::forget_audit();
                let forgotten = catalog.memory_forget(&tenants[0], &other, audit).await.expect("forget");
                assert_eq!(forgotten.0.items > 0, forgotten.0.bytes > 0);
            }
            _ => {
                let items = (0..next(4))
                    .map(|i| MemoryItem {
                        namespace: Namespace::parse(&format!("project/p{step}")).expect("namespace"),
                        key: format!("i{i}"),
                        value: memory_value(&format!(r#"{{"p":"{padding}"}}"#)),
                        revision: 1,
                        created_at: now,
                        updated_at: now,
                        expires_at: None,
                        ttl_ms: None,
                        bound_to: None,
                    })
                    .collect();
                catalog.memory_import_many(tenant, items, &quota).await.expect("import");
            }
        }
        for tenant in &tenants {
            let usage = catalog.memory_usage(tenant).await.expect("usage");
            assert_eq!((usage.items, usage.bytes), truth(&catalog, tenant), "step {step}, tenant {tenant}");
        }
    }
    // The quota counts the items past `counted`: at exactly its item limit, a new key is
    // refused and a replacement is not.
    let tenant = &tenants[0];
    let put = |key: &str| MemoryPut {
        namespace: notes.clone(),
        key: key.into(),
        value: memory_value(r#"{"p":"y"}"#),
        expected_revision: None,
        ttl_ms: None,
        bound_to: None,
    };
    catalog.memory_put(tenant, &put("fresh-1"), Timestamp(9_000), &quota).await.expect("put");
    let full = MemoryQuota { items: truth(&catalog, tenant).0, ..quota };
    let refused = catalog.memory_put(tenant, &put("fresh-2"), Timestamp(9_000), &full).await;
    assert!(matches!(refused, Err(berth_core::Error::LimitExceeded { .. })), "{refused:?}");
    catalog.memory_put(tenant, &put("fresh-1"), Timestamp(9_001), &full).await.expect("a replacement fits");
    // Both reads of the items past `counted` are ranges of ids, never a walk of every item.
    let connection = catalog.shared.writer().expect("writer");
    for sql in [crate::memory::PAST_COUNTED, crate::memory::FOLD] {
        let plan = plan_lines(&connection, sql, [1]);
        assert!(plan.iter().any(|line| line.contains("INTEGER PRIMARY KEY (rowid>?)")), "{sql}: {plan:?}");
        assert!(!plan.iter().any(|line| line.starts_with("SCAN memory_items")), "{sql}: {plan:?}");
    }
}

/// Schema V12 counts usage again without berth's own bookkeeping (a V11 catalog counted
/// a carried append's marker and scope index entries as the tenant's items), and keeps
/// the tenant's own quota beside it (fails without V12's recount: the marker and the
/// index entry, counted rows, stay in the usage).
#[tokio::test]
async fn v12_recounts_usage_without_berths_bookkeeping() {
    use berth_catalog::scoped::{MemoryQuota, MemoryStore, TenantQuota};
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let rows = [
        (1, "t", "user/alice", "name", r#""Al""#),
        (2, "t", "berth/carried", "s1", r#"{"from_seq":3}"#),
        (3, "t", "berth/scopes/user/alice", "s1", "null"),
        (4, "u", "app/faq", "q", "1"),
        // Past `counted`: usage reads it, and from V12 only when charged.
        (5, "t", "berth/carried", "s2", r#"{"from_seq":1}"#),
        (6, "t", "user/alice", "past", "2"),
    ];
    catalog_at_version(&path, 11, |transaction| {
        for (id, tenant, namespace, key, value) in rows {
            let bytes = (namespace.len() + key.len() + value.len()) as i64;
            transaction
                .execute(
                    "INSERT INTO memory_items (id, tenant, namespace, key, value, revision, created_at, updated_at, \
                     bytes) VALUES (?1, ?2, ?3, ?4, ?5, 1, 1, 1, ?6)",
                    (id, tenant, namespace, key, value, bytes),
                )
                .expect("V11 item");
        }
        // As V11 counted them: every item up to `counted`, the bookkeeping too.
        transaction
            .execute_batch(
                "UPDATE memory_ids SET counted = 4, floor = 6; \
                 INSERT INTO memory_usage (tenant, items, bytes) SELECT tenant, count(*), sum(bytes) \
                 FROM memory_items WHERE id <= 4 GROUP BY tenant",
            )
            .expect("V11 usage");
    });
    let catalog = SqliteCatalog::open(&path).expect("open and migrate");
    let (t, u) = (TenantId::parse("t").expect("tenant"), TenantId::parse("u").expect("tenant"));
    let usage = catalog.memory_usage(&t).await.expect("usage");
    let expected =
        |keys: &[(&str, &str, &str)]| keys.iter().map(|(n, k, v)| (n.len() + k.len() + v.len()) as u64).sum();
    let mine: u64 = expected(&[("user/alice", "name", r#""Al""#), ("user/alice", "past", "2")]);
    assert_eq!((usage.items, usage.bytes), (2, mine), "the tenant's two items, not its bookkeeping");
    let theirs = catalog.memory_usage(&u).await.expect("usage");
    assert_eq!((theirs.items, theirs.bytes), (1, expected(&[("app/faq", "q", "1")])));
    assert_eq!(catalog.memory_quota(&t).await.expect("quota"), TenantQuota::default());
    catalog.set_memory_quota(&t, &TenantQuota { items: Some(2), bytes: None }).await.expect("set");
    let refused = catalog
        .memory_put(
            &t,
            &berth_catalog::scoped::MemoryPut {
                namespace: berth_catalog::scoped::Namespace::parse("user/alice").expect("namespace"),
                key: "third".into(),
                value: memory_value("3"),
                expected_revision: None,
                ttl_ms: None,
                bound_to: None,
            },
            Timestamp(2),
            &MemoryQuota::default(),
        )
        .await;
    assert!(matches!(refused, Err(berth_core::Error::LimitExceeded { limit: 2, actual: 3, .. })), "{refused:?}");
}

/// The statements' written-out range of berth's own namespaces is the catalog crate's.
#[test]
fn the_charged_range_is_the_system_namespaces() {
    use berth_catalog::scoped::{SYSTEM_NAMESPACES, SYSTEM_NAMESPACES_END};
    let written = format!("NOT (m.namespace >= '{SYSTEM_NAMESPACES}' AND m.namespace < '{SYSTEM_NAMESPACES_END}')");
    assert_eq!(crate::memory::CHARGED, written);
    assert!(crate::memory::FOLD.contains(&written) && crate::memory::PAST_COUNTED.contains(&written));
}

/// A V12 catalog's sessions get their `search` column when V13 is applied (folded by
/// berth: SQLite's `lower()` knows only ASCII), so a search finds sessions stored
/// before it, by title, label and id.
#[tokio::test]
async fn v13_fills_the_search_column_for_sessions_stored_before_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let mut record = berth_testkit_like_record();
    record.title = Some("Remboursement ÉTÉ".into());
    record.labels.insert("VIP".into());
    let json = serde_json::to_string(&record).expect("json");
    catalog_at_version(&path, 12, |transaction| {
        transaction
            .execute(
                "INSERT INTO sessions (tenant, id, user, project, status, last_activity, lease_until, created_at, \
                 status_changed_at, revision, blank, parent, record_json) \
                 VALUES ('t', 's', 'u', NULL, 'active', 1, 10, 1, 1, 0, 0, NULL, ?1)",
                [&json],
            )
            .expect("V12 session");
    });
    let catalog = SqliteCatalog::open(&path).expect("migrate to V13");
    for (text, found) in [("été", true), ("vip", true), ("S", true), ("hiver", false)] {
        let query = SessionQuery {
            search: Some(berth_catalog::SessionSearch::parse(text).expect("search")),
            ..SessionQuery::tenant(TenantId::parse("t").expect("tenant"))
        };
        let page = catalog.list(&query).await.expect("list");
        assert_eq!(page == [record.clone()], found, "{text}");
    }
}
