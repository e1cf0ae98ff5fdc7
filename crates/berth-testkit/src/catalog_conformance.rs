//! Generic Catalog conformance bodies (memory, SQLite, later PostgreSQL).
//!
//! One `pub async fn` per clause of the `Catalog` contract, taking `&dyn Catalog`;
//! `catalog_conformance!(make_fixture)` expands to one `#[tokio::test]` per clause for
//! a backend. Listing clauses compare every page against the reference semantics
//! (`SessionQuery::matches` plus the documented sort), so a backend must return
//! exactly what the memory catalog returns. Tamper clauses need a backend hook that
//! edits stored audit rows behind the catalog's back: the `AuditTamperer` trait.

use async_trait::async_trait;
use berth_catalog::audit::{self, AuditDraft, AuditEntry};
use berth_catalog::SessionSearch;
use berth_catalog::{Catalog, ListCursor, RetentionPolicy, RunRecord, RunStatus, SessionQuery, SessionRecord};
use berth_core::lifecycle::Status;
use berth_core::{Concurrency, ParentRef, ProjectId, Revision, RunId, Scope, SessionHeader, SessionId};
use berth_core::{SessionKey, SessionPolicy, TenantId, Timestamp, UserId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

/// A backend under test: the catalog plus its audit tamper hook. Dropping it may
/// delete the backend's storage (temp dirs), so tests keep it alive.
pub trait CatalogFixture: AuditTamperer {
    fn catalog(&self) -> Arc<dyn Catalog>;
}

/// One way of damaging a tenant's stored audit log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuditTamper {
    /// Change a field (the action) of the entry stored at this position.
    ChangeField { seq: u64 },
    /// Delete the entry at this position (the others keep theirs).
    DeleteEntry { seq: u64 },
    /// Delete the last entry.
    DeleteLast,
    /// Swap the entries stored at two positions.
    Swap { first: u64, second: u64 },
}

/// A backend's hook to edit its stored audit rows, bypassing the catalog.
#[async_trait]
pub trait AuditTamperer: Send + Sync {
    async fn tamper(&self, tenant: &TenantId, tamper: AuditTamper);
}

// ---------------------------------------------------------------------------------
// Builders and the reference model.

pub fn tenant(text: &str) -> TenantId {
    TenantId::parse(text).expect("valid tenant id")
}

pub fn session_id(text: &str) -> SessionId {
    SessionId::parse(text).expect("valid session id")
}

fn user(text: &str) -> UserId {
    UserId::parse(text).expect("valid user id")
}

/// A plain, non-blank, active record at revision 0.
pub fn sample_record(tenant_id: &str, id: &str, user_id: &str, last_activity_ms: u64) -> SessionRecord {
    let created_at = Timestamp(last_activity_ms.saturating_sub(500));
    let scope = Scope { tenant: tenant(tenant_id), user: user(user_id), project: None };
    SessionRecord {
        header: SessionHeader::new(session_id(id), scope, created_at),
        status: Status::Active,
        lease_until: Timestamp(last_activity_ms + 60_000),
        last_activity: Timestamp(last_activity_ms),
        revision: Revision(0),
        title: None,
        labels: BTreeSet::new(),
        event_count: 0,
        blank: false,
        runs: Vec::new(),
        status_changed_at: created_at,
        resume_mark: Default::default(),
        repair: Default::default(),
        creator: None,
    }
}

/// What a catalog must return for `query` over `records`: the reference semantics.
pub fn reference(records: &[SessionRecord], query: &SessionQuery) -> Vec<SessionRecord> {
    let mut items: Vec<&SessionRecord> = records.iter().filter(|record| query.matches(record)).collect();
    items.sort_by(|a, b| {
        (b.last_activity, &b.header.id)
            .cmp(&(a.last_activity, &a.header.id))
            .then_with(|| a.header.scope.tenant.cmp(&b.header.scope.tenant))
    });
    items.into_iter().take(query.limit).cloned().collect()
}

/// Follows the cursor page by page until a short page; returns every item seen.
pub async fn collect_pages(catalog: &dyn Catalog, query: &SessionQuery, page_size: usize) -> Vec<SessionRecord> {
    let mut query = SessionQuery { limit: page_size, ..query.clone() };
    let mut seen = Vec::new();
    for _ in 0..10_000 {
        let page = catalog.list(&query).await.expect("list");
        assert!(page.len() <= page_size, "a page of {} exceeds the limit {page_size}", page.len());
        let Some(last) = page.last() else { return seen };
        query.cursor = Some(ListCursor::of(last));
        let short = page.len() < page_size;
        seen.extend(page);
        if short {
            return seen;
        }
    }
    panic!("pagination did not terminate for {query:?}");
}

fn keys(records: &[SessionRecord]) -> Vec<String> {
    records.iter().map(|record| record.key().to_string()).collect()
}

/// Asserts that `query` returns exactly the reference, whole and page by page.
pub async fn assert_lists_like_reference(catalog: &dyn Catalog, records: &[SessionRecord], query: &SessionQuery) {
    let expected = reference(records, query);
    let actual = catalog.list(query).await.expect("list");
    assert_eq!(keys(&actual), keys(&expected), "one page of {query:?}");
    assert_eq!(actual, expected, "records of {query:?}");
    for page_size in [1, 3, 50] {
        let mut unbounded = SessionQuery { limit: usize::MAX, ..query.clone() };
        let expected_all = if query.tenant.is_some() {
            reference(records, &unbounded)
        } else {
            // Across tenants equal (last_activity, id) pairs share a cursor position;
            // follow the reference's own pages.
            let mut pages = Vec::new();
            loop {
                unbounded.limit = page_size;
                let page = reference(records, &unbounded);
                let Some(last) = page.last() else { break };
                unbounded.cursor = Some(ListCursor::of(last));
                let short = page.len() < page_size;
                pages.extend(page);
                if short {
                    break;
                }
            }
            pages
        };
        let actual_all = collect_pages(catalog, query, page_size).await;
        assert_eq!(keys(&actual_all), keys(&expected_all), "pages of {page_size} of {query:?}");
    }
}

