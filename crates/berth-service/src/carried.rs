//! Memory writes carried by an append (scoped memory, `docs/reference/memory.md`): atomic with
//! the log, read-your-writes, finished after a crash, cancelled by `forget`.
//!
//! The protocol, under the session's append lock and this process's lock of every
//! scope written:
//! 1. authorize and validate each write; read each item's revision and check the
//!    write's `expected_revision` against it (`RevisionConflict`, nothing written);
//! 2. store a durable marker, "carried writes unapplied from seq N" — the memory item
//!    `berth/carried : <session>`, bound to the session — unless the marker the
//!    previous carried append advanced (step 5) says so already;
//! 3. append the events with a trailing `session/memory` event (service-only,
//!    ignorable) holding the writes and the revision each was checked against;
//! 4. apply each write as a compare-and-set against that revision;
//! 5. advance the marker to the log's new end (nothing unapplied), and answer. Steps 4
//!    and 5 are one `MemoryStore::memory_apply` call: one transaction on SQLite and
//!    PostgreSQL.
//!
//! Exactly once: a write is applied only while its item is still at the checked
//! revision, so finishing a marker again (after a crash between 4 and 5, or by two
//! finishers at once) never applies a write twice; a write whose item moved on meanwhile
//! is superseded and skipped. A marker is finished by the session's next carried append
//! or resume, or by the sweeper once it is older than `CARRIED_GRACE_MS` — the sweeper
//! visits markers only, never every log. `forget` adds its prefix to every marker's
//! `cancelled` list first, so finishing never resurrects forgotten values. Which sessions
//! ever carried writes into a scope is kept too (`berth/scopes/<kind>/<id> : <session>`,
//! bound to the session), for `forget`'s report: those values stay in the logs until the
//! sessions are deleted.

use super::*;
use crate::memory::MemoryAccess;
use berth_catalog::scoped::{MemoryItem, MemoryPut, MemoryScope, MemorySearch, Namespace, SearchCursor, SearchOrder};
use berth_core::JsonText;
use serde::{Deserialize, Serialize};

/// A marker older than this is finished by the sweeper (younger ones belong to an append
/// still in progress, possibly in another process).
pub const CARRIED_GRACE_MS: u64 = 10_000;

/// Most memory writes one append may carry.
pub const CARRIED_WRITES_MAX: usize = 100;

/// The test hook of the crash test: when set to a path, a carried append writes that
/// file and sleeps after its log append, before applying (the test SIGKILLs it there) —
/// unless the file `<path>.skip` exists, which it removes instead: the test's first
/// append then completes and the next one pauses.
pub const PAUSE_HOOK_ENV: &str = "BERTH_TEST_PAUSE_CARRIED";

const MARKERS: &str = "berth/carried";

/// One write as the `session/memory` event holds it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct CarriedWrite {
    namespace: Namespace,
    key: String,
    value: JsonText,
    /// The item's revision when the append checked it (0: absent).
    checked_revision: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ttl_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bound_to: Option<SessionId>,
}

