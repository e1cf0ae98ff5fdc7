//! W7 scale curves: how cost grows with log length, catalog size and open sessions.
//! - append latency vs log length (durable single-event appends at each length), beside
//!   the raw file at the same length;
//! - resume time vs log length (open + read everything, in reads of 10,000 events),
//!   beside reading and parsing the raw file;
//! - listing page time vs number of sessions (catalog seeded in bulk; listing never
//!   reads logs), beside the SQLite plain-table reference;
//! - resident memory per idle open write handle (VmRSS deltas, allocator trimmed first).

use super::{elapsed_us, listing};
use crate::fixtures::{self, io};
use crate::payload::{chat_event, chat_line};
use crate::progress::Progress;
use crate::report::{median, percentile, Curve};
use berth_core::{Clock, Result, SystemClock};
use berth_service::{ListRequest, SessionService};
use berth_sqlite::SqliteCatalog;
use berth_store::{Access, LogStore, SessionHandle};
use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// Events per read while resuming a long log (bounds the reader's memory).
const RESUME_READ_EVENTS: u64 = 10_000;
/// Events per durable batch while growing a log between measuring points.
const GROW_BATCH_EVENTS: u64 = 1_000;

pub struct ScaleResults {
    pub curves: Vec<Curve>,
    pub notes: Vec<String>,
}

/// Progress steps `run` reports.
pub fn steps(sizes: &crate::Sizes) -> u64 {
    (sizes.scale_log_lengths.len() + sizes.scale_list_sessions.len() + 2 * sizes.scale_open_sessions.len() + 1) as u64
}

pub async fn run(dir: &Path, sizes: &crate::Sizes, progress: &dyn Progress) -> Result<ScaleResults> {
    let mut results = ScaleResults { curves: Vec::new(), notes: Vec::new() };
    let (append, resume) = log_curves(dir, sizes, progress).await?;
    results.notes.push(flatness_note("W7a append latency p50", &append, "berth jsonl p50", 2.0));
    results.notes.push(linearity_note(&resume));
    results.curves.extend([append, resume]);
    let listing = listing_curve(dir, sizes, progress).await?;
    results.notes.push(flatness_note("W7c listing page time", &listing, "berth service.list (SQLite catalog)", 2.0));
    results.curves.push(listing);
    let (memory, memory_notes) = memory_curve(dir, sizes, progress).await?;
    results.curves.push(memory);
    results.notes.extend(memory_notes);
    Ok(results)
}

fn curve(name: &str, x_label: &str, y_label: &str, plot_file: &str) -> Curve {
    Curve {
        name: name.into(),
        x_label: x_label.into(),
        y_label: y_label.into(),
        plot_file: plot_file.into(),
        ..Curve::default()
    }
}

/// Last point ÷ first point of one series, and whether that is "flat" (≤ `limit`).
fn flatness_note(what: &str, curve: &Curve, series: &str, limit: f64) -> String {
    let points = curve.series.iter().find(|s| s.label == series).map(|s| s.points.clone()).unwrap_or_default();
    match (points.first(), points.last()) {
        (Some(first), Some(last)) if first.1 > 0.0 => {
            let growth = last.1 / first.1;
            format!(
                "{what}: {} at x = {} vs {} at x = {} ({growth:.2}×; target flat, read as ≤ {limit}×: {})",
                crate::report::decimals(last.1),
                crate::report::human(last.0),
                crate::report::decimals(first.1),
                crate::report::human(first.0),
                if growth <= limit { "met" } else { "not met" }
            )
        }
        _ => format!("{what}: not measured"),
    }
}

/// Resume time per event at the longest log vs at 10,000 events (or the shortest).
fn linearity_note(curve: &Curve) -> String {
    let Some(series) = curve.series.first() else { return "W7b resume: not measured".into() };
    let per_event = |point: &(f64, f64)| point.1 / point.0.max(1.0);
    let base = series.points.iter().find(|p| p.0 >= 10_000.0).or(series.points.last());
    match (base, series.points.last()) {
        (Some(base), Some(last)) => format!(
            "W7b resume ({}): {} µs per event at {} events, {} µs per event at {} events (target linear: constant per event)",
            series.label,
            crate::report::decimals(per_event(base) * 1000.0),
            crate::report::human(base.0),
            crate::report::decimals(per_event(last) * 1000.0),
            crate::report::human(last.0),
        ),
        _ => "W7b resume: not measured".into(),
    }
}

