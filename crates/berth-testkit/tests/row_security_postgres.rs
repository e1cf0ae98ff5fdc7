//! Row-level security as the second wall on PostgreSQL (`reference/reliability.md` §6,
//! tests 33 and 34) and never writing through a read-only server (test 30).
//!
//! | plan | test |
//! |---|---|
//! | 33 | `t33_app_role_with_tenant_a_reads_updates_and_deletes_none_of_b`, `t33_without_a_tenant_every_statement_fails`, `t33_serving_self_check_refuses_superuser_bypassrls_and_owner`, `t33_every_table_with_a_tenant_column_has_row_level_security_enabled_and_forced` |
//! | 34 | `t34_pool_of_one_never_carries_a_tenant_into_the_next_request` |
//! | 30 | `t30_read_only_server_is_refused_at_open`, `t30_a_write_refused_later_by_a_read_only_server_is_the_same_typed_error` |
//!
//! Every database is made by `TestDatabase::with_app_role`: migrated by the test
//! server's role (the owner), served by a unique login role that owns nothing and has
//! neither superuser nor `BYPASSRLS`. Roles made here are unique too, and dropped.

use berth_catalog::audit::AuditDraft;
use berth_catalog::{Catalog, MemoryStore, RetentionPolicy, SessionQuery};
use berth_core::{
    Error, Event, IdempotencyKey, KeyedBatch, Revision, Scope, SessionHeader, SessionId, SessionKey, TenantId,
    Timestamp, UserId,
};
use berth_postgres::testing::{connect, tokio_postgres, TestDatabase};
use berth_postgres::{PostgresBackend, PostgresCatalog, PostgresOptions, TENANT_POLICY, TENANT_TABLES};
use berth_store::{LogBackend, LogWriter};
use berth_testkit::catalog_conformance::sample_record;
use std::collections::BTreeSet;

const TENANT_A: &str = "tenant-a";
const TENANT_B: &str = "tenant-b";

fn key(tenant: &str, session: &str) -> SessionKey {
    SessionKey::new(TenantId::parse(tenant).unwrap(), SessionId::parse(session).unwrap())
}

fn header(key: &SessionKey) -> SessionHeader {
    let scope = Scope { tenant: key.tenant.clone(), user: UserId::parse("u").unwrap(), project: None };
    SessionHeader::new(key.id.clone(), scope, Timestamp(1))
}

fn events(count: u64) -> Vec<Event> {
    (0..count).map(|seq| Event::new(seq, "test/rls", Timestamp(1), serde_json::json!({"n": seq})).unwrap()).collect()
}

fn audit_draft(tenant: &str, session: &str) -> AuditDraft {
    AuditDraft {
        tenant: TenantId::parse(tenant).unwrap(),
        time: Timestamp(5),
        actor: "user:u".into(),
        action: "create".into(),
        session: Some(SessionId::parse(session).unwrap()),
        revision: Some(Revision(1)),
        outcome: "ok".into(),
        details: serde_json::json!({}),
    }
}

async fn app_backend(database: &TestDatabase, pool_size: usize) -> PostgresBackend {
    let options = PostgresOptions { pool_size, notify: false, ..PostgresOptions::default() };
    PostgresBackend::connect(&database.app_url(), options).await.expect("connect as the app role")
}

