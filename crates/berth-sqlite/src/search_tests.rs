//! The search file's crash, rebuild and privacy cases (`search.rs`).

use crate::{SqliteCatalog, CATALOG_FILE_NAME};
use berth_catalog::scoped::{Condition, Filter, FilterOp, ForgetOutcome, MemoryItem, MemoryPut, MemoryQuota};
use berth_catalog::scoped::{MemorySearch, Namespace, SearchOrder, TextQuery};
use berth_catalog::{AuditDraft, MemoryStore};
use berth_core::{JsonText, TenantId, Timestamp};
use rusqlite::Connection;
use std::path::Path;
use std::sync::atomic::Ordering;

fn tenant() -> TenantId {
    TenantId::parse("t").expect("tenant")
}

fn alice() -> Namespace {
    Namespace::parse("user/alice").expect("namespace")
}

fn put(key: &str, value: &str) -> MemoryPut {
    MemoryPut {
        namespace: alice(),
        key: key.into(),
        value: JsonText::parse(value).expect("value"),
        expected_revision: None,
        ttl_ms: None,
        bound_to: None,
    }
}

fn item(key: String, value: &str) -> MemoryItem {
    MemoryItem {
        namespace: alice(),
        key,
        value: JsonText::parse(value).expect("value"),
        revision: 1,
        created_at: Timestamp(1),
        updated_at: Timestamp(1),
        expires_at: None,
        ttl_ms: None,
        bound_to: None,
    }
}

/// The keys a full-text search for `term` finds in alice's scope.
async fn with_term(catalog: &SqliteCatalog, term: &str) -> Vec<String> {
    let search =
        MemorySearch { query: Some(TextQuery::parse(term).expect("query")), limit: 1000, ..MemorySearch::new(alice()) };
    keys(catalog.memory_search(&tenant(), &search, Timestamp(50)).await.expect("search"))
}

/// The keys a filter `n = value` finds (the field index drives a selective one).
async fn with_n(catalog: &SqliteCatalog, value: &str) -> Vec<String> {
    let condition = Condition { field: "n".into(), op: FilterOp::Eq, operand: JsonText::parse(value).expect("n") };
    let search = MemorySearch {
        filter: Filter::new(vec![condition]).expect("filter"),
        limit: 1000,
        ..MemorySearch::new(alice())
    };
    keys(catalog.memory_search(&tenant(), &search, Timestamp(50)).await.expect("search"))
}

fn keys(items: Vec<MemoryItem>) -> Vec<String> {
    items.into_iter().map(|item| item.key).collect()
}

/// One value `sql` selects on the catalog's index connection (both files attached).
pub(crate) fn index_value<T: rusqlite::types::FromSql>(
    catalog: &SqliteCatalog,
    sql: &str,
    params: impl rusqlite::Params,
) -> T {
    catalog.shared.index().expect("index connection").query_row(sql, params, |row| row.get(0)).expect(sql)
}

/// The audit record of a test's `forget` (tenant `t`).
pub(crate) fn forget_audit() -> berth_catalog::scoped::ForgetAudit {
    Box::new(|outcome: &ForgetOutcome| AuditDraft {
        tenant: tenant(),
        time: Timestamp(2),
        actor: "admin:test".into(),
        action: "memory.forget".into(),
        session: None,
        revision: None,
        outcome: "ok".into(),
        details: serde_json::json!({"items": outcome.items}),
    })
}

fn pause(catalog: &SqliteCatalog) {
    catalog.shared.indexer.paused.store(true, Ordering::SeqCst);
}

