//! Memory items, writes, queries and their reference semantics.

use super::filter::Filter;
use super::namespace::{check_key, Namespace};
use super::text::TextQuery;
use berth_core::limits::{Limit, MEMORY_BYTES_DEFAULT, MEMORY_ITEMS_DEFAULT, MEMORY_VALUE_BYTES_MAX, PAGE_SIZE_MAX};
use berth_core::limits::{MEMORY_KEY_BYTES_MAX, MEMORY_NAMESPACE_BYTES_MAX};
use berth_core::{Error, JsonText, Result, SessionId, Timestamp};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// A stored memory item: `(tenant, namespace, key) → value`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryItem {
    pub namespace: Namespace,
    pub key: String,
    /// Exactly as written (R-C9).
    pub value: JsonText,
    /// 1 on creation, +1 per put.
    pub revision: u64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// Invisible from this time on, and removed by the sweeper.
    pub expires_at: Option<Timestamp>,
    /// The time to live it was written with (a read that refreshes extends by it).
    pub ttl_ms: Option<u64>,
    /// Deleted with this session (in the same change).
    pub bound_to: Option<SessionId>,
}

impl MemoryItem {
    /// What the item counts against the tenant's byte quota (when it is charged).
    pub fn bytes(&self) -> u64 {
        item_bytes(&self.namespace, &self.key, &self.value)
    }

    /// Does the item count against its tenant's usage and quota (`Namespace::is_charged`)?
    pub fn is_charged(&self) -> bool {
        self.namespace.is_charged()
    }

    pub fn is_live(&self, now: Timestamp) -> bool {
        self.expires_at.is_none_or(|at| now < at)
    }

    /// Checks the key and the value's size, as a put's are (`MemoryPut::check`): an
    /// imported item is held to the same limits, so no stored item counts more than
    /// `ITEM_BYTES_MAX`.
    pub fn check(&self) -> Result<()> {
        check_key_and_value(&self.key, &self.value)
    }
}

/// The most an item can count against the byte quota (`item_bytes`: its namespace, key
/// and value, each at its limit).
pub const ITEM_BYTES_MAX: u64 = (MEMORY_NAMESPACE_BYTES_MAX + MEMORY_KEY_BYTES_MAX + MEMORY_VALUE_BYTES_MAX) as u64;

fn check_key_and_value(key: &str, value: &JsonText) -> Result<()> {
    check_key(key)?;
    if value.len_bytes() > MEMORY_VALUE_BYTES_MAX {
        return Err(Error::LimitExceeded {
            what: Limit::MemoryValueBytes,
            limit: MEMORY_VALUE_BYTES_MAX as u64,
            actual: value.len_bytes() as u64,
        });
    }
    Ok(())
}

pub fn item_bytes(namespace: &Namespace, key: &str, value: &JsonText) -> u64 {
    (namespace.as_str().len() + key.len() + value.len_bytes()) as u64
}

/// A put: creates or replaces one item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPut {
    pub namespace: Namespace,
    pub key: String,
    pub value: JsonText,
    /// `None`: unconditional. `Some(0)`: only if absent. `Some(n)`: only if at revision n.
    pub expected_revision: Option<u64>,
    pub ttl_ms: Option<u64>,
    pub bound_to: Option<SessionId>,
}

impl MemoryPut {
    /// Checks the key and the value's size (the namespace is checked when parsed).
    pub fn check(&self) -> Result<()> {
        check_key_and_value(&self.key, &self.value)?;
        if self.ttl_ms == Some(0) {
            return Err(Error::invalid("ttl_ms", "a time to live is at least 1 ms"));
        }
        Ok(())
    }

    /// The item this put stores over `previous` (the live item, if any) at `now`, or
    /// `RevisionConflict` (actual 0: absent). The one CAS rule every backend applies.
    pub fn apply(&self, previous: Option<&MemoryItem>, now: Timestamp) -> Result<MemoryItem> {
        let actual = previous.map_or(0, |item| item.revision);
        if let Some(expected) = self.expected_revision {
            if expected != actual {
                return Err(Error::RevisionConflict { expected, actual });
            }
        }
        Ok(MemoryItem {
            namespace: self.namespace.clone(),
            key: self.key.clone(),
            value: self.value.clone(),
            revision: actual + 1,
            created_at: previous.map_or(now, |item| item.created_at),
            updated_at: now,
            expires_at: self.ttl_ms.map(|ttl| now.plus_ms(ttl)),
            ttl_ms: self.ttl_ms,
            bound_to: self.bound_to.clone(),
        })
    }
}