/// Fills every tenant table for `tenant` through berth itself: a session log, a catalog
/// record with labels, an audit entry, a retention policy, an idempotency key, a memory
/// item (and its usage row).
async fn populate(backend: &PostgresBackend, catalog: &PostgresCatalog, tenant: &str) {
    let log_key = key(tenant, "s-1");
    let mut writer = backend.materialize(&header(&log_key), &events(3)).await.expect("materialize");
    writer.release().await.expect("release");
    let mut record = sample_record(tenant, "s-1", "u", 10);
    record.labels.insert("green".into());
    catalog.insert(&record).await.expect("insert record");
    catalog.append_audit(audit_draft(tenant, "s-1")).await.expect("audit");
    catalog.set_retention(&record.header.scope.tenant, &RetentionPolicy::default()).await.expect("retention");
    let batch = KeyedBatch { key: IdempotencyKey::parse("k-1").unwrap(), first_seq: 0, events: 3, digest: "d".into() };
    catalog.index_idempotency(&log_key, &[batch], 3).await.expect("idempotency");
    let memory = berth_testkit::memory_conformance::put("user/u", "k-1", r#"{"note":"tea"}"#);
    let quota = berth_catalog::scoped::MemoryQuota::default();
    catalog.memory_put(&record.header.scope.tenant, &memory, berth_core::Timestamp(10), &quota).await.expect("memory");
}

/// Row counts per tenant table for `tenant`, read by the owner (the test server's role).
async fn counts_as_owner(owner: &tokio_postgres::Client, tenant: &str) -> Vec<(String, i64)> {
    let mut counts = Vec::new();
    for table in TENANT_TABLES {
        let row = owner
            .query_one(&format!("SELECT count(*) FROM {table} WHERE tenant = $1"), &[&tenant])
            .await
            .unwrap_or_else(|error| panic!("count {table}: {error}"));
        counts.push((table.to_string(), row.get(0)));
    }
    counts
}

/// A stable digest of every row of `tenant` (to show nothing of B changed).
async fn fingerprint_as_owner(owner: &tokio_postgres::Client, tenant: &str) -> Vec<String> {
    let mut rows = Vec::new();
    for table in TENANT_TABLES {
        let row = owner
            .query_one(
                &format!("SELECT coalesce(string_agg(md5(t::text), ',' ORDER BY md5(t::text)), '') FROM {table} t WHERE tenant = $1"),
                &[&tenant],
            )
            .await
            .unwrap();
        rows.push(format!("{table}:{}", row.get::<_, String>(0)));
    }
    rows
}

async fn populated_database() -> (TestDatabase, PostgresBackend) {
    let database = TestDatabase::with_app_role().await;
    let backend = app_backend(&database, 2).await;
    let catalog = backend.catalog();
    populate(&backend, &catalog, TENANT_A).await;
    populate(&backend, &catalog, TENANT_B).await;
    (database, backend)
}

/// The server's message (tokio-postgres's `Display` is only "db error").
fn message(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => error.to_string(),
    }
}

