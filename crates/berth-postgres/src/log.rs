//! `LogBackend` on PostgreSQL: session logs as `events` rows, one `session_heads` row per
//! session (header, committed next seq, writer lease), fenced appends.

use crate::catalog::PostgresCatalog;
use crate::db::{to_i64, to_u64, Database, Failure};
use crate::lease::{self, LeaseState};
use crate::notify::Hub;
use crate::schema::{self, MigrationReport, RoleReport};
use crate::PostgresOptions;
use async_trait::async_trait;
use berth_core::{Epoch, Error, Event, Location, Result, SessionHeader, SessionKey, WriteHolder};
use berth_store::{ChangeToken, ListQuery, LogBackend, LogReader, LogStat, LogWriter, TailRecovery};
use std::sync::Arc;
use std::time::Instant;

/// One statement, one implicit transaction: the fencing update of the head row (epoch
/// and expected next seq), then the event rows only if it matched. Its row count is the
/// number of events inserted (0: fenced, erased, or a seq mismatch; see `diagnose`).
const APPEND: &str = "WITH head AS ( \
         UPDATE session_heads SET next_seq = $4::bigint + cardinality($5::text[]) \
         WHERE tenant = $1 AND session_id = $2 AND epoch = $3::bigint AND next_seq = $4::bigint \
         RETURNING 1 \
     ) \
     INSERT INTO events (tenant, session_id, seq, epoch, event_type, ignorable, line) \
     SELECT $1, $2, $4::bigint + batch.ord - 1, $3::bigint, batch.event_type, batch.ignorable, batch.line \
     FROM head, unnest($5::text[], $6::text[], $7::bool[]) WITH ORDINALITY AS batch(line, event_type, ignorable, ord)";

/// Why an append matched nothing: the head as it is now, and the lines this epoch
/// stored in the batch's seq range (equal to the batch: an earlier attempt committed).
const DIAGNOSE: &str = "SELECT h.epoch, h.next_seq, ARRAY( \
         SELECT e.line FROM events e \
         WHERE e.tenant = $1 AND e.session_id = $2 AND e.seq >= $3 AND e.seq < $4 AND e.epoch = $5 \
         ORDER BY e.seq) \
     FROM session_heads h WHERE h.tenant = $1 AND h.session_id = $2";

/// Creates the head (holding the lease at epoch 1) and the first batch atomically.
const MATERIALIZE: &str = "WITH head AS ( \
         INSERT INTO session_heads \
             (tenant, session_id, user_id, project, header_json, epoch, holder, lease_until, next_seq) \
         VALUES ($1, $2, $3, $4, $5, 1, $6, now() + $7::bigint * interval '1 millisecond', cardinality($8::text[])) \
         ON CONFLICT DO NOTHING \
         RETURNING 1 \
     ), inserted AS ( \
         INSERT INTO events (tenant, session_id, seq, epoch, event_type, ignorable, line) \
         SELECT $1, $2, batch.ord - 1, 1, batch.event_type, batch.ignorable, batch.line \
         FROM head, unnest($8::text[], $9::text[], $10::bool[]) WITH ORDINALITY \
             AS batch(line, event_type, ignorable, ord) \
         RETURNING 1 \
     ) \
     SELECT (SELECT count(*) FROM head)";

const HEAD_OF: &str = "SELECT epoch, next_seq, holder FROM session_heads WHERE tenant = $1 AND session_id = $2";

const STAT: &str = "SELECT header_json, incarnation, next_seq FROM session_heads WHERE tenant = $1 AND session_id = $2";

const LIST: &str = "SELECT header_json, incarnation, next_seq FROM session_heads \
     WHERE tenant = $1 AND ($2::text IS NULL OR user_id = $2) AND ($3::text IS NULL OR project = $3) \
       AND ($4::text IS NULL OR session_id > $4) \
     ORDER BY session_id LIMIT $5";

const READ: &str = "SELECT seq, line FROM events \
     WHERE tenant = $1 AND session_id = $2 AND seq >= $3 AND seq < $4 ORDER BY seq";

/// The events at the seqs `$3` (an array): an index lookup per seq, one round trip.
const READ_SEQS: &str = "SELECT seq, line FROM events \
     WHERE tenant = $1 AND session_id = $2 AND seq = ANY($3) ORDER BY seq";

/// The last `$4` events before seq `$3`, newest first: a backward range scan of the
/// primary key `(tenant, session_id, seq)` that stops after `$4` rows. Public for the
/// plan check in `tests/backend.rs`.
pub const READ_BEFORE: &str = "SELECT seq, line FROM events \
     WHERE tenant = $1 AND session_id = $2 AND seq < $3 ORDER BY seq DESC LIMIT $4";

