//! The one error vocabulary callers branch on (R-C8). Backends map native failures onto
//! these kinds; messages are lowercase fragments and context travels in fields.

use crate::limits::Limit;
use std::fmt;

/// Where in storage a problem was found. Used only in diagnostics.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Location {
    /// Backend-specific artifact, e.g. a file path relative to the data root, or `memory`.
    pub artifact: String,
    /// Byte offset inside the artifact, when known.
    pub offset: Option<u64>,
    /// Event seq (0-based position in the log) the damage belongs to, when known.
    pub seq: Option<u64>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.artifact)?;
        if let Some(offset) = self.offset {
            write!(f, " at byte {offset}")?;
        }
        if let Some(seq) = self.seq {
            write!(f, " (seq {seq})")?;
        }
        Ok(())
    }
}

/// Who holds the write handle that a write open was refused for (`AlreadyOwned`,
/// `WriterBusy`): said in the message, because waiting helps only when the holder is
/// someone else, and a holder in this very process is usually the caller's own bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteHolder {
    /// Another handle of this process (the in-process single-writer registry).
    ThisProcess,
    /// Another process's lease on the same storage (a flock, a lease row).
    AnotherProcess,
    /// Not known here: a server answered `writer_busy` without saying.
    Unknown,
}

impl std::fmt::Display for WriteHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WriteHolder::ThisProcess => "this process",
            WriteHolder::AnotherProcess => "another process",
            WriteHolder::Unknown => "another writer",
        })
    }
}

