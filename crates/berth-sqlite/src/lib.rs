//! The embedded Catalog on SQLite (R-J4): session metadata with compare-and-set on
//! `revision` that is atomic across processes, the listing index, the per-tenant audit
//! hash chain and retention policies, in one WAL-mode database file
//! (`catalog.sqlite` in the data root).
//!
//! Connections. One writer connection behind a mutex does every write, each in a
//! `BEGIN IMMEDIATE` transaction (shared by the writes queued while the previous one
//! committed, each in its own savepoint: group commit, `commit.rs`): SQLite's write lock is taken at `BEGIN`, before the
//! revision is read, so a compare-and-set can never interleave with another writer in
//! this process (the mutex) or in another process (the file lock, waited for up to the
//! busy timeout, then `Unavailable`). Reads use a small pool of separate connections:
//! in WAL mode they see the last committed snapshot and never wait for the writer.
//! A listing runs inside one read transaction, so the sub-queries it merges share
//! one snapshot. Writes run on the calling thread inside `block_in_place` (on a
//! multi-thread runtime), so the worker's other tasks move to another thread while one
//! waits for a lock; reads, which never wait in WAL mode, run on the calling thread.
//!
//! No connection to a catalog file is open across a `fork` (`fork.rs`): they are
//! closed just before it and reopened when next needed.
//!
//! Scoped memory's search rows live in a second file, the search file (`search.rs`),
//! written by one more connection per process (the index connection) and attached to
//! every reader; the writer never touches it, so its `BEGIN IMMEDIATE` locks only the
//! catalog.
//!
//! `snapshot` copies the catalog file while others write to it (SQLite's online backup
//! API, inside one read transaction), for `berth backup`.
//!
//! `open_in_memory` keeps everything on the writer connection (a second connection to
//! `:memory:` would be a different database), its search rows in an attached in-memory
//! database.

mod blocks;
mod catalog;
mod commit;
mod error;
mod fork;
mod listing;
mod memory;
pub mod schema;
mod search;
pub mod snapshot;

pub use schema::{CATALOG_FILE_NAME, SCHEMA_VERSION};

use crate::error::Failure;
use berth_core::{Error, Result};
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Tuning for `SqliteCatalog::open_with`.
#[derive(Clone, Debug)]
pub struct SqliteOptions {
    /// How long a connection waits for another process's lock before `Unavailable`.
    pub busy_timeout: Duration,
    /// Read connections kept open between calls (more are opened under load and
    /// closed afterwards).
    pub idle_readers_max: usize,
    /// Concurrent writes share transactions (`commit.rs`); off, each write is a
    /// transaction of its own, in turn (for measuring what group commit buys).
    pub group_commit: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions { busy_timeout: Duration::from_secs(5), idle_readers_max: 4, group_commit: true }
    }
}

/// The SQLite catalog. Cheap to clone; clones share the connections.
#[derive(Clone)]
pub struct SqliteCatalog {
    shared: Arc<Shared>,
}

struct Shared {
    /// `None` while closed for a fork (`fork.rs`): reopened by the next write.
    writer: Mutex<Option<Connection>>,
    /// `None` for an in-memory database: reads then use the writer connection.
    readers: Option<ReaderPool>,
    /// The connection that writes the search file (`search.rs`); `None` while closed
    /// for a fork, and always for an in-memory database (the writer does it).
    index: Mutex<Option<Connection>>,
    /// This process's indexing thread and what it knows of the search file
    /// (`search::Indexer`).
    indexer: search::Indexer,
    /// The database file's name, for error locations (never the full path).
    artifact: String,
    /// The queue of writes waiting to share a transaction (`commit.rs`).
    committer: commit::Committer,
}

struct ReaderPool {
    path: PathBuf,
    options: SqliteOptions,
    idle: Mutex<Vec<Connection>>,
}

