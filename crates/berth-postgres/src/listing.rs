//! Listing pages (R-S12): a `SessionQuery` as index range scans.
//!
//! The same plan as the SQLite catalog: each page is one or a few sub-queries, each
//! fixing an equality prefix of one index (tenant, then label / parent / project / user
//! / status, then `blank`) and reading it in `(last_activity DESC, id DESC)` order from
//! the cursor on, `LIMIT`ed. When the query allows several values of a prefix column
//! (several statuses, blank and non-blank) there is one sub-query per value, combined
//! with `UNION ALL` and re-sorted over at most `limit × sub-queries` rows: a single
//! `status IN (…)` scan would have to sort every match before returning the first.

use crate::db::{to_i64, Failure};
use berth_catalog::SessionQuery;
use berth_core::lifecycle::Status;
use berth_core::Timestamp;
use tokio_postgres::types::ToSql;

/// A timestamp as an index column: exact up to `i64::MAX` ms, clamped beyond.
pub(crate) fn time_column(timestamp: Timestamp) -> i64 {
    i64::try_from(timestamp.0).unwrap_or(i64::MAX)
}

use berth_catalog::ListDriver as Driver;

/// SQL text and its parameters.
pub(crate) struct Plan {
    pub(crate) sql: String,
    pub(crate) params: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl Plan {
    pub(crate) fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params.iter().map(|param| param.as_ref() as &(dyn ToSql + Sync)).collect()
    }

    fn bind(&mut self, value: impl ToSql + Sync + Send + 'static) -> String {
        self.params.push(Box::new(value));
        format!("${}", self.params.len())
    }
}

pub(crate) fn plan(query: &SessionQuery) -> Result<Plan, Failure> {
    let driver = Driver::choose(query);
    let mut plan = Plan { sql: String::new(), params: Vec::new() };
    let limit = plan.bind(to_i64("page size", query.limit as u64)?);
    let mut parts: Vec<String> = driver
        .partitions(query)
        .into_iter()
        .map(|(status, blank)| sub_query(&mut plan, query, driver, status, blank, &limit))
        .collect();
    plan.sql = if parts.len() == 1 {
        parts.remove(0)
    } else {
        let union = parts.iter().map(|part| format!("({part})")).collect::<Vec<_>>().join(" UNION ALL ");
        format!(
            "SELECT record_json, last_activity, id, tenant FROM ({union}) AS page \
             ORDER BY last_activity DESC, id DESC, tenant ASC LIMIT {limit}"
        )
    };
    Ok(plan)
}

fn sub_query(
    plan: &mut Plan,
    query: &SessionQuery,
    driver: Driver,
    status: Option<Status>,
    blank: Option<bool>,
    limit: &str,
) -> String {
    let sort = if driver.drives_from_labels() { "k" } else { "s" };
    let from = if driver.drives_from_labels() {
        "session_labels AS k JOIN sessions AS s ON s.tenant = k.tenant AND s.id = k.id"
    } else {
        "sessions AS s"
    };
    let mut conditions = Vec::new();
    if let Some(tenant) = &query.tenant {
        conditions.push(format!("{sort}.tenant = {}", plan.bind(tenant.to_string())));
    }
    if let Some(label) = &query.label {
        let value = plan.bind(label.clone());
        conditions.push(if driver.drives_from_labels() {
            format!("k.label = {value}")
        } else {
            format!("EXISTS (SELECT 1 FROM session_labels AS l WHERE l.tenant = s.tenant AND l.id = s.id AND l.label = {value})")
        });
    }
    match status {
        Some(status) => conditions.push(format!("{sort}.status = {}", plan.bind(status.as_str().to_owned()))),
        None if !query.statuses.is_empty() => {
            let values: Vec<String> = query.statuses.iter().map(|status| status.as_str().to_owned()).collect();
            conditions.push(format!("s.status = ANY({})", plan.bind(values)));
        }
        None => {}
    }
    match blank {
        Some(blank) => conditions.push(format!("{sort}.blank = {}", plan.bind(blank))),
        None if !query.include_blank => conditions.push("NOT s.blank".into()),
        None => {}
    }
    residual_filters(plan, query, sort, &mut conditions);
    let mut order = format!("{sort}.last_activity DESC, {sort}.id DESC");
    if driver == Driver::AnyTenant {
        order.push_str(", s.tenant ASC");
    }
    let conditions = if conditions.is_empty() { "TRUE".to_owned() } else { conditions.join(" AND ") };
    format!(
        "SELECT s.record_json, s.last_activity, s.id, s.tenant FROM {from} WHERE {conditions} ORDER BY {order} LIMIT {limit}"
    )
}

/// Filters that are not part of the driving index's prefix.
fn residual_filters(plan: &mut Plan, query: &SessionQuery, sort: &str, conditions: &mut Vec<String>) {
    if let Some(parent) = &query.parent {
        conditions.push(format!("s.parent = {}", plan.bind(parent.to_string())));
    }
    if let Some(project) = &query.project {
        conditions.push(format!("s.project = {}", plan.bind(project.to_string())));
    }
    if let Some(user) = &query.user {
        conditions.push(format!("s.user_id = {}", plan.bind(user.to_string())));
    }
    if let Some(since) = query.active_since {
        conditions.push(format!("{sort}.last_activity >= {}", plan.bind(time_column(since))));
    }
    if let Some(before) = query.active_before {
        conditions.push(format!("{sort}.last_activity < {}", plan.bind(time_column(before))));
    }
    if let Some(before) = query.lease_before {
        conditions.push(format!("s.lease_until < {}", plan.bind(time_column(before))));
    }
    if let Some(before) = query.created_before {
        conditions.push(format!("s.created_at < {}", plan.bind(time_column(before))));
    }
    if let Some(before) = query.status_changed_before {
        conditions.push(format!("s.status_changed_at < {}", plan.bind(time_column(before))));
    }
    if let Some(search) = &query.search {
        // Checked on the rows the index scan passes (`berth_catalog::search`).
        conditions.push(format!("s.search LIKE {} ESCAPE '\\'", plan.bind(search.like_pattern())));
    }
    if let Some(cursor) = &query.cursor {
        // A row comparison: a range bound on the index's (last_activity, id) suffix.
        let time = plan.bind(time_column(cursor.last_activity));
        let id = plan.bind(cursor.id.to_string());
        conditions.push(format!("({sort}.last_activity, {sort}.id) < ({time}, {id})"));
    }
}
