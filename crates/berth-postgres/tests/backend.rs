//! Backend-level behaviour beyond the conformance suites: live tail through
//! `LISTEN`/`NOTIFY`, `Unavailable` while the database is unreachable and recovery
//! without a restart (R-G4), migrations racing at start-up and the newer-schema gate
//! (R-G1), the listing plans at scale (R-S12), and tail reads as a backward index range
//! (R-S15).

use berth_core::{Error, Event, Scope, SessionHeader, SessionId, SessionKey, TenantId, Timestamp, UserId};
use berth_postgres::testing::{Admission, Proxy, TestDatabase};
use berth_postgres::{PostgresBackend, PostgresOptions, SCHEMA_VERSION};
use berth_store::LogBackend;
use std::time::Duration;

fn key(session: &str) -> SessionKey {
    SessionKey::new(TenantId::parse("tenant-b").unwrap(), SessionId::parse(session).unwrap())
}

fn header(key: &SessionKey) -> SessionHeader {
    let scope = Scope { tenant: key.tenant.clone(), user: UserId::parse("u").unwrap(), project: None };
    SessionHeader::new(key.id.clone(), scope, Timestamp(1))
}

fn batch(first: u64, count: u64) -> Vec<Event> {
    (0..count)
        .map(|index| {
            Event::new(first + index, "test/tail", Timestamp(1), serde_json::json!({"n": first + index})).unwrap()
        })
        .collect()
}

async fn connect(url: &str, options: PostgresOptions) -> PostgresBackend {
    PostgresBackend::connect(url, options).await.expect("connect")
}

/// A subscriber in one backend instance (one "process") wakes when another instance
/// appends, through `NOTIFY`, with the backstop re-read set far beyond the test's
/// deadline so that it cannot be what wakes it; a subscriber in the appending instance
/// wakes at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_tail_wakes_on_append_without_polling() {
    let database = TestDatabase::create().await;
    let quiet = PostgresOptions { listen_backstop: Duration::from_secs(3_600), ..PostgresOptions::default() };
    let listener = connect(&database.url(), quiet.clone()).await;
    let appender = connect(&database.url(), quiet).await;
    let absent = key("never-created");
    let key = key("tail");
    let mut writer = appender.materialize(&header(&key), &batch(0, 1)).await.unwrap();

    let mut remote = listener.subscribe(&key).await.unwrap();
    let mut local = appender.subscribe(&key).await.unwrap();
    assert_eq!(*remote.borrow_and_update(), 1);
    assert_eq!(*local.borrow_and_update(), 1);
    for round in 1..=3u64 {
        writer.append(&batch(round, 2)).await.unwrap();
        let expected = 1 + 2 * round;
        for (name, receiver) in [("remote", &mut remote), ("local", &mut local)] {
            tokio::time::timeout(Duration::from_secs(10), receiver.wait_for(|next_seq| *next_seq >= expected))
                .await
                .unwrap_or_else(|_| panic!("round {round}: the {name} subscriber was not woken"))
                .expect("subscription open");
        }
    }
    let unknown = listener.subscribe(&absent).await.unwrap();
    assert_eq!(*unknown.borrow(), 0, "a session not yet stored starts at 0");
}

/// While the database cannot be reached every operation fails fast with
/// `Unavailable`; once it is back the same backend works again, no restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_while_the_database_is_down_then_recovers_without_restart() {
    let database = TestDatabase::create().await;
    let proxy = Proxy::start(database.server().address()).await;
    let options = PostgresOptions {
        connect_timeout: Duration::from_secs(1),
        statement_timeout: Duration::from_secs(1),
        ..PostgresOptions::default()
    };
    let backend = connect(&database.url_via(&proxy), options).await;
    let key = key("outage");
    backend.materialize(&header(&key), &batch(0, 2)).await.unwrap().release().await.unwrap();

    proxy.admit(Admission::Refuse);
    proxy.sever();
    for attempt in 0..3 {
        let started = std::time::Instant::now();
        let outcome = backend.stat(&key).await;
        assert!(matches!(outcome, Err(Error::Unavailable { .. })), "attempt {attempt}: {outcome:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "failed fast");
    }
    assert!(matches!(backend.open_writer(&key).await, Err(Error::Unavailable { .. })));

    proxy.admit(Admission::Forward);
    let stat = backend.stat(&key).await.expect("works again").expect("still there");
    assert_eq!(stat.event_count, Some(2));
    let mut writer = backend.open_writer(&key).await.expect("write again");
    writer.append(&batch(2, 1)).await.unwrap();
    writer.release().await.unwrap();
}