/// Erases a session whose lease is free or lapsed, with its events, atomically.
const ERASE: &str = "WITH head AS ( \
         DELETE FROM session_heads WHERE tenant = $1 AND session_id = $2 \
           AND (lease_until IS NULL OR lease_until < now()) \
         RETURNING 1 \
     ), erased AS ( \
         DELETE FROM events WHERE tenant = $1 AND session_id = $2 AND EXISTS (SELECT 1 FROM head) \
         RETURNING 1 \
     ) \
     SELECT (SELECT count(*) FROM head), (SELECT count(*) FROM erased), \
         EXISTS (SELECT 1 FROM session_heads WHERE tenant = $1 AND session_id = $2)";

fn location(key: &SessionKey, seq: Option<u64>) -> Location {
    Location { artifact: format!("postgres:events/{key}"), offset: None, seq }
}

pub(crate) fn decode_header(key: &SessionKey, json: &str) -> Result<SessionHeader, Failure> {
    #[derive(serde::Deserialize)]
    struct Version {
        version: u32,
    }
    // The version gate first, so a newer header is refused as newer, not as garbage.
    let version: Version = serde_json::from_str(json).map_err(|error| corrupt(key, None, error))?;
    berth_core::header::check_version(version.version, Some(location(key, None)))?;
    let header: SessionHeader = serde_json::from_str(json).map_err(|error| corrupt(key, None, error))?;
    if header.key() != *key {
        return Err(Failure::Berth(Error::Corrupt {
            reason: "stored header names another session".into(),
            location: location(key, None),
        }));
    }
    Ok(header)
}

pub(crate) fn decode_event(key: &SessionKey, seq: Option<u64>, line: &str) -> Result<Event, Failure> {
    let event: Event = serde_json::from_str(line).map_err(|error| corrupt(key, seq, error))?;
    if seq.is_some_and(|seq| seq != event.seq.get()) {
        return Err(Failure::Berth(Error::Corrupt {
            reason: format!("row at seq {seq:?} holds event seq {}", event.seq),
            location: location(key, seq),
        }));
    }
    Ok(event)
}

fn corrupt(key: &SessionKey, seq: Option<u64>, error: serde_json::Error) -> Failure {
    Failure::Berth(Error::Corrupt {
        reason: format!("stored record does not decode: {error}"),
        location: location(key, seq),
    })
}

/// A batch as the statements take it: parallel arrays.
#[derive(Clone, Debug)]
pub(crate) struct EncodedBatch {
    pub(crate) lines: Vec<String>,
    types: Vec<String>,
    ignorables: Vec<bool>,
}

impl EncodedBatch {
    pub(crate) fn new(batch: &[Event]) -> EncodedBatch {
        EncodedBatch {
            lines: batch.iter().map(Event::to_canonical_json).collect(),
            types: batch.iter().map(|event| event.event_type.as_str().to_owned()).collect(),
            ignorables: batch.iter().map(|event| event.ignorable).collect(),
        }
    }

    fn len(&self) -> u64 {
        self.lines.len() as u64
    }
}

/// The PostgreSQL `LogBackend`. Cheap to clone; clones share the pool.
#[derive(Clone, Debug)]
pub struct PostgresBackend {
    pub(crate) db: Arc<Database>,
    hub: Arc<Hub>,
}

impl PostgresBackend {
    /// Connects (lazily: the pool opens connections on demand), applies pending
    /// migrations when `options.migrate`, and otherwise checks the schema version.
    pub async fn connect(url: &str, options: PostgresOptions) -> Result<PostgresBackend> {
        let db = Arc::new(Database::new(url, options)?);
        let migrate = db.options.migrate;
        let work_db = db.clone();
        db.exec
            .run(async move {
                let outcome =
                    if migrate { migrate_with(&work_db).await.map(|_| ()) } else { check_schema(&work_db).await };
                outcome.map_err(|failure| failure.into_error("open database"))?;
                check_writable(&work_db).await.map_err(|failure| failure.into_error("open database"))
            })
            .await?;
        let hub = Hub::new(db.clone());
        Ok(PostgresBackend { db, hub })
    }

    /// A backend that has not looked at the database yet: no connection, no schema
    /// check. For `berth migrate`, which brings the schema up to date itself.
    pub fn connect_unchecked(url: &str, options: PostgresOptions) -> Result<PostgresBackend> {
        let db = Arc::new(Database::new(url, options)?);
        let hub = Hub::new(db.clone());
        Ok(PostgresBackend { db, hub })
    }

    /// The catalog on the same database, sharing this backend's pool.
    pub fn catalog(&self) -> PostgresCatalog {
        PostgresCatalog::from_database(self.db.clone())
    }

