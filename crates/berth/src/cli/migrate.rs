//! `berth migrate`: applies pending PostgreSQL schema migrations (versioned,
//! forward-only, under an advisory lock, so it is safe beside running servers that
//! start up and migrate at the same time).

use super::output::print_line;
use super::store_url;
use super::usage::{Result, Usage};
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct MigrateArgs {
    /// After migrating, grant this (existing) role what `berth serve` needs and nothing
    /// more: data access bounded by row-level security, reading the schema version. Run
    /// `berth migrate` as the tables' owner; serve as this role.
    #[arg(long)]
    app_role: Option<String>,
}

pub async fn migrate(data: &str, args: MigrateArgs, json: bool) -> Result<ExitCode> {
    let url = store_url(data)?;
    let app_role = match (&args.app_role, &url) {
        (None, _) => None,
        (Some(role), berth::StoreUrl::Postgres(postgres_url)) => Some((role, postgres_url)),
        (Some(_), _) => {
            let message = format!("--app-role needs a PostgreSQL store (--data postgres://…), not {data:?}");
            return Err(Usage::new(message).into());
        }
    };
    let report = berth::migrate(&url).await?;
    if let Some((role, postgres_url)) = app_role {
        let options = berth::postgres::PostgresOptions { migrate: false, pool_size: 1, ..Default::default() };
        berth::postgres::PostgresBackend::connect_unchecked(postgres_url, options)?.grant_app_role(role).await?;
    }
    let text = match (report, json) {
        (Some(report), true) => {
            serde_json::json!({"from_version": report.from_version, "to_version": report.to_version}).to_string()
        }
        (Some(report), false) if report.from_version == report.to_version => {
            format!("schema is current (version {})", report.to_version)
        }
        (Some(report), false) => {
            format!("migrated schema from version {} to {}", report.from_version, report.to_version)
        }
        (None, true) => serde_json::json!({"migrated": false}).to_string(),
        (None, false) => "nothing to migrate: only PostgreSQL stores have a schema to migrate".to_owned(),
    };
    print_line(text)?;
    Ok(ExitCode::SUCCESS)
}
