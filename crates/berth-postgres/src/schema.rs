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
    Migration { version: 3, name: "row-level security per tenant", sql: V3 },
    Migration { version: 4, name: "scoped memory", sql: V4 },
    Migration { version: 5, name: "memory usage of charged items, per-tenant quotas", sql: V5 },
    Migration { version: MEMORY_TERMS_REMADE, name: "memory terms of NFC words and characters", sql: V6 },
    Migration { version: SESSION_SEARCH_FILLED, name: "session search text", sql: V7 },
];

/// Every table holding tenant data, in the order V3 (then V4) secured them. A test
/// (`tests/row_security.rs`) lists every table with a `tenant` column from the catalog
/// and checks each is here and has row-level security enabled and forced, so a new
/// table cannot forget it.
pub const TENANT_TABLES: &[&str] = &[
    "session_heads",
    "events",
    "sessions",
    "session_labels",
    "audit",
    "audit_heads",
    "retention",
    "idempotency_index",
    "idempotency_keys",
    "tenants",
    "memory_items",
    "memory_terms",
    "memory_fields",
    "memory_usage",
];

/// The row-level security policy every tenant table carries (also on the tenant
/// registry's writes): the row's tenant must equal the transaction's `berth.tenant`.
/// `current_setting` without `missing_ok` fails when the setting was never made on the
/// connection, and the `berth_tenant` domain refuses the empty string PostgreSQL
/// returns after a `SET LOCAL` of an earlier transaction ended: no tenant, no rows —
/// as an error, not as an empty answer.
pub const TENANT_POLICY: &str = "tenant = current_setting('berth.tenant')::berth_tenant";

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// `pg_advisory_xact_lock` key serialising migrations ("brthmigr").
pub const MIGRATION_LOCK_KEY: i64 = 0x6272_7468_6d69_6772;

/// The channel appends notify on (payload: `<route> <next_seq>`, the route an opaque
/// digest of the tenant and session ids; see `notify::route`).
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

/// Row-level security, the second wall behind the tenant filter every statement carries
/// (SPEC §6, reliability test 33): enabled *and forced* (so the owner is bound too), one
/// policy per table on the tenant column against the per-transaction setting. The
/// `tenants` registry holds tenant names only (what the retention sweeper and
/// maintenance listings iterate); any tenant may read it, a tenant registers only
/// itself. `DO` builds the per-table statements from the one list.
const V3: &str = r#"
CREATE DOMAIN berth_tenant AS text COLLATE "C" CONSTRAINT berth_tenant_is_set CHECK (VALUE <> '');

CREATE TABLE tenants (
    tenant text COLLATE "C" PRIMARY KEY
);
INSERT INTO tenants (tenant)
    SELECT tenant FROM sessions UNION SELECT tenant FROM audit UNION SELECT tenant FROM audit_heads
    UNION SELECT tenant FROM retention;

DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['session_heads', 'events', 'sessions', 'session_labels', 'audit', 'audit_heads',
                                'retention', 'idempotency_index', 'idempotency_keys'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', name);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', name);
        EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (%s) WITH CHECK (%s)', name,
                       'tenant = current_setting(''berth.tenant'')::berth_tenant',
                       'tenant = current_setting(''berth.tenant'')::berth_tenant');
    END LOOP;
END
$$;

ALTER TABLE tenants ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenants FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_names_readable ON tenants FOR SELECT USING (true);
CREATE POLICY tenant_registers_itself ON tenants FOR INSERT
    WITH CHECK (tenant = current_setting('berth.tenant')::berth_tenant);
"#;