/// What storing a put changes: the item to store, and the tenant's usage change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PutPlan {
    pub item: MemoryItem,
    /// The change to the tenant's item count: 1 when no row held the key (live or
    /// expired) and the item is charged, else 0.
    pub items_change: i64,
    /// The change to the tenant's stored bytes (0 for an item that is not charged).
    pub bytes_change: i64,
}

impl MemoryPut {
    /// The one write rule every backend applies inside its transaction: `apply` over the
    /// live part of `stored` (the row the key holds, expired or not), then the quota
    /// against `usage`. `RevisionConflict` or `LimitExceeded` with nothing to store.
    /// berth's own bookkeeping is neither charged nor held to the quota
    /// (`Namespace::is_charged`).
    pub fn plan(
        &self,
        stored: Option<&MemoryItem>,
        usage: &MemoryUsage,
        quota: &MemoryQuota,
        now: Timestamp,
    ) -> Result<PutPlan> {
        let item = self.apply(stored.filter(|item| item.is_live(now)), now)?;
        if !item.is_charged() {
            return Ok(PutPlan { item, items_change: 0, bytes_change: 0 });
        }
        let previous_bytes = stored.map_or(0, MemoryItem::bytes);
        usage.check_put(quota, stored.is_none(), previous_bytes, item.bytes())?;
        let bytes_change = item.bytes() as i64 - previous_bytes as i64;
        Ok(PutPlan { item, items_change: i64::from(stored.is_none()), bytes_change })
    }
}

/// One item a delete names: the live item at (`namespace`, `key`), if at
/// `expected_revision` when one is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryDelete {
    pub namespace: Namespace,
    pub key: String,
    pub expected_revision: Option<u64>,
}

impl MemoryDelete {
    /// Whether this delete takes `live`, the item it names as stored now: `false` for an
    /// absent item when absent items are skipped; else the refusals of `check_delete`.
    /// The one rule of every backend's `memory_delete_audited`.
    pub fn takes(&self, live: Option<&MemoryItem>, skip_absent: bool) -> Result<bool> {
        if live.is_none() && skip_absent {
            return Ok(false);
        }
        check_delete(&self.namespace, &self.key, live, self.expected_revision).map(|()| true)
    }
}

/// Checks a delete's expected revision against the live item (`NotFound` if absent).
pub fn check_delete(namespace: &Namespace, key: &str, live: Option<&MemoryItem>, expected: Option<u64>) -> Result<()> {
    let Some(item) = live else {
        return Err(Error::NotFound { what: "memory item", id: format!("{namespace}:{key}") });
    };
    match expected {
        Some(expected) if expected != item.revision => Err(Error::RevisionConflict { expected, actual: item.revision }),
        _ => Ok(()),
    }
}

/// Per-tenant memory quota (named limits `memory_items`, `memory_bytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryQuota {
    pub items: u64,
    pub bytes: u64,
}

impl Default for MemoryQuota {
    fn default() -> MemoryQuota {
        MemoryQuota { items: MEMORY_ITEMS_DEFAULT, bytes: MEMORY_BYTES_DEFAULT }
    }
}

/// A tenant's own quota, set by an admin: each limit it gives replaces the service's
/// default (`None`: the default applies). Kept per tenant by every backend
/// (`MemoryStore::set_memory_quota`), and read by a put in the transaction that checks it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantQuota {
    pub items: Option<u64>,
    pub bytes: Option<u64>,
}

impl TenantQuota {
    /// The quota that applies: this tenant's limits where set, `default`'s elsewhere.
    pub fn over(&self, default: &MemoryQuota) -> MemoryQuota {
        MemoryQuota { items: self.items.unwrap_or(default.items), bytes: self.bytes.unwrap_or(default.bytes) }
    }
}

/// What a removal of several items took (a batch delete, one sweep's batch of a tenant):
/// in all and per scope (`user/alice` → its items and bytes), as its audit record holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removed {
    pub items: u64,
    pub bytes: u64,
    pub scopes: BTreeMap<String, ScopeRemoved>,
}

/// One scope's part of a `Removed`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeRemoved {
    pub items: u64,
    pub bytes: u64,
}

impl Removed {
    /// Counts one removed item of `namespace` (its text) that counted `bytes`.
    pub fn add(&mut self, namespace: &str, bytes: u64) {
        self.add_scope(super::namespace::scope_of(namespace), 1, bytes);
    }

    /// Counts `items` removed items of `scope` that counted `bytes` in all.
    pub fn add_scope(&mut self, scope: &str, items: u64, bytes: u64) {
        self.items += items;
        self.bytes += bytes;
        let part = self.scopes.entry(scope.to_owned()).or_default();
        part.items += items;
        part.bytes += bytes;
    }

