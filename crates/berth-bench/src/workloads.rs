//! The workloads and their references. Every round runs every variant once, in turn
//! (A/B/A/B), so slow drift of a shared machine hits all variants alike.

use crate::payload::{chat_event, chat_line};
use crate::report::{Measurement, Report};
use berth_core::{Error, Result, Scope, SessionHeader, SessionId, TenantId, Timestamp, UserId};
use berth_jsonl::{JsonlBackend, JsonlOptions};
use berth_store::memory::{MemoryBackend, MemoryStorage};
use berth_store::{Access, LogStore};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Smaller counts and fewer rounds (a smoke test: finishes in well under 2 minutes).
    pub quick: bool,
    /// Where temporary data goes (a directory on the disk being measured).
    pub dir: PathBuf,
}

struct Sizes {
    rounds: usize,
    appends: usize,
    bulk_events: usize,
    resume_events: usize,
}

impl Sizes {
    fn of(options: &BenchOptions) -> Sizes {
        if options.quick {
            Sizes {
                rounds: 3,
                appends: 200,
                bulk_events: 10_000,
                resume_events: 10_000,
            }
        } else {
            Sizes {
                rounds: 5,
                appends: 2_000,
                bulk_events: 100_000,
                resume_events: 10_000,
            }
        }
    }
}

fn io(op: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |error| Error::io(op, &error)
}

fn header(id: &str) -> SessionHeader {
    let scope = Scope {
        tenant: TenantId::parse("bench").unwrap(),
        user: UserId::parse("bench").unwrap(),
        project: None,
    };
    SessionHeader::new(
        SessionId::parse(id).unwrap(),
        scope,
        Timestamp(1_790_000_000_000),
    )
}

fn jsonl_store(dir: &Path) -> Result<LogStore> {
    Ok(LogStore::new(Arc::new(JsonlBackend::open(
        dir,
        JsonlOptions::default(),
    )?)))
}

/// Runs every workload; `progress` is told what runs next.
pub async fn run(options: &BenchOptions, mut progress: impl FnMut(&str)) -> Result<Report> {
    std::fs::create_dir_all(&options.dir).map_err(io("create bench dir"))?;
    let sizes = Sizes::of(options);
    let mut report = Report {
        machine: machine_description(),
        command: String::new(),
        measurements: Vec::new(),
    };
    let variants_w1 = [
        "raw write+fdatasync",
        "berth jsonl (fsync per append)",
        "sqlite FULL",
        "berth memory",
    ];
    let mut w1: Vec<Measurement> = variants_w1
        .iter()
        .enumerate()
        .map(|(i, v)| measurement("W1 durable append (1 event)", v, i == 0, "events"))
        .collect();
    let variants_w2 = ["raw write+fdatasync", "berth jsonl", "sqlite FULL"];
    let mut w2: Vec<Measurement> = variants_w2
        .iter()
        .enumerate()
        .map(|(i, v)| measurement("W2 bulk (batches of 100)", v, i == 0, "events"))
        .collect();
    let variants_w4 = [
        "raw read + JSON parse",
        "berth jsonl open+read+validate",
        "sqlite select + parse",
    ];
    let mut w4: Vec<Measurement> = variants_w4
        .iter()
        .enumerate()
        .map(|(i, v)| {
            measurement(
                &format!("W4 resume ({} events)", sizes.resume_events),
                v,
                i == 0,
                "ms",
            )
        })
        .collect();
    let resume_dir = tempfile::tempdir_in(&options.dir).map_err(io("tempdir"))?;
    let resume_log = prepare_resume(resume_dir.path(), sizes.resume_events).await?;
    let resume_sqlite = prepare_resume_sqlite(resume_dir.path(), sizes.resume_events)?;
    for round in 0..sizes.rounds {
        progress(&format!(
            "round {}/{}: W1 durable appends",
            round + 1,
            sizes.rounds
        ));
        for (index, m) in w1.iter_mut().enumerate() {
            let dir = tempfile::tempdir_in(&options.dir).map_err(io("tempdir"))?;
            let latencies = match index {
                0 => raw_appends(dir.path(), sizes.appends, 1)?,
                1 => berth_appends(jsonl_store(dir.path())?, sizes.appends, 1).await?,
                2 => sqlite_appends(dir.path(), sizes.appends, 1)?,
                _ => {
                    berth_appends(
                        LogStore::new(Arc::new(MemoryBackend::new(MemoryStorage::new()))),
                        sizes.appends,
                        1,
                    )
                    .await?
                }
            };
            record(m, &latencies, 1);
        }
        progress(&format!("round {}/{}: W2 bulk", round + 1, sizes.rounds));
        let batches = sizes.bulk_events / 100;
        for (index, m) in w2.iter_mut().enumerate() {
            let dir = tempfile::tempdir_in(&options.dir).map_err(io("tempdir"))?;
            let latencies = match index {
                0 => raw_appends(dir.path(), batches, 100)?,
                1 => berth_appends(jsonl_store(dir.path())?, batches, 100).await?,
                _ => sqlite_appends(dir.path(), batches, 100)?,
            };
            record(m, &latencies, 100);
        }
        progress(&format!("round {}/{}: W4 resume", round + 1, sizes.rounds));
        for (index, m) in w4.iter_mut().enumerate() {
            let started = Instant::now();
            let events = match index {
                0 => raw_resume(&resume_log.1)?,
                1 => berth_resume(resume_dir.path(), &resume_log.0).await?,
                _ => sqlite_resume(&resume_sqlite)?,
            };
            m.rounds_ms.push(started.elapsed().as_secs_f64() * 1000.0);
            if events != sizes.resume_events {
                return Err(Error::invalid(
                    "bench",
                    format!("{} read {events} events", m.variant),
                ));
            }
        }
    }
    report.measurements.extend(w1);
    report.measurements.extend(w2);
    report.measurements.extend(w4);
    Ok(report)
}