/// A deterministic data set with ties in `last_activity`, the same ids in two tenants,
/// every status, labels, projects, forks and blank sessions.
pub fn listing_data_set(seed: u64) -> Vec<SessionRecord> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut records = Vec::new();
    for tenant_id in ["t-one", "t-two"] {
        for index in 0..90 {
            let user_id = ["alice", "bob", "carol"][rng.gen_range(0..3)];
            let last_activity_ms = 10_000 + 100 * rng.gen_range(0..25);
            let mut record = sample_record(tenant_id, &format!("s-{index:03}"), user_id, last_activity_ms);
            record.header.scope.project = [None, Some("p1"), Some("p2")][rng.gen_range(0..3)]
                .map(|project| ProjectId::parse(project).expect("valid project"));
            if rng.gen_bool(0.3) {
                let parent = session_id(["s-000", "s-001"][rng.gen_range(0..2)]);
                record.header.parent = Some(ParentRef { session: parent, cut_seq: rng.gen_range(0..9) });
            }
            record.status = Status::ALL[rng.gen_range(0..Status::ALL.len())];
            for label in ["red", "green", "blue", "with space"] {
                if rng.gen_bool(0.35) {
                    record.labels.insert(label.to_owned());
                }
            }
            record.blank = rng.gen_bool(0.25);
            record.lease_until = Timestamp(9_000 + 200 * rng.gen_range(0..20));
            record.header.created_at = Timestamp(last_activity_ms - 100 * rng.gen_range(0..10));
            record.status_changed_at = Timestamp(8_000 + 150 * rng.gen_range(0..20));
            records.push(record);
        }
    }
    records
}

async fn insert_all(catalog: &dyn Catalog, records: &[SessionRecord]) {
    for record in records {
        catalog.insert(record).await.expect("insert");
    }
}

fn draft(tenant_id: &TenantId, number: u64) -> AuditDraft {
    AuditDraft {
        tenant: tenant_id.clone(),
        time: Timestamp(1_000 + number),
        actor: format!("user:u{}", number % 3),
        action: ["create", "attach", "detach", "close"][(number % 4) as usize].to_owned(),
        session: Some(session_id(&format!("s-{number}"))),
        revision: Some(Revision(number)),
        outcome: "ok".to_owned(),
        details: serde_json::json!({"number": number, "nested": {"list": [1, 2.5, "x"], "none": null}}),
    }
}

async fn append_drafts(catalog: &dyn Catalog, tenant_id: &TenantId, count: u64) -> Vec<AuditEntry> {
    let mut entries = Vec::new();
    for number in 0..count {
        entries.push(catalog.append_audit(draft(tenant_id, number)).await.expect("append audit"));
    }
    entries
}

async fn whole_audit(catalog: &dyn Catalog, tenant_id: &TenantId) -> Vec<AuditEntry> {
    catalog.read_audit(tenant_id, 0, usize::MAX).await.expect("read audit")
}

// ---------------------------------------------------------------------------------
// Records: insert, get, compare-and-set, remove.

/// Every field of a record survives insert → get, including labels, runs, parent,
/// policy and extreme timestamps.
pub async fn insert_get_round_trip(catalog: &dyn Catalog) {
    let mut record = sample_record("t-round", "s.full_~-1", "alice", 5_000);
    record.header.scope.project = Some(ProjectId::parse("proj").expect("project"));
    record.header.parent = Some(ParentRef { session: session_id("origin"), cut_seq: 7 });
    record.header.origin = Some("subagent".to_owned());
    record.header.delegation_depth = 2;
    record.header.policy = SessionPolicy {
        concurrency: Concurrency::Parallel { runs_max: 3 },
        activity_ttl_ms: 1_234,
        run_lease_ttl_ms: 99,
    };
    record.status = Status::Idle;
    record.lease_until = Timestamp(u64::MAX);
    record.revision = Revision(41);
    record.title = Some("Plan the \"migration\" — ✓".to_owned());
    record.labels = ["b", "a label", "ünïcode"].map(str::to_owned).into_iter().collect();
    record.event_count = 42;
    record.status_changed_at = Timestamp(4_321);
    record.runs = vec![
        RunRecord {
            run_id: RunId::parse("run-1").expect("run"),
            attached_by: user("alice"),
            attached_at: Timestamp(4_000),
            lease_until: Timestamp(64_000),
            status: RunStatus::Attached,
        },
        RunRecord {
            run_id: RunId::parse("run-2").expect("run"),
            attached_by: user("svc"),
            attached_at: Timestamp(4_100),
            lease_until: Timestamp(4_200),
            status: RunStatus::Abandoned,
        },
    ];
    catalog.insert(&record).await.expect("insert");
    assert_eq!(catalog.get(&record.key()).await.expect("get"), Some(record.clone()));

    let mut blank = sample_record("t-round", "blank", "bob", 1);
    blank.blank = true;
    catalog.insert(&blank).await.expect("insert blank");
    assert_eq!(catalog.get(&blank.key()).await.expect("get"), Some(blank));
}

pub async fn get_missing_is_none(catalog: &dyn Catalog) {
    let key = SessionKey::new(tenant("t-x"), session_id("nope"));
    assert_eq!(catalog.get(&key).await.expect("get"), None);
}

/// A second insert of the same key is `AlreadyExists` and changes nothing; the same
/// id in another tenant is a different session.
pub async fn duplicate_insert_is_already_exists(catalog: &dyn Catalog) {
    let first = sample_record("t-dup", "s1", "alice", 100);
    catalog.insert(&first).await.expect("insert");
    let mut second = sample_record("t-dup", "s1", "bob", 200);
    second.labels.insert("other".into());
    let error = catalog.insert(&second).await.expect_err("duplicate insert");
    assert_eq!(error.code(), "already_exists", "{error}");
    assert!(matches!(&error, berth_core::Error::AlreadyExists { id, .. } if id == "s1"), "{error:?}");
    assert_eq!(catalog.get(&first.key()).await.expect("get"), Some(first.clone()));
    let mut label_query = SessionQuery::tenant(tenant("t-dup"));
    label_query.label = Some("other".into());
    assert!(catalog.list(&label_query).await.expect("list").is_empty());

    let elsewhere = sample_record("t-dup-2", "s1", "carol", 300);
    catalog.insert(&elsewhere).await.expect("same id in another tenant");
    assert_eq!(catalog.get(&first.key()).await.expect("get"), Some(first));
    assert_eq!(catalog.get(&elsewhere.key()).await.expect("get"), Some(elsewhere));
}

/// An update carrying `expected + 1` with the stored revision `expected` succeeds and
/// stores the whole new record.
pub async fn update_cas_bumps_revision(catalog: &dyn Catalog) {
    let mut record = sample_record("t-cas", "s1", "alice", 100);
    catalog.insert(&record).await.expect("insert");
    for round in 0..5u64 {
        let expected = record.revision;
        record.revision = Revision(expected.0 + 1);
        record.last_activity = Timestamp(200 + round);
        record.title = Some(format!("round {round}"));
        record.labels = [format!("round-{round}")].into_iter().collect();
        catalog.update(&record, expected).await.expect("update");
        assert_eq!(catalog.get(&record.key()).await.expect("get"), Some(record.clone()));
    }
    assert_eq!(record.revision, Revision(5));
}

