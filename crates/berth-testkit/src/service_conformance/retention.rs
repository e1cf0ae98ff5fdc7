//! Retention and listing clauses (R-S11, R-S12): the bounded sweeper and the listing
//! order, filters, cursors and blank-session hiding.

use super::fixtures::*;
use super::ServiceBackend;
use berth_catalog::{CreatorMark, RetentionPolicy, SessionRecord};
use berth_core::lifecycle::Status;
use berth_core::{Clock, Revision, Scope, SessionHeader};
use berth_service::{ClosePolicy, CreateSession, ListRequest, MetadataUpdate, OnBusy, SessionService, SweepReport};
use std::collections::BTreeSet;

fn actions(report: &SweepReport) -> u64 {
    report.expired + report.deleted + report.abandoned_creates
}

/// Sweeps with `batch_max` until a sweep reports `more: false`; checks every sweep's
/// bound, and that `more` is reported exactly while candidates remain (a sweep that
/// does fewer than `batch_max` actions is the last). Returns the summed report.
async fn sweep_until_done(service: &SessionService, batch_max: usize, expected_actions: u64) -> SweepReport {
    let mut total = SweepReport::default();
    let sweeps_max = expected_actions / batch_max as u64 + 2;
    for sweep in 0.. {
        assert!(sweep < sweeps_max, "repeated sweeps did not finish ({total:?})");
        let report = service.sweep(batch_max).await.expect("sweep");
        assert!(actions(&report) <= batch_max as u64, "sweep {sweep} did {report:?} with batch_max {batch_max}");
        total.expired += report.expired;
        total.deleted += report.deleted;
        total.abandoned_creates += report.abandoned_creates;
        let remaining = expected_actions - actions(&total);
        assert_eq!(report.more, remaining > 0, "sweep {sweep}: {report:?}, {remaining} candidates left");
        if !report.more {
            break;
        }
    }
    let idle = service.sweep(batch_max).await.expect("sweep");
    assert_eq!(idle, SweepReport::default(), "nothing left after the last sweep");
    total
}

async fn statuses(service: &SessionService, tenant_id: &str, ids: &[String]) -> Vec<Option<Status>> {
    let mut found = Vec::new();
    for id in ids {
        found.push(stored(service, tenant_id, id).await.map(|record| record.status));
    }
    found
}

/// R-S11: with many candidates in two tenants, `sweep(batch_max)` never does more than
/// `batch_max` actions, reports `more` while candidates remain, and repeated sweeps
/// finish: lapsed sessions expire, terminal ones are deleted after the retention
/// period, live ones are untouched.
pub async fn sweep_is_bounded_and_repeated_sweeps_finish(b: &dyn ServiceBackend) {
    let service = b.service();
    let clock = b.clock();
    let mut lapsing = Vec::new();
    let mut closing = Vec::new();
    let mut live = Vec::new();
    for tenant_id in [TENANT_A, TENANT_B] {
        service
            .set_retention(
                &admin(tenant_id),
                RetentionPolicy { delete_terminal_after_ms: Some(7 * DAY_MS), ..RetentionPolicy::default() },
            )
            .await
            .unwrap();
        let alice = user_principal(tenant_id, OWNER, None);
        for index in 0..6 {
            let id = format!("lapsing-{index}");
            create(&service, &alice, &id, serial(1_000, 1_000)).await;
            lapsing.push((tenant_id, id));
            let id = format!("closing-{index}");
            create(&service, &alice, &id, serial(30 * DAY_MS, 1_000)).await;
            service.close(&alice, &sid(&id), ClosePolicy::Refuse, None).await.unwrap();
            closing.push((tenant_id, id));
        }
        for index in 0..2 {
            let id = format!("live-{index}");
            create(&service, &alice, &id, serial(30 * DAY_MS, 1_000)).await;
            live.push((tenant_id, id));
        }
    }
    clock.advance_ms(1_001);
    let report = sweep_until_done(&service, 5, 12).await;
    assert_eq!((report.expired, report.deleted, report.abandoned_creates), (12, 0, 0));
    for (tenant_id, id) in &lapsing {
        assert_status(&service, tenant_id, id, Status::Expired).await;
    }
    for (tenant_id, id) in &closing {
        assert_status(&service, tenant_id, id, Status::Closed).await;
    }

    clock.advance_ms(7 * DAY_MS - 1_001);
    assert_eq!(service.sweep(100).await.unwrap(), SweepReport::default(), "closed exactly 7 days ago: kept");
    clock.advance_ms(1_002);
    let report = sweep_until_done(&service, 4, 24).await;
    assert_eq!((report.expired, report.deleted), (0, 24));
    for (tenant_id, id) in lapsing.iter().chain(&closing) {
        assert!(stored(&service, tenant_id, id).await.is_none(), "{tenant_id}/{id} deleted");
        assert_eq!(stored_log(&service, tenant_id, id).await, None, "{tenant_id}/{id}'s log erased");
    }
    for (tenant_id, id) in &live {
        assert_status(&service, tenant_id, id, Status::Active).await;
    }
}

