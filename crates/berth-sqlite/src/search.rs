//! The search file: scoped memory's derived rows (`memory_terms`, `memory_fields`,
//! `memory_term_counts`, `memory_blocks`, `memory_block_ranges`) in a database file of
//! their own beside the catalog (`<catalog>-search`), so writing them never holds the
//! catalog's write lock (issue 11's put row: a put that indexed a batch of items held
//! it, and every other put waited, for milliseconds).
//!
//! - **What is indexed is stated beside the rows.** Every change to an existing item (a
//!   replacement, a delete, an expiry, a `forget`) appends a row to the catalog's
//!   `memory_changes` in the change's own transaction; a new item appends none (schema
//!   V10): its id is past every id the catalog gave before (`memory_ids.floor`), so the
//!   items not yet indexed are the ids past a mark. The search file's
//!   `memory_search_state.done` is the last change its rows hold and
//!   `memory_search_items.items` the largest id, committed with them. A catch-up
//!   (`catch_up`) takes the search file's write lock, then one snapshot of the catalog,
//!   applies every change past `done` and indexes every item past `items` from it, and
//!   commits.
//! - **Dropped only below a synced `done`.** A catch-up's commit is synced
//!   (`synchronous=FULL`) for a `forget`, an import, and for the thread's pass once
//!   `TRIM_AT` changes have been applied since the last synced one (`Sync`); otherwise
//!   `NORMAL` (a power loss may take it back, `done` with its rows, and the changes are
//!   then applied again). The catalog's next write drops the changes before the last
//!   synced `done` (`Shared::trim`, inside the write's own transaction: a write from
//!   here would wait for the catalog's writers, and a busy handler's sleeps lose that
//!   race to a stream of puts — seconds, measured). The change at `done` stays, so
//!   SQLite numbers the next one past it.
//! - **Who catches up.** A thread per process (`index_soon`, woken by the catalog's
//!   memory writes, gathering a few milliseconds of them), a search that finds the file
//!   behind (in the same transaction as its page: read-your-writes), an import and a
//!   `forget` before they return (so a forgotten item's terms are gone from the file
//!   when `forget` returns).
//! - **Rebuilt, never trusted blindly.** The file is created, or emptied and rebuilt
//!   from `memory_items`, when it is missing, unreadable, belongs to another catalog
//!   (its token is not the catalog's `memory_search_token`), or is ahead of the catalog
//!   (`done` past the catalog's last change, or `items` past every id it has given: a
//!   catalog restored from a copy, or relaxed commits a power loss took). Every row
//!   there can be rebuilt; none is a fact of its own.
//! - SQLite cannot refer across files, so nothing here cascades: a deleted item's rows
//!   go when its change is applied. A search never returns a row whose item is gone:
//!   it reads the file only when it holds every change of the catalog snapshot it
//!   joins with (`current`), or inside a catch-up's transaction.

use crate::blocks;
use crate::error::Failure;
use crate::memory::{index_item, stored_value, IndexBatch, Indexed};
use crate::{fork, lock, Shared, SqliteOptions};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{mpsc, Arc, Weak};
use std::time::Duration;

/// The search file of the catalog at `catalog`.
pub(crate) fn search_path(catalog: &Path) -> PathBuf {
    let mut name = catalog.file_name().map(|name| name.to_os_string()).unwrap_or_default();
    name.push("-search");
    catalog.with_file_name(name)
}

/// Attaches the search file at `path` to `connection` as `search`.
pub(crate) fn attach(connection: &Connection, path: &Path) -> Result<(), Failure> {
    let path = path.to_str().ok_or_else(|| Failure::Corrupt("the catalog's path is not UTF-8".into()))?;
    connection.execute("ATTACH DATABASE ?1 AS search", [path])?;
    Ok(())
}