/// W7a and W7b on one growing session and one growing raw file.
async fn log_curves(dir: &Path, sizes: &crate::Sizes, progress: &dyn Progress) -> Result<(Curve, Curve)> {
    let dir = tempfile::tempdir_in(dir).map_err(io("tempdir"))?;
    let store = fixtures::jsonl_store(&dir.path().join("embedded"))?;
    let mut log = GrowingLog::start(&store, dir.path()).await?;
    let mut append = curve(
        "W7a append latency vs log length",
        "events in the log",
        "µs per durable append",
        "w7-append-latency.svg",
    );
    let mut resume =
        curve("W7b resume time vs log length", "events in the log", "ms to open + read all", "w7-resume.svg");
    for &length in &sizes.scale_log_lengths {
        progress.step(&format!("W7 log length {}", crate::report::human(length as f64)));
        if log.handle.next_seq() > length {
            // The previous point's measured appends went past this length: start over.
            log.handle.close().await?;
            log = GrowingLog::start(&store, dir.path()).await?;
        }
        grow(&log.handle, length).await?;
        log.raw_len = grow_raw(&mut log.raw, log.raw_len, length)?;
        // Resume first, so it sees exactly `length` events; then the appends.
        let started = Instant::now();
        let events = berth_resume(&store, &log.handle).await?;
        resume.series_mut("berth jsonl open+read+validate").points.push((events as f64, ms(started)));
        let started = Instant::now();
        let lines = raw_resume(&log.raw_path)?;
        resume.series_mut(super::resume::RAW).points.push((lines as f64, ms(started)));
        let berth = berth_appends(&log.handle, sizes.scale_appends).await?;
        let reference = raw_appends(&mut log.raw, &mut log.raw_len, sizes.scale_appends)?;
        let x = length as f64;
        for (label, latencies) in [("berth jsonl", &berth), ("raw write+fdatasync", &reference)] {
            append.series_mut(&format!("{label} p50")).points.push((x, median(latencies).unwrap_or(0.0)));
            append.series_mut(&format!("{label} p99")).points.push((x, percentile(latencies, 99.0).unwrap_or(0.0)));
        }
    }
    log.handle.close().await?;
    Ok((append, resume))
}

/// One berth session and one raw file, grown side by side.
struct GrowingLog {
    handle: SessionHandle,
    raw_path: std::path::PathBuf,
    raw: std::fs::File,
    raw_len: u64,
}

impl GrowingLog {
    async fn start(store: &LogStore, dir: &Path) -> Result<GrowingLog> {
        let id = fixtures::unique_id("scale");
        let handle = store.create(fixtures::header(&id)).await?;
        handle.flush().await?;
        let raw_path = dir.join(format!("{id}.jsonl"));
        let raw = std::fs::OpenOptions::new().create(true).append(true).open(&raw_path).map_err(io("open raw"))?;
        Ok(GrowingLog { handle, raw_path, raw, raw_len: 0 })
    }
}

fn ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1000.0
}

/// Appends durable batches until the log holds `length` events.
async fn grow(handle: &SessionHandle, length: u64) -> Result<()> {
    while handle.next_seq() < length {
        let from = handle.next_seq();
        let batch: Vec<_> = (from..length.min(from + GROW_BATCH_EVENTS)).map(chat_event).collect();
        handle.append(&batch).await?;
    }
    Ok(())
}

fn grow_raw(raw: &mut std::fs::File, mut raw_len: u64, length: u64) -> Result<u64> {
    let mut buffer = Vec::with_capacity(1 << 20);
    while raw_len < length {
        buffer.extend_from_slice(&chat_line(raw_len));
        raw_len += 1;
        if buffer.len() >= 1 << 20 {
            raw.write_all(&buffer).map_err(io("raw write"))?;
            buffer.clear();
        }
    }
    raw.write_all(&buffer).map_err(io("raw write"))?;
    raw.sync_data().map_err(io("raw fdatasync"))?;
    Ok(raw_len)
}

async fn berth_appends(handle: &SessionHandle, count: usize) -> Result<Vec<f64>> {
    let mut latencies = Vec::with_capacity(count);
    for _ in 0..count {
        let event = chat_event(handle.next_seq());
        let started = Instant::now();
        handle.append(&[event]).await?;
        latencies.push(elapsed_us(started));
    }
    Ok(latencies)
}

