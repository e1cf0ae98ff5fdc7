//! The one error vocabulary callers branch on (R-C8). Backends map native failures onto
//! these kinds; messages are lowercase fragments and context travels in fields.

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
    #[error("session \"{id}\" is already owned by an active write handle")]
    AlreadyOwned { id: String },
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
    #[error("limit exceeded: {what} is {actual}, limit {limit}")]
    LimitExceeded { what: &'static str, limit: u64, actual: u64 },
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

    /// A stable, machine-readable code for the kind (used by the CLI and HTTP layers).
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
            Error::IdempotencyKeyReused { .. } => "idempotency_key_reused",
            Error::InvalidTransition { .. } => "invalid_transition",
            Error::Terminal { .. } => "terminal",
            Error::Busy { .. } => "busy",
            Error::LimitExceeded { .. } => "limit_exceeded",
            Error::Invalid { .. } => "invalid",
            Error::Forbidden { .. } => "forbidden",
            Error::FormatUnsupported { .. } => "format_unsupported",
            Error::Corrupt { .. } => "corrupt",
            Error::Io { .. } => "io",
            Error::Poisoned { .. } => "poisoned",
            Error::Unavailable { .. } => "unavailable",
            Error::Many(_) => "many",
        }
    }
}
