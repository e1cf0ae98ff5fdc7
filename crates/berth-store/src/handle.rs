//! `SessionHandle`: one type for both accesses (R-P2). Mutation through a read handle
//! is `ReadOnly`; every operation after `close` is `HandleClosed`.

use crate::backend::{LogReader, LogWriter, TailRecovery};
use crate::live::{event_bytes, LiveBuffer};
use crate::store::StoreInner;
use berth_core::error::panic_message;
use berth_core::json::minify_strict;
use berth_core::limits::{
    BATCH_BYTES_MAX, BATCH_EVENTS_MAX, LIVE_BUFFER_BYTES_MAX, LIVE_WINDOW_BYTES_MAX, LIVE_WINDOW_MS,
};
use berth_core::vocabulary::{check_stored, validate_for_append};
use berth_core::{Concurrency, Epoch, Error, Event, Location, Result, SessionHeader, SessionKey};
use std::future::Future;

/// Most distinct seqs one point read (`SessionHandle::read_seqs`) may name: a page.
pub const READ_SEQS_MAX: usize = berth_core::limits::PAGE_SIZE_MAX;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    Read,
    Write,
}

enum State {
    /// A created write handle whose session is not materialized yet.
    Pending,
    Writer(Box<dyn LogWriter>),
    /// `reader` is `None` while the session was pending when opened.
    Reader {
        reader: Option<Box<dyn LogReader>>,
        observed_len: u64,
    },
    Closed,
}

pub(crate) struct HandleShared {
    store: Arc<StoreInner>,
    key: SessionKey,
    header: SessionHeader,
    access: Access,
    pending_id: u64,
    /// Set at open, or when a created session materializes.
    epoch: Mutex<Option<Epoch>>,
    recovery: Option<TailRecovery>,
    state: tokio::sync::Mutex<State>,
    live: Mutex<LiveBuffer>,
    closed: AtomicBool,
    pending: AtomicBool,
    weak_self: Weak<HandleShared>,
}

impl HandleShared {
    /// A writer's next seq, epoch and tail recovery come from the writer itself.
    fn build(
        store: Arc<StoreInner>,
        header: SessionHeader,
        access: Access,
        state: State,
        pending_id: u64,
    ) -> Arc<HandleShared> {
        let pending = matches!(state, State::Pending);
        let (next_seq, epoch, recovery) = match &state {
            State::Writer(writer) => (writer.next_seq(), Some(writer.epoch()), writer.recovery()),
            _ => (0, None, None),
        };
        Arc::new_cyclic(|weak_self| HandleShared {
            store,
            key: header.key(),
            header,
            access,
            pending_id,
            epoch: Mutex::new(epoch),
            recovery,
            state: tokio::sync::Mutex::new(state),
            live: Mutex::new(LiveBuffer::new(next_seq)),
            closed: AtomicBool::new(false),
            pending: AtomicBool::new(pending),
            weak_self: weak_self.clone(),
        })
    }

    pub(crate) fn new_pending(store: Arc<StoreInner>, header: SessionHeader, pending_id: u64) -> Arc<HandleShared> {
        Self::build(store, header, Access::Write, State::Pending, pending_id)
    }

    pub(crate) fn new_writer(store: Arc<StoreInner>, writer: Box<dyn LogWriter>) -> Arc<HandleShared> {
        let header = writer.header().clone();
        Self::build(store, header, Access::Write, State::Writer(writer), 0)
    }

    pub(crate) fn new_reader(
        store: Arc<StoreInner>,
        header: SessionHeader,
        reader: Option<Box<dyn LogReader>>,
    ) -> Arc<HandleShared> {
        Self::build(store, header, Access::Read, State::Reader { reader, observed_len: 0 }, 0)
    }

    pub(crate) fn header(&self) -> &SessionHeader {
        &self.header
    }

    pub(crate) fn pending_id(&self) -> u64 {
        self.pending_id
    }

