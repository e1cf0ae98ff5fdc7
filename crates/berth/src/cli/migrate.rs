//! `berth migrate`: applies pending PostgreSQL schema migrations (versioned,
//! forward-only, under an advisory lock, so it is safe beside running servers that
//! start up and migrate at the same time).

use super::output::print_line;
use berth_core::Result;
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
    let url = berth::StoreUrl::parse(data)?;
    let report = berth::migrate(&url).await?;
    if let Some(role) = &args.app_role {
        let berth::StoreUrl::Postgres(postgres_url) = &url else {
            return Err(berth_core::Error::invalid("--app-role", "only PostgreSQL stores have database roles"));
        };
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