/// R-S3/R-S11: the sweeper expires sessions whose activity lease lapsed (also with a
/// run still attached), those idle longer than the tenant's idle TTL, and those older
/// than its max age — audited by `system:lifecycle`. Expired sessions are never
/// reactivated by later sweeps or accesses.
pub async fn sweep_expires_lapsed_idle_and_old_sessions_and_never_reactivates(b: &dyn ServiceBackend) {
    let service = b.service();
    let clock = b.clock();
    let policy = RetentionPolicy {
        idle_ttl_ms: Some(2 * HOUR_MS),
        max_age_ms: Some(10 * DAY_MS),
        delete_terminal_after_ms: None,
        memory_max_age_ms: None,
    };
    service.set_retention(&admin(TENANT_A), policy).await.unwrap();
    let owner = owner();
    create(&service, &owner, "old", serial(30 * DAY_MS, DAY_MS)).await;
    clock.advance_ms(9 * DAY_MS);
    create(&service, &owner, "lapsed", serial(HOUR_MS, 10 * HOUR_MS)).await;
    attach(&service, &owner, "lapsed", "r1").await;
    create(&service, &owner, "idle", serial(30 * DAY_MS, DAY_MS)).await;
    create(&service, &owner, "busy", serial(30 * DAY_MS, DAY_MS)).await;
    for hour in 1..=3 {
        clock.advance_ms(HOUR_MS);
        if hour < 3 {
            append(&service, &service_principal(TENANT_A), "old", None, vec![user_message("still active")]).await;
        }
        append(&service, &service_principal(TENANT_A), "busy", None, vec![user_message("active")]).await;
    }
    // Now: "lapsed" is past its 1 h lease (its run lease is not); "idle" saw nothing for
    // 3 h (> 2 h idle TTL); "old" is 9 days + 3 h old and was active an hour ago.
    assert_eq!(service.sweep(100).await.unwrap(), SweepReport { expired: 2, ..SweepReport::default() });
    clock.advance_ms(DAY_MS - 2 * HOUR_MS);
    append(&service, &service_principal(TENANT_A), "busy", None, vec![user_message("active")]).await;
    append(&service, &service_principal(TENANT_A), "old", None, vec![user_message("still active")]).await;
    create(&service, &owner, "new", serial(30 * DAY_MS, DAY_MS)).await;
    // "old" is now past 10 days old despite its activity an instant ago.
    assert_eq!(service.sweep(100).await.unwrap(), SweepReport { expired: 1, ..SweepReport::default() });
    let ids: Vec<String> = ["lapsed", "idle", "old", "busy", "new"].iter().map(|id| id.to_string()).collect();
    let expired = Some(Status::Expired);
    assert_eq!(
        statuses(&service, TENANT_A, &ids).await,
        [expired, expired, expired, Some(Status::Active), Some(Status::Active)]
    );
    let lapsed = stored(&service, TENANT_A, "lapsed").await.unwrap();
    assert!(lapsed.runs.is_empty(), "expiry drops the attached run");
    let expires = audited(&service, TENANT_A, "expire").await;
    assert_eq!(expires.len(), 3);
    assert!(expires.iter().all(|entry| entry.draft.actor == "system:lifecycle" && entry.draft.outcome == "ok"));

    // Never reactivated: neither by later sweeps nor by any access.
    let revisions: Vec<Revision> = {
        let mut revisions = Vec::new();
        for id in &ids[..3] {
            revisions.push(stored(&service, TENANT_A, id).await.unwrap().revision);
        }
        revisions
    };
    for _ in 0..3 {
        clock.advance_ms(HOUR_MS / 6); // "busy" and "new" stay within the idle TTL
        assert_eq!(service.sweep(100).await.unwrap().expired, 0);
    }
    for id in &ids[..3] {
        let session = sid(id);
        assert_eq!(service.get(&owner, &session).await.unwrap().status, Status::Expired);
        let attached = service.attach(&owner, &session, attach_request("again", OnBusy::Interrupt)).await;
        assert_eq!(label(&attached), "terminal");
        let heartbeat = service.heartbeat(&owner, &session, &run("r1")).await;
        assert_eq!(label(&heartbeat), "terminal");
    }
    for (id, revision) in ids[..3].iter().zip(revisions) {
        let record = stored(&service, TENANT_A, id).await.unwrap();
        assert_eq!((record.status, record.revision), (Status::Expired, revision), "{id} untouched since it expired");
    }
    assert_eq!(audited(&service, TENANT_A, "expire").await.len(), 3, "each expired exactly once");
}

