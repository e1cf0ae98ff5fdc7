//! W1 (durable single-event appends to one session) and W2 (bulk: batches of 100),
//! beside the machine's limit (the same bytes written to a plain file, `fdatasync` each
//! time: appended to a growing file, and overwriting a pre-zeroed one — see `raw`) and
//! SQLite (WAL, `synchronous=FULL`, one transaction per append).

use super::raw::{self, RawFile};
use super::{elapsed_us, rotation, Backend};
use crate::fixtures::{self, io, sql};
use crate::payload::chat_event;
use crate::report::{Figure, Goal, Measurement, Target};
use berth_core::Result;
use berth_store::LogStore;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The raw reference on a growing file (`write` appends).
pub const RAW: &str = "raw write+fdatasync, growing file";
/// The raw reference overwriting a pre-zeroed file (`pwrite` from offset 0).
pub const RAW_OVERWRITE: &str = "raw pwrite+fdatasync, overwrite pre-zeroed file";
pub const SQLITE: &str = "sqlite FULL";

enum Variant {
    Raw(RawFile),
    Berth(Backend),
    Sqlite,
}

/// One append workload: `operations` appends of `events_per_op` events per round.
pub struct Appends {
    dir: PathBuf,
    operations: usize,
    events_per_op: usize,
    variants: Vec<(Variant, Measurement)>,
}

impl Appends {
    pub fn new(workload: &str, dir: &Path, operations: usize, events_per_op: usize, backends: &[Backend]) -> Appends {
        let mut variants = vec![
            (
                Variant::Raw(RawFile::Growing),
                Measurement::reference_tagged(workload, RAW, RawFile::Growing.tag(), "events"),
            ),
            (
                Variant::Raw(RawFile::Overwrite),
                Measurement::reference_tagged(workload, RAW_OVERWRITE, RawFile::Overwrite.tag(), "events"),
            ),
        ];
        for backend in backends {
            let label = match backend {
                Backend::Jsonl => format!("{} (fdatasync per append)", backend.label()),
                Backend::Memory | Backend::Postgres(_) => backend.label().to_owned(),
            };
            variants.push((
                Variant::Berth(backend.clone()),
                Measurement::new(workload, &label, false, Figure::Throughput, "events"),
            ));
        }
        variants.push((Variant::Sqlite, Measurement::new(workload, SQLITE, false, Figure::Throughput, "events")));
        Appends { dir: dir.to_owned(), operations, events_per_op, variants }
    }

    pub async fn round(&mut self, round: usize) -> Result<()> {
        for index in rotation(self.variants.len(), round) {
            let dir = tempfile::tempdir_in(&self.dir).map_err(io("tempdir"))?;
            let (operations, events_per_op) = (self.operations, self.events_per_op);
            let (variant, measurement) = &mut self.variants[index];
            let latencies = match variant {
                Variant::Raw(file) => raw::appends(*file, dir.path(), operations, events_per_op)?,
                Variant::Berth(backend) => {
                    berth_appends(backend.open(dir.path()).await?, operations, events_per_op).await?
                }
                Variant::Sqlite => sqlite_appends(dir.path(), operations, events_per_op)?,
            };
            measurement.record_round(&latencies, events_per_op);
        }
        Ok(())
    }

    pub fn finish(self) -> Vec<Measurement> {
        self.variants.into_iter().map(|(_, measurement)| measurement).collect()
    }
}

/// The targets for W1 and W2 (judged on the JSONL variant's label); the raw
/// ones against the faster of the two raw references.
pub fn targets(w1: &str, w2: &str) -> Vec<Target> {
    let raw = |ratio: f64| Goal::RatioToFasterAtLeast { versus: vec![RAW.into(), RAW_OVERWRITE.into()], ratio };
    let jsonl = format!("{} (fdatasync per append)", Backend::Jsonl.label());
    let target = |workload: &str, goal: Goal, text: &str| Target {
        workload: workload.to_owned(),
        variant: jsonl.clone(),
        goal,
        text: text.to_owned(),
    };
    vec![
        target(w1, raw(0.85), "W1 ≥ 0.85× the faster raw reference (issue 53)"),
        target(w1, Goal::RatioAtLeast { versus: SQLITE.into(), ratio: 1.0 }, "W1 ≥ 1.0× SQLite"),
        target(w2, raw(0.8), "W2 ≥ 0.8× the faster raw reference on the same bytes (issue 17)"),
        target(w2, Goal::RatioAtLeast { versus: SQLITE.into(), ratio: 2.0 }, "W2 ≥ 2× SQLite"),
        target(w2, Goal::ThroughputAtLeast(200_000.0), "W2 ≥ 200,000 events/s (issue 2)"),
    ]
}

/// Appends to one new session of `store`; per-append latency in µs.
pub async fn berth_appends(store: LogStore, operations: usize, events_per_op: usize) -> Result<Vec<f64>> {
    let handle = store.create(fixtures::header(&fixtures::unique_id("w"))).await?;
    handle.flush().await?;
    let mut latencies = Vec::with_capacity(operations);
    let mut seq = 0;
    for _ in 0..operations {
        let batch: Vec<_> = (0..events_per_op).map(|i| chat_event(seq + i as u64)).collect();
        seq += events_per_op as u64;
        let started = Instant::now();
        handle.append(&batch).await?;
        latencies.push(elapsed_us(started));
    }
    handle.close().await?;
    Ok(latencies)
}

/// SQLite with the same durability (WAL, `synchronous=FULL`): one transaction per append.
pub fn sqlite_appends(dir: &Path, operations: usize, events_per_op: usize) -> Result<Vec<f64>> {
    let mut connection = fixtures::sqlite_open(&dir.join("bench.sqlite"))?;
    let mut latencies = Vec::with_capacity(operations);
    let mut seq = 0u64;
    for _ in 0..operations {
        let bodies: Vec<String> = (0..events_per_op).map(|i| chat_event(seq + i as u64).to_canonical_json()).collect();
        let started = Instant::now();
        let transaction = connection.transaction().map_err(sql)?;
        {
            let mut insert = transaction.prepare_cached("INSERT INTO events VALUES ('s', ?1, ?2)").map_err(sql)?;
            for body in &bodies {
                insert.execute(rusqlite::params![seq as i64, body]).map_err(sql)?;
                seq += 1;
            }
        }
        transaction.commit().map_err(sql)?;
        latencies.push(elapsed_us(started));
    }
    Ok(latencies)
}
