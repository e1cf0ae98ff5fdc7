//! The embedded JSONL backend (R-J1…R-J5): one append-only JSON Lines log per session
//! on local disk, every record checksummed (CRC32C) and stamped with the writer's epoch,
//! `\n` as the commit marker, a cross-process `flock` writer lease with a durable epoch,
//! and a recovery scanner that tells a torn tail (truncated, with a kept copy) from
//! corruption (refused, never truncated).
//!
//! - `format`: every on-disk name and constant, the record codec, the pure scanner.
//! - `fs`: the file-system seam (`Fs`, `FsFile`, `OsFs`), so faults can be injected.
//! - `backend`: `JsonlBackend`, the `LogBackend` the `LogStore` front drives.
//! - `counting_fs`: `CountingFs`, a pass-through `Fs` reporting fsyncs and open files.
//! - `dir_sync`: group `fsync` of a directory, shared by concurrent creates.
//! - `fsck`: verify a whole data root; repair torn tails only.
//!
//! The on-disk format and the write/fsync/publish protocol are described byte by byte
//! in `docs/reference/storage-format.md`.

pub mod backend;
pub mod counting_fs;
mod dir_sync;
pub mod format;
pub mod fs;
pub mod fsck;
mod idle_tails;
mod lease;
mod log;
mod prealloc;
mod writer;

pub use backend::{Durability, JsonlBackend, JsonlOptions, JsonlReader, PREALLOCATE_DEFAULT};
pub use counting_fs::{CountingFs, FsEvent, FsObserver};
pub use idle_tails::SWEEP_EVERY;
pub use log::INDEX_ENTRIES_MAX;
pub use prealloc::IDLE_GIVE_BACK;
pub use writer::JsonlWriter;
