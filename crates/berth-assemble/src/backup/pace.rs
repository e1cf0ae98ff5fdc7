//! Bounded copying: files are copied in chunks, hashed (SHA-256) as they go, at most
//! a given rate, with the copy synced every few MiB so that the page cache never holds
//! a large dirty backlog whose writeback would stall a live append's `fdatasync`.

use sha2::{Digest, Sha256};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Bytes read and written per call.
pub const CHUNK_BYTES: usize = 256 * 1024;
/// A copy is synced after every this many bytes (and at its end).
pub const SYNC_EVERY_BYTES: u64 = 8 * 1024 * 1024;

/// Told how much work there is and how much is done, in bytes. Implementations must
/// not block for long (the copy waits on them).
pub trait Progress: Send {
    /// The work is `total_bytes` in all (it may be raised while copying: a log grows).
    fn plan(&mut self, total_bytes: u64);
    /// `bytes` more are done.
    fn advance(&mut self, bytes: u64);
    /// The work is over.
    fn finish(&mut self) {}
}

/// Reports nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn plan(&mut self, _total_bytes: u64) {}
    fn advance(&mut self, _bytes: u64) {}
}

/// A rate limit over a whole backup or restore: after each chunk, it sleeps until the
/// bytes moved so far fit the rate since the start.
#[derive(Debug)]
pub struct Pace {
    bytes_per_s: Option<u64>,
    started: Instant,
    bytes: u64,
}

impl Pace {
    /// At most `bytes_per_s` (`None`: as fast as the disks go).
    pub fn new(bytes_per_s: Option<u64>) -> Pace {
        Pace { bytes_per_s: bytes_per_s.filter(|rate| *rate > 0), started: Instant::now(), bytes: 0 }
    }

    /// Counts `bytes` moved, and waits while the copy is ahead of its rate.
    pub fn account(&mut self, bytes: u64) {
        self.bytes += bytes;
        let Some(rate) = self.bytes_per_s else { return };
        let due = Duration::from_secs_f64(self.bytes as f64 / rate as f64);
        if let Some(ahead) = due.checked_sub(self.started.elapsed()) {
            std::thread::sleep(ahead);
        }
    }

    /// Bytes moved so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Time since the start.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// What a copy wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Copied {
    pub bytes: u64,
    pub sha256: String,
}

/// Copies the first `len` bytes of `source` (fewer if it ends first) into the new file
/// `dest` (mode 0600, which must not exist), hashing them; syncs `dest`.
pub fn copy_prefix(
    source: &File,
    len: u64,
    dest: &Path,
    pace: &mut Pace,
    progress: &mut dyn Progress,
) -> io::Result<Copied> {
    let out = create_new(dest)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0_u8; CHUNK_BYTES];
    let (mut offset, mut unsynced) = (0_u64, 0_u64);
    while offset < len {
        let want = usize::try_from(len - offset).unwrap_or(CHUNK_BYTES).min(CHUNK_BYTES);
        let read = read_up_to(source, &mut buffer[..want], offset)?;
        if read == 0 {
            // The file is shorter than it was (a torn tail truncated meanwhile): what was
            // read is all there is.
            break;
        }
        out.write_all_at(&buffer[..read], offset)?;
        hasher.update(&buffer[..read]);
        offset += read as u64;
        unsynced += read as u64;
        if unsynced >= SYNC_EVERY_BYTES {
            out.sync_data()?;
            unsynced = 0;
        }
        progress.advance(read as u64);
        pace.account(read as u64);
    }
    out.sync_all()?;
    Ok(Copied { bytes: offset, sha256: hex::encode(hasher.finalize()) })
}

/// Copies the whole of `source` into the new file `dest`, checking that it has
/// `expected`'s size and SHA-256; a mismatch is `Err(InvalidData)` (and `dest` holds
/// what was read).
pub fn copy_checked(
    source: &Path,
    dest: &Path,
    expected: &Copied,
    pace: &mut Pace,
    progress: &mut dyn Progress,
) -> io::Result<()> {
    let file = File::open(source)?;
    let copied = copy_prefix(&file, u64::MAX, dest, pace, progress)?;
    if copied != *expected {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} holds {} bytes with SHA-256 {}; the manifest says {} bytes with SHA-256 {}",
                source.display(),
                copied.bytes,
                copied.sha256,
                expected.bytes,
                expected.sha256
            ),
        ));
    }
    Ok(())
}

/// The size and SHA-256 of the file at `path`.
pub fn hash_file(path: &Path) -> io::Result<Copied> {
    let file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0_u8; CHUNK_BYTES];
    let mut offset = 0_u64;
    loop {
        let read = read_up_to(&file, &mut buffer, offset)?;
        if read == 0 {
            return Ok(Copied { bytes: offset, sha256: hex::encode(hasher.finalize()) });
        }
        hasher.update(&buffer[..read]);
        offset += read as u64;
    }
}

/// The SHA-256 of a byte string, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn read_up_to(file: &File, buffer: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read_at(&mut buffer[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

/// A new file, owner-only, that must not exist yet (never follows a symlink).
pub fn create_new(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(berth_jsonl::fs::FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Creates the missing directories of `path` (owner-only), noting each one made so its
/// parent can be synced before the backup or restore is declared done.
pub fn create_dirs(path: &Path, made: &mut std::collections::BTreeSet<std::path::PathBuf>) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if path.as_os_str().is_empty() || path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        create_dirs(parent, made)?;
    }
    match std::fs::DirBuilder::new().mode(berth_jsonl::fs::DIR_MODE).create(path) {
        Ok(()) => {
            made.insert(path.to_path_buf());
            Ok(())
        }
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
        Err(error) => Err(error),
    }
}

/// Syncs every directory in `made` and each one's parent (new entries are durable).
pub fn sync_dirs(made: &std::collections::BTreeSet<std::path::PathBuf>) -> io::Result<()> {
    let mut dirs: std::collections::BTreeSet<&Path> = made.iter().map(|dir| dir.as_path()).collect();
    dirs.extend(made.iter().filter_map(|dir| dir.parent()));
    for dir in dirs {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}
