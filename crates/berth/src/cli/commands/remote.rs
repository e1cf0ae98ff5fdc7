//! `berth --server URL …`: the session, run, append, export/import, audit and retention
//! commands against a running `berth serve`, through its HTTP API. The principal comes
//! from the API key (`--api-key` / `BERTH_API_KEY`); `--tenant`, `--user` and `--role`
//! are ignored, as the server takes the tenant from the key alone.

use super::{print_events, AppendArgs, AuditCommand, ExportArgs, GcArgs, ImportArgs, RunsCommand, SessionsCommand};
use crate::cli::output::{print_json, print_line, print_value, session_detail, session_line, write_stdout, WireBody};
use crate::cli::{Cli, Command};
use berth_catalog::RetentionPolicy;
use berth_core::{Concurrency, Error, Result, Revision, RunId, SessionId, SessionPolicy, UserId};
use berth_server::client::Client;
use berth_service::{AttachRequest, ClosePolicy, CreateSession, ListRequest, MetadataUpdate, OnBusy};
use std::collections::BTreeSet;
use std::process::ExitCode;

pub async fn run(cli: Cli) -> Result<ExitCode> {
    let url = cli.server.clone().unwrap_or_default();
    let client = Client::new(&url, cli.api_key.clone())?;
    let json = cli.json;
    match cli.command {
        Command::Sessions(command) => sessions(&client, command, json).await,
        Command::Runs(command) => runs(&client, command, json).await,
        Command::Append(args) => append(&client, args, json).await,
        Command::Export(args) => export(&client, args).await,
        Command::Import(args) => import(&client, args, json).await,
        Command::Audit(command) => audit(&client, command, json).await,
        Command::Gc(args) => retention(&client, args).await,
        _ => Err(Error::invalid("--server", "this command works on a data directory only (drop --server)")),
    }
}

fn sid(text: &str) -> Result<SessionId> {
    SessionId::parse(text)
}

fn rid(text: &str) -> Result<RunId> {
    RunId::parse(text)
}

fn on_busy(interrupt: bool) -> OnBusy {
    if interrupt {
        OnBusy::Interrupt
    } else {
        OnBusy::Reject
    }
}

