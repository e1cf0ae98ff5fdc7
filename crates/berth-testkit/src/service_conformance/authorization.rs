//! Authorization clauses (R-S1, R-S10 denials): the matrix operation × principal ×
//! target, role-only operations, create/import scope, ids across tenants, listing scope.

use super::fixtures::*;
use super::ServiceBackend;
use berth_catalog::RetentionPolicy;
use berth_core::lifecycle::Status;
use berth_core::{Error, SessionId};
use berth_service::{
    AppendRequest, ClosePolicy, CreateSession, ListRequest, MetadataUpdate, OnBusy, Principal, SessionService,
};
use std::collections::BTreeSet;

/// Who calls, relative to the owner of the existing session (alice, p1, tenant-a).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Owner,
    /// bob, p1, tenant-a.
    OtherUser,
    /// alice, p2, tenant-a.
    OtherProject,
    /// alice, p1, tenant-b: the same user and project ids in another tenant.
    OtherTenant,
    /// tenant-a's service principal.
    Service,
    /// tenant-a's admin.
    Admin,
}

const WHO: [Who; 6] = [Who::Owner, Who::OtherUser, Who::OtherProject, Who::OtherTenant, Who::Service, Who::Admin];

fn principal(who: Who) -> Principal {
    match who {
        Who::Owner => owner(),
        Who::OtherUser => user_principal(TENANT_A, OTHER_USER, Some(PROJECT)),
        Who::OtherProject => user_principal(TENANT_A, OWNER, Some(OTHER_PROJECT)),
        Who::OtherTenant => user_principal(TENANT_B, OWNER, Some(PROJECT)),
        Who::Service => service_principal(TENANT_A),
        Who::Admin => admin(TENANT_A),
    }
}

/// Which session the call names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// A tenant-a session of alice/p1 with her run `run-owner` attached and two events.
    Existing,
    /// An id that exists nowhere.
    Missing,
    /// An id that exists only in tenant-z (owned by an alice/p1 there, with a run).
    InAnotherTenant,
}

const MISSING_ID: &str = "nowhere";
const ELSEWHERE_ID: &str = "elsewhere";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Get,
    Read,
    ReadBefore,
    Append,
    Attach,
    Heartbeat,
    Detach,
    Resume,
    UpdateMetadata,
    Close,
    Fork,
    Export,
    ExportZip,
    Delete,
    Reopen,
}

const OPS: [Op; 15] = [
    Op::Get,
    Op::Read,
    Op::ReadBefore,
    Op::Append,
    Op::Attach,
    Op::Heartbeat,
    Op::Detach,
    Op::Resume,
    Op::UpdateMetadata,
    Op::Close,
    Op::Fork,
    Op::Export,
    Op::ExportZip,
    Op::Delete,
    Op::Reopen,
];

impl Op {
    /// The action a denial of this operation is audited under.
    fn audit_action(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Read | Op::ReadBefore => "read",
            Op::Append => "append",
            // Resume is an attach first (R-S6); its denial is the attach's.
            Op::Attach | Op::Resume => "attach",
            Op::Heartbeat => "heartbeat",
            Op::Detach => "detach",
            Op::UpdateMetadata => "update",
            Op::Close => "close",
            Op::Fork => "fork",
            Op::Export | Op::ExportZip => "export",
            Op::Delete => "delete",
            Op::Reopen => "reopen",
        }
    }
}

/// What a cell must return.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Expect {
    Ok,
    /// Exactly `Error::NotFound {what: "session", id: <the requested id>}`.
    NotFound,
    /// A role violation: `Forbidden`, whatever the target.
    Forbidden,
}

/// The matrix. Owners, the tenant's service principal and its admin may do every
/// session operation; `reopen` needs the admin role (checked before the lookup, so it
/// is `Forbidden` for everyone else whatever the target). Every other caller, and every
/// caller naming a missing or another tenant's session, gets the same `NotFound`.
fn expect(op: Op, who: Who, target: Target) -> Expect {
    match (op, who, target) {
        (Op::Reopen, Who::Admin, Target::Existing) => Expect::Ok,
        (Op::Reopen, Who::Admin, _) => Expect::NotFound,
        (Op::Reopen, _, _) => Expect::Forbidden,
        (_, Who::Owner | Who::Service | Who::Admin, Target::Existing) => Expect::Ok,
        _ => Expect::NotFound,
    }
}

