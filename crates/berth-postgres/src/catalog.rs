//! The `Catalog` contract on PostgreSQL, with the memory catalog's semantics: every
//! write is one statement or one short transaction on the primary; compare-and-set is
//! an `UPDATE … WHERE revision = $expected`, the audit chain is computed while the
//! tenant's head row is locked (`INSERT … ON CONFLICT DO UPDATE` locks it), so
//! concurrent appenders queue instead of forking the chain.

use crate::commit::AuditedCommitter;
use crate::db::{to_i64, to_u64, Database, Failure};
use crate::listing::{self, time_column};
use crate::PostgresOptions;
use async_trait::async_trait;
use berth_catalog::audit::{self, AuditDraft, AuditEntry};
use berth_catalog::{Catalog, RetentionPolicy, SessionQuery, SessionRecord};
use berth_core::{Error, IdempotencyKey, KeyedBatch, Result, Revision, SessionKey, TenantId};
use serde::de::DeserializeOwned;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Inserts a record and its label rows; 0 when the key exists.
const INSERT: &str = "WITH session AS ( \
         INSERT INTO sessions (tenant, id, user_id, project, status, last_activity, lease_until, created_at, \
             status_changed_at, revision, blank, parent, record_json, search) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $15) \
         ON CONFLICT DO NOTHING RETURNING 1 \
     ), labels AS ( \
         INSERT INTO session_labels (tenant, id, label, status, blank, last_activity) \
         SELECT $1, $2, label, $5, $11, $6 FROM session, unnest($14::text[]) AS label \
     ) \
     SELECT count(*) FROM session";

/// The compare-and-set update of a whole record, as one statement; label rows follow
/// (the ones dropped go, the others are rewritten with the new sort key). Its count is 0
/// when the CAS did not match. `$with` opens the statement's CTEs and `$guard` is an
/// extra condition on the update (used by the relaxed variant).
macro_rules! update_session_sql {
    ($with:literal, $guard:literal) => {
        concat!(
            $with,
            "session AS ( \
                 UPDATE sessions SET user_id = $3, project = $4, status = $5, last_activity = $6, lease_until = $7, \
                     created_at = $8, status_changed_at = $9, revision = $10, blank = $11, parent = $12, record_json = $13, \
                     search = $15 \
                 WHERE tenant = $1 AND id = $2 AND revision = $16",
            $guard,
            " RETURNING 1 \
             ), dropped AS ( \
                 DELETE FROM session_labels WHERE tenant = $1 AND id = $2 AND EXISTS (SELECT 1 FROM session) \
                     AND label <> ALL($14::text[]) \
             ), kept AS ( \
                 INSERT INTO session_labels (tenant, id, label, status, blank, last_activity) \
                 SELECT $1, $2, label, $5, $11, $6 FROM session, unnest($14::text[]) AS label \
                 ON CONFLICT (tenant, id, label) DO UPDATE \
                     SET status = excluded.status, blank = excluded.blank, last_activity = excluded.last_activity \
             ) \
             SELECT count(*) FROM session"
        )
    };
}

const UPDATE: &str = update_session_sql!("WITH ", "");

/// `UPDATE`, committed without waiting for the WAL flush: the first CTE sets
/// `synchronous_commit = off` for this statement's implicit transaction, and the update
/// depends on it so it runs first.
const UPDATE_RELAXED: &str = update_session_sql!(
    "WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true) AS setting), ",
    " AND EXISTS (SELECT 1 FROM relaxed)"
);

const REVISION_OF: &str = "SELECT revision FROM sessions WHERE tenant = $1 AND id = $2";

const REMOVE: &str = "WITH session AS ( \
         DELETE FROM sessions WHERE tenant = $1 AND id = $2 AND revision = $3 RETURNING 1 \
     ), labels AS ( \
         DELETE FROM session_labels WHERE tenant = $1 AND id = $2 AND EXISTS (SELECT 1 FROM session) \
     ) \
     SELECT count(*) FROM session";

