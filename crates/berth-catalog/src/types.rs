//! Catalog records and queries.

use berth_core::lifecycle::{Lifecycle, Status};
use berth_core::{ProjectId, TenantId};
use berth_core::{Revision, RunId, SessionHeader, SessionId, SessionKey, Timestamp, UserId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// What happened to a run's attachment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Attached,
    /// Detached by the run itself with an outcome.
    Detached,
    /// Its lease lapsed; detached by the next attach.
    Abandoned,
    /// Detached by `on_busy = interrupt`.
    Interrupted,
    /// Detached by a forced close.
    Cancelled,
}

/// A run attached to a session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: RunId,
    /// The user the run acts for (the principal's user at attach).
    pub attached_by: UserId,
    pub attached_at: Timestamp,
    /// The run's attachment lease, extended by heartbeat.
    pub lease_until: Timestamp,
    pub status: RunStatus,
}

/// A session's catalog record: the immutable header plus mutable metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub header: SessionHeader,
    pub status: Status,
    /// The activity lease.
    pub lease_until: Timestamp,
    pub last_activity: Timestamp,
    pub revision: Revision,
    pub title: Option<String>,
    pub labels: BTreeSet<String>,
    /// Events stored (a hint maintained by the service).
    pub event_count: u64,
    /// No conversation event yet (listing hides blank sessions unless asked).
    pub blank: bool,
    /// Currently attached runs.
    pub runs: Vec<RunRecord>,
    /// When `status` last changed (retention counts from here for terminal sessions).
    pub status_changed_at: Timestamp,
    /// Where the next resume starts reading the log (kept by resume; absent in records
    /// written before it existed, which resume reads from the start).
    #[serde(default, skip_serializing_if = "ResumeMark::is_start")]
    pub resume_mark: ResumeMark,
    /// What the service knows of turns a run left open and their repair (absent in
    /// records of sessions never repaired, and in records written before it existed).
    #[serde(default, skip_serializing_if = "RepairNote::is_empty")]
    pub repair: RepairNote,
    /// On a `creating` record only: the process making the session, so that a create of
    /// the same id can tell a create a killed process left from one under way (absent
    /// where the process cannot name itself, and in records written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creator: Option<CreatorMark>,
}

/// The process that wrote a `creating` record, as the host's kernel knows it: which
/// boot of which host (`/proc/sys/kernel/random/boot_id`), which PID namespace, its pid
/// and its start time (clock ticks since boot, so a reused pid is another process).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatorMark {
    pub boot: String,
    pub pid_namespace: String,
    pub pid: u32,
    pub started: u64,
}

/// A run and a time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAt {
    pub run: RunId,
    pub at: Timestamp,
}

/// What the service knows of a session's interrupted turns (issue 55), for listings
/// that badge them without reading logs. Written only when it changes: by a resume
/// whose repair closes a turn a run left open (in the same catalog write that records
/// the repair), never by an append.
///
/// An interruption is known lazily: a run that stops without detaching leaves its turn
/// open in the log, and the catalog learns of it when a resume reads the log and
/// repairs it. Until then the record shows only the run still attached with a lapsed
/// lease. Both fields name the latest occurrence.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairNote {
    /// The run that left a turn open, and the time of its last event before the repair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<RunAt>,
    /// The run whose resume closed it (`data.repaired_by` of the closers), and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repaired_by: Option<RunAt>,
}

impl RepairNote {
    pub fn is_empty(&self) -> bool {
        *self == RepairNote::default()
    }

    /// The latest interruption known has been repaired.
    pub fn is_repaired(&self) -> bool {
        match (&self.interrupted, &self.repaired_by) {
            (Some(interrupted), Some(repaired)) => repaired.at >= interrupted.at,
            (None, Some(_)) => true,
            _ => false,
        }
    }
}

/// Where a resume starts reading a session's log, so that it reads what was appended
/// since the last resume (and any turn still open then) rather than the whole log.
///
/// A hint the service keeps: no turn that starts before `from` is open (every one is
/// closed in the log), and `checkpoint` is the seq of the latest checkpoint before
/// `from`. Both stay true as the log grows, so a mark that lags (an older one, or none)
/// is never wrong, only slower. `last` is the `fingerprint` of the event at `from - 1`:
/// a mark is trusted only while that event is still the one it was, so a log that lost
/// its end (acknowledged appends lost with relaxed durability, a tail an operator cut)
/// and grew again past the mark is read from its start. A mark past the log's end is not
/// trusted either.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeMark {
    pub from: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<String>,
}

