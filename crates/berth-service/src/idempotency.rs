//! Caller idempotency (R-S14): what a keyed append is compared with, and the per-writer
//! ledger that finds a key without reading the whole log.
//!
//! The log is the source of truth: every event of a keyed batch carries the key in its
//! envelope, the first one also the batch's length and content digest, so the key is
//! exactly as durable as the events (one write, no window). The catalog's index saves
//! reading the log: it holds every keyed batch below its `indexed_until`. A write handle
//! is the only writer of its session, so at the first append through one the service
//! reads the log from `indexed_until` (at most `IDEMPOTENCY_INDEX_LAG_EVENTS_MAX` plus
//! one batch: the index is brought up to date at least that often, and when the handle
//! closes) and from then on knows every key: the catalog's, plus the ones in this
//! ledger. A crash loses only the ledger, which the next writer rebuilds from the same
//! bounded read.
//!
//! The ledger also holds a fingerprint of every key the index held when it was built (up
//! to `INDEXED_KEYS_HELD_MAX`), and of each it adds to the index. A key none of them
//! matches was never used, so a fresh key — every append the Python client makes —
//! costs no catalog read; a match (a retry, or a rare collision) asks the index.

use crate::AppendRequest;
use berth_catalog::Catalog;
use berth_core::{Error, Event, IdempotencyKey, KeyedBatch, Result, SessionKey};
use berth_store::{Access, LogStore, SessionHandle};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// How far (in events) the catalog's idempotency index may fall behind a session's log
/// before an append brings it up to date: bounds the read a writer does when it opens.
pub const IDEMPOTENCY_INDEX_LAG_EVENTS_MAX: u64 = 256;

/// Most indexed keys a ledger keeps fingerprints of (8 bytes each); a session with more
/// asks the catalog's index about every key its ledger does not hold.
pub const INDEXED_KEYS_HELD_MAX: usize = 16_384;

/// The keyed batches of one session's log that the catalog's index does not hold yet.
#[derive(Debug, Default)]
pub(crate) struct KeyLedger {
    /// The catalog's index holds every keyed batch below this seq.
    indexed_until: u64,
    /// The ledger holds every keyed batch in `indexed_until..known_until`: the log's end
    /// when it was built or last told of an append. Appends it was not told of (a
    /// resume's closers, an append racing a close) stay beyond it, in the tail the next
    /// writer reads, so the index never claims a batch it does not hold.
    known_until: u64,
    unindexed: HashMap<IdempotencyKey, KeyedBatch>,
    /// Sorted fingerprints of every key the catalog's index holds, or `None` when there
    /// are more than `INDEXED_KEYS_HELD_MAX`.
    indexed: Option<Vec<u64>>,
}

fn fingerprint(key: &IdempotencyKey) -> u64 {
    // A fixed hasher: a collision only costs a catalog read.
    let mut hasher = std::hash::DefaultHasher::new();
    key.as_str().hash(&mut hasher);
    hasher.finish()
}

impl KeyLedger {
    /// The ledger of a write handle's first append (the caller holds the session's append
    /// lock): the catalog's `indexed_until`, then the log from there. A session the index
    /// never saw (older than keys) is recorded as indexed up to its end first, durably,
    /// before this writer appends anything keyed.
    pub(crate) async fn open(catalog: &dyn Catalog, key: &SessionKey, writer: &SessionHandle) -> Result<KeyLedger> {
        let next_seq = writer.next_seq();
        let Some(indexed_until) = catalog.idempotency_indexed_until(key).await? else {
            catalog.index_idempotency(key, &[], next_seq).await?;
            return Ok(KeyLedger {
                indexed_until: next_seq,
                known_until: next_seq,
                unindexed: HashMap::new(),
                indexed: Some(Vec::new()),
            });
        };
        let indexed = catalog.idempotency_keys(key, INDEXED_KEYS_HELD_MAX).await?.map(|keys| {
            let mut fingerprints: Vec<u64> = keys.iter().map(fingerprint).collect();
            fingerprints.sort_unstable();
            fingerprints
        });
        let mut ledger =
            KeyLedger { indexed_until, known_until: next_seq.max(indexed_until), unindexed: HashMap::new(), indexed };
        if indexed_until < next_seq {
            for batch in keyed_batches(&writer.read(indexed_until, Some(next_seq - indexed_until)).await?) {
                ledger.unindexed.entry(batch.key.clone()).or_insert(batch);
            }
        }
        Ok(ledger)
    }

