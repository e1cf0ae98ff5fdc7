//! Events: reads (forward and before a position), appends with their idempotency by
//! content (`expected_seq`) and by caller key (R-S14), and the batch helpers.

use super::*;

/// Most events a `read_before` reads through an idle cached write handle: it holds the
/// handle while it reads, and an append to the session waits for it meanwhile.
const WRITER_READ_EVENTS_MAX: u64 = 64;

impl SessionService {
    pub async fn read(
        &self,
        principal: &Principal,
        id: &SessionId,
        offset: u64,
        length: Option<u64>,
    ) -> Result<Vec<Event>> {
        let record = self.load(principal, id, READ_ACTION).await?;
        let handle = self.store.open(&record.key(), Access::Read).await?;
        let events = handle.read(offset, length).await;
        let _ = handle.close().await;
        events
    }

    /// Up to `limit` events before seq `before`, in ascending order: the last `limit`
    /// events when `before` is at or past the end (R-S15). Authorized like `read`; the
    /// backend reads only near them, also when no handle has the log open.
    pub async fn read_before(
        &self,
        principal: &Principal,
        id: &SessionId,
        before: u64,
        limit: u64,
    ) -> Result<Vec<Event>> {
        let record = self.load(principal, id, READ_ACTION).await?;
        let key = record.key();
        if limit <= WRITER_READ_EVENTS_MAX {
            let cached = self.writers.lock().await.handles.get(&key).map(|cached| cached.handle.clone());
            if let Some(writer) = cached {
                // A few of the log's events — a chat turn's read of the newest after its
                // own append — through the write handle this process keeps when it is
                // idle: no open, no header read (a turn 0.65 → 0.54 ms from Python).
                // Busy (an append in flight) or failing: a read handle of its own.
                if let Ok(Some(events)) = writer.try_read_before(before, limit).await {
                    return Ok(events);
                }
            }
        }
        let handle = self.store.open(&key, Access::Read).await?;
        let events = handle.read_before(before, limit).await;
        let _ = handle.close().await;
        events
    }

    /// The events of the given types (exact names, at most `READ_TYPES_MAX`), at most
    /// `limit` of them, scanning `range` in chunks of `PAGE_SIZE_MAX` events — at most
    /// `TYPED_READ_SCAN_MAX` events in all (see `TypedPage` for going on). Only the
    /// matching events are kept: a reader that wants a few types of a long log (ADK's
    /// events among the bookkeeping) gets them without the rest. Authorized like `read`.
    pub async fn read_types(
        &self,
        principal: &Principal,
        id: &SessionId,
        range: ReadRange,
        types: &[EventType],
        limit: u64,
    ) -> Result<TypedPage> {
        if types.is_empty() || types.len() > READ_TYPES_MAX {
            return Err(Error::invalid("types", format!("between 1 and {READ_TYPES_MAX} event types")));
        }
        let record = self.load(principal, id, READ_ACTION).await?;
        let handle = self.store.open(&record.key(), Access::Read).await?;
        let page = scan_types(&handle, range, types, limit).await;
        let _ = handle.close().await;
        page
    }

    /// The events at the given seqs, each once, ascending (a point read by position):
    /// at most `berth_store::READ_SEQS_MAX` distinct seqs (`LimitExceeded` above), each
    /// below the log's end (`Invalid` naming the first that is not). Authorized like `read`.
    pub async fn read_seqs(&self, principal: &Principal, id: &SessionId, seqs: &[u64]) -> Result<Vec<Event>> {
        let record = self.load(principal, id, READ_ACTION).await?;
        let handle = self.store.open(&record.key(), Access::Read).await?;
        let events = handle.read_seqs(seqs).await;
        let _ = handle.close().await;
        events
    }