fn set_tenant(tenant: &str) -> String {
    format!("BEGIN; SET LOCAL berth.tenant = '{tenant}'")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t33_app_role_with_tenant_a_reads_updates_and_deletes_none_of_b() {
    let (database, _backend) = populated_database().await;
    let owner = database.client().await;
    let b_before = fingerprint_as_owner(&owner, TENANT_B).await;
    for (table, count) in counts_as_owner(&owner, TENANT_B).await {
        assert!(count > 0, "tenant B has rows in {table} (the test must exercise every table)");
    }
    let app = connect(&database.app_url()).await;
    for table in TENANT_TABLES {
        app.batch_execute(&set_tenant(TENANT_A)).await.unwrap();
        let seen: i64 = app
            .query_one(&format!("SELECT count(*) FROM {table} WHERE tenant = $1"), &[&TENANT_B])
            .await
            .unwrap()
            .get(0);
        // The registry holds names only, and any tenant may read it (sweeps iterate it).
        let expected = if *table == "tenants" { 1 } else { 0 };
        assert_eq!(seen, expected, "{table}: tenant A reads none of B's rows");
        let all: Vec<String> = app
            .query(&format!("SELECT DISTINCT tenant FROM {table}"), &[])
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        if *table == "tenants" {
            assert_eq!(all, [TENANT_A, TENANT_B], "{table}");
        } else {
            assert_eq!(all, [TENANT_A], "{table}: an unfiltered read sees tenant A only");
        }
        let updated =
            app.execute(&format!("UPDATE {table} SET tenant = tenant WHERE tenant = $1"), &[&TENANT_B]).await.unwrap();
        assert_eq!(updated, 0, "{table}: tenant A updates none of B's rows");
        let deleted = app.execute(&format!("DELETE FROM {table} WHERE tenant = $1"), &[&TENANT_B]).await.unwrap();
        assert_eq!(deleted, 0, "{table}: tenant A deletes none of B's rows");
        app.batch_execute("ROLLBACK").await.unwrap();
    }
    // Writing a row *as* B while the transaction is A's fails the policy's WITH CHECK.
    app.batch_execute(&set_tenant(TENANT_A)).await.unwrap();
    let planted = app
        .execute("INSERT INTO retention (tenant, policy_json) VALUES ($1, '{}') ON CONFLICT DO NOTHING", &[&"tenant-c"])
        .await;
    let error = message(&planted.expect_err("a row of another tenant is refused"));
    assert!(error.contains("row-level security"), "{error}");
    app.batch_execute("ROLLBACK").await.unwrap();
    // Moving A's rows into B is refused the same way.
    app.batch_execute(&set_tenant(TENANT_A)).await.unwrap();
    let moved = app.execute("UPDATE retention SET tenant = $1 WHERE tenant = $2", &[&TENANT_B, &TENANT_A]).await;
    assert!(moved.is_err(), "moving a row to another tenant is refused: {moved:?}");
    app.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(fingerprint_as_owner(&owner, TENANT_B).await, b_before, "nothing of tenant B changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t33_without_a_tenant_every_statement_fails() {
    let (database, _backend) = populated_database().await;
    // A fresh connection that never set the tenant: `current_setting` without
    // `missing_ok` raises.
    for table in TENANT_TABLES.iter().filter(|table| **table != "tenants") {
        let app = connect(&database.app_url()).await;
        let outcome = app.query(&format!("SELECT * FROM {table}"), &[]).await;
        let error = message(&outcome.expect_err("no tenant set: an error, not rows"));
        assert!(error.contains("berth.tenant"), "{table}: {error}");
        let deleted = app.execute(&format!("DELETE FROM {table}"), &[]).await;
        assert!(deleted.is_err(), "{table}: a DELETE without a tenant fails: {deleted:?}");
    }
    // After a transaction that set it ended, the connection reads back '' (PostgreSQL
    // keeps the name): the `berth_tenant` domain turns that into an error too.
    let app = connect(&database.app_url()).await;
    app.batch_execute(&format!("{}; COMMIT", set_tenant(TENANT_A))).await.unwrap();
    for table in TENANT_TABLES.iter().filter(|table| **table != "tenants") {
        let outcome = app.query(&format!("SELECT * FROM {table}"), &[]).await;
        let error = message(&outcome.expect_err("the ended transaction's tenant is gone: an error, not rows"));
        assert!(error.contains("berth_tenant_is_set"), "{table}: {error}");
    }
    // The registry accepts no write without a tenant either.
    let registered = app.execute("INSERT INTO tenants (tenant) VALUES ('tenant-x')", &[]).await;
    assert!(registered.is_err(), "{registered:?}");
    // A session-level SET would be the footgun; berth never issues one, and the owner
    // is bound too (FORCE): see the self-check test for roles that are not.
}

/// A role made for one test, dropped at the end (roles are cluster-wide).
struct ScratchRole {
    admin: tokio_postgres::Client,
    name: String,
}

impl ScratchRole {
    /// `tag`: one letter, appended to the database's app role name (so the role is
    /// unique, within PostgreSQL's 63 bytes, and swept with its database if a failed
    /// test leaves it behind).
    async fn create(database: &TestDatabase, tag: char, attributes: &str) -> ScratchRole {
        let admin = database.client().await;
        let name = format!("{}_{tag}", database.app_role());
        admin.batch_execute(&format!("CREATE ROLE {name} LOGIN PASSWORD 'scratch' {attributes}")).await.unwrap();
        ScratchRole { admin, name }
    }

    fn url(&self, database: &TestDatabase) -> String {
        let server = berth_postgres::testing::TestServer {
            user: self.name.clone(),
            password: Some("scratch".into()),
            ..database.server().clone()
        };
        server.url(database.name(), None)
    }

    async fn drop_now(self) {
        self.admin.batch_execute(&format!("DROP OWNED BY {0}; DROP ROLE {0}", self.name)).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t33_serving_self_check_refuses_superuser_bypassrls_and_owner() {
    let database = TestDatabase::with_app_role().await;
    let app = app_backend(&database, 1).await;
    let report = app.check_serving_role().await.expect("the app role may serve");
    assert!(!report.superuser && !report.bypass_rls && report.owned_tables.is_empty(), "{report:?}");

    let superuser = PostgresBackend::connect(&database.url(), PostgresOptions::default()).await.unwrap();
    let refused = superuser.check_serving_role().await;
    assert!(
        matches!(&refused, Err(Error::Invalid { reason, .. }) if reason.contains("superuser") && reason.contains("--dev-allow-db-owner")),
        "{refused:?}"
    );

    let bypass = ScratchRole::create(&database, 'b', "BYPASSRLS").await;
    database.client().await.batch_execute(&format!("GRANT {} TO {}", database.app_role(), bypass.name)).await.unwrap();
    let backend = PostgresBackend::connect(&bypass.url(&database), PostgresOptions::default()).await.unwrap();
    let refused = backend.check_serving_role().await;
    assert!(matches!(&refused, Err(Error::Invalid { reason, .. }) if reason.contains("BYPASSRLS")), "{refused:?}");
    drop(backend);
    bypass.drop_now().await;

    // An owner that is not a superuser: FORCE binds it (no tenant, no rows), and the
    // self-check refuses it all the same (an owner can disable the policies).
    let owner = ScratchRole::create(&database, 'o', "NOSUPERUSER").await;
    let admin = database.client().await;
    admin.batch_execute(&format!("GRANT {} TO {}", database.app_role(), owner.name)).await.unwrap();
    admin.batch_execute(&format!("ALTER TABLE events OWNER TO {}", owner.name)).await.unwrap();
    let backend = PostgresBackend::connect(&owner.url(&database), PostgresOptions::default()).await.unwrap();
    let refused = backend.check_serving_role().await;
    assert!(matches!(&refused, Err(Error::Invalid { reason, .. }) if reason.contains("events")), "{refused:?}");
    let raw = connect(&owner.url(&database)).await;
    let unbound = raw.query("SELECT * FROM events", &[]).await;
    assert!(unbound.is_err(), "FORCE ROW LEVEL SECURITY binds the owner too: {unbound:?}");
    drop((backend, raw));
    admin.batch_execute("ALTER TABLE events OWNER TO CURRENT_USER").await.unwrap();
    owner.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t33_every_table_with_a_tenant_column_has_row_level_security_enabled_and_forced() {
    let database = TestDatabase::with_app_role().await;
    let owner = database.client().await;
    let with_tenant: BTreeSet<String> = owner
        .query(
            "SELECT c.relname::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid \
             WHERE a.attname = 'tenant' AND NOT a.attisdropped AND c.relkind IN ('r', 'p') \
               AND c.relnamespace = current_schema()::regnamespace",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let listed: BTreeSet<String> = TENANT_TABLES.iter().map(|table| table.to_string()).collect();
    assert_eq!(with_tenant, listed, "every table with a tenant column is in TENANT_TABLES, and only those");
    for table in &with_tenant {
        let row = owner
            .query_one(
                "SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE oid = $1::text::regclass",
                &[table],
            )
            .await
            .unwrap();
        let (enabled, forced): (bool, bool) = (row.get(0), row.get(1));
        assert!(enabled && forced, "{table}: row-level security enabled ({enabled}) and forced ({forced})");
        let policies = owner
            .query(
                "SELECT policyname::text, cmd, coalesce(qual, ''), coalesce(with_check, '') FROM pg_policies \
                 WHERE schemaname = current_schema() AND tablename = $1",
                &[table],
            )
            .await
            .unwrap();
        assert!(!policies.is_empty(), "{table}: has a policy");
        for policy in &policies {
            let (name, command, using, check): (String, String, String, String) =
                (policy.get(0), policy.get(1), policy.get(2), policy.get(3));
            if table == "tenants" && command == "SELECT" {
                continue; // names only, readable by every tenant (the sweeper's list)
            }
            let bound = |text: &str| text.contains("current_setting('berth.tenant'") && text.contains("berth_tenant");
            match command.as_str() {
                "INSERT" => assert!(bound(&check), "{table}.{name}: WITH CHECK {check}"),
                _ => assert!(bound(&using) && bound(&check), "{table}.{name}: USING {using} / WITH CHECK {check}"),
            }
        }
    }
    assert!(TENANT_POLICY.contains("current_setting('berth.tenant')"), "{TENANT_POLICY}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t34_pool_of_one_never_carries_a_tenant_into_the_next_request() {
    let database = TestDatabase::with_app_role().await;
    let backend = app_backend(&database, 1).await;
    let catalog = backend.catalog();
    populate(&backend, &catalog, TENANT_A).await;
    let a = key(TENANT_A, "s-1");
    // Request for A on the one connection.
    assert!(backend.stat(&a).await.unwrap().is_some());
    assert_eq!(catalog.list(&SessionQuery { limit: 10, ..query(TENANT_A) }).await.unwrap().len(), 1);

    // The next request on the same connection with its tenant-setting step removed:
    // it fails instead of running as A.
    backend.fault_skip_tenant_setting(true);
    let b = key(TENANT_B, "s-1");
    for outcome in [backend.stat(&b).await.map(|_| ()), backend.stat(&a).await.map(|_| ())] {
        let error = outcome.expect_err("no tenant: an error, never A's rows");
        assert!(error.to_string().contains("berth_tenant_is_set"), "{error}");
    }
    let listed = catalog.list(&SessionQuery { limit: 10, ..query(TENANT_A) }).await;
    assert!(listed.is_err(), "a listing without its tenant fails: {listed:?}");
    let appended = {
        let mut writer = backend.open_postgres_writer(&a).await;
        if let Ok(writer) = writer.as_mut() {
            writer.append(&events(4)[3..]).await
        } else {
            writer.map(|_| ())
        }
    };
    assert!(appended.is_err(), "nothing is written without a tenant: {appended:?}");

    // The fault gone, the same single connection serves A again.
    backend.fault_skip_tenant_setting(false);
    assert!(backend.stat(&a).await.unwrap().is_some());
    assert_eq!(backend.stat(&b).await.unwrap(), None);
    let owner = database.client().await;
    assert_eq!(counts_as_owner(&owner, TENANT_A).await.iter().find(|(table, _)| table == "events").unwrap().1, 3);
}

fn query(tenant: &str) -> SessionQuery {
    SessionQuery { tenant: Some(TenantId::parse(tenant).unwrap()), include_blank: true, ..SessionQuery::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t30_read_only_server_is_refused_at_open() {
    let database = TestDatabase::with_app_role().await;
    let owner = database.client().await;
    owner
        .batch_execute(&format!("ALTER DATABASE {} SET default_transaction_read_only = on", database.name()))
        .await
        .unwrap();
    let opened = PostgresBackend::connect(&database.app_url(), PostgresOptions::default()).await;
    assert!(matches!(&opened, Err(Error::ReadOnlyDatabase { reason }) if reason.contains("read-only")), "{opened:?}");
    assert_eq!(opened.unwrap_err().class(), berth_core::ErrorClass::Unavailable);

    // A database that still needs its migrations: the migration is refused by the
    // server (25006) and reported the same way; nothing is created.
    let fresh = TestDatabase::create().await;
    let admin = fresh.client().await;
    admin
        .batch_execute(&format!("ALTER DATABASE {} SET default_transaction_read_only = on", fresh.name()))
        .await
        .unwrap();
    let opened = PostgresBackend::connect(&fresh.url(), PostgresOptions::default()).await;
    assert!(matches!(&opened, Err(Error::ReadOnlyDatabase { .. })), "{opened:?}");
    let tables: i64 = fresh
        .client()
        .await
        .query_one("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "nothing was written to the read-only server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t30_a_write_refused_later_by_a_read_only_server_is_the_same_typed_error() {
    let database = TestDatabase::with_app_role().await;
    let options = PostgresOptions {
        pool_size: 1,
        notify: false,
        application_name: format!("t30-{}", database.name()),
        ..PostgresOptions::default()
    };
    let backend = PostgresBackend::connect(&database.app_url(), options.clone()).await.unwrap();
    let catalog = backend.catalog();
    let a = key(TENANT_A, "failover");
    let mut writer = backend.materialize(&header(&a), &events(1)).await.unwrap();

    // The "failover": the server turns read-only for new connections, and the pooled
    // one is cut, so the next statements run on a read-only connection.
    let owner = database.client().await;
    owner
        .batch_execute(&format!("ALTER DATABASE {} SET default_transaction_read_only = on", database.name()))
        .await
        .unwrap();
    owner
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&options.application_name],
        )
        .await
        .unwrap();
    let appended = writer.append(&events(2)[1..]).await;
    assert!(matches!(&appended, Err(Error::ReadOnlyDatabase { .. })), "{appended:?}");
    let inserted = catalog.insert(&sample_record(TENANT_A, "failover", "u", 1)).await;
    assert!(matches!(&inserted, Err(Error::ReadOnlyDatabase { .. })), "{inserted:?}");
    let events_stored: i64 =
        owner.query_one("SELECT count(*) FROM events WHERE tenant = $1", &[&TENANT_A]).await.unwrap().get(0);
    assert_eq!(events_stored, 1, "the refused append stored nothing");
    // Reads still work on the read-only server.
    assert!(backend.stat(&a).await.unwrap().is_some());
    drop(writer);
}