    pub(crate) fn get(&self, key: &IdempotencyKey) -> Option<&KeyedBatch> {
        self.unindexed.get(key)
    }

    /// Whether `key` was certainly never used in this session: not in this ledger, and
    /// no key of the catalog's index shares its fingerprint.
    pub(crate) fn never_used(&self, key: &IdempotencyKey) -> bool {
        let Some(indexed) = &self.indexed else { return false };
        !self.unindexed.contains_key(key) && indexed.binary_search(&fingerprint(key)).is_err()
    }

    /// An append through the handle (the caller holds the append lock) stored `keyed`
    /// (if it had a key) and brought the log to `next_seq`.
    pub(crate) fn appended(&mut self, keyed: Option<KeyedBatch>, next_seq: u64) {
        if let Some(batch) = keyed {
            self.unindexed.entry(batch.key.clone()).or_insert(batch);
        }
        self.known_until = self.known_until.max(next_seq);
    }

    /// The log has outgrown the index by the allowed lag.
    pub(crate) fn is_due(&self) -> bool {
        self.known_until.saturating_sub(self.indexed_until) >= IDEMPOTENCY_INDEX_LAG_EVENTS_MAX
    }

    pub(crate) fn pending(&self) -> Vec<KeyedBatch> {
        self.unindexed.values().cloned().collect()
    }

    /// The catalog's index now holds everything below `next_seq` (what `pending` returned
    /// was written with it; the caller's append lock kept anything new from arriving).
    pub(crate) fn written(&mut self, next_seq: u64) {
        if let Some(indexed) = &mut self.indexed {
            indexed.extend(self.unindexed.keys().map(fingerprint));
            indexed.sort_unstable();
            if indexed.len() > INDEXED_KEYS_HELD_MAX {
                self.indexed = None;
            }
        }
        self.unindexed.clear();
        self.indexed_until = self.indexed_until.max(next_seq);
    }

    /// Writes the unindexed batches to the catalog and marks the index complete up to
    /// `known_until`.
    pub(crate) async fn write(&mut self, catalog: &dyn Catalog, key: &SessionKey) -> Result<()> {
        if self.known_until <= self.indexed_until && self.unindexed.is_empty() {
            return Ok(());
        }
        catalog.index_idempotency(key, &self.pending(), self.known_until).await?;
        self.written(self.known_until);
        Ok(())
    }
}

/// A keyed batch found without this service's write handle (for a session that no longer
/// takes the caller's appends): the catalog's index, then the log from its
/// `indexed_until` through a read handle (the lag, bounded). No index row means no
/// writer of this version ever appended to it, so no keys.
pub(crate) async fn find_without_writer(
    catalog: &dyn Catalog,
    store: &LogStore,
    key: &SessionKey,
    idempotency_key: &IdempotencyKey,
) -> Result<Option<KeyedBatch>> {
    if let Some(batch) = catalog.idempotency_batch(key, idempotency_key).await? {
        return Ok(Some(batch));
    }
    let Some(indexed_until) = catalog.idempotency_indexed_until(key).await? else { return Ok(None) };
    let handle = store.open(key, Access::Read).await?;
    let tail = handle.read(indexed_until, None).await;
    let _ = handle.close().await;
    Ok(keyed_batches(&tail?).into_iter().find(|batch| &batch.key == idempotency_key))
}

/// The append's key, checked (charset and length), or `None`. An empty batch stores
/// nothing the key could live in: it is answered like a keyless empty append (the log's
/// `next_seq`, nothing written) and does not use the key up.
pub(crate) fn requested_key(request: &AppendRequest) -> Result<Option<IdempotencyKey>> {
    let Some(text) = request.idempotency_key.as_deref() else { return Ok(None) };
    let key = IdempotencyKey::parse(text)?;
    if request.events.is_empty() && request.memory.is_empty() {
        return Ok(None);
    }
    Ok(Some(key))
}

/// The keyed batches that `events` open (a batch's first event carries its summary).
pub(crate) fn keyed_batches(events: &[Event]) -> Vec<KeyedBatch> {
    events.iter().filter_map(|event| event.idempotency.as_ref()?.batch(event.seq.get())).collect()
}

