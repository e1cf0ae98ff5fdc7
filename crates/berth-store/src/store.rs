//! `LogStore`: the front of the seam. Owns the in-process writer registry and the
//! pending (created but not yet materialized) sessions.

use crate::backend::{ChangeToken, ListPage, ListQuery, LogBackend, LogStat};
use crate::handle::{Access, HandleShared, SessionHandle};
use crate::registry::{OwnerRef, Registry, Slot};
use berth_core::limits::PAGE_SIZE_MAX;
use berth_core::{Error, Result, SessionHeader, SessionKey, WriteHolder};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// A slot names its handle weakly: a handle dropped without `close` frees the id.
impl OwnerRef for Weak<HandleShared> {
    type Owner = HandleShared;

    fn is_owner(&self, owner: &HandleShared) -> bool {
        std::ptr::eq(self.as_ptr(), owner)
    }

    fn alive(&self) -> bool {
        self.strong_count() > 0
    }
}

type WriterRegistry = Registry<SessionKey, Weak<HandleShared>>;

pub(crate) struct StoreInner {
    pub(crate) backend: Arc<dyn LogBackend>,
    /// The single-writer registry (`registry.rs`, model-checked in `tests/loom_models.rs`).
    pub(crate) registry: Mutex<WriterRegistry>,
    pub(crate) pending_counter: AtomicU64,
}

impl StoreInner {
    pub(crate) fn registry(&self) -> std::sync::MutexGuard<'_, WriterRegistry> {
        // A panic while holding this lock cannot leave it inconsistent (single inserts
        // and removes), so a poisoned lock is still usable.
        self.registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Releases `key`'s registry slot if it still belongs to `owner` (or is a claim).
    pub(crate) fn release_slot(&self, key: &SessionKey, owner: Option<&HandleShared>) {
        self.registry().release(key, owner);
    }

    /// The live write handles of this instance.
    fn owned_handles(&self) -> Vec<SessionHandle> {
        self.registry()
            .slots()
            .filter_map(|slot| match slot {
                Slot::Owned(weak) => weak.upgrade().map(SessionHandle::from_shared),
                Slot::Claiming => None,
            })
            .collect()
    }

    /// Turns `key`'s slot from "owned by `owner`" into a claim, so the session stays
    /// owned while a dropped handle's final drain still holds the backend writer.
    /// Returns whether it did (the caller then releases the claim when done).
    pub(crate) fn reclaim_slot(&self, key: &SessionKey, owner: &HandleShared) -> bool {
        self.registry().reclaim(key, owner)
    }

    /// The pending (never materialized) handle for `key`, if any.
    fn pending(&self, key: &SessionKey) -> Option<Arc<HandleShared>> {
        // Upgrade only after the registry lock is released: if the upgraded handle turns
        // out to be the last one (its owner dropped it meanwhile), dropping it runs
        // `HandleShared::drop`, which takes the registry lock itself.
        let weak = match self.registry().get(key) {
            Some(Slot::Owned(weak)) => weak.clone(),
            _ => return None,
        };
        weak.upgrade().filter(|shared| shared.is_pending())
    }
}

/// The session log store: one per backend instance. Cheap to clone.
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<StoreInner>,
}

impl std::fmt::Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LogStore({})", self.inner.backend.name())
    }
}

impl LogStore {
    pub fn new(backend: Arc<dyn LogBackend>) -> LogStore {
        LogStore {
            inner: Arc::new(StoreInner {
                backend,
                registry: Mutex::new(Registry::default()),
                pending_counter: AtomicU64::new(0),
            }),
        }
    }

