//! Lifecycle clauses (R-C4, R-S3): every (state, operation) pair through the service,
//! expiry on access, and the admin reopen.

use super::fixtures::*;
use super::ServiceBackend;
use berth_core::lifecycle::Status;
use berth_core::{Clock, Error};
use berth_service::{AppendRequest, ClosePolicy, MetadataUpdate, OnBusy, SessionService};

const ACTIVITY_TTL_MS: u64 = 10_000;
const RUN_LEASE_TTL_MS: u64 = 60_000;

/// The states a session is driven into before each operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Created (with one event appended by a service principal), no run.
    Fresh,
    /// Owner's run `r1` attached (serial policy).
    WithRun,
    /// `r1` attached, then detached.
    Idle,
    Closed,
    /// The activity lease lapsed (the FakeClock moved past it); nobody looked yet.
    Expired,
    /// Closed, then reopened by an admin.
    Reopened,
}

const STATES: [State; 6] = [State::Fresh, State::WithRun, State::Idle, State::Closed, State::Expired, State::Reopened];

/// The operations, each performed by the owner unless its name says otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Get,
    Read,
    /// Append as the owner's run `r1`.
    AppendRun,
    /// Append as the tenant's service principal, without a run.
    AppendService,
    /// Attach a new run `r2` (`on_busy = reject`).
    Attach,
    /// Heartbeat `r1`.
    Heartbeat,
    /// Detach `r1`.
    Detach,
    /// Resume with a new run `r2` (`on_busy = reject`).
    Resume,
    UpdateMetadata,
    /// Close with `ClosePolicy::Refuse`.
    Close,
    Fork,
    Export,
    Delete,
    /// Reopen as the tenant's admin.
    Reopen,
}

/// `"<outcome> <status after>"` per state, in `STATES` order. The outcome is `ok`, an
/// error code (`run_not_attached` for a run that is not attached); the status is the stored one afterwards (`gone` once
/// deleted). Expired sessions read `expired` after any access: the access observes the
/// lapse first (R-S3).
#[rustfmt::skip]
const TABLE: [(Op, [&str; 6]); 14] = [
    //                       fresh                         with run                      idle                        closed              expired              reopened
    (Op::Get,             ["ok active",                  "ok active",                  "ok idle",                  "ok closed",        "ok expired",        "ok idle"]),
    (Op::Read,            ["ok active",                  "ok active",                  "ok idle",                  "ok closed",        "ok expired",        "ok idle"]),
    (Op::AppendRun,       ["run_not_attached active",      "ok active",                  "run_not_attached idle",      "terminal closed",  "terminal expired",  "run_not_attached idle"]),
    (Op::AppendService,   ["ok active",                  "ok active",                  "ok idle",                  "terminal closed",  "terminal expired",  "ok idle"]),
    (Op::Attach,          ["ok active",                  "busy active",                "ok active",                "terminal closed",  "terminal expired",  "ok active"]),
    (Op::Heartbeat,       ["run_not_attached active",      "ok active",                  "run_not_attached idle",      "terminal closed",  "terminal expired",  "run_not_attached idle"]),
    (Op::Detach,          ["run_not_attached active",      "ok idle",                    "run_not_attached idle",      "terminal closed",  "terminal expired",  "run_not_attached idle"]),
    (Op::Resume,          ["ok active",                  "busy active",                "ok active",                "terminal closed",  "terminal expired",  "ok active"]),
    (Op::UpdateMetadata,  ["ok active",                  "ok active",                  "ok idle",                  "ok closed",        "ok expired",        "ok idle"]),
    (Op::Close,           ["ok closed",                  "busy active",                "ok closed",                "terminal closed",  "terminal expired",  "ok closed"]),
    (Op::Fork,            ["ok active",                  "ok active",                  "ok idle",                  "ok closed",        "ok expired",        "ok idle"]),
    (Op::Export,          ["ok active",                  "ok active",                  "ok idle",                  "ok closed",        "ok expired",        "ok idle"]),
    (Op::Delete,          ["ok gone",                    "ok gone",                    "ok gone",                  "ok gone",          "ok gone",           "ok gone"]),
    (Op::Reopen,          ["invalid_transition active",  "invalid_transition active",  "invalid_transition idle",  "ok idle",          "ok idle",           "invalid_transition idle"]),
];

async fn enter(b: &dyn ServiceBackend, state: State, id: &str) {
    let service = b.service();
    create(&service, &owner(), id, serial(ACTIVITY_TTL_MS, RUN_LEASE_TTL_MS)).await;
    append(&service, &service_principal(TENANT_A), id, None, vec![user_message("hello")]).await;
    let session = sid(id);
    match state {
        State::Fresh => {}
        State::WithRun => {
            attach(&service, &owner(), id, "r1").await;
        }
        State::Idle => {
            attach(&service, &owner(), id, "r1").await;
            service.detach(&owner(), &session, &run("r1"), "completed", None).await.expect("detach r1");
        }
        State::Closed | State::Reopened => {
            service.close(&owner(), &session, ClosePolicy::Refuse, None).await.expect("close");
            if state == State::Reopened {
                service.reopen(&admin(TENANT_A), &session).await.expect("reopen");
            }
        }
        State::Expired => b.clock().advance_ms(ACTIVITY_TTL_MS + 1),
    }
}

