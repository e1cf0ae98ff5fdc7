//! The write path of one session: lazy torn-tail truncation, appends with
//! write-then-fdatasync, rollback and poisoning on any failure, and the lease's life.
//!
//! A failed or short write, or a failed sync, is never retried on the same file (after a
//! failed `fsync` the kernel may have dropped the dirty pages and a retry can falsely
//! succeed). The file is truncated back to the last length known good and the writer is
//! poisoned: every later append or sync fails `Poisoned` without touching the disk.

use crate::backend::Durability;
use crate::format::{self, zero_tail, BROKEN_PREFIX, READ_CHUNK_BYTES};
use crate::fs::{read_full_at, write_all_at, Fs, OpenOptions};
use crate::lease::Lease;
use crate::log::{FileSource, LogView};
use crate::prealloc::{self, Prealloc};
use async_trait::async_trait;
use berth_core::{Epoch, Error, Event, Result, SessionHeader};
use berth_store::{LogWriter, TailRecovery};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// A batch encoded for one writer epoch: the bytes to append, and where each record
/// starts inside them.
pub(crate) struct EncodedBatch {
    pub first_seq: u64,
    pub bytes: Vec<u8>,
    pub line_offsets: Vec<u64>,
}

pub(crate) fn encode_batch(batch: &[Event], epoch: Epoch) -> EncodedBatch {
    let mut bytes = Vec::new();
    let mut line_offsets = Vec::with_capacity(batch.len());
    for event in batch {
        line_offsets.push(bytes.len() as u64);
        bytes.extend_from_slice(&format::encode_event_line(event, epoch));
    }
    EncodedBatch { first_seq: batch.first().map_or(0, |event| event.seq.get()), bytes, line_offsets }
}

/// A torn tail found by the write open, truncated before the first append.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PendingTruncation {
    pub committed_len: u64,
    pub torn_bytes: u64,
}

/// The prefix of the log known to be on stable storage.
#[derive(Clone, Copy, Debug)]
struct DurablePoint {
    end: u64,
    events: u64,
    last_epoch: Epoch,
}

/// The synchronous state of a write handle. Its operations run on the calling thread
/// (`backend::in_place`), or on the blocking pool when opened or materialized.
pub(crate) struct WriterCore {
    pub fs: Arc<dyn Fs>,
    pub id: String,
    pub session_dir: PathBuf,
    pub lease: Option<Lease>,
    pub view: LogView,
    pub header: SessionHeader,
    pub epoch: Epoch,
    pub durability: Durability,
    pub torn: Option<PendingTruncation>,
    pub recovery: Option<TailRecovery>,
    durable: DurablePoint,
    poisoned: Option<String>,
    /// The zero tail of a preallocated log (log format version 2); `None` for a
    /// classic log.
    prealloc: Option<Prealloc>,
}