    pub(crate) fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire) && !self.closed.load(Ordering::Acquire)
    }

    fn live(&self) -> MutexGuard<'_, LiveBuffer> {
        self.live.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn check_open(&self, operation: &'static str) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::HandleClosed { id: self.key.id.to_string(), operation });
        }
        Ok(())
    }

    fn check_writable(&self, operation: &'static str) -> Result<()> {
        self.check_open(operation)?;
        if self.access == Access::Read {
            return Err(Error::ReadOnly { id: self.key.id.to_string(), operation });
        }
        Ok(())
    }

    /// A read handle's backend reader, opened now if the session was pending when the
    /// handle was; `None` while it is still not materialized (it reads as empty).
    async fn materialized_reader<'a>(
        &self,
        reader: &'a mut Option<Box<dyn LogReader>>,
    ) -> Result<Option<&'a mut Box<dyn LogReader>>> {
        if reader.is_none() {
            match self.store.backend.open_reader(&self.key).await {
                Ok(opened) => *reader = Some(opened),
                Err(Error::NotFound { .. }) => return Ok(None),
                Err(error) => return Err(error),
            }
        }
        Ok(reader.as_mut())
    }

    /// Writes one batch through the state: materializes a pending session first.
    async fn write_batch(&self, state: &mut State, batch: &[Event]) -> Result<()> {
        let outcome = self.write_batch_unchecked(state, batch).await;
        if outcome.is_err() {
            self.live().flushed_next_seq = None;
        }
        outcome
    }

    async fn write_batch_unchecked(&self, state: &mut State, batch: &[Event]) -> Result<()> {
        match state {
            State::Pending => {
                let writer = self.store.backend.materialize(&self.header, batch).await?;
                *self.epoch.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(writer.epoch());
                *state = State::Writer(writer);
                self.pending.store(false, Ordering::Release);
                Ok(())
            }
            State::Writer(writer) => writer.append(batch).await,
            State::Reader { .. } => Err(Error::ReadOnly { id: self.key.id.to_string(), operation: "append" }),
            State::Closed => Err(Error::HandleClosed { id: self.key.id.to_string(), operation: "append" }),
        }
    }

    /// One drain attempt of everything buffered, in batches. On failure the undrained
    /// events go back in front (order kept) and the timer pauses.
    async fn drain(&self, state: &mut State) -> Result<()> {
        loop {
            let batch = self.live().next_drain_batch();
            if batch.is_empty() {
                return Ok(());
            }
            if let Err(error) = self.write_batch(state, &batch).await {
                self.live().restore_front(batch);
                return Err(error);
            }
        }
    }

    /// An explicit drain (flush, append, close): retries a failed background batch
    /// exactly once and reports the outcome; success clears the pause.
    async fn drain_explicit(&self, state: &mut State) -> Result<()> {
        self.drain(state).await?;
        self.live().drained_explicitly();
        Ok(())
    }

    /// The final drain of `close`: drains until the buffer is empty and marks the handle
    /// closed while holding the live lock, so a concurrent `publish` is either drained
    /// here or refused with `HandleClosed`, never accepted and then dropped. On failure
    /// the undrained events are discarded (they were never acknowledged as durable).
    async fn drain_and_seal(&self, state: &mut State) -> Result<()> {
        loop {
            let outcome = self.drain_explicit(state).await;
            let mut live = self.live();
            if live.seal_after_final_drain(outcome.is_err()) {
                self.closed.store(true, Ordering::Release);
                return outcome;
            }
        }
    }

    /// Closes the handle without touching storage, after `close` itself failed beyond
    /// the error vocabulary (a panicking backend): drops the writer (which releases its
    /// lease) and the registry slot, so ownership is released as `close` promises.
    async fn abandon(&self) {
        let mut state = self.state.lock().await;
        let previous = std::mem::replace(&mut *state, State::Closed);
        {
            let mut live = self.live();
            self.closed.store(true, Ordering::Release);
            live.events.clear();
            live.bytes = 0;
        }
        drop(previous);
        if self.access == Access::Write {
            self.store.release_slot(&self.key, Some(self));
        }
    }

    /// `append` after validation, holding the state lock for the whole write.
    async fn append_validated(&self, batch: &[Event]) -> Result<()> {
        let mut state = self.state.lock().await;
        self.check_open("append")?;
        self.drain_explicit(&mut state).await?;
        let start = {
            let mut live = self.live();
            check_contiguous(live.next_seq, batch)?;
            let start = live.next_seq;
            live.next_seq += batch.len() as u64;
            start
        };
        let outcome = self.write_batch(&mut state, batch).await;
        if outcome.is_err() {
            let mut live = self.live();
            if live.events.is_empty() && live.next_seq == start + batch.len() as u64 {
                live.next_seq = start;
            }
        }
        outcome
    }

    async fn drain_background(self: Arc<Self>) {
        let mut state = self.state.lock().await;
        if self.live().paused || matches!(*state, State::Closed) {
            return;
        }
        if let Err(error) = self.drain(&mut state).await {
            tracing::warn!(
                session = %self.key,
                %error,
                "background write for session failed (buffered events retained)"
            );
            self.live().background_error = Some(error);
        }
    }

    fn spawn_drain(&self, delay: Option<Duration>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime: events wait for the next explicit drain
        };
        let weak = self.weak_self.clone();
        runtime.spawn(async move {
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            if let Some(shared) = weak.upgrade() {
                shared.drain_background().await;
            }
        });
    }
}

