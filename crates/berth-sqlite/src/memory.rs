//! Scoped memory on SQLite (`MemoryStore`): the tables of schema V3 (`schema.rs`).
//!
//! - Every write is one `BEGIN IMMEDIATE` transaction on the writer connection (like
//!   the catalog's), so a put's revision check and its write cannot interleave with
//!   another writer in any process, and the tenant's usage row changes with the items.
//! - Namespace prefixes, cursors and orders are SQL range scans of an index; the filter
//!   (`Filter::matches`) is evaluated here on the rows the scan passes, which stops
//!   after `limit` matches, so a page reads no more rows than it must skip.
//! - Full text: `memory_terms` (FTS5) narrows to the items holding every index term of
//!   the query (`TextQuery::index_terms`). For a query of ASCII words that is the match,
//!   and relevance is counted from the stored terms (`TextQuery::score_terms`); for any
//!   other, the candidates are checked and scored by `TextQuery::score` here.

use crate::blocks::{self, Position};
use crate::catalog::{append_audit_in, time_column};
use crate::error::{is_unique_violation, Failure};
use crate::search;
use crate::SqliteCatalog;
use async_trait::async_trait;
use berth_catalog::audit::AuditEntry;
use berth_catalog::scoped::fields;
use berth_catalog::scoped::{self, DeleteAudit, ForgetAudit, ForgetOutcome, MemoryDelete, MemoryItem, MemoryPut};
use berth_catalog::scoped::{MemoryQuota, MemorySearch, MemoryStore, MemoryUsage, Namespace, NamespaceQuery};
use berth_catalog::scoped::{Removed, SearchOrder, SweepAudit, TenantQuota, TextQuery};
use berth_core::limits::Limit;
use berth_core::{Error, JsonText, Result, SessionId, TenantId, Timestamp};
use rusqlite::types::Value;
use rusqlite::{params_from_iter, Connection, OptionalExtension, Row};
use std::collections::BTreeMap;

/// The item columns every read selects, in `item_from_row` order (`m` is `memory_items`).
const ITEM_COLUMNS: &str =
    "m.id, m.namespace, m.key, m.value, m.revision, m.created_at, m.updated_at, m.expires_at, m.ttl_ms, m.bound_to";

/// A query's terms match through FTS5 only when more items than this hold them all:
/// fewer are read whole (by the full-text index) and sorted here; more are found by
/// walking the ordered index and testing each row's membership, stopping at `limit`.
pub(crate) const FEW_TEXT_MATCHES: i64 = 2_000;

/// Likewise for a filter condition the field index answers (`fields.rs`).
const FEW_FIELD_MATCHES: i64 = 2_000;

/// A prefix with fewer items is sorted by `updated_at` rather than walked in its order.
pub(crate) const SMALL_PREFIX: i64 = 2_000;

fn corrupt(what: &str) -> Failure {
    Failure::Corrupt(format!("stored memory item has an invalid {what}"))
}

fn time_from_column(column: i64) -> Result<Timestamp, Failure> {
    u64::try_from(column).map(Timestamp).map_err(|_| corrupt("time"))
}

/// One `memory_items` row (selected as `ITEM_COLUMNS`) and its row id.
fn item_from_row(row: &Row<'_>) -> Result<(i64, MemoryItem), Failure> {
    item_from_row_in(row, None)
}

/// `item_from_row` for a row selected by its namespace: `known` is that namespace (the
/// column then is not parsed again).
fn item_from_row_in(row: &Row<'_>, known: Option<&Namespace>) -> Result<(i64, MemoryItem), Failure> {
    let namespace = match known {
        Some(namespace) => namespace.clone(),
        None => Namespace::parse(row.get_ref(1)?.as_str()?).map_err(|_| corrupt("namespace"))?,
    };
    Ok((row.get(0)?, item_from_columns(row, 3, namespace, row.get(2)?)?))
}

/// The columns an item's `value` through `bound_to` (in `ITEM_COLUMNS` order) that start
/// at `first`, as the item at `namespace` and `key`.
fn item_from_columns(row: &Row<'_>, first: usize, namespace: Namespace, key: String) -> Result<MemoryItem, Failure> {
    let value = stored_value(row.get(first)?)?;
    let bound_to = match row.get_ref(first + 6)?.as_str_or_null()? {
        Some(text) => Some(SessionId::parse(text).map_err(|_| corrupt("session id"))?),
        None => None,
    };
    let optional_time = |index: usize| -> Result<Option<Timestamp>, Failure> {
        row.get::<_, Option<i64>>(index)?.map(time_from_column).transpose()
    };
    Ok(MemoryItem {
        namespace,
        key,
        value,
        revision: row.get::<_, i64>(first + 1)? as u64,
        created_at: time_from_column(row.get(first + 2)?)?,
        updated_at: time_from_column(row.get(first + 3)?)?,
        expires_at: optional_time(first + 4)?,
        ttl_ms: row.get::<_, Option<i64>>(first + 5)?.map(|ttl| ttl as u64),
        bound_to,
    })
}

/// Positional parameters of a statement built piece by piece.
#[derive(Default)]
pub(crate) struct Params(pub(crate) Vec<Value>);

impl Params {
    /// Adds a parameter; returns its placeholder.
    pub(crate) fn push(&mut self, value: impl Into<Value>) -> String {
        self.0.push(value.into());
        format!("?{}", self.0.len())
    }
}

/// `m.namespace` equal to `prefix` or inside it, as one range of the (tenant, namespace,
/// key) index: `[p, p0)` holds `p`, `p/…` and siblings like `p x` (the bytes below `/`),
/// which the last condition drops (`0` is the byte after `/`).
fn within_prefix(prefix: &Namespace, params: &mut Params) -> String {
    namespace_within("m.namespace", prefix, params)
}

/// `within_prefix` on another namespace column.
fn namespace_within(column: &str, prefix: &Namespace, params: &mut Params) -> String {
    let p = prefix.as_str();
    let (low, high, slash) = (params.push(p.to_owned()), params.push(format!("{p}0")), params.push(format!("{p}/")));
    format!("{column} >= {low} AND {column} < {high} AND ({column} = {low} OR {column} > {slash})")
}

/// Writes the item's rows of `memory_term_counts` (schema V4, V6): each distinct term of
/// `terms` (the item's word terms, `IndexTerms::words`) that occurs at least twice, and
/// how often. A term that occurs once has no row (its count, 1, is implied by its
/// `memory_terms` match). Character terms have none: only a query of ASCII words is
/// ranked from the index.
pub(crate) fn insert_term_counts(
    connection: &Connection,
    item: i64,
    tenant: &str,
    namespace: &str,
    key: &str,
    terms: &[String],
) -> Result<(), Failure> {
    let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
    for term in terms {
        *counts.entry(term).or_default() += 1;
    }
    let mut insert = connection.prepare_cached(
        "INSERT INTO memory_term_counts (item, tenant, term, count, namespace, key) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for (term, count) in counts.into_iter().filter(|(_, count)| *count >= REPEATED) {
        insert.execute((item, tenant, term, count, namespace, key))?;
    }
    Ok(())
}

/// The least count a `memory_term_counts` row holds (schema V6).
const REPEATED: i64 = 2;

fn live(now: Timestamp, params: &mut Params) -> String {
    let now = params.push(time_column(now));
    format!("(m.expires_at IS NULL OR m.expires_at > {now})")
}

/// The FTS5 expression of a query: every index term quoted (a term is ASCII letters
/// and digits, or one non-ASCII character), ANDed.
fn match_expression(query: &TextQuery) -> String {
    query.index_terms().iter().map(|term| format!("\"{term}\"")).collect::<Vec<_>>().join(" ")
}

/// `<alias>.namespace` outside berth's own bookkeeping (`Namespace::is_charged`: the
/// range `SYSTEM_NAMESPACES`..`SYSTEM_NAMESPACES_END`, written out so the statements stay
/// constants; a test checks the two agree). Usage counts only those items (schema V12).
macro_rules! charged {
    ($alias:literal) => {
        concat!("NOT (", $alias, ".namespace >= 'berth/' AND ", $alias, ".namespace < 'berth0')")
    };
}

/// `charged!("m")`: the items' usage counts.
pub(crate) const CHARGED: &str = charged!("m");

/// A tenant's usage, its own quota, and where the usage rows stand (schema V10, V12).
struct Usage {
    /// The tenant's items and bytes: its `memory_usage` row plus its charged items past
    /// `counted`.
    usage: MemoryUsage,
    /// The tenant's own quota (`memory_usage.items_max`, `bytes_max`, schema V12): read
    /// with its usage row, so a put's quota costs no read of its own.
    quota: TenantQuota,
    /// `memory_ids.counted`: the rows count the items with ids up to it.
    counted: i64,
    /// Items of any tenant past `counted` (a put folds them in at `FOLD_AT`).
    past: i64,
}