/// The connection that writes the search file: the catalog's file, which it only
/// reads, with the search file attached (created, checked, and rebuilt if it is not
/// current; `prepare`). Each catch-up sets how its commit is synced (`Sync`).
pub(crate) fn open_index(path: &Path, options: &SqliteOptions) -> Result<Connection, Failure> {
    let again = match open_index_once(path, options) {
        Ok(Opened::Ready(connection)) => return Ok(connection),
        Ok(Opened::WrittenInAnotherBoot(boot)) => {
            discard_if_written_in_another_boot(path, options, boot)?;
            open_index_once(path, options)?
        }
        Err(Failure::Sql(error)) if unreadable(&error) => {
            // Rows that can all be rebuilt: a file SQLite cannot read is started afresh.
            tracing::warn!(%error, "the memory search file is unreadable; rebuilding it");
            remove_search_file(path)?;
            open_index_once(path, options)?
        }
        Err(failure) => return Err(failure),
    };
    match again {
        Opened::Ready(connection) => Ok(connection),
        Opened::WrittenInAnotherBoot(_) => {
            Err(Failure::Corrupt("the memory search file is still another boot's after it was removed".into()))
        }
    }
}

/// The index connection's page cache for the search file, in KiB (SQLite's default is
/// 2,000 KiB; pages are allocated as they are used, so a small file takes little). An
/// indexed item changes rows at several places of the file (its fields' values, its
/// terms, its block, its updated position); with the default, the catch-ups read those
/// pages back from the OS again and again. `berth bench --only W8`, 2,000 KiB and this
/// alternated six times (2026-12-06): put row 0.76×, 0.80×, 0.77×, 0.79×, 0.73×, 0.75× →
/// 0.85×, 0.84×, 0.81×, 0.83×, 0.78×, 0.95× (the indexing thread beside the puts).
const SEARCH_CACHE_KIB: i64 = 32 * 1024;

/// An index connection, or the news that its search file was written unsynced in
/// another boot of the system than this one (`this_boot`), and so must be removed first.
enum Opened {
    Ready(Connection),
    WrittenInAnotherBoot(&'static str),
}

fn remove_search_file(catalog: &Path) -> Result<(), Failure> {
    let file = search_path(catalog);
    for suffix in ["", "-wal", "-shm"] {
        let mut name = file.clone().into_os_string();
        name.push(suffix);
        match std::fs::remove_file(&name) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                return Err(Failure::Berth(berth_core::Error::io("remove the memory search file", &error)))
            }
            _ => {}
        }
    }
    Ok(())
}

/// The boot of the running system, where the kernel names it (Linux:
/// `/proc/sys/kernel/random/boot_id`). Only then are the search file's commits written
/// without syncing (`synchronous=OFF`, `catch_up_then`): a file so written is trusted
/// only in the boot that wrote it, which it records (`memory_search_items.boot`).
/// Elsewhere its commits are `NORMAL`, which a power loss cannot corrupt.
pub(crate) fn this_boot() -> Option<&'static str> {
    static BOOT: std::sync::LazyLock<Option<String>> = std::sync::LazyLock::new(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        Some(boot.trim().to_owned()).filter(|boot| !boot.is_empty())
    });
    BOOT.as_deref()
}

/// Was the search file in `schema` of `connection` written unsynced in a boot other
/// than `boot`? Not when it says none ("", or no record: new, or before schema V10).
fn written_in_another_boot(connection: &Connection, schema: &str, boot: &str) -> Result<bool, rusqlite::Error> {
    let exists: bool = connection.query_row(
        &format!("SELECT EXISTS (SELECT 1 FROM {schema}.sqlite_schema WHERE name = 'memory_search_items')"),
        [],
        |row| row.get(0),
    )?;
    if !exists {
        return Ok(false);
    }
    let written: Option<String> = connection
        .query_row(&format!("SELECT boot FROM {schema}.memory_search_items"), [], |row| row.get(0))
        .optional()?;
    Ok(written.is_some_and(|written| !written.is_empty() && written != boot))
}

