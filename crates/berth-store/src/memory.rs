//! The in-memory backend: for tests and for embedding berth without persistence.
//!
//! `MemoryStorage` is the "disk": several `LogStore`s over one storage behave like
//! several processes over one data directory (each has its own registry; the writer
//! lease lives in the storage, so a second instance's write open is `AlreadyOwned`).

use crate::backend::{ChangeToken, ListQuery, LogBackend, LogReader, LogStat, LogWriter, TailRecovery};
use async_trait::async_trait;
use berth_core::{Epoch, Error, Event, Result, SessionHeader, SessionKey, WriteHolder};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Debug)]
struct StoredSession {
    header: SessionHeader,
    events: Vec<Event>,
    /// Bumped by every change of the log's content.
    version: u64,
    epoch: u64,
    writer_held: bool,
}

/// The shared "disk" of memory backends.
#[derive(Debug, Default)]
pub struct MemoryStorage {
    sessions: Mutex<BTreeMap<SessionKey, StoredSession>>,
}

impl MemoryStorage {
    pub fn new() -> Arc<MemoryStorage> {
        Arc::new(MemoryStorage::default())
    }

    fn sessions(&self) -> MutexGuard<'_, BTreeMap<SessionKey, StoredSession>> {
        self.sessions.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Test hook: stores an event verbatim, bypassing validation (as a newer berth or a
    /// damaged medium might have written it).
    pub fn inject_stored_event(&self, key: &SessionKey, event: Event) -> Result<()> {
        let mut sessions = self.sessions();
        let session = sessions.get_mut(key).ok_or_else(|| Error::session_not_found(&key.id))?;
        session.events.push(event);
        session.version += 1;
        Ok(())
    }

    /// Removes a session physically (used by the service's delete).
    pub fn erase(&self, key: &SessionKey) -> bool {
        self.sessions().remove(key).is_some()
    }
}

/// A backend over a `MemoryStorage`.
#[derive(Clone, Debug)]
pub struct MemoryBackend {
    storage: Arc<MemoryStorage>,
}

impl MemoryBackend {
    pub fn new(storage: Arc<MemoryStorage>) -> MemoryBackend {
        MemoryBackend { storage }
    }

    pub fn storage(&self) -> &Arc<MemoryStorage> {
        &self.storage
    }
}

fn stat_of(session: &StoredSession) -> LogStat {
    LogStat {
        header: session.header.clone(),
        change_token: ChangeToken(format!("memory:{}", session.version)),
        event_count: Some(session.events.len() as u64),
        size_bytes: None,
    }
}

/// The up to `limit` events before seq `before`.
fn slice_before(events: &[Event], before: u64, limit: u64) -> Vec<Event> {
    let end = usize::try_from(before).unwrap_or(usize::MAX).min(events.len());
    let start = end.saturating_sub(usize::try_from(limit).unwrap_or(usize::MAX));
    events[start..end].to_vec()
}

/// The events at `seqs` (ascending), up to the first one past the end.
fn pick(events: &[Event], seqs: &[u64]) -> Vec<Event> {
    seqs.iter().map_while(|seq| events.get(usize::try_from(*seq).ok()?)).cloned().collect()
}

fn slice(events: &[Event], offset: u64, length: u64) -> Vec<Event> {
    let start = usize::try_from(offset).unwrap_or(usize::MAX).min(events.len());
    let end = start.saturating_add(usize::try_from(length).unwrap_or(usize::MAX)).min(events.len());
    events[start..end].to_vec()
}

#[async_trait]
impl LogBackend for MemoryBackend {
    fn name(&self) -> &'static str {
        "memory"
    }

    async fn stat(&self, key: &SessionKey) -> Result<Option<LogStat>> {
        Ok(self.storage.sessions().get(key).map(stat_of))
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<LogStat>> {
        Ok(self
            .storage
            .sessions()
            .values()
            .filter(|session| query.matches(&session.header))
            .take(query.limit)
            .map(stat_of)
            .collect())
    }

    async fn open_reader(&self, key: &SessionKey) -> Result<Box<dyn LogReader>> {
        let sessions = self.storage.sessions();
        let session = sessions.get(key).ok_or_else(|| Error::session_not_found(&key.id))?;
        Ok(Box::new(MemoryReader { storage: self.storage.clone(), key: key.clone(), header: session.header.clone() }))
    }

    async fn open_writer(&self, key: &SessionKey) -> Result<Box<dyn LogWriter>> {
        let mut sessions = self.storage.sessions();
        let session = sessions.get_mut(key).ok_or_else(|| Error::session_not_found(&key.id))?;
        if session.writer_held {
            return Err(Error::AlreadyOwned { id: key.id.to_string(), holder: WriteHolder::AnotherProcess });
        }
        session.events.iter().try_for_each(berth_core::vocabulary::check_stored)?;
        session.writer_held = true;
        session.epoch += 1;
        Ok(Box::new(MemoryWriter {
            storage: self.storage.clone(),
            key: key.clone(),
            header: session.header.clone(),
            next_seq: session.events.len() as u64,
            epoch: session.epoch,
            released: false,
        }))
    }

    async fn erase(&self, key: &SessionKey) -> Result<bool> {
        let mut sessions = self.storage.sessions();
        match sessions.get(key) {
            None => Ok(false),
            Some(session) if session.writer_held => {
                Err(Error::AlreadyOwned { id: key.id.to_string(), holder: WriteHolder::AnotherProcess })
            }
            Some(_) => Ok(sessions.remove(key).is_some()),
        }
    }

    async fn materialize(&self, header: &SessionHeader, first_batch: &[Event]) -> Result<Box<dyn LogWriter>> {
        let key = header.key();
        let mut sessions = self.storage.sessions();
        if sessions.contains_key(&key) {
            return Err(Error::AlreadyExists { what: "session", id: key.id.to_string() });
        }
        sessions.insert(
            key.clone(),
            StoredSession {
                header: header.clone(),
                events: first_batch.to_vec(),
                version: 1,
                epoch: 1,
                writer_held: true,
            },
        );
        Ok(Box::new(MemoryWriter {
            storage: self.storage.clone(),
            key,
            header: header.clone(),
            next_seq: first_batch.len() as u64,
            epoch: 1,
            released: false,
        }))
    }
}

struct MemoryReader {
    storage: Arc<MemoryStorage>,
    key: SessionKey,
    header: SessionHeader,
}

#[async_trait]
impl LogReader for MemoryReader {
    fn header(&self) -> &SessionHeader {
        &self.header
    }

