//! Per-block summaries of the field index (schema V7): a key-order walk that a filter
//! condition cannot narrow (it matches too many items for the field index to drive
//! the page) skips the runs of items where no item can match.
//!
//! A tenant's memory items, in key order (namespace, then key), are cut into blocks;
//! `memory_blocks` holds each block's first (namespace, key) — a block holds the items
//! from there up to the next block's first — and `memory_block_ranges`, per block, field
//! and kind, the least and greatest `sort` of its items' values (`memory_fields`). The
//! first block starts at ("", ""), so every item is in exactly one block, and an item
//! never changes block (its key does not change; splits only cut a block in two).
//!
//! The one invariant: every `memory_fields` row lies within its item's block's range for
//! that field and kind. Indexing items widens their blocks' ranges (`Pending`, once per
//! block per batch); a block that has taken `BLOCK_MAX` items since it was last built is
//! rebuilt from its items' field rows, cut into blocks of `BLOCK_ITEMS` (`rebuild`).
//! Applying a delete (`search.rs`) rebuilds the blocks that held what it removed (the
//! change records the item's position; `rebuild_held`), so no range keeps a removed value. A replacement only widens: its
//! block's range may be wider than its items need until the next rebuild, which costs a
//! walk some rows, never a match.

use crate::error::Failure;
use crate::memory::Params;
use rusqlite::{params_from_iter, Connection, OptionalExtension};
use std::collections::{BTreeMap, BTreeSet};

/// The items a block is cut to when it is (re)built.
pub(crate) const BLOCK_ITEMS: usize = 128;

/// A block is rebuilt once it has taken this many items (new or replaced) since it was
/// last built.
const BLOCK_MAX: i64 = 2 * BLOCK_ITEMS as i64;

/// A position in a tenant's key order.
pub(crate) type Position = (String, String);

/// The block holding `(namespace, key)`, if the tenant has blocks.
/// `holding`'s statement (tests look at it in the statement cache).
pub(crate) const HOLDING_SQL: &str =
    "SELECT namespace, key FROM memory_blocks WHERE tenant = ?1 AND (namespace, key) <= (?2, ?3) \
     ORDER BY namespace DESC, key DESC LIMIT 1";

