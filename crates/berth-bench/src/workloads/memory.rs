//! W8: scoped memory (issue 11) on the embedded default's catalog (`SqliteCatalog` as a
//! `MemoryStore`), beside a plain SQLite table doing the same in the same run: durable
//! puts beside a `synchronous=FULL` upsert of the same bytes, point gets beside a select
//! by primary key, search pages of 50 over `items` items in one namespace (unfiltered,
//! filtered at several selectivities, full text with a rare and a common term in key
//! and relevance order), and `forget` of a whole scope.
//!
//! The calls are the catalog's (what `SessionService`'s memory operations run after
//! their authorization check), so the rows compare storage with storage, as W1 does.
//! The item shapes are shared with `examples/memory_bench.rs`, which also runs them on
//! PostgreSQL.

use super::{elapsed_us, rotation};
use crate::fixtures::{io, sql};
use crate::report::{Figure, Goal, Measurement, Target};
use berth_catalog::scoped::{Condition, Filter, FilterOp, ForgetOutcome, MemoryItem, MemoryPut, MemoryQuota};
use berth_catalog::scoped::{MemorySearch, Namespace, SearchOrder, TextQuery};
use berth_catalog::{AuditDraft, MemoryStore};
use berth_core::{JsonText, Result, TenantId, Timestamp};
use berth_sqlite::SqliteCatalog;
use std::path::Path;
use std::time::Instant;

/// The namespace every searched item is in; searches run on its parent prefix.
pub const NAMESPACE: &str = "app/bench/items";
const SEARCH_PREFIX: &str = "app/bench";
const PLAIN: &str = "sqlite FULL, plain table";
const BERTH: &str = "berth memory · SQLite catalog";
/// Search time for the page, and the clock every search and get runs at.
const NOW: Timestamp = Timestamp(10_000_000);

/// Item `i`'s value: ten kinds (10 % each), `n` = i, `rare` on 1 % of items, eight words
/// of a 1,000-word vocabulary (each word on ~0.8 % of items) and `common` on a third.
pub fn value(i: usize) -> JsonText {
    let words: Vec<String> = (0..8).map(|w| format!("w{}", (i * 7 + w * 131) % 1_000)).collect();
    let common = if i.is_multiple_of(3) { " common" } else { "" };
    let text = format!(
        r#"{{"kind":"k{}","n":{i},"rare":{},"score":{}.{:02},"text":"{}{common}"}}"#,
        i % 10,
        i.is_multiple_of(100),
        i % 977,
        i % 100,
        words.join(" ")
    );
    JsonText::parse(&text).expect("bench value")
}

/// Item `i` of the searched namespace (created and updated at `1000 + i`).
pub fn item(i: usize) -> MemoryItem {
    MemoryItem {
        namespace: Namespace::parse(NAMESPACE).expect("namespace"),
        key: format!("item-{i:08}"),
        value: value(i),
        revision: 1,
        created_at: Timestamp(1_000 + i as u64),
        updated_at: Timestamp(1_000 + i as u64),
        expires_at: None,
        ttl_ms: None,
        bound_to: None,
    }
}

fn condition(field: &str, op: FilterOp, operand: &str) -> Filter {
    let operand = JsonText::parse(operand).expect("operand");
    Filter::new(vec![Condition { field: field.into(), op, operand }]).expect("filter")
}

/// A search shape: its name, whether it is full text (the 20 ms target) or not (5 ms),
/// and the search.
pub struct Shape {
    pub name: &'static str,
    pub full_text: bool,
    pub search: MemorySearch,
}

