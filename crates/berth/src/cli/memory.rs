//! `berth memory put|get|rm|search|ls|forget|usage|quota`: scoped memory, on a data directory (as
//! the `--tenant`/`--user`/`--role` principal) or through a server (as the key's).
//! `--json` prints the `/v1/memory` wire bodies.

use super::output::{print_json, print_line};
use super::target::Targets;
use super::usage::{Arg, Result, Usage};
use super::PrincipalArgs;
use berth_api as wire;
use berth_core::{JsonText, SessionId};
use clap::Subcommand;
use std::process::ExitCode;

#[derive(Subcommand, Debug)]
pub enum MemoryCommand {
    /// Create or replace an item: `berth memory put user/alice/prefs tone '"terse"'`.
    Put {
        #[command(flatten)]
        principal: PrincipalArgs,
        namespace: String,
        key: String,
        /// The value, as JSON.
        value: String,
        /// Compare-and-set: 0 = only if absent.
        #[arg(long)]
        expected_revision: Option<u64>,
        #[arg(long)]
        ttl_ms: Option<u64>,
        /// Delete the item with this session.
        #[arg(long)]
        bound_to: Option<String>,
    },
    /// Print one item.
    Get {
        #[command(flatten)]
        principal: PrincipalArgs,
        namespace: String,
        key: String,
    },
    /// Delete one item.
    Rm {
        #[command(flatten)]
        principal: PrincipalArgs,
        namespace: String,
        key: String,
        #[arg(long)]
        expected_revision: Option<u64>,
    },
    /// Search a namespace (and everything inside it).
    Search {
        #[command(flatten)]
        principal: PrincipalArgs,
        prefix: String,
        /// A condition `FIELD OP JSON` (op: eq ne gt gte lt lte in), repeatable, ANDed.
        #[arg(long = "where", value_name = "FIELD OP JSON")]
        conditions: Vec<String>,
        /// Full-text terms, ANDed.
        #[arg(long)]
        query: Option<String>,
        /// key, updated_at or relevance.
        #[arg(long, default_value = "key")]
        order: String,
        #[arg(long)]
        limit: Option<u64>,
        #[arg(long)]
        cursor: Option<String>,
    },
    /// List the namespaces within a prefix.
    Ls {
        #[command(flatten)]
        principal: PrincipalArgs,
        prefix: String,
        #[arg(long)]
        max_depth: Option<u64>,
        #[arg(long)]
        limit: Option<u64>,
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Delete exactly one scope (`user/alice`) or a namespace inside one, audited.
    Forget {
        #[command(flatten)]
        principal: PrincipalArgs,
        prefix: String,
    },
    /// The tenant's memory usage and the quota that applies (service and admin).
    Usage {
        #[command(flatten)]
        principal: PrincipalArgs,
    },
    /// Admin: set the tenant's own memory quota; a limit not given is the server's
    /// default again (`berth serve --memory-items-max/--memory-bytes-max`).
    Quota {
        #[command(flatten)]
        principal: PrincipalArgs,
        /// Items the tenant may store.
        #[arg(long)]
        items: Option<u64>,
        /// Bytes of namespaces, keys and values the tenant may store.
        #[arg(long)]
        bytes: Option<u64>,
    },
}

const WHERE: Arg = Arg::named("--where");

fn condition(text: &str) -> Result<wire::ConditionBody, Usage> {
    let invalid = || WHERE.invalid(text, "expected FIELD OP JSON, e.g. 'n gte 3'");
    let mut parts = text.trim().splitn(3, ' ');
    let (Some(field), Some(op), Some(value)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(invalid());
    };
    let op = match op {
        "eq" => wire::FilterOpBody::Eq,
        "ne" => wire::FilterOpBody::Ne,
        "gt" => wire::FilterOpBody::Gt,
        "gte" => wire::FilterOpBody::Gte,
        "lt" => wire::FilterOpBody::Lt,
        "lte" => wire::FilterOpBody::Lte,
        "in" => wire::FilterOpBody::In,
        _ => return Err(invalid()),
    };
    let value = WHERE.parse(text, |_| JsonText::parse(value.trim()))?;
    Ok(wire::ConditionBody { field: field.to_owned(), op, value })
}

fn order(text: &str) -> Result<wire::MemoryOrder, Usage> {
    match text {
        "key" => Ok(wire::MemoryOrder::Key),
        "updated_at" => Ok(wire::MemoryOrder::UpdatedAt),
        "relevance" => Ok(wire::MemoryOrder::Relevance),
        other => Err(Arg::named("--order").invalid(other, "give key, updated_at or relevance")),
    }
}

fn usage_line(usage: &wire::MemoryUsageBody) -> String {
    format!("{} items of {}, {} bytes of {}", usage.items, usage.quota_items, usage.bytes, usage.quota_bytes)
}

fn item_line(item: &wire::MemoryItemBody) -> String {
    format!("{}\t{}\t{}\t{}", item.namespace, item.key, item.revision, item.value.as_str())
}

pub async fn memory(targets: &Targets<'_>, command: MemoryCommand, json: bool) -> Result<ExitCode> {
    let print_item = |item: &wire::MemoryItemBody| if json { print_json(item) } else { print_line(item_line(item)) };
    match command {
        MemoryCommand::Put { principal, namespace, key, value, expected_revision, ttl_ms, bound_to } => {
            let body = wire::PutMemoryBody {
                namespace,
                key,
                value: Arg::named("<VALUE>").parse(&value, JsonText::parse)?,
                expected_revision,
                ttl_ms,
                bound_to: bound_to
                    .as_deref()
                    .map(|id| Arg::named("--bound-to").parse(id, SessionId::parse))
                    .transpose()?,
            };
            print_item(&targets.acting_as(&principal)?.memory_put(body).await?)?;
        }
        MemoryCommand::Get { principal, namespace, key } => {
            print_item(&targets.acting_as(&principal)?.memory_get(&namespace, &key).await?)?;
        }
        MemoryCommand::Rm { principal, namespace, key, expected_revision } => {
            print_item(&targets.acting_as(&principal)?.memory_delete(&namespace, &key, expected_revision).await?)?;
        }
        MemoryCommand::Search { principal, prefix, conditions, query, order: sort, limit, cursor } => {
            let body = wire::MemorySearchBody {
                prefix,
                filter: conditions.iter().map(|text| condition(text)).collect::<Result<_, Usage>>()?,
                query,
                order: order(&sort)?,
                cursor,
                limit,
            };
            let page = targets.acting_as(&principal)?.memory_search(body).await?;
            if json {
                print_json(&page)?;
            } else {
                for item in &page.items {
                    print_line(item_line(item))?;
                }
                if let Some(cursor) = &page.next_cursor {
                    print_line(format_args!("# more: --cursor {cursor}"))?;
                }
            }
        }
        MemoryCommand::Ls { principal, prefix, max_depth, limit, cursor } => {
            let params = wire::NamespaceParams { prefix, max_depth, cursor, limit };
            let page = targets.acting_as(&principal)?.memory_namespaces(params).await?;
            if json {
                print_json(&page)?;
            } else {
                for namespace in &page.namespaces {
                    print_line(namespace)?;
                }
                if let Some(cursor) = &page.next_cursor {
                    print_line(format_args!("# more: --cursor {cursor}"))?;
                }
            }
        }
        MemoryCommand::Forget { principal, prefix } => {
            let report = targets.acting_as(&principal)?.memory_forget(&prefix).await?;
            if json {
                print_json(&report)?;
            } else {
                print_line(format_args!(
                    "forgot {}: {} items, {} bytes (audit entry {})",
                    report.prefix, report.items, report.bytes, report.audit_seq
                ))?;
            }
        }
        MemoryCommand::Usage { principal } => {
            let usage = targets.acting_as(&principal)?.memory_usage().await?;
            if json {
                print_json(&usage)?
            } else {
                print_line(usage_line(&usage))?
            }
        }
        MemoryCommand::Quota { principal, items, bytes } => {
            let body = wire::MemoryQuotaBody { items, bytes };
            let usage = targets.acting_as(&principal)?.set_memory_quota(body).await?;
            if json {
                print_json(&usage)?
            } else {
                print_line(usage_line(&usage))?
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