pub(crate) fn holding(
    connection: &Connection,
    tenant: &str,
    namespace: &str,
    key: &str,
) -> Result<Option<Position>, Failure> {
    Ok(connection
        .prepare_cached(HOLDING_SQL)?
        .query_row((tenant, namespace, key), |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?)
}

/// The first block after the one starting at `start`, if any.
fn next_block(connection: &Connection, tenant: &str, start: &Position) -> Result<Option<Position>, Failure> {
    Ok(connection
        .prepare_cached(
            "SELECT namespace, key FROM memory_blocks WHERE tenant = ?1 AND (namespace, key) > (?2, ?3) \
             ORDER BY namespace, key LIMIT 1",
        )?
        .query_row((tenant, &start.0, &start.1), |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?)
}

/// The block holding `(namespace, key)`, created (the tenant's first, from ("", "")) if
/// the tenant has none.
fn block_of(connection: &Connection, tenant: &str, namespace: &str, key: &str) -> Result<Position, Failure> {
    if let Some(block) = holding(connection, tenant, namespace, key)? {
        return Ok(block);
    }
    connection
        .prepare_cached("INSERT INTO memory_blocks (tenant, namespace, key, items) VALUES (?1, '', '', 0)")?
        .execute([tenant])?;
    Ok((String::new(), String::new()))
}

/// The widenings of a batch of indexed items, per block, written once per block
/// (`flush`): a batch of neighbouring keys writes each block's rows once, not once per
/// item.
#[derive(Default)]
pub(crate) struct Pending {
    blocks: BTreeMap<(String, Position), Widening>,
}

#[derive(Default)]
struct Widening {
    items: i64,
    ranges: BTreeMap<(String, &'static str), (String, String)>,
}

impl Pending {
    /// Notes an item that is being indexed with `fields` (its `value_fields`): its
    /// block's ranges must take them.
    pub(crate) fn note(
        &mut self,
        connection: &Connection,
        tenant: &str,
        namespace: &str,
        key: &str,
        fields: &[(String, &'static str, String)],
    ) -> Result<(), Failure> {
        let block = block_of(connection, tenant, namespace, key)?;
        let widening = self.blocks.entry((tenant.to_owned(), block)).or_default();
        widening.items += 1;
        for (field, kind, sort) in fields {
            let range = widening.ranges.entry((field.clone(), kind)).or_insert_with(|| (sort.clone(), sort.clone()));
            if *sort < range.0 {
                range.0 = sort.clone();
            }
            if *sort > range.1 {
                range.1 = sort.clone();
            }
        }
        Ok(())
    }

    /// Widens each noted block's ranges, and rebuilds a block that has taken
    /// `BLOCK_MAX` items since it was last built.
    pub(crate) fn flush(self, connection: &Connection) -> Result<(), Failure> {
        let mut widen = connection.prepare_cached(
            "INSERT INTO memory_block_ranges (tenant, namespace, key, field, kind, low, high) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (tenant, namespace, key, field, kind) \
             DO UPDATE SET low = min(low, excluded.low), high = max(high, excluded.high)",
        )?;
        let mut count = connection.prepare_cached(
            "UPDATE memory_blocks SET items = items + ?4 WHERE tenant = ?1 AND namespace = ?2 AND key = ?3 \
             RETURNING items",
        )?;
        for ((tenant, block), widening) in self.blocks {
            for ((field, kind), (low, high)) in &widening.ranges {
                widen.execute((&tenant, &block.0, &block.1, field, kind, low, high))?;
            }
            let taken: i64 = count.query_row((&tenant, &block.0, &block.1, widening.items), |row| row.get(0))?;
            if taken >= BLOCK_MAX {
                rebuild(connection, &tenant, &block)?;
            }
        }
        Ok(())
    }
}

/// Rebuilds the block starting at `start` from its items: cut into blocks of
/// `BLOCK_ITEMS`, each starting at its first item (the tenant's first block keeps the
/// origin), each with exact ranges; a block left without items is removed.
fn rebuild(connection: &Connection, tenant: &str, start: &Position) -> Result<(), Failure> {
    let next = next_block(connection, tenant, start)?;
    let keys: Vec<Position> = {
        let (sql, bounds) = match &next {
            Some(next) => (
                "SELECT namespace, key FROM memory_items WHERE tenant = ?1 AND (namespace, key) >= (?2, ?3) \
                 AND (namespace, key) < (?4, ?5) ORDER BY namespace, key",
                vec![start.0.as_str(), &start.1, &next.0, &next.1],
            ),
            None => (
                "SELECT namespace, key FROM memory_items WHERE tenant = ?1 AND (namespace, key) >= (?2, ?3) \
                 ORDER BY namespace, key",
                vec![start.0.as_str(), &start.1],
            ),
        };
        let mut statement = connection.prepare_cached(sql)?;
        let rows = statement
            .query_map(params_from_iter(std::iter::once(tenant).chain(bounds)), |row| Ok((row.get(0)?, row.get(1)?)))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    connection
        .prepare_cached("DELETE FROM memory_block_ranges WHERE tenant = ?1 AND namespace = ?2 AND key = ?3")?
        .execute((tenant, &start.0, &start.1))?;
    connection
        .prepare_cached("DELETE FROM memory_blocks WHERE tenant = ?1 AND namespace = ?2 AND key = ?3")?
        .execute((tenant, &start.0, &start.1))?;
    let origin = start.0.is_empty() && start.1.is_empty();
    if keys.is_empty() && !origin {
        // No item left: the block is gone, and its (empty) stretch joins the one before.
        return Ok(());
    }
    let pieces: Vec<&[Position]> = if keys.is_empty() { vec![&[]] } else { keys.chunks(BLOCK_ITEMS).collect() };
    for (index, piece) in pieces.iter().enumerate() {
        // A block starts at its first item (so no deleted key stays a boundary), or at
        // the origin; nothing lies between the old start and the new.
        let first = if index == 0 && origin { start.clone() } else { piece[0].clone() };
        let end = pieces.get(index + 1).map(|following| following[0].clone()).or_else(|| next.clone());
        build(connection, tenant, &first, end.as_ref(), piece.len())?;
    }
    Ok(())
}

/// Stores the block `[first, end)` of `items` items with the exact ranges of their
/// field rows.
fn build(
    connection: &Connection,
    tenant: &str,
    first: &Position,
    end: Option<&Position>,
    items: usize,
) -> Result<(), Failure> {
    connection
        .prepare_cached("INSERT INTO memory_blocks (tenant, namespace, key, items) VALUES (?1, ?2, ?3, ?4)")?
        .execute((tenant, &first.0, &first.1, items as i64))?;
    let ranges = "INSERT INTO memory_block_ranges (tenant, namespace, key, field, kind, low, high) \
                  SELECT ?1, ?2, ?3, f.field, f.kind, min(f.sort), max(f.sort) \
                  FROM memory_items AS m CROSS JOIN memory_fields AS f ON f.item = m.id \
                  WHERE m.tenant = ?1 AND (m.namespace, m.key) >= (?2, ?3)";
    match end {
        Some(end) => connection
            .prepare_cached(&format!("{ranges} AND (m.namespace, m.key) < (?4, ?5) GROUP BY f.field, f.kind"))?
            .execute((tenant, &first.0, &first.1, &end.0, &end.1))?,
        None => connection
            .prepare_cached(&format!("{ranges} GROUP BY f.field, f.kind"))?
            .execute((tenant, &first.0, &first.1))?,
    };
    Ok(())
}

/// Rebuilds the blocks that held deleted items: `held` is the blocks holding their
/// positions. No range then keeps a deleted item's values, nor a block boundary its key.
pub(crate) fn rebuild_held(connection: &Connection, held: BTreeSet<(String, Position)>) -> Result<(), Failure> {
    for (tenant, block) in held {
        rebuild(connection, &tenant, &block)?;
    }
    Ok(())
}

/// Builds every tenant's blocks from the items stored (the V7 migration).
pub(crate) fn build_all(connection: &Connection) -> Result<(), Failure> {
    let tenants: Vec<String> = connection
        .prepare("SELECT DISTINCT tenant FROM memory_items")?
        .query_map([], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for tenant in tenants {
        connection
            .prepare_cached("INSERT INTO memory_blocks (tenant, namespace, key, items) VALUES (?1, '', '', ?2)")?
            .execute((&tenant, BLOCK_MAX))?;
        rebuild(connection, &tenant, &(String::new(), String::new()))?;
    }
    Ok(())
}

/// Calls `walk(low, high)` for each span of consecutive blocks, from the one holding
/// `from` up to `until` (a namespace: blocks starting at or past it are not read), in
/// which an item may pass the filter — `test` pushes its parameters and returns SQL over
/// the block `b` (`memory_blocks`) — in key order, until `walk` returns true (its page is
/// full). `high` is the first block past the span, or None past the last one read.
/// Blocks are read a few at first, then more at a time, and a span still open when a
/// chunk ends is walked then, so a page found early costs little more than its walk.
pub(crate) fn spans(
    connection: &Connection,
    tenant: &str,
    from: &Position,
    until: &str,
    test: impl FnOnce(&mut Params) -> String,
    mut walk: impl FnMut(&Position, Option<&Position>) -> Result<bool, Failure>,
) -> Result<(), Failure> {
    let Some(mut cursor) = holding(connection, tenant, &from.0, &from.1)? else {
        // No block yet (nothing indexed): one span, the whole order.
        walk(from, None)?;
        return Ok(());
    };
    let mut params = Params::default();
    let tenant_is = params.push(tenant.to_owned());
    let (namespace_is, key_is) = (params.push(String::new()), params.push(String::new()));
    let (until_is, limit_is) = (params.push(until.to_owned()), params.push(0i64));
    let may = test(&mut params);
    let sql = format!(
        "SELECT b.namespace, b.key, {may} FROM memory_blocks AS b WHERE b.tenant = {tenant_is} \
         AND (b.namespace, b.key) >= ({namespace_is}, {key_is}) AND b.namespace < {until_is} \
         ORDER BY b.namespace, b.key LIMIT {limit_is}"
    );
    let mut chunk = 8usize;
    let mut open: Option<Position> = None;
    loop {
        params.0[1] = cursor.0.clone().into();
        params.0[2] = cursor.1.clone().into();
        params.0[4] = (chunk as i64 + 1).into();
        let blocks: Vec<(Position, bool)> = connection
            .prepare_cached(&sql)?
            .query_map(params_from_iter(params.0.iter()), |row| Ok(((row.get(0)?, row.get(1)?), row.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        for (block, may) in blocks.iter().take(chunk) {
            match (may, &open) {
                (true, None) => open = Some(block.clone()),
                (false, Some(low)) => {
                    if walk(low, Some(block))? {
                        return Ok(());
                    }
                    open = None;
                }
                _ => {}
            }
        }
        let Some((next, _)) = blocks.get(chunk) else { break };
        if let Some(low) = open.take() {
            if walk(&low, Some(next))? {
                return Ok(());
            }
        }
        cursor = next.clone();
        chunk = (chunk * 2).min(256);
    }
    if let Some(low) = open {
        walk(&low, None)?;
    }
    Ok(())
}