/// The search shapes, pages of 50 on the namespace's parent prefix. `n >= half` matches
/// the second half of the key order only: a walk in key order from the start passes
/// every non-matching item first.
pub fn shapes(items: usize) -> Vec<Shape> {
    let base = || MemorySearch { limit: 50, ..MemorySearch::new(Namespace::parse(SEARCH_PREFIX).expect("prefix")) };
    let text = |query: &str| Some(TextQuery::parse(query).expect("query"));
    let shape = |name, full_text, search| Shape { name, full_text, search };
    let half = (items / 2).to_string();
    vec![
        shape("no filter, key order", false, base()),
        shape("no filter, updated order", false, MemorySearch { order: SearchOrder::UpdatedAt, ..base() }),
        shape(
            "filter kind = k3 (10 %)",
            false,
            MemorySearch { filter: condition("kind", FilterOp::Eq, r#""k3""#), ..base() },
        ),
        shape(
            "filter n ≥ half (50 %, the key order's second half)",
            false,
            MemorySearch { filter: condition("n", FilterOp::Gte, &half), ..base() },
        ),
        shape(
            "filter rare = true (1 %)",
            false,
            MemorySearch { filter: condition("rare", FilterOp::Eq, "true"), ..base() },
        ),
        shape("full text, rare term (~0.8 %), key order", true, MemorySearch { query: text("w500"), ..base() }),
        shape(
            "full text, rare term, relevance",
            true,
            MemorySearch { query: text("w500"), order: SearchOrder::Relevance, ..base() },
        ),
        shape("full text, common term (33 %), key order", true, MemorySearch { query: text("common"), ..base() }),
        shape(
            "full text, common term, relevance",
            true,
            MemorySearch { query: text("common"), order: SearchOrder::Relevance, ..base() },
        ),
        shape(
            "full text, two terms + filter",
            true,
            MemorySearch { query: text("common w7"), filter: condition("kind", FilterOp::Ne, r#""k1""#), ..base() },
        ),
    ]
}

/// No quota gets in the way of the bench.
pub fn quota() -> MemoryQuota {
    MemoryQuota { items: 100_000_000, bytes: 1 << 40 }
}

/// The audit record of a bench `forget`.
pub fn forget_audit(tenant: &TenantId) -> berth_catalog::scoped::ForgetAudit {
    let tenant = tenant.clone();
    Box::new(move |outcome: &ForgetOutcome| AuditDraft {
        tenant: tenant.clone(),
        time: Timestamp(30_000_000),
        actor: "admin:bench".into(),
        action: "memory.forget".into(),
        session: None,
        revision: None,
        outcome: "ok".into(),
        details: serde_json::json!({"items": outcome.items, "bytes": outcome.bytes}),
    })
}

pub fn names(items: usize) -> [String; 4] {
    [
        "W8 memory put (durable, new key)".into(),
        "W8 memory get (existing key)".into(),
        format!("W8 memory search, page of 50 ({items} items in one namespace)"),
        "W8 memory forget (whole scope)".into(),
    ]
}

pub struct Memory {
    tenant: TenantId,
    catalog: SqliteCatalog,
    plain: rusqlite::Connection,
    items: usize,
    puts: usize,
    gets: usize,
    repeats: usize,
    forget_items: usize,
    put_count: usize,
    shapes: Vec<Shape>,
    /// `[plain, berth]` each.
    put: [Measurement; 2],
    get: [Measurement; 2],
    /// One per shape (berth only: a plain table has no such search).
    search: Vec<Measurement>,
    forget: Measurement,
    _dir: tempfile::TempDir,
}

impl Memory {
    /// Seeds `sizes.memory_items` items into a fresh catalog and the plain table (not
    /// timed: bulk imports).
    pub async fn prepare(dir: &Path, sizes: &crate::Sizes) -> Result<Memory> {
        let dir = tempfile::tempdir_in(dir).map_err(io("tempdir"))?;
        let tenant = TenantId::parse("bench-memory")?;
        let catalog = SqliteCatalog::open(dir.path().join(berth_sqlite::CATALOG_FILE_NAME))?;
        let items = sizes.memory_items;
        let all: Vec<MemoryItem> = (0..items).map(item).collect();
        for chunk in all.chunks(10_000) {
            catalog.memory_import_many(&tenant, chunk.to_vec(), &quota()).await?;
        }
        let plain = plain_table(&dir.path().join("plain.sqlite"), &all)?;
        let [put, get, search, forget] = names(items);
        let pair = |name: &str, reference: &str, unit: &str| {
            [
                Measurement::new(name, reference, true, Figure::Throughput, unit),
                Measurement::new(name, BERTH, false, Figure::Throughput, unit),
            ]
        };
        let shapes = shapes(items);
        Ok(Memory {
            put: pair(&put, PLAIN, "puts"),
            get: pair(&get, "sqlite select by key, plain table", "gets"),
            search: shapes
                .iter()
                .map(|shape| Measurement::new(&search, shape.name, false, Figure::Time, "ms"))
                .collect(),
            forget: Measurement::new(&forget, BERTH, false, Figure::Time, "ms"),
            shapes,
            tenant,
            catalog,
            plain,
            items,
            puts: sizes.memory_puts,
            gets: sizes.memory_gets,
            repeats: sizes.memory_search_repeats,
            forget_items: sizes.memory_forget_items,
            put_count: 0,
            _dir: dir,
        })
    }

    pub async fn round(&mut self, round: usize) -> Result<()> {
        for index in rotation(2, round) {
            let latencies = self.put_round(index).await?;
            self.put[index].record_round(&latencies, 1);
        }
        self.put_count += self.puts;
        for index in rotation(2, round) {
            let latencies = self.get_round(index, round).await?;
            self.get[index].record_round(&latencies, 1);
        }
        for index in rotation(self.shapes.len(), round) {
            let mut latencies = Vec::with_capacity(self.repeats);
            for _ in 0..self.repeats {
                let started = Instant::now();
                let page = self.catalog.memory_search(&self.tenant, &self.shapes[index].search, NOW).await?;
                latencies.push(elapsed_us(started));
                if page.is_empty() {
                    return Err(crate::fixtures::invalid(format!(
                        "search {:?} found nothing",
                        self.shapes[index].name
                    )));
                }
            }
            let measurement = &mut self.search[index];
            measurement.rounds_ms.push(crate::report::median(&latencies).unwrap_or(0.0) / 1000.0);
            measurement.latencies_us.extend(latencies);
        }
        self.forget_round(round).await
    }

    /// `puts` new keys, each one durable transaction.
    async fn put_round(&mut self, index: usize) -> Result<Vec<f64>> {
        let mut latencies = Vec::with_capacity(self.puts);
        for i in self.put_count..self.put_count + self.puts {
            let key = format!("put-{i:08}");
            let started = Instant::now();
            if index == 0 {
                self.plain
                    .prepare_cached(
                        "INSERT INTO kv (ns, key, value) VALUES (?1, ?2, ?3) \
                         ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value",
                    )
                    .map_err(sql)?
                    .execute((NAMESPACE, &key, value(i).as_str()))
                    .map_err(sql)?;
            } else {
                let put = MemoryPut {
                    namespace: Namespace::parse(NAMESPACE)?,
                    key,
                    value: value(i),
                    expected_revision: None,
                    ttl_ms: None,
                    bound_to: None,
                };
                self.catalog.memory_put(&self.tenant, &put, Timestamp(20_000_000), &quota()).await?;
            }
            latencies.push(elapsed_us(started));
        }
        Ok(latencies)
    }

    /// `gets` seeded keys, spread over the namespace, different each round.
    async fn get_round(&mut self, index: usize, round: usize) -> Result<Vec<f64>> {
        let namespace = Namespace::parse(NAMESPACE)?;
        let mut latencies = Vec::with_capacity(self.gets);
        for get in 0..self.gets {
            let key = format!("item-{:08}", ((round * self.gets + get) * 7919) % self.items);
            let started = Instant::now();
            let found = if index == 0 {
                let mut statement =
                    self.plain.prepare_cached("SELECT value FROM kv WHERE ns = ?1 AND key = ?2").map_err(sql)?;
                let value: Option<String> = statement
                    .query_row((NAMESPACE, &key), |row| row.get(0))
                    .map(Some)
                    .or_else(|error| match error {
                        rusqlite::Error::QueryReturnedNoRows => Ok(None),
                        other => Err(other),
                    })
                    .map_err(sql)?;
                value.is_some()
            } else {
                self.catalog.memory_get(&self.tenant, &namespace, &key, NOW, false).await?.is_some()
            };
            latencies.push(elapsed_us(started));
            if !found {
                return Err(crate::fixtures::invalid(format!("get of {key} found nothing")));
            }
        }
        Ok(latencies)
    }

    /// A fresh `forget_items`-item scope (seeded, not timed), then its `forget`.
    async fn forget_round(&mut self, round: usize) -> Result<()> {
        let scope = format!("user/forgotten-{round}");
        let namespace = Namespace::parse(&format!("{scope}/notes"))?;
        let seeded: Vec<MemoryItem> =
            (0..self.forget_items).map(|i| MemoryItem { namespace: namespace.clone(), ..item(i) }).collect();
        for chunk in seeded.chunks(10_000) {
            self.catalog.memory_import_many(&self.tenant, chunk.to_vec(), &quota()).await?;
        }
        let started = Instant::now();
        let (outcome, _) =
            self.catalog.memory_forget(&self.tenant, &Namespace::parse(&scope)?, forget_audit(&self.tenant)).await?;
        self.forget.rounds_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        if outcome.items != self.forget_items as u64 {
            return Err(crate::fixtures::invalid(format!("forget removed {} of {}", outcome.items, self.forget_items)));
        }
        Ok(())
    }

    pub fn finish(self) -> Vec<Measurement> {
        let [put_plain, put_berth] = self.put;
        let [get_plain, get_berth] = self.get;
        let mut out = vec![put_plain, put_berth, get_plain, get_berth];
        out.extend(self.search);
        out.push(self.forget);
        out
    }
}

/// The reference: the same items in a plain WAL table, `synchronous=FULL`.
pub fn plain_table(path: &Path, items: &[MemoryItem]) -> Result<rusqlite::Connection> {
    let mut connection = crate::fixtures::sqlite_open(path)?;
    connection
        .execute_batch(
            "CREATE TABLE kv (ns TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (ns, key))",
        )
        .map_err(sql)?;
    let transaction = connection.transaction().map_err(sql)?;
    {
        let mut insert = transaction.prepare("INSERT INTO kv (ns, key, value) VALUES (?1, ?2, ?3)").map_err(sql)?;
        for item in items {
            insert.execute((item.namespace.as_str(), &item.key, item.value.as_str())).map_err(sql)?;
        }
    }
    transaction.commit().map_err(sql)?;
    Ok(connection)
}

/// A fresh embedded catalog at `path` holding items `0..items` of the searched namespace
/// (bulk imports), for the profiling examples.
pub async fn seeded_catalog(path: &Path, items: usize) -> Result<(SqliteCatalog, TenantId)> {
    let tenant = TenantId::parse("bench-memory")?;
    let catalog = SqliteCatalog::open(path)?;
    let all: Vec<MemoryItem> = (0..items).map(item).collect();
    for chunk in all.chunks(10_000) {
        catalog.memory_import_many(&tenant, chunk.to_vec(), &quota()).await?;
    }
    Ok((catalog, tenant))
}

/// Issue 11's targets for these rows.
pub fn targets(items: usize) -> Vec<Target> {
    let [put, get, search, _] = names(items);
    let mut targets = vec![
        Target {
            workload: put,
            variant: BERTH.into(),
            goal: Goal::RatioAtLeast { versus: PLAIN.into(), ratio: 0.8 },
            text: "W8 durable put ≥ 0.8× the SQLite upsert".into(),
        },
        Target {
            workload: get,
            variant: BERTH.into(),
            goal: Goal::P50AtMostTimes { versus: "sqlite select by key, plain table".into(), times: 1.2 },
            text: "W8 get p50 ≤ 1.2× SQLite's".into(),
        },
    ];
    for shape in shapes(items) {
        let (limit, text) =
            if shape.full_text { (20.0, "W8 full-text page ≤ 20 ms") } else { (5.0, "W8 filtered page ≤ 5 ms") };
        targets.push(Target {
            workload: search.clone(),
            variant: shape.name.into(),
            goal: Goal::MedianAtMostMs(limit),
            text: text.into(),
        });
    }
    targets
}
