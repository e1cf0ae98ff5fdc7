//! Run clauses (R-S4, R-S5, R-S7): concurrency policy, interrupt, abandoned-run
//! takeover on the FakeClock, symmetric detach/heartbeat checks, who may append.

use super::fixtures::*;
use super::ServiceBackend;
use berth_catalog::RunStatus;
use berth_core::lifecycle::Status;
use berth_core::limits::OUTCOME_BYTES_MAX;
use berth_core::{Clock, Error, Revision};
use berth_service::{AppendRequest, AttachRequest, OnBusy, SessionService};

const RUN_LEASE_TTL_MS: u64 = 1_000;

fn attached_runs(record: &berth_catalog::SessionRecord) -> Vec<String> {
    record.runs.iter().map(|run| run.run_id.to_string()).collect()
}

async fn runs_of(service: &SessionService, id: &str) -> Vec<String> {
    attached_runs(&stored(service, TENANT_A, id).await.expect("stored"))
}

/// R-S5 serial: a second attach with `on_busy = reject` is `Busy` and changes nothing;
/// the first run keeps its attachment.
pub async fn serial_second_attach_is_busy_with_reject(b: &dyn ServiceBackend) {
    let service = b.service();
    create(&service, &owner(), "serial", serial(DAY_MS, RUN_LEASE_TTL_MS)).await;
    let first = attach(&service, &owner(), "serial", "r1").await;
    assert_eq!(first.run.status, RunStatus::Attached);
    assert_eq!(first.run.attached_by, user(OWNER));
    assert_eq!(first.run.lease_until, b.clock().now().plus_ms(RUN_LEASE_TTL_MS));
    assert!(first.displaced.is_empty());
    let before = stored(&service, TENANT_A, "serial").await.unwrap();
    for principal in [owner(), service_principal(TENANT_A), admin(TENANT_A)] {
        let busy = service.attach(&principal, &sid("serial"), attach_request("r2", OnBusy::Reject)).await;
        match busy {
            Err(Error::Busy { id, .. }) => assert_eq!(id, "serial"),
            other => panic!("expected Busy for {principal:?}, got {other:?}"),
        }
    }
    assert_eq!(stored(&service, TENANT_A, "serial").await.unwrap(), before, "a refused attach changes nothing");
    let twice = service.attach(&owner(), &sid("serial"), attach_request("r1", OnBusy::Interrupt)).await;
    assert_eq!(label(&twice), "already_exists", "a run id attaches once");
    assert_eq!(runs_of(&service, "serial").await, ["r1"]);
}

/// R-S5 `on_busy = interrupt`: the current run is detached as `interrupted` first
/// (returned in `displaced`, audited), then the new run attaches. The interrupted run
/// can no longer heartbeat, append or detach.
pub async fn interrupt_detaches_the_current_run_as_interrupted(b: &dyn ServiceBackend) {
    let service = b.service();
    create(&service, &owner(), "interrupted", serial(DAY_MS, RUN_LEASE_TTL_MS)).await;
    attach(&service, &owner(), "interrupted", "r1").await;
    let takeover = service
        .attach(&owner(), &sid("interrupted"), attach_request("r2", OnBusy::Interrupt))
        .await
        .expect("interrupting attach");
    assert_eq!(takeover.displaced.len(), 1);
    assert_eq!(takeover.displaced[0].run_id, run("r1"));
    assert_eq!(takeover.displaced[0].status, RunStatus::Interrupted);
    assert_eq!(runs_of(&service, "interrupted").await, ["r2"]);
    let detaches = audited(&service, TENANT_A, "detach").await;
    assert_eq!(detaches.len(), 1, "{detaches:?}");
    assert_eq!(detaches[0].draft.details["run"], "r1");
    assert_eq!(detaches[0].draft.details["status"], "interrupted");
    let attaches = audited(&service, TENANT_A, "attach").await;
    assert!(attaches[1].seq > detaches[0].seq, "detached first, then attached");

    let session = sid("interrupted");
    assert_eq!(label(&service.heartbeat(&owner(), &session, &run("r1")).await), "run_not_attached");
    assert_eq!(label(&service.detach(&owner(), &session, &run("r1"), "done", None).await), "run_not_attached");
    let request = AppendRequest {
        memory: Vec::new(),
        run: Some(run("r1")),
        expected_seq: None,
        events: vec![user_message("late")],
        idempotency_key: None,
    };
    assert_eq!(label(&service.append(&owner(), &session, request).await), "run_not_attached");
    assert_eq!(stored_log(&service, TENANT_A, "interrupted").await, Some(Vec::new()));
}

