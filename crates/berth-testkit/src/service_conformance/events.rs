//! Event and terminal-operation clauses: idempotent append retries (R-S7), close with
//! attached runs and close as a terminal state (R-S9), delete (R-S9), fork (R-S8).

use super::fixtures::*;
use super::ServiceBackend;
use berth_core::lifecycle::Status;
use berth_core::{Error, ParentRef, Timestamp};
use berth_service::{AppendRequest, ClosePolicy, MetadataUpdate, NewEvent, OnBusy};
use berth_store::Access;
use serde_json::json;
use std::collections::BTreeSet;

fn at(expected_seq: u64, run_id: Option<&str>, events: Vec<NewEvent>) -> AppendRequest {
    AppendRequest {
        memory: Vec::new(),
        run: run_id.map(run),
        expected_seq: Some(expected_seq),
        events,
        idempotency_key: None,
    }
}

/// `read_before` answers alike whether this process keeps the session's write handle
/// (a few events are read through it while it is idle) or not (a read handle of its
/// own): after appends through the kept handle, every window of the newest events, and
/// windows further back, equal a fresh read handle's; and appends after such reads
/// still land (the handle was let go).
pub async fn read_before_through_a_kept_writer_equals_a_fresh_read(b: &dyn ServiceBackend) {
    let service = b.service();
    let principal = service_principal(TENANT_A);
    let id = sid("kept");
    create(&service, &principal, "kept", serial(DAY_MS, DAY_MS)).await;
    for round in 0..3u64 {
        let events = (0..5).map(|n| event("note/x", json!({"round": round, "n": n}))).collect();
        append(&service, &principal, "kept", None, events).await;
        let fresh = service.store().open(&key(TENANT_A, "kept"), Access::Read).await.unwrap();
        for (before, limit) in [(u64::MAX, 1), (u64::MAX, 8), (u64::MAX, 64), (u64::MAX, 65), (4, 3), (3, 10)] {
            let kept = service.read_before(&principal, &id, before, limit).await.unwrap();
            let read = fresh.read_before(before, limit).await.unwrap();
            assert_eq!(kept, read, "round {round}, before {before}, limit {limit}");
        }
        fresh.close().await.unwrap();
    }
    assert_eq!(stored_log(&service, TENANT_A, "kept").await.map(|log| log.len()), Some(15));
}