impl Drop for HandleShared {
    /// A handle dropped without `close`: drain and release in the background when a
    /// runtime exists (failures are logged, not thrown); otherwise dropping the writer
    /// releases its lease and buffered events are lost (they were never acknowledged).
    ///
    /// While the background drain runs, the registry slot stays claimed: the backend
    /// writer (and its lease) is still in use, so another write open or a `create` of
    /// the same id in this instance must wait (`AlreadyOwned` / `AlreadyExists`) rather
    /// than race the drain.
    fn drop(&mut self) {
        let state = std::mem::replace(self.state.get_mut(), State::Closed);
        let buffered = std::mem::take(&mut *self.live());
        let owns_slot = self.access == Access::Write && !self.closed.load(Ordering::Acquire);
        let needs_final_drain =
            matches!(state, State::Writer(_)) || (!buffered.events.is_empty() && matches!(state, State::Pending));
        let runtime = tokio::runtime::Handle::try_current().ok();
        match (runtime, needs_final_drain) {
            (Some(runtime), true) => {
                let claim = ClaimRelease {
                    store: self.store.clone(),
                    key: self.key.clone(),
                    claimed: owns_slot && self.store.reclaim_slot(&self.key, self),
                };
                let header = self.header.clone();
                runtime.spawn(async move {
                    // Released when this task ends, also if it panics or never runs.
                    let claim = claim;
                    if let Err(error) = final_drain(&claim.store, &header, state, buffered).await {
                        tracing::warn!(session = %claim.key, %error, "final drain for session failed");
                    }
                });
            }
            _ => {
                drop(state);
                if owns_slot {
                    self.store.release_slot(&self.key, Some(self));
                }
            }
        }
    }
}

/// Releases a registry claim when dropped.
struct ClaimRelease {
    store: Arc<StoreInner>,
    key: SessionKey,
    claimed: bool,
}

impl Drop for ClaimRelease {
    fn drop(&mut self) {
        if self.claimed {
            self.store.release_slot(&self.key, None);
        }
    }
}

async fn final_drain(store: &StoreInner, header: &SessionHeader, state: State, mut buffered: LiveBuffer) -> Result<()> {
    let mut writer = match state {
        State::Writer(writer) => writer,
        State::Pending => store.backend.materialize(header, &buffered.take_batch()).await?,
        _ => return Ok(()),
    };
    let mut outcome = Ok(());
    loop {
        let batch = buffered.take_batch();
        if batch.is_empty() {
            break;
        }
        outcome = writer.append(&batch).await;
        if outcome.is_err() {
            break;
        }
    }
    if outcome.is_ok() {
        outcome = writer.sync().await;
    }
    let released = writer.release().await;
    outcome.and(released)
}

