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
    Created {
        ttl_ms: u64,
    },
    Attached {
        ttl_ms: u64,
    },
    Heartbeat {
        ttl_ms: u64,
    },
    Appended {
        ttl_ms: u64,
    },
    Detached,
    /// The activity lease lapsed or retention expired the session.
    Expire,
    Close,
    /// Audited admin action: the only way out of a terminal state.
    Reopen {
        ttl_ms: u64,
    },
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
        (S::Active | S::Idle, E::Attached { ttl_ms }) => {
            Ok(Lifecycle { status: S::Active, lease_until: extended(ttl_ms), runs_attached: state.runs_attached + 1 })
        }
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
        (S::Active | S::Idle, E::Close) if state.runs_attached == 0 => Ok(Lifecycle { status: S::Closed, ..state }),
        _ => Err(invalid()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: u64 = 1_000;
    const NOW: Timestamp = Timestamp(10_000);

    fn state(status: Status, runs_attached: u32) -> Lifecycle {
        Lifecycle { status, lease_until: Timestamp(20_000), runs_attached }
    }

    /// The expected outcome of every (state, event) pair, written out as a table:
    /// `Ok((status, runs))`, or the error code.
    fn expected(status: Status, runs: u32, event: LifecycleEvent) -> Result<(Status, u32), &'static str> {
        use LifecycleEvent as E;
        use Status as S;
        match (status, event) {
            (S::Closed | S::Expired, E::Reopen { .. }) => Ok((S::Idle, 0)),
            (S::Closed | S::Expired, _) => Err("terminal"),
            (S::Creating, E::Created { .. }) => Ok((S::Active, 0)),
            (S::Creating, _) => Err("invalid_transition"),
            (S::Active | S::Idle, E::Created { .. } | E::Reopen { .. }) => Err("invalid_transition"),
            (S::Active | S::Idle, E::Attached { .. }) => Ok((S::Active, runs + 1)),
            (S::Active, E::Heartbeat { .. }) if runs > 0 => Ok((S::Active, runs)),
            (S::Active | S::Idle, E::Heartbeat { .. }) => Err("invalid_transition"),
            (S::Active | S::Idle, E::Appended { .. }) => Ok((status, runs)),
            (S::Active, E::Detached) if runs == 1 => Ok((S::Idle, 0)),
            (S::Active, E::Detached) if runs > 1 => Ok((S::Active, runs - 1)),
            (S::Active | S::Idle, E::Detached) => Err("invalid_transition"),
            (S::Active | S::Idle, E::Expire) => Ok((S::Expired, 0)),
            (S::Active | S::Idle, E::Close) if runs == 0 => Ok((S::Closed, 0)),
            (S::Active | S::Idle, E::Close) => Err("invalid_transition"),
        }
    }

    #[test]
    fn every_state_event_pair_matches_the_table() {
        let mut checked = 0;
        for status in Status::ALL {
            for runs in [0, 1, 2] {
                if runs > 0 && status != Status::Active {
                    continue; // only active sessions have runs attached
                }
                for event in LifecycleEvent::samples(TTL) {
                    let actual = transition(state(status, runs), event, NOW);
                    let actual = actual.map(|next| (next.status, next.runs_attached)).map_err(|error| error.code());
                    assert_eq!(actual, expected(status, runs, event), "{status} with {runs} runs, {event:?}");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 7 * 8);
    }

    #[test]
    fn leases_only_grow_and_reopen_restarts_them() {
        let live = state(Status::Active, 1);
        let extended = transition(live, LifecycleEvent::Heartbeat { ttl_ms: 50_000 }, NOW).unwrap();
        assert_eq!(extended.lease_until, Timestamp(60_000));
        let shorter = transition(live, LifecycleEvent::Appended { ttl_ms: 1 }, NOW).unwrap();
        assert_eq!(shorter.lease_until, live.lease_until, "a short ttl never shortens the lease");
        let closed = Lifecycle { status: Status::Closed, ..live };
        let reopened = transition(closed, LifecycleEvent::Reopen { ttl_ms: TTL }, NOW).unwrap();
        assert_eq!(reopened.lease_until, Timestamp(11_000));
    }

    #[test]
    fn a_lapsed_lease_is_never_acted_on() {
        let lapsed = Lifecycle { status: Status::Idle, lease_until: Timestamp(5), runs_attached: 0 };
        for event in LifecycleEvent::samples(TTL) {
            let outcome = transition(lapsed, event, NOW);
            match event {
                LifecycleEvent::Expire => assert_eq!(outcome.unwrap().status, Status::Expired),
                _ => assert_eq!(outcome.unwrap_err().code(), "terminal", "{event:?}"),
            }
        }
        assert_eq!(observe(lapsed, NOW).status, Status::Expired);
        assert_eq!(observe(lapsed, Timestamp(5)).status, Status::Idle, "now == lease_until is still live");
        let closed = Lifecycle { status: Status::Closed, ..lapsed };
        assert_eq!(observe(closed, NOW), closed, "terminal states stay as they are");
    }
}
