//! `berth bench`: reproducible measurements of berth's workloads beside their
//! references (the machine's physical limit, and SQLite with the same durability), in
//! one process run, interleaved A/B/A/B so that machine drift cancels out.
//!
//! Figures are medians over rounds (and p50/p99 of per-operation latency where it
//! applies), plus the ratio to the reference measured in the same run, the targets of
//! issue 6 judged (never asserted), and the W7 scale curves as tables and SVG plots.
//! Nothing here asserts a timing: benchmarks report, tests assert.

pub mod fixtures;
pub mod loadgen;
mod machine;
pub mod payload;
mod plots;
mod progress;
mod report;
mod run;
mod sizes;
pub mod workloads;

pub use plots::write_plots;
pub use progress::{NoProgress, Progress, ProgressBar};
pub use report::{median, Curve, Figure, Goal, Measurement, Report, Series, Target};
pub use run::{profile_resume, run};
pub use sizes::{Profile, Sizes};

use std::path::PathBuf;

#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub profile: Profile,
    /// The counts (from the profile unless a test sets its own).
    pub sizes: Sizes,
    /// Where temporary data goes (a directory on the disk being measured).
    pub dir: PathBuf,
    /// A PostgreSQL URL: W1, W2, W4 and W5 also run on the PostgreSQL backend.
    pub postgres_url: Option<String>,
    /// Run only these workloads (`["W4", "W7"]`); all when empty.
    pub only: Vec<String>,
}

impl BenchOptions {
    pub fn new(profile: Profile, dir: PathBuf) -> BenchOptions {
        BenchOptions { profile, sizes: Sizes::of(profile), dir, postgres_url: None, only: Vec::new() }
    }

    /// Does this run include workload `name` (`"W3"`)?
    pub fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|only| only.eq_ignore_ascii_case(name))
    }
}