async fn prepare_existing(service: &SessionService, op: Op, id: &str) {
    create(service, &owner(), id, parallel(4, DAY_MS, DAY_MS)).await;
    if op == Op::Reopen {
        let closed = service.close(&owner(), &sid(id), ClosePolicy::Refuse, None).await;
        closed.expect("close before reopen");
        return;
    }
    attach(service, &owner(), id, "run-owner").await;
    append(service, &owner(), id, Some("run-owner"), vec![user_message("hi"), user_message("there")]).await;
}

async fn perform(service: &SessionService, op: Op, who: Who, id: &SessionId) -> Result<(), Error> {
    let p = principal(who);
    match op {
        Op::Get => service.get(&p, id).await.map(drop),
        Op::Read => service.read(&p, id, 0, None).await.map(drop),
        Op::ReadBefore => service.read_before(&p, id, u64::MAX, 10).await.map(drop),
        Op::Append => {
            let request = AppendRequest {
                memory: Vec::new(),
                run: Some(run("run-owner")),
                expected_seq: None,
                events: vec![user_message("appended")],
                idempotency_key: None,
            };
            service.append(&p, id, request).await.map(drop)
        }
        Op::Attach => service.attach(&p, id, attach_request("run-new", OnBusy::Reject)).await.map(drop),
        Op::Heartbeat => service.heartbeat(&p, id, &run("run-owner")).await.map(drop),
        Op::Detach => service.detach(&p, id, &run("run-owner"), "completed", None).await.map(drop),
        Op::Resume => service.resume(&p, id, attach_request("run-new", OnBusy::Reject)).await.map(drop),
        Op::UpdateMetadata => {
            let update = MetadataUpdate { title: Some(Some("mine now".into())), ..MetadataUpdate::default() };
            service.update_metadata(&p, id, update).await.map(drop)
        }
        Op::Close => service.close(&p, id, ClosePolicy::CancelRuns, None).await.map(drop),
        Op::Fork => service.fork(&p, id, None, Some(fork_id(id))).await.map(drop),
        Op::Export => service.export(&p, id).await.map(drop),
        Op::ExportZip => service.export_zip(&p, id).await.map(drop),
        Op::Delete => service.delete(&p, id, None).await,
        Op::Reopen => service.reopen(&p, id).await.map(drop),
    }
}

fn fork_id(id: &SessionId) -> SessionId {
    sid(&format!("{id}.fork"))
}

/// R-S1: every session operation × {owner, same tenant other user, same user other
/// project, other tenant, service, admin} × {existing, missing, existing only in another
/// tenant}. Only the allowed cells succeed. A session outside the caller's reach and a
/// missing one give the identical `Error` value (naming only the requested id). Every
/// denial appends exactly one `denied` audit entry to the *caller's* tenant and changes
/// nothing else: catalog records, event logs and every other tenant's audit log are
/// compared before and after.
pub async fn matrix_session_operations(b: &dyn ServiceBackend) {
    let service = b.service();
    // The bystanders: another user's session in tenant-a, and the tenant-z session.
    create(&service, &user_principal(TENANT_A, OTHER_USER, Some(PROJECT)), "bystander", serial(DAY_MS, DAY_MS)).await;
    append(&service, &service_principal(TENANT_A), "bystander", None, vec![user_message("mine")]).await;
    let elsewhere_owner = user_principal(TENANT_Z, OWNER, Some(PROJECT));
    create(&service, &elsewhere_owner, ELSEWHERE_ID, parallel(4, DAY_MS, DAY_MS)).await;
    attach(&service, &elsewhere_owner, ELSEWHERE_ID, "run-owner").await;
    append(&service, &elsewhere_owner, ELSEWHERE_ID, Some("run-owner"), vec![user_message("z")]).await;

    let mut mismatches = Vec::new();
    for op in OPS {
        for who in WHO {
            for target in [Target::Existing, Target::Missing, Target::InAnotherTenant] {
                let id = match target {
                    Target::Existing => sid(&format!("az-{op:?}-{who:?}").to_lowercase()),
                    Target::Missing => sid(MISSING_ID),
                    Target::InAnotherTenant => sid(ELSEWHERE_ID),
                };
                if target == Target::Existing {
                    prepare_existing(&service, op, id.as_str()).await;
                }
                let cell = format!("{op:?} × {who:?} × {target:?}");
                let expected = expect(op, who, target);
                let problems = run_cell(&service, op, who, &id, &expected).await;
                mismatches.extend(problems.into_iter().map(|problem| format!("{cell}: {problem}")));
                if target == Target::Existing {
                    for leftover in [id.clone(), fork_id(&id)] {
                        let _ = service.delete(&admin(TENANT_A), &leftover, None).await;
                    }
                }
            }
        }
    }
    assert_no_mismatches(b.name(), "the authorization matrix", &mismatches);
}