/// An open session log. Cheap to clone; clones share the same handle (closing one
/// closes all).
#[derive(Clone)]
pub struct SessionHandle {
    shared: Arc<HandleShared>,
}

impl std::fmt::Debug for SessionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SessionHandle({}, {:?})", self.shared.key, self.shared.access)
    }
}

impl SessionHandle {
    pub(crate) fn from_shared(shared: Arc<HandleShared>) -> SessionHandle {
        SessionHandle { shared }
    }

    pub(crate) fn shared(&self) -> &HandleShared {
        &self.shared
    }

    pub fn key(&self) -> &SessionKey {
        &self.shared.key
    }

    pub fn header(&self) -> &SessionHeader {
        &self.shared.header
    }

    pub fn access(&self) -> Access {
        self.shared.access
    }

    /// The writer lease's fencing epoch (write handles of materialized sessions).
    pub fn epoch(&self) -> Option<Epoch> {
        *self.shared.epoch.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What the write open found at the physical tail (a torn tail it will truncate).
    pub fn recovery(&self) -> Option<&TailRecovery> {
        self.shared.recovery.as_ref()
    }

    /// The seq this handle accepts next (stored events plus published ones).
    pub fn next_seq(&self) -> u64 {
        self.shared.live().next_seq
    }

    /// Events `offset ..` (at most `length`, or to the end) of the committed log; never
    /// a torn tail; monotonic per handle.
    pub async fn read(&self, offset: u64, length: Option<u64>) -> Result<Vec<Event>> {
        let shared = &self.shared;
        shared.check_open("read")?;
        let length = length.unwrap_or(u64::MAX);
        let mut state = shared.state.lock().await;
        let events = match &mut *state {
            State::Pending => Vec::new(),
            State::Writer(writer) => writer.read(offset, length).await?,
            State::Reader { reader, observed_len } => {
                let Some(reader) = shared.materialized_reader(reader).await? else {
                    return Ok(Vec::new());
                };
                let events = reader.read(offset, length).await?;
                check_monotonic(&shared.key, offset, length, events.len() as u64, observed_len)?;
                events
            }
            State::Closed => return Err(Error::HandleClosed { id: shared.key.id.to_string(), operation: "read" }),
        };
        drop(state);
        events.iter().try_for_each(check_stored)?;
        Ok(events)
    }

    /// Up to `limit` events before seq `before`, in ascending order: the last `limit`
    /// events of the committed log when `before` is at or past its end (R-S15). Never a
    /// torn tail; monotonic per handle like `read`. A backend reads only near the
    /// requested range, also on a log no handle had open.
    pub async fn read_before(&self, before: u64, limit: u64) -> Result<Vec<Event>> {
        let shared = &self.shared;
        shared.check_open("read")?;
        let mut state = shared.state.lock().await;
        let events = match &mut *state {
            State::Pending => Vec::new(),
            State::Writer(writer) => writer.read_before(before, limit).await?,
            State::Reader { reader, observed_len } => {
                let Some(reader) = shared.materialized_reader(reader).await? else {
                    return Ok(Vec::new());
                };
                let events = reader.read_before(before, limit).await?;
                check_monotonic_before(&shared.key, before, limit, &events, observed_len)?;
                events
            }
            State::Closed => return Err(Error::HandleClosed { id: shared.key.id.to_string(), operation: "read" }),
        };
        drop(state);
        self.checked_before(before, limit, events)
    }

    /// What a `read_before` read, once its shape and every event are checked.
    fn checked_before(&self, before: u64, limit: u64, events: Vec<Event>) -> Result<Vec<Event>> {
        check_before_shape(&self.shared.key, before, limit, &events)?;
        events.iter().try_for_each(check_stored)?;
        Ok(events)
    }

    /// `read_before` through this write handle when it is idle: `None` — nothing read —
    /// when it is not a materialized write handle or an append or another read holds it
    /// now (a reader then opens its own handle instead of queuing behind a durable
    /// write). A write handle reads its log without opening it again.
    pub async fn try_read_before(&self, before: u64, limit: u64) -> Result<Option<Vec<Event>>> {
        let shared = &self.shared;
        shared.check_open("read")?;
        let Ok(mut state) = shared.state.try_lock() else { return Ok(None) };
        let State::Writer(writer) = &mut *state else { return Ok(None) };
        let events = writer.read_before(before, limit).await?;
        drop(state);
        self.checked_before(before, limit, events).map(Some)
    }

    /// The events at the given seqs (a point read by position), each once, in ascending
    /// order whatever the order or repetition asked. At most [`READ_SEQS_MAX`] distinct
    /// seqs (`LimitExceeded` on the page size above it, nothing read); a seq at or past
    /// the end of the committed log is `NotFound` (`what: "event"`, `id`: the first such
    /// seq).
    /// One backend call reads them all (in one pass where the backend can), and each
    /// event is read and checked as a `read` of its run of consecutive seqs would: never
    /// a torn tail, monotonic per handle.
    pub async fn read_seqs(&self, seqs: &[u64]) -> Result<Vec<Event>> {
        let mut wanted = seqs.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        if wanted.len() > READ_SEQS_MAX {
            return Err(Error::LimitExceeded {
                what: berth_core::limits::Limit::PageSize,
                limit: READ_SEQS_MAX as u64,
                actual: wanted.len() as u64,
            });
        }
        let shared = &self.shared;
        shared.check_open("read")?;
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let mut state = shared.state.lock().await;
        let events = match &mut *state {
            State::Pending => Vec::new(),
            State::Writer(writer) => {
                let events = writer.read_seqs(&wanted).await?;
                check_seqs_shape(&shared.key, &wanted, &events)?;
                events
            }
            State::Reader { reader, observed_len } => match shared.materialized_reader(reader).await? {
                None => Vec::new(),
                Some(reader) => {
                    let events = reader.read_seqs(&wanted).await?;
                    check_seqs_shape(&shared.key, &wanted, &events)?;
                    check_monotonic_seqs(&shared.key, &wanted, events.len(), observed_len)?;
                    events
                }
            },
            State::Closed => return Err(Error::HandleClosed { id: shared.key.id.to_string(), operation: "read" }),
        };
        drop(state);
        events.iter().try_for_each(check_stored)?;
        if let Some(missing) = wanted.get(events.len()) {
            return Err(Error::NotFound { what: "event", id: missing.to_string() });
        }
        Ok(events)
    }

    /// Appends a batch whose first seq is the handle's next seq, after any published
    /// events. Resolves when the batch is stored (durable if the backend syncs per
    /// append). On error nothing of the batch is stored.
    ///
    /// Not cancellable once validated: the write runs to completion even if the caller's
    /// future is dropped, so the handle's next seq always matches what was stored.
    pub async fn append(&self, batch: &[Event]) -> Result<()> {
        self.shared.check_writable("append")?;
        if batch.is_empty() {
            return Ok(());
        }
        validate_batch(&self.shared.header, batch)?;
        let shared = self.shared.clone();
        let batch = batch.to_vec();
        run_to_completion(&self.shared.key, async move { shared.append_validated(&batch).await }).await
    }
    /// Publishes one event without waiting: it is stored within the live window (or
    /// sooner when the window fills). Only `flush` or `close` make it durable and surface
    /// a background failure.
    pub fn publish(&self, event: Event) -> Result<()> {
        let shared = &self.shared;
        shared.check_writable("publish")?;
        validate_batch(&shared.header, std::slice::from_ref(&event))?;
        let (arm_timer, drain_now) = {
            let mut live = shared.live();
            // Checked again under the live lock: `close` seals the handle under it.
            shared.check_open("publish")?;
            check_contiguous(live.next_seq, std::slice::from_ref(&event))?;
            let size = event_bytes(&event);
            if live.bytes + size > LIVE_BUFFER_BYTES_MAX {
                return Err(Error::LimitExceeded {
                    what: berth_core::limits::Limit::LiveBufferBytes,
                    limit: LIVE_BUFFER_BYTES_MAX as u64,
                    actual: (live.bytes + size) as u64,
                });
            }
            let accepted = live.accept(event, LIVE_WINDOW_BYTES_MAX);
            (accepted.arm_timer, accepted.drain_now)
        };
        if drain_now {
            shared.spawn_drain(None);
        } else if arm_timer {
            shared.spawn_drain(Some(Duration::from_millis(LIVE_WINDOW_MS)));
        }
        Ok(())
    }

    /// Durability barrier: drains published events (retrying a failed background batch
    /// exactly once and reporting its failure), then syncs; materializes an empty created
    /// session.
    ///
    /// Not cancellable: a dropped caller does not abort a drain half-way.
    pub async fn flush(&self) -> Result<()> {
        self.shared.check_writable("flush")?;
        let shared = self.shared.clone();
        // Group commit: the barrier covers what was published or appended before this
        // call. When a flush that ran while this one waited for the state lock already
        // drained and synced all of it, there is nothing to do. Without this, concurrent
        // publishers of one session convoy: each queued flush, its own event already
        // durable, drains and syncs the one event the previously released publisher just
        // added — one sync per event instead of one per group.
        let covered_seq = shared.live().next_seq;
        run_to_completion(&self.shared.key, async move {
            let mut state = shared.state.lock().await;
            shared.check_open("flush")?;
            let covered = shared.live().flush_covers(covered_seq);
            if matches!(*state, State::Writer(_)) && covered {
                return Ok(());
            }
            shared.drain_explicit(&mut state).await?;
            let drained_seq = shared.live().drained_seq();
            let outcome = match &mut *state {
                State::Pending => shared.write_batch(&mut state, &[]).await,
                State::Writer(writer) => writer.sync().await,
                _ => Ok(()),
            };
            if outcome.is_ok() {
                shared.live().record_flush(drained_seq);
            }
            outcome
        })
        .await
    }

    /// Idempotent, not cancellable: drains until empty, completes durability, and always
    /// releases ownership. A never-materialized session is erased.
    pub async fn close(&self) -> Result<()> {
        let shared = self.shared.clone();
        // Run to completion even if the caller's future is dropped.
        let task = async move {
            let mut state = shared.state.lock().await;
            if matches!(*state, State::Closed) {
                return Ok(());
            }
            let mut outcome = Ok(());
            if shared.access == Access::Write {
                outcome = shared.drain_and_seal(&mut state).await;
            }
            let previous = std::mem::replace(&mut *state, State::Closed);
            shared.closed.store(true, Ordering::Release);
            if let State::Writer(mut writer) = previous {
                let synced = writer.sync().await;
                let released = writer.release().await;
                outcome = outcome.and(synced).and(released);
            }
            if shared.access == Access::Write {
                shared.live().events.clear();
                shared.store.release_slot(&shared.key, Some(&shared));
            }
            outcome
        };
        // Polled here, on the caller's task (a spawned task and its join cost two thread
        // hops, more than a read handle's whole close); moved to a task of its own only if
        // the caller gives up first.
        let outcome = run_to_completion(&self.shared.key, task).await;
        if outcome.is_err() {
            // A panic inside left the state as it was: close without touching storage.
            // After any other failure the handle is closed and its slot released
            // already, and this changes nothing.
            self.shared.abandon().await;
        }
        outcome
    }
}

/// Runs `work` to completion even if the awaiting future is dropped: a storage write (or
/// a close) is never abandoned half-way by a cancelled caller. `work` is polled on the caller's own
/// task (spawning it and joining the task cost two thread hops per append, the largest
/// part of a durable append's overhead over the raw `fdatasync`); only if the caller
/// drops this future while `work` is still pending does the remainder move to a task of
/// its own. A panic inside becomes `Unavailable`.
fn run_to_completion<F>(key: &SessionKey, work: F) -> RunToCompletion
where
    F: Future<Output = Result<()>> + Send + 'static,
{
    RunToCompletion { key: key.to_string(), work: Some(Box::pin(work)) }
}

pub(crate) struct RunToCompletion {
    key: String,
    work: Option<Pin<Box<dyn Future<Output = Result<()>> + Send>>>,
}

impl Future for RunToCompletion {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = &mut *self;
        let Some(work) = this.work.as_mut() else {
            return Poll::Ready(Err(Error::Unavailable {
                reason: format!("write to session {} polled after completion", this.key),
            }));
        };
        let outcome = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work.as_mut().poll(cx))) {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(outcome)) => outcome,
            Err(panic) => Err(Error::Unavailable {
                reason: format!("write to session {} failed: panicked: {}", this.key, panic_message(&*panic)),
            }),
        };
        this.work = None;
        Poll::Ready(outcome)
    }
}

