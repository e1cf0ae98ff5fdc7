//! W3: many sessions of a few events each; list them all (paged, through
//! `SessionService::list`), fetch one (record + events), and create new ones durably.
//! Reference: SQLite, a plain table of sessions with an index on (tenant, last activity)
//! and a table of events, paged by keyset like berth's catalog.
//!
//! The listed sessions are *seeded*: catalog records in bulk (`insert_many`) and logs
//! through the LogStore on a file layer that skips fsync, because creating 10,000
//! sessions durably one by one would take minutes and measure only fsync. The durable
//! create path is measured separately (the `create` rows), in another tenant so the
//! listed set stays the same size.

use super::{elapsed_us, rotation};
use crate::fixtures::{self, invalid, io, sql, BENCH_EPOCH_MS};
use crate::payload::chat_event;
use crate::report::{Figure, Measurement};
use berth_catalog::memory::MemoryCatalog;
use berth_catalog::{Catalog, SessionRecord};
use berth_core::lifecycle::Status;
use berth_core::{Clock, Result, Revision, SessionId, SystemClock, TenantId, Timestamp};
use berth_service::{AppendRequest, CreateSession, ListRequest, NewEvent, Principal, SessionService};
use berth_sqlite::SqliteCatalog;
use berth_store::LogStore;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

pub const REFERENCE: &str = "sqlite plain table + index";
const CREATE_TENANT: &str = "bench-create";
/// Concurrent clients of the concurrent-create rows (issue 17's W3 target).
pub const CREATE_CLIENTS: usize = 8;
const PER_CONNECTION: &str = "sqlite, a connection per client (busy_timeout)";
/// The concurrent-create row of berth with each catalog write a transaction of its own
/// (`SqliteOptions::group_commit` off): what group commit buys, in the same run.
const NO_GROUP_COMMIT: &str = "berth service · SQLite catalog + jsonl, group commit off";

pub fn concurrent_create_name(events: usize) -> String {
    format!("W3 create, {CREATE_CLIENTS} concurrent clients (session + {events} events, durable)")
}

/// Issue 17's W3 target: concurrent creates at least half SQLite's rate.
pub fn targets(events: usize) -> Vec<crate::report::Target> {
    vec![crate::report::Target {
        workload: concurrent_create_name(events),
        variant: "berth service · SQLite catalog + jsonl".into(),
        goal: crate::report::Goal::RatioAtLeast { versus: REFERENCE.into(), ratio: 0.5 },
        text: "W3 concurrent creates (8 clients) ≥ 0.5× SQLite".into(),
    }]
}

/// Session `index` of a seeded set: ids sort like their index, activity grows with it.
pub fn session_id(index: u64) -> String {
    format!("s{index:08}")
}

/// A catalog record as the service would have it after `events` conversation events.
pub fn seeded_record(index: u64, events: u64) -> SessionRecord {
    let now = SystemClock.now();
    let activity = Timestamp(BENCH_EPOCH_MS + index);
    SessionRecord {
        header: fixtures::header(&session_id(index)),
        status: Status::Active,
        // Far ahead of the wall clock, so no access finds the lease lapsed.
        lease_until: now.plus_ms(10 * 365 * 24 * 3600 * 1000),
        last_activity: activity,
        revision: Revision(1),
        title: Some(format!("bench session {index}")),
        labels: BTreeSet::new(),
        event_count: events,
        blank: false,
        runs: Vec::new(),
        status_changed_at: activity,
        resume_mark: Default::default(),
        repair: Default::default(),
        creator: None,
    }
}

struct Target {
    label: &'static str,
    service: Arc<SessionService>,
}