/// Removes a search file written without syncing in an earlier boot of the system: its
/// last commits, and the pages its checkpoints copied, may not have reached the disk
/// before a power loss, and what is left can be wrong in ways SQLite cannot see. It is
/// built again from the items (`prepare`). Decided again under the catalog's write
/// lock, so processes opening at once after a restart decide one at a time: the first
/// removes the file, and the others find the new one (a file a process of this boot uses
/// says this boot).
fn discard_if_written_in_another_boot(path: &Path, options: &SqliteOptions, boot: &str) -> Result<(), Failure> {
    let guard = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    guard.busy_timeout(options.busy_timeout)?;
    guard.execute_batch("BEGIN IMMEDIATE")?;
    let stale = {
        // Read-write (it only reads): a read-only connection cannot always open a file
        // in WAL mode whose shared-memory file is gone.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let file = Connection::open_with_flags(search_path(path), flags)?;
        written_in_another_boot(&file, "main", boot)?
    };
    if stale {
        tracing::warn!("the memory search file was written unsynced before the system restarted; rebuilding it");
        remove_search_file(path)?;
    }
    guard.execute_batch("COMMIT")?;
    Ok(())
}

fn unreadable(error: &rusqlite::Error) -> bool {
    matches!(error.sqlite_error_code(), Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt))
}

fn open_index_once(path: &Path, options: &SqliteOptions) -> Result<Opened, Failure> {
    // CREATE: an attached file is opened with the connection's flags (the catalog's own
    // file exists already: the writer made it).
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let connection = Connection::open_with_flags(path, flags)?;
    crate::configure(&connection, options)?;
    attach(&connection, &search_path(path))?;
    if let Some(boot) = this_boot() {
        if written_in_another_boot(&connection, "search", boot)? {
            return Ok(Opened::WrittenInAnotherBoot(boot));
        }
    }
    crate::enable_wal_in(&connection, "search", options.busy_timeout)?;
    connection.pragma_update(Some("search"), "synchronous", "FULL")?;
    connection.pragma_update(Some("search"), "cache_size", -SEARCH_CACHE_KIB)?;
    prepare(&connection)?;
    Ok(Opened::Ready(connection))
}

/// Creates the search tables if they are missing, and rebuilds the rows unless they are
/// this catalog's and not ahead of it. On any connection with `search` attached. A file
/// found usable is only read: opening a catalog takes no lock of the search file.
pub(crate) fn prepare(connection: &Connection) -> Result<(), Failure> {
    let read = connection.unchecked_transaction()?;
    let found_usable = usable(&read)?;
    read.finish()?;
    if found_usable {
        return Ok(());
    }
    // (Not usable: new, another catalog's, ahead of it, or written unsynced in another
    // boot — `open_index` removed the last before this, and here it is rebuilt.)
    connection.execute_batch(crate::schema::SEARCH_SCHEMA)?;
    let transaction = connection.unchecked_transaction()?;
    lock_search(&transaction)?;
    // Again under the lock: another process may have built it meanwhile.
    if usable(&transaction)? {
        return Ok(());
    }
    let token: String = transaction.query_row("SELECT token FROM main.memory_search_token", [], |row| row.get(0))?;
    let latest = latest(&transaction)?;
    tracing::info!("building the memory search file from the catalog's items");
    rebuild(&transaction)?;
    transaction.execute(
        "INSERT INTO search.memory_search_state (one, token, done) VALUES (1, ?1, ?2) \
         ON CONFLICT (one) DO UPDATE SET token = excluded.token, done = excluded.done",
        (&token, latest.last),
    )?;
    transaction.execute(
        "INSERT INTO search.memory_search_items (one, items, boot) VALUES (1, ?1, ?2) \
         ON CONFLICT (one) DO UPDATE SET items = excluded.items, boot = excluded.boot",
        (latest.largest, this_boot().unwrap_or("")),
    )?;
    transaction.pragma_update(Some("search"), "user_version", SEARCH_FORMAT)?;
    transaction.commit()?;
    Ok(())
}