/// A stale `expected` is `RevisionConflict {expected, actual}` with the right numbers,
/// and nothing changes.
pub async fn update_stale_revision_conflicts(catalog: &dyn Catalog) {
    let original = sample_record("t-cas", "s2", "alice", 100);
    catalog.insert(&original).await.expect("insert");
    let mut winner = original.clone();
    winner.revision = Revision(1);
    winner.title = Some("winner".into());
    catalog.update(&winner, Revision(0)).await.expect("first update");

    let mut loser = original.clone();
    loser.revision = Revision(1);
    loser.title = Some("loser".into());
    loser.labels.insert("loser".into());
    let error = catalog.update(&loser, Revision(0)).await.expect_err("stale update");
    assert_eq!(error, berth_core::Error::RevisionConflict { expected: 0, actual: 1 });
    loser.revision = Revision(6);
    let error = catalog.update(&loser, Revision(5)).await.expect_err("future update");
    assert_eq!(error, berth_core::Error::RevisionConflict { expected: 5, actual: 1 });

    assert_eq!(catalog.get(&winner.key()).await.expect("get"), Some(winner));
    let mut label_query = SessionQuery::tenant(tenant("t-cas"));
    label_query.label = Some("loser".into());
    assert!(catalog.list(&label_query).await.expect("list").is_empty());
}

/// An update must carry `expected + 1`; anything else is `Invalid` and changes nothing.
pub async fn update_must_carry_next_revision(catalog: &dyn Catalog) {
    let original = sample_record("t-cas", "s3", "alice", 100);
    catalog.insert(&original).await.expect("insert");
    for wrong in [0, 2, 7] {
        let mut record = original.clone();
        record.revision = Revision(wrong);
        record.title = Some("wrong".into());
        let error = catalog.update(&record, Revision(0)).await.expect_err("wrong next revision");
        assert_eq!(error.code(), "invalid", "{error}");
    }
    assert_eq!(catalog.get(&original.key()).await.expect("get"), Some(original));
}

pub async fn update_missing_is_not_found(catalog: &dyn Catalog) {
    let mut record = sample_record("t-cas", "ghost", "alice", 100);
    record.revision = Revision(1);
    let error = catalog.update(&record, Revision(0)).await.expect_err("update of a missing session");
    assert_eq!(error.code(), "not_found", "{error}");
    assert_eq!(catalog.get(&record.key()).await.expect("get"), None);
}

/// Remove is a compare-and-set too; the record, its labels and its listing entries go.
pub async fn remove_with_cas(catalog: &dyn Catalog) {
    let mut record = sample_record("t-rm", "s1", "alice", 100);
    record.labels.insert("red".into());
    catalog.insert(&record).await.expect("insert");
    let neighbour = sample_record("t-rm", "s2", "alice", 90);
    catalog.insert(&neighbour).await.expect("insert");

    let error = catalog.remove(&record.key(), Revision(3)).await.expect_err("stale remove");
    assert_eq!(error, berth_core::Error::RevisionConflict { expected: 3, actual: 0 });
    assert_eq!(catalog.get(&record.key()).await.expect("get"), Some(record.clone()));

    catalog.remove(&record.key(), Revision(0)).await.expect("remove");
    assert_eq!(catalog.get(&record.key()).await.expect("get"), None);
    let listed = catalog.list(&SessionQuery::tenant(tenant("t-rm"))).await.expect("list");
    assert_eq!(listed, vec![neighbour.clone()]);
    let mut label_query = SessionQuery::tenant(tenant("t-rm"));
    label_query.label = Some("red".into());
    assert!(catalog.list(&label_query).await.expect("list").is_empty());

    let error = catalog.remove(&record.key(), Revision(0)).await.expect_err("second remove");
    assert_eq!(error.code(), "not_found", "{error}");
    catalog.insert(&record).await.expect("the id is free again");
    assert_eq!(catalog.list(&label_query).await.expect("list"), vec![record]);
}

// ---------------------------------------------------------------------------------
// The idempotency index (R-S14).

fn keyed_batch(key: &str, first_seq: u64, events: u64, digest: &str) -> berth_core::KeyedBatch {
    let key = berth_core::IdempotencyKey::parse(key).expect("valid key");
    berth_core::KeyedBatch { key, first_seq, events, digest: digest.into() }
}

/// The index of a session: absent until first written; a key keeps the batch it was
/// first indexed with; `indexed_until` only rises; it belongs to one session (another
/// session, or another tenant's session of the same id, sees none of it); a session
/// without a record cannot get one; and it goes with the record (`remove` and
/// `remove_audited`), so a session re-created under the same id starts empty. Its keys
/// are listed whole up to a bound (`None` beyond it).
pub async fn idempotency_index_is_per_session_monotonic_and_removed_with_it(catalog: &dyn Catalog) {
    let record = sample_record("t-idem", "s1", "alice", 100);
    let twin = sample_record("t-idem-2", "s1", "alice", 100);
    let (key, twin_key) = (record.key(), twin.key());
    catalog.insert(&record).await.expect("insert");
    catalog.insert(&twin).await.expect("insert");
    let k = berth_core::IdempotencyKey::parse("k").expect("valid key");
    assert_eq!(catalog.idempotency_indexed_until(&key).await.expect("read"), None);
    assert_eq!(catalog.idempotency_batch(&key, &k).await.expect("read"), None);

    let first = keyed_batch("k", 2, 3, "d1");
    catalog.index_idempotency(&key, &[first.clone(), keyed_batch("j", 5, 1, "d2")], 6).await.expect("index");
    catalog.index_idempotency(&key, &[keyed_batch("k", 9, 1, "other")], 4).await.expect("index again");
    assert_eq!(catalog.idempotency_batch(&key, &k).await.expect("read"), Some(first), "a key keeps its first batch");
    assert_eq!(catalog.idempotency_indexed_until(&key).await.expect("read"), Some(6), "never lowered");
    catalog.index_idempotency(&key, &[], 10).await.expect("raise only");
    assert_eq!(catalog.idempotency_indexed_until(&key).await.expect("read"), Some(10));
    assert_eq!(catalog.idempotency_batch(&twin_key, &k).await.expect("read"), None, "per session and tenant");
    assert_eq!(catalog.idempotency_indexed_until(&twin_key).await.expect("read"), None);
    let mut keys = catalog.idempotency_keys(&key, 2).await.expect("keys").expect("two keys, at most two asked");
    keys.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    assert_eq!(keys.iter().map(|k| k.as_str()).collect::<Vec<_>>(), ["j", "k"], "every indexed key, once");
    assert_eq!(catalog.idempotency_keys(&key, 1).await.expect("keys"), None, "more than asked for");
    assert_eq!(catalog.idempotency_keys(&twin_key, 5).await.expect("keys"), Some(Vec::new()), "per session and tenant");

    let ghost = sample_record("t-idem", "ghost", "alice", 100).key();
    let error = catalog.index_idempotency(&ghost, &[keyed_batch("k", 0, 1, "d")], 1).await.expect_err("no record");
    assert_eq!(error.code(), "not_found", "{error}");
    assert_eq!(catalog.idempotency_indexed_until(&ghost).await.expect("read"), None);

    catalog.remove(&key, Revision(0)).await.expect("remove");
    catalog.insert(&record).await.expect("re-create");
    assert_eq!(catalog.idempotency_indexed_until(&key).await.expect("read"), None, "removed with the record");
    assert_eq!(catalog.idempotency_batch(&key, &k).await.expect("read"), None);
    assert_eq!(
        catalog.idempotency_keys(&key, 5).await.expect("keys"),
        Some(Vec::new()),
        "keys removed with the record"
    );
    catalog.index_idempotency(&twin_key, &[keyed_batch("k", 0, 1, "d")], 1).await.expect("index");
    catalog.remove_audited(&twin_key, Revision(0), Vec::new()).await.expect("remove audited");
    catalog.insert(&twin).await.expect("re-create");
    assert_eq!(catalog.idempotency_batch(&twin_key, &k).await.expect("read"), None, "removed with remove_audited");
}

