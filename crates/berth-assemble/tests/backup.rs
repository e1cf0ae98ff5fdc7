//! Backup and restore of an embedded data directory (`berth_assemble::backup`), through
//! the library: a backup taken under a write load restores everything acknowledged
//! before it; changes made while the logs are copied are reconciled against the catalog
//! snapshot; a copy ending inside an append is truncated; incremental chains; and every
//! refusal (partial or damaged backups, occupied targets, PostgreSQL stores).
//!
//! The changes "during the copy" are made from the progress callback, which the copy
//! calls between its chunks: the interleaving is decided by the test, not by timing.

use berth_assemble::backup::{self, BackupOptions, NoProgress, Progress, RestoreOptions, MANIFEST_FILE};
use berth_assemble::{open_service_with, AssembleOptions, StoreUrl};
use berth_catalog::scoped::{MemoryPut, Namespace};
use berth_core::{Error, JsonText, SessionId, TenantId, UserId};
use berth_service::{AppendRequest, CreateSession, NewEvent, Principal, Role, SessionService};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

fn admin() -> Principal {
    Principal {
        tenant: TenantId::parse("acme").unwrap(),
        user: UserId::parse("ops").unwrap(),
        project: None,
        role: Role::Admin,
    }
}

fn sid(id: &str) -> SessionId {
    SessionId::parse(id).unwrap()
}

async fn open(dir: &Path) -> Arc<SessionService> {
    let url = StoreUrl::Embedded(dir.to_path_buf());
    Arc::new(open_service_with(&url, AssembleOptions::default(), berth_assemble::system_clock()).await.unwrap())
}

async fn create(service: &SessionService, id: &str) {
    let request = CreateSession { id: Some(sid(id)), ..CreateSession::default() };
    service.create(&admin(), request).await.unwrap();
}

async fn append(service: &SessionService, id: &str, first: u64, count: u64) {
    let events = (first..first + count).map(|i| NewEvent::new("note/x", serde_json::json!({ "i": i }))).collect();
    let request =
        AppendRequest { run: None, expected_seq: Some(first), events, idempotency_key: None, memory: Vec::new() };
    service.append(&admin(), &sid(id), request).await.unwrap();
}

/// Every event of `id` is `{"i": seq}`; returns how many there are.
async fn check_events(service: &SessionService, id: &str) -> u64 {
    let events = service.read(&admin(), &sid(id), 0, None).await.unwrap();
    for (seq, event) in events.iter().enumerate() {
        assert_eq!(event.seq.get(), seq as u64);
        assert_eq!(event.data.as_str(), format!("{{\"i\":{seq}}}"), "{id} seq {seq}");
    }
    events.len() as u64
}

fn put(key: &str, value: u64) -> MemoryPut {
    MemoryPut {
        namespace: Namespace::parse("app/main").unwrap(),
        key: key.to_owned(),
        value: JsonText::parse(&value.to_string()).unwrap(),
        expected_revision: None,
        ttl_ms: None,
        bound_to: None,
    }
}

fn options() -> BackupOptions {
    let mut options = BackupOptions::new(berth_assemble::system_clock());
    options.rate_bytes_per_s = None;
    options
}

fn restore_options(force: bool) -> RestoreOptions {
    RestoreOptions { force, rate_bytes_per_s: None, clock: berth_assemble::system_clock() }
}

async fn take(data: &Path, to: &Path, options: BackupOptions) -> backup::BackupSummary {
    let (data, to) = (data.to_path_buf(), to.to_path_buf());
    tokio::task::spawn_blocking(move || backup::backup(&data, &to, &options, &mut NoProgress)).await.unwrap().unwrap()
}

async fn restore(from: &Path, to: &Path) -> Result<backup::RestoreSummary, Error> {
    backup::restore(from, to, &restore_options(false), &mut NoProgress).await
}

async fn audit_intact(service: &SessionService) -> u64 {
    let verdict = service.verify_audit(&admin()).await.unwrap();
    assert_eq!(verdict.broken_at, None, "{verdict:?}");
    verdict.entries as u64
}

