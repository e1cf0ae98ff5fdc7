//! The catalog's on-disk format: every table, index and format constant in one place,
//! and the forward-only migrations that `open` applies.
//!
//! Layout rules:
//! - The tenant leads every key and every index, so one tenant's rows are one range
//!   and no query can wander into another tenant's rows by accident.
//! - Every listing shape the service uses is an equality prefix followed by the sort
//!   key `(last_activity DESC, id DESC)`, so a page is a range scan of at most `limit`
//!   index entries (keyset pagination: the cursor is a range bound, never an OFFSET).
//! - `blank` sits in the equality prefix because every default listing hides blank
//!   sessions; a listing that includes them merges the two ranges in Rust.
//! - `session_labels` repeats `status`, `blank` and `last_activity` from `sessions`
//!   so that label listings are range scans too (a label index that stopped at `id`
//!   would have to read every session carrying the label, then sort them).
//! - `record_json` holds the whole `SessionRecord`; the other columns are an index of
//!   it. Timestamps beyond `i64::MAX` ms (year ~292 million) are clamped to `i64::MAX`
//!   in the index columns; the record keeps the exact value. Known divergence from the
//!   reference: among sessions whose `last_activity` is beyond `i64::MAX`, and for
//!   filter bounds beyond `i64::MAX`, listing compares the clamped values. (An
//!   "infinite" `lease_until` of `u64::MAX` filters exactly for every realistic bound.)

use berth_core::{Error, Location};
use rusqlite::{Connection, TransactionBehavior};

/// The file name callers give `SqliteCatalog::open` inside the data root.
pub const CATALOG_FILE_NAME: &str = "catalog.sqlite";

/// `PRAGMA application_id`: "brth". Marks a file as a berth catalog so that another
/// program's SQLite database is refused instead of being migrated.
pub const APPLICATION_ID: i32 = 0x6272_7468;

/// The schema version this build writes (`PRAGMA user_version`). Equal to the number
/// of migrations; a database with a larger number was written by a newer berth.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Forward-only migrations; `MIGRATIONS[n]` takes the schema from version n to n + 1.
/// Never edit a shipped entry: append a new one.
const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5, V6, V7, V8, V9, V10, V11, V12, V13];

/// The migrations' SQL, for tests that build an older catalog.
#[cfg(test)]
pub(crate) const MIGRATIONS_FOR_TESTS: &[&str] = MIGRATIONS;

const V1: &str = "
CREATE TABLE sessions (
    tenant            TEXT    NOT NULL,
    id                TEXT    NOT NULL,
    user              TEXT    NOT NULL,
    project           TEXT,
    status            TEXT    NOT NULL,
    last_activity     INTEGER NOT NULL,
    lease_until       INTEGER NOT NULL,
    created_at        INTEGER NOT NULL,
    status_changed_at INTEGER NOT NULL,
    revision          INTEGER NOT NULL,
    blank             INTEGER NOT NULL CHECK (blank IN (0, 1)),
    parent            TEXT,
    record_json       TEXT    NOT NULL,
    PRIMARY KEY (tenant, id)
) STRICT;
CREATE INDEX sessions_by_activity ON sessions (tenant, blank, last_activity DESC, id DESC);
CREATE INDEX sessions_by_status ON sessions (tenant, status, blank, last_activity DESC, id DESC);
CREATE INDEX sessions_by_user ON sessions (tenant, user, blank, last_activity DESC, id DESC);
CREATE INDEX sessions_by_project ON sessions (tenant, project, blank, last_activity DESC, id DESC)
    WHERE project IS NOT NULL;
CREATE INDEX sessions_by_parent ON sessions (tenant, parent, blank, last_activity DESC, id DESC)
    WHERE parent IS NOT NULL;