/// R-S5 parallel: up to `runs_max` runs attach; one more is `Busy` (or interrupts the
/// oldest). Every event carries its run; a run-less append is refused; the log keeps
/// one total order of the interleaved runs.
pub async fn parallel_runs_up_to_runs_max_and_events_carry_their_run(b: &dyn ServiceBackend) {
    let service = b.service();
    create(&service, &owner(), "parallel", parallel(3, DAY_MS, DAY_MS)).await;
    for run_id in ["ra", "rb", "rc"] {
        attach(&service, &owner(), "parallel", run_id).await;
    }
    let busy = service.attach(&owner(), &sid("parallel"), attach_request("rd", OnBusy::Reject)).await;
    assert_eq!(label(&busy), "busy");
    for (index, run_id) in ["ra", "rb", "rc", "rb", "ra"].into_iter().enumerate() {
        let outcome = append(&service, &owner(), "parallel", Some(run_id), vec![user_message(run_id)]).await;
        assert_eq!(outcome.first_seq, index as u64);
    }
    let request = AppendRequest {
        memory: Vec::new(),
        run: None,
        expected_seq: None,
        events: vec![user_message("nobody")],
        idempotency_key: None,
    };
    let runless = service.append(&service_principal(TENANT_A), &sid("parallel"), request).await;
    assert_eq!(label(&runless), "invalid", "a parallel session's events carry their run");
    let log = stored_log(&service, TENANT_A, "parallel").await.unwrap();
    let order: Vec<String> = log.iter().map(|event| event.run.as_ref().unwrap().to_string()).collect();
    assert_eq!(order, ["ra", "rb", "rc", "rb", "ra"]);

    let takeover = service
        .attach(&owner(), &sid("parallel"), attach_request("rd", OnBusy::Interrupt))
        .await
        .expect("interrupt the oldest");
    assert_eq!(takeover.displaced.iter().map(|r| r.run_id.to_string()).collect::<Vec<_>>(), ["ra"]);
    assert_eq!(runs_of(&service, "parallel").await, ["rb", "rc", "rd"]);
}

/// R-S4: a run whose attachment lease lapsed (FakeClock) is detached as `abandoned` by
/// the next attach, which then succeeds; audited as `abandon`. At exactly
/// `lease_until` the run is still live.
pub async fn lapsed_run_is_abandoned_by_the_next_attach(b: &dyn ServiceBackend) {
    let service = b.service();
    let clock = b.clock();
    create(&service, &owner(), "takeover", serial(DAY_MS, RUN_LEASE_TTL_MS)).await;
    let first = attach(&service, &owner(), "takeover", "r1").await;
    clock.set_ms(first.run.lease_until.0);
    let busy = service.attach(&owner(), &sid("takeover"), attach_request("r2", OnBusy::Reject)).await;
    assert_eq!(label(&busy), "busy", "at lease_until the run is still live");
    clock.advance_ms(1);
    let takeover = service
        .attach(&user_principal(TENANT_A, OWNER, None), &sid("takeover"), attach_request("r2", OnBusy::Reject))
        .await
        .expect("attach after the run lease lapsed");
    assert_eq!(takeover.displaced.len(), 1);
    assert_eq!(takeover.displaced[0].run_id, run("r1"));
    assert_eq!(takeover.displaced[0].status, RunStatus::Abandoned);
    assert_eq!(runs_of(&service, "takeover").await, ["r2"]);
    let abandons = audited(&service, TENANT_A, "abandon").await;
    assert_eq!(abandons.len(), 1, "{abandons:?}");
    assert_eq!(abandons[0].draft.details["run"], "r1");
    assert_eq!(abandons[0].draft.session, Some(sid("takeover")));
    assert_eq!(label(&service.heartbeat(&owner(), &sid("takeover"), &run("r1")).await), "run_not_attached");
    assert_status(&service, TENANT_A, "takeover", Status::Active).await;
}