/// Four sessions and a memory writer keep writing while a (rate-limited) backup runs.
/// The restore holds every event and memory write acknowledged before the backup began,
/// each log whole and contiguous (nothing after the point half-written), the audit chain
/// verifies, and the restored store accepts appends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_load_restores_everything_acknowledged_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let (data, out, restored) = (dir.path().join("data"), dir.path().join("backup"), dir.path().join("restored"));
    let service = open(&data).await;
    const IDS: [&str; 4] = ["s1", "s2", "s3", "s4"];
    let ids = IDS;
    for id in ids {
        create(&service, id).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..=ids.len()).map(|_| AtomicU64::new(0)).collect());
    let mut writers = Vec::new();
    for (index, id) in IDS.iter().enumerate() {
        let (service, stop, acked) = (Arc::clone(&service), Arc::clone(&stop), Arc::clone(&acked));
        writers.push(tokio::spawn(async move {
            let mut next = 0;
            while !stop.load(Ordering::Acquire) {
                append(&service, id, next, 4).await;
                next += 4;
                acked[index].store(next, Ordering::Release);
            }
        }));
    }
    let (memory_service, memory_stop, memory_acked) = (Arc::clone(&service), Arc::clone(&stop), Arc::clone(&acked));
    writers.push(tokio::spawn(async move {
        let mut next = 0;
        while !memory_stop.load(Ordering::Acquire) {
            memory_service.memory_put(&admin(), put(&format!("k{next}"), next)).await.unwrap();
            next += 1;
            memory_acked[ids.len()].store(next, Ordering::Release);
        }
    }));
    // Let the load build up: wait (with a deadline) until every writer has stored some.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while acked.iter().any(|count| count.load(Ordering::Acquire) < 40) {
        assert!(std::time::Instant::now() < deadline, "the writers made no progress");
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let before: Vec<u64> = acked.iter().map(|count| count.load(Ordering::Acquire)).collect();
    let mut slow = options();
    slow.rate_bytes_per_s = Some(2 * 1024 * 1024);
    let summary = take(&data, &out, slow).await;
    let after: Vec<u64> = acked.iter().map(|count| count.load(Ordering::Acquire)).collect();
    stop.store(true, Ordering::Release);
    for writer in writers {
        writer.await.unwrap();
    }
    eprintln!("backup {summary:?}; acknowledged before {before:?}, after {after:?}");
    assert_eq!(summary.sessions, 4);

    let report = restore(&out, &restored).await.unwrap();
    assert_eq!(report.logs, 4);
    let restored_service = open(&restored).await;
    for (index, id) in ids.iter().enumerate() {
        let count = check_events(&restored_service, id).await;
        assert!(count >= before[index], "{id}: {count} events restored, {} acknowledged before", before[index]);
        append(&restored_service, id, count, 1).await;
        assert_eq!(check_events(&restored_service, id).await, count + 1);
    }
    for key in 0..before[ids.len()] {
        let namespace = Namespace::parse("app/main").unwrap();
        let item = restored_service.memory_get(&admin(), &namespace, &format!("k{key}"), false).await.unwrap();
        assert_eq!(item.value.as_str(), key.to_string());
    }
    audit_intact(&restored_service).await;
    assert!(berth_jsonl::fsck::check_root(&restored).unwrap().iter().all(|report| report.status.is_ok()));
    restored_service.shutdown().await.unwrap();
    service.shutdown().await.unwrap();
}

/// Runs `action` once, on the first progress report after the catalog's copy (the logs
/// are copied after it: the second `plan`).
struct AfterSnapshot<F: FnMut() + Send> {
    plans: u32,
    action: Option<F>,
}

impl<F: FnMut() + Send> Progress for AfterSnapshot<F> {
    fn plan(&mut self, _total_bytes: u64) {
        self.plans += 1;
        if self.plans == 2 {
            if let Some(mut action) = self.action.take() {
                action();
            }
        }
    }
    fn advance(&mut self, _bytes: u64) {}
}

