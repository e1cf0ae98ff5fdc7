//! The writer cache: the bounded LRU of write handles this service keeps open (each
//! holds its session's writer lease), the per-session append lock that serializes a
//! session's appends and resumes (and that eviction takes before closing a handle), the
//! key ledgers of the cached handles, and shutdown.

use super::*;
use berth_catalog::ResumeMark;

/// Write handles a service keeps open by default. Each holds the session's writer lease
/// and, on the embedded backend, three file descriptors: 256 stay well inside the usual
/// 1,024-descriptor soft limit next to a server's connections.
pub const WRITERS_CACHED_MAX_DEFAULT: usize = 256;

/// The service's open write handles, with when each was last used. Time is the
/// service's `Clock` (so a test's fake clock decides when a handle is idle, without
/// sleeping); the order of use is a counter (so least-recently-used is exact even for
/// uses within one millisecond).
#[derive(Default)]
pub(crate) struct WriterCache {
    pub(crate) handles: HashMap<SessionKey, CachedWriter>,
    uses: u64,
}

pub(crate) struct CachedWriter {
    pub(crate) handle: SessionHandle,
    /// When it was last used, on the service's clock.
    pub(crate) last_used: Timestamp,
    /// The cache's use counter at its last use.
    pub(crate) last_use: u64,
    /// The keyed batches the catalog's index does not hold yet (`idempotency.rs`); built
    /// by the first append through the handle, outside the cache's lock.
    pub(crate) ledger: Option<idempotency::KeyLedger>,
    /// Where turns are open in the log, followed through the handle's appends since a
    /// resume that left none open (`runs.rs`): a detach that finds none open marks the
    /// log's end for the next resume.
    pub(crate) turns: Option<TrackedTurns>,
}

/// `CachedWriter::turns`.
pub(crate) struct TrackedTurns {
    pub(crate) open: berth_core::repair::OpenTurns,
    /// The log's last event as the following last saw it (none: the log was empty). The
    /// following speaks for the log only while the handle's next seq is the one after
    /// it: an event appended any other way through the handle ends it. Also what a
    /// mark at the end fingerprints (`ResumeMark::last`).
    pub(crate) last: Option<Event>,
    /// The seq of the log's latest checkpoint.
    pub(crate) checkpoint: Option<u64>,
}

impl TrackedTurns {
    /// The seq after the last event the following saw.
    fn next_seq(&self) -> u64 {
        self.last.as_ref().map_or(0, |event| event.seq.get() + 1)
    }
}

impl WriterCache {
    pub(crate) fn get(&mut self, key: &SessionKey, now: Timestamp) -> Option<SessionHandle> {
        self.uses += 1;
        let uses = self.uses;
        self.handles.get_mut(key).map(|cached| {
            cached.last_used = now;
            cached.last_use = uses;
            cached.handle.clone()
        })
    }

    pub(crate) fn insert(&mut self, key: SessionKey, handle: SessionHandle, now: Timestamp) {
        self.uses += 1;
        self.handles
            .insert(key, CachedWriter { handle, last_used: now, last_use: self.uses, ledger: None, turns: None });
    }

    /// Keys not used for at least `idle` before `now`.
    pub(crate) fn idle_for(&self, idle: std::time::Duration, now: Timestamp) -> Vec<SessionKey> {
        let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        self.handles
            .iter()
            .filter(|(_, cached)| now.0.saturating_sub(cached.last_used.0) >= idle_ms)
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// The least recently used keys beyond `max` (oldest first).
    pub(crate) fn beyond(&self, max: usize) -> Vec<SessionKey> {
        let excess = self.handles.len().saturating_sub(max);
        if excess == 0 {
            return Vec::new();
        }
        let mut by_use: Vec<(&SessionKey, u64)> =
            self.handles.iter().map(|(key, cached)| (key, cached.last_use)).collect();
        by_use.sort_unstable_by_key(|(_, last_used)| *last_used);
        by_use.into_iter().take(excess).map(|(key, _)| key.clone()).collect()
    }
}

impl SessionService {
    /// The next seq of this process's cached write handle for `key`, if it holds one.
    pub(crate) async fn cached_next_seq(&self, key: &SessionKey) -> Option<u64> {
        self.writers.lock().await.handles.get(key).map(|cached| cached.handle.next_seq())
    }

    /// Starts (or, with `None`, ends) following the turns of `key`'s log through its
    /// cached write handle. The caller holds the session's append lock.
    pub(crate) async fn track_turns(&self, key: &SessionKey, turns: Option<TrackedTurns>) {
        if let Some(cached) = self.writers.lock().await.handles.get_mut(key) {
            cached.turns = turns;
        }
    }

