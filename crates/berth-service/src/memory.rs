//! Scoped memory through the service (R-M1, R-M2; `docs/reference/memory.md`): authorization of
//! every operation against the namespace's scope, denials audited, binding to a session
//! the caller may access, `forget` audited with its counts, and export/import as JSONL.
//!
//! Who may do what (the namespace is in the request, so a refusal leaks nothing):
//!
//! | scope                | `user` principal                         | `service`, `admin` |
//! |----------------------|------------------------------------------|--------------------|
//! | `user/<itself>/…`    | read, write, forget                      | everything         |
//! | `user/<other>/…`     | 403                                      | everything         |
//! | `project/<own>/…`    | read, write, forget (its key's project)  | everything         |
//! | `project/<other>/…`  | 403 (and every project without a project claim) | everything  |
//! | `app/…`              | read                                     | everything         |

use super::*;
use berth_catalog::scoped::{ForgetOutcome, MemoryDelete, MemoryItem, MemoryPut, MemoryQuota, MemoryScope};
use berth_catalog::scoped::{MemorySearch, MemoryUsage, Namespace, NamespaceQuery, Removed, SearchCursor, TenantQuota};
use berth_core::JsonText;
use serde::{Deserialize, Serialize};

/// What an operation does to a scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryAccess {
    Read,
    Write,
}

impl Principal {
    /// May this principal `access` the memory of `scope`? (The tenant is always the
    /// principal's own: the backend is called with it.)
    pub fn can_access_memory(&self, scope: &MemoryScope, access: MemoryAccess) -> bool {
        match scope {
            MemoryScope::System(_) => false,
            _ if self.is_privileged() => true,
            MemoryScope::User(user) => *user == self.user,
            MemoryScope::Project(project) => self.project.as_ref() == Some(project),
            MemoryScope::App(_) => access == MemoryAccess::Read,
        }
    }
}

/// A page of a memory search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPage {
    pub items: Vec<MemoryItem>,
    pub next_cursor: Option<SearchCursor>,
}

/// A page of namespaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespacePage {
    pub namespaces: Vec<Namespace>,
    pub next_cursor: Option<String>,
}

/// What a `forget` did (its audit record holds the same).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForgetReport {
    pub prefix: Namespace,
    pub outcome: ForgetOutcome,
    /// The audit record's position in the tenant's audit log.
    pub audit_seq: u64,
    /// Sessions whose logs still hold memory writes carried by appends into this scope:
    /// those values stay in the logs until the sessions are deleted.
    pub sessions_holding_values: Vec<SessionId>,
}

/// The first line of a memory export.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryExportHeader {
    pub berth_memory_export: u32,
    /// The namespace exported (`None`: every namespace of the tenant).
    pub prefix: Option<Namespace>,
}

/// The memory export format's version.
pub const MEMORY_EXPORT_VERSION: u32 = 1;

/// Items read per page while exporting.
const EXPORT_PAGE: usize = 500;

impl SessionService {
    /// The default per-tenant memory quota (`MemoryQuota::default()`: 1,000,000 items,
    /// 1 GiB): what a tenant has where an admin set none of its own
    /// (`set_memory_quota`). `berth serve --memory-items-max/--memory-bytes-max`.
    pub fn with_memory_quota(mut self, quota: MemoryQuota) -> SessionService {
        self.memory_quota = quota;
        self
    }

    /// The default per-tenant memory quota (`with_memory_quota`).
    pub fn memory_quota(&self) -> MemoryQuota {
        self.memory_quota
    }

    /// The quota that applies to `tenant`: its own over the default.
    pub(crate) async fn tenant_memory_quota(&self, tenant: &berth_core::TenantId) -> Result<MemoryQuota> {
        Ok(self.catalog.memory_quota(tenant).await?.over(&self.memory_quota))
    }

    /// Authorizes `access` to `namespace`'s scope, auditing a refusal (403 `forbidden`).
    pub(crate) async fn authorize_memory(
        &self,
        principal: &Principal,
        namespace: &Namespace,
        access: MemoryAccess,
        action: &str,
    ) -> Result<()> {
        if principal.can_access_memory(namespace.scope(), access) {
            return Ok(());
        }
        let verb = if access == MemoryAccess::Read { "read" } else { "write" };
        let error = Error::Forbidden {
            reason: format!("a {} key may not {verb} memory in {namespace}", principal.role.as_str()),
        };
        let mut draft = self.audit_draft(&principal.tenant, principal.actor(), action);
        draft.outcome = "denied".to_owned();
        draft.details = serde_json::json!({"code": error.code(), "namespace": namespace.as_str()});
        self.audit(draft).await;
        Err(error)
    }

