//! The LogStore seam (R-P1…R-P7).
//!
//! `LogStore` is the one front every caller uses: `create / open / stat / list / flush`,
//! handing out `SessionHandle`s (`read / append / publish / flush / close`). It enforces
//! the storage contract once — validation, contiguity, the in-process single-writer
//! registry, deferred materialization, freshness, monotonic reads and the live write
//! path — and delegates physical work to a `LogBackend` (memory, JSONL, PostgreSQL).
//! Backends therefore only implement a small physical trait and cannot drift apart on
//! semantics; the conformance suites in `berth-testkit` check them all the same way.

pub mod backend;
mod handle;
pub mod live;
pub mod memory;
pub mod registry;
mod store;

pub use backend::{ChangeToken, ListPage, ListQuery, LogBackend, LogReader, LogStat, LogWriter, TailRecovery};
pub use handle::{Access, SessionHandle, READ_SEQS_MAX};
pub use store::LogStore;
