//! The PostgreSQL backend (SPEC §6, R-G1…R-G4): both seams on one database that many
//! processes share.
//!
//! - [`PostgresBackend`] implements `berth_store::LogBackend`: session logs as rows of
//!   `events` (the event record kept as `text`, its data exact, so export stays
//!   byte-identical),
//!   one `session_heads` row per session holding the header, the committed `next_seq`
//!   and the **writer lease** (`epoch`, `holder`, `lease_until` on the database clock).
//! - [`PostgresCatalog`] implements `berth_catalog::Catalog` with the same semantics as
//!   the memory catalog (compare-and-set on `revision`, keyset listing, per-tenant audit
//!   hash chain with a separately stored head, retention policies).
//!
//! # Writer leases and fencing (R-G2)
//!
//! `open_writer` takes the lease in one statement that only matches a free or lapsed
//! lease and bumps the epoch (`UPDATE … SET epoch = epoch + 1 … WHERE lease_until <
//! now() … RETURNING`), under `SET LOCAL lock_timeout` so a stalled holder cannot make
//! it hang. Every append is one statement — one implicit transaction — whose first step
//! is `UPDATE session_heads SET next_seq = … WHERE … AND epoch = $e AND next_seq =
//! $first`; the event rows are inserted only if that matched. A writer that lost its
//! lease therefore cannot append after a pause of any length: time decides only *when* a
//! takeover may happen, the epoch decides *whose* writes count. The holder renews in the
//! background and stops on its own (`OwnershipLost`, without touching the database) once
//! its local monotonic deadline — the send time of the last successful renewal plus the
//! TTL minus a margin — has passed, which is before the database can let anyone else in.
//!
//! # Unknown outcomes
//!
//! When a connection dies or times out around the commit, the append's outcome is
//! unknown. Retrying the same batch (same seqs) is safe: if the rows at those seqs are
//! stored with this writer's epoch and identical text, the retry reports success;
//! anything else is `SeqConflict` (or `Fenced`). `append` retries once by itself on a
//! fresh connection ([`PostgresOptions::append_attempts`]).
//!
//! # Time and runtimes
//!
//! Client-side timeouts (`tokio::time::timeout`) bound every statement, because a stopped
//! backend cannot enforce its own `statement_timeout`. With
//! [`PostgresOptions::own_runtime`], all database I/O, timeouts and lease renewals run
//! on a small runtime owned by this crate, so a caller whose clock is paused (tests) or
//! whose runtime is starved cannot distort them.

mod catalog;
mod commit;
#[cfg(test)]
mod commit_tests;
mod db;
mod lease;
mod listing;
mod log;
mod memory;
mod notify;
mod schema;
pub mod testing;

pub use catalog::PostgresCatalog;
pub use log::{PostgresBackend, PostgresWriter, READ_BEFORE};
pub use schema::MEMORY_TERMS_REMADE;
pub use schema::{Migration, MigrationReport, RoleReport, MIGRATIONS, SCHEMA_VERSION, TENANT_POLICY, TENANT_TABLES};

use std::time::Duration;

/// How a backend connects, times out and holds leases.
#[derive(Clone, Debug)]
pub struct PostgresOptions {
    /// Connections in the pool.
    pub pool_size: usize,
    /// Bound on establishing a connection (TCP + startup + authentication).
    pub connect_timeout: Duration,
    /// Client-side bound on one statement, and the server's `statement_timeout`.
    pub statement_timeout: Duration,
    /// `lock_timeout` of a lease acquisition: a holder stalled inside an append holds the
    /// lease row; the acquisition then fails fast with `AlreadyOwned` instead of hanging.
    pub lock_timeout: Duration,
    /// Writer lease time to live, measured on the database clock.
    pub lease_ttl: Duration,
    /// How long before its lease could lapse a writer stops on its own.
    pub lease_margin: Duration,
    /// Attempts of one append when the connection fails around the commit (the retry
    /// is idempotent; see the crate docs).
    pub append_attempts: u32,
    /// Send `NOTIFY` after appends so other processes' live tails wake up.
    pub notify: bool,
    /// How often a live-tail listener re-reads every subscribed session's next seq, in
    /// case a notification was lost (a backstop, not the wake-up path).
    pub listen_backstop: Duration,
    /// Run database I/O and lease renewal on this crate's own runtime.
    pub own_runtime: bool,
    /// Refuse appends locally once the lease deadline passed. Only tests turn this off,
    /// to show that the database's epoch check alone rejects a stale writer.
    pub local_deadline: bool,
    /// Apply pending schema migrations when connecting.
    pub migrate: bool,
    /// `application_name` of every connection (shown in `pg_stat_activity`).
    pub application_name: String,
    /// Concurrent audited changes of one tenant share one transaction (`commit.rs`);
    /// off, each commits alone (for comparisons).
    pub group_commit: bool,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            pool_size: 8,
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(10),
            lock_timeout: Duration::from_secs(1),
            lease_ttl: Duration::from_secs(10),
            lease_margin: Duration::from_millis(2_500),
            append_attempts: 2,
            notify: true,
            listen_backstop: Duration::from_secs(5),
            own_runtime: false,
            local_deadline: true,
            migrate: true,
            application_name: "berth".into(),
            group_commit: true,
        }
    }
}

impl PostgresOptions {
    /// Short leases for tests and soaks: `ttl`, margin and renewal scaled from it.
    pub fn with_lease_ttl(mut self, ttl: Duration) -> PostgresOptions {
        self.lease_ttl = ttl;
        self.lease_margin = ttl / 4;
        self
    }

    /// Time between two renewals (four chances before the margin).
    pub(crate) fn renew_interval(&self) -> Duration {
        (self.lease_ttl.saturating_sub(self.lease_margin) / 4).max(Duration::from_millis(10))
    }

    /// Client-side bound of one renewal.
    pub(crate) fn renew_timeout(&self) -> Duration {
        self.renew_interval().min(self.statement_timeout)
    }
}