/// Scoped memory (R-M1, R-M2). `memory_items.value` is the item's exact text (never
/// jsonb, R-C9). `memory_terms` is the full-text index: one row per distinct term of an
/// item as berth's one tokenizer produces them (`berth_catalog::scoped::index_terms`,
/// made again by migration 6), with its number of occurrences (relevance is their sum
/// over the query's terms, for a query the terms decide). Not
/// a `text[]` column under GIN: `@>` (`arraycontains`) is not leakproof, so under
/// row-level security PostgreSQL may not use an index for it and reads every row of the
/// table; text equality is leakproof, so `(tenant, term)` is a B-tree range.
/// `memory_fields` indexes each item's top-level scalar fields for filters
/// (`fields.rs`: numbers by `Decimal::sort_key`, so ranges are exact) and goes with its
/// item. `memory_usage` is the tenant's item count and bytes; every memory write
/// locks it first (quotas are checked under that lock, and it orders concurrent
/// writers of a tenant). Every one of these tables carries the tenant policy of V3.
const V4: &str = r#"
CREATE TABLE memory_items (
    tenant     text COLLATE "C" NOT NULL,
    namespace  text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    value      text   NOT NULL,
    revision   bigint NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    expires_at bigint,
    ttl_ms     bigint,
    bound_to   text COLLATE "C",
    bytes      bigint NOT NULL,
    PRIMARY KEY (tenant, namespace, key)
);
CREATE INDEX memory_items_by_updated ON memory_items (tenant, updated_at DESC, namespace, key);
CREATE INDEX memory_items_by_expiry ON memory_items (tenant, expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX memory_items_by_session ON memory_items (tenant, bound_to) WHERE bound_to IS NOT NULL;

CREATE TABLE memory_terms (
    tenant      text COLLATE "C" NOT NULL,
    term        text COLLATE "C" NOT NULL,
    namespace   text COLLATE "C" NOT NULL,
    key         text COLLATE "C" NOT NULL,
    occurrences bigint NOT NULL CHECK (occurrences >= 1),
    PRIMARY KEY (tenant, term, namespace, key),
    FOREIGN KEY (tenant, namespace, key) REFERENCES memory_items (tenant, namespace, key) ON DELETE CASCADE
);
CREATE INDEX memory_terms_by_item ON memory_terms (tenant, namespace, key, term);

CREATE TABLE memory_fields (
    tenant    text COLLATE "C" NOT NULL,
    namespace text COLLATE "C" NOT NULL,
    key       text COLLATE "C" NOT NULL,
    field     text COLLATE "C" NOT NULL,
    kind      text NOT NULL CHECK (kind IN ('n', 's', 'b', 'z')),
    sort      text COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant, namespace, key, field),
    FOREIGN KEY (tenant, namespace, key) REFERENCES memory_items (tenant, namespace, key) ON DELETE CASCADE
);
CREATE INDEX memory_fields_by_value ON memory_fields (tenant, field, kind, sort);

CREATE TABLE memory_usage (
    tenant text COLLATE "C" PRIMARY KEY,
    items  bigint NOT NULL,
    bytes  bigint NOT NULL
);

DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['memory_items', 'memory_terms', 'memory_fields', 'memory_usage'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', name);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', name);
        EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (%s) WITH CHECK (%s)', name,
                       'tenant = current_setting(''berth.tenant'')::berth_tenant',
                       'tenant = current_setting(''berth.tenant'')::berth_tenant');
    END LOOP;
END
$$;
"#;

/// A tenant is charged for what it stored, and sets its own quota.
/// - `memory_usage` counts only charged items (`Namespace::is_charged`): berth's own
///   bookkeeping (`berth/…`: a carried append's marker, its scope index entries) was
///   counted as the tenant's items and held to its quota until migration 4. Every row
///   is counted again here. Row-level security is forced on both tables, the migrating
///   owner included, so each tenant's rows are counted under that tenant's setting (the
///   `tenants` registry, readable by all, names them; every tenant with memory
///   registered itself with its first write).
/// - `items_max`, `bytes_max`: the tenant's own quota (NULL: the service's default), in
///   the row every memory write locks and reads first (`memory.rs`, `LOCK_USAGE`).
const V5: &str = r#"
ALTER TABLE memory_usage ADD COLUMN items_max bigint, ADD COLUMN bytes_max bigint;
DO $$
DECLARE
    name text;
BEGIN
    FOR name IN SELECT tenant FROM tenants LOOP
        PERFORM set_config('berth.tenant', name, true);
        UPDATE memory_usage AS u SET items = c.items, bytes = c.bytes
        FROM (SELECT count(m.key) AS items, coalesce(sum(m.bytes), 0)::bigint AS bytes FROM memory_items AS m
              WHERE m.tenant = name AND NOT (m.namespace >= 'berth/' AND m.namespace < 'berth0')) AS c
        WHERE u.tenant = name;
    END LOOP;
END
$$;
"#;

/// The migration after which `memory_terms` holds today's terms
/// (`berth_catalog::scoped::index_terms`: NFC words, ASCII runs inside words of other
/// scripts, a term per non-ASCII character, so that Chinese or Japanese substrings and
/// NFD spellings are found). berth's tokenizer is Rust, not SQL: `migrate` runs
/// `remake_memory_terms` after this migration's (empty) SQL, in its transaction.
pub const MEMORY_TERMS_REMADE: i32 = 6;

const V6: &str = "-- memory_terms are made again from the items in Rust: schema.rs, remake_memory_terms";