/// Several processes starting at once on a fresh database: every one connects, the
/// migrations ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_start_up_migrations_run_once() {
    let database = TestDatabase::create().await;
    let starts: Vec<_> = (0..6)
        .map(|_| {
            let url = database.url();
            tokio::spawn(async move { PostgresBackend::connect(&url, PostgresOptions::default()).await.map(|_| ()) })
        })
        .collect();
    for start in starts {
        start.await.unwrap().expect("every process starts");
    }
    let admin = database.client().await;
    let versions: Vec<i32> = admin
        .query("SELECT version FROM schema_migrations ORDER BY version", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
}

/// A schema written by a newer berth is refused, never misread; a schema that is
/// behind is refused when start-up migration is off (and `migrate` brings it current).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_schema_is_refused_and_an_old_one_needs_migrate() {
    let database = TestDatabase::create().await;
    let manual = PostgresOptions { migrate: false, ..PostgresOptions::default() };
    let behind = PostgresBackend::connect(&database.url(), manual.clone()).await;
    assert!(matches!(&behind, Err(Error::Unavailable { reason }) if reason.contains("berth migrate")), "{behind:?}");
    let report = PostgresBackend::connect_unchecked(&database.url(), manual.clone()).unwrap().migrate().await.unwrap();
    assert_eq!((report.from_version, report.to_version), (0, SCHEMA_VERSION));
    PostgresBackend::connect(&database.url(), manual).await.expect("current now");

    let admin = database.client().await;
    admin.batch_execute("INSERT INTO schema_migrations (version, name) VALUES (999, 'from the future')").await.unwrap();
    let newer = PostgresBackend::connect(&database.url(), PostgresOptions::default()).await;
    assert!(
        matches!(&newer, Err(Error::FormatUnsupported { reason, .. }) if reason.contains("newer berth")),
        "{newer:?}"
    );
}

/// Seeds `count` sessions of tenant `tenant-big` (and a few of two other tenants)
/// straight in SQL: the record JSON of a template with the id and activity swapped in.
async fn seed_sessions(admin: &berth_postgres::testing::tokio_postgres::Client, count: i64) {
    let template = berth_catalog::SessionRecord {
        header: header(&SessionKey::new(TenantId::parse("tenant-big").unwrap(), SessionId::parse("IDX").unwrap())),
        status: berth_core::lifecycle::Status::Active,
        lease_until: Timestamp(9_000_000),
        last_activity: Timestamp(1_234_567),
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
    };
    let json = serde_json::to_string(&template).unwrap();
    for (tenant, rows) in [("tenant-big", count), ("tenant-a", 50), ("tenant-z", 50)] {
        admin
            .execute(
                "INSERT INTO sessions (tenant, id, user_id, project, status, last_activity, lease_until, created_at, \
                     status_changed_at, revision, blank, parent, record_json) \
                 SELECT $1, 's' || i, 'user' || (i % 50), CASE WHEN i % 3 = 0 THEN 'p' || (i % 7) END, \
                     CASE WHEN i % 10 = 0 THEN 'closed' ELSE 'active' END, 1000000 + (i * 7919) % 500000, 9000000, 1, 1, 0, \
                     i % 5 = 0, NULL, \
                     replace(replace(replace($3, '\"IDX\"', '\"s' || i || '\"'), '1234567', (1000000 + (i * 7919) % 500000)::text), \
                         '\"tenant-big\"', '\"' || $1 || '\"') \
                 FROM generate_series(1, $2::bigint) AS i",
                &[&tenant, &rows, &json],
            )
            .await
            .unwrap();
    }
    admin
        .batch_execute(
            "INSERT INTO session_labels (tenant, id, label, status, blank, last_activity) \
             SELECT tenant, id, 'green', status, blank, last_activity FROM sessions WHERE id LIKE '%7'; \
             ANALYZE sessions; ANALYZE session_labels",
        )
        .await
        .unwrap();
}