/// R-S4: heartbeat extends the run's lease (and the session's), so a heartbeating run
/// is not abandoned.
pub async fn heartbeat_extends_the_run_lease(b: &dyn ServiceBackend) {
    let service = b.service();
    let clock = b.clock();
    create(&service, &owner(), "beating", serial(DAY_MS, RUN_LEASE_TTL_MS)).await;
    attach(&service, &owner(), "beating", "r1").await;
    for _ in 0..5 {
        clock.advance_ms(800);
        let run_record = service.heartbeat(&owner(), &sid("beating"), &run("r1")).await.expect("heartbeat");
        assert_eq!(run_record.lease_until, clock.now().plus_ms(RUN_LEASE_TTL_MS));
        assert_eq!(stored(&service, TENANT_A, "beating").await.unwrap().lease_until, clock.now().plus_ms(DAY_MS));
    }
    clock.advance_ms(800);
    let busy = service.attach(&owner(), &sid("beating"), attach_request("r2", OnBusy::Reject)).await;
    assert_eq!(label(&busy), "busy", "4 s after attach, but 0.8 s after the last heartbeat");
    assert!(audited(&service, TENANT_A, "abandon").await.is_empty());
}

/// R-C6: a detach outcome goes verbatim into the audit log, which outlives the session,
/// so it is bounded like the other free text: at most `OUTCOME_BYTES_MAX` bytes
/// (`LimitExceeded`), not empty and without control characters (`Invalid`: no forged
/// lines or terminal escapes). A refused detach leaves the run attached and audits no
/// detach; an outcome of exactly the limit (multi-byte characters counted in bytes) is
/// kept as given.
pub async fn detach_outcome_is_bounded_and_has_no_control_characters(b: &dyn ServiceBackend) {
    let service = b.service();
    create(&service, &owner(), "outcome", serial(DAY_MS, DAY_MS)).await;
    attach(&service, &owner(), "outcome", "r1").await;
    let (session, run_id) = (sid("outcome"), run("r1"));
    let before = stored(&service, TENANT_A, "outcome").await.unwrap();
    let over = OUTCOME_BYTES_MAX + 1;
    let two_mib = 2 * 1024 * 1024;
    for (outcome, bytes) in [("x".repeat(over), over), ("x".repeat(two_mib), two_mib)] {
        let refused = service.detach(&owner(), &session, &run_id, &outcome, None).await;
        let expected = Error::LimitExceeded {
            what: berth_core::limits::Limit::OutcomeBytes,
            limit: OUTCOME_BYTES_MAX as u64,
            actual: bytes as u64,
        };
        assert_eq!(refused.err(), Some(expected));
    }
    for outcome in ["", "done\n{\"forged\": true}", "done\r", "\u{1b}[31mred", "a\u{0}b", "tab\there"] {
        let refused = service.detach(&owner(), &session, &run_id, outcome, None).await;
        assert!(matches!(refused, Err(Error::Invalid { what: "outcome", .. })), "{outcome:?}: {refused:?}");
    }
    assert_eq!(stored(&service, TENANT_A, "outcome").await.unwrap(), before, "refusals change nothing");
    assert!(audited(&service, TENANT_A, "detach").await.is_empty());
    let at_limit = "\u{e9}".repeat(OUTCOME_BYTES_MAX / 2);
    assert_eq!(at_limit.len(), OUTCOME_BYTES_MAX);
    let record = service.detach(&owner(), &session, &run_id, &at_limit, None).await.expect("an outcome at the limit");
    assert!(record.runs.is_empty());
    let audit = audited(&service, TENANT_A, "detach").await;
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].draft.details["outcome"], at_limit.as_str());
}