/// Adds keyed batches (parallel arrays) and raises the session's `indexed_until`, as one
/// statement; its count is 0 when the session has no record.
const INDEX_IDEMPOTENCY: &str = "WITH session AS ( \
         SELECT 1 FROM sessions WHERE tenant = $1 AND id = $2 \
     ), keys AS ( \
         INSERT INTO idempotency_keys (tenant, id, key, first_seq, events, digest) \
         SELECT $1, $2, batch.key, batch.first_seq, batch.events, batch.digest \
         FROM session, unnest($3::text[], $4::bigint[], $5::bigint[], $6::text[]) \
             AS batch (key, first_seq, events, digest) \
         ON CONFLICT DO NOTHING \
     ), mark AS ( \
         INSERT INTO idempotency_index (tenant, id, indexed_until) SELECT $1, $2, $7 FROM session \
         ON CONFLICT (tenant, id) DO UPDATE \
             SET indexed_until = GREATEST(idempotency_index.indexed_until, excluded.indexed_until) \
     ) \
     SELECT count(*) FROM session";

/// Every tenant that has had sessions, audit entries, a retention policy or memory: the
/// `tenants` registry (migration 3), which catalog writes fill in their own transaction.
/// Row-level security keeps the data tables from being read across tenants, so the
/// registry is what a sweep iterates.
const TENANTS: &str = "SELECT tenant FROM tenants ORDER BY tenant";

/// Locks the tenant's head row (creating a placeholder at seq -1 for a first entry,
/// which never survives the transaction) and returns it.
const LOCK_AUDIT_HEAD: &str = "INSERT INTO audit_heads (tenant, seq, hash) VALUES ($1, -1, '') \
     ON CONFLICT (tenant) DO UPDATE SET tenant = excluded.tenant RETURNING seq, hash";

const APPEND_AUDIT: &str = "WITH entry AS (INSERT INTO audit (tenant, seq, entry_json) VALUES ($1, $2, $3)) \
     UPDATE audit_heads SET seq = $2, hash = $4 WHERE tenant = $1";

/// The PostgreSQL `Catalog`. Cheap to clone.
#[derive(Clone, Debug)]
pub struct PostgresCatalog {
    db: Arc<Database>,
}

/// Something stored in the catalog's tables that berth could not have written.
fn corrupt(reason: String) -> Failure {
    Failure::Berth(Error::Corrupt {
        reason,
        location: berth_core::Location { artifact: "postgres:catalog".into(), offset: None, seq: None },
    })
}

fn decode<T: DeserializeOwned>(json: &str, what: &str) -> Result<T, Failure> {
    serde_json::from_str(json).map_err(|error| corrupt(format!("stored {what} does not decode: {error}")))
}

fn encode<T: serde::Serialize>(value: &T, what: &'static str) -> Result<String, Failure> {
    serde_json::to_string(value).map_err(|error| Failure::Berth(Error::invalid(what, error.to_string())))
}

/// A record's column values, in the order of `INSERT` / `UPDATE` ($1..$15).
struct Columns {
    tenant: String,
    id: String,
    user: String,
    project: Option<String>,
    status: String,
    last_activity: i64,
    lease_until: i64,
    created_at: i64,
    status_changed_at: i64,
    /// Revisions are only compared for equality: stored bit for bit.
    revision: i64,
    blank: bool,
    parent: Option<String>,
    record_json: String,
    labels: Vec<String>,
    /// `berth_catalog::search_column`.
    search: String,
}

impl Columns {
    fn of(record: &SessionRecord) -> Result<Columns, Failure> {
        let header = &record.header;
        Ok(Columns {
            tenant: header.scope.tenant.to_string(),
            id: header.id.to_string(),
            user: header.scope.user.to_string(),
            project: header.scope.project.as_ref().map(|project| project.to_string()),
            status: record.status.as_str().to_owned(),
            last_activity: time_column(record.last_activity),
            lease_until: time_column(record.lease_until),
            created_at: time_column(header.created_at),
            status_changed_at: time_column(record.status_changed_at),
            revision: record.revision.0 as i64,
            blank: record.blank,
            parent: header.parent.as_ref().map(|parent| parent.session.to_string()),
            record_json: encode(record, "session record")?,
            labels: record.labels.iter().cloned().collect(),
            search: berth_catalog::search_column(record),
        })
    }

    fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 15] {
        [
            &self.tenant,
            &self.id,
            &self.user,
            &self.project,
            &self.status,
            &self.last_activity,
            &self.lease_until,
            &self.created_at,
            &self.status_changed_at,
            &self.revision,
            &self.blank,
            &self.parent,
            &self.record_json,
            &self.labels,
            &self.search,
        ]
    }
}

/// What an audited change changes.
pub(crate) enum AuditedChange {
    Update(Box<SessionRecord>, Revision),
    Remove(SessionKey, Revision),
}

