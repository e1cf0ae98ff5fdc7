//! Scoped memory through the service: an import's bindings held to a put's rule, what a
//! session's delete counts of its memory, the audit records of every deletion of
//! memory (one item, a batch, the sweeps), and a tenant's own quota set by an admin
//! (`docs/reference/memory.md`).

use super::fixtures::*;
use super::ServiceBackend;
use berth_catalog::scoped::{MemoryPut, MemoryQuota, Namespace, TenantQuota};
use berth_catalog::{AuditEntry, RetentionPolicy};
use berth_core::limits::Limit;
use berth_core::{Error, JsonText};
use berth_service::{AppendRequest, Principal, SessionService};
use serde_json::json;

fn ns(text: &str) -> Namespace {
    Namespace::parse(text).expect("a valid namespace")
}

fn put(namespace: &str, key: &str, value: &str) -> MemoryPut {
    MemoryPut {
        namespace: ns(namespace),
        key: key.into(),
        value: JsonText::parse(value).expect("valid JSON"),
        expected_revision: None,
        ttl_ms: None,
        bound_to: None,
    }
}

fn bound(namespace: &str, key: &str, session: &str) -> MemoryPut {
    MemoryPut { bound_to: Some(sid(session)), ..put(namespace, key, "1") }
}

/// A memory export (as `memory_export` writes it) of items (namespace, key, bound to).
fn export_of(items: &[(&str, &str, Option<&str>)]) -> Vec<u8> {
    let mut text = format!("{}\n", json!({"berth_memory_export": 1, "prefix": null}));
    for (namespace, key, session) in items {
        let item = json!({
            "namespace": namespace, "key": key, "value": 1, "revision": 1, "created_at": CLOCK_MS,
            "updated_at": CLOCK_MS, "expires_at": null, "ttl_ms": null, "bound_to": session,
        });
        text.push_str(&format!("{item}\n"));
    }
    text.into_bytes()
}

const CLOCK_MS: u64 = super::CLOCK_START_MS;

/// The audit entries of `tenant_id` past the first `from`.
async fn audit_since(service: &SessionService, tenant_id: &str, from: usize) -> Vec<AuditEntry> {
    audit_entries(service, tenant_id).await.split_off(from)
}

/// An append of one note carrying `writes` (keyed, as carried writes must be).
async fn append_carrying(service: &SessionService, principal: &Principal, id: &str, key: &str, writes: Vec<MemoryPut>) {
    let request = AppendRequest {
        memory: writes,
        run: None,
        expected_seq: None,
        events: vec![event("note/text", json!({"text": key}))],
        idempotency_key: Some(key.into()),
    };
    service.append(principal, &sid(id), request).await.unwrap_or_else(|error| panic!("append to {id}: {error}"));
}

/// An import line bound to a session is held to exactly the put's rule: the session
/// must be one the importing key may access. Another user's session and a missing one
/// are the same `NotFound` (no existence oracle), nothing of the import is stored, and
/// the other user's delete of their session can never take this user's item. A
/// binding to the importer's own session is kept, and goes with that session.
pub async fn an_imported_binding_is_held_to_the_puts_rule(b: &dyn ServiceBackend) {
    let service = b.service();
    let (alice, bob) = (user_principal(TENANT_A, OWNER, None), user_principal(TENANT_A, OTHER_USER, None));
    create(&service, &bob, "bobs", serial(DAY_MS, DAY_MS)).await;
    create(&service, &alice, "alices", serial(DAY_MS, DAY_MS)).await;
    for session in ["bobs", "missing"] {
        let put = service.memory_put(&alice, bound("user/alice", "k", session)).await;
        assert_eq!(label(&put), "not_found(session)", "a put bound to {session}");
        let imported = service.memory_import(&alice, &export_of(&[("user/alice", "k", Some(session))])).await;
        assert_eq!(label(&imported), label(&put), "an import bound to {session} answers as the put");
        let get = service.memory_get(&alice, &ns("user/alice"), "k", false).await;
        assert_eq!(label(&get), "not_found(memory item)", "nothing imported");
    }
    // Nothing of a refused import is stored, not even the lines before the bad one.
    let two = export_of(&[("user/alice", "first", Some("alices")), ("user/alice", "second", Some("bobs"))]);
    assert_eq!(label(&service.memory_import(&alice, &two).await), "not_found(session)");
    assert_eq!(label(&service.memory_get(&alice, &ns("user/alice"), "first", false).await), "not_found(memory item)");
    // Bob's delete leaves alice's memory alone; her own binding is kept and goes with hers.
    service.delete(&bob, &sid("bobs"), None).await.expect("bob deletes his session");
    assert_eq!(service.memory_import(&alice, &export_of(&[("user/alice", "own", Some("alices"))])).await.unwrap(), 1);
    let item = service.memory_get(&alice, &ns("user/alice"), "own", false).await.unwrap();
    assert_eq!(item.bound_to, Some(sid("alices")));
    service.delete(&alice, &sid("alices"), None).await.expect("alice deletes hers");
    assert_eq!(label(&service.memory_get(&alice, &ns("user/alice"), "own", false).await), "not_found(memory item)");
}

