//! Scoped memory on PostgreSQL (`MemoryStore`): the tables of migration 4 (`schema.rs`).
//!
//! - Every call is one transaction under the tenant's `SET LOCAL berth.tenant`
//!   (`Database::with_tenant`), so row-level security bounds it like every catalog call.
//! - Every change locks the tenant's `memory_usage` row first (creating it at zero),
//!   then reads and writes items: a put's revision check, the quota check and the write
//!   see no concurrent writer of the tenant, in any process; the upsert also repeats the
//!   revision check (`ON CONFLICT … WHERE revision = …`). Lock order, shared with the
//!   catalog: audit head, session, usage, items — so none of them deadlock.
//! - Namespace prefixes, cursors and orders (relevance included: the score is summed in
//!   SQL from `memory_terms`) are SQL; the filter (`Filter::matches`) is evaluated here, on
//!   pages of the ordered rows fetched by keyset until `limit` items pass it.
//! - Full text: `memory_terms` finds the items holding every index term of the query
//!   (`TextQuery::index_terms`). For a query of ASCII words that is the match; for any
//!   other, each candidate is checked here (`TextQuery::score`), and a relevance page
//!   scores every candidate (`search_scored`).

use crate::catalog::{append_audit_locked, lock_audit_head};
use crate::db::{to_u64, Failure};
use crate::listing::time_column;
use crate::PostgresCatalog;
use async_trait::async_trait;
use berth_catalog::audit::AuditEntry;
use berth_catalog::scoped::fields;
use berth_catalog::scoped::TextQuery;
use berth_catalog::scoped::{self, DeleteAudit, ForgetAudit, ForgetOutcome, MemoryDelete, MemoryItem, MemoryPut};
use berth_catalog::scoped::{MemoryQuota, MemorySearch, MemoryStore, MemoryUsage, Namespace, NamespaceQuery};
use berth_catalog::scoped::{Removed, SearchOrder, SweepAudit, TenantQuota};
use berth_catalog::Catalog;
use berth_core::{Error, JsonText, Result, SessionId, TenantId, Timestamp};
use deadpool_postgres::{GenericClient, Object};
use std::future::Future;
use std::pin::Pin;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

/// The item columns every read selects, in `item_from_row` order.
const ITEM_COLUMNS: &str =
    "m.namespace, m.key, m.value, m.revision, m.created_at, m.updated_at, m.expires_at, m.ttl_ms, m.bound_to";

/// Locks the tenant's usage row (creating it at zero) and returns it, with the tenant's
/// own quota (migration 5: kept in the row every write locks first, so a put reads it in
/// the same statement).
const LOCK_USAGE: &str = "INSERT INTO memory_usage (tenant, items, bytes) VALUES ($1, 0, 0) \
     ON CONFLICT (tenant) DO UPDATE SET tenant = excluded.tenant RETURNING items, bytes, items_max, bytes_max";

/// `namespace` outside berth's own bookkeeping (`Namespace::is_charged`; the range of
/// `SYSTEM_NAMESPACES`, written out so the statements stay constants; a test checks the
/// two agree): only those items count against usage (migration 5).
macro_rules! charged {
    ($column:literal) => {
        concat!("NOT (", $column, " >= 'berth/' AND ", $column, " < 'berth0')")
    };
}

/// `charged!("namespace")`.
pub(crate) const CHARGED: &str = charged!("namespace");

/// Locks an existing usage row (removals: no row, no items).
const LOCK_USAGE_IF_ANY: &str = "SELECT items FROM memory_usage WHERE tenant = $1 FOR UPDATE";

const ADD_USAGE: &str = "UPDATE memory_usage SET items = items + $2, bytes = bytes + $3 WHERE tenant = $1";

/// Writes an item; with a stored row, only if it still holds revision `$12` (always the
/// case under the usage lock; a mismatch reports the row count 0).
const UPSERT: &str = "INSERT INTO memory_items (tenant, namespace, key, value, revision, created_at, updated_at, \
         expires_at, ttl_ms, bound_to, bytes) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
     ON CONFLICT (tenant, namespace, key) DO UPDATE SET value = excluded.value, revision = excluded.revision, \
         created_at = excluded.created_at, updated_at = excluded.updated_at, expires_at = excluded.expires_at, \
         ttl_ms = excluded.ttl_ms, bound_to = excluded.bound_to, bytes = excluded.bytes \
     WHERE memory_items.revision = $12";

/// Replaces an item's full-text rows by its terms (`$4`, repeats kept: counted here).
const WRITE_TERMS: &str = "WITH dropped AS ( \
         DELETE FROM memory_terms WHERE tenant = $1 AND namespace = $2 AND key = $3 AND term <> ALL($4::text[]) \
     ) \
     INSERT INTO memory_terms (tenant, term, namespace, key, occurrences) \
     SELECT $1, t.term, $2, $3, count(*) FROM unnest($4::text[]) AS t (term) GROUP BY t.term \
     ON CONFLICT (tenant, term, namespace, key) DO UPDATE SET occurrences = excluded.occurrences";

/// A query term held by fewer items than this (counted through the index) drives the
/// page; a commoner query is tested per walked row.
const FEW_TEXT_MATCHES: i64 = 2_000;

/// Replaces an item's filter index rows (`fields.rs`) by the parallel arrays given.
const WRITE_FIELDS: &str = "WITH dropped AS ( \
         DELETE FROM memory_fields WHERE tenant = $1 AND namespace = $2 AND key = $3 AND field <> ALL($4::text[]) \
     ) \
     INSERT INTO memory_fields (tenant, namespace, key, field, kind, sort) \
     SELECT $1, $2, $3, f.field, f.kind, f.sort FROM unnest($4::text[], $5::text[], $6::text[]) AS f (field, kind, sort) \
     ON CONFLICT (tenant, namespace, key, field) DO UPDATE SET kind = excluded.kind, sort = excluded.sort";

