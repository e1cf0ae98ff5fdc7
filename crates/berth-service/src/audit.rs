//! Audit and retention: audit drafts and their recording (denials included, R-S10),
//! the admin-only audit log reads and chain verification, and retention policies.

use super::*;

impl SessionService {
    /// A draft audit record for `action` by `actor`, stamped now; callers fill the rest.
    pub(crate) fn audit_draft(&self, tenant: &berth_core::TenantId, actor: String, action: &str) -> AuditDraft {
        AuditDraft {
            tenant: tenant.clone(),
            time: self.now(),
            actor,
            action: action.to_owned(),
            session: None,
            revision: None,
            outcome: "ok".to_owned(),
            details: serde_json::Value::Null,
        }
    }

    /// Appends to the audit log. The operation it records already happened, so a
    /// failure here is logged loudly rather than turned into the operation's error.
    pub(crate) async fn audit(&self, draft: AuditDraft) {
        let (tenant, action) = (draft.tenant.clone(), draft.action.clone());
        if let Err(error) = self.catalog.append_audit(draft).await {
            tracing::error!(%tenant, action, %error, "audit append failed");
        }
    }

    pub(crate) async fn audit_ok(
        &self,
        principal: &Principal,
        action: &str,
        record: &SessionRecord,
        details: serde_json::Value,
    ) {
        self.audit(self.draft_ok(principal, action, record, details)).await;
    }

    /// The audit record of `principal`'s successful `action` on `record` (as stored).
    pub(crate) fn draft_ok(
        &self,
        principal: &Principal,
        action: &str,
        record: &SessionRecord,
        details: serde_json::Value,
    ) -> AuditDraft {
        let mut draft = self.audit_draft(&principal.tenant, principal.actor(), action);
        draft.session = Some(record.header.id.clone());
        draft.revision = Some(record.revision);
        draft.details = details;
        draft
    }

    /// The audit record of a lifecycle action the service took by itself.
    pub(crate) fn draft_system(&self, record: &SessionRecord, action: &str, details: serde_json::Value) -> AuditDraft {
        let key = record.key();
        let mut draft = self.audit_draft(&key.tenant, "system:lifecycle".into(), action);
        draft.session = Some(key.id);
        draft.revision = Some(record.revision);
        draft.details = details;
        draft
    }

    pub(crate) async fn denied(&self, principal: &Principal, action: &str, id: &SessionId, error: Error) -> Error {
        self.denied_in_tenant(principal, action, Some(id), error).await
    }

    /// Audits a denial (R-S10: every denied access is recorded) in the caller's tenant,
    /// for operations that may not name a session (create, import, the admin-only
    /// operations), and returns the error.
    pub(crate) async fn denied_in_tenant(
        &self,
        principal: &Principal,
        action: &str,
        id: Option<&SessionId>,
        error: Error,
    ) -> Error {
        let mut draft = self.audit_draft(&principal.tenant, principal.actor(), action);
        draft.session = id.cloned();
        draft.outcome = "denied".to_owned();
        draft.details = serde_json::json!({"code": error.code()});
        self.audit(draft).await;
        error
    }

    /// `require_admin`, with a refusal audited as a denial.
    pub(crate) async fn require_admin(&self, principal: &Principal, action: &str) -> Result<()> {
        match principal.require_admin(action) {
            Ok(()) => Ok(()),
            Err(error) => Err(self.denied_in_tenant(principal, action, None, error).await),
        }
    }

    /// Authorizes a store-wide operator action, such as a backup (it copies every
    /// tenant's data): an admin of `operator_tenant` only. A refusal is audited as a
    /// denial in the caller's tenant.
    pub async fn authorize_operator(
        &self,
        principal: &Principal,
        operator_tenant: &berth_core::TenantId,
        action: &str,
    ) -> Result<()> {
        self.require_admin(principal, action).await?;
        if principal.tenant != *operator_tenant {
            let error = Error::Forbidden {
                reason: format!("{action} reaches every tenant's data: only an admin key of the operator tenant may"),
            };
            return Err(self.denied_in_tenant(principal, action, None, error).await);
        }
        Ok(())
    }

    /// Records an operator action that changes nothing stored (a backup taken) in the
    /// operator's audit log, with `details`.
    pub async fn audit_operator_action(&self, principal: &Principal, action: &str, details: serde_json::Value) {
        let mut draft = self.audit_draft(&principal.tenant, principal.actor(), action);
        draft.details = details;
        self.audit(draft).await;
    }

    /// Admin only: the tenant's audit log from position `from`.
    pub async fn audit_log(&self, principal: &Principal, from: u64, limit: usize) -> Result<Vec<AuditEntry>> {
        self.require_admin(principal, "read_audit").await?;
        self.catalog.read_audit(&principal.tenant, from, limit.min(PAGE_SIZE_MAX)).await
    }

