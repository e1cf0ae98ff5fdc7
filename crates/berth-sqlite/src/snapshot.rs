//! Online copies of SQLite files for `berth backup`: the catalog (and the server's key
//! file) copied through SQLite's online backup API while other processes keep writing.
//!
//! The copy runs inside one read transaction of its own source connection, opened
//! before the first page is copied and held until the snapshot's rows have been read:
//! every page comes from that one snapshot (a step never restarts because another
//! connection wrote meanwhile — SQLite restarts a backup only when its source
//! connection begins a new read), and the sessions and audit heads the snapshot is
//! described by are read from the same snapshot as the pages. In WAL mode a reader
//! never blocks a writer, so live commits go on; the WAL only grows past its checkpoint
//! size until the read ends.
//!
//! Pages are copied `pages_per_step` at a time, and the caller's `progress` is told
//! after every step (it may sleep there: that is how `berth backup` bounds its I/O).

use crate::error::Failure;
use crate::schema::{APPLICATION_ID, SCHEMA_VERSION};
use berth_catalog::SessionRecord;
use berth_core::lifecycle::Status;
use berth_core::{Error, Result, SessionHeader, SessionKey, TenantId};
use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};
use std::path::Path;
use std::time::{Duration, Instant};

/// Pages a step of the catalog's copy takes (4 KiB pages: 1 MiB per step).
pub const SNAPSHOT_PAGES_PER_STEP: i32 = 256;

/// How long a step waits for a lock (a writer checkpointing, a rollback-journal file
/// being written) before the copy fails `Unavailable`.
const SNAPSHOT_BUSY_WAIT: Duration = Duration::from_secs(30);

/// One session as the catalog snapshot holds it: what a backup needs to pair it with
/// its log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotSession {
    pub key: SessionKey,
    /// The record's header: the log copied with it must carry the same one (a log with
    /// another header is a later session of the same id).
    pub header: SessionHeader,
    /// Still `creating`: its log may not exist yet (the create protocol's first step).
    pub creating: bool,
    /// Events the record says the log holds (the catalog lags the log, never leads it).
    pub event_count: u64,
}

/// A tenant's audit chain head at the snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditHead {
    pub tenant: TenantId,
    pub seq: u64,
    pub hash: String,
}

/// What the catalog held at the moment of its copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogSnapshot {
    /// `PRAGMA user_version` of the copied file.
    pub schema_version: i64,
    /// The catalog's identity (its search-file token: random, written once when the
    /// catalog was made), so a backup chain can tell it is of one store.
    pub store_token: Option<String>,
    /// Every session, in (tenant, id) order.
    pub sessions: Vec<SnapshotSession>,
    /// Every tenant's audit head, in tenant order: the catalog's position.
    pub audit_heads: Vec<AuditHead>,
    /// Bytes of the copy.
    pub bytes: u64,
}

/// Copies the catalog at `source` to the new file `dest` (which must not exist) from one
/// snapshot, and describes that snapshot. `progress(copied, total)` is called after every
/// step, in bytes.
pub fn snapshot_catalog(
    source: &Path,
    dest: &Path,
    pages_per_step: i32,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<CatalogSnapshot> {
    let artifact = artifact(source);
    let outcome = (|| {
        let source_connection = open_source(source)?;
        check_catalog(&source_connection)?;
        let bytes = copy_in_snapshot(&source_connection, dest, pages_per_step, progress)?;
        let mut snapshot = describe(&source_connection)?;
        snapshot.bytes = bytes;
        source_connection.execute_batch("COMMIT")?;
        Ok(snapshot)
    })();
    outcome.map_err(|failure: Failure| failure.into_error("snapshot the catalog", &artifact))
}

/// Copies any SQLite file at `source` (the server's key file) to the new file `dest`
/// from one snapshot, in one step. Returns the copy's size in bytes.
pub fn online_copy(source: &Path, dest: &Path) -> Result<u64> {
    let artifact = artifact(source);
    let outcome = (|| {
        let source_connection = open_source(source)?;
        let bytes = copy_in_snapshot(&source_connection, dest, -1, &mut |_, _| {})?;
        source_connection.execute_batch("COMMIT")?;
        Ok(bytes)
    })();
    outcome.map_err(|failure: Failure| failure.into_error("copy a database file", &artifact))
}

fn artifact(path: &Path) -> String {
    path.file_name().map_or_else(String::new, |name| name.to_string_lossy().into_owned())
}

/// A read-only connection to `path`, inside a read transaction that has begun (its
/// snapshot is taken).
fn open_source(path: &Path) -> Result<Connection, Failure> {
    if !path.is_file() {
        return Err(Error::NotFound { what: "database file", id: path.display().to_string() }.into());
    }
    // Read-only: it never checkpoints or removes the WAL when it closes, whoever else
    // has the file open, and it cannot write by mistake.
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let connection = Connection::open_with_flags(path, flags)?;
    connection.busy_timeout(SNAPSHOT_BUSY_WAIT)?;
    connection.execute_batch("BEGIN")?;
    // The first read takes the snapshot every later step and query sees.
    let _: i64 = connection.query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))?;
    Ok(connection)
}