/// A read filtered by type (`read_types`) returns only events of the asked types, in
/// order, at most `limit`; its `[first_seq, next_seq)` is what it scanned, so paging on
/// from `next_seq` (forward) or before `first_seq` (backward) finds every match once,
/// across chunk boundaries; bad type lists are `Invalid` with nothing read.
pub async fn typed_reads_return_only_those_types_and_bound_what_they_scanned(b: &dyn ServiceBackend) {
    use berth_core::EventType;
    use berth_service::{ReadRange, TypedPage};
    let service = b.service();
    let principal = service_principal(TENANT_A);
    create(&service, &principal, "typed", serial(DAY_MS, DAY_MS)).await;
    // 2,500 events (past two read chunks): every seventh a `tool/call`, the rest notes.
    let total = 2_500u64;
    let kind = |seq: u64| if seq % 7 == 3 { "tool/call" } else { "note/x" };
    for start in (0..total).step_by(500) {
        let events = (start..start + 500)
            .map(|seq| event(kind(seq), json!({"n": seq, "call_id": format!("c{seq}"), "name": "t", "arguments": {}})))
            .collect();
        append(&service, &principal, "typed", None, events).await;
    }
    let calls: Vec<u64> = (0..total).filter(|seq| kind(*seq) == "tool/call").collect();
    let types = [EventType::parse("tool/call").unwrap()];
    let read = |range: ReadRange, types: Vec<EventType>, limit: u64| {
        let service = service.clone();
        let principal = principal.clone();
        async move { service.read_types(&principal, &sid("typed"), range, &types, limit).await }
    };
    let seqs = |page: &TypedPage| page.events.iter().map(|event| event.seq.get()).collect::<Vec<_>>();

    // Forward, in pages of 100, to the end.
    let mut found = Vec::new();
    let mut from = 0;
    loop {
        let page = read(ReadRange::Forward { from, before: None }, types.to_vec(), 100).await.unwrap();
        assert_eq!(page.first_seq, from);
        assert!(page.events.iter().all(|event| event.event_type.as_str() == "tool/call"));
        if page.events.len() == 100 {
            assert_eq!(page.next_seq, page.events.last().unwrap().seq.get() + 1, "stops after its last match");
        }
        if page.next_seq == from {
            break;
        }
        found.extend(seqs(&page));
        from = page.next_seq;
    }
    assert_eq!(found, calls);
    // Backward from the end, in pages of 150, to seq 0.
    let mut found = Vec::new();
    let mut before = u64::MAX;
    loop {
        let page = read(ReadRange::Backward { before }, types.to_vec(), 150).await.unwrap();
        let mut got = seqs(&page);
        got.reverse();
        found.extend(got);
        if page.events.len() == 150 {
            assert_eq!(page.first_seq, page.events[0].seq.get(), "stops at its earliest match");
        }
        if page.first_seq == 0 {
            break;
        }
        before = page.first_seq;
    }
    found.reverse();
    assert_eq!(found, calls);
    // A range: only its matches, and it scanned the whole range.
    let page = read(ReadRange::Forward { from: 990, before: Some(1_010) }, types.to_vec(), 1_000).await.unwrap();
    assert_eq!(seqs(&page), calls.iter().copied().filter(|seq| (990..1_010).contains(seq)).collect::<Vec<_>>());
    assert_eq!((page.first_seq, page.next_seq), (990, 1_010));
    // The last matches before the end, and several types.
    let page = read(ReadRange::Backward { before: total }, types.to_vec(), 2).await.unwrap();
    assert_eq!(seqs(&page), calls[calls.len() - 2..].to_vec());
    assert_eq!(page.next_seq, total);
    let both = vec![EventType::parse("tool/call").unwrap(), EventType::parse("note/x").unwrap()];
    let page = read(ReadRange::Forward { from: 0, before: None }, both, 1_000).await.unwrap();
    assert_eq!(seqs(&page), (0..1_000).collect::<Vec<_>>());
    // A type no event has: nothing, the whole log scanned.
    let none = vec![EventType::parse("user/message").unwrap()];
    let page = read(ReadRange::Forward { from: 0, before: None }, none.clone(), 10).await.unwrap();
    assert_eq!((page.events.len(), page.first_seq, page.next_seq), (0, 0, total));
    let page = read(ReadRange::Backward { before: total }, none, 10).await.unwrap();
    assert_eq!((page.events.len(), page.first_seq, page.next_seq), (0, 0, total));
    // No types, or too many: invalid.
    let error = read(ReadRange::Forward { from: 0, before: None }, Vec::new(), 10).await.unwrap_err();
    assert!(matches!(error, Error::Invalid { .. }), "{error}");
    let many: Vec<EventType> = (0..33).map(|i| EventType::parse(&format!("note/t{i}")).unwrap()).collect();
    let error = read(ReadRange::Forward { from: 0, before: None }, many, 10).await.unwrap_err();
    assert!(matches!(error, Error::Invalid { .. }), "{error}");
}

