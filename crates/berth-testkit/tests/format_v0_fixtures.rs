//! R-C2 against old data: the version-0 fixtures (`fixtures/v0/`, written by the build
//! before exact data, when event data was stored canonical) are read by this build with
//! the same events byte for byte — the JSONL logs through the log store and `fsck`, the
//! export and the export ZIP through import on memory and embedded — a version-0 session
//! keeps its version while new, exact data is appended to it, and a fork of one is a
//! version-1 session holding the same bytes.

use berth_core::{Event, SessionHeader, SessionKey, Timestamp, SESSION_FORMAT_VERSION};
use berth_jsonl::fsck::{self, SessionStatus};
use berth_jsonl::{JsonlBackend, JsonlOptions};
use berth_sqlite::{SqliteCatalog, CATALOG_FILE_NAME};
use berth_store::{Access, LogStore};
use berth_testkit::catalog_conformance::{AuditTamper, AuditTamperer};
use berth_testkit::service_conformance::exact_data::EXACT_DATA;
use berth_testkit::service_conformance::export::FAMILY;
use berth_testkit::service_conformance::fixtures::{key, owner, sid, TENANT_A};
use berth_testkit::service_conformance::{EmbeddedService, MemoryService, ServiceBackend};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/v0").join(name)
}

/// A copy of the fixture's `tenants/` tree in a fresh data root (tests never write to
/// the checked-in files).
fn v0_data_root() -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("temporary data root");
    copy_tree(&fixture("jsonl"), &root.path().join("tenants"));
    root
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The event lines of an export (everything after its header line).
fn export_event_lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8(bytes.to_vec()).unwrap().lines().skip(1).map(str::to_owned).collect()
}

fn lines(events: &[Event]) -> Vec<String> {
    events.iter().map(Event::to_canonical_json).collect()
}

async fn read_log(store: &LogStore, key: &SessionKey) -> (SessionHeader, Vec<Event>) {
    let handle = store.open(key, Access::Read).await.unwrap_or_else(|error| panic!("open {key}: {error}"));
    let events = handle.read(0, None).await.expect("read a version-0 log");
    let header = handle.header().clone();
    handle.close().await.unwrap();
    (header, events)
}

fn jsonl_store(root: &Path) -> LogStore {
    LogStore::new(Arc::new(JsonlBackend::open(root, JsonlOptions::default()).expect("open the JSONL backend")))
}

#[tokio::test]
async fn version_0_jsonl_logs_read_as_they_were_written() {
    let root = v0_data_root();
    let reports = fsck::check_root(root.path()).unwrap();
    assert_eq!(reports.len(), FAMILY.len());
    for report in &reports {
        assert!(matches!(report.status, SessionStatus::Ok { .. }), "{}: {:?}", report.key, report.status);
    }
    let store = jsonl_store(root.path());
    let (header, events) = read_log(&store, &key(TENANT_A, "rich")).await;
    assert_eq!(header.version, 0, "an old log keeps its version");
    let exported = std::fs::read(fixture("export-rich.jsonl")).unwrap();
    assert_eq!(lines(&events), export_event_lines(&exported), "the same events, byte for byte");
    let user_message = events[1].data.as_str();
    assert!(user_message.contains(r#""a":[1.5,-0.25,18446744073709551615,-9007199254740993,0.1],"z":1"#));
}

#[tokio::test]
async fn a_version_0_log_takes_exact_data_and_keeps_its_version() {
    let root = v0_data_root();
    let store = jsonl_store(root.path());
    let session = key(TENANT_A, "rich.f2");
    let (_, before) = read_log(&store, &session).await;
    let writer = store.open(&session, Access::Write).await.expect("open a version-0 log for writing");
    let mut event = Event::new(before.len() as u64, "myapp/exact", Timestamp(1), serde_json::Value::Null).unwrap();
    event.run = before.last().and_then(|last| last.run.clone());
    event.data = berth_core::JsonText::parse(EXACT_DATA).unwrap();
    writer.append(std::slice::from_ref(&event)).await.expect("append to a version-0 log");
    writer.close().await.unwrap();
    drop(store);

    let store = jsonl_store(root.path());
    let (header, after) = read_log(&store, &session).await;
    assert_eq!(header.version, 0);
    assert_eq!(after[..before.len()], before[..], "old events unchanged");
    assert_eq!(after[before.len()].data.as_str(), EXACT_DATA);
}

/// The version-0 ZIP imports every session of the family with the events the version-0
/// JSONL logs hold, byte for byte; a fork of an imported version-0 session is a session
/// of the current version holding the same bytes. (The single export and the envelope
/// are checked on every backend by `exact_data::version_0_exports_import_unchanged`.)
#[tokio::test]
async fn version_0_zip_imports_the_events_of_the_version_0_logs() {
    let expected = std::fs::read(fixture("export-rich.jsonl")).unwrap();
    let zip = std::fs::read(fixture("export-rich-family.zip")).unwrap();
    let v0_logs = v0_data_root();
    let v0_store = jsonl_store(v0_logs.path());
    let backends: Vec<Box<dyn ServiceBackend>> =
        vec![Box::new(MemoryService::new()), Box::new(EmbeddedService::new(open_sqlite))];
    for backend in backends {
        let service = backend.service();
        let imported = service.import_zip(&owner(), &zip).await.expect("import a version-0 ZIP");
        assert_eq!(imported.len(), FAMILY.len());
        for id in FAMILY {
            let (_, from_log) = read_log(&v0_store, &key(TENANT_A, id)).await;
            let from_zip = service.read(&owner(), &sid(id), 0, None).await.unwrap();
            assert_eq!(lines(&from_zip), lines(&from_log), "{}: {id}", backend.name());
        }
        let fork =
            service.fork(&owner(), &sid("rich"), Some(4), Some(sid("rich.new"))).await.expect("fork a v0 session");
        assert_eq!(fork.header.version, SESSION_FORMAT_VERSION, "a fork is a new session, in the new version");
        let copied = service.read(&owner(), &sid("rich.new"), 0, Some(4)).await.unwrap();
        assert_eq!(lines(&copied), export_event_lines(&expected)[..4], "{}: copied verbatim", backend.name());
    }
    const { assert!(SESSION_FORMAT_VERSION > 0, "these fixtures stand for an older version") };
}

struct NoTamper;

#[async_trait::async_trait]
impl AuditTamperer for NoTamper {
    async fn tamper(&self, _tenant: &berth_core::TenantId, _how: AuditTamper) {
        unreachable!("the fixture tests do not tamper with audit logs")
    }
}

fn open_sqlite(root: &Path) -> (Arc<dyn berth_catalog::Catalog>, Arc<dyn AuditTamperer>) {
    let catalog = SqliteCatalog::open(root.join(CATALOG_FILE_NAME)).expect("open the catalog");
    (Arc::new(catalog), Arc::new(NoTamper))
}