/// Runs one cell; returns what went wrong (nothing when the cell holds).
async fn run_cell(service: &SessionService, op: Op, who: Who, id: &SessionId, expected: &Expect) -> Vec<String> {
    let caller = principal(who);
    let before = snapshot(service).await;
    let audit_length = before.audit_heads.get(&caller.tenant).cloned().flatten().map_or(0, |(seq, _)| seq + 1);
    let result = perform(service, op, who, id).await;
    let mut problems = Vec::new();
    let error = match (expected, result) {
        (Expect::Ok, Ok(())) => return problems,
        (Expect::Ok, Err(error)) => {
            problems.push(format!("expected ok, got {error:?}"));
            return problems;
        }
        (_, Ok(())) => {
            problems.push(format!("expected {expected:?}, but it succeeded"));
            return problems;
        }
        (Expect::NotFound, Err(error)) => {
            if error != Error::session_not_found(id) {
                problems.push(format!("expected NotFound naming only {id}, got {error:?}"));
            }
            error
        }
        (Expect::Forbidden, Err(error)) => {
            if error.code() != "forbidden" {
                problems.push(format!("expected forbidden, got {error:?}"));
            }
            error
        }
    };
    let after = snapshot(service).await;
    if after.clone().without_audit_of(&caller.tenant) != before.clone().without_audit_of(&caller.tenant) {
        problems.push("a denied call changed stored data".into());
    }
    let tenant_id = caller.tenant.to_string();
    let added = audit_from(service, &tenant_id, audit_length).await;
    match added.as_slice() {
        [entry] => {
            let draft = &entry.draft;
            let wanted = (caller.actor(), op.audit_action(), Some(id.clone()), "denied", Some(error.code()));
            let found = (
                draft.actor.clone(),
                draft.action.as_str(),
                draft.session.clone(),
                draft.outcome.as_str(),
                draft.details.get("code").and_then(|code| code.as_str()),
            );
            if found != wanted {
                problems.push(format!("denial audited as {found:?}, expected {wanted:?}"));
            }
        }
        other => {
            problems.push(format!("expected exactly one denial entry in {tenant_id}'s audit log, found {other:?}"))
        }
    }
    problems
}

/// R-S1/R-S10: reading and verifying the audit log and setting retention need the
/// admin role; users and service principals get `Forbidden`, and each refusal is
/// audited as a denial in the caller's tenant. An admin sees only its tenant's log.
pub async fn role_only_operations_are_forbidden_and_audited(b: &dyn ServiceBackend) {
    let service = b.service();
    create(&service, &owner(), "a-session", serial(DAY_MS, DAY_MS)).await;
    create(&service, &user_principal(TENANT_B, OWNER, None), "b-session", serial(DAY_MS, DAY_MS)).await;
    let callers =
        [owner(), user_principal(TENANT_A, OTHER_USER, None), service_principal(TENANT_A), service_principal(TENANT_B)];
    for caller in callers {
        let tenant_id = caller.tenant.to_string();
        let outcomes = [
            ("read_audit", service.audit_log(&caller, 0, 100).await.map(drop)),
            ("verify_audit", service.verify_audit(&caller).await.map(drop)),
            ("retention", service.set_retention(&caller, RetentionPolicy::default()).await),
        ];
        for (action, outcome) in outcomes {
            assert_eq!(label(&outcome), "forbidden", "{action} by {caller:?}");
            let denials: Vec<_> = audit_entries(&service, &tenant_id)
                .await
                .into_iter()
                .filter(|entry| {
                    entry.draft.action == action
                        && entry.draft.actor == caller.actor()
                        && entry.draft.outcome == "denied"
                })
                .collect();
            assert_eq!(denials.len(), 1, "{action} by {caller:?} audited once as denied");
        }
    }
    assert_eq!(
        service.catalog().retention(&tenant(TENANT_A)).await.unwrap(),
        None,
        "refused set_retention stored nothing"
    );
    for tenant_id in [TENANT_A, TENANT_B] {
        let log = service.audit_log(&admin(tenant_id), 0, 1_000).await.expect("admin reads the audit");
        assert!(!log.is_empty());
        assert!(log.iter().all(|entry| entry.draft.tenant == tenant(tenant_id)), "only {tenant_id}'s entries");
        let verdict = service.verify_audit(&admin(tenant_id)).await.expect("admin verifies");
        assert_eq!(verdict.broken_at, None);
        assert_eq!(verdict.entries, log.len() as u64);
    }
    let policy = RetentionPolicy { idle_ttl_ms: Some(HOUR_MS), ..RetentionPolicy::default() };
    service.set_retention(&admin(TENANT_A), policy.clone()).await.expect("admin sets retention");
    assert_eq!(service.catalog().retention(&tenant(TENANT_A)).await.unwrap(), Some(policy));
    assert_eq!(service.catalog().retention(&tenant(TENANT_B)).await.unwrap(), None);
}