impl Drop for RunToCompletion {
    fn drop(&mut self) {
        let Some(work) = self.work.take() else { return };
        // The caller gave up while the write was in flight: finish it in the background.
        // Without a runtime there is nothing to finish it on (the caller was not driven by
        // one either).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let key = std::mem::take(&mut self.key);
            runtime.spawn(async move {
                if let Err(error) = work.await {
                    tracing::warn!(session = %key, %error, "write whose caller gave up failed");
                }
            });
        }
    }
}

fn validate_batch(header: &SessionHeader, batch: &[Event]) -> Result<()> {
    if batch.len() > BATCH_EVENTS_MAX {
        return Err(Error::LimitExceeded {
            what: berth_core::limits::Limit::BatchEvents,
            limit: BATCH_EVENTS_MAX as u64,
            actual: batch.len() as u64,
        });
    }
    let bytes: usize = batch.iter().map(event_bytes).sum();
    if bytes > BATCH_BYTES_MAX {
        return Err(Error::LimitExceeded {
            what: berth_core::limits::Limit::BatchBytes,
            limit: BATCH_BYTES_MAX as u64,
            actual: bytes as u64,
        });
    }
    let parallel = matches!(header.policy.concurrency, Concurrency::Parallel { .. });
    for event in batch {
        validate_for_append(event)?;
        check_event_data(event)?;
        if parallel && event.run.is_none() {
            return Err(Error::invalid(
                "event",
                format!("seq {}: every event of a parallel session carries its run", event.seq),
            ));
        }
    }
    Ok(())
}

