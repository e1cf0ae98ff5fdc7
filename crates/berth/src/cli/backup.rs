//! `berth backup` and `berth restore`: a consistent copy of a live data directory, and
//! its restore into a new one (`berth::backup`; docs/backup.md). Progress goes to
//! stderr (a bar on a terminal, a line every few seconds otherwise), the summary to
//! stdout (`--json`: the summary's fields).

use super::output::{print_json, print_line};
use berth::backup::{self, BackupOptions, BackupSummary, Progress, RestoreOptions, RestoreSummary};
use berth_core::{Error, Result};
use clap::Args;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct BackupArgs {
    /// The directory to write the backup to (created; must be empty if it exists).
    #[arg(long)]
    to: PathBuf,
    /// An incremental backup on top of this earlier backup of the same store: only the
    /// catalog and the logs that changed are copied; restore reads the whole chain.
    #[arg(long, value_name = "PREVIOUS")]
    since: Option<PathBuf>,
    /// Copy at most this many MiB per second, so live appends keep their latency
    /// (0: no limit).
    #[arg(long, value_name = "MIB_PER_S", default_value_t = backup::RATE_BYTES_PER_S_DEFAULT / MIB)]
    rate_mib_s: u64,
}

#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// The backup to restore (the last of a chain of incremental backups).
    #[arg(long)]
    from: PathBuf,
    /// The data directory to create (missing or empty).
    #[arg(long)]
    to: PathBuf,
    /// Restore over a non-empty directory: its contents are moved aside to
    /// `<to>.replaced-<time>` (never deleted). Stop any `berth serve` on it first.
    #[arg(long)]
    force: bool,
    /// Copy at most this many MiB per second (0: no limit).
    #[arg(long, value_name = "MIB_PER_S", default_value_t = 0)]
    rate_mib_s: u64,
}

const MIB: u64 = 1024 * 1024;

/// `berth serve --backup-dir`'s backups: each into a new directory under `dir`, of the
/// store the server serves, with its key file.
pub struct ServeBackups {
    url: berth::StoreUrl,
    dir: PathBuf,
    rate_bytes_per_s: Option<u64>,
}

impl ServeBackups {
    pub fn new(data: &str, dir: &std::path::Path, rate_mib_s: u64) -> Result<ServeBackups> {
        std::fs::create_dir_all(dir).map_err(|error| Error::io("create the backup directory", &error))?;
        let dir = dir.canonicalize().map_err(|error| Error::io("open the backup directory", &error))?;
        Ok(ServeBackups { url: berth::StoreUrl::parse(data)?, dir, rate_bytes_per_s: rate(rate_mib_s) })
    }
}

impl berth_server::backup::BackupRunner for ServeBackups {
    fn backup(&self, name: &str, since: Option<&str>) -> Result<berth_api::BackupBody> {
        let mut options = BackupOptions::new(berth::system_clock());
        options.since = since.map(|since| self.dir.join(since));
        options.rate_bytes_per_s = self.rate_bytes_per_s;
        options.extra_files = vec![berth_server::auth::KEYS_FILE.to_owned()];
        let summary = backup::backup_store(&self.url, &self.dir.join(name), &options, &mut backup::NoProgress)?;
        Ok(wire_backup(&summary, name))
    }
}

/// A backup's summary as `POST /v1/admin/backup` answers it.
pub fn wire_backup(summary: &BackupSummary, name: &str) -> berth_api::BackupBody {
    berth_api::BackupBody {
        id: summary.id.clone(),
        name: name.to_owned(),
        kind: kind_name(summary.kind).to_owned(),
        previous: summary.previous.clone(),
        snapshot_at: berth_core::Timestamp(summary.snapshot_at),
        sessions: summary.sessions,
        logs_copied: summary.logs_copied,
        logs_unchanged: summary.logs_unchanged,
        vanished: summary.vanished,
        bytes: summary.bytes,
        duration_ms: (summary.seconds * 1000.0) as u64,
    }
}

fn kind_name(kind: backup::BackupKind) -> &'static str {
    match kind {
        backup::BackupKind::Full => "full",
        backup::BackupKind::Incremental => "incremental",
    }
}

fn rate(mib_per_s: u64) -> Option<u64> {
    (mib_per_s > 0).then(|| mib_per_s.saturating_mul(MIB))
}