impl std::fmt::Debug for SqliteCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteCatalog").field("artifact", &self.shared.artifact).finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic inside a closure drops its transaction (rolled back), so the connection
    // behind a poisoned mutex is still consistent.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl SqliteCatalog {
    /// Opens (creating if needed) the catalog file at `path` and applies pending schema
    /// migrations, with default options. Blocking: call it at start-up or inside
    /// `tokio::task::spawn_blocking`.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteCatalog> {
        SqliteCatalog::open_with(path, SqliteOptions::default())
    }

    /// `open` with explicit options.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteCatalog> {
        let path = path.as_ref().to_path_buf();
        let artifact = path.file_name().map_or_else(|| CATALOG_FILE_NAME.to_owned(), |n| n.to_string_lossy().into());
        // Opened and registered as one piece of catalog work, so a fork meanwhile waits
        // for it and then closes this catalog's connection too.
        let _working = fork::Working::enter();
        let (writer, index, behind) = open_writer(&path, &options)
            .and_then(|writer| {
                let index = search::open_index(&path, &options)?;
                let behind = search::behind(&index)?;
                Ok((writer, index, behind))
            })
            .map_err(|failure| failure.into_error("open catalog", &artifact))?;
        let committer = commit::Committer::new(options.group_commit);
        let readers = ReaderPool { path, options, idle: Mutex::new(Vec::new()) };
        let shared = Arc::new(Shared {
            writer: Mutex::new(Some(writer)),
            readers: Some(readers),
            index: Mutex::new(Some(index)),
            indexer: search::Indexer::default(),
            artifact,
            committer,
        });
        fork::register(&shared);
        drop(_working);
        let catalog = SqliteCatalog { shared };
        if behind {
            // Changes an earlier process left unapplied.
            catalog.index_soon();
        }
        Ok(catalog)
    }

    /// A private in-memory catalog (tests, `memory:`-style embedding with SQL semantics).
    pub fn open_in_memory() -> Result<SqliteCatalog> {
        let artifact = ":memory:".to_owned();
        let setup = || -> Result<Connection, Failure> {
            let mut connection = Connection::open_in_memory()?;
            configure(&connection, &SqliteOptions::default())?;
            schema::migrate(&mut connection, ":memory:")?;
            connection.execute("ATTACH DATABASE ':memory:' AS search", [])?;
            search::prepare(&connection)?;
            Ok(connection)
        };
        let writer = setup().map_err(|failure| failure.into_error("open catalog", &artifact))?;
        Ok(SqliteCatalog {
            shared: Arc::new(Shared {
                writer: Mutex::new(Some(writer)),
                readers: None,
                index: Mutex::new(None),
                indexer: search::Indexer::default(),
                artifact,
                committer: commit::Committer::new(true),
            }),
        })
    }

    /// Test hook: runs raw SQL on the writer connection, so tamper-detection tests can
    /// change, delete or reorder stored rows behind the catalog's back.
    #[cfg(feature = "test-hooks")]
    pub async fn execute_for_tests(&self, sql: &str) -> Result<()> {
        let sql = sql.to_owned();
        self.write("test hook", move |transaction| Ok(transaction.execute_batch(&sql)?)).await
    }

    /// Runs `work` in a `BEGIN IMMEDIATE` transaction on the writer connection (see
    /// `blocking`), shared with the writes queued beside it (group commit, `commit.rs`).
    /// Its changes commit iff `work` succeeds and the batch commits.
    async fn write<T, F>(&self, operation: &'static str, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Failure> + Send + 'static,
    {
        let shared = Arc::clone(&self.shared);
        blocking(move || shared.commit(operation, work)).await
    }

    /// `write`, committed with `synchronous=NORMAL`: in WAL mode the commit is appended
    /// to the WAL without an fsync (the next durable commit or checkpoint syncs it). A
    /// process crash loses nothing; a power loss may lose the latest relaxed commits,
    /// never corrupting the database. Used only for activity whose source is durable
    /// elsewhere (the event log).
    async fn write_relaxed<T, F>(&self, operation: &'static str, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Failure> + Send + 'static,
    {
        let shared = Arc::clone(&self.shared);
        blocking(move || {
            let _working = fork::Working::enter();
            let outcome = (|| {
                let connection = shared.writer()?;
                connection.pragma_update(None, "synchronous", "NORMAL")?;
                let committed = shared.transact(&connection, work);
                // Always back to FULL, whatever happened, before anyone else writes.
                let restored = connection.pragma_update(None, "synchronous", "FULL");
                let value = committed?;
                restored?;
                Ok(value)
            })();
            outcome.map_err(|failure: Failure| failure.into_error(operation, &shared.artifact))
        })
        .await
    }

    /// Runs `work` on the index connection (`search.rs`), outside any transaction.
    async fn index_work<T, F>(&self, operation: &'static str, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Failure> + Send + 'static,
    {
        let shared = Arc::clone(&self.shared);
        blocking(move || {
            let _working = fork::Working::enter();
            let outcome = shared.index().and_then(|connection| work(&connection));
            outcome.map_err(|failure: Failure| failure.into_error(operation, &shared.artifact))
        })
        .await
    }

    /// Applies every memory change committed so far to the search file, durably; then
    /// drops the changes that made droppable, with a write of its own (`Shared::transact`)
    /// — left to the next write, a `forget`'s thousands would be dropped inside some
    /// put's transaction.
    async fn catch_up(&self, operation: &'static str) -> Result<()> {
        let shared = Arc::clone(&self.shared);
        blocking(move || {
            let _working = fork::Working::enter();
            shared.catch_up(search::Sync::Always).map_err(|failure| failure.into_error(operation, &shared.artifact))
        })
        .await?;
        if self.shared.indexer.trim_due().is_some() {
            self.write(operation, |_| Ok(())).await?;
        }
        Ok(())
    }

    /// Has the memory changes just committed applied to the search file soon
    /// (`search::index_soon`).
    fn index_soon(&self) {
        search::index_soon(&self.shared);
    }

    /// Runs `work` in one read transaction (one snapshot) on a reader connection.
    async fn read<T, F>(&self, operation: &'static str, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Failure> + Send + 'static,
    {
        self.read_statement(operation, move |connection| {
            // Deferred, and never nested: the connection is this call's alone.
            let transaction = connection.unchecked_transaction()?;
            let value = work(&transaction)?;
            transaction.finish()?;
            Ok(value)
        })
        .await
    }

    /// `read` for work that is one statement: that statement is its own snapshot in
    /// autocommit mode, so no `BEGIN`/`COMMIT` pair (two more statements SQLite parses
    /// each time) is wrapped around it. Point reads (`memory_get`) use it.
    async fn read_statement<T, F>(&self, operation: &'static str, work: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Failure> + Send + 'static,
    {
        on_caller(move || self.read_now(operation, work)).await
    }

    /// `read_statement` for work that borrows what it reads with: it runs here, on the
    /// caller's thread, so nothing need be cloned into it (a point read's key).
    fn read_now<T>(&self, operation: &'static str, work: impl FnOnce(&Connection) -> Result<T, Failure>) -> Result<T> {
        let shared = &self.shared;
        let _working = fork::Working::enter();
        let outcome = match &shared.readers {
            None => shared.writer().and_then(|connection| work(&connection)),
            Some(pool) => pool.take().and_then(|connection| {
                let value = work(&connection);
                pool.give_back(connection);
                value
            }),
        };
        outcome.map_err(|failure| failure.into_error(operation, &shared.artifact))
    }
}

/// A `BEGIN IMMEDIATE` transaction on the writer connection, rolled back unless
/// committed (also when `work` panics). Its `BEGIN` and `COMMIT` are prepared once and
/// kept (rusqlite's `Transaction` parses both again at every write: ~4,000 of a memory
/// put's ~60,000 instructions, callgrind, 2026-12-06).
struct Immediate<'a>(&'a Connection);

impl<'a> Immediate<'a> {
    fn begin(connection: &'a Connection) -> Result<Immediate<'a>, Failure> {
        connection.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Immediate(connection))
    }

    fn commit(self) -> Result<(), Failure> {
        self.0.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    }
}

impl Drop for Immediate<'_> {
    fn drop(&mut self) {
        // Committed, or never begun: nothing to undo.
        if self.0.is_autocommit() {
            return;
        }
        if let Err(error) = self.0.prepare_cached("ROLLBACK").and_then(|mut rollback| rollback.execute([])) {
            tracing::warn!(%error, "rolling back a catalog write failed");
        }
    }
}

/// The writer connection, open.
struct Writer<'a>(MutexGuard<'a, Option<Connection>>);

impl std::ops::Deref for Writer<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.0.as_ref().expect("opened by Shared::writer")
    }
}

