//! Golden files of the export format (version `EXPORT_VERSION`): the exact JSONL bytes
//! of `SessionService::export` (the metadata line, then one canonical line per event)
//! and, for `export_zip`, the entry names and each entry's bytes, for a small session
//! and its fork made on the memory backend with a fixed clock, client-chosen ids and
//! explicit event times. Exports are read back by later builds (`import`), so this is a
//! storage format: a change shows up as a diff of `tests/golden/` (regenerate with
//! `BERTH_BLESS=1 cargo test -p berth-testkit --test export_golden`). Each golden file is
//! also imported into a fresh service and must give back the same session.

use berth_catalog::memory::MemoryCatalog;
use berth_core::{JsonText, ProjectId, RunId, SessionId, TenantId, Timestamp, UserId};
use berth_service::{AppendRequest, AttachRequest, CreateSession, NewEvent, Principal, SessionService, EXPORT_VERSION};
use berth_store::memory::{MemoryBackend, MemoryStorage};
use berth_store::LogStore;
use berth_testkit::clock::FakeClock;
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

const T0: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name)
}

/// Compares `bytes` with the golden file byte for byte (rewriting it under `BERTH_BLESS`).
fn assert_golden(name: &str, bytes: &[u8]) {
    berth_golden::assert_golden(&golden_path(name), name, bytes);
}

fn service(clock: Arc<FakeClock>) -> SessionService {
    let store = LogStore::new(Arc::new(MemoryBackend::new(MemoryStorage::new())));
    SessionService::new(store, Arc::new(MemoryCatalog::new()), clock)
}

fn alice() -> Principal {
    Principal::user(
        TenantId::parse("acme").unwrap(),
        UserId::parse("alice").unwrap(),
        Some(ProjectId::parse("support").unwrap()),
    )
}

fn sid(text: &str) -> SessionId {
    SessionId::parse(text).unwrap()
}

fn event(event_type: &str, data: &str, time_ms: u64) -> NewEvent {
    NewEvent {
        event_type: event_type.into(),
        data: JsonText::parse(data).unwrap(),
        time: Some(Timestamp(time_ms)),
        ignorable: false,
    }
}

/// `chat-1` (title, labels, origin; one run's turn, with an idempotency key and data
/// whose spelling is kept exactly) and its fork `chat-1-fork` after 2 events.
async fn small_session(service: &SessionService, clock: &FakeClock) {
    let create = CreateSession {
        id: Some(sid("chat-1")),
        title: Some("Refund for order #12".into()),
        labels: ["billing", "vip"].iter().map(|label| (*label).to_owned()).collect(),
        origin: Some("subagent".into()),
        delegation_depth: 1,
        ..CreateSession::default()
    };
    service.create(&alice(), create).await.unwrap();
    clock.advance_ms(1_000);
    let run = RunId::parse("run-1").unwrap();
    let attach = AttachRequest { run_id: Some(run.clone()), ..AttachRequest::default() };
    service.attach(&alice(), &sid("chat-1"), attach).await.unwrap();
    clock.advance_ms(1_000);
    let events = vec![
        event("turn/start", r#"{"turn":0}"#, T0 + 1_500),
        event("user/message", r##"{"content":"refund \"#12\" ✓","z":1.50,"a":[]}"##, T0 + 1_600),
        event("assistant/message", r#"{"content":"done"}"#, T0 + 1_700),
        event("turn/end", r#"{"turn":0,"reason":"completed"}"#, T0 + 1_800),
    ];
    let append = AppendRequest {
        memory: Vec::new(),
        run: Some(run.clone()),
        expected_seq: Some(0),
        events,
        idempotency_key: Some("batch-1".into()),
    };
    service.append(&alice(), &sid("chat-1"), append).await.unwrap();
    clock.advance_ms(1_000);
    service.detach(&alice(), &sid("chat-1"), &run, "completed", None).await.unwrap();
    clock.advance_ms(1_000);
    service.fork(&alice(), &sid("chat-1"), Some(2), Some(sid("chat-1-fork"))).await.unwrap();
}

fn zip_entries(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
    (0..archive.len())
        .map(|index| {
            let mut entry = archive.by_index(index).unwrap();
            let mut contents = Vec::new();
            entry.read_to_end(&mut contents).unwrap();
            (entry.name().to_owned(), contents)
        })
        .collect()
}

#[tokio::test]
async fn the_jsonl_and_zip_exports_are_pinned() {
    assert_eq!(EXPORT_VERSION, 1, "a new export version needs new golden files (keep the old ones as fixtures)");
    let clock = FakeClock::new(T0);
    let service = service(clock.clone());
    small_session(&service, &clock).await;

    let jsonl = service.export(&alice(), &sid("chat-1")).await.unwrap();
    assert_golden("export-v1-chat-1.jsonl", &jsonl);

    let entries = zip_entries(&service.export_zip(&alice(), &sid("chat-1")).await.unwrap());
    let names: Vec<&str> = entries.iter().map(|(name, _)| name.as_str()).collect();
    let listing: String = names.iter().map(|name| format!("{name}\n")).collect();
    assert_golden("export-v1-chat-1.zip-entries.txt", listing.as_bytes());
    for (name, contents) in &entries {
        assert_golden(&format!("export-v1-zip-{name}"), contents);
    }
    assert_eq!(entries[0].1, jsonl, "the ZIP's first entry is the session's JSONL export");
}

/// The golden export imports into a fresh service as the same session, and exports
/// again to the same bytes.
#[tokio::test]
async fn the_golden_export_imports_back_to_the_same_bytes() {
    let golden = std::fs::read(golden_path("export-v1-chat-1.jsonl")).unwrap();
    let clock = FakeClock::new(T0 + 86_400_000);
    let service = service(clock);
    let record = service.import(&alice(), &golden).await.unwrap();
    assert_eq!(record.header.id, sid("chat-1"));
    assert_eq!(service.export(&alice(), &sid("chat-1")).await.unwrap(), golden);
}