fn raw_appends(raw: &mut std::fs::File, raw_len: &mut u64, count: usize) -> Result<Vec<f64>> {
    let mut latencies = Vec::with_capacity(count);
    for _ in 0..count {
        let line = chat_line(*raw_len);
        let started = Instant::now();
        raw.write_all(&line).map_err(io("raw write"))?;
        raw.sync_data().map_err(io("raw fdatasync"))?;
        latencies.push(elapsed_us(started));
        *raw_len += 1;
    }
    Ok(latencies)
}

/// Opens a read handle and reads the whole log in bounded reads; returns the count.
async fn berth_resume(store: &LogStore, writer: &SessionHandle) -> Result<u64> {
    let reader = store.open(writer.key(), Access::Read).await?;
    let mut offset = 0;
    loop {
        let events = reader.read(offset, Some(RESUME_READ_EVENTS)).await?;
        offset += events.len() as u64;
        if (events.len() as u64) < RESUME_READ_EVENTS {
            break;
        }
    }
    reader.close().await?;
    Ok(offset)
}

/// Reads the raw file line by line (bounded memory) and parses every line into the
/// envelope berth builds (`resume::parse_envelope`: the fair reference).
fn raw_resume(path: &Path) -> Result<u64> {
    let mut reader = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(path).map_err(io("open raw"))?);
    let mut line = Vec::with_capacity(2048);
    let mut lines = 0;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(io("read raw"))? == 0 {
            return Ok(lines);
        }
        super::resume::parse_envelope(&line)?;
        lines += 1;
    }
}

/// W7c: page time of `service.list` and of the reference as the catalog grows.
async fn listing_curve(dir: &Path, sizes: &crate::Sizes, progress: &dyn Progress) -> Result<Curve> {
    let dir = tempfile::tempdir_in(dir).map_err(io("tempdir"))?;
    let catalog = SqliteCatalog::open(dir.path().join(berth_sqlite::CATALOG_FILE_NAME))?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let service = SessionService::new(fixtures::memory_store(), Arc::new(catalog.clone()), clock);
    let reference = listing::reference_schema(&dir.path().join("reference.sqlite"))?;
    let mut curve = curve(
        "W7c listing page time vs sessions",
        "sessions in the tenant",
        &format!("ms per page of {}", sizes.list_page),
        "w7-listing.svg",
    );
    let mut seeded = 0u64;
    for &count in &sizes.scale_list_sessions {
        progress.step(&format!("W7 listing at {} sessions", crate::report::human(count as f64)));
        listing::seed_catalog_range(&catalog, seeded, count, 10).await?;
        listing::reference_insert_range(&reference, seeded, count, 0)?;
        seeded = count;
        let (berth, plain) = page_walk(&service, &reference, sizes.list_page, sizes.scale_list_pages).await?;
        let x = count as f64;
        curve
            .series_mut("berth service.list (SQLite catalog)")
            .points
            .push((x, median(&berth).unwrap_or(0.0) / 1000.0));
        curve.series_mut("berth p99").points.push((x, percentile(&berth, 99.0).unwrap_or(0.0) / 1000.0));
        curve.series_mut(listing::REFERENCE).points.push((x, median(&plain).unwrap_or(0.0) / 1000.0));
    }
    service.shutdown().await?;
    Ok(curve)
}

/// The first `pages` pages of both, alternating; µs per page of each.
async fn page_walk(
    service: &SessionService,
    reference: &rusqlite::Connection,
    page: usize,
    pages: usize,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let principal = fixtures::service_principal();
    let mut request = ListRequest { limit: Some(page), ..ListRequest::default() };
    let mut reference_cursor = None;
    let (mut berth, mut plain) = (Vec::new(), Vec::new());
    for _ in 0..pages {
        let started = Instant::now();
        let result = service.list(&principal, &request).await?;
        berth.push(elapsed_us(started));
        let started = Instant::now();
        let rows = listing::reference_page(reference, fixtures::TENANT, reference_cursor.as_ref(), page)?;
        plain.push(elapsed_us(started));
        match (result.next_cursor, rows.last()) {
            (Some(cursor), Some(last)) => {
                request.cursor = Some(cursor);
                reference_cursor = Some(last.clone());
            }
            _ => break,
        }
    }
    Ok((berth, plain))
}