/// R-S11: closed and expired sessions are deleted once they have been terminal for the
/// tenant's retention period (not a millisecond earlier), audited by `system:lifecycle`
/// with what was deleted; live sessions and other tenants are untouched.
pub async fn sweep_deletes_terminal_sessions_after_retention(b: &dyn ServiceBackend) {
    let service = b.service();
    let clock = b.clock();
    let retention = RetentionPolicy { delete_terminal_after_ms: Some(3 * DAY_MS), ..RetentionPolicy::default() };
    service.set_retention(&admin(TENANT_A), retention).await.unwrap();
    let owner = owner();
    for id in ["closed", "expired", "live"] {
        create(&service, &owner, id, serial(if id == "expired" { HOUR_MS } else { 30 * DAY_MS }, DAY_MS)).await;
        append(&service, &service_principal(TENANT_A), id, None, balanced_turn(0, id)).await;
    }
    let other = user_principal(TENANT_B, OWNER, None);
    create(&service, &other, "closed", serial(30 * DAY_MS, DAY_MS)).await;
    service.close(&other, &sid("closed"), ClosePolicy::Refuse, None).await.unwrap();
    service.close(&owner, &sid("closed"), ClosePolicy::Refuse, None).await.unwrap();
    clock.advance_ms(HOUR_MS + 1);
    assert_eq!(service.get(&owner, &sid("expired")).await.unwrap().status, Status::Expired);
    let terminal_since = clock.now();

    clock.set_ms(terminal_since.plus_ms(3 * DAY_MS).0 - 1);
    let early = service.sweep(100).await.unwrap();
    assert_eq!(early.deleted, 1, "only the earlier closed session is due: {early:?}");
    assert!(stored(&service, TENANT_A, "closed").await.is_none());
    assert!(stored(&service, TENANT_A, "expired").await.is_some());
    clock.advance_ms(1);
    assert_eq!(service.sweep(100).await.unwrap().deleted, 0, "status changed exactly 3 days ago: kept");
    clock.advance_ms(1);
    assert_eq!(service.sweep(100).await.unwrap().deleted, 1);
    for id in ["closed", "expired"] {
        assert!(stored(&service, TENANT_A, id).await.is_none());
        assert_eq!(stored_log(&service, TENANT_A, id).await, None);
    }
    assert_status(&service, TENANT_A, "live", Status::Active).await;
    assert_status(&service, TENANT_B, "closed", Status::Closed).await;
    let deletes = audited(&service, TENANT_A, "delete").await;
    assert_eq!(deletes.len(), 2);
    for entry in &deletes {
        assert_eq!(entry.draft.actor, "system:lifecycle");
        assert_eq!(entry.draft.details["events"], 6);
        assert_eq!(entry.draft.details["owner"], OWNER);
        assert_eq!(entry.draft.details["reason"], "retention");
    }
    assert_eq!(service.verify_audit(&admin(TENANT_A)).await.unwrap().broken_at, None);
}

