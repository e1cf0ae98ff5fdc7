//! Classifies SQLite failures into berth's portable error kinds (R-C8), so callers
//! branch on `Unavailable` or `Corrupt` without knowing SQLite. Messages name the
//! operation and a short reason, never SQL text or table names.

use berth_core::{Error, Location};
use rusqlite::ffi::ErrorCode;
use std::io::ErrorKind;

/// What a closure running on a connection can fail with: a berth error decided by our
/// own logic (passed through untouched) or a raw SQLite error (classified at the edge).
#[derive(Debug)]
pub(crate) enum Failure {
    Berth(Error),
    Sql(rusqlite::Error),
    /// Stored rows that contradict what berth writes (the location is added at the edge).
    Corrupt(String),
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure::Berth(error)
    }
}

impl From<rusqlite::Error> for Failure {
    fn from(error: rusqlite::Error) -> Failure {
        Failure::Sql(error)
    }
}

impl From<rusqlite::types::FromSqlError> for Failure {
    fn from(_: rusqlite::types::FromSqlError) -> Failure {
        Failure::Corrupt("a stored column has a type berth does not write there".into())
    }
}

impl Failure {
    pub(crate) fn into_error(self, operation: &'static str, artifact: &str) -> Error {
        match self {
            Failure::Berth(error) => error,
            Failure::Sql(error) => classify(&error, operation, artifact),
            Failure::Corrupt(reason) => {
                Error::Corrupt { reason, location: Location { artifact: artifact.to_owned(), offset: None, seq: None } }
            }
        }
    }
}

/// True when `error` is a uniqueness violation (a duplicate key on insert).
pub(crate) fn is_unique_violation(error: &rusqlite::Error) -> bool {
    matches!(
        error,
        rusqlite::Error::SqliteFailure(failure, _)
            if failure.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
                || failure.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
    )
}

/// Maps one SQLite error onto a berth error kind.
pub(crate) fn classify(error: &rusqlite::Error, operation: &'static str, artifact: &str) -> Error {
    let corrupt = |reason: &str| Error::Corrupt {
        reason: format!("catalog {reason} during {operation}"),
        location: Location { artifact: artifact.to_owned(), offset: None, seq: None },
    };
    let io = |kind: ErrorKind, message: &str| Error::Io { operation, kind, message: message.to_owned() };
    // The raw error (which may quote SQL) goes to the log only, never to callers.
    tracing::debug!(%error, operation, artifact, "catalog database error");
    let failure = match error {
        rusqlite::Error::SqliteFailure(failure, _) => failure,
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::IntegralValueOutOfRange(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::Utf8Error(..) => return corrupt("holds a value berth did not write"),
        _ => return io(ErrorKind::Other, "unexpected catalog database response"),
    };
    match failure.code {
        ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => Error::Unavailable {
            reason: format!(
                "catalog database stayed locked by another connection beyond the busy timeout during {operation}"
            ),
        },
        ErrorCode::OutOfMemory => Error::Unavailable { reason: format!("out of memory during {operation}") },
        ErrorCode::DatabaseCorrupt => corrupt("database file is damaged"),
        ErrorCode::NotADatabase => corrupt("file is not an SQLite database"),
        ErrorCode::DiskFull => io(ErrorKind::StorageFull, "disk full"),
        ErrorCode::SystemIoFailure => io(ErrorKind::Other, "disk i/o failure"),
        ErrorCode::CannotOpen => io(ErrorKind::NotFound, "cannot open the catalog database file"),
        ErrorCode::ReadOnly | ErrorCode::PermissionDenied => {
            io(ErrorKind::PermissionDenied, "catalog database is not writable")
        }
        ErrorCode::ConstraintViolation => {
            Error::invalid("catalog row", format!("constraint violated during {operation}"))
        }
        ErrorCode::TooBig => Error::invalid("catalog row", format!("too big during {operation}")),
        other => io(ErrorKind::Other, &format!("catalog database error ({other:?})")),
    }
}
