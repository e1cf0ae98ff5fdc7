//! `berth serve` (the HTTP API), `berth keys` (its API keys), and the dispatch of
//! `--server URL` to the remote client.
//!
//! With no arguments, `berth serve` serves the embedded store in `./berth-data` on
//! 127.0.0.1:7420, and on the first start (no key at all yet) prints an admin key for
//! the tenant `default`.

use super::output::time_text;
use super::usage::{Arg, Result, Usage};
use super::{store_url, Cli, Command};
use berth_core::{Error, ProjectId, TenantId, Timestamp, UserId};
use berth_jsonl::CountingFs;
use berth_server::auth::{Authenticator, JwtConfig, JwtVerifier, KeyStore, KEYS_FILE};
use berth_server::backup::Backups;
use berth_server::feed::ChangeFeed;
use berth_server::limits::RateLimit;
use berth_server::metrics::Metrics;
use berth_server::ui::UiConfig;
use berth_server::{ServerConfig, ServerParts};
use berth_service::{Principal, Role, SessionService};
use clap::{Args, Subcommand, ValueEnum};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Whether `berth serve` serves the inspector (`/ui`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum UiMode {
    /// On when listening on a loopback address, off anywhere else.
    #[default]
    Auto,
    /// On whatever the listen address (put it behind TLS: its cookies are then `Secure`).
    On,
    /// Off.
    Off,
}

/// A switch given as `on` or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

impl OnOff {
    const fn from_bool(on: bool) -> OnOff {
        if on {
            OnOff::On
        } else {
            OnOff::Off
        }
    }
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (use port 0 for any free port).
    #[arg(long, env = "BERTH_LISTEN", default_value = "127.0.0.1:7420")]
    listen: SocketAddr,
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// The API key file (default: keys.sqlite in the data directory).
    #[arg(long)]
    keys_file: Option<PathBuf>,
    /// Requests per second per tenant (0: no limit).
    #[arg(long, default_value_t = 2000)]
    rate_per_tenant: u32,
    /// Burst allowance per tenant (default: twice the rate).
    #[arg(long)]
    rate_burst: Option<u32>,
    /// Most open connections.
    #[arg(long, default_value_t = 512)]
    max_connections: usize,
    /// Longest time to answer a request, in seconds (live tails excepted).
    #[arg(long, default_value_t = 30)]
    request_timeout_s: u64,
    /// Longest time a client may take to send its request headers, in seconds.
    #[arg(long, default_value_t = 10)]
    header_timeout_s: u64,
    /// Interval of the background retention sweeper, in seconds (0: off).
    #[arg(long, default_value_t = 60)]
    sweep_interval_s: u64,
    /// Memory items a tenant may store, where an admin set it no quota of its own
    /// (`berth memory quota`).
    #[arg(long, default_value_t = berth_core::limits::MEMORY_ITEMS_DEFAULT)]
    memory_items_max: u64,
    /// Bytes of memory (namespaces, keys and values) a tenant may store, where an admin
    /// set it no quota of its own.
    #[arg(long, default_value_t = berth_core::limits::MEMORY_BYTES_DEFAULT)]
    memory_bytes_max: u64,
    /// Verify JWTs signed with this HS256 secret (a file holding it).
    #[arg(long, conflicts_with = "jwt_rs256_public_key_file")]
    jwt_hs256_secret_file: Option<PathBuf>,
    /// Verify JWTs signed by this RS256 key (a PEM public key file).
    #[arg(long)]
    jwt_rs256_public_key_file: Option<PathBuf>,
    /// Required `iss` claim of JWTs.
    #[arg(long)]
    jwt_issuer: Option<String>,
    /// Required `aud` claim of JWTs.
    #[arg(long)]
    jwt_audience: Option<String>,
    /// DEVELOPMENT ONLY. Serve a PostgreSQL store as a role that row-level security does
    /// not bind (a superuser, a role with BYPASSRLS, or the owner of berth's tables).
    /// Without it `berth serve` refuses such a role: serve as an app role instead
    /// (`berth migrate --app-role ROLE`, run as the owner, grants one what it needs).
    #[arg(long)]
    dev_allow_db_owner: bool,
    /// The inspector web UI at /ui: `auto` serves it only on a loopback listen address;
    /// `on` serves it on any address (with `Secure` cookies off loopback: put TLS in front).
    #[arg(long, value_enum, default_value_t = UiMode::Auto)]
    ui: UiMode,
    /// A `Host` value the inspector also answers to (repeatable), e.g. the name a proxy
    /// forwards as `inspector.example.com`; every other Host is refused (DNS rebinding).
    #[arg(long = "ui-host")]
    ui_hosts: Vec<String>,
    /// Take backups on `POST /v1/admin/backup`, each into a new directory under this one
    /// (on this machine). Off without it.
    #[arg(long, value_name = "DIR")]
    backup_dir: Option<PathBuf>,
    /// The tenant whose admin keys may take backups (a backup copies every tenant's
    /// data); by default the tenant of the key the first start prints.
    #[arg(long, default_value = "default")]
    operator_tenant: String,
    /// The backups' copy rate, in MiB per second (0: no limit).
    #[arg(long, value_name = "MIB_PER_S", default_value_t = berth::backup::RATE_BYTES_PER_S_DEFAULT / (1024 * 1024))]
    backup_rate_mib_s: u64,
    /// Create new session logs preallocated (log format version 2: they grow in
    /// zero-filled extents written ahead of the appends, so an append's fdatasync commits
    /// no file-system metadata), or classic (`off`: version 1). Existing logs keep their
    /// format either way. Embedded stores only.
    #[arg(long, env = "BERTH_PREALLOCATE_LOGS", value_enum, value_name = "on|off",
          default_value_t = OnOff::from_bool(berth_jsonl::PREALLOCATE_DEFAULT))]
    preallocate_logs: OnOff,
}

