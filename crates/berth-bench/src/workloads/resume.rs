//! W4 resume: open + read + validate a whole session, beside reading the same bytes
//! from a plain file and parsing every line into the representation berth produces (the
//! event envelope with its `data` kept as raw text, no tree), and SQLite (select +
//! parse). The older reference, every line parsed into a `serde_json::Value` tree (more
//! work than berth does), is kept as a labelled extra row.

use super::{rotation, Backend};
use crate::fixtures::{self, invalid, io, sql};
use crate::payload::chat_event;
use crate::report::{Figure, Goal, Measurement, Target};
use berth_core::Result;
use berth_store::{Access, LogStore};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub const RAW: &str = "raw read + envelope parse (raw data)";
/// The old reference: a whole `serde_json::Value` tree per line (not like-for-like).
pub const RAW_TREE: &str = "raw read + JSON tree parse";
const SQLITE: &str = "sqlite select + parse";
const SESSION: &str = "resume";

pub struct Resume {
    events: usize,
    /// Resumes per variant per round (each is one sample: W4 is short and noisy).
    repeats: usize,
    raw_log: PathBuf,
    sqlite: PathBuf,
    jsonl_root: PathBuf,
    memory: LogStore,
    /// The PostgreSQL store and the id of its copy of the session, when `--pg` is given.
    postgres: Option<(LogStore, String)>,
    variants: Vec<Measurement>,
    _dir: tempfile::TempDir,
}

pub fn jsonl_variant() -> String {
    format!("{} open+read+validate", Backend::Jsonl.label())
}

impl Resume {
    /// Writes the session once with berth (JSONL and memory) and SQLite.
    pub async fn prepare(
        workload: &str,
        dir: &Path,
        events: usize,
        repeats: usize,
        postgres: Option<&Backend>,
    ) -> Result<Resume> {
        let dir = tempfile::tempdir_in(dir).map_err(io("tempdir"))?;
        let jsonl_root = dir.path().join("jsonl");
        let (store, backend) = fixtures::jsonl_store_unsynced(&jsonl_root)?;
        write_session(&store, SESSION, events).await?;
        let memory = fixtures::memory_store();
        write_session(&memory, SESSION, events).await?;
        let sqlite = dir.path().join("resume.sqlite");
        prepare_sqlite(&sqlite, events)?;
        let mut labels = vec![
            (RAW.to_owned(), true),
            (RAW_TREE.to_owned(), false),
            (jsonl_variant(), false),
            (format!("{} open+read+validate", Backend::Memory.label()), false),
            (SQLITE.to_owned(), false),
        ];
        let postgres = match postgres {
            Some(backend) => {
                let store = backend.open(dir.path()).await?;
                let id = fixtures::unique_id(SESSION);
                write_session(&store, &id, events).await?;
                labels.push((format!("{} open+read+validate", backend.label()), false));
                Some((store, id))
            }
            None => None,
        };
        Ok(Resume {
            events,
            repeats: repeats.max(1),
            raw_log: backend.log_path(&fixtures::key(SESSION)),
            sqlite,
            jsonl_root,
            memory,
            postgres,
            variants: labels
                .into_iter()
                .map(|(label, reference)| Measurement::new(workload, &label, reference, Figure::Time, "ms"))
                .collect(),
            _dir: dir,
        })
    }

    pub async fn round(&mut self, round: usize) -> Result<()> {
        for index in rotation(self.variants.len(), round) {
            for _ in 0..self.repeats {
                self.run_variant(index).await?;
            }
        }
        Ok(())
    }

    pub fn variant_count(&self) -> usize {
        self.variants.len()
    }

    /// One resume of variant `index`, timed and checked.
    pub async fn run_variant(&mut self, index: usize) -> Result<()> {
        {
            let started = Instant::now();
            let events = match index {
                0 => raw_resume(&self.raw_log)?,
                1 => raw_tree_resume(&self.raw_log)?,
                2 => berth_resume(&fixtures::jsonl_store(&self.jsonl_root)?, SESSION).await?,
                3 => berth_resume(&self.memory, SESSION).await?,
                4 => sqlite_resume(&self.sqlite)?,
                _ => match &self.postgres {
                    Some((store, id)) => berth_resume(store, id).await?,
                    None => return Err(invalid("no PostgreSQL variant")),
                },
            };
            let measurement = &mut self.variants[index];
            measurement.rounds_ms.push(started.elapsed().as_secs_f64() * 1000.0);
            if events != self.events {
                return Err(invalid(format!("{} read {events} of {} events", measurement.variant, self.events)));
            }
        }
        Ok(())
    }

    pub fn finish(self) -> Vec<Measurement> {
        self.variants
    }
}