/// R-S7: a retry with `expected_seq` whose events are already stored identically
/// succeeds with `duplicate: true` and stores nothing (also after a crash and restart,
/// the "was my append committed?" case); different content, a partial overlap that
/// runs past the end, an explicit time that differs, or an `expected_seq` ahead of the
/// log are `SeqConflict {expected: <next seq>, actual: <given>}`.
pub async fn append_retry_is_idempotent_and_conflicts_are_seq_conflict(b: &dyn ServiceBackend) {
    let service = b.service();
    create(&service, &owner(), "retry", serial(DAY_MS, DAY_MS)).await;
    attach(&service, &owner(), "retry", "r1").await;
    let session = sid("retry");
    let batch = || vec![event("turn/start", json!({"turn": 0})), user_message("once")];
    let first = service.append(&owner(), &session, at(0, Some("r1"), batch())).await.unwrap();
    assert_eq!((first.first_seq, first.next_seq, first.duplicate), (0, 2, false));
    let log = stored_log(&service, TENANT_A, "retry").await.unwrap();
    let revision = stored(&service, TENANT_A, "retry").await.unwrap().revision;

    b.clock().advance_ms(5);
    let retry = service.append(&owner(), &session, at(0, Some("r1"), batch())).await.unwrap();
    assert_eq!((retry.first_seq, retry.next_seq, retry.duplicate), (0, 2, true));
    let prefix = service.append(&owner(), &session, at(0, Some("r1"), batch()[..1].to_vec())).await.unwrap();
    assert!(prefix.duplicate, "a retry of a stored prefix is a duplicate too");
    assert_eq!(stored_log(&service, TENANT_A, "retry").await.unwrap(), log, "nothing duplicated");

    let conflicts = [
        (0, vec![event("turn/start", json!({"turn": 0})), user_message("twice")]),
        (1, batch()),
        (5, batch()),
        (2 + 1, vec![user_message("gap")]),
    ];
    for (expected_seq, events) in conflicts {
        let conflict = service.append(&owner(), &session, at(expected_seq, Some("r1"), events)).await;
        assert_eq!(conflict.err(), Some(Error::SeqConflict { expected: 2, actual: expected_seq }));
    }
    assert_eq!(stored_log(&service, TENANT_A, "retry").await.unwrap(), log);
    assert_eq!(stored(&service, TENANT_A, "retry").await.unwrap().revision, revision, "refusals change no metadata");

    let timed = |time_ms: u64| {
        let mut message = user_message("timed");
        message.time = Some(Timestamp(time_ms));
        vec![message]
    };
    let stamped = service.append(&owner(), &session, at(2, Some("r1"), timed(42))).await.unwrap();
    assert_eq!((stamped.next_seq, stamped.duplicate), (3, false));
    assert!(service.append(&owner(), &session, at(2, Some("r1"), timed(42))).await.unwrap().duplicate);
    let moved = service.append(&owner(), &session, at(2, Some("r1"), timed(43))).await;
    assert_eq!(moved.err(), Some(Error::SeqConflict { expected: 3, actual: 2 }));

    let log = stored_log(&service, TENANT_A, "retry").await.unwrap();
    drop(service);
    b.restart().await;
    let service = b.service();
    let after_crash = service.append(&owner(), &session, at(0, Some("r1"), batch())).await.unwrap();
    assert_eq!((after_crash.next_seq, after_crash.duplicate), (3, true));
    let next = service.append(&owner(), &session, at(3, Some("r1"), vec![user_message("next")])).await.unwrap();
    assert_eq!((next.first_seq, next.next_seq, next.duplicate), (3, 4, false));
    let stored_now = stored_log(&service, TENANT_A, "retry").await.unwrap();
    assert_eq!(stored_now[..3], log[..]);
    assert_eq!(stored(&service, TENANT_A, "retry").await.unwrap().event_count, 4);
}

/// R-S9: `close` with `ClosePolicy::Refuse` is `Busy` while runs are attached, for any
/// principal, and changes nothing.
pub async fn close_refuses_while_runs_are_attached(b: &dyn ServiceBackend) {
    let service = b.service();
    create(&service, &owner(), "busy-close", parallel(3, DAY_MS, DAY_MS)).await;
    attach(&service, &owner(), "busy-close", "r1").await;
    attach(&service, &service_principal(TENANT_A), "busy-close", "r2").await;
    let before = stored(&service, TENANT_A, "busy-close").await.unwrap();
    for principal in [owner(), service_principal(TENANT_A), admin(TENANT_A)] {
        let refused = service.close(&principal, &sid("busy-close"), ClosePolicy::Refuse, None).await;
        match refused {
            Err(Error::Busy { id, .. }) => assert_eq!(id, "busy-close"),
            other => panic!("expected Busy, got {other:?}"),
        }
    }
    assert_eq!(stored(&service, TENANT_A, "busy-close").await.unwrap(), before);
    assert!(audited(&service, TENANT_A, "close").await.is_empty());
}

