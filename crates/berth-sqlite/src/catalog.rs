//! The `Catalog` contract on SQLite: rows in, records out. Every write is one
//! `BEGIN IMMEDIATE` transaction (see the crate docs for why that makes the
//! compare-and-set atomic across processes).

use crate::error::{is_unique_violation, Failure};
use crate::{listing, SqliteCatalog};
use async_trait::async_trait;
use berth_catalog::audit::{self, AuditDraft, AuditEntry};
use berth_catalog::{Catalog, RetentionPolicy, SessionQuery, SessionRecord};
use berth_core::{Error, IdempotencyKey, KeyedBatch, Result, Revision, SessionKey, TenantId, Timestamp};
use rusqlite::types::Value;
use rusqlite::{params_from_iter, Connection, OptionalExtension};
use serde::de::DeserializeOwned;

/// The compare-and-set update of one session (inside the caller's transaction).
fn update_in(transaction: &Connection, record: &SessionRecord, expected: Revision) -> Result<(), Failure> {
    let key = record.key();
    let stored = stored_revision(transaction, &key)?.ok_or_else(|| Error::session_not_found(&key.id))?;
    check_cas(stored, expected, record)?;
    transaction.prepare_cached(UPDATE_SESSION)?.execute(params_from_iter(session_values(record)?))?;
    transaction
        .prepare_cached("DELETE FROM session_labels WHERE tenant = ?1 AND id = ?2")?
        .execute((key.tenant.as_str(), key.id.as_str()))?;
    insert_labels(transaction, record)
}

fn remove_in(transaction: &Connection, key: &SessionKey, expected: Revision) -> Result<(), Failure> {
    let stored = stored_revision(transaction, key)?.ok_or_else(|| Error::session_not_found(&key.id))?;
    if stored != expected {
        return Err(Error::RevisionConflict { expected: expected.0, actual: stored.0 }.into());
    }
    // The label rows go with it (ON DELETE CASCADE); the memory bound to it too.
    transaction
        .prepare_cached("DELETE FROM sessions WHERE tenant = ?1 AND id = ?2")?
        .execute((key.tenant.as_str(), key.id.as_str()))?;
    crate::memory::remove_bound_in(transaction, &key.tenant, &key.id)
}

