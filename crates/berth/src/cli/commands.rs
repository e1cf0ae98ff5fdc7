//! One function per CLI command; each returns its exit code or a typed error. The
//! session commands run once over a `SessionTarget` (`target.rs`): the data directory's
//! service, or a running server with `--server`.

use super::output::{
    event_line, pretty_with_times, print_json, print_line, print_value, session_detail, session_line,
    session_line_with_preview, time_text, unless_closed_stdout, write_stdout, WireBody,
};
use super::target::{print_events, Targets};
use super::transcript::{previews, transcript_entry};
use super::usage::{Arg, Result, Usage};
use super::{store_url, Cli, Command, PrincipalArgs};
use berth_catalog::RetentionPolicy;
use berth_core::{Concurrency, Error, Revision, RunId, SessionId, SessionKey, SessionPolicy, TenantId, UserId};
use berth_server::client::Client;
use berth_service::{
    AppendRequest, AttachRequest, ClosePolicy, CreateSession, ListRequest, MetadataUpdate, NewEvent, OnBusy,
};
use berth_store::{Access, ListQuery};
use clap::{Args, Subcommand};
use std::collections::BTreeSet;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Subcommand, Debug)]
pub enum SessionsCommand {
    /// Create a session.
    New {
        #[command(flatten)]
        principal: PrincipalArgs,
        #[arg(long)]
        id: Option<String>,
        /// Owner (defaults to --user; service and admin principals may create for others).
        #[arg(long)]
        owner: Option<String>,
        #[arg(long)]
        title: Option<String>,
        #[arg(long = "label")]
        labels: Vec<String>,
        /// Allow up to N concurrent runs (default: serial, one run).
        #[arg(long)]
        parallel: Option<u32>,
        /// Activity lease TTL in milliseconds.
        #[arg(long)]
        ttl_ms: Option<u64>,
    },
    /// List sessions (newest activity first).
    Ls {
        #[command(flatten)]
        principal: PrincipalArgs,
        #[arg(long = "status")]
        statuses: Vec<String>,
        #[arg(long)]
        label: Option<String>,
        #[arg(long)]
        owner: Option<String>,
        /// Include blank sessions (no conversation yet).
        #[arg(long)]
        all: bool,
        /// Only sessions whose id, title or a label holds TEXT, ignoring case (at most
        /// 256 characters, no control characters).
        #[arg(long, value_name = "TEXT")]
        search: Option<String>,
        #[arg(long)]
        limit: Option<usize>,
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Show a session's metadata.
    Show {
        #[command(flatten)]
        principal: PrincipalArgs,
        id: String,
    },
    /// Show a session's metadata and its log's storage stat (change token, size).
    Stat {
        #[command(flatten)]
        principal: PrincipalArgs,
        id: String,
    },
    /// Print a session's events as JSON lines, or with --transcript as people read them.
    Cat {
        #[command(flatten)]
        principal: PrincipalArgs,
        id: String,
        #[arg(long, default_value_t = 0)]
        from: u64,
        #[arg(long)]
        limit: Option<u64>,
        /// A readable transcript instead of JSON: messages as their text (content given
        /// as a string or as typed parts; images, files and audio as placeholders), tool
        /// calls and results, other events as their type and cut JSON. Not with --json.
        #[arg(long)]
        transcript: bool,
    },
    /// Follow a session's events as they are appended (one canonical JSON line each),
    /// from --from on; ends after --until (exclusive), or never. With --server it
    /// streams (SSE); on a data directory it looks for new events every 200 ms.
    Tail {
        #[command(flatten)]
        principal: PrincipalArgs,
        id: String,
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Stop once every event before this seq was printed.
        #[arg(long)]
        until: Option<u64>,
    },
    /// Close a session (terminal; refuses while runs are attached unless --cancel-runs).
    Close {
        #[command(flatten)]
        principal: PrincipalArgs,
        id: String,
        #[arg(long)]
        cancel_runs: bool,
        #[arg(long)]
        expected_revision: Option<u64>,
    },
    /// Fork a session (also a closed or expired one) into a new session.
    Fork {
        #[command(flatten)]
        principal: PrincipalArgs,
        id: String,
        /// Copy events before this seq (default: all).
        #[arg(long)]
        upto: Option<u64>,
        #[arg(long)]
        new_id: Option<String>,
    },
    /// Reopen a closed or expired session (admin; audited).
    Reopen {
        #[command(flatten)]
        principal: PrincipalArgs,
        id: String,
    },
    /// Set a session's title and labels.
    Update {
        #[command(flatten)]
        principal: PrincipalArgs,
        id: String,
        #[arg(long)]
        title: Option<String>,
        #[arg(long = "label")]
        labels: Option<Vec<String>>,
        #[arg(long)]
        expected_revision: Option<u64>,
    },
    /// Delete a session's log and metadata (the audit log keeps a record).
    Delete {
        #[command(flatten)]
        principal: PrincipalArgs,
        id: String,
        #[arg(long)]
        expected_revision: Option<u64>,
    },
    /// LLM usage and tool time from the `model/call` and tool events: a session's
    /// (`ID`), or the totals over a time range (`--all --since T [--before T]`).
    Usage(super::model_usage::UsageArgs),
}

#[derive(Subcommand, Debug)]
pub enum RunsCommand {
    /// Attach a run; prints the run and its lease.
    Attach {
        #[command(flatten)]
        principal: PrincipalArgs,
        session: String,
        #[arg(long)]
        run: Option<String>,
        /// Detach the current run as interrupted if the session is busy.
        #[arg(long)]
        interrupt: bool,
        #[arg(long)]
        expected_revision: Option<u64>,
    },
    /// Extend a run's lease.
    Heartbeat {
        #[command(flatten)]
        principal: PrincipalArgs,
        session: String,
        run: String,
    },
    /// Detach a run with an outcome.
    Detach {
        #[command(flatten)]
        principal: PrincipalArgs,
        session: String,
        run: String,
        #[arg(long, default_value = "completed")]
        outcome: String,
        #[arg(long)]
        expected_revision: Option<u64>,
    },
    /// Attach a new run and repair turns a crash left open; prints what was repaired.
    Resume {
        #[command(flatten)]
        principal: PrincipalArgs,
        session: String,
        #[arg(long)]
        run: Option<String>,
        #[arg(long)]
        interrupt: bool,
    },
}

#[derive(Args, Debug)]
pub struct AppendArgs {
    #[command(flatten)]
    principal: PrincipalArgs,
    session: String,
    /// JSON lines file; `-` or absent reads stdin.
    file: Option<PathBuf>,
    #[arg(long)]
    run: Option<String>,
    #[arg(long)]
    expected_seq: Option<u64>,
    /// Caller idempotency key (R-S14): a retry with the same key returns the original
    /// outcome; the same key with other events is a conflict (exit 4).
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Seconds to wait out another process's write handle on the session (`writer_busy`)
    /// before failing with exit 4: retried with jittered backoff, as the Python client
    /// does. `0` fails at once.
    #[arg(long, value_name = "SECONDS", default_value_t = BUSY_WAIT_DEFAULT_S, value_parser = busy_wait_seconds)]
    busy_wait: f64,
}

/// `berth append --busy-wait`'s default: the Python client's `busy_wait_s`.
const BUSY_WAIT_DEFAULT_S: f64 = 10.0;
/// The first backoff after `writer_busy`, doubled per attempt up to the last.
const BUSY_BACKOFF_FIRST: Duration = Duration::from_millis(50);
const BUSY_BACKOFF_LAST: Duration = Duration::from_secs(2);

fn busy_wait_seconds(text: &str) -> std::result::Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && (0.0..=3600.0).contains(&seconds) => Ok(seconds),
        _ => Err(format!("{text:?}: give seconds from 0 to 3600")),
    }
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    #[command(flatten)]
    principal: PrincipalArgs,
    session: String,
    /// A ZIP holding the session and its forks.
    #[arg(long)]
    zip: bool,
    /// Output file (default stdout).
    #[arg(short, long)]
    output: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    #[command(flatten)]
    principal: PrincipalArgs,
    file: PathBuf,
}