/// R-S4 symmetric checks: detach (and heartbeat) need the same run, attached by the
/// same user (or a service/admin principal), in the caller's scope, and a current
/// `expected_revision`. Each refusal leaves the run attached and the record unchanged.
pub async fn detach_and_heartbeat_checks_are_symmetric(b: &dyn ServiceBackend) {
    let service = b.service();
    create(&service, &owner(), "symmetric", parallel(4, DAY_MS, DAY_MS)).await;
    let mine = attach(&service, &owner(), "symmetric", "r-alice").await;
    let theirs = attach(&service, &service_principal(TENANT_A), "symmetric", "r-svc").await;
    assert_eq!(theirs.run.attached_by, user("svc"));
    let session = sid("symmetric");
    let before = stored(&service, TENANT_A, "symmetric").await.unwrap();
    let not_found_run = |run_id: &str| Error::RunNotAttached { id: "symmetric".to_owned(), run: run_id.to_owned() };
    let cases = [
        (owner(), "r-nobody", not_found_run("r-nobody")),
        (owner(), "r-svc", not_found_run("r-svc")),
        (user_principal(TENANT_A, OTHER_USER, Some(PROJECT)), "r-alice", Error::session_not_found("symmetric")),
        (user_principal(TENANT_A, OWNER, Some(OTHER_PROJECT)), "r-alice", Error::session_not_found("symmetric")),
        (user_principal(TENANT_B, OWNER, Some(PROJECT)), "r-alice", Error::session_not_found("symmetric")),
    ];
    for (principal, run_id, expected) in cases {
        let detached = service.detach(&principal, &session, &run(run_id), "done", None).await;
        assert_eq!(detached.err(), Some(expected.clone()), "detach {run_id} by {principal:?}");
        let beat = service.heartbeat(&principal, &session, &run(run_id)).await;
        assert_eq!(beat.err(), Some(expected), "heartbeat {run_id} by {principal:?}");
    }
    assert_eq!(stored(&service, TENANT_A, "symmetric").await.unwrap(), before);

    let stale = Revision(mine.revision.0);
    let conflict = service.detach(&owner(), &session, &run("r-alice"), "done", Some(stale)).await;
    assert_eq!(conflict.err(), Some(Error::RevisionConflict { expected: stale.0, actual: before.revision.0 }));
    assert_eq!(stored(&service, TENANT_A, "symmetric").await.unwrap(), before);

    let detached = service
        .detach(&owner(), &session, &run("r-alice"), "completed", Some(before.revision))
        .await
        .expect("detach with the current revision");
    assert_eq!(detached.revision.0, before.revision.0 + 1);
    assert_eq!(attached_runs(&detached), ["r-svc"]);
    let record = service
        .detach(&admin(TENANT_A), &session, &run("r-svc"), "completed", None)
        .await
        .expect("an admin detaches anyone's run");
    assert!(record.runs.is_empty());
    assert_eq!(record.status, Status::Idle);
    let audit: Vec<_> =
        audited(&service, TENANT_A, "detach").await.into_iter().filter(|entry| entry.draft.outcome == "ok").collect();
    assert_eq!(audit.len(), 2);
    assert_eq!(audit[0].draft.details["outcome"], "completed");
    assert_eq!(audit[1].draft.actor, "admin:root");

    let attach_stale = service
        .attach(
            &owner(),
            &session,
            AttachRequest { run_id: Some(run("r3")), expected_revision: Some(stale), on_busy: OnBusy::Reject },
        )
        .await;
    assert_eq!(label(&attach_stale), "revision_conflict", "attach checks expected_revision too");
}

/// R-S7: a `user` principal appends only through a run it attached; without a run it
/// is `Forbidden` (audited), with someone else's or an unattached run `NotFound(run)`;
/// `service` principals append without a run.
pub async fn append_from_a_user_needs_an_attached_run_of_theirs(b: &dyn ServiceBackend) {
    let service = b.service();
    create(&service, &owner(), "appending", serial(DAY_MS, DAY_MS)).await;
    let session = sid("appending");
    let request = |run_id: Option<&str>| AppendRequest {
        memory: Vec::new(),
        run: run_id.map(run),
        expected_seq: None,
        events: vec![user_message("x")],
        idempotency_key: None,
    };
    let forbidden = service.append(&owner(), &session, request(None)).await;
    assert_eq!(label(&forbidden), "forbidden");
    let denial = audit_entries(&service, TENANT_A).await.pop().unwrap();
    assert_eq!((denial.draft.action.as_str(), denial.draft.outcome.as_str()), ("append", "denied"));
    assert_eq!(label(&service.append(&owner(), &session, request(Some("r1"))).await), "run_not_attached");
    attach(&service, &service_principal(TENANT_A), "appending", "r-svc").await;
    assert_eq!(
        label(&service.append(&owner(), &session, request(Some("r-svc"))).await),
        "run_not_attached",
        "a run attached by another user"
    );
    assert_eq!(stored_log(&service, TENANT_A, "appending").await, Some(Vec::new()), "nothing stored");
    let by_service = service.append(&service_principal(TENANT_A), &session, request(None)).await.unwrap();
    assert_eq!((by_service.first_seq, by_service.next_seq), (0, 1));
    service.detach(&service_principal(TENANT_A), &session, &run("r-svc"), "done", None).await.unwrap();
    attach(&service, &owner(), "appending", "r1").await;
    let by_owner = service.append(&owner(), &session, request(Some("r1"))).await.unwrap();
    assert_eq!((by_owner.first_seq, by_owner.next_seq, by_owner.duplicate), (1, 2, false));
    let log = stored_log(&service, TENANT_A, "appending").await.unwrap();
    assert_eq!(log[0].run, None);
    assert_eq!(log[1].run, Some(run("r1")));
    assert_eq!(stored(&service, TENANT_A, "appending").await.unwrap().event_count, 2);
}