/// A `creating` record for alice/p1, as a crash mid-create leaves it.
async fn insert_creating(service: &SessionService, now: berth_core::Timestamp, id: &str) {
    insert_creating_made_at(service, now, now, id).await;
}

/// A `creating` record whose header says `created_at` (an import's, from its export)
/// and whose create began at `began`.
async fn insert_creating_made_at(
    service: &SessionService,
    created_at: berth_core::Timestamp,
    began: berth_core::Timestamp,
    id: &str,
) {
    insert_creating_by(service, created_at, began, id, None).await;
}

/// `insert_creating_made_at` naming the process that made it.
async fn insert_creating_by(
    service: &SessionService,
    created_at: berth_core::Timestamp,
    began: berth_core::Timestamp,
    id: &str,
    creator: Option<CreatorMark>,
) -> SessionRecord {
    let now = began;
    let scope = Scope { tenant: tenant(TENANT_A), user: user(OWNER), project: Some(project(PROJECT)) };
    let record = SessionRecord {
        lease_until: now.plus_ms(DAY_MS),
        last_activity: now,
        revision: Revision(0),
        title: None,
        labels: BTreeSet::new(),
        event_count: 0,
        blank: true,
        runs: Vec::new(),
        status_changed_at: now,
        resume_mark: Default::default(),
        repair: Default::default(),
        creator,
        status: Status::Creating,
        header: SessionHeader::new(sid(id), scope, created_at),
    };
    service.catalog().insert(&record).await.unwrap();
    record
}

/// R-S11: an import of an old export is not an abandoned create while it is being made:
/// the sweeper dates a `creating` record from when its create began, not from the
/// `created_at` the export carried (an import once vanished mid-way, swept as abandoned).
pub async fn sweep_dates_a_create_from_when_it_began_not_from_its_header(b: &dyn ServiceBackend) {
    let service = b.service();
    let clock = b.clock();
    clock.advance_ms(3 * berth_service::ABANDONED_CREATE_MS);
    let long_ago = berth_core::Timestamp(clock.now().0 - 2 * berth_service::ABANDONED_CREATE_MS);
    insert_creating_made_at(&service, long_ago, clock.now(), "importing").await;
    assert_eq!(service.sweep(10).await.unwrap(), SweepReport::default(), "an import under way is kept");
    assert!(stored(&service, TENANT_A, "importing").await.is_some());
    clock.advance_ms(berth_service::ABANDONED_CREATE_MS + 1);
    let report = service.sweep(10).await.unwrap();
    assert_eq!(report, SweepReport { abandoned_creates: 1, ..SweepReport::default() });
    assert!(stored(&service, TENANT_A, "importing").await.is_none());
}

