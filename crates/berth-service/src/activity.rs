//! Coalesced activity: the catalog writes that appends cause (event count, last activity,
//! the activity lease's extension, the blank flag) happen at most about once per session
//! per window under a steady stream of appends, instead of once per append.
//!
//! Why: a durable append already pays one `fdatasync` for its events. Writing its
//! activity to the catalog as well (an SQLite commit that rewrites the session's row and
//! its five listing-index entries) cost as much again, and serialized every session's
//! appends on the catalog's single writer: 32 clients over 8 sessions ran at 8.0k
//! appends/s with the write and 13.7k/s without it (`berth-loadgen`, same sitting). The
//! log is the source of truth for events; the catalog's activity is a hint the service
//! keeps current.
//!
//! Rules:
//! - An append writes its activity at once unless the stored record's activity was
//!   written less than one window ago. It also writes at once for the session's first
//!   conversation event (the listing's blank flag) and whenever the stored lease has
//!   less than two windows left, so that no sweeper, in any process, can expire a session
//!   whose activity is held here.
//! - Otherwise the activity is held in memory (merged with what is already held) and a
//!   timer writes it one window later. Every other operation on the session writes it
//!   before reading the record (so records and revisions are always what the catalog
//!   holds); listing, the sweeper and `shutdown` write everything held first. Only the
//!   append path and the log's reads (which use the record to authorize and to observe
//!   its expiry, and return events) read the record with held activity overlaid.
//! - This process sees held activity at once; other processes see it at most about one
//!   window late. A crash loses at most what was held: the catalog then lags the log
//!   (never leads it), as after a power loss with a relaxed write, and the next write
//!   corrects it.

use berth_catalog::{Catalog, SessionRecord};
use berth_core::lifecycle::{self, LifecycleEvent};
use berth_core::{Error, Result, Revision, SessionKey, TenantId, Timestamp};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The default window (`SessionService::with_activity_window`).
pub const ACTIVITY_WINDOW_DEFAULT: Duration = Duration::from_millis(100);

/// Internal compare-and-set retries of one held-activity write.
const WRITE_RETRIES_MAX: usize = 16;

/// Activity of appends not yet written to the catalog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Held {
    next_seq: u64,
    last_activity: Timestamp,
    conversation: bool,
    ttl_ms: u64,
}

impl Held {
    /// Applies the held activity to `record` (never moves anything backwards).
    fn apply(&self, record: &mut SessionRecord) {
        record.event_count = record.event_count.max(self.next_seq);
        record.blank &= !self.conversation;
        record.last_activity = record.last_activity.max(self.last_activity);
        let appended = LifecycleEvent::Appended { ttl_ms: self.ttl_ms };
        if let Ok(next) = lifecycle::transition(record.lifecycle(), appended, self.last_activity) {
            record.lease_until = record.lease_until.max(next.lease_until);
        }
    }

    fn covered_by(&self, record: &SessionRecord) -> bool {
        record.event_count >= self.next_seq
            && record.last_activity >= self.last_activity
            && (!self.conversation || !record.blank)
    }
}

type HeldMap = Mutex<HashMap<SessionKey, Held>>;

pub(crate) struct ActivityHold {
    catalog: Arc<dyn Catalog>,
    window: Duration,
    held: Arc<HeldMap>,
    /// How many timer writes of held activity finished (written or failed): what a
    /// caller waits on to see held activity land on its own, without polling the clock.
    timer_writes: Arc<tokio::sync::watch::Sender<u64>>,
}