impl ResumeMark {
    /// No mark: read from the log's start.
    pub fn is_start(&self) -> bool {
        *self == ResumeMark::default()
    }

    /// A stable fingerprint of an event (its seq, type, run, time, ignorable flag and
    /// data): the first 8 bytes of their SHA-256, in hex. Stored in catalog records, so
    /// its input layout never changes.
    pub fn fingerprint(event: &berth_core::Event) -> String {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        hasher.update(event.seq.get().to_be_bytes());
        hasher.update(event.event_type.as_str().as_bytes());
        hasher.update([0]);
        hasher.update(event.run.as_ref().map_or("", |run| run.as_str()).as_bytes());
        hasher.update([0]);
        hasher.update(event.time.0.to_be_bytes());
        hasher.update([u8::from(event.ignorable)]);
        hasher.update(event.data.as_str().as_bytes());
        hex::encode(&hasher.finalize()[..8])
    }
}

impl SessionRecord {
    pub fn key(&self) -> SessionKey {
        self.header.key()
    }

    /// Whether a listing shows a preview of this session in place of its title: it has
    /// no title (or a blank one) and a conversation happened (it is not `blank`), so the
    /// first user message of its log is what a reader recognizes it by (issue 52).
    pub fn wants_preview(&self) -> bool {
        self.title.as_deref().is_none_or(|title| title.trim().is_empty()) && !self.blank
    }

    pub fn lifecycle(&self) -> Lifecycle {
        Lifecycle { status: self.status, lease_until: self.lease_until, runs_attached: self.runs.len() as u32 }
    }
}

/// Where a listing continues: the last item's sort key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListCursor {
    pub last_activity: Timestamp,
    pub id: SessionId,
}

impl ListCursor {
    pub fn of(record: &SessionRecord) -> ListCursor {
        ListCursor { last_activity: record.last_activity, id: record.header.id.clone() }
    }

    /// An opaque string form for APIs: `<last_activity>.<id>`.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.last_activity.0, self.id)
    }

    pub fn decode(text: &str) -> berth_core::Result<ListCursor> {
        let invalid = || berth_core::Error::invalid("cursor", "not a cursor this server issued");
        let (time, id) = text.split_once('.').ok_or_else(invalid)?;
        Ok(ListCursor {
            last_activity: Timestamp(time.parse().map_err(|_| invalid())?),
            id: SessionId::parse(id).map_err(|_| invalid())?,
        })
    }
}

/// A listing query. Every field but `tenant` narrows it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SessionQuery {
    pub tenant: Option<TenantId>,
    pub user: Option<UserId>,
    pub project: Option<ProjectId>,
    /// Empty means any status.
    pub statuses: Vec<Status>,
    pub label: Option<String>,
    pub parent: Option<SessionId>,
    pub active_since: Option<Timestamp>,
    pub active_before: Option<Timestamp>,
    pub lease_before: Option<Timestamp>,
    pub created_before: Option<Timestamp>,
    pub status_changed_before: Option<Timestamp>,
    pub include_blank: bool,
    /// Sessions whose id, title or a label holds this text (`search.rs`).
    pub search: Option<crate::SessionSearch>,
    pub cursor: Option<ListCursor>,
    pub limit: usize,
}

impl SessionQuery {
    pub fn tenant(tenant: TenantId) -> SessionQuery {
        SessionQuery { tenant: Some(tenant), limit: berth_core::limits::PAGE_SIZE_DEFAULT, ..SessionQuery::default() }
    }