/// Are the search file's rows this catalog's (its token) and not ahead of it — neither
/// past its last change nor holding an id past every id it has given (a catalog
/// restored from a copy, or relaxed commits a power loss took: the ids past the mark
/// would be given again, and taken for indexed), and written unsynced in this boot only
/// (`this_boot`)? False when the file has no state yet, or no item mark (written before
/// schema V10), or an earlier format (`SEARCH_FORMAT`).
fn usable(connection: &Connection) -> Result<bool, Failure> {
    let tables: i64 = connection.query_row(
        "SELECT count(*) FROM search.sqlite_schema WHERE name IN ('memory_search_state', 'memory_search_items')",
        [],
        |row| row.get(0),
    )?;
    let format: i64 = connection.pragma_query_value(Some("search"), "user_version", |row| row.get(0))?;
    if tables < 2 || format != SEARCH_FORMAT {
        return Ok(false);
    }
    let state: Option<(String, i64, i64, String)> = connection
        .query_row(
            "SELECT s.token, s.done, i.items, i.boot FROM search.memory_search_state AS s, search.memory_search_items AS i",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
        )
        .optional()?;
    let token: String = connection.query_row("SELECT token FROM main.memory_search_token", [], |row| row.get(0))?;
    let latest = latest(connection)?;
    let floor: i64 = connection.query_row("SELECT floor FROM main.memory_ids", [], |row| row.get(0))?;
    let boot = this_boot().unwrap_or("");
    Ok(state.is_some_and(|(held, done, items, written)| {
        held == token && done <= latest.last && items <= latest.largest.max(floor) && written == boot
    }))
}

/// The search file's format (its `user_version`): 11 from the catalog schema V11 (its
/// tables: `memory_updated`); 12 from the terms of 2026-12-06 (words NFC-normalized,
/// ASCII runs inside words of other scripts, a term per non-ASCII character:
/// `berth_catalog::scoped::index_terms`), which a file of 11 does not hold. A file of
/// another format is rebuilt (one written before V11 has 0). Set once its rows are
/// built, so a file whose tables are there but whose rows are not is never taken as
/// built. Not a catalog schema version: the terms change without the catalog's tables.
pub(crate) const SEARCH_FORMAT: i64 = 12;

/// Takes the search file's write lock (before anything reads the catalog, so its
/// snapshot is taken under the lock). SQLite has no `BEGIN IMMEDIATE` for one attached
/// file: a write to it, inside a deferred transaction, does that.
fn lock_search(transaction: &Connection) -> Result<(), Failure> {
    transaction.prepare_cached("UPDATE search.memory_search_state SET done = done")?.execute([])?;
    Ok(())
}

/// What the search file holds: the last change applied, and the largest item id
/// indexed (new items write no change: they are the ids past it, schema V10).
#[derive(Clone, Copy, Debug)]
struct Held {
    done: i64,
    items: i64,
}

/// Where the catalog is: its last change, and its largest item id (0 for none).
#[derive(Clone, Copy, Debug)]
struct Latest {
    last: i64,
    largest: i64,
}

impl Held {
    /// Does the search file hold everything the catalog has?
    fn holds(self, latest: Latest) -> bool {
        latest.last <= self.done && latest.largest <= self.items
    }
}

/// What the search file holds and where the catalog is, one snapshot of each (the
/// search file's first), outside a transaction.
fn positions(connection: &Connection) -> Result<(Held, Latest), Failure> {
    let transaction = connection.unchecked_transaction()?;
    let positions = (held(&transaction)?, latest(&transaction)?);
    transaction.finish()?;
    Ok(positions)
}

/// Does the search file lack changes or items of the catalog?
pub(crate) fn behind(connection: &Connection) -> Result<bool, Failure> {
    let (held, latest) = positions(connection)?;
    Ok(!held.holds(latest))
}

/// The catalog's last change and largest item id.
fn latest(connection: &Connection) -> Result<Latest, Failure> {
    Ok(connection
        .prepare_cached(
            "SELECT (SELECT coalesce(max(seq), 0) FROM main.memory_changes), \
             (SELECT coalesce(max(id), 0) FROM main.memory_items)",
        )?
        .query_row([], |row| Ok(Latest { last: row.get(0)?, largest: row.get(1)? }))?)
}

/// What the search file holds.
fn held(connection: &Connection) -> Result<Held, Failure> {
    Ok(connection
        .prepare_cached("SELECT done, (SELECT items FROM search.memory_search_items) FROM search.memory_search_state")?
        .query_row([], |row| Ok(Held { done: row.get(0)?, items: row.get(1)? }))?)
}

/// Items indexed per flush of a rebuild (bounds the terms held in memory).
const REBUILD_CHUNK: usize = 10_000;