fn lock(held: &HeldMap) -> MutexGuard<'_, HashMap<SessionKey, Held>> {
    held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl ActivityHold {
    pub(crate) fn new(catalog: Arc<dyn Catalog>, window: Duration) -> ActivityHold {
        ActivityHold {
            catalog,
            window,
            held: Arc::new(Mutex::new(HashMap::new())),
            timer_writes: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }

    /// Changes each time a timer write of held activity finishes.
    pub(crate) fn timer_writes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.timer_writes.subscribe()
    }

    /// Holds the activity of an append that stored events up to `next_seq` at `now`,
    /// if the rules allow; `false` means the caller writes it at once. `record` is the
    /// session as the append loaded it (held activity overlaid).
    pub(crate) fn hold(&self, record: &SessionRecord, now: Timestamp, next_seq: u64, conversation: bool) -> bool {
        let incoming =
            Held { next_seq, last_activity: now, conversation, ttl_ms: record.header.policy.activity_ttl_ms };
        let mut held = lock(&self.held);
        let key = record.key();
        if let Some(existing) = held.get_mut(&key) {
            // A timer is already due within the window; the first conversation event
            // still goes out at once (below) so listings stop hiding the session.
            if !(conversation && !existing.conversation && record.blank) {
                existing.next_seq = existing.next_seq.max(next_seq);
                existing.last_activity = existing.last_activity.max(now);
                existing.conversation |= conversation;
                return true;
            }
            return false;
        }
        let window_ms = self.window.as_millis() as u64;
        let recent = now.0.saturating_sub(record.last_activity.0) < window_ms;
        let lease_ample = record.lease_until.0 > now.0.saturating_add(window_ms.saturating_mul(2));
        let runtime = tokio::runtime::Handle::try_current();
        if window_ms == 0 || !recent || !lease_ample || (conversation && record.blank) || runtime.is_err() {
            return false;
        }
        held.insert(key.clone(), incoming);
        drop(held);
        let (map, catalog, window) = (Arc::clone(&self.held), Arc::clone(&self.catalog), self.window);
        let timer_writes = Arc::clone(&self.timer_writes);
        if let Ok(runtime) = runtime {
            runtime.spawn(async move {
                tokio::time::sleep(window).await;
                let taken = lock(&map).remove(&key);
                if let Some(held) = taken {
                    if let Err(error) = write(&*catalog, &key, held).await {
                        tracing::warn!(session = %key, %error, "writing held activity failed (the catalog lags the log)");
                    }
                }
                timer_writes.send_modify(|finished| *finished += 1);
            });
        }
        true
    }

    /// Overlays held activity on a record read from the catalog (the append path).
    pub(crate) fn overlay(&self, record: &mut SessionRecord) {
        if let Some(held) = lock(&self.held).get(&record.key()) {
            held.apply(record);
        }
    }

    /// `record` was stored with at least the activity it was loaded with: what it covers
    /// need not be written again.
    pub(crate) fn written(&self, record: &SessionRecord) {
        let mut held = lock(&self.held);
        let key = record.key();
        if held.get(&key).is_some_and(|held| held.covered_by(record)) {
            held.remove(&key);
        }
    }

    /// Writes what is held for `key`, now.
    pub(crate) async fn write_one(&self, key: &SessionKey) -> Result<()> {
        let taken = lock(&self.held).remove(key);
        match taken {
            Some(held) => write(&*self.catalog, key, held).await,
            None => Ok(()),
        }
    }

    /// Writes everything held (of one tenant, or of all), now.
    pub(crate) async fn write_all(&self, tenant: Option<&TenantId>) -> Result<()> {
        let taken: Vec<(SessionKey, Held)> = {
            let mut held = lock(&self.held);
            let keys: Vec<SessionKey> =
                held.keys().filter(|key| tenant.is_none_or(|tenant| &key.tenant == tenant)).cloned().collect();
            keys.into_iter().filter_map(|key| held.remove(&key).map(|held| (key, held))).collect()
        };
        let mut failures = Vec::new();
        for (key, held) in taken {
            if let Err(error) = write(&*self.catalog, &key, held).await {
                failures.push((key.to_string(), error));
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(Error::Many(failures))
        }
    }
}

/// Writes held activity to the stored record (compare-and-set, retried on conflicts). A
/// session that is gone, or already covers it, needs nothing.
async fn write(catalog: &dyn Catalog, key: &SessionKey, held: Held) -> Result<()> {
    for _ in 0..WRITE_RETRIES_MAX {
        let Some(record) = catalog.get(key).await? else { return Ok(()) };
        if held.covered_by(&record) {
            return Ok(());
        }
        let mut next = record.clone();
        held.apply(&mut next);
        next.revision = Revision(record.revision.0 + 1);
        match catalog.update_activity(&next, record.revision).await {
            Err(Error::RevisionConflict { .. }) => continue,
            other => return other,
        }
    }
    Err(Error::Unavailable { reason: format!("metadata of session {key} kept changing") })
}