    /// Grants `role` what serving needs (data access bounded by the row-level security
    /// policies, reading the schema version) and nothing it could use to leave them:
    /// `berth migrate --app-role ROLE`, run as the owner after migrating. Idempotent.
    pub async fn grant_app_role(&self, role: &str) -> Result<()> {
        let db = self.db.clone();
        let role = role.to_owned();
        self.db
            .exec
            .run(async move {
                db.with_client("grant app role", move |client| {
                    Box::pin(async move { schema::grant_app_role(client, &role).await })
                })
                .await
                .map_err(|failure| failure.into_error("grant app role"))
            })
            .await
    }

    /// Who this backend connects as: superuser, `BYPASSRLS`, tables it owns.
    pub async fn role_report(&self) -> Result<RoleReport> {
        let db = self.db.clone();
        self.db
            .exec
            .run(async move {
                db.with_client("check role", |client| Box::pin(async move { schema::role_report(client).await }))
                    .await
                    .map_err(|failure| failure.into_error("check role"))
            })
            .await
    }

    /// The serving self-check (reliability test 33): `Invalid` if this backend's role is
    /// a superuser, has `BYPASSRLS`, or owns a berth table — any of which would take the
    /// second wall (row-level security) down. `berth serve` runs it unless told
    /// `--dev-allow-db-owner`.
    pub async fn check_serving_role(&self) -> Result<RoleReport> {
        let report = self.role_report().await?;
        match report.refusal() {
            None => Ok(report),
            Some(reason) => Err(Error::invalid(
                "database role",
                format!(
                    "{reason}: row-level security would not bind it. Serve as an app role without those rights \
                     (`berth migrate --app-role ROLE` as the owner grants one what it needs), or pass \
                     --dev-allow-db-owner for local development only"
                ),
            )),
        }
    }

    /// Test fault hook (reliability test 34): while set, this backend's transactions
    /// begin *without* setting the tenant, as if that step had been forgotten. Never set
    /// outside tests; the row-level security policies then make every statement fail.
    pub fn fault_skip_tenant_setting(&self, skip: bool) {
        self.db.skip_tenant_setting.store(skip, std::sync::atomic::Ordering::Relaxed);
    }

    /// Applies pending migrations (what `berth migrate` runs).
    pub async fn migrate(&self) -> Result<MigrationReport> {
        let db = self.db.clone();
        self.db.exec.run(async move { migrate_with(&db).await.map_err(|failure| failure.into_error("migrate")) }).await
    }

    /// Waits for new events without polling hard: the receiver holds the session's
    /// committed next seq and changes when an append commits, in this process (at once)
    /// or in another one (through `LISTEN`/`NOTIFY`, with a slow backstop re-read).
    pub async fn subscribe(&self, key: &SessionKey) -> Result<tokio::sync::watch::Receiver<u64>> {
        self.hub.subscribe(key).await
    }

    /// Wakes this process's subscribers of `key` as if its log now ended before
    /// `next_seq` (never lowers what they know). Appends through this backend do this
    /// themselves; a server uses it to wake tails for other reasons (a deleted session).
    pub fn announce(&self, key: &SessionKey, next_seq: u64) {
        self.hub.publish_local(key, next_seq);
    }

    /// The concrete writer (tests use `PostgresWriter::abandon` to simulate a crash).
    pub async fn open_postgres_writer(&self, key: &SessionKey) -> Result<PostgresWriter> {
        let db = self.db.clone();
        let work_key = key.clone();
        // One token for every attempt: an attempt whose reply was lost took the lease
        // for this token, and the next attempt re-takes it (`OR holder = $token`).
        let holder = self.db.holder_token();
        let attempts = self.db.options.append_attempts.max(1);
        let (acquired, sent) = self
            .db
            .exec
            .run(async move {
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    let sent = Instant::now();
                    match lease::acquire(&db, &work_key, &holder).await {
                        Ok(acquired) => return Ok((acquired, sent)),
                        Err(failure) if failure.is_retryable() && attempt < attempts => {
                            tracing::warn!(session = %work_key, ?failure, "lease acquisition failed; retrying");
                        }
                        Err(failure) => return Err(failure.into_error("open writer")),
                    }
                }
            })
            .await?;
        Ok(PostgresWriter::start(self, key.clone(), acquired.header, acquired.next_seq, acquired.epoch, sent))
    }

    /// Unique per backend instance (the prefix of its lease holder tokens).
    pub fn instance(&self) -> &str {
        &self.db.instance
    }

    pub fn options(&self) -> &PostgresOptions {
        &self.db.options
    }

    async fn run<T, F>(&self, operation: &'static str, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Database>) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, Failure>> + Send>>
            + Send
            + 'static,
    {
        let db = self.db.clone();
        self.db.exec.run(async move { work(db).await.map_err(|failure| failure.into_error(operation)) }).await
    }
}