/// After the catalog's snapshot and before the logs are copied: `a` gets five more
/// events, `b` is deleted, `c` is deleted and created again, `e` is created. The restore
/// is the snapshot's store: `a` with every event (the log may lead its record), `b` and
/// `c` deleted (their logs were gone; the deletion audited), `e` absent, `d` untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_during_the_copy_are_reconciled_against_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (data, out, restored) = (dir.path().join("data"), dir.path().join("backup"), dir.path().join("restored"));
    let service = open(&data).await;
    for id in ["a", "b", "c", "d"] {
        create(&service, id).await;
        append(&service, id, 0, 3).await;
    }
    let runtime = tokio::runtime::Handle::current();
    let changer = Arc::clone(&service);
    let action = move || {
        runtime.block_on(async {
            append(&changer, "a", 3, 5).await;
            changer.delete(&admin(), &sid("b"), None).await.unwrap();
            changer.delete(&admin(), &sid("c"), None).await.unwrap();
            create(&changer, "c").await;
            append(&changer, "c", 0, 1).await;
            create(&changer, "e").await;
        })
    };
    let (from, to) = (data.clone(), out.clone());
    let summary = tokio::task::spawn_blocking(move || {
        backup::backup(&from, &to, &options(), &mut AfterSnapshot { plans: 0, action: Some(action) })
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!((summary.sessions, summary.logs_copied, summary.vanished), (4, 2, 2), "{summary:?}");

    let report = restore(&out, &restored).await.unwrap();
    assert_eq!(report.vanished_removed, 2);
    let restored_service = open(&restored).await;
    assert_eq!(check_events(&restored_service, "a").await, 8, "the log's later events are kept");
    assert_eq!(check_events(&restored_service, "d").await, 3);
    for gone in ["b", "c", "e"] {
        let error = restored_service.get(&admin(), &sid(gone)).await.unwrap_err();
        assert_eq!(error.code(), "not_found", "{gone}");
    }
    let every = berth_service::ListRequest { include_blank: true, ..Default::default() };
    let listed = restored_service.list(&admin(), &every).await.unwrap();
    let ids: Vec<_> = listed.items.iter().map(|record| record.header.id.to_string()).collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    audit_intact(&restored_service).await;
    let audit = restored_service.audit_log(&admin(), 0, 1000).await.unwrap();
    let completed: Vec<_> = audit.iter().filter(|entry| entry.draft.actor == "system:restore").collect();
    let actors: Vec<_> = audit.iter().map(|entry| (&entry.draft.actor, &entry.draft.action)).collect();
    assert_eq!(completed.len(), 2, "each deletion completed by the restore is audited: {actors:?}");
    restored_service.shutdown().await.unwrap();
    service.shutdown().await.unwrap();
}

/// A log copied while an append was being written ends inside that record. Restore
/// truncates it to its last complete record (without which `fsck` would find a torn
/// tail), and the restored session accepts appends at the right seq.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_ending_inside_an_append_is_truncated_to_its_last_complete_record() {
    let dir = tempfile::tempdir().unwrap();
    let (data, out, restored) = (dir.path().join("data"), dir.path().join("backup"), dir.path().join("restored"));
    let service = open(&data).await;
    create(&service, "a").await;
    append(&service, "a", 0, 3).await;
    service.shutdown().await.unwrap();
    // What a copy taken during an append's write sees: the record's first bytes.
    let log = data.join("tenants/acme/sessions/a/session.jsonl");
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.extend_from_slice(b"{\"seq\":3,\"type\":\"note/x\",\"ti");
    std::fs::write(&log, &bytes).unwrap();

    take(&data, &out, options()).await;
    let report = restore(&out, &restored).await.unwrap();
    assert_eq!((report.logs_truncated, report.bytes_truncated), (1, 28));
    assert!(berth_jsonl::fsck::check_root(&restored).unwrap().iter().all(|report| report.status.is_ok()));
    let restored_service = open(&restored).await;
    assert_eq!(check_events(&restored_service, "a").await, 3);
    append(&restored_service, "a", 3, 1).await;
    assert_eq!(check_events(&restored_service, "a").await, 4);
    restored_service.shutdown().await.unwrap();
}

/// Every file under `dir`, but SQLite's transient WAL and shared-memory files.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else if !name.ends_with("-wal") && !name.ends_with("-shm") {
            found.push(path);
        }
    }
    found.sort();
    found
}