    /// The counts of `items`.
    pub fn of<'a>(items: impl IntoIterator<Item = &'a MemoryItem>) -> Removed {
        let mut removed = Removed::default();
        for item in items {
            removed.add(item.namespace.as_str(), item.bytes());
        }
        removed
    }
}

/// A tenant's stored memory (expired items not yet swept included; berth's own
/// bookkeeping never: `Namespace::is_charged`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryUsage {
    pub items: u64,
    pub bytes: u64,
}

impl MemoryUsage {
    /// Would replacing `previous_bytes` (0 if new) by `new_bytes` stay within `quota`?
    pub fn check_put(&self, quota: &MemoryQuota, is_new: bool, previous_bytes: u64, new_bytes: u64) -> Result<()> {
        let items = self.items + u64::from(is_new);
        if is_new && items > quota.items {
            return Err(Error::LimitExceeded { what: Limit::MemoryItems, limit: quota.items, actual: items });
        }
        let bytes = self.bytes.saturating_sub(previous_bytes) + new_bytes;
        if new_bytes > previous_bytes && bytes > quota.bytes {
            return Err(Error::LimitExceeded { what: Limit::MemoryBytes, limit: quota.bytes, actual: bytes });
        }
        Ok(())
    }
}

/// The orders a search can return.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SearchOrder {
    /// Namespace, then key, ascending.
    #[default]
    Key,
    /// Most recently updated first; ties by namespace, then key, ascending.
    UpdatedAt,
    /// Most occurrences of the query's words first; ties by namespace, then key. Needs a query.
    Relevance,
}

impl SearchOrder {
    pub fn name(self) -> &'static str {
        match self {
            SearchOrder::Key => "key",
            SearchOrder::UpdatedAt => "updated_at",
            SearchOrder::Relevance => "relevance",
        }
    }

    pub fn parse(name: &str) -> Result<SearchOrder> {
        [SearchOrder::Key, SearchOrder::UpdatedAt, SearchOrder::Relevance]
            .into_iter()
            .find(|order| order.name() == name)
            .ok_or_else(|| Error::invalid("order", format!("unknown order {name:?} (key, updated_at, relevance)")))
    }
}

/// Where a search page continues: the last item's sort key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchCursor {
    pub order: SearchOrder,
    /// `updated_at` for that order, the score for relevance, 0 for key.
    pub rank: u64,
    pub namespace: String,
    pub key: String,
}

impl SearchCursor {
    pub fn of(order: SearchOrder, item: &MemoryItem, score: u64) -> SearchCursor {
        let rank = match order {
            SearchOrder::Key => 0,
            SearchOrder::UpdatedAt => item.updated_at.0,
            SearchOrder::Relevance => score,
        };
        SearchCursor { order, rank, namespace: item.namespace.as_str().to_owned(), key: item.key.clone() }
    }

    /// Opaque text: `<order>.<rank>.<hex namespace>.<hex key>`.
    pub fn encode(&self) -> String {
        format!("{}.{}.{}.{}", self.order.name(), self.rank, hex::encode(&self.namespace), hex::encode(&self.key))
    }

    pub fn decode(text: &str) -> Result<SearchCursor> {
        let invalid = || Error::invalid("cursor", "not a cursor this server issued");
        let mut parts = text.split('.');
        let (Some(order), Some(rank), Some(namespace), Some(key), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid());
        };
        let text = |hex_text: &str| {
            hex::decode(hex_text).ok().and_then(|bytes| String::from_utf8(bytes).ok()).ok_or_else(invalid)
        };
        Ok(SearchCursor {
            order: SearchOrder::parse(order).map_err(|_| invalid())?,
            rank: rank.parse().map_err(|_| invalid())?,
            namespace: text(namespace)?,
            key: text(key)?,
        })
    }
}

/// A search: items in `prefix` (the namespace or inside it) matching `filter` and
/// `query`, in `order`, after `cursor`, at most `limit`.
#[derive(Clone, Debug)]
pub struct MemorySearch {
    pub prefix: Namespace,
    pub filter: Filter,
    pub query: Option<TextQuery>,
    pub order: SearchOrder,
    pub cursor: Option<SearchCursor>,
    pub limit: usize,
}

impl MemorySearch {
    pub fn new(prefix: Namespace) -> MemorySearch {
        MemorySearch {
            prefix,
            filter: Filter::default(),
            query: None,
            order: SearchOrder::Key,
            cursor: None,
            limit: berth_core::limits::PAGE_SIZE_DEFAULT,
        }
    }