    pub async fn append(&self, principal: &Principal, id: &SessionId, request: AppendRequest) -> Result<AppendOutcome> {
        let idempotency_key = check_append_request(&request)?;
        if !request.memory.is_empty() {
            self.check_carried(principal, id, &request).await?;
        }
        // The record is read, and the run checked, under the session's append lock, which
        // an attach or detach also holds while it changes the runs: an append that passes
        // its check is stored before any takeover, never after it (R-P3).
        let key = SessionKey::new(principal.tenant.clone(), id.clone());
        self.under_append_lock(&key, self.append_locked(principal, id, request, idempotency_key)).await
    }

    async fn append_locked(
        &self,
        principal: &Principal,
        id: &SessionId,
        request: AppendRequest,
        idempotency_key: Option<berth_core::IdempotencyKey>,
    ) -> Result<AppendOutcome> {
        let record = self.load(principal, id, APPEND_ACTION).await?;
        if let Err(error) = self.check_append_allowed(principal, &record, request.run.as_ref()).await {
            return self.refused_append(principal, &record, &request, idempotency_key, error).await;
        }
        let key = record.key();
        let now = self.now();
        let writer = self.writer(&key).await?;
        self.open_ledger(&key, &writer).await?;
        if !request.memory.is_empty() {
            // Writes a crashed carried append left are finished first, so that a retry of
            // it (answered as a duplicate below) reads its own writes too.
            self.finish_carried(&key, Some(writer.next_seq())).await?;
        }
        let next_seq = writer.next_seq();
        let start = request.expected_seq.unwrap_or(next_seq);
        let mut events = build_events(&request, start, now)?;
        if !request.memory.is_empty() {
            // The batch ends with the service's record of the writes (filled in below).
            events.push(Event {
                seq: Seq(start + events.len() as u64),
                event_type: EventType::parse(berth_core::vocabulary::SESSION_MEMORY)?,
                time: now,
                run: request.run.clone(),
                data: berth_core::JsonText::null(),
                ignorable: true,
                idempotency: None,
            });
        }
        let keyed = match idempotency_key {
            Some(idempotency_key) => {
                match self.keyed_plan(&key, idempotency_key, &request, next_seq, &mut events).await? {
                    Err(original) => return Ok(original),
                    Ok(batch) => Some(batch),
                }
            }
            None if start != next_seq => return self.check_retry(&writer, &request, start, next_seq, events).await,
            None => None,
        };
        if events.is_empty() {
            return Ok(AppendOutcome { first_seq: start, next_seq, duplicate: false });
        }
        let _scopes;
        let carried = if request.memory.is_empty() {
            None
        } else {
            _scopes = self.lock_scopes(&key.tenant, request.memory.iter().map(|put| &put.namespace)).await;
            let data = self.prepare_carried(&key, &request, start).await?;
            if let Some(last) = events.last_mut() {
                last.data = data.clone();
            }
            Some(data)
        };
        writer.append(&events).await?;
        self.turns_appended(&key, &events).await;
        if let Some(data) = &carried {
            self.apply_carried(&key, data, start + events.len() as u64).await?;
        }
        let new_next = start + events.len() as u64;
        self.ledger_appended(&key, keyed, new_next).await;
        let conversation =
            events.iter().any(|event| berth_core::vocabulary::is_conversation_event(event.event_type.as_str()));
        let ttl_ms = record.header.policy.activity_ttl_ms;
        // The events are durable already; the activity they cause (counts, last activity,
        // the lease extension) is a relaxed write: losing the latest of these to a power
        // loss only makes the metadata lag the log, which the next write corrects.
        let record_activity = |record: &mut SessionRecord, now: Timestamp| -> Result<()> {
            record.event_count = record.event_count.max(new_next);
            record.blank &= !conversation;
            record.last_activity = now;
            let next = lifecycle::transition(record.lifecycle(), LifecycleEvent::Appended { ttl_ms }, now)?;
            record.lease_until = next.lease_until;
            Ok(())
        };
        // Held, when this session's activity was written moments ago (`activity.rs`).
        if self.activity.hold(&record, self.now(), new_next, conversation) {
            return Ok(AppendOutcome { first_seq: start, next_seq: new_next, duplicate: false });
        }
        // First against the record this append already loaded (no second read on the hot
        // path); only a concurrent metadata change sends it through the reload loop.
        let mut next = record.clone();
        record_activity(&mut next, self.now())?;
        next.revision = Revision(record.revision.0 + 1);
        match self.catalog.update_activity(&next, record.revision).await {
            Ok(()) => self.activity.written(&next),
            Err(Error::RevisionConflict { .. }) => {
                self.mutate_with(principal, id, APPEND_ACTION, None, Durability::Relaxed, record_activity).await?;
            }
            Err(error) => return Err(error),
        }
        Ok(AppendOutcome { first_seq: start, next_seq: new_next, duplicate: false })
    }