// ---------------------------------------------------------------------------------
// Listing.

/// Newest activity first; equal `last_activity` broken by id, descending.
pub async fn list_sort_order_and_ties(catalog: &dyn Catalog) {
    let specs = [("a", 300), ("b", 100), ("c", 300), ("d", 200), ("e", 300), ("f", 100)];
    for (id, last_activity_ms) in specs {
        catalog.insert(&sample_record("t-sort", id, "alice", last_activity_ms)).await.expect("insert");
    }
    let listed = catalog.list(&SessionQuery::tenant(tenant("t-sort"))).await.expect("list");
    let ids: Vec<&str> = listed.iter().map(|record| record.header.id.as_str()).collect();
    assert_eq!(ids, ["e", "c", "a", "d", "f", "b"]);

    let mut query = SessionQuery::tenant(tenant("t-sort"));
    query.limit = 2;
    query.cursor = Some(ListCursor { last_activity: Timestamp(300), id: session_id("c") });
    let ids: Vec<String> =
        catalog.list(&query).await.expect("list").iter().map(|record| record.header.id.to_string()).collect();
    assert_eq!(ids, ["a", "d"]);
}

fn base_query(tenant_id: &str) -> SessionQuery {
    SessionQuery { limit: 1_000, ..SessionQuery::tenant(tenant(tenant_id)) }
}

/// Every filter of `SessionQuery` alone returns exactly the reference result.
pub async fn list_each_filter_alone(catalog: &dyn Catalog) {
    let records = listing_data_set(1);
    insert_all(catalog, &records).await;
    let mid = reference(&records, &base_query("t-one"))[20].clone();
    let time = Timestamp(11_200);
    let mut queries: Vec<SessionQuery> = vec![base_query("t-one"), base_query("t-two")];
    let mut with = |edit: &dyn Fn(&mut SessionQuery)| {
        let mut query = base_query("t-one");
        edit(&mut query);
        queries.push(query);
    };
    with(&|q| q.user = Some(user("alice")));
    with(&|q| q.project = Some(ProjectId::parse("p1").expect("project")));
    with(&|q| q.statuses = vec![Status::Active]);
    with(&|q| q.statuses = vec![Status::Idle, Status::Active]);
    with(&|q| q.statuses = vec![Status::Closed, Status::Expired, Status::Closed]);
    with(&|q| q.label = Some("red".into()));
    with(&|q| q.label = Some("with space".into()));
    with(&|q| q.label = Some("absent".into()));
    with(&|q| q.parent = Some(session_id("s-000")));
    with(&|q| q.active_since = Some(time));
    with(&|q| q.active_before = Some(time));
    with(&|q| q.lease_before = Some(Timestamp(11_000)));
    with(&|q| q.created_before = Some(time));
    with(&|q| q.status_changed_before = Some(Timestamp(10_000)));
    with(&|q| q.include_blank = true);
    with(&|q| q.cursor = Some(ListCursor::of(&mid)));
    with(&|q| q.limit = 7);
    for query in &queries {
        if query.label.as_deref() != Some("absent") {
            assert!(!reference(&records, query).is_empty(), "the data set exercises {query:?}");
        }
        assert_lists_like_reference(catalog, &records, query).await;
    }
}

/// Filters combined (the shapes the service uses, then random combinations) return
/// exactly the reference result, whole and page by page.
pub async fn list_filters_combined(catalog: &dyn Catalog) {
    let records = listing_data_set(2);
    insert_all(catalog, &records).await;
    let mut shapes = Vec::new();
    let mut status_label = base_query("t-one");
    status_label.statuses = vec![Status::Active];
    status_label.label = Some("red".into());
    shapes.push(status_label.clone());
    status_label.user = Some(user("bob"));
    shapes.push(status_label);
    let mut scope = base_query("t-two");
    scope.user = Some(user("carol"));
    scope.project = Some(ProjectId::parse("p2").expect("project"));
    shapes.push(scope.clone());
    scope.statuses = vec![Status::Active, Status::Idle];
    scope.include_blank = true;
    shapes.push(scope);
    let mut sweep = base_query("t-one");
    sweep.statuses = vec![Status::Active, Status::Idle, Status::Creating];
    sweep.lease_before = Some(Timestamp(11_000));
    sweep.include_blank = true;
    shapes.push(sweep);
    for query in &shapes {
        assert!(!reference(&records, query).is_empty(), "the data set exercises {query:?}");
        assert_lists_like_reference(catalog, &records, query).await;
    }
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..150 {
        let query = random_query(&mut rng, &records);
        assert_lists_like_reference(catalog, &records, &query).await;
    }
}