async fn perform(service: &SessionService, op: Op, id: &str) -> Result<(), Error> {
    let session = sid(id);
    let owner = owner();
    match op {
        Op::Get => service.get(&owner, &session).await.map(drop),
        Op::Read => service.read(&owner, &session, 0, None).await.map(drop),
        Op::AppendRun | Op::AppendService => {
            let (principal, run_id) = match op {
                Op::AppendRun => (owner, Some(run("r1"))),
                _ => (service_principal(TENANT_A), None),
            };
            let request = AppendRequest {
                memory: Vec::new(),
                run: run_id,
                expected_seq: None,
                events: vec![user_message("more")],
                idempotency_key: None,
            };
            service.append(&principal, &session, request).await.map(drop)
        }
        Op::Attach => service.attach(&owner, &session, attach_request("r2", OnBusy::Reject)).await.map(drop),
        Op::Heartbeat => service.heartbeat(&owner, &session, &run("r1")).await.map(drop),
        Op::Detach => service.detach(&owner, &session, &run("r1"), "completed", None).await.map(drop),
        Op::Resume => service.resume(&owner, &session, attach_request("r2", OnBusy::Reject)).await.map(drop),
        Op::UpdateMetadata => {
            let update = MetadataUpdate { title: Some(Some("renamed".into())), ..MetadataUpdate::default() };
            service.update_metadata(&owner, &session, update).await.map(drop)
        }
        Op::Close => service.close(&owner, &session, ClosePolicy::Refuse, None).await.map(drop),
        Op::Fork => {
            let fork_id = sid(&format!("{id}.fork"));
            service.fork(&owner, &session, None, Some(fork_id)).await.map(drop)
        }
        Op::Export => service.export(&owner, &session).await.map(drop),
        Op::Delete => service.delete(&owner, &session, None).await,
        Op::Reopen => service.reopen(&admin(TENANT_A), &session).await.map(drop),
    }
}

/// R-C4 through the service: drives a fresh session into each state, performs each
/// operation once, and compares the outcome and the stored status afterwards with the
/// table. A refused operation leaves the record exactly as it was (an expired one only
/// gains the `expired` status the access observed).
pub async fn every_state_operation_pair(b: &dyn ServiceBackend) {
    let mut mismatches = Vec::new();
    let mut cells = 0;
    for (op, row) in TABLE {
        for (state, expected) in STATES.into_iter().zip(row) {
            let id = format!("lc-{state:?}-{op:?}").to_lowercase();
            enter(b, state, &id).await;
            let service = b.service();
            let before = stored(&service, TENANT_A, &id).await.expect("entered state");
            let result = perform(&service, op, &id).await;
            let after = stored(&service, TENANT_A, &id).await;
            let actual = format!("{} {}", label(&result), status_label(after.as_ref()));
            if actual != expected {
                mismatches.push(format!("{state:?} × {op:?}: expected `{expected}`, got `{actual}` ({result:?})"));
            }
            if result.is_err() {
                let mut unchanged = before.clone();
                if state == State::Expired {
                    unchanged.status = Status::Expired;
                    unchanged.status_changed_at = b.clock().now();
                    unchanged.revision = berth_core::Revision(before.revision.0 + 1);
                }
                if after.as_ref() != Some(&unchanged) {
                    mismatches
                        .push(format!("{state:?} × {op:?}: refused, yet the record changed: {before:?} → {after:?}"));
                }
            }
            cells += 1;
        }
    }
    assert_eq!(cells, 6 * 14);
    assert_no_mismatches(b.name(), "the lifecycle table", &mismatches);
}