/// `JsonText` can be built without its checks (`From<&Value>` skips the depth limit,
/// `from_trusted_raw` skips everything), and the store is where events enter storage:
/// data must be within the depth limit (`LimitExceeded`), strict (no duplicate keys, no
/// lone surrogates) and minimal (no insignificant whitespace; `Invalid`), or a backend
/// would store text it cannot read back, or that another backend would store otherwise.
fn check_event_data(event: &Event) -> Result<()> {
    if event.data.is_verified() {
        return Ok(()); // built strict, minimal and within the depth limit; nothing to re-check
    }
    let text = event.data.as_str();
    let minimal = minify_strict(text.as_bytes()).map_err(|error| match error {
        Error::Invalid { reason, .. } => Error::invalid("event data", format!("seq {}: {reason}", event.seq)),
        other => other,
    })?;
    if minimal != text {
        return Err(Error::invalid("event data", format!("seq {}: data holds insignificant whitespace", event.seq)));
    }
    Ok(())
}

fn check_contiguous(next_seq: u64, batch: &[Event]) -> Result<()> {
    for (index, event) in batch.iter().enumerate() {
        let expected = next_seq + index as u64;
        if event.seq.get() != expected {
            return Err(Error::SeqConflict { expected, actual: event.seq.get() });
        }
    }
    Ok(())
}

