//! Generic conformance bodies of the `MemoryStore` seam (scoped memory), run on the
//! memory catalog, SQLite and PostgreSQL. One `pub async fn` per clause, taking
//! `&dyn Catalog` (every catalog is a memory store); `memory_conformance!(make_fixture)`
//! expands to one test per clause. Search and listing clauses compare every page with
//! the reference semantics (`MemorySearch::page`, `NamespaceQuery::page`) over a model
//! the test keeps, so a backend must return exactly what the reference returns.

use crate::catalog_conformance::{sample_record, session_id, tenant};
use berth_catalog::audit::AuditDraft;
use berth_catalog::scoped::{
    Condition, Filter, FilterOp, ForgetOutcome, MemoryDelete, MemoryItem, MemoryPut, MemoryQuota,
};
use berth_catalog::scoped::{MemorySearch, Namespace, NamespaceQuery, SearchCursor, SearchOrder, TextQuery};
use berth_catalog::scoped::{Removed, ScopeRemoved, SweepAudit, TenantQuota};
use berth_catalog::Catalog;
use berth_core::limits::{Limit, MEMORY_FILTER_CONDITIONS_MAX, MEMORY_FILTER_IN_VALUES_MAX, MEMORY_VALUE_BYTES_MAX};
use berth_core::{Error, JsonText, Revision, TenantId, Timestamp};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;

pub fn ns(text: &str) -> Namespace {
    Namespace::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

pub fn json(text: &str) -> JsonText {
    JsonText::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

pub fn put(namespace: &str, key: &str, value: &str) -> MemoryPut {
    MemoryPut {
        namespace: ns(namespace),
        key: key.into(),
        value: json(value),
        expected_revision: None,
        ttl_ms: None,
        bound_to: None,
    }
}

const T0: Timestamp = Timestamp(1_000_000);

fn quota() -> MemoryQuota {
    MemoryQuota::default()
}

async fn store(catalog: &dyn Catalog, tenant: &TenantId, write: MemoryPut, now: Timestamp) -> MemoryItem {
    catalog.memory_put(tenant, &write, now, &quota()).await.unwrap_or_else(|e| panic!("put {write:?}: {e}"))
}

async fn get(
    catalog: &dyn Catalog,
    tenant: &TenantId,
    namespace: &str,
    key: &str,
    now: Timestamp,
) -> Option<MemoryItem> {
    catalog.memory_get(tenant, &ns(namespace), key, now, false).await.expect("get")
}

/// Every live item of the tenant, by scan, in (namespace, key) order.
pub async fn all_items(catalog: &dyn Catalog, tenant: &TenantId, now: Timestamp) -> Vec<MemoryItem> {
    let mut out: Vec<MemoryItem> = Vec::new();
    loop {
        let after = out.last().map(|item| (item.namespace.clone(), item.key.clone()));
        let page =
            catalog.memory_scan(tenant, after.as_ref().map(|(n, k)| (n, k.as_str())), 7, now).await.expect("scan");
        let short = page.len() < 7;
        out.extend(page);
        if short {
            return out;
        }
    }
}

fn forget_audit(tenant: &TenantId) -> berth_catalog::scoped::ForgetAudit {
    let tenant = tenant.clone();
    Box::new(move |outcome: &ForgetOutcome| AuditDraft {
        tenant,
        time: T0,
        actor: "admin:test".into(),
        action: "memory.forget".into(),
        session: None,
        revision: None,
        outcome: "ok".into(),
        details: serde_json::json!({"items": outcome.items, "bytes": outcome.bytes}),
    })
}

/// A sweep's audit records as the service drafts them (the counts as details).
fn sweep_audit(action: &'static str) -> SweepAudit {
    Arc::new(move |tenant: &TenantId, removed: &Removed| AuditDraft {
        tenant: tenant.clone(),
        time: T0,
        actor: "system:memory".into(),
        action: action.into(),
        session: None,
        revision: None,
        outcome: "ok".into(),
        details: serde_json::to_value(removed).expect("counts"),
    })
}

/// A delete's audit record naming the keys it deleted.
fn delete_audit(tenant: &TenantId) -> berth_catalog::scoped::DeleteAudit {
    let tenant = tenant.clone();
    Box::new(move |deleted: &[MemoryItem]| AuditDraft {
        tenant,
        time: T0,
        actor: "user:alice".into(),
        action: "memory.delete".into(),
        session: None,
        revision: None,
        outcome: "ok".into(),
        details: serde_json::json!({"keys": deleted.iter().map(|item| item.key.as_str()).collect::<Vec<_>>()}),
    })
}

fn delete(namespace: &str, key: &str, expected_revision: Option<u64>) -> MemoryDelete {
    MemoryDelete { namespace: ns(namespace), key: key.into(), expected_revision }
}

async fn audit_log(catalog: &dyn Catalog, tenant: &TenantId) -> Vec<berth_catalog::AuditEntry> {
    catalog.read_audit(tenant, 0, 1_000).await.expect("audit log")
}

// ---------------------------------------------------------------------------------
// Clauses.

pub async fn put_get_round_trip_is_exact(catalog: &dyn Catalog) {
    let t = tenant("t1");
    let exact =
        r#"{"z":1,"a":18446744073709551617,"f":1.50,"e":1E+2,"s":"\u00e9 é \ud83d\ude00","n":null,"l":[true,{}]}"#;
    let item = store(catalog, &t, put("user/alice/prefs", "k/1 ü", exact), T0).await;
    assert_eq!(item.revision, 1);
    assert_eq!((item.created_at, item.updated_at), (T0, T0));
    let read = get(catalog, &t, "user/alice/prefs", "k/1 ü", T0).await.expect("stored");
    assert_eq!(read, item);
    assert_eq!(read.value.as_str(), json(exact).as_str(), "value bytes");
    assert!(get(catalog, &t, "user/alice/prefs", "other", T0).await.is_none());
    assert!(get(catalog, &t, "user/alice", "k/1 ü", T0).await.is_none(), "namespaces are exact for get");
    let second = store(catalog, &t, put("user/alice/prefs", "k/1 ü", "2"), T0.plus_ms(5)).await;
    assert_eq!((second.revision, second.created_at, second.updated_at), (2, T0, T0.plus_ms(5)));
}

pub async fn put_compare_and_set(catalog: &dyn Catalog) {
    let t = tenant("t1");
    let create = MemoryPut { expected_revision: Some(0), ..put("app/support", "k", "1") };
    assert_eq!(store(catalog, &t, create.clone(), T0).await.revision, 1);
    let again = catalog.memory_put(&t, &create, T0, &quota()).await.unwrap_err();
    assert!(matches!(again, Error::RevisionConflict { expected: 0, actual: 1 }), "{again:?}");
    let stale = MemoryPut { expected_revision: Some(5), ..put("app/support", "k", "2") };
    let error = catalog.memory_put(&t, &stale, T0, &quota()).await.unwrap_err();
    assert!(matches!(error, Error::RevisionConflict { expected: 5, actual: 1 }), "{error:?}");
    assert_eq!(get(catalog, &t, "app/support", "k", T0).await.unwrap().value.as_str(), "1", "nothing stored");
    let next = MemoryPut { expected_revision: Some(1), ..put("app/support", "k", "3") };
    assert_eq!(store(catalog, &t, next, T0).await.revision, 2);
    let absent = MemoryPut { expected_revision: Some(1), ..put("app/support", "absent", "3") };
    let error = catalog.memory_put(&t, &absent, T0, &quota()).await.unwrap_err();
    assert!(matches!(error, Error::RevisionConflict { expected: 1, actual: 0 }), "{error:?}");
}

pub async fn concurrent_cas_has_one_winner(catalog: &dyn Catalog) {
    let t = tenant("t1");
    store(catalog, &t, put("user/u/c", "k", "0"), T0).await;
    let catalog: Arc<&dyn Catalog> = Arc::new(catalog);
    let attempts = (0..8).map(|i| {
        let catalog = catalog.clone();
        let t = t.clone();
        async move {
            let write = MemoryPut { expected_revision: Some(1), ..put("user/u/c", "k", &i.to_string()) };
            catalog.memory_put(&t, &write, T0, &quota()).await
        }
    });
    let results = futures_join_all(attempts).await;
    let wins = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(wins, 1, "{results:?}");
    assert!(results.iter().filter_map(|r| r.as_ref().err()).all(|e| matches!(e, Error::RevisionConflict { .. })));
    assert_eq!(get(*catalog, &t, "user/u/c", "k", T0).await.unwrap().revision, 2);
}

/// Runs every future concurrently on the current task; outputs in input order.
async fn futures_join_all<F: std::future::Future>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    use std::pin::Pin;
    use std::task::Poll;
    let mut pending: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut waiting = false;
        for (future, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => waiting = true,
                }
            }
        }
        if waiting {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().map(|output| output.expect("every future finished")).collect()
}