impl CarriedWrite {
    /// The put that applies it: guarded by the revision it was checked against, so it
    /// applies once and never over a later write.
    fn to_put(&self) -> MemoryPut {
        MemoryPut {
            namespace: self.namespace.clone(),
            key: self.key.clone(),
            value: self.value.clone(),
            expected_revision: Some(self.checked_revision),
            ttl_ms: self.ttl_ms,
            bound_to: self.bound_to.clone(),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct CarriedData {
    writes: Vec<CarriedWrite>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Marker {
    from_seq: u64,
    /// Prefixes forgotten since: writes within them are not applied.
    #[serde(default)]
    cancelled: Vec<Namespace>,
}

fn markers() -> Namespace {
    Namespace::parse(MARKERS).expect("a valid namespace")
}

/// The put of the session's marker "carried writes unapplied from `from_seq`" (any
/// revision: the caller holds the session's append lock).
fn marker_put(key: &SessionKey, from_seq: u64) -> Result<MemoryPut> {
    Ok(MemoryPut {
        namespace: markers(),
        key: key.id.to_string(),
        value: json_text(&Marker { from_seq, cancelled: Vec::new() })?,
        expected_revision: None,
        ttl_ms: None,
        bound_to: Some(key.id.clone()),
    })
}

fn scope_index(scope: &MemoryScope) -> Namespace {
    Namespace::parse(&format!("berth/scopes/{}/{}", scope.kind(), scope.id())).expect("a valid namespace")
}

fn json_text<T: Serialize>(value: &T) -> Result<JsonText> {
    let text = serde_json::to_string(value).map_err(|error| Error::invalid("memory", error.to_string()))?;
    JsonText::parse(&text)
}

impl SessionService {
    /// Step 0, before anything is read or locked: the writes are well-formed, within
    /// the caller's reach, and bound (if at all) to this session.
    pub(crate) async fn check_carried(
        &self,
        principal: &Principal,
        id: &SessionId,
        request: &AppendRequest,
    ) -> Result<()> {
        if request.memory.len() > CARRIED_WRITES_MAX {
            return Err(Error::invalid(
                "memory",
                format!("{} writes, at most {CARRIED_WRITES_MAX}", request.memory.len()),
            ));
        }
        if request.idempotency_key.is_none() {
            return Err(Error::invalid("memory", "an append carrying memory writes needs an idempotency key"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for put in &request.memory {
            put.check()?;
            self.authorize_memory(principal, &put.namespace, MemoryAccess::Write, "memory.put").await?;
            if put.bound_to.as_ref().is_some_and(|session| session != id) {
                return Err(Error::invalid("memory", "a carried write may be bound to the appending session only"));
            }
            if !seen.insert((put.namespace.as_str(), put.key.as_str())) {
                return Err(Error::invalid(
                    "memory",
                    format!("{}:{} is written twice in one append", put.namespace, put.key),
                ));
            }
        }
        Ok(())
    }

    /// This process's locks of the scopes `namespaces` touch, taken in order.
    pub(crate) async fn lock_scopes<'a>(
        &self,
        tenant: &berth_core::TenantId,
        namespaces: impl IntoIterator<Item = &'a Namespace>,
    ) -> Vec<tokio::sync::OwnedMutexGuard<()>> {
        let mut scopes: Vec<String> =
            namespaces.into_iter().map(|namespace| format!("{tenant}/{}", namespace.scope().namespace())).collect();
        scopes.sort();
        scopes.dedup();
        let mut guards = Vec::with_capacity(scopes.len());
        for scope in scopes {
            let lock = {
                let mut locks = self.scope_locks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                if locks.len() >= 1024 {
                    locks.retain(|_, lock| lock.strong_count() > 0);
                }
                match locks.get(&scope).and_then(std::sync::Weak::upgrade) {
                    Some(lock) => lock,
                    None => {
                        let lock = Arc::new(tokio::sync::Mutex::new(()));
                        locks.insert(scope, Arc::downgrade(&lock));
                        lock
                    }
                }
            };
            guards.push(lock.lock_owned().await);
        }
        guards
    }

    /// Steps 1 and 2: checks each write against its item, stores the marker and the
    /// scope index, and returns the `session/memory` event's data. The caller holds the
    /// session's append lock and the scope locks, and has finished any marker a crash
    /// left (`finish_carried`).
    pub(crate) async fn prepare_carried(
        &self,
        key: &SessionKey,
        request: &AppendRequest,
        from_seq: u64,
    ) -> Result<JsonText> {
        let now = self.now();
        let mut writes = Vec::with_capacity(request.memory.len());
        let mut currents = Vec::with_capacity(request.memory.len());
        for put in &request.memory {
            let current = self.catalog.memory_get(&key.tenant, &put.namespace, &put.key, now, false).await?;
            let actual = current.as_ref().map_or(0, |item| item.revision);
            if let Some(expected) = put.expected_revision {
                if expected != actual {
                    return Err(Error::RevisionConflict { expected, actual });
                }
            }
            writes.push(CarriedWrite {
                namespace: put.namespace.clone(),
                key: put.key.clone(),
                value: put.value.clone(),
                checked_revision: actual,
                ttl_ms: put.ttl_ms,
                bound_to: put.bound_to.clone(),
            });
            currents.push(current);
        }
        // The quota too, before anything is written (a concurrent writer can still fill
        // it before the apply: the marker then stays, and the sweeper retries).
        let mut usage = self.catalog.memory_usage(&key.tenant).await?;
        let quota = self.tenant_memory_quota(&key.tenant).await?;
        for ((put, write), current) in request.memory.iter().zip(&writes).zip(&currents) {
            let new_bytes = berth_catalog::scoped::item_bytes(&put.namespace, &put.key, &put.value);
            let previous = current.as_ref().map_or(0, MemoryItem::bytes);
            usage.check_put(&quota, write.checked_revision == 0, previous, new_bytes)?;
            usage.items += u64::from(write.checked_revision == 0);
            usage.bytes = usage.bytes.saturating_sub(previous) + new_bytes;
        }
        let data = json_text(&CarriedData { writes })?;
        // The marker the previous carried append left already says "unapplied from this
        // seq" (`apply_carried` advances it): a steady stream of carried appends stores
        // it once. It is stored again when absent, cancelled into, or old enough for the
        // sweeper to visit. Read here, under the scopes' locks, not taken from
        // `finish_carried`'s read: a `forget` may have cancelled into it in between.
        let current = self.catalog.memory_get(&key.tenant, &markers(), key.id.as_str(), now, false).await?;
        let covers = current.as_ref().is_some_and(|item| {
            let marker: Marker = serde_json::from_str(item.value.as_str()).unwrap_or_default();
            let fresh = now.0.saturating_sub(item.updated_at.0) < CARRIED_GRACE_MS / 2;
            marker.from_seq == from_seq && marker.cancelled.is_empty() && fresh
        });
        if !covers {
            let marker = MemoryPut {
                expected_revision: Some(current.as_ref().map_or(0, |item| item.revision)),
                ..marker_put(key, from_seq)?
            };
            self.catalog.memory_put(&key.tenant, &marker, now, &self.memory_quota).await?;
        }
        let mut scopes: Vec<&MemoryScope> = request.memory.iter().map(|put| put.namespace.scope()).collect();
        scopes.sort();
        scopes.dedup();
        for scope in scopes {
            let index = scope_index(scope);
            if self.catalog.memory_get(&key.tenant, &index, key.id.as_str(), now, false).await?.is_none() {
                let entry = MemoryPut {
                    namespace: index,
                    key: key.id.to_string(),
                    value: JsonText::null(),
                    expected_revision: None,
                    ttl_ms: None,
                    bound_to: Some(key.id.clone()),
                };
                self.catalog.memory_put(&key.tenant, &entry, now, &self.memory_quota).await?;
            }
        }
        Ok(data)
    }

    /// Steps 4 and 5 for the batch just appended (the writes are in `data`); the log
    /// now ends at `log_end`.
    pub(crate) async fn apply_carried(&self, key: &SessionKey, data: &JsonText, log_end: u64) -> Result<()> {
        if let Some(path) = std::env::var_os(PAUSE_HOOK_ENV) {
            let mut skip = path.clone();
            skip.push(".skip");
            if std::fs::remove_file(&skip).is_err() {
                let _ = std::fs::write(&path, key.id.as_str());
                tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            }
        }
        let carried: CarriedData =
            serde_json::from_str(data.as_str()).map_err(|e| Error::invalid("memory", e.to_string()))?;
        // The writes, and the marker advanced past them ("unapplied from `log_end`": none
        // yet), in one call: one commit on SQLite. Nothing before `log_end` is
        // unapplied: a crashed append's writes were finished before this one began.
        let mut puts: Vec<MemoryPut> = carried.writes.iter().map(CarriedWrite::to_put).collect();
        puts.push(marker_put(key, log_end)?);
        self.catalog.memory_apply(&key.tenant, &puts, self.now(), &self.memory_quota).await?;
        Ok(())
    }

    async fn apply_writes(&self, key: &SessionKey, writes: &[CarriedWrite], cancelled: &[Namespace]) -> Result<u64> {
        let mut applied = 0;
        for write in writes {
            if cancelled.iter().any(|prefix| write.namespace.is_within(prefix)) {
                continue;
            }
            match self.catalog.memory_put(&key.tenant, &write.to_put(), self.now(), &self.memory_quota).await {
                Ok(_) => applied += 1,
                // Applied already, or superseded by a later write: never applied twice.
                Err(Error::RevisionConflict { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(applied)
    }

    /// Finishes the session's marker, if it has one: applies every carried write of its
    /// log from the marker's seq on (skipping cancelled prefixes), then deletes the
    /// marker. Returns how many writes were applied. `log_end`, when the caller holds the
    /// writer and knows it: a marker at the log's end has nothing to finish and is kept
    /// (the next carried append reuses it).
    pub(crate) async fn finish_carried(&self, key: &SessionKey, log_end: Option<u64>) -> Result<u64> {
        let Some(marker_item) =
            self.catalog.memory_get(&key.tenant, &markers(), key.id.as_str(), self.now(), false).await?
        else {
            return Ok(0);
        };
        let marker: Marker = serde_json::from_str(marker_item.value.as_str()).unwrap_or_default();
        if log_end.is_some_and(|end| marker.from_seq >= end) {
            return Ok(0);
        }
        let handle = self.store.open(key, Access::Read).await?;
        let events = handle.read(marker.from_seq, None).await;
        let _ = handle.close().await;
        let mut writes = Vec::new();
        for event in events? {
            if event.event_type.as_str() != berth_core::vocabulary::SESSION_MEMORY {
                continue;
            }
            match serde_json::from_str::<CarriedData>(event.data.as_str()) {
                Ok(carried) => writes.extend(carried.writes),
                Err(_) => {
                    tracing::warn!(session = %key, seq = event.seq.get(), "unreadable session/memory event skipped")
                }
            }
        }
        // Under the scopes' locks, with the marker read again: a `forget` of this process
        // (which holds its scope's lock from cancelling to deleting) either cancelled the
        // prefix before this read or deletes after these writes — never in between.
        let scopes = self.lock_scopes(&key.tenant, writes.iter().map(|write| &write.namespace)).await;
        let Some(marker_item) =
            self.catalog.memory_get(&key.tenant, &markers(), key.id.as_str(), self.now(), false).await?
        else {
            return Ok(0);
        };
        let marker: Marker = serde_json::from_str(marker_item.value.as_str()).unwrap_or_default();
        let applied = self.apply_writes(key, &writes, &marker.cancelled).await?;
        // Delete the marker as it was read: a forget that cancelled more meanwhile made it
        // newer, and is then finished again.
        let expected = Some(marker_item.revision);
        match self.catalog.memory_delete(&key.tenant, &markers(), key.id.as_str(), expected, self.now()).await {
            Ok(_) | Err(Error::NotFound { .. }) => {}
            Err(Error::RevisionConflict { .. }) => {
                drop(scopes);
                return Box::pin(self.finish_carried(key, log_end)).await;
            }
            Err(error) => return Err(error),
        }
        if writes.is_empty() {
            // A marker nothing followed (the session went idle after its last carried
            // append): cleanup, not a recovery to audit.
            return Ok(0);
        }
        let mut draft = self.audit_draft(&key.tenant, "system:memory".into(), "memory.finish_carried");
        draft.session = Some(key.id.clone());
        draft.details = serde_json::json!({"from_seq": marker.from_seq, "applied": applied});
        self.audit(draft).await;
        Ok(applied)
    }

    /// Every marker of the tenant (all pages).
    async fn all_markers(&self, tenant: &berth_core::TenantId) -> Result<Vec<MemoryItem>> {
        self.all_items(tenant, markers()).await
    }

    pub(crate) async fn all_items(&self, tenant: &berth_core::TenantId, prefix: Namespace) -> Result<Vec<MemoryItem>> {
        let mut out: Vec<MemoryItem> = Vec::new();
        let mut search = MemorySearch { limit: PAGE_SIZE_MAX, ..MemorySearch::new(prefix) };
        loop {
            let page = self.catalog.memory_search(tenant, &search, self.now()).await?;
            let full = page.len() == search.limit;
            if let Some(last) = page.last() {
                search.cursor = Some(SearchCursor::of(SearchOrder::Key, last, 0));
            }
            out.extend(page);
            if !full {
                return Ok(out);
            }
        }
    }

    /// For `forget(prefix)`: cancels the prefix in every marker, and returns the sessions
    /// whose logs hold values carried into the prefix's scope.
    pub(crate) async fn cancel_carried(
        &self,
        tenant: &berth_core::TenantId,
        prefix: &Namespace,
    ) -> Result<Vec<SessionId>> {
        for item in self.all_markers(tenant).await? {
            let mut marker: Marker = serde_json::from_str(item.value.as_str()).unwrap_or_default();
            if marker.cancelled.iter().any(|cancelled| prefix.is_within(cancelled)) {
                continue;
            }
            marker.cancelled.push(prefix.clone());
            let put = MemoryPut {
                namespace: item.namespace.clone(),
                key: item.key.clone(),
                value: json_text(&marker)?,
                expected_revision: Some(item.revision),
                ttl_ms: None,
                bound_to: item.bound_to.clone(),
            };
            match self.catalog.memory_put(tenant, &put, self.now(), &self.memory_quota).await {
                // Finished meanwhile (deleted: 0 ≠ its revision) or changed: either way
                // its writes are applied already, and `forget` deletes them next.
                Ok(_) | Err(Error::RevisionConflict { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        let holding = self.all_items(tenant, scope_index(prefix.scope())).await?;
        Ok(holding.into_iter().filter_map(|item| SessionId::parse(&item.key).ok()).collect())
    }

    /// The sweeper's part: finishes markers older than `CARRIED_GRACE_MS`, at most
    /// `limit`; returns how many were finished.
    pub(crate) async fn sweep_carried(&self, tenant: &berth_core::TenantId, limit: usize) -> Result<u64> {
        let cutoff = self.now().0.saturating_sub(CARRIED_GRACE_MS);
        let mut finished = 0;
        for item in self.all_markers(tenant).await? {
            if finished as usize >= limit {
                break;
            }
            if item.updated_at.0 > cutoff {
                continue;
            }
            let Ok(session) = SessionId::parse(&item.key) else { continue };
            let key = SessionKey::new(tenant.clone(), session);
            let lock = self.append_lock(&key);
            let _no_append_meanwhile = lock.lock().await;
            match self.finish_carried(&key, None).await {
                Ok(_) => finished += 1,
                Err(error) => tracing::warn!(session = %key, %error, "finishing carried memory writes failed"),
            }
        }
        Ok(finished)
    }
}