fn random_query(rng: &mut StdRng, records: &[SessionRecord]) -> SessionQuery {
    let mut query = base_query(["t-one", "t-two"][rng.gen_range(0..2)]);
    if rng.gen_bool(0.1) {
        query.tenant = None;
    }
    let pick = |rng: &mut StdRng, p: f64| rng.gen_bool(p);
    if pick(rng, 0.3) {
        query.user = Some(user(["alice", "bob", "carol"][rng.gen_range(0..3)]));
    }
    if pick(rng, 0.2) {
        query.project = Some(ProjectId::parse(["p1", "p2"][rng.gen_range(0..2)]).expect("project"));
    }
    if pick(rng, 0.4) {
        query.statuses = (0..rng.gen_range(1..4)).map(|_| Status::ALL[rng.gen_range(0..5)]).collect();
    }
    if pick(rng, 0.4) {
        query.label = Some(["red", "green", "blue", "with space"][rng.gen_range(0..4)].to_owned());
    }
    if pick(rng, 0.15) {
        query.parent = Some(session_id(["s-000", "s-001"][rng.gen_range(0..2)]));
    }
    let time = |rng: &mut StdRng| Timestamp(8_000 + 100 * rng.gen_range(0..45));
    for (p, field) in [
        (0.2, &mut query.active_since),
        (0.2, &mut query.active_before),
        (0.15, &mut query.lease_before),
        (0.15, &mut query.created_before),
        (0.15, &mut query.status_changed_before),
    ] {
        if pick(rng, p) {
            *field = Some(time(rng));
        }
    }
    query.include_blank = pick(rng, 0.5);
    if pick(rng, 0.3) {
        query.cursor = Some(ListCursor::of(&records[rng.gen_range(0..records.len())]));
    }
    query.limit = [1, 2, 5, 50, 1_000][rng.gen_range(0..5)];
    query
}

/// Blank sessions are hidden unless `include_blank`, under every driving filter.
pub async fn list_hides_blank_unless_asked(catalog: &dyn Catalog) {
    let mut records = Vec::new();
    for (index, blank) in [false, true, true, false, true].into_iter().enumerate() {
        let mut record = sample_record("t-blank", &format!("s{index}"), "alice", 100 + index as u64);
        record.blank = blank;
        record.labels.insert("red".into());
        records.push(record);
    }
    insert_all(catalog, &records).await;
    let visible = |include_blank: bool| -> Vec<String> {
        records
            .iter()
            .rev()
            .filter(|record| include_blank || !record.blank)
            .map(|record| record.header.id.to_string())
            .collect()
    };
    let mut queries = vec![base_query("t-blank")];
    queries.push(SessionQuery { user: Some(user("alice")), ..base_query("t-blank") });
    queries.push(SessionQuery { statuses: vec![Status::Active], ..base_query("t-blank") });
    queries.push(SessionQuery { label: Some("red".into()), ..base_query("t-blank") });
    let label_status = SessionQuery { statuses: vec![Status::Active], ..queries[3].clone() };
    queries.push(label_status);
    for query in queries {
        for include_blank in [false, true] {
            let query = SessionQuery { include_blank, ..query.clone() };
            let listed = catalog.list(&query).await.expect("list");
            let ids: Vec<String> = listed.iter().map(|record| record.header.id.to_string()).collect();
            assert_eq!(ids, visible(include_blank), "{query:?}");
        }
    }
}

/// Following the cursor visits every matching record exactly once, in order, with
/// many ties in `last_activity` (broken by id).
pub async fn list_cursor_pagination_visits_each_once(catalog: &dyn Catalog) {
    let mut records = Vec::new();
    for index in 0..137u64 {
        let mut record = sample_record("t-page", &format!("s-{:03}", (index * 37) % 137), "alice", 1_000 + index % 4);
        record.labels.insert(if index % 3 == 0 { "red" } else { "blue" }.into());
        record.status = [Status::Active, Status::Idle][(index % 2) as usize];
        records.push(record);
    }
    insert_all(catalog, &records).await;
    let label_status =
        SessionQuery { statuses: vec![Status::Idle], label: Some("blue".into()), ..base_query("t-page") };
    for query in [base_query("t-page"), label_status] {
        let expected = reference(&records, &query);
        for page_size in [1, 2, 10, 50, 136, 137, 500] {
            let seen = collect_pages(catalog, &query, page_size).await;
            assert_eq!(keys(&seen), keys(&expected), "page size {page_size}");
            let distinct: HashSet<String> = keys(&seen).into_iter().collect();
            assert_eq!(distinct.len(), seen.len(), "a record was visited twice");
        }
    }
}

/// A listing never returns another tenant's rows, even with the same session ids,
/// labels and users; updates and removals stay inside their tenant.
pub async fn list_tenant_isolation(catalog: &dyn Catalog) {
    let mut mine = sample_record("t-mine", "shared-id", "alice", 100);
    mine.labels.insert("common".into());
    let mut theirs = sample_record("t-theirs", "shared-id", "alice", 200);
    theirs.labels = ["common", "theirs-only"].map(str::to_owned).into_iter().collect();
    insert_all(catalog, &[mine.clone(), theirs.clone()]).await;

    let shapes = [
        base_query("t-mine"),
        SessionQuery { label: Some("common".into()), ..base_query("t-mine") },
        SessionQuery { user: Some(user("alice")), ..base_query("t-mine") },
        SessionQuery { statuses: vec![Status::Active], ..base_query("t-mine") },
        SessionQuery { statuses: vec![Status::Active], label: Some("common".into()), ..base_query("t-mine") },
    ];
    for query in &shapes {
        assert_eq!(catalog.list(query).await.expect("list"), vec![mine.clone()], "{query:?}");
    }
    let only_theirs = SessionQuery { label: Some("theirs-only".into()), ..base_query("t-mine") };
    assert!(catalog.list(&only_theirs).await.expect("list").is_empty());

    let mut updated = mine.clone();
    updated.revision = Revision(1);
    updated.labels.clear();
    catalog.update(&updated, Revision(0)).await.expect("update");
    assert_eq!(catalog.get(&theirs.key()).await.expect("get"), Some(theirs.clone()));
    let common_theirs = SessionQuery { label: Some("common".into()), ..base_query("t-theirs") };
    assert_eq!(catalog.list(&common_theirs).await.expect("list"), vec![theirs.clone()]);
    catalog.remove(&updated.key(), Revision(1)).await.expect("remove");
    assert_eq!(catalog.get(&theirs.key()).await.expect("get"), Some(theirs.clone()));
    assert_eq!(catalog.list(&base_query("t-theirs")).await.expect("list"), vec![theirs]);
}

/// Listings follow updates of every indexed field: status, labels, activity, blank.
pub async fn list_follows_updates(catalog: &dyn Catalog) {
    let mut record = sample_record("t-follow", "s1", "alice", 100);
    record.labels.insert("red".into());
    let other = sample_record("t-follow", "s2", "alice", 150);
    insert_all(catalog, &[record.clone(), other.clone()]).await;
    let red = SessionQuery { label: Some("red".into()), ..base_query("t-follow") };
    let blue_idle = SessionQuery { label: Some("blue".into()), statuses: vec![Status::Idle], ..base_query("t-follow") };
    assert_eq!(catalog.list(&red).await.expect("list"), vec![record.clone()]);

    record.revision = Revision(1);
    record.labels = ["blue".to_owned()].into_iter().collect();
    record.status = Status::Idle;
    record.last_activity = Timestamp(200);
    catalog.update(&record, Revision(0)).await.expect("update");
    assert!(catalog.list(&red).await.expect("list").is_empty());
    assert_eq!(catalog.list(&blue_idle).await.expect("list"), vec![record.clone()]);
    let all = catalog.list(&base_query("t-follow")).await.expect("list");
    assert_eq!(all, vec![record.clone(), other.clone()], "the newer activity sorts first");

    record.revision = Revision(2);
    record.blank = true;
    catalog.update(&record, Revision(1)).await.expect("update");
    assert!(catalog.list(&blue_idle).await.expect("list").is_empty());
    let with_blank = SessionQuery { include_blank: true, ..blue_idle };
    assert_eq!(catalog.list(&with_blank).await.expect("list"), vec![record]);
}