    /// An append the session refuses (terminal, run gone, forbidden). A keyed retry of a
    /// batch stored before still gets its original outcome — keys are honoured for the
    /// session's life (R-S14) — except for a forbidden caller, whose refusal is audited.
    pub(crate) async fn refused_append(
        &self,
        principal: &Principal,
        record: &SessionRecord,
        request: &AppendRequest,
        idempotency_key: Option<berth_core::IdempotencyKey>,
        error: Error,
    ) -> Result<AppendOutcome> {
        if let Error::Forbidden { .. } = error {
            return Err(self.denied(principal, APPEND_ACTION, &record.header.id, error).await);
        }
        let Some(idempotency_key) = idempotency_key else { return Err(error) };
        let key = record.key();
        match idempotency::find_without_writer(self.catalog.as_ref(), &self.store, &key, &idempotency_key).await? {
            Some(stored) => idempotency::retry_outcome(&stored, &idempotency::batch_digest(request)),
            None => Err(error),
        }
    }

    pub(crate) async fn check_append_allowed(
        &self,
        principal: &Principal,
        record: &SessionRecord,
        run: Option<&berth_core::RunId>,
    ) -> Result<()> {
        if record.status.is_terminal() {
            return Err(Error::Terminal { state: record.status.to_string() });
        }
        let parallel = matches!(record.header.policy.concurrency, berth_core::Concurrency::Parallel { .. });
        match run {
            Some(run) => {
                let attached = record.runs.iter().find(|r| &r.run_id == run && r.status == RunStatus::Attached);
                match attached {
                    Some(r) if principal.is_privileged() || r.attached_by == principal.user => Ok(()),
                    _ => Err(Error::RunNotAttached { id: record.header.id.to_string(), run: run.to_string() }),
                }
            }
            None if parallel => Err(Error::invalid("append", "a parallel session's events carry their run")),
            None if principal.is_privileged() => Ok(()),
            None => {
                Err(Error::Forbidden { reason: "appends come from an attached run (or a service principal)".into() })
            }
        }
    }

    /// What a keyed append does before anything is written: `Err(original outcome)` if
    /// the key is stored with this content (`IdempotencyKeyReused` with other content);
    /// `SeqConflict` for a new key at another seq than the log's end — a new key never
    /// adopts what others stored (the content rule is for keyless retries only);
    /// otherwise `Ok(the batch)`, with `events` (built for it) marked as its own.
    pub(crate) async fn keyed_plan(
        &self,
        key: &SessionKey,
        idempotency_key: berth_core::IdempotencyKey,
        request: &AppendRequest,
        next_seq: u64,
        events: &mut [Event],
    ) -> Result<std::result::Result<berth_core::KeyedBatch, AppendOutcome>> {
        let digest = idempotency::batch_digest(request);
        if let Some(stored) = self.keyed_batch(key, &idempotency_key, next_seq).await? {
            return idempotency::retry_outcome(&stored, &digest).map(Err);
        }
        let start = events.first().map_or(next_seq, |event| event.seq.get());
        if start != next_seq {
            return Err(Error::SeqConflict { expected: next_seq, actual: start });
        }
        let batch =
            berth_core::KeyedBatch { key: idempotency_key, first_seq: start, events: events.len() as u64, digest };
        idempotency::mark(events, &batch);
        Ok(Ok(batch))
    }

