//! The `SessionService` conformance suite on the embedded backend: JSONL logs and the
//! SQLite catalog in one temporary data root; `restart` reopens both from disk.

mod audit_tamper;

use async_trait::async_trait;
use berth_catalog::Catalog;
use berth_core::TenantId;
use berth_sqlite::{SqliteCatalog, CATALOG_FILE_NAME};
use berth_testkit::catalog_conformance::{AuditTamper, AuditTamperer};
use berth_testkit::service_conformance::EmbeddedService;
use std::path::Path;
use std::sync::Arc;

/// Edits the catalog's stored audit rows with raw SQL, behind the catalog's back.
struct SqliteTamper(SqliteCatalog);

#[async_trait]
impl AuditTamperer for SqliteTamper {
    async fn tamper(&self, tenant: &TenantId, how: AuditTamper) {
        self.0.execute_for_tests(&audit_tamper::sqlite(tenant, how)).await.expect("tamper with the audit rows");
    }
}

fn open_sqlite(root: &Path) -> (Arc<dyn Catalog>, Arc<dyn AuditTamperer>) {
    let catalog = SqliteCatalog::open(root.join(CATALOG_FILE_NAME)).expect("open the catalog");
    (Arc::new(catalog.clone()), Arc::new(SqliteTamper(catalog)))
}

berth_testkit::service_conformance!(EmbeddedService::new(open_sqlite));

/// A create keeps its write handle (and the session's writer lease) in the service's
/// cache, so the append that follows opens nothing: one sync, the append's own, where a
/// write open first replaces the durable epoch (two syncs more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_append_after_a_create_writes_through_the_creates_handle() {
    use berth_jsonl::{CountingFs, FsEvent, FsObserver, JsonlBackend, JsonlOptions};
    use berth_service::{AppendRequest, CreateSession, NewEvent, SessionService};
    use berth_store::LogStore;
    use berth_testkit::service_conformance::fixtures::{service_principal, sid, TENANT_A};
    use std::sync::atomic::{AtomicU64, Ordering};

    let dir = tempfile::tempdir().unwrap();
    let syncs = Arc::new(AtomicU64::new(0));
    let counted = syncs.clone();
    let observer: FsObserver = Arc::new(move |event| {
        if event == FsEvent::Synced {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    let fs = Arc::new(CountingFs::new(Arc::new(berth_jsonl::fs::OsFs), observer));
    let backend = JsonlBackend::open(dir.path().to_path_buf(), JsonlOptions { fs, ..JsonlOptions::default() }).unwrap();
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).unwrap();
    let service =
        SessionService::new(LogStore::new(Arc::new(backend)), Arc::new(catalog), Arc::new(berth_core::SystemClock));
    let principal = service_principal(TENANT_A);
    service.create(&principal, CreateSession { id: Some(sid("s")), ..CreateSession::default() }).await.unwrap();
    assert_eq!(service.writers_cached().await, 1, "the create's handle is cached");
    syncs.store(0, Ordering::SeqCst);
    let events = vec![NewEvent::new("note/x", serde_json::json!({ "n": 1 }))];
    let request = AppendRequest { memory: Vec::new(), run: None, expected_seq: Some(0), events, idempotency_key: None };
    service.append(&principal, &sid("s"), request).await.unwrap();
    assert_eq!(syncs.load(Ordering::SeqCst), 1, "the append's own sync, no write open");
    assert_eq!(service.read(&principal, &sid("s"), 0, None).await.unwrap().len(), 1);
}

/// The service's cache of write handles is bounded: beyond `with_writers_cached_max`,
/// the least recently used idle handles are closed (their writer leases released and
/// their descriptors freed), and reopened when their session is next written; no event
/// is lost or reordered on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_write_handles_beyond_the_cap_are_closed_and_reopened_on_demand() {
    use berth_jsonl::{JsonlBackend, JsonlOptions};
    use berth_service::{AppendRequest, CreateSession, NewEvent, SessionService};
    use berth_store::{Access, LogStore};
    use berth_testkit::service_conformance::fixtures::{key, service_principal, sid, TENANT_A};

    let dir = tempfile::tempdir().unwrap();
    let open_store =
        || LogStore::new(Arc::new(JsonlBackend::open(dir.path().to_path_buf(), JsonlOptions::default()).unwrap()));
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).unwrap();
    let service = SessionService::new(open_store(), Arc::new(catalog), Arc::new(berth_core::SystemClock))
        .with_writers_cached_max(2);
    let principal = service_principal(TENANT_A);
    let ids: Vec<String> = (0..6).map(|i| format!("s{i}")).collect();
    for id in &ids {
        service.create(&principal, CreateSession { id: Some(sid(id)), ..CreateSession::default() }).await.unwrap();
    }
    for round in 0..3 {
        for id in &ids {
            let event = NewEvent::new("note/x", serde_json::json!({ "round": round }));
            let request = AppendRequest {
                memory: Vec::new(),
                run: None,
                expected_seq: Some(round),
                events: vec![event],
                idempotency_key: None,
            };
            service.append(&principal, &sid(id), request).await.unwrap();
            assert!(service.writers_cached().await <= 2, "the cache grew past its cap");
        }
    }
    for id in &ids {
        let events = service.read(&principal, &sid(id), 0, None).await.unwrap();
        let rounds: Vec<_> = events.iter().map(|event| event.data.to_value()["round"].clone()).collect();
        assert_eq!(rounds, [0, 1, 2].map(serde_json::Value::from), "{id}");
    }
    // An evicted session's writer lease is free: another store (as another process
    // would) can open it for writing.
    let other = open_store();
    let handle = other.open(&key(TENANT_A, "s0"), Access::Write).await.expect("the evicted handle released its lease");
    handle.close().await.unwrap();
}