/// Items past `memory_ids.counted` at which a put adds them to the usage rows (`fold`):
/// every read of usage reads them (`usage_in`), so they are kept few.
const FOLD_AT: i64 = 16;

/// `memory_ids.counted`, how many items are past it, and how many of them and their
/// bytes are tenant `?1`'s charged ones (a range of ids: the rowid's own order).
pub(crate) const PAST_COUNTED: &str = concat!(
    "SELECT i.counted, count(m.id), coalesce(sum(m.tenant = ?1 AND ",
    charged!("m"),
    "), 0), coalesce(sum(CASE WHEN m.tenant = ?1 AND ",
    charged!("m"),
    " THEN m.bytes END), 0) FROM memory_ids AS i LEFT JOIN memory_items AS m ON m.id > i.counted"
);

fn usage_in(connection: &Connection, tenant: &TenantId) -> Result<Usage, Failure> {
    let row: Option<(i64, i64, Option<i64>, Option<i64>)> = connection
        .prepare_cached("SELECT items, bytes, items_max, bytes_max FROM memory_usage WHERE tenant = ?1")?
        .query_row([tenant.as_str()], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))
        .optional()?;
    let (items, bytes, items_max, bytes_max) = row.unwrap_or((0, 0, None, None));
    let (counted, past, past_items, past_bytes): (i64, i64, i64, i64) = connection
        .prepare_cached(PAST_COUNTED)?
        .query_row([tenant.as_str()], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)))?;
    let usage = MemoryUsage { items: usage_count(items + past_items)?, bytes: usage_count(bytes + past_bytes)? };
    Ok(Usage { usage, quota: stored_quota(items_max, bytes_max)?, counted, past })
}

/// A tenant's own quota as its usage row stores it (NULL: the default's).
fn stored_quota(items_max: Option<i64>, bytes_max: Option<i64>) -> Result<TenantQuota, Failure> {
    Ok(TenantQuota { items: items_max.map(usage_count).transpose()?, bytes: bytes_max.map(usage_count).transpose()? })
}

/// A stored count of items or bytes (never negative in a sound catalog).
fn usage_count(n: i64) -> Result<u64, Failure> {
    u64::try_from(n).map_err(|_| Failure::Corrupt("memory usage is negative".into()))
}

/// `counted`, the largest id, and the tenant's usage row with its own quota, in one read
/// (`usage_bound`).
pub(crate) const USAGE_BOUND: &str = "SELECT i.counted, (SELECT coalesce(max(id), 0) FROM memory_items), \
     coalesce(u.items, 0), coalesce(u.bytes, 0), u.items_max, u.bytes_max \
     FROM memory_ids AS i LEFT JOIN memory_usage AS u ON u.tenant = ?1";

/// An upper bound of the tenant's usage that reads none of the items past `counted`:
/// there are at most `largest id − counted` of them (ids only grow past `counted`), and
/// each counts at most `ITEM_BYTES_MAX` (puts and imports check the limits). Reading
/// them (`usage_in`) was a fifth of a put's instructions (callgrind, 2026-12-06). A put
/// that fits under the bound fits under the exact usage; one that does not is checked
/// again against the exact usage (`put_in`). `past` is the bound on the count.
fn usage_bound(connection: &Connection, tenant: &TenantId) -> Result<Usage, Failure> {
    type Row = (i64, i64, i64, i64, Option<i64>, Option<i64>);
    let (counted, largest, items, bytes, items_max, bytes_max): Row =
        connection.prepare_cached(USAGE_BOUND)?.query_row([tenant.as_str()], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?))
        })?;
    let past = (largest - counted).max(0);
    let (items, bytes, unread) = (usage_count(items)?, usage_count(bytes)?, usage_count(past)?);
    let usage = MemoryUsage { items: items + unread, bytes: bytes.saturating_add(unread * scoped::ITEM_BYTES_MAX) };
    Ok(Usage { usage, quota: stored_quota(items_max, bytes_max)?, counted, past })
}

/// Adds the charged items past `?1` to their tenants' usage rows. `+tenant`: grouped in a
/// temporary tree, so the rows are read as a range of ids (grouped by the column, SQLite
/// walks a whole index that starts with the tenant — every item, measured 2026-12-06).
pub(crate) const FOLD: &str = concat!(
    "INSERT INTO memory_usage (tenant, items, bytes) SELECT m.tenant, count(*), sum(m.bytes) \
     FROM memory_items AS m WHERE m.id > ?1 AND ",
    charged!("m"),
    " GROUP BY +m.tenant \
     ON CONFLICT (tenant) DO UPDATE SET items = items + excluded.items, bytes = bytes + excluded.bytes"
);

/// Adds the items past `memory_ids.counted` to their tenants' usage rows, and moves
/// `counted` to the largest id (schema V10). Before any write that changes usage other
/// than by a new item (a delete, a replacement of a counted item), so that it changes
/// only rows that count it.
fn fold(connection: &Connection) -> Result<(), Failure> {
    let counted: i64 = connection.prepare_cached("SELECT counted FROM memory_ids")?.query_row([], |row| row.get(0))?;
    let largest = largest_id(connection)?;
    if largest <= counted {
        return Ok(());
    }
    connection.prepare_cached(FOLD)?.execute([counted])?;
    connection.prepare_cached("UPDATE memory_ids SET counted = ?1")?.execute([largest])?;
    Ok(())
}

/// Adds `items` and `bytes` (either may be negative) to the tenant's usage row.
pub(crate) fn add_usage(connection: &Connection, tenant: &str, items: i64, bytes: i64) -> Result<(), Failure> {
    if items == 0 && bytes == 0 {
        return Ok(());
    }
    connection
        .prepare_cached(
            "INSERT INTO memory_usage (tenant, items, bytes) VALUES (?1, ?2, ?3) \
             ON CONFLICT (tenant) DO UPDATE SET items = items + excluded.items, bytes = bytes + excluded.bytes",
        )?
        .execute((tenant, items, bytes))?;
    Ok(())
}

/// The stored item at `(namespace, key)`, live or expired.
fn stored_item(
    connection: &Connection,
    tenant: &TenantId,
    namespace: &Namespace,
    key: &str,
) -> Result<Option<(i64, MemoryItem)>, Failure> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!("SELECT {ITEM_COLUMNS} FROM memory_items AS m WHERE m.tenant = ?1 AND m.namespace = ?2 AND m.key = ?3")
    });
    let mut statement = connection.prepare_cached(&SQL)?;
    let mut rows = statement.query((tenant.as_str(), namespace.as_str(), key))?;
    rows.next()?.map(|row| item_from_row_in(row, Some(namespace))).transpose()
}

/// The stored item at `(namespace, key)`, live or expired, for a read: only the columns
/// the caller does not already know (a point get's whole cost is a few of them).
fn read_item(
    connection: &Connection,
    tenant: &TenantId,
    namespace: &Namespace,
    key: &str,
) -> Result<Option<MemoryItem>, Failure> {
    let mut statement = connection.prepare_cached(
        "SELECT value, revision, created_at, updated_at, expires_at, ttl_ms, bound_to FROM memory_items \
         WHERE tenant = ?1 AND namespace = ?2 AND key = ?3",
    )?;
    let mut rows = statement.query((tenant.as_str(), namespace.as_str(), key))?;
    rows.next()?.map(|row| item_from_columns(row, 0, namespace.clone(), key.to_owned())).transpose()
}