fn search(text: &str) -> Option<SessionSearch> {
    Some(SessionSearch::parse(text).expect("valid search"))
}

/// The text search (`SessionQuery::search`): case-insensitive (Unicode lowercase, NFC)
/// substrings of the id, the title or a label; `%`, `_` and `\` match literally; it
/// follows title and label updates; combined with every other filter it returns
/// exactly the reference, and its keyset pages never skip or repeat a match.
pub async fn list_text_search(catalog: &dyn Catalog) {
    let titled = |id: &str, at: u64, title: Option<&str>, labels: &[&str]| {
        let mut record = sample_record("t-find", id, "alice", at);
        record.title = title.map(str::to_owned);
        record.labels = labels.iter().map(|label| label.to_string()).collect();
        record
    };
    let mut records = vec![
        titled("s-pct", 100, Some("Refund 50% off"), &[]),
        titled("s-nopct", 101, Some("refund 500 off"), &[]),
        titled("s-under", 102, None, &["a_b"]),
        titled("s-nounder", 103, None, &["axb"]),
        titled("s-slash", 104, Some("path c:\\x"), &[]),
        titled("s-noslash", 105, Some("path c:x"), &[]),
        titled("s-cafe", 106, Some("CAFE\u{301} Crème"), &["Support"]),
        titled("s-idmatch-XY", 107, None, &[]),
        titled("s-split", 108, Some("ab"), &["cd"]),
    ];
    let mut theirs = records[0].clone();
    theirs.header.scope.tenant = tenant("t-elsewhere");
    records.push(theirs);
    insert_all(catalog, &records).await;
    let found = |text: &str| {
        let query = SessionQuery { search: search(text), ..base_query("t-find") };
        async move {
            let page = catalog.list(&query).await.expect("list");
            page.iter().map(|record| record.header.id.to_string()).collect::<Vec<_>>()
        }
    };
    assert_eq!(found("50%").await, ["s-pct"], "% is literal");
    assert_eq!(found("a_b").await, ["s-under"], "_ is literal");
    assert_eq!(found("c:\\x").await, ["s-slash"], "\\ is literal");
    assert_eq!(found("REFUND").await, ["s-nopct", "s-pct"], "case is ignored");
    assert_eq!(found("café").await, ["s-cafe"], "Unicode case and NFC");
    assert_eq!(found("crÈme").await, ["s-cafe"]);
    assert_eq!(found("supp").await, ["s-cafe"], "labels");
    assert_eq!(found("idmatch-xy").await, ["s-idmatch-XY"], "ids");
    assert!(found("bc").await.is_empty(), "a match never spans two fields");
    assert!(found("%").await.len() == 1 && found("_").await.len() == 1, "wildcards alone are literal too");
    for record in &records {
        for query in [
            SessionQuery { search: search("refund"), ..base_query("t-find") },
            SessionQuery { search: search("s-"), ..base_query("t-find") },
        ] {
            assert_eq!(query.matches(record), catalog.list(&query).await.expect("list").contains(record));
        }
    }

    // Title and label updates move a session in and out of a search.
    let mut record = records[7].clone();
    record.revision = Revision(1);
    record.title = Some("Now Titled".into());
    record.labels.insert("Green".into());
    catalog.update(&record, Revision(0)).await.expect("update");
    assert_eq!(found("now titled").await, ["s-idmatch-XY"]);
    assert_eq!(found("green").await, ["s-idmatch-XY"]);
    record.revision = Revision(2);
    record.title = None;
    record.labels.clear();
    catalog.update_activity(&record, Revision(1)).await.expect("update");
    assert!(found("titled").await.is_empty() && found("green").await.is_empty());

    // With the other filters, whole and page by page (pages of 1, 3 and 50).
    let mut records = listing_data_set(4);
    let words = ["Alpha refund", "beta REFUND", "gamma", "Δelta rEfund", "epsilon"];
    for (index, record) in records.iter_mut().enumerate() {
        record.title = (index % 6 != 5).then(|| words[index % words.len()].to_owned());
    }
    insert_all(catalog, &records).await;
    let mut rng = StdRng::seed_from_u64(11);
    for text in ["refund", "RED", "s-01", "δ", "e", "no such text"] {
        let mut alone = base_query("t-one");
        alone.search = search(text);
        if text != "no such text" {
            assert!(!reference(&records, &alone).is_empty(), "the data set exercises {text}");
        }
        assert_lists_like_reference(catalog, &records, &alone).await;
        for _ in 0..12 {
            let mut query = random_query(&mut rng, &records);
            query.search = search(text);
            assert_lists_like_reference(catalog, &records, &query).await;
        }
    }
}

/// A query without a tenant (maintenance sweeps) spans tenants with the reference
/// order, including equal (last_activity, id) pairs in different tenants.
pub async fn list_without_tenant(catalog: &dyn Catalog) {
    let records = listing_data_set(3);
    insert_all(catalog, &records).await;
    let mut query = base_query("t-one");
    query.tenant = None;
    assert_lists_like_reference(catalog, &records, &query).await;
    query.statuses = vec![Status::Closed, Status::Expired];
    query.include_blank = true;
    assert_lists_like_reference(catalog, &records, &query).await;
    query.label = Some("green".into());
    assert_lists_like_reference(catalog, &records, &query).await;
}

/// Limit 0 returns nothing; timestamps at the top of the range keep their order and
/// filters within the realistic range.
pub async fn list_edge_limits_and_times(catalog: &dyn Catalog) {
    let mut forever = sample_record("t-edge", "forever", "alice", 100);
    forever.lease_until = Timestamp(u64::MAX);
    let mut soon = sample_record("t-edge", "soon", "alice", 200);
    soon.lease_until = Timestamp(150);
    let records = [forever.clone(), soon.clone()];
    insert_all(catalog, &records).await;
    let none = SessionQuery { limit: 0, ..base_query("t-edge") };
    assert!(catalog.list(&none).await.expect("list").is_empty());
    for bound in [151, 1_000_000, u64::MAX] {
        let query = SessionQuery { lease_before: Some(Timestamp(bound)), ..base_query("t-edge") };
        assert_eq!(catalog.list(&query).await.expect("list"), reference(&records, &query), "{bound}");
    }
    assert_eq!(catalog.get(&forever.key()).await.expect("get"), Some(forever));
}

