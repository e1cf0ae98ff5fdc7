//! The connection pool, the runtime database work runs on, client-side timeouts, and
//! the mapping of PostgreSQL failures onto berth's error vocabulary (R-G4).

use crate::PostgresOptions;
use berth_core::{Error, Result};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use std::future::Future;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;
use tokio_postgres::error::SqlState;
use tokio_postgres::NoTls;

/// A failure inside the backend, before it is mapped onto `berth_core::Error`.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Already in the vocabulary (a conflict found by a query, a decode error…).
    Berth(Error),
    Db(tokio_postgres::Error),
    /// The client-side bound of a statement passed: the outcome is unknown.
    Timeout(&'static str),
    Pool(String),
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure::Berth(error)
    }
}

impl From<tokio_postgres::Error> for Failure {
    fn from(error: tokio_postgres::Error) -> Failure {
        Failure::Db(error)
    }
}

impl Failure {
    /// The connection may be in an unknown state (a reply not read, a dead socket):
    /// it must not go back to the pool, and a write's outcome is unknown.
    pub(crate) fn poisons_connection(&self) -> bool {
        match self {
            Failure::Timeout(_) => true,
            Failure::Db(error) => is_connection_error(error),
            Failure::Berth(_) | Failure::Pool(_) => false,
        }
    }

    /// Worth another attempt on a fresh connection.
    pub(crate) fn is_retryable(&self) -> bool {
        self.poisons_connection() || matches!(self, Failure::Pool(_))
    }

    /// Maps onto the vocabulary. `operation` names what was attempted (no SQL text).
    pub(crate) fn into_error(self, operation: &'static str) -> Error {
        match self {
            Failure::Berth(error) => error,
            Failure::Timeout(what) => Error::Unavailable {
                reason: format!(
                    "postgres: {operation}: no reply within the client-side bound ({what}); outcome unknown"
                ),
            },
            Failure::Pool(message) => Error::Unavailable { reason: format!("postgres: {operation}: {message}") },
            Failure::Db(error) => map_db_error(operation, &error),
        }
    }
}

fn is_connection_error(error: &tokio_postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    match error.code() {
        // Class 08 (connection exception), 57P01..57P03 (shutdown, crash, cannot connect
        // now), 57014 (query canceled by statement_timeout or a cancel request).
        Some(code) => {
            code.code().starts_with("08")
                || [SqlState::ADMIN_SHUTDOWN, SqlState::CRASH_SHUTDOWN, SqlState::CANNOT_CONNECT_NOW].contains(code)
                || *code == SqlState::QUERY_CANCELED
        }
        // No SQLSTATE: an I/O or protocol error of the client, unless it is a type
        // conversion of ours (a bug, not an outage).
        None => {
            let text = error.to_string();
            !(text.starts_with("error serializing") || text.starts_with("error deserializing"))
        }
    }
}

fn map_db_error(operation: &'static str, error: &tokio_postgres::Error) -> Error {
    let detail = match error.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => error.to_string(),
    };
    if is_connection_error(error) {
        return Error::Unavailable { reason: format!("postgres: {operation}: {detail}") };
    }
    // 25006: the server is (now) read-only — a replica, or a primary demoted by a
    // failover. Nothing was written; the same typed error as refusing one at open.
    if error.code() == Some(&SqlState::READ_ONLY_SQL_TRANSACTION) {
        return read_only_database(format!("{operation}: {detail}"));
    }
    match error.code() {
        Some(code)
            if *code == SqlState::T_R_SERIALIZATION_FAILURE
                || *code == SqlState::T_R_DEADLOCK_DETECTED
                || *code == SqlState::LOCK_NOT_AVAILABLE
                || code.code().starts_with("53") =>
        {
            Error::Unavailable { reason: format!("postgres: {operation}: {detail} (retryable)") }
        }
        _ => Error::Io { operation, kind: std::io::ErrorKind::Other, message: format!("postgres: {detail}") },
    }
}

/// Where database work runs.
#[derive(Clone, Debug)]
pub(crate) enum Exec {
    /// On the caller's runtime.
    Caller,
    /// On this crate's own runtime; callers wait for it from a blocking thread, which
    /// also keeps a paused caller clock from auto-advancing while a query is in flight.
    Own(tokio::runtime::Handle),
}

