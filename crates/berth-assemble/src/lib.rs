//! The one place berth's backends are assembled from a store URL (R-L2): `memory:`,
//! `file:///path` (or a plain path: JSONL logs and the SQLite catalog in one data
//! directory) and `postgres://…` (both seams on one database). The CLI, the library
//! facade (`berth`), `berth serve`, the load generator and the server's tests all open
//! their stores here, so a data directory's layout (`CATALOG_FILE`) is written once.
//!
//! It sits above the backends and the service and below every interface: the server
//! itself never names a backend (its caller hands it a service), so it does not depend
//! on this crate; its tests do.

pub mod backup;

use berth_catalog::memory::MemoryCatalog;
use berth_catalog::Catalog;
use berth_core::{Clock, Error, Result, SystemClock};
use berth_jsonl::{JsonlBackend, JsonlOptions};
use berth_postgres::{PostgresBackend, PostgresOptions};
use berth_service::SessionService;
use berth_sqlite::SqliteCatalog;
use berth_store::memory::{MemoryBackend, MemoryStorage};
use berth_store::LogStore;
use std::path::PathBuf;
use std::sync::Arc;

/// The embedded catalog's file name inside a data directory (the SQLite crate's own
/// constant: one spelling in the tree).
pub const CATALOG_FILE: &str = berth_sqlite::CATALOG_FILE_NAME;

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

/// How the backends behind a URL are opened; the defaults are what `berth` ships.
#[derive(Clone, Debug, Default)]
pub struct AssembleOptions {
    /// The embedded log backend's settings (its file system: `berth serve` counts fsyncs
    /// through `berth_jsonl::CountingFs`).
    pub jsonl: JsonlOptions,
    /// The PostgreSQL backend's settings.
    pub postgres: PostgresOptions,
}

/// The two seams, opened.
pub struct Backends {
    pub store: LogStore,
    pub catalog: Arc<dyn Catalog>,
    /// The JSONL backend, for embedded stores (fsck and other file-level tools).
    pub jsonl: Option<JsonlBackend>,
    /// The PostgreSQL backend, for PostgreSQL stores (the server's live-tail feed).
    pub postgres: Option<PostgresBackend>,
}

/// The backends at `url` with the shipped settings.
pub async fn open_backends(url: &StoreUrl) -> Result<Backends> {
    open_backends_with(url, AssembleOptions::default()).await
}

/// The backends at `url` with `options`.
pub async fn open_backends_with(url: &StoreUrl, options: AssembleOptions) -> Result<Backends> {
    match url {
        StoreUrl::Memory => Ok(Backends {
            store: LogStore::new(Arc::new(MemoryBackend::new(MemoryStorage::new()))),
            catalog: Arc::new(MemoryCatalog::new()),
            jsonl: None,
            postgres: None,
        }),
        StoreUrl::Embedded(root) => {
            let jsonl = JsonlBackend::open(root.clone(), options.jsonl)?;
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
            let backend = PostgresBackend::connect(url, options.postgres).await?;
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
            let options = PostgresOptions { migrate: false, pool_size: 1, ..Default::default() };
            let backend = PostgresBackend::connect_unchecked(url, options)?;
            backend.migrate().await.map(Some)
        }
        StoreUrl::Memory | StoreUrl::Embedded(_) => Ok(None),
    }
}

pub fn system_clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

/// A `SessionService` over `backends`.
pub fn service_over(backends: Backends, clock: Arc<dyn Clock>) -> SessionService {
    SessionService::new(backends.store, backends.catalog, clock)
}

/// Opens a `SessionService` on the store at `url` with the shipped settings.
pub async fn open_service(url: &str, clock: Arc<dyn Clock>) -> Result<SessionService> {
    open_service_with(&StoreUrl::parse(url)?, AssembleOptions::default(), clock).await
}

/// Opens a `SessionService` on the store at `url` with `options`.
pub async fn open_service_with(
    url: &StoreUrl,
    options: AssembleOptions,
    clock: Arc<dyn Clock>,
) -> Result<SessionService> {
    Ok(service_over(open_backends_with(url, options).await?, clock))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_backend() {
        assert_eq!(StoreUrl::parse("memory:").unwrap(), StoreUrl::Memory);
        assert_eq!(StoreUrl::parse("file:///var/b").unwrap(), StoreUrl::Embedded(PathBuf::from("/var/b")));
        assert_eq!(StoreUrl::parse("data").unwrap(), StoreUrl::Embedded(PathBuf::from("data")));
        assert!(matches!(StoreUrl::parse("postgresql://h/db").unwrap(), StoreUrl::Postgres(_)));
        assert!(StoreUrl::parse("file://relative").is_err());
        assert!(StoreUrl::parse("s3://bucket").is_err());
    }

    #[tokio::test]
    async fn an_embedded_store_keeps_its_catalog_under_the_one_file_name() {
        let dir = tempfile::tempdir().unwrap();
        let url = StoreUrl::Embedded(dir.path().to_path_buf());
        let backends = open_backends(&url).await.unwrap();
        assert!(backends.jsonl.is_some() && backends.postgres.is_none());
        assert!(dir.path().join(CATALOG_FILE).is_file());
        assert_eq!(CATALOG_FILE, "catalog.sqlite", "the on-disk layout is a compatibility promise");
    }
}