// ---------------------------------------------------------------------------------
// Tenants and retention.

/// Every tenant with sessions, audit entries or a retention policy, once, sorted.
pub async fn tenants_lists_every_tenant(catalog: &dyn Catalog) {
    assert!(catalog.tenants().await.expect("tenants").is_empty());
    catalog.insert(&sample_record("t-c", "s1", "alice", 1)).await.expect("insert");
    catalog.insert(&sample_record("t-c", "s2", "alice", 1)).await.expect("insert");
    catalog.append_audit(draft(&tenant("t-a"), 0)).await.expect("append");
    catalog.set_retention(&tenant("t-b"), &RetentionPolicy::default()).await.expect("set");
    catalog.append_audit(draft(&tenant("t-c"), 0)).await.expect("append");
    let tenants = catalog.tenants().await.expect("tenants");
    assert_eq!(tenants, vec![tenant("t-a"), tenant("t-b"), tenant("t-c")]);
}

pub async fn retention_get_set(catalog: &dyn Catalog) {
    let (one, two) = (tenant("t-r1"), tenant("t-r2"));
    assert_eq!(catalog.retention(&one).await.expect("get"), None);
    let policy = RetentionPolicy {
        idle_ttl_ms: Some(3_600_000),
        max_age_ms: None,
        delete_terminal_after_ms: Some(u64::MAX),
        memory_max_age_ms: None,
    };
    catalog.set_retention(&one, &policy).await.expect("set");
    assert_eq!(catalog.retention(&one).await.expect("get"), Some(policy));
    assert_eq!(catalog.retention(&two).await.expect("get"), None);
    let replaced = RetentionPolicy { max_age_ms: Some(7), ..RetentionPolicy::default() };
    catalog.set_retention(&one, &replaced).await.expect("replace");
    assert_eq!(catalog.retention(&one).await.expect("get"), Some(replaced));
    catalog.set_retention(&two, &RetentionPolicy::default()).await.expect("set empty");
    assert_eq!(catalog.retention(&two).await.expect("get"), Some(RetentionPolicy::default()));
}

// ---------------------------------------------------------------------------------
// Audit.

/// Appended entries chain from the genesis, read back as returned, and verify against
/// the head; an empty log verifies with no head.
pub async fn audit_chain_verifies(catalog: &dyn Catalog) {
    let tenant_id = tenant("t-audit");
    assert_eq!(catalog.audit_head(&tenant_id).await.expect("head"), None);
    assert!(whole_audit(catalog, &tenant_id).await.is_empty());
    assert_eq!(audit::verify(&[], None).broken_at, None);

    let appended = append_drafts(catalog, &tenant_id, 6).await;
    for (index, entry) in appended.iter().enumerate() {
        assert_eq!(entry.seq, index as u64);
        assert_eq!(entry.draft, draft(&tenant_id, index as u64));
        let previous = if index == 0 { audit::GENESIS_HASH } else { appended[index - 1].hash.as_str() };
        assert_eq!(entry.prev_hash, previous);
    }
    let stored = whole_audit(catalog, &tenant_id).await;
    assert_eq!(stored, appended);
    let head = catalog.audit_head(&tenant_id).await.expect("head");
    let last = appended.last().expect("entries");
    assert_eq!(head, Some((last.seq, last.hash.clone())));
    let verdict = audit::verify(&stored, head);
    assert_eq!(verdict.broken_at, None, "{verdict:?}");
    assert_eq!(verdict.entries, 6);
}

/// `update_audited` and `remove_audited` store the change and its audit records
/// together or not at all (R-S10): a refused compare-and-set appends nothing; a stored
/// one appends every draft, in order, on the tenant's chain.
pub async fn audited_changes_are_all_or_nothing(catalog: &dyn Catalog) {
    let tenant_id = tenant("t-audited");
    let mut record = sample_record("t-audited", "s1", "alice", 100);
    catalog.insert(&record).await.expect("insert");
    append_drafts(catalog, &tenant_id, 1).await;

    let mut stale = record.clone();
    stale.revision = Revision(7);
    let refused = catalog.update_audited(&stale, Revision(6), vec![draft(&tenant_id, 10)]).await;
    assert!(matches!(refused, Err(berth_core::Error::RevisionConflict { .. })), "{refused:?}");
    let refused = catalog.remove_audited(&record.key(), Revision(6), vec![draft(&tenant_id, 11)]).await;
    assert!(matches!(refused, Err(berth_core::Error::RevisionConflict { .. })), "{refused:?}");
    let missing = sample_record("t-audited", "gone", "alice", 100);
    let refused = catalog.update_audited(&missing, Revision(0), vec![draft(&tenant_id, 12)]).await;
    assert!(matches!(refused, Err(berth_core::Error::NotFound { .. })), "{refused:?}");
    assert_eq!(whole_audit(catalog, &tenant_id).await.len(), 1, "a refused change appended audit records");

    let expected = record.revision;
    record.revision = Revision(expected.0 + 1);
    record.title = Some("audited".into());
    let entries = catalog
        .update_audited(&record, expected, vec![draft(&tenant_id, 1), draft(&tenant_id, 2)])
        .await
        .expect("update audited");
    assert_eq!(entries.iter().map(|entry| entry.seq).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(catalog.get(&record.key()).await.expect("get"), Some(record.clone()));
    let entries =
        catalog.remove_audited(&record.key(), record.revision, vec![draft(&tenant_id, 3)]).await.expect("remove");
    assert_eq!(entries[0].seq, 3);
    assert_eq!(catalog.get(&record.key()).await.expect("get"), None);
    let stored = whole_audit(catalog, &tenant_id).await;
    assert_eq!(
        stored.iter().map(|entry| entry.draft.clone()).collect::<Vec<_>>(),
        (0..4).map(|n| draft(&tenant_id, n)).collect::<Vec<_>>()
    );
    let verdict = audit::verify(&stored, catalog.audit_head(&tenant_id).await.expect("head"));
    assert_eq!(verdict.broken_at, None, "{verdict:?}");
}

/// `read_audit` starts at a position and returns at most `limit` entries.
pub async fn audit_read_from_and_limit(catalog: &dyn Catalog) {
    let tenant_id = tenant("t-audit-read");
    let appended = append_drafts(catalog, &tenant_id, 7).await;
    assert_eq!(catalog.read_audit(&tenant_id, 2, 3).await.expect("read"), appended[2..5].to_vec());
    assert_eq!(catalog.read_audit(&tenant_id, 5, 100).await.expect("read"), appended[5..].to_vec());
    assert!(catalog.read_audit(&tenant_id, 7, 100).await.expect("read").is_empty());
    assert!(catalog.read_audit(&tenant_id, u64::MAX, 100).await.expect("read").is_empty());
    assert!(catalog.read_audit(&tenant_id, 0, 0).await.expect("read").is_empty());
}

/// Each tenant has its own chain, starting at seq 0.
pub async fn audit_chains_are_per_tenant(catalog: &dyn Catalog) {
    let (one, two) = (tenant("t-audit-1"), tenant("t-audit-2"));
    let first = append_drafts(catalog, &one, 3).await;
    let second = append_drafts(catalog, &two, 2).await;
    assert_eq!(second[0].seq, 0);
    assert_eq!(second[0].prev_hash, audit::GENESIS_HASH);
    assert_eq!(whole_audit(catalog, &one).await, first);
    assert_eq!(whole_audit(catalog, &two).await, second);
    for tenant_id in [&one, &two] {
        let verdict =
            audit::verify(&whole_audit(catalog, tenant_id).await, catalog.audit_head(tenant_id).await.expect("head"));
        assert_eq!(verdict.broken_at, None, "{verdict:?}");
    }
}

/// Appends from 8 concurrent tasks produce one unbroken chain holding every entry once.
pub async fn audit_concurrent_appends_form_one_chain(catalog: Arc<dyn Catalog>) {
    const TASKS: u64 = 8;
    const APPENDS_PER_TASK: u64 = 25;
    let tenant_id = tenant("t-audit-race");
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let catalog = Arc::clone(&catalog);
        let tenant_id = tenant_id.clone();
        tasks.push(tokio::spawn(async move {
            let mut hashes = Vec::new();
            for number in 0..APPENDS_PER_TASK {
                let entry = catalog.append_audit(draft(&tenant_id, task * 1_000 + number)).await.expect("append");
                hashes.push(entry.hash);
            }
            hashes
        }));
    }
    let mut returned = HashSet::new();
    for task in tasks {
        returned.extend(task.await.expect("task"));
    }
    let stored = whole_audit(&*catalog, &tenant_id).await;
    assert_eq!(stored.len() as u64, TASKS * APPENDS_PER_TASK);
    let verdict = audit::verify(&stored, catalog.audit_head(&tenant_id).await.expect("head"));
    assert_eq!(verdict.broken_at, None, "{verdict:?}");
    let stored_hashes: HashSet<String> = stored.iter().map(|entry| entry.hash.clone()).collect();
    assert_eq!(stored_hashes, returned, "every returned entry is stored, once");
}