#[derive(Args, Debug)]
pub struct GcArgs {
    /// Most actions per batch.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Run batches until nothing is left (default: one batch).
    #[arg(long)]
    all: bool,
    /// Set this tenant's retention policy first (needs --tenant).
    #[command(flatten)]
    principal: PrincipalArgs,
    #[arg(long)]
    idle_ttl_ms: Option<u64>,
    #[arg(long)]
    max_age_ms: Option<u64>,
    #[arg(long)]
    delete_terminal_after_ms: Option<u64>,
    /// Delete memory items not updated for this long.
    #[arg(long)]
    memory_max_age_ms: Option<u64>,
}

#[derive(Subcommand, Debug)]
pub enum AuditCommand {
    /// Verify the tenant's audit hash chain (exit 6 if broken).
    Verify {
        #[command(flatten)]
        principal: PrincipalArgs,
    },
    /// Print audit entries.
    Log {
        #[command(flatten)]
        principal: PrincipalArgs,
        #[arg(long, default_value_t = 0)]
        from: u64,
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
}

#[derive(Subcommand, Debug)]
pub enum LogCommand {
    /// List the event logs of a tenant.
    Ls {
        #[arg(long)]
        tenant: String,
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// A log's header, change token and size, without reading its body.
    Stat {
        #[arg(long)]
        tenant: String,
        id: String,
    },
    /// A log's events as JSON lines.
    Cat {
        #[arg(long)]
        tenant: String,
        id: String,
        #[arg(long, default_value_t = 0)]
        from: u64,
        #[arg(long)]
        limit: Option<u64>,
    },
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Small counts, few rounds: a smoke run (no timing assertions anywhere).
    #[arg(long)]
    quick: bool,
    /// Directory for temporary data, on the disk to measure (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Also write report.md, report.json and the W7 plots (SVG) here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// PostgreSQL URL: also run W1, W2, W4 and W5 on the PostgreSQL backend.
    #[arg(long = "pg", value_name = "URL")]
    postgres_url: Option<String>,
    /// Run only these workloads (comma-separated: W1,…,W8); all by default.
    #[arg(long, value_delimiter = ',', value_name = "W1,W4,…")]
    only: Vec<String>,
}

async fn bench(args: BenchArgs, json: bool) -> Result<ExitCode> {
    let profile = if args.quick { berth_bench::Profile::Quick } else { berth_bench::Profile::Full };
    let dir = args.dir.unwrap_or_else(std::env::temp_dir).join("berth-bench");
    let mut options = berth_bench::BenchOptions::new(profile, dir);
    options.postgres_url = args.postgres_url;
    options.only = args.only;
    let progress = berth_bench::ProgressBar::stderr();
    let mut report = berth_bench::run(&options, &progress).await?;
    report.command = std::env::args().collect::<Vec<_>>().join(" ");
    let markdown = report.markdown();
    let raw = serde_json::to_string_pretty(&report).map_err(|e| Error::invalid("report", e.to_string()))?;
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out).map_err(|e| Error::io("create report dir", &e))?;
        std::fs::write(out.join("report.md"), &markdown).map_err(|e| Error::io("write report", &e))?;
        std::fs::write(out.join("report.json"), &raw).map_err(|e| Error::io("write report", &e))?;
        berth_bench::write_plots(&report, out)?;
    }
    if json {
        print_line(raw)?;
    } else {
        print_line(markdown)?;
    }
    let _ = std::fs::remove_dir_all(&options.dir);
    Ok(ExitCode::SUCCESS)
}