    /// Admin only: the entries from position `from` that match `filter`, at most `limit`.
    /// One call reads at most `AUDIT_SCAN_ENTRIES_MAX` entries, so a filter that matches
    /// rarely still answers quickly; `next_from` says where to continue (`None`: the scan
    /// reached the end of the log).
    pub async fn audit_search(
        &self,
        principal: &Principal,
        filter: &AuditFilter,
        from: u64,
        limit: usize,
    ) -> Result<AuditSearch> {
        self.require_admin(principal, "read_audit").await?;
        let limit = limit.clamp(1, PAGE_SIZE_MAX);
        let mut entries = Vec::new();
        let mut position = from;
        let scan_end = from.saturating_add(AUDIT_SCAN_ENTRIES_MAX as u64);
        while position < scan_end {
            let page_size = (scan_end - position).min(PAGE_SIZE_MAX as u64) as usize;
            let page = self.catalog.read_audit(&principal.tenant, position, page_size).await?;
            let Some(last) = page.last() else {
                return Ok(AuditSearch { entries, next_from: None });
            };
            let read_to = last.seq + 1;
            for entry in page.iter() {
                if filter.matches(entry) {
                    entries.push(entry.clone());
                    if entries.len() == limit {
                        return Ok(AuditSearch { entries, next_from: Some(entry.seq + 1) });
                    }
                }
            }
            if page.len() < page_size {
                return Ok(AuditSearch { entries, next_from: None });
            }
            position = read_to;
        }
        Ok(AuditSearch { entries, next_from: Some(position) })
    }

    /// The run history of one session the caller may read: its `attach`, `detach`,
    /// `abandon` and `repair` audit entries among the tenant's latest
    /// `AUDIT_SCAN_ENTRIES_MAX` entries, oldest first. Not admin-only: it is part of the
    /// session, and is authorized as reading it is (another user's session is `NotFound`).
    pub async fn run_history(&self, principal: &Principal, id: &SessionId) -> Result<Vec<AuditEntry>> {
        self.load(principal, id, "get").await?;
        const RUN_ACTIONS: [&str; 4] = ["attach", "detach", "abandon", "repair"];
        let Some((head_seq, _)) = self.catalog.audit_head(&principal.tenant).await? else {
            return Ok(Vec::new());
        };
        let mut position = (head_seq + 1).saturating_sub(AUDIT_SCAN_ENTRIES_MAX as u64);
        let mut history = Vec::new();
        while position <= head_seq {
            let page = self.catalog.read_audit(&principal.tenant, position, PAGE_SIZE_MAX).await?;
            let Some(last) = page.last() else { break };
            position = last.seq + 1;
            history.extend(page.into_iter().filter(|entry| {
                entry.draft.session.as_ref() == Some(id) && RUN_ACTIONS.contains(&entry.draft.action.as_str())
            }));
        }
        Ok(history)
    }

    /// Admin only: verifies the tenant's whole audit chain against its head.
    pub async fn verify_audit(&self, principal: &Principal) -> Result<AuditVerification> {
        self.require_admin(principal, "verify_audit").await?;
        verify_tenant_audit(self.catalog.as_ref(), &principal.tenant).await
    }

    pub async fn set_retention(&self, principal: &Principal, policy: RetentionPolicy) -> Result<()> {
        self.require_admin(principal, "retention").await?;
        self.catalog.set_retention(&principal.tenant, &policy).await?;
        let mut draft = self.audit_draft(&principal.tenant, principal.actor(), "retention");
        draft.details = serde_json::to_value(&policy).unwrap_or_default();
        self.audit(draft).await;
        Ok(())
    }
}

/// Reads a tenant's whole audit log and verifies it.
pub async fn verify_tenant_audit(catalog: &dyn Catalog, tenant: &berth_core::TenantId) -> Result<AuditVerification> {
    let mut entries = Vec::new();
    loop {
        let page = catalog.read_audit(tenant, entries.len() as u64, PAGE_SIZE_MAX).await?;
        let done = page.len() < PAGE_SIZE_MAX;
        entries.extend(page);
        if done {
            break;
        }
    }
    let head = catalog.audit_head(tenant).await?;
    Ok(berth_catalog::audit::verify(&entries, head))
}

/// The most audit entries one `audit_search` call reads.
pub const AUDIT_SCAN_ENTRIES_MAX: usize = 10_000;

/// What `audit_search` keeps: every field that is set must match exactly (times: the
/// half-open range `[since, before)`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub action: Option<String>,
    pub session: Option<berth_core::SessionId>,
    pub actor: Option<String>,
    pub since: Option<berth_core::Timestamp>,
    pub before: Option<berth_core::Timestamp>,
}

impl AuditFilter {
    pub fn matches(&self, entry: &AuditEntry) -> bool {
        let draft = &entry.draft;
        self.action.as_ref().is_none_or(|action| *action == draft.action)
            && self.session.as_ref().is_none_or(|session| draft.session.as_ref() == Some(session))
            && self.actor.as_ref().is_none_or(|actor| *actor == draft.actor)
            && self.since.is_none_or(|since| draft.time >= since)
            && self.before.is_none_or(|before| draft.time < before)
    }
}

/// One page of `audit_search`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditSearch {
    pub entries: Vec<AuditEntry>,
    /// Where the next call continues; `None` when the scan reached the end of the log.
    pub next_from: Option<u64>,
}