    /// Creates or replaces an item. With `bound_to`, the session must be one the caller
    /// may access; the item is deleted with it.
    pub async fn memory_put(&self, principal: &Principal, put: MemoryPut) -> Result<MemoryItem> {
        self.authorize_memory(principal, &put.namespace, MemoryAccess::Write, "memory.put").await?;
        put.check()?;
        if let Some(session) = &put.bound_to {
            self.load(principal, session, "memory.bind").await?;
        }
        self.catalog.memory_put(&principal.tenant, &put, self.now(), &self.memory_quota).await
    }

    /// The live item (`NotFound` if absent). `refresh` extends an item's TTL.
    pub async fn memory_get(
        &self,
        principal: &Principal,
        namespace: &Namespace,
        key: &str,
        refresh: bool,
    ) -> Result<MemoryItem> {
        self.authorize_memory(principal, namespace, MemoryAccess::Read, "memory.get").await?;
        berth_catalog::scoped::check_key(key)?;
        self.catalog
            .memory_get(&principal.tenant, namespace, key, self.now(), refresh)
            .await?
            .ok_or_else(|| Error::NotFound { what: "memory item", id: format!("{namespace}:{key}") })
    }

    /// Deletes one live item (`NotFound` if absent, `RevisionConflict` if
    /// `expected_revision` differs), with its audit record (`memory.delete`: namespace,
    /// key, revision, bytes) in the same transaction.
    pub async fn memory_delete(
        &self,
        principal: &Principal,
        namespace: &Namespace,
        key: &str,
        expected_revision: Option<u64>,
    ) -> Result<MemoryItem> {
        self.authorize_memory(principal, namespace, MemoryAccess::Write, "memory.delete").await?;
        berth_catalog::scoped::check_key(key)?;
        let delete = MemoryDelete { namespace: namespace.clone(), key: key.to_owned(), expected_revision };
        let mut draft = self.audit_draft(&principal.tenant, principal.actor(), "memory.delete");
        let audit = Box::new(move |deleted: &[MemoryItem]| {
            let item = &deleted[0];
            draft.details = serde_json::json!({
                "namespace": item.namespace.as_str(),
                "key": item.key,
                "revision": item.revision,
                "bytes": item.bytes(),
            });
            draft
        });
        let (mut deleted, _) =
            self.catalog.memory_delete_audited(&principal.tenant, &[delete], false, self.now(), audit).await?;
        deleted.pop().ok_or_else(|| Error::NotFound { what: "memory item", id: format!("{namespace}:{key}") })
    }