/// At 100,000 sessions of one tenant, every listing shape the service uses is an index
/// range scan (no sequential scan, no sort of the tenant's rows), and pages follow the
/// reference order. Timings are printed for information (the benchmark owns figures).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_at_100k_sessions_scans_indexes() {
    use berth_catalog::{Catalog, ListCursor, SessionQuery};
    use berth_core::lifecycle::Status;
    // Served as the app role: the plans checked are the ones row-level security's
    // policy is part of (seeded by the owner).
    let database = TestDatabase::with_app_role().await;
    let backend = connect(&database.app_url(), PostgresOptions::default()).await;
    let catalog = backend.catalog();
    seed_sessions(&database.client().await, 100_000).await;
    let tenant = TenantId::parse("tenant-big").unwrap();
    let base = SessionQuery { limit: 50, ..SessionQuery::tenant(tenant) };
    let shapes = [
        ("default", base.clone()),
        ("include blank", SessionQuery { include_blank: true, ..base.clone() }),
        ("by user", SessionQuery { user: Some(UserId::parse("user7").unwrap()), ..base.clone() }),
        ("by status", SessionQuery { statuses: vec![Status::Active, Status::Closed], ..base.clone() }),
        ("by label", SessionQuery { label: Some("green".into()), ..base.clone() }),
        ("by project", SessionQuery { project: Some(berth_core::ProjectId::parse("p3").unwrap()), ..base.clone() }),
    ];
    for (name, query) in shapes {
        let plan = catalog.explain_list(&query).await.unwrap();
        assert!(!plan.contains("Seq Scan"), "{name}: {plan}");
        let mut query = query;
        let mut previous: Option<ListCursor> = None;
        let started = std::time::Instant::now();
        for _ in 0..5 {
            let page = catalog.list(&query).await.unwrap();
            assert_eq!(page.len(), 50, "{name}");
            for record in &page {
                if let Some(cursor) = &previous {
                    assert!((record.last_activity, &record.header.id) < (cursor.last_activity, &cursor.id), "{name}");
                }
                previous = Some(ListCursor::of(record));
            }
            query.cursor = previous.clone();
        }
        eprintln!("listing {name}: {:?} per page of 50 at 100k sessions", started.elapsed() / 5);
    }
}

/// The relaxed-durability activity update keeps compare-and-set semantics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activity_update_is_a_compare_and_set() {
    use berth_catalog::{Catalog, SessionRecord};
    let database = TestDatabase::create().await;
    let catalog = connect(&database.url(), PostgresOptions::default()).await.catalog();
    let mut record = SessionRecord {
        header: header(&key("activity")),
        status: berth_core::lifecycle::Status::Active,
        lease_until: Timestamp(10),
        last_activity: Timestamp(5),
        revision: berth_core::Revision(0),
        title: None,
        labels: ["a".to_owned()].into(),
        event_count: 0,
        blank: false,
        runs: Vec::new(),
        status_changed_at: Timestamp(1),
        resume_mark: Default::default(),
        repair: Default::default(),
        creator: None,
    };
    catalog.insert(&record).await.unwrap();
    record.last_activity = Timestamp(7);
    record.revision = berth_core::Revision(1);
    catalog.update_activity(&record, berth_core::Revision(0)).await.unwrap();
    assert_eq!(catalog.get(&record.key()).await.unwrap(), Some(record.clone()));
    let stale = catalog.update_activity(&record, berth_core::Revision(0)).await;
    assert!(matches!(stale, Err(Error::RevisionConflict { expected: 0, actual: 1 })), "{stale:?}");
}