/// The content digest of a keyed batch: SHA-256 over, per event, the JSON array
/// `[type, run, ignorable, time]` (`time` null when the server assigns it, so a retry
/// later is still the same content) and the event's exact data text (R-C9: the stored
/// bytes, so data that differs only in key order or number spelling is other content),
/// each followed by a newline; the first 128 bits, in hex.
pub(crate) fn batch_digest(request: &AppendRequest) -> String {
    let mut hasher = Sha256::new();
    for draft in &request.events {
        let time = draft.time.map(|time| time.0);
        let run = request.run.as_ref().map(|run| run.as_str());
        let envelope = serde_json::json!([draft.event_type, run, draft.ignorable, time]);
        hasher.update(berth_core::json::canonical_string(&envelope).as_bytes());
        hasher.update(b"\n");
        hasher.update(draft.data.as_str().as_bytes());
        hasher.update(b"\n");
    }
    // Carried memory writes are part of the content (absent from batches without them,
    // so older digests are unchanged).
    for put in &request.memory {
        let envelope = serde_json::json!([
            "memory",
            put.namespace.as_str(),
            put.key,
            put.expected_revision,
            put.ttl_ms,
            put.bound_to.as_ref().map(|id| id.as_str())
        ]);
        hasher.update(berth_core::json::canonical_string(&envelope).as_bytes());
        hasher.update(b"\n");
        hasher.update(put.value.as_str().as_bytes());
        hasher.update(b"\n");
    }
    hasher.finalize()[..16].iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Marks `events` (just built for the batch) as the keyed batch `batch`.
pub(crate) fn mark(events: &mut [Event], batch: &KeyedBatch) {
    for (event, mark) in events.iter_mut().zip(batch.marks()) {
        event.idempotency = Some(Box::new(mark));
    }
}

/// What a keyed append whose key is already stored gets: the original outcome for the
/// same content, `IdempotencyKeyReused` for any other.
pub(crate) fn retry_outcome(stored: &KeyedBatch, digest: &str) -> Result<crate::AppendOutcome> {
    if stored.digest != digest {
        return Err(Error::IdempotencyKeyReused { key: stored.key.to_string(), first_seq: stored.first_seq });
    }
    Ok(crate::AppendOutcome { first_seq: stored.first_seq, next_seq: stored.next_seq(), duplicate: true })
}

/// Whether a stored event belongs to a keyed batch (a keyless retry never matches it).
pub(crate) fn is_keyed(event: &Event) -> bool {
    event.idempotency.is_some()
}

/// Forks start a new key space: the copied events lose their marks.
pub(crate) fn strip(events: &mut [Event]) {
    for event in events {
        event.idempotency = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NewEvent;

    fn request(data: &str, time: Option<u64>) -> AppendRequest {
        let mut event = NewEvent::new("user/message", serde_json::Value::Null);
        event.data = berth_core::JsonText::parse(data).expect("valid JSON");
        event.time = time.map(berth_core::Timestamp);
        AppendRequest {
            memory: Vec::new(),
            run: None,
            expected_seq: None,
            events: vec![event],
            idempotency_key: Some("k".into()),
        }
    }

    /// The digest is over the exact content (R-C9): whitespace does not
    /// change it; any value, the type, an explicit time or the run does.
    #[test]
    fn digest_is_over_the_exact_content() {
        let base = batch_digest(&request(r#"{"a":1,"b":[true,null]}"#, None));
        assert_eq!(base.len(), 32);
        assert_eq!(batch_digest(&request(r#"{ "a": 1, "b": [true, null] }"#, None)), base, "whitespace is not data");
        assert_ne!(batch_digest(&request(r#"{"b":[true,null],"a":1}"#, None)), base, "key order is data");
        assert_ne!(batch_digest(&request(r#"{"a":1.0,"b":[true,null]}"#, None)), base, "number spelling is data");
        assert_ne!(batch_digest(&request(r#"{"a":2,"b":[true,null]}"#, None)), base);
        assert_ne!(batch_digest(&request(r#"{"a":1,"b":[true,null]}"#, Some(7))), base);
        let mut typed = request(r#"{"a":1,"b":[true,null]}"#, None);
        typed.events[0].event_type = "assistant/message".into();
        assert_ne!(batch_digest(&typed), base);
        let mut with_run = request(r#"{"a":1,"b":[true,null]}"#, None);
        with_run.run = Some(berth_core::RunId::parse("r1").expect("valid run id"));
        assert_ne!(batch_digest(&with_run), base);
    }
}