fn own_runtime() -> tokio::runtime::Handle {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("berth-postgres")
                .enable_all()
                .build()
                .expect("the berth-postgres runtime starts")
        })
        .handle()
        .clone()
}

impl Exec {
    pub(crate) fn new(options: &PostgresOptions) -> Exec {
        if options.own_runtime {
            Exec::Own(own_runtime())
        } else {
            Exec::Caller
        }
    }

    /// Runs `work` where database work runs and waits for it.
    pub(crate) async fn run<T, F>(&self, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        match self {
            Exec::Caller => work.await,
            Exec::Own(handle) => {
                let handle = handle.clone();
                tokio::task::spawn_blocking(move || handle.block_on(work))
                    .await
                    .unwrap_or_else(|join| Err(Error::Unavailable { reason: format!("postgres task failed: {join}") }))
            }
        }
    }

    /// Starts a background task where database work runs. `None` outside any runtime.
    pub(crate) fn spawn<F>(&self, work: F) -> Option<tokio::task::JoinHandle<()>>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match self {
            Exec::Own(handle) => Some(handle.spawn(work)),
            Exec::Caller => tokio::runtime::Handle::try_current().ok().map(|handle| handle.spawn(work)),
        }
    }
}

/// The shared database state of a backend and its catalog.
pub(crate) struct Database {
    pub(crate) pool: Pool,
    pub(crate) exec: Exec,
    pub(crate) options: PostgresOptions,
    pub(crate) config: tokio_postgres::Config,
    /// Unique per process and backend instance; prefix of every lease holder token.
    pub(crate) instance: String,
    holder_counter: AtomicU64,
    /// Test fault hook: when set, tenant transactions begin *without* setting
    /// `berth.tenant`, to show that a connection never carries a tenant over from an
    /// earlier transaction (reliability test 34). Never set outside tests.
    pub(crate) skip_tenant_setting: AtomicBool,
    /// The tenants' queues of audited changes (group commit).
    pub(crate) audited: crate::commit::AuditedCommitter,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Database({})", self.instance)
    }
}

/// Parses a `postgres://` URL and applies the options' connection settings.
pub(crate) fn connection_config(url: &str, options: &PostgresOptions) -> Result<tokio_postgres::Config> {
    let mut config = tokio_postgres::Config::from_str(url)
        .map_err(|error| Error::invalid("url", format!("not a PostgreSQL URL: {error}")))?;
    let statement_ms = options.statement_timeout.as_millis().max(1);
    let server_settings = format!(
        "-c statement_timeout={statement_ms} -c idle_in_transaction_session_timeout={} \
         -c client_connection_check_interval=1000",
        statement_ms * 2
    );
    let options_text = match config.get_options() {
        Some(existing) => format!("{existing} {server_settings}"),
        None => server_settings,
    };
    config
        .options(options_text)
        .application_name(options.application_name.clone())
        .connect_timeout(options.connect_timeout)
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(5))
        .keepalives_interval(Duration::from_secs(1))
        .keepalives_retries(3)
        .tcp_user_timeout(options.statement_timeout);
    Ok(config)
}