impl AuditedChange {
    fn key(&self) -> SessionKey {
        match self {
            AuditedChange::Update(record, _) => record.key(),
            AuditedChange::Remove(key, _) => key.clone(),
        }
    }
}

/// An audit row that already exists at the head's next seq means rows past the head:
/// the log was tampered with, so nothing is appended.
fn check_audit_insert(inserted: Result<u64, tokio_postgres::Error>, tenant: &str) -> Result<(), Failure> {
    match inserted {
        Err(error) if error.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {
            Err(Failure::Berth(Error::Corrupt {
                reason: format!("audit log of {tenant} holds an entry past its head"),
                location: berth_core::Location { artifact: "postgres:audit".into(), offset: None, seq: None },
            }))
        }
        outcome => outcome.map(|_| ()).map_err(Failure::from),
    }
}

/// Locks the tenant's audit head inside the caller's transaction (for a change that
/// appends its audit record later in the same transaction, like `memory_forget`).
pub(crate) async fn lock_audit_head<C: deadpool_postgres::GenericClient>(
    client: &C,
    tenant: &str,
) -> Result<(i64, String), Failure> {
    let lock = client.prepare_cached(LOCK_AUDIT_HEAD).await?;
    let head = client.query_one(&lock, &[&tenant]).await?;
    Ok((head.get(0), head.get(1)))
}

/// Appends one audit entry chained from `head` (locked by `lock_audit_head` in the same
/// transaction).
pub(crate) async fn append_audit_locked<C: deadpool_postgres::GenericClient>(
    client: &C,
    tenant: &str,
    head: (i64, String),
    draft: AuditDraft,
) -> Result<AuditEntry, Failure> {
    let (seq, hash) = head;
    let previous = if seq < 0 { None } else { Some((to_u64("audit seq", seq)?, hash.as_str())) };
    let entry = audit::chain(draft, previous);
    let entry_seq = to_i64("audit seq", entry.seq)?;
    let append = client.prepare_cached(APPEND_AUDIT).await?;
    let json = encode(&entry, "audit entry")?;
    let inserted = client.execute(&append, &[&tenant, &entry_seq, &json, &entry.hash]).await;
    check_audit_insert(inserted, tenant)?;
    Ok(entry)
}

/// One audited change inside the caller's transaction, which holds the tenant's audit
/// head (`lock_audit_head`; `head` is what it returned, advanced by each change that
/// succeeds): the session change if any — `Update` and `Remove` are compare-and-sets on
/// the revision — then its audit records chained from the head. On failure `head` is
/// left as it was (the caller rolls the change back).
pub(crate) async fn apply_audited<C: deadpool_postgres::GenericClient>(
    client: &C,
    tenant: &str,
    change: Option<AuditedChange>,
    audits: Vec<AuditDraft>,
    head: &mut (i64, String),
) -> Result<Vec<AuditEntry>, Failure> {
    if let Some(change) = change {
        apply_change(client, tenant, change).await?;
    }
    let mut chained = head.clone();
    let mut entries = Vec::with_capacity(audits.len());
    for draft in audits {
        // Chain from the recorded head, not from the last stored row: a truncated log
        // stays visibly truncated after the next append.
        let entry = append_audit_locked(client, tenant, chained.clone(), draft).await?;
        chained = (to_i64("audit seq", entry.seq)?, entry.hash.clone());
        entries.push(entry);
    }
    *head = chained;
    Ok(entries)
}

/// The session change of an audited change: a compare-and-set on the revision.
async fn apply_change<C: deadpool_postgres::GenericClient>(
    client: &C,
    tenant: &str,
    change: AuditedChange,
) -> Result<(), Failure> {
    let key = change.key();
    let id = key.id.to_string();
    let (expected, wellformed) = match &change {
        AuditedChange::Update(record, expected) => (*expected, record.revision.0 == expected.0.wrapping_add(1)),
        AuditedChange::Remove(_, expected) => (*expected, true),
    };
    let expected_column = expected.0 as i64;
    let changed: i64 = match &change {
        AuditedChange::Update(record, _) if wellformed => {
            let columns = Columns::of(record)?;
            let statement = client.prepare_cached(UPDATE).await?;
            let mut params = columns.params().to_vec();
            params.push(&expected_column);
            client.query_one(&statement, &params).await?.get(0)
        }
        AuditedChange::Update(..) => 0,
        AuditedChange::Remove(..) => {
            let statement = client.prepare_cached(REMOVE).await?;
            let removed: i64 = client.query_one(&statement, &[&tenant, &id, &expected_column]).await?.get(0);
            if removed == 1 {
                // The memory bound to the session goes with it.
                crate::memory::remove_bound(client, tenant, &id).await?;
            }
            removed
        }
    };
    if changed == 1 {
        return Ok(());
    }
    // The reference's checks, in its order: missing, stale, malformed.
    let row = client.query_opt(REVISION_OF, &[&tenant, &id]).await?;
    Err(Failure::Berth(match row.map(|row| row.get::<_, i64>(0)) {
        None => Error::session_not_found(&key.id),
        Some(stored) if stored as u64 != expected.0 => {
            Error::RevisionConflict { expected: expected.0, actual: stored as u64 }
        }
        Some(_) => Error::invalid("revision", "an update must carry expected + 1"),
    }))
}

