//! Failure injection at the `LogBackend` seam: `FaultyBackend` wraps any backend and,
//! following a shared `FaultPlan`, counts append attempts per session, makes the next N
//! appends fail with a transient `Unavailable` (or panic) *before* delegating, and can
//! hold appends at a gate so a test can observe a drain in flight.
//!
//! Failing before delegation is deliberate: the wrapped backend never sees the failed
//! write, so a backend that poisons its handle after a real I/O failure (R-J2) is not
//! poisoned by an injected one, and the retry reaches the real backend.

use async_trait::async_trait;
use berth_core::{Epoch, Error, Event, Result, SessionHeader, SessionKey};
use berth_store::{ListQuery, LogBackend, LogReader, LogStat, LogWriter, TailRecovery};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

#[derive(Default)]
struct PlanState {
    fail_next: HashMap<SessionKey, u32>,
    panic_next: HashMap<SessionKey, u32>,
    append_attempts: HashMap<SessionKey, u64>,
    sync_calls: HashMap<SessionKey, u64>,
}

/// What the faulty backend does to the next appends of each session. Shared by every
/// `LogStore` instance a conformance backend hands out.
pub struct FaultPlan {
    state: Mutex<PlanState>,
    /// `true` while appends may proceed.
    gate: watch::Sender<bool>,
    /// `true` while `stat` and write opens may proceed (they are how `create` and
    /// `open(write)` check and claim a session).
    claims_gate: watch::Sender<bool>,
}

impl std::fmt::Debug for FaultPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FaultPlan")
    }
}

impl FaultPlan {
    pub fn new() -> Arc<FaultPlan> {
        Arc::new(FaultPlan {
            state: Mutex::new(PlanState::default()),
            gate: watch::Sender::new(true),
            claims_gate: watch::Sender::new(true),
        })
    }

    fn state(&self) -> MutexGuard<'_, PlanState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The next `count` appends of `key` fail with `Error::Unavailable` before reaching
    /// the backend.
    pub fn fail_next_appends(&self, key: &SessionKey, count: u32) {
        self.state().fail_next.insert(key.clone(), count);
    }

    /// The next append of `key` panics inside the backend (a buggy driver).
    pub fn panic_next_append(&self, key: &SessionKey) {
        self.state().panic_next.insert(key.clone(), 1);
    }

    /// Cancels every planned failure of `key`.
    pub fn heal(&self, key: &SessionKey) {
        let mut state = self.state();
        state.fail_next.remove(key);
        state.panic_next.remove(key);
    }

    /// How many appends of `key` reached the backend seam (failed ones included).
    /// A materialization that carries events counts as an append.
    pub fn append_attempts(&self, key: &SessionKey) -> u64 {
        self.state().append_attempts.get(key).copied().unwrap_or(0)
    }

    /// How many times the store asked the writer of `key` to sync.
    pub fn sync_calls(&self, key: &SessionKey) -> u64 {
        self.state().sync_calls.get(key).copied().unwrap_or(0)
    }

    /// Appends wait at the gate (after being counted) until `release_appends`.
    pub fn hold_appends(&self) {
        self.gate.send_replace(false);
    }

    pub fn release_appends(&self) {
        self.gate.send_replace(true);
    }

    /// `stat` and `open_writer` wait at a gate until `release_claims`: a test can cancel
    /// a `create` or `open(write)` while its claim is in flight.
    pub fn hold_claims(&self) {
        self.claims_gate.send_replace(false);
    }

    pub fn release_claims(&self) {
        self.claims_gate.send_replace(true);
    }

    async fn before_claim(&self) {
        let mut gate = self.claims_gate.subscribe();
        let _ = gate.wait_for(|open| *open).await;
    }