    pub fn backend_name(&self) -> &'static str {
        self.inner.backend.name()
    }

    /// Creates a session and returns its write handle. Nothing is stored until the
    /// first append or flush (deferred materialization); until then the session is
    /// visible only to this instance, and closing the handle erases it.
    pub async fn create(&self, header: SessionHeader) -> Result<SessionHandle> {
        header.validate()?;
        let key = header.key();
        self.inner.registry().claim(&key).map_err(|_| already_exists(&key))?;
        let _claim = ClaimGuard { inner: &self.inner, key: &key };
        if self.inner.backend.stat(&key).await?.is_some() {
            return Err(already_exists(&key));
        }
        let pending_id = self.inner.pending_counter.fetch_add(1, Ordering::Relaxed);
        let shared = HandleShared::new_pending(self.inner.clone(), header, pending_id);
        self.inner.registry().install(&key, Arc::downgrade(&shared));
        Ok(SessionHandle::from_shared(shared))
    }

    /// Opens a session. `Write` claims single-writer ownership atomically (in this
    /// instance through the registry, across processes through the backend's lease) or
    /// fails `AlreadyOwned`. `Read` never takes ownership.
    pub async fn open(&self, key: &SessionKey, access: Access) -> Result<SessionHandle> {
        match access {
            Access::Read => self.open_read(key).await,
            Access::Write => self.open_write(key).await,
        }
    }

    async fn open_read(&self, key: &SessionKey) -> Result<SessionHandle> {
        if let Some(pending) = self.inner.pending(key) {
            let shared = HandleShared::new_reader(self.inner.clone(), pending.header().clone(), None);
            return Ok(SessionHandle::from_shared(shared));
        }
        let reader = self.inner.backend.open_reader(key).await?;
        let header = reader.header().clone();
        Ok(SessionHandle::from_shared(HandleShared::new_reader(self.inner.clone(), header, Some(reader))))
    }

    async fn open_write(&self, key: &SessionKey) -> Result<SessionHandle> {
        self.inner.registry().claim(key).map_err(|_| already_owned(key))?;
        let _claim = ClaimGuard { inner: &self.inner, key };
        let writer = self.inner.backend.open_writer(key).await?;
        let shared = HandleShared::new_writer(self.inner.clone(), writer);
        self.inner.registry().install(key, Arc::downgrade(&shared));
        Ok(SessionHandle::from_shared(shared))
    }

    /// Header, change token and size hints, without reading the log. `None` if absent.
    pub async fn stat(&self, key: &SessionKey) -> Result<Option<LogStat>> {
        if let Some(pending) = self.inner.pending(key) {
            return Ok(Some(pending_stat(&pending, self.inner.backend.name())));
        }
        self.inner.backend.stat(key).await
    }

    /// Sessions of a tenant, ordered by id, with cursor pagination. Includes this
    /// instance's pending sessions.
    pub async fn list(&self, query: &ListQuery) -> Result<ListPage> {
        if query.limit == 0 || query.limit > PAGE_SIZE_MAX {
            return Err(Error::LimitExceeded {
                what: berth_core::limits::Limit::PageSize,
                limit: PAGE_SIZE_MAX as u64,
                actual: query.limit as u64,
            });
        }
        // Snapshot pending sessions before scanning storage, so a session that
        // materializes mid-scan is seen one way or the other, never neither.
        let pending: Vec<LogStat> = self
            .inner
            .owned_handles()
            .into_iter()
            .filter(|handle| handle.shared().is_pending() && query.matches(handle.header()))
            .map(|handle| pending_stat(handle.shared(), self.inner.backend.name()))
            .collect();
        let mut fetch = query.clone();
        fetch.limit = query.limit + 1;
        let mut items = self.inner.backend.list(&fetch).await?;
        for stat in pending {
            if !items.iter().any(|item| item.header.id == stat.header.id) {
                items.push(stat);
            }
        }
        items.sort_by(|a, b| a.header.id.cmp(&b.header.id));
        let next_cursor = if items.len() > query.limit {
            items.truncate(query.limit);
            items.last().map(|stat| stat.header.id.clone())
        } else {
            None
        };
        Ok(ListPage { items, next_cursor })
    }

    /// Erases a session's log physically. Refuses (`AlreadyOwned`) while a write handle
    /// of this instance (or, through the backend's lease, of another process) is open.
    pub async fn erase(&self, key: &SessionKey) -> Result<bool> {
        match self.inner.registry().get(key) {
            Some(Slot::Claiming) => return Err(already_owned(key)),
            Some(Slot::Owned(weak)) if weak.strong_count() > 0 => return Err(already_owned(key)),
            _ => {}
        }
        self.inner.backend.erase(key).await
    }

    /// Backend-wide durability barrier: drains and flushes every active write handle,
    /// and reports every failure together without abandoning the sweep. A handle closed
    /// concurrently counts as flushed.
    pub async fn flush(&self) -> Result<()> {
        let mut failures = Vec::new();
        for handle in self.inner.owned_handles() {
            match handle.flush().await {
                Ok(()) | Err(Error::HandleClosed { .. }) => {}
                Err(error) => failures.push((handle.key().to_string(), error)),
            }
        }
        match failures.len() {
            0 => Ok(()),
            _ => Err(Error::Many(failures)),
        }
    }

    /// Sessions with a write handle open (or being opened) in this instance: a gauge for
    /// the server's metrics.
    pub fn write_handles_open(&self) -> usize {
        self.inner.registry().len()
    }

    /// Closes every write handle of this instance (draining their live buffers), e.g. at
    /// shutdown. Every handle is closed even if some fail; failures are reported together.
    pub async fn close_all(&self) -> Result<()> {
        let mut failures = Vec::new();
        for handle in self.inner.owned_handles() {
            if let Err(error) = handle.close().await {
                failures.push((handle.key().to_string(), error));
            }
        }
        match failures.len() {
            0 => Ok(()),
            _ => Err(Error::Many(failures)),
        }
    }
}

/// Releases an in-progress claim (`Slot::Claiming`) when dropped: on an error, and when
/// the `create` / `open` future is cancelled mid-way, so a cancelled call never leaves
/// the id owned forever. Once the slot holds the new handle, dropping it does nothing.
struct ClaimGuard<'a> {
    inner: &'a StoreInner,
    key: &'a SessionKey,
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        self.inner.release_slot(self.key, None);
    }
}

fn pending_stat(shared: &HandleShared, backend: &str) -> LogStat {
    LogStat {
        header: shared.header().clone(),
        change_token: ChangeToken(format!("pending:{backend}:{}", shared.pending_id())),
        event_count: Some(0),
        size_bytes: None,
    }
}

fn already_exists(key: &SessionKey) -> Error {
    Error::AlreadyExists { what: "session", id: key.id.to_string() }
}

fn already_owned(key: &SessionKey) -> Error {
    Error::AlreadyOwned { id: key.id.to_string(), holder: WriteHolder::ThisProcess }
}
