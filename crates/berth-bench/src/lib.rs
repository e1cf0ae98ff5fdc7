//! `berth bench`: reproducible measurements of berth's workloads beside their
//! references (the machine's physical limit, and SQLite with the same durability), in
//! one process run, interleaved A/B/A/B so that machine drift cancels out.
//!
//! Figures are medians over rounds (and p50/p99 of per-operation latency where it
//! applies), plus the ratio to the reference measured in the same run. Nothing here
//! asserts a timing: benchmarks report, tests assert.

mod payload;
mod report;
mod workloads;

pub use report::{Measurement, Report};
pub use workloads::{run, BenchOptions};