fn logs_in(dir: &Path) -> Vec<String> {
    files_under(dir)
        .into_iter()
        .filter(|path| path.file_name().is_some_and(|name| name == "session.jsonl"))
        .map(|path| path.parent().unwrap().file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// A full backup, then two incremental ones each after one session grew: each copies
/// the catalog and only the log that grew; restoring the last one (from a chain moved
/// elsewhere as a whole) gives every session its latest events; without an earlier link
/// of the chain the restore is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_backups_copy_the_logs_that_grew_and_a_chain_restores_to_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let chain = dir.path().join("chain");
    std::fs::create_dir(&chain).unwrap();
    let service = open(&data).await;
    for id in ["a", "b", "c"] {
        create(&service, id).await;
        append(&service, id, 0, 2).await;
    }
    service.shutdown().await.unwrap();
    let full = take(&data, &chain.join("full"), options()).await;
    assert_eq!(full.logs_copied, 3);

    append(&service, "a", 2, 3).await;
    service.shutdown().await.unwrap();
    let mut since = options();
    since.since = Some(chain.join("full"));
    let first = take(&data, &chain.join("inc1"), since).await;
    assert_eq!((first.logs_copied, first.logs_unchanged), (1, 2), "{first:?}");
    assert_eq!(logs_in(&chain.join("inc1")), vec!["a"]);

    append(&service, "b", 2, 4).await;
    service.shutdown().await.unwrap();
    let mut since = options();
    since.since = Some(chain.join("inc1"));
    let second = take(&data, &chain.join("inc2"), since).await;
    assert_eq!((second.logs_copied, second.logs_unchanged), (1, 2), "{second:?}");
    assert_eq!(logs_in(&chain.join("inc2")), vec!["b"]);

    let moved = dir.path().join("moved");
    std::fs::rename(&chain, &moved).unwrap();
    let restored = dir.path().join("restored");
    let report = restore(&moved.join("inc2"), &restored).await.unwrap();
    assert_eq!(report.chain, vec![second.id.clone(), first.id.clone(), full.id.clone()]);
    let restored_service = open(&restored).await;
    assert_eq!(check_events(&restored_service, "a").await, 5);
    assert_eq!(check_events(&restored_service, "b").await, 6);
    assert_eq!(check_events(&restored_service, "c").await, 2);
    audit_intact(&restored_service).await;
    restored_service.shutdown().await.unwrap();

    std::fs::remove_dir_all(moved.join("full")).unwrap();
    let error = restore(&moved.join("inc2"), &dir.path().join("again")).await.unwrap_err();
    assert_eq!(error.code(), "invalid", "{error}");
    assert!(error.to_string().contains(&full.id), "{error}");
    assert!(!dir.path().join("again").exists());
}

/// A backup of another store cannot extend a chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_backup_of_another_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    for data in [&one, &two] {
        let service = open(data).await;
        create(&service, "a").await;
        service.shutdown().await.unwrap();
    }
    take(&one, &dir.path().join("b1"), options()).await;
    let mut since = options();
    since.since = Some(dir.path().join("b1"));
    let (data, to) = (two.clone(), dir.path().join("b2"));
    let error = tokio::task::spawn_blocking(move || backup::backup(&data, &to, &since, &mut NoProgress))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(error.code(), "invalid", "{error}");
    assert!(error.to_string().contains("another store"), "{error}");
}

async fn small_backup(dir: &Path) -> (PathBuf, PathBuf) {
    let data = dir.join("data");
    let service = open(&data).await;
    create(&service, "a").await;
    append(&service, "a", 0, 3).await;
    service.shutdown().await.unwrap();
    let out = dir.join("backup");
    take(&data, &out, options()).await;
    (data, out)
}