/// A catalog at `path` holding items k000… with the term `word` and `n` = their number.
async fn seeded(path: &Path, word: &str, count: usize) {
    let catalog = SqliteCatalog::open(path).expect("open");
    let items = (0..count).map(|i| item(format!("k{i:03}"), &format!(r#"{{"n":{i},"text":"{word} w{i}"}}"#))).collect();
    catalog.memory_import_many(&tenant(), items, &MemoryQuota::default()).await.expect("import");
}

fn remove_search_file(catalog: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = crate::search::search_path(catalog).into_os_string();
        name.push(suffix);
        let _ = std::fs::remove_file(name);
    }
}

/// A plain connection to the search file of the catalog at `catalog` (no catalog, no
/// catch-up: what is on disk).
fn search_file(catalog: &Path) -> Connection {
    Connection::open(crate::search::search_path(catalog)).expect("search file")
}

/// (token, done) of the search file at `catalog`, read with a plain connection.
fn search_state(catalog: &Path) -> (String, i64) {
    let connection = search_file(catalog);
    connection
        .query_row("SELECT token, done FROM memory_search_state", [], |row| Ok((row.get(0)?, row.get(1)?)))
        .expect("state")
}

/// A search file that is gone, or that SQLite cannot read, is built again from the
/// catalog's items when the catalog opens: searches find every item (fails if `open`
/// trusted the file, or gave up on it).
#[tokio::test]
async fn a_missing_or_unreadable_search_file_is_rebuilt_from_the_items() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    seeded(&path, "apple", 300).await;
    remove_search_file(&path);
    {
        let catalog = SqliteCatalog::open(&path).expect("reopen without a search file");
        assert_eq!(with_term(&catalog, "apple").await.len(), 300);
        assert_eq!(with_n(&catalog, "7").await, ["k007"]);
    }
    remove_search_file(&path);
    std::fs::write(crate::search::search_path(&path), vec![0x5a; 8192]).expect("garbage");
    let catalog = SqliteCatalog::open(&path).expect("reopen over an unreadable search file");
    assert_eq!(with_term(&catalog, "apple").await.len(), 300);
    assert_eq!(with_n(&catalog, "299").await, ["k299"]);
}

/// Another catalog's search file (another token) is not trusted: its rows name items
/// by ids this catalog also uses. Rebuilt, it holds only this catalog's terms (fails
/// without the token check: "banana" would find this catalog's items by id).
#[tokio::test]
async fn another_catalogs_search_file_is_rebuilt() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mine, theirs) = (dir.path().join("mine.sqlite"), dir.path().join("theirs.sqlite"));
    seeded(&mine, "apple", 50).await;
    seeded(&theirs, "banana", 50).await;
    let token = search_state(&mine).0;
    assert_ne!(token, search_state(&theirs).0, "each catalog has its own token");
    remove_search_file(&mine);
    std::fs::copy(crate::search::search_path(&theirs), crate::search::search_path(&mine)).expect("copy");
    let catalog = SqliteCatalog::open(&mine).expect("reopen");
    assert_eq!(with_term(&catalog, "banana").await, Vec::<String>::new());
    assert_eq!(with_term(&catalog, "apple").await.len(), 50);
    drop(catalog);
    assert_eq!(search_state(&mine).0, token, "the rebuilt file carries this catalog's token");
}