impl Shared {
    /// The writer connection, reopened if a fork closed it. Call inside `fork::Working`.
    fn writer(&self) -> Result<Writer<'_>, Failure> {
        let mut slot = lock(&self.writer);
        if slot.is_none() {
            let pool = self.readers.as_ref().expect("only a file catalog's writer is ever closed");
            *slot = Some(reopen_writer(&pool.path, &pool.options)?);
        }
        Ok(Writer(slot))
    }

    /// One `BEGIN IMMEDIATE` transaction of `work` on the writer `connection`, committed
    /// iff `work` succeeds. It first drops the memory changes the search file has
    /// applied, when enough have piled up (`search::Indexer::trim_due`): this write holds
    /// the catalog's lock already.
    fn transact<T>(
        &self,
        connection: &Connection,
        work: impl FnOnce(&Connection) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        let trim = self.indexer.trim_due();
        let transaction = Immediate::begin(connection)?;
        if let Some(below) = trim {
            // The change at `below` stays, so SQLite numbers the next one past it.
            connection.prepare_cached("DELETE FROM memory_changes WHERE seq < ?1")?.execute([below])?;
        }
        let value = work(connection)?;
        transaction.commit()?;
        if let Some(below) = trim {
            self.indexer.trimmed(below);
        }
        Ok(value)
    }

    /// Applies the memory changes waiting for the search file (`search::catch_up`) on
    /// the index connection, and notes what it synced. Call inside `fork::Working`.
    fn catch_up(&self, sync: search::Sync) -> Result<(), Failure> {
        let caught = search::catch_up(&*self.index()?, sync)?;
        self.indexer.caught_up(caught);
        Ok(())
    }

    /// The index connection (`search.rs`), reopened if a fork closed it; the writer for
    /// an in-memory catalog. Call inside `fork::Working`.
    fn index(&self) -> Result<Writer<'_>, Failure> {
        let Some(pool) = &self.readers else { return self.writer() };
        let mut slot = lock(&self.index);
        if slot.is_none() {
            *slot = Some(search::open_index(&pool.path, &pool.options)?);
        }
        Ok(Writer(slot))
    }

    /// Closes every connection to the file (`fork.rs`), none of them in use. An
    /// in-memory catalog keeps its one connection: it has no file, and is its data.
    fn close_connections(&self) {
        let Some(pool) = &self.readers else { return };
        let writer = lock(&self.writer).take();
        let index = lock(&self.index).take();
        let idle = std::mem::take(&mut *lock(&pool.idle));
        for connection in idle.into_iter().chain(writer).chain(index) {
            if let Err((_, error)) = connection.close() {
                tracing::warn!(artifact = %self.artifact, %error, "closing a catalog connection before fork failed");
            }
        }
    }
}

