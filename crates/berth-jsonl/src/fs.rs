//! The file-system seam of the embedded backend: every file operation the backend
//! performs goes through `Fs` / `FsFile`, so tests can inject faults (`FaultFs` in
//! `berth-testkit`) behind the same trait as the real file system (`OsFs`).
//!
//! Every open refuses to follow a symlink in the final component (`O_NOFOLLOW`) and sets
//! `O_CLOEXEC`, so a child process never inherits a descriptor (and with it the writer
//! lease's `flock`). On the real file system every open also refuses a symlink in *any*
//! component (`openat2` with `RESOLVE_NO_SYMLINKS`, Linux ≥ 5.6): the kernel resolves
//! the path and refuses (`ELOOP`), so a symlink planted inside the data root cannot
//! redirect a read, a write or a create outside it, not even one swapped in between
//! the backend's own checks and the open. The backend opens its root by its canonical
//! path (`Fs::canonicalize`), so a symlink *above* the root is resolved once, at open.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Mode of every directory the backend creates: owner only.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file the backend creates: owner only.
pub const FILE_MODE: u32 = 0o600;

/// How to open a file. Always `O_NOFOLLOW | O_CLOEXEC`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    pub read: bool,
    pub write: bool,
    /// Create if missing (`O_CREAT`).
    pub create: bool,
    /// Fail if it exists (`O_CREAT | O_EXCL`).
    pub create_new: bool,
    /// Truncate to zero on open (`O_TRUNC`).
    pub truncate: bool,
}

impl OpenOptions {
    pub fn read_only() -> OpenOptions {
        OpenOptions { read: true, ..OpenOptions::default() }
    }

    pub fn read_write() -> OpenOptions {
        OpenOptions { read: true, write: true, ..OpenOptions::default() }
    }

    /// Read-write, created if missing (the lock file).
    pub fn read_write_create() -> OpenOptions {
        OpenOptions { read: true, write: true, create: true, ..OpenOptions::default() }
    }

    /// Write-only, created or truncated (temp files and kept copies).
    pub fn write_truncate() -> OpenOptions {
        OpenOptions { write: true, create: true, truncate: true, ..OpenOptions::default() }
    }

    /// Write-only, must not exist yet.
    pub fn write_new() -> OpenOptions {
        OpenOptions { write: true, create_new: true, ..OpenOptions::default() }
    }
}

/// What `lstat`/`fstat` tell the backend about a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileMeta {
    pub is_dir: bool,
    pub is_file: bool,
    pub is_symlink: bool,
    pub len: u64,
    pub dev: u64,
    pub ino: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
}

impl FileMeta {
    fn from_std(meta: &fs::Metadata) -> FileMeta {
        let file_type = meta.file_type();
        FileMeta {
            is_dir: file_type.is_dir(),
            is_file: file_type.is_file(),
            is_symlink: file_type.is_symlink(),
            len: meta.len(),
            dev: meta.dev(),
            ino: meta.ino(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
        }
    }
}

/// The file system as the backend uses it. Paths are absolute.
pub trait Fs: Send + Sync + 'static {
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Box<dyn FsFile>>;
    /// Opens a directory read-only (for `flock` and `fsync`).
    fn open_dir(&self, path: &Path) -> io::Result<Box<dyn FsFile>>;
    /// Creates one directory with mode `DIR_MODE` (`AlreadyExists` if present).
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    /// `fsync` of a directory, making its entries (creates, links, renames) durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// `link(2)`: fails with `AlreadyExists` instead of replacing `to`.
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// `rename(2)`: atomically replaces `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn remove_dir(&self, path: &Path) -> io::Result<()>;
    /// Names of a directory's entries, in no particular order.
    fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>>;
    /// `lstat(2)`: never follows a symlink.
    fn metadata(&self, path: &Path) -> io::Result<FileMeta>;
    /// The name of the network file system `path` is on (`statfs(2)`'s `f_type`), if it
    /// is on one; `None` for a local one or a file system that is not the OS's.
    fn network_filesystem(&self, _path: &Path) -> io::Result<Option<&'static str>> {
        Ok(None)
    }
    /// The path with every symlink resolved (`realpath(3)`); simulated file systems have
    /// none and return it unchanged.
    fn canonicalize(&self, path: &Path) -> io::Result<std::path::PathBuf> {
        Ok(path.to_path_buf())
    }
}

/// The network file systems whose `statfs` magic numbers berth knows. Their `fsync`,
/// `flock` and `link` do not give the guarantees the JSONL backend relies on (locks may
/// be advisory or lost on reconnect, a sync may only reach the server's cache), so
/// berth warns when its data root is on one (`docs/reference/storage-format.md`, *Assumptions*).
pub fn network_filesystem_name(f_type: u32) -> Option<&'static str> {
    Some(match f_type {
        0x0000_6969 => "NFS",
        0x0000_517B => "SMB",
        0xFF53_4D42 => "CIFS",
        0xFE53_4D42 => "SMB2",
        0x0102_1997 => "9P",
        0x00C3_6400 => "Ceph",
        0x4750_4653 => "GPFS",
        0x0BD0_0BD0 => "Lustre",
        0x5346_414F => "AFS",
        0x6B41_4653 => "kAFS",
        0x7461_636F => "OCFS2",
        0x0116_1970 => "GFS2",
        _ => return None,
    })
}