    /// The reference semantics every catalog must match (used by the memory catalog
    /// and by tests).
    pub fn matches(&self, record: &SessionRecord) -> bool {
        let header = &record.header;
        let scope = &header.scope;
        self.tenant.as_ref().is_none_or(|t| *t == scope.tenant)
            && self.user.as_ref().is_none_or(|u| *u == scope.user)
            && self.project.as_ref().is_none_or(|p| scope.project.as_ref() == Some(p))
            && (self.statuses.is_empty() || self.statuses.contains(&record.status))
            && self.label.as_ref().is_none_or(|l| record.labels.contains(l))
            && self.parent.as_ref().is_none_or(|p| header.parent.as_ref().map(|r| &r.session) == Some(p))
            && self.active_since.is_none_or(|t| record.last_activity >= t)
            && self.active_before.is_none_or(|t| record.last_activity < t)
            && self.lease_before.is_none_or(|t| record.lease_until < t)
            && self.created_before.is_none_or(|t| header.created_at < t)
            && self.status_changed_before.is_none_or(|t| record.status_changed_at < t)
            && (self.include_blank || !record.blank)
            && self.search.as_ref().is_none_or(|search| search.matches(record))
            && self.cursor.as_ref().is_none_or(|c| (record.last_activity, &header.id) < (c.last_activity, &c.id))
    }
}

/// Which index a SQL catalog drives a listing page from. Both SQL catalogs index the
/// same shapes, so the choice is made once here; each backend maps it to its own
/// index names and SQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListDriver {
    /// Tenant only, by activity.
    Activity,
    /// Tenant + one status.
    Status,
    /// Tenant + user.
    User,
    /// Tenant + project.
    Project,
    /// Tenant + fork parent.
    Parent,
    /// Tenant + label (from the label rows).
    Label,
    /// Tenant + label + one status (from the label rows).
    LabelStatus,
    /// No tenant: a cross-tenant maintenance sweep (not index-bounded).
    AnyTenant,
}

impl ListDriver {
    pub fn choose(query: &SessionQuery) -> ListDriver {
        match query {
            SessionQuery { tenant: None, .. } => ListDriver::AnyTenant,
            SessionQuery { label: Some(_), statuses, .. } if statuses.is_empty() => ListDriver::Label,
            SessionQuery { label: Some(_), .. } => ListDriver::LabelStatus,
            SessionQuery { parent: Some(_), .. } => ListDriver::Parent,
            SessionQuery { project: Some(_), .. } => ListDriver::Project,
            SessionQuery { user: Some(_), .. } => ListDriver::User,
            SessionQuery { statuses, .. } if !statuses.is_empty() => ListDriver::Status,
            _ => ListDriver::Activity,
        }
    }

    /// Does the index lead with one status, so a multi-status query runs one
    /// sub-query per status?
    pub fn splits_status(self) -> bool {
        matches!(self, ListDriver::Status | ListDriver::LabelStatus)
    }

    /// Is the page driven from the label rows rather than the session rows?
    pub fn drives_from_labels(self) -> bool {
        matches!(self, ListDriver::Label | ListDriver::LabelStatus)
    }

    /// The index prefixes a page of `query` is read from, one sub-query each, as
    /// (status, blank) values the sub-query fixes (`None`: not fixed): one per distinct
    /// status when the index leads with one status, and the non-blank rows (then the
    /// blank ones too, if asked) except for a cross-tenant sweep, whose scan is not
    /// bounded by these indexes anyway.
    pub fn partitions(self, query: &SessionQuery) -> Vec<(Option<Status>, Option<bool>)> {
        let statuses: Vec<Option<Status>> = if self.splits_status() {
            let mut distinct = query.statuses.clone();
            distinct.sort_by_key(|status| status.as_str());
            distinct.dedup();
            distinct.into_iter().map(Some).collect()
        } else {
            vec![None]
        };
        let blanks: &[Option<bool>] = match (self, query.include_blank) {
            (ListDriver::AnyTenant, _) => &[None],
            (_, false) => &[Some(false)],
            (_, true) => &[Some(false), Some(true)],
        };
        statuses.iter().flat_map(|status| blanks.iter().map(move |blank| (*status, *blank))).collect()
    }
}

/// Per-tenant retention (R-S11). `None` fields do not apply.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionPolicy {
    /// Expire live sessions with no activity for this long.
    pub idle_ttl_ms: Option<u64>,
    /// Expire live sessions older than this, whatever their activity.
    pub max_age_ms: Option<u64>,
    /// Delete closed and expired sessions this long after they became terminal.
    pub delete_terminal_after_ms: Option<u64>,
    /// Delete memory items not updated for this long (scoped memory's retention).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max_age_ms: Option<u64>,
}