/// A filter condition matching fewer items than this (counted through the field index)
/// drives the page; a commoner one is tested per row.
const FEW_FIELD_MATCHES: i64 = 2_000;

type Unit<'c, T> = Pin<Box<dyn Future<Output = Result<T, Failure>> + Send + 'c>>;

fn corrupt(what: &str) -> Failure {
    Failure::Berth(Error::Corrupt {
        reason: format!("stored memory item has an invalid {what}"),
        location: berth_core::Location { artifact: "postgres:memory".into(), offset: None, seq: None },
    })
}

fn time_from(column: i64) -> Result<Timestamp, Failure> {
    to_u64("memory time", column).map(Timestamp)
}

fn item_from_row(row: &Row) -> Result<MemoryItem, Failure> {
    let namespace = Namespace::parse(row.try_get(0)?).map_err(|_| corrupt("namespace"))?;
    let value: String = row.try_get(2)?;
    let raw = serde_json::value::RawValue::from_string(value).map_err(|_| corrupt("value"))?;
    let bound_to = match row.try_get::<_, Option<&str>>(8)? {
        Some(text) => Some(SessionId::parse(text).map_err(|_| corrupt("session id"))?),
        None => None,
    };
    Ok(MemoryItem {
        namespace,
        key: row.try_get(1)?,
        value: JsonText::from_trusted_raw(raw),
        revision: row.try_get::<_, i64>(3)? as u64,
        created_at: time_from(row.try_get(4)?)?,
        updated_at: time_from(row.try_get(5)?)?,
        expires_at: row.try_get::<_, Option<i64>>(6)?.map(time_from).transpose()?,
        ttl_ms: row.try_get::<_, Option<i64>>(7)?.map(|ttl| ttl as u64),
        bound_to,
    })
}

/// Positional parameters of a statement built piece by piece.
#[derive(Default)]
struct Params(Vec<Box<dyn ToSql + Sync + Send>>);

impl Params {
    /// Adds a parameter; returns its placeholder.
    fn push(&mut self, value: impl ToSql + Sync + Send + 'static) -> String {
        self.0.push(Box::new(value));
        format!("${}", self.0.len())
    }

    fn refs(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.0.iter().map(|value| &**value as &(dyn ToSql + Sync)).collect()
    }
}

/// `m.namespace` equal to `prefix` or inside it, as one range of the primary key:
/// `[p, p0)` holds `p`, `p/…` and siblings like `p x` (bytes below `/`), which the last
/// condition drops (`0` is the byte after `/`; the columns are `COLLATE "C"`).
fn within_prefix(prefix: &Namespace, params: &mut Params) -> String {
    within_prefix_on("m.namespace", prefix, params)
}

/// `within_prefix` on another namespace column.
fn within_prefix_on(column: &str, prefix: &Namespace, params: &mut Params) -> String {
    let p = prefix.as_str();
    let (low, high, slash) = (params.push(p.to_owned()), params.push(format!("{p}0")), params.push(format!("{p}/")));
    format!("{column} >= {low} AND {column} < {high} AND ({column} = {low} OR {column} > {slash})")
}

fn live(now: Timestamp, params: &mut Params) -> String {
    let now = params.push(time_column(now));
    format!("(m.expires_at IS NULL OR m.expires_at > {now})")
}

