//! The physical seam every storage backend implements. Semantics (validation,
//! contiguity, registry, live path) live in `LogStore`; a backend only stores and
//! retrieves already-validated batches and owns the cross-process writer lease.

use async_trait::async_trait;
use berth_core::{Epoch, Event, ProjectId, Result, SessionHeader, SessionId, SessionKey, TenantId, UserId};
use serde::{Deserialize, Serialize};

/// Opaque "has it changed?" token (R-P6). Equal tokens mean unchanged; comparable only
/// within one store instance and one session. Ownership churn never changes it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ChangeToken(pub String);

/// What `stat` knows without reading the log body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogStat {
    pub header: SessionHeader,
    pub change_token: ChangeToken,
    /// Number of events, when cheap for the backend to know.
    pub event_count: Option<u64>,
    /// Physical size, when the backend has one.
    pub size_bytes: Option<u64>,
}

/// A page of `list`: sessions of one tenant ordered by id, after an optional cursor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListQuery {
    pub tenant: TenantId,
    pub user: Option<UserId>,
    pub project: Option<ProjectId>,
    /// Return sessions whose id sorts strictly after this one.
    pub after: Option<SessionId>,
    pub limit: usize,
}

impl ListQuery {
    pub fn tenant(tenant: TenantId) -> ListQuery {
        ListQuery { tenant, user: None, project: None, after: None, limit: berth_core::limits::PAGE_SIZE_DEFAULT }
    }

    pub fn matches(&self, header: &SessionHeader) -> bool {
        header.scope.tenant == self.tenant
            && self.user.as_ref().is_none_or(|user| *user == header.scope.user)
            && self.project.as_ref().is_none_or(|project| header.scope.project.as_ref() == Some(project))
            && self.after.as_ref().is_none_or(|after| header.id > *after)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListPage {
    pub items: Vec<LogStat>,
    /// Pass as `ListQuery::after` to continue; `None` when this was the last page.
    pub next_cursor: Option<SessionId>,
}

/// What a write open found and repaired at the physical level.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TailRecovery {
    /// Bytes after the last committed record that were not a valid record.
    pub torn_bytes: u64,
    /// Where the discarded bytes were kept (backend-specific), once truncated.
    pub kept_copy: Option<String>,
}

#[async_trait]
pub trait LogBackend: Send + Sync + 'static {
    /// Short name for diagnostics and change tokens (`memory`, `jsonl`, `postgres`).
    fn name(&self) -> &'static str;

    /// A materialized session's stat, without reading its log body.
    async fn stat(&self, key: &SessionKey) -> Result<Option<LogStat>>;

    /// Materialized sessions matching `query`, ordered by id, at most `query.limit`.
    async fn list(&self, query: &ListQuery) -> Result<Vec<LogStat>>;

    /// Opens a materialized session for reading; `NotFound` if absent. Never takes the
    /// writer lease.
    async fn open_reader(&self, key: &SessionKey) -> Result<Box<dyn LogReader>>;

    /// Claims the cross-process writer lease (bumping the epoch) and opens the log for
    /// appending. `NotFound` if absent, `AlreadyOwned` if another holder has it,
    /// `Corrupt` if the log is damaged mid-way, `FormatUnsupported` for a newer format
    /// or an unknown reserved event type.
    async fn open_writer(&self, key: &SessionKey) -> Result<Box<dyn LogWriter>>;

    /// Physically creates a session with its header and first batch (possibly empty)
    /// atomically, and returns a writer holding the lease. `AlreadyExists` if it exists.
    async fn materialize(&self, header: &SessionHeader, first_batch: &[Event]) -> Result<Box<dyn LogWriter>>;

    /// Physically erases a session's log (the service's `delete`). `Ok(false)` if it did
    /// not exist; `AlreadyOwned` if a writer holds its lease. Never touches another
    /// session's data.
    async fn erase(&self, key: &SessionKey) -> Result<bool> {
        let _ = key;
        Err(berth_core::Error::Unavailable { reason: format!("backend {} cannot erase sessions", self.name()) })
    }
}

#[async_trait]
pub trait LogReader: Send + Sync {
    fn header(&self) -> &SessionHeader;

    /// Events `offset .. offset + length` of the valid, committed prefix as it is now
    /// (fewer at the end of the log; never a torn tail).
    async fn read(&mut self, offset: u64, length: u64) -> Result<Vec<Event>>;

    /// Up to `limit` events of the valid, committed prefix that come before seq
    /// `before`, in ascending order: the last `limit` events when `before` is at or past
    /// the end (R-S15). The default finds the log's length with O(log n) one-event
    /// `read`s; a backend that can read backwards does better.
    async fn read_before(&mut self, before: u64, limit: u64) -> Result<Vec<Event>> {
        let end = length_below(self, before).await?;
        let start = end.saturating_sub(limit);
        self.read(start, end - start).await
    }

    /// The events at `seqs` (distinct, ascending), each as `read` returns it: those of
    /// the longest prefix of `seqs` below the end of the valid, committed prefix, in order
    /// (fewer than asked only when a seq is at or past the end). The default reads each
    /// run of consecutive seqs with one `read`; a backend that can read many positions in
    /// one pass does better.
    async fn read_seqs(&mut self, seqs: &[u64]) -> Result<Vec<Event>> {
        let mut events = Vec::with_capacity(seqs.len());
        for (first, length) in seq_runs(seqs) {
            let read = self.read(first, length).await?;
            let short = (read.len() as u64) < length;
            events.extend(read);
            if short {
                break;
            }
        }
        Ok(events)
    }
}