/// The migration that adds the listing's text search (issue 55): `sessions.search`
/// holds the session's folded id, title and labels (`berth_catalog::search_column`),
/// written with the rest of the row; a search is a `LIKE` filter on it (`listing.rs`).
/// Folding is berth's (Rust), not the database's: `migrate` runs `fill_session_search`
/// after this migration's SQL, in its transaction, for the rows stored before it.
pub const SESSION_SEARCH_FILLED: i32 = 7;

const V7: &str = r#"ALTER TABLE sessions ADD COLUMN search text COLLATE "C" NOT NULL DEFAULT '';"#;

/// Every session row's `search`, tenant by tenant under that tenant's setting (as
/// `remake_memory_terms`: row-level security is forced on the migrating owner too).
async fn fill_session_search(transaction: &tokio_postgres::Transaction<'_>) -> Result<(), Failure> {
    let tenants: Vec<String> = transaction
        .query("SELECT tenant FROM tenants ORDER BY tenant", &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let update = transaction.prepare("UPDATE sessions SET search = $3 WHERE tenant = $1 AND id = $2").await?;
    for tenant in &tenants {
        transaction.execute("SELECT set_config('berth.tenant', $1, true)", &[tenant]).await?;
        let rows = transaction.query("SELECT id, record_json FROM sessions WHERE tenant = $1", &[tenant]).await?;
        for row in &rows {
            let (id, json): (&str, &str) = (row.get(0), row.get(1));
            let record: berth_catalog::SessionRecord = serde_json::from_str(json).map_err(|_| {
                Failure::Berth(Error::Corrupt {
                    reason: format!("stored session record {id} does not decode"),
                    location: berth_core::Location { artifact: "postgres:catalog".into(), offset: None, seq: None },
                })
            })?;
            transaction.execute(&update, &[tenant, &id, &berth_catalog::search_column(&record)]).await?;
        }
    }
    Ok(())
}

/// Items read a batch at a time by `remake_memory_terms`.
const REMAKE_BATCH: i64 = 1_000;

/// Every item's `memory_terms` rows made again from its value, tenant by tenant under
/// that tenant's setting (row-level security is forced on the migrating owner too; the
/// `tenants` registry, readable by all, names every tenant with memory), the items read
/// in key order a batch at a time and their terms written in one statement a batch.
async fn remake_memory_terms(transaction: &tokio_postgres::Transaction<'_>) -> Result<(), Failure> {
    let tenants: Vec<String> = transaction
        .query("SELECT tenant FROM tenants ORDER BY tenant", &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let select = transaction
        .prepare(
            "SELECT namespace, key, value FROM memory_items WHERE tenant = $1 AND (namespace, key) > ($2, $3) \
             ORDER BY namespace, key LIMIT $4",
        )
        .await?;
    let insert = transaction
        .prepare(
            "INSERT INTO memory_terms (tenant, term, namespace, key, occurrences) \
             SELECT $1, t.term, t.namespace, t.key, count(*) FROM unnest($2::text[], $3::text[], $4::text[]) \
             AS t (namespace, key, term) GROUP BY t.namespace, t.key, t.term",
        )
        .await?;
    for tenant in &tenants {
        transaction.execute("SELECT set_config('berth.tenant', $1, true)", &[tenant]).await?;
        transaction.execute("DELETE FROM memory_terms WHERE tenant = $1", &[tenant]).await?;
        let mut after = (String::new(), String::new());
        loop {
            let rows = transaction.query(&select, &[tenant, &after.0, &after.1, &REMAKE_BATCH]).await?;
            let (mut namespaces, mut keys, mut terms) = (Vec::new(), Vec::new(), Vec::new());
            for row in &rows {
                let (namespace, key, value): (&str, &str, &str) = (row.get(0), row.get(1), row.get(2));
                let value = berth_core::JsonText::parse(value).map_err(|_| {
                    Failure::Berth(Error::Corrupt {
                        reason: format!("stored memory item {namespace}:{key} has an invalid value"),
                        location: berth_core::Location { artifact: "postgres:memory".into(), offset: None, seq: None },
                    })
                })?;
                for term in berth_catalog::scoped::index_terms(&value).all() {
                    namespaces.push(namespace.to_owned());
                    keys.push(key.to_owned());
                    terms.push(term.to_owned());
                }
                after = (namespace.to_owned(), key.to_owned());
            }
            transaction.execute(&insert, &[tenant, &namespaces, &keys, &terms]).await?;
            if (rows.len() as i64) < REMAKE_BATCH {
                break;
            }
        }
    }
    Ok(())
}

/// Grants the serving role what it needs and nothing more: data access to berth's tables
/// (bounded by the policies), reading the schema version. It owns nothing, so it cannot
/// alter or disable a policy. `role` is quoted as an identifier.
pub(crate) async fn grant_app_role(client: &tokio_postgres::Client, role: &str) -> Result<(), Failure> {
    let role = quote_identifier(role)?;
    let tables = TENANT_TABLES.join(", ");
    client
        .batch_execute(&format!(
            "DO $$ BEGIN EXECUTE format('GRANT USAGE ON SCHEMA %I TO {role_literal}', current_schema()); END $$; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON {tables} TO {role}; \
             GRANT SELECT ON schema_migrations TO {role}; \
             GRANT USAGE ON SEQUENCE session_heads_incarnation_seq TO {role};",
            role_literal = role.replace('\'', "''"),
        ))
        .await?;
    Ok(())
}

/// `"name"` with inner quotes doubled; refuses the empty name and NUL.
pub(crate) fn quote_identifier(name: &str) -> Result<String, Failure> {
    if name.is_empty() || name.contains('\0') || name.len() > 63 {
        return Err(Failure::Berth(Error::invalid("role name", "1–63 bytes, no NUL")));
    }
    Ok(format!("\"{}\"", name.replace('"', "\"\"")))
}

/// Who the connection is, as the serving self-check sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleReport {
    pub role: String,
    pub superuser: bool,
    pub bypass_rls: bool,
    /// berth tables this role owns (or is a member of the owner of).
    pub owned_tables: Vec<String>,
}

impl RoleReport {
    /// Why this role must not serve, if it must not.
    pub fn refusal(&self) -> Option<String> {
        let mut reasons = Vec::new();
        if self.superuser {
            reasons.push("is a superuser".to_owned());
        }
        if self.bypass_rls {
            reasons.push("has BYPASSRLS".to_owned());
        }
        if !self.owned_tables.is_empty() {
            reasons.push(format!("owns (or inherits ownership of) {}", self.owned_tables.join(", ")));
        }
        (!reasons.is_empty()).then(|| format!("database role \"{}\" {}", self.role, reasons.join(" and ")))
    }
}

pub(crate) async fn role_report(client: &tokio_postgres::Client) -> Result<RoleReport, Failure> {
    let tables: Vec<String> = TENANT_TABLES.iter().map(|table| table.to_string()).collect();
    let row = client
        .query_one(
            "SELECT current_user::text, r.rolsuper, r.rolbypassrls, ARRAY( \
                 SELECT c.relname::text FROM pg_class c \
                 WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY($1) \
                   AND pg_has_role(current_user, c.relowner, 'USAGE') ORDER BY 1) \
             FROM pg_roles r WHERE r.rolname = current_user",
            &[&tables],
        )
        .await?;
    Ok(RoleReport { role: row.get(0), superuser: row.get(1), bypass_rls: row.get(2), owned_tables: row.get(3) })
}

/// Whether the server accepts writes: `pg_is_in_recovery()` (a hot standby) or
/// `transaction_read_only` (e.g. `default_transaction_read_only = on`) refuse them.
pub(crate) async fn read_only_reason(client: &tokio_postgres::Client) -> Result<Option<String>, Failure> {
    let row =
        client.query_one("SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'", &[]).await?;
    let (in_recovery, read_only): (bool, bool) = (row.get(0), row.get(1));
    Ok(if in_recovery {
        Some("the server is a hot standby (pg_is_in_recovery()); berth writes only through the primary".into())
    } else if read_only {
        Some("the server's transactions are read-only (transaction_read_only = on); berth writes only through a writable primary".into())
    } else {
        None
    })
}

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
    // A current schema needs no DDL: the serving role, which may not create anything,
    // starts up through here too.
    let stored = stored_version(client).await?;
    check_version(stored)?;
    if stored == SCHEMA_VERSION {
        return Ok(MigrationReport { from_version: stored, to_version: SCHEMA_VERSION });
    }
    let transaction = client.transaction().await?;
    transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK_KEY]).await?;
    transaction.batch_execute(MIGRATIONS_TABLE).await?;
    let from_version: i32 =
        transaction.query_one("SELECT coalesce(max(version), 0) FROM schema_migrations", &[]).await?.get(0);
    check_version(from_version)?;
    for migration in MIGRATIONS.iter().skip(usize::try_from(from_version).unwrap_or(0)) {
        tracing::info!(version = migration.version, name = migration.name, "applying postgres migration");
        transaction.batch_execute(migration.sql).await?;
        if migration.version == MEMORY_TERMS_REMADE {
            remake_memory_terms(&transaction).await?;
        }
        if migration.version == SESSION_SEARCH_FILLED {
            fill_session_search(&transaction).await?;
        }
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