async fn migrate_with(db: &Database) -> Result<MigrationReport, Failure> {
    let limit = db.options.statement_timeout;
    let mut client = db.timed("migrate", limit, db.client()).await?;
    // Waiting for another process's migration is not a stall: no client-side bound
    // beyond the server's statement_timeout.
    schema::migrate(&mut client).await
}

/// Refuses a server that does not accept writes (reliability test 30): berth never
/// writes through a replica. A write refused later with SQLSTATE 25006 (a failover)
/// maps to the same `ReadOnlyDatabase`.
async fn check_writable(db: &Database) -> Result<(), Failure> {
    let reason = db
        .with_client("check writable", |client| Box::pin(async move { schema::read_only_reason(client).await }))
        .await?;
    match reason {
        Some(reason) => Err(Failure::Berth(crate::db::read_only_database(reason))),
        None => Ok(()),
    }
}

async fn check_schema(db: &Database) -> Result<(), Failure> {
    db.with_client("check schema", |client| {
        Box::pin(async move {
            let version = schema::stored_version(client).await?;
            schema::check_version(version)?;
            if version < schema::SCHEMA_VERSION {
                return Err(Failure::Berth(Error::Unavailable {
                    reason: format!(
                        "database schema is at version {version}, this berth needs {}: run `berth migrate`",
                        schema::SCHEMA_VERSION
                    ),
                }));
            }
            Ok(())
        })
    })
    .await
}

fn stat_of(key: Option<&SessionKey>, row: &tokio_postgres::Row) -> Result<LogStat, Failure> {
    let json: &str = row.get(0);
    let header = match key {
        Some(key) => decode_header(key, json)?,
        None => serde_json::from_str::<SessionHeader>(json).map_err(|error| {
            Failure::Berth(Error::Corrupt {
                reason: format!("stored header does not decode: {error}"),
                location: Location { artifact: "postgres:session_heads".into(), offset: None, seq: None },
            })
        })?,
    };
    let incarnation: i64 = row.get(1);
    let next_seq = to_u64("next seq", row.get(2))?;
    Ok(LogStat {
        header,
        change_token: ChangeToken(format!("postgres:{incarnation}:{next_seq}")),
        event_count: Some(next_seq),
        size_bytes: None,
    })
}

/// Reads `offset .. offset + length` of a session's committed log.
async fn read_events(db: &Database, key: &SessionKey, offset: u64, length: u64) -> Result<Vec<Event>, Failure> {
    let Ok(start) = i64::try_from(offset) else { return Ok(Vec::new()) };
    let end = i64::try_from(offset.saturating_add(length)).unwrap_or(i64::MAX);
    if end <= start {
        return Ok(Vec::new());
    }
    let (tenant, session) = (key.tenant.to_string(), key.id.to_string());
    let rows = db
        .with_tenant("read events", key.tenant.as_str(), move |client| {
            Box::pin(async move {
                let statement = client.prepare_cached(READ).await?;
                Ok(client.query(&statement, &[&tenant, &session, &start, &end]).await?)
            })
        })
        .await?;
    let mut events = Vec::with_capacity(rows.len());
    for (index, row) in rows.iter().enumerate() {
        let expected = offset + index as u64;
        let seq = to_u64("seq", row.get(0))?;
        if seq != expected {
            return Err(Failure::Berth(Error::Corrupt {
                reason: format!("log has a gap: expected seq {expected}, found {seq}"),
                location: location(key, Some(expected)),
            }));
        }
        events.push(decode_event(key, Some(seq), row.get(1))?);
    }
    Ok(events)
}

/// The events at `seqs` (distinct, ascending) of a session's committed log, in one
/// query: those of the longest prefix of `seqs` below its end. A seq left out while a
/// later one is there is a gap (`Corrupt`), as `read_events` finds one.
async fn read_events_at(db: &Database, key: &SessionKey, seqs: &[u64]) -> Result<Vec<Event>, Failure> {
    // A seq beyond `i64` is past the end of any log.
    let asked: Vec<i64> = seqs.iter().map_while(|seq| i64::try_from(*seq).ok()).collect();
    if asked.is_empty() {
        return Ok(Vec::new());
    }
    let (tenant, session) = (key.tenant.to_string(), key.id.to_string());
    let rows = db
        .with_tenant("read events", key.tenant.as_str(), move |client| {
            Box::pin(async move {
                let statement = client.prepare_cached(READ_SEQS).await?;
                Ok(client.query(&statement, &[&tenant, &session, &asked]).await?)
            })
        })
        .await?;
    let mut events = Vec::with_capacity(rows.len());
    for (row, expected) in rows.iter().zip(seqs) {
        let seq = to_u64("seq", row.get(0))?;
        if seq != *expected {
            return Err(gap(key, *expected, seq));
        }
        events.push(decode_event(key, Some(seq), row.get(1))?);
    }
    Ok(events)
}