impl ReaderPool {
    fn take(&self) -> Result<Connection, Failure> {
        if let Some(connection) = lock(&self.idle).pop() {
            return Ok(connection);
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let connection = Connection::open_with_flags(&self.path, flags)?;
        configure_statements(&connection, &self.options)?;
        search::attach(&connection, &search::search_path(&self.path))?;
        // Readers never write; this makes an accidental write through one an error.
        connection.pragma_update(None, "query_only", true)?;
        Ok(connection)
    }

    fn give_back(&self, connection: Connection) {
        let mut idle = lock(&self.idle);
        if idle.len() < self.options.idle_readers_max {
            idle.push(connection);
        }
    }
}

/// Runs SQLite work (one statement or short transaction) on the calling thread. On a
/// multi-thread runtime `block_in_place` first hands this worker's other tasks to another
/// thread, so they keep running while this one waits on SQLite (or on another
/// process's lock, up to the busy timeout). Sending each call to the blocking pool
/// instead costs two thread hops, and every append reads and writes the catalog once.
/// The work is synchronous, so a caller that gives up never leaves it half-done.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    // (Writes: they may wait for the writer mutex or another process's lock.)
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

/// Runs a read on the calling thread, like any short computation. In WAL mode a reader
/// never waits for a writer or another process (it reads the last committed snapshot),
/// and a point read from the page cache takes microseconds: less than handing the
/// worker's tasks to another thread would (`block_in_place`), which measured 10–15 %
/// of the server's append throughput (every append reads its session's record).
async fn on_caller<T>(work: impl FnOnce() -> Result<T>) -> Result<T> {
    work()
}

fn open_writer(path: &Path, options: &SqliteOptions) -> Result<Connection, Failure> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut connection = Connection::open_with_flags(path, flags)?;
    configure(&connection, options)?;
    enable_wal(&connection, options.busy_timeout)?;
    schema::migrate(&mut connection, &path.file_name().unwrap_or_default().to_string_lossy())?;
    Ok(connection)
}