impl WriterCore {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        fs: Arc<dyn Fs>,
        id: String,
        session_dir: PathBuf,
        lease: Lease,
        view: LogView,
        header: SessionHeader,
        epoch: Epoch,
        durability: Durability,
        torn: Option<PendingTruncation>,
        prealloc: Option<Prealloc>,
    ) -> WriterCore {
        let durable =
            DurablePoint { end: view.known_end(), events: view.known_events(), last_epoch: view.last_epoch() };
        let recovery = torn.map(|torn| TailRecovery { torn_bytes: torn.torn_bytes, kept_copy: None });
        WriterCore {
            fs,
            id,
            session_dir,
            lease: Some(lease),
            view,
            header,
            epoch,
            durability,
            torn,
            recovery,
            durable,
            poisoned: None,
            // Preallocation needs a sync per append to stay off the append's path: with
            // `Barrier` durability a handle only writes into a tail it found.
            prealloc: prealloc.map(|mut prealloc| {
                prealloc.extend &= durability == Durability::PerAppend;
                prealloc
            }),
        }
    }

    /// The file's length as this writer knows it: its data, then any zero tail.
    pub fn allocated_end(&self) -> u64 {
        self.prealloc.as_ref().map_or(self.view.known_end(), |prealloc| prealloc.alloc_end)
    }

    pub fn next_seq(&self) -> u64 {
        self.view.known_events()
    }

    fn check_usable(&self, operation: &'static str) -> Result<()> {
        if self.lease.is_none() {
            return Err(Error::HandleClosed { id: self.id.clone(), operation });
        }
        if let Some(cause) = &self.poisoned {
            return Err(Error::Poisoned { id: self.id.clone(), cause: cause.clone() });
        }
        Ok(())
    }

    pub fn read(&mut self, offset: u64, length: u64) -> Result<Vec<Event>> {
        if self.lease.is_none() {
            return Err(Error::HandleClosed { id: self.id.clone(), operation: "read" });
        }
        let end = self.view.known_end();
        self.view.read(offset, length, end)
    }

    pub fn read_before(&mut self, before: u64, limit: u64) -> Result<Vec<Event>> {
        if self.lease.is_none() {
            return Err(Error::HandleClosed { id: self.id.clone(), operation: "read" });
        }
        let end = self.view.known_end();
        self.view.read_before(before, limit, end)
    }

    pub fn read_seqs(&mut self, seqs: &[u64]) -> Result<Vec<Event>> {
        if self.lease.is_none() {
            return Err(Error::HandleClosed { id: self.id.clone(), operation: "read" });
        }
        let end = self.view.known_end();
        self.view.read_seqs(seqs, end)
    }

    pub fn append(&mut self, batch: &EncodedBatch) -> Result<()> {
        self.check_usable("append")?;
        let expected = self.view.known_events();
        if batch.first_seq != expected {
            return Err(Error::SeqConflict { expected, actual: batch.first_seq });
        }
        if batch.line_offsets.is_empty() {
            return Ok(());
        }
        self.truncate_torn_tail()?;
        let start = self.view.known_end();
        if let Err(error) = write_all_at(self.view.file.as_ref(), &batch.bytes, start) {
            return Err(self.fail("append write", &error, start));
        }
        if self.durability == Durability::PerAppend {
            if let Err(error) = self.view.file.sync_data() {
                return Err(self.fail("append sync", &error, self.durable.end));
            }
        }
        let offsets: Vec<u64> = batch.line_offsets.iter().map(|offset| start + offset).collect();
        let end = start + batch.bytes.len() as u64;
        self.view.note_appended(batch.first_seq, &offsets, end, self.epoch);
        if self.durability == Durability::PerAppend {
            self.mark_durable();
            self.preallocate();
        }
        Ok(())
    }

    /// After a durable append: fills the next extent with zeros and syncs it when the
    /// space left is running out (`Prealloc::after_append`). The append is durable
    /// already, so a failure here does not fail it; it poisons the handle like any
    /// failed write or sync (rolled back to the durable end, the tail with it).
    fn preallocate(&mut self) {
        let end = self.view.known_end();
        let Some((from, to)) = self.prealloc.as_mut().and_then(|prealloc| prealloc.after_append(end, Instant::now()))
        else {
            return;
        };
        match prealloc::fill_zeros(self.view.file.as_ref(), from, to) {
            Ok(()) => {
                if let Some(prealloc) = self.prealloc.as_mut() {
                    prealloc.extended(to, Instant::now());
                }
            }
            Err(error) => {
                let _ = self.fail("preallocate", &error, self.durable.end);
            }
        }
    }

    /// Gives the zero tail back (`ftruncate` to the data end), on close or when idle.
    /// Not synced: a power loss may bring the tail back, and a tail is never data nor
    /// damage. A failure leaves the tail, which is harmless, and is only logged. A torn
    /// tail still pending stays: past the data end are its bytes, which the first append
    /// copies aside before truncating (§4 of the storage format), not a zero tail.
    pub fn give_back_tail(&mut self) {
        let end = self.view.known_end();
        let Some(prealloc) = self.prealloc.as_mut() else {
            return;
        };
        if prealloc.alloc_end <= end || self.poisoned.is_some() || self.torn.is_some() {
            return;
        }
        match self.view.file.set_len(end) {
            Ok(()) => prealloc.truncated(end),
            Err(error) => tracing::warn!(session = %self.id, %error, "could not give back a log's preallocated tail"),
        }
    }

    /// Gives the zero tail back if this open handle has had no append for
    /// `prealloc::IDLE_GIVE_BACK` before `now`; whether it did. Its next append extends
    /// again (`Prealloc::after_append`).
    pub fn give_back_if_idle(&mut self, now: Instant) -> bool {
        let end = self.view.known_end();
        let idle = self.prealloc.as_ref().is_some_and(|prealloc| prealloc.idle_tail(end, now));
        if self.lease.is_none() || !idle {
            return false;
        }
        self.give_back_tail();
        self.allocated_end() == end
    }

    /// Whether the log may carry a zero tail (log format version 2).
    pub fn has_zero_tail_format(&self) -> bool {
        self.prealloc.is_some()
    }

    pub fn sync(&mut self) -> Result<()> {
        self.check_usable("sync")?;
        if self.durable.end == self.view.known_end() {
            return Ok(());
        }
        if let Err(error) = self.view.file.sync_data() {
            return Err(self.fail("sync", &error, self.durable.end));
        }
        self.mark_durable();
        Ok(())
    }

    pub fn release(&mut self) {
        if self.lease.is_some() {
            self.give_back_tail();
        }
        self.lease = None;
    }

    fn mark_durable(&mut self) {
        self.durable = DurablePoint {
            end: self.view.known_end(),
            events: self.view.known_events(),
            last_epoch: self.view.last_epoch(),
        };
    }

    /// After a failed write or sync: truncate back to `rollback_len` (the pre-batch length
    /// for a failed write, the last durable length for a failed sync), sync that, and
    /// poison the writer whatever happens.
    fn fail(&mut self, operation: &'static str, error: &std::io::Error, rollback_len: u64) -> Error {
        let file = self.view.file.as_ref();
        let rolled_back = file.set_len(rollback_len).and_then(|()| file.sync_all());
        let (events, last_epoch) = if rollback_len >= self.view.known_end() {
            (self.view.known_events(), self.view.last_epoch())
        } else {
            (self.durable.events, self.durable.last_epoch)
        };
        let rollback_len = rollback_len.min(self.view.known_end());
        self.view.forget_from(events, rollback_len, last_epoch);
        if let Some(prealloc) = self.prealloc.as_mut() {
            prealloc.truncated(rollback_len);
        }
        let rollback = match &rolled_back {
            Ok(()) => format!("rolled back to {rollback_len} bytes"),
            Err(rollback_error) => format!("rollback to {rollback_len} bytes also failed: {rollback_error}"),
        };
        tracing::error!(session = %self.id, %error, %rollback, "{operation} failed; write handle poisoned");
        self.poisoned = Some(format!("{operation} failed: {error}; {rollback}"));
        Error::Io { operation, kind: error.kind(), message: format!("{error}; {rollback}") }
    }

    /// Truncates the torn tail found at open (once, before the first append), keeping a
    /// copy of the discarded bytes. Any failure poisons the writer.
    pub fn truncate_torn_tail(&mut self) -> Result<()> {
        let Some(torn) = self.torn else {
            return Ok(());
        };
        match self.copy_and_truncate(torn) {
            Ok(kept_copy) => {
                self.torn = None;
                if let Some(prealloc) = self.prealloc.as_mut() {
                    prealloc.truncated(torn.committed_len);
                }
                self.recovery = Some(TailRecovery { torn_bytes: torn.torn_bytes, kept_copy });
                Ok(())
            }
            Err((operation, error)) => {
                let message = format!("torn-tail truncation failed during {operation}: {error}");
                tracing::error!(session = %self.id, %message, "write handle poisoned");
                self.poisoned = Some(message);
                Err(Error::io(operation, &error))
            }
        }
    }

    fn copy_and_truncate(&self, torn: PendingTruncation) -> Result<Option<String>, (&'static str, std::io::Error)> {
        let file = self.view.file.as_ref();
        let file_len = file.len().map_err(|error| ("stat log", error))?;
        if file_len <= torn.committed_len {
            return Ok(None);
        }
        let name = format!("{BROKEN_PREFIX}{}-{}", self.epoch, torn.committed_len);
        let copy_path = self.session_dir.join(&name);
        let copy = self
            .fs
            .open(&copy_path, OpenOptions::write_truncate())
            .map_err(|error| ("create torn-tail copy", error))?;
        // The copy keeps the discarded bytes, without the zero tail of a preallocated
        // log (unwritten space, not part of the torn write).
        let copy_end = match self.prealloc {
            Some(_) => zero_tail::data_end(&FileSource(file), torn.committed_len, file_len)
                .map_err(|error| ("read torn tail", error))?,
            None => file_len,
        };
        let mut buf = vec![0; READ_CHUNK_BYTES];
        let mut offset = torn.committed_len;
        while offset < copy_end {
            let want = usize::try_from(copy_end - offset).unwrap_or(usize::MAX).min(buf.len());
            let read = read_full_at(file, &mut buf[..want], offset).map_err(|error| ("read torn tail", error))?;
            if read == 0 {
                break;
            }
            write_all_at(copy.as_ref(), &buf[..read], offset - torn.committed_len)
                .map_err(|error| ("write torn-tail copy", error))?;
            offset += read as u64;
        }
        copy.sync_all().map_err(|error| ("sync torn-tail copy", error))?;
        drop(copy);
        self.fs.sync_dir(&self.session_dir).map_err(|error| ("sync session directory", error))?;
        file.set_len(torn.committed_len).map_err(|error| ("truncate torn tail", error))?;
        file.sync_all().map_err(|error| ("sync truncated log", error))?;
        tracing::warn!(
            session = %self.id,
            committed_len = torn.committed_len,
            torn_bytes = file_len - torn.committed_len,
            kept_copy = %name,
            "recovered from a torn tail"
        );
        Ok(Some(name))
    }
}