impl Database {
    pub(crate) fn new(url: &str, options: PostgresOptions) -> Result<Database> {
        let config = connection_config(url, &options)?;
        let manager =
            Manager::from_config(config.clone(), NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.statement_timeout))
            .create_timeout(Some(options.connect_timeout))
            .recycle_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|error| Error::invalid("postgres options", error.to_string()))?;
        Ok(Database {
            pool,
            exec: Exec::new(&options),
            options,
            config,
            instance: format!("{}-{}", std::process::id(), uuid::Uuid::now_v7().simple()),
            holder_counter: AtomicU64::new(0),
            skip_tenant_setting: AtomicBool::new(false),
            audited: crate::commit::AuditedCommitter::default(),
        })
    }

    /// A fresh lease holder token: unique per acquisition, so a retried acquisition or
    /// materialization can recognise its own earlier success.
    pub(crate) fn holder_token(&self) -> String {
        format!("{}/{}", self.instance, self.holder_counter.fetch_add(1, Ordering::Relaxed))
    }

    /// A pooled connection. `Unavailable` while the database cannot be reached.
    pub(crate) async fn client(&self) -> Result<Object, Failure> {
        match self.pool.get().await {
            Ok(client) => Ok(client),
            Err(error) => Err(Failure::Pool(format!("no database connection: {error}"))),
        }
    }

    /// Runs `work` under the client-side statement bound.
    pub(crate) async fn timed<T>(
        &self,
        what: &'static str,
        limit: Duration,
        work: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, Failure> {
        tokio::time::timeout(limit, work).await.unwrap_or(Err(Failure::Timeout(what)))
    }

    /// Runs one unit of work on a pooled connection under the statement bound; a
    /// connection left in an unknown state is discarded instead of returned.
    pub(crate) async fn with_client<T, F>(&self, what: &'static str, work: F) -> Result<T, Failure>
    where
        F: for<'c> FnOnce(&'c Object) -> std::pin::Pin<Box<dyn Future<Output = Result<T, Failure>> + Send + 'c>>,
    {
        let limit = self.options.statement_timeout;
        let client = self.client().await?;
        let outcome = self.timed(what, limit, work(&client)).await;
        if outcome.as_ref().is_err_and(Failure::poisons_connection) {
            discard(client);
        }
        outcome
    }
}

impl Database {
    /// A pooled connection. The pool's own wait and connect timeouts bound it; no
    /// request was sent yet, so a failure here is never an unknown outcome.
    pub(crate) async fn pooled(&self, _what: &'static str) -> Result<Object, Failure> {
        self.client().await
    }

    /// Returns `client` to the pool, or discards it if `outcome` left it in an unknown
    /// state.
    pub(crate) fn settle<T>(&self, client: Object, outcome: &Result<T, Failure>) {
        if outcome.as_ref().is_err_and(Failure::poisons_connection) {
            discard(client);
        }
    }
}

/// Removes a connection from the pool and closes it.
pub(crate) fn discard(client: Object) {
    drop(Object::take(client));
}

/// Integer columns: berth counts in `u64`, PostgreSQL in `bigint`.
/// `what` names the column for the message; the limit is the numbering's (`Limit::Seq`).
pub(crate) fn to_i64(what: &'static str, value: u64) -> Result<i64, Failure> {
    i64::try_from(value).map_err(|_| {
        tracing::debug!(what, value, "integer beyond bigint");
        Failure::Berth(Error::LimitExceeded {
            what: berth_core::limits::Limit::Seq,
            limit: i64::MAX as u64,
            actual: value,
        })
    })
}

pub(crate) fn to_u64(what: &str, value: i64) -> Result<u64, Failure> {
    u64::try_from(value).map_err(|_| {
        Failure::Berth(Error::Corrupt {
            reason: format!("stored {what} is negative ({value})"),
            location: berth_core::Location { artifact: "postgres".into(), offset: None, seq: None },
        })
    })
}

/// A millisecond count as PostgreSQL interval arithmetic takes it.
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// The typed error for a database that refuses writes (a hot standby, a server with
/// `default_transaction_read_only`, a primary demoted by a failover): berth never writes
/// through a replica (reliability test 30).
pub(crate) fn read_only_database(reason: impl Into<String>) -> Error {
    Error::ReadOnlyDatabase { reason: format!("postgres: {}", reason.into()) }
}

/// The name of the per-transaction setting the row-level security policies compare
/// every row's tenant with (`SET LOCAL`, read with the missing-is-an-error form).
pub(crate) const TENANT_SETTING: &str = "berth.tenant";

/// `SET LOCAL berth.tenant = '<tenant>'` (preceded by `BEGIN` when `begin`, followed by
/// the tenant's registration in `tenants` when `register`) as one simple query: one
/// round trip, or none extra when pipelined. `SET` takes no parameters, so the value is
/// a literal; it is built only from a string that passes the id grammar
/// (`[A-Za-z0-9._~-]`: no quote can occur), and quotes are doubled all the same. With
/// the test fault hook `skip_setting`, the setting (only) is left out.
pub(crate) fn tenant_sql(tenant: &str, begin: bool, register: bool, skip_setting: bool) -> Result<String, Failure> {
    berth_core::ids::check_id("tenant id", tenant)?;
    let literal = format!("'{}'", tenant.replace('\'', "''"));
    let mut statements = Vec::new();
    if begin {
        statements.push("BEGIN".to_owned());
    }
    if !skip_setting {
        statements.push(format!("SET LOCAL {TENANT_SETTING} = {literal}"));
    }
    if register {
        statements.push(format!("INSERT INTO tenants (tenant) VALUES ({literal}) ON CONFLICT DO NOTHING"));
    }
    if statements.is_empty() {
        statements.push("SELECT 1".to_owned());
    }
    Ok(statements.join("; "))
}

