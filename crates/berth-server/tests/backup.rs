//! `POST /v1/admin/backup` over real HTTP: only an admin key of the operator tenant
//! takes a backup (every refusal audited), names are directory names and never paths,
//! a server without a backup directory says how to get one, one backup runs at a time,
//! and it runs on the blocking pool, never on a runtime worker.

mod common;

use berth_api::BackupBody;
use berth_assemble::backup::{self, BackupOptions, NoProgress};
use berth_server::auth::{Authenticator, KeyStore, KEYS_FILE};
use berth_server::backup::{BackupRunner, Backups};
use berth_server::client::Client;
use berth_server::metrics::Metrics;
use berth_server::{RunningServer, ServerParts};
use berth_service::Role;
use common::{open_service_with, principal, test_config};
use hyper::Method;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// Backups of the embedded store at `data` into directories under `dir`.
struct DirectoryRunner {
    data: PathBuf,
    dir: PathBuf,
}

impl BackupRunner for DirectoryRunner {
    fn backup(&self, name: &str, since: Option<&str>) -> berth_core::Result<BackupBody> {
        let mut options = BackupOptions::new(berth_assemble::system_clock());
        options.since = since.map(|since| self.dir.join(since));
        let summary = backup::backup(&self.data, &self.dir.join(name), &options, &mut NoProgress)?;
        Ok(BackupBody {
            id: summary.id,
            name: name.to_owned(),
            kind: "full".into(),
            previous: summary.previous,
            snapshot_at: berth_core::Timestamp(summary.snapshot_at),
            sessions: summary.sessions,
            logs_copied: summary.logs_copied,
            logs_unchanged: summary.logs_unchanged,
            vanished: summary.vanished,
            bytes: summary.bytes,
            duration_ms: 0,
        })
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    data: PathBuf,
    backups: PathBuf,
    keys: KeyStore,
    server: RunningServer,
}

impl Fixture {
    /// A server whose backups `runner` takes (none when `None`), for admins of `ops`.
    async fn start(runner: impl FnOnce(&Path, &Path) -> Option<Arc<dyn BackupRunner>>) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let (data, backups) = (dir.path().join("data"), dir.path().join("backups"));
        std::fs::create_dir_all(&backups).unwrap();
        let metrics = Arc::new(Metrics::new());
        let service = open_service_with(&data, &metrics, |service| service).await;
        let keys = KeyStore::open(&data.join(KEYS_FILE)).unwrap();
        let operator = berth_core::TenantId::parse("ops").unwrap();
        let parts = ServerParts {
            service,
            auth: Authenticator::new(keys.clone(), None),
            metrics,
            feed: None,
            backups: runner(&data, &backups).map(|runner| Backups::new(runner, operator)),
        };
        let server = berth_server::start(test_config(), parts).await.unwrap();
        Fixture { _dir: dir, data, backups, keys, server }
    }

    fn client(&self, tenant: &str, role: Role) -> Client {
        let key = self.keys.create(&principal(tenant, "someone", None, role), None).unwrap().1;
        Client::new(&self.server.url(), Some(key)).unwrap()
    }
}

async fn post_backup(client: &Client, body: Value) -> (u16, Value) {
    let body = serde_json::to_vec(&body).unwrap();
    let response = client.send(Method::POST, "/v1/admin/backup", Some(body), &[]).await.unwrap();
    (response.status.as_u16(), serde_json::from_slice(&response.body).unwrap_or(Value::Null))
}

async fn audit_actions(client: &Client) -> Vec<(String, String)> {
    let response = client.send(Method::GET, "/v1/audit?limit=1000", None, &[]).await.unwrap();
    let entries: Vec<Value> = serde_json::from_slice(&response.body).unwrap();
    entries
        .iter()
        .map(|entry| (entry["action"].as_str().unwrap().to_owned(), entry["outcome"].as_str().unwrap().to_owned()))
        .collect()
}