    /// The stored batch appended with `idempotency_key`: this writer's ledger first, then
    /// the catalog's index (an entry past the log's end, which only a lost write could
    /// leave, is not trusted) unless the ledger knows the key was never used.
    pub(crate) async fn keyed_batch(
        &self,
        key: &SessionKey,
        idempotency_key: &berth_core::IdempotencyKey,
        next_seq: u64,
    ) -> Result<Option<berth_core::KeyedBatch>> {
        let (in_ledger, never_used) = {
            let writers = self.writers.lock().await;
            let ledger = writers.handles.get(key).and_then(|cached| cached.ledger.as_ref());
            let in_ledger = ledger.and_then(|ledger| ledger.get(idempotency_key).cloned());
            (in_ledger, ledger.is_some_and(|ledger| ledger.never_used(idempotency_key)))
        };
        if in_ledger.is_some() || never_used {
            return Ok(in_ledger);
        }
        let indexed = self.catalog.idempotency_batch(key, idempotency_key).await?;
        Ok(indexed.filter(|batch| batch.next_seq() <= next_seq))
    }

    /// Records a keyed batch in the writer's ledger, and brings the catalog's index up to
    /// date when the log has outgrown it by `IDEMPOTENCY_INDEX_LAG_EVENTS_MAX`. A failed
    /// index write is only logged: the log already holds the key.
    pub(crate) async fn ledger_appended(&self, key: &SessionKey, keyed: Option<berth_core::KeyedBatch>, next_seq: u64) {
        let pending = {
            let mut writers = self.writers.lock().await;
            let Some(ledger) = writers.handles.get_mut(key).and_then(|cached| cached.ledger.as_mut()) else { return };
            ledger.appended(keyed, next_seq);
            if !ledger.is_due() {
                return;
            }
            ledger.pending()
        };
        // Written without holding the cache (the caller's append lock keeps this
        // session's ledger still meanwhile).
        match self.catalog.index_idempotency(key, &pending, next_seq).await {
            Ok(()) => {
                if let Some(ledger) = self.writers.lock().await.handles.get_mut(key).and_then(|c| c.ledger.as_mut()) {
                    ledger.written(next_seq);
                }
            }
            Err(error) => {
                tracing::warn!(session = %key, %error, "writing the idempotency index failed (it lags the log)")
            }
        }
    }

    /// `expected_seq` behind the log: identical stored events make the retry a success
    /// without duplicates; anything else is `SeqConflict`. Events of a keyed batch are
    /// never identical to a keyless retry (R-S14).
    pub(crate) async fn check_retry(
        &self,
        writer: &SessionHandle,
        request: &AppendRequest,
        start: u64,
        next_seq: u64,
        events: Vec<Event>,
    ) -> Result<AppendOutcome> {
        let conflict = Error::SeqConflict { expected: next_seq, actual: start };
        if start > next_seq || start + events.len() as u64 > next_seq {
            return Err(conflict);
        }
        let stored = writer.read(start, Some(events.len() as u64)).await?;
        let same = stored.len() == events.len()
            && stored.iter().zip(&events).zip(&request.events).all(|((stored, new), draft)| {
                !idempotency::is_keyed(stored)
                    && stored.event_type == new.event_type
                    && stored.data == new.data
                    && stored.run == new.run
                    && stored.ignorable == new.ignorable
                    && (draft.time.is_none() || stored.time == new.time)
            });
        if same {
            Ok(AppendOutcome { first_seq: start, next_seq, duplicate: true })
        } else {
            Err(conflict)
        }
    }
}