/// `close_idle_writers` closes the write handles not used for the given time (releasing
/// their writer leases, as `berth serve` does periodically so that another server can
/// write those sessions), keeps the recently used ones, and the next append reopens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_write_handles_are_closed_on_request_and_recently_used_ones_kept() {
    use berth_jsonl::{JsonlBackend, JsonlOptions};
    use berth_service::{AppendRequest, CreateSession, NewEvent, SessionService};
    use berth_store::{Access, LogStore};
    use berth_testkit::service_conformance::fixtures::{key, service_principal, sid, TENANT_A};
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let open_store =
        || LogStore::new(Arc::new(JsonlBackend::open(dir.path().to_path_buf(), JsonlOptions::default()).unwrap()));
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).unwrap();
    // The cache judges idleness on the service's clock: a fake one, moved by the test
    // (no sleep racing a window).
    let clock = berth_testkit::clock::FakeClock::new(1_700_000_000_000);
    let service = SessionService::new(open_store(), Arc::new(catalog), clock.clone());
    let principal = service_principal(TENANT_A);
    let append = |id: &'static str| {
        let (service, principal) = (&service, &principal);
        async move {
            let request = AppendRequest {
                memory: Vec::new(),
                run: None,
                expected_seq: None,
                events: vec![NewEvent::new("note/x", serde_json::json!({}))],
                idempotency_key: None,
            };
            service.append(principal, &sid(id), request).await.unwrap();
        }
    };
    for id in ["old", "recent"] {
        service.create(&principal, CreateSession { id: Some(sid(id)), ..CreateSession::default() }).await.unwrap();
    }
    append("old").await;
    clock.advance_ms(300);
    append("recent").await;
    assert_eq!(service.close_idle_writers(Duration::from_millis(200)).await, 1);
    assert_eq!(service.writers_cached().await, 1);
    let other = open_store();
    let handle = other.open(&key(TENANT_A, "old"), Access::Write).await.expect("the idle handle released its lease");
    handle.close().await.unwrap();
    append("old").await;
    assert_eq!(service.read(&principal, &sid("old"), 0, None).await.unwrap().len(), 2);
}

