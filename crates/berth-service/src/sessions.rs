//! Sessions: create (and the crash-safe create protocol), get, list, metadata updates,
//! and the record and listing-filter helpers they share.

use super::*;

impl SessionService {
    pub async fn create(&self, principal: &Principal, request: CreateSession) -> Result<SessionRecord> {
        let now = self.now();
        let user = request.user.clone().unwrap_or_else(|| principal.user.clone());
        if user != principal.user && !principal.is_privileged() {
            let error =
                Error::Forbidden { reason: "only service and admin principals create sessions for other users".into() };
            let id = request.id.as_ref();
            return Err(self.denied_in_tenant(principal, "create", id, error).await);
        }
        let project = request.project.clone().or_else(|| principal.project.clone());
        if principal.role == principal::Role::User && principal.project.is_some() && project != principal.project {
            let error =
                Error::Forbidden { reason: "a project-scoped principal creates sessions in its own project".into() };
            let id = request.id.as_ref();
            return Err(self.denied_in_tenant(principal, "create", id, error).await);
        }
        let id = request.id.clone().unwrap_or_else(|| SessionId::generate(now));
        let scope = Scope { tenant: principal.tenant.clone(), user, project };
        let mut header = SessionHeader::new(id, scope, now);
        header.origin = request.origin.clone();
        header.delegation_depth = request.delegation_depth;
        header.policy = request.policy.clone().unwrap_or_default();
        header.validate()?;
        validate_metadata(request.title.as_deref(), &request.labels)?;
        let record = new_record(header, request.title, request.labels, now);
        self.create_from_record(principal, record, &[], "create", |_| Vec::new()).await
    }

    /// Inserts `record` as `creating` (one revision below its final one), materializes
    /// the log with `events`, then stores the final record by compare-and-set. A crash in
    /// between leaves a `creating` record that the sweeper removes.
    ///
    /// The final record and its audit records (`action`, plus whatever `also_audit`
    /// drafts from it) are stored in one catalog transaction.
    ///
    /// The creating write handle is kept in the writer cache (before the final record
    /// makes the session visible, so no append can race it for the lease): the appends
    /// that usually follow a create then open nothing — on the embedded backend a write
    /// open is a lease, a scan of the log and a durable epoch replacement (two syncs).
    pub(crate) async fn create_from_record(
        &self,
        principal: &Principal,
        mut record: SessionRecord,
        events: &[Event],
        action: &str,
        also_audit: impl FnOnce(&SessionRecord) -> Vec<AuditDraft>,
    ) -> Result<SessionRecord> {
        let key = record.key();
        let mut creating = record.clone();
        creating.status = Status::Creating;
        creating.revision = Revision(record.revision.0.saturating_sub(1));
        // The sweeper dates an unfinished create from here, not from the header's
        // `created_at`: an import keeps its export's, which may be long past.
        creating.status_changed_at = self.now();
        creating.creator = creator::this_process();
        match self.catalog.insert(&creating).await {
            Ok(()) => {}
            Err(error @ Error::AlreadyExists { .. }) => {
                if !self.take_over_abandoned_create(&mut creating).await? {
                    return Err(error);
                }
                record.revision = Revision(creating.revision.0 + 1);
            }
            Err(error) => return Err(error),
        }
        let creating_revision = creating.revision;
        let handle = match self.materialize(&record, events).await {
            Ok(handle) => handle,
            Err(error) => {
                let _ = self.catalog.remove(&key, creating_revision).await;
                return Err(error);
            }
        };
        self.adopt_writer(&key, handle).await;
        let mut audits = vec![self.draft_ok(principal, action, &record, serde_json::json!({"events": events.len()}))];
        audits.extend(also_audit(&record));
        if let Err(error) = self.catalog.update_audited(&record, creating_revision, audits).await {
            // The record stays `creating` (the sweeper's); nobody may write the session.
            self.close_writer(&key).await;
            return Err(error);
        }
        Ok(record)
    }