/// The writer connection again, on a file already migrated and in WAL mode.
fn reopen_writer(path: &Path, options: &SqliteOptions) -> Result<Connection, Failure> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let connection = Connection::open_with_flags(path, flags)?;
    configure(&connection, options)?;
    Ok(connection)
}

/// Prepared statements kept per connection (more than the catalog has).
const STATEMENT_CACHE: usize = 256;

/// Per-connection settings (none of these persist in the file).
fn configure(connection: &Connection, options: &SqliteOptions) -> Result<(), Failure> {
    configure_statements(connection, options)?;
    // FULL: the WAL is fsynced at every commit, so a committed CAS survives power loss.
    connection.pragma_update(None, "synchronous", "FULL")?;
    connection.pragma_update(None, "foreign_keys", true)?;
    connection.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)?;
    Ok(())
}

/// The WAL size, in pages, at which a commit of this connection copies the WAL into the
/// database file (a passive checkpoint; SQLite's default is 1,000). A checkpoint copies
/// each page once however many commits changed it, and syncs the database file once, so
/// a longer WAL between checkpoints spreads that work over more commits. The catalog's
/// writes touch the same few pages again and again (the tenant's usage row, the queue of
/// unindexed items, the rightmost leaves, a batch's index pages). `berth bench --only W8`
/// (2026-12-04): durable put 0.55–0.58× the plain upsert at 1,000 pages, 0.60–0.63× at
/// 2,000, 0.62–0.63× at 4,000, 0.59× at 8,000, and 0.29–0.33× with no checkpoints (the WAL's
/// file then grows at every commit, and a sync that also records a new file size costs
/// a metadata write more); get p50 unchanged. The WAL file is then up to ~16 MiB.
pub(crate) const WAL_AUTOCHECKPOINT_PAGES: i64 = 4_000;

/// What every connection of the catalog, the writer's and each reader's, is set up with.
fn configure_statements(connection: &Connection, options: &SqliteOptions) -> Result<(), Failure> {
    connection.busy_timeout(options.busy_timeout)?;
    // Every statement the catalog runs stays prepared: rusqlite's default cache of 16
    // is fewer than one memory put and its batch's indexing use, which then re-parsed
    // their SQL each time (`sqlite3LockAndPrepare` in `perf`).
    connection.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // Plans never depend on a bound parameter's value. Without this, SQLite marks a
    // statement with a range on a parameter and an ORDER BY as expiring when its
    // bindings are cleared — which rusqlite's statement cache does at every return — so
    // each reuse parsed and planned it again (`sqlite3Reprepare` under every indexed
    // item's block lookup, `blocks::holding`). The catalog keeps no `sqlite_stat4`
    // samples for value-dependent plans to use anyway. On the readers too: a search
    // there (`walk_in_order`'s statements) was planned again at every call until
    // 2026-12-04 (`sqlite3Reprepare` under `search_in_order` in `perf`).
    connection.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    // Schema objects never run code on our behalf (defence against a crafted file).
    connection.pragma_update(None, "trusted_schema", false)?;
    Ok(())
}

/// Switches the file to WAL (persistent). The switch needs an exclusive lock and may
/// report busy without consulting the busy handler while another process opens the
/// same fresh file, so it is retried until the busy timeout.
fn enable_wal(connection: &Connection, busy_timeout: Duration) -> Result<(), Failure> {
    enable_wal_in(connection, "main", busy_timeout)
}

/// `enable_wal` for the attached database `schema`.
fn enable_wal_in(connection: &Connection, schema: &str, busy_timeout: Duration) -> Result<(), Failure> {
    let deadline = Instant::now() + busy_timeout;
    let sql = format!("PRAGMA {schema}.journal_mode = WAL");
    loop {
        let outcome: rusqlite::Result<String> = connection.query_row(&sql, [], |row| row.get(0));
        match outcome {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(mode) => {
                return Err(Error::Unavailable { reason: format!("catalog database refused WAL mode ({mode})") }.into())
            }
            Err(error) if is_busy(&error) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(error) => return Err(error.into()),
        }
    }
}

fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(error.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

#[cfg(test)]
mod commit_tests;
#[cfg(test)]
mod tests;