/// A session's delete counts, in its audit record, the items that were bound to it and
/// deleted — not berth's own bookkeeping of its carried writes (a marker and a scope
/// index entry each) — and usage reports one carried write as one item.
pub async fn a_session_delete_counts_the_items_bound_to_it(b: &dyn ServiceBackend) {
    let service = b.service();
    let principal = service_principal(TENANT_A);
    for (id, writes) in [
        ("carried", vec![put("user/alice", "name", r#""Al""#)]),
        ("carried-bound", vec![put("user/alice", "plan", "1"), bound("user/alice/s", "draft", "carried-bound")]),
    ] {
        create(&service, &principal, id, serial(DAY_MS, DAY_MS)).await;
        append_carrying(&service, &principal, id, id, writes).await;
    }
    let (usage, _) = service.memory_usage(&principal).await.unwrap();
    assert_eq!(usage.items, 3, "three carried writes, three items");
    for (id, bound_items) in [("carried", 0), ("carried-bound", 1)] {
        service.delete(&principal, &sid(id), None).await.expect("delete");
        let deletion = audited(&service, TENANT_A, "delete").await.pop().expect("the delete's record");
        assert_eq!(deletion.draft.details["memory_items"], bound_items, "{id}: {:?}", deletion.draft.details);
    }
    let (usage, _) = service.memory_usage(&principal).await.unwrap();
    assert_eq!(usage.items, 2, "the bound item went with its session");
}

/// Every deletion of memory leaves an audit record: one item (`memory.delete`, with the
/// key), a batch (one record, counts per scope; none when nothing was there), the TTL
/// sweep and the tenant's memory retention (`memory.expire`, `memory.retention`: one
/// record per batch with counts per scope, by `system:memory`).
pub async fn every_deletion_of_memory_is_audited(b: &dyn ServiceBackend) {
    let service = b.service();
    let alice = user_principal(TENANT_A, OWNER, None);
    for key in ["a", "b", "c"] {
        service.memory_put(&alice, put("user/alice", key, "1")).await.unwrap();
    }
    service.memory_put(&alice, put("user/alice/notes", "n", "22")).await.unwrap();
    let before = audit_entries(&service, TENANT_A).await.len();
    service.memory_delete(&alice, &ns("user/alice"), "a", Some(1)).await.unwrap();
    let records = audit_since(&service, TENANT_A, before).await;
    assert_eq!(records.len(), 1);
    assert_eq!((records[0].draft.action.as_str(), records[0].draft.actor.as_str()), ("memory.delete", "user:alice"));
    assert_eq!(records[0].draft.details, json!({"namespace": "user/alice", "key": "a", "revision": 1, "bytes": 12}));
    let refused = service.memory_delete(&alice, &ns("user/alice"), "b", Some(7)).await;
    assert_eq!(label(&refused), "revision_conflict");
    assert_eq!(audit_since(&service, TENANT_A, before).await.len(), 1, "a refused delete records nothing");

    let keys =
        vec![(ns("user/alice"), "b".into()), (ns("user/alice"), "absent".into()), (ns("user/alice/notes"), "n".into())];
    let deleted = service.memory_delete_many(&alice, keys.clone()).await.unwrap();
    assert_eq!(deleted.len(), 2);
    let records = audit_since(&service, TENANT_A, before).await;
    assert_eq!(records.len(), 2, "one record for the batch");
    let details = &records[1].draft.details;
    assert_eq!((details["items"].clone(), details["scopes"]["user/alice"]["items"].clone()), (json!(2), json!(2)));
    assert!(service.memory_delete_many(&alice, keys).await.unwrap().is_empty());
    assert_eq!(audit_since(&service, TENANT_A, before).await.len(), 2, "nothing deleted, nothing recorded");
    let bob = user_principal(TENANT_A, OTHER_USER, None);
    let denied = service.memory_delete_many(&bob, vec![(ns("user/alice"), "c".into())]).await;
    assert_eq!(label(&denied), "forbidden");

    // The sweeps.
    let short = MemoryPut { ttl_ms: Some(10), ..put("user/alice/tmp", "t", "1") };
    service.memory_put(&alice, short).await.unwrap();
    service
        .memory_put(&service_principal(TENANT_A), MemoryPut { ttl_ms: Some(10), ..put("app/faq", "t", "1") })
        .await
        .unwrap();
    b.clock().advance_ms(20);
    let before = audit_entries(&service, TENANT_A).await.len();
    let report = service.sweep(100).await.unwrap();
    assert_eq!(report.memory_removed, 2);
    let records = audit_since(&service, TENANT_A, before).await;
    let expired: Vec<&AuditEntry> = records.iter().filter(|entry| entry.draft.action == "memory.expire").collect();
    assert_eq!(expired.len(), 1, "one record for the batch: {records:?}");
    assert_eq!(expired[0].draft.actor, "system:memory");
    assert_eq!(expired[0].draft.details["items"], 2);
    assert_eq!(expired[0].draft.details["scopes"]["user/alice"]["items"], 1);
    assert_eq!(expired[0].draft.details["scopes"]["app/faq"]["items"], 1);
    let policy = RetentionPolicy { memory_max_age_ms: Some(5), ..RetentionPolicy::default() };
    service.set_retention(&admin(TENANT_A), policy).await.unwrap();
    let report = service.sweep(100).await.unwrap();
    assert_eq!(report.memory_removed, 1, "c");
    let retention = audited(&service, TENANT_A, "memory.retention").await;
    assert_eq!(retention.len(), 1);
    assert_eq!(retention[0].draft.details["scopes"]["user/alice"], json!({"items": 1, "bytes": 12}));
    assert_eq!(service.verify_audit(&admin(TENANT_A)).await.unwrap().broken_at, None);
}

/// An admin sets the tenant's own memory quota (audited; any other role is refused and
/// audited): a put, a carried append and an import past it are `LimitExceeded` naming
/// the limit, with nothing stored; usage reports the quota that applies; another tenant
/// keeps the service's default; limits not given go back to it.
pub async fn an_admin_sets_the_tenants_memory_quota(b: &dyn ServiceBackend) {
    let service = b.service();
    let (admin_a, svc) = (admin(TENANT_A), service_principal(TENANT_A));
    let denied = service.set_memory_quota(&svc, TenantQuota { items: Some(1), bytes: None }).await;
    assert_eq!(label(&denied), "forbidden");
    assert_eq!(audited(&service, TENANT_A, "memory.quota").await[0].draft.outcome, "denied");
    let (usage, quota) = service.set_memory_quota(&admin_a, TenantQuota { items: Some(2), bytes: None }).await.unwrap();
    assert_eq!((usage.items, quota), (0, MemoryQuota { items: 2, ..service.memory_quota() }));
    let recorded = audited(&service, TENANT_A, "memory.quota").await.pop().unwrap();
    assert_eq!((recorded.draft.outcome.as_str(), &recorded.draft.details), ("ok", &json!({"items": 2, "bytes": null})));
    service.memory_put(&svc, put("app/a", "1", "1")).await.unwrap();
    service.memory_put(&svc, put("app/a", "2", "1")).await.unwrap();
    let refused = service.memory_put(&svc, put("app/a", "3", "1")).await.unwrap_err();
    assert!(matches!(refused, Error::LimitExceeded { what: Limit::MemoryItems, limit: 2, actual: 3 }), "{refused:?}");
    create(&service, &svc, "s", serial(DAY_MS, DAY_MS)).await;
    let carried = AppendRequest {
        memory: vec![put("app/a", "3", "1")],
        run: None,
        expected_seq: None,
        events: vec![event("note/text", json!({}))],
        idempotency_key: Some("k".into()),
    };
    let refused = service.append(&svc, &sid("s"), carried).await.unwrap_err();
    assert!(matches!(refused, Error::LimitExceeded { what: Limit::MemoryItems, .. }), "{refused:?}");
    let export = export_of(&[("app/a", "3", None)]);
    assert_eq!(label(&service.memory_import(&svc, &export).await), "limit_exceeded");
    assert_eq!(label(&service.memory_get(&svc, &ns("app/a"), "3", false).await), "not_found(memory item)");
    let (usage, quota) = service.memory_usage(&svc).await.unwrap();
    assert_eq!((usage.items, quota.items), (2, 2));
    // Another tenant keeps the default.
    let (_, theirs) = service.memory_usage(&service_principal(TENANT_B)).await.unwrap();
    assert_eq!(theirs, service.memory_quota());
    // The bytes alone; the items back to the default.
    let (_, quota) = service.set_memory_quota(&admin_a, TenantQuota { items: None, bytes: Some(1) }).await.unwrap();
    assert_eq!(quota, MemoryQuota { bytes: 1, ..service.memory_quota() });
    let refused = service.memory_put(&svc, put("app/a", "3", "1")).await.unwrap_err();
    assert!(matches!(refused, Error::LimitExceeded { what: Limit::MemoryBytes, limit: 1, .. }), "{refused:?}");
    service.set_memory_quota(&admin_a, TenantQuota::default()).await.unwrap();
    service.memory_put(&svc, put("app/a", "3", "1")).await.expect("the default again");
}