    async fn before_append(&self, key: &SessionKey) -> Result<()> {
        *self.state().append_attempts.entry(key.clone()).or_default() += 1;
        let mut gate = self.gate.subscribe();
        // The sender lives as long as `self`, so waiting cannot fail.
        let _ = gate.wait_for(|open| *open).await;
        let mut state = self.state();
        if let Some(count) = state.panic_next.get_mut(key).filter(|count| **count > 0) {
            *count -= 1;
            drop(state);
            panic!("injected panic in the backend append of {key}");
        }
        if let Some(count) = state.fail_next.get_mut(key).filter(|count| **count > 0) {
            *count -= 1;
            return Err(Error::Unavailable { reason: format!("injected append failure for {key}") });
        }
        Ok(())
    }
}

/// A `LogBackend` that applies a `FaultPlan` to the appends of any inner backend.
pub struct FaultyBackend<B> {
    inner: B,
    plan: Arc<FaultPlan>,
}

impl<B: LogBackend> FaultyBackend<B> {
    pub fn new(inner: B, plan: Arc<FaultPlan>) -> FaultyBackend<B> {
        FaultyBackend { inner, plan }
    }

    pub fn inner(&self) -> &B {
        &self.inner
    }

    fn wrap(&self, key: SessionKey, writer: Box<dyn LogWriter>) -> Box<dyn LogWriter> {
        Box::new(FaultyWriter { inner: writer, key, plan: self.plan.clone() })
    }
}

#[async_trait]
impl<B: LogBackend> LogBackend for FaultyBackend<B> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    async fn stat(&self, key: &SessionKey) -> Result<Option<LogStat>> {
        self.plan.before_claim().await;
        self.inner.stat(key).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<LogStat>> {
        self.inner.list(query).await
    }

    async fn open_reader(&self, key: &SessionKey) -> Result<Box<dyn LogReader>> {
        self.inner.open_reader(key).await
    }

    async fn open_writer(&self, key: &SessionKey) -> Result<Box<dyn LogWriter>> {
        self.plan.before_claim().await;
        let writer = self.inner.open_writer(key).await?;
        Ok(self.wrap(key.clone(), writer))
    }

    async fn materialize(&self, header: &SessionHeader, first_batch: &[Event]) -> Result<Box<dyn LogWriter>> {
        let key = header.key();
        if !first_batch.is_empty() {
            self.plan.before_append(&key).await?;
        }
        let writer = self.inner.materialize(header, first_batch).await?;
        Ok(self.wrap(key, writer))
    }

    async fn erase(&self, key: &SessionKey) -> Result<bool> {
        self.inner.erase(key).await
    }
}

struct FaultyWriter {
    inner: Box<dyn LogWriter>,
    key: SessionKey,
    plan: Arc<FaultPlan>,
}

#[async_trait]
impl LogWriter for FaultyWriter {
    fn header(&self) -> &SessionHeader {
        self.inner.header()
    }

    fn next_seq(&self) -> u64 {
        self.inner.next_seq()
    }

    fn epoch(&self) -> Epoch {
        self.inner.epoch()
    }

    fn recovery(&self) -> Option<TailRecovery> {
        self.inner.recovery()
    }

    async fn read(&mut self, offset: u64, length: u64) -> Result<Vec<Event>> {
        self.inner.read(offset, length).await
    }

    async fn read_before(&mut self, before: u64, limit: u64) -> Result<Vec<Event>> {
        self.inner.read_before(before, limit).await
    }

    async fn read_seqs(&mut self, seqs: &[u64]) -> Result<Vec<Event>> {
        self.inner.read_seqs(seqs).await
    }

    async fn append(&mut self, batch: &[Event]) -> Result<()> {
        self.plan.before_append(&self.key).await?;
        self.inner.append(batch).await
    }

    async fn sync(&mut self) -> Result<()> {
        *self.plan.state().sync_calls.entry(self.key.clone()).or_default() += 1;
        self.inner.sync().await
    }

    async fn release(&mut self) -> Result<()> {
        self.inner.release().await
    }
}