    /// When the record in the way of `creating` is a `creating` record whose creator is
    /// gone (`creator::is_gone`: killed mid-create), takes it over by compare-and-set —
    /// `creating` is stored in its place, one revision on — and says true; false when the
    /// record is anything else or its creator may still be at work (then only the
    /// sweeper removes it). Of concurrent takers one wins; the others see a conflict.
    async fn take_over_abandoned_create(&self, creating: &mut SessionRecord) -> Result<bool> {
        let Some(found) = self.catalog.get(&creating.key()).await? else { return Ok(false) };
        let abandoned = found.status == Status::Creating && found.creator.as_ref().is_some_and(creator::is_gone);
        if !abandoned {
            return Ok(false);
        }
        creating.revision = Revision(found.revision.0 + 1);
        match self.catalog.update(creating, found.revision).await {
            Ok(()) => {
                tracing::info!(session = %creating.key(), "took over a create its process left when it died");
                Ok(true)
            }
            Err(Error::RevisionConflict { .. } | Error::NotFound { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Creates the log of `record` with `events`, durably, and indexes their
    /// idempotency keys; returns the write handle (closed on failure). A log already
    /// there is another create's that never finished — the caller holds the `creating`
    /// record, so no session owns it — and is erased first, unless a writer still holds
    /// it (then `AlreadyExists`).
    async fn materialize(&self, record: &SessionRecord, events: &[Event]) -> Result<SessionHandle> {
        let handle = match self.store.create(record.header.clone()).await {
            Err(error @ Error::AlreadyExists { .. }) if self.store.stat(&record.key()).await?.is_some() => {
                match self.store.erase(&record.key()).await {
                    Ok(_) => tracing::info!(session = %record.key(), "erased the log of a create that never finished"),
                    Err(Error::AlreadyOwned { .. }) => return Err(error),
                    Err(other) => return Err(other),
                }
                self.store.create(record.header.clone()).await?
            }
            created => created?,
        };
        let written = async {
            append_chunked(&handle, events).await?;
            handle.flush().await?;
            // An imported log keeps its keys (R-S14): index them before the session goes live.
            match idempotency::keyed_batches(events) {
                batches if batches.is_empty() => Ok(()),
                batches => self.catalog.index_idempotency(&record.key(), &batches, events.len() as u64).await,
            }
        }
        .await;
        match written {
            Ok(()) => Ok(handle),
            Err(error) => {
                let _ = handle.close().await;
                Err(error)
            }
        }
    }

    pub async fn get(&self, principal: &Principal, id: &SessionId) -> Result<SessionRecord> {
        self.load(principal, id, "get").await
    }

    pub async fn list(&self, principal: &Principal, request: &ListRequest) -> Result<SessionPage> {
        let limit = request.limit.unwrap_or(PAGE_SIZE_DEFAULT);
        if limit == 0 || limit > PAGE_SIZE_MAX {
            return Err(Error::LimitExceeded {
                what: berth_core::limits::Limit::PageSize,
                limit: PAGE_SIZE_MAX as u64,
                actual: limit as u64,
            });
        }
        let mut query = self.listing_query(principal, request)?;
        query.cursor = request.cursor.as_deref().map(ListCursor::decode).transpose()?;
        query.limit = limit + 1;
        self.write_held_activity(principal).await;
        let mut items = self.catalog.list(&query).await?;
        let next_cursor = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|record| ListCursor::of(record).encode())
        } else {
            None
        };
        Ok(SessionPage { items, next_cursor })
    }

    /// Per listable status, how many sessions the listing `request` (its statuses,
    /// cursor and limit ignored) would show: exact up to `cap`, else `(cap, true)`. Each
    /// count is a keyset read of at most `cap + 1` rows through the listing's own index
    /// (tenant + status), so it costs the same at 100 sessions as at 100,000.
    pub async fn count(&self, principal: &Principal, request: &ListRequest, cap: usize) -> Result<Vec<StatusCount>> {
        if cap == 0 || cap > COUNT_CAP_MAX {
            return Err(Error::LimitExceeded {
                what: berth_core::limits::Limit::PageSize,
                limit: COUNT_CAP_MAX as u64,
                actual: cap as u64,
            });
        }
        let base = self.listing_query(principal, &ListRequest { statuses: Vec::new(), ..request.clone() })?;
        self.write_held_activity(principal).await;
        let mut counts = Vec::with_capacity(LISTABLE_STATUSES.len());
        for status in LISTABLE_STATUSES {
            let query = SessionQuery { statuses: vec![status], limit: cap + 1, cursor: None, ..base.clone() };
            let found = self.catalog.list(&query).await?.len();
            counts.push(StatusCount { status, count: found.min(cap) as u64, more: found > cap });
        }
        Ok(counts)
    }

    /// The catalog query of a listing: the caller's tenant, and for a user key its own
    /// user (and project), whatever the request names.
    pub(crate) fn listing_query(&self, principal: &Principal, request: &ListRequest) -> Result<SessionQuery> {
        if let Some(label) = request.label.as_ref().filter(|label| label.len() > LABEL_BYTES_MAX) {
            // No stored label is longer; refused like a label that long at create.
            return Err(Error::LimitExceeded {
                what: berth_core::limits::Limit::LabelBytes,
                limit: LABEL_BYTES_MAX as u64,
                actual: label.len() as u64,
            });
        }
        let mut query = SessionQuery::tenant(principal.tenant.clone());
        query.user = request.user.clone();
        query.project = request.project.clone();
        if principal.role == principal::Role::User {
            query.user = Some(principal.user.clone());
            if principal.project.is_some() {
                query.project = principal.project.clone();
            }
        }
        if request.statuses.contains(&Status::Creating) {
            return Err(unlistable_status("creating"));
        }
        query.statuses =
            if request.statuses.is_empty() { LISTABLE_STATUSES.to_vec() } else { request.statuses.clone() };
        query.label = request.label.clone();
        query.parent = request.parent.clone();
        query.active_since = request.active_since;
        query.active_before = request.active_before;
        query.include_blank = request.include_blank;
        query.search = request.search.as_deref().map(berth_catalog::SessionSearch::parse).transpose()?;
        Ok(query)
    }

    /// The listing sorts and filters by activity: write what is held first.
    pub(crate) async fn write_held_activity(&self, principal: &Principal) {
        if let Err(error) = self.activity.write_all(Some(&principal.tenant)).await {
            tracing::warn!(%error, "writing held activity before a listing failed (the listing may lag)");
        }
    }

    pub async fn update_metadata(
        &self,
        principal: &Principal,
        id: &SessionId,
        update: MetadataUpdate,
    ) -> Result<SessionRecord> {
        if let Some(Some(title)) = &update.title {
            validate_metadata(Some(title), &BTreeSet::new())?;
        }
        if let Some(labels) = &update.labels {
            validate_metadata(None, labels)?;
        }
        let (record, ()) = self
            .mutate(principal, id, "update", update.expected_revision, |record, _now| {
                if let Some(title) = &update.title {
                    record.title = title.clone();
                }
                if let Some(labels) = &update.labels {
                    record.labels = labels.clone();
                }
                Ok(())
            })
            .await?;
        Ok(record)
    }
}

pub(crate) fn new_record(
    header: SessionHeader,
    title: Option<String>,
    labels: BTreeSet<String>,
    now: Timestamp,
) -> SessionRecord {
    let ttl_ms = header.policy.activity_ttl_ms;
    SessionRecord {
        header,
        status: Status::Active,
        lease_until: now.plus_ms(ttl_ms),
        last_activity: now,
        // Revision 0 is the transient `creating` record; the first live revision is 1.
        revision: Revision(1),
        title,
        labels,
        event_count: 0,
        blank: true,
        runs: Vec::new(),
        status_changed_at: now,
        resume_mark: Default::default(),
        repair: Default::default(),
        creator: None,
    }
}

pub(crate) fn apply_expire(record: &mut SessionRecord, now: Timestamp) {
    record.status = Status::Expired;
    record.status_changed_at = now;
    for run in &mut record.runs {
        run.status = RunStatus::Abandoned;
    }
    record.runs.clear();
}

/// The statuses a listing can filter by (and shows by default): every status but
/// `creating`, which is an unfinished create nobody may see.
/// The largest cap of `count`: a count reads at most this many rows per status.
pub const COUNT_CAP_MAX: usize = 10_000;

/// One status's count (`more`: the count stopped at the cap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusCount {
    pub status: Status,
    pub count: u64,
    pub more: bool,
}

pub const LISTABLE_STATUSES: [Status; 4] = [Status::Active, Status::Idle, Status::Closed, Status::Expired];

/// One status of a listing filter, as the HTTP query and the CLI spell it: a listable
/// status, never empty, unknown or `creating` (an empty filter would read as "no filter"
/// and show every status, so it is refused rather than guessed at).
pub fn parse_listable_status(text: &str) -> Result<Status> {
    match Status::parse(text) {
        Ok(status) if LISTABLE_STATUSES.contains(&status) => Ok(status),
        _ => Err(unlistable_status(text)),
    }
}

pub(crate) fn unlistable_status(text: &str) -> Error {
    let listable: Vec<&str> = LISTABLE_STATUSES.iter().map(|status| status.as_str()).collect();
    Error::invalid("status", format!("{text:?} is not listable; the listable statuses are {}", listable.join(", ")))
}

pub(crate) fn validate_metadata(title: Option<&str>, labels: &BTreeSet<String>) -> Result<()> {
    if let Some(title) = title {
        if title.len() > TITLE_BYTES_MAX {
            return Err(Error::LimitExceeded {
                what: berth_core::limits::Limit::TitleBytes,
                limit: TITLE_BYTES_MAX as u64,
                actual: title.len() as u64,
            });
        }
    }
    if labels.len() > LABELS_MAX {
        return Err(Error::LimitExceeded {
            what: berth_core::limits::Limit::Labels,
            limit: LABELS_MAX as u64,
            actual: labels.len() as u64,
        });
    }
    for label in labels {
        berth_core::limits::check_text_line("label", berth_core::limits::Limit::LabelBytes, LABEL_BYTES_MAX, label)?;
    }
    Ok(())
}