pub fn targets(workload: &str) -> Vec<Target> {
    let target =
        |goal, text: &str| Target { workload: workload.into(), variant: jsonl_variant(), goal, text: text.into() };
    vec![
        target(
            Goal::TimeAtMostTimes { versus: RAW.into(), times: 1.2 },
            "W4 ≤ 1.2× the time of plain read + envelope parse",
        ),
        target(Goal::MedianAtMostMs(15.0), "W4 ≤ 15 ms (10,000 × 1 KiB events)"),
    ]
}

/// Appends `events` chat events to a new session `id`, in batches of 500.
async fn write_session(store: &LogStore, id: &str, events: usize) -> Result<()> {
    let handle = store.create(fixtures::header(id)).await?;
    let mut seq = 0u64;
    while (seq as usize) < events {
        let batch: Vec<_> = (seq..(seq + 500).min(events as u64)).map(chat_event).collect();
        seq += batch.len() as u64;
        handle.append(&batch).await?;
    }
    handle.flush().await?;
    handle.close().await
}

fn prepare_sqlite(path: &Path, events: usize) -> Result<()> {
    let mut connection = fixtures::sqlite_open(path)?;
    let transaction = connection.transaction().map_err(sql)?;
    for seq in 0..events as u64 {
        transaction
            .execute(
                "INSERT INTO events VALUES ('s', ?1, ?2)",
                rusqlite::params![seq as i64, chat_event(seq).to_canonical_json()],
            )
            .map_err(sql)?;
    }
    transaction.commit().map_err(sql)
}

/// The reference: read the same bytes from a plain file and parse every event line into
/// the envelope berth builds (fields decoded, `data` kept as raw text).
pub fn raw_resume(path: &Path) -> Result<usize> {
    let bytes = read_whole(path)?;
    let mut events = 0;
    for line in bytes.split(|b| *b == b'\n').skip(1).filter(|line| !line.is_empty()) {
        parse_envelope(line)?;
        events += 1;
    }
    Ok(events)
}

/// Parses one record line into the envelope berth builds (the fair reference's work).
pub fn parse_envelope(line: &[u8]) -> Result<()> {
    let _: Envelope<'_> = serde_json::from_slice(line).map_err(|e| invalid(e.to_string()))?;
    Ok(())
}

/// The old reference: the same bytes, each line parsed into a whole JSON tree.
pub fn raw_tree_resume(path: &Path) -> Result<usize> {
    parse_lines(&read_whole(path)?, true)
}

fn read_whole(path: &Path) -> Result<Vec<u8>> {
    let file = std::fs::File::open(path).map_err(io("open log"))?;
    let length = file.metadata().map_err(io("stat log"))?.len() as usize;
    let mut bytes = vec![0u8; length];
    file.read_exact_at(&mut bytes, 0).map_err(io("read log"))?;
    Ok(bytes)
}

/// An event record as berth holds it after a read: the envelope's fields decoded, the
/// data as raw text (borrowed where no escape forces a copy).
#[derive(serde::Deserialize)]
#[allow(dead_code)] // decoded to be like-for-like, not read
struct Envelope<'a> {
    seq: u64,
    #[serde(rename = "type", borrow)]
    event_type: std::borrow::Cow<'a, str>,
    time: u64,
    #[serde(default, borrow)]
    run: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    data: &'a serde_json::value::RawValue,
    #[serde(default)]
    ignorable: bool,
    #[serde(default)]
    idempotency: Option<serde::de::IgnoredAny>,
    epoch: u64,
    #[serde(borrow)]
    crc: std::borrow::Cow<'a, str>,
}

/// Parses every non-empty line as JSON (skipping the first when `skip_header`).
pub fn parse_lines(bytes: &[u8], skip_header: bool) -> Result<usize> {
    let mut events = 0;
    for line in bytes.split(|b| *b == b'\n').skip(usize::from(skip_header)).filter(|line| !line.is_empty()) {
        let _: serde_json::Value = serde_json::from_slice(line).map_err(|e| invalid(e.to_string()))?;
        events += 1;
    }
    Ok(events)
}

/// Open for read, read every event (validated by the store), close.
pub async fn berth_resume(store: &LogStore, id: &str) -> Result<usize> {
    let handle = store.open(&fixtures::key(id), Access::Read).await?;
    let events = handle.read(0, None).await?;
    handle.close().await?;
    Ok(events.len())
}

fn sqlite_resume(path: &Path) -> Result<usize> {
    let connection = fixtures::sqlite_open(path)?;
    let mut select = connection.prepare("SELECT body FROM events WHERE session = 's' ORDER BY seq").map_err(sql)?;
    let mut rows = select.query([]).map_err(sql)?;
    let mut events = 0;
    while let Some(row) = rows.next().map_err(sql)? {
        let body: String = row.get(0).map_err(sql)?;
        let _: serde_json::Value = serde_json::from_str(&body).map_err(|e| invalid(e.to_string()))?;
        events += 1;
    }
    Ok(events)
}