    async fn read(&mut self, offset: u64, length: u64) -> Result<Vec<Event>> {
        let sessions = self.storage.sessions();
        // An erased session reads as empty; the front's monotonic check reports shrinkage.
        Ok(sessions.get(&self.key).map(|session| slice(&session.events, offset, length)).unwrap_or_default())
    }

    async fn read_before(&mut self, before: u64, limit: u64) -> Result<Vec<Event>> {
        let sessions = self.storage.sessions();
        Ok(sessions.get(&self.key).map(|session| slice_before(&session.events, before, limit)).unwrap_or_default())
    }

    async fn read_seqs(&mut self, seqs: &[u64]) -> Result<Vec<Event>> {
        let sessions = self.storage.sessions();
        Ok(sessions.get(&self.key).map(|session| pick(&session.events, seqs)).unwrap_or_default())
    }
}

struct MemoryWriter {
    storage: Arc<MemoryStorage>,
    key: SessionKey,
    header: SessionHeader,
    next_seq: u64,
    epoch: u64,
    released: bool,
}

impl MemoryWriter {
    fn with_session<T>(&self, f: impl FnOnce(&mut StoredSession) -> Result<T>) -> Result<T> {
        if self.released {
            return Err(Error::HandleClosed { id: self.key.id.to_string(), operation: "write" });
        }
        let mut sessions = self.storage.sessions();
        match sessions.get_mut(&self.key) {
            Some(session) if session.epoch == self.epoch && session.writer_held => f(session),
            Some(session) => {
                Err(Error::Fenced { id: self.key.id.to_string(), epoch: self.epoch, current: session.epoch })
            }
            None => Err(Error::OwnershipLost { id: self.key.id.to_string(), reason: "session was erased".into() }),
        }
    }
}

#[async_trait]
impl LogWriter for MemoryWriter {
    fn header(&self) -> &SessionHeader {
        &self.header
    }

    fn next_seq(&self) -> u64 {
        self.next_seq
    }

    fn epoch(&self) -> Epoch {
        Epoch(self.epoch)
    }

    fn recovery(&self) -> Option<TailRecovery> {
        None
    }

    async fn read(&mut self, offset: u64, length: u64) -> Result<Vec<Event>> {
        self.with_session(|session| Ok(slice(&session.events, offset, length)))
    }

    async fn read_before(&mut self, before: u64, limit: u64) -> Result<Vec<Event>> {
        self.with_session(|session| Ok(slice_before(&session.events, before, limit)))
    }

    async fn read_seqs(&mut self, seqs: &[u64]) -> Result<Vec<Event>> {
        self.with_session(|session| Ok(pick(&session.events, seqs)))
    }

    async fn append(&mut self, batch: &[Event]) -> Result<()> {
        let next_seq = self.next_seq;
        self.with_session(|session| {
            let stored = session.events.len() as u64;
            if stored != next_seq || batch.first().map(|event| event.seq.get()) != Some(stored) {
                return Err(Error::SeqConflict { expected: stored, actual: batch.first().map_or(0, |e| e.seq.get()) });
            }
            session.events.extend_from_slice(batch);
            session.version += 1;
            Ok(())
        })?;
        self.next_seq += batch.len() as u64;
        Ok(())
    }

    async fn sync(&mut self) -> Result<()> {
        self.with_session(|_| Ok(()))
    }

    async fn release(&mut self) -> Result<()> {
        if !self.released {
            self.release_now();
        }
        Ok(())
    }
}

impl MemoryWriter {
    fn release_now(&mut self) {
        self.released = true;
        if let Some(session) = self.storage.sessions().get_mut(&self.key) {
            if session.epoch == self.epoch {
                session.writer_held = false;
            }
        }
    }
}

impl Drop for MemoryWriter {
    fn drop(&mut self) {
        if !self.released {
            self.release_now();
        }
    }
}