/// A read handle never observes an older state than an earlier read on it.
fn check_monotonic(key: &SessionKey, offset: u64, length: u64, returned: u64, observed_len: &mut u64) -> Result<()> {
    let wanted_known = observed_len.saturating_sub(offset).min(length);
    if returned < wanted_known {
        return Err(Error::Corrupt {
            reason: format!("log of {key} shrank below {observed_len} events already read"),
            location: Location { artifact: key.to_string(), offset: None, seq: Some(offset + returned) },
        });
    }
    if returned > 0 {
        *observed_len = (*observed_len).max(offset + returned);
    }
    Ok(())
}

/// A pair assertion on what a backend's `read_seqs` returned: the events of a prefix of
/// `wanted`, in order.
fn check_seqs_shape(key: &SessionKey, wanted: &[u64], events: &[Event]) -> Result<()> {
    let misplaced = events.iter().zip(wanted).position(|(event, seq)| event.seq.get() != *seq);
    let Some(index) = misplaced.or((events.len() > wanted.len()).then_some(wanted.len())) else {
        return Ok(());
    };
    let found = events[index].seq.get();
    Err(Error::Corrupt {
        reason: format!("a point read of {key} returned seq {found} where another seq was asked"),
        location: Location { artifact: key.to_string(), offset: None, seq: Some(found) },
    })
}