pub async fn backup_command(data: &str, args: BackupArgs, json: bool) -> Result<ExitCode> {
    let url = berth::StoreUrl::parse(data)?;
    let mut options = BackupOptions::new(berth::system_clock());
    options.since = args.since;
    options.rate_bytes_per_s = rate(args.rate_mib_s);
    options.extra_files = vec![berth_server::auth::KEYS_FILE.to_owned()];
    let to = args.to;
    let summary = tokio::task::spawn_blocking(move || {
        let mut progress = Bar::new("backup");
        backup::backup_store(&url, &to, &options, &mut progress)
    })
    .await
    .map_err(|error| Error::Unavailable { reason: format!("the backup stopped: {error}") })??;
    if json {
        print_json(&summary)?;
    } else {
        print_line(backup_line(&summary))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn backup_line(summary: &BackupSummary) -> String {
    let kind = kind_name(summary.kind);
    format!(
        "backup {} ({kind}) in {}: {} sessions, {} logs copied, {} unchanged, {} deleted during the backup; \
         {} in {:.1} s ({}/s)",
        summary.id,
        summary.dir.display(),
        summary.sessions,
        summary.logs_copied,
        summary.logs_unchanged,
        summary.vanished,
        bytes_text(summary.bytes),
        summary.seconds,
        bytes_text(summary.bytes_per_s as u64)
    )
}

pub async fn restore_command(args: RestoreArgs, json: bool) -> Result<ExitCode> {
    let options =
        RestoreOptions { force: args.force, rate_bytes_per_s: rate(args.rate_mib_s), clock: berth::system_clock() };
    let mut progress = Bar::new("restore");
    let summary = backup::restore(&args.from, &args.to, &options, &mut progress).await?;
    if json {
        print_json(&summary)?;
    } else {
        print_line(restore_line(&summary))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn restore_line(summary: &RestoreSummary) -> String {
    let mut line = format!(
        "restored backup {} into {}: {} sessions, {} events, {} logs truncated to their last complete record, \
         {} deletions completed; audit verified for {} tenants; fsck clean",
        summary.id,
        summary.dir.display(),
        summary.sessions,
        summary.events,
        summary.logs_truncated,
        summary.vanished_removed,
        summary.audit_tenants_verified
    );
    if let Some(aside) = &summary.moved_aside {
        line.push_str(&format!("; the directory's earlier contents are in {}", aside.display()));
    }
    line
}

fn bytes_text(bytes: u64) -> String {
    if bytes >= MIB {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

/// Progress on stderr: an `indicatif` bar with rate and ETA on a terminal; elsewhere a
/// line at most every few seconds (and none for work that ends sooner).
struct Bar {
    what: &'static str,
    bar: Option<indicatif::ProgressBar>,
    total: u64,
    done: u64,
    started: Instant,
    printed: Instant,
}

/// How often the line printer reports.
const LINE_EVERY: Duration = Duration::from_secs(5);

impl Bar {
    fn new(what: &'static str) -> Bar {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(0);
            let template = "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}";
            let style = indicatif::ProgressStyle::with_template(template)
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> ");
            bar.set_style(style);
            bar.set_message(format!("berth {what}"));
            bar
        });
        Bar { what, bar, total: 0, done: 0, started: Instant::now(), printed: Instant::now() }
    }

    fn line(&self) {
        let seconds = self.started.elapsed().as_secs_f64();
        let rate = if seconds > 0.0 { self.done as f64 / seconds } else { 0.0 };
        let left = self.total.saturating_sub(self.done);
        let eta = if rate > 0.0 { format!("{:.0} s", left as f64 / rate) } else { "?".to_owned() };
        let percent = (self.done * 100).checked_div(self.total).unwrap_or(0);
        let _ = writeln!(
            std::io::stderr(),
            "berth {}: {} of {} ({percent}%), {}/s, ETA {eta}",
            self.what,
            bytes_text(self.done),
            bytes_text(self.total),
            bytes_text(rate as u64)
        );
    }
}

impl Progress for Bar {
    fn plan(&mut self, total_bytes: u64) {
        self.total = total_bytes.max(self.done);
        if let Some(bar) = &self.bar {
            bar.set_length(self.total);
        }
    }

    fn advance(&mut self, bytes: u64) {
        self.done += bytes;
        self.total = self.total.max(self.done);
        match &self.bar {
            Some(bar) => {
                bar.set_length(self.total);
                bar.set_position(self.done);
            }
            None if self.printed.elapsed() >= LINE_EVERY => {
                self.printed = Instant::now();
                self.line();
            }
            None => {}
        }
    }

    fn finish(&mut self) {
        match &self.bar {
            Some(bar) => bar.finish_and_clear(),
            None if self.started.elapsed() >= LINE_EVERY => self.line(),
            None => {}
        }
    }
}
