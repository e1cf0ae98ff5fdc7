//! The Catalog conformance suite on PostgreSQL: every test gets a database of its own
//! (`berth_postgres::testing::TestDatabase`, dropped at the end), on the server named by
//! `BERTH_TEST_PG`. No known divergence: every clause runs.

mod audit_tamper;

use async_trait::async_trait;
use berth_catalog::Catalog;
use berth_core::TenantId;
use berth_postgres::testing::TestDatabase;
use berth_postgres::{PostgresBackend, PostgresCatalog, PostgresOptions};
use berth_testkit::catalog_conformance::{AuditTamper, AuditTamperer, CatalogFixture};
use std::sync::Arc;

struct PostgresFixture {
    catalog: PostgresCatalog,
    database: TestDatabase,
}

impl CatalogFixture for PostgresFixture {
    fn catalog(&self) -> Arc<dyn Catalog> {
        Arc::new(self.catalog.clone())
    }
}

#[async_trait]
impl AuditTamperer for PostgresFixture {
    async fn tamper(&self, tenant: &TenantId, tamper: AuditTamper) {
        let client = self.database.client().await;
        client.batch_execute(&audit_tamper::postgres(tenant, tamper)).await.expect("tamper");
    }
}

async fn postgres() -> PostgresFixture {
    let database = TestDatabase::with_app_role().await;
    let options = PostgresOptions { pool_size: 4, ..PostgresOptions::default() };
    let backend = PostgresBackend::connect(&database.app_url(), options).await.expect("connect");
    PostgresFixture { catalog: backend.catalog(), database }
}

berth_testkit::catalog_conformance!(postgres().await);
berth_testkit::memory_conformance!(postgres().await);