fn check_catalog(connection: &Connection) -> Result<(), Failure> {
    let application_id: i32 = connection.query_row("PRAGMA application_id", [], |row| row.get(0))?;
    if application_id != APPLICATION_ID {
        return Err(Failure::Corrupt("the file is not a berth catalog (its application id differs)".into()));
    }
    let version: i64 = connection.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(Error::FormatUnsupported {
            reason: format!(
                "catalog schema version {version} was written by a newer berth (this build reads up to \
                 {SCHEMA_VERSION}); back it up with the berth that serves it"
            ),
            location: None,
        }
        .into());
    }
    Ok(())
}

/// Copies every page of `source`'s snapshot into a new database at `dest`, then makes
/// the copy a self-contained file (rollback journal, no WAL) and syncs it.
fn copy_in_snapshot(
    source: &Connection,
    dest: &Path,
    pages_per_step: i32,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<u64, Failure> {
    create_owner_only(dest)?;
    let page_bytes: i64 = source.query_row("PRAGMA page_size", [], |row| row.get(0))?;
    let page_bytes = u64::try_from(page_bytes).unwrap_or(4096);
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut copy = Connection::open_with_flags(dest, flags)?;
    {
        let backup = Backup::new(source, &mut copy)?;
        let mut waited_since: Option<Instant> = None;
        loop {
            let step = backup.step(pages_per_step)?;
            let state = backup.progress();
            let total = u64::try_from(state.pagecount).unwrap_or(0);
            let left = u64::try_from(state.remaining).unwrap_or(0);
            progress((total - left.min(total)) * page_bytes, total * page_bytes);
            match step {
                StepResult::Done => break,
                StepResult::More => waited_since = None,
                // A lock held elsewhere (rare in WAL mode): wait it out, within bounds.
                _ => {
                    let since = *waited_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > SNAPSHOT_BUSY_WAIT {
                        return Err(Error::Unavailable {
                            reason: "the database stayed locked while it was being copied".into(),
                        }
                        .into());
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
    // The copied header says WAL when the source is in WAL mode; a backup is one file.
    let _: String = copy.query_row("PRAGMA journal_mode = DELETE", [], |row| row.get(0))?;
    let pages: i64 = copy.query_row("PRAGMA page_count", [], |row| row.get(0))?;
    copy.close().map_err(|(_, error)| Failure::Sql(error))?;
    std::fs::File::open(dest)
        .and_then(|file| file.sync_all())
        .map_err(|error| Failure::Berth(Error::io("sync the database copy", &error)))?;
    Ok(u64::try_from(pages).unwrap_or(0) * page_bytes)
}

/// Creates `dest` empty (an empty file is an empty database to SQLite), owner-only
/// (SQLite would create it readable by all; its journal takes its mode from it), and
/// never over an existing file.
fn create_owner_only(dest: &Path) -> Result<(), Failure> {
    use std::os::unix::fs::OpenOptionsExt;
    let created = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(dest);
    match created {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            Err(Error::AlreadyExists { what: "file", id: dest.display().to_string() }.into())
        }
        Err(error) => Err(Error::io("create the database copy", &error).into()),
    }
}

/// The sessions, audit heads and identity of the snapshot `connection` is reading.
fn describe(connection: &Connection) -> Result<CatalogSnapshot, Failure> {
    let schema_version: i64 = connection.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    let has_token: bool = connection.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_schema WHERE name = 'memory_search_token')",
        [],
        |row| row.get(0),
    )?;
    let store_token = if has_token {
        Some(connection.query_row("SELECT token FROM memory_search_token", [], |row| row.get(0))?)
    } else {
        None
    };
    let mut sessions = Vec::new();
    let mut statement = connection.prepare("SELECT record_json FROM sessions ORDER BY tenant, id")?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        let record: SessionRecord = serde_json::from_str(row.get_ref(0)?.as_str()?)
            .map_err(|_| Failure::Corrupt("a stored session record does not decode".into()))?;
        sessions.push(SnapshotSession {
            key: record.key(),
            creating: record.status == Status::Creating,
            event_count: record.event_count,
            header: record.header,
        });
    }
    let mut audit_heads = Vec::new();
    let mut statement = connection.prepare("SELECT tenant, seq, hash FROM audit_heads ORDER BY tenant")?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        let tenant = TenantId::parse(row.get_ref(0)?.as_str()?)
            .map_err(|_| Failure::Corrupt("an audit head names an invalid tenant".into()))?;
        let seq = u64::try_from(row.get::<_, i64>(1)?)
            .map_err(|_| Failure::Corrupt("an audit head holds a negative seq".into()))?;
        audit_heads.push(AuditHead { tenant, seq, hash: row.get(2)? });
    }
    Ok(CatalogSnapshot { schema_version, store_token, sessions, audit_heads, bytes: 0 })
}

#[cfg(test)]
mod tests;