/// Up to `limit` events before seq `before`, in ascending order (R-S15).
async fn read_events_before(db: &Database, key: &SessionKey, before: u64, limit: u64) -> Result<Vec<Event>, Failure> {
    let before = i64::try_from(before).unwrap_or(i64::MAX);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    if before == 0 || limit == 0 {
        return Ok(Vec::new());
    }
    let (tenant, session) = (key.tenant.to_string(), key.id.to_string());
    let rows = db
        .with_tenant("read events", key.tenant.as_str(), move |client| {
            Box::pin(async move {
                let statement = client.prepare_cached(READ_BEFORE).await?;
                Ok(client.query(&statement, &[&tenant, &session, &before, &limit]).await?)
            })
        })
        .await?;
    let mut events = Vec::with_capacity(rows.len());
    for row in rows.iter().rev() {
        let seq = to_u64("seq", row.get(0))?;
        let expected = events.last().map_or(seq, |event: &Event| event.seq.get() + 1);
        if seq != expected {
            return Err(gap(key, expected, seq));
        }
        events.push(decode_event(key, Some(seq), row.get(1))?);
    }
    // Fewer rows than asked for means the log starts inside them: at seq 0.
    let first = events.first().map_or(0, |event| event.seq.get());
    if (events.len() as i64) < limit && first != 0 {
        return Err(gap(key, 0, first));
    }
    Ok(events)
}

fn gap(key: &SessionKey, expected: u64, found: u64) -> Failure {
    Failure::Berth(Error::Corrupt {
        reason: format!("log has a gap: expected seq {expected}, found {found}"),
        location: location(key, Some(expected)),
    })
}

#[async_trait]
impl LogBackend for PostgresBackend {
    fn name(&self) -> &'static str {
        "postgres"
    }

    async fn stat(&self, key: &SessionKey) -> Result<Option<LogStat>> {
        let key = key.clone();
        self.run("stat", move |db| {
            Box::pin(async move {
                let (tenant, session) = (key.tenant.to_string(), key.id.to_string());
                let row = db
                    .with_tenant("stat", key.tenant.as_str(), move |client| {
                        Box::pin(async move {
                            let statement = client.prepare_cached(STAT).await?;
                            Ok(client.query_opt(&statement, &[&tenant, &session]).await?)
                        })
                    })
                    .await?;
                row.map(|row| stat_of(Some(&key), &row)).transpose()
            })
        })
        .await
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<LogStat>> {
        let query = query.clone();
        self.run("list", move |db| {
            Box::pin(async move {
                let limit = to_i64("page size", query.limit as u64)?;
                let tenant = query.tenant.clone();
                let rows = db
                    .with_tenant("list", tenant.as_str(), move |client| {
                        Box::pin(async move {
                            let statement = client.prepare_cached(LIST).await?;
                            let user = query.user.as_ref().map(|user| user.as_str());
                            let project = query.project.as_ref().map(|project| project.as_str());
                            let after = query.after.as_ref().map(|after| after.as_str());
                            Ok(client
                                .query(&statement, &[&query.tenant.as_str(), &user, &project, &after, &limit])
                                .await?)
                        })
                    })
                    .await?;
                rows.iter().map(|row| stat_of(None, row)).collect()
            })
        })
        .await
    }

    async fn open_reader(&self, key: &SessionKey) -> Result<Box<dyn LogReader>> {
        let header = self.stat(key).await?.ok_or_else(|| Error::session_not_found(&key.id))?.header;
        Ok(Box::new(PostgresReader { db: self.db.clone(), key: key.clone(), header }))
    }

    async fn open_writer(&self, key: &SessionKey) -> Result<Box<dyn LogWriter>> {
        Ok(Box::new(self.open_postgres_writer(key).await?))
    }

    async fn materialize(&self, header: &SessionHeader, first_batch: &[Event]) -> Result<Box<dyn LogWriter>> {
        let key = header.key();
        let header_json = serde_json::to_string(header).map_err(|error| Error::invalid("header", error.to_string()))?;
        let batch = EncodedBatch::new(first_batch);
        let holder = self.db.holder_token();
        let sent = Instant::now();
        let work_key = key.clone();
        let project = header.scope.project.as_ref().map(|project| project.to_string());
        let user = header.scope.user.to_string();
        let attempts = self.db.options.append_attempts.max(1);
        let epoch = self
            .run("materialize", move |db| {
                Box::pin(async move {
                    let mut attempt = 0;
                    loop {
                        attempt += 1;
                        let outcome =
                            materialize_once(&db, &work_key, &user, project.as_deref(), &header_json, &holder, &batch)
                                .await;
                        match outcome {
                            Err(failure) if failure.is_retryable() && attempt < attempts => {
                                tracing::warn!(session = %work_key, ?failure, "materialize failed; retrying");
                            }
                            outcome => return outcome,
                        }
                    }
                })
            })
            .await?;
        let writer = PostgresWriter::start(self, key.clone(), header.clone(), first_batch.len() as u64, epoch, sent);
        if !first_batch.is_empty() {
            self.hub.appended(&key, first_batch.len() as u64);
        }
        Ok(Box::new(writer))
    }

    async fn erase(&self, key: &SessionKey) -> Result<bool> {
        let key = key.clone();
        self.run("erase", move |db| {
            Box::pin(async move {
                let (tenant, session) = (key.tenant.to_string(), key.id.to_string());
                let row = db
                    .with_tenant("erase", key.tenant.as_str(), move |client| {
                        Box::pin(async move { Ok(client.query_one(ERASE, &[&tenant, &session]).await?) })
                    })
                    .await?;
                let (heads, still_there): (i64, bool) = (row.get(0), row.get(2));
                match (heads, still_there) {
                    (1, _) => Ok(true),
                    (_, true) => Err(Failure::Berth(Error::AlreadyOwned {
                        id: key.id.to_string(),
                        holder: WriteHolder::AnotherProcess,
                    })),
                    _ => Ok(false),
                }
            })
        })
        .await
    }
}