CREATE TABLE session_labels (
    tenant        TEXT    NOT NULL,
    id            TEXT    NOT NULL,
    label         TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    blank         INTEGER NOT NULL CHECK (blank IN (0, 1)),
    last_activity INTEGER NOT NULL,
    PRIMARY KEY (tenant, id, label),
    FOREIGN KEY (tenant, id) REFERENCES sessions (tenant, id) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;
CREATE INDEX session_labels_by_activity
    ON session_labels (tenant, label, blank, last_activity DESC, id DESC);
CREATE INDEX session_labels_by_status
    ON session_labels (tenant, label, status, blank, last_activity DESC, id DESC);

CREATE TABLE audit (
    tenant     TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    entry_json TEXT    NOT NULL,
    PRIMARY KEY (tenant, seq)
) STRICT;

CREATE TABLE audit_heads (
    tenant TEXT    NOT NULL PRIMARY KEY,
    seq    INTEGER NOT NULL,
    hash   TEXT    NOT NULL
) STRICT;

CREATE TABLE retention (
    tenant      TEXT NOT NULL PRIMARY KEY,
    policy_json TEXT NOT NULL
) STRICT;
";

/// The idempotency index (R-S14): per session, the seq below which it holds every keyed
/// batch of the log, and one row per key. Both go with the session's row.
const V2: &str = "
CREATE TABLE idempotency_index (
    tenant        TEXT    NOT NULL,
    id            TEXT    NOT NULL,
    indexed_until INTEGER NOT NULL,
    PRIMARY KEY (tenant, id),
    FOREIGN KEY (tenant, id) REFERENCES sessions (tenant, id) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;
CREATE TABLE idempotency_keys (
    tenant    TEXT    NOT NULL,
    id        TEXT    NOT NULL,
    key       TEXT    NOT NULL,
    first_seq INTEGER NOT NULL,
    events    INTEGER NOT NULL,
    digest    TEXT    NOT NULL,
    PRIMARY KEY (tenant, id, key),
    FOREIGN KEY (tenant, id) REFERENCES sessions (tenant, id) ON DELETE CASCADE
) STRICT, WITHOUT ROWID;
";

/// Scoped memory (R-M1, R-M2). `memory_items` holds one row per item, the value as its
/// exact text (R-C9); `id` is an explicit rowid alias so that VACUUM cannot renumber the
/// rows `memory_terms` points at. `memory_terms` is an FTS5 index of each item's terms
/// (today `berth_catalog::scoped::index_terms`, space-joined; an item without terms has
/// no row): the terms are made in Rust, and the `ascii` tokenizer keeps each such term
/// as exactly one token (it splits only at ASCII non-alphanumerics, which a term never
/// contains), so a match is exactly "the item holds every index term of the query".
/// `memory_fields` indexes each item's top-level scalar fields for filters
/// (`fields.rs`: numbers by `Decimal::sort_key`, so ranges are exact), and goes with its
/// item (`ON DELETE CASCADE`). `memory_usage` is the tenant's item count and bytes, changed in the same
/// transaction as every item (quotas read one row). Indexes: the key order within a
/// tenant is the unique key; the updated order, the expiry sweep and the items bound to
/// a session each have one.
const V3: &str = "
CREATE TABLE memory_items (
    id         INTEGER PRIMARY KEY,
    tenant     TEXT    NOT NULL,
    namespace  TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    value      TEXT    NOT NULL,
    revision   INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    expires_at INTEGER,
    ttl_ms     INTEGER,
    bound_to   TEXT,
    bytes      INTEGER NOT NULL,
    UNIQUE (tenant, namespace, key)
) STRICT;
CREATE INDEX memory_items_by_updated ON memory_items (tenant, updated_at DESC, namespace, key);
CREATE INDEX memory_items_by_expiry ON memory_items (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX memory_items_by_session ON memory_items (tenant, bound_to) WHERE bound_to IS NOT NULL;
CREATE TABLE memory_usage (
    tenant TEXT    NOT NULL PRIMARY KEY,
    items  INTEGER NOT NULL,
    bytes  INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE VIRTUAL TABLE memory_terms USING fts5(terms, detail = 'none', columnsize = 0, tokenize = 'ascii');
CREATE TABLE memory_fields (
    item   INTEGER NOT NULL REFERENCES memory_items (id) ON DELETE CASCADE,
    tenant TEXT    NOT NULL,
    field  TEXT    NOT NULL,
    kind   TEXT    NOT NULL CHECK (kind IN ('n', 's', 'b', 'z')),
    sort   TEXT    NOT NULL,
    PRIMARY KEY (item, field)
) STRICT, WITHOUT ROWID;
CREATE INDEX memory_fields_by_value ON memory_fields (tenant, field, kind, sort);
";

/// Relevance order for single-term queries (issue 11: a common term's relevance page
/// read every match). One row per distinct term of an item, with how often it occurs
/// (today the word terms of `berth_catalog::scoped::index_terms`); the index is the relevance order itself —
/// count descending, then (namespace, key) — so a one-term relevance page walks it from
/// the top and stops at the page's end. Goes with its item (`ON DELETE CASCADE`); an
/// item replaced has its rows rewritten. Rows of items stored before V4 are filled in
/// by `fill_term_counts` in the same migration transaction.
const V4: &str = "
CREATE TABLE memory_term_counts (
    item      INTEGER NOT NULL REFERENCES memory_items (id) ON DELETE CASCADE,
    tenant    TEXT    NOT NULL,
    term      TEXT    NOT NULL,
    count     INTEGER NOT NULL,
    namespace TEXT    NOT NULL,
    key       TEXT    NOT NULL,
    PRIMARY KEY (item, term)
) STRICT, WITHOUT ROWID;
CREATE INDEX memory_term_counts_by_rank ON memory_term_counts (tenant, term, count DESC, namespace, key);
";

/// Deferred search rows (issue 11: a durable put wrote a dozen B-trees' worth of pages).
/// A put stores its item and its id here, in its transaction; the item's search rows
/// (`memory_terms`, `memory_fields`, `memory_term_counts`) are written later in a batch —
/// by the put that finds `UNINDEXED_MAX` items waiting, or by the first search that reads
/// them, before it reads (`memory.rs`, `index_unindexed`). Goes with its item. A V4
/// catalog's items are all indexed, so the table starts empty.
const V5: &str = "
CREATE TABLE memory_unindexed (
    item INTEGER PRIMARY KEY REFERENCES memory_items (id) ON DELETE CASCADE
) STRICT;
";

/// Term counts only where a term repeats (issue 11: a put's search rows were ~10 random
/// entries of `memory_term_counts_by_rank` per item, most of them count 1, and those
/// pages were half of a put's cost). From V6 an item has a `memory_term_counts` row only
/// for a term that occurs at least twice in it; a term that occurs once is known from
/// `memory_terms` (a match without a row counts 1). A one-term relevance page walks the
/// rows (counts of 2 and more) and then the other matches in key order
/// (`memory.rs`, `search_by_term_rank`).
const V6: &str = "
DELETE FROM memory_term_counts WHERE count < 2;
";

/// Block summaries of the field index (issue 11: a filter matching only items far down
/// the key order tested every item before them; `blocks.rs`). `memory_blocks`: a
/// tenant's key order cut into blocks, each named by its first (namespace, key) and
/// holding the items up to the next block's first (the first block starts at ("",
/// "")), with how many items it has taken since it was last built. `memory_block_ranges`:
/// per block, field and kind, the least and greatest `sort` of its items'
/// `memory_fields` rows — never narrower than its items' values. Filled for the items
/// stored before V7 by `blocks::build_all` in the same migration transaction.
const V7: &str = "
CREATE TABLE memory_blocks (
    tenant    TEXT    NOT NULL,
    namespace TEXT    NOT NULL,
    key       TEXT    NOT NULL,
    items     INTEGER NOT NULL,
    PRIMARY KEY (tenant, namespace, key)
) STRICT, WITHOUT ROWID;
CREATE TABLE memory_block_ranges (
    tenant    TEXT NOT NULL,
    namespace TEXT NOT NULL,
    key       TEXT NOT NULL,
    field     TEXT NOT NULL,
    kind      TEXT NOT NULL,
    low       TEXT NOT NULL,
    high      TEXT NOT NULL,
    PRIMARY KEY (tenant, namespace, key, field, kind)
) STRICT, WITHOUT ROWID;
";

/// Cheaper search rows (issue 11's put row).
/// - `memory_fields.kind`'s check as equalities: SQLite evaluates an `IN` of more than
///   two constants through an ephemeral table it builds at every row it checks, and the
///   check ran for each of an item's field rows — a third of the cost of indexing an
///   item (callgrind, `examples/memory_put_profile`). Same rows and index; the table is
///   rebuilt because SQLite cannot alter a constraint in place.
/// - `memory_unindexed.fresh`: the item had no row before its put, so it has no search
///   rows to delete when it is indexed. Rows queued before V8 say 0 (delete first).
const V8: &str = "
CREATE TABLE memory_fields_v8 (
    item   INTEGER NOT NULL REFERENCES memory_items (id) ON DELETE CASCADE,
    tenant TEXT    NOT NULL,
    field  TEXT    NOT NULL,
    kind   TEXT    NOT NULL CHECK (kind = 'n' OR kind = 's' OR kind = 'b' OR kind = 'z'),
    sort   TEXT    NOT NULL,
    PRIMARY KEY (item, field)
) STRICT, WITHOUT ROWID;
INSERT INTO memory_fields_v8 (item, tenant, field, kind, sort)
    SELECT item, tenant, field, kind, sort FROM memory_fields;
DROP TABLE memory_fields;
ALTER TABLE memory_fields_v8 RENAME TO memory_fields;
CREATE INDEX memory_fields_by_value ON memory_fields (tenant, field, kind, sort);
ALTER TABLE memory_unindexed ADD COLUMN fresh INTEGER NOT NULL DEFAULT 0;
";

/// Search rows in a file of their own (issue 11's put row: indexing a batch of items
/// took the writer lock for milliseconds, and every put waited behind it). The derived
/// tables (`memory_terms`, `memory_fields`, `memory_term_counts`, `memory_blocks`,
/// `memory_block_ranges`) move to the search file (`SEARCH_SCHEMA`, `search.rs`), which
/// is rebuilt from `memory_items` when it is missing — so they are dropped here, not
/// copied. `memory_unindexed` becomes `memory_changes`: one row per change to an item
/// (put, replace, delete), in `seq` order; a deleted item's row says where it was, so
/// its block can be rebuilt. `memory_search_token` names this catalog's search file:
/// a search file holding another token is not this catalog's, and is rebuilt.
const V9: &str = "
DROP TABLE memory_unindexed;
DROP TABLE memory_fields;
DROP TABLE memory_term_counts;
DROP TABLE memory_terms;
DROP TABLE memory_blocks;
DROP TABLE memory_block_ranges;
CREATE TABLE memory_changes (
    seq       INTEGER PRIMARY KEY,
    item      INTEGER NOT NULL,
    fresh     INTEGER NOT NULL,
    tenant    TEXT,
    namespace TEXT,
    key       TEXT
) STRICT;
CREATE TABLE memory_search_token (
    one   INTEGER PRIMARY KEY CHECK (one = 1),
    token TEXT    NOT NULL
) STRICT;
INSERT INTO memory_search_token (one, token) VALUES (1, lower(hex(randomblob(16))));
";

/// A new item without a change row or a usage write (issue 11's put row: each was a
/// page every put wrote). `memory_ids`, one row:
/// - `floor`: from V10 a new item's id is never one an item had before. `floor` is at
///   least every id given and no longer held above the largest held (a delete that
///   removes the largest id raises it, `memory.rs`, `deleting`), and a new item takes
///   the id past the larger of the two. So the search file finds the items it has not
///   indexed as the ids past its mark (`memory_search_items`, `search.rs`); only
///   replacements and deletes write a change. (SQLite alone gives `max(id) + 1`: a new
///   item could take a deleted item's id at or below the mark, and never be indexed.)
///   A V9 search file has no mark, and is rebuilt.
/// - `counted`: `memory_usage` counts the items with ids up to `counted`; a tenant's
///   usage is its row plus its items past `counted` (`memory.rs`, `usage_in`). A new
///   item writes no usage; every few puts, and before any other change to usage, the
///   items past it are added to the rows and `counted` moves to the largest id (`fold`).
const V10: &str = "
CREATE TABLE memory_ids (
    one     INTEGER PRIMARY KEY CHECK (one = 1),
    floor   INTEGER NOT NULL,
    counted INTEGER NOT NULL
) STRICT;
INSERT INTO memory_ids (one, floor, counted)
    SELECT 1, coalesce(max(id), 0), coalesce(max(id), 0) FROM memory_items;
";

/// The updated order moves to the search file (`memory_updated`): a put then writes two
/// B-trees of the catalog, the item's row and its (tenant, namespace, key) entry, as a
/// plain table with a unique key does, instead of three. Searches in the updated order
/// over a large prefix walk the search file's index, after the catch-up every search
/// of the search rows makes (`memory.rs`, `reads_search_rows`). The index it replaces
/// took each new item at the front of its tenant's range (newest first), where SQLite
/// rebalances three sibling pages at a time: ~1.4 of its leaves a put (2026-12-06).
const V11: &str = "
DROP INDEX memory_items_by_updated;
";

/// A tenant is charged for what it stored, and sets its own quota.
/// - Usage counts only charged items (`Namespace::is_charged`): berth's own bookkeeping
///   (`berth/…`: a carried append's marker, its scope index entries) was counted as the
///   tenant's items and held to its quota until V11. The rows are counted again here,
///   from the items up to `memory_ids.counted` (those past it are read by every usage
///   read, and from V12 counted only when charged).
/// - `items_max`, `bytes_max`: the tenant's own quota (NULL: the service's default),
///   beside its usage in the row a put reads already (`memory.rs`, `USAGE_BOUND`), so
///   a per-tenant quota costs a put no read of its own.
const V12: &str = "
ALTER TABLE memory_usage ADD COLUMN items_max INTEGER;
ALTER TABLE memory_usage ADD COLUMN bytes_max INTEGER;
UPDATE memory_usage SET
    items = (SELECT count(*) FROM memory_items AS m WHERE m.tenant = memory_usage.tenant
        AND m.id <= (SELECT counted FROM memory_ids) AND NOT (m.namespace >= 'berth/' AND m.namespace < 'berth0')),
    bytes = (SELECT coalesce(sum(m.bytes), 0) FROM memory_items AS m WHERE m.tenant = memory_usage.tenant
        AND m.id <= (SELECT counted FROM memory_ids) AND NOT (m.namespace >= 'berth/' AND m.namespace < 'berth0'));
";

/// The listing's text search (issue 55): `sessions.search` holds the session's folded
/// id, title and labels (`berth_catalog::search_column`), written with the rest of the
/// row; a search is a `LIKE` filter on it (`listing.rs`). Filled for the rows stored
/// before V13 by `fill_search` in the same migration transaction (folding is berth's,
/// not SQLite's, whose `lower()` knows only ASCII).
const V13: &str = "
ALTER TABLE sessions ADD COLUMN search TEXT NOT NULL DEFAULT '';
";

/// The search file's tables (`search.rs`), created in the schema attached as `search`:
/// the derived rows of schemas V3–V8, as they were there, without references to
/// `memory_items` (SQLite cannot refer across files: rows go with their item through
/// `memory_changes`), `memory_search_state`: the catalog's token, and `done`, the
/// last `memory_changes.seq` whose change the rows hold, and (V10)
/// `memory_search_items.items`: the largest item id the rows hold (new items, which
/// write no change, are the ids past it), and `boot`: the system boot its commits are
/// written unsynced in ("" where the system names none, and they are not), so a file
/// from an earlier boot is rebuilt (`search.rs`, `this_boot`). (V11) `memory_updated`:
/// each item's position in the updated order, for walks of a large prefix in it; a
/// file of an earlier format (its `user_version`, `search.rs`, `SEARCH_FORMAT`) is rebuilt.
pub(crate) const SEARCH_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS search.memory_search_state (
    one   INTEGER PRIMARY KEY CHECK (one = 1),
    token TEXT    NOT NULL,
    done  INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS search.memory_search_items (
    one   INTEGER PRIMARY KEY CHECK (one = 1),
    items INTEGER NOT NULL,
    boot  TEXT    NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS search.memory_updated (
    item       INTEGER PRIMARY KEY,
    tenant     TEXT    NOT NULL,
    updated_at INTEGER NOT NULL,
    namespace  TEXT    NOT NULL,
    key        TEXT    NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS search.memory_updated_order ON memory_updated (tenant, updated_at DESC, namespace, key);
CREATE VIRTUAL TABLE IF NOT EXISTS search.memory_terms
    USING fts5(terms, detail = 'none', columnsize = 0, tokenize = 'ascii');
CREATE TABLE IF NOT EXISTS search.memory_fields (
    item   INTEGER NOT NULL,
    tenant TEXT    NOT NULL,
    field  TEXT    NOT NULL,
    kind   TEXT    NOT NULL CHECK (kind = 'n' OR kind = 's' OR kind = 'b' OR kind = 'z'),
    sort   TEXT    NOT NULL,
    PRIMARY KEY (item, field)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS search.memory_fields_by_value ON memory_fields (tenant, field, kind, sort);
CREATE TABLE IF NOT EXISTS search.memory_term_counts (
    item      INTEGER NOT NULL,
    tenant    TEXT    NOT NULL,
    term      TEXT    NOT NULL,
    count     INTEGER NOT NULL,
    namespace TEXT    NOT NULL,
    key       TEXT    NOT NULL,
    PRIMARY KEY (item, term)
) STRICT, WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS search.memory_term_counts_by_rank
    ON memory_term_counts (tenant, term, count DESC, namespace, key);
CREATE TABLE IF NOT EXISTS search.memory_blocks (
    tenant    TEXT    NOT NULL,
    namespace TEXT    NOT NULL,
    key       TEXT    NOT NULL,
    items     INTEGER NOT NULL,
    PRIMARY KEY (tenant, namespace, key)
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS search.memory_block_ranges (
    tenant    TEXT NOT NULL,
    namespace TEXT NOT NULL,
    key       TEXT NOT NULL,
    field     TEXT NOT NULL,
    kind      TEXT NOT NULL,
    low       TEXT NOT NULL,
    high      TEXT NOT NULL,
    PRIMARY KEY (tenant, namespace, key, field, kind)
) STRICT, WITHOUT ROWID;
";

/// Fills `memory_term_counts` for the items a V3 catalog holds (V4's table starts empty).
fn fill_term_counts(transaction: &rusqlite::Transaction<'_>) -> Result<(), crate::error::Failure> {
    let mut select = transaction.prepare("SELECT id, tenant, namespace, key, value FROM memory_items")?;
    let mut rows = select.query([])?;
    while let Some(row) = rows.next()? {
        let value = berth_core::JsonText::parse(row.get_ref(4)?.as_str()?)
            .map_err(|_| crate::error::Failure::Corrupt("stored memory item has an invalid value".into()))?;
        let (id, tenant, namespace, key): (i64, String, String, String) =
            (row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?);
        let terms = berth_catalog::scoped::index_terms(&value);
        crate::memory::insert_term_counts(transaction, id, &tenant, &namespace, &key, &terms.words)?;
    }
    Ok(())
}

/// Fills `sessions.search` for the rows a V12 catalog holds.
fn fill_search(transaction: &rusqlite::Transaction<'_>) -> Result<(), crate::error::Failure> {
    let mut select = transaction.prepare("SELECT tenant, id, record_json FROM sessions")?;
    let mut update = transaction.prepare("UPDATE sessions SET search = ?3 WHERE tenant = ?1 AND id = ?2")?;
    let mut rows = select.query([])?;
    while let Some(row) = rows.next()? {
        let record: berth_catalog::SessionRecord = serde_json::from_str(row.get_ref(2)?.as_str()?)
            .map_err(|_| crate::error::Failure::Corrupt("stored session record does not decode".into()))?;
        let (tenant, id): (String, String) = (row.get(0)?, row.get(1)?);
        update.execute((tenant, id, berth_catalog::search_column(&record)))?;
    }
    Ok(())
}

/// Brings the database to `SCHEMA_VERSION` inside one `BEGIN IMMEDIATE` transaction:
/// when two processes open a fresh file at once, the second waits for the first's
/// write lock and then finds the schema already current.
pub(crate) fn migrate(connection: &mut Connection, artifact: &str) -> Result<(), crate::error::Failure> {
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = transaction.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    let application_id: i32 = transaction.query_row("PRAGMA application_id", [], |row| row.get(0))?;
    check_identity(&transaction, version, application_id, artifact)?;
    for (from, migration) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tracing::info!(artifact, from, to = from + 1, "migrating catalog schema");
        transaction.execute_batch(migration)?;
        if from + 1 == 4 {
            fill_term_counts(&transaction)?;
        }
        if from + 1 == 7 {
            crate::blocks::build_all(&transaction)?;
        }
        if from + 1 == 13 {
            fill_search(&transaction)?;
        }
    }
    if version != SCHEMA_VERSION {
        transaction.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        transaction.pragma_update(None, "application_id", APPLICATION_ID)?;
    }
    transaction.commit()?;
    Ok(())
}

/// Refuses a database written by a newer berth, or one that is not a berth catalog.
fn check_identity(
    connection: &Connection,
    version: i64,
    application_id: i32,
    artifact: &str,
) -> Result<(), crate::error::Failure> {
    let location = || Some(Location { artifact: artifact.to_owned(), offset: None, seq: None });
    if version > SCHEMA_VERSION {
        return Err(Error::FormatUnsupported {
            reason: format!(
                "catalog schema version {version} was written by a newer berth (this build reads up to version {SCHEMA_VERSION}); upgrade berth to open it"
            ),
            location: location(),
        }
        .into());
    }
    let foreign_id = application_id != 0 && application_id != APPLICATION_ID;
    let fresh = version == 0 && application_id == 0;
    let tables: i64 = connection.query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))?;
    if foreign_id || (fresh && tables > 0) || version < 0 {
        return Err(Error::FormatUnsupported {
            reason: "this SQLite database is not a berth catalog".into(),
            location: location(),
        }
        .into());
    }
    Ok(())
}