/// Four catalogs with pools of their own (as four processes) race the same memory
/// compare-and-set each round, and puts of new keys near the item quota: one winner per
/// round, the others a conflict naming its revision; the quota is never overrun.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_cas_and_quota_across_pools() {
    use berth_catalog::scoped::{MemoryPut, MemoryQuota};
    use berth_catalog::MemoryStore;
    use berth_testkit::memory_conformance::put;
    let database = TestDatabase::with_app_role().await;
    let mut catalogs = Vec::new();
    for _ in 0..4 {
        let options = PostgresOptions { pool_size: 2, ..PostgresOptions::default() };
        catalogs.push(PostgresBackend::connect(&database.app_url(), options).await.expect("connect").catalog());
    }
    let t = berth_testkit::catalog_conformance::tenant("t-race");
    for round in 0..6u64 {
        let mut attempts = Vec::new();
        for (index, catalog) in catalogs.iter().enumerate() {
            let (catalog, t) = (catalog.clone(), t.clone());
            let write = MemoryPut {
                expected_revision: Some(round),
                ..put("user/alice", "k", &format!(r#""round {round} by {index}""#))
            };
            let now = berth_core::Timestamp(round);
            attempts
                .push(tokio::spawn(async move { catalog.memory_put(&t, &write, now, &MemoryQuota::default()).await }));
        }
        let mut wins = 0;
        for attempt in attempts {
            match attempt.await.expect("task") {
                Ok(item) => {
                    assert_eq!(item.revision, round + 1);
                    wins += 1;
                }
                Err(error) => assert_eq!(
                    error,
                    berth_core::Error::RevisionConflict { expected: round, actual: round + 1 },
                    "round {round}"
                ),
            }
        }
        assert_eq!(wins, 1, "round {round}");
    }
    // Quota: 1 item stored, room for 4 more; 16 racers each put a new key.
    let tight = MemoryQuota { items: 5, bytes: 1 << 20 };
    let mut attempts = Vec::new();
    for index in 0..16 {
        let (catalog, t) = (catalogs[index % 4].clone(), t.clone());
        let write = put("user/alice", &format!("new-{index}"), "1");
        attempts
            .push(tokio::spawn(async move { catalog.memory_put(&t, &write, berth_core::Timestamp(9), &tight).await }));
    }
    let mut stored = 0;
    for attempt in attempts {
        match attempt.await.expect("task") {
            Ok(_) => stored += 1,
            Err(error) => assert_eq!(error.code(), "limit_exceeded", "{error:?}"),
        }
    }
    assert_eq!(stored, 4);
    assert_eq!(catalogs[0].memory_usage(&t).await.expect("usage").items, 5);
}

/// Past the threshold where a filter condition stops driving the page (it is then
/// tested per row through the field index), with and without full text, in every
/// order, every page equals the reference's (the conformance populations are small).
/// Also values the filter index must not choke on: NUL in strings and field names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_search_plans_at_scale_match_the_reference() {
    use berth_catalog::scoped::{Condition, Filter, FilterOp, MemoryItem, MemoryQuota, MemorySearch, MemoryStore};
    use berth_catalog::scoped::{Namespace, SearchOrder, TextQuery};
    use berth_core::{JsonText, Timestamp};
    let fixture = postgres().await;
    let catalog = fixture.catalog.clone();
    let tenant = berth_testkit::catalog_conformance::tenant("t-scale");
    let namespaces = ["user/a", "user/a/x", "user/ab", "user/a/x/y"];
    let items: Vec<MemoryItem> = (0..2_600u64)
        .map(|i| {
            let value = format!(
                r#"{{"kind":"k{}","n":{}{},"s":"{}","b":{},"text":"w{} {} {}","nul\u0000":1}}"#,
                i % 3,
                i % 7,
                if i % 2 == 0 { ".0" } else { "" },
                ["a", "b", "B", "a\\u0000", "é"][(i % 5) as usize],
                i % 5 == 0,
                i % 11,
                if i % 2 == 0 { "common" } else { "other" },
                // Every item holds 東 and 京 (candidates of 東京), half of them 東京.
                if i % 2 == 0 { "東京都" } else { "京都東" }
            );
            MemoryItem {
                namespace: Namespace::parse(namespaces[(i % 4) as usize]).expect("namespace"),
                key: format!("k{:05}", (i * 7919) % 2_600),
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
    for chunk in items.chunks(1_000) {
        catalog.memory_import_many(&tenant, chunk.to_vec(), &MemoryQuota::default()).await.expect("seed");
    }
    let now = Timestamp(100);
    let condition = |field: &str, op, operand: &str| Condition {
        field: field.into(),
        op,
        operand: JsonText::parse(operand).expect("operand"),
    };
    let one = |c| Filter::new(vec![c]).expect("filter");
    let filters = [
        Filter::default(),
        one(condition("kind", FilterOp::Eq, r#""k1""#)),
        one(condition("n", FilterOp::Gte, "3")),
        one(condition("n", FilterOp::Gte, "0")),
        one(condition("n", FilterOp::In, "[1, 2.0]")),
        one(condition("s", FilterOp::Lt, r#""a\u0001""#)),
        one(condition("s", FilterOp::Ne, r#""a""#)),
        one(condition("nul\u{0}", FilterOp::Eq, "1")),
        Filter::new(vec![condition("kind", FilterOp::In, r#"["k0", "k1"]"#), condition("b", FilterOp::Eq, "false")])
            .expect("filter"),
    ];
    for prefix in ["user/a", "user/a/x"] {
        for (f, filter) in filters.iter().enumerate() {
            for (query, order) in [
                (None, SearchOrder::Key),
                (None, SearchOrder::UpdatedAt),
                (Some("common"), SearchOrder::Key),
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
                for page in 0..2 {
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

/// Migration 6 makes every item's `memory_terms` again with today's terms
/// (`berth_catalog::scoped::index_terms`): rows as an earlier berth wrote them (a
/// Japanese text one term, an NFD spelling as written) find nothing by substring or by
/// its NFC spelling until `migrate` runs it, and then do, in every tenant (fails without
/// the migration's step). The schema is set back to version 5 for it (the later
/// migrations' rows and column go too), so `migrate` applies 6 and what follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_terms_are_made_again_by_their_migration() {
    use berth_catalog::scoped::{MemoryQuota, MemorySearch, MemoryStore, Namespace, TextQuery};
    use berth_core::Timestamp;
    use berth_postgres::MEMORY_TERMS_REMADE;
    use berth_testkit::memory_conformance::put;
    let fixture = postgres().await;
    let tenants =
        [berth_testkit::catalog_conformance::tenant("t-a"), berth_testkit::catalog_conformance::tenant("t-b")];
    for t in &tenants {
        for (key, value) in [("jp", "\"山田太郎さん\""), ("fr", "\"Cafe\u{301} noir\"")] {
            let write = put("user/u", key, value);
            fixture.catalog.memory_put(t, &write, Timestamp(1), &MemoryQuota::default()).await.expect("put");
        }
    }
    let found = |t: TenantId, query: &'static str| {
        let catalog = fixture.catalog.clone();
        async move {
            let search = MemorySearch {
                query: Some(TextQuery::parse(query).expect("query")),
                ..MemorySearch::new(Namespace::parse("user/u").expect("namespace"))
            };
            let items = catalog.memory_search(&t, &search, Timestamp(2)).await.expect("search");
            items.into_iter().map(|item| item.key).collect::<Vec<_>>()
        }
    };
    assert_eq!(found(tenants[0].clone(), "太郎").await, ["jp"]);
    let admin = fixture.database.client().await;
    admin
        .batch_execute(&format!(
            "DELETE FROM memory_terms; \
             INSERT INTO memory_terms (tenant, term, namespace, key, occurrences) \
             SELECT t.tenant, w.term, 'user/u', w.key, 1 FROM (VALUES ('t-a'), ('t-b')) AS t (tenant), \
             (VALUES ('山田太郎さん', 'jp'), ('cafe\u{301}', 'fr'), ('noir', 'fr')) AS w (term, key); \
             DELETE FROM schema_migrations WHERE version >= {MEMORY_TERMS_REMADE}; \
             ALTER TABLE sessions DROP COLUMN search"
        ))
        .await
        .expect("terms as an earlier berth wrote them, and its layout (before migration 7's column)");
    assert!(found(tenants[0].clone(), "太郎").await.is_empty());
    assert!(found(tenants[1].clone(), "café").await.is_empty());
    let manual = PostgresOptions { migrate: false, ..PostgresOptions::default() };
    let owner = PostgresBackend::connect_unchecked(&fixture.database.url(), manual).expect("owner");
    let report = owner.migrate().await.expect("migrate");
    assert_eq!(report.from_version, MEMORY_TERMS_REMADE - 1);
    for t in &tenants {
        assert_eq!(found(t.clone(), "太郎").await, ["jp"], "{t}");
        assert_eq!(found(t.clone(), "café").await, ["fr"], "{t}");
        assert_eq!(found(t.clone(), "noir").await, ["fr"], "{t}");
    }
}