    /// Deletes the live items at `keys` (at most `PAGE_SIZE_MAX`; an absent one is skipped)
    /// in one transaction with one audit record (`memory.delete`: the items and bytes
    /// deleted, in all and per scope) — none when nothing was there. Every namespace is
    /// authorized for writing first. A batch's deletes (LangGraph's `BerthStore`).
    pub async fn memory_delete_many(
        &self,
        principal: &Principal,
        keys: Vec<(Namespace, String)>,
    ) -> Result<Vec<MemoryItem>> {
        if keys.len() > PAGE_SIZE_MAX {
            return Err(Error::LimitExceeded {
                what: berth_core::limits::Limit::PageSize,
                limit: PAGE_SIZE_MAX as u64,
                actual: keys.len() as u64,
            });
        }
        let mut namespaces: Vec<&Namespace> = keys.iter().map(|(namespace, _)| namespace).collect();
        namespaces.sort();
        namespaces.dedup();
        for namespace in namespaces {
            self.authorize_memory(principal, namespace, MemoryAccess::Write, "memory.delete").await?;
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut deletes = Vec::with_capacity(keys.len());
        for (namespace, key) in keys {
            berth_catalog::scoped::check_key(&key)?;
            if seen.insert((namespace.clone(), key.clone())) {
                deletes.push(MemoryDelete { namespace, key, expected_revision: None });
            }
        }
        let mut draft = self.audit_draft(&principal.tenant, principal.actor(), "memory.delete");
        let audit = Box::new(move |deleted: &[MemoryItem]| {
            draft.details = serde_json::to_value(Removed::of(deleted)).unwrap_or_default();
            draft
        });
        let (deleted, _) =
            self.catalog.memory_delete_audited(&principal.tenant, &deletes, true, self.now(), audit).await?;
        Ok(deleted)
    }

    pub async fn memory_search(&self, principal: &Principal, search: &MemorySearch) -> Result<MemoryPage> {
        self.authorize_memory(principal, &search.prefix, MemoryAccess::Read, "memory.search").await?;
        search.check()?;
        let items = self.catalog.memory_search(&principal.tenant, search, self.now()).await?;
        let next_cursor = search.next_cursor(&items);
        Ok(MemoryPage { items, next_cursor })
    }

    pub async fn memory_namespaces(&self, principal: &Principal, query: &NamespaceQuery) -> Result<NamespacePage> {
        self.authorize_memory(principal, &query.prefix, MemoryAccess::Read, "memory.namespaces").await?;
        if query.limit == 0 || query.limit > PAGE_SIZE_MAX {
            return Err(Error::LimitExceeded {
                what: berth_core::limits::Limit::PageSize,
                limit: PAGE_SIZE_MAX as u64,
                actual: query.limit as u64,
            });
        }
        if query.max_depth.is_some_and(|depth| depth < 2) {
            return Err(Error::invalid("max_depth", "at least 2 (a namespace has its scope's two segments)"));
        }
        let namespaces = self.catalog.memory_namespaces(&principal.tenant, query, self.now()).await?;
        let next_cursor =
            if namespaces.len() < query.limit { None } else { namespaces.last().map(|ns| ns.as_str().to_owned()) };
        Ok(NamespacePage { namespaces, next_cursor })
    }

    /// Deletes exactly the items within `prefix` (a scope, or a namespace inside one),
    /// with one audit record of the counts and bytes, in one transaction.
    pub async fn memory_forget(&self, principal: &Principal, prefix: &Namespace) -> Result<ForgetReport> {
        self.authorize_memory(principal, prefix, MemoryAccess::Write, "memory.forget").await?;
        // No carried append of this process writes the scope meanwhile; markers of any
        // process stop applying writes within the prefix before anything is deleted.
        let _scope = self.lock_scopes(&principal.tenant, [prefix]).await;
        let holding = self.cancel_carried(&principal.tenant, prefix).await?;
        let mut draft = self.audit_draft(&principal.tenant, principal.actor(), "memory.forget");
        let held = holding.clone();
        let namespace = prefix.as_str().to_owned();
        let audit = Box::new(move |outcome: &ForgetOutcome| {
            draft.details = serde_json::json!({
                "namespace": namespace,
                "items": outcome.items,
                "bytes": outcome.bytes,
                "sessions_holding_values": held,
            });
            draft
        });
        let (outcome, entry) = self.catalog.memory_forget(&principal.tenant, prefix, audit).await?;
        Ok(ForgetReport { prefix: prefix.clone(), outcome, audit_seq: entry.seq, sessions_holding_values: holding })
    }

    /// The tenant's memory usage and the quota that applies to it (service and admin keys
    /// only: it is tenant-wide).
    pub async fn memory_usage(&self, principal: &Principal) -> Result<(MemoryUsage, MemoryQuota)> {
        if !principal.is_privileged() {
            let error = Error::Forbidden { reason: "memory usage is tenant-wide: a service or admin key".into() };
            return Err(self.denied_in_tenant(principal, "memory.usage", None, error).await);
        }
        let quota = self.tenant_memory_quota(&principal.tenant).await?;
        Ok((self.catalog.memory_usage(&principal.tenant).await?, quota))
    }

    /// Admin only: sets the tenant's own memory quota (each limit not given goes back to
    /// the default, `with_memory_quota`), audited (`memory.quota`). Items already stored
    /// stay, even over it; the writes after are held to it. Returns the usage and the
    /// quota that now applies.
    pub async fn set_memory_quota(
        &self,
        principal: &Principal,
        quota: TenantQuota,
    ) -> Result<(MemoryUsage, MemoryQuota)> {
        self.require_admin(principal, "memory.quota").await?;
        for (name, limit) in [("items", quota.items), ("bytes", quota.bytes)] {
            if limit.is_some_and(|limit| limit > i64::MAX as u64) {
                return Err(Error::invalid(name, "a quota is at most 2^63 - 1"));
            }
        }
        self.catalog.set_memory_quota(&principal.tenant, &quota).await?;
        let mut draft = self.audit_draft(&principal.tenant, principal.actor(), "memory.quota");
        draft.details = serde_json::json!({"items": quota.items, "bytes": quota.bytes});
        self.audit(draft).await;
        Ok((self.catalog.memory_usage(&principal.tenant).await?, quota.over(&self.memory_quota)))
    }

    /// Exports the items within `prefix` (every namespace of the tenant for `None`:
    /// service and admin keys) as JSONL: a header line, then one item per line in
    /// (namespace, key) order. Export → import → export is byte-identical.
    pub async fn memory_export(&self, principal: &Principal, prefix: Option<&Namespace>) -> Result<Vec<u8>> {
        match prefix {
            Some(prefix) => self.authorize_memory(principal, prefix, MemoryAccess::Read, "memory.export").await?,
            None if !principal.is_privileged() => {
                let error = Error::Forbidden { reason: "exporting every scope needs a service or admin key".into() };
                return Err(self.denied_in_tenant(principal, "memory.export", None, error).await);
            }
            None => {}
        }
        let header = MemoryExportHeader { berth_memory_export: MEMORY_EXPORT_VERSION, prefix: prefix.cloned() };
        let mut out = serde_json::to_vec(&header).map_err(|e| Error::invalid("export", e.to_string()))?;
        out.push(b'\n');
        let now = self.now();
        let mut after: Option<(Namespace, String)> = prefix.map(|p| (p.clone(), String::new()));
        loop {
            let page = match prefix {
                Some(prefix) => {
                    let search = MemorySearch {
                        limit: EXPORT_PAGE,
                        cursor: after.as_ref().filter(|(_, key)| !key.is_empty()).map(|(ns, key)| SearchCursor {
                            order: berth_catalog::scoped::SearchOrder::Key,
                            rank: 0,
                            namespace: ns.as_str().to_owned(),
                            key: key.clone(),
                        }),
                        ..MemorySearch::new(prefix.clone())
                    };
                    self.catalog.memory_search(&principal.tenant, &search, now).await?
                }
                None => {
                    let position = after.as_ref().map(|(ns, key)| (ns, key.as_str()));
                    self.catalog.memory_scan(&principal.tenant, position, EXPORT_PAGE, now).await?
                }
            };
            for item in page.iter().filter(|item| !matches!(item.namespace.scope(), MemoryScope::System(_))) {
                serde_json::to_writer(&mut out, item).map_err(|e| Error::invalid("export", e.to_string()))?;
                out.push(b'\n');
            }
            match page.last() {
                Some(last) if page.len() == EXPORT_PAGE => after = Some((last.namespace.clone(), last.key.clone())),
                _ => return Ok(out),
            }
        }
    }

    /// Imports a memory export into the caller's tenant: every item exactly (revision
    /// and times kept), each namespace authorized for writing first; a key that already
    /// holds an item is `AlreadyExists` and nothing after it is imported (items before it
    /// stay: run it again after removing the conflict, or import into an empty scope).
    /// A binding is held to a put's rule (`memory_put`): the session must be one the
    /// caller may access, else `NotFound` before anything is stored — whether it is
    /// missing or another user's (so an import tells nothing of other users' sessions).
    pub async fn memory_import(&self, principal: &Principal, bytes: &[u8]) -> Result<u64> {
        let text = std::str::from_utf8(bytes).map_err(|_| Error::invalid("import", "not UTF-8"))?;
        let mut lines = text.lines().filter(|line| !line.trim().is_empty());
        let header: MemoryExportHeader = berth_core::json::from_strict_slice(
            lines.next().ok_or_else(|| Error::invalid("import", "empty: no header line"))?.as_bytes(),
        )?;
        if header.berth_memory_export != MEMORY_EXPORT_VERSION {
            return Err(Error::FormatUnsupported {
                reason: format!(
                    "memory export version {} (this build reads {MEMORY_EXPORT_VERSION})",
                    header.berth_memory_export
                ),
                location: None,
            });
        }
        let mut items = Vec::new();
        for (index, line) in lines.enumerate() {
            let item: MemoryItem = berth_core::json::from_strict_slice(line.as_bytes())
                .map_err(|error| Error::invalid("import", format!("item line {}: {error}", index + 1)))?;
            // Strict and within a put's limits, every line before any is stored.
            JsonText::parse(item.value.as_str())?;
            item.check()?;
            items.push(item);
        }
        let mut namespaces: Vec<&Namespace> = items.iter().map(|item| &item.namespace).collect();
        namespaces.sort();
        namespaces.dedup();
        for namespace in namespaces {
            self.authorize_memory(principal, namespace, MemoryAccess::Write, "memory.import").await?;
        }
        let mut sessions: Vec<&SessionId> = items.iter().filter_map(|item| item.bound_to.as_ref()).collect();
        sessions.sort();
        sessions.dedup();
        for session in sessions {
            self.load(principal, session, "memory.bind").await?;
        }
        let mut imported = 0;
        for item in items {
            self.catalog.memory_import(&principal.tenant, &item, &self.memory_quota).await?;
            imported += 1;
        }
        Ok(imported)
    }
}