/// Empties the search tables and indexes every item of the catalog's snapshot.
fn rebuild(connection: &Connection) -> Result<(), Failure> {
    for table in [
        "memory_updated",
        "memory_fields",
        "memory_term_counts",
        "memory_terms",
        "memory_blocks",
        "memory_block_ranges",
    ] {
        connection.execute(&format!("DELETE FROM search.{table}"), [])?;
    }
    let mut select = connection.prepare(&format!("SELECT id, {INDEXED} FROM main.memory_items ORDER BY id"))?;
    let mut rows = select.query([])?;
    let mut batch = IndexBatch::default();
    let mut in_batch = 0;
    while let Some(row) = rows.next()? {
        index_row(connection, &mut batch, row.get(0)?, row, 1, false)?;
        in_batch += 1;
        if in_batch == REBUILD_CHUNK {
            std::mem::take(&mut batch).flush(connection)?;
            in_batch = 0;
        }
    }
    batch.flush(connection)
}

/// Does the search file hold every change and every item of the catalog's snapshot?
/// Inside a read transaction on a connection with `search` attached, before it has read
/// anything: the search file's snapshot is taken first, so it can never be ahead of the
/// catalog's, and equal positions mean the rows are exactly the snapshot's items'.
pub(crate) fn current(connection: &Connection) -> Result<bool, Failure> {
    let held = held(connection)?;
    Ok(held.holds(latest(connection)?))
}

/// What a catch-up did: how many changes and new items it applied, and the search file's `done`
/// after it; `synced` when that commit was synced (`synchronous=FULL`): the changes
/// before `done` may then be dropped (`Shared::trim`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CaughtUp {
    pub(crate) applied: usize,
    pub(crate) done: i64,
    pub(crate) synced: bool,
}

/// When a catch-up's commit is synced.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Sync {
    /// Always (`forget`: the forgotten rows must be gone for good when it returns).
    Always,
    /// Once `TRIM_AT` changes have been applied since `done` was last synced (the
    /// value given): the indexing thread's passes. A commit left unsynced is one a
    /// power loss may take back, with its `done`; the changes stay in the catalog until
    /// a synced `done` passes them, and are applied again.
    After(i64),
}

/// Applies every change past `done`, and indexes every item past `items` (on the index
/// connection).
pub(crate) fn catch_up(connection: &Connection, sync: Sync) -> Result<CaughtUp, Failure> {
    // Read first: nothing to do costs no write lock.
    let (held, latest) = positions(connection)?;
    let done = held.done;
    let due = |done: i64| match sync {
        Sync::Always => true,
        Sync::After(synced) => done - synced >= TRIM_AT,
    };
    if !held.holds(latest) {
        return catch_up_then(connection, due(latest.last), |_| Ok(())).map(|(caught_up, ())| caught_up);
    }
    if !due(done) {
        return Ok(CaughtUp { applied: 0, done, synced: false });
    }
    // Nothing to apply, but what is applied may not be synced (a search applies
    // without): a synced commit syncs the WAL's earlier commits with it.
    connection.pragma_update(Some("search"), "synchronous", "FULL")?;
    let transaction = connection.unchecked_transaction()?;
    let done: i64 = transaction
        .prepare_cached("UPDATE search.memory_search_state SET done = done RETURNING done")?
        .query_row([], |row| row.get(0))?;
    transaction.commit()?;
    Ok(CaughtUp { applied: 0, done, synced: true })
}

