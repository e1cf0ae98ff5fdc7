//! A real `berth serve` on 127.0.0.1 (random port) over the embedded backend in a
//! temporary directory, plus keys for any principal.

#![allow(dead_code)]

use berth_assemble::{AssembleOptions, StoreUrl};
use berth_core::{Clock, ProjectId, SystemClock, TenantId, UserId};
use berth_jsonl::fs::OsFs;
use berth_jsonl::{CountingFs, FsEvent, FsObserver, JsonlOptions};
use berth_server::auth::{Authenticator, KeyStore, KEYS_FILE};
use berth_server::client::Client;
use berth_server::metrics::Metrics;
use berth_server::{RunningServer, ServerConfig, ServerParts};
use berth_service::{Principal, Role, SessionService};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub struct TestServer {
    pub dir: tempfile::TempDir,
    pub server: RunningServer,
    pub keys: KeyStore,
    pub service: Arc<SessionService>,
    pub metrics: Arc<Metrics>,
}

pub fn test_config() -> ServerConfig {
    ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        rate_limit: None,
        sweep_interval: None,
        ..ServerConfig::default()
    }
}

/// The service over the embedded store at `root`, assembled as `berth serve` assembles
/// it (the file system counted into `metrics`), with its settings changed by `customize`.
pub async fn open_service_with(
    root: &Path,
    metrics: &Metrics,
    customize: impl FnOnce(SessionService) -> SessionService,
) -> Arc<SessionService> {
    open_service_with_clock(root, metrics, Arc::new(SystemClock), customize).await
}

/// `open_service_with` on `clock` instead of the system's.
pub async fn open_service_with_clock(
    root: &Path,
    metrics: &Metrics,
    clock: Arc<dyn Clock>,
    customize: impl FnOnce(SessionService) -> SessionService,
) -> Arc<SessionService> {
    let counters = metrics.storage.clone();
    let observer: FsObserver = Arc::new(move |event| match event {
        FsEvent::Synced => {
            counters.fsyncs.inc();
        }
        FsEvent::FileOpened => {
            counters.files_open.inc();
        }
        FsEvent::FileClosed => {
            counters.files_open.dec();
        }
    });
    let options = AssembleOptions {
        jsonl: JsonlOptions { fs: Arc::new(CountingFs::new(Arc::new(OsFs), observer)), ..JsonlOptions::default() },
        ..AssembleOptions::default()
    };
    let url = StoreUrl::Embedded(root.to_path_buf());
    let service = berth_assemble::open_service_with(&url, options, clock).await.unwrap();
    Arc::new(customize(service))
}

impl TestServer {
    pub async fn start() -> TestServer {
        TestServer::start_with(test_config()).await
    }

    pub async fn start_with(config: ServerConfig) -> TestServer {
        TestServer::start_with_jwt(config, None).await
    }

    pub async fn start_with_jwt(config: ServerConfig, jwt: Option<berth_server::auth::JwtVerifier>) -> TestServer {
        TestServer::start_customized(config, jwt, |service| service).await
    }

    /// A server whose service's own settings are changed by `customize`.
    pub async fn start_with_service(
        config: ServerConfig,
        customize: impl FnOnce(SessionService) -> SessionService,
    ) -> TestServer {
        TestServer::start_customized(config, None, customize).await
    }

    /// A server whose service reads time from `clock` (fixed times for golden bodies).
    pub async fn start_with_clock(clock: Arc<dyn Clock>) -> TestServer {
        TestServer::start_on(test_config(), None, clock, |service| service).await
    }

    async fn start_customized(
        config: ServerConfig,
        jwt: Option<berth_server::auth::JwtVerifier>,
        customize: impl FnOnce(SessionService) -> SessionService,
    ) -> TestServer {
        TestServer::start_on(config, jwt, Arc::new(SystemClock), customize).await
    }

    async fn start_on(
        config: ServerConfig,
        jwt: Option<berth_server::auth::JwtVerifier>,
        clock: Arc<dyn Clock>,
        customize: impl FnOnce(SessionService) -> SessionService,
    ) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("data");
        std::fs::create_dir(&root).unwrap();
        let metrics = Arc::new(Metrics::new());
        let service = open_service_with_clock(&root, &metrics, clock, customize).await;
        let keys = KeyStore::open(&root.join(KEYS_FILE)).unwrap();
        let parts = ServerParts {
            service: service.clone(),
            auth: Authenticator::new(keys.clone(), jwt),
            metrics: metrics.clone(),
            feed: None,
            backups: None,
        };
        let server = berth_server::start(config, parts).await.unwrap();
        TestServer { dir, server, keys, service, metrics }
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// A key for (tenant, user, project, role).
    pub fn key(&self, tenant: &str, user: &str, project: Option<&str>, role: Role) -> String {
        self.keys.create(&principal(tenant, user, project, role), None).unwrap().1
    }

    pub fn client(&self, key: &str) -> Client {
        Client::new(&self.url(), Some(key.to_owned())).unwrap()
    }

    pub fn anonymous(&self) -> Client {
        Client::new(&self.url(), None).unwrap()
    }
}

pub fn principal(tenant: &str, user: &str, project: Option<&str>, role: Role) -> Principal {
    Principal {
        tenant: TenantId::parse(tenant).unwrap(),
        user: UserId::parse(user).unwrap(),
        project: project.map(|p| ProjectId::parse(p).unwrap()),
        role,
    }
}

/// The files a read-only request may still change: the catalog and the key store.
pub const DATABASE_FILES: [&str; 2] = [berth_assemble::CATALOG_FILE, KEYS_FILE];

/// Every file under `root` (relative path → bytes), for before/after comparisons.
pub fn snapshot(root: &Path, skip: &[&str]) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let relative = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if skip.iter().any(|prefix| relative.starts_with(prefix)) {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else {
                files.insert(relative, std::fs::read(&path).unwrap_or_default());
            }
        }
    }
    files
}

pub fn events_body(run: Option<&str>, count: usize) -> serde_json::Value {
    let events: Vec<serde_json::Value> =
        (0..count).map(|i| serde_json::json!({"type": "note/text", "data": {"i": i}})).collect();
    serde_json::json!({"run": run, "events": events})
}