type Work<T> = Pin<Box<dyn Future<Output = Result<T, Failure>> + Send>>;

impl PostgresCatalog {
    /// Connects a catalog with its own pool (see `PostgresBackend::catalog` to share one).
    pub async fn connect(url: &str, options: PostgresOptions) -> Result<PostgresCatalog> {
        let backend = crate::PostgresBackend::connect(url, options).await?;
        Ok(backend.catalog())
    }

    pub(crate) fn from_database(db: Arc<Database>) -> PostgresCatalog {
        PostgresCatalog { db }
    }

    pub(crate) async fn run<T: Send + 'static>(
        &self,
        operation: &'static str,
        work: impl FnOnce(Arc<Database>) -> Work<T>,
    ) -> Result<T> {
        let future = work(self.db.clone());
        self.db.exec.run(async move { future.await.map_err(|failure| failure.into_error(operation)) }).await
    }

    /// Compare-and-set with `statement` (`UPDATE`, or its relaxed-durability variant).
    async fn compare_and_set(&self, record: &SessionRecord, expected: Revision, statement: &'static str) -> Result<()> {
        let record = record.clone();
        self.run("update session", move |db| {
            Box::pin(async move {
                let columns = Columns::of(&record)?;
                let expected_column = expected.0 as i64;
                let wellformed = record.revision.0 == expected.0.wrapping_add(1);
                let tenant = columns.tenant.clone();
                let stored: Option<i64> = on_client(&db, "update session", &tenant, move |client| {
                    Box::pin(async move {
                        if wellformed {
                            let statement = client.prepare_cached(statement).await?;
                            let mut params = columns.params().to_vec();
                            params.push(&expected_column);
                            let updated: i64 = client.query_one(&statement, &params).await?.get(0);
                            if updated == 1 {
                                return Ok(Some(expected_column));
                            }
                        }
                        let row = client.query_opt(REVISION_OF, &[&columns.tenant, &columns.id]).await?;
                        Ok(row.map(|row| row.get(0)))
                    })
                })
                .await?;
                // The reference's checks, in its order: missing, stale, then malformed.
                let Some(stored) = stored else {
                    return Err(Failure::Berth(Error::session_not_found(&record.header.id)));
                };
                if stored as u64 != expected.0 {
                    return Err(Failure::Berth(Error::RevisionConflict {
                        expected: expected.0,
                        actual: stored as u64,
                    }));
                }
                if !wellformed {
                    return Err(Failure::Berth(Error::invalid("revision", "an update must carry expected + 1")));
                }
                Ok(())
            })
        })
        .await
    }

    /// A session change and its audit records in one transaction (`update_audited`,
    /// `remove_audited`), grouped with the tenant's concurrent audited changes
    /// (`commit.rs`).
    async fn change_audited(&self, change: AuditedChange, audits: Vec<AuditDraft>) -> Result<Vec<AuditEntry>> {
        let tenant = change.key().tenant.to_string();
        self.submit_audited(tenant, Some(change), audits).await
    }

    async fn submit_audited(
        &self,
        tenant: String,
        change: Option<AuditedChange>,
        audits: Vec<AuditDraft>,
    ) -> Result<Vec<AuditEntry>> {
        let db = self.db.clone();
        self.db.exec.run(async move { AuditedCommitter::submit(&db, tenant, change, audits).await }).await
    }

    /// A listing without a tenant (maintenance sweeps): row-level security lets no
    /// transaction read two tenants, so it is the per-tenant page of every registered
    /// tenant, merged in the reference order (activity descending, id descending, tenant
    /// ascending) and cut to the limit. One statement per tenant: maintenance only.
    async fn list_across_tenants(&self, query: &SessionQuery) -> Result<Vec<SessionRecord>> {
        let mut merged: Vec<SessionRecord> = Vec::new();
        for tenant in self.tenants().await? {
            let per_tenant = SessionQuery { tenant: Some(tenant), ..query.clone() };
            merged.extend(self.list(&per_tenant).await?);
        }
        merged.sort_by(|a, b| {
            (b.last_activity, &b.header.id)
                .cmp(&(a.last_activity, &a.header.id))
                .then_with(|| a.header.scope.tenant.cmp(&b.header.scope.tenant))
        });
        merged.truncate(query.limit);
        Ok(merged)
    }

    /// The query plan of a listing page (`EXPLAIN`), for plan checks and diagnostics.
    pub async fn explain_list(&self, query: &SessionQuery) -> Result<String> {
        let plan_tenant = query.tenant.as_ref().map_or_else(|| "-".to_owned(), |tenant| tenant.to_string());
        let mut query = query.clone();
        query.tenant = Some(TenantId::parse(&plan_tenant)?);
        let plan = listing::plan(&query).map_err(|failure| failure.into_error("explain listing"))?;
        self.run("explain listing", move |db| {
            Box::pin(async move {
                // A maintenance listing spans tenants tenant by tenant (see `list`); its
                // per-tenant plan is the one shown, for a placeholder tenant.
                let tenant = plan_tenant;
                let rows = on_client(&db, "explain listing", &tenant, move |client| {
                    Box::pin(async move { Ok(client.query(&format!("EXPLAIN {}", plan.sql), &plan.params()).await?) })
                })
                .await?;
                Ok(rows.iter().map(|row| row.get::<_, String>(0)).collect::<Vec<_>>().join("\n"))
            })
        })
        .await
    }

    /// Inserts several records in one transaction: all or none. For imports and seeding.
    pub async fn insert_many(&self, records: Vec<SessionRecord>) -> Result<()> {
        self.run("insert sessions", move |db| {
            Box::pin(async move {
                let columns: Vec<Columns> = records.iter().map(Columns::of).collect::<Result<_, _>>()?;
                let mut client = db.pooled("insert sessions").await?;
                let work = async {
                    let transaction = client.transaction().await?;
                    let statement = transaction.prepare_cached(INSERT).await?;
                    let skip = db.skipping_tenant_setting();
                    for (record, columns) in records.iter().zip(&columns) {
                        // Records may belong to several tenants: each insert runs under its
                        // own (a later SET LOCAL replaces an earlier one).
                        transaction.batch_execute(&crate::db::tenant_sql(&columns.tenant, false, true, skip)?).await?;
                        let inserted: i64 = transaction.query_one(&statement, &columns.params()).await?.get(0);
                        if inserted == 0 {
                            return Err(already_exists(record));
                        }
                    }
                    transaction.commit().await?;
                    Ok(())
                };
                // Bulk work: no client-side bound beyond the server's statement_timeout.
                let outcome = work.await;
                db.settle(client, &outcome);
                outcome
            })
        })
        .await
    }
}

