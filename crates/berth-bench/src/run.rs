//! The run: prepares the data sets, runs W1–W5 in interleaved rounds, then W6 and the
//! W7 curves, and assembles the report.

use crate::fixtures::{self, io};
use crate::progress::Progress;
use crate::report::Report;
use crate::workloads::append::{self, Appends};
use crate::workloads::concurrent::{self, Concurrent};
use crate::workloads::listing::Listing;
use crate::workloads::resume::{self, Resume};
use crate::workloads::{http, scale, Backend};
use crate::BenchOptions;
use berth_core::Result;
use std::path::Path;
use std::time::Instant;

const W1: &str = "W1 durable append (1 event)";

fn w2_name(batch: usize) -> String {
    format!("W2 bulk (batches of {batch})")
}

fn w4_name(events: usize) -> String {
    format!("W4 resume ({events} events)")
}

/// Runs every workload. The data lives in a temporary directory under `options.dir`,
/// removed at the end.
pub async fn run(options: &BenchOptions, progress: &dyn Progress) -> Result<Report> {
    let started = Instant::now();
    std::fs::create_dir_all(&options.dir).map_err(io("create bench dir"))?;
    let scratch = tempfile::tempdir_in(&options.dir).map_err(io("tempdir"))?;
    let dir = scratch.path();
    let sizes = &options.sizes;
    progress.plan(3 + 5 * sizes.rounds as u64 + 1 + scale::steps(sizes));
    let mut report = Report {
        machine: crate::machine::describe(dir),
        profile: options.profile.name().to_owned(),
        ..Report::default()
    };
    if options.postgres_url.is_some() {
        report.notes.push(
            "PostgreSQL (--pg): the berth-postgres backend is not wired into berth bench yet; W1–W5 ran on memory and \
             JSONL only"
                .into(),
        );
    }
    run_rounds(dir, options, progress, &mut report).await?;
    progress.step("W6 HTTP");
    report.notes.push(http::not_run_note());
    let scale = scale::run(dir, sizes, progress).await?;
    report.curves = scale.curves;
    report.notes.extend(scale.notes);
    report.total_seconds = started.elapsed().as_secs_f64();
    progress.finish();
    Ok(report)
}

/// W1–W5, interleaved: every round runs each workload's variants once, in turn.
async fn run_rounds(dir: &Path, options: &BenchOptions, progress: &dyn Progress, report: &mut Report) -> Result<()> {
    let sizes = &options.sizes;
    let backends = [Backend::Jsonl, Backend::Memory];
    let w2 = w2_name(sizes.bulk_batch_events);
    let w4 = w4_name(sizes.resume_events);
    let mut appends = Appends::new(W1, dir, sizes.appends, 1, &backends);
    let mut bulk =
        Appends::new(&w2, dir, sizes.bulk_events / sizes.bulk_batch_events.max(1), sizes.bulk_batch_events, &backends);
    progress.step(&format!("W3 seeding {} sessions", sizes.list_sessions));
    let mut listing = Listing::prepare(dir, sizes).await?;
    progress.step(&format!("W4 writing a {}-event session", sizes.resume_events));
    let mut resume = Resume::prepare(&w4, dir, sizes.resume_events).await?;
    let mut concurrent = Concurrent::new(dir, sizes, &backends);
    progress.step("rounds");
    for round in 0..sizes.rounds {
        let of = format!("round {}/{}", round + 1, sizes.rounds);
        progress.step(&format!("{of}: W1 durable appends"));
        appends.round(round).await?;
        progress.step(&format!("{of}: W2 bulk"));
        bulk.round(round).await?;
        progress.step(&format!("{of}: W3 list, fetch, create"));
        listing.round(round).await?;
        progress.step(&format!("{of}: W4 resume"));
        resume.round(round).await?;
        progress.step(&format!("{of}: W5 concurrent writers"));
        concurrent.round(round).await?;
    }
    report.measurements.extend(appends.finish());
    report.measurements.extend(bulk.finish());
    report.measurements.extend(listing.finish().await?);
    report.measurements.extend(resume.finish());
    report.measurements.extend(concurrent.finish());
    report.targets.extend(append::targets(W1, &w2));
    report.targets.extend(resume::targets(&w4));
    report.targets.extend(concurrent::targets(sizes));
    Ok(())
}

/// Profiling aid: writes an `events`-event session, then resumes it `rounds` times;
/// milliseconds per resume.
pub async fn profile_resume(dir: &Path, events: usize, rounds: usize) -> Result<Vec<f64>> {
    std::fs::create_dir_all(dir).map_err(io("create profile dir"))?;
    let mut resume = Resume::prepare(&w4_name(events), dir, events).await?;
    for round in 0..rounds {
        resume.round(round).await?;
    }
    let timings = resume.finish();
    let _ = fixtures::TENANT;
    Ok(timings.into_iter().find(|m| m.variant == resume::jsonl_variant()).map(|m| m.rounds_ms).unwrap_or_default())
}