/// Writes `item` (new, or over the row `replacing`); its search rows are written later,
/// in the search file (`search.rs`). A replacement records its change in
/// `memory_changes` (schema V9); a new item records none (V10): it takes an id past
/// every id given before, so the search file finds it past its mark.
fn write_item(
    transaction: &Connection,
    tenant: &TenantId,
    item: &MemoryItem,
    replacing: Option<i64>,
) -> Result<(), Failure> {
    let values = (
        tenant.as_str(),
        item.namespace.as_str(),
        item.key.as_str(),
        item.value.as_str(),
        item.revision as i64,
        time_column(item.created_at),
        time_column(item.updated_at),
        item.expires_at.map(time_column),
        item.ttl_ms.map(|ttl| i64::try_from(ttl).unwrap_or(i64::MAX)),
        item.bound_to.as_ref().map(SessionId::as_str),
        item.bytes() as i64,
    );
    let id = match replacing {
        Some(id) => {
            transaction
                .prepare_cached(
                    "UPDATE memory_items SET value = ?4, revision = ?5, created_at = ?6, updated_at = ?7, \
                     expires_at = ?8, ttl_ms = ?9, bound_to = ?10, bytes = ?11 \
                     WHERE tenant = ?1 AND namespace = ?2 AND key = ?3",
                )?
                .execute(values)?;
            id
        }
        None => {
            // The id past every id ever given (schema V10: never a deleted item's).
            let inserted = transaction
                .prepare_cached(
                    "INSERT INTO memory_items (id, tenant, namespace, key, value, revision, created_at, updated_at, \
                     expires_at, ttl_ms, bound_to, bytes) VALUES ((SELECT max(coalesce((SELECT max(id) FROM \
                     memory_items), 0), floor) + 1 FROM memory_ids), ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                )?
                .execute(values);
            match inserted {
                Err(error) if is_unique_violation(&error) => {
                    return Err(Error::AlreadyExists {
                        what: "memory item",
                        id: format!("{}:{}", item.namespace, item.key),
                    }
                    .into())
                }
                outcome => outcome?,
            };
            // No change row: the search file finds it past its mark (`search.rs`).
            return Ok(());
        }
    };
    transaction.prepare_cached("INSERT INTO memory_changes (item, fresh) VALUES (?1, 0)")?.execute([id])?;
    Ok(())
}

/// The largest item id held (0 for none).
fn largest_id(connection: &Connection) -> Result<i64, Failure> {
    Ok(connection.prepare_cached("SELECT coalesce(max(id), 0) FROM memory_items")?.query_row([], |row| row.get(0))?)
}

/// Runs `delete`, which removes rows from `memory_items`, as schema V10 needs every
/// removal done: the usage rows folded first (`fold`: the removal then subtracts only
/// from rows that count its items), and, if it removed the largest id, that id made the
/// floor no new item's id may be at or below.
fn deleting<T>(connection: &Connection, delete: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    fold(connection)?;
    let before = largest_id(connection)?;
    let value = delete()?;
    if largest_id(connection)? < before {
        connection.prepare_cached("UPDATE memory_ids SET floor = max(floor, ?1)")?.execute([before])?;
    }
    Ok(value)
}

/// What a batch of items being indexed writes at its end (`flush`): their blocks'
/// widened ranges (`blocks::Pending`), and their full-text rows. FTS5 writes the terms
/// it holds in memory to disk at every statement savepoint, and most of the other
/// search rows' statements open one: full-text rows written among them made a segment
/// of one item each (and the merges after), written after them a batch makes one.
#[derive(Default)]
pub(crate) struct IndexBatch {
    blocks: blocks::Pending,
    /// (item id, its terms space-joined — empty for none, an earlier value's row to
    /// delete first).
    texts: Vec<(i64, String, bool)>,
}

impl IndexBatch {
    /// Notes that item `id` is gone: its full-text row is deleted at `flush`, its other
    /// search rows now.
    pub(crate) fn forget(&mut self, connection: &Connection, id: i64) -> Result<(), Failure> {
        delete_item_rows(connection, id)?;
        self.texts.push((id, String::new(), true));
        Ok(())
    }

    pub(crate) fn flush(self, connection: &Connection) -> Result<(), Failure> {
        let mut delete = connection.prepare_cached("DELETE FROM memory_terms WHERE rowid = ?1")?;
        let mut insert = connection.prepare_cached("INSERT INTO memory_terms (rowid, terms) VALUES (?1, ?2)")?;
        for (id, terms, replacing) in &self.texts {
            if *replacing {
                delete.execute([id])?;
            }
            if !terms.is_empty() {
                insert.execute((id, terms))?;
            }
        }
        self.blocks.flush(connection)
    }
}

/// Deletes item `id`'s search rows but its full-text row (which `IndexBatch::flush`
/// deletes): the one list of them, for an item gone and an item replaced.
fn delete_item_rows(connection: &Connection, id: i64) -> Result<(), Failure> {
    for table in ["memory_fields", "memory_term_counts", "memory_updated"] {
        connection.prepare_cached(&format!("DELETE FROM {table} WHERE item = ?1"))?.execute([id])?;
    }
    Ok(())
}

/// An item as the search file places it: its id, and where it stands in the key order
/// and the updated order.
pub(crate) struct Indexed<'a> {
    pub(crate) id: i64,
    pub(crate) tenant: &'a str,
    pub(crate) namespace: &'a str,
    pub(crate) key: &'a str,
    pub(crate) updated_at: i64,
}