fn directory_runner(data: &Path, dir: &Path) -> Option<Arc<dyn BackupRunner>> {
    Some(Arc::new(DirectoryRunner { data: data.to_path_buf(), dir: dir.to_path_buf() }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_admin_takes_a_backup_that_restores() {
    let fixture = Fixture::start(directory_runner).await;
    let acme = fixture.client("acme", Role::Service);
    let created = acme.send(Method::POST, "/v1/sessions", Some(br#"{"id":"s1"}"#.to_vec()), &[]).await.unwrap();
    assert_eq!(created.status.as_u16(), 201);
    let ops = fixture.client("ops", Role::Admin);
    let (status, body) = post_backup(&ops, json!({"name": "first"})).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!((body["name"].as_str(), body["sessions"].as_u64()), (Some("first"), Some(1)));
    assert!(fixture.backups.join("first").join(backup::MANIFEST_FILE).is_file());
    assert!(audit_actions(&ops).await.contains(&("backup".to_owned(), "ok".to_owned())), "the backup is audited");

    let (status, body) = post_backup(&ops, json!({"name": "first"})).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("already_exists")), "{body}");
    let (status, body) = post_backup(&ops, json!({"name": "second", "since": "first"})).await;
    assert_eq!(status, 201, "{body}");

    let restored = fixture._dir.path().join("restored");
    let options =
        backup::RestoreOptions { force: false, rate_bytes_per_s: None, clock: berth_assemble::system_clock() };
    let report = backup::restore(&fixture.backups.join("second"), &restored, &options, &mut NoProgress).await.unwrap();
    assert_eq!(report.sessions, 1);
    assert!(fixture.data.is_dir());
}

/// Another tenant's admin, and the operator tenant's non-admin keys, are refused (403,
/// audited as denials in the caller's tenant); nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_admin_of_the_operator_tenant_may_take_one() {
    let fixture = Fixture::start(directory_runner).await;
    for (tenant, role) in [("acme", Role::Admin), ("ops", Role::Service), ("ops", Role::User)] {
        let client = fixture.client(tenant, role);
        let (status, body) = post_backup(&client, json!({"name": "mine"})).await;
        assert_eq!((status, body["code"].as_str()), (403, Some("forbidden")), "{tenant} {role:?}: {body}");
    }
    let acme_admin = fixture.client("acme", Role::Admin);
    assert!(audit_actions(&acme_admin).await.contains(&("backup".to_owned(), "denied".to_owned())));
    assert_eq!(std::fs::read_dir(&fixture.backups).unwrap().count(), 0);
}

/// A name is a directory name under the backup directory, never a path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_are_paths_are_refused() {
    let fixture = Fixture::start(directory_runner).await;
    let ops = fixture.client("ops", Role::Admin);
    for name in ["../escape", ".hidden", "a/b", "", "/abs", &"x".repeat(129)] {
        let (status, body) = post_backup(&ops, json!({"name": name})).await;
        assert_eq!((status, body["code"].as_str()), (422, Some("invalid")), "{name:?}: {body}");
        let (status, _) = post_backup(&ops, json!({"name": "ok", "since": name})).await;
        assert_eq!(status, 422, "since {name:?}");
    }
    let (status, _) = post_backup(&ops, json!({"name": "ok", "path": "/tmp"})).await;
    assert_eq!(status, 400, "unknown fields are refused");
    assert_eq!(std::fs::read_dir(&fixture.backups).unwrap().count(), 0);
    assert!(!fixture._dir.path().join("escape").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_a_backup_directory_says_how_to_get_one() {
    let fixture = Fixture::start(|_, _| None).await;
    let (status, body) = post_backup(&fixture.client("ops", Role::Admin), json!({"name": "first"})).await;
    assert_eq!((status, body["code"].as_str()), (422, Some("invalid")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("--backup-dir"), "{body}");
}

/// A runner that blocks until released, telling when it started.
struct BlockingRunner {
    started: Mutex<mpsc::Sender<()>>,
    release: Mutex<mpsc::Receiver<()>>,
}

impl BackupRunner for BlockingRunner {
    fn backup(&self, name: &str, _since: Option<&str>) -> berth_core::Result<BackupBody> {
        self.started.lock().unwrap().send(()).unwrap();
        self.release.lock().unwrap().recv_timeout(Duration::from_secs(30)).expect("released");
        Ok(BackupBody {
            id: "id".into(),
            name: name.to_owned(),
            kind: "full".into(),
            previous: None,
            snapshot_at: berth_core::Timestamp(0),
            sessions: 0,
            logs_copied: 0,
            logs_unchanged: 0,
            vanished: 0,
            bytes: 0,
            duration_ms: 0,
        })
    }
}

/// On a runtime of one worker thread: while a backup blocks, the server still answers
/// (the backup is on the blocking pool — on the worker, nothing else would run and the
/// release below would never come), and a second backup is refused as busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_backup_runs_on_the_blocking_pool_one_at_a_time() {
    let (started_tx, started_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let runner = Arc::new(BlockingRunner { started: Mutex::new(started_tx), release: Mutex::new(release_rx) });
    let fixture = Fixture::start(move |_, _| Some(runner as Arc<dyn BackupRunner>)).await;
    let ops = fixture.client("ops", Role::Admin);
    let first = {
        let ops = ops.clone();
        tokio::spawn(async move { post_backup(&ops, json!({"name": "slow"})).await })
    };
    tokio::task::spawn_blocking(move || started_rx.recv_timeout(Duration::from_secs(30)).expect("the backup started"))
        .await
        .unwrap();
    let whoami = tokio::time::timeout(Duration::from_secs(20), ops.send(Method::GET, "/v1/whoami", None, &[]));
    assert_eq!(whoami.await.expect("answered during the backup").unwrap().status.as_u16(), 200);
    let (status, body) = post_backup(&ops, json!({"name": "other"})).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("busy")), "{body}");
    release_tx.send(()).unwrap();
    let (status, body) = first.await.unwrap();
    assert_eq!(status, 201, "{body}");
}

/// An incremental backup on top of a backup that does not exist is 404, not a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn since_a_backup_that_does_not_exist_is_not_found() {
    let fixture = Fixture::start(directory_runner).await;
    let (status, body) = post_backup(&fixture.client("ops", Role::Admin), json!({"name": "b", "since": "none"})).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")), "{body}");
}
