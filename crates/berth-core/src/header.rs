//! The immutable session header (R-C2), fixed at create.

use crate::clock::Timestamp;
use crate::error::{Error, Location, Result};
use crate::ids::{ProjectId, SessionId, SessionKey, TenantId, UserId};
use crate::limits::{DELEGATION_DEPTH_MAX, LABEL_BYTES_MAX, PARALLEL_RUNS_MAX};
use serde::{Deserialize, Serialize};

/// The stored shape's version, written into every new session's header. Any change to
/// the stored shape bumps it and ships a migration; a newer version is refused, never
/// misread.
///
/// - 0: event data stored as canonical text (keys sorted, numbers re-printed through
///   `f64` beyond 64-bit integers).
/// - 1: event data stored exactly as submitted, minus insignificant whitespace (R-C9).
///   An older berth would re-canonicalize such data on some paths (PostgreSQL reads,
///   import) and refuse it on others (fork), so it must refuse the session as a whole.
pub const SESSION_FORMAT_VERSION: u32 = 1;

/// The oldest version this build still reads. Version 0 needs no rewriting: canonical
/// text is strict, minimal JSON, so reading it as exact text is the migration, and a
/// version-0 session keeps its version (the header is immutable, R-C2).
pub const SESSION_FORMAT_VERSION_OLDEST: u32 = 0;

/// Who a session belongs to. Fixed at creation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scope {
    pub tenant: TenantId,
    pub user: UserId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<ProjectId>,
}

/// Fork lineage: the source session and the cut (events `0..cut_seq` were copied).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParentRef {
    pub session: SessionId,
    pub cut_seq: u64,
}

/// How many runs may be attached at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode", deny_unknown_fields)]
pub enum Concurrency {
    /// One attached run at a time (the default).
    #[default]
    Serial,
    /// Up to `runs_max` runs; every event carries its run id.
    Parallel { runs_max: u32 },
}

/// Per-session policy, explicit at creation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionPolicy {
    #[serde(default)]
    pub concurrency: Concurrency,
    /// How far attach, heartbeat and append extend the session's activity lease.
    pub activity_ttl_ms: u64,
    /// How long a run's attachment lease lasts between heartbeats.
    pub run_lease_ttl_ms: u64,
}

impl SessionPolicy {
    pub const ACTIVITY_TTL_MS_DEFAULT: u64 = 24 * 60 * 60 * 1000;
    pub const RUN_LEASE_TTL_MS_DEFAULT: u64 = 60 * 1000;
}

impl Default for SessionPolicy {
    fn default() -> Self {
        SessionPolicy {
            concurrency: Concurrency::Serial,
            activity_ttl_ms: Self::ACTIVITY_TTL_MS_DEFAULT,
            run_lease_ttl_ms: Self::RUN_LEASE_TTL_MS_DEFAULT,
        }
    }
}

/// Immutable validated metadata kept outside the event log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionHeader {
    pub version: u32,
    pub id: SessionId,
    pub scope: Scope,
    pub created_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentRef>,
    /// Free-form origin tag, e.g. `subagent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    #[serde(default)]
    pub delegation_depth: u32,
    #[serde(default)]
    pub policy: SessionPolicy,
}

impl SessionHeader {
    /// A top-level header with the default policy.
    pub fn new(id: SessionId, scope: Scope, created_at: Timestamp) -> SessionHeader {
        SessionHeader {
            version: SESSION_FORMAT_VERSION,
            id,
            scope,
            created_at,
            parent: None,
            origin: None,
            delegation_depth: 0,
            policy: SessionPolicy::default(),
        }
    }

    pub fn key(&self) -> SessionKey {
        SessionKey::new(self.scope.tenant.clone(), self.id.clone())
    }

    /// Checks the invariants serde cannot express.
    pub fn validate(&self) -> Result<()> {
        check_version(self.version, None)?;
        if self.delegation_depth > DELEGATION_DEPTH_MAX {
            return Err(Error::LimitExceeded {
                what: crate::limits::Limit::DelegationDepth,
                limit: DELEGATION_DEPTH_MAX.into(),
                actual: self.delegation_depth.into(),
            });
        }
        if let Some(origin) = &self.origin {
            crate::limits::check_text_line("origin", crate::limits::Limit::LabelBytes, LABEL_BYTES_MAX, origin)?;
        }
        if let Concurrency::Parallel { runs_max } = self.policy.concurrency {
            if runs_max == 0 || runs_max > PARALLEL_RUNS_MAX {
                return Err(Error::invalid("policy", format!("parallel runs_max must be 1..={PARALLEL_RUNS_MAX}")));
            }
        }
        if self.policy.activity_ttl_ms == 0 || self.policy.run_lease_ttl_ms == 0 {
            return Err(Error::invalid("policy", "ttls must be positive"));
        }
        Ok(())
    }
}

/// The version gate: refuses a stored version this build cannot interpret, saying which
/// direction the mismatch goes.
pub fn check_version(version: u32, location: Option<Location>) -> Result<()> {
    if (SESSION_FORMAT_VERSION_OLDEST..=SESSION_FORMAT_VERSION).contains(&version) {
        return Ok(());
    }
    let reason = if version > SESSION_FORMAT_VERSION {
        format!(
            "session format version {version} was written by a newer berth (this build reads version {SESSION_FORMAT_VERSION}); upgrade berth to open it"
        )
    } else {
        format!(
            "session format version {version} is older than the oldest supported version {SESSION_FORMAT_VERSION_OLDEST}, and this build ships no migration for it"
        )
    };
    Err(Error::FormatUnsupported { reason, location })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> SessionHeader {
        SessionHeader::new(
            SessionId::parse("s1").unwrap(),
            Scope { tenant: TenantId::parse("t").unwrap(), user: UserId::parse("u").unwrap(), project: None },
            Timestamp(1000),
        )
    }

    #[test]
    fn header_round_trips_and_refuses_unknown_fields() {
        let text = serde_json::to_string(&header()).unwrap();
        let back: SessionHeader = serde_json::from_str(&text).unwrap();
        assert_eq!(back, header());
        let extra = text.replacen('{', r#"{"sandbox":1,"#, 1);
        assert!(serde_json::from_str::<SessionHeader>(&extra).is_err());
    }

    #[test]
    fn version_gate_names_the_direction() {
        let newer = check_version(SESSION_FORMAT_VERSION + 1, None).unwrap_err();
        assert!(newer.to_string().contains("newer berth"), "{newer}");
        assert!(check_version(0, None).is_ok(), "version 0 (canonical data) is read as exact data");
        assert!(check_version(SESSION_FORMAT_VERSION, None).is_ok());
        assert_eq!(header().version, 1, "new sessions are written in the exact-data version");
        let mut h = header();
        h.version = 7;
        assert_eq!(h.validate().unwrap_err().code(), "format_unsupported");
    }

    #[test]
    fn validate_checks_policy_and_depth() {
        let mut h = header();
        h.policy.concurrency = Concurrency::Parallel { runs_max: 0 };
        assert!(h.validate().is_err());
        let mut h = header();
        h.delegation_depth = DELEGATION_DEPTH_MAX + 1;
        assert!(h.validate().is_err());
        assert!(header().validate().is_ok());
    }
}