/// One materialization attempt. A conflict with a head this same holder token created
/// (an earlier attempt whose reply was lost) counts as success.
async fn materialize_once(
    db: &Database,
    key: &SessionKey,
    user: &str,
    project: Option<&str>,
    header_json: &str,
    holder: &str,
    batch: &EncodedBatch,
) -> Result<u64, Failure> {
    let ttl = crate::db::millis(db.options.lease_ttl);
    let (user, project, header_json, holder_token) =
        (user.to_owned(), project.map(str::to_owned), header_json.to_owned(), holder.to_owned());
    let (lines, types, ignorables) = (batch.lines.clone(), batch.types.clone(), batch.ignorables.clone());
    let (tenant, session) = (key.tenant.to_string(), key.id.to_string());
    let row = db
        .with_tenant("materialize", key.tenant.as_str(), move |client| {
            Box::pin(async move {
                let statement = client.prepare_cached(MATERIALIZE).await?;
                let created = client
                    .query_one(
                        &statement,
                        &[
                            &tenant,
                            &session,
                            &user,
                            &project,
                            &header_json,
                            &holder_token,
                            &ttl,
                            &lines,
                            &types,
                            &ignorables,
                        ],
                    )
                    .await?;
                let created: i64 = created.get(0);
                if created == 1 {
                    return Ok(None);
                }
                Ok(client.query_opt(HEAD_OF, &[&tenant, &session]).await?)
            })
        })
        .await?;
    match row {
        None => Ok(1),
        Some(row) if row.get::<_, Option<&str>>(2) == Some(holder) => to_u64("epoch", row.get(0)),
        Some(_) => Err(Failure::Berth(Error::AlreadyExists { what: "session", id: key.id.to_string() })),
    }
}

/// One append attempt: the fenced statement, then, if it matched nothing, the reason.
async fn append_once(
    db: &Database,
    key: &SessionKey,
    epoch: i64,
    first: i64,
    batch: &EncodedBatch,
) -> Result<(), Failure> {
    let (tenant, session) = (key.tenant.as_str(), key.id.as_str());
    let begin = crate::db::begin_for_tenant(tenant, db.skipping_tenant_setting())?;
    let client = db.pooled("append").await?;
    let work = async {
        let statement = client.prepare_cached(APPEND).await?;
        // `BEGIN; SET LOCAL berth.tenant`, the fenced statement and `COMMIT` are sent
        // together, before any reply is read (tokio-postgres sends a request when its
        // future is first polled, and `join!` polls in order): still one round trip, and
        // still one atomic unit whose outcome is exactly "committed" or "not" — the
        // unknown-outcome diagnosis below (tests t25–t27) relies on that. A failed
        // statement aborts the transaction, and the pipelined `COMMIT` then rolls back.
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
            [&tenant, &session, &epoch, &first, &batch.lines, &batch.types, &batch.ignorables];
        let (began, inserted, committed) = futures_util::join!(
            client.batch_execute(&begin),
            client.execute(&statement, &params),
            client.batch_execute("COMMIT"),
        );
        let inserted = match inserted {
            Ok(inserted) => Ok(inserted),
            // Rows past the head's next seq (only possible through a bypass): the
            // diagnosis below tells an identical retry from a conflict.
            Err(error) if error.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => Ok(0),
            Err(error) => Err(Failure::from(error)),
        };
        // Any failure that leaves the outcome unknown (a dead connection) wins, so the
        // connection is discarded and the retry diagnoses; otherwise the first failure.
        let (began, committed) = (began.map_err(Failure::from), committed.map_err(Failure::from));
        if let (Ok(()), Ok(inserted), Ok(())) = (&began, &inserted, &committed) {
            return Ok(*inserted);
        }
        let mut failures: Vec<Failure> = [began.err(), inserted.err(), committed.err()].into_iter().flatten().collect();
        match failures.iter().position(Failure::poisons_connection) {
            Some(position) => Err(failures.swap_remove(position)),
            None => Err(failures.remove(0)),
        }
    };
    let outcome = db.timed("append", db.options.statement_timeout, work).await;
    db.settle(client, &outcome);
    let count = outcome?;
    if count == batch.len() {
        return Ok(());
    }
    diagnose(db, key, epoch, first, batch).await
}

