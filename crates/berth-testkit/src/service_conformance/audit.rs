//! Audit clauses (R-S10): the per-tenant hash chain verifies when untouched, and
//! `verify_audit` reports where it breaks after the stored log is tampered with behind
//! the catalog's back: a changed field, a removed middle or last entry, a reorder.

use super::fixtures::*;
use super::ServiceBackend;
use crate::catalog_conformance::AuditTamper;
use berth_service::{ClosePolicy, SessionService};

const AUDITED: &str = "tenant-audited";
const BYSTANDER: &str = "tenant-bystander";

/// Produces eight audit entries in `tenant_id` (create ×2, attach, detach, close,
/// export, fork, forked) and returns their count.
async fn eight_entries(service: &SessionService, tenant_id: &str) -> u64 {
    let alice = user_principal(tenant_id, OWNER, None);
    create(service, &alice, "one", serial(DAY_MS, DAY_MS)).await;
    create(service, &alice, "two", serial(DAY_MS, DAY_MS)).await;
    attach(service, &alice, "one", "r1").await;
    service.detach(&alice, &sid("one"), &run("r1"), "completed", None).await.unwrap();
    service.close(&alice, &sid("one"), ClosePolicy::Refuse, None).await.unwrap();
    service.export(&alice, &sid("one")).await.unwrap();
    service.fork(&alice, &sid("one"), None, Some(sid("three"))).await.unwrap();
    let entries = audit_entries(service, tenant_id).await;
    assert_eq!(entries.len(), 8, "{entries:#?}");
    for (position, entry) in entries.iter().enumerate() {
        assert_eq!(entry.seq, position as u64);
        assert_eq!(entry.draft.tenant, tenant(tenant_id));
    }
    assert_eq!(entries[1].prev_hash, entries[0].hash, "each entry carries the previous hash");
    8
}

/// R-S10: an untouched chain verifies, in every tenant, and records every operation
/// with actor, time, action, session, revision and outcome.
pub async fn intact_chain_verifies(b: &dyn ServiceBackend) {
    let service = b.service();
    let count = eight_entries(&service, AUDITED).await;
    eight_entries(&service, BYSTANDER).await;
    let verdict = service.verify_audit(&admin(AUDITED)).await.unwrap();
    assert_eq!((verdict.entries, verdict.broken_at, verdict.reason), (count, None, None));
    let entries = audit_entries(&service, AUDITED).await;
    let actions: Vec<&str> = entries.iter().map(|entry| entry.draft.action.as_str()).collect();
    assert_eq!(actions, ["create", "create", "attach", "detach", "close", "export", "fork", "forked"]);
    let close = &entries[4].draft;
    assert_eq!(close.actor, "user:alice");
    assert_eq!(close.session, Some(sid("one")));
    assert_eq!(close.outcome, "ok");
    assert_eq!(close.time, berth_core::Clock::now(&*b.clock()));
    let stored_revision = stored(&service, AUDITED, "one").await.unwrap().revision;
    assert_eq!(close.revision, Some(stored_revision));
    // A restart: the old instance (and the write handles it keeps) is gone.
    drop(service);
    b.restart().await;
    let verdict = b.service().verify_audit(&admin(AUDITED)).await.unwrap();
    assert_eq!(verdict.broken_at, None, "the chain survives a restart");
}

/// Tampers with `AUDITED`'s stored log and checks `verify_audit` reports `broken_at`;
/// the bystander tenant still verifies.
async fn tamper_is_detected(b: &dyn ServiceBackend, how: AuditTamper) {
    let service = b.service();
    let count = eight_entries(&service, AUDITED).await;
    eight_entries(&service, BYSTANDER).await;
    b.tamper_audit(&tenant(AUDITED), how).await;
    let verdict = service.verify_audit(&admin(AUDITED)).await.unwrap();
    let expected_broken_at = match how {
        AuditTamper::ChangeField { seq } | AuditTamper::DeleteEntry { seq } => seq,
        AuditTamper::DeleteLast => count - 1,
        AuditTamper::Swap { first, second } => first.min(second),
    };
    assert_eq!(verdict.broken_at, Some(expected_broken_at), "{how:?}: {verdict:?}");
    assert!(verdict.reason.is_some());
    let bystander = service.verify_audit(&admin(BYSTANDER)).await.unwrap();
    assert_eq!(bystander.broken_at, None, "another tenant's chain is unaffected");
}

/// R-S10: changing one field of a middle entry breaks the chain at that entry.
pub async fn changed_field_is_detected(b: &dyn ServiceBackend) {
    tamper_is_detected(b, AuditTamper::ChangeField { seq: 3 }).await;
}

/// R-S10: removing a middle entry breaks the chain where it was.
pub async fn removed_middle_entry_is_detected(b: &dyn ServiceBackend) {
    tamper_is_detected(b, AuditTamper::DeleteEntry { seq: 4 }).await;
}

/// R-S10: removing the last entry is detected against the separately kept head.
pub async fn removed_last_entry_is_detected(b: &dyn ServiceBackend) {
    tamper_is_detected(b, AuditTamper::DeleteLast).await;
}

/// R-S10: swapping two entries breaks the chain at the first of them.
pub async fn reordered_entries_are_detected(b: &dyn ServiceBackend) {
    tamper_is_detected(b, AuditTamper::Swap { first: 2, second: 5 }).await;
}