/// A catalog of 20 seeded items whose search file `ahead` (SQL run on the file alone)
/// changed, reopened with its thread paused; then a replacement of k003 and a new item
/// are put, and searches must find them both, and every seeded item.
async fn reopened_after(ahead: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    seeded(&path, "apple", 20).await;
    {
        let connection = search_file(&path);
        connection.execute(ahead, []).expect("ahead");
    }
    let catalog = SqliteCatalog::open(&path).expect("reopen");
    pause(&catalog);
    let quota = MemoryQuota::default();
    catalog.memory_put(&tenant(), &put("new", r#"{"n":-1,"text":"cherry"}"#), Timestamp(5), &quota).await.expect("put");
    catalog
        .memory_put(&tenant(), &put("k003", r#"{"n":-3,"text":"apple date"}"#), Timestamp(5), &quota)
        .await
        .expect("put");
    assert_eq!(with_term(&catalog, "cherry").await, ["new"]);
    assert_eq!(with_n(&catalog, "-1").await, ["new"]);
    assert_eq!(with_term(&catalog, "date").await, ["k003"]);
    assert_eq!(with_n(&catalog, "3").await, Vec::<String>::new());
    assert_eq!(with_term(&catalog, "apple").await.len(), 20);
}

/// A search file ahead of its catalog (`done` past the catalog's last change: the
/// catalog restored from a copy, or relaxed commits a power loss took) is rebuilt, so
/// the changes after it are applied rather than taken for applied (fails without the
/// check: a replacement's change is numbered at or below `done`, and searches miss it).
#[tokio::test]
async fn a_search_file_ahead_of_its_catalog_is_rebuilt() {
    reopened_after("UPDATE memory_search_state SET done = done + 1000").await;
}

/// A search file whose item mark is past every id the catalog has given (as above: a
/// catalog restored from a copy, or relaxed commits lost) is rebuilt, so the new items
/// the catalog numbers at or below the mark are indexed rather than taken for indexed
/// (fails without the mark's check at open: the new item is never found).
#[tokio::test]
async fn a_search_file_whose_item_mark_is_ahead_is_rebuilt() {
    reopened_after("UPDATE memory_search_items SET items = items + 1000").await;
}

/// The id of the item at `key` (in any namespace of alice's scope).
fn id_of(catalog: &SqliteCatalog, key: &str) -> i64 {
    index_value(catalog, "SELECT id FROM main.memory_items WHERE key = ?1", [key])
}

/// A deleted item's id is never given to a new item (schema V10), whether the delete
/// was applied to the search file before the new item's put or not, and whether it was
/// a delete or a `forget`: the new item is found, with only its own rows — the deleted
/// item's terms and fields never match it (fails without the floor: SQLite gives the
/// largest id again once its row is gone, at or below the search file's mark, and the
/// new item is never indexed).
#[tokio::test]
async fn a_deleted_items_id_is_never_given_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).expect("open");
    pause(&catalog);
    let quota = MemoryQuota::default();
    let notes = Namespace::parse("user/alice/notes").expect("namespace");
    catalog.memory_put(&tenant(), &put("a", r#"{"n":1,"text":"first"}"#), Timestamp(1), &quota).await.expect("put");
    for (round, applied_first) in [(0, true), (1, false), (2, true), (3, false)] {
        let secret = MemoryPut { namespace: notes.clone(), ..put("b", r#"{"n":2,"text":"secret"}"#) };
        catalog.memory_put(&tenant(), &secret, Timestamp(1), &quota).await.expect("put");
        assert_eq!(with_term(&catalog, "secret").await, ["b"], "round {round}: b indexed");
        let old = id_of(&catalog, "b");
        if round < 2 {
            catalog.memory_delete(&tenant(), &notes, "b", None, Timestamp(2)).await.expect("delete");
        } else {
            let scope = Namespace::parse("user/alice/notes").expect("namespace");
            catalog.memory_forget(&tenant(), &scope, forget_audit()).await.expect("forget");
        }
        if applied_first {
            assert_eq!(with_term(&catalog, "secret").await, Vec::<String>::new(), "round {round}: the delete applied");
        }
        let key = format!("c{round}");
        catalog.memory_put(&tenant(), &put(&key, r#"{"text":"plain"}"#), Timestamp(3), &quota).await.expect("put");
        assert!(id_of(&catalog, &key) > old, "round {round}: {key} took an id past b's");
        assert_eq!(with_term(&catalog, "secret").await, Vec::<String>::new());
        assert_eq!(with_n(&catalog, "2").await, Vec::<String>::new());
        assert_eq!(with_term(&catalog, "plain").await.len(), round + 1, "round {round}");
    }
}

/// Applied changes are dropped from the catalog by its next write once a synced
/// catch-up has passed them, all but the last: the next change is numbered past it, so
/// it is never taken for applied (fails if every applied change were dropped: SQLite
/// would number the next one 1 again, at or below `done`, and the search would miss it).
#[tokio::test]
async fn the_last_applied_change_is_kept_so_the_next_is_numbered_past_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).expect("open");
    pause(&catalog);
    let quota = MemoryQuota::default();
    let changes = |catalog: &SqliteCatalog| -> (i64, i64) {
        catalog
            .shared
            .index()
            .expect("index connection")
            .query_row(
                "SELECT count(*), (SELECT done FROM search.memory_search_state) FROM main.memory_changes",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .expect("changes")
    };
    for key in ["a", "b", "c", "d"] {
        catalog.memory_put(&tenant(), &put(key, r#"{"text":"new"}"#), Timestamp(1), &quota).await.expect("put");
    }
    for (key, word) in [("a", "one"), ("b", "two"), ("c", "three"), ("d", "four")] {
        let value = format!(r#"{{"text":"{word}"}}"#);
        // The put (a replacement: a change row) drops what the last synced catch-up
        // applied, and adds its own change.
        catalog.memory_put(&tenant(), &put(key, &value), Timestamp(1), &quota).await.expect("put");
        let (kept, done) = changes(&catalog);
        assert!(kept <= 2, "{kept} changes kept after {key}'s put");
        assert_eq!(with_term(&catalog, word).await, [key], "read-your-writes with no thread");
        catalog.catch_up("test").await.expect("synced catch-up");
        let last: i64 = index_value(&catalog, "SELECT max(seq) FROM main.memory_changes", []);
        assert_eq!(changes(&catalog).1, last, "every change applied (done was {done})");
    }
}

/// A search that finds the search file behind applies the changes without syncing, so
/// nothing is dropped on its account: after a power loss the file may lose that commit.
#[tokio::test]
async fn changes_a_search_applied_unsynced_are_kept() {
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).expect("open");
    pause(&catalog);
    let quota = MemoryQuota::default();
    for (key, word) in [("a", "one"), ("b", "two"), ("c", "three")] {
        catalog.memory_put(&tenant(), &put(key, r#"{"text":"new"}"#), Timestamp(1), &quota).await.expect("put");
        // A replacement: it records a change (a new item records none).
        let value = format!(r#"{{"text":"{word}"}}"#);
        catalog.memory_put(&tenant(), &put(key, &value), Timestamp(1), &quota).await.expect("put");
        assert_eq!(with_term(&catalog, word).await, [key]);
    }
    let kept: i64 = index_value(&catalog, "SELECT count(*) FROM main.memory_changes", []);
    assert_eq!(kept, 3, "no synced catch-up: every change stays");
}

/// `forget` returns only once the forgotten items' search rows are gone from the search
/// file: read straight from the file (no search, no catch-up), nothing of theirs is
/// left, and the neighbouring scope's rows are all there (fails without `forget`'s
/// catch-up: with the thread paused, the rows would stay until the next search).
#[tokio::test]
async fn forget_returns_with_the_forgotten_rows_gone_from_the_search_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let catalog = SqliteCatalog::open(&path).expect("open");
    pause(&catalog);
    let quota = MemoryQuota::default();
    let bob = Namespace::parse("user/bob").expect("namespace");
    for i in 0..40 {
        let secret = format!(r#"{{"n":{i},"mail":"x{i}","text":"secretterm alice{i} alice{i}"}}"#);
        catalog.memory_put(&tenant(), &put(&format!("a{i:02}"), &secret), Timestamp(1), &quota).await.expect("put");
        let kept = MemoryPut { namespace: bob.clone(), ..put(&format!("b{i:02}"), r#"{"n":1,"text":"keep keep"}"#) };
        catalog.memory_put(&tenant(), &kept, Timestamp(1), &quota).await.expect("put");
    }
    assert_eq!(with_term(&catalog, "secretterm").await.len(), 40, "indexed (the search caught up)");
    for i in 40..50 {
        // Put after the last catch-up: their changes are not applied when forget runs.
        let secret = format!(r#"{{"n":{i},"text":"secretterm alice{i}"}}"#);
        catalog.memory_put(&tenant(), &put(&format!("a{i:02}"), &secret), Timestamp(1), &quota).await.expect("put");
    }
    let (outcome, _) = catalog.memory_forget(&tenant(), &alice(), forget_audit()).await.expect("forget");
    assert_eq!(outcome.items, 50);
    // Its changes are dropped by `forget` itself, once applied, not left for the next
    // put's transaction to drop (all but the last: SQLite numbers the next past it).
    let kept: i64 = index_value(&catalog, "SELECT count(*) FROM main.memory_changes", []);
    assert_eq!(kept, 1, "forget's changes dropped by forget");
    let file = search_file(&path);
    let count = |sql: &str| -> i64 { file.query_row(sql, [], |row| row.get(0)).expect(sql) };
    assert_eq!(count("SELECT count(*) FROM memory_terms WHERE memory_terms MATCH 'secretterm'"), 0);
    assert_eq!(count("SELECT count(*) FROM memory_term_counts WHERE term LIKE 'alice%'"), 0);
    assert_eq!(count("SELECT count(*) FROM memory_fields WHERE field = 'mail'"), 0);
    assert_eq!(count("SELECT count(*) FROM memory_block_ranges WHERE low LIKE 'x%' OR high LIKE 'x%'"), 0);
    assert_eq!(count("SELECT count(*) FROM memory_blocks WHERE namespace = 'user/alice'"), 0);
    assert_eq!(count("SELECT count(*) FROM memory_terms WHERE memory_terms MATCH 'keep'"), 40);
    assert_eq!(count("SELECT count(*) FROM memory_term_counts WHERE term = 'keep'"), 40);
    assert_eq!(count("SELECT count(*) FROM memory_fields WHERE field = 'n'"), 40);
}

/// A search file written unsynced (`synchronous=OFF`) in an earlier boot of the system is
/// removed and rebuilt at open: what a power loss left of it can be wrong without SQLite
/// seeing it, here rows gone from the full-text index (fails without the boot check:
/// the search finds nothing). A file of this boot is trusted as it is (not rebuilt at
/// every open), and the thread's commits are unsynced.
#[tokio::test]
async fn a_search_file_written_unsynced_in_an_earlier_boot_is_rebuilt() {
    let boot = crate::search::this_boot().expect("this system names its boot (Linux)");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    seeded(&path, "apple", 30).await;
    let damage = |boot: &str| {
        let connection = search_file(&path);
        connection.execute("DELETE FROM memory_terms", []).expect("terms lost");
        connection.execute("UPDATE memory_search_items SET boot = ?1", [boot]).expect("boot");
    };
    let written_in = || -> String {
        let connection = search_file(&path);
        connection.query_row("SELECT boot FROM memory_search_items", [], |row| row.get(0)).expect("boot")
    };
    assert_eq!(written_in(), boot, "the file records this boot");
    damage(boot);
    {
        let catalog = SqliteCatalog::open(&path).expect("reopen in the same boot");
        assert_eq!(with_term(&catalog, "apple").await.len(), 0, "this boot's file is trusted as it is");
        let synchronous: i64 = {
            catalog.catch_up("test").await.expect("catch up");
            let index = catalog.shared.index().expect("index connection");
            crate::search::catch_up_then(&index, false, |_| Ok(())).expect("unsynced catch-up");
            index.pragma_query_value(Some("search"), "synchronous", |row| row.get(0)).expect("pragma")
        };
        assert_eq!(synchronous, 0, "unsynced commits are OFF");
    }
    damage("an-earlier-boot");
    {
        // What an in-place rebuild would keep (as it would keep a damaged free list).
        let connection = search_file(&path);
        connection.execute("CREATE TABLE planted (x)", []).expect("planted");
    }
    let catalog = SqliteCatalog::open(&path).expect("reopen after a restart");
    assert_eq!(with_term(&catalog, "apple").await.len(), 30, "rebuilt from the items");
    assert_eq!(with_n(&catalog, "29").await, ["k029"]);
    drop(catalog);
    assert_eq!(written_in(), boot, "the rebuilt file records this boot");
    let connection = search_file(&path);
    let planted: bool = connection
        .query_row("SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE name = 'planted')", [], |row| row.get(0))
        .expect("schema");
    assert!(!planted, "the file was replaced, not rebuilt in place");
}

/// Alice's scope holding `count` items k0000… updated at 1 + their number, in a catalog
/// at `path` (a large prefix: walked in the search file's updated index, schema V11).
async fn seeded_in_updated_order(path: &Path, count: u64) -> SqliteCatalog {
    let catalog = SqliteCatalog::open(path).expect("open");
    let items = (0..count)
        .map(|i| MemoryItem { updated_at: Timestamp(1 + i), ..item(format!("k{i:04}"), &format!(r#"{{"n":{i}}}"#)) })
        .collect();
    catalog.memory_import_many(&tenant(), items, &MemoryQuota::default()).await.expect("import");
    catalog
}

/// The keys of alice's items in the updated order, `limit` a page, every page.
async fn in_updated_order(catalog: &SqliteCatalog, limit: usize) -> Vec<String> {
    let mut search = MemorySearch { limit, order: SearchOrder::UpdatedAt, ..MemorySearch::new(alice()) };
    let mut seen = Vec::new();
    loop {
        let page = catalog.memory_search(&tenant(), &search, Timestamp(50_000)).await.expect("search");
        let next = search.next_cursor(&page);
        seen.extend(keys(page));
        match next {
            Some(cursor) => search.cursor = Some(cursor),
            None => return seen,
        }
    }
}

/// The updated order of a large prefix is read from the search file (schema V11): a
/// search right after puts, replacements and deletes the indexing thread has not
/// applied sees every one of them, in order, across pages (fails if such a search did
/// not catch up first, or if the updated rows were not written or moved).
#[tokio::test]
async fn the_updated_order_of_a_large_prefix_sees_every_write_before_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let count = crate::memory::SMALL_PREFIX as u64 + 100;
    let catalog = seeded_in_updated_order(&path, count).await;
    let index: i64 =
        index_value(&catalog, "SELECT count(*) FROM main.sqlite_schema WHERE name = 'memory_items_by_updated'", []);
    assert_eq!(index, 0, "the catalog has no updated-order index");
    pause(&catalog);
    catalog
        .memory_put(&tenant(), &put("new", r#"{"n":-1}"#), Timestamp(30_000), &MemoryQuota::default())
        .await
        .expect("new");
    catalog
        .memory_put(&tenant(), &put("k0005", r#"{"n":-2}"#), Timestamp(30_001), &MemoryQuota::default())
        .await
        .expect("replaced");
    catalog
        .memory_delete(&tenant(), &alice(), &format!("k{:04}", count - 1), None, Timestamp(30_002))
        .await
        .expect("deleted");
    let mut expected: Vec<String> =
        (0..count - 1).rev().map(|i| format!("k{i:04}")).filter(|key| key != "k0005").collect();
    expected.insert(0, "new".into());
    expected.insert(0, "k0005".into());
    assert_eq!(in_updated_order(&catalog, 700).await, expected);
    // Equal times: the key order breaks the tie, across a page's end.
    for key in ["tie-b", "tie-a", "tie-c"] {
        catalog.memory_put(&tenant(), &put(key, "{}"), Timestamp(40_000), &MemoryQuota::default()).await.expect("tie");
    }
    assert_eq!(in_updated_order(&catalog, 2).await[..4], ["tie-a", "tie-b", "tie-c", "k0005"]);
    // Walked in the index's order, not sorted: a page of 5 reads a few rows, not the
    // prefix's 2,100 (each row read is several VM steps).
    let search = MemorySearch { limit: 5, order: SearchOrder::UpdatedAt, ..MemorySearch::new(alice()) };
    crate::memory::WALK_STEPS.with(|steps| steps.set(0));
    assert_eq!(catalog.memory_search(&tenant(), &search, Timestamp(50_000)).await.expect("page").len(), 5);
    let steps = crate::memory::WALK_STEPS.with(|steps| steps.get());
    assert!(steps < 500, "{steps} VM steps for a page of 5");
}

/// A search file written before schema V11 (no `memory_updated`) is rebuilt at open,
/// and the updated order found in it (fails if such a file were taken as usable).
#[tokio::test]
async fn a_search_file_without_the_updated_order_is_rebuilt() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let count = crate::memory::SMALL_PREFIX as u64 + 10;
    drop(seeded_in_updated_order(&path, count).await);
    search_file(&path).execute_batch("DROP TABLE memory_updated; PRAGMA user_version = 0").expect("as V10 left it");
    let catalog = SqliteCatalog::open(&path).expect("reopen");
    let expected: Vec<String> = (0..count).rev().map(|i| format!("k{i:04}")).collect();
    assert_eq!(in_updated_order(&catalog, 1_000).await, expected);
}

/// A search file of format 11 holds the terms from before NFC words and character
/// terms (a word of Japanese text was one term): it is rebuilt at open, and a substring
/// of that word found (fails if such a file were taken as usable).
#[tokio::test]
async fn a_search_file_of_the_earlier_terms_is_rebuilt() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let catalog = SqliteCatalog::open(&path).expect("open");
    let quota = MemoryQuota::default();
    catalog.memory_put(&tenant(), &put("jp", r#""山田太郎さん""#), Timestamp(1), &quota).await.expect("put");
    assert_eq!(with_term(&catalog, "太郎").await, ["jp"]);
    drop(catalog);
    let old = search_file(&path);
    old.execute_batch("UPDATE memory_terms SET terms = '山田太郎さん'; PRAGMA user_version = 11")
        .expect("as format 11");
    drop(old);
    let catalog = SqliteCatalog::open(&path).expect("reopen");
    assert_eq!(with_term(&catalog, "太郎").await, ["jp"]);
    let format: i64 = index_value(&catalog, "PRAGMA search.user_version", []);
    assert_eq!(format, crate::search::SEARCH_FORMAT);
}

/// The index connection keeps 32 MiB of the search file's pages (`SEARCH_CACHE_KIB`);
/// the catalog's other connections keep SQLite's default.
#[tokio::test]
async fn the_index_connection_caches_more_of_the_search_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).expect("open");
    let index = catalog.shared.index().expect("index connection");
    let kib: i64 = index.pragma_query_value(Some("search"), "cache_size", |row| row.get(0)).expect("pragma");
    assert_eq!(kib, -32 * 1024);
}