pub struct Listing {
    sessions: usize,
    events: usize,
    page: usize,
    fetches: usize,
    creates: usize,
    created: u64,
    berth: Vec<Target>,
    /// The first target's stack with group commit off, in a data directory of its own
    /// (it only creates).
    no_group_commit: Arc<SessionService>,
    reference: rusqlite::Connection,
    reference_path: std::path::PathBuf,
    list: Vec<Measurement>,
    fetch: Vec<Measurement>,
    create: Vec<Measurement>,
    /// The same creates by `CREATE_CLIENTS` concurrent clients (group commit's case).
    create_concurrent: Vec<Measurement>,
    _dir: tempfile::TempDir,
}

impl Listing {
    pub async fn prepare(dir: &Path, sizes: &crate::Sizes) -> Result<Listing> {
        let (sessions, events) = (sizes.list_sessions, sizes.list_events);
        let dir = tempfile::tempdir_in(dir).map_err(io("tempdir"))?;
        let jsonl_root = dir.path().join("embedded");
        let (seeding_store, _) = fixtures::jsonl_store_unsynced(&jsonl_root)?;
        seed_logs(&seeding_store, sessions, events).await?;
        drop(seeding_store);
        let catalog = SqliteCatalog::open(jsonl_root.join(berth_sqlite::CATALOG_FILE_NAME))?;
        seed_catalog(&catalog, sessions, events).await?;
        let memory_store = fixtures::memory_store();
        seed_logs(&memory_store, sessions, events).await?;
        let memory_catalog = MemoryCatalog::new();
        for index in 0..sessions as u64 {
            memory_catalog.insert(&seeded_record(index, events as u64)).await?;
        }
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let berth = vec![
            Target {
                label: "berth service · SQLite catalog + jsonl",
                service: Arc::new(SessionService::new(
                    fixtures::jsonl_store(&jsonl_root)?,
                    Arc::new(catalog),
                    clock.clone(),
                )),
            },
            Target {
                label: "berth service · memory catalog + store",
                service: Arc::new(SessionService::new(memory_store, Arc::new(memory_catalog), clock)),
            },
        ];
        let serial_root = dir.path().join("no-group-commit");
        let serial_options = berth_sqlite::SqliteOptions { group_commit: false, ..Default::default() };
        std::fs::create_dir_all(&serial_root).map_err(io("create dir"))?;
        let serial_catalog =
            SqliteCatalog::open_with(serial_root.join(berth_sqlite::CATALOG_FILE_NAME), serial_options)?;
        let no_group_commit = Arc::new(SessionService::new(
            fixtures::jsonl_store(&serial_root)?,
            Arc::new(serial_catalog),
            Arc::new(SystemClock),
        ));
        let reference_path = dir.path().join("reference.sqlite");
        let reference = prepare_reference(&reference_path, sessions, events)?;
        let names = [
            format!("W3 list all ({sessions} sessions, pages of {})", sizes.list_page),
            format!("W3 fetch one (record + {events} events)"),
            format!("W3 create (session + {events} events, durable)"),
            concurrent_create_name(events),
        ];
        let measurements = |name: &str, figure, unit: &str| -> Vec<Measurement> {
            std::iter::once(REFERENCE)
                .chain(berth.iter().map(|target| target.label))
                .enumerate()
                .map(|(index, label)| Measurement::new(name, label, index == 0, figure, unit))
                .collect()
        };
        Ok(Listing {
            sessions,
            events,
            page: sizes.list_page,
            fetches: sizes.fetches,
            creates: sizes.creates,
            created: 0,
            list: measurements(&names[0], Figure::Time, "ms"),
            fetch: measurements(&names[1], Figure::Throughput, "fetches"),
            create: measurements(&names[2], Figure::Throughput, "sessions"),
            create_concurrent: {
                let mut rows = measurements(&names[3], Figure::Throughput, "sessions");
                rows.push(Measurement::new(&names[3], PER_CONNECTION, false, Figure::Throughput, "sessions"));
                rows.push(Measurement::new(&names[3], NO_GROUP_COMMIT, false, Figure::Throughput, "sessions"));
                rows
            },
            berth,
            no_group_commit,
            reference,
            reference_path,
            _dir: dir,
        })
    }