/// A resume that fails after its attach (here: a log damaged mid-file, which the repair
/// cannot read) detaches the run it attached, audited as a detach with outcome
/// `RESUME_FAILED_OUTCOME`: the session is not left busy for the run lease, and the
/// next attach of a serial session succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_resume_detaches_the_run_it_attached() {
    use berth_service::{OnBusy, RESUME_FAILED_OUTCOME};
    use berth_testkit::service_conformance::fixtures::*;
    use berth_testkit::service_conformance::ServiceBackend;

    let backend = EmbeddedService::new(open_sqlite);
    let service = backend.service();
    create(&service, &owner(), "damaged", serial(DAY_MS, DAY_MS)).await;
    attach(&service, &owner(), "damaged", "r1").await;
    let events = vec![user_message("one"), user_message("two"), user_message("three")];
    append(&service, &owner(), "damaged", Some("r1"), events).await;
    service.detach(&owner(), &sid("damaged"), &run("r1"), "completed", None).await.unwrap();
    drop(service);
    backend.restart().await;

    // Damage the second event line (its checksum no longer matches) with valid records
    // after it: corruption, not a torn tail.
    let log = backend.root().join("tenants").join(TENANT_A).join("sessions").join("damaged").join("session.jsonl");
    let mut bytes = std::fs::read(&log).unwrap();
    let line_starts: Vec<usize> = bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1).collect();
    let inside_second_event = line_starts[1] + (line_starts[2] - line_starts[1]) / 2;
    bytes[inside_second_event] = if bytes[inside_second_event] == b'x' { b'y' } else { b'x' };
    std::fs::write(&log, bytes).unwrap();

    let service = backend.service();
    let failed = service.resume(&owner(), &sid("damaged"), attach_request("r2", OnBusy::Reject)).await;
    assert!(failed.is_err(), "the damaged log cannot be repaired: {failed:?}");
    let record = stored(&service, TENANT_A, "damaged").await.unwrap();
    assert!(record.runs.is_empty(), "the failed resume's run is detached: {:?}", record.runs);
    let detaches = audited(&service, TENANT_A, "detach").await;
    let undo = detaches.last().unwrap();
    assert_eq!(undo.draft.details["run"], "r2");
    assert_eq!(undo.draft.details["outcome"], RESUME_FAILED_OUTCOME);
    let again = service.attach(&owner(), &sid("damaged"), attach_request("r3", OnBusy::Reject)).await;
    assert!(again.is_ok(), "a second attach of the serial session works: {again:?}");
}

/// A log open for writing in another process (a second service on the same data root)
/// refuses an append with `WriterBusy` — a class of its own, so that clients wait it out
/// without reading message text — distinct from a policy's `Busy`; nothing is stored,
/// and once the other side lets go the same append succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_open_for_writing_elsewhere_is_writer_busy_not_busy() {
    use berth_core::{Error, ErrorClass};
    use berth_jsonl::{JsonlBackend, JsonlOptions};
    use berth_service::{AppendRequest, CreateSession, NewEvent, SessionService};
    use berth_store::LogStore;
    use berth_testkit::service_conformance::fixtures::{service_principal, sid, TENANT_A};
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let open_service = || {
        let store =
            LogStore::new(Arc::new(JsonlBackend::open(dir.path().to_path_buf(), JsonlOptions::default()).unwrap()));
        let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).unwrap();
        SessionService::new(store, Arc::new(catalog), Arc::new(berth_core::SystemClock))
    };
    let (first, second) = (open_service(), open_service());
    let principal = service_principal(TENANT_A);
    first.create(&principal, CreateSession { id: Some(sid("shared")), ..CreateSession::default() }).await.unwrap();
    let append = |text: &str| AppendRequest {
        memory: Vec::new(),
        run: None,
        expected_seq: None,
        events: vec![NewEvent::new("note/x", serde_json::json!({ "text": text }))],
        idempotency_key: None,
    };
    first.append(&principal, &sid("shared"), append("first")).await.unwrap();

    let refused = second.append(&principal, &sid("shared"), append("second")).await;
    match &refused {
        Err(error @ Error::WriterBusy { id, .. }) => {
            assert_eq!(id, "shared");
            assert_eq!((error.class(), error.class().code()), (ErrorClass::WriterBusy, "writer_busy"));
        }
        other => panic!("expected WriterBusy, got {other:?}"),
    }
    let events = second.read(&principal, &sid("shared"), 0, None).await.unwrap();
    assert_eq!(events.len(), 1, "the refused append stored nothing");

    first.close_idle_writers(Duration::ZERO).await;
    second.append(&principal, &sid("shared"), append("second")).await.expect("the log is free again");
    assert_eq!(second.read(&principal, &sid("shared"), 0, None).await.unwrap().len(), 2);
}