/// R-S1: the tenant of a new session is always the caller's; a `user` principal
/// creates only for itself and (when it has a project) only in its project; `service`
/// and `admin` create for any user of their tenant. An export imports only into a scope
/// the caller may access. Refusals are `Forbidden`, audited, and store nothing.
pub async fn create_and_import_stay_in_the_callers_scope(b: &dyn ServiceBackend) {
    let service = b.service();
    let for_bob = CreateSession { id: Some(sid("for-bob")), user: Some(user(OTHER_USER)), ..CreateSession::default() };
    let in_p2 =
        CreateSession { id: Some(sid("in-p2")), project: Some(project(OTHER_PROJECT)), ..CreateSession::default() };
    for request in [for_bob.clone(), in_p2.clone()] {
        let before = snapshot(&service).await;
        let refused = service.create(&owner(), request.clone()).await;
        assert_eq!(label(&refused), "forbidden", "{request:?}");
        assert_eq!(
            snapshot(&service).await.without_audit_of(&tenant(TENANT_A)),
            before.without_audit_of(&tenant(TENANT_A))
        );
        let entry = audit_entries(&service, TENANT_A).await.pop().expect("denial audited");
        assert_eq!(
            (entry.draft.action.as_str(), entry.draft.outcome.as_str(), entry.draft.actor.clone()),
            ("create", "denied", owner().actor())
        );
    }
    let created = service.create(&service_principal(TENANT_A), for_bob).await.expect("service creates for bob");
    assert_eq!(created.header.scope.user, user(OTHER_USER));
    assert_eq!(created.header.scope.tenant, tenant(TENANT_A));
    let alice_anywhere = user_principal(TENANT_A, OWNER, None);
    let created = service.create(&alice_anywhere, in_p2).await.expect("a project-less principal picks a project");
    assert_eq!(created.header.scope.project, Some(project(OTHER_PROJECT)));
    let mine = service
        .create(&owner(), CreateSession { id: Some(sid("mine")), ..CreateSession::default() })
        .await
        .expect("owner creates");
    assert_eq!(
        mine.header.scope,
        berth_core::Scope { tenant: tenant(TENANT_A), user: user(OWNER), project: Some(project(PROJECT)) }
    );
    let again = service.create(&owner(), CreateSession { id: Some(sid("mine")), ..CreateSession::default() }).await;
    assert_eq!(label(&again), "already_exists");

    append(&service, &service_principal(TENANT_A), "mine", None, vec![user_message("export me")]).await;
    let bytes = service.export(&owner(), &sid("mine")).await.expect("export");
    for intruder in [
        user_principal(TENANT_A, OTHER_USER, Some(PROJECT)),
        user_principal(TENANT_A, OWNER, Some(OTHER_PROJECT)),
        user_principal(TENANT_B, OWNER, Some(PROJECT)),
        service_principal(TENANT_B),
    ] {
        let before = snapshot(&service).await;
        let refused = service.import(&intruder, &bytes).await;
        assert_eq!(label(&refused), "forbidden", "import by {intruder:?}");
        assert_eq!(
            snapshot(&service).await.without_audit_of(&intruder.tenant),
            before.without_audit_of(&intruder.tenant),
            "a refused import stores nothing"
        );
        let entry = audit_entries(&service, intruder.tenant.as_str()).await.pop().expect("denial audited");
        assert_eq!(
            (entry.draft.action.as_str(), entry.draft.outcome.as_str(), entry.draft.actor.clone()),
            ("import", "denied", intruder.actor())
        );
    }
    let duplicate = service.import(&owner(), &bytes).await;
    assert_eq!(label(&duplicate), "already_exists", "the id exists in this tenant");
}