pub async fn run(cli: Cli) -> Result<ExitCode> {
    let json = cli.json;
    match cli.command {
        Command::Bench(args) => bench(args, json).await,
        Command::Fsck(args) => super::fsck::fsck(&cli.data, args, json).await,
        Command::Log(command) => log_command(&cli.data, command, json).await,
        Command::Backup(args) => Ok(super::backup::backup_command(&cli.data, args, json).await?),
        Command::Restore(args) => Ok(super::backup::restore_command(args, json).await?),
        command => {
            let url = store_url(&cli.data)?;
            let service = berth::open_service_with(&url, Default::default(), berth::system_clock()).await?;
            let outcome = session_command(&Targets::Local(&service), command, json).await;
            let shutdown = service.shutdown().await;
            let code = outcome?;
            shutdown?;
            Ok(code)
        }
    }
}

/// `berth --server URL …`: the same session, run, append, export/import, audit and
/// retention commands against a running `berth serve`, through its HTTP API.
pub async fn run_remote(cli: Cli) -> Result<ExitCode> {
    let server = cli.server.clone().unwrap_or_default();
    let client =
        Arg::with_env("--server", "BERTH_SERVER").parse(&server, |url| Client::new(url, cli.api_key.clone()))?;
    let local_only = match &cli.command {
        Command::Fsck(_) => Some("fsck"),
        Command::Log(_) => Some("log"),
        Command::Bench(_) => Some("bench"),
        Command::Serve(_) => Some("serve"),
        Command::Keys(_) => Some("keys"),
        Command::Migrate(_) => Some("migrate"),
        Command::Backup(_) => Some("backup"),
        Command::Restore(_) => Some("restore"),
        _ => None,
    };
    if let Some(command) = local_only {
        let message = format!("{command} works on a data directory only: drop --server (or unset BERTH_SERVER)");
        return Err(Usage::new(message).into());
    }
    session_command(&Targets::Remote(client), cli.command, cli.json).await
}