/// Restore refuses, with typed errors and without creating its target: a directory
/// without a manifest (an interrupted backup), a log copy with a flipped byte, a
/// manifest whose paths leave the backup, and one of a newer format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_or_damaged_backups_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_, out) = small_backup(dir.path()).await;
    let target = dir.path().join("target");
    let manifest_path = out.join(MANIFEST_FILE);
    let manifest = std::fs::read_to_string(&manifest_path).unwrap();

    std::fs::rename(&manifest_path, dir.path().join("aside.json")).unwrap();
    let error = restore(&out, &target).await.unwrap_err();
    assert_eq!(error.code(), "invalid", "{error}");
    assert!(error.to_string().contains("did not finish"), "{error}");
    std::fs::write(&manifest_path, &manifest).unwrap();

    let log = out.join("tenants/acme/sessions/a/session.jsonl");
    let original = std::fs::read(&log).unwrap();
    let mut flipped = original.clone();
    flipped[original.len() - 5] ^= 1;
    std::fs::write(&log, &flipped).unwrap();
    let error = restore(&out, &target).await.unwrap_err();
    assert_eq!(error.code(), "corrupt", "{error}");
    assert!(error.to_string().contains("SHA-256"), "{error}");
    std::fs::write(&log, &original).unwrap();

    let escaping = manifest.replace("tenants/acme/sessions/a/session.jsonl", "../../escape/session.jsonl");
    std::fs::write(&manifest_path, escaping).unwrap();
    let error = restore(&out, &target).await.unwrap_err();
    assert_eq!(error.code(), "corrupt", "{error}");

    let newer = manifest.replace("\"version\": 1", "\"version\": 99");
    std::fs::write(&manifest_path, newer).unwrap();
    let error = restore(&out, &target).await.unwrap_err();
    assert_eq!(error.code(), "format_unsupported", "{error}");

    std::fs::write(&manifest_path, &manifest).unwrap();
    assert!(!target.exists(), "no refused restore created its target");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    assert!(leftovers.iter().all(|name| !name.to_string_lossy().contains("restoring")), "{leftovers:?}");
    restore(&out, &target).await.unwrap();
}

/// A non-empty target is refused without `force`; with it, the old contents are moved
/// aside (never deleted) and the restore takes the target's place. An empty directory
/// is restored into as is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_refuses_a_non_empty_target_unless_forced_and_then_moves_it_aside() {
    let dir = tempfile::tempdir().unwrap();
    let (data, out) = small_backup(dir.path()).await;
    let error = restore(&out, &data).await.unwrap_err();
    assert_eq!(error.code(), "already_exists", "{error}");
    let before = files_under(&data);

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    restore(&out, &empty).await.unwrap();
    assert!(empty.join(berth_assemble::CATALOG_FILE).is_file());

    let forced = backup::restore(&out, &data, &restore_options(true), &mut NoProgress).await.unwrap();
    let aside = forced.moved_aside.expect("moved aside");
    let moved: Vec<_> = files_under(&aside).iter().map(|path| path.strip_prefix(&aside).unwrap().to_owned()).collect();
    let original: Vec<_> = before.iter().map(|path| path.strip_prefix(&data).unwrap().to_owned()).collect();
    assert_eq!(moved, original, "the old contents are kept, whole");
    let service = open(&data).await;
    assert_eq!(check_events(&service, "a").await, 3);
    service.shutdown().await.unwrap();
}

/// A backup refuses a non-empty directory, one inside the data directory, a directory
/// that is not a data directory, and a PostgreSQL store — which it sends to pg_dump.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_refuses_bad_targets_and_postgres_stores() {
    let dir = tempfile::tempdir().unwrap();
    let (data, out) = small_backup(dir.path()).await;
    let refuse = |from: PathBuf, to: PathBuf| async move {
        tokio::task::spawn_blocking(move || backup::backup(&from, &to, &options(), &mut NoProgress))
            .await
            .unwrap()
            .unwrap_err()
    };
    assert_eq!(refuse(data.clone(), out.clone()).await.code(), "already_exists");
    assert_eq!(refuse(data.clone(), data.join("inside")).await.code(), "invalid");
    assert_eq!(refuse(dir.path().join("nothing-here"), dir.path().join("x")).await.code(), "io");
    std::fs::create_dir(dir.path().join("plain")).unwrap();
    assert_eq!(refuse(dir.path().join("plain"), dir.path().join("y")).await.code(), "invalid");
    let postgres = StoreUrl::parse("postgres://localhost/berth").unwrap();
    let error = backup::backup_store(&postgres, &dir.path().join("z"), &options(), &mut NoProgress).unwrap_err();
    assert_eq!(error.code(), "invalid");
    assert!(error.to_string().contains("pg_dump"), "{error}");
    assert!(!dir.path().join("z").exists());
}