pub async fn delete_with_and_without_revision(catalog: &dyn Catalog) {
    let t = tenant("t1");
    store(catalog, &t, put("user/u", "a", "1"), T0).await;
    store(catalog, &t, put("user/u", "b", "1"), T0).await;
    let error = catalog.memory_delete(&t, &ns("user/u"), "a", Some(7), T0).await.unwrap_err();
    assert!(matches!(error, Error::RevisionConflict { expected: 7, actual: 1 }), "{error:?}");
    assert!(get(catalog, &t, "user/u", "a", T0).await.is_some(), "nothing deleted on conflict");
    let deleted = catalog.memory_delete(&t, &ns("user/u"), "a", Some(1), T0).await.expect("delete");
    assert_eq!(deleted.key, "a");
    catalog.memory_delete(&t, &ns("user/u"), "b", None, T0).await.expect("delete");
    let error = catalog.memory_delete(&t, &ns("user/u"), "a", None, T0).await.unwrap_err();
    assert_eq!(error.code(), "not_found");
    assert!(all_items(catalog, &t, T0).await.is_empty());
    assert_eq!(catalog.memory_usage(&t).await.unwrap().items, 0);
}

pub async fn ttl_expiry_and_refresh(catalog: &dyn Catalog) {
    let t = tenant("t1");
    let short = MemoryPut { ttl_ms: Some(100), ..put("user/u", "short", r#""x""#) };
    let item = store(catalog, &t, short, T0).await;
    assert_eq!((item.expires_at, item.ttl_ms), (Some(T0.plus_ms(100)), Some(100)));
    store(catalog, &t, put("user/u", "forever", r#""x""#), T0).await;
    assert!(get(catalog, &t, "user/u", "short", T0.plus_ms(99)).await.is_some());
    assert!(get(catalog, &t, "user/u", "short", T0.plus_ms(100)).await.is_none(), "expired at expires_at");
    // Refresh on read moves the expiry, not the revision.
    let refresh = MemoryPut { ttl_ms: Some(100), ..put("user/u", "refreshed", "1") };
    store(catalog, &t, refresh, T0).await;
    let read = catalog.memory_get(&t, &ns("user/u"), "refreshed", T0.plus_ms(90), true).await.unwrap().unwrap();
    assert_eq!((read.expires_at, read.revision), (Some(T0.plus_ms(190)), 1));
    assert!(get(catalog, &t, "user/u", "refreshed", T0.plus_ms(150)).await.is_some());
    // Expired items are invisible to search, scan and listings, and absent for a put.
    let later = T0.plus_ms(500);
    let search = MemorySearch::new(ns("user/u"));
    let keys: Vec<String> =
        catalog.memory_search(&t, &search, later).await.unwrap().into_iter().map(|i| i.key).collect();
    assert_eq!(keys, ["forever"]);
    assert_eq!(all_items(catalog, &t, later).await.len(), 1);
    let create = MemoryPut { expected_revision: Some(0), ..put("user/u", "short", "2") };
    let recreated = store(catalog, &t, create, later).await;
    assert_eq!((recreated.revision, recreated.created_at, recreated.expires_at), (1, later, None));
    // The sweeper removes expired items in bounded batches.
    for key in ["e1", "e2", "e3"] {
        store(catalog, &t, MemoryPut { ttl_ms: Some(1), ..put("user/u", key, "1") }, later).await;
    }
    let sweep_at = later.plus_ms(10);
    let before = catalog.memory_usage(&t).await.unwrap().items;
    let expire = || sweep_audit("memory.expire");
    assert_eq!(catalog.memory_remove_expired(sweep_at, 2, expire()).await.unwrap(), 2);
    assert!(catalog.memory_remove_expired(sweep_at, 100, expire()).await.unwrap() >= 1);
    assert_eq!(catalog.memory_usage(&t).await.unwrap().items, before - 4, "e1..e3 and `refreshed` removed");
    assert_eq!(catalog.memory_remove_expired(sweep_at, 100, expire()).await.unwrap(), 0);
}

pub async fn retention_removes_stale_items(catalog: &dyn Catalog) {
    let t = tenant("t1");
    for i in 0..5u64 {
        store(catalog, &t, put("project/p", &format!("k{i}"), "1"), T0.plus_ms(i * 10)).await;
    }
    let retain = || sweep_audit("memory.retention");
    assert_eq!(catalog.memory_remove_stale(&t, T0.plus_ms(30), 2, retain()).await.unwrap(), 2);
    assert_eq!(catalog.memory_remove_stale(&t, T0.plus_ms(30), 10, retain()).await.unwrap(), 1);
    let keys: Vec<String> = all_items(catalog, &t, T0).await.into_iter().map(|item| item.key).collect();
    assert_eq!(keys, ["k3", "k4"]);
    assert_eq!(catalog.memory_remove_stale(&tenant("other"), T0.plus_ms(99), 10, retain()).await.unwrap(), 0);
}

pub async fn quotas_refuse_with_nothing_stored(catalog: &dyn Catalog) {
    let t = tenant("t1");
    let tight = MemoryQuota { items: 2, bytes: 100 };
    catalog.memory_put(&t, &put("user/u", "a", "1"), T0, &tight).await.unwrap();
    catalog.memory_put(&t, &put("user/u", "b", "1"), T0, &tight).await.unwrap();
    let error = catalog.memory_put(&t, &put("user/u", "c", "1"), T0, &tight).await.unwrap_err();
    assert!(
        matches!(&error, Error::LimitExceeded { what, limit: 2, .. } if what.name() == "memory_items"),
        "{error:?}"
    );
    // Replacing an item is not a new item.
    catalog.memory_put(&t, &put("user/u", "a", "22"), T0, &tight).await.unwrap();
    let big = format!("\"{}\"", "x".repeat(100));
    let error = catalog.memory_put(&t, &put("user/u", "a", &big), T0, &tight).await.unwrap_err();
    assert!(
        matches!(&error, Error::LimitExceeded { what, limit: 100, .. } if what.name() == "memory_bytes"),
        "{error:?}"
    );
    assert_eq!(get(catalog, &t, "user/u", "a", T0).await.unwrap().value.as_str(), "22");
    assert_eq!(catalog.memory_usage(&t).await.unwrap().items, 2);
    let usage = catalog.memory_usage(&t).await.unwrap();
    assert_eq!(usage.bytes, ("user/u".len() * 2 + 2 + 2 + 1) as u64);
    // Another tenant has its own quota.
    catalog.memory_put(&tenant("t2"), &put("user/u", "c", "1"), T0, &tight).await.unwrap();
    // The value limit is a named limit too.
    let huge = format!("\"{}\"", "x".repeat(berth_core::limits::MEMORY_VALUE_BYTES_MAX));
    let error = catalog.memory_put(&t, &put("user/u", "h", &huge), T0, &quota()).await.unwrap_err();
    assert!(matches!(&error, Error::LimitExceeded { what, .. } if what.name() == "memory_value_bytes"), "{error:?}");
    assert!(get(catalog, &t, "user/u", "h", T0).await.is_none());
}

pub async fn tenants_are_isolated(catalog: &dyn Catalog) {
    let (a, b) = (tenant("ta"), tenant("tb"));
    store(catalog, &a, put("user/u", "k", r#""a""#), T0).await;
    assert!(get(catalog, &b, "user/u", "k", T0).await.is_none());
    assert!(catalog.memory_search(&b, &MemorySearch::new(ns("user/u")), T0).await.unwrap().is_empty());
    assert!(all_items(catalog, &b, T0).await.is_empty());
    assert_eq!(catalog.memory_delete(&b, &ns("user/u"), "k", None, T0).await.unwrap_err().code(), "not_found");
    let (outcome, _) = catalog.memory_forget(&b, &ns("user/u"), forget_audit(&b)).await.unwrap();
    assert_eq!(outcome.items, 0);
    assert!(get(catalog, &a, "user/u", "k", T0).await.is_some());
    assert!(catalog.tenants().await.unwrap().contains(&a), "a tenant with memory is a tenant");
}

/// A mixed population: numbers (large, fractional, negative), strings, booleans,
/// nested values, missing fields, non-objects, and text.
fn population(rng: &mut StdRng) -> Vec<MemoryPut> {
    let words = ["tea", "Green", "coffee", "TEA", "mountain", "river", "ünï", "data"];
    let namespaces =
        ["user/alice", "user/alice/prefs", "user/alice/prefs/deep", "user/alicex", "user/bob", "project/p"];
    let numbers = ["1", "2", "2.0", "-3", "18446744073709551616", "18446744073709551617", "1e3", "0.5", "-0"];
    let mut out = Vec::new();
    for i in 0..120 {
        let namespace = namespaces[rng.gen_range(0..namespaces.len())];
        let text: Vec<&str> = (0..rng.gen_range(0..5)).map(|_| words[rng.gen_range(0..words.len())]).collect();
        let value = match rng.gen_range(0..10) {
            0 => format!("[{}]", numbers[rng.gen_range(0..numbers.len())]),
            1 => format!("\"{}\"", text.join(" ")),
            _ => {
                let mut fields = Vec::new();
                if rng.gen_bool(0.8) {
                    fields.push(format!("\"n\":{}", numbers[rng.gen_range(0..numbers.len())]));
                }
                if rng.gen_bool(0.6) {
                    fields.push(format!("\"s\":\"{}\"", ["a", "b", "B", "ab", ""][rng.gen_range(0..5)]));
                }
                if rng.gen_bool(0.3) {
                    fields.push(format!(
                        "\"m\":{}",
                        ["true", "null", "\"1\"", "1", "[1,2]", "{\"x\":1}"][rng.gen_range(0..6)]
                    ));
                }
                fields.push(format!("\"text\":\"{}\"", text.join(" ")));
                format!("{{{}}}", fields.join(","))
            }
        };
        out.push(put(namespace, &format!("k{i:03}"), &value));
    }
    out
}

fn filters() -> Vec<Filter> {
    let c = |field: &str, op: FilterOp, operand: &str| Condition { field: field.into(), op, operand: json(operand) };
    let one = |cond| Filter::new(vec![cond]).unwrap();
    let mut out = vec![Filter::default()];
    for op in [FilterOp::Eq, FilterOp::Ne, FilterOp::Gt, FilterOp::Gte, FilterOp::Lt, FilterOp::Lte] {
        for operand in ["2", "18446744073709551616", "-1", "0"] {
            out.push(one(c("n", op, operand)));
        }
        for operand in ["\"a\"", "\"B\""] {
            out.push(one(c("s", op, operand)));
        }
    }
    out.push(one(c("m", FilterOp::Eq, "true")));
    out.push(one(c("m", FilterOp::Eq, "[1,2.0]")));
    out.push(one(c("m", FilterOp::Ne, "null")));
    out.push(one(c("m", FilterOp::Eq, "{\"x\":1.0}")));
    out.push(one(c("n", FilterOp::In, "[1, \"2\", 1000]")));
    out.push(one(c("nobody", FilterOp::Ne, "1")));
    out.push(Filter::new(vec![c("n", FilterOp::Gte, "0"), c("s", FilterOp::Lt, "\"b\"")]).unwrap());
    // Several conditions on one field: a selective one drives the search, and each of
    // the others is still tested (they were once skipped by field name).
    out.push(Filter::new(vec![c("n", FilterOp::Lt, "2"), c("n", FilterOp::Gte, "0")]).unwrap());
    out.push(Filter::new(vec![c("n", FilterOp::Gte, "0"), c("n", FilterOp::Lt, "2")]).unwrap());
    out.push(Filter::new(vec![c("n", FilterOp::In, "[1, 2, 3]"), c("n", FilterOp::Ne, "2")]).unwrap());
    // The largest filter there is: every backend answers it as the reference does (an
    // `in` of 991 operands once passed SQLite's expression depth: a 500).
    let widest = |offset: usize| {
        let operands: Vec<String> = (0..MEMORY_FILTER_IN_VALUES_MAX).map(|n| (n + offset).to_string()).collect();
        format!("[{}]", operands.join(","))
    };
    let conditions = (0..MEMORY_FILTER_CONDITIONS_MAX).map(|i| c("n", FilterOp::In, &widest(i % 3))).collect();
    out.push(Filter::new(conditions).unwrap());
    out
}

async fn assert_searches_like_reference(
    catalog: &dyn Catalog,
    t: &TenantId,
    model: &[MemoryItem],
    search: &MemorySearch,
    now: Timestamp,
) {
    let expected = search.page(model.iter().cloned(), now);
    let actual = catalog.memory_search(t, search, now).await.unwrap_or_else(|e| panic!("{search:?}: {e}"));
    let keys = |items: &[MemoryItem]| items.iter().map(|i| format!("{}:{}", i.namespace, i.key)).collect::<Vec<_>>();
    assert_eq!(keys(&actual), keys(&expected), "{search:?}");
    assert_eq!(actual, expected, "items of {search:?}");
    // And page by page through the cursor, each item once.
    for page_size in [1, 7] {
        let mut paged = MemorySearch { limit: page_size, cursor: None, ..search.clone() };
        let mut seen: Vec<MemoryItem> = Vec::new();
        let whole = MemorySearch { limit: 1000, cursor: None, ..search.clone() }.page(model.iter().cloned(), now);
        loop {
            let page = catalog.memory_search(t, &paged, now).await.unwrap();
            assert!(page.len() <= page_size);
            let next = paged.next_cursor(&page);
            seen.extend(page);
            match next {
                Some(cursor) => paged.cursor = Some(SearchCursor::decode(&cursor.encode()).unwrap()),
                None => break,
            }
        }
        assert_eq!(keys(&seen), keys(&whole), "pages of {page_size} for {search:?}");
    }
}

async fn plant(catalog: &dyn Catalog, t: &TenantId, seed: u64) -> Vec<MemoryItem> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Vec::new();
    for (i, write) in population(&mut rng).into_iter().enumerate() {
        model.push(store(catalog, t, write, T0.plus_ms((i as u64 * 7) % 50)).await);
    }
    model
}

pub async fn search_filters_match_the_reference(catalog: &dyn Catalog) {
    let t = tenant("t1");
    let model = plant(catalog, &t, 7).await;
    for prefix in ["user/alice", "user/alice/prefs", "user/bob", "project/p", "user/nobody"] {
        for filter in filters() {
            let search = MemorySearch { filter, limit: 1000, ..MemorySearch::new(ns(prefix)) };
            let expected = search.page(model.iter().cloned(), T0);
            let actual = catalog.memory_search(&t, &search, T0).await.unwrap();
            assert_eq!(actual, expected, "{search:?}");
        }
    }
    // Paging in each order, with and without a filter.
    for order in [SearchOrder::Key, SearchOrder::UpdatedAt] {
        for filter in [Filter::default(), filters()[3].clone()] {
            let search = MemorySearch { filter, order, ..MemorySearch::new(ns("user/alice")) };
            assert_searches_like_reference(catalog, &t, &model, &search, T0).await;
        }
    }
}

pub async fn full_text_search_and_relevance(catalog: &dyn Catalog) {
    let t = tenant("t1");
    let model = plant(catalog, &t, 11).await;
    for query in ["tea", "TEA green", "ünï", "coffee river data", "absent", "Tea-Green"] {
        for order in [SearchOrder::Key, SearchOrder::UpdatedAt, SearchOrder::Relevance] {
            let search = MemorySearch {
                query: Some(TextQuery::parse(query).unwrap()),
                order,
                ..MemorySearch::new(ns("user/alice"))
            };
            assert_searches_like_reference(catalog, &t, &model, &search, T0).await;
        }
    }
    assert!(Namespace::parse("user").is_err(), "a search names at least a scope");
    let combined = MemorySearch {
        query: Some(TextQuery::parse("tea").unwrap()),
        filter: filters()[1].clone(),
        order: SearchOrder::Relevance,
        ..MemorySearch::new(ns("user/alice"))
    };
    assert_searches_like_reference(catalog, &t, &model, &combined, T0).await;
    // Relevance without a query is refused.
    let bad = MemorySearch { order: SearchOrder::Relevance, ..MemorySearch::new(ns("user/alice")) };
    assert_eq!(catalog.memory_search(&t, &bad, T0).await.unwrap_err().code(), "invalid");
}

/// Text in scripts written without spaces, and spellings that differ only in Unicode
/// normalization, as Google ADK's `InMemoryMemoryService` matches them
/// (`berth_catalog::scoped::text`): a non-ASCII query word is a substring of a word
/// (`太郎` in `山田太郎さん`, not in `次郎と太田`, which holds both characters), an ASCII
/// word a word or an ASCII run between other scripts (`python` in `私はPythonを`, not in
/// `pythonéque`), NFC at both ends (`Café` written with a combining accent, katakana
/// with combining voiced marks, hangul as jamo). Each query's keys are stated, and every
/// order and page compared with the reference.
pub async fn full_text_finds_words_in_every_script(catalog: &dyn Catalog) {
    let t = tenant("t1");
    let texts = [
        ("jp1", "山田太郎さんはPythonを使っています"),
        ("jp2", "太郎と花子"),
        ("jp3", "プログラミングが好き"),
        ("jp4", "\u{30d5}\u{309a}\u{30ed}\u{30af}\u{3099}\u{30e9}\u{30df}\u{30f3}\u{30af}\u{3099}の本"),
        ("jp5", "次郎と太田"),
        ("ko1", "서울에서 만나요"),
        ("ko2", "\u{1109}\u{1165}\u{110b}\u{116e}\u{11af}특별시"),
        ("ko3", "부산"),
        ("fr1", "Un café crème"),
        ("fr2", "CAFE\u{301} noir"),
        ("fr3", "cafés"),
        ("fr4", "cafe latte"),
        ("mix", "pythonéque"),
        ("en1", "python is fun, python"),
        ("en2", "marathon"),
        ("zh1", "我喜欢机器学习和深度学习"),
        ("zh2", "机器人"),
        ("zh3", "学习"),
    ];
    let mut model = Vec::new();
    for (i, (key, text)) in texts.iter().enumerate() {
        let value = format!(r#"{{"text":"{text}","n":{i}}}"#);
        model.push(store(catalog, &t, put("user/alice/notes", key, &value), T0.plus_ms(i as u64 % 4)).await);
    }
    // Neighbours outside the prefix: never found.
    store(catalog, &t, put("user/bob", "jp1", r#""山田太郎""#), T0).await;
    store(catalog, &t, put("user/alicex", "jp1", r#""太郎""#), T0).await;
    let nfd_katakana = "\u{30d5}\u{309a}\u{30ed}\u{30af}\u{3099}\u{30e9}\u{30df}\u{30f3}\u{30af}\u{3099}";
    let expected: &[(&str, &[&str])] = &[
        ("太郎", &["jp1", "jp2"]),
        ("机器学习", &["zh1"]),
        ("机器", &["zh1", "zh2"]),
        ("学习", &["zh1", "zh3"]),
        ("使って", &["jp1"]),
        ("プログラミング", &["jp3", "jp4"]),
        (nfd_katakana, &["jp3", "jp4"]),
        ("Python", &["en1", "jp1"]),
        ("서울", &["ko1", "ko2"]),
        ("\u{1109}\u{1165}\u{110b}\u{116e}\u{11af}", &["ko1", "ko2"]),
        ("café", &["fr1", "fr2", "fr3"]),
        ("CAFE\u{301}", &["fr1", "fr2", "fr3"]),
        ("cafe", &["fr4"]),
        ("太郎 python", &["jp1"]),
        ("太郎 java", &[]),
        ("thon", &[]),
        ("郎と", &["jp2", "jp5"]),
    ];
    let prefix = ns("user/alice");
    for (query, keys) in expected {
        let search = MemorySearch {
            query: Some(TextQuery::parse(query).unwrap()),
            limit: 1000,
            ..MemorySearch::new(prefix.clone())
        };
        let found = catalog.memory_search(&t, &search, T0).await.unwrap_or_else(|e| panic!("{query}: {e}"));
        let found: Vec<&str> = found.iter().map(|item| item.key.as_str()).collect();
        assert_eq!(found, *keys, "{query}");
        for order in [SearchOrder::Key, SearchOrder::UpdatedAt, SearchOrder::Relevance] {
            let search = MemorySearch { order, limit: 50, ..search.clone() };
            assert_searches_like_reference(catalog, &t, &model, &search, T0).await;
        }
    }
    // Relevance counts each occurrence: 学习 twice in zh1, once in zh3.
    let search = MemorySearch {
        query: Some(TextQuery::parse("学习").unwrap()),
        order: SearchOrder::Relevance,
        ..MemorySearch::new(prefix.clone())
    };
    let ranked = catalog.memory_search(&t, &search, T0).await.unwrap();
    assert_eq!(ranked.iter().map(|item| item.key.as_str()).collect::<Vec<_>>(), ["zh1", "zh3"]);
}

/// Every write is visible to the next search at once, whatever a backend defers (SQLite
/// writes search rows in batches, `UNINDEXED_MAX`): puts, replacements with other terms
/// and field values, and deletes, with a full-text and a filtered search compared with
/// the reference after many of them — and a long stretch of writes with no search in
/// between, longer than any batch.
pub async fn searches_see_each_write_at_once(catalog: &dyn Catalog) {
    let t = tenant("t1");
    let mut model: BTreeMap<String, MemoryItem> = BTreeMap::new();
    let text = MemorySearch {
        query: Some(TextQuery::parse("amber").unwrap()),
        limit: 1000,
        ..MemorySearch::new(ns("user/alice"))
    };
    let relevance = MemorySearch { order: SearchOrder::Relevance, ..text.clone() };
    let gte = Condition { field: "n".into(), op: FilterOp::Gte, operand: json("100") };
    let field =
        MemorySearch { filter: Filter::new(vec![gte]).unwrap(), limit: 1000, ..MemorySearch::new(ns("user/alice")) };
    for step in 0..300u64 {
        let key = format!("k{:03}", step % 90);
        let now = T0.plus_ms(step);
        if step % 11 == 10 {
            if model.remove(&key).is_some() {
                catalog.memory_delete(&t, &ns("user/alice"), &key, None, now).await.expect("delete");
            }
        } else {
            let word = if step % 2 == 0 { "amber" } else { "slate" };
            let value = format!(r#"{{"n":{step},"text":"{word} stone {word}"}}"#);
            model.insert(key.clone(), store(catalog, &t, put("user/alice", &key, &value), now).await);
        }
        if (step < 60 && step % 3 == 0) || step >= 290 {
            for search in [&text, &relevance, &field] {
                let expected = search.page(model.values().cloned(), now);
                let actual = catalog.memory_search(&t, search, now).await.expect("search");
                assert_eq!(actual, expected, "after step {step}: {search:?}");
            }
        }
    }
}

/// `memory_apply` (a carried append's writes, then its marker advanced, as
/// `berth_service::carried` sends them): each put in order, one whose expected revision
/// no longer holds skipped; the same writes applied again (a finisher after a crash)
/// apply none of the guarded ones.
pub async fn apply_applies_each_write_once(catalog: &dyn Catalog) {
    let t = tenant("t1");
    store(catalog, &t, put("app/test/markers", "s1", r#"{"from_seq":3}"#), T0).await;
    let existing = store(catalog, &t, put("user/alice", "b", r#"{"text":"old"}"#), T0).await;
    let with = |namespace: &str, key: &str, value: &str, expected: u64| MemoryPut {
        expected_revision: Some(expected),
        ..put(namespace, key, value)
    };
    let writes = vec![
        with("user/alice", "a", r#"{"text":"amber"}"#, 0),
        with("user/alice", "b", r#"{"text":"amber new"}"#, existing.revision),
        with("user/alice", "c", r#"{"text":"amber"}"#, 7),
        put("app/test/markers", "s1", r#"{"from_seq":9}"#),
    ];
    let now = T0.plus_ms(1);
    let applied = catalog.memory_apply(&t, &writes, now, &quota()).await.expect("apply");
    assert_eq!(applied, 3, "the third expected revision 7 of an absent item");
    assert_eq!(get(catalog, &t, "user/alice", "a", now).await.expect("a").value, json(r#"{"text":"amber"}"#));
    let b = get(catalog, &t, "user/alice", "b", now).await.expect("b");
    assert_eq!((b.value, b.revision), (json(r#"{"text":"amber new"}"#), existing.revision + 1));
    assert!(get(catalog, &t, "user/alice", "c", now).await.is_none());
    let marker = get(catalog, &t, "app/test/markers", "s1", now).await.expect("marker");
    assert_eq!(marker.value, json(r#"{"from_seq":9}"#), "the marker is advanced");
    let later = T0.plus_ms(2);
    let again = catalog.memory_apply(&t, &writes, later, &quota()).await.expect("again");
    assert_eq!(again, 1, "no guarded write applies twice (the unguarded marker does)");
    assert_eq!(get(catalog, &t, "user/alice", "b", later).await.expect("b").revision, existing.revision + 1);
    let usage = catalog.memory_usage(&t).await.expect("usage");
    assert_eq!(usage.items, 3, "a, b and the marker");
    let found = MemorySearch { query: Some(TextQuery::parse("amber").unwrap()), ..MemorySearch::new(ns("user/alice")) };
    let keys: Vec<String> =
        catalog.memory_search(&t, &found, later).await.expect("search").into_iter().map(|i| i.key).collect();
    assert_eq!(keys, ["a", "b"], "applied writes are searchable at once");
}

pub async fn search_prefix_is_precise(catalog: &dyn Catalog) {
    let t = tenant("t1");
    for namespace in ["user/a", "user/a/b", "user/ab", "user/a-b", "user/a.b", "project/a"] {
        store(catalog, &t, put(namespace, "k", "1"), T0).await;
    }
    let found: Vec<String> = catalog
        .memory_search(&t, &MemorySearch::new(ns("user/a")), T0)
        .await
        .unwrap()
        .into_iter()
        .map(|item| item.namespace.to_string())
        .collect();
    assert_eq!(found, ["user/a", "user/a/b"]);
}

pub async fn namespaces_list_with_prefix_depth_and_cursor(catalog: &dyn Catalog) {
    let t = tenant("t1");
    let model = plant(catalog, &t, 3).await;
    for prefix in ["user/alice", "user/alice/prefs", "user/bob", "user/zed"] {
        for max_depth in [None, Some(2), Some(3), Some(4)] {
            for limit in [1, 2, 100] {
                let mut query = NamespaceQuery { prefix: ns(prefix), max_depth, cursor: None, limit };
                let mut all_expected = Vec::new();
                let mut all_actual = Vec::new();
                loop {
                    let expected = query.page(model.iter().map(|item| &item.namespace));
                    let actual = catalog.memory_namespaces(&t, &query, T0).await.unwrap();
                    assert_eq!(actual, expected, "{query:?}");
                    let short = actual.len() < limit;
                    query.cursor = actual.last().map(|n| n.to_string());
                    all_expected.extend(expected);
                    all_actual.extend(actual);
                    if short {
                        break;
                    }
                }
                assert_eq!(all_actual, all_expected);
            }
        }
    }
    // Expired items do not keep a namespace listed.
    store(catalog, &t, MemoryPut { ttl_ms: Some(1), ..put("user/ghost/x", "k", "1") }, T0).await;
    let query = NamespaceQuery { prefix: ns("user/ghost"), max_depth: None, cursor: None, limit: 10 };
    assert!(catalog.memory_namespaces(&t, &query, T0.plus_ms(5)).await.unwrap().is_empty());
}

pub async fn forget_is_exact_and_audited(catalog: &dyn Catalog) {
    let t = tenant("t1");
    let other = tenant("t2");
    for namespace in [
        "user/alice",
        "user/alice/notes",
        "user/alice/notes/deep",
        "user/alicex",
        "user/alic",
        "user/bob",
        "project/alice",
        "app/alice",
    ] {
        store(catalog, &t, put(namespace, "k1", r#"{"v":"1"}"#), T0).await;
        store(catalog, &t, put(namespace, "k2", r#"{"v":"22"}"#), T0).await;
        store(catalog, &other, put(namespace, "k1", r#"{"v":"1"}"#), T0).await;
    }
    store(catalog, &t, MemoryPut { ttl_ms: Some(1), ..put("user/alice/notes", "expired", "1") }, T0).await;
    let before_t = all_items(catalog, &t, T0).await;
    let before_other = all_items(catalog, &other, T0).await;
    let usage_before = catalog.memory_usage(&t).await.unwrap();

    // A namespace prefix inside a scope.
    let (outcome, entry) = catalog.memory_forget(&t, &ns("user/alice/notes"), forget_audit(&t)).await.unwrap();
    // Namespaces 2 × 16 + 2 × 21, keys 4 × 2, values 2 × (9 + 10).
    let expected_bytes = 2 * 16 + 2 * 21 + 4 * 2 + 2 * (9 + 10);
    let expired_bytes = "user/alice/notes".len() + "expired".len() + 1;
    assert_eq!(outcome, ForgetOutcome { items: 5, bytes: (expected_bytes + expired_bytes) as u64 });
    assert_eq!(entry.draft.details, serde_json::json!({"items": 5, "bytes": outcome.bytes}));
    assert_eq!(entry.draft.action, "memory.forget");
    let after = all_items(catalog, &t, T0).await;
    let kept: Vec<&MemoryItem> =
        before_t.iter().filter(|item| !item.namespace.as_str().starts_with("user/alice/notes")).collect();
    assert_eq!(after.iter().collect::<Vec<_>>(), kept, "everything outside the scope unchanged");
    let usage = catalog.memory_usage(&t).await.unwrap();
    assert_eq!((usage.items, usage.bytes), (usage_before.items - 5, usage_before.bytes - outcome.bytes));

    // A whole scope.
    let (outcome, _) = catalog.memory_forget(&t, &ns("user/alice"), forget_audit(&t)).await.unwrap();
    assert_eq!(outcome.items, 2);
    let names: Vec<String> = all_items(catalog, &t, T0).await.iter().map(|i| i.namespace.to_string()).collect();
    assert_eq!(
        names,
        [
            "app/alice",
            "app/alice",
            "project/alice",
            "project/alice",
            "user/alic",
            "user/alic",
            "user/alicex",
            "user/alicex",
            "user/bob",
            "user/bob"
        ]
    );
    assert_eq!(all_items(catalog, &other, T0).await, before_other, "another tenant untouched");
    let audit = catalog.read_audit(&t, 0, 10).await.unwrap();
    assert_eq!(audit.len(), 2, "one audit record per forget");
}

pub async fn bound_items_go_with_their_session(catalog: &dyn Catalog) {
    let t = tenant("t1");
    let record = sample_record("t1", "s-bound", "alice", 5_000);
    catalog.insert(&record).await.unwrap();
    let other_record = sample_record("t1", "s-other", "alice", 5_000);
    catalog.insert(&other_record).await.unwrap();
    let bound =
        |key: &str, session: &str| MemoryPut { bound_to: Some(session_id(session)), ..put("user/alice/s", key, "1") };
    store(catalog, &t, bound("a", "s-bound"), T0).await;
    store(catalog, &t, bound("b", "s-bound"), T0).await;
    store(catalog, &t, bound("c", "s-other"), T0).await;
    store(catalog, &t, put("user/alice/s", "free", "1"), T0).await;
    store(catalog, &tenant("t2"), bound("a", "s-bound"), T0).await;
    assert_eq!(catalog.memory_bound_count(&t, &session_id("s-bound")).await.unwrap(), 2);
    catalog.remove_audited(&record.key(), Revision(0), Vec::new()).await.unwrap();
    let keys: Vec<String> = all_items(catalog, &t, T0).await.into_iter().map(|item| item.key).collect();
    assert_eq!(keys, ["c", "free"]);
    assert_eq!(catalog.memory_bound_count(&t, &session_id("s-bound")).await.unwrap(), 0);
    assert_eq!(catalog.memory_usage(&t).await.unwrap().items, 2);
    assert_eq!(all_items(catalog, &tenant("t2"), T0).await.len(), 1, "same session id in another tenant untouched");
    // Updating a session (closing it) leaves its memory alone.
    let mut closed = other_record.clone();
    closed.revision = Revision(1);
    closed.status = berth_core::lifecycle::Status::Closed;
    catalog.update(&closed, Revision(0)).await.unwrap();
    assert_eq!(catalog.memory_bound_count(&t, &session_id("s-other")).await.unwrap(), 1);
}

pub async fn import_is_exact_and_refuses_duplicates(catalog: &dyn Catalog) {
    let t = tenant("t1");
    let source = tenant("src");
    store(catalog, &source, put("user/u", "a", r#"{"x":1.50}"#), T0).await;
    store(catalog, &source, MemoryPut { ttl_ms: Some(60_000), ..put("user/u", "b", "[1]") }, T0.plus_ms(3)).await;
    store(catalog, &source, put("user/u", "a", r#"{"x":2}"#), T0.plus_ms(9)).await;
    let exported = all_items(catalog, &source, T0.plus_ms(10)).await;
    for item in &exported {
        catalog.memory_import(&t, item, &quota()).await.unwrap();
    }
    assert_eq!(all_items(catalog, &t, T0.plus_ms(10)).await, exported, "revision, times and value kept");
    let error = catalog.memory_import(&t, &exported[0], &quota()).await.unwrap_err();
    assert_eq!(error.code(), "already_exists");
    let tight = MemoryQuota { items: 2, bytes: 1 << 20 };
    let mut extra = exported[0].clone();
    extra.key = "c".into();
    let error = catalog.memory_import(&t, &extra, &tight).await.unwrap_err();
    assert_eq!(error.code(), "limit_exceeded");
    // Held to a put's limits: no stored item counts more than `ITEM_BYTES_MAX`.
    let mut oversized = exported[0].clone();
    oversized.key = "d".into();
    oversized.value = JsonText::parse(&format!("\"{}\"", "x".repeat(MEMORY_VALUE_BYTES_MAX))).unwrap();
    let error = catalog.memory_import(&t, &oversized, &quota()).await.unwrap_err();
    assert!(matches!(error, Error::LimitExceeded { what: Limit::MemoryValueBytes, .. }), "{error:?}");
    assert_eq!(all_items(catalog, &t, T0.plus_ms(10)).await, exported, "nothing stored");
}

pub async fn usage_tracks_every_change(catalog: &dyn Catalog) {
    let t = tenant("t1");
    let mut rng = StdRng::seed_from_u64(5);
    let mut model: BTreeMap<(String, String), u64> = BTreeMap::new();
    for step in 0..200 {
        let key = format!("k{}", rng.gen_range(0..20));
        let namespace = ["user/u", "user/u/x", "app/a"][rng.gen_range(0..3)];
        let slot = (namespace.to_owned(), key.clone());
        if rng.gen_bool(0.3) {
            let result = catalog.memory_delete(&t, &ns(namespace), &key, None, T0).await;
            assert_eq!(result.is_ok(), model.remove(&slot).is_some(), "step {step}");
        } else {
            let value = format!("\"{}\"", "v".repeat(rng.gen_range(0..30)));
            let item = store(catalog, &t, put(namespace, &key, &value), T0).await;
            model.insert(slot, item.bytes());
        }
        let usage = catalog.memory_usage(&t).await.unwrap();
        assert_eq!((usage.items, usage.bytes), (model.len() as u64, model.values().sum::<u64>()), "step {step}");
    }
}

/// berth's own bookkeeping (`berth/…`: a carried append's marker and scope index, bound
/// to the session) is not the tenant's: usage neither counts nor charges it, a put of
/// it is not held to the quota, a session's bound count leaves it out, removing the
/// session takes it along with usage unchanged, and the retention sweep leaves it alone.
/// (Until schema V12 / migration 5 every backend counted it: a carried write showed as
/// three items, and a delete's audit record counted two bound items where none were.)
pub async fn usage_counts_only_what_the_tenant_stored(catalog: &dyn Catalog) {
    let t = tenant("t1");
    let record = sample_record("t1", "s-carried", "alice", 5_000);
    catalog.insert(&record).await.unwrap();
    let bound = |namespace: &str, key: &str| MemoryPut {
        bound_to: Some(session_id("s-carried")),
        ..put(namespace, key, r#"{"from_seq":3}"#)
    };
    store(catalog, &t, put("user/alice", "mine", "1"), T0).await;
    let mine = get(catalog, &t, "user/alice", "mine", T0).await.unwrap().bytes();
    // At exactly the quota, berth's bookkeeping is still written.
    let full = MemoryQuota { items: 1, bytes: mine };
    for (namespace, key) in [("berth/carried", "s-carried"), ("berth/scopes/user/alice", "s-carried")] {
        catalog.memory_put(&t, &bound(namespace, key), T0, &full).await.expect("bookkeeping is not charged");
    }
    catalog.memory_apply(&t, &[bound("berth/carried", "s-carried")], T0, &full).await.expect("apply");
    let usage = catalog.memory_usage(&t).await.unwrap();
    assert_eq!((usage.items, usage.bytes), (1, mine), "only the tenant's own item");
    let refused = catalog.memory_put(&t, &put("user/alice", "more", "1"), T0, &full).await.unwrap_err();
    assert!(matches!(refused, Error::LimitExceeded { what: Limit::MemoryItems, actual: 2, .. }), "{refused:?}");
    assert_eq!(catalog.memory_bound_count(&t, &session_id("s-carried")).await.unwrap(), 0, "nothing of the tenant's");
    store(catalog, &t, MemoryPut { bound_to: Some(session_id("s-carried")), ..put("user/alice", "b", "2") }, T0).await;
    assert_eq!(catalog.memory_bound_count(&t, &session_id("s-carried")).await.unwrap(), 1);
    // Retention is of the tenant's memory: the old bookkeeping stays.
    let removed = catalog.memory_remove_stale(&t, T0.plus_ms(1), 10, sweep_audit("memory.retention")).await.unwrap();
    assert_eq!(removed, 2, "mine and b");
    assert!(get(catalog, &t, "berth/carried", "s-carried", T0).await.is_some());
    let usage = catalog.memory_usage(&t).await.unwrap();
    assert_eq!((usage.items, usage.bytes), (0, 0));
    store(catalog, &t, MemoryPut { bound_to: Some(session_id("s-carried")), ..put("user/alice", "c", "3") }, T0).await;
    // The session's removal takes its bookkeeping, and usage loses only its item.
    catalog.remove_audited(&record.key(), Revision(0), Vec::new()).await.unwrap();
    assert!(all_items(catalog, &t, T0).await.is_empty(), "everything bound went");
    let usage = catalog.memory_usage(&t).await.unwrap();
    assert_eq!((usage.items, usage.bytes), (0, 0));
    // Deleting bookkeeping (a finished marker) leaves usage alone too.
    catalog.memory_put(&t, &put("berth/carried", "s-other", "1"), T0, &full).await.unwrap();
    store(catalog, &t, put("user/alice", "d", "4"), T0).await;
    catalog.memory_delete(&t, &ns("berth/carried"), "s-other", None, T0).await.unwrap();
    assert_eq!(catalog.memory_usage(&t).await.unwrap().items, 1);
}

/// A caller's delete commits with its audit record; a refused one deletes nothing and
/// records nothing; a batch skips absent items and leaves one record (none when it
/// deleted nothing); each sweep's batch leaves one record per tenant, with the items
/// and bytes removed per scope.
pub async fn deletes_and_sweeps_are_audited(catalog: &dyn Catalog) {
    let (t, other) = (tenant("t1"), tenant("t2"));
    for key in ["a", "b", "c"] {
        store(catalog, &t, put("user/alice", key, "1"), T0).await;
    }
    store(catalog, &t, put("project/p", "a", "22"), T0).await;
    let refused = catalog
        .memory_delete_audited(&t, &[delete("user/alice", "a", Some(9))], false, T0, delete_audit(&t))
        .await
        .unwrap_err();
    assert!(matches!(refused, Error::RevisionConflict { expected: 9, actual: 1 }), "{refused:?}");
    let absent = catalog
        .memory_delete_audited(
            &t,
            &[delete("user/alice", "a", None), delete("user/alice", "x", None)],
            false,
            T0,
            delete_audit(&t),
        )
        .await
        .unwrap_err();
    assert_eq!(absent.code(), "not_found");
    assert!(get(catalog, &t, "user/alice", "a", T0).await.is_some(), "a refusal deletes nothing");
    assert!(audit_log(catalog, &t).await.is_empty(), "and records nothing");
    let (deleted, entry) = catalog
        .memory_delete_audited(&t, &[delete("user/alice", "a", Some(1))], false, T0, delete_audit(&t))
        .await
        .unwrap();
    assert_eq!(deleted.iter().map(|item| item.key.as_str()).collect::<Vec<_>>(), ["a"]);
    let entry = entry.expect("an audit record");
    assert_eq!(
        (entry.draft.action.as_str(), &entry.draft.details),
        ("memory.delete", &serde_json::json!({"keys": ["a"]}))
    );
    // A batch: absent items skipped, one record.
    let batch = [delete("user/alice", "b", None), delete("user/alice", "gone", None), delete("project/p", "a", None)];
    let (deleted, entry) = catalog.memory_delete_audited(&t, &batch, true, T0, delete_audit(&t)).await.unwrap();
    assert_eq!(deleted.len(), 2);
    assert_eq!(entry.expect("a record").draft.details, serde_json::json!({"keys": ["b", "a"]}));
    let (deleted, entry) = catalog.memory_delete_audited(&t, &batch, true, T0, delete_audit(&t)).await.unwrap();
    assert!(deleted.is_empty() && entry.is_none(), "nothing deleted, nothing recorded");
    assert_eq!(audit_log(catalog, &t).await.len(), 2, "one record per delete call");
    assert_eq!(catalog.memory_usage(&t).await.unwrap().items, 1, "c is left");
    // Sweeps: one record per tenant and batch, counted per scope.
    let short = |namespace: &str, key: &str| MemoryPut { ttl_ms: Some(1), ..put(namespace, key, "1") };
    for (tenant, namespace, key) in
        [(&t, "user/alice", "e1"), (&t, "user/alice/x", "e2"), (&t, "app/faq", "e3"), (&other, "user/bob", "e1")]
    {
        store(catalog, tenant, short(namespace, key), T0).await;
    }
    let removed = catalog.memory_remove_expired(T0.plus_ms(5), 100, sweep_audit("memory.expire")).await.unwrap();
    assert_eq!(removed, 4);
    let record = audit_log(catalog, &t).await.pop().expect("the sweep's record");
    assert_eq!((record.draft.action.as_str(), record.draft.actor.as_str()), ("memory.expire", "system:memory"));
    let e = |key: &str, namespace: &str| (namespace.len() + key.len() + 1) as u64;
    let expected = Removed {
        items: 3,
        bytes: e("e1", "user/alice") + e("e2", "user/alice/x") + e("e3", "app/faq"),
        scopes: BTreeMap::from([
            ("app/faq".to_owned(), ScopeRemoved { items: 1, bytes: e("e3", "app/faq") }),
            (
                "user/alice".to_owned(),
                ScopeRemoved { items: 2, bytes: e("e1", "user/alice") + e("e2", "user/alice/x") },
            ),
        ]),
    };
    assert_eq!(record.draft.details, serde_json::to_value(&expected).unwrap());
    let theirs = audit_log(catalog, &other).await;
    assert_eq!(theirs.len(), 1, "the other tenant's removal is in its own log");
    assert_eq!(theirs[0].draft.details["items"], 1);
    assert_eq!(catalog.memory_remove_expired(T0.plus_ms(5), 100, sweep_audit("memory.expire")).await.unwrap(), 0);
    assert_eq!(audit_log(catalog, &t).await.len(), 3, "an empty sweep records nothing");
    let removed = catalog.memory_remove_stale(&t, T0.plus_ms(1), 10, sweep_audit("memory.retention")).await.unwrap();
    assert_eq!(removed, 1);
    let record = audit_log(catalog, &t).await.pop().expect("the retention sweep's record");
    assert_eq!(record.draft.action, "memory.retention");
    assert_eq!(record.draft.details["scopes"]["user/alice"]["items"], 1);
    for tenant in [&t, &other] {
        let verdict =
            berth_catalog::audit::verify(&audit_log(catalog, tenant).await, catalog.audit_head(tenant).await.unwrap());
        assert_eq!(verdict.broken_at, None, "the chain holds");
    }
}

/// A tenant's own quota replaces the default a write is given, per limit, for puts,
/// carried applies and imports; another tenant keeps the default; it reads back, and
/// setting it again replaces it (unset limits: the default). Items over a lowered quota
/// stay.
pub async fn a_tenants_own_quota_replaces_the_default(catalog: &dyn Catalog) {
    let (t, other) = (tenant("t1"), tenant("t2"));
    assert_eq!(catalog.memory_quota(&t).await.unwrap(), TenantQuota::default());
    let own = TenantQuota { items: Some(2), bytes: None };
    catalog.set_memory_quota(&t, &own).await.unwrap();
    assert_eq!(catalog.memory_quota(&t).await.unwrap(), own);
    store(catalog, &t, put("user/u", "a", "1"), T0).await;
    store(catalog, &t, put("user/u", "b", "1"), T0).await;
    let refused = catalog.memory_put(&t, &put("user/u", "c", "1"), T0, &quota()).await.unwrap_err();
    assert!(matches!(refused, Error::LimitExceeded { what: Limit::MemoryItems, limit: 2, actual: 3 }), "{refused:?}");
    let applied = catalog.memory_apply(&t, &[put("user/u", "c", "1")], T0, &quota()).await;
    assert!(matches!(applied, Err(Error::LimitExceeded { what: Limit::MemoryItems, .. })), "{applied:?}");
    let mut imported = get(catalog, &t, "user/u", "a", T0).await.unwrap();
    imported.key = "imported".into();
    let refused = catalog.memory_import(&t, &imported, &quota()).await.unwrap_err();
    assert_eq!(refused.code(), "limit_exceeded");
    assert!(get(catalog, &t, "user/u", "c", T0).await.is_none(), "nothing stored");
    store(catalog, &other, put("user/u", "c", "1"), T0).await;
    store(catalog, &other, put("user/u", "d", "1"), T0).await;
    store(catalog, &other, put("user/u", "e", "1"), T0).await;
    // The bytes limit alone, the items back to the default.
    let used = catalog.memory_usage(&t).await.unwrap().bytes;
    let one = ("user/u".len() + "c".len() + "1".len()) as u64;
    catalog.set_memory_quota(&t, &TenantQuota { items: None, bytes: Some(used + one) }).await.unwrap();
    let error = catalog.memory_put(&t, &put("user/u", "c", "1234"), T0, &quota()).await.unwrap_err();
    assert!(matches!(error, Error::LimitExceeded { what: Limit::MemoryBytes, .. }), "{error:?}");
    store(catalog, &t, put("user/u", "c", "1"), T0).await;
    // Lowered below what is stored: the items stay, a new one is refused, a delete is not.
    catalog.set_memory_quota(&t, &TenantQuota { items: Some(1), bytes: None }).await.unwrap();
    assert_eq!(all_items(catalog, &t, T0).await.len(), 3);
    assert!(catalog.memory_put(&t, &put("user/u", "d", "1"), T0, &quota()).await.is_err());
    catalog.memory_delete(&t, &ns("user/u"), "a", None, T0).await.unwrap();
    assert_eq!(catalog.memory_quota(&other).await.unwrap(), TenantQuota::default());
    catalog.set_memory_quota(&t, &TenantQuota::default()).await.unwrap();
    store(catalog, &t, put("user/u", "d", "1"), T0).await;
    let usage = catalog.memory_usage(&t).await.unwrap();
    assert_eq!(usage.items, 3, "the quota's row keeps the usage exact");
}

/// Expands to one test per clause for a fixture implementing `CatalogFixture`.
#[macro_export]
macro_rules! memory_conformance {
    ($make:expr) => {
        $crate::memory_conformance!(@clauses $make;
            put_get_round_trip_is_exact,
            put_compare_and_set,
            concurrent_cas_has_one_winner,
            delete_with_and_without_revision,
            ttl_expiry_and_refresh,
            retention_removes_stale_items,
            quotas_refuse_with_nothing_stored,
            tenants_are_isolated,
            search_filters_match_the_reference,
            full_text_search_and_relevance,
            full_text_finds_words_in_every_script,
            searches_see_each_write_at_once,
            apply_applies_each_write_once,
            search_prefix_is_precise,
            namespaces_list_with_prefix_depth_and_cursor,
            forget_is_exact_and_audited,
            bound_items_go_with_their_session,
            import_is_exact_and_refuses_duplicates,
            usage_tracks_every_change,
            usage_counts_only_what_the_tenant_stored,
            deletes_and_sweeps_are_audited,
            a_tenants_own_quota_replaces_the_default,
        );
    };
    (@clauses $make:expr; $($clause:ident),* $(,)?) => {
        mod memory_conformance {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $clause() {
                    let fixture = $make;
                    let catalog = $crate::catalog_conformance::CatalogFixture::catalog(&fixture);
                    $crate::memory_conformance::$clause(&*catalog).await;
                }
            )*
        }
    };
}