#[derive(Subcommand, Debug)]
pub enum KeysCommand {
    /// Create an API key bound to a principal; prints the key (shown only once).
    Create {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        user: String,
        #[arg(long)]
        project: Option<String>,
        /// user, service or admin.
        #[arg(long, default_value = "user")]
        role: String,
        /// A note for `berth keys list`.
        #[arg(long)]
        label: Option<String>,
        /// The API key file (default: keys.sqlite in the data directory).
        #[arg(long)]
        keys_file: Option<PathBuf>,
    },
    /// List keys (never their secrets).
    List {
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long)]
        keys_file: Option<PathBuf>,
    },
    /// Revoke a key by its id (the part after `berth_`, before the second `_`).
    Revoke {
        key_id: String,
        #[arg(long)]
        keys_file: Option<PathBuf>,
    },
}

/// Logging for `berth serve` (info by default; `BERTH_LOG` overrides). Returns whether
/// it initialized the subscriber.
pub fn init_logging(cli: &Cli) -> bool {
    let Command::Serve(args) = &cli.command else {
        return false;
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("BERTH_LOG").unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
    true
}

/// Runs the command: serve and keys here, `--server` through the HTTP client, the rest
/// on the data directory.
pub async fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Serve(args) => serve(&cli.data, args).await,
        Command::Keys(command) => keys(&cli.data, command, cli.json),
        _ if cli.server.is_some() => super::commands::run_remote(cli).await,
        _ => super::commands::run(cli).await,
    }
}

fn keys_path(data: &str, explicit: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(path) = explicit {
        return Ok(path);
    }
    match store_url(data)? {
        berth::StoreUrl::Embedded(root) => {
            std::fs::create_dir_all(&root).map_err(|e| Error::io("create data directory", &e))?;
            Ok(root.join(KEYS_FILE))
        }
        _ => {
            Err(Usage::new("--keys-file is required when --data is not a data directory: give --keys-file PATH").into())
        }
    }
}