/// The `LogWriter` the front holds: a thin async shell over a `WriterCore` whose file
/// work (one write, one `fdatasync`) runs on the calling thread, in `block_in_place` on a
/// multi-thread runtime. Each operation is one synchronous step, so a caller that gives
/// up can never leave it half-done.
pub struct JsonlWriter {
    header: SessionHeader,
    epoch: Epoch,
    recovery: Option<TailRecovery>,
    next_seq: u64,
    core: Arc<Mutex<WriterCore>>,
}

impl JsonlWriter {
    pub(crate) fn new(core: WriterCore) -> JsonlWriter {
        JsonlWriter {
            header: core.header.clone(),
            epoch: core.epoch,
            recovery: core.recovery.clone(),
            next_seq: core.next_seq(),
            core: Arc::new(Mutex::new(core)),
        }
    }

    async fn with_core<T: Send + 'static>(
        &mut self,
        work: impl FnOnce(&mut WriterCore) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (outcome, next_seq) = crate::backend::in_place(|| {
            let mut core = lock(&self.core);
            let outcome = work(&mut core);
            (outcome, core.next_seq())
        });
        self.next_seq = next_seq;
        outcome
    }

    /// The shared state, for the idle sweep (`idle_tails`), which holds it weakly.
    pub(crate) fn core(&self) -> &Arc<Mutex<WriterCore>> {
        &self.core
    }

    /// Entries in this writer's sparse seq index (bounded by `INDEX_ENTRIES_MAX`).
    pub fn index_entries(&self) -> usize {
        lock(&self.core).view.index_len()
    }

    /// The log's data end and its file length as this writer knows them (they differ
    /// by the preallocated zero tail).
    pub fn data_and_allocated_len(&self) -> (u64, u64) {
        let core = lock(&self.core);
        (core.view.known_end(), core.allocated_end())
    }

    /// Truncates a pending torn tail now (what `fsck --repair` does); returns what was
    /// recovered, if anything.
    pub async fn repair_torn_tail(&mut self) -> Result<Option<TailRecovery>> {
        self.with_core(|core| {
            core.check_usable("repair")?;
            let had_torn = core.torn.is_some();
            core.truncate_torn_tail()?;
            Ok(if had_torn { core.recovery.clone() } else { None })
        })
        .await
    }
}