/// W7d: resident memory per idle open write handle, JSONL and memory backends.
async fn memory_curve(dir: &Path, sizes: &crate::Sizes, progress: &dyn Progress) -> Result<(Curve, Vec<String>)> {
    let mut curve = curve(
        "W7d resident memory per idle open write handle",
        "open write handles",
        "KiB of VmRSS per handle",
        "w7-memory.svg",
    );
    let mut notes = Vec::new();
    let limit = fixtures::raise_descriptor_limit();
    let dir = tempfile::tempdir_in(dir).map_err(io("tempdir"))?;
    let root = dir.path().join("embedded");
    let (jsonl, _) = fixtures::jsonl_store_unsynced(&root)?;
    for (label, store) in [("berth jsonl", jsonl), ("berth memory", fixtures::memory_store())] {
        let counts = &sizes.scale_open_sessions;
        let largest = counts.iter().copied().max().unwrap_or(0);
        progress.step(&format!("W7 memory: seeding {largest} sessions ({label})"));
        listing::seed_logs(&store, largest as usize, 1).await?;
        let outcome = open_handles(&store, counts, limit, progress, label).await?;
        for (count, kib) in &outcome.points {
            curve.series_mut(label).points.push((*count as f64, *kib));
        }
        notes.push(memory_note(label, &outcome));
    }
    Ok((curve, notes))
}

struct OpenOutcome {
    /// (open handles, KiB of VmRSS per handle).
    points: Vec<(u64, f64)>,
    descriptors_per_handle: f64,
    stopped_at_limit: Option<u64>,
}

/// Opens write handles on seeded sessions up to each count; reads VmRSS at each.
async fn open_handles(
    store: &LogStore,
    counts: &[u64],
    descriptor_limit: u64,
    progress: &dyn Progress,
    label: &str,
) -> Result<OpenOutcome> {
    trim_allocator();
    let (rss_before, fds_before) = (fixtures::resident_bytes().unwrap_or(0), fixtures::open_descriptors().unwrap_or(0));
    let mut handles = Vec::new();
    let mut outcome = OpenOutcome { points: Vec::new(), descriptors_per_handle: 0.0, stopped_at_limit: None };
    for &wanted in counts {
        progress.step(&format!("W7 memory: {wanted} open write handles ({label})"));
        // Until measured, assume the JSONL writer's three (log, lock, directory).
        let per_handle = if outcome.points.is_empty() { 3.0 } else { outcome.descriptors_per_handle };
        let room = (descriptor_limit as f64 - fds_before as f64 - 64.0) / per_handle.max(0.001);
        // Past the open-file limit: measure at the most that fits (in thousands), once.
        let count = if (wanted as f64) <= room { wanted } else { (room as u64 / 1000) * 1000 };
        if count < wanted {
            outcome.stopped_at_limit = Some(wanted);
        }
        if count <= handles.len() as u64 {
            break;
        }
        while (handles.len() as u64) < count {
            let id = listing::session_id(handles.len() as u64);
            handles.push(store.open(&fixtures::key(&id), Access::Write).await?);
        }
        let rss = fixtures::resident_bytes().unwrap_or(0);
        let fds = fixtures::open_descriptors().unwrap_or(0);
        outcome.descriptors_per_handle = fds.saturating_sub(fds_before) as f64 / count as f64;
        outcome.points.push((count, rss.saturating_sub(rss_before) as f64 / 1024.0 / count as f64));
        if count < wanted {
            break;
        }
    }
    for handle in handles {
        handle.close().await?;
    }
    Ok(outcome)
}

fn memory_note(label: &str, outcome: &OpenOutcome) -> String {
    let Some((count, kib)) = outcome.points.last() else { return format!("W7d {label}: not measured") };
    let mut note = format!(
        "W7d {label}: {} KiB of VmRSS per idle open write handle at {count} handles, {:.1} file descriptors each \
         (target ≤ 64 KiB: {})",
        crate::report::decimals(*kib),
        outcome.descriptors_per_handle,
        if *kib <= 64.0 { "met" } else { "not met" }
    );
    if let Some(stopped) = outcome.stopped_at_limit {
        note.push_str(&format!(
            "; {stopped} handles would exceed this process's open-file limit, so the last point is the most that fits"
        ));
    }
    note
}

/// Returns freed heap pages to the kernel, so later allocations show up in VmRSS
/// instead of silently reusing memory an earlier workload freed.
fn trim_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}