/// The checks an append makes before reading anything: the batch limit, and its key
/// (returned parsed).
pub(crate) fn check_append_request(request: &AppendRequest) -> Result<Option<berth_core::IdempotencyKey>> {
    if request.events.iter().any(|draft| draft.event_type == berth_core::vocabulary::SESSION_MEMORY) {
        return Err(Error::invalid(
            "event type",
            "session/memory is written by berth only: carry memory writes in the append's `memory` field",
        ));
    }
    if request.events.len() > BATCH_EVENTS_MAX {
        return Err(Error::LimitExceeded {
            what: berth_core::limits::Limit::BatchEvents,
            limit: BATCH_EVENTS_MAX as u64,
            actual: request.events.len() as u64,
        });
    }
    idempotency::requested_key(request)
}

pub(crate) fn build_events(request: &AppendRequest, start: u64, now: Timestamp) -> Result<Vec<Event>> {
    request
        .events
        .iter()
        .enumerate()
        .map(|(index, draft)| {
            Ok(Event {
                seq: Seq(start + index as u64),
                event_type: EventType::parse(&draft.event_type)?,
                time: draft.time.unwrap_or(now),
                run: request.run.clone(),
                data: draft.data.clone(),
                ignorable: draft.ignorable,
                idempotency: None,
            })
        })
        .collect()
}

/// Appends `events` in batches within the batch limits.
pub(crate) async fn append_chunked(handle: &SessionHandle, events: &[Event]) -> Result<()> {
    let mut start = 0;
    while start < events.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < events.len() && end - start < BATCH_EVENTS_MAX {
            let size = events[end].size_estimate_bytes();
            if end > start && bytes + size > BATCH_BYTES_MAX {
                break;
            }
            bytes += size;
            end += 1;
        }
        handle.append(&events[start..end]).await?;
        start = end;
    }
    Ok(())
}

/// `read_types` on an open handle.
pub(crate) async fn scan_types(
    handle: &SessionHandle,
    range: ReadRange,
    types: &[EventType],
    limit: u64,
) -> Result<TypedPage> {
    let chunk = berth_core::limits::PAGE_SIZE_MAX as u64;
    let wanted = |event: &Event| types.contains(&event.event_type);
    let mut events = Vec::new();
    let mut scanned = 0u64;
    match range {
        ReadRange::Forward { from, before } => {
            let before = before.unwrap_or(u64::MAX);
            let mut next = from;
            while (events.len() as u64) < limit && next < before && scanned < TYPED_READ_SCAN_MAX {
                let asked = chunk.min(before - next).min(TYPED_READ_SCAN_MAX - scanned);
                let read = handle.read(next, Some(asked)).await?;
                let got = read.len() as u64;
                for event in read {
                    next = event.seq.get() + 1;
                    scanned += 1;
                    if wanted(&event) {
                        events.push(event);
                        if events.len() as u64 == limit {
                            break;
                        }
                    }
                }
                if got < asked {
                    break;
                }
            }
            Ok(TypedPage { events, first_seq: from, next_seq: next })
        }
        ReadRange::Backward { before } => {
            let mut top: Option<u64> = None;
            let mut first = before;
            'scan: while (events.len() as u64) < limit && first > 0 && scanned < TYPED_READ_SCAN_MAX {
                let asked = chunk.min(TYPED_READ_SCAN_MAX - scanned);
                let read = handle.read_before(first, asked).await?;
                let Some(last) = read.last() else { break };
                top.get_or_insert(last.seq.get() + 1);
                // Fewer than asked: this chunk starts the log, and `first` ends at 0.
                for event in read.into_iter().rev() {
                    first = event.seq.get();
                    scanned += 1;
                    if wanted(&event) {
                        events.push(event);
                        if events.len() as u64 == limit {
                            break 'scan;
                        }
                    }
                }
            }
            events.reverse();
            // Nothing scanned: `before` is 0 or the log is empty.
            let next_seq = top.unwrap_or(0);
            Ok(TypedPage { events, first_seq: first.min(next_seq), next_seq })
        }
    }
}