async fn sessions(client: &Client, command: SessionsCommand, json: bool) -> Result<ExitCode> {
    match command {
        SessionsCommand::New { id, owner, title, labels, parallel, ttl_ms, .. } => {
            let mut policy = SessionPolicy::default();
            if let Some(runs_max) = parallel {
                policy.concurrency = Concurrency::Parallel { runs_max };
            }
            if let Some(ttl_ms) = ttl_ms {
                policy.activity_ttl_ms = ttl_ms;
            }
            let request = CreateSession {
                id: id.as_deref().map(sid).transpose()?,
                user: owner.as_deref().map(UserId::parse).transpose()?,
                policy: Some(policy),
                title,
                labels: labels.into_iter().collect(),
                ..CreateSession::default()
            };
            let record = client.create(&request).await?;
            print_value(&record, json, |record| record.header.id.to_string())?;
        }
        SessionsCommand::Ls { statuses, label, owner, all, limit, cursor, .. } => {
            let request = ListRequest {
                user: owner.as_deref().map(UserId::parse).transpose()?,
                statuses: statuses
                    .iter()
                    .map(|status| berth_service::parse_listable_status(status))
                    .collect::<Result<Vec<_>>>()?,
                label,
                include_blank: all,
                cursor,
                limit,
                ..ListRequest::default()
            };
            let page = client.list(&request).await?;
            if json {
                print_json(&page.wire_body())?;
            } else {
                for record in &page.items {
                    print_line(session_line(record))?;
                }
                if let Some(cursor) = &page.next_cursor {
                    print_line(format_args!("next: --cursor {cursor}"))?;
                }
            }
        }
        SessionsCommand::Show { id, .. } | SessionsCommand::Stat { id, .. } => {
            let record = client.get(&sid(&id)?).await?;
            print_value(&record, json, session_detail)?;
        }
        SessionsCommand::Cat { id, from, limit, .. } => {
            let events = client.read(&sid(&id)?, from, limit).await?;
            print_events(&events, json)?;
        }
        SessionsCommand::Tail { id, from, until, .. } => {
            let mut stream = client.tail(&sid(&id)?, Some(from), None).await?;
            let mut next = from;
            while until.is_none_or(|until| next < until) {
                let Some(event) = stream.next_event().await? else { break };
                next = event.seq.0 + 1;
                print_events(std::slice::from_ref(&event), json)?;
            }
        }
        SessionsCommand::Close { id, cancel_runs, expected_revision, .. } => {
            let policy = if cancel_runs { ClosePolicy::CancelRuns } else { ClosePolicy::Refuse };
            let record = client.close(&sid(&id)?, policy, expected_revision.map(Revision)).await?;
            print_value(&record, json, session_line)?;
        }
        SessionsCommand::Fork { id, upto, new_id, .. } => {
            let new_id = new_id.as_deref().map(sid).transpose()?;
            let record = client.fork(&sid(&id)?, upto, new_id.as_ref()).await?;
            print_value(&record, json, |record| record.header.id.to_string())?;
        }
        SessionsCommand::Reopen { id, .. } => {
            let record = client.reopen(&sid(&id)?).await?;
            print_value(&record, json, session_line)?;
        }
        SessionsCommand::Update { id, title, labels, expected_revision, .. } => {
            let update = MetadataUpdate {
                title: title.map(Some),
                labels: labels.map(|labels| labels.into_iter().collect::<BTreeSet<_>>()),
                expected_revision: expected_revision.map(Revision),
            };
            let record = client.update_metadata(&sid(&id)?, &update).await?;
            print_value(&record, json, session_line)?;
        }
        SessionsCommand::Delete { id, expected_revision, .. } => {
            client.delete(&sid(&id)?, expected_revision.map(Revision)).await?;
            print_value(&serde_json::json!({"deleted": id}), json, |_| format!("deleted {id}"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn runs(client: &Client, command: RunsCommand, json: bool) -> Result<ExitCode> {
    match command {
        RunsCommand::Attach { session, run, interrupt, expected_revision, .. } => {
            let request = AttachRequest {
                run_id: run.as_deref().map(rid).transpose()?,
                expected_revision: expected_revision.map(Revision),
                on_busy: on_busy(interrupt),
            };
            let attachment = client.attach(&sid(&session)?, &request).await?;
            print_value(&attachment, json, |a| {
                format!("{} lease_until {} revision {}", a.run.run_id, a.run.lease_until.0, a.revision.0)
            })?;
        }
        RunsCommand::Heartbeat { session, run, .. } => {
            let run = client.heartbeat(&sid(&session)?, &rid(&run)?).await?;
            print_value(&run, json, |run| format!("{} lease_until {}", run.run_id, run.lease_until.0))?;
        }
        RunsCommand::Detach { session, run, outcome, expected_revision, .. } => {
            let record = client.detach(&sid(&session)?, &rid(&run)?, &outcome, expected_revision.map(Revision)).await?;
            print_value(&record, json, session_line)?;
        }
        RunsCommand::Resume { session, run, interrupt, .. } => {
            let request = AttachRequest {
                run_id: run.as_deref().map(rid).transpose()?,
                expected_revision: None,
                on_busy: on_busy(interrupt),
            };
            let outcome = client.resume(&sid(&session)?, &request).await?;
            print_value(&outcome, json, |outcome| {
                format!(
                    "run {} attached; repaired {} event(s); next seq {}",
                    outcome.attachment.run.run_id,
                    outcome.repaired.len(),
                    outcome.next_seq
                )
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn append(client: &Client, args: AppendArgs, json: bool) -> Result<ExitCode> {
    let request = super::read_append_request(&args)?;
    let outcome = client.append(&sid(&args.session)?, &request).await?;
    super::print_append_outcome(&outcome, json)?;
    Ok(ExitCode::SUCCESS)
}

async fn export(client: &Client, args: ExportArgs) -> Result<ExitCode> {
    let bytes = client.export(&sid(&args.session)?, args.zip).await?;
    match &args.output {
        Some(path) => std::fs::write(path, &bytes).map_err(|e| Error::io("write export", &e))?,
        None => write_stdout(&bytes)?,
    }
    Ok(ExitCode::SUCCESS)
}

async fn import(client: &Client, args: ImportArgs, json: bool) -> Result<ExitCode> {
    let bytes = std::fs::read(&args.file).map_err(|e| Error::io("read import file", &e))?;
    for record in client.import(bytes).await? {
        print_value(&record, json, session_line)?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn audit(client: &Client, command: AuditCommand, json: bool) -> Result<ExitCode> {
    match command {
        AuditCommand::Verify { .. } => {
            let verdict = client.verify_audit().await?;
            print_value(&verdict, json, |v| match v.broken_at {
                None => format!("audit log intact: {} entries", v.entries),
                Some(seq) => format!("audit log BROKEN at entry {seq}"),
            })?;
            Ok(if verdict.broken_at.is_some() { ExitCode::from(6) } else { ExitCode::SUCCESS })
        }
        AuditCommand::Log { from, limit, .. } => {
            let entries = client.audit_log(from, limit).await?;
            print_json(&entries.wire_body())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `gc` against a server sets the tenant's retention policy; the server's own sweeper
/// applies it.
async fn retention(client: &Client, args: GcArgs) -> Result<ExitCode> {
    if args.idle_ttl_ms.is_none() && args.max_age_ms.is_none() && args.delete_terminal_after_ms.is_none() {
        return Err(Error::invalid(
            "--server",
            "the server sweeps on its own; give --idle-ttl-ms, --max-age-ms or --delete-terminal-after-ms to set the policy",
        ));
    }
    let policy = RetentionPolicy {
        idle_ttl_ms: args.idle_ttl_ms,
        max_age_ms: args.max_age_ms,
        delete_terminal_after_ms: args.delete_terminal_after_ms,
    };
    client.set_retention(&policy).await?;
    print_line(format_args!("retention policy set; the server's sweeper applies it"))?;
    Ok(ExitCode::SUCCESS)
}
