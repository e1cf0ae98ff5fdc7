//! Argument parsing and dispatch for the `berth` binary.

// All output goes through `output`'s fallible writers: `print!`/`eprint!` panic when the
// stream is closed (exit 101), for `append` after the events are stored.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod backup;
mod commands;
mod memory;
mod migrate;
mod output;
mod serve;
mod target;

use berth_core::{Error, ProjectId, TenantId, UserId};
use berth_service::{Principal, Role};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

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
    pub fn principal(&self) -> Result<Principal, Error> {
        let tenant = self.tenant.as_deref().ok_or_else(|| Error::invalid("arguments", "--tenant is required"))?;
        Ok(Principal {
            tenant: TenantId::parse(tenant)?,
            user: UserId::parse(&self.user)?,
            project: self.project.as_deref().map(ProjectId::parse).transpose()?,
            role: Role::parse(&self.role)?,
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
    Fsck(commands::FsckArgs),
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
        Err(error) => {
            output::print_error(&Error::io("start the runtime", &error), false);
            return ExitCode::from(1);
        }
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
        // The work is done; only its report had no reader (docs/cli.md).
        Err(error) if output::is_closed_stdout(&error) => ExitCode::SUCCESS,
        Err(error) => {
            output::print_error(&error, json);
            ExitCode::from(exit_code(&error))
        }
    }
}

/// The documented exit code of an error kind (`docs/cli.md`), from its class.
pub fn exit_code(error: &Error) -> u8 {
    error.class().exit_code()
}

pub fn data_root(data: &str) -> Result<PathBuf, Error> {
    match berth::StoreUrl::parse(data)? {
        berth::StoreUrl::Embedded(root) => Ok(root),
        berth::StoreUrl::Memory | berth::StoreUrl::Postgres(_) => {
            Err(Error::invalid("--data", "this command needs a data directory"))
        }
    }
}