fn keys(data: &str, command: KeysCommand, json: bool) -> Result<ExitCode> {
    match command {
        KeysCommand::Create { tenant, user, project, role, label, keys_file } => {
            let store = KeyStore::open(&keys_path(data, keys_file)?)?;
            let principal = Principal {
                tenant: Arg::named("--tenant").parse(&tenant, TenantId::parse)?,
                user: Arg::named("--user").parse(&user, UserId::parse)?,
                project: project.as_deref().map(|p| Arg::named("--project").parse(p, ProjectId::parse)).transpose()?,
                role: Arg::named("--role").parse(&role, Role::parse)?,
            };
            let (info, token) = store.create(&principal, label.as_deref())?;
            if json {
                super::output::print_json(&serde_json::json!({"key": token, "info": info}))?;
            } else {
                super::output::print_line(format_args!("{token}"))?;
            }
        }
        KeysCommand::List { tenant, keys_file } => {
            let store = KeyStore::open(&keys_path(data, keys_file)?)?;
            let tenant = tenant.as_deref().map(|t| Arg::named("--tenant").parse(t, TenantId::parse)).transpose()?;
            let keys = store.list(tenant.as_ref())?;
            if json {
                super::output::print_json(&keys)?;
            } else {
                for key in keys {
                    super::output::print_line(format_args!(
                        "{}  {:<8} {}/{}{}  created {}{}{}",
                        key.key_id,
                        key.principal.role.as_str(),
                        key.principal.tenant,
                        key.principal.user,
                        key.principal.project.as_ref().map(|p| format!(" project {p}")).unwrap_or_default(),
                        time_text(Timestamp(key.created_at_ms)),
                        key.revoked_at_ms
                            .map(|ms| format!("  REVOKED {}", time_text(Timestamp(ms))))
                            .unwrap_or_default(),
                        key.label.map(|label| format!("  {label}")).unwrap_or_default()
                    ))?;
                }
            }
        }
        KeysCommand::Revoke { key_id, keys_file } => {
            let store = KeyStore::open(&keys_path(data, keys_file)?)?;
            if !store.revoke(&key_id)? {
                return Err(Error::NotFound { what: "key", id: key_id }.into());
            }
            super::output::print_line(format_args!("revoked {key_id}"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The service over `data` (the embedded backend's file system counted for metrics), and
/// the live-tail feed the store needs (`None`: in-process).
async fn open_service(
    data: &str,
    metrics: &Metrics,
    args: &ServeArgs,
) -> Result<(SessionService, Option<Arc<dyn ChangeFeed>>)> {
    let allow_db_owner = args.dev_allow_db_owner;
    let counters = metrics.storage.clone();
    let observer: berth_jsonl::FsObserver = Arc::new(move |event| match event {
        berth_jsonl::FsEvent::Synced => {
            counters.fsyncs.inc();
        }
        berth_jsonl::FsEvent::FileOpened => {
            counters.files_open.inc();
        }
        berth_jsonl::FsEvent::FileClosed => {
            counters.files_open.dec();
        }
    });
    let options = berth::AssembleOptions {
        jsonl: berth_jsonl::JsonlOptions {
            fs: Arc::new(CountingFs::new(Arc::new(berth_jsonl::fs::OsFs), observer)),
            preallocate: args.preallocate_logs == OnOff::On,
            ..berth_jsonl::JsonlOptions::default()
        },
        ..berth::AssembleOptions::default()
    };
    let backends = berth::open_backends_with(&berth::StoreUrl::parse(data)?, options).await?;
    if let Some(postgres) = &backends.postgres {
        // Row-level security is the second wall behind the tenant filter of every
        // statement; a role it does not bind takes that wall down.
        if allow_db_owner {
            if let Some(reason) = postgres.role_report().await?.refusal() {
                tracing::warn!(%reason, "serving as a database role row-level security does not bind (--dev-allow-db-owner)");
                let _ = writeln!(
                    std::io::stderr(),
                    "berth serve: WARNING: {reason}; row-level security does not bind it (--dev-allow-db-owner: development only)"
                );
            }
        } else {
            postgres.check_serving_role().await?;
        }
    }
    let feed = berth::change_feed(&backends);
    Ok((berth::service_over(backends, berth::system_clock()), feed))
}

/// The JWT verifier the flags configure; a key file that holds no key is a usage error
/// naming its flag.
fn jwt(args: &ServeArgs) -> Result<Option<JwtVerifier>> {
    let read = |path: &PathBuf| std::fs::read(path).map_err(|e| Error::io("read jwt key", &e));
    let config = JwtConfig {
        hs256_secret: args
            .jwt_hs256_secret_file
            .as_ref()
            .map(read)
            .transpose()?
            .map(|secret| secret.trim_ascii().to_vec()),
        rs256_public_pem: args.jwt_rs256_public_key_file.as_ref().map(read).transpose()?,
        issuer: args.jwt_issuer.clone(),
        audience: args.jwt_audience.clone(),
    };
    JwtVerifier::new(&config).map_err(|error| match error {
        Error::Invalid { reason, .. } => Usage::new(format!("invalid --jwt-rs256-public-key-file: {reason}")).into(),
        other => other.into(),
    })
}

/// The inspector's settings: on loopback by default, elsewhere only with `--ui on`.
fn ui_config(args: &ServeArgs) -> Option<UiConfig> {
    let loopback = args.listen.ip().is_loopback();
    let enabled = match args.ui {
        UiMode::Auto => loopback,
        UiMode::On => true,
        UiMode::Off => false,
    };
    enabled.then(|| UiConfig { extra_hosts: args.ui_hosts.clone(), secure_cookies: !loopback })
}

async fn serve(data: &str, args: ServeArgs) -> Result<ExitCode> {
    let jwt = jwt(&args)?;
    let metrics = Arc::new(Metrics::new());
    let keys = match (&args.keys_file, store_url(data)?) {
        (None, berth::StoreUrl::Memory) => KeyStore::in_memory()?,
        (explicit, _) => KeyStore::open(&keys_path(data, explicit.clone())?)?,
    };
    let (service, feed) = open_service(data, &metrics, &args).await?;
    let quota = berth_catalog::scoped::MemoryQuota { items: args.memory_items_max, bytes: args.memory_bytes_max };
    let service = Arc::new(service.with_memory_quota(quota));
    let first_key = if keys.is_empty()? {
        let admin = Principal {
            tenant: TenantId::parse("default")?,
            user: UserId::parse("admin")?,
            project: None,
            role: Role::Admin,
        };
        Some(keys.create(&admin, Some("first start"))?.1)
    } else {
        None
    };
    let config = ServerConfig {
        listen: args.listen,
        request_timeout: Duration::from_secs(args.request_timeout_s.max(1)),
        header_read_timeout: Duration::from_secs(args.header_timeout_s.max(1)),
        connections_max: args.max_connections.max(1),
        rate_limit: (args.rate_per_tenant > 0).then(|| RateLimit {
            per_second: args.rate_per_tenant,
            burst: args.rate_burst.unwrap_or(args.rate_per_tenant.saturating_mul(2)),
        }),
        sweep_interval: (args.sweep_interval_s > 0).then(|| Duration::from_secs(args.sweep_interval_s)),
        ui: ui_config(&args),
        ..ServerConfig::default()
    };
    let backups = match &args.backup_dir {
        Some(dir) => {
            let runner = super::backup::ServeBackups::new(data, dir, args.backup_rate_mib_s)?;
            Some(Backups::new(Arc::new(runner), TenantId::parse(&args.operator_tenant)?))
        }
        None => None,
    };
    let parts = ServerParts { service, auth: Authenticator::new(keys, jwt), metrics, feed, backups };
    let server = berth_server::start(config, parts).await.map_err(|e| Error::io("listen", &e))?;
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "berth serve: listening on {} (data: {data})", server.url());
    if let Some(key) = first_key {
        let _ = writeln!(
            stdout,
            "berth serve: first start; an admin key for tenant \"default\" (shown once, keep it):\n  {key}"
        );
    }
    if server.state.ui.is_some() {
        let _ = writeln!(stdout, "berth serve: inspector at {}/ui (sign in with an API key)", server.url());
    }
    let _ = stdout.flush();
    drop(stdout);
    tracing::info!(url = %server.url(), data, "serving");
    server.run_until(shutdown_signal()).await?;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}