/// The server's key file beside the catalog is copied (through SQLite's backup API)
/// and restored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_sqlite_files_are_copied_and_restored() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let service = open(&data).await;
    create(&service, "a").await;
    service.shutdown().await.unwrap();
    let keys = sqlite_file_with_token(&data.join("keys.sqlite"));
    let mut with_keys = options();
    with_keys.extra_files = vec!["keys.sqlite".to_owned()];
    let out = dir.path().join("backup");
    take(&data, &out, with_keys).await;
    let restored = dir.path().join("restored");
    restore(&out, &restored).await.unwrap();
    assert_eq!(token_of(&restored.join("keys.sqlite")), keys);
}

/// Any SQLite file will do as the key file: a second catalog stands in for it here
/// (this crate does not link SQLite itself), and its random token tells it apart.
fn sqlite_file_with_token(path: &Path) -> String {
    drop(berth_sqlite::SqliteCatalog::open(path).unwrap());
    token_of(path)
}

fn token_of(path: &Path) -> String {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.sqlite");
    let snapshot = berth_sqlite::snapshot::snapshot_catalog(path, &copy, 64, &mut |_, _| {}).unwrap();
    snapshot.store_token.unwrap()
}

/// A session deleted and created again under its id between two backups, its new log
/// as long as the old one, is copied again by the incremental backup (its header
/// differs), and the restore holds the new log, byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_backup_copies_a_log_whose_session_was_created_again() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let service = open(&data).await;
    create(&service, "a").await;
    append(&service, "a", 0, 2).await;
    service.shutdown().await.unwrap();
    let log = data.join("tenants/acme/sessions/a/session.jsonl");
    let old = std::fs::read(&log).unwrap();
    take(&data, &dir.path().join("full"), options()).await;

    // Created again until the new log has the old one's length (its header's creation
    // time differs; its digits almost always have the same count).
    let mut new = Vec::new();
    for _ in 0..20 {
        service.delete(&admin(), &sid("a"), None).await.unwrap();
        create(&service, "a").await;
        append(&service, "a", 0, 2).await;
        service.shutdown().await.unwrap();
        new = std::fs::read(&log).unwrap();
        if new.len() == old.len() && new != old {
            break;
        }
    }
    assert_eq!(new.len(), old.len(), "a log of the same length");
    let mut since = options();
    since.since = Some(dir.path().join("full"));
    let incremental = take(&data, &dir.path().join("inc"), since).await;
    assert_eq!(incremental.logs_copied, 1, "{incremental:?}");
    let restored = dir.path().join("restored");
    restore(&dir.path().join("inc"), &restored).await.unwrap();
    assert_eq!(std::fs::read(restored.join("tenants/acme/sessions/a/session.jsonl")).unwrap(), new);
}

