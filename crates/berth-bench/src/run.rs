//! The run: prepares the data sets, runs W1–W6 and W8 in interleaved rounds, then the
//! W7 curves, and assembles the report.

use crate::fixtures::io;
use crate::progress::Progress;
use crate::report::Report;
use crate::workloads::append::{self, Appends};
use crate::workloads::concurrent::{self, Concurrent};
use crate::workloads::http::{self, Http};
use crate::workloads::listing::{self, Listing};
use crate::workloads::memory::{self, Memory};
use crate::workloads::resume::{self, Resume};
use crate::workloads::{scale, Backend};
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
    let round_workloads = ["W1", "W2", "W3", "W4", "W5", "W6", "W8"].iter().filter(|w| options.wants(w)).count() as u64;
    let scale_steps = if options.wants("W7") { scale::steps(sizes) } else { 0 };
    progress.plan(2 + round_workloads * sizes.rounds as u64 + scale_steps);
    let mut report = Report {
        machine: crate::machine::describe(dir),
        profile: options.profile.name().to_owned(),
        ..Report::default()
    };
    if options.postgres_url.is_some() {
        report.notes.push(
            "PostgreSQL (--pg): W1, W2, W4 and W5 also ran on the PostgreSQL backend (same database for every round, \
             fresh session ids); W3 and W6 ran on the embedded backend only"
                .into(),
        );
    }
    run_rounds(dir, options, progress, &mut report).await?;
    if options.wants("W7") {
        let scale = scale::run(dir, sizes, progress).await?;
        report.curves = scale.curves;
        report.notes.extend(scale.notes);
    }
    report.total_seconds = started.elapsed().as_secs_f64();
    progress.finish();
    Ok(report)
}

/// W1–W6 and W8, interleaved: every round runs each workload's variants once, in turn.
async fn run_rounds(dir: &Path, options: &BenchOptions, progress: &dyn Progress, report: &mut Report) -> Result<()> {
    let sizes = &options.sizes;
    let mut backends = vec![Backend::Jsonl, Backend::Memory];
    let postgres = options.postgres_url.clone().map(Backend::Postgres);
    backends.extend(postgres.clone());
    let (w2, w4) = (w2_name(sizes.bulk_batch_events), w4_name(sizes.resume_events));
    let bulk_operations = sizes.bulk_events / sizes.bulk_batch_events.max(1);
    let mut appends = options.wants("W1").then(|| Appends::new(W1, dir, sizes.appends, 1, &backends));
    let mut bulk =
        options.wants("W2").then(|| Appends::new(&w2, dir, bulk_operations, sizes.bulk_batch_events, &backends));
    let mut listing = None;
    if options.wants("W3") {
        progress.step(&format!("W3 seeding {} sessions", sizes.list_sessions));
        listing = Some(Listing::prepare(dir, sizes).await?);
    }
    let mut resume = None;
    if options.wants("W4") {
        progress.step(&format!("W4 writing a {}-event session", sizes.resume_events));
        resume = Some(Resume::prepare(&w4, dir, sizes.resume_events, sizes.resume_repeats, postgres.as_ref()).await?);
    }
    let mut concurrent = options.wants("W5").then(|| Concurrent::new(dir, sizes, &backends));
    let mut http = options.wants("W6").then(|| Http::new(dir, sizes));
    let mut memory = None;
    if options.wants("W8") {
        progress.step(&format!("W8 seeding {} memory items", sizes.memory_items));
        memory = Some(Memory::prepare(dir, sizes).await?);
    }
    for round in 0..sizes.rounds {
        let step = |what: &str| progress.step(&format!("round {}/{}: {what}", round + 1, sizes.rounds));
        if let Some(workload) = &mut appends {
            step("W1 durable appends");
            workload.round(round).await?;
        }
        if let Some(workload) = &mut bulk {
            step("W2 bulk");
            workload.round(round).await?;
        }
        if let Some(workload) = &mut listing {
            step("W3 list, fetch, create");
            workload.round(round).await?;
        }
        if let Some(workload) = &mut resume {
            step("W4 resume");
            workload.round(round).await?;
        }
        if let Some(workload) = &mut concurrent {
            step("W5 concurrent writers");
            workload.round(round).await?;
        }
        if let Some(workload) = &mut http {
            step("W6 HTTP");
            workload.round(round).await?;
        }
        if let Some(workload) = &mut memory {
            step("W8 scoped memory");
            workload.round(round).await?;
        }
    }
    report.measurements.extend(appends.map(Appends::finish).unwrap_or_default());
    report.measurements.extend(bulk.map(Appends::finish).unwrap_or_default());
    if let Some(listing) = listing {
        report.measurements.extend(listing.finish().await?);
    }
    report.measurements.extend(resume.map(Resume::finish).unwrap_or_default());
    report.measurements.extend(concurrent.map(Concurrent::finish).unwrap_or_default());
    report.notes.extend(http.iter().flat_map(Http::notes));
    report.measurements.extend(http.map(Http::finish).unwrap_or_default());
    report.measurements.extend(memory.map(Memory::finish).unwrap_or_default());
    let mut targets = append::targets(W1, &w2);
    targets.extend(listing::targets(sizes.list_events));
    targets.extend(resume::targets(&w4));
    targets.extend(concurrent::targets(sizes));
    targets.extend(http::targets(sizes));
    targets.extend(memory::targets(sizes.memory_items));
    targets.retain(|target| report.find(&target.workload, &target.variant).is_some());
    report.targets.extend(targets);
    Ok(())
}

/// Profiling aid: writes an `events`-event session, then runs W4 alone `rounds` times
/// (only variant `only` when given: 0 raw, 1 jsonl, 2 memory, 3 SQLite);
/// (variant, milliseconds per resume) of every variant.
pub async fn profile_resume(
    dir: &Path,
    events: usize,
    rounds: usize,
    only: Option<usize>,
) -> Result<Vec<(String, Vec<f64>)>> {
    std::fs::create_dir_all(dir).map_err(io("create profile dir"))?;
    let mut resume = Resume::prepare(&w4_name(events), dir, events, 1, None).await?;
    for round in 0..rounds {
        match only {
            Some(index) if index < resume.variant_count() => resume.run_variant(index).await?,
            _ => resume.round(round).await?,
        }
    }
    Ok(resume.finish().into_iter().map(|m| (m.variant, m.rounds_ms)).collect())
}