/// R-S3: `now ≤ lease_until` is live; one millisecond later the next access (any, even
/// a read) marks the session expired, once, audited as `expire` by `system:lifecycle`,
/// and drops its runs. Nothing afterwards reactivates it; attach, heartbeat and append
/// extend the lease while it is live.
pub async fn lapsed_lease_expires_on_next_access_audited_and_stays_expired(b: &dyn ServiceBackend) {
    let service = b.service();
    let clock = b.clock();
    let owner = owner();
    let created_at = clock.now();
    let record = create(&service, &owner, "lapsing", serial(ACTIVITY_TTL_MS, RUN_LEASE_TTL_MS)).await;
    assert_eq!(record.lease_until, created_at.plus_ms(ACTIVITY_TTL_MS));
    let attachment = attach(&service, &owner, "lapsing", "r1").await;
    assert_eq!(attachment.session_lease_until, clock.now().plus_ms(ACTIVITY_TTL_MS));

    // Extension: 6 s later a heartbeat pushes the lease to now + TTL.
    clock.advance_ms(6_000);
    service.heartbeat(&owner, &sid("lapsing"), &run("r1")).await.expect("heartbeat");
    let lease_until = clock.now().plus_ms(ACTIVITY_TTL_MS);
    assert_eq!(stored(&service, TENANT_A, "lapsing").await.unwrap().lease_until, lease_until);
    clock.advance_ms(6_000);
    append(&service, &owner, "lapsing", Some("r1"), vec![user_message("still here")]).await;
    let lease_until = clock.now().plus_ms(ACTIVITY_TTL_MS);
    assert_eq!(stored(&service, TENANT_A, "lapsing").await.unwrap().lease_until, lease_until);

    // Exactly at lease_until it is still live.
    clock.set_ms(lease_until.0);
    let live = service.get(&owner, &sid("lapsing")).await.expect("get at lease_until");
    assert_eq!(live.status, Status::Active);
    assert!(audited(&service, TENANT_A, "expire").await.is_empty());

    // One millisecond later a read (not even a mutation) observes the lapse.
    clock.advance_ms(1);
    let revision = live.revision;
    service.read(&owner, &sid("lapsing"), 0, None).await.expect("read after lapse");
    let expired = stored(&service, TENANT_A, "lapsing").await.unwrap();
    assert_eq!(expired.status, Status::Expired);
    assert_eq!(expired.revision.0, revision.0 + 1);
    assert!(expired.runs.is_empty(), "an expired session keeps no runs");
    let expires = audited(&service, TENANT_A, "expire").await;
    assert_eq!(expires.len(), 1, "{expires:?}");
    assert_eq!(expires[0].draft.actor, "system:lifecycle");
    assert_eq!(expires[0].draft.session, Some(sid("lapsing")));
    assert_eq!(expires[0].draft.outcome, "ok");

    // Never reactivated by any access.
    let session = sid("lapsing");
    let terminal = |result: Result<(), Error>| assert_eq!(label(&result), "terminal");
    terminal(service.attach(&owner, &session, attach_request("r9", OnBusy::Interrupt)).await.map(drop));
    terminal(service.resume(&owner, &session, attach_request("r9", OnBusy::Interrupt)).await.map(drop));
    terminal(service.heartbeat(&owner, &session, &run("r1")).await.map(drop));
    terminal(service.close(&owner, &session, ClosePolicy::CancelRuns, None).await.map(drop));
    let request = AppendRequest {
        memory: Vec::new(),
        run: None,
        expected_seq: None,
        events: vec![user_message("x")],
        idempotency_key: None,
    };
    terminal(service.append(&service_principal(TENANT_A), &session, request).await.map(drop));
    clock.advance_ms(30 * DAY_MS);
    assert_eq!(service.get(&owner, &session).await.unwrap().status, Status::Expired);
    assert_eq!(stored(&service, TENANT_A, "lapsing").await.unwrap().revision, expired.revision);
    assert_eq!(audited(&service, TENANT_A, "expire").await.len(), 1, "expired exactly once");
}

/// R-C4: `reopen` is the one way out of a terminal state, for admins only (owner and
/// service are `Forbidden`, audited as denials); it makes the session `idle` with a
/// fresh activity lease and is audited. Reopening a live session is an invalid
/// transition.
pub async fn reopen_is_admin_only_audited_and_restarts_the_lease(b: &dyn ServiceBackend) {
    let service = b.service();
    let clock = b.clock();
    let session = sid("to-reopen");
    create(&service, &owner(), "to-reopen", serial(ACTIVITY_TTL_MS, RUN_LEASE_TTL_MS)).await;
    service.close(&owner(), &session, ClosePolicy::Refuse, None).await.expect("close");
    for principal in [owner(), service_principal(TENANT_A)] {
        let refused = service.reopen(&principal, &session).await;
        assert_eq!(label(&refused), "forbidden", "{principal:?}");
        let denial = audit_entries(&service, TENANT_A).await.pop().expect("a denial entry");
        assert_eq!(
            (denial.draft.action.as_str(), denial.draft.outcome.as_str(), denial.draft.actor),
            ("reopen", "denied", principal.actor())
        );
    }
    assert_status(&service, TENANT_A, "to-reopen", Status::Closed).await;

    clock.advance_ms(HOUR_MS);
    let reopened = service.reopen(&admin(TENANT_A), &session).await.expect("admin reopen");
    assert_eq!(reopened.status, Status::Idle);
    assert_eq!(reopened.lease_until, clock.now().plus_ms(ACTIVITY_TTL_MS));
    let entry = audited(&service, TENANT_A, "reopen").await;
    let entry = entry.last().expect("reopen audited");
    assert_eq!((entry.draft.actor.as_str(), entry.draft.outcome.as_str()), ("admin:root", "ok"));
    attach(&service, &owner(), "to-reopen", "r1").await;
    let again = service.reopen(&admin(TENANT_A), &session).await;
    assert_eq!(label(&again), "invalid_transition");

    // Reopened is live like any other session: it lapses again, and an expired session
    // reopens too.
    clock.advance_ms(ACTIVITY_TTL_MS + 1);
    assert_eq!(service.get(&owner(), &session).await.unwrap().status, Status::Expired);
    let reopened = service.reopen(&admin(TENANT_A), &session).await.expect("reopen expired");
    assert_eq!(reopened.status, Status::Idle);
    assert!(reopened.runs.is_empty());
}
