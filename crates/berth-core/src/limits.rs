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
/// Longest outcome of a detached run (`completed`, `failed`, a short free text), in
/// bytes. It goes verbatim into the audit log, which outlives the session.
pub const OUTCOME_BYTES_MAX: usize = 512;
/// Most labels on one session.
pub const LABELS_MAX: usize = 64;
/// Longest origin / label string, in bytes.
pub const LABEL_BYTES_MAX: usize = 128;
/// Most bytes one import may inflate (a ZIP's entries in total, or one JSONL export), in
/// bytes. Twice the server's import body limit, so berth's own ZIP of a large session with
/// its forks (each fork repeats its parent's events) still imports; it is also what one
/// import may hold in memory, so it is a fixed bound rather than what the ZIP declares.
pub const IMPORT_INFLATED_BYTES_MAX: usize = 512 * 1024 * 1024;
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

// ----- scoped memory (docs/reference/memory.md) -------------------------------------------------
/// A memory namespace's length in bytes (`user/alice/preferences`).
pub const MEMORY_NAMESPACE_BYTES_MAX: usize = 512;
/// Segments of a memory namespace, the scope's two included.
pub const MEMORY_NAMESPACE_SEGMENTS_MAX: usize = 16;
/// One free segment of a memory namespace, in characters (the whole namespace is
/// bounded in bytes).
pub const MEMORY_SEGMENT_CHARS_MAX: usize = 128;
/// A memory item's key in bytes.
pub const MEMORY_KEY_BYTES_MAX: usize = 512;
/// A memory item's value (its compact JSON text) in bytes.
pub const MEMORY_VALUE_BYTES_MAX: usize = 256 * 1024;
/// Conditions of one memory search filter.
pub const MEMORY_FILTER_CONDITIONS_MAX: usize = 32;
/// Operands of one `in` condition of a memory search filter. Every backend answers the
/// same up to here (SQLite's expression depth, 1,000, and its 32,766 bound parameters
/// are reached only far past it: 32 conditions of 256 operands are 16,384 parameters).
pub const MEMORY_FILTER_IN_VALUES_MAX: usize = 256;
/// Terms of one memory full-text query.
pub const MEMORY_QUERY_TERMS_MAX: usize = 32;
/// Default per-tenant quota: memory items.
pub const MEMORY_ITEMS_DEFAULT: u64 = 1_000_000;
/// Default per-tenant quota: bytes of memory (keys, namespaces and values).
pub const MEMORY_BYTES_DEFAULT: u64 = 1024 * 1024 * 1024;

/// The name of every limit `Error::LimitExceeded` can report: typed, so the HTTP status, the
/// exit code and a client's decoding never depend on message text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Limit {
    IdBytes,
    EventTypeBytes,
    EventBytes,
    BatchEvents,
    BatchBytes,
    JsonDepth,
    PageSize,
    TitleBytes,
    Labels,
    LabelBytes,
    DelegationDepth,
    LiveBufferBytes,
    RequestBytes,
    ImportInflatedBytes,
    OutcomeBytes,
    IdempotencyKeyBytes,
    /// A position beyond what the storage can number (seqs, audit positions).
    Seq,
    MemoryNamespaceBytes,
    MemoryNamespaceSegments,
    MemoryKeyBytes,
    MemoryValueBytes,
    MemoryFilterConditions,
    /// Operands of one `in` condition.
    MemoryFilterInValues,
    MemoryQueryTerms,
    /// The tenant's quota of memory items.
    MemoryItems,
    /// The tenant's quota of memory bytes.
    MemoryBytes,
}