/// Writes the search rows of item `at` (after deleting the ones an earlier value left,
/// if `replacing`); its full-text row and its block's ranges when `batch` is flushed.
pub(crate) fn index_item(
    connection: &Connection,
    batch: &mut IndexBatch,
    at: &Indexed<'_>,
    value: &JsonText,
    replacing: bool,
) -> Result<(), Failure> {
    let Indexed { id, tenant, namespace, key, updated_at } = *at;
    if replacing {
        delete_item_rows(connection, id)?;
    }
    connection
        .prepare_cached(
            "INSERT OR REPLACE INTO memory_updated (item, tenant, updated_at, namespace, key) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute((id, tenant, updated_at, namespace, key))?;
    let mut insert_field = connection.prepare_cached(
        "INSERT OR REPLACE INTO memory_fields (item, tenant, field, kind, sort) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    let fields = fields::value_fields(value);
    for (field, kind, sort) in &fields {
        insert_field.execute((id, tenant, field, kind, sort))?;
    }
    batch.blocks.note(connection, tenant, namespace, key, &fields)?;
    let terms = scoped::index_terms(value);
    insert_term_counts(connection, id, tenant, namespace, key, &terms.words)?;
    batch.texts.push((id, terms.all().collect::<Vec<_>>().join(" "), replacing));
    Ok(())
}

/// A stored value, parsed again (it was valid when stored).
pub(crate) fn stored_value(value: String) -> Result<JsonText, Failure> {
    let raw = serde_json::value::RawValue::from_string(value).map_err(|_| corrupt("value"))?;
    Ok(JsonText::from_trusted_raw(raw))
}

/// Does this search read the search rows (a full-text query, a filter condition the
/// field index answers, or the updated order, whose index is there from schema V11)?
/// Only those read the search file.
fn reads_search_rows(search: &MemorySearch) -> bool {
    search.query.is_some() || !pushed_down(search).is_empty() || search.order == SearchOrder::UpdatedAt
}

/// Deletes the rows `condition` selects from `memory_items`, recording each change
/// with the item's position (its search rows go when the change is applied,
/// `search.rs`), returning the count and bytes of the charged items removed, computed in
/// SQL. `condition` is over `m`.
fn delete_where(connection: &Connection, condition: &str, params: &Params) -> Result<(u64, u64), Failure> {
    let (rows, items, bytes): (i64, i64, i64) = connection
        .prepare_cached(&format!(
            "SELECT count(*), coalesce(sum({CHARGED}), 0), coalesce(sum(CASE WHEN {CHARGED} THEN m.bytes END), 0) \
             FROM memory_items AS m WHERE {condition}"
        ))?
        .query_row(params_from_iter(params.0.iter()), |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
    if rows == 0 {
        return Ok((0, 0));
    }
    connection
        .prepare_cached(&format!(
            "INSERT INTO memory_changes (item, fresh, tenant, namespace, key) \
             SELECT m.id, 0, m.tenant, m.namespace, m.key FROM memory_items AS m WHERE {condition}"
        ))?
        .execute(params_from_iter(params.0.iter()))?;
    deleting(connection, || {
        let delete =
            format!("DELETE FROM memory_items WHERE id IN (SELECT m.id FROM memory_items AS m WHERE {condition})");
        Ok(connection.prepare_cached(&delete)?.execute(params_from_iter(params.0.iter()))?)
    })?;
    Ok((items as u64, bytes as u64))
}

/// Deletes the items bound to a session being removed (inside the removal's transaction).
pub(crate) fn remove_bound_in(connection: &Connection, tenant: &TenantId, session: &SessionId) -> Result<(), Failure> {
    let mut params = Params::default();
    let condition = format!(
        "m.tenant = {} AND m.bound_to = {}",
        params.push(tenant.as_str().to_owned()),
        params.push(session.as_str().to_owned())
    );
    let (items, bytes) = delete_where(connection, &condition, &params)?;
    add_usage(connection, tenant.as_str(), -(items as i64), -(bytes as i64))
}

/// A row a delete by id removes: its id, tenant, namespace and bytes.
struct Doomed {
    id: i64,
    tenant: String,
    namespace: String,
    bytes: i64,
}

/// Deletes rows by id (at most a sweep's `limit`), recording each change (as
/// `delete_where`), with their usage. Returns what each tenant lost of its charged items
/// (berth's own bookkeeping goes uncounted, as it was never charged).
fn delete_ids(connection: &Connection, rows: &[Doomed]) -> Result<BTreeMap<String, Removed>, Failure> {
    let mut removed: BTreeMap<String, Removed> = BTreeMap::new();
    deleting(connection, || {
        for row in rows {
            connection
                .prepare_cached(
                    "INSERT INTO memory_changes (item, fresh, tenant, namespace, key) \
                     SELECT id, 0, tenant, namespace, key FROM memory_items WHERE id = ?1",
                )?
                .execute([row.id])?;
            connection.prepare_cached("DELETE FROM memory_items WHERE id = ?1")?.execute([row.id])?;
            if !row.namespace.starts_with(scoped::SYSTEM_NAMESPACES) {
                removed.entry(row.tenant.clone()).or_default().add(&row.namespace, usage_count(row.bytes)?);
            }
        }
        Ok(())
    })?;
    for (tenant, lost) in &removed {
        add_usage(connection, tenant, -(lost.items as i64), -(lost.bytes as i64))?;
    }
    Ok(removed)
}

/// The rows `sql` selects as (id, tenant, namespace, bytes), for `delete_ids`.
fn doomed_rows(connection: &Connection, sql: &str, params: &Params) -> Result<Vec<Doomed>, Failure> {
    let mut statement = connection.prepare_cached(sql)?;
    let rows = statement.query_map(params_from_iter(params.0.iter()), |row| {
        Ok(Doomed { id: row.get(0)?, tenant: row.get(1)?, namespace: row.get(2)?, bytes: row.get(3)? })
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// Appends the audit record of a sweep's batch for each tenant it removed from.
fn audit_removed(
    connection: &Connection,
    removed: &BTreeMap<String, Removed>,
    audit: &SweepAudit,
) -> Result<(), Failure> {
    for (tenant, lost) in removed {
        let tenant =
            TenantId::parse(tenant).map_err(|_| Failure::Corrupt("stored memory item has an invalid tenant".into()))?;
        append_audit_in(connection, audit(&tenant, lost))?;
    }
    Ok(())
}

fn limit_column(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// Where a search page's rows come from.
#[derive(Clone, Copy)]
enum Driver<'a> {
    /// The ordered index of the prefix, from the cursor (testing the query's terms by
    /// membership when `text` is given).
    Order { text: Option<&'a str> },
    /// The few items holding the query's terms (`memory_terms`), sorted by SQLite.
    Text(&'a str),
    /// The few items a pushed-down condition matches (`memory_fields`): its position
    /// among `pushed_down`'s (by position, not field name: a filter may hold several
    /// conditions on one field, each of which must still be tested).
    Field(usize),
}

#[cfg(test)]
thread_local! {
    /// The SQLite VM steps of this thread's search statements (tests bound a walk's work).
    pub(crate) static WALK_STEPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// One search page: from the few matches of a selective full-text query or filter
/// condition when there is one (sorted by SQLite), else by walking the ordered index.
/// Relevance needs every match's score: the matches are scored here.
fn search_in(
    connection: &Connection,
    tenant: &TenantId,
    search: &MemorySearch,
    now: Timestamp,
) -> Result<Vec<MemoryItem>, Failure> {
    if let Some(query) = &search.query {
        let expression = match_expression(query);
        if search.order == SearchOrder::Relevance {
            if let (true, [term]) = (query.decided_by_index(), query.index_terms()) {
                return search_by_term_rank(connection, tenant, search, term, now);
            }
            return search_by_relevance(connection, tenant, search, query, &expression, now);
        }
        let driver = text_driver(connection, &expression)?;
        return walk_in_order(connection, tenant, search, driver, None, now);
    }
    match selective_condition(connection, tenant, search)? {
        Some(driving) => search_in_order(connection, tenant, search, Driver::Field(driving), None, None, now),
        None => walk_in_order(connection, tenant, search, Driver::Order { text: None }, None, now),
    }
}

/// How a key- or updated-order page finds a full-text query's matches: read whole when
/// there are few, else by walking the ordered index and testing membership.
fn text_driver<'a>(connection: &Connection, expression: &'a str) -> Result<Driver<'a>, Failure> {
    let matches: i64 = connection
        .prepare_cached("SELECT count(*) FROM memory_terms WHERE memory_terms MATCH ?1")?
        .query_row([expression], |row| row.get(0))?;
    Ok(if matches <= FEW_TEXT_MATCHES { Driver::Text(expression) } else { Driver::Order { text: Some(expression) } })
}

/// A pushed-down condition as SQL over `memory_fields` aliased `f`.
fn field_condition(
    tenant: &TenantId,
    field: &str,
    alternatives: &[fields::Alternative],
    f: &str,
    params: &mut Params,
) -> String {
    let (tenant_is, field_is) = (params.push(tenant.as_str().to_owned()), params.push(field.to_owned()));
    let alternatives: Vec<String> = alternatives
        .iter()
        .map(|alternative| {
            let (kind, sort) = (params.push(alternative.kind.to_owned()), params.push(alternative.sort.clone()));
            format!("({f}.kind = {kind} AND {f}.sort {} {sort})", alternative.op)
        })
        .collect();
    let any = if alternatives.is_empty() { "0".to_owned() } else { alternatives.join(" OR ") };
    format!("{f}.tenant = {tenant_is} AND {f}.field = {field_is} AND ({any})")
}

/// The filter's conditions that the field index can answer.
fn pushed_down(search: &MemorySearch) -> Vec<(&str, Vec<fields::Alternative>)> {
    let conditions = search.filter.conditions.iter();
    conditions.filter_map(|c| fields::pushdown(c).map(|alternatives| (c.field.as_str(), alternatives))).collect()
}

/// The position (among `pushed_down`'s) of the pushed-down condition matching the
/// fewest items, if fewer than `FEW_FIELD_MATCHES` (counted through the index, at most
/// that many entries each).
fn selective_condition(
    connection: &Connection,
    tenant: &TenantId,
    search: &MemorySearch,
) -> Result<Option<usize>, Failure> {
    let mut best: Option<(i64, usize)> = None;
    for (position, (field, alternatives)) in pushed_down(search).into_iter().enumerate() {
        let mut params = Params::default();
        let condition = field_condition(tenant, field, &alternatives, "f", &mut params);
        let sql = format!(
            "SELECT count(*) FROM (SELECT 1 FROM memory_fields AS f WHERE {condition} LIMIT {})",
            params.push(FEW_FIELD_MATCHES)
        );
        let count: i64 =
            connection.prepare_cached(&sql)?.query_row(params_from_iter(params.0.iter()), |row| row.get(0))?;
        if count < FEW_FIELD_MATCHES && best.as_ref().is_none_or(|(fewest, _)| count < *fewest) {
            best = Some((count, position));
        }
    }
    Ok(best.map(|(_, position)| position))
}

/// Does the prefix hold at least `at_least` items (live or not)? Counted through the
/// key index, reading at most that many entries.
fn prefix_holds(
    connection: &Connection,
    tenant: &TenantId,
    prefix: &Namespace,
    at_least: i64,
) -> Result<bool, Failure> {
    let mut params = Params::default();
    let tenant_is = params.push(tenant.as_str().to_owned());
    let within = within_prefix(prefix, &mut params);
    let sql = format!(
        "SELECT count(*) FROM (SELECT 1 FROM memory_items AS m WHERE m.tenant = {tenant_is} AND {within} LIMIT {})",
        params.push(at_least)
    );
    let count: i64 = connection.prepare_cached(&sql)?.query_row(params_from_iter(params.0.iter()), |row| row.get(0))?;
    Ok(count >= at_least)
}

/// A one-word ASCII query in relevance order (count descending, then namespace and key;
/// a term's count is the item's score, `TextQuery::score` of one word), in two parts:
/// the items where the term repeats, by a walk of `memory_term_counts_by_rank` from the
/// cursor; then, while the page has room, those where it occurs once (the matches
/// without a row, schema V6), in key order.
fn search_by_term_rank(
    connection: &Connection,
    tenant: &TenantId,
    search: &MemorySearch,
    term: &str,
    now: Timestamp,
) -> Result<Vec<MemoryItem>, Failure> {
    let repeats_left = search.cursor.as_ref().is_none_or(|cursor| cursor.rank >= REPEATED as u64);
    let mut page = if repeats_left { search_repeats(connection, tenant, search, term, now)? } else { Vec::new() };
    if page.len() < search.limit {
        let once = MemorySearch {
            limit: search.limit - page.len(),
            // A cursor among the repeats is behind every single occurrence.
            cursor: search.cursor.clone().filter(|_| !repeats_left),
            ..search.clone()
        };
        let expression = match_expression(once.query.as_ref().expect("a one-term query"));
        let driver = text_driver(connection, &expression)?;
        page.extend(walk_in_order(connection, tenant, &once, driver, Some(term), now)?);
    }
    Ok(page)
}

/// The first part of `search_by_term_rank`: the items holding `term` at least twice,
/// walked in relevance order from the cursor.
fn search_repeats(
    connection: &Connection,
    tenant: &TenantId,
    search: &MemorySearch,
    term: &str,
    now: Timestamp,
) -> Result<Vec<MemoryItem>, Failure> {
    let mut params = Params::default();
    let (tenant_is, term_is) = (params.push(tenant.as_str().to_owned()), params.push(term.to_owned()));
    let mut conditions = vec![
        format!("c.tenant = {tenant_is}"),
        format!("c.term = {term_is}"),
        namespace_within("c.namespace", &search.prefix, &mut params),
        live(now, &mut params),
    ];
    if let Some(cursor) = &search.cursor {
        let rank = params.push(i64::try_from(cursor.rank).unwrap_or(i64::MAX));
        let (namespace, key) = (params.push(cursor.namespace.clone()), params.push(cursor.key.clone()));
        conditions
            .push(format!("c.count <= {rank} AND (c.count < {rank} OR (c.namespace, c.key) > ({namespace}, {key}))"));
    }
    let mut sql = format!(
        "SELECT {ITEM_COLUMNS}, c.count FROM memory_term_counts AS c INDEXED BY memory_term_counts_by_rank \
         CROSS JOIN memory_items AS m ON m.id = c.item WHERE {} ORDER BY c.count DESC, c.namespace, c.key",
        conditions.join(" AND ")
    );
    if search.filter.conditions.is_empty() {
        sql.push_str(&format!(" LIMIT {}", params.push(limit_column(search.limit))));
    }
    page_of_rows(connection, &sql, &params, search, |row, _| Ok(Some(row.get::<_, i64>(10)? as u64)))
}

/// Runs a search statement whose rows come in the search's order, keeping the items
/// that pass the filter and follow the cursor, until `limit`; `score` is a row's
/// relevance, `None` for a candidate of the index that the query does not match.
fn page_of_rows(
    connection: &Connection,
    sql: &str,
    params: &Params,
    search: &MemorySearch,
    score: impl Fn(&Row<'_>, &MemoryItem) -> Result<Option<u64>, Failure>,
) -> Result<Vec<MemoryItem>, Failure> {
    let mut statement = connection.prepare_cached(sql)?;
    let mut rows = statement.query(params_from_iter(params.0.iter()))?;
    let mut page = Vec::new();
    while page.len() < search.limit {
        let Some(row) = rows.next()? else { break };
        let (_, item) = item_from_row(row)?;
        if !search.filter.matches(&item.value) {
            continue;
        }
        let Some(score) = score(row, &item)? else { continue };
        if search.after_cursor(&item, score) {
            page.push(item);
        }
    }
    drop(rows);
    #[cfg(test)]
    WALK_STEPS.with(|steps| steps.set(steps.get() + statement.reset_status(rusqlite::StatementStatus::VmStep) as u64));
    Ok(page)
}

/// Every live item in the prefix holding the query's index terms, read through the
/// full-text index, scored (from the stored terms when they decide, else from the
/// value: `TextQuery::score`, which also drops the candidates that do not match) and
/// paged here.
fn search_by_relevance(
    connection: &Connection,
    tenant: &TenantId,
    search: &MemorySearch,
    query: &TextQuery,
    expression: &str,
    now: Timestamp,
) -> Result<Vec<MemoryItem>, Failure> {
    let mut params = Params::default();
    let matching = params.push(expression.to_owned());
    let tenant_is = params.push(tenant.as_str().to_owned());
    let (within, live) = (within_prefix(&search.prefix, &mut params), live(now, &mut params));
    let sql = format!(
        "SELECT {ITEM_COLUMNS}, f.terms FROM memory_terms AS f CROSS JOIN memory_items AS m ON m.id = f.rowid \
         WHERE memory_terms MATCH {matching} AND m.tenant = {tenant_is} AND {within} AND {live}"
    );
    let mut statement = connection.prepare_cached(&sql)?;
    let mut rows = statement.query(params_from_iter(params.0.iter()))?;
    let mut scored: Vec<(MemoryItem, u64)> = Vec::new();
    while let Some(row) = rows.next()? {
        let (_, item) = item_from_row(row)?;
        let score = match query.decided_by_index() {
            true => query.score_terms(row.get_ref(10)?.as_str()?.split(' ')),
            false => query.score_value(&item.value),
        };
        let Some(score) = score else { continue };
        if search.filter.matches(&item.value) && search.after_cursor(&item, score) {
            scored.push((item, score));
        }
    }
    scored.sort_by(|a, b| search.compare((&a.0, a.1), (&b.0, b.1)));
    scored.truncate(search.limit);
    Ok(scored.into_iter().map(|(item, _)| item).collect())
}

/// `search_in_order`, and for a walk of the key order that a pushed-down condition
/// cannot drive (it matches too many items) and no full-text query narrows, a walk of
/// only the spans of blocks where an item may pass every pushed-down condition
/// (`blocks.rs`, schema V7): a filter whose matches all lie far down the order no longer
/// tests every item before them.
fn walk_in_order(
    connection: &Connection,
    tenant: &TenantId,
    search: &MemorySearch,
    driver: Driver<'_>,
    once: Option<&str>,
    now: Timestamp,
) -> Result<Vec<MemoryItem>, Failure> {
    let pushed = pushed_down(search);
    // Not with a full-text query: each span's walk would build the query's match set
    // again (a common term's is tens of thousands of ids).
    if !matches!(driver, Driver::Order { text: None }) || search.order == SearchOrder::UpdatedAt || pushed.is_empty() {
        return search_in_order(connection, tenant, search, driver, once, None, now);
    }
    let from: Position = match &search.cursor {
        Some(cursor) => (cursor.namespace.clone(), cursor.key.clone()),
        None => (search.prefix.as_str().to_owned(), String::new()),
    };
    let test = |params: &mut Params| {
        let conditions: Vec<String> = pushed
            .iter()
            .map(|(field, alternatives)| {
                let field_is = params.push((*field).to_owned());
                let any: Vec<String> = alternatives
                    .iter()
                    .map(|alternative| {
                        let (kind, sort) =
                            (params.push(alternative.kind.to_owned()), params.push(alternative.sort.clone()));
                        let within = match alternative.op {
                            "=" => format!("r.low <= {sort} AND r.high >= {sort}"),
                            ">" | ">=" => format!("r.high {} {sort}", alternative.op),
                            _ => format!("r.low {} {sort}", alternative.op),
                        };
                        format!("(r.kind = {kind} AND {within})")
                    })
                    .collect();
                let any = if any.is_empty() { "0".to_owned() } else { any.join(" OR ") };
                format!(
                    "EXISTS (SELECT 1 FROM memory_block_ranges AS r WHERE r.tenant = b.tenant \
                     AND r.namespace = b.namespace AND r.key = b.key AND r.field = {field_is} AND ({any}))"
                )
            })
            .collect();
        conditions.join(" AND ")
    };
    let mut page: Vec<MemoryItem> = Vec::new();
    let until = format!("{}0", search.prefix.as_str());
    blocks::spans(connection, tenant.as_str(), &from, &until, test, |low, high| {
        let rest = MemorySearch { limit: search.limit - page.len(), ..search.clone() };
        page.extend(search_in_order(connection, tenant, &rest, driver, once, Some((low, high)), now)?);
        Ok(page.len() >= search.limit)
    })?;
    Ok(page)
}

/// The rows of `driver` in the search's order (key or updated; key for relevance) from
/// the cursor, keeping those that pass the filter, until `limit`. With `once`, only
/// items where that term does not repeat (no `memory_term_counts` row); with `span`,
/// only items from its first position (inclusive) to its second (exclusive).
fn search_in_order(
    connection: &Connection,
    tenant: &TenantId,
    search: &MemorySearch,
    driver: Driver<'_>,
    once: Option<&str>,
    span: Option<(&Position, Option<&Position>)>,
    now: Timestamp,
) -> Result<Vec<MemoryItem>, Failure> {
    let mut params = Params::default();
    let pushed = pushed_down(search);
    let mut conditions = Vec::new();
    // A large prefix in the updated order is walked in the search file's updated index
    // (schema V11), which stops after `limit` items; a small one is read whole and sorted.
    let walks_updated = matches!(driver, Driver::Order { .. })
        && search.order == SearchOrder::UpdatedAt
        && prefix_holds(connection, tenant, &search.prefix, SMALL_PREFIX)?;
    // The table whose columns give the updated order.
    let ordered = if walks_updated { "u" } else { "m" };
    let from = match &driver {
        Driver::Order { .. } if walks_updated => {
            // `CROSS JOIN` keeps SQLite walking the index, the items looked up by id.
            "memory_updated AS u CROSS JOIN memory_items AS m ON m.id = u.item".to_owned()
        }
        Driver::Order { .. } => "memory_items AS m".to_owned(),
        Driver::Text(expression) => {
            conditions.push(format!("memory_terms MATCH {}", params.push(expression.to_string())));
            "memory_terms AS x CROSS JOIN memory_items AS m ON m.id = x.rowid".to_owned()
        }
        Driver::Field(driving) => {
            let (field, alternatives) = &pushed[*driving];
            conditions.push(field_condition(tenant, field, alternatives, "f", &mut params));
            // `CROSS JOIN` keeps SQLite from walking the whole prefix instead.
            "memory_fields AS f CROSS JOIN memory_items AS m ON m.id = f.item".to_owned()
        }
    };
    let tenant_is = params.push(tenant.as_str().to_owned());
    conditions.push(format!("m.tenant = {tenant_is}"));
    if walks_updated {
        conditions.push(format!("u.tenant = {tenant_is}"));
    }
    // A walk of the key order from a position inside the prefix (a span's first, or the
    // cursor) must start there: SQLite then seeks the (tenant, namespace, key) index to
    // it instead of scanning from the prefix's first item, so the prefix's lower bound
    // is kept from the index (`+`).
    let prefix_start: Position = (search.prefix.as_str().to_owned(), String::new());
    let span_low = span.map(|(low, _)| low.max(&prefix_start));
    let cursor_inside = search.cursor.as_ref().is_some_and(|cursor| {
        (cursor.namespace.as_str(), cursor.key.as_str()) >= (prefix_start.0.as_str(), prefix_start.1.as_str())
    });
    let seeks = matches!(driver, Driver::Order { .. })
        && search.order != SearchOrder::UpdatedAt
        && (span_low.is_some() || cursor_inside);
    let within = within_prefix(&search.prefix, &mut params);
    // `within` begins with the prefix's lower bound (`m.namespace >= …`): the one term `+` keeps from the index.
    conditions.push(if seeks { format!("+{within}") } else { within });
    conditions.push(live(now, &mut params));
    if let Some(cursor) = &search.cursor {
        let (namespace, key) = (params.push(cursor.namespace.clone()), params.push(cursor.key.clone()));
        conditions.push(match search.order {
            SearchOrder::UpdatedAt => {
                let rank = params.push(i64::try_from(cursor.rank).unwrap_or(i64::MAX));
                format!(
                    "{ordered}.updated_at <= {rank} AND ({ordered}.updated_at < {rank} \
                     OR ({ordered}.namespace, {ordered}.key) > ({namespace}, {key}))"
                )
            }
            _ => format!("(m.namespace, m.key) > ({namespace}, {key})"),
        });
    }
    if let Driver::Order { text: Some(expression) } = driver {
        // `+` keeps the planner walking the ordered index (the set is built once).
        let matching = params.push(expression.to_owned());
        conditions.push(format!("+m.id IN (SELECT rowid FROM memory_terms WHERE memory_terms MATCH {matching})"));
    }
    if let (Some(low), Some((_, high))) = (span_low, span) {
        let (namespace, key) = (params.push(low.0.clone()), params.push(low.1.clone()));
        conditions.push(format!("(m.namespace, m.key) >= ({namespace}, {key})"));
        if let Some(high) = high {
            let (namespace, key) = (params.push(high.0.clone()), params.push(high.1.clone()));
            conditions.push(format!("(m.namespace, m.key) < ({namespace}, {key})"));
        }
    }
    if let Some(term) = once {
        let (tenant_is, term_is) = (params.push(tenant.as_str().to_owned()), params.push(term.to_owned()));
        conditions.push(format!(
            "NOT EXISTS (SELECT 1 FROM memory_term_counts AS c WHERE c.item = m.id AND c.term = {term_is} \
             AND c.tenant = {tenant_is})"
        ));
    }
    for (position, (field, alternatives)) in pushed.iter().enumerate() {
        if matches!(driver, Driver::Field(driving) if driving == position) {
            continue;
        }
        // Tested per row through the field index's key: cheaper than reading the value.
        let condition = field_condition(tenant, field, alternatives, "g", &mut params);
        conditions.push(format!("EXISTS (SELECT 1 FROM memory_fields AS g WHERE g.item = m.id AND {condition})"));
    }
    let order = match search.order {
        SearchOrder::UpdatedAt => format!("{ordered}.updated_at DESC, {ordered}.namespace, {ordered}.key"),
        _ => "m.namespace, m.key".to_owned(),
    };
    let mut sql = format!("SELECT {ITEM_COLUMNS} FROM {from} WHERE {} ORDER BY {order}", conditions.join(" AND "));
    // Pushed-down conditions are exact, and so is the full-text index for a query of
    // ASCII words: with only those, SQL's count is the page's.
    let text_exact = search.query.as_ref().is_none_or(TextQuery::decided_by_index);
    if pushed.len() == search.filter.conditions.len() && text_exact {
        sql.push_str(&format!(" LIMIT {}", params.push(limit_column(search.limit))));
    }
    page_of_rows(connection, &sql, &params, search, |_, item| {
        Ok(match &search.query {
            // The exact check of the index's candidates (`TextQuery::score`).
            Some(query) => query.score_value(&item.value),
            None => Some(0),
        })
    })
}

/// One namespace page: a skip-scan of the (tenant, namespace) index, one seek per
/// namespace listed or passed over (never every item of a namespace).
fn namespaces_in(
    connection: &Connection,
    tenant: &TenantId,
    query: &NamespaceQuery,
    now: Timestamp,
) -> Result<Vec<Namespace>, Failure> {
    let p = query.prefix.as_str();
    let end = format!("{p}0");
    let seek = |bound: &str, inclusive: bool| -> Result<Option<String>, Failure> {
        let comparison = if inclusive { ">=" } else { ">" };
        let sql = format!(
            "SELECT m.namespace FROM memory_items AS m WHERE m.tenant = ?1 AND m.namespace {comparison} ?2 \
             AND m.namespace < ?3 AND (m.expires_at IS NULL OR m.expires_at > ?4) ORDER BY m.namespace LIMIT 1"
        );
        Ok(connection
            .prepare_cached(&sql)?
            .query_row((tenant.as_str(), bound, end.as_str(), time_column(now)), |row| row.get(0))
            .optional()?)
    };
    let mut out: Vec<Namespace> = Vec::new();
    let mut next = seek(p, true)?;
    while let Some(found) = next {
        if out.len() >= query.limit {
            break;
        }
        if !scoped::is_within(&found, p) {
            next = seek(&found, false)?;
            continue;
        }
        let namespace = Namespace::parse(&found).map_err(|_| corrupt("namespace"))?;
        let shown = match query.max_depth {
            Some(depth) => namespace.truncated(depth),
            None => namespace.clone(),
        };
        let fresh = out.last() != Some(&shown) && query.cursor.as_deref().is_none_or(|cursor| shown.as_str() > cursor);
        // Below a shown namespace `t` other than the found one, every namespace up to
        // `t0` is inside `t` and shows as `t`: skip them in one seek.
        next = if shown.as_str() == found { seek(&found, false)? } else { seek(&format!("{shown}0"), true)? };
        if fresh {
            out.push(shown);
        }
    }
    Ok(out)
}

/// One put inside the caller's transaction (`memory_put`, and each of `memory_apply`'s):
/// nothing is written when its plan is refused. Its search rows come later (`search.rs`).
fn put_in(
    transaction: &Connection,
    tenant: &TenantId,
    put: &MemoryPut,
    quota: &MemoryQuota,
    now: Timestamp,
) -> Result<MemoryItem, Failure> {
    let stored = stored_item(transaction, tenant, &put.namespace, &put.key)?;
    let previous = stored.as_ref().map(|(_, item)| item);
    let bound = usage_bound(transaction, tenant)?;
    let quota = bound.quota.over(quota);
    let (plan, counted, past) = match put.plan(previous, &bound.usage, &quota, now) {
        Ok(plan) => (plan, bound.counted, bound.past),
        // Over the bound proves nothing: the exact usage decides (and names the figure).
        Err(Error::LimitExceeded { what: Limit::MemoryItems | Limit::MemoryBytes, .. }) => {
            let Usage { usage, counted, past, .. } = usage_in(transaction, tenant)?;
            (put.plan(previous, &usage, &quota, now)?, counted, past)
        }
        Err(error) => return Err(error.into()),
    };
    let replacing = stored.as_ref().map(|(id, _)| *id);
    write_item(transaction, tenant, &plan.item, replacing)?;
    match replacing {
        // A counted item's bytes changed: its row says so.
        Some(id) if id <= counted => add_usage(transaction, tenant.as_str(), 0, plan.bytes_change)?,
        // Past `counted`: usage reads the item itself.
        Some(_) => {}
        // New: past `counted` (its id is past every id given), so it writes no usage.
        None if past + 1 >= FOLD_AT => fold(transaction)?,
        None => {}
    }
    Ok(plan.item)
}

/// `memory_import` of each of `items` inside the caller's transaction (their search rows
/// are written by the caller's catch-up, after the commit). The callers have checked
/// each item's limits (`MemoryItem::check`) before taking the write lock.
fn import_in(
    transaction: &Connection,
    tenant: &TenantId,
    items: &[MemoryItem],
    quota: &MemoryQuota,
) -> Result<(), Failure> {
    // The usage once, then kept here: the new items write none (schema V10), and are
    // added to the rows at the end.
    let Usage { mut usage, quota: own, .. } = usage_in(transaction, tenant)?;
    let quota = own.over(quota);
    for item in items {
        if stored_item(transaction, tenant, &item.namespace, &item.key)?.is_some() {
            let id = format!("{}:{}", item.namespace, item.key);
            return Err(Error::AlreadyExists { what: "memory item", id }.into());
        }
        if item.is_charged() {
            usage.check_put(&quota, true, 0, item.bytes())?;
            usage.items += 1;
            usage.bytes += item.bytes();
        }
        write_item(transaction, tenant, item, None)?;
    }
    fold(transaction)
}

impl SqliteCatalog {
    /// After an import: its search rows are written now (a bulk import's indexing is
    /// part of its cost, not left to the puts after it). The items are stored already,
    /// so a failure here is not the import's: searches apply the changes themselves.
    async fn imported(&self) {
        if let Err(error) = self.catch_up("import memory items").await {
            tracing::warn!(%error, "writing imported items' search rows failed; searches will");
            self.index_soon();
        }
    }

    /// Imports several items (`memory_import` each) in one transaction: all or none.
    /// For restores and seeding. Returns once their search rows are written too.
    pub async fn memory_import_many(
        &self,
        tenant: &TenantId,
        items: Vec<MemoryItem>,
        quota: &MemoryQuota,
    ) -> Result<()> {
        items.iter().try_for_each(MemoryItem::check)?;
        let (tenant, quota) = (tenant.clone(), *quota);
        self.write("import memory items", move |transaction| import_in(transaction, &tenant, &items, &quota)).await?;
        self.imported().await;
        Ok(())
    }
}

#[async_trait]
impl MemoryStore for SqliteCatalog {
    async fn memory_put(
        &self,
        tenant: &TenantId,
        put: &MemoryPut,
        now: Timestamp,
        quota: &MemoryQuota,
    ) -> Result<MemoryItem> {
        put.check()?;
        let (tenant, put, quota) = (tenant.clone(), put.clone(), *quota);
        let item =
            self.write("put memory item", move |transaction| put_in(transaction, &tenant, &put, &quota, now)).await?;
        self.index_soon();
        Ok(item)
    }

    async fn memory_apply(
        &self,
        tenant: &TenantId,
        puts: &[MemoryPut],
        now: Timestamp,
        quota: &MemoryQuota,
    ) -> Result<u64> {
        puts.iter().try_for_each(MemoryPut::check)?;
        let (tenant, puts, quota) = (tenant.clone(), puts.to_vec(), *quota);
        // One transaction: every write of the batch commits together. Relaxed (no fsync
        // of its own): the writes are durable in the log already, and the marker that
        // says which of them may be unapplied is durable too — a commit lost to a power
        // failure takes the marker's advance with it, so the durable marker still covers
        // the lost writes and finishing it applies them (`berth_service::carried`).
        let applied = self
            .write_relaxed("apply carried memory writes", move |transaction| {
                let mut applied = 0;
                for put in &puts {
                    match put_in(transaction, &tenant, put, &quota, now) {
                        Ok(_) => applied += 1,
                        Err(Failure::Berth(Error::RevisionConflict { .. })) => {}
                        Err(failure) => return Err(failure),
                    }
                }
                Ok(applied)
            })
            .await?;
        self.index_soon();
        Ok(applied)
    }

    async fn memory_get(
        &self,
        tenant: &TenantId,
        namespace: &Namespace,
        key: &str,
        now: Timestamp,
        refresh: bool,
    ) -> Result<Option<MemoryItem>> {
        if !refresh {
            return self.read_now("get memory item", |connection| {
                Ok(read_item(connection, tenant, namespace, key)?.filter(|item| item.is_live(now)))
            });
        }
        let (tenant, namespace, key) = (tenant.clone(), namespace.clone(), key.to_owned());
        self.write("get memory item", move |transaction| {
            let stored = stored_item(transaction, &tenant, &namespace, &key)?;
            let Some((id, mut item)) = stored.filter(|(_, item)| item.is_live(now)) else { return Ok(None) };
            if let Some(ttl) = item.ttl_ms {
                item.expires_at = Some(now.plus_ms(ttl));
                transaction
                    .prepare_cached("UPDATE memory_items SET expires_at = ?2 WHERE id = ?1")?
                    .execute((id, item.expires_at.map(time_column)))?;
            }
            Ok(Some(item))
        })
        .await
    }

    async fn memory_delete(
        &self,
        tenant: &TenantId,
        namespace: &Namespace,
        key: &str,
        expected: Option<u64>,
        now: Timestamp,
    ) -> Result<MemoryItem> {
        let (tenant, namespace, key) = (tenant.clone(), namespace.clone(), key.to_owned());
        let item = self
            .write("delete memory item", move |transaction| {
                let stored = stored_item(transaction, &tenant, &namespace, &key)?.filter(|(_, item)| item.is_live(now));
                scoped::check_delete(&namespace, &key, stored.as_ref().map(|(_, item)| item), expected)?;
                let (id, item) = stored.expect("checked above");
                delete_ids(transaction, &[doomed(id, &tenant, &item)])?;
                Ok(item)
            })
            .await?;
        self.index_soon();
        Ok(item)
    }

    async fn memory_delete_audited(
        &self,
        tenant: &TenantId,
        deletes: &[MemoryDelete],
        skip_absent: bool,
        now: Timestamp,
        audit: DeleteAudit,
    ) -> Result<(Vec<MemoryItem>, Option<AuditEntry>)> {
        let (tenant, deletes) = (tenant.clone(), deletes.to_vec());
        let outcome = self
            .write("delete memory items", move |transaction| {
                let mut found = Vec::with_capacity(deletes.len());
                for delete in &deletes {
                    let stored = stored_item(transaction, &tenant, &delete.namespace, &delete.key)?
                        .filter(|(_, item)| item.is_live(now));
                    if delete.takes(stored.as_ref().map(|(_, item)| item), skip_absent)? {
                        found.extend(stored);
                    }
                }
                if found.is_empty() {
                    return Ok((Vec::new(), None));
                }
                let rows: Vec<Doomed> = found.iter().map(|(id, item)| doomed(*id, &tenant, item)).collect();
                delete_ids(transaction, &rows)?;
                let items: Vec<MemoryItem> = found.into_iter().map(|(_, item)| item).collect();
                let entry = append_audit_in(transaction, audit(&items))?;
                Ok((items, Some(entry)))
            })
            .await?;
        self.index_soon();
        Ok(outcome)
    }

    async fn memory_search(&self, tenant: &TenantId, search: &MemorySearch, now: Timestamp) -> Result<Vec<MemoryItem>> {
        search.check()?;
        let (tenant, search) = (tenant.clone(), search.clone());
        if !reads_search_rows(&search) {
            return self.read("search memory", move |connection| search_in(connection, &tenant, &search, now)).await;
        }
        let (tenant_again, search_again) = (tenant.clone(), search.clone());
        // When the search file holds every change of the catalog's snapshot, its rows
        // are exactly the snapshot's items' (`search::current`).
        let page = self
            .read("search memory", move |connection| {
                if !search::current(connection)? {
                    return Ok(None);
                }
                search_in(connection, &tenant, &search, now).map(Some)
            })
            .await?;
        if let Some(page) = page {
            return Ok(page);
        }
        // Else the changes are applied and the page read in one transaction of the
        // index connection (read-your-writes: every change committed before this call).
        self.index_work("search memory", move |connection| {
            // Not synced: a power loss may take it back, and the changes stay until a
            // synced catch-up passes them (`search::Sync`).
            search::catch_up_then(connection, false, |transaction| {
                search_in(transaction, &tenant_again, &search_again, now)
            })
        })
        .await
        .map(|(caught, page)| {
            self.shared.indexer.caught_up(caught);
            page
        })
    }

    async fn memory_namespaces(
        &self,
        tenant: &TenantId,
        query: &NamespaceQuery,
        now: Timestamp,
    ) -> Result<Vec<Namespace>> {
        let (tenant, query) = (tenant.clone(), query.clone());
        self.read("list memory namespaces", move |connection| namespaces_in(connection, &tenant, &query, now)).await
    }

    async fn memory_scan(
        &self,
        tenant: &TenantId,
        after: Option<(&Namespace, &str)>,
        limit: usize,
        now: Timestamp,
    ) -> Result<Vec<MemoryItem>> {
        let tenant = tenant.clone();
        let after = after.map(|(namespace, key)| (namespace.as_str().to_owned(), key.to_owned()));
        self.read("scan memory", move |connection| {
            let mut params = Params::default();
            let tenant_is = params.push(tenant.as_str().to_owned());
            let mut sql = format!("SELECT {ITEM_COLUMNS} FROM memory_items AS m WHERE m.tenant = {tenant_is}");
            sql.push_str(&format!(" AND {}", live(now, &mut params)));
            if let Some((namespace, key)) = after {
                let (namespace, key) = (params.push(namespace), params.push(key));
                sql.push_str(&format!(" AND (m.namespace, m.key) > ({namespace}, {key})"));
            }
            sql.push_str(&format!(" ORDER BY m.namespace, m.key LIMIT {}", params.push(limit_column(limit))));
            let mut statement = connection.prepare_cached(&sql)?;
            let mut rows = statement.query(params_from_iter(params.0.iter()))?;
            let mut items = Vec::new();
            while let Some(row) = rows.next()? {
                items.push(item_from_row(row)?.1);
            }
            Ok(items)
        })
        .await
    }

    async fn memory_forget(
        &self,
        tenant: &TenantId,
        prefix: &Namespace,
        audit: ForgetAudit,
    ) -> Result<(ForgetOutcome, AuditEntry)> {
        let (tenant, prefix) = (tenant.clone(), prefix.clone());
        let forgotten = self
            .write("forget memory", move |transaction| {
                let mut params = Params::default();
                let tenant_is = params.push(tenant.as_str().to_owned());
                let condition = format!("m.tenant = {tenant_is} AND {}", within_prefix(&prefix, &mut params));
                let (items, bytes) = delete_where(transaction, &condition, &params)?;
                add_usage(transaction, tenant.as_str(), -(items as i64), -(bytes as i64))?;
                let outcome = ForgetOutcome { items, bytes };
                let entry = append_audit_in(transaction, audit(&outcome))?;
                Ok((outcome, entry))
            })
            .await?;
        // Not before the forgotten items' search rows are gone from the search file,
        // durably: no term of theirs outlives the call.
        self.catch_up("forget memory").await?;
        Ok(forgotten)
    }

    async fn memory_import(&self, tenant: &TenantId, item: &MemoryItem, quota: &MemoryQuota) -> Result<()> {
        item.check()?;
        let (tenant, item, quota) = (tenant.clone(), item.clone(), *quota);
        self.write("import memory item", move |transaction| {
            import_in(transaction, &tenant, std::slice::from_ref(&item), &quota)
        })
        .await?;
        self.imported().await;
        Ok(())
    }

    async fn memory_usage(&self, tenant: &TenantId) -> Result<MemoryUsage> {
        let tenant = tenant.clone();
        self.read("read memory usage", move |connection| Ok(usage_in(connection, &tenant)?.usage)).await
    }

    async fn memory_quota(&self, tenant: &TenantId) -> Result<TenantQuota> {
        let tenant = tenant.clone();
        self.read("read memory quota", move |connection| {
            let row: Option<(Option<i64>, Option<i64>)> = connection
                .prepare_cached("SELECT items_max, bytes_max FROM memory_usage WHERE tenant = ?1")?
                .query_row([tenant.as_str()], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()?;
            row.map_or(Ok(TenantQuota::default()), |(items, bytes)| stored_quota(items, bytes))
        })
        .await
    }

    async fn set_memory_quota(&self, tenant: &TenantId, quota: &TenantQuota) -> Result<()> {
        let limit = |value: Option<u64>| value.map(|value| i64::try_from(value).unwrap_or(i64::MAX));
        let (tenant, items, bytes) = (tenant.clone(), limit(quota.items), limit(quota.bytes));
        self.write("set memory quota", move |transaction| {
            // A new row counts nothing: the tenant's items are all past `counted` then.
            transaction
                .prepare_cached(
                    "INSERT INTO memory_usage (tenant, items, bytes, items_max, bytes_max) VALUES (?1, 0, 0, ?2, ?3) \
                     ON CONFLICT (tenant) DO UPDATE SET items_max = excluded.items_max, bytes_max = excluded.bytes_max",
                )?
                .execute((tenant.as_str(), items, bytes))?;
            Ok(())
        })
        .await
    }

    async fn memory_bound_count(&self, tenant: &TenantId, session: &SessionId) -> Result<u64> {
        let (tenant, session) = (tenant.clone(), session.clone());
        self.read("count bound memory", move |connection| {
            let count: i64 = connection
                .prepare_cached(&format!(
                    "SELECT count(*) FROM memory_items AS m WHERE m.tenant = ?1 AND m.bound_to = ?2 AND {CHARGED}"
                ))?
                .query_row((tenant.as_str(), session.as_str()), |row| row.get(0))?;
            Ok(count as u64)
        })
        .await
    }

    async fn memory_remove_expired(&self, now: Timestamp, limit: usize, audit: SweepAudit) -> Result<u64> {
        self.write("remove expired memory", move |transaction| {
            let mut params = Params::default();
            let sql = format!(
                "SELECT id, tenant, namespace, bytes FROM memory_items WHERE expires_at IS NOT NULL \
                 AND expires_at <= {} ORDER BY expires_at LIMIT {}",
                params.push(time_column(now)),
                params.push(limit_column(limit))
            );
            let rows = doomed_rows(transaction, &sql, &params)?;
            let removed = delete_ids(transaction, &rows)?;
            audit_removed(transaction, &removed, &audit)?;
            Ok(rows.len() as u64)
        })
        .await
        .inspect(|_| self.index_soon())
    }

    async fn memory_remove_stale(
        &self,
        tenant: &TenantId,
        updated_before: Timestamp,
        limit: usize,
        audit: SweepAudit,
    ) -> Result<u64> {
        // The catalog has no updated-order index (schema V11): the tenant's items are
        // read in key order until `limit` stale ones are found — on a reader, so the
        // writers are not held up by the walk; the write then takes each candidate that
        // is still stale (one replaced meanwhile is not; an id is never given twice).
        // berth's own bookkeeping is not the tenant's memory to retain.
        let (tenant, before) = (tenant.clone(), time_column(updated_before));
        let candidates: Vec<i64> = self
            .read("find stale memory", move |connection| {
                let mut statement = connection.prepare_cached(&format!(
                    "SELECT m.id FROM memory_items AS m WHERE m.tenant = ?1 AND m.updated_at < ?2 AND {CHARGED} LIMIT ?3"
                ))?;
                let ids = statement.query_map((tenant.as_str(), before, limit_column(limit)), |row| row.get(0))?;
                Ok(ids.collect::<rusqlite::Result<Vec<i64>>>()?)
            })
            .await?;
        if candidates.is_empty() {
            return Ok(0);
        }
        self.write("remove stale memory", move |transaction| {
            let mut rows = Vec::with_capacity(candidates.len());
            let mut still = transaction.prepare_cached(
                "SELECT id, tenant, namespace, bytes FROM memory_items WHERE id = ?1 AND updated_at < ?2",
            )?;
            for id in candidates {
                let row = still.query_row((id, before), |row| {
                    Ok(Doomed { id: row.get(0)?, tenant: row.get(1)?, namespace: row.get(2)?, bytes: row.get(3)? })
                });
                rows.extend(row.optional()?);
            }
            let removed = delete_ids(transaction, &rows)?;
            audit_removed(transaction, &removed, &audit)?;
            Ok(rows.len() as u64)
        })
        .await
        .inspect(|_| self.index_soon())
    }
}

/// The `Doomed` row of a stored item.
fn doomed(id: i64, tenant: &TenantId, item: &MemoryItem) -> Doomed {
    Doomed {
        id,
        tenant: tenant.as_str().to_owned(),
        namespace: item.namespace.as_str().to_owned(),
        bytes: item.bytes() as i64,
    }
}