    /// Takes `events`, just appended through `key`'s cached write handle, into its
    /// followed turns; ends the following if they do not continue what it has seen.
    pub(crate) async fn turns_appended(&self, key: &SessionKey, events: &[Event]) {
        let mut writers = self.writers.lock().await;
        let Some(cached) = writers.handles.get_mut(key) else { return };
        let Some(turns) = cached.turns.as_mut() else { return };
        let Some(appended) = events.last() else { return };
        if events[0].seq.get() != turns.next_seq() {
            cached.turns = None;
            return;
        }
        for event in events {
            turns.open.feed(event);
            if runs::is_checkpoint(event) {
                turns.checkpoint = Some(event.seq.get());
            }
        }
        turns.last = Some(appended.clone());
    }

    /// The mark a detach may leave (the caller holds the append lock): the log's end,
    /// when the turns followed through the cached handle are all closed and the handle
    /// has appended nothing they did not see.
    pub(crate) async fn mark_at_end(&self, key: &SessionKey) -> Option<ResumeMark> {
        let writers = self.writers.lock().await;
        let cached = writers.handles.get(key)?;
        let turns = cached.turns.as_ref()?;
        let last = turns.last.as_ref()?;
        if turns.next_seq() != cached.handle.next_seq() || turns.open.oldest_open().is_some() {
            return None;
        }
        let last = Some(ResumeMark::fingerprint(last));
        Some(ResumeMark { from: turns.next_seq(), checkpoint: turns.checkpoint, last })
    }

    pub(crate) fn append_lock(&self, key: &SessionKey) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.append_locks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(lock) = locks.get(key).and_then(std::sync::Weak::upgrade) {
            return lock;
        }
        if locks.len() >= 1024 {
            locks.retain(|_, lock| lock.strong_count() > 0);
        }
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        locks.insert(key.clone(), Arc::downgrade(&lock));
        lock
    }

    /// Caches a create's write handle of `key` (it holds the lease already) for the
    /// appends that follow, evicting beyond the cache's bound as `writer` does.
    pub(crate) async fn adopt_writer(&self, key: &SessionKey, handle: SessionHandle) {
        let victims = {
            let mut writers = self.writers.lock().await;
            writers.insert(key.clone(), handle, self.now());
            writers.beyond(self.writers_cached_max)
        };
        self.evict(victims).await;
    }

    /// The cached write handle of `key`, opened if needed. Callers hold the session's
    /// append lock while they use it (eviction takes that lock before closing a handle).
    pub(crate) async fn writer(&self, key: &SessionKey) -> Result<SessionHandle> {
        let (handle, victims) = {
            let mut writers = self.writers.lock().await;
            if let Some(handle) = writers.get(key, self.now()) {
                return Ok(handle);
            }
            let handle = self.store.open(key, Access::Write).await.map_err(held_elsewhere)?;
            writers.insert(key.clone(), handle.clone(), self.now());
            (handle, writers.beyond(self.writers_cached_max))
        };
        self.evict(victims).await;
        Ok(handle)
    }

    /// Closes the cached write handles not used for `idle` (and not in use now), which
    /// releases their sessions' writer leases: on a store shared by several servers
    /// (PostgreSQL), another server can then write those sessions without waiting for
    /// this one to stop. Returns how many were closed. `berth serve` runs it periodically.
    pub async fn close_idle_writers(&self, idle: std::time::Duration) -> usize {
        let now = self.now();
        let victims = self.writers.lock().await.idle_for(idle, now);
        self.evict(victims).await
    }

    /// Closes cached write handles nobody is using (their session's append lock is
    /// free), so open handles — and their file descriptors — stay bounded. Returns how
    /// many it closed.
    pub(crate) async fn evict(&self, victims: Vec<SessionKey>) -> usize {
        let mut closed = 0;
        for key in victims {
            let lock = self.append_lock(&key);
            let Ok(_no_append_meanwhile) = lock.try_lock() else { continue };
            let evicted = self.writers.lock().await.handles.remove(&key);
            if let Some(cached) = evicted {
                closed += 1;
                if let Err(error) = self.close_cached(&key, cached).await {
                    tracing::warn!(session = %key, %error, "closing an idle write handle failed");
                }
            }
        }
        closed
    }

    /// Closes the session's cached write handle, after any append in progress (as
    /// eviction does): closing under an append would let the next append open a second
    /// handle while the first is still registered, and answer `busy` on a single server.
    /// No caller holds the append lock.
    pub(crate) async fn close_writer(&self, key: &SessionKey) {
        let lock = self.append_lock(key);
        let _no_append_meanwhile = lock.lock().await;
        self.close_locked_writer(key).await;
    }

