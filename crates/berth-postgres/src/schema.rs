//! The database layout: every table, index and name in one place, and the versioned,
//! forward-only migrations that `berth migrate` and start-up apply.
//!
//! Layout rules:
//! - The tenant leads every primary key and every index, so one tenant's rows are one
//!   key range and no statement can wander into another tenant's rows by accident.
//! - Ids are `text COLLATE "C"`: ordered byte-wise, exactly as Rust orders them, so
//!   listing and cursors agree with the reference (memory) semantics.
//! - `events.line` is the event record as `text` (canonical envelope, exact `data`),
//!   never `jsonb`: jsonb would reorder keys and normalise numbers (R-C9), and export
//!   must be byte-identical.
//! - `session_heads` is the log's own table (header, committed next seq, writer lease);
//!   `sessions` is the catalog's. The two seams share a database but not rows.
//! - Listing indexes end in `(last_activity, id)`; a page is a backward range scan
//!   from the cursor (keyset pagination, never OFFSET). `blank` sits in the equality
//!   prefix because default listings hide blank sessions.
//! - Timestamps are milliseconds in `bigint`, clamped to `i64::MAX` in index columns;
//!   `record_json` keeps the exact value.

use crate::db::Failure;
use berth_core::Error;

/// One forward-only migration. Never edit a shipped entry: append a new one.
#[derive(Clone, Copy, Debug)]
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration, in order; `version` is its position + 1.
pub const MIGRATIONS: &[Migration] = &[
    Migration { version: 1, name: "initial layout", sql: V1 },
    Migration { version: 2, name: "idempotency index", sql: V2 },
];

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// `pg_advisory_xact_lock` key serialising migrations ("brthmigr").
pub const MIGRATION_LOCK_KEY: i64 = 0x6272_7468_6d69_6772;

/// The channel appends notify on (payload: `<tenant> <session> <next_seq>`).
pub const NOTIFY_CHANNEL: &str = "berth_events";

const MIGRATIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)";

const V1: &str = r#"
CREATE TABLE session_heads (
    tenant      text COLLATE "C" NOT NULL,
    session_id  text COLLATE "C" NOT NULL,
    user_id     text COLLATE "C" NOT NULL,
    project     text COLLATE "C",
    incarnation bigint GENERATED ALWAYS AS IDENTITY,
    header_json text   NOT NULL,
    epoch       bigint NOT NULL CHECK (epoch >= 1),
    holder      text,
    lease_until timestamptz,
    next_seq    bigint NOT NULL CHECK (next_seq >= 0),
    PRIMARY KEY (tenant, session_id)
) WITH (fillfactor = 70);
CREATE INDEX session_heads_by_user ON session_heads (tenant, user_id, session_id);

CREATE TABLE events (
    tenant     text COLLATE "C" NOT NULL,
    session_id text COLLATE "C" NOT NULL,
    seq        bigint  NOT NULL CHECK (seq >= 0),
    epoch      bigint  NOT NULL,
    event_type text    NOT NULL,
    ignorable  boolean NOT NULL,
    line       text    NOT NULL,
    PRIMARY KEY (tenant, session_id, seq)
);

