//! berth as a library: the backends chosen at run time from a URL (R-L2, assembled by
//! `berth-assemble`), and the crates underneath re-exported under one roof.
//!
//! ```no_run
//! # async fn demo() -> berth::core::Result<()> {
//! let service = berth::open_service("file:///var/lib/berth", berth::system_clock()).await?;
//! # Ok(()) }
//! ```

pub use berth_catalog as catalog;
pub use berth_core as core;
pub use berth_jsonl as jsonl;
pub use berth_postgres as postgres;
pub use berth_service as service;
pub use berth_store as store;

pub mod exit;
mod feed;
pub use feed::PostgresFeed;

pub use berth_assemble::{
    backup, migrate, open_backends, open_backends_with, open_service, open_service_with, service_over, system_clock,
    AssembleOptions, Backends, StoreUrl, CATALOG_FILE,
};

use std::sync::Arc;

/// The change feed a server's live tails need on these backends: `None` (the server's
/// in-process feed) unless several servers can share the store, as on PostgreSQL.
pub fn change_feed(backends: &Backends) -> Option<Arc<dyn berth_server::feed::ChangeFeed>> {
    backends
        .postgres
        .clone()
        .map(|backend| Arc::new(PostgresFeed::new(backend)) as Arc<dyn berth_server::feed::ChangeFeed>)
}