impl Limit {
    /// Every limit, for tables and round-trip tests.
    pub const ALL: &'static [Limit] = &[
        Limit::IdBytes,
        Limit::EventTypeBytes,
        Limit::EventBytes,
        Limit::BatchEvents,
        Limit::BatchBytes,
        Limit::JsonDepth,
        Limit::PageSize,
        Limit::TitleBytes,
        Limit::Labels,
        Limit::LabelBytes,
        Limit::DelegationDepth,
        Limit::LiveBufferBytes,
        Limit::RequestBytes,
        Limit::ImportInflatedBytes,
        Limit::OutcomeBytes,
        Limit::IdempotencyKeyBytes,
        Limit::Seq,
        Limit::MemoryNamespaceBytes,
        Limit::MemoryNamespaceSegments,
        Limit::MemoryKeyBytes,
        Limit::MemoryValueBytes,
        Limit::MemoryFilterConditions,
        Limit::MemoryFilterInValues,
        Limit::MemoryQueryTerms,
        Limit::MemoryItems,
        Limit::MemoryBytes,
    ];

    /// The stable wire name (`limit_name` in HTTP error bodies).
    pub fn name(self) -> &'static str {
        match self {
            Limit::IdBytes => "id_bytes",
            Limit::EventTypeBytes => "event_type_bytes",
            Limit::EventBytes => "event_bytes",
            Limit::BatchEvents => "batch_events",
            Limit::BatchBytes => "batch_bytes",
            Limit::JsonDepth => "json_depth",
            Limit::PageSize => "page_size",
            Limit::TitleBytes => "title_bytes",
            Limit::Labels => "labels",
            Limit::LabelBytes => "label_bytes",
            Limit::DelegationDepth => "delegation_depth",
            Limit::LiveBufferBytes => "live_buffer_bytes",
            Limit::RequestBytes => "request_bytes",
            Limit::ImportInflatedBytes => "import_inflated_bytes",
            Limit::OutcomeBytes => "outcome_bytes",
            Limit::IdempotencyKeyBytes => "idempotency_key_bytes",
            Limit::Seq => "seq",
            Limit::MemoryNamespaceBytes => "memory_namespace_bytes",
            Limit::MemoryNamespaceSegments => "memory_namespace_segments",
            Limit::MemoryKeyBytes => "memory_key_bytes",
            Limit::MemoryValueBytes => "memory_value_bytes",
            Limit::MemoryFilterConditions => "memory_filter_conditions",
            Limit::MemoryFilterInValues => "memory_filter_in_values",
            Limit::MemoryQueryTerms => "memory_query_terms",
            Limit::MemoryItems => "memory_items",
            Limit::MemoryBytes => "memory_bytes",
        }
    }

    pub fn parse(name: &str) -> Option<Limit> {
        Limit::ALL.iter().copied().find(|limit| limit.name() == name)
    }

    /// Whether exceeding it means the request is too large (HTTP 413), as opposed to a
    /// count or value out of range (422; also an idempotency key, an identifier rather
    /// than a payload) or JSON too deep to parse (400).
    pub fn is_payload_size(self) -> bool {
        matches!(
            self,
            Limit::EventTypeBytes
                | Limit::EventBytes
                | Limit::BatchEvents
                | Limit::BatchBytes
                | Limit::TitleBytes
                | Limit::LabelBytes
                | Limit::LiveBufferBytes
                | Limit::RequestBytes
                | Limit::ImportInflatedBytes
                | Limit::OutcomeBytes
                | Limit::MemoryValueBytes
                | Limit::MemoryNamespaceBytes
                | Limit::MemoryKeyBytes
        )
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Checks one line of free text that berth keeps (a label, an origin, a detach outcome):
/// at most `limit`'s byte count (`LimitExceeded`, named by `limit`), not empty and
/// without control characters (`Invalid`, as `what`).
pub fn check_text_line(what: &'static str, limit: Limit, bytes_max: usize, text: &str) -> crate::Result<()> {
    if text.len() > bytes_max {
        return Err(crate::Error::LimitExceeded { what: limit, limit: bytes_max as u64, actual: text.len() as u64 });
    }
    if text.is_empty() || text.chars().any(char::is_control) {
        return Err(crate::Error::invalid(what, format!("{text:?}: 1-{bytes_max} bytes, no control characters")));
    }
    Ok(())
}