CREATE TABLE sessions (
    tenant            text COLLATE "C" NOT NULL,
    id                text COLLATE "C" NOT NULL,
    user_id           text COLLATE "C" NOT NULL,
    project           text COLLATE "C",
    status            text    NOT NULL,
    last_activity     bigint  NOT NULL,
    lease_until       bigint  NOT NULL,
    created_at        bigint  NOT NULL,
    status_changed_at bigint  NOT NULL,
    revision          bigint  NOT NULL,
    blank             boolean NOT NULL,
    parent            text COLLATE "C",
    record_json       text    NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX sessions_by_activity ON sessions (tenant, blank, last_activity, id);
CREATE INDEX sessions_by_status ON sessions (tenant, status, blank, last_activity, id);
CREATE INDEX sessions_by_user ON sessions (tenant, user_id, blank, last_activity, id);
CREATE INDEX sessions_by_project ON sessions (tenant, project, blank, last_activity, id)
    WHERE project IS NOT NULL;
CREATE INDEX sessions_by_parent ON sessions (tenant, parent, blank, last_activity, id)
    WHERE parent IS NOT NULL;

CREATE TABLE session_labels (
    tenant        text COLLATE "C" NOT NULL,
    id            text COLLATE "C" NOT NULL,
    label         text COLLATE "C" NOT NULL,
    status        text    NOT NULL,
    blank         boolean NOT NULL,
    last_activity bigint  NOT NULL,
    PRIMARY KEY (tenant, id, label)
);
CREATE INDEX session_labels_by_activity ON session_labels (tenant, label, blank, last_activity, id);
CREATE INDEX session_labels_by_status ON session_labels (tenant, label, status, blank, last_activity, id);

CREATE TABLE audit (
    tenant     text COLLATE "C" NOT NULL,
    seq        bigint NOT NULL,
    entry_json text   NOT NULL,
    PRIMARY KEY (tenant, seq)
);

CREATE TABLE audit_heads (
    tenant text COLLATE "C" PRIMARY KEY,
    seq    bigint NOT NULL,
    hash   text   NOT NULL
);

CREATE TABLE retention (
    tenant      text COLLATE "C" PRIMARY KEY,
    policy_json text NOT NULL
);
"#;

/// The idempotency index (R-S14): per session, the seq below which it holds every keyed
/// batch of the log, and one row per key. Both go with the session's row.
const V2: &str = r#"
CREATE TABLE idempotency_index (
    tenant        text COLLATE "C" NOT NULL,
    id            text COLLATE "C" NOT NULL,
    indexed_until bigint NOT NULL,
    PRIMARY KEY (tenant, id),
    FOREIGN KEY (tenant, id) REFERENCES sessions (tenant, id) ON DELETE CASCADE
);
CREATE TABLE idempotency_keys (
    tenant    text COLLATE "C" NOT NULL,
    id        text COLLATE "C" NOT NULL,
    key       text COLLATE "C" NOT NULL,
    first_seq bigint NOT NULL,
    events    bigint NOT NULL,
    digest    text   NOT NULL,
    PRIMARY KEY (tenant, id, key),
    FOREIGN KEY (tenant, id) REFERENCES sessions (tenant, id) ON DELETE CASCADE
);
"#;

/// What `migrate` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationReport {
    pub from_version: i32,
    pub to_version: i32,
}

/// Brings the schema to `SCHEMA_VERSION` in one transaction holding a transaction-level
/// advisory lock: when several processes start at once, the others wait for the first
/// and then find the schema current. DDL is transactional, so a failed migration
/// leaves nothing behind.
pub(crate) async fn migrate(client: &mut tokio_postgres::Client) -> Result<MigrationReport, Failure> {
    let transaction = client.transaction().await?;
    transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK_KEY]).await?;
    transaction.batch_execute(MIGRATIONS_TABLE).await?;
    let from_version: i32 =
        transaction.query_one("SELECT coalesce(max(version), 0) FROM schema_migrations", &[]).await?.get(0);
    check_version(from_version)?;
    for migration in MIGRATIONS.iter().skip(usize::try_from(from_version).unwrap_or(0)) {
        tracing::info!(version = migration.version, name = migration.name, "applying postgres migration");
        transaction.batch_execute(migration.sql).await?;
        transaction
            .execute(
                "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                &[&migration.version, &migration.name],
            )
            .await?;
    }
    transaction.commit().await?;
    Ok(MigrationReport { from_version, to_version: SCHEMA_VERSION })
}

/// The schema version stored in the database (0 before the first migration).
pub(crate) async fn stored_version(client: &tokio_postgres::Client) -> Result<i32, Failure> {
    let exists: bool = client.query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[]).await?.get(0);
    if !exists {
        return Ok(0);
    }
    Ok(client.query_one("SELECT coalesce(max(version), 0) FROM schema_migrations", &[]).await?.get(0))
}

/// Refuses a schema written by a newer berth.
pub(crate) fn check_version(version: i32) -> Result<(), Failure> {
    if version > SCHEMA_VERSION {
        return Err(Failure::Berth(Error::FormatUnsupported {
            reason: format!(
                "database schema version {version} was written by a newer berth (this build reads up to version {SCHEMA_VERSION}); upgrade berth to use it"
            ),
            location: None,
        }));
    }
    Ok(())
}
