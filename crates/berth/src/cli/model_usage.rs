//! `berth sessions usage`: a session's LLM usage and tool time (`ID`), or the caller's
//! totals over a range of event times (`--all --since T [--before T]`), computed from the
//! `model/call` and tool events — on a data directory or through `--server`. Text is a
//! small table by provider and model with the totals under it; `--json` prints the
//! `/v1` body (`GET /v1/sessions/{id}/usage`, `GET /v1/usage`).

use super::output::{print_json, print_line, time_text};
use super::target::Targets;
use super::usage::{Arg, Result, Usage};
use super::PrincipalArgs;
use berth_api as wire;
use berth_core::{SessionId, Timestamp};
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct UsageArgs {
    #[command(flatten)]
    principal: PrincipalArgs,
    /// The session (leave out with --all).
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    id: Option<String>,
    /// Totals over every session you may list (a user: your own) whose activity overlaps
    /// the range; reads each one's model and tool events. Needs --since.
    #[arg(long, requires = "since")]
    all: bool,
    /// With --all: events at or after this time (RFC 3339, e.g. 2026-12-01T00:00:00Z, or
    /// ms since the epoch).
    #[arg(long)]
    since: Option<String>,
    /// With --all: events before this time (RFC 3339 or ms; default: now).
    #[arg(long, visible_alias = "until")]
    before: Option<String>,
}

const SINCE: Arg = Arg::named("--since");
const BEFORE: Arg = Arg::named("--before");

/// A time given on the command line: ms since the epoch, or RFC 3339.
fn time_arg(arg: Arg, text: &str) -> Result<Timestamp, Usage> {
    arg.parse(text, |text| {
        if let Ok(ms) = text.parse::<u64>() {
            return Ok(Timestamp(ms));
        }
        let moment =
            time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).map_err(|error| {
                berth_core::Error::invalid("time", format!("neither RFC 3339 (2026-12-01T00:00:00Z) nor ms: {error}"))
            })?;
        u64::try_from(moment.unix_timestamp_nanos() / 1_000_000)
            .map(Timestamp)
            .map_err(|_| berth_core::Error::invalid("time", "before 1970"))
    })
}

