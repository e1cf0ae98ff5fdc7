//! `CountingFs`: a pass-through file system that reports fsyncs and open files, so a
//! server can export them as metrics without the backend knowing about metrics.

use crate::fs::{FileMeta, Fs, FsFile, OpenOptions};
use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// What `CountingFs` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsEvent {
    /// An `fsync`/`fdatasync` of a file or a directory.
    Synced,
    /// A file or directory handle was opened.
    FileOpened,
    /// A handle opened through the wrapper was dropped.
    FileClosed,
}

/// Where `CountingFs` reports (a server's metrics registry, a test's tallies).
pub type FsObserver = Arc<dyn Fn(FsEvent) + Send + Sync>;

/// Wraps a file system to report its fsyncs and open files (the server's storage
/// metrics), passing every call through unchanged.
pub struct CountingFs {
    inner: Arc<dyn Fs>,
    observer: FsObserver,
}

impl CountingFs {
    pub fn new(inner: Arc<dyn Fs>, observer: FsObserver) -> CountingFs {
        CountingFs { inner, observer }
    }

    fn wrap(&self, file: Box<dyn FsFile>) -> Box<dyn FsFile> {
        (self.observer)(FsEvent::FileOpened);
        Box::new(CountingFile { inner: file, observer: self.observer.clone() })
    }
}

impl Fs for CountingFs {
    fn open(&self, path: &Path, options: OpenOptions) -> io::Result<Box<dyn FsFile>> {
        self.inner.open(path, options).map(|file| self.wrap(file))
    }
    fn open_dir(&self, path: &Path) -> io::Result<Box<dyn FsFile>> {
        self.inner.open_dir(path).map(|file| self.wrap(file))
    }
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        (self.observer)(FsEvent::Synced);
        self.inner.sync_dir(path)
    }
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.hard_link(from, to)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_dir(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        self.inner.read_dir(path)
    }
    fn metadata(&self, path: &Path) -> io::Result<FileMeta> {
        self.inner.metadata(path)
    }

    fn network_filesystem(&self, path: &Path) -> io::Result<Option<&'static str>> {
        self.inner.network_filesystem(path)
    }

    fn canonicalize(&self, path: &Path) -> io::Result<std::path::PathBuf> {
        self.inner.canonicalize(path)
    }
}

struct CountingFile {
    inner: Box<dyn FsFile>,
    observer: FsObserver,
}

impl Drop for CountingFile {
    fn drop(&mut self) {
        (self.observer)(FsEvent::FileClosed);
    }
}

impl FsFile for CountingFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.inner.write_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        (self.observer)(FsEvent::Synced);
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        (self.observer)(FsEvent::Synced);
        self.inner.sync_all()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn try_lock(&self) -> io::Result<bool> {
        self.inner.try_lock()
    }
    fn metadata(&self) -> io::Result<FileMeta> {
        self.inner.metadata()
    }
    fn identity(&self) -> io::Result<(u64, u64)> {
        self.inner.identity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

    #[test]
    fn counts_syncs_and_open_files_and_passes_calls_through() {
        let syncs = Arc::new(AtomicU64::new(0));
        let open = Arc::new(AtomicI64::new(0));
        let (seen_syncs, seen_open) = (syncs.clone(), open.clone());
        let observer: FsObserver = Arc::new(move |event| match event {
            FsEvent::Synced => {
                seen_syncs.fetch_add(1, Ordering::Relaxed);
            }
            FsEvent::FileOpened => {
                seen_open.fetch_add(1, Ordering::Relaxed);
            }
            FsEvent::FileClosed => {
                seen_open.fetch_sub(1, Ordering::Relaxed);
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let fs = CountingFs::new(Arc::new(crate::fs::OsFs), observer);
        let path = dir.path().join("f");
        let file = fs.open(&path, OpenOptions::read_write_create()).unwrap();
        assert_eq!(open.load(Ordering::Relaxed), 1);
        assert_eq!(file.write_at(b"abc", 0).unwrap(), 3);
        file.sync_data().unwrap();
        fs.sync_dir(dir.path()).unwrap();
        assert_eq!(syncs.load(Ordering::Relaxed), 2);
        drop(file);
        assert_eq!(open.load(Ordering::Relaxed), 0);
        assert_eq!(fs.metadata(&path).unwrap().len, 3);
    }
}
