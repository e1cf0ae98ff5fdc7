//! Argument parsing and dispatch for the `berth` binary.

// All output goes through `output`'s fallible writers: `print!`/`eprint!` panic when the
// stream is closed (exit 101), for `append` after the events are stored.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod backup;
mod commands;
mod fsck;
mod memory;
mod migrate;
mod model_usage;
mod output;
mod serve;
mod target;
mod transcript;
mod usage;

use berth_core::{Error, ProjectId, TenantId, UserId};
use berth_service::{Principal, Role};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use usage::{Arg, Failure, Result, Usage};

#[derive(Parser, Debug)]
#[command(name = "berth", version, about = "A durable, multi-tenant session store for AI-agent runtimes")]
pub struct Cli {
    /// Where the data lives: a directory (embedded backend), file:///path, or memory:.
    #[arg(long, global = true, env = "BERTH_DATA", default_value = "./berth-data")]
    pub data: String,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Talk to a running `berth serve` at this URL (http://host:port) instead of a data
    /// directory; the principal comes from the API key.
    #[arg(long, global = true, env = "BERTH_SERVER")]
    pub server: Option<String>,
    /// The API key (or JWT) for `--server`.
    #[arg(long, global = true, env = "BERTH_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

/// The principal the command acts as. The tenant is required for every session
/// operation; the default role is `admin` (an operator with the data directory at hand
/// already has every right to it).
#[derive(Args, Debug, Clone)]
pub struct PrincipalArgs {
    #[arg(long, env = "BERTH_TENANT")]
    pub tenant: Option<String>,
    #[arg(long, env = "BERTH_USER", default_value = "operator")]
    pub user: String,
    #[arg(long, env = "BERTH_PROJECT")]
    pub project: Option<String>,
    #[arg(long, env = "BERTH_ROLE", default_value = "admin")]
    pub role: String,
}

impl PrincipalArgs {
    /// The principal the flags name; a usage error names the flag (and its environment
    /// variable) to set.
    pub fn principal(&self) -> Result<Principal, Usage> {
        const TENANT: Arg = Arg::with_env("--tenant", "BERTH_TENANT");
        let tenant = self.tenant.as_deref().ok_or_else(|| TENANT.missing("TENANT"))?;
        Ok(Principal {
            tenant: TENANT.parse(tenant, TenantId::parse)?,
            user: Arg::with_env("--user", "BERTH_USER").parse(&self.user, UserId::parse)?,
            project: (self.project.as_deref())
                .map(|project| Arg::with_env("--project", "BERTH_PROJECT").parse(project, ProjectId::parse))
                .transpose()?,
            role: Arg::with_env("--role", "BERTH_ROLE").parse(&self.role, Role::parse)?,
        })
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create, list, show, read, close, fork, reopen and delete sessions.
    #[command(subcommand)]
    Sessions(commands::SessionsCommand),
    /// Attach, heartbeat, detach and resume runs.
    #[command(subcommand)]
    Runs(commands::RunsCommand),
    /// Append events (JSON lines of {type, data, time?, ignorable?}) from a file or stdin.
    Append(commands::AppendArgs),
    /// Export a session as canonical JSONL (or a ZIP with its forks).
    Export(commands::ExportArgs),
    /// Import a session exported by `berth export`.
    Import(commands::ImportArgs),
    /// Apply retention policies and expire lapsed sessions, in bounded batches.
    Gc(commands::GcArgs),
    /// Read and verify the tamper-evident audit log.
    #[command(subcommand)]
    Audit(commands::AuditCommand),
    /// Scoped memory: items of a user, a project or the app that outlive sessions.
    #[command(subcommand)]
    Memory(memory::MemoryCommand),
    /// Verify every log under a data directory; `--repair` truncates torn tails only.
    Fsck(fsck::FsckArgs),
    /// Storage-level inspection of the event logs (no catalog, no authorization).
    #[command(subcommand)]
    Log(commands::LogCommand),
    /// Measure every workload beside its reference (raw fdatasync, SQLite), interleaved.
    Bench(commands::BenchArgs),
    /// Serve the HTTP API (embedded store in ./berth-data on 127.0.0.1:7420 by default).
    Serve(serve::ServeArgs),
    /// Create, list and revoke the server's API keys.
    #[command(subcommand)]
    Keys(serve::KeysCommand),
    /// Apply pending PostgreSQL schema migrations (`--data postgres://…`).
    Migrate(migrate::MigrateArgs),
    /// Copy a live data directory consistently (while `berth serve` writes to it).
    Backup(backup::BackupArgs),
    /// Restore a backup into a new data directory (checked: fsck clean, audit verified).
    Restore(backup::RestoreArgs),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if !serve::init_logging(&cli) {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("BERTH_LOG").unwrap_or_else(|_| "warn".into()))
            .with_writer(std::io::stderr)
            .init();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => return fail(&Error::io("start the runtime", &error).into(), false),
    };
    let json = cli.json;
    let outcome = runtime.block_on(async move {
        match cli.command {
            Command::Migrate(args) => migrate::migrate(&cli.data, args, cli.json).await,
            _ => serve::run(cli).await,
        }
    });
    match outcome {
        Ok(code) => code,
        // The work is done; only its report had no reader (docs/reference/cli.md).
        Err(Failure::Error(error)) if output::is_closed_stdout(&error) => ExitCode::SUCCESS,
        Err(failure) => fail(&failure, json),
    }
}

/// Reports `failure` on stderr; its documented exit code (`berth::exit`).
fn fail(failure: &Failure, json: bool) -> ExitCode {
    output::print_failure(failure, json);
    ExitCode::from(failure.exit_code())
}

/// `--data` (or `BERTH_DATA`) as a store URL.
pub fn store_url(data: &str) -> Result<berth::StoreUrl, Usage> {
    Arg::with_env("--data", "BERTH_DATA").parse(data, berth::StoreUrl::parse)
}

/// The data directory a storage-level command (`fsck`, `log`) works on.
pub fn data_root(data: &str, command: &str) -> Result<PathBuf, Usage> {
    let store = match store_url(data)? {
        berth::StoreUrl::Embedded(root) => return Ok(root),
        berth::StoreUrl::Memory => "an in-memory store",
        berth::StoreUrl::Postgres(_) => "a PostgreSQL store",
    };
    Err(Usage::new(format!("{command} needs a data directory: give --data DIR (or set BERTH_DATA), not {store}")))
}