fn now() -> Timestamp {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Timestamp(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
}

pub async fn usage(targets: &Targets<'_>, args: UsageArgs, json: bool) -> Result<ExitCode> {
    if args.id.is_some() && (args.since.is_some() || args.before.is_some()) {
        return Err(Usage::new("--since and --before go with --all: a session's usage covers its whole log").into());
    }
    let target = targets.acting_as(&args.principal)?;
    match args.id {
        Some(id) => {
            let id = Arg::named("<ID>").parse(&id, SessionId::parse)?;
            let body = target.session_usage(&id).await?;
            if json {
                print_json(&body)?;
            } else {
                let totals = Row::totals(&body.by_model);
                print_line(table(&body.by_model, &totals, (body.tool_calls, body.tool_ms)))?;
            }
        }
        None => {
            let since = time_arg(SINCE, args.since.as_deref().unwrap_or_default())?;
            // "Until now": the current millisecond included.
            let before = args.before.as_deref().map(|text| time_arg(BEFORE, text)).transpose()?;
            let before = before.unwrap_or_else(|| Timestamp(now().0 + 1));
            if since >= before {
                return Err(Usage::new("--since must be before --before (the range is [since, before))").into());
            }
            let body = target.tenant_usage(since.0, before.0).await?;
            if json {
                print_json(&body)?;
            } else {
                print_line(format!(
                    "{} sessions with model calls from {} to {}",
                    body.sessions,
                    time_text(body.since),
                    time_text(body.before)
                ))?;
                let totals = Row::totals(&body.by_model);
                print_line(table(&body.by_model, &totals, (body.tool_calls, body.tool_ms)))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One line of the table: provider, model, then the figures as text.
struct Row([String; 8]);

impl Row {
    const HEADER: [&'static str; 8] = ["PROVIDER", "MODEL", "CALLS", "ERRORS", "INPUT", "OUTPUT", "CACHED", "MODEL_MS"];

    fn of(provider: &str, model: &str, usage: &wire::ModelUsageBody) -> Row {
        Row([
            provider.to_owned(),
            model.to_owned(),
            usage.calls.to_string(),
            usage.errors.to_string(),
            usage.input_tokens.to_string(),
            usage.output_tokens.to_string(),
            usage.cached_tokens.to_string(),
            format!("{:.1}", usage.model_ms),
        ])
    }

    /// The totals over every model's row.
    fn totals(by_model: &[wire::ModelUsageBody]) -> Row {
        let mut sum = wire::ModelUsageBody {
            provider: None,
            model: String::new(),
            calls: 0,
            errors: 0,
            input_tokens: 0,
            output_tokens: 0,
            cached_tokens: 0,
            model_ms: 0.0,
        };
        for usage in by_model {
            sum.calls += usage.calls;
            sum.errors += usage.errors;
            sum.input_tokens = sum.input_tokens.saturating_add(usage.input_tokens);
            sum.output_tokens = sum.output_tokens.saturating_add(usage.output_tokens);
            sum.cached_tokens = sum.cached_tokens.saturating_add(usage.cached_tokens);
            sum.model_ms += usage.model_ms;
        }
        Row::of("total", "", &sum)
    }
}

/// The table by model (provider `-` when the calls named none), the totals, and the
/// tool time on a line of its own.
fn table(by_model: &[wire::ModelUsageBody], totals: &Row, (tool_calls, tool_ms): (u64, u64)) -> String {
    let header = Row(Row::HEADER.map(str::to_owned));
    let mut rows = vec![header];
    rows.extend(by_model.iter().map(|usage| Row::of(usage.provider.as_deref().unwrap_or("-"), &usage.model, usage)));
    let widths: Vec<usize> = (0..8)
        .map(|column| rows.iter().chain([totals]).map(|row| row.0[column].chars().count()).max().unwrap_or(0))
        .collect();
    let line = |row: &Row| {
        let cells: Vec<String> = row
            .0
            .iter()
            .zip(&widths)
            .enumerate()
            .map(
                |(column, (cell, width))| {
                    if column < 2 {
                        format!("{cell:<width$}")
                    } else {
                        format!("{cell:>width$}")
                    }
                },
            )
            .collect();
        cells.join("  ").trim_end().to_owned()
    };
    let mut lines: Vec<String> = rows.iter().map(line).collect();
    lines.push(line(totals));
    lines.push(format!("tools: {tool_calls} calls, {tool_ms} ms"));
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(provider: Option<&str>, model: &str, calls: u64, model_ms: f64) -> wire::ModelUsageBody {
        wire::ModelUsageBody {
            provider: provider.map(str::to_owned),
            model: model.to_owned(),
            calls,
            errors: 1,
            input_tokens: 1_000 * calls,
            output_tokens: 10,
            cached_tokens: 0,
            model_ms,
        }
    }

    #[test]
    fn the_table_lines_up_models_and_totals() {
        let by_model = vec![model(None, "unknown", 1, 0.25), model(Some("openai"), "gpt-4o", 12, 1500.5)];
        let text = table(&by_model, &Row::totals(&by_model), (3, 250));
        let expected = "\
PROVIDER  MODEL    CALLS  ERRORS  INPUT  OUTPUT  CACHED  MODEL_MS
-         unknown      1       1   1000      10       0       0.2
openai    gpt-4o      12       1  12000      10       0    1500.5
total                 13       2  13000      20       0    1500.8
tools: 3 calls, 250 ms";
        assert_eq!(text, expected);
    }

    #[test]
    fn times_are_ms_or_rfc_3339() {
        assert_eq!(time_arg(SINCE, "1767225600000").unwrap(), Timestamp(1_767_225_600_000));
        assert_eq!(time_arg(SINCE, "2026-01-01T00:00:00Z").unwrap(), Timestamp(1_767_225_600_000));
        assert_eq!(time_arg(SINCE, "2026-01-01T01:00:00.5+01:00").unwrap(), Timestamp(1_767_225_600_500));
        assert!(time_arg(SINCE, "yesterday").is_err());
        assert!(time_arg(SINCE, "1969-12-31T23:59:59Z").is_err());
    }
}