/// Every failure berth reports. `#[non_exhaustive]`: match with a wildcard arm.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The object does not exist, or exists outside the caller's reach (the two are
    /// deliberately indistinguishable).
    #[error("{what} \"{id}\" not found")]
    NotFound { what: &'static str, id: String },
    #[error("{what} \"{id}\" already exists")]
    AlreadyExists { what: &'static str, id: String },
    #[error("session \"{id}\" is already owned by an active write handle of {holder}")]
    AlreadyOwned { id: String, holder: WriteHolder },
    #[error("session \"{id}\": {operation} is not available on a read handle")]
    ReadOnly { id: String, operation: &'static str },
    #[error("session \"{id}\": {operation} on a closed handle")]
    HandleClosed { id: String, operation: &'static str },
    #[error("session \"{id}\": write ownership was lost ({reason}); close this handle and reopen")]
    OwnershipLost { id: String, reason: String },
    #[error("session \"{id}\": writer epoch {epoch} was fenced by epoch {current}")]
    Fenced { id: String, epoch: u64, current: u64 },
    #[error("revision conflict: expected {expected}, actual {actual}")]
    RevisionConflict { expected: u64, actual: u64 },
    #[error("append seq mismatch: expected {expected}, got {actual}")]
    SeqConflict { expected: u64, actual: u64 },
    /// An append's idempotency key was used before for other content (R-S14).
    #[error("idempotency key \"{key}\" was used for a different batch (stored at seq {first_seq})")]
    IdempotencyKeyReused { key: String, first_seq: u64 },
    #[error("invalid transition: {event} is not allowed in state {from}")]
    InvalidTransition { from: String, event: String },
    #[error("session is {state}: terminal states are never reactivated (fork to continue)")]
    Terminal { state: String },
    #[error("session \"{id}\" is busy: {reason}")]
    Busy { id: String, reason: String },
    /// The session's log is open for writing elsewhere (another process's write handle
    /// on a shared data directory): waiting it out works, unlike a policy's `Busy`.
    #[error("session \"{id}\" is busy: its log is open for writing by {holder}")]
    WriterBusy { id: String, holder: WriteHolder },
    #[error("limit exceeded: {what} is {actual}, limit {limit}")]
    LimitExceeded { what: Limit, limit: u64, actual: u64 },
    /// The run named by an append, heartbeat or detach is not attached to the session
    /// (it was displaced, abandoned, detached, or never attached by this caller): the
    /// caller no longer owns the conversation.
    #[error("session \"{id}\": run \"{run}\" is not attached (displaced, detached or never attached)")]
    RunNotAttached { id: String, run: String },
    /// A remote server refused the caller's credentials (client side of HTTP 401).
    #[error("unauthenticated: {reason}")]
    Unauthenticated { reason: String },
    /// A remote server's rate limit (client side of HTTP 429).
    #[error("rate limited: retry after {retry_after_s} s")]
    RateLimited { retry_after_s: u64 },
    /// A remote server did not finish in time; the outcome is unknown (client side of the
    /// server's `timeout`).
    #[error("timeout: {reason}")]
    Timeout { reason: String },
    #[error("invalid {what}: {reason}")]
    Invalid { what: &'static str, reason: String },
    /// The caller is known but its role may not do this (never used to hide existence).
    #[error("forbidden: {reason}")]
    Forbidden { reason: String },
    #[error("format unsupported: {reason}")]
    FormatUnsupported { reason: String, location: Option<Location> },
    #[error("corrupt log: {reason} at {location}")]
    Corrupt { reason: String, location: Location },
    #[error("i/o error during {operation}: {message}")]
    Io { operation: &'static str, kind: std::io::ErrorKind, message: String },
    /// A write or sync failed earlier; the handle refuses further mutation without
    /// touching storage (never retried on the same file).
    #[error("session \"{id}\": handle poisoned by an earlier failure ({cause}); close and reopen")]
    Poisoned { id: String, cause: String },
    #[error("unavailable: {reason}")]
    Unavailable { reason: String },
    /// The storage refuses writes: a read-only database (a hot standby, a server with
    /// `default_transaction_read_only`, a primary demoted by a failover). Refused at
    /// open, and reported the same way when a write fails later for this reason.
    #[error("read-only storage: {reason}")]
    ReadOnlyDatabase { reason: String },
    /// Several independent failures reported together (e.g. a store-wide flush).
    #[error("{} failures: {}", .0.len(), display_many(.0))]
    Many(Vec<(String, Error)>),
}

fn display_many(errors: &[(String, Error)]) -> String {
    errors.iter().map(|(id, error)| format!("{id}: {error}")).collect::<Vec<_>>().join("; ")
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn invalid(what: &'static str, reason: impl Into<String>) -> Error {
        Error::Invalid { what, reason: reason.into() }
    }

    pub fn io(operation: &'static str, error: &std::io::Error) -> Error {
        Error::Io { operation, kind: error.kind(), message: error.to_string() }
    }

    pub fn session_not_found(id: impl fmt::Display) -> Error {
        Error::NotFound { what: "session", id: id.to_string() }
    }

    /// A stable, machine-readable code for the variant, for in-process callers and logs.
    /// What crosses a process boundary (HTTP bodies, CLI `--json` errors) is the coarser
    /// `class().code()`.
    pub fn code(&self) -> &'static str {
        match self {
            Error::NotFound { .. } => "not_found",
            Error::AlreadyExists { .. } => "already_exists",
            Error::AlreadyOwned { .. } => "already_owned",
            Error::ReadOnly { .. } => "read_only",
            Error::HandleClosed { .. } => "handle_closed",
            Error::OwnershipLost { .. } => "ownership_lost",
            Error::Fenced { .. } => "fenced",
            Error::RevisionConflict { .. } => "revision_conflict",
            Error::SeqConflict { .. } => "seq_conflict",
            Error::InvalidTransition { .. } => "invalid_transition",
            Error::Terminal { .. } => "terminal",
            Error::Busy { .. } => "busy",
            Error::WriterBusy { .. } => "writer_busy",
            Error::LimitExceeded { .. } => "limit_exceeded",
            Error::RunNotAttached { .. } => "run_not_attached",
            Error::IdempotencyKeyReused { .. } => "idempotency_key_reused",
            Error::Invalid { .. } => "invalid",
            Error::Forbidden { .. } => "forbidden",
            Error::Unauthenticated { .. } => "unauthenticated",
            Error::RateLimited { .. } => "rate_limited",
            Error::Timeout { .. } => "timeout",
            Error::FormatUnsupported { .. } => "format_unsupported",
            Error::Corrupt { .. } => "corrupt",
            Error::Io { .. } => "io",
            Error::Poisoned { .. } => "poisoned",
            Error::Unavailable { .. } => "unavailable",
            Error::ReadOnlyDatabase { .. } => "read_only_database",
            Error::Many(_) => "many",
        }
    }

    /// The one classification every mapping derives from (HTTP status and code, CLI
    /// exit code, `retryable`, a client's decoding).
    pub fn class(&self) -> ErrorClass {
        use ErrorClass as C;
        match self {
            Error::NotFound { .. } => C::NotFound,
            Error::AlreadyExists { .. } => C::AlreadyExists,
            Error::AlreadyOwned { .. } | Error::Busy { .. } => C::Busy,
            Error::WriterBusy { .. } => C::WriterBusy,
            Error::RunNotAttached { .. } => C::RunNotAttached,
            Error::Fenced { .. } | Error::OwnershipLost { .. } => C::Fenced,
            Error::RevisionConflict { .. } => C::RevisionConflict,
            Error::SeqConflict { .. } => C::SeqConflict,
            Error::IdempotencyKeyReused { .. } => C::IdempotencyKeyReused,
            Error::InvalidTransition { .. } => C::InvalidTransition,
            Error::Terminal { .. } => C::Terminal,
            Error::LimitExceeded { what: Limit::JsonDepth, .. } => C::Invalid,
            Error::LimitExceeded { what, .. } if what.is_payload_size() => C::PayloadTooLarge,
            Error::LimitExceeded { .. } => C::LimitExceeded,
            Error::Invalid { .. } => C::Invalid,
            Error::Forbidden { .. } => C::Forbidden,
            Error::Unauthenticated { .. } => C::Unauthenticated,
            Error::RateLimited { .. } => C::RateLimited,
            Error::Timeout { .. } => C::Timeout,
            // Retryable: after a failover the same URL may reach a writable primary.
            Error::Unavailable { .. } | Error::Poisoned { .. } | Error::ReadOnlyDatabase { .. } => C::Unavailable,
            // Content this berth refuses to reconstruct (an unknown, non-ignorable event
            // type): the caller's data, not storage damage.
            Error::FormatUnsupported { location: None, .. } => C::Unsupported,
            Error::Corrupt { .. } | Error::FormatUnsupported { .. } => C::Damaged,
            Error::ReadOnly { .. } | Error::HandleClosed { .. } | Error::Io { .. } | Error::Many(_) => C::Internal,
        }
    }
}

/// What kind of failure an error is, for every caller that is not in this process: one
/// row per class in [`ErrorClass::ALL`], from which the HTTP status, the wire code, the
/// CLI's exit code and `retryable` are read. A client maps a wire code back to its class
/// with [`ErrorClass::from_code`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorClass {
    NotFound,
    AlreadyExists,
    /// Another run or process holds the session (a serial session's run, a writer lease).
    Busy,
    /// The session's log is open for writing in another process: transient, waited out
    /// by the embedded clients (a `Busy` of its own, so nobody matches message text).
    WriterBusy,
    /// The caller's run is no longer attached: it lost the conversation (ownership lost).
    RunNotAttached,
    /// The server's writer was fenced by another writer of a shared store.
    Fenced,
    RevisionConflict,
    SeqConflict,
    IdempotencyKeyReused,
    InvalidTransition,
    Terminal,
    PayloadTooLarge,
    LimitExceeded,
    Invalid,
    Forbidden,
    Unauthenticated,
    RateLimited,
    Timeout,
    Unavailable,
    /// The session holds content this build cannot process (e.g. an unknown event type not
    /// marked ignorable, met by a resume): a conflict with the session's state (409), not
    /// a malformed request.
    Unsupported,
    /// Stored data is damaged or of a newer format: an operator's matter (`berth fsck`).
    Damaged,
    /// Everything that must not be described to a remote caller.
    Internal,
}

/// One row of the classification: how a class travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassRow {
    pub class: ErrorClass,
    /// The wire code (`code` of HTTP error bodies and CLI `--json` errors).
    pub code: &'static str,
    pub http_status: u16,
    /// The documented exit code of the `berth` CLI (`docs/reference/cli.md`).
    pub exit_code: u8,
    /// Sending the same request again, unchanged, may succeed and is safe (appends with
    /// an idempotency key or `expected_seq`); clients retry these with backoff.
    pub retryable: bool,
}

const fn row(class: ErrorClass, code: &'static str, http_status: u16, exit_code: u8, retryable: bool) -> ClassRow {
    ClassRow { class, code, http_status, exit_code, retryable }
}

impl ErrorClass {
    /// The table. Exit codes: 3 not found, 4 conflict, 5 refused input or state, 6 damaged
    /// data, 1 anything else (7 for the retryable ones a remote server reports).
    pub const TABLE: &'static [ClassRow] = &[
        row(ErrorClass::NotFound, "not_found", 404, 3, false),
        row(ErrorClass::AlreadyExists, "already_exists", 409, 4, false),
        row(ErrorClass::Busy, "busy", 409, 4, false),
        row(ErrorClass::WriterBusy, "writer_busy", 409, 4, false),
        row(ErrorClass::RunNotAttached, "run_not_attached", 409, 4, false),
        row(ErrorClass::Fenced, "fenced", 409, 4, true),
        row(ErrorClass::RevisionConflict, "revision_conflict", 412, 4, false),
        row(ErrorClass::SeqConflict, "seq_conflict", 409, 4, false),
        row(ErrorClass::IdempotencyKeyReused, "idempotency_key_reused", 409, 4, false),
        row(ErrorClass::InvalidTransition, "invalid_transition", 409, 5, false),
        row(ErrorClass::Terminal, "terminal", 409, 5, false),
        row(ErrorClass::PayloadTooLarge, "payload_too_large", 413, 5, false),
        row(ErrorClass::LimitExceeded, "limit_exceeded", 422, 5, false),
        row(ErrorClass::Invalid, "invalid", 422, 5, false),
        row(ErrorClass::Forbidden, "forbidden", 403, 5, false),
        row(ErrorClass::Unauthenticated, "unauthenticated", 401, 5, false),
        row(ErrorClass::RateLimited, "rate_limited", 429, 7, true),
        row(ErrorClass::Timeout, "timeout", 503, 7, true),
        row(ErrorClass::Unavailable, "unavailable", 503, 7, true),
        row(ErrorClass::Unsupported, "format_unsupported", 409, 5, false),
        row(ErrorClass::Damaged, "corrupt", 500, 6, false),
        row(ErrorClass::Internal, "internal", 500, 1, false),
    ];

    pub fn row(self) -> &'static ClassRow {
        // Every class has exactly one row (checked by a test), so the fallback is unreachable.
        ErrorClass::TABLE
            .iter()
            .find(|row| row.class == self)
            .unwrap_or(&ErrorClass::TABLE[ErrorClass::TABLE.len() - 1])
    }

    pub fn code(self) -> &'static str {
        self.row().code
    }

    pub fn http_status(self) -> u16 {
        self.row().http_status
    }

    pub fn exit_code(self) -> u8 {
        self.row().exit_code
    }

    pub fn retryable(self) -> bool {
        self.row().retryable
    }

    /// The class of a wire code; `None` for a code this build does not know (a newer
    /// server's code within `/v1`: callers fall back to the HTTP status's class).
    pub fn from_code(code: &str) -> Option<ErrorClass> {
        ErrorClass::TABLE.iter().find(|row| row.code == code).map(|row| row.class)
    }

    /// The class a bare HTTP status stands for, when a body carries no known code.
    pub fn from_http_status(status: u16) -> ErrorClass {
        match status {
            400 | 422 => ErrorClass::Invalid,
            401 => ErrorClass::Unauthenticated,
            403 => ErrorClass::Forbidden,
            404 => ErrorClass::NotFound,
            409 => ErrorClass::Busy,
            412 => ErrorClass::RevisionConflict,
            413 => ErrorClass::PayloadTooLarge,
            429 => ErrorClass::RateLimited,
            503 => ErrorClass::Unavailable,
            _ => ErrorClass::Internal,
        }
    }
}

