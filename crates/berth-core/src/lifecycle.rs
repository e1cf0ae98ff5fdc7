//! The session lifecycle (R-C4) as one pure transition function.
//!
//! ```text
//! creating ──Created──▶ active ◀──Attached── idle
//!                         │ ──last Detached──▶ │
//!                         └──Close / Expire──▶ closed | expired   (terminal)
//! ```
//! `active` means at least one run is attached or the session was just created;
//! `idle` means no run is attached. Both are attachable while `now ≤ lease_until`.
//! `closed` and `expired` are terminal: only an explicit, audited admin `Reopen` leaves
//! them (continuing a conversation is otherwise a fork into a new session).

use crate::clock::Timestamp;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Creating,
    Active,
    Idle,
    Closed,
    Expired,
}

impl Status {
    pub const ALL: [Status; 5] = [Status::Creating, Status::Active, Status::Idle, Status::Closed, Status::Expired];

    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Closed | Status::Expired)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Creating => "creating",
            Status::Active => "active",
            Status::Idle => "idle",
            Status::Closed => "closed",
            Status::Expired => "expired",
        }
    }

    pub fn parse(text: &str) -> Result<Status> {
        Status::ALL
            .into_iter()
            .find(|status| status.as_str() == text)
            .ok_or_else(|| Error::invalid("status", format!("{text:?} is not a session status")))
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The part of a session's metadata the lifecycle reasons about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lifecycle {
    pub status: Status,
    /// The activity lease: attachable while `now ≤ lease_until`.
    pub lease_until: Timestamp,
    pub runs_attached: u32,
}

impl Lifecycle {
    pub fn creating() -> Lifecycle {
        Lifecycle { status: Status::Creating, lease_until: Timestamp(0), runs_attached: 0 }
    }

    /// Has the activity lease lapsed at `now` (for a live session)?
    pub fn is_lapsed(&self, now: Timestamp) -> bool {
        matches!(self.status, Status::Active | Status::Idle) && now > self.lease_until
    }
}

/// What can happen to a session. TTLs come from the session's policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LifecycleEvent {
    Created { ttl_ms: u64 },
    Attached { ttl_ms: u64 },
    Heartbeat { ttl_ms: u64 },
    Appended { ttl_ms: u64 },
    Detached,
    /// The activity lease lapsed or retention expired the session.
    Expire,
    Close,
    /// Audited admin action: the only way out of a terminal state.
    Reopen { ttl_ms: u64 },
}

impl LifecycleEvent {
    pub fn name(&self) -> &'static str {
        match self {
            LifecycleEvent::Created { .. } => "created",
            LifecycleEvent::Attached { .. } => "attached",
            LifecycleEvent::Heartbeat { .. } => "heartbeat",
            LifecycleEvent::Appended { .. } => "appended",
            LifecycleEvent::Detached => "detached",
            LifecycleEvent::Expire => "expire",
            LifecycleEvent::Close => "close",
            LifecycleEvent::Reopen { .. } => "reopen",
        }
    }

    /// One of each kind, for exhaustive tests.
    pub fn samples(ttl_ms: u64) -> [LifecycleEvent; 8] {
        [
            LifecycleEvent::Created { ttl_ms },
            LifecycleEvent::Attached { ttl_ms },
            LifecycleEvent::Heartbeat { ttl_ms },
            LifecycleEvent::Appended { ttl_ms },
            LifecycleEvent::Detached,
            LifecycleEvent::Expire,
            LifecycleEvent::Close,
            LifecycleEvent::Reopen { ttl_ms },
        ]
    }
}

/// Marks a live session whose activity lease lapsed as `expired` (the "on next access"
/// half of R-S3). Returns the state unchanged otherwise.
pub fn observe(state: Lifecycle, now: Timestamp) -> Lifecycle {
    if state.is_lapsed(now) {
        Lifecycle { status: Status::Expired, runs_attached: 0, ..state }
    } else {
        state
    }
}

/// The lifecycle transition function. Pure; total over (state, event).
pub fn transition(state: Lifecycle, event: LifecycleEvent, now: Timestamp) -> Result<Lifecycle> {
    use LifecycleEvent as E;
    use Status as S;
    let invalid = || Error::InvalidTransition { from: state.status.to_string(), event: event.name().to_owned() };
    let extended = |ttl_ms: u64| state.lease_until.max(now.plus_ms(ttl_ms));
    if state.status.is_terminal() {
        return match event {
            E::Reopen { ttl_ms } => {
                Ok(Lifecycle { status: S::Idle, lease_until: now.plus_ms(ttl_ms), runs_attached: 0 })
            }
            _ => Err(Error::Terminal { state: state.status.to_string() }),
        };
    }
    if state.is_lapsed(now) && !matches!(event, E::Expire) {
        // The caller should have observed the expiry first; never act on a lapsed lease.
        return Err(Error::Terminal { state: Status::Expired.to_string() });
    }
    match (state.status, event) {
        (S::Creating, E::Created { ttl_ms }) => {
            Ok(Lifecycle { status: S::Active, lease_until: now.plus_ms(ttl_ms), runs_attached: 0 })
        }
        (S::Creating, _) => Err(invalid()),
        (S::Active | S::Idle, E::Attached { ttl_ms }) => Ok(Lifecycle {
            status: S::Active,
            lease_until: extended(ttl_ms),
            runs_attached: state.runs_attached + 1,
        }),
        (S::Active, E::Heartbeat { ttl_ms }) if state.runs_attached > 0 => {
            Ok(Lifecycle { lease_until: extended(ttl_ms), ..state })
        }
        (S::Active | S::Idle, E::Appended { ttl_ms }) => Ok(Lifecycle { lease_until: extended(ttl_ms), ..state }),
        (S::Active, E::Detached) if state.runs_attached > 0 => {
            let runs_attached = state.runs_attached - 1;
            let status = if runs_attached == 0 { S::Idle } else { S::Active };
            Ok(Lifecycle { status, runs_attached, ..state })
        }
        (S::Active | S::Idle, E::Expire) => Ok(Lifecycle { status: S::Expired, runs_attached: 0, ..state }),
        (S::Active | S::Idle, E::Close) if state.runs_attached == 0 => {
            Ok(Lifecycle { status: S::Closed, ..state })
        }
        _ => Err(invalid()),
    }
}