fn measurement(workload: &str, variant: &str, reference: bool, unit: &str) -> Measurement {
    Measurement {
        workload: workload.into(),
        variant: variant.into(),
        reference,
        unit: unit.into(),
        ..Measurement::default()
    }
}

fn record(m: &mut Measurement, latencies: &[f64], events_per_op: usize) {
    let total_us: f64 = latencies.iter().sum();
    m.rounds_per_second
        .push((latencies.len() * events_per_op) as f64 / (total_us / 1e6));
    m.latencies_us.extend_from_slice(latencies);
}

/// The physical limit: the same bytes appended to a plain file, `fdatasync` each time.
fn raw_appends(dir: &Path, operations: usize, events_per_op: usize) -> Result<Vec<f64>> {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("raw.jsonl"))
        .map_err(io("open raw file"))?;
    let mut latencies = Vec::with_capacity(operations);
    let mut seq = 0;
    for _ in 0..operations {
        let mut buffer = Vec::with_capacity(events_per_op * 1200);
        for _ in 0..events_per_op {
            buffer.extend_from_slice(&chat_line(seq));
            seq += 1;
        }
        let started = Instant::now();
        file.write_all(&buffer).map_err(io("raw write"))?;
        file.sync_data().map_err(io("raw fdatasync"))?;
        latencies.push(started.elapsed().as_secs_f64() * 1e6);
    }
    Ok(latencies)
}

async fn berth_appends(
    store: LogStore,
    operations: usize,
    events_per_op: usize,
) -> Result<Vec<f64>> {
    let handle = store.create(header("w")).await?;
    handle.flush().await?;
    let mut latencies = Vec::with_capacity(operations);
    let mut seq = 0;
    for _ in 0..operations {
        let batch: Vec<_> = (0..events_per_op)
            .map(|i| chat_event(seq + i as u64))
            .collect();
        seq += events_per_op as u64;
        let started = Instant::now();
        handle.append(&batch).await?;
        latencies.push(started.elapsed().as_secs_f64() * 1e6);
    }
    handle.close().await?;
    Ok(latencies)
}

fn sqlite_open(path: &Path) -> Result<rusqlite::Connection> {
    let sql = |e: rusqlite::Error| Error::Unavailable {
        reason: format!("sqlite: {e}"),
    };
    let connection = rusqlite::Connection::open(path).map_err(sql)?;
    connection
        .execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS events (session TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
                                                PRIMARY KEY (session, seq)) WITHOUT ROWID;",
        )
        .map_err(sql)?;
    Ok(connection)
}