/// The arguments that name a session or a run.
const ID: Arg = Arg::named("<ID>");
const SESSION: Arg = Arg::named("<SESSION>");
const RUN: Arg = Arg::named("<RUN>");
const RUN_FLAG: Arg = Arg::named("--run");
const OWNER: Arg = Arg::named("--owner");
const LOG_TENANT: Arg = Arg::named("--tenant");

/// A session id given as `arg`.
fn session_id(arg: Arg, text: &str) -> Result<SessionId, Usage> {
    arg.parse(text, SessionId::parse)
}

/// A run id given as `arg`.
fn run_id(arg: Arg, text: &str) -> Result<RunId, Usage> {
    arg.parse(text, RunId::parse)
}

/// The one dispatch of the session commands, over a data directory or a server.
async fn session_command(targets: &Targets<'_>, command: Command, json: bool) -> Result<ExitCode> {
    match command {
        Command::Sessions(command) => sessions(targets, command, json).await,
        Command::Runs(command) => runs(targets, command, json).await,
        Command::Append(args) => append(targets, args, json).await,
        Command::Export(args) => export(targets, args).await,
        Command::Import(args) => {
            let target = targets.acting_as(&args.principal)?;
            let bytes = std::fs::read(&args.file).map_err(|e| Error::io("read import file", &e))?;
            for record in &target.import(bytes).await? {
                print_value(record, json, session_line)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Gc(args) => gc(targets, args, json).await,
        Command::Audit(command) => audit(targets, command, json).await,
        Command::Memory(command) => super::memory::memory(targets, command, json).await,
        Command::Fsck(_)
        | Command::Log(_)
        | Command::Bench(_)
        | Command::Serve(_)
        | Command::Keys(_)
        | Command::Migrate(_)
        | Command::Backup(_)
        | Command::Restore(_) => {
            unreachable!("dispatched before choosing a target")
        }
    }
}

async fn sessions(targets: &Targets<'_>, command: SessionsCommand, json: bool) -> Result<ExitCode> {
    match command {
        SessionsCommand::Usage(args) => return super::model_usage::usage(targets, args, json).await,
        SessionsCommand::New { principal, id, owner, title, labels, parallel, ttl_ms } => {
            let target = targets.acting_as(&principal)?;
            let mut policy = SessionPolicy::default();
            if let Some(runs_max) = parallel {
                policy.concurrency = Concurrency::Parallel { runs_max };
            }
            if let Some(ttl_ms) = ttl_ms {
                policy.activity_ttl_ms = ttl_ms;
            }
            let request = CreateSession {
                id: id.as_deref().map(|id| session_id(Arg::named("--id"), id)).transpose()?,
                user: owner.as_deref().map(|owner| OWNER.parse(owner, UserId::parse)).transpose()?,
                policy: Some(policy),
                title,
                labels: labels.into_iter().collect(),
                ..CreateSession::default()
            };
            let record = target.create(request).await?;
            print_value(&record, json, |record| record.header.id.to_string())?;
        }
        SessionsCommand::Ls { principal, statuses, label, owner, all, search, limit, cursor } => {
            let target = targets.acting_as(&principal)?;
            let statuses = statuses
                .iter()
                .map(|status| Arg::named("--status").parse(status, berth_service::parse_listable_status))
                .collect::<Result<Vec<_>, Usage>>()?;
            let request = ListRequest {
                user: owner.as_deref().map(|owner| OWNER.parse(owner, UserId::parse)).transpose()?,
                statuses,
                label,
                include_blank: all,
                search: search
                    .map(|text| {
                        Arg::named("--search")
                            .parse(&text, |text| berth_catalog::SessionSearch::parse(text).map(|_| text.to_owned()))
                    })
                    .transpose()?,
                cursor,
                limit,
                ..ListRequest::default()
            };
            let page = target.list(&request).await?;
            if json {
                print_json(&page.wire_body())?;
            } else {
                let previews = previews(target.as_ref(), &page.items).await;
                for (record, preview) in page.items.iter().zip(previews) {
                    print_line(session_line_with_preview(record, preview.as_deref()))?;
                }
                if let Some(cursor) = &page.next_cursor {
                    print_line(format_args!("next: --cursor {cursor}"))?;
                }
            }
        }
        SessionsCommand::Show { principal, id } => {
            let record = targets.acting_as(&principal)?.get(&session_id(ID, &id)?).await?;
            print_value(&record, json, session_detail)?;
        }
        SessionsCommand::Stat { principal, id } => {
            let target = targets.acting_as(&principal)?;
            let record = target.get(&session_id(ID, &id)?).await?;
            match target.log_stat(&record).await? {
                Some(log) => {
                    let body = serde_json::json!({"session": record.wire_body(), "log": log});
                    if json {
                        print_json(&body)?;
                    } else {
                        print_line(pretty_with_times(body))?;
                    }
                }
                None => print_value(&record, json, session_detail)?,
            }
        }
        SessionsCommand::Cat { principal, id, from, limit, transcript } => {
            if transcript && json {
                return Err(Usage::new("--transcript prints text for people: leave out --json").into());
            }
            let events = targets.acting_as(&principal)?.read(&session_id(ID, &id)?, from, limit).await?;
            if transcript {
                events.iter().try_for_each(|event| write_stdout(transcript_entry(event).as_bytes()))?;
            } else {
                print_events(&events, json)?;
            }
        }
        SessionsCommand::Tail { principal, id, from, until } => {
            targets.acting_as(&principal)?.follow(&session_id(ID, &id)?, from, until, json).await?;
        }
        SessionsCommand::Close { principal, id, cancel_runs, expected_revision } => {
            let policy = if cancel_runs { ClosePolicy::CancelRuns } else { ClosePolicy::Refuse };
            let target = targets.acting_as(&principal)?;
            let record = target.close(&session_id(ID, &id)?, policy, expected_revision.map(Revision)).await?;
            print_value(&record, json, session_line)?;
        }
        SessionsCommand::Fork { principal, id, upto, new_id } => {
            let new_id = new_id.as_deref().map(|id| session_id(Arg::named("--new-id"), id)).transpose()?;
            let record = targets.acting_as(&principal)?.fork(&session_id(ID, &id)?, upto, new_id).await?;
            print_value(&record, json, |record| record.header.id.to_string())?;
        }
        SessionsCommand::Reopen { principal, id } => {
            let record = targets.acting_as(&principal)?.reopen(&session_id(ID, &id)?).await?;
            print_value(&record, json, session_line)?;
        }
        SessionsCommand::Update { principal, id, title, labels, expected_revision } => {
            let update = MetadataUpdate {
                title: title.map(Some),
                labels: labels.map(|labels| labels.into_iter().collect::<BTreeSet<_>>()),
                expected_revision: expected_revision.map(Revision),
            };
            let record = targets.acting_as(&principal)?.update_metadata(&session_id(ID, &id)?, update).await?;
            print_value(&record, json, session_line)?;
        }
        SessionsCommand::Delete { principal, id, expected_revision } => {
            targets.acting_as(&principal)?.delete(&session_id(ID, &id)?, expected_revision.map(Revision)).await?;
            print_value(&serde_json::json!({"deleted": id}), json, |_| format!("deleted {id}"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn runs(targets: &Targets<'_>, command: RunsCommand, json: bool) -> Result<ExitCode> {
    match command {
        RunsCommand::Attach { principal, session, run, interrupt, expected_revision } => {
            let request = AttachRequest {
                run_id: run.as_deref().map(|run| run_id(RUN_FLAG, run)).transpose()?,
                expected_revision: expected_revision.map(Revision),
                on_busy: if interrupt { OnBusy::Interrupt } else { OnBusy::Reject },
            };
            let attachment = targets.acting_as(&principal)?.attach(&session_id(SESSION, &session)?, request).await?;
            print_value(&attachment, json, |a| {
                format!("{} lease_until {} revision {}", a.run.run_id, time_text(a.run.lease_until), a.revision.0)
            })?;
        }
        RunsCommand::Heartbeat { principal, session, run } => {
            let run =
                targets.acting_as(&principal)?.heartbeat(&session_id(SESSION, &session)?, &run_id(RUN, &run)?).await?;
            print_value(&run, json, |run| format!("{} lease_until {}", run.run_id, time_text(run.lease_until)))?;
        }
        RunsCommand::Detach { principal, session, run, outcome, expected_revision } => {
            let target = targets.acting_as(&principal)?;
            let record = target
                .detach(&session_id(SESSION, &session)?, &run_id(RUN, &run)?, &outcome, expected_revision.map(Revision))
                .await?;
            print_value(&record, json, session_line)?;
        }
        RunsCommand::Resume { principal, session, run, interrupt } => {
            let request = AttachRequest {
                run_id: run.as_deref().map(|run| run_id(RUN_FLAG, run)).transpose()?,
                expected_revision: None,
                on_busy: if interrupt { OnBusy::Interrupt } else { OnBusy::Reject },
            };
            let outcome = targets.acting_as(&principal)?.resume(&session_id(SESSION, &session)?, request).await?;
            print_value(&outcome, json, |outcome| {
                let mut text = format!(
                    "run {} attached; repaired {} event(s); next seq {}",
                    outcome.attachment.run.run_id,
                    outcome.repaired.len(),
                    outcome.next_seq
                );
                for event in &outcome.repaired {
                    text.push_str(&format!("\n  + {}", event_line(event)));
                }
                if let Some(checkpoint) = &outcome.checkpoint {
                    text.push_str(&format!("\ncheckpoint at seq {}: {}", checkpoint.seq, checkpoint.data));
                }
                text
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The append request of `berth append`: events as JSON lines from the file (or stdin).
/// Shared by the local and the `--server` paths.
fn read_append_request(args: &AppendArgs) -> Result<AppendRequest> {
    let mut bytes = Vec::new();
    match &args.file {
        Some(path) if path.as_os_str() != "-" => {
            bytes = std::fs::read(path).map_err(|e| Error::io("read events file", &e))?;
        }
        _ => {
            std::io::stdin().read_to_end(&mut bytes).map_err(|e| Error::io("read stdin", &e))?;
        }
    }
    let text = events_text(bytes)?;
    let mut events = Vec::new();
    for (number, line) in text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty()) {
        let event: NewEvent = serde_json::from_str(line)
            .map_err(|error| Error::invalid("event", format!("line {}: {error}", number + 1)))?;
        events.push(event);
    }
    Ok(AppendRequest {
        memory: Vec::new(),
        run: args.run.as_deref().map(|run| run_id(RUN_FLAG, run)).transpose()?,
        expected_seq: args.expected_seq,
        events,
        idempotency_key: args.idempotency_key.clone(),
    })
}

/// The events' bytes as text. Bytes that are not UTF-8 are the caller's input, not an
/// I/O failure: `Invalid` (exit 5, do not retry), naming the line, never `Io` (exit 1,
/// which the docs call retryable).
fn events_text(bytes: Vec<u8>) -> berth_core::Result<String> {
    String::from_utf8(bytes).map_err(|error| {
        let valid = &error.as_bytes()[..error.utf8_error().valid_up_to()];
        let line = valid.iter().filter(|byte| **byte == b'\n').count() + 1;
        Error::invalid("event", format!("line {line}: not UTF-8"))
    })
}

/// How `berth append` reports its outcome (local and `--server`).
fn print_append_outcome(outcome: &berth_service::AppendOutcome, json: bool) -> berth_core::Result<()> {
    print_value(outcome, json, |o| {
        format!("appended seqs {}..{}{}", o.first_seq, o.next_seq, if o.duplicate { " (already stored)" } else { "" })
    })
}

async fn append(targets: &Targets<'_>, args: AppendArgs, json: bool) -> Result<ExitCode> {
    let target = targets.acting_as(&args.principal)?;
    let request = read_append_request(&args)?;
    let id = session_id(SESSION, &args.session)?;
    // `writer_busy` is refused before anything is stored, so sending again is safe.
    let deadline = Instant::now() + Duration::from_secs_f64(args.busy_wait);
    let mut attempt = 0u32;
    let outcome = loop {
        match target.append(&id, request.clone()).await {
            Err(Error::WriterBusy { .. }) if Instant::now() + busy_backoff(attempt) <= deadline => {
                tokio::time::sleep(busy_backoff(attempt)).await;
                attempt += 1;
            }
            other => break other?,
        }
    };
    print_append_outcome(&outcome, json)?;
    Ok(ExitCode::SUCCESS)
}

/// The `attempt`-th wait after `writer_busy`: doubling, capped, with jitter (half to
/// all of it) so that many waiting processes do not retry in step.
fn busy_backoff(attempt: u32) -> Duration {
    let doubled = BUSY_BACKOFF_FIRST.saturating_mul(1u32 << attempt.min(16)).min(BUSY_BACKOFF_LAST);
    doubled.mul_f64(0.5 + rand::random::<f64>() / 2.0)
}

async fn export(targets: &Targets<'_>, args: ExportArgs) -> Result<ExitCode> {
    let bytes = targets.acting_as(&args.principal)?.export(&session_id(SESSION, &args.session)?, args.zip).await?;
    match &args.output {
        Some(path) => std::fs::write(path, &bytes).map_err(|e| Error::io("write export", &e))?,
        None => write_stdout(&bytes)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Sets the retention policy if one is given, then sweeps in bounded batches (once, or
/// with `--all` until nothing remains). A server sweeps on its own: through it, `gc`
/// only sets the policy, and without one there is nothing to do.
async fn gc(targets: &Targets<'_>, args: GcArgs, json: bool) -> Result<ExitCode> {
    let target = targets.acting_as(&args.principal)?;
    let policy_given = args.idle_ttl_ms.is_some()
        || args.max_age_ms.is_some()
        || args.delete_terminal_after_ms.is_some()
        || args.memory_max_age_ms.is_some();
    if policy_given {
        let policy = RetentionPolicy {
            idle_ttl_ms: args.idle_ttl_ms,
            max_age_ms: args.max_age_ms,
            delete_terminal_after_ms: args.delete_terminal_after_ms,
            memory_max_age_ms: args.memory_max_age_ms,
        };
        target.set_retention(policy).await?;
    }
    let Some(mut total) = target.sweep(args.batch).await? else {
        if !policy_given {
            return Err(Usage::new(
                "gc through --server only sets the retention policy (the server sweeps on its own): \
                 give --idle-ttl-ms, --max-age-ms, --delete-terminal-after-ms or --memory-max-age-ms",
            )
            .into());
        }
        print_line(format_args!("retention policy set; the server's sweeper applies it"))?;
        return Ok(ExitCode::SUCCESS);
    };
    while args.all && total.more {
        let Some(report) = target.sweep(args.batch).await? else { break };
        total.expired += report.expired;
        total.deleted += report.deleted;
        total.abandoned_creates += report.abandoned_creates;
        total.more = report.more;
    }
    print_value(&total, json, |r| {
        format!(
            "expired {} deleted {} abandoned creates {}{}",
            r.expired,
            r.deleted,
            r.abandoned_creates,
            if r.more { " (more remain)" } else { "" }
        )
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn audit(targets: &Targets<'_>, command: AuditCommand, json: bool) -> Result<ExitCode> {
    match command {
        AuditCommand::Verify { principal } => {
            let verdict = targets.acting_as(&principal)?.verify_audit().await?;
            let printed = print_value(&verdict, json, |v| match v.broken_at {
                None => format!("audit log intact: {} entries", v.entries),
                Some(seq) => format!("audit log BROKEN at entry {seq}: {}", v.reason.as_deref().unwrap_or("")),
            });
            unless_closed_stdout(printed)?;
            Ok(if verdict.broken_at.is_some() {
                ExitCode::from(berth::exit::audit_broken())
            } else {
                ExitCode::SUCCESS
            })
        }
        AuditCommand::Log { principal, from, limit } => {
            let entries = targets.acting_as(&principal)?.audit_log(from, limit).await?;
            if json {
                print_json(&entries.wire_body())?;
            } else {
                for entry in entries {
                    let session = entry.draft.session.as_ref().map(|s| s.to_string()).unwrap_or_default();
                    print_line(format_args!(
                        "{:>6} {} {:<20} {:<10} {:<8} {}",
                        entry.seq,
                        time_text(entry.draft.time),
                        entry.draft.actor,
                        entry.draft.action,
                        entry.draft.outcome,
                        session
                    ))?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn log_command(data: &str, command: LogCommand, json: bool) -> Result<ExitCode> {
    let backends = berth::open_backends(&store_url(data)?).await?;
    let store = backends.store;
    match command {
        LogCommand::Ls { tenant, limit } => {
            let mut query = ListQuery::tenant(LOG_TENANT.parse(&tenant, TenantId::parse)?);
            query.limit = limit.min(berth_core::limits::PAGE_SIZE_MAX);
            let page = store.list(&query).await?;
            for stat in &page.items {
                if json {
                    print_line(format_args!(
                        "{}",
                        serde_json::json!({"id": stat.header.id, "header": stat.header, "change_token": stat.change_token, "size_bytes": stat.size_bytes})
                    ))?;
                } else {
                    print_line(format_args!(
                        "{:<40} {:>10} bytes  {}",
                        stat.header.id.as_str(),
                        stat.size_bytes.unwrap_or(0),
                        stat.change_token.0
                    ))?;
                }
            }
        }
        LogCommand::Stat { tenant, id } => {
            let key = SessionKey::new(LOG_TENANT.parse(&tenant, TenantId::parse)?, session_id(ID, &id)?);
            let stat = store.stat(&key).await?.ok_or_else(|| Error::session_not_found(&id))?;
            let body = serde_json::json!({"header": stat.header, "change_token": stat.change_token, "event_count": stat.event_count, "size_bytes": stat.size_bytes});
            if json {
                print_json(&body)?;
            } else {
                print_line(pretty_with_times(body))?;
            }
        }
        LogCommand::Cat { tenant, id, from, limit } => {
            let key = SessionKey::new(LOG_TENANT.parse(&tenant, TenantId::parse)?, session_id(ID, &id)?);
            let handle = store.open(&key, Access::Read).await?;
            let events = handle.read(from, limit).await;
            let _ = handle.close().await;
            print_events(&events?, json)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
