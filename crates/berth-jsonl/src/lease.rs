//! The cross-process writer lease (R-J3) and the durable epoch.
//!
//! Exclusion is two kernel `flock`s held for the writer's life: one on `session.lock`
//! (opened `O_RDWR|O_CREAT|O_CLOEXEC`, never unlinked) and one on the session directory
//! itself. The lock file is the documented lease; the directory lock closes the hole the
//! lock file alone leaves: if someone unlinks `session.lock` while it is held, a second
//! process would create and lock a *new* inode and become a second holder; the directory
//! is the same inode for both, so the second process is still refused. The kernel drops
//! both locks when the holder dies (including `kill -9`); a paused holder keeps them.
//!
//! The epoch does not add exclusion: it is evidence of ownership changes. Every writer
//! gets `max(epoch in session.epoch, largest epoch in the log) + 1`, made durable (temp +
//! fsync + rename + directory fsync) before the writer is returned, and stamped on every
//! record it writes.

use crate::format::{self, EPOCH_FILE, EPOCH_TEMP_FILE, LOCK_FILE};
use crate::fs::{read_full_at, write_all_at, Fs, FsFile, OpenOptions};
use berth_core::{Epoch, Error, Location, Result, WriteHolder};
use std::io;
use std::path::Path;

/// How often a lock whose file was replaced between open and `flock` is retried.
pub const LOCK_ATTEMPTS_MAX: usize = 3;
/// Largest `session.epoch` file read.
const EPOCH_FILE_BYTES_MAX: usize = 256;

/// A held writer lease. Dropping it closes both descriptors, which releases the locks.
pub struct Lease {
    _lock_file: Box<dyn FsFile>,
    _directory: Box<dyn FsFile>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lease")
    }
}

fn already_owned(id: &str) -> Error {
    Error::AlreadyOwned { id: id.to_owned(), holder: WriteHolder::AnotherProcess }
}

/// Takes the writer lease of the session in `session_dir` without waiting:
/// `AlreadyOwned` if another open file description holds it, `NotFound` if the session
/// directory does not exist.
pub fn acquire(fs: &dyn Fs, session_dir: &Path, id: &str) -> Result<Lease> {
    let lock_path = session_dir.join(LOCK_FILE);
    for _ in 0..LOCK_ATTEMPTS_MAX {
        let lock_file = match fs.open(&lock_path, OpenOptions::read_write_create()) {
            Ok(file) => file,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Err(Error::session_not_found(id)),
            Err(error) => return Err(Error::io("open lock file", &error)),
        };
        if !lock_file.try_lock().map_err(|error| Error::io("lock session", &error))? {
            return Err(already_owned(id));
        }
        // The file may have been unlinked or replaced between our open and our flock:
        // then we locked an inode nobody else will ever look at. Try again.
        let held = lock_file.identity().map_err(|error| Error::io("stat lock file", &error))?;
        match fs.metadata(&lock_path) {
            Ok(named) if (named.dev, named.ino) == held => {}
            Ok(_) => continue,
            Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
            Err(error) => return Err(Error::io("stat lock file", &error)),
        }
        let directory = fs.open_dir(session_dir).map_err(|error| Error::io("open session directory", &error))?;
        if !directory.try_lock().map_err(|error| Error::io("lock session directory", &error))? {
            return Err(already_owned(id));
        }
        return Ok(Lease { _lock_file: lock_file, _directory: directory });
    }
    Err(already_owned(id))
}

/// The epoch stored in `session.epoch` (0 when the file does not exist).
pub fn read_epoch(fs: &dyn Fs, session_dir: &Path, artifact: &str) -> Result<Epoch> {
    let path = session_dir.join(EPOCH_FILE);
    let file = match fs.open(&path, OpenOptions::read_only()) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Epoch(0)),
        Err(error) => return Err(Error::io("open epoch file", &error)),
    };
    let mut buf = vec![0; EPOCH_FILE_BYTES_MAX];
    let read = read_full_at(file.as_ref(), &mut buf, 0).map_err(|error| Error::io("read epoch file", &error))?;
    format::decode_epoch_record(&buf[..read]).ok_or_else(|| Error::Corrupt {
        reason: "epoch file is damaged (it is only ever replaced atomically)".into(),
        location: Location { artifact: format!("{artifact}/{EPOCH_FILE}"), offset: None, seq: None },
    })
}

/// Makes `epoch` the durable epoch: temp file, fsync, rename over `session.epoch`,
/// directory fsync. Only a lease holder calls this.
pub fn write_epoch(fs: &dyn Fs, session_dir: &Path, epoch: Epoch) -> Result<()> {
    let temp = session_dir.join(EPOCH_TEMP_FILE);
    let record = format::encode_epoch_record(epoch);
    let file = fs.open(&temp, OpenOptions::write_truncate()).map_err(|error| Error::io("create epoch file", &error))?;
    write_all_at(file.as_ref(), &record, 0).map_err(|error| Error::io("write epoch file", &error))?;
    file.sync_all().map_err(|error| Error::io("sync epoch file", &error))?;
    drop(file);
    fs.rename(&temp, &session_dir.join(EPOCH_FILE)).map_err(|error| Error::io("publish epoch file", &error))?;
    fs.sync_dir(session_dir).map_err(|error| Error::io("sync session directory", &error))
}