    /// Runs `work` (an append, attach or detach) under the session's append lock. A
    /// session `work` found expired has its write handle closed once the lock is let
    /// go: `observe_expiry` cannot close it under the lock (`close_writer_if_free`).
    pub(crate) async fn under_append_lock<T>(
        &self,
        key: &SessionKey,
        work: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let outcome = {
            let lock = self.append_lock(key);
            let _one_at_a_time = lock.lock().await;
            work.await
        };
        if let Err(Error::Terminal { .. }) = &outcome {
            self.close_writer(key).await;
        }
        outcome
    }

    /// `close_writer` unless the session's append lock is held (by an append, an attach or
    /// a detach, which close it themselves once they let go when the session turned
    /// terminal): never waits.
    pub(crate) async fn close_writer_if_free(&self, key: &SessionKey) {
        let lock = self.append_lock(key);
        let Ok(_no_append_meanwhile) = lock.try_lock() else { return };
        self.close_locked_writer(key).await;
    }

    /// Closes the cached write handle of `key`, whose append lock the caller holds.
    async fn close_locked_writer(&self, key: &SessionKey) {
        let handle = self.writers.lock().await.handles.remove(key);
        if let Some(cached) = handle {
            if let Err(error) = self.close_cached(key, cached).await {
                tracing::warn!(session = %key, %error, "closing write handle failed");
            }
        }
    }

    /// Brings the catalog's idempotency index up to the log's end, then closes the
    /// handle. A failed index write only leaves the index lagging (the next writer reads
    /// the log from where it stops), so the handle is closed either way.
    pub(crate) async fn close_cached(&self, key: &SessionKey, cached: CachedWriter) -> Result<()> {
        // Without a ledger (no append through this handle) nothing is known to index.
        if let Some(mut ledger) = cached.ledger {
            if let Err(error) = ledger.write(self.catalog.as_ref(), key).await {
                tracing::warn!(session = %key, %error, "writing the idempotency index failed (it lags the log)");
            }
        }
        cached.handle.close().await
    }

    /// Builds the cached handle's key ledger if this is its first append (a catalog read
    /// and a bounded log read, done without holding the cache). The caller holds the
    /// session's append lock, so the log cannot move meanwhile.
    pub(crate) async fn open_ledger(&self, key: &SessionKey, writer: &SessionHandle) -> Result<()> {
        let built = self.writers.lock().await.handles.get(key).is_none_or(|cached| cached.ledger.is_some());
        if built {
            return Ok(());
        }
        let ledger = idempotency::KeyLedger::open(self.catalog.as_ref(), key, writer).await?;
        if let Some(cached) = self.writers.lock().await.handles.get_mut(key) {
            cached.ledger.get_or_insert(ledger);
        }
        Ok(())
    }

    /// Closes every cached write handle (draining them), e.g. at shutdown, after writing
    /// the activity that appends left pending to the catalog.
    pub async fn shutdown(&self) -> Result<()> {
        if let Err(error) = self.flush_activity().await {
            tracing::warn!(%error, "could not record held activity at shutdown");
        }
        let keys: Vec<SessionKey> = self.writers.lock().await.handles.keys().cloned().collect();
        for key in keys {
            if let Err(error) = self.sync_activity(&key).await {
                tracing::warn!(session = %key, %error, "could not record pending activity at shutdown");
            }
        }
        let handles: Vec<(SessionKey, CachedWriter)> = self.writers.lock().await.handles.drain().collect();
        let mut failures = Vec::new();
        for (key, cached) in handles {
            if let Err(error) = self.close_cached(&key, cached).await {
                failures.push((key.to_string(), error));
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(Error::Many(failures))
        }
    }

    /// Writes `event_count` (from the cached write handle) if the catalog lags behind it.
    pub(crate) async fn sync_activity(&self, key: &SessionKey) -> Result<()> {
        for _ in 0..CAS_RETRIES_MAX {
            let Some(record) = self.catalog.get(key).await? else { return Ok(()) };
            match self.cached_next_seq(key).await {
                Some(next_seq) if next_seq > record.event_count => {}
                _ => return Ok(()),
            }
            let mut next = record.clone();
            match self.save(&mut next, record.revision).await {
                Err(Error::RevisionConflict { .. }) => continue,
                other => return other,
            }
        }
        Ok(())
    }
}

/// The store's refusal of a write open whose lease another holder has (`AlreadyOwned`),
/// as the service reports it: `WriterBusy`, which callers wait out.
pub(crate) fn held_elsewhere(error: Error) -> Error {
    match error {
        Error::AlreadyOwned { id, holder } => Error::WriterBusy { id, holder },
        other => other,
    }
}
