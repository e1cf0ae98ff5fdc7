//! berth as a library: the backends chosen at run time from a URL (R-L2), and the
//! crates underneath re-exported under one roof.
//!
//! ```no_run
//! # async fn demo() -> berth::core::Result<()> {
//! let service = berth::open_service("file:///var/lib/berth", berth::system_clock()).await?;
//! # Ok(()) }
//! ```

pub use berth_catalog as catalog;
pub use berth_core as core;
pub use berth_jsonl as jsonl;
pub use berth_postgres as postgres;
pub use berth_service as service;
pub use berth_store as store;

mod feed;
pub use feed::PostgresFeed;

use berth_catalog::memory::MemoryCatalog;
use berth_catalog::Catalog;
use berth_core::{Clock, Error, Result, SystemClock};
use berth_jsonl::{JsonlBackend, JsonlOptions};
use berth_service::SessionService;
use berth_sqlite::SqliteCatalog;
use berth_store::memory::{MemoryBackend, MemoryStorage};
use berth_store::LogStore;
use std::path::PathBuf;
use std::sync::Arc;

/// The embedded catalog's file name inside a data directory.
pub const CATALOG_FILE: &str = "catalog.sqlite";

/// Where berth keeps its data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreUrl {
    /// `memory:` — nothing persists (tests, demos).
    Memory,
    /// `file:///path` or a plain path — the embedded backend (JSONL logs + SQLite catalog).
    Embedded(PathBuf),
    /// `postgres://…` or `postgresql://…` — both seams on PostgreSQL (many processes,
    /// one database).
    Postgres(String),
}

impl StoreUrl {
    pub fn parse(text: &str) -> Result<StoreUrl> {
        if text == "memory:" || text == "memory://" {
            return Ok(StoreUrl::Memory);
        }
        if let Some(path) = text.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(Error::invalid("url", "file URLs take an absolute path: file:///path"));
            }
            return Ok(StoreUrl::Embedded(PathBuf::from(path)));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(StoreUrl::Postgres(text.to_owned()));
        }
        if text.contains("://") {
            return Err(Error::invalid(
                "url",
                format!("unknown scheme in {text:?} (use file:///path, postgres://…, memory:)"),
            ));
        }
        Ok(StoreUrl::Embedded(PathBuf::from(text)))
    }
}

/// The two seams, opened.
pub struct Backends {
    pub store: LogStore,
    pub catalog: Arc<dyn Catalog>,
    /// The JSONL backend, for embedded stores (fsck and other file-level tools).
    pub jsonl: Option<JsonlBackend>,
    /// The PostgreSQL backend, for PostgreSQL stores (the server's live-tail feed).
    pub postgres: Option<berth_postgres::PostgresBackend>,
}

impl Backends {
    /// The change feed a server's live tails need on this store: `None` (the server's
    /// in-process feed) unless several servers can share the store, as on PostgreSQL.
    pub fn change_feed(&self) -> Option<Arc<dyn berth_server::feed::ChangeFeed>> {
        self.postgres
            .clone()
            .map(|backend| Arc::new(PostgresFeed::new(backend)) as Arc<dyn berth_server::feed::ChangeFeed>)
    }
}

pub async fn open_backends(url: &StoreUrl) -> Result<Backends> {
    match url {
        StoreUrl::Memory => Ok(Backends {
            store: LogStore::new(Arc::new(MemoryBackend::new(MemoryStorage::new()))),
            catalog: Arc::new(MemoryCatalog::new()),
            jsonl: None,
            postgres: None,
        }),
        StoreUrl::Embedded(root) => {
            let jsonl = JsonlBackend::open(root.clone(), JsonlOptions::default())?;
            let catalog = SqliteCatalog::open(root.join(CATALOG_FILE))?;
            Ok(Backends {
                store: LogStore::new(Arc::new(jsonl.clone())),
                catalog: Arc::new(catalog),
                jsonl: Some(jsonl),
                postgres: None,
            })
        }
        StoreUrl::Postgres(url) => {
            // Connecting applies pending schema migrations (safe when several
            // processes start at once); the catalog shares the log's pool.
            let backend =
                berth_postgres::PostgresBackend::connect(url, berth_postgres::PostgresOptions::default()).await?;
            Ok(Backends {
                catalog: Arc::new(backend.catalog()),
                store: LogStore::new(Arc::new(backend.clone())),
                jsonl: None,
                postgres: Some(backend),
            })
        }
    }
}

/// Applies pending PostgreSQL schema migrations (`berth migrate`). Other stores have
/// nothing to migrate here: the embedded catalog migrates itself when opened.
pub async fn migrate(url: &StoreUrl) -> Result<Option<berth_postgres::MigrationReport>> {
    match url {
        StoreUrl::Postgres(url) => {
            let options = berth_postgres::PostgresOptions { migrate: false, pool_size: 1, ..Default::default() };
            let backend = berth_postgres::PostgresBackend::connect_unchecked(url, options)?;
            backend.migrate().await.map(Some)
        }
        StoreUrl::Memory | StoreUrl::Embedded(_) => Ok(None),
    }
}

pub fn system_clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

/// Opens a `SessionService` on the store at `url`.
pub async fn open_service(url: &str, clock: Arc<dyn Clock>) -> Result<SessionService> {
    let backends = open_backends(&StoreUrl::parse(url)?).await?;
    Ok(SessionService::new(backends.store, backends.catalog, clock))
}