/// R-S12: a listing filters by the listable statuses only. A filter naming `creating`
/// is `Invalid` (naming the listable statuses) rather than emptied into "no filter",
/// which listed every status, unfinished creates included; no filter lists the four
/// listable ones. The parser of the HTTP query and the CLI refuses empty, unknown and
/// `creating` parts the same way.
pub async fn list_refuses_a_status_filter_of_creating(b: &dyn ServiceBackend) {
    let service = b.service();
    conversation(&service, "visible").await;
    insert_creating(&service, b.clock().now(), "half-made").await;
    for statuses in [vec![Status::Creating], vec![Status::Creating, Status::Active]] {
        let request = ListRequest { statuses: statuses.clone(), include_blank: true, ..ListRequest::default() };
        match service.list(&service_principal(TENANT_A), &request).await {
            Err(berth_core::Error::Invalid { what: "status", reason }) => {
                assert!(reason.contains("active, idle, closed, expired"), "{reason}")
            }
            other => panic!("{statuses:?}: expected Invalid, got {other:?}"),
        }
    }
    let all = ListRequest { include_blank: true, ..ListRequest::default() };
    assert_eq!(ids(&service.list(&service_principal(TENANT_A), &all).await.unwrap().items), ["visible"]);
    for text in ["", " ", "creating", "Active", "bogus"] {
        let parsed = berth_service::parse_listable_status(text);
        assert!(matches!(parsed, Err(berth_core::Error::Invalid { what: "status", .. })), "{text:?}: {parsed:?}");
    }
    for status in berth_service::LISTABLE_STATUSES {
        assert_eq!(berth_service::parse_listable_status(status.as_str()), Ok(status));
    }
}

/// R-S11: a `creating` record left by a crash mid-create is invisible and removed by
/// the sweeper once older than `ABANDONED_CREATE_MS`, not before.
pub async fn sweep_removes_abandoned_creates(b: &dyn ServiceBackend) {
    let service = b.service();
    let clock = b.clock();
    insert_creating(&service, clock.now(), "half-made").await;
    assert_eq!(
        service.get(&owner(), &sid("half-made")).await.err(),
        Some(berth_core::Error::session_not_found("half-made"))
    );
    let listed = service
        .list(&service_principal(TENANT_A), &ListRequest { include_blank: true, ..ListRequest::default() })
        .await
        .unwrap();
    assert!(listed.items.is_empty(), "a creating record is not listed");
    clock.advance_ms(berth_service::ABANDONED_CREATE_MS);
    assert_eq!(service.sweep(10).await.unwrap(), SweepReport::default());
    clock.advance_ms(1);
    let report = service.sweep(10).await.unwrap();
    assert_eq!(report, SweepReport { abandoned_creates: 1, ..SweepReport::default() });
    assert!(stored(&service, TENANT_A, "half-made").await.is_none());
    let created = create(&service, &owner(), "half-made", serial(DAY_MS, DAY_MS)).await;
    assert_eq!(created.status, Status::Active, "the id is usable again");
}

/// Issue 56: a create of an id whose `creating` record was left by a process that is
/// gone (killed mid-create: its pid now names another process, or none) takes the
/// record over at once instead of failing `AlreadyExists` until the sweeper's hour —
/// erasing the log that create had published, which no session owns. A record whose
/// creator may still run (this very process), names no creator, or names one of another
/// boot still refuses the create, unchanged. (Skipped where the kernel names no
/// process: no `/proc`.)
pub async fn a_create_takes_over_a_create_whose_process_is_gone(b: &dyn ServiceBackend) {
    let Some(here) = berth_service::creator_of_this_process() else { return };
    let service = b.service();
    let now = b.clock().now();
    // Another process once ran under this pid: the one that made these records is gone.
    let gone = CreatorMark { started: here.started.wrapping_add(1), ..here.clone() };

    let left = insert_creating_by(&service, now, now, "left-bare", Some(gone.clone())).await;
    let created = create(&service, &owner(), "left-bare", serial(DAY_MS, DAY_MS)).await;
    assert_eq!(created.status, Status::Active);
    assert_eq!(created.revision, Revision(left.revision.0 + 2), "one past the taken-over record");
    let stored_now = stored(&service, TENANT_A, "left-bare").await.expect("stored");
    assert_eq!((stored_now.status, stored_now.creator), (Status::Active, None), "the final record names no creator");
    append(&service, &service_principal(TENANT_A), "left-bare", None, vec![user_message("after")]).await;

    // The killed create had published its log (with an event) before it died.
    let left = insert_creating_by(&service, now, now, "left-log", Some(gone.clone())).await;
    let handle = service.store().create(left.header.clone()).await.unwrap();
    handle.append(&crate::conformance::fixtures::one_turn_log()).await.unwrap();
    handle.close().await.unwrap();
    assert_eq!(stored_log(&service, TENANT_A, "left-log").await.map(|log| log.len()), Some(6));
    create(&service, &owner(), "left-log", serial(DAY_MS, DAY_MS)).await;
    assert_eq!(
        stored_log(&service, TENANT_A, "left-log").await,
        Some(Vec::new()),
        "the killed create's log was erased"
    );

    // Not taken over: a creator that may still run, none named, another boot's.
    let another_boot = CreatorMark { boot: format!("not-{}", here.boot), ..gone };
    for (id, creator) in [("running", Some(here)), ("unnamed", None), ("other-boot", Some(another_boot))] {
        let left = insert_creating_by(&service, now, now, id, creator).await;
        let request = CreateSession { id: Some(sid(id)), policy: Some(serial(DAY_MS, DAY_MS)), ..Default::default() };
        let refused = service.create(&owner(), request).await;
        assert!(matches!(refused, Err(berth_core::Error::AlreadyExists { .. })), "{id}: {refused:?}");
        assert_eq!(stored(&service, TENANT_A, id).await, Some(left), "{id}: the record is untouched");
    }
}