/// Damage made behind the catalog's back is detected by `audit::verify` at the first
/// damaged position.
pub async fn audit_tamper_is_detected(catalog: &dyn Catalog, tamperer: &dyn AuditTamperer, tamper: AuditTamper) {
    let tenant_id = tenant("t-audit-tamper");
    let bystander = tenant("t-audit-bystander");
    append_drafts(catalog, &tenant_id, 6).await;
    append_drafts(catalog, &bystander, 3).await;
    let intact =
        audit::verify(&whole_audit(catalog, &tenant_id).await, catalog.audit_head(&tenant_id).await.expect("head"));
    assert_eq!(intact.broken_at, None, "{intact:?}");

    tamperer.tamper(&tenant_id, tamper).await;
    let entries = whole_audit(catalog, &tenant_id).await;
    let verdict = audit::verify(&entries, catalog.audit_head(&tenant_id).await.expect("head"));
    let expected_at = match tamper {
        AuditTamper::ChangeField { seq } | AuditTamper::DeleteEntry { seq } => seq,
        AuditTamper::DeleteLast => 5,
        AuditTamper::Swap { first, second } => first.min(second),
    };
    assert_eq!(verdict.broken_at, Some(expected_at), "{tamper:?} → {verdict:?}");
    let untouched =
        audit::verify(&whole_audit(catalog, &bystander).await, catalog.audit_head(&bystander).await.expect("head"));
    assert_eq!(untouched.broken_at, None, "another tenant's chain is unaffected");
}

// ---------------------------------------------------------------------------------
// The per-backend test list.

/// Expands to one `#[tokio::test]` per clause. `$make` is an expression building a
/// fresh `CatalogFixture` (evaluated once per test).
#[macro_export]
macro_rules! catalog_conformance {
    (@plain $make:expr; $($clause:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $clause() {
                let fixture = $make;
                let catalog = $crate::catalog_conformance::CatalogFixture::catalog(&fixture);
                $crate::catalog_conformance::$clause(&*catalog).await;
            }
        )*
    };
    (@tamper $make:expr; $($test:ident => $tamper:expr),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                let fixture = $make;
                let catalog = $crate::catalog_conformance::CatalogFixture::catalog(&fixture);
                $crate::catalog_conformance::audit_tamper_is_detected(&*catalog, &fixture, $tamper).await;
            }
        )*
    };
    ($make:expr) => {
        $crate::catalog_conformance!(@plain $make;
            insert_get_round_trip,
            get_missing_is_none,
            duplicate_insert_is_already_exists,
            update_cas_bumps_revision,
            update_stale_revision_conflicts,
            update_must_carry_next_revision,
            update_missing_is_not_found,
            remove_with_cas,
            idempotency_index_is_per_session_monotonic_and_removed_with_it,
            list_sort_order_and_ties,
            list_each_filter_alone,
            list_filters_combined,
            list_text_search,
            list_hides_blank_unless_asked,
            list_cursor_pagination_visits_each_once,
            list_tenant_isolation,
            list_follows_updates,
            list_without_tenant,
            list_edge_limits_and_times,
            tenants_lists_every_tenant,
            retention_get_set,
            audit_chain_verifies,
            audit_read_from_and_limit,
            audit_chains_are_per_tenant,
            audited_changes_are_all_or_nothing,
        );
        $crate::catalog_conformance!(@tamper $make;
            audit_tamper_change_field_is_detected =>
                $crate::catalog_conformance::AuditTamper::ChangeField { seq: 2 },
            audit_tamper_delete_middle_is_detected =>
                $crate::catalog_conformance::AuditTamper::DeleteEntry { seq: 3 },
            audit_tamper_delete_last_is_detected => $crate::catalog_conformance::AuditTamper::DeleteLast,
            audit_tamper_swap_is_detected =>
                $crate::catalog_conformance::AuditTamper::Swap { first: 1, second: 4 },
        );
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn audit_concurrent_appends_form_one_chain() {
            let fixture = $make;
            let catalog = $crate::catalog_conformance::CatalogFixture::catalog(&fixture);
            $crate::catalog_conformance::audit_concurrent_appends_form_one_chain(catalog).await;
        }
    };
}