/// Why an append matched nothing: already applied (an earlier attempt of the same
/// batch committed), fenced, erased, or a seq conflict.
async fn diagnose(
    db: &Database,
    key: &SessionKey,
    epoch: i64,
    first: i64,
    batch: &EncodedBatch,
) -> Result<(), Failure> {
    let (tenant, session) = (key.tenant.as_str(), key.id.as_str());
    let end = first.saturating_add(batch.len() as i64);
    let (tenant, session) = (tenant.to_owned(), session.to_owned());
    let row = db
        .with_tenant("append", key.tenant.as_str(), move |client| {
            Box::pin(async move { Ok(client.query_opt(DIAGNOSE, &[&tenant, &session, &first, &end, &epoch]).await?) })
        })
        .await?;
    let Some(row) = row else {
        return Err(Failure::Berth(lease::lost_error(key, epoch as u64, None)));
    };
    let (current, next_seq, stored): (i64, i64, Vec<String>) = (row.get(0), row.get(1), row.get(2));
    if stored == batch.lines {
        tracing::info!(session = %key, first, "append retry found the batch already committed");
        return Ok(());
    }
    if current != epoch {
        return Err(Failure::Berth(lease::lost_error(key, epoch as u64, Some(current as u64))));
    }
    Err(Failure::Berth(Error::SeqConflict { expected: next_seq as u64, actual: first as u64 }))
}

struct PostgresReader {
    db: Arc<Database>,
    key: SessionKey,
    header: SessionHeader,
}

#[async_trait]
impl LogReader for PostgresReader {
    fn header(&self) -> &SessionHeader {
        &self.header
    }

    async fn read(&mut self, offset: u64, length: u64) -> Result<Vec<Event>> {
        let (db, key) = (self.db.clone(), self.key.clone());
        self.db
            .exec
            .run(async move { read_events(&db, &key, offset, length).await.map_err(|failure| failure.into_error("read")) })
            .await
    }

    async fn read_before(&mut self, before: u64, limit: u64) -> Result<Vec<Event>> {
        let (db, key) = (self.db.clone(), self.key.clone());
        self.db
            .exec
            .run(async move {
                read_events_before(&db, &key, before, limit).await.map_err(|failure| failure.into_error("read"))
            })
            .await
    }

    async fn read_seqs(&mut self, seqs: &[u64]) -> Result<Vec<Event>> {
        let (db, key, seqs) = (self.db.clone(), self.key.clone(), seqs.to_vec());
        self.db
            .exec
            .run(async move { read_events_at(&db, &key, &seqs).await.map_err(|failure| failure.into_error("read")) })
            .await
    }
}

/// A write handle's backend half: holds the lease, renews it in the background.
pub struct PostgresWriter {
    db: Arc<Database>,
    hub: Arc<Hub>,
    key: SessionKey,
    header: SessionHeader,
    next_seq: u64,
    epoch: u64,
    lease: Arc<LeaseState>,
    renewal: Option<tokio::task::JoinHandle<()>>,
    released: bool,
}

impl std::fmt::Debug for PostgresWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PostgresWriter({}, epoch {})", self.key, self.epoch)
    }
}

impl PostgresWriter {
    fn start(
        backend: &PostgresBackend,
        key: SessionKey,
        header: SessionHeader,
        next_seq: u64,
        epoch: u64,
        sent: Instant,
    ) -> PostgresWriter {
        let db = backend.db.clone();
        let lease = LeaseState::new(&db, sent);
        let renewal = db.exec.spawn(lease::renew_loop(db.clone(), key.clone(), epoch, lease.clone()));
        if next_seq > 0 {
            // A materialization that stored events, or an open of a non-empty log: local
            // subscribers learn the length; only new events are worth a notification.
            backend.hub.publish_local(&key, next_seq);
        }
        PostgresWriter { db, hub: backend.hub.clone(), key, header, next_seq, epoch, lease, renewal, released: false }
    }