/// Creates `id` for alice/p1 and gives it a conversation event at the current time.
async fn conversation(service: &SessionService, id: &str) {
    create(service, &owner(), id, serial(30 * DAY_MS, DAY_MS)).await;
    append(service, &service_principal(TENANT_A), id, None, vec![user_message(id)]).await;
}

fn ids(records: &[SessionRecord]) -> Vec<String> {
    records.iter().map(|record| record.header.id.to_string()).collect()
}

/// R-S12: sorted by last activity (newest first; ties by id, descending); a cursor
/// continues exactly after the previous page, so pages visit each session once.
pub async fn list_sorts_by_last_activity_and_pages_with_cursors(b: &dyn ServiceBackend) {
    let service = b.service();
    let clock = b.clock();
    for id in ["s1", "s2", "s3", "s4", "s5", "s6", "s7"] {
        conversation(&service, id).await;
        if id != "s5" {
            clock.advance_ms(10); // s5 and s6 share a last-activity time
        }
    }
    clock.advance_ms(10);
    append(&service, &service_principal(TENANT_A), "s2", None, vec![user_message("bump")]).await;
    clock.advance_ms(10);
    attach(&service, &owner(), "s4", "r1").await;
    let expected = ["s4", "s2", "s7", "s6", "s5", "s3", "s1"];
    let whole = service.list(&owner(), &ListRequest::default()).await.unwrap();
    assert_eq!(ids(&whole.items), expected);
    assert_eq!(whole.next_cursor, None);
    for page_size in [1, 2, 3, 7] {
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let request = ListRequest { limit: Some(page_size), cursor: cursor.clone(), ..ListRequest::default() };
            let page = service.list(&owner(), &request).await.unwrap();
            assert!(page.items.len() <= page_size);
            seen.extend(ids(&page.items));
            cursor = page.next_cursor;
            if cursor.is_none() {
                break;
            }
        }
        assert_eq!(seen, expected, "pages of {page_size}");
    }
    let invalid =
        service.list(&owner(), &ListRequest { cursor: Some("not-a-cursor".into()), ..ListRequest::default() }).await;
    assert_eq!(label(&invalid), "invalid");
    let too_big = service.list(&owner(), &ListRequest { limit: Some(1_001), ..ListRequest::default() }).await;
    assert_eq!(label(&too_big), "limit_exceeded");
}

