//! Time enters berth only through a `Clock`, so tests can control it (R-C7).

use serde::{Deserialize, Serialize};
use std::fmt;

/// Milliseconds since the Unix epoch. Wall-clock time, used for records and leases that
/// are compared with other wall-clock times; never for measuring local intervals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    pub fn as_millis(self) -> u64 {
        self.0
    }
    /// `self + ms`, saturating: a lease never wraps around.
    pub fn plus_ms(self, ms: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The source of wall-clock time. Implementations must be cheap and thread-safe.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    fn now(&self) -> Timestamp;
}

/// The real clock (`SystemTime`). A clock before 1970 reads as 0.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Timestamp(since_epoch.as_millis() as u64)
    }
}