/// Appends one audit entry inside `transaction`, chained from the tenant's recorded head.
pub(crate) fn append_audit_in(transaction: &Connection, draft: AuditDraft) -> Result<AuditEntry, Failure> {
    let tenant = draft.tenant.clone();
    let head: Option<(i64, String)> = transaction
        .prepare_cached("SELECT seq, hash FROM audit_heads WHERE tenant = ?1")?
        .query_row([tenant.as_str()], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    // Chain from the recorded head, not from the last stored row: a truncated log stays
    // visibly truncated after the next append.
    let previous = match &head {
        Some((seq, hash)) => Some((seq_from_column(*seq)?, hash.as_str())),
        None => None,
    };
    let entry = audit::chain(draft, previous);
    let seq = seq_column(entry.seq)?;
    let insert = transaction
        .prepare_cached("INSERT INTO audit (tenant, seq, entry_json) VALUES (?1, ?2, ?3)")?
        .execute((tenant.as_str(), seq, encode(&entry, "audit entry")?));
    match insert {
        Err(error) if is_unique_violation(&error) => {
            return Err(Failure::Corrupt(format!("audit log of {tenant} holds an entry past its head")))
        }
        outcome => outcome?,
    };
    transaction
        .prepare_cached(
            "INSERT INTO audit_heads (tenant, seq, hash) VALUES (?1, ?2, ?3) \
             ON CONFLICT (tenant) DO UPDATE SET seq = excluded.seq, hash = excluded.hash",
        )?
        .execute((tenant.as_str(), seq, entry.hash.as_str()))?;
    Ok(entry)
}

/// A timestamp as an index column: exact up to `i64::MAX` ms, clamped beyond (the
/// record JSON keeps the exact value).
pub(crate) fn time_column(timestamp: Timestamp) -> i64 {
    i64::try_from(timestamp.0).unwrap_or(i64::MAX)
}

/// Revisions are only ever compared for equality, so they are stored bit for bit
/// (a revision above `i64::MAX` reads back as the same `u64`).
fn revision_column(revision: Revision) -> i64 {
    revision.0 as i64
}

fn revision_from_column(column: i64) -> Revision {
    Revision(column as u64)
}

fn seq_column(seq: u64) -> Result<i64, Failure> {
    i64::try_from(seq).map_err(|_| {
        Failure::Berth(Error::LimitExceeded {
            what: berth_core::limits::Limit::Seq,
            limit: i64::MAX as u64,
            actual: seq,
        })
    })
}

fn seq_from_column(column: i64) -> Result<u64, Failure> {
    u64::try_from(column).map_err(|_| Failure::Corrupt(format!("audit head holds a negative seq {column}")))
}

fn decode<T: DeserializeOwned>(json: &str, what: &str) -> Result<T, Failure> {
    serde_json::from_str(json).map_err(|_| Failure::Corrupt(format!("stored {what} does not decode")))
}

fn encode<T: serde::Serialize>(value: &T, what: &'static str) -> Result<String, Failure> {
    serde_json::to_string(value).map_err(|error| Failure::Berth(Error::invalid(what, error.to_string())))
}

/// Column order of `INSERT_SESSION` and `UPDATE_SESSION`.
fn session_values(record: &SessionRecord) -> Result<Vec<Value>, Failure> {
    let header = &record.header;
    let text = |text: &str| Value::Text(text.to_owned());
    let optional = |text: Option<&str>| text.map_or(Value::Null, |text| Value::Text(text.to_owned()));
    Ok(vec![
        text(header.scope.tenant.as_str()),
        text(header.id.as_str()),
        text(header.scope.user.as_str()),
        optional(header.scope.project.as_ref().map(|project| project.as_str())),
        text(record.status.as_str()),
        Value::Integer(time_column(record.last_activity)),
        Value::Integer(time_column(record.lease_until)),
        Value::Integer(time_column(header.created_at)),
        Value::Integer(time_column(record.status_changed_at)),
        Value::Integer(revision_column(record.revision)),
        Value::Integer(record.blank.into()),
        optional(header.parent.as_ref().map(|parent| parent.session.as_str())),
        Value::Text(encode(record, "session record")?),
        Value::Text(berth_catalog::search_column(record)),
    ])
}

const INSERT_SESSION: &str = "INSERT INTO sessions (tenant, id, user, project, status, last_activity, lease_until, \
     created_at, status_changed_at, revision, blank, parent, record_json, search) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

const UPDATE_SESSION: &str = "UPDATE sessions SET user = ?3, project = ?4, status = ?5, last_activity = ?6, \
     lease_until = ?7, created_at = ?8, status_changed_at = ?9, revision = ?10, blank = ?11, parent = ?12, \
     record_json = ?13, search = ?14 WHERE tenant = ?1 AND id = ?2";

fn insert_record(connection: &Connection, record: &SessionRecord) -> Result<(), Failure> {
    let values = session_values(record)?;
    match connection.prepare_cached(INSERT_SESSION)?.execute(params_from_iter(values)) {
        Err(error) if is_unique_violation(&error) => {
            return Err(Error::AlreadyExists { what: "session", id: record.header.id.to_string() }.into())
        }
        outcome => outcome?,
    };
    insert_labels(connection, record)
}

/// The label rows repeat the sort key, status and blank flag (see `schema`).
fn insert_labels(connection: &Connection, record: &SessionRecord) -> Result<(), Failure> {
    let mut insert = connection.prepare_cached(
        "INSERT INTO session_labels (tenant, id, label, status, blank, last_activity) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    let key = record.key();
    for label in &record.labels {
        insert.execute((
            key.tenant.as_str(),
            key.id.as_str(),
            label,
            record.status.as_str(),
            record.blank,
            time_column(record.last_activity),
        ))?;
    }
    Ok(())
}

fn stored_revision(connection: &Connection, key: &SessionKey) -> Result<Option<Revision>, Failure> {
    let revision = connection
        .prepare_cached("SELECT revision FROM sessions WHERE tenant = ?1 AND id = ?2")?
        .query_row((key.tenant.as_str(), key.id.as_str()), |row| row.get::<_, i64>(0))
        .optional()?;
    Ok(revision.map(revision_from_column))
}

/// The same checks, in the same order, as the reference (memory) catalog.
fn check_cas(stored: Revision, expected: Revision, record: &SessionRecord) -> Result<(), Failure> {
    if stored != expected {
        return Err(Error::RevisionConflict { expected: expected.0, actual: stored.0 }.into());
    }
    if record.revision.0 != expected.0.wrapping_add(1) {
        return Err(Error::invalid("revision", "an update must carry expected + 1").into());
    }
    Ok(())
}

impl SqliteCatalog {
    /// Inserts several new session records in one transaction: all or none
    /// (`AlreadyExists` names the first duplicate). For imports and seeding.
    pub async fn insert_many(&self, records: Vec<SessionRecord>) -> Result<()> {
        self.write("insert sessions", move |transaction| {
            records.iter().try_for_each(|record| insert_record(transaction, record))
        })
        .await
    }
}

/// Every tenant with sessions, audit entries, an audit head, a retention policy or
/// memory items (a usage row counting at least one).
/// `sessions` and `audit` are read with a skip-scan (one index seek per distinct
/// tenant) instead of reading every row.
const TENANTS: &str = "WITH RECURSIVE \
     session_tenants(tenant) AS ( \
         SELECT (SELECT min(tenant) FROM sessions) \
         UNION ALL \
         SELECT (SELECT min(tenant) FROM sessions WHERE tenant > t.tenant) FROM session_tenants AS t \
         WHERE t.tenant IS NOT NULL), \
     audit_tenants(tenant) AS ( \
         SELECT (SELECT min(tenant) FROM audit) \
         UNION ALL \
         SELECT (SELECT min(tenant) FROM audit WHERE tenant > t.tenant) FROM audit_tenants AS t \
         WHERE t.tenant IS NOT NULL) \
     SELECT tenant FROM session_tenants WHERE tenant IS NOT NULL \
     UNION SELECT tenant FROM audit_tenants WHERE tenant IS NOT NULL \
     UNION SELECT tenant FROM audit_heads \
     UNION SELECT tenant FROM retention \
     UNION SELECT tenant FROM memory_usage WHERE items > 0 \
     UNION SELECT tenant FROM memory_items WHERE id > (SELECT counted FROM memory_ids) \
     ORDER BY 1";

#[async_trait]
impl Catalog for SqliteCatalog {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    async fn insert(&self, record: &SessionRecord) -> Result<()> {
        let record = record.clone();
        self.write("insert session", move |transaction| insert_record(transaction, &record)).await
    }

    // One statement: its own snapshot, no BEGIN/COMMIT parsed around it (every append
    // reads its session's record).
    async fn get(&self, key: &SessionKey) -> Result<Option<SessionRecord>> {
        let key = key.clone();
        self.read_statement("get session", move |connection| {
            let json: Option<String> = connection
                .prepare_cached("SELECT record_json FROM sessions WHERE tenant = ?1 AND id = ?2")?
                .query_row((key.tenant.as_str(), key.id.as_str()), |row| row.get(0))
                .optional()?;
            json.map(|json| decode(&json, &format!("session record {key}"))).transpose()
        })
        .await
    }

    async fn update(&self, record: &SessionRecord, expected: Revision) -> Result<()> {
        let record = record.clone();
        self.write("update session", move |transaction| update_in(transaction, &record, expected)).await
    }

    async fn update_activity(&self, record: &SessionRecord, expected: Revision) -> Result<()> {
        let record = record.clone();
        self.write_relaxed("update session activity", move |transaction| update_in(transaction, &record, expected))
            .await
    }

    async fn remove(&self, key: &SessionKey, expected: Revision) -> Result<()> {
        let key = key.clone();
        self.write("remove session", move |transaction| remove_in(transaction, &key, expected)).await?;
        // The memory bound to it left changes for the search file.
        self.index_soon();
        Ok(())
    }

    async fn update_audited(
        &self,
        record: &SessionRecord,
        expected: Revision,
        audits: Vec<AuditDraft>,
    ) -> Result<Vec<AuditEntry>> {
        let record = record.clone();
        self.write("update session", move |transaction| {
            update_in(transaction, &record, expected)?;
            audits.into_iter().map(|draft| append_audit_in(transaction, draft)).collect()
        })
        .await
    }

    async fn remove_audited(
        &self,
        key: &SessionKey,
        expected: Revision,
        audits: Vec<AuditDraft>,
    ) -> Result<Vec<AuditEntry>> {
        let key = key.clone();
        let entries = self
            .write("remove session", move |transaction| {
                remove_in(transaction, &key, expected)?;
                audits.into_iter().map(|draft| append_audit_in(transaction, draft)).collect()
            })
            .await?;
        self.index_soon();
        Ok(entries)
    }

    async fn list(&self, query: &SessionQuery) -> Result<Vec<SessionRecord>> {
        if query.limit == 0 {
            return Ok(Vec::new());
        }
        let sub_queries = listing::plan(query);
        let limit = query.limit;
        self.read("list sessions", move |connection| {
            let mut rows: Vec<(i64, String, String, String)> = Vec::new();
            for sub_query in &sub_queries {
                let mut statement = connection.prepare_cached(&sub_query.sql)?;
                let mut cursor = statement.query(params_from_iter(sub_query.params.iter()))?;
                while let Some(row) = cursor.next()? {
                    rows.push((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?));
                }
            }
            if sub_queries.len() > 1 {
                // Merge the sub-queries' pages: the reference order; equal
                // (last_activity, id) in several tenants (tenant-less sweeps) by tenant.
                rows.sort_by(|a, b| (b.0, &b.1).cmp(&(a.0, &a.1)).then_with(|| a.2.cmp(&b.2)));
            }
            rows.truncate(limit);
            rows.iter().map(|row| decode::<SessionRecord>(&row.3, "session record")).collect()
        })
        .await
    }

    async fn tenants(&self) -> Result<Vec<TenantId>> {
        self.read("list tenants", |connection| {
            let mut statement = connection.prepare_cached(TENANTS)?;
            let mut rows = statement.query([])?;
            let mut tenants = Vec::new();
            while let Some(row) = rows.next()? {
                let text = row.get_ref(0)?.as_str()?;
                tenants
                    .push(TenantId::parse(text).map_err(|_| Failure::Corrupt("stored tenant id is invalid".into()))?);
            }
            Ok(tenants)
        })
        .await
    }

    async fn append_audit(&self, draft: AuditDraft) -> Result<AuditEntry> {
        self.write("append audit", move |transaction| append_audit_in(transaction, draft)).await
    }

    async fn read_audit(&self, tenant: &TenantId, from_seq: u64, limit: usize) -> Result<Vec<AuditEntry>> {
        let tenant = tenant.clone();
        let from_seq = i64::try_from(from_seq).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read("read audit", move |connection| {
            // Stored order is the seq column (the entry's position); in an intact log
            // position `n` holds seq `n`, so this is a range read, never an OFFSET.
            let mut statement = connection
                .prepare_cached("SELECT entry_json FROM audit WHERE tenant = ?1 AND seq >= ?2 ORDER BY seq LIMIT ?3")?;
            let mut rows = statement.query((tenant.as_str(), from_seq, limit))?;
            let mut entries = Vec::new();
            while let Some(row) = rows.next()? {
                entries.push(decode::<AuditEntry>(row.get_ref(0)?.as_str()?, "audit entry")?);
            }
            Ok(entries)
        })
        .await
    }

    async fn audit_head(&self, tenant: &TenantId) -> Result<Option<(u64, String)>> {
        let tenant = tenant.clone();
        self.read("read audit head", move |connection| {
            let head: Option<(i64, String)> = connection
                .prepare_cached("SELECT seq, hash FROM audit_heads WHERE tenant = ?1")?
                .query_row([tenant.as_str()], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()?;
            head.map(|(seq, hash)| Ok((seq_from_column(seq)?, hash))).transpose()
        })
        .await
    }

    async fn retention(&self, tenant: &TenantId) -> Result<Option<RetentionPolicy>> {
        let tenant = tenant.clone();
        self.read("read retention", move |connection| {
            let json: Option<String> = connection
                .prepare_cached("SELECT policy_json FROM retention WHERE tenant = ?1")?
                .query_row([tenant.as_str()], |row| row.get(0))
                .optional()?;
            json.map(|json| decode(&json, "retention policy")).transpose()
        })
        .await
    }

    async fn set_retention(&self, tenant: &TenantId, policy: &RetentionPolicy) -> Result<()> {
        let tenant = tenant.clone();
        let json = encode(policy, "retention policy").map_err(|failure| failure.into_error("set retention", ""))?;
        self.write("set retention", move |transaction| {
            transaction
                .prepare_cached(
                    "INSERT INTO retention (tenant, policy_json) VALUES (?1, ?2) \
                     ON CONFLICT (tenant) DO UPDATE SET policy_json = excluded.policy_json",
                )?
                .execute((tenant.as_str(), json))?;
            Ok(())
        })
        .await
    }

    async fn idempotency_indexed_until(&self, session: &SessionKey) -> Result<Option<u64>> {
        let session = session.clone();
        self.read("read idempotency index", move |connection| {
            let indexed_until: Option<i64> = connection
                .prepare_cached("SELECT indexed_until FROM idempotency_index WHERE tenant = ?1 AND id = ?2")?
                .query_row((session.tenant.as_str(), session.id.as_str()), |row| row.get(0))
                .optional()?;
            indexed_until.map(seq_from_column).transpose()
        })
        .await
    }

    async fn idempotency_batch(&self, session: &SessionKey, key: &IdempotencyKey) -> Result<Option<KeyedBatch>> {
        let (session, key) = (session.clone(), key.clone());
        self.read("read idempotency key", move |connection| {
            let row: Option<(i64, i64, String)> = connection
                .prepare_cached(
                    "SELECT first_seq, events, digest FROM idempotency_keys WHERE tenant = ?1 AND id = ?2 AND key = ?3",
                )?
                .query_row((session.tenant.as_str(), session.id.as_str(), key.as_str()), |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                })
                .optional()?;
            let Some((first_seq, events, digest)) = row else { return Ok(None) };
            Ok(Some(KeyedBatch {
                key,
                first_seq: seq_from_column(first_seq)?,
                events: seq_from_column(events)?,
                digest,
            }))
        })
        .await
    }

    async fn idempotency_keys(&self, session: &SessionKey, max: usize) -> Result<Option<Vec<IdempotencyKey>>> {
        let session = session.clone();
        self.read_statement("read idempotency keys", move |connection| {
            let mut statement =
                connection.prepare_cached("SELECT key FROM idempotency_keys WHERE tenant = ?1 AND id = ?2 LIMIT ?3")?;
            let limit = i64::try_from(max).unwrap_or(i64::MAX - 1) + 1;
            let mut rows = statement.query((session.tenant.as_str(), session.id.as_str(), limit))?;
            let mut keys = Vec::new();
            while let Some(row) = rows.next()? {
                let text = row.get_ref(0)?.as_str()?;
                keys.push(
                    IdempotencyKey::parse(text)
                        .map_err(|_| Failure::Corrupt("stored idempotency key is invalid".into()))?,
                );
            }
            Ok((keys.len() <= max).then_some(keys))
        })
        .await
    }

    async fn index_idempotency(&self, session: &SessionKey, batches: &[KeyedBatch], indexed_until: u64) -> Result<()> {
        let (session, batches) = (session.clone(), batches.to_vec());
        self.write("index idempotency keys", move |transaction| {
            let (tenant, id) = (session.tenant.as_str(), session.id.as_str());
            if stored_revision(transaction, &session)?.is_none() {
                return Err(Error::session_not_found(&session.id).into());
            }
            let mut insert = transaction.prepare_cached(
                "INSERT INTO idempotency_keys (tenant, id, key, first_seq, events, digest) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
            )?;
            for batch in &batches {
                let (first_seq, events) = (seq_column(batch.first_seq)?, seq_column(batch.events)?);
                insert.execute((tenant, id, batch.key.as_str(), first_seq, events, batch.digest.as_str()))?;
            }
            transaction
                .prepare_cached(
                    "INSERT INTO idempotency_index (tenant, id, indexed_until) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (tenant, id) DO UPDATE SET indexed_until = max(indexed_until, excluded.indexed_until)",
                )?
                .execute((tenant, id, seq_column(indexed_until)?))?;
            Ok(())
        })
        .await
    }
}