    pub async fn round(&mut self, round: usize) -> Result<()> {
        for index in rotation(self.list.len(), round) {
            self.list_round(index).await?;
        }
        for index in rotation(self.fetch.len(), round) {
            let latencies = self.fetch_round(index, round).await?;
            self.fetch[index].record_round(&latencies, 1);
        }
        for index in rotation(self.create.len(), round) {
            let latencies = self.create_round(index).await?;
            self.create[index].record_round(&latencies, 1);
        }
        for index in rotation(self.create_concurrent.len(), round) {
            let (latencies, seconds) = self.concurrent_create_round(index).await?;
            let measurement = &mut self.create_concurrent[index];
            measurement.record_throughput(latencies.len() as f64, seconds);
            measurement.latencies_us.extend(latencies);
        }
        Ok(())
    }

    /// `creates` creates split over `CREATE_CLIENTS` concurrent clients, each create its
    /// own transaction: for the reference, threads sharing one connection behind a mutex
    /// (SQLite's best for separate transactions: one writer at a time anyway); tasks
    /// sharing the service for berth; and, as extra rows, threads with a connection each
    /// (SQLite's writers then queue on the database lock, its busy handler sleeping), and
    /// berth with its catalog's group commit off (each write a transaction of its own).
    /// Per-create latencies and the wall time of them all.
    async fn concurrent_create_round(&mut self, index: usize) -> Result<(Vec<f64>, f64)> {
        let ids: Vec<Vec<String>> = (0..CREATE_CLIENTS)
            .map(|client| {
                (0..self.creates.div_ceil(CREATE_CLIENTS))
                    .map(|n| format!("p{:08}", self.created + (n * CREATE_CLIENTS + client) as u64 + 1))
                    .collect()
            })
            .collect();
        self.created += (self.creates.div_ceil(CREATE_CLIENTS) * CREATE_CLIENTS) as u64;
        let events = self.events;
        let started = Instant::now();
        let mut latencies = Vec::new();
        let per_connection = index == self.berth.len() + 1;
        if index == 0 || per_connection {
            let path = self.reference_path.clone();
            // The reference's one connection; the per-connection row opens one per thread.
            let shared = match per_connection {
                true => None,
                false => Some(std::sync::Arc::new(std::sync::Mutex::new(fixtures::sqlite_open(&path)?))),
            };
            let threads: Vec<_> = ids
                .into_iter()
                .map(|ids| {
                    let (path, shared) = (path.clone(), shared.clone());
                    std::thread::spawn(move || -> Result<Vec<f64>> {
                        let connection = match shared {
                            Some(shared) => shared,
                            None => {
                                let own = fixtures::sqlite_open(&path)?;
                                own.busy_timeout(std::time::Duration::from_secs(30)).map_err(sql)?;
                                std::sync::Arc::new(std::sync::Mutex::new(own))
                            }
                        };
                        let mut latencies = Vec::with_capacity(ids.len());
                        for id in ids {
                            let started = Instant::now();
                            let mut connection = connection.lock().map_err(|_| invalid("reference lock poisoned"))?;
                            reference_create(&mut connection, &id, events)?;
                            drop(connection);
                            latencies.push(elapsed_us(started));
                        }
                        Ok(latencies)
                    })
                })
                .collect();
            for thread in threads {
                latencies.extend(thread.join().map_err(|_| invalid("a reference create thread panicked"))??);
            }
        } else {
            let service = self.concurrent_service(index);
            let mut tasks = tokio::task::JoinSet::new();
            for ids in ids {
                let service = service.clone();
                tasks.spawn(async move {
                    let mut latencies = Vec::with_capacity(ids.len());
                    for id in ids {
                        let started = Instant::now();
                        create_one(&service, &id, events).await?;
                        latencies.push(elapsed_us(started));
                    }
                    Ok::<_, berth_core::Error>(latencies)
                });
            }
            while let Some(joined) = tasks.join_next().await {
                latencies.extend(joined.map_err(|e| invalid(format!("a create task: {e}")))??);
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        if index > 0 && !per_connection {
            self.concurrent_service(index).shutdown().await?;
        }
        Ok((latencies, seconds))
    }

    /// The service of concurrent-create row `index` (a berth row: neither the reference
    /// nor the connection-per-client row).
    fn concurrent_service(&self, index: usize) -> Arc<SessionService> {
        match self.berth.get(index - 1) {
            Some(target) => target.service.clone(),
            None => self.no_group_commit.clone(),
        }
    }

    async fn list_round(&mut self, index: usize) -> Result<()> {
        let started = Instant::now();
        let (listed, pages) = match index {
            0 => reference_list_all(&self.reference, self.page)?,
            _ => list_all(&self.berth[index - 1].service, self.page).await?,
        };
        let measurement = &mut self.list[index];
        measurement.rounds_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        measurement.latencies_us.extend(pages);
        if listed != self.sessions {
            return Err(invalid(format!("{} listed {listed} of {} sessions", measurement.variant, self.sessions)));
        }
        Ok(())
    }

    async fn fetch_round(&mut self, index: usize, round: usize) -> Result<Vec<f64>> {
        let mut latencies = Vec::with_capacity(self.fetches);
        for fetch in 0..self.fetches {
            // A spread of sessions, different each round (7919 is prime).
            let session = ((round * self.fetches + fetch) as u64 * 7919) % self.sessions as u64;
            let started = Instant::now();
            let events = match index {
                0 => reference_fetch(&self.reference, &session_id(session))?,
                _ => fetch_one(&self.berth[index - 1].service, &session_id(session)).await?,
            };
            latencies.push(elapsed_us(started));
            if events != self.events {
                return Err(invalid(format!("fetched {events} of {} events", self.events)));
            }
        }
        Ok(latencies)
    }

    async fn create_round(&mut self, index: usize) -> Result<Vec<f64>> {
        let mut latencies = Vec::with_capacity(self.creates);
        for _ in 0..self.creates {
            self.created += 1;
            let id = format!("c{:08}", self.created);
            let started = Instant::now();
            match index {
                0 => reference_create(&mut self.reference, &id, self.events)?,
                _ => create_one(&self.berth[index - 1].service, &id, self.events).await?,
            }
            latencies.push(elapsed_us(started));
        }
        if index > 0 {
            // Closes the write handles the appends left cached (not timed).
            self.berth[index - 1].service.shutdown().await?;
        }
        Ok(latencies)
    }

    pub async fn finish(self) -> Result<Vec<Measurement>> {
        self.no_group_commit.shutdown().await?;
        for target in &self.berth {
            target.service.shutdown().await?;
        }
        Ok(self.list.into_iter().chain(self.fetch).chain(self.create).chain(self.create_concurrent).collect())
    }
}

/// Writes `sessions` logs of `events` chat events each through `store`.
pub async fn seed_logs(store: &LogStore, sessions: usize, events: usize) -> Result<()> {
    let batch: Vec<_> = (0..events as u64).map(chat_event).collect();
    for index in 0..sessions as u64 {
        let handle = store.create(fixtures::header(&session_id(index))).await?;
        handle.append(&batch).await?;
        handle.close().await?;
    }
    Ok(())
}

/// Inserts records `from..to` in transactions of 5,000.
pub async fn seed_catalog_range(catalog: &SqliteCatalog, from: u64, to: u64, events: u64) -> Result<()> {
    let mut start = from;
    while start < to {
        let end = (start + 5_000).min(to);
        catalog.insert_many((start..end).map(|index| seeded_record(index, events)).collect()).await?;
        start = end;
    }
    Ok(())
}

async fn seed_catalog(catalog: &SqliteCatalog, sessions: usize, events: usize) -> Result<()> {
    seed_catalog_range(catalog, 0, sessions as u64, events as u64).await
}

/// Pages through every session of the bench tenant; (sessions listed, µs per page).
pub async fn list_all(service: &SessionService, page: usize) -> Result<(usize, Vec<f64>)> {
    let principal = fixtures::service_principal();
    let mut request = ListRequest { limit: Some(page), ..ListRequest::default() };
    let (mut listed, mut latencies) = (0, Vec::new());
    loop {
        let started = Instant::now();
        let result = service.list(&principal, &request).await?;
        latencies.push(elapsed_us(started));
        listed += result.items.len();
        match result.next_cursor {
            Some(cursor) => request.cursor = Some(cursor),
            None => return Ok((listed, latencies)),
        }
    }
}

async fn fetch_one(service: &SessionService, id: &str) -> Result<usize> {
    let principal = fixtures::service_principal();
    let id = SessionId::parse(id)?;
    let record = service.get(&principal, &id).await?;
    let events = service.read(&principal, &id, 0, None).await?;
    debug_assert_eq!(record.event_count, events.len() as u64);
    Ok(events.len())
}

async fn create_one(service: &SessionService, id: &str, events: usize) -> Result<()> {
    let principal = Principal { tenant: TenantId::parse(CREATE_TENANT)?, ..fixtures::service_principal() };
    let id = SessionId::parse(id)?;
    let request = CreateSession { id: Some(id.clone()), ..CreateSession::default() };
    service.create(&principal, request).await?;
    let events = (0..events as u64)
        .map(|seq| {
            let event = chat_event(seq);
            NewEvent {
                event_type: event.event_type.as_str().to_owned(),
                data: event.data,
                time: None,
                ignorable: false,
            }
        })
        .collect();
    service
        .append(
            &principal,
            &id,
            AppendRequest { memory: Vec::new(), run: None, expected_seq: None, events, idempotency_key: None },
        )
        .await?;
    Ok(())
}

fn prepare_reference(path: &Path, sessions: usize, events: usize) -> Result<rusqlite::Connection> {
    let connection = reference_schema(path)?;
    reference_insert_range(&connection, 0, sessions as u64, events)?;
    Ok(connection)
}

/// The reference's tables: sessions (keyed by tenant and id, indexed by activity) and
/// events (`fixtures::sqlite_open`).
pub fn reference_schema(path: &Path) -> Result<rusqlite::Connection> {
    let connection = fixtures::sqlite_open(path)?;
    connection
        .execute_batch(
            "CREATE TABLE sessions (tenant TEXT NOT NULL, id TEXT NOT NULL, last_activity INTEGER NOT NULL,
                                    body TEXT NOT NULL, PRIMARY KEY (tenant, id));
             CREATE INDEX sessions_by_activity ON sessions (tenant, last_activity DESC, id DESC);",
        )
        .map_err(sql)?;
    Ok(connection)
}

/// Inserts the seeded sessions `from..to` (with `events` events each), 5,000 per transaction.
pub fn reference_insert_range(connection: &rusqlite::Connection, from: u64, to: u64, events: usize) -> Result<()> {
    let mut start = from;
    while start < to {
        let end = (start + 5_000).min(to);
        let transaction = connection.unchecked_transaction().map_err(sql)?;
        for index in start..end {
            insert_reference_session(&transaction, &seeded_record(index, events as u64), events)?;
        }
        transaction.commit().map_err(sql)?;
        start = end;
    }
    Ok(())
}

fn insert_reference_session(
    transaction: &rusqlite::Transaction<'_>,
    record: &SessionRecord,
    events: usize,
) -> Result<()> {
    let body = serde_json::to_string(record).map_err(|e| invalid(e.to_string()))?;
    let id = record.header.id.to_string();
    transaction
        .prepare_cached("INSERT INTO sessions VALUES (?1, ?2, ?3, ?4)")
        .and_then(|mut insert| {
            insert.execute(rusqlite::params![
                record.header.scope.tenant.to_string(),
                id,
                record.last_activity.0 as i64,
                body
            ])
        })
        .map_err(sql)?;
    let mut insert = transaction.prepare_cached("INSERT INTO events VALUES (?1, ?2, ?3)").map_err(sql)?;
    for seq in 0..events as u64 {
        insert.execute(rusqlite::params![id, seq as i64, chat_event(seq).to_canonical_json()]).map_err(sql)?;
    }
    Ok(())
}

/// Keyset pagination over the plain table, parsing each row's JSON.
pub fn reference_list_all(connection: &rusqlite::Connection, page: usize) -> Result<(usize, Vec<f64>)> {
    let mut cursor: Option<(i64, String)> = None;
    let (mut listed, mut latencies) = (0, Vec::new());
    loop {
        let started = Instant::now();
        let rows = reference_page(connection, fixtures::TENANT, cursor.as_ref(), page)?;
        latencies.push(elapsed_us(started));
        listed += rows.len();
        match rows.last() {
            Some(last) if rows.len() == page => cursor = Some(last.clone()),
            _ => return Ok((listed, latencies)),
        }
    }
}

/// One page after `cursor` (last activity, id), newest first.
pub fn reference_page(
    connection: &rusqlite::Connection,
    tenant: &str,
    cursor: Option<&(i64, String)>,
    page: usize,
) -> Result<Vec<(i64, String)>> {
    let (activity, id) = cursor.cloned().unwrap_or((i64::MAX, String::new()));
    let mut select = connection
        .prepare_cached(
            "SELECT last_activity, id, body FROM sessions WHERE tenant = ?1 AND (last_activity, id) < (?2, ?3)
             ORDER BY last_activity DESC, id DESC LIMIT ?4",
        )
        .map_err(sql)?;
    let id_bound = if cursor.is_some() { id } else { "\u{10FFFF}".to_owned() };
    let mut rows = select.query(rusqlite::params![tenant, activity, id_bound, page as i64]).map_err(sql)?;
    let mut out = Vec::with_capacity(page);
    while let Some(row) = rows.next().map_err(sql)? {
        let body: String = row.get(2).map_err(sql)?;
        let _: serde_json::Value = serde_json::from_str(&body).map_err(|e| invalid(e.to_string()))?;
        out.push((row.get(0).map_err(sql)?, row.get(1).map_err(sql)?));
    }
    Ok(out)
}

fn reference_fetch(connection: &rusqlite::Connection, id: &str) -> Result<usize> {
    let body: String = connection
        .prepare_cached("SELECT body FROM sessions WHERE tenant = ?1 AND id = ?2")
        .and_then(|mut select| select.query_row(rusqlite::params![fixtures::TENANT, id], |row| row.get(0)))
        .map_err(sql)?;
    let _: serde_json::Value = serde_json::from_str(&body).map_err(|e| invalid(e.to_string()))?;
    let mut select =
        connection.prepare_cached("SELECT body FROM events WHERE session = ?1 ORDER BY seq").map_err(sql)?;
    let mut rows = select.query([id]).map_err(sql)?;
    let mut events = 0;
    while let Some(row) = rows.next().map_err(sql)? {
        let body: String = row.get(0).map_err(sql)?;
        let _: serde_json::Value = serde_json::from_str(&body).map_err(|e| invalid(e.to_string()))?;
        events += 1;
    }
    Ok(events)
}

fn reference_create(connection: &mut rusqlite::Connection, id: &str, events: usize) -> Result<()> {
    let mut record = seeded_record(0, events as u64);
    record.header.id = SessionId::parse(id)?;
    record.header.scope.tenant = TenantId::parse(CREATE_TENANT)?;
    let transaction = connection.transaction().map_err(sql)?;
    insert_reference_session(&transaction, &record, events)?;
    transaction.commit().map_err(sql)
}