/// The runs of consecutive seqs in `seqs` (distinct, ascending), in order, each as its
/// first seq and its length.
fn seq_runs(seqs: &[u64]) -> impl Iterator<Item = (u64, u64)> + '_ {
    let mut start = 0;
    std::iter::from_fn(move || {
        let first = *seqs.get(start)?;
        let mut end = start + 1;
        while end < seqs.len() && seqs[end] == seqs[end - 1].wrapping_add(1) {
            end += 1;
        }
        let length = (end - start) as u64;
        start = end;
        Some((first, length))
    })
}

/// `min(before, length of the log)` for a reader that can only read forwards: a
/// one-event read at `before - 1`, then (when the log is shorter) an exponential search
/// and a bisection, each step a one-event read. Events only ever get added, so what a
/// step saw present stays present.
async fn length_below<R: LogReader + ?Sized>(reader: &mut R, before: u64) -> Result<u64> {
    let present = |events: Vec<Event>| !events.is_empty();
    if before == 0 || present(reader.read(before - 1, 1).await?) {
        return Ok(before);
    }
    // Every seq below `known` is present; `absent` is not (and `known < absent`).
    let (mut known, mut absent) = (0u64, before - 1);
    let mut probe = 0u64;
    while probe < absent {
        if !present(reader.read(probe, 1).await?) {
            absent = probe;
            break;
        }
        known = probe + 1;
        probe = probe.saturating_mul(2).saturating_add(1);
    }
    while known < absent {
        let middle = known + (absent - known) / 2;
        if present(reader.read(middle, 1).await?) {
            known = middle + 1;
        } else {
            absent = middle;
        }
    }
    Ok(known)
}

#[async_trait]
pub trait LogWriter: Send + Sync {
    fn header(&self) -> &SessionHeader;

    /// The seq the next appended event must carry.
    fn next_seq(&self) -> u64;

    /// This writer's fencing epoch.
    fn epoch(&self) -> Epoch;

    /// What the write open found at the tail, if anything was torn.
    fn recovery(&self) -> Option<TailRecovery>;

    async fn read(&mut self, offset: u64, length: u64) -> Result<Vec<Event>>;

    /// Up to `limit` events before seq `before`, in ascending order (`LogReader::read_before`);
    /// a writer knows its length.
    async fn read_before(&mut self, before: u64, limit: u64) -> Result<Vec<Event>> {
        let end = before.min(self.next_seq());
        let start = end.saturating_sub(limit);
        self.read(start, end - start).await
    }

    /// The events at `seqs` (distinct, ascending), as `LogReader::read_seqs` returns them.
    async fn read_seqs(&mut self, seqs: &[u64]) -> Result<Vec<Event>> {
        let mut events = Vec::with_capacity(seqs.len());
        for (first, length) in seq_runs(seqs) {
            let read = self.read(first, length).await?;
            let short = (read.len() as u64) < length;
            events.extend(read);
            if short {
                break;
            }
        }
        Ok(events)
    }

    /// Appends a validated batch whose first seq is `next_seq()`. Durable on return when
    /// the backend syncs per append. On failure nothing of the batch is visible.
    async fn append(&mut self, batch: &[Event]) -> Result<()>;

    /// Durability barrier for everything appended so far.
    async fn sync(&mut self) -> Result<()>;

    /// Releases the writer lease. Idempotent; the writer is unusable afterwards.
    async fn release(&mut self) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::{Scope, SessionId, Timestamp};

    /// A reader with only `read`, counting its calls: the default `read_before` is all it
    /// has.
    struct ForwardOnly {
        header: SessionHeader,
        events: Vec<Event>,
        reads: u64,
    }

    #[async_trait]
    impl LogReader for ForwardOnly {
        fn header(&self) -> &SessionHeader {
            &self.header
        }

        async fn read(&mut self, offset: u64, length: u64) -> Result<Vec<Event>> {
            self.reads += 1;
            let start = usize::try_from(offset).unwrap_or(usize::MAX).min(self.events.len());
            let end = start.saturating_add(usize::try_from(length).unwrap_or(usize::MAX)).min(self.events.len());
            Ok(self.events[start..end].to_vec())
        }
    }

    fn reader(count: u64) -> ForwardOnly {
        let scope = Scope { tenant: TenantId::parse("t").unwrap(), user: UserId::parse("u").unwrap(), project: None };
        let header = SessionHeader::new(SessionId::parse("s").unwrap(), scope, Timestamp(1));
        let events = (0..count)
            .map(|seq| Event::new(seq, "test/marker", Timestamp(1), serde_json::json!({})).unwrap())
            .collect();
        ForwardOnly { header, events, reads: 0 }
    }

    #[tokio::test]
    async fn the_default_read_before_is_the_slice_before_with_logarithmic_reads() {
        for count in [0u64, 1, 2, 3, 7, 8, 100, 1_000] {
            let mut reader = reader(count);
            for before in [0, 1, 2, count.saturating_sub(1), count, count + 1, count * 3 + 5, u64::MAX] {
                for limit in [0, 1, 3, count, u64::MAX] {
                    reader.reads = 0;
                    let events = reader.read_before(before, limit).await.unwrap();
                    let end = before.min(count);
                    let start = end.saturating_sub(limit);
                    let seqs: Vec<u64> = events.iter().map(|event| event.seq.get()).collect();
                    assert_eq!(seqs, (start..end).collect::<Vec<_>>(), "{count} events, before {before}, {limit}");
                    let bits = u64::from(64 - count.leading_zeros());
                    assert!(reader.reads <= 2 * (bits + 1) + 2, "{count} events: {} reads", reader.reads);
                }
            }
        }
    }
}