fn limit_column(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

fn usage_of(items: i64, bytes: i64) -> Result<MemoryUsage, Failure> {
    Ok(MemoryUsage { items: to_u64("memory usage", items)?, bytes: to_u64("memory usage", bytes)? })
}

/// Locks the tenant's usage row; returns its usage and the quota that applies to it (its
/// own over `default`).
async fn lock_usage<C: GenericClient>(
    client: &C,
    tenant: &str,
    default: &MemoryQuota,
) -> Result<(MemoryUsage, MemoryQuota), Failure> {
    let row = client.query_one(&client.prepare_cached(LOCK_USAGE).await?, &[&tenant]).await?;
    let own = quota_of(row.get(2), row.get(3))?;
    Ok((usage_of(row.get(0), row.get(1))?, own.over(default)))
}

fn quota_of(items_max: Option<i64>, bytes_max: Option<i64>) -> Result<TenantQuota, Failure> {
    let limit = |value: Option<i64>| value.map(|value| to_u64("memory quota", value)).transpose();
    Ok(TenantQuota { items: limit(items_max)?, bytes: limit(bytes_max)? })
}

async fn add_usage<C: GenericClient>(client: &C, tenant: &str, items: i64, bytes: i64) -> Result<(), Failure> {
    if items != 0 || bytes != 0 {
        client.execute(&client.prepare_cached(ADD_USAGE).await?, &[&tenant, &items, &bytes]).await?;
    }
    Ok(())
}

/// The stored item (live or expired) and its bytes.
async fn stored_item<C: GenericClient>(
    client: &C,
    tenant: &str,
    namespace: &str,
    key: &str,
) -> Result<Option<MemoryItem>, Failure> {
    let sql =
        format!("SELECT {ITEM_COLUMNS} FROM memory_items AS m WHERE m.tenant = $1 AND m.namespace = $2 AND m.key = $3");
    let row = client.query_opt(&client.prepare_cached(&sql).await?, &[&tenant, &namespace, &key]).await?;
    row.as_ref().map(item_from_row).transpose()
}

/// Writes `item` over the stored row at `stored_revision` (or as a new row).
async fn write_item<C: GenericClient>(
    client: &C,
    tenant: &str,
    item: &MemoryItem,
    stored_revision: Option<u64>,
) -> Result<(), Failure> {
    let params: [&(dyn ToSql + Sync); 12] = [
        &tenant,
        &item.namespace.as_str(),
        &item.key.as_str(),
        &item.value.as_str(),
        &(item.revision as i64),
        &time_column(item.created_at),
        &time_column(item.updated_at),
        &item.expires_at.map(time_column),
        &item.ttl_ms.map(|ttl| i64::try_from(ttl).unwrap_or(i64::MAX)),
        &item.bound_to.as_ref().map(SessionId::as_str),
        &(item.bytes() as i64),
        &stored_revision.map_or(-1, |revision| revision as i64),
    ];
    let written = client.execute(&client.prepare_cached(UPSERT).await?, &params).await?;
    if written != 1 {
        // Unreachable under the usage lock; refuse rather than report a write that
        // did not happen.
        return Err(Failure::Berth(Error::Unavailable {
            reason: "postgres: put memory item: the item changed concurrently; retry".into(),
        }));
    }
    let fields = fields::value_fields(&item.value);
    let names: Vec<&str> = fields.iter().map(|(name, _, _)| name.as_str()).collect();
    let kinds: Vec<&str> = fields.iter().map(|(_, kind, _)| *kind).collect();
    let sorts: Vec<&str> = fields.iter().map(|(_, _, sort)| sort.as_str()).collect();
    let statement = client.prepare_cached(WRITE_FIELDS).await?;
    let params: [&(dyn ToSql + Sync); 6] =
        [&tenant, &item.namespace.as_str(), &item.key.as_str(), &names, &kinds, &sorts];
    client.execute(&statement, &params).await?;
    let terms = scoped::index_terms(&item.value);
    let terms: Vec<&str> = terms.all().collect();
    let statement = client.prepare_cached(WRITE_TERMS).await?;
    client.execute(&statement, &[&tenant, &item.namespace.as_str(), &item.key.as_str(), &terms]).await?;
    Ok(())
}

/// Deletes the rows `condition` (over `m`) selects, counting the charged ones and their
/// bytes per scope in SQL, and takes them off the usage row (locked first).
async fn delete_where<C: GenericClient>(
    client: &C,
    tenant: &str,
    condition: &str,
    params: &Params,
) -> Result<Removed, Failure> {
    if client.query_opt(&client.prepare_cached(LOCK_USAGE_IF_ANY).await?, &[&tenant]).await?.is_none() {
        return Ok(Removed::default());
    }
    let sql = format!(
        "WITH gone AS (DELETE FROM memory_items AS m WHERE {condition} RETURNING m.namespace, m.bytes) \
         SELECT split_part(namespace, '/', 1) || '/' || split_part(namespace, '/', 2) AS scope, count(*), \
         coalesce(sum(bytes), 0)::bigint FROM gone WHERE {CHARGED} GROUP BY 1 ORDER BY 1"
    );
    let mut removed = Removed::default();
    for row in client.query(&client.prepare_cached(&sql).await?, &params.refs()).await? {
        let (items, bytes): (i64, i64) = (row.get(1), row.get(2));
        removed.add_scope(row.get(0), to_u64("removed items", items)?, to_u64("removed bytes", bytes)?);
    }
    add_usage(client, tenant, -(removed.items as i64), -(removed.bytes as i64)).await?;
    Ok(removed)
}

/// Deletes the items bound to a session being removed, inside the removal's transaction.
pub(crate) async fn remove_bound<C: GenericClient>(client: &C, tenant: &str, session: &str) -> Result<(), Failure> {
    let mut params = Params::default();
    let condition =
        format!("m.tenant = {} AND m.bound_to = {}", params.push(tenant.to_owned()), params.push(session.to_owned()));
    delete_where(client, tenant, &condition, &params).await.map(|_| ())
}

/// Deletes `items` (stored, the usage row locked by the caller), and takes the charged
/// ones off the usage row.
async fn delete_items<C: GenericClient>(client: &C, tenant: &str, items: &[MemoryItem]) -> Result<(), Failure> {
    let statement =
        client.prepare_cached("DELETE FROM memory_items WHERE tenant = $1 AND namespace = $2 AND key = $3").await?;
    let mut lost = Removed::default();
    for item in items {
        client.execute(&statement, &[&tenant, &item.namespace.as_str(), &item.key]).await?;
        if item.is_charged() {
            lost.add(item.namespace.as_str(), item.bytes());
        }
    }
    add_usage(client, tenant, -(lost.items as i64), -(lost.bytes as i64)).await
}

/// Deletes up to `limit` rows of the tenant matching `condition` (over `s`: a sweep),
/// with the audit record of what it removed. Takes no lock when nothing matches; else
/// the audit head's first, then the usage row's (the catalog's lock order).
async fn sweep<C: GenericClient>(
    client: &C,
    tenant: &str,
    condition: &str,
    mut params: Params,
    limit: usize,
    audit: &SweepAudit,
) -> Result<u64, Failure> {
    let (tenant_is, limit) = (params.push(tenant.to_owned()), params.push(limit_column(limit)));
    let candidates = format!(
        "SELECT s.tenant, s.namespace, s.key FROM memory_items AS s \
         WHERE s.tenant = {tenant_is} AND {condition} LIMIT {limit}"
    );
    let any = format!("SELECT EXISTS ({candidates})");
    if !client.query_one(&client.prepare_cached(&any).await?, &params.refs()).await?.get::<_, bool>(0) {
        return Ok(0);
    }
    let head = lock_audit_head(client, tenant).await?;
    let selected = format!("(m.tenant, m.namespace, m.key) IN ({candidates})");
    let removed = delete_where(client, tenant, &selected, &params).await?;
    if removed.items > 0 {
        let tenant_id = TenantId::parse(tenant).map_err(Failure::Berth)?;
        append_audit_locked(client, tenant, head, audit(&tenant_id, &removed)).await?;
    }
    Ok(removed.items)
}

/// A pushed-down condition (`fields.rs`) as SQL over `memory_fields` aliased `f`.
fn field_condition(field: &str, alternatives: &[fields::Alternative], f: &str, params: &mut Params) -> String {
    let field_is = params.push(field.to_owned());
    let alternatives: Vec<String> = alternatives
        .iter()
        .map(|alternative| {
            let (kind, sort) = (params.push(alternative.kind.to_owned()), params.push(alternative.sort.clone()));
            format!("({f}.kind = {kind} AND {f}.sort {} {sort})", alternative.op)
        })
        .collect();
    let any = if alternatives.is_empty() { "false".to_owned() } else { alternatives.join(" OR ") };
    format!("{f}.field = {field_is} AND ({any})")
}

/// The query's rarest index term, and whether it is held by fewer than `FEW_TEXT_MATCHES`
/// items (then it drives the page). Counted through the `(tenant, term)` index, at most
/// that many rows per term.
async fn rarest_term<C: GenericClient>(
    client: &C,
    tenant: &str,
    query: &berth_catalog::scoped::TextQuery,
) -> Result<(String, bool), Failure> {
    let statement = client
        .prepare_cached(
            "SELECT count(*) FROM (SELECT 1 FROM memory_terms WHERE tenant = $1 AND term = $2 LIMIT $3) AS c",
        )
        .await?;
    let mut rarest: Option<(i64, &String)> = None;
    for term in query.index_terms() {
        let count: i64 = client.query_one(&statement, &[&tenant, term, &FEW_TEXT_MATCHES]).await?.get(0);
        if rarest.is_none_or(|(fewest, _)| count < fewest) {
            rarest = Some((count, term));
        }
    }
    let (count, term) = rarest.expect("a query has a term");
    Ok((term.clone(), count < FEW_TEXT_MATCHES))
}

/// A pushed-down condition tested on the walked row `m`: per alternative, one probe of
/// the primary key of `memory_fields` for the field's sort text (a scalar subquery, so
/// PostgreSQL neither joins every match of a common value nor probes the value index),
/// compared outside it (no row: NULL, false).
fn field_probe(field: &str, alternatives: &[fields::Alternative], params: &mut Params) -> String {
    let field_is = params.push(field.to_owned());
    let alternatives: Vec<String> = alternatives
        .iter()
        .map(|alternative| {
            let (kind, sort) = (params.push(alternative.kind.to_owned()), params.push(alternative.sort.clone()));
            format!(
                "(SELECT f.sort FROM memory_fields AS f WHERE f.tenant = m.tenant AND f.namespace = m.namespace \
                 AND f.key = m.key AND f.field = {field_is} AND f.kind = {kind}) {} {sort}",
                alternative.op
            )
        })
        .collect();
    if alternatives.is_empty() {
        return "false".to_owned();
    }
    format!("({})", alternatives.join(" OR "))
}

/// The filter's conditions that the field index answers exactly.
fn pushed_down(search: &MemorySearch) -> Vec<(&str, Vec<fields::Alternative>)> {
    let conditions = search.filter.conditions.iter();
    conditions.filter_map(|c| fields::pushdown(c).map(|alternatives| (c.field.as_str(), alternatives))).collect()
}

/// The position (among `pushed_down`'s) of the pushed-down condition matching the
/// fewest items, if fewer than `FEW_FIELD_MATCHES` (counted through the index, at most
/// that many entries each). By position, not field name: a filter may hold several
/// conditions on one field, and each of the others must still be tested.
async fn selective_condition<C: GenericClient>(
    client: &C,
    tenant: &str,
    search: &MemorySearch,
) -> Result<Option<usize>, Failure> {
    let mut best: Option<(i64, usize)> = None;
    for (position, (field, alternatives)) in pushed_down(search).into_iter().enumerate() {
        let mut params = Params::default();
        let tenant_is = params.push(tenant.to_owned());
        let condition = field_condition(field, &alternatives, "f", &mut params);
        let sql = format!(
            "SELECT count(*) FROM (SELECT 1 FROM memory_fields AS f WHERE f.tenant = {tenant_is} AND {condition} \
             LIMIT {}) AS c",
            params.push(FEW_FIELD_MATCHES)
        );
        let count: i64 = client.query_one(&client.prepare_cached(&sql).await?, &params.refs()).await?.get(0);
        if count < FEW_FIELD_MATCHES && best.as_ref().is_none_or(|(fewest, _)| count < *fewest) {
            best = Some((count, position));
        }
    }
    Ok(best.map(|(_, position)| position))
}

/// Walks the search's order from its cursor in keyset pages, keeping the rows that
/// pass the filter, until `limit` of them. A selective pushed-down condition drives
/// (its matches joined to their items); the others are tested per row through the
/// field index. When every condition is pushed down the SQL is exact: one page.
async fn search_in<C: GenericClient>(
    client: &C,
    tenant: &str,
    search: &MemorySearch,
    now: Timestamp,
) -> Result<Vec<MemoryItem>, Failure> {
    let pushed = pushed_down(search);
    // The index decides a query of ASCII words; any other's candidates are checked here.
    let text_exact = search.query.as_ref().is_none_or(TextQuery::decided_by_index);
    let exact = pushed.len() == search.filter.conditions.len() && text_exact;
    let (driver, rarest, text_drives) = match &search.query {
        None => (selective_condition(client, tenant, search).await?, String::new(), false),
        Some(query) => {
            let (rarest, rare) = rarest_term(client, tenant, query).await?;
            if !text_exact && search.order == SearchOrder::Relevance {
                return search_scored(client, tenant, search, query, &rarest, now).await;
            }
            (None, rarest, rare || search.order == SearchOrder::Relevance)
        }
    };
    let chunk = if exact { search.limit } else { (search.limit * 4).clamp(64, 1_000) };
    let mut after: Option<(i64, String, String)> = search
        .cursor
        .as_ref()
        .map(|cursor| (i64::try_from(cursor.rank).unwrap_or(i64::MAX), cursor.namespace.clone(), cursor.key.clone()));
    let mut page = Vec::new();
    loop {
        let mut params = Params::default();
        let tenant_is = params.push(tenant.to_owned());
        // A driving index's rows are cut to the prefix before the join, which then
        // looks items up by key (offering the planner the prefix on `m` as well lets
        // it pick a range scan per match when its estimates are off).
        let mut within: Option<String> = None;
        let live = live(now, &mut params);
        let mut from = "memory_items AS m".to_owned();
        let (text, score) = match &search.query {
            Some(query) => {
                let terms = query.index_terms();
                let (terms, count) = (params.push(terms.to_vec()), params.push(terms.len() as i64));
                if text_drives {
                    // The items holding the rarest term (in the prefix), then every term,
                    // with their summed occurrences.
                    let hits_within = within_prefix_on("r.namespace", &search.prefix, &mut params);
                    let rarest = params.push(rarest.clone());
                    within = Some("true".to_owned());
                    from = format!(
                        "(SELECT x.namespace, x.key, sum(x.occurrences)::bigint AS hits \
                         FROM memory_terms AS r JOIN memory_terms AS x ON x.tenant = r.tenant \
                         AND x.namespace = r.namespace AND x.key = r.key AND x.term = ANY({terms}::text[]) \
                         WHERE r.tenant = {tenant_is} AND r.term = {rarest} AND {hits_within} \
                         GROUP BY x.namespace, x.key HAVING count(*) = {count}) AS hit JOIN memory_items AS m \
                         ON m.tenant = {tenant_is} AND m.namespace = hit.namespace AND m.key = hit.key"
                    );
                    (String::new(), "hit.hits".to_owned())
                } else {
                    // Per walked row: its occurrences of the terms, NULL unless it holds all.
                    let probe = format!(
                        "(SELECT sum(x.occurrences)::bigint FROM memory_terms AS x WHERE x.tenant = m.tenant \
                         AND x.namespace = m.namespace AND x.key = m.key AND x.term = ANY({terms}::text[]) \
                         HAVING count(*) = {count})"
                    );
                    (format!(" AND {probe} IS NOT NULL"), probe)
                }
            }
            None => (String::new(), "0::bigint".to_owned()),
        };
        let mut tested = String::new();
        for (position, (field, alternatives)) in pushed.iter().enumerate() {
            if driver == Some(position) {
                let condition = field_condition(field, alternatives, "f", &mut params);
                let matches_within = within_prefix_on("f.namespace", &search.prefix, &mut params);
                within = Some("true".to_owned());
                from = format!(
                    "memory_fields AS f JOIN memory_items AS m \
                     ON m.tenant = f.tenant AND m.namespace = f.namespace AND m.key = f.key AND f.tenant = {tenant_is} \
                     AND {condition} AND {matches_within}"
                );
            } else {
                tested.push_str(&format!(" AND {}", field_probe(field, alternatives, &mut params)));
            }
        }
        let rank = match search.order {
            SearchOrder::Key => "0::bigint",
            SearchOrder::UpdatedAt => "s.updated_at",
            SearchOrder::Relevance => "s.score",
        };
        let resume = match &after {
            None => String::new(),
            Some((rank_value, namespace, key)) => {
                let (namespace, key) = (params.push(namespace.clone()), params.push(key.clone()));
                match search.order {
                    SearchOrder::Key => format!("WHERE (s.namespace, s.key) > ({namespace}, {key})"),
                    _ => {
                        let value = params.push(*rank_value);
                        format!(
                            "WHERE {rank} <= {value} AND ({rank} < {value} OR (s.namespace, s.key) > ({namespace}, {key}))"
                        )
                    }
                }
            }
        };
        let order = match search.order {
            SearchOrder::Key => "s.namespace, s.key",
            SearchOrder::UpdatedAt => "s.updated_at DESC, s.namespace, s.key",
            SearchOrder::Relevance => "s.score DESC, s.namespace, s.key",
        };
        let within = within.unwrap_or_else(|| within_prefix(&search.prefix, &mut params));
        let limit = params.push(limit_column(chunk));
        let sql = format!(
            "SELECT s.*, {rank} FROM (SELECT {ITEM_COLUMNS}, {score} AS score FROM {from} \
             WHERE m.tenant = {tenant_is} AND {within} AND {live}{text}{tested}) AS s {resume} ORDER BY {order} LIMIT {limit}"
        );
        let rows = client.query(&client.prepare_cached(&sql).await?, &params.refs()).await?;
        for row in &rows {
            let item = item_from_row(row)?;
            let score: i64 = row.try_get(9)?;
            after = Some((row.try_get(10)?, item.namespace.as_str().to_owned(), item.key.clone()));
            let text_matches = text_exact || search.query.as_ref().and_then(|q| q.score_value(&item.value)).is_some();
            if page.len() < search.limit
                && search.filter.matches(&item.value)
                && text_matches
                && search.after_cursor(&item, score as u64)
            {
                page.push(item);
            }
        }
        if page.len() >= search.limit || rows.len() < chunk {
            return Ok(page);
        }
    }
}

/// A relevance page of a query the index does not decide (`TextQuery::decided_by_index`):
/// every live item in the prefix holding the query's index terms (driven by the rarest,
/// `rarest`), scored, filtered and paged by the reference (`MemorySearch::page`).
async fn search_scored<C: GenericClient>(
    client: &C,
    tenant: &str,
    search: &MemorySearch,
    query: &TextQuery,
    rarest: &str,
    now: Timestamp,
) -> Result<Vec<MemoryItem>, Failure> {
    let mut params = Params::default();
    let tenant_is = params.push(tenant.to_owned());
    let terms = query.index_terms();
    let (terms, count) = (params.push(terms.to_vec()), params.push(terms.len() as i64));
    let hits_within = within_prefix_on("r.namespace", &search.prefix, &mut params);
    let rarest = params.push(rarest.to_owned());
    let live = live(now, &mut params);
    let sql = format!(
        "SELECT {ITEM_COLUMNS} FROM (SELECT x.namespace, x.key FROM memory_terms AS r JOIN memory_terms AS x \
         ON x.tenant = r.tenant AND x.namespace = r.namespace AND x.key = r.key AND x.term = ANY({terms}::text[]) \
         WHERE r.tenant = {tenant_is} AND r.term = {rarest} AND {hits_within} \
         GROUP BY x.namespace, x.key HAVING count(*) = {count}) AS hit JOIN memory_items AS m \
         ON m.tenant = {tenant_is} AND m.namespace = hit.namespace AND m.key = hit.key WHERE {live}"
    );
    let rows = client.query(&client.prepare_cached(&sql).await?, &params.refs()).await?;
    let candidates = rows.iter().map(item_from_row).collect::<Result<Vec<_>, _>>()?;
    Ok(search.page(candidates, now))
}

/// One namespace page: a skip-scan of the primary key, one seek per namespace listed
/// or passed over (never every item of a namespace).
async fn namespaces_in<C: GenericClient>(
    client: &C,
    tenant: &str,
    query: &NamespaceQuery,
    now: Timestamp,
) -> Result<Vec<Namespace>, Failure> {
    let p = query.prefix.as_str();
    let end = format!("{p}0");
    let now = time_column(now);
    let seek_sql = |comparison: &str| {
        format!(
            "SELECT m.namespace FROM memory_items AS m WHERE m.tenant = $1 AND m.namespace {comparison} $2 \
             AND m.namespace < $3 AND (m.expires_at IS NULL OR m.expires_at > $4) ORDER BY m.namespace LIMIT 1"
        )
    };
    let (from, past) = (client.prepare_cached(&seek_sql(">=")).await?, client.prepare_cached(&seek_sql(">")).await?);
    let seek = |bound: String, inclusive: bool| {
        let statement = if inclusive { from.clone() } else { past.clone() };
        let end = end.clone();
        async move {
            let row = client.query_opt(&statement, &[&tenant, &bound, &end, &now]).await?;
            Ok::<Option<String>, Failure>(row.map(|row| row.get(0)))
        }
    };
    let mut out: Vec<Namespace> = Vec::new();
    let mut next = seek(p.to_owned(), true).await?;
    while let Some(found) = next {
        if out.len() >= query.limit {
            break;
        }
        if !scoped::is_within(&found, p) {
            next = seek(found, false).await?;
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
        next =
            if shown.as_str() == found { seek(found, false).await? } else { seek(format!("{shown}0"), true).await? };
        if fresh {
            out.push(shown);
        }
    }
    Ok(out)
}

/// One put inside the caller's transaction (`memory_put`, and each of `memory_apply`'s):
/// nothing is written when its plan is refused.
async fn put_in<C: GenericClient>(
    client: &C,
    tenant: &str,
    put: &MemoryPut,
    quota: &MemoryQuota,
    now: Timestamp,
) -> Result<MemoryItem, Failure> {
    let (usage, quota) = lock_usage(client, tenant, quota).await?;
    let stored = stored_item(client, tenant, put.namespace.as_str(), &put.key).await?;
    let plan = put.plan(stored.as_ref(), &usage, &quota, now)?;
    write_item(client, tenant, &plan.item, stored.as_ref().map(|stored| stored.revision)).await?;
    add_usage(client, tenant, plan.items_change, plan.bytes_change).await?;
    Ok(plan.item)
}

impl PostgresCatalog {
    /// Imports several items (`memory_import` each) in one transaction: all or none,
    /// within the statement bound (a few thousand items per call). For restores and
    /// seeding.
    pub async fn memory_import_many(
        &self,
        tenant: &TenantId,
        items: Vec<MemoryItem>,
        quota: &MemoryQuota,
    ) -> Result<()> {
        items.iter().try_for_each(MemoryItem::check)?;
        let (tenant_text, quota) = (tenant.to_string(), *quota);
        self.memory_unit("import memory items", tenant, true, move |client| {
            Box::pin(async move {
                let tenant = tenant_text.as_str();
                let (mut usage, quota) = lock_usage(client, tenant, &quota).await?;
                let added = usage;
                for item in &items {
                    if stored_item(client, tenant, item.namespace.as_str(), &item.key).await?.is_some() {
                        return Err(Failure::Berth(Error::AlreadyExists {
                            what: "memory item",
                            id: format!("{}:{}", item.namespace, item.key),
                        }));
                    }
                    write_item(client, tenant, item, None).await?;
                    if item.is_charged() {
                        usage.check_put(&quota, true, 0, item.bytes())?;
                        usage.items += 1;
                        usage.bytes += item.bytes();
                    }
                }
                let (added_items, added_bytes) = (usage.items - added.items, usage.bytes - added.bytes);
                add_usage(client, tenant, added_items as i64, added_bytes as i64).await
            })
        })
        .await
    }

    /// Runs `work` in one transaction of `tenant` (registered in the tenant registry
    /// first when `register`: writes that create memory).
    async fn memory_unit<T, F>(&self, operation: &'static str, tenant: &TenantId, register: bool, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c Object) -> Unit<'c, T> + Send + 'static,
    {
        let tenant = tenant.to_string();
        self.run(operation, move |db| {
            Box::pin(async move {
                if register {
                    db.with_tenant_registered(operation, &tenant, work).await
                } else {
                    db.with_tenant(operation, &tenant, work).await
                }
            })
        })
        .await
    }
}

#[async_trait]
impl MemoryStore for PostgresCatalog {
    async fn memory_put(
        &self,
        tenant: &TenantId,
        put: &MemoryPut,
        now: Timestamp,
        quota: &MemoryQuota,
    ) -> Result<MemoryItem> {
        put.check()?;
        let (tenant_text, put, quota) = (tenant.to_string(), put.clone(), *quota);
        self.memory_unit("put memory item", tenant, true, move |client| {
            Box::pin(async move { put_in(client, &tenant_text, &put, &quota, now).await })
        })
        .await
    }

    async fn memory_apply(
        &self,
        tenant: &TenantId,
        puts: &[MemoryPut],
        now: Timestamp,
        quota: &MemoryQuota,
    ) -> Result<u64> {
        puts.iter().try_for_each(MemoryPut::check)?;
        let (tenant_text, puts, quota) = (tenant.to_string(), puts.to_vec(), *quota);
        // One transaction: every write of the batch commits together.
        self.memory_unit("apply carried memory writes", tenant, true, move |client| {
            Box::pin(async move {
                let mut applied = 0;
                for put in &puts {
                    match put_in(client, &tenant_text, put, &quota, now).await {
                        Ok(_) => applied += 1,
                        Err(Failure::Berth(Error::RevisionConflict { .. })) => {}
                        Err(failure) => return Err(failure),
                    }
                }
                Ok(applied)
            })
        })
        .await
    }

    async fn memory_get(
        &self,
        tenant: &TenantId,
        namespace: &Namespace,
        key: &str,
        now: Timestamp,
        refresh: bool,
    ) -> Result<Option<MemoryItem>> {
        let (tenant_text, namespace, key) = (tenant.to_string(), namespace.clone(), key.to_owned());
        self.memory_unit("get memory item", tenant, false, move |client| {
            Box::pin(async move {
                let stored = stored_item(client, &tenant_text, namespace.as_str(), &key).await?;
                let Some(mut item) = stored.filter(|item| item.is_live(now)) else { return Ok(None) };
                if let (true, Some(ttl)) = (refresh, item.ttl_ms) {
                    item.expires_at = Some(now.plus_ms(ttl));
                    let statement = client
                        .prepare_cached(
                            "UPDATE memory_items SET expires_at = $4 WHERE tenant = $1 AND namespace = $2 AND key = $3",
                        )
                        .await?;
                    let expires_at = item.expires_at.map(time_column);
                    client.execute(&statement, &[&tenant_text, &namespace.as_str(), &key, &expires_at]).await?;
                }
                Ok(Some(item))
            })
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
        let (tenant_text, namespace, key) = (tenant.to_string(), namespace.clone(), key.to_owned());
        self.memory_unit("delete memory item", tenant, false, move |client| {
            Box::pin(async move {
                let tenant = tenant_text.as_str();
                lock_usage(client, tenant, &MemoryQuota::default()).await?;
                let stored = stored_item(client, tenant, namespace.as_str(), &key).await?;
                let live = stored.filter(|item| item.is_live(now));
                scoped::check_delete(&namespace, &key, live.as_ref(), expected)?;
                let item = live.expect("checked above");
                delete_items(client, tenant, std::slice::from_ref(&item)).await?;
                Ok(item)
            })
        })
        .await
    }

    async fn memory_delete_audited(
        &self,
        tenant: &TenantId,
        deletes: &[MemoryDelete],
        skip_absent: bool,
        now: Timestamp,
        audit: DeleteAudit,
    ) -> Result<(Vec<MemoryItem>, Option<AuditEntry>)> {
        let (tenant_text, deletes) = (tenant.to_string(), deletes.to_vec());
        self.memory_unit("delete memory items", tenant, false, move |client| {
            Box::pin(async move {
                let tenant = tenant_text.as_str();
                // The catalog's lock order: the audit head before the usage row.
                let head = lock_audit_head(client, tenant).await?;
                lock_usage(client, tenant, &MemoryQuota::default()).await?;
                let mut items = Vec::with_capacity(deletes.len());
                for delete in &deletes {
                    let stored = stored_item(client, tenant, delete.namespace.as_str(), &delete.key).await?;
                    let live = stored.filter(|item| item.is_live(now));
                    if delete.takes(live.as_ref(), skip_absent)? {
                        items.extend(live);
                    }
                }
                if items.is_empty() {
                    return Ok((items, None));
                }
                delete_items(client, tenant, &items).await?;
                let entry = append_audit_locked(client, tenant, head, audit(&items)).await?;
                Ok((items, Some(entry)))
            })
        })
        .await
    }

    async fn memory_search(&self, tenant: &TenantId, search: &MemorySearch, now: Timestamp) -> Result<Vec<MemoryItem>> {
        search.check()?;
        let (tenant_text, search) = (tenant.to_string(), search.clone());
        self.memory_unit("search memory", tenant, false, move |client| {
            Box::pin(async move { search_in(client, &tenant_text, &search, now).await })
        })
        .await
    }

    async fn memory_namespaces(
        &self,
        tenant: &TenantId,
        query: &NamespaceQuery,
        now: Timestamp,
    ) -> Result<Vec<Namespace>> {
        let (tenant_text, query) = (tenant.to_string(), query.clone());
        self.memory_unit("list memory namespaces", tenant, false, move |client| {
            Box::pin(async move { namespaces_in(client, &tenant_text, &query, now).await })
        })
        .await
    }

    async fn memory_scan(
        &self,
        tenant: &TenantId,
        after: Option<(&Namespace, &str)>,
        limit: usize,
        now: Timestamp,
    ) -> Result<Vec<MemoryItem>> {
        let tenant_text = tenant.to_string();
        let after = after.map(|(namespace, key)| (namespace.as_str().to_owned(), key.to_owned()));
        self.memory_unit("scan memory", tenant, false, move |client| {
            Box::pin(async move {
                let mut params = Params::default();
                let tenant_is = params.push(tenant_text);
                let mut sql = format!("SELECT {ITEM_COLUMNS} FROM memory_items AS m WHERE m.tenant = {tenant_is}");
                sql.push_str(&format!(" AND {}", live(now, &mut params)));
                if let Some((namespace, key)) = after {
                    let (namespace, key) = (params.push(namespace), params.push(key));
                    sql.push_str(&format!(" AND (m.namespace, m.key) > ({namespace}, {key})"));
                }
                sql.push_str(&format!(" ORDER BY m.namespace, m.key LIMIT {}", params.push(limit_column(limit))));
                let rows = client.query(&client.prepare_cached(&sql).await?, &params.refs()).await?;
                rows.iter().map(item_from_row).collect()
            })
        })
        .await
    }

    async fn memory_forget(
        &self,
        tenant: &TenantId,
        prefix: &Namespace,
        audit: ForgetAudit,
    ) -> Result<(ForgetOutcome, AuditEntry)> {
        let (tenant_text, prefix) = (tenant.to_string(), prefix.clone());
        // Registered: the audit record makes the tenant one (as `append_audit` does).
        self.memory_unit("forget memory", tenant, true, move |client| {
            Box::pin(async move {
                let tenant = tenant_text.as_str();
                // The catalog's lock order: the audit head before the usage row.
                let head = lock_audit_head(client, tenant).await?;
                let mut params = Params::default();
                let tenant_is = params.push(tenant.to_owned());
                let condition = format!("m.tenant = {tenant_is} AND {}", within_prefix(&prefix, &mut params));
                let removed = delete_where(client, tenant, &condition, &params).await?;
                let outcome = ForgetOutcome { items: removed.items, bytes: removed.bytes };
                let entry = append_audit_locked(client, tenant, head, audit(&outcome)).await?;
                Ok((outcome, entry))
            })
        })
        .await
    }

    async fn memory_import(&self, tenant: &TenantId, item: &MemoryItem, quota: &MemoryQuota) -> Result<()> {
        self.memory_import_many(tenant, vec![item.clone()], quota).await
    }

    async fn memory_usage(&self, tenant: &TenantId) -> Result<MemoryUsage> {
        let tenant_text = tenant.to_string();
        self.memory_unit("read memory usage", tenant, false, move |client| {
            Box::pin(async move {
                let statement =
                    client.prepare_cached("SELECT items, bytes FROM memory_usage WHERE tenant = $1").await?;
                match client.query_opt(&statement, &[&tenant_text]).await? {
                    Some(row) => usage_of(row.get(0), row.get(1)),
                    None => Ok(MemoryUsage::default()),
                }
            })
        })
        .await
    }

    async fn memory_quota(&self, tenant: &TenantId) -> Result<TenantQuota> {
        let tenant_text = tenant.to_string();
        self.memory_unit("read memory quota", tenant, false, move |client| {
            Box::pin(async move {
                let statement =
                    client.prepare_cached("SELECT items_max, bytes_max FROM memory_usage WHERE tenant = $1").await?;
                match client.query_opt(&statement, &[&tenant_text]).await? {
                    Some(row) => quota_of(row.get(0), row.get(1)),
                    None => Ok(TenantQuota::default()),
                }
            })
        })
        .await
    }

    async fn set_memory_quota(&self, tenant: &TenantId, quota: &TenantQuota) -> Result<()> {
        let limit = |value: Option<u64>| value.map(|value| i64::try_from(value).unwrap_or(i64::MAX));
        let (tenant_text, items, bytes) = (tenant.to_string(), limit(quota.items), limit(quota.bytes));
        self.memory_unit("set memory quota", tenant, true, move |client| {
            Box::pin(async move {
                let statement = client
                    .prepare_cached(
                        "INSERT INTO memory_usage (tenant, items, bytes, items_max, bytes_max) VALUES ($1, 0, 0, $2, $3) \
                         ON CONFLICT (tenant) DO UPDATE SET items_max = excluded.items_max, bytes_max = excluded.bytes_max",
                    )
                    .await?;
                client.execute(&statement, &[&tenant_text, &items, &bytes]).await?;
                Ok(())
            })
        })
        .await
    }

    async fn memory_bound_count(&self, tenant: &TenantId, session: &SessionId) -> Result<u64> {
        let (tenant_text, session) = (tenant.to_string(), session.to_string());
        self.memory_unit("count bound memory", tenant, false, move |client| {
            Box::pin(async move {
                let statement = client
                    .prepare_cached(&format!(
                        "SELECT count(*) FROM memory_items WHERE tenant = $1 AND bound_to = $2 AND {CHARGED}"
                    ))
                    .await?;
                let count: i64 = client.query_one(&statement, &[&tenant_text, &session]).await?.get(0);
                to_u64("bound count", count)
            })
        })
        .await
    }

    /// Row-level security lets no transaction see two tenants: the sweep goes tenant by
    /// tenant through the registry, one short transaction each, until `limit`.
    async fn memory_remove_expired(&self, now: Timestamp, limit: usize, audit: SweepAudit) -> Result<u64> {
        let mut removed = 0u64;
        for tenant in self.tenants().await? {
            let remaining = limit.saturating_sub(removed as usize);
            if remaining == 0 {
                break;
            }
            let (tenant_text, audit) = (tenant.to_string(), audit.clone());
            removed += self
                .memory_unit("remove expired memory", &tenant, false, move |client| {
                    Box::pin(async move {
                        let mut params = Params::default();
                        let condition =
                            format!("s.expires_at IS NOT NULL AND s.expires_at <= {}", params.push(time_column(now)));
                        sweep(client, &tenant_text, &condition, params, remaining, &audit).await
                    })
                })
                .await?;
        }
        Ok(removed)
    }

    async fn memory_remove_stale(
        &self,
        tenant: &TenantId,
        updated_before: Timestamp,
        limit: usize,
        audit: SweepAudit,
    ) -> Result<u64> {
        let tenant_text = tenant.to_string();
        self.memory_unit("remove stale memory", tenant, false, move |client| {
            Box::pin(async move {
                let mut params = Params::default();
                // berth's own bookkeeping is not the tenant's memory to retain.
                let condition = format!(
                    "s.updated_at < {} AND {}",
                    params.push(time_column(updated_before)),
                    charged!("s.namespace")
                );
                sweep(client, &tenant_text, &condition, params, limit, &audit).await
            })
        })
        .await
    }
}