/// R-S12: filters by status, label, user, project and last-activity window combine.
pub async fn list_filters_by_status_label_user_project_and_time(b: &dyn ServiceBackend) {
    let service = b.service();
    let clock = b.clock();
    let start = clock.now();
    for id in ["a", "b", "c", "d"] {
        conversation(&service, id).await;
        clock.advance_ms(100);
    }
    let bob = user_principal(TENANT_A, OTHER_USER, Some(OTHER_PROJECT));
    create(&service, &bob, "e", serial(DAY_MS, DAY_MS)).await;
    append(&service, &service_principal(TENANT_A), "e", None, vec![user_message("bob")]).await;
    service.close(&owner(), &sid("b"), ClosePolicy::Refuse, None).await.unwrap();
    attach(&service, &owner(), "c", "r1").await;
    service.detach(&owner(), &sid("c"), &run("r1"), "completed", None).await.unwrap();
    for id in ["a", "c"] {
        let update =
            MetadataUpdate { labels: Some(BTreeSet::from(["starred".to_owned()])), ..MetadataUpdate::default() };
        service.update_metadata(&owner(), &sid(id), update).await.unwrap();
    }
    let service_principal = service_principal(TENANT_A);
    let cases: [(ListRequest, &[&str]); 8] = [
        (ListRequest::default(), &["e", "c", "d", "b", "a"]),
        (ListRequest { statuses: vec![Status::Closed], ..ListRequest::default() }, &["b"]),
        (ListRequest { statuses: vec![Status::Active, Status::Idle], ..ListRequest::default() }, &["e", "c", "d", "a"]),
        (ListRequest { label: Some("starred".into()), ..ListRequest::default() }, &["c", "a"]),
        (ListRequest { user: Some(user(OTHER_USER)), ..ListRequest::default() }, &["e"]),
        (ListRequest { project: Some(project(PROJECT)), ..ListRequest::default() }, &["c", "d", "b", "a"]),
        (
            ListRequest {
                active_since: Some(start.plus_ms(100)),
                active_before: Some(start.plus_ms(400)),
                ..ListRequest::default()
            },
            &["d", "b"],
        ),
        (ListRequest { label: Some("starred".into()), statuses: vec![Status::Idle], ..ListRequest::default() }, &["c"]),
    ];
    for (request, expected) in cases {
        let page = service.list(&service_principal, &request).await.unwrap();
        assert_eq!(ids(&page.items), expected, "{request:?}");
        assert!(page.items.iter().all(|record| record.header.scope.tenant == tenant(TENANT_A)));
    }
}

/// R-S12: sessions without a conversation event (none yet, or only turn markers and
/// extension events) are hidden unless `include_blank`; the first conversation event
/// makes a session visible.
pub async fn list_hides_blank_sessions_unless_asked(b: &dyn ServiceBackend) {
    let service = b.service();
    create(&service, &owner(), "empty", serial(DAY_MS, DAY_MS)).await;
    create(&service, &owner(), "markers", serial(DAY_MS, DAY_MS)).await;
    append(
        &service,
        &service_principal(TENANT_A),
        "markers",
        None,
        vec![
            event("turn/start", serde_json::json!({"turn": 0})),
            event("myapp/progress", serde_json::json!({"pct": 10})),
        ],
    )
    .await;
    conversation(&service, "talked").await;
    let visible = service.list(&owner(), &ListRequest::default()).await.unwrap();
    assert_eq!(ids(&visible.items), ["talked"]);
    let everything =
        service.list(&owner(), &ListRequest { include_blank: true, ..ListRequest::default() }).await.unwrap();
    let all: BTreeSet<String> = ids(&everything.items).into_iter().collect();
    assert_eq!(all, BTreeSet::from(["empty".to_owned(), "markers".to_owned(), "talked".to_owned()]));
    append(&service, &service_principal(TENANT_A), "markers", None, vec![user_message("now we talk")]).await;
    let visible = service.list(&owner(), &ListRequest::default()).await.unwrap();
    let visible: BTreeSet<String> = ids(&visible.items).into_iter().collect();
    assert_eq!(visible, BTreeSet::from(["markers".to_owned(), "talked".to_owned()]));
    assert!(!stored(&service, TENANT_A, "markers").await.unwrap().blank);
    assert!(stored(&service, TENANT_A, "empty").await.unwrap().blank);
}
