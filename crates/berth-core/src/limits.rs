//! Named limits (R-C6). Units are in the names; exceeding one is a typed
//! `LimitExceeded` error, never a panic and never a partial write.

/// Longest id of any kind, in bytes.
pub const ID_BYTES_MAX: usize = 128;
/// Longest event type, in bytes.
pub const EVENT_TYPE_BYTES_MAX: usize = 64;
/// Largest encoded event (envelope and data), in bytes.
pub const EVENT_BYTES_MAX: usize = 1024 * 1024;
/// Most events in one append batch.
pub const BATCH_EVENTS_MAX: usize = 1_000;
/// Largest encoded append batch, in bytes.
pub const BATCH_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Longest idempotency key of an append (R-S14), in bytes.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 128;
/// Deepest JSON nesting accepted anywhere (arrays and objects).
pub const JSON_DEPTH_MAX: usize = 128;
/// Largest page any listing returns.
pub const PAGE_SIZE_MAX: usize = 1_000;
/// Default listing page.
pub const PAGE_SIZE_DEFAULT: usize = 50;
/// Longest title of a session, in bytes.
pub const TITLE_BYTES_MAX: usize = 512;
/// Most labels on one session.
pub const LABELS_MAX: usize = 64;
/// Longest origin / label string, in bytes.
pub const LABEL_BYTES_MAX: usize = 128;
/// Deepest delegation chain (sub-agent of sub-agent ...).
pub const DELEGATION_DEPTH_MAX: u32 = 64;
/// Most runs a `parallel` session may allow at once.
pub const PARALLEL_RUNS_MAX: u32 = 64;
/// Live write path: the coalescing window. Fixed, not configuration (R-P5).
pub const LIVE_WINDOW_MS: u64 = 200;
/// Live write path: buffered bytes that trigger an immediate drain.
pub const LIVE_WINDOW_BYTES_MAX: usize = 1024 * 1024;
/// Live write path: buffered bytes beyond which `publish` refuses (back-pressure).
pub const LIVE_BUFFER_BYTES_MAX: usize = 16 * 1024 * 1024;