/// SQLite with the same durability (WAL, `synchronous=FULL`): one transaction per append.
fn sqlite_appends(dir: &Path, operations: usize, events_per_op: usize) -> Result<Vec<f64>> {
    let sql = |e: rusqlite::Error| Error::Unavailable {
        reason: format!("sqlite: {e}"),
    };
    let mut connection = sqlite_open(&dir.join("bench.sqlite"))?;
    let mut latencies = Vec::with_capacity(operations);
    let mut seq = 0u64;
    for _ in 0..operations {
        let bodies: Vec<String> = (0..events_per_op)
            .map(|i| chat_event(seq + i as u64).to_canonical_json())
            .collect();
        let started = Instant::now();
        let transaction = connection.transaction().map_err(sql)?;
        {
            let mut insert = transaction
                .prepare_cached("INSERT INTO events VALUES ('s', ?1, ?2)")
                .map_err(sql)?;
            for body in &bodies {
                insert
                    .execute(rusqlite::params![seq as i64, body])
                    .map_err(sql)?;
                seq += 1;
            }
        }
        transaction.commit().map_err(sql)?;
        latencies.push(started.elapsed().as_secs_f64() * 1e6);
    }
    Ok(latencies)
}

/// Writes a `count`-event session with berth and returns (session id, log path).
async fn prepare_resume(dir: &Path, count: usize) -> Result<(String, PathBuf)> {
    let backend = JsonlBackend::open(dir, JsonlOptions::default())?;
    let store = LogStore::new(Arc::new(backend.clone()));
    let header = header("resume");
    let key = header.key();
    let handle = store.create(header).await?;
    let mut seq = 0u64;
    while (seq as usize) < count {
        let batch: Vec<_> = (seq..(seq + 500).min(count as u64))
            .map(chat_event)
            .collect();
        seq += batch.len() as u64;
        handle.append(&batch).await?;
    }
    handle.close().await?;
    Ok((key.id.to_string(), backend.log_path(&key)))
}

fn prepare_resume_sqlite(dir: &Path, count: usize) -> Result<PathBuf> {
    let path = dir.join("resume.sqlite");
    let sql = |e: rusqlite::Error| Error::Unavailable {
        reason: format!("sqlite: {e}"),
    };
    let mut connection = sqlite_open(&path)?;
    let transaction = connection.transaction().map_err(sql)?;
    for seq in 0..count as u64 {
        transaction
            .execute(
                "INSERT INTO events VALUES ('s', ?1, ?2)",
                rusqlite::params![seq as i64, chat_event(seq).to_canonical_json()],
            )
            .map_err(sql)?;
    }
    transaction.commit().map_err(sql)?;
    Ok(path)
}

/// The reference: read the same bytes from a plain file and parse every line as JSON.
fn raw_resume(path: &Path) -> Result<usize> {
    let file = std::fs::File::open(path).map_err(io("open log"))?;
    let length = file.metadata().map_err(io("stat log"))?.len() as usize;
    let mut bytes = vec![0u8; length];
    file.read_exact_at(&mut bytes, 0).map_err(io("read log"))?;
    let mut events = 0;
    for line in bytes
        .split(|b| *b == b'\n')
        .skip(1)
        .filter(|line| !line.is_empty())
    {
        let _: serde_json::Value =
            serde_json::from_slice(line).map_err(|e| Error::invalid("bench", e.to_string()))?;
        events += 1;
    }
    Ok(events)
}

async fn berth_resume(dir: &Path, id: &str) -> Result<usize> {
    let store = jsonl_store(dir)?;
    let key = header(id).key();
    let handle = store.open(&key, Access::Read).await?;
    let events = handle.read(0, None).await?;
    handle.close().await?;
    Ok(events.len())
}

fn sqlite_resume(path: &Path) -> Result<usize> {
    let sql = |e: rusqlite::Error| Error::Unavailable {
        reason: format!("sqlite: {e}"),
    };
    let connection = sqlite_open(path)?;
    let mut select = connection
        .prepare("SELECT body FROM events WHERE session = 's' ORDER BY seq")
        .map_err(sql)?;
    let mut rows = select.query([]).map_err(sql)?;
    let mut events = 0;
    while let Some(row) = rows.next().map_err(sql)? {
        let body: String = row.get(0).map_err(sql)?;
        let _: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| Error::invalid("bench", e.to_string()))?;
        events += 1;
    }
    Ok(events)
}

fn machine_description() -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    format!("{cpus} CPUs ({model}), {}", std::env::consts::OS)
}