/// The manifest is an on-disk format: its bytes are pinned by a golden file
/// (`tests/golden/manifest.json`; `BERTH_BLESS=1` rewrites it), and what is written reads
/// back as the same manifest.
#[test]
fn the_manifest_format_is_pinned() {
    use berth_assemble::backup::manifest::*;
    let acme = TenantId::parse("acme").unwrap();
    let manifest = Manifest {
        format: MANIFEST_FORMAT.to_owned(),
        version: MANIFEST_VERSION,
        id: "01940000-0000-7000-8000-000000000002".into(),
        kind: BackupKind::Incremental,
        previous: Some(PreviousBackup { id: "01940000-0000-7000-8000-000000000001".into(), dir: "../monday".into() }),
        store: Some("fd77e564b314bd8e906c7d4b243bbd5a".into()),
        berth_version: "0.1.0".into(),
        started_at: 1_767_225_600_000,
        snapshot_at: 1_767_225_600_003,
        finished_at: 1_767_225_601_250,
        catalog: CatalogCopy {
            file: "catalog.sqlite".into(),
            bytes: 159_744,
            sha256: "4c".repeat(32),
            schema_version: 12,
            sessions: 2,
            position: vec![AuditPosition { tenant: acme.clone(), seq: 7, hash: "1a".repeat(32) }],
        },
        files: vec![FileCopy { file: "keys.sqlite".into(), bytes: 20_480, sha256: "9e".repeat(32) }],
        logs: vec![LogCopy {
            tenant: acme.clone(),
            session: sid("chat-1"),
            file: log_file(&berth_core::SessionKey::new(acme.clone(), sid("chat-1"))),
            bytes: 459,
            sha256: "b0".repeat(32),
            committed_bytes: 431,
            events: 2,
            catalog_events: 2,
            header_bytes: 253,
            header_sha256: "3e".repeat(32),
            epoch: Some(FileCopy {
                file: epoch_file(&berth_core::SessionKey::new(acme.clone(), sid("chat-1"))),
                bytes: 45,
                sha256: "ea".repeat(32),
            }),
            stored_in: Some("01940000-0000-7000-8000-000000000001".into()),
        }],
        vanished: vec![SessionName { tenant: acme, session: sid("chat-2") }],
    };
    let dir = tempfile::tempdir().unwrap();
    manifest.write(dir.path()).unwrap();
    let bytes = std::fs::read(dir.path().join(MANIFEST_FILE)).unwrap();
    let golden = berth_golden::golden_path(env!("CARGO_MANIFEST_DIR"), "manifest.json");
    berth_golden::assert_golden(&golden, "the backup manifest", &bytes);
    assert_eq!(Manifest::read(dir.path()).unwrap(), manifest);
}

/// A preallocated log (log format version 2) with the zero tail a killed writer leaves:
/// the backup copies its data only, so nothing is truncated at restore and an
/// incremental backup finds the log unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preallocated_logs_zero_tail_is_left_out_of_the_backup() {
    let dir = tempfile::tempdir().unwrap();
    let (data, chain, restored) = (dir.path().join("data"), dir.path().join("chain"), dir.path().join("restored"));
    std::fs::create_dir(&chain).unwrap();
    let url = StoreUrl::Embedded(data.clone());
    let jsonl = berth_jsonl::JsonlOptions { preallocate: true, ..berth_jsonl::JsonlOptions::default() };
    let options_with_prealloc = AssembleOptions { jsonl, ..AssembleOptions::default() };
    let service =
        Arc::new(open_service_with(&url, options_with_prealloc, berth_assemble::system_clock()).await.unwrap());
    create(&service, "a").await;
    append(&service, "a", 0, 3).await;
    service.shutdown().await.unwrap();
    let log = data.join("tenants/acme/sessions/a/session.jsonl");
    let written = std::fs::read(&log).unwrap();
    assert!(written.starts_with(b"{\"berth\":\"session\",\"version\":2,"), "a preallocated log");
    let mut with_tail = written.clone();
    with_tail.resize(written.len() + 200_000, 0);
    std::fs::write(&log, &with_tail).unwrap();

    let full = take(&data, &chain.join("full"), options()).await;
    assert_eq!(full.logs_copied, 1);
    let copy = std::fs::read(chain.join("full/tenants/acme/sessions/a/session.jsonl")).unwrap();
    assert_eq!(copy, written, "the copy holds the data, not the tail");
    let mut since = options();
    since.since = Some(chain.join("full"));
    let next = take(&data, &chain.join("inc1"), since).await;
    assert_eq!((next.logs_copied, next.logs_unchanged), (0, 1), "{next:?}");
    let report = restore(&chain.join("inc1"), &restored).await.unwrap();
    assert_eq!((report.logs_truncated, report.bytes_truncated), (0, 0));
    assert!(berth_jsonl::fsck::check_root(&restored).unwrap().iter().all(|report| report.status.is_ok()));
    let restored_service = open(&restored).await;
    assert_eq!(check_events(&restored_service, "a").await, 3);
    restored_service.shutdown().await.unwrap();
}