    pub fn check(&self) -> Result<()> {
        if self.order == SearchOrder::Relevance && self.query.is_none() {
            return Err(Error::invalid("order", "relevance needs a query"));
        }
        if self.limit == 0 || self.limit > PAGE_SIZE_MAX {
            return Err(Error::LimitExceeded {
                what: Limit::PageSize,
                limit: PAGE_SIZE_MAX as u64,
                actual: self.limit as u64,
            });
        }
        if let Some(cursor) = &self.cursor {
            if cursor.order != self.order {
                return Err(Error::invalid("cursor", "the cursor is from a search in another order"));
            }
        }
        Ok(())
    }

    /// The reference semantics: `Some(score)` if `item` belongs in the result (ignoring
    /// the cursor), the score being 0 without a query.
    pub fn score(&self, item: &MemoryItem, now: Timestamp) -> Option<u64> {
        if !item.is_live(now) || !item.namespace.is_within(&self.prefix) || !self.filter.matches(&item.value) {
            return None;
        }
        match &self.query {
            None => Some(0),
            Some(query) => query.score_value(&item.value),
        }
    }

    /// The documented order of two scored items.
    pub fn compare(&self, a: (&MemoryItem, u64), b: (&MemoryItem, u64)) -> Ordering {
        let tie = || (a.0.namespace.as_str(), a.0.key.as_str()).cmp(&(b.0.namespace.as_str(), b.0.key.as_str()));
        match self.order {
            SearchOrder::Key => tie(),
            SearchOrder::UpdatedAt => b.0.updated_at.cmp(&a.0.updated_at).then_with(tie),
            SearchOrder::Relevance => b.1.cmp(&a.1).then_with(tie),
        }
    }

    /// Is a scored item after the cursor?
    pub fn after_cursor(&self, item: &MemoryItem, score: u64) -> bool {
        let Some(cursor) = &self.cursor else { return true };
        let mine = SearchCursor::of(self.order, item, score);
        let tie = (mine.namespace.as_str(), mine.key.as_str()).cmp(&(cursor.namespace.as_str(), cursor.key.as_str()));
        let ordering = match self.order {
            SearchOrder::Key => tie,
            SearchOrder::UpdatedAt | SearchOrder::Relevance => cursor.rank.cmp(&mine.rank).then(tie),
        };
        ordering == Ordering::Greater
    }

    /// One page from any set of candidate items (a superset of the result): the
    /// reference implementation, and the last step of a backend that narrows first.
    pub fn page(&self, candidates: impl IntoIterator<Item = MemoryItem>, now: Timestamp) -> Vec<MemoryItem> {
        let mut scored: Vec<(MemoryItem, u64)> = candidates
            .into_iter()
            .filter_map(|item| self.score(&item, now).map(|score| (item, score)))
            .filter(|(item, score)| self.after_cursor(item, *score))
            .collect();
        scored.sort_by(|a, b| self.compare((&a.0, a.1), (&b.0, b.1)));
        scored.truncate(self.limit);
        scored.into_iter().map(|(item, _)| item).collect()
    }

    /// The cursor that continues after `items` (a full page), if it was full.
    pub fn next_cursor(&self, items: &[MemoryItem]) -> Option<SearchCursor> {
        if items.len() < self.limit {
            return None;
        }
        let last = items.last()?;
        let score = self.query.as_ref().and_then(|query| query.score_value(&last.value)).unwrap_or(0);
        Some(SearchCursor::of(self.order, last, score))
    }
}

/// A namespace listing: distinct namespaces of live items within `prefix`, each cut to
/// `max_depth` segments (if given), ascending, after `cursor`, at most `limit`.
#[derive(Clone, Debug)]
pub struct NamespaceQuery {
    pub prefix: Namespace,
    pub max_depth: Option<usize>,
    pub cursor: Option<String>,
    pub limit: usize,
}

impl NamespaceQuery {
    /// The reference: the page from the namespaces of every live item within `prefix`.
    pub fn page<'a>(&self, namespaces: impl IntoIterator<Item = &'a Namespace>) -> Vec<Namespace> {
        let mut out: Vec<Namespace> = namespaces
            .into_iter()
            .filter(|ns| ns.is_within(&self.prefix))
            .map(|ns| match self.max_depth {
                Some(depth) => ns.truncated(depth),
                None => ns.clone(),
            })
            .filter(|ns| self.cursor.as_deref().is_none_or(|cursor| ns.as_str() > cursor))
            .collect();
        out.sort();
        out.dedup();
        out.truncate(self.limit);
        out
    }
}

/// What `forget` removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForgetOutcome {
    pub items: u64,
    pub bytes: u64,
}