/// R-S15: `read_before` is one backward range scan of the events primary key that stops
/// after `limit` rows — no sequential scan, no sort — on a table of 50,000 events in
/// two sessions; and it returns the right events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_before_is_a_backward_index_range_scan() {
    let database = TestDatabase::create().await;
    let backend = connect(&database.url(), PostgresOptions::default()).await;
    for session in ["plan-a", "plan-b"] {
        let mut writer = backend.materialize(&header(&key(session)), &[]).await.unwrap();
        for first in (0..25_000).step_by(1_000) {
            writer.append(&batch(first, 1_000)).await.unwrap();
        }
        writer.release().await.unwrap();
    }
    let client = database.client().await;
    client.batch_execute("ANALYZE events").await.unwrap();
    let explain = format!("EXPLAIN {}", berth_postgres::READ_BEFORE);
    let (before, limit) = (12_345i64, 20i64);
    let rows = client.query(&explain, &[&"tenant-b", &"plan-a", &before, &limit]).await.unwrap();
    let plan: Vec<String> = rows.iter().map(|row| row.get::<_, String>(0)).collect();
    let plan = plan.join("\n");
    eprintln!("{plan}");
    assert!(plan.contains("Index Scan Backward using events_pkey"), "{plan}");
    assert!(plan.contains("Limit"), "{plan}");
    assert!(!plan.contains("Seq Scan") && !plan.contains("Sort"), "{plan}");
    let mut reader = backend.open_reader(&key("plan-a")).await.unwrap();
    let events = reader.read_before(before as u64, limit as u64).await.unwrap();
    assert_eq!(events, batch(12_325, 20));
    assert_eq!(reader.read_before(u64::MAX, 3).await.unwrap(), batch(24_997, 3));
}