/// Applies every change past `done` and indexes every item past `items`, then runs
/// `then` in the same transaction (a
/// search: it sees exactly the snapshot's items and their rows), and commits (synced
/// if `synced`).
/// The applied changes stay in the catalog until one of its writes drops them
/// (`Shared::trim`): a write of the catalog from here would wait for the catalog's
/// writers, and a busy handler's sleeps lose that race to a stream of puts for seconds.
pub(crate) fn catch_up_then<T>(
    connection: &Connection,
    synced: bool,
    then: impl FnOnce(&Connection) -> Result<T, Failure>,
) -> Result<(CaughtUp, T), Failure> {
    // (SQLite refuses to change it inside a transaction.)
    // Unsynced: `OFF` where the file records the boot it is trusted in (`this_boot`): a
    // checkpoint then copies pages without an `fsync` either, which took the disk from
    // every durable put beside it (measured with `berth bench --only W8`, 2026-12-06).
    let unsynced = if this_boot().is_some() { "OFF" } else { "NORMAL" };
    connection.pragma_update(Some("search"), "synchronous", if synced { "FULL" } else { unsynced })?;
    let transaction = connection.unchecked_transaction()?;
    lock_search(&transaction)?;
    let Held { done, items: mark } = held(&transaction)?;
    type Change = (i64, i64, bool, Option<String>, Option<String>, Option<String>);
    let changes: Vec<Change> = transaction
        .prepare_cached(
            "SELECT seq, item, fresh, tenant, namespace, key FROM main.memory_changes WHERE seq > ?1 ORDER BY seq",
        )?
        .query_map([done], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?, row.get(5)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let last = changes.last().map(|change| change.0);
    // The items past the mark are new (schema V10): no change row, never indexed.
    let new: Vec<i64> = transaction
        .prepare_cached("SELECT id FROM main.memory_items WHERE id > ?1 ORDER BY id")?
        .query_map([mark], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    // Per item: fresh only if every change says so (it never had rows to delete), or if
    // it is past the mark (its id was never given before, so nothing was indexed for it).
    let mut items: BTreeMap<i64, bool> = BTreeMap::new();
    let mut removed: BTreeSet<(String, String, String)> = BTreeSet::new();
    for (_, item, fresh, tenant, namespace, key) in &changes {
        let entry = items.entry(*item).or_insert(true);
        *entry &= *fresh || *item > mark;
        if let (Some(tenant), Some(namespace), Some(key)) = (tenant, namespace, key) {
            removed.insert((tenant.clone(), namespace.clone(), key.clone()));
        }
    }
    items.extend(new.iter().map(|&id| (id, true)));
    apply(&transaction, &items, removed)?;
    if let Some(last) = last {
        transaction.prepare_cached("UPDATE search.memory_search_state SET done = ?1")?.execute([last])?;
    }
    if let Some(&largest) = new.last() {
        transaction.prepare_cached("UPDATE search.memory_search_items SET items = ?1")?.execute([largest])?;
    }
    let value = then(&transaction)?;
    transaction.commit()?;
    Ok((CaughtUp { applied: changes.len() + new.len(), done: last.unwrap_or(done), synced }, value))
}

/// The columns of `memory_items` an item is indexed from, in `index_row`'s order.
const INDEXED: &str = "tenant, namespace, key, value, updated_at";

/// Indexes item `id` from a row holding `INDEXED` from column `first` on.
fn index_row(
    connection: &Connection,
    batch: &mut IndexBatch,
    id: i64,
    row: &rusqlite::Row<'_>,
    first: usize,
    replacing: bool,
) -> Result<(), Failure> {
    let text = |index: usize| -> Result<&str, Failure> { Ok(row.get_ref(first + index)?.as_str()?) };
    let value = stored_value(row.get(first + 3)?)?;
    let at = Indexed { id, tenant: text(0)?, namespace: text(1)?, key: text(2)?, updated_at: row.get(first + 4)? };
    index_item(connection, batch, &at, &value, replacing)
}

/// Rewrites the rows of `items` from their stored values (none for an item gone), and
/// rebuilds the blocks that held the `removed` positions.
fn apply(
    connection: &Connection,
    items: &BTreeMap<i64, bool>,
    removed: BTreeSet<(String, String, String)>,
) -> Result<(), Failure> {
    let mut batch = IndexBatch::default();
    let mut select = connection.prepare_cached(&format!("SELECT {INDEXED} FROM main.memory_items WHERE id = ?1"))?;
    for (&id, &fresh) in items {
        let mut rows = select.query([id])?;
        match rows.next()? {
            Some(row) => index_row(connection, &mut batch, id, row, 0, !fresh)?,
            None if !fresh => batch.forget(connection, id)?,
            None => {}
        }
    }
    batch.flush(connection)?;
    let mut held = BTreeSet::new();
    for (tenant, namespace, key) in removed {
        if let Some(block) = blocks::holding(connection, &tenant, &namespace, &key)? {
            held.insert((tenant, block));
        }
    }
    blocks::rebuild_held(connection, held)
}

/// Applied changes are dropped from the catalog (`Shared::trim`) once this many have
/// piled up (in this crate's tests at once, so they see the drop).
pub(crate) const TRIM_AT: i64 = if cfg!(test) { 1 } else { 256 };

/// How long the indexing thread lets changes gather after it is woken, so a burst of
/// puts is indexed in a few transactions rather than one each.
const GATHER: Duration = Duration::from_millis(5);

/// The indexing thread of a catalog in this process, how to wake it, and what the
/// process knows of the search file's progress.
#[derive(Default)]
pub(crate) struct Indexer {
    /// The search file's `done` as last committed synced by this process.
    synced: AtomicI64,
    /// The `seq` below which this process last dropped applied changes.
    trimmed: AtomicI64,
    /// The process that started the thread (a forked child starts its own), and its
    /// wake-up channel.
    thread: std::sync::Mutex<Option<(u32, mpsc::Sender<()>)>>,
    /// Tests: no thread is woken, so only searches, imports and `forget` apply changes.
    #[cfg(test)]
    pub(crate) paused: std::sync::atomic::AtomicBool,
}

impl Indexer {
    /// Notes a catch-up (`CaughtUp`): a synced `done` lets changes before it be dropped.
    pub(crate) fn caught_up(&self, caught: CaughtUp) {
        if caught.applied > 0 {
            tracing::trace!(applied = caught.applied, done = caught.done, "memory changes applied to the search file");
        }
        if caught.synced {
            self.synced.fetch_max(caught.done, Ordering::Relaxed);
        }
    }

    /// The `seq` below which applied changes are due to be dropped, once `TRIM_AT` have
    /// piled up since the last drop (`Shared::transact`).
    pub(crate) fn trim_due(&self) -> Option<i64> {
        let synced = self.synced.load(Ordering::Relaxed);
        (synced - self.trimmed.load(Ordering::Relaxed) >= TRIM_AT).then_some(synced)
    }

    /// Notes a drop committed.
    pub(crate) fn trimmed(&self, below: i64) {
        self.trimmed.fetch_max(below, Ordering::Relaxed);
    }
}

/// Has the changes just committed indexed soon: by this process's indexing thread for
/// a catalog file, at once for an in-memory one.
pub(crate) fn index_soon(shared: &Arc<Shared>) {
    // Inside the fork gate: no fork finds the thread's slot locked.
    let _working = fork::Working::enter();
    if shared.readers.is_none() {
        if let Err(failure) = shared.catch_up(Sync::Always) {
            tracing::warn!(?failure, "indexing memory items failed; the next search retries");
        }
        return;
    }
    #[cfg(test)]
    if shared.indexer.paused.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let mut thread = lock(&shared.indexer.thread);
    let pid = std::process::id();
    if let Some((owner, sender)) = thread.as_ref() {
        if *owner == pid && sender.send(()).is_ok() {
            return;
        }
    }
    let (sender, receiver) = mpsc::channel();
    let weak = Arc::downgrade(shared);
    let spawned =
        std::thread::Builder::new().name("berth-memory-index".into()).spawn(move || index_thread(weak, receiver));
    match spawned {
        Ok(_) => {
            let _ = sender.send(());
            *thread = Some((pid, sender));
        }
        Err(error) => tracing::warn!(%error, "starting the memory indexing thread failed; searches index instead"),
    }
}

fn index_thread(catalog: Weak<Shared>, wake: mpsc::Receiver<()>) {
    loop {
        match wake.recv_timeout(Duration::from_secs(1)) {
            Ok(()) => {}
            Err(mpsc::RecvTimeoutError::Timeout) if catalog.strong_count() > 0 => continue,
            Err(_) => return,
        }
        std::thread::sleep(GATHER);
        while wake.try_recv().is_ok() {}
        let Some(shared) = catalog.upgrade() else { return };
        let outcome = {
            let _working = fork::Working::enter();
            shared.catch_up(Sync::After(shared.indexer.synced.load(Ordering::Relaxed)))
        };
        if let Err(failure) = outcome {
            tracing::warn!(?failure, "indexing memory items failed; the next search retries");
        }
    }
}

#[cfg(test)]
#[path = "search_tests.rs"]
pub(crate) mod tests;