/// R-S9: `ClosePolicy::CancelRuns` detaches every attached run as `cancelled` (one
/// audited `detach` each), closes (audited with the count), and releases the writer.
pub async fn close_with_cancel_runs_detaches_them_as_cancelled(b: &dyn ServiceBackend) {
    let service = b.service();
    create(&service, &owner(), "cancel", parallel(3, DAY_MS, DAY_MS)).await;
    attach(&service, &owner(), "cancel", "r1").await;
    attach(&service, &owner(), "cancel", "r2").await;
    append(&service, &owner(), "cancel", Some("r1"), vec![user_message("mid-run")]).await;
    let stale = stored(&service, TENANT_A, "cancel").await.unwrap().revision;
    append(&service, &owner(), "cancel", Some("r2"), vec![user_message("other run")]).await;
    let conflict = service.close(&owner(), &sid("cancel"), ClosePolicy::CancelRuns, Some(stale)).await;
    assert_eq!(label(&conflict), "revision_conflict");
    let closed =
        service.close(&owner(), &sid("cancel"), ClosePolicy::CancelRuns, None).await.expect("close with cancel_runs");
    assert_eq!(closed.status, Status::Closed);
    assert!(closed.runs.is_empty());
    assert_eq!(stored(&service, TENANT_A, "cancel").await.as_ref(), Some(&closed));
    let detaches = audited(&service, TENANT_A, "detach").await;
    let cancelled: BTreeSet<String> = detaches
        .iter()
        .filter(|entry| entry.draft.details["status"] == "cancelled")
        .map(|entry| entry.draft.details["run"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(cancelled, BTreeSet::from(["r1".to_owned(), "r2".to_owned()]));
    let close_entries = audited(&service, TENANT_A, "close").await;
    assert_eq!(close_entries.len(), 1);
    assert_eq!(close_entries[0].draft.details["cancelled_runs"], 2);
    assert_eq!(close_entries[0].draft.actor, "user:alice");
    // The writer lease is free: another instance (or process) may open the log.
    let probe = service.store().open(&key(TENANT_A, "cancel"), Access::Write).await.expect("writer released");
    probe.close().await.unwrap();
}

/// R-S9/R-C4: a closed session refuses attach, resume, heartbeat, append and another
/// close (`Terminal`), but get, read and export still work, and fork continues the
/// conversation in a new, live session.
pub async fn closed_session_is_terminal_but_readable_and_forkable(b: &dyn ServiceBackend) {
    let service = b.service();
    create(&service, &owner(), "finished", serial(DAY_MS, DAY_MS)).await;
    attach(&service, &owner(), "finished", "r1").await;
    append(&service, &owner(), "finished", Some("r1"), balanced_turn(0, "done?")).await;
    service.detach(&owner(), &sid("finished"), &run("r1"), "completed", None).await.unwrap();
    service.close(&owner(), &sid("finished"), ClosePolicy::Refuse, None).await.unwrap();
    let log = stored_log(&service, TENANT_A, "finished").await.unwrap();
    let session = sid("finished");
    let owner = owner();
    let terminal = |result: Result<(), Error>, what: &str| {
        assert_eq!(result.err(), Some(Error::Terminal { state: "closed".into() }), "{what}");
    };
    terminal(service.attach(&owner, &session, attach_request("r2", OnBusy::Interrupt)).await.map(drop), "attach");
    terminal(service.resume(&owner, &session, attach_request("r2", OnBusy::Interrupt)).await.map(drop), "resume");
    terminal(service.heartbeat(&owner, &session, &run("r1")).await.map(drop), "heartbeat");
    let request = AppendRequest {
        memory: Vec::new(),
        run: None,
        expected_seq: None,
        events: vec![user_message("more")],
        idempotency_key: None,
    };
    terminal(service.append(&admin(TENANT_A), &session, request).await.map(drop), "append");
    terminal(service.close(&owner, &session, ClosePolicy::CancelRuns, None).await.map(drop), "close");
    assert_eq!(service.get(&owner, &session).await.unwrap().status, Status::Closed);
    assert_eq!(service.read(&owner, &session, 0, None).await.unwrap(), log);
    assert_eq!(service.read(&owner, &session, 2, Some(2)).await.unwrap(), log[2..4]);
    assert!(!service.export(&owner, &session).await.unwrap().is_empty());

    let fork = service.fork(&owner, &session, None, Some(sid("continued"))).await.expect("fork a closed session");
    assert_eq!(fork.status, Status::Active);
    attach(&service, &owner, "continued", "r2").await;
    append(&service, &owner, "continued", Some("r2"), balanced_turn(1, "continue")).await;
    assert_eq!(stored_log(&service, TENANT_A, "continued").await.unwrap().len(), log.len() + 1 + 6);
    assert_eq!(stored_log(&service, TENANT_A, "finished").await.unwrap(), log, "the source is untouched");
    assert_status(&service, TENANT_A, "finished", Status::Closed).await;
}

/// R-S9: delete erases exactly one session's log and record — nothing of the same
/// user's other sessions, other users', its forks, or another tenant's session with the
/// same id — keeps every earlier audit entry, and audits who deleted what (event count,
/// bytes, owner). A stale `expected_revision` deletes nothing. The id is free again.
pub async fn delete_erases_only_that_session_and_audits_it(b: &dyn ServiceBackend) {
    let service = b.service();
    let sessions = [
        (owner(), "doomed"),
        (owner(), "keep-mine"),
        (user_principal(TENANT_A, OTHER_USER, Some(PROJECT)), "keep-bob"),
        (user_principal(TENANT_B, OWNER, Some(PROJECT)), "doomed"),
    ];
    for (principal, id) in &sessions {
        create(&service, principal, id, serial(DAY_MS, DAY_MS)).await;
        let service_principal = service_principal(principal.tenant.as_str());
        append(&service, &service_principal, id, None, balanced_turn(0, id)[..3].to_vec()).await;
    }
    service.fork(&owner(), &sid("doomed"), Some(2), Some(sid("doomed.fork"))).await.unwrap();
    let doomed = stored(&service, TENANT_A, "doomed").await.unwrap();
    let audit_before = audit_entries(&service, TENANT_A).await;
    let before = snapshot(&service).await;

    let stale = berth_core::Revision(doomed.revision.0 - 1);
    let refused = service.delete(&owner(), &sid("doomed"), Some(stale)).await;
    assert_eq!(refused.err(), Some(Error::RevisionConflict { expected: stale.0, actual: doomed.revision.0 }));
    assert_eq!(snapshot(&service).await, before, "a refused delete changes nothing");

    service.delete(&owner(), &sid("doomed"), Some(doomed.revision)).await.expect("delete");
    let audit_after = audit_entries(&service, TENANT_A).await;
    assert_eq!(stored_log(&service, TENANT_A, "doomed").await, None, "the log is erased");
    let doomed_key = key(TENANT_A, "doomed");
    let mut expected = before.clone();
    expected.records.remove(&doomed_key);
    expected.logs.remove(&doomed_key);
    let after = snapshot(&service).await;
    assert_eq!(after.clone().without_audit_of(&tenant(TENANT_A)), expected.without_audit_of(&tenant(TENANT_A)));

    assert_eq!(audit_after[..audit_before.len()], audit_before[..], "earlier audit entries are kept");
    let deletion = &audit_after[audit_before.len()..];
    assert_eq!(deletion.len(), 1, "{deletion:?}");
    let entry = &deletion[0].draft;
    assert_eq!((entry.action.as_str(), entry.actor.as_str(), entry.outcome.as_str()), ("delete", "user:alice", "ok"));
    assert_eq!(entry.session, Some(sid("doomed")));
    assert_eq!(entry.details["events"], 3);
    assert_eq!(entry.details["owner"], OWNER);
    assert!(entry.details["bytes"].as_u64().is_some_and(|bytes| bytes > 0), "bytes deleted: {:?}", entry.details);
    assert_eq!(service.verify_audit(&admin(TENANT_A)).await.unwrap().broken_at, None);
    assert_eq!(service.get(&owner(), &sid("doomed")).await.err(), Some(Error::session_not_found("doomed")));

    let reborn = create(&service, &owner(), "doomed", serial(DAY_MS, DAY_MS)).await;
    assert_eq!(reborn.event_count, 0);
    assert_eq!(stored_log(&service, TENANT_A, "doomed").await, Some(Vec::new()));
    assert_eq!(stored_log(&service, TENANT_B, "doomed").await.map(|log| log.len()), Some(3));
}

/// R-S8: fork copies events `0..upto_seq` verbatim into a new session of the same
/// scope and policy whose header records parent and cut, then marks the seam with
/// `session/end-seed`; the default cut is the whole log; a cut past the end is a
/// `SeqConflict` (expected: the log's length) and creates nothing; both sides are audited; the two logs then diverge.
pub async fn fork_copies_the_prefix_and_records_the_parent(b: &dyn ServiceBackend) {
    let service = b.service();
    let source = create(&service, &owner(), "origin", parallel(2, DAY_MS, DAY_MS)).await;
    let labels = BTreeSet::from(["keep".to_owned()]);
    let update = MetadataUpdate {
        title: Some(Some("the origin".into())),
        labels: Some(labels.clone()),
        expected_revision: None,
    };
    service.update_metadata(&owner(), &sid("origin"), update).await.unwrap();
    attach(&service, &owner(), "origin", "r1").await;
    append(&service, &owner(), "origin", Some("r1"), balanced_turn(0, "fork me")).await;
    let log = stored_log(&service, TENANT_A, "origin").await.unwrap();
    b.clock().advance_ms(1_000);

    let fork = service
        .fork(&service_principal(TENANT_A), &sid("origin"), Some(4), Some(sid("branch")))
        .await
        .expect("fork at 4");
    assert_eq!(fork.header.parent, Some(ParentRef { session: sid("origin"), cut_seq: 4 }));
    assert_eq!(fork.header.origin.as_deref(), Some("fork"));
    assert_eq!(fork.header.scope, source.header.scope, "a fork keeps the owner's scope");
    assert_eq!(fork.header.policy, source.header.policy);
    assert_eq!((fork.status, fork.event_count, fork.runs.len()), (Status::Active, 5, 0));
    assert_eq!((fork.title.as_deref(), &fork.labels), (Some("the origin"), &labels));
    let branch = stored_log(&service, TENANT_A, "branch").await.unwrap();
    assert_eq!(branch[..4], log[..4], "events copied verbatim");
    assert_eq!(branch[4].seq.get(), 4);
    assert_eq!(branch[4].event_type.as_str(), "session/end-seed");
    assert_eq!(data(&branch[4]), json!({"inherited_events": 4, "parent": "origin"}));

    let whole = service.fork(&owner(), &sid("origin"), None, None).await.expect("fork all");
    assert_eq!(whole.header.parent.as_ref().map(|parent| parent.cut_seq), Some(6));
    let past_end = service.fork(&owner(), &sid("origin"), Some(7), Some(sid("nothing"))).await;
    assert_eq!(past_end.err(), Some(Error::SeqConflict { expected: 6, actual: 7 }));
    assert!(stored(&service, TENANT_A, "nothing").await.is_none());
    assert_eq!(stored_log(&service, TENANT_A, "nothing").await, None);
    let grandchild = service.fork(&owner(), &sid("branch"), None, Some(sid("twig"))).await.unwrap();
    assert_eq!(grandchild.header.parent, Some(ParentRef { session: sid("branch"), cut_seq: 5 }));

    let forks: Vec<_> = audited(&service, TENANT_A, "fork").await.into_iter().filter_map(|e| e.draft.session).collect();
    assert_eq!(forks, [sid("branch"), whole.header.id.clone(), sid("twig")]);
    let forked = audited(&service, TENANT_A, "forked").await;
    assert_eq!(forked[0].draft.session, Some(sid("origin")));
    assert_eq!(forked[0].draft.details["fork"], "branch");
    assert_eq!(forked[0].draft.actor, "service:svc");

    attach(&service, &owner(), "branch", "r9").await;
    append(&service, &owner(), "branch", Some("r9"), vec![user_message("diverge")]).await;
    assert_eq!(stored_log(&service, TENANT_A, "origin").await.unwrap(), log);
    assert_eq!(stored_log(&service, TENANT_A, "branch").await.unwrap().len(), 6);
}

/// R-S8, continuing elsewhere: a fork at 0 with an owner, policy, title and labels of its
/// own is an empty session (no `session/end-seed`: nothing was inherited) whose header
/// names its parent — what a drop-in adopts to write another framework's conversation in
/// its own layout. Only service and admin principals fork to another user; a bad title,
/// label set or policy is refused and creates nothing; the parent is untouched.
pub async fn fork_at_zero_takes_a_header_of_its_own(b: &dyn ServiceBackend) {
    let service = b.service();
    let source = create(&service, &owner(), "origin", parallel(2, DAY_MS, DAY_MS)).await;
    attach(&service, &owner(), "origin", "r1").await;
    append(&service, &owner(), "origin", Some("r1"), balanced_turn(0, "carry me over")).await;
    let log = stored_log(&service, TENANT_A, "origin").await.unwrap();
    let own_policy = serial(2 * DAY_MS, 5_000);
    let fork = berth_service::ForkSession {
        upto_seq: Some(0),
        new_id: Some(sid("elsewhere")),
        user: None,
        policy: Some(own_policy.clone()),
        title: Some("thread-9".into()),
        labels: Some(BTreeSet::from(["other-framework".to_owned()])),
    };
    let record = service.fork_with(&owner(), &sid("origin"), fork.clone()).await.expect("fork at 0");
    assert_eq!(record.header.parent, Some(ParentRef { session: sid("origin"), cut_seq: 0 }));
    assert_eq!(record.header.policy, own_policy);
    assert_eq!(record.header.scope, source.header.scope);
    assert_eq!((record.title.as_deref(), record.labels.len()), (Some("thread-9"), 1));
    assert_eq!((record.event_count, record.blank), (0, true));
    assert_eq!(stored_log(&service, TENANT_A, "elsewhere").await, Some(Vec::new()), "no seam marker");
    assert_eq!(stored_log(&service, TENANT_A, "origin").await.unwrap(), log, "the parent is untouched");

    // A user key cannot give the fork to someone else; a service key can.
    let to_bob = berth_service::ForkSession { new_id: Some(sid("bobs")), user: Some(user("bob")), ..fork.clone() };
    let denied = service.fork_with(&owner(), &sid("origin"), to_bob.clone()).await;
    assert!(matches!(denied, Err(Error::Forbidden { .. })), "{denied:?}");
    assert!(stored(&service, TENANT_A, "bobs").await.is_none());
    let bobs =
        service.fork_with(&service_principal(TENANT_A), &sid("origin"), to_bob).await.expect("service forks to bob");
    assert_eq!(
        (bobs.header.scope.user.as_str(), bobs.header.scope.project.as_ref()),
        ("bob", source.header.scope.project.as_ref())
    );

    // Bad metadata or policy: refused, nothing created.
    let bad_title =
        berth_service::ForkSession { new_id: Some(sid("bad1")), title: Some("x".repeat(513)), ..fork.clone() };
    assert!(service.fork_with(&owner(), &sid("origin"), bad_title).await.is_err());
    let bad_policy = berth_service::ForkSession {
        new_id: Some(sid("bad2")),
        policy: Some(parallel(0, DAY_MS, DAY_MS)),
        ..fork.clone()
    };
    assert!(service.fork_with(&owner(), &sid("origin"), bad_policy).await.is_err());
    // Copied events keep their runs: a fork that copies any keeps the concurrency mode.
    let serial_copy = berth_service::ForkSession { upto_seq: Some(2), new_id: Some(sid("bad3")), ..fork.clone() };
    let refused = service.fork_with(&owner(), &sid("origin"), serial_copy).await;
    assert!(matches!(refused, Err(Error::InvalidTransition { .. })), "{refused:?}");
    for id in ["bad1", "bad2", "bad3"] {
        assert!(stored(&service, TENANT_A, id).await.is_none(), "{id} created");
    }
}
