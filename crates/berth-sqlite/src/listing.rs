//! Listing pages (R-S12): turns a `SessionQuery` into index range scans.
//!
//! Each page is answered by one or a few sub-queries. A sub-query fixes an equality
//! prefix of one index (tenant, then label / parent / project / user / status, then
//! `blank`) and reads that index in `(last_activity DESC, id DESC)` order from the
//! cursor on, stopping after `limit` matches. When the query allows several values of a
//! prefix column (several statuses, or blank and non-blank sessions) there is one
//! sub-query per value and their sorted results are merged here, because one SQL query
//! over `status IN (…)` would have to sort every match before returning the first.
//! The other filters are checked on the rows the scan passes.
//!
//! `INDEXED BY` pins each shape to the index it was designed for: if a schema change
//! ever made that index unusable, the statement fails to prepare instead of silently
//! becoming a full scan.

use crate::catalog::time_column;
use berth_catalog::SessionQuery;
use berth_core::lifecycle::Status;
use rusqlite::types::Value;

pub(crate) use berth_catalog::ListDriver as Driver;

/// The SQLite index behind each driver (`None`: no tenant, no index bound).
fn index(driver: Driver) -> Option<&'static str> {
    match driver {
        Driver::Activity => Some("sessions_by_activity"),
        Driver::Status => Some("sessions_by_status"),
        Driver::User => Some("sessions_by_user"),
        Driver::Project => Some("sessions_by_project"),
        Driver::Parent => Some("sessions_by_parent"),
        Driver::Label => Some("session_labels_by_activity"),
        Driver::LabelStatus => Some("session_labels_by_status"),
        Driver::AnyTenant => None,
    }
}

/// One sub-query: SQL text and its positional parameters. It selects the sort key
/// `(last_activity, id, tenant)` and then `record_json`, so that merged pages are
/// ordered and cut from the columns and only the records kept are decoded.
#[derive(Debug)]
pub(crate) struct SubQuery {
    pub sql: String,
    pub params: Vec<Value>,
}

/// The sub-queries whose merged, re-sorted and truncated results answer `query`.
pub(crate) fn plan(query: &SessionQuery) -> Vec<SubQuery> {
    let driver = Driver::choose(query);
    driver.partitions(query).into_iter().map(|(status, blank)| sub_query(query, driver, status, blank)).collect()
}

/// Builds one sub-query; `status` / `blank` are the prefix values this one fixes.
fn sub_query(query: &SessionQuery, driver: Driver, status: Option<Status>, blank: Option<bool>) -> SubQuery {
    let mut builder = Builder { conditions: Vec::new(), params: Vec::new() };
    let sort = if driver.drives_from_labels() { "k" } else { "s" };
    let from = match (index(driver), driver.drives_from_labels()) {
        (Some(index), true) => format!(
            "session_labels AS k INDEXED BY {index} CROSS JOIN sessions AS s ON s.tenant = k.tenant AND s.id = k.id"
        ),
        (Some(index), false) => format!("sessions AS s INDEXED BY {index}"),
        (None, _) => "sessions AS s".to_owned(),
    };
    if let Some(tenant) = &query.tenant {
        builder.equals(&format!("{sort}.tenant"), text(tenant.as_str()));
    }
    builder.label(query, driver);
    match status {
        Some(status) => builder.equals(&format!("{sort}.status"), text(status.as_str())),
        None if !query.statuses.is_empty() => builder.status_in(&query.statuses),
        None => {}
    }
    match blank {
        Some(blank) => builder.equals(&format!("{sort}.blank"), Value::Integer(blank.into())),
        None if !query.include_blank => builder.conditions.push("s.blank = 0".into()),
        None => {}
    }
    builder.residual_filters(query, sort);
    let mut order = format!("{sort}.last_activity DESC, {sort}.id DESC");
    if driver == Driver::AnyTenant {
        // Equal (last_activity, id) in several tenants: tenant order, as the reference.
        order.push_str(", s.tenant ASC");
    }
    let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
    builder.params.push(Value::Integer(limit));
    let conditions = if builder.conditions.is_empty() { "1".to_owned() } else { builder.conditions.join(" AND ") };
    SubQuery {
        sql: format!(
            "SELECT {sort}.last_activity, {sort}.id, s.tenant, s.record_json FROM {from} WHERE {conditions} ORDER BY {order} LIMIT ?"
        ),
        params: builder.params,
    }
}

fn text(text: &str) -> Value {
    Value::Text(text.to_owned())
}

struct Builder {
    conditions: Vec<String>,
    params: Vec<Value>,
}

impl Builder {
    fn push(&mut self, condition: String, value: Value) {
        self.conditions.push(condition);
        self.params.push(value);
    }

    fn equals(&mut self, column: &str, value: Value) {
        self.push(format!("{column} = ?"), value);
    }

    fn label(&mut self, query: &SessionQuery, driver: Driver) {
        let Some(label) = &query.label else { return };
        if driver.drives_from_labels() {
            self.equals("k.label", text(label));
        } else {
            let exists =
                "EXISTS (SELECT 1 FROM session_labels AS l WHERE l.tenant = s.tenant AND l.id = s.id AND l.label = ?)";
            self.push(exists.to_owned(), text(label));
        }
    }

    fn status_in(&mut self, statuses: &[Status]) {
        let marks = vec!["?"; statuses.len()].join(", ");
        self.conditions.push(format!("s.status IN ({marks})"));
        self.params.extend(statuses.iter().map(|status| Value::from(status.as_str().to_owned())));
    }

    /// Filters that are not part of the driving index's prefix.
    fn residual_filters(&mut self, query: &SessionQuery, sort: &str) {
        if let Some(parent) = &query.parent {
            self.equals("s.parent", text(parent.as_str()));
        }
        if let Some(project) = &query.project {
            self.equals("s.project", text(project.as_str()));
        }
        if let Some(user) = &query.user {
            self.equals("s.user", text(user.as_str()));
        }
        let time = |timestamp| Value::Integer(time_column(timestamp));
        if let Some(since) = query.active_since {
            self.push(format!("{sort}.last_activity >= ?"), time(since));
        }
        if let Some(before) = query.active_before {
            self.push(format!("{sort}.last_activity < ?"), time(before));
        }
        if let Some(before) = query.lease_before {
            self.push("s.lease_until < ?".into(), time(before));
        }
        if let Some(before) = query.created_before {
            self.push("s.created_at < ?".into(), time(before));
        }
        if let Some(before) = query.status_changed_before {
            self.push("s.status_changed_at < ?".into(), time(before));
        }
        if let Some(search) = &query.search {
            // Checked on the rows the index scan passes (`berth_catalog::search`).
            self.push("s.search LIKE ? ESCAPE '\\'".into(), text(&search.like_pattern()));
        }
        if let Some(cursor) = &query.cursor {
            // A row-value comparison: SQLite turns it into a range bound on the index.
            self.conditions.push(format!("({sort}.last_activity, {sort}.id) < (?, ?)"));
            self.params.push(time(cursor.last_activity));
            self.params.push(text(cursor.id.as_str()));
        }
    }
}