/// A point read on a read handle never observes an older state than an earlier read on
/// it: a seq it leaves out (the first past the end it found) is not below what was seen.
fn check_monotonic_seqs(key: &SessionKey, wanted: &[u64], returned: usize, observed_len: &mut u64) -> Result<()> {
    if let Some(&missing) = wanted.get(returned) {
        if missing < *observed_len {
            return Err(Error::Corrupt {
                reason: format!("log of {key} shrank below {observed_len} events already read"),
                location: Location { artifact: key.to_string(), offset: None, seq: Some(missing) },
            });
        }
    }
    if let Some(last) = returned.checked_sub(1).map(|index| wanted[index]) {
        *observed_len = (*observed_len).max(last.saturating_add(1));
    }
    Ok(())
}

/// `read_before` on a read handle never observes an older state than an earlier read
/// on it: the events returned must reach `min(before, observed_len)`.
fn check_monotonic_before(
    key: &SessionKey,
    before: u64,
    limit: u64,
    events: &[Event],
    observed_len: &mut u64,
) -> Result<()> {
    let known_end = before.min(*observed_len);
    let returned_end = events.last().map_or(0, |event| event.seq.get() + 1);
    if limit > 0 && returned_end < known_end {
        return Err(Error::Corrupt {
            reason: format!("log of {key} shrank below {observed_len} events already read"),
            location: Location { artifact: key.to_string(), offset: None, seq: Some(returned_end) },
        });
    }
    *observed_len = (*observed_len).max(returned_end);
    Ok(())
}

/// A pair assertion on what a backend's `read_before` returned: contiguous ascending
/// seqs, all below `before`, at most `limit` of them.
fn check_before_shape(key: &SessionKey, before: u64, limit: u64, events: &[Event]) -> Result<()> {
    let first = events.first().map_or(0, |event| event.seq.get());
    let contiguous = events.iter().enumerate().all(|(index, event)| event.seq.get() == first + index as u64);
    let below = events.last().is_none_or(|event| event.seq.get() < before);
    if contiguous && below && events.len() as u64 <= limit {
        return Ok(());
    }
    Err(Error::Corrupt {
        reason: format!("a read of {key} before seq {before} returned seqs that are not the {limit} before it"),
        location: Location { artifact: key.to_string(), offset: None, seq: Some(first) },
    })
}