fn lock(core: &Mutex<WriterCore>) -> MutexGuard<'_, WriterCore> {
    // A panic inside a core operation poisons the mutex; the core's own `poisoned` state
    // is what matters, so keep using it.
    core.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[async_trait]
impl LogWriter for JsonlWriter {
    fn header(&self) -> &SessionHeader {
        &self.header
    }

    fn next_seq(&self) -> u64 {
        self.next_seq
    }

    fn epoch(&self) -> Epoch {
        self.epoch
    }

    fn recovery(&self) -> Option<TailRecovery> {
        self.recovery.clone()
    }

    async fn read(&mut self, offset: u64, length: u64) -> Result<Vec<Event>> {
        self.with_core(move |core| core.read(offset, length)).await
    }

    async fn read_before(&mut self, before: u64, limit: u64) -> Result<Vec<Event>> {
        self.with_core(move |core| core.read_before(before, limit)).await
    }

    async fn read_seqs(&mut self, seqs: &[u64]) -> Result<Vec<Event>> {
        let seqs = seqs.to_vec();
        self.with_core(move |core| core.read_seqs(&seqs)).await
    }

    async fn append(&mut self, batch: &[Event]) -> Result<()> {
        let encoded = encode_batch(batch, self.epoch);
        self.with_core(move |core| core.append(&encoded)).await
    }

    async fn sync(&mut self) -> Result<()> {
        self.with_core(|core| core.sync()).await
    }

    async fn release(&mut self) -> Result<()> {
        self.with_core(|core| {
            core.release();
            Ok(())
        })
        .await
    }
}
