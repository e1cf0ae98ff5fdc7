//! The workloads (W1–W8) and their references. Every round runs every variant of a
//! workload once, in a rotated order (A/B, B/A, …), so slow drift of a shared machine
//! and "who runs first" effects hit all variants alike.

pub mod append;
pub mod concurrent;
pub mod http;
pub mod listing;
pub mod memory;
pub mod raw;
pub mod resume;
pub mod scale;

use crate::fixtures;
use berth_core::Result;
use berth_store::LogStore;
use std::path::Path;

/// A LogStore backend a workload runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    Memory,
    /// The embedded backend as shipped (`fdatasync` per append).
    Jsonl,
    /// The PostgreSQL backend on the database at this URL (default options).
    Postgres(String),
}

impl Backend {
    pub fn label(&self) -> &'static str {
        match self {
            Backend::Memory => "berth memory",
            Backend::Jsonl => "berth jsonl",
            Backend::Postgres(_) => "berth postgres",
        }
    }

    /// A store whose data (if any) lives under `dir` (fresh for memory and JSONL; the
    /// same database for PostgreSQL, so workloads use `fixtures::unique_id`).
    pub async fn open(&self, dir: &Path) -> Result<LogStore> {
        match self {
            Backend::Memory => Ok(fixtures::memory_store()),
            Backend::Jsonl => fixtures::jsonl_store(dir),
            Backend::Postgres(url) => {
                let backend = berth_postgres::PostgresBackend::connect(url, Default::default()).await?;
                Ok(LogStore::new(std::sync::Arc::new(backend)))
            }
        }
    }
}

/// The order variants run in during `round`: rotated by one each round.
pub fn rotation(variants: usize, round: usize) -> impl Iterator<Item = usize> {
    (0..variants).map(move |index| (index + round) % variants.max(1))
}

/// Microseconds since `started`, to 0.1 µs (finer is noise, and keeps the JSON small).
pub fn elapsed_us(started: std::time::Instant) -> f64 {
    (started.elapsed().as_secs_f64() * 1e7).round() / 10.0
}