/// Migration 5 counts memory usage again without berth's own bookkeeping (until
/// migration 4 a carried append's marker and scope index entries counted as the
/// tenant's items), tenant by tenant under row-level security — migrated by an owner
/// that is no superuser, so FORCE binds it as in production — and adds the tenant's own
/// quota to its usage row (fails without the recount: the bookkeeping stays counted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_5_recounts_usage_without_berths_bookkeeping() {
    use berth_catalog::scoped::{MemoryStore, TenantQuota};
    use berth_postgres::testing::tokio_postgres;
    use berth_postgres::{PostgresCatalog, MIGRATIONS};
    let database = TestDatabase::create().await;
    // A scratch owner, named so that the next run's orphan sweep drops it if this one
    // fails before its own drop (`berth_test_app_<suffix>_<tag>`).
    let role = format!("berth_test_app_{}_m", database.name().trim_start_matches("berth_test_"));
    let admin = database.client().await;
    admin
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN PASSWORD 'scratch' NOSUPERUSER NOBYPASSRLS; \
             ALTER DATABASE {} OWNER TO {role}; ALTER SCHEMA public OWNER TO {role}",
            database.name()
        ))
        .await
        .unwrap();
    let server = berth_postgres::testing::TestServer {
        user: role.clone(),
        password: Some("scratch".into()),
        ..database.server().clone()
    };
    let owner_url = server.url(database.name(), None);
    let (mut owner, connection) = tokio_postgres::connect(&owner_url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    let transaction = owner.transaction().await.unwrap();
    transaction
        .batch_execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, \
             applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .unwrap();
    for migration in &MIGRATIONS[..4] {
        transaction.batch_execute(migration.sql).await.unwrap();
        let (version, name) = (migration.version, migration.name);
        transaction
            .execute("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", &[&version, &name])
            .await
            .unwrap();
    }
    let items = [
        ("t", "user/alice", "name", r#""Al""#),
        ("t", "berth/carried", "s1", r#"{"from_seq":3}"#),
        ("t", "berth/scopes/user/alice", "s1", "null"),
        ("u", "app/faq", "q", "1"),
    ];
    for tenant in ["t", "u"] {
        transaction.execute("SELECT set_config('berth.tenant', $1, true)", &[&tenant]).await.unwrap();
        transaction.execute("INSERT INTO tenants (tenant) VALUES ($1)", &[&tenant]).await.unwrap();
        let (mut count, mut total) = (0i64, 0i64);
        for (_, namespace, key, value) in items.iter().filter(|item| item.0 == tenant) {
            let bytes = (namespace.len() + key.len() + value.len()) as i64;
            transaction
                .execute(
                    "INSERT INTO memory_items (tenant, namespace, key, value, revision, created_at, updated_at, bytes) \
                     VALUES ($1, $2, $3, $4, 1, 1, 1, $5)",
                    &[&tenant, namespace, key, value, &bytes],
                )
                .await
                .unwrap();
            (count, total) = (count + 1, total + bytes);
        }
        // As migration 4 counted them: every item, the bookkeeping too.
        transaction
            .execute("INSERT INTO memory_usage (tenant, items, bytes) VALUES ($1, $2, $3)", &[&tenant, &count, &total])
            .await
            .unwrap();
    }
    transaction.commit().await.unwrap();
    drop(owner);
    let catalog = PostgresCatalog::connect(&owner_url, PostgresOptions::default()).await.expect("migrate");
    let (t, u) = (TenantId::parse("t").unwrap(), TenantId::parse("u").unwrap());
    let usage = catalog.memory_usage(&t).await.unwrap();
    assert_eq!((usage.items, usage.bytes), (1, ("user/alice".len() + "name".len() + 4) as u64));
    let theirs = catalog.memory_usage(&u).await.unwrap();
    assert_eq!((theirs.items, theirs.bytes), (1, ("app/faq".len() + 2) as u64));
    assert_eq!(catalog.memory_quota(&t).await.unwrap(), TenantQuota::default());
    drop(catalog);
    admin.batch_execute(&format!("REASSIGN OWNED BY {role} TO CURRENT_USER; DROP OWNED BY {role}")).await.unwrap();
    let cluster =
        berth_postgres::testing::connect(&database.server().url(&database.server().admin_database, None)).await;
    cluster.batch_execute(&format!("DROP ROLE {role}")).await.unwrap();
}

/// Migration 7 fills `sessions.search` for the sessions stored before it, tenant by
/// tenant under row-level security, folded by berth (Unicode lowercase, NFC), so a
/// search finds them by title, label and id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_7_fills_the_search_column_for_sessions_stored_before_it() {
    use berth_catalog::{Catalog, SessionQuery, SessionSearch};
    use berth_postgres::{PostgresCatalog, MIGRATIONS};
    let database = TestDatabase::create().await;
    let mut admin = database.client().await;
    let transaction = admin.transaction().await.unwrap();
    transaction
        .batch_execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, \
             applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .unwrap();
    for migration in &MIGRATIONS[..6] {
        transaction.batch_execute(migration.sql).await.unwrap();
        let (version, name) = (migration.version, migration.name);
        transaction
            .execute("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", &[&version, &name])
            .await
            .unwrap();
    }
    let mut records = Vec::new();
    for (tenant, title) in [("t", "Remboursement ÉTÉ"), ("u", "Hiver")] {
        let key = SessionKey::new(TenantId::parse(tenant).unwrap(), SessionId::parse("s").unwrap());
        let record = berth_catalog::SessionRecord {
            header: header(&key),
            status: berth_core::lifecycle::Status::Active,
            lease_until: Timestamp(61_000),
            last_activity: Timestamp(1_000),
            revision: berth_core::Revision(0),
            title: Some(title.into()),
            labels: ["VIP".to_owned()].into_iter().collect(),
            event_count: 0,
            blank: false,
            runs: Vec::new(),
            status_changed_at: Timestamp(500),
            resume_mark: Default::default(),
            repair: Default::default(),
            creator: None,
        };
        let json = serde_json::to_string(&record).unwrap();
        transaction.execute("SELECT set_config('berth.tenant', $1, true)", &[&tenant]).await.unwrap();
        transaction
            .execute("INSERT INTO tenants (tenant) VALUES ($1) ON CONFLICT DO NOTHING", &[&tenant])
            .await
            .unwrap();
        transaction
            .execute(
                "INSERT INTO sessions (tenant, id, user_id, project, status, last_activity, lease_until, created_at, \
                 status_changed_at, revision, blank, parent, record_json) \
                 VALUES ($1, 's', 'u', NULL, 'active', 1000, 61000, 500, 500, 0, false, NULL, $2)",
                &[&tenant, &json],
            )
            .await
            .unwrap();
        records.push(record);
    }
    transaction.commit().await.unwrap();
    let catalog = PostgresCatalog::connect(&database.url(), PostgresOptions::default()).await.expect("migrate");
    for (tenant, text, expected) in [
        ("t", "été", Some(0)),
        ("t", "vip", Some(0)),
        ("t", "S", Some(0)),
        ("t", "hiver", None),
        ("u", "hiver", Some(1)),
    ] {
        let query = SessionQuery {
            search: Some(SessionSearch::parse(text).unwrap()),
            ..SessionQuery::tenant(TenantId::parse(tenant).unwrap())
        };
        let page = catalog.list(&query).await.unwrap();
        let expected: Vec<_> = expected.map(|index: usize| records[index].clone()).into_iter().collect();
        assert_eq!(page, expected, "{tenant}: {text}");
    }
}