/// `BEGIN; SET LOCAL berth.tenant = …`.
pub(crate) fn begin_for_tenant(tenant: &str, skip_setting: bool) -> Result<String, Failure> {
    tenant_sql(tenant, true, false, skip_setting)
}

/// `SET LOCAL berth.tenant = …` inside an open transaction.
pub(crate) fn set_tenant_local(tenant: &str, skip_setting: bool) -> Result<String, Failure> {
    tenant_sql(tenant, false, false, skip_setting)
}

impl Database {
    pub(crate) fn skipping_tenant_setting(&self) -> bool {
        self.skip_tenant_setting.load(Ordering::Relaxed)
    }

    /// Runs `work` on a pooled connection inside one transaction whose tenant is
    /// `tenant` (row-level security's per-transaction setting), under the statement
    /// bound. `BEGIN; SET LOCAL …` is pipelined with the work's first statement (sent
    /// before its reply is read), so a one-statement unit costs one more round trip than
    /// autocommit: the `COMMIT`. If `BEGIN` failed, the statement ran outside any tenant
    /// and the policies made it fail: nothing is ever read without a tenant. A
    /// connection whose transaction cannot be ended cleanly is discarded.
    pub(crate) async fn with_tenant<T, F>(&self, what: &'static str, tenant: &str, work: F) -> Result<T, Failure>
    where
        F: for<'c> FnOnce(&'c Object) -> std::pin::Pin<Box<dyn Future<Output = Result<T, Failure>> + Send + 'c>>,
    {
        self.with_tenant_within(what, tenant, self.options.statement_timeout, false, work).await
    }

    /// `with_tenant`, registering the tenant in the `tenants` registry in the same
    /// transaction (catalog writes: a session, an audit entry, a retention policy).
    pub(crate) async fn with_tenant_registered<T, F>(
        &self,
        what: &'static str,
        tenant: &str,
        work: F,
    ) -> Result<T, Failure>
    where
        F: for<'c> FnOnce(&'c Object) -> std::pin::Pin<Box<dyn Future<Output = Result<T, Failure>> + Send + 'c>>,
    {
        self.with_tenant_within(what, tenant, self.options.statement_timeout, true, work).await
    }

    /// `with_tenant` under another client-side bound (lease renewal's shorter one).
    pub(crate) async fn with_tenant_within<T, F>(
        &self,
        what: &'static str,
        tenant: &str,
        limit: Duration,
        register: bool,
        work: F,
    ) -> Result<T, Failure>
    where
        F: for<'c> FnOnce(&'c Object) -> std::pin::Pin<Box<dyn Future<Output = Result<T, Failure>> + Send + 'c>>,
    {
        let begin = tenant_sql(tenant, true, register, self.skipping_tenant_setting())?;
        let client = self.client().await?;
        let ended = AtomicBool::new(false);
        let unit = async {
            let (began, outcome) = futures_util::future::join(client.batch_execute(&begin), work(&client)).await;
            if let Err(error) = began {
                let _ = client.batch_execute("ROLLBACK").await;
                return Err(Failure::from(error));
            }
            match outcome {
                Ok(value) => {
                    client.batch_execute("COMMIT").await?;
                    ended.store(true, Ordering::Relaxed);
                    Ok(value)
                }
                Err(failure) => {
                    if !failure.poisons_connection() {
                        client.batch_execute("ROLLBACK").await?;
                        ended.store(true, Ordering::Relaxed);
                    }
                    Err(failure)
                }
            }
        };
        let outcome = self.timed(what, limit, unit).await;
        if !ended.load(Ordering::Relaxed) {
            // A failed BEGIN, COMMIT or ROLLBACK, or a timeout, may leave the connection
            // inside a transaction: never hand it to the next borrower.
            discard(client);
        }
        outcome
    }
}