fn already_exists(record: &SessionRecord) -> Failure {
    Failure::Berth(Error::AlreadyExists { what: "session", id: record.header.id.to_string() })
}

/// Runs one statement-sized unit on a pooled connection under the statement bound, in
/// one transaction for `tenant` (row-level security's per-transaction setting).
async fn on_client<T>(
    db: &Database,
    what: &'static str,
    tenant: &str,
    work: impl for<'c> FnOnce(
        &'c deadpool_postgres::Object,
    ) -> Pin<Box<dyn Future<Output = Result<T, Failure>> + Send + 'c>>,
) -> Result<T, Failure> {
    db.with_tenant(what, tenant, work).await
}

#[async_trait]
impl Catalog for PostgresCatalog {
    fn name(&self) -> &'static str {
        "postgres"
    }

    async fn insert(&self, record: &SessionRecord) -> Result<()> {
        let record = record.clone();
        self.run("insert session", move |db| {
            Box::pin(async move {
                let columns = Columns::of(&record)?;
                let tenant = columns.tenant.clone();
                let inserted: i64 = db
                    .with_tenant_registered("insert session", &tenant, move |client| {
                        Box::pin(async move {
                            let statement = client.prepare_cached(INSERT).await?;
                            Ok(client.query_one(&statement, &columns.params()).await?.get(0))
                        })
                    })
                    .await?;
                if inserted == 0 {
                    return Err(already_exists(&record));
                }
                Ok(())
            })
        })
        .await
    }

    async fn get(&self, key: &SessionKey) -> Result<Option<SessionRecord>> {
        let key = key.clone();
        self.run("get session", move |db| {
            Box::pin(async move {
                let tenant = key.tenant.to_string();
                let json: Option<String> = on_client(&db, "get session", &tenant, move |client| {
                    Box::pin(async move {
                        let statement = client
                            .prepare_cached("SELECT record_json FROM sessions WHERE tenant = $1 AND id = $2")
                            .await?;
                        let row = client.query_opt(&statement, &[&key.tenant.as_str(), &key.id.as_str()]).await?;
                        Ok(row.map(|row| row.get(0)))
                    })
                })
                .await?;
                json.map(|json| decode(&json, "session record")).transpose()
            })
        })
        .await
    }

    async fn update(&self, record: &SessionRecord, expected: Revision) -> Result<()> {
        self.compare_and_set(record, expected, UPDATE).await
    }

    /// An activity-only update commits with `synchronous_commit = off`: a power loss may
    /// lose the latest activity time, never a state change.
    async fn update_activity(&self, record: &SessionRecord, expected: Revision) -> Result<()> {
        self.compare_and_set(record, expected, UPDATE_RELAXED).await
    }

    async fn update_audited(
        &self,
        record: &SessionRecord,
        expected: Revision,
        audits: Vec<AuditDraft>,
    ) -> Result<Vec<AuditEntry>> {
        self.change_audited(AuditedChange::Update(Box::new(record.clone()), expected), audits).await
    }

    async fn remove_audited(
        &self,
        key: &SessionKey,
        expected: Revision,
        audits: Vec<AuditDraft>,
    ) -> Result<Vec<AuditEntry>> {
        self.change_audited(AuditedChange::Remove(key.clone(), expected), audits).await
    }

    async fn remove(&self, key: &SessionKey, expected: Revision) -> Result<()> {
        let key = key.clone();
        self.run("remove session", move |db| {
            Box::pin(async move {
                let expected_column = expected.0 as i64;
                let (tenant, id) = (key.tenant.to_string(), key.id.to_string());
                let tenant_setting = tenant.clone();
                let stored: Option<i64> = on_client(&db, "remove session", &tenant_setting, move |client| {
                    Box::pin(async move {
                        let removed: i64 = client.query_one(REMOVE, &[&tenant, &id, &expected_column]).await?.get(0);
                        if removed == 1 {
                            // The memory bound to the session goes with it.
                            crate::memory::remove_bound(client, &tenant, &id).await?;
                            return Ok(Some(expected_column));
                        }
                        let row = client.query_opt(REVISION_OF, &[&tenant, &id]).await?;
                        Ok(row.map(|row| row.get(0)))
                    })
                })
                .await?;
                match stored {
                    None => Err(Failure::Berth(Error::session_not_found(&key.id))),
                    Some(stored) if stored as u64 != expected.0 => {
                        Err(Failure::Berth(Error::RevisionConflict { expected: expected.0, actual: stored as u64 }))
                    }
                    Some(_) => Ok(()),
                }
            })
        })
        .await
    }

    async fn list(&self, query: &SessionQuery) -> Result<Vec<SessionRecord>> {
        if query.limit == 0 {
            return Ok(Vec::new());
        }
        let Some(tenant) = query.tenant.clone() else { return self.list_across_tenants(query).await };
        let plan = listing::plan(query).map_err(|failure| failure.into_error("list sessions"))?;
        self.run("list sessions", move |db| {
            Box::pin(async move {
                let rows = on_client(&db, "list sessions", tenant.as_str(), move |client| {
                    Box::pin(async move {
                        let statement = client.prepare_cached(&plan.sql).await?;
                        Ok(client.query(&statement, &plan.params()).await?)
                    })
                })
                .await?;
                rows.iter().map(|row| decode::<SessionRecord>(row.get(0), "session record")).collect()
            })
        })
        .await
    }

    async fn tenants(&self) -> Result<Vec<TenantId>> {
        self.run("list tenants", |db| {
            Box::pin(async move {
                // The registry is the one table any tenant may read (names only).
                let rows = db
                    .with_client("list tenants", |client| {
                        Box::pin(async move {
                            let statement = client.prepare_cached(TENANTS).await?;
                            Ok(client.query(&statement, &[]).await?)
                        })
                    })
                    .await?;
                rows.iter()
                    .map(|row| TenantId::parse(row.get(0)).map_err(|_| corrupt("stored tenant id is invalid".into())))
                    .collect()
            })
        })
        .await
    }

    async fn append_audit(&self, draft: AuditDraft) -> Result<AuditEntry> {
        let tenant = draft.tenant.to_string();
        let entries = self.submit_audited(tenant, None, vec![draft]).await?;
        entries
            .into_iter()
            .next()
            .ok_or_else(|| Error::Unavailable { reason: "postgres: append audit: no entry".into() })
    }

    async fn read_audit(&self, tenant: &TenantId, from_seq: u64, limit: usize) -> Result<Vec<AuditEntry>> {
        let tenant = tenant.to_string();
        let Ok(from_seq) = i64::try_from(from_seq) else { return Ok(Vec::new()) };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.run("read audit", move |db| {
            Box::pin(async move {
                let tenant_setting = tenant.clone();
                let rows = on_client(&db, "read audit", &tenant_setting, move |client| {
                    Box::pin(async move {
                        // Stored order is the seq column (the entry's position): a range
                        // read, never an OFFSET. A tampered entry is returned as stored.
                        let statement = client
                            .prepare_cached(
                                "SELECT entry_json FROM audit WHERE tenant = $1 AND seq >= $2 ORDER BY seq LIMIT $3",
                            )
                            .await?;
                        Ok(client.query(&statement, &[&tenant, &from_seq, &limit]).await?)
                    })
                })
                .await?;
                rows.iter().map(|row| decode::<AuditEntry>(row.get(0), "audit entry")).collect()
            })
        })
        .await
    }

    async fn audit_head(&self, tenant: &TenantId) -> Result<Option<(u64, String)>> {
        let tenant = tenant.to_string();
        self.run("read audit head", move |db| {
            Box::pin(async move {
                let tenant_setting = tenant.clone();
                let row = on_client(&db, "read audit head", &tenant_setting, move |client| {
                    Box::pin(async move {
                        let statement = client
                            .prepare_cached("SELECT seq, hash FROM audit_heads WHERE tenant = $1 AND seq >= 0")
                            .await?;
                        Ok(client.query_opt(&statement, &[&tenant]).await?)
                    })
                })
                .await?;
                row.map(|row| Ok((to_u64("audit seq", row.get(0))?, row.get(1)))).transpose()
            })
        })
        .await
    }

    async fn retention(&self, tenant: &TenantId) -> Result<Option<RetentionPolicy>> {
        let tenant = tenant.to_string();
        self.run("read retention", move |db| {
            Box::pin(async move {
                let tenant_setting = tenant.clone();
                let json: Option<String> = on_client(&db, "read retention", &tenant_setting, move |client| {
                    Box::pin(async move {
                        let row =
                            client.query_opt("SELECT policy_json FROM retention WHERE tenant = $1", &[&tenant]).await?;
                        Ok(row.map(|row| row.get(0)))
                    })
                })
                .await?;
                json.map(|json| decode(&json, "retention policy")).transpose()
            })
        })
        .await
    }

    async fn set_retention(&self, tenant: &TenantId, policy: &RetentionPolicy) -> Result<()> {
        let tenant = tenant.to_string();
        let json = encode(policy, "retention policy").map_err(|failure| failure.into_error("set retention"))?;
        self.run("set retention", move |db| {
            Box::pin(async move {
                let tenant_setting = tenant.clone();
                db.with_tenant_registered("set retention", &tenant_setting, move |client| {
                    Box::pin(async move {
                        client
                            .execute(
                                "INSERT INTO retention (tenant, policy_json) VALUES ($1, $2) \
                                 ON CONFLICT (tenant) DO UPDATE SET policy_json = excluded.policy_json",
                                &[&tenant, &json],
                            )
                            .await?;
                        Ok(())
                    })
                })
                .await
            })
        })
        .await
    }

    async fn idempotency_indexed_until(&self, session: &SessionKey) -> Result<Option<u64>> {
        let session = session.clone();
        self.run("read idempotency index", move |db| {
            Box::pin(async move {
                let tenant = session.tenant.to_string();
                let indexed_until: Option<i64> = on_client(&db, "read idempotency index", &tenant, move |client| {
                    Box::pin(async move {
                        let statement = client
                            .prepare_cached("SELECT indexed_until FROM idempotency_index WHERE tenant = $1 AND id = $2")
                            .await?;
                        let row =
                            client.query_opt(&statement, &[&session.tenant.as_str(), &session.id.as_str()]).await?;
                        Ok(row.map(|row| row.get(0)))
                    })
                })
                .await?;
                indexed_until.map(|seq| to_u64("indexed_until", seq)).transpose()
            })
        })
        .await
    }

    async fn idempotency_batch(&self, session: &SessionKey, key: &IdempotencyKey) -> Result<Option<KeyedBatch>> {
        let (session, key) = (session.clone(), key.clone());
        self.run("read idempotency key", move |db| {
            Box::pin(async move {
                let lookup = key.clone();
                let tenant = session.tenant.to_string();
                let row: Option<(i64, i64, String)> = on_client(&db, "read idempotency key", &tenant, move |client| {
                    Box::pin(async move {
                        let statement = client
                            .prepare_cached(
                                "SELECT first_seq, events, digest FROM idempotency_keys \
                                 WHERE tenant = $1 AND id = $2 AND key = $3",
                            )
                            .await?;
                        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                            [&session.tenant.as_str(), &session.id.as_str(), &lookup.as_str()];
                        let row = client.query_opt(&statement, &params).await?;
                        Ok(row.map(|row| (row.get(0), row.get(1), row.get(2))))
                    })
                })
                .await?;
                let Some((first_seq, events, digest)) = row else { return Ok(None) };
                let (first_seq, events) = (to_u64("first_seq", first_seq)?, to_u64("events", events)?);
                Ok(Some(KeyedBatch { key, first_seq, events, digest }))
            })
        })
        .await
    }

    async fn idempotency_keys(&self, session: &SessionKey, max: usize) -> Result<Option<Vec<IdempotencyKey>>> {
        let session = session.clone();
        let limit = i64::try_from(max).unwrap_or(i64::MAX - 1) + 1;
        self.run("read idempotency keys", move |db| {
            Box::pin(async move {
                let tenant = session.tenant.to_string();
                let texts: Vec<String> = on_client(&db, "read idempotency keys", &tenant, move |client| {
                    Box::pin(async move {
                        let statement = client
                            .prepare_cached("SELECT key FROM idempotency_keys WHERE tenant = $1 AND id = $2 LIMIT $3")
                            .await?;
                        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                            [&session.tenant.as_str(), &session.id.as_str(), &limit];
                        let rows = client.query(&statement, &params).await?;
                        Ok(rows.into_iter().map(|row| row.get(0)).collect())
                    })
                })
                .await?;
                if texts.len() > max {
                    return Ok(None);
                }
                let keys = texts.iter().map(|text| IdempotencyKey::parse(text)).collect::<Result<Vec<_>>>();
                keys.map(Some).map_err(|_| corrupt("stored idempotency key is invalid".into()))
            })
        })
        .await
    }

    async fn index_idempotency(&self, session: &SessionKey, batches: &[KeyedBatch], indexed_until: u64) -> Result<()> {
        let session = session.clone();
        let keys: Vec<String> = batches.iter().map(|batch| batch.key.to_string()).collect();
        let digests: Vec<String> = batches.iter().map(|batch| batch.digest.clone()).collect();
        let first_seqs =
            batches.iter().map(|batch| to_i64("first_seq", batch.first_seq)).collect::<Result<Vec<_>, _>>();
        let events = batches.iter().map(|batch| to_i64("events", batch.events)).collect::<Result<Vec<_>, _>>();
        self.run("index idempotency keys", move |db| {
            Box::pin(async move {
                let (first_seqs, events, indexed_until) =
                    (first_seqs?, events?, to_i64("indexed_until", indexed_until)?);
                let (tenant, id) = (session.tenant.to_string(), session.id.to_string());
                let tenant_setting = tenant.clone();
                let found: i64 = on_client(&db, "index idempotency keys", &tenant_setting, move |client| {
                    Box::pin(async move {
                        let statement = client.prepare_cached(INDEX_IDEMPOTENCY).await?;
                        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
                            [&tenant, &id, &keys, &first_seqs, &events, &digests, &indexed_until];
                        Ok(client.query_one(&statement, &params).await?.get(0))
                    })
                })
                .await?;
                if found == 0 {
                    return Err(Failure::Berth(Error::session_not_found(&session.id)));
                }
                Ok(())
            })
        })
        .await
    }
}