/// An open file (or directory).
pub trait FsFile: Send + Sync {
    /// `pread(2)`: may return fewer bytes than asked.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// `pwrite(2)`: may write fewer bytes than asked (a short write).
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize>;
    /// `fdatasync(2)`.
    fn sync_data(&self) -> io::Result<()>;
    /// `fsync(2)`.
    fn sync_all(&self) -> io::Result<()>;
    /// `ftruncate(2)`.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Current length (`fstat`).
    fn len(&self) -> io::Result<u64>;
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// `flock(LOCK_EX | LOCK_NB)`: `Ok(false)` when another open file description holds
    /// it. Released when the last descriptor of this description closes.
    fn try_lock(&self) -> io::Result<bool>;
    /// `fstat(2)`.
    fn metadata(&self) -> io::Result<FileMeta>;
    /// `(dev, ino)` of the open file, to compare with what a path names now.
    fn identity(&self) -> io::Result<(u64, u64)> {
        let meta = self.metadata()?;
        Ok((meta.dev, meta.ino))
    }
}

/// The real file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct OsFs;

/// `openat2(AT_FDCWD, path, flags, mode, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`.
/// `Ok(None)` where the kernel lacks it (`ENOSYS`, or `EPERM` from a seccomp filter):
/// the caller then opens with `O_NOFOLLOW` after the backend's own per-component check.
fn open_no_symlinks(path: &Path, flags: libc::c_int, mode: u32) -> io::Result<Option<File>> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    // SAFETY: `open_how` is plain data; zeroed is its documented initial state.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64;
    how.mode = if flags & libc::O_CREAT != 0 { u64::from(mode) } else { 0 };
    how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: the path is NUL-terminated and `how` lives across the call, whose size
    // argument is its size; the returned descriptor is owned by the `File` below.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c_path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        let error = io::Error::last_os_error();
        return match error.raw_os_error() {
            Some(libc::ENOSYS) | Some(libc::EPERM) => Ok(None),
            _ => Err(error),
        };
    }
    // SAFETY: a fresh descriptor the kernel just returned, owned by nobody else.
    Ok(Some(unsafe { File::from_raw_fd(fd as libc::c_int) }))
}

fn access_flags(options: OpenOptions) -> libc::c_int {
    let mut flags = match (options.read, options.write) {
        (_, false) => libc::O_RDONLY,
        (false, true) => libc::O_WRONLY,
        (true, true) => libc::O_RDWR,
    };
    if options.create_new {
        flags |= libc::O_CREAT | libc::O_EXCL;
    } else if options.create {
        flags |= libc::O_CREAT;
    }
    if options.truncate {
        flags |= libc::O_TRUNC;
    }
    flags
}

impl Fs for OsFs {
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Box<dyn FsFile>> {
        if let Some(file) = open_no_symlinks(path, access_flags(options), FILE_MODE)? {
            return Ok(Box::new(OsFile(file)));
        }
        let file = fs::OpenOptions::new()
            .read(options.read)
            .write(options.write)
            .create(options.create)
            .create_new(options.create_new)
            .truncate(options.truncate)
            .mode(FILE_MODE)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)?;
        Ok(Box::new(OsFile(file)))
    }

    fn open_dir(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        if let Some(file) = open_no_symlinks(path, libc::O_RDONLY | libc::O_DIRECTORY, 0)? {
            return Ok(Box::new(OsFile(file)));
        }
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)?;
        Ok(Box::new(OsFile(file)))
    }

    fn canonicalize(&self, path: &Path) -> io::Result<std::path::PathBuf> {
        fs::canonicalize(path)
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        fs::DirBuilder::new().mode(DIR_MODE).create(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.open_dir(path)?.sync_all()
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::hard_link(from, to)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        fs::remove_dir(path)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        fs::read_dir(path)?.map(|entry| entry.map(|entry| entry.file_name())).collect()
    }

    fn metadata(&self, path: &Path) -> io::Result<FileMeta> {
        fs::symlink_metadata(path).map(|meta| FileMeta::from_std(&meta))
    }

    fn network_filesystem(&self, path: &Path) -> io::Result<Option<&'static str>> {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
        // SAFETY: `statfs` writes only into the zeroed struct we pass, and `path` is a
        // valid NUL-terminated string for the duration of the call.
        let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statfs(path.as_ptr(), &mut stat) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(network_filesystem_name(stat.f_type as u32))
    }
}

/// A real open file.
#[derive(Debug)]
pub struct OsFile(pub File);

impl FsFile for OsFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.0.write_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn len(&self) -> io::Result<u64> {
        self.0.metadata().map(|meta| meta.len())
    }

    fn try_lock(&self) -> io::Result<bool> {
        match self.0.try_lock() {
            Ok(()) => Ok(true),
            Err(fs::TryLockError::WouldBlock) => Ok(false),
            Err(fs::TryLockError::Error(error)) => Err(error),
        }
    }

    fn metadata(&self) -> io::Result<FileMeta> {
        self.0.metadata().map(|meta| FileMeta::from_std(&meta))
    }
}

/// Reads exactly `buf.len()` bytes at `offset`, or fewer at end of file. Returns the
/// number read.
pub fn read_full_at(file: &dyn FsFile, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

/// Writes all of `buf` at `offset`, continuing after short writes. A zero-length write
/// is an error (`WriteZero`). On error, some prefix of `buf` may have been written.
pub fn write_all_at(file: &dyn FsFile, buf: &[u8], offset: u64) -> io::Result<()> {
    let mut written = 0;
    while written < buf.len() {
        match file.write_at(&buf[written..], offset + written as u64) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0 bytes")),
            Ok(count) => written += count,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}