    fn check_usable(&self, operation: &'static str) -> Result<()> {
        if self.released {
            return Err(Error::HandleClosed { id: self.key.id.to_string(), operation });
        }
        self.lease.check(&self.key)
    }

    fn stop_renewal(&mut self) {
        if let Some(renewal) = self.renewal.take() {
            renewal.abort();
        }
    }

    /// Simulates a crash of the holder: stops renewing and forgets the writer without
    /// clearing the lease, which then lapses after its TTL. For tests.
    pub fn abandon(mut self) {
        self.stop_renewal();
        self.released = true;
    }

    /// Whether this writer may still append, without asking the database.
    pub fn check(&self) -> Result<()> {
        self.check_usable("append")
    }
}

#[async_trait]
impl LogWriter for PostgresWriter {
    fn header(&self) -> &SessionHeader {
        &self.header
    }

    fn next_seq(&self) -> u64 {
        self.next_seq
    }

    fn epoch(&self) -> Epoch {
        Epoch(self.epoch)
    }

    fn recovery(&self) -> Option<TailRecovery> {
        None
    }

    async fn read(&mut self, offset: u64, length: u64) -> Result<Vec<Event>> {
        if self.released {
            return Err(Error::HandleClosed { id: self.key.id.to_string(), operation: "read" });
        }
        let (db, key) = (self.db.clone(), self.key.clone());
        self.db
            .exec
            .run(async move { read_events(&db, &key, offset, length).await.map_err(|failure| failure.into_error("read")) })
            .await
    }

    async fn read_seqs(&mut self, seqs: &[u64]) -> Result<Vec<Event>> {
        if self.released {
            return Err(Error::HandleClosed { id: self.key.id.to_string(), operation: "read" });
        }
        let (db, key, seqs) = (self.db.clone(), self.key.clone(), seqs.to_vec());
        self.db
            .exec
            .run(async move { read_events_at(&db, &key, &seqs).await.map_err(|failure| failure.into_error("read")) })
            .await
    }

    async fn append(&mut self, batch: &[Event]) -> Result<()> {
        self.check_usable("append")?;
        if batch.is_empty() {
            return Ok(());
        }
        let encoded = EncodedBatch::new(batch);
        let (db, key, lease) = (self.db.clone(), self.key.clone(), self.lease.clone());
        let epoch = i64::try_from(self.epoch).unwrap_or(i64::MAX);
        let first = i64::try_from(self.next_seq).map_err(|_| Error::LimitExceeded {
            what: berth_core::limits::Limit::Seq,
            limit: i64::MAX as u64,
            actual: self.next_seq,
        })?;
        let attempts = self.db.options.append_attempts.max(1);
        let outcome = self
            .db
            .exec
            .run(async move {
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    match append_once(&db, &key, epoch, first, &encoded).await {
                        Err(failure) if failure.is_retryable() && attempt < attempts && lease.check(&key).is_ok() => {
                            tracing::warn!(session = %key, first, ?failure, "append outcome unknown; retrying the same batch");
                        }
                        outcome => return outcome.map_err(|failure| failure.into_error("append")),
                    }
                }
            })
            .await;
        match outcome {
            Ok(()) => {
                self.next_seq += batch.len() as u64;
                self.hub.appended(&self.key, self.next_seq);
                Ok(())
            }
            Err(error) => {
                if matches!(error, Error::Fenced { .. } | Error::OwnershipLost { .. }) {
                    self.lease.lose(error.clone());
                }
                Err(error)
            }
        }
    }

    /// Every append commits with the server's durability (`synchronous_commit`), so
    /// there is nothing left to flush.
    async fn sync(&mut self) -> Result<()> {
        if self.released {
            return Err(Error::HandleClosed { id: self.key.id.to_string(), operation: "flush" });
        }
        Ok(())
    }

    async fn release(&mut self) -> Result<()> {
        if self.released {
            return Ok(());
        }
        self.released = true;
        self.stop_renewal();
        let (db, key, epoch) = (self.db.clone(), self.key.clone(), self.epoch);
        self.db
            .exec
            .run(async move { lease::release(&db, &key, epoch).await.map_err(|failure| failure.into_error("release")) })
            .await
    }
}

impl Drop for PostgresWriter {
    /// Dropped without `release`: stop renewing and clear the lease in the background
    /// (if no runtime is left, the lease lapses after its TTL).
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.stop_renewal();
        let (db, key, epoch) = (self.db.clone(), self.key.clone(), self.epoch);
        let _ = self.db.exec.spawn(async move {
            if let Err(failure) = lease::release(&db, &key, epoch).await {
                tracing::warn!(session = %key, ?failure, "release of a dropped writer failed; the lease will lapse");
            }
        });
    }
}