/// "The same id is not the same permission": one id in two tenants is two unrelated
/// sessions; each tenant sees, changes and deletes only its own.
pub async fn same_id_in_two_tenants_is_two_sessions(b: &dyn ServiceBackend) {
    let service = b.service();
    let alice_a = owner();
    let alice_b = user_principal(TENANT_B, OWNER, Some(PROJECT));
    create(&service, &alice_a, "shared", serial(DAY_MS, DAY_MS)).await;
    create(&service, &alice_b, "shared", serial(DAY_MS, DAY_MS)).await;
    append(&service, &service_principal(TENANT_A), "shared", None, vec![user_message("from a")]).await;
    append(&service, &service_principal(TENANT_B), "shared", None, vec![user_message("from b"), user_message("b2")])
        .await;
    let read_a = service.read(&alice_a, &sid("shared"), 0, None).await.unwrap();
    let read_b = service.read(&alice_b, &sid("shared"), 0, None).await.unwrap();
    assert_eq!(read_a.len(), 1);
    assert_eq!(data(&read_a[0])["content"], "from a");
    assert_eq!(read_b.len(), 2);
    assert_eq!(data(&read_b[0])["content"], "from b");
    service.close(&alice_b, &sid("shared"), ClosePolicy::Refuse, None).await.unwrap();
    assert_status(&service, TENANT_A, "shared", Status::Active).await;
    service.delete(&alice_b, &sid("shared"), None).await.unwrap();
    assert!(stored(&service, TENANT_B, "shared").await.is_none());
    assert_eq!(stored_log(&service, TENANT_B, "shared").await, None);
    assert_status(&service, TENANT_A, "shared", Status::Active).await;
    assert_eq!(stored_log(&service, TENANT_A, "shared").await.map(|log| log.len()), Some(1));
    assert_eq!(service.read(&alice_a, &sid("shared"), 0, None).await.unwrap(), read_a);
}

/// R-S1/R-S12: a `user` principal lists only its own sessions (only its project's when
/// it has one), whatever user or project it asks for; `service` and `admin` list the
/// whole tenant and may narrow it; nobody lists another tenant.
pub async fn listing_shows_only_what_the_principal_may_see(b: &dyn ServiceBackend) {
    let service = b.service();
    let sessions = [
        (TENANT_A, OWNER, PROJECT, "a-alice-p1"),
        (TENANT_A, OWNER, OTHER_PROJECT, "a-alice-p2"),
        (TENANT_A, OTHER_USER, PROJECT, "a-bob-p1"),
        (TENANT_B, OWNER, PROJECT, "b-alice-p1"),
    ];
    for (tenant_id, user_id, project_id, id) in sessions {
        create(&service, &user_principal(tenant_id, user_id, Some(project_id)), id, serial(DAY_MS, DAY_MS)).await;
    }
    let everything = ListRequest { include_blank: true, ..ListRequest::default() };
    let as_bob = ListRequest { user: Some(user(OTHER_USER)), ..everything.clone() };
    let in_p2 = ListRequest { project: Some(project(OTHER_PROJECT)), ..everything.clone() };
    let cases: [(Principal, &ListRequest, &[&str]); 9] = [
        (owner(), &everything, &["a-alice-p1"]),
        (owner(), &as_bob, &["a-alice-p1"]),
        (owner(), &in_p2, &["a-alice-p1"]),
        (user_principal(TENANT_A, OWNER, None), &everything, &["a-alice-p1", "a-alice-p2"]),
        (user_principal(TENANT_A, OTHER_USER, None), &everything, &["a-bob-p1"]),
        (service_principal(TENANT_A), &everything, &["a-alice-p1", "a-alice-p2", "a-bob-p1"]),
        (service_principal(TENANT_A), &as_bob, &["a-bob-p1"]),
        (admin(TENANT_A), &in_p2, &["a-alice-p2"]),
        (user_principal(TENANT_B, OWNER, Some(PROJECT)), &everything, &["b-alice-p1"]),
    ];
    for (principal, request, expected) in cases {
        let page = service.list(&principal, request).await.expect("list");
        let ids: BTreeSet<String> = page.items.iter().map(|record| record.header.id.to_string()).collect();
        let expected: BTreeSet<String> = expected.iter().map(|id| id.to_string()).collect();
        assert_eq!(ids, expected, "{principal:?} listing {request:?}");
    }
}