/// The message of a caught panic (`catch_unwind`'s payload): its `&str` or `String`, or a
/// fixed text for any other payload. For futures that turn a panic into an error.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_has_one_row_and_one_code() {
        for row in ErrorClass::TABLE {
            assert_eq!(ErrorClass::TABLE.iter().filter(|other| other.class == row.class).count(), 1, "{row:?}");
            assert_eq!(ErrorClass::TABLE.iter().filter(|other| other.code == row.code).count(), 1, "{row:?}");
            assert_eq!(ErrorClass::from_code(row.code), Some(row.class));
            assert_eq!(row.class.row(), row);
        }
    }

    /// Every class of the enum has a row: the match has no wildcard arm, so a class added
    /// to the enum does not compile here until it is listed (add it to `every` too).
    #[test]
    fn every_class_of_the_enum_has_a_row() {
        use ErrorClass as C;
        let every = [
            C::NotFound,
            C::AlreadyExists,
            C::Busy,
            C::WriterBusy,
            C::RunNotAttached,
            C::Fenced,
            C::RevisionConflict,
            C::SeqConflict,
            C::IdempotencyKeyReused,
            C::InvalidTransition,
            C::Terminal,
            C::PayloadTooLarge,
            C::LimitExceeded,
            C::Invalid,
            C::Forbidden,
            C::Unauthenticated,
            C::RateLimited,
            C::Timeout,
            C::Unavailable,
            C::Unsupported,
            C::Damaged,
            C::Internal,
        ];
        for class in every {
            match class {
                C::NotFound
                | C::AlreadyExists
                | C::Busy
                | C::WriterBusy
                | C::RunNotAttached
                | C::Fenced
                | C::RevisionConflict
                | C::SeqConflict
                | C::IdempotencyKeyReused
                | C::InvalidTransition
                | C::Terminal
                | C::PayloadTooLarge
                | C::LimitExceeded
                | C::Invalid
                | C::Forbidden
                | C::Unauthenticated
                | C::RateLimited
                | C::Timeout
                | C::Unavailable
                | C::Unsupported
                | C::Damaged
                | C::Internal => {}
            }
            assert!(ErrorClass::TABLE.iter().any(|row| row.class == class), "{class:?} has no row");
        }
        assert_eq!(every.len(), ErrorClass::TABLE.len());
    }

    #[test]
    fn limits_are_classified_by_kind_not_by_text() {
        let limit = |what| Error::LimitExceeded { what, limit: 1, actual: 2 };
        assert_eq!(limit(Limit::EventBytes).class(), ErrorClass::PayloadTooLarge);
        assert_eq!(limit(Limit::BatchEvents).class(), ErrorClass::PayloadTooLarge);
        assert_eq!(limit(Limit::PageSize).class(), ErrorClass::LimitExceeded);
        assert_eq!(limit(Limit::JsonDepth).class(), ErrorClass::Invalid);
        for limit in Limit::ALL {
            assert_eq!(Limit::parse(limit.name()), Some(*limit));
        }
    }
}
