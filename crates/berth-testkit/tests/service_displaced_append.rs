//! A takeover and the displaced run's appends are ordered (one writer at a time, R-P3):
//! once an `attach` that displaces a run has returned, nothing of that run is stored
//! after it. An append checks its run under the session's append lock, and an attach
//! or detach changes the runs under the same lock, so an append that passed its check
//! is stored before the takeover, and one that had not is refused with
//! `run_not_attached`.
//!
//! The race is made deterministic with `FaultFs::hold_syncs`: the displaced run's first
//! append is stopped in its log sync (holding the append lock), a second one is queued
//! behind it, and only then does the takeover start.

use berth_core::Error;
use berth_jsonl::{JsonlBackend, JsonlOptions};
use berth_service::{AppendRequest, OnBusy, SessionService};
use berth_sqlite::{SqliteCatalog, CATALOG_FILE_NAME};
use berth_store::LogStore;
use berth_testkit::fault_fs::FaultFs;
use berth_testkit::service_conformance::fixtures::{attach, attach_request, create, owner, run, serial, sid};
use berth_testkit::service_conformance::fixtures::{user_message, DAY_MS};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn append_of(run_id: &str, text: &str) -> AppendRequest {
    AppendRequest {
        memory: Vec::new(),
        run: Some(run(run_id)),
        expected_seq: None,
        events: vec![user_message(text)],
        idempotency_key: None,
    }
}

/// Lets held syncs go when the test ends, passed or failed (a failed assertion must not
/// leave the store's threads waiting).
struct Release(FaultFs);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.hold_syncs(false);
    }
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_waits_for_the_displaced_runs_appends_and_nothing_of_it_lands_after() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let backend =
        JsonlBackend::open(dir.path().to_path_buf(), JsonlOptions { fs: fs.shared(), ..Default::default() }).unwrap();
    let catalog = SqliteCatalog::open(dir.path().join(CATALOG_FILE_NAME)).unwrap();
    let service = Arc::new(SessionService::new(
        LogStore::new(Arc::new(backend)),
        Arc::new(catalog),
        Arc::new(berth_core::SystemClock),
    ));
    let principal = owner();
    create(&service, &principal, "s", serial(DAY_MS, 60_000)).await;
    attach(&service, &principal, "s", "r1").await;
    service.append(&principal, &sid("s"), append_of("r1", "before")).await.unwrap();

    // r1's first append stops in its sync, holding the session's append lock.
    fs.hold_syncs(true);
    let _released = Release(fs.clone());
    let order = Arc::new(AtomicUsize::new(0));
    let spawn_append = |text: &'static str| {
        let (service, principal, order) = (service.clone(), principal.clone(), order.clone());
        tokio::spawn(async move {
            let outcome = service.append(&principal, &sid("s"), append_of("r1", text)).await;
            (outcome, order.fetch_add(1, Ordering::SeqCst))
        })
    };
    let first = spawn_append("in flight");
    until("the first append to reach its sync", || fs.held_syncs() == 1).await;
    // A second append of r1 queues behind it; then r2 takes over, interrupting r1.
    let second = spawn_append("queued");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let takeover = {
        let (service, principal, order) = (service.clone(), principal.clone(), order.clone());
        tokio::spawn(async move {
            let attached = service.attach(&principal, &sid("s"), attach_request("r2", OnBusy::Interrupt)).await;
            let log_end = service.read(&principal, &sid("s"), 0, None).await.map(|events| events.len());
            (attached, log_end, order.fetch_add(1, Ordering::SeqCst))
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!takeover.is_finished(), "the takeover returned while an append of the run it displaces was in flight");
    fs.hold_syncs(false);

    let (first, first_done) = first.await.unwrap();
    let (second, second_done) = second.await.unwrap();
    let (attached, log_end_at_takeover, takeover_done) = takeover.await.unwrap();
    attached.expect("r2 takes over");
    let log_end_at_takeover = log_end_at_takeover.unwrap();
    first.expect("the append in flight is stored (before the takeover)");
    assert!(first_done < takeover_done);
    match second {
        Ok(_) => assert!(second_done < takeover_done, "r1's queued append was stored after r2 took over"),
        Err(error) => assert!(matches!(error, Error::RunNotAttached { .. }), "{error}"),
    }

    // Nothing of r1 landed after the takeover, and r1 can no longer append.
    let refused = service.append(&principal, &sid("s"), append_of("r1", "after")).await.unwrap_err();
    assert!(matches!(refused, Error::RunNotAttached { .. }), "{refused}");
    let events = service.read(&principal, &sid("s"), 0, None).await.unwrap();
    assert_eq!(events.len(), log_end_at_takeover, "an event was stored after the takeover returned");
    assert!(events.iter().all(|event| event.run == Some(run("r1"))), "{events:?}");
}
