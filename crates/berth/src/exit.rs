//! The exit codes of the `berth` command, every one it can end with: success, a usage
//! error, the code of each error class (`berth_core::ErrorClass::TABLE`, the one
//! classification the HTTP API's errors share), and the findings of `fsck`.
//!
//! [`all`] derives the list from these constants and the class table, so a class given a
//! new exit code shows up in it; the tables of `README.md` and `docs/reference/cli.md` are checked
//! against it (`tests/docs_tables.rs`). A panic (Rust's 101) is a bug, not a documented
//! outcome: the CLI writes through fallible writers and reaches no `unwrap` on input.

use berth_core::ErrorClass;

/// The command did what it was asked (a closed stdout included: docs/reference/cli.md).
pub const SUCCESS: u8 = 0;

/// A flag or argument is missing or invalid: clap's own parsing errors, and the checks
/// the CLI makes itself (a missing `--tenant`, an id that does not parse, a command that
/// needs a data directory given another store).
pub const USAGE: u8 = 2;

/// The `code` of a usage error in `--json` error output; it has no HTTP counterpart.
pub const USAGE_CODE: &str = "usage";

/// `berth fsck`: torn tails found and not repaired (`--repair` truncates them).
pub const FSCK_TORN_TAILS: u8 = 10;

/// `berth fsck`: corrupt, unsupported or unreadable logs found (never modified).
pub const FSCK_DAMAGED: u8 = 11;

/// `berth audit verify`: the tenant's audit chain is broken. The exit code of damaged
/// data (`ErrorClass::Damaged`), which it is.
pub fn audit_broken() -> u8 {
    ErrorClass::Damaged.exit_code()
}

/// Every exit code of the CLI, ascending.
pub fn all() -> Vec<u8> {
    let mut codes: Vec<u8> = [SUCCESS, USAGE, FSCK_TORN_TAILS, FSCK_DAMAGED]
        .into_iter()
        .chain(ErrorClass::TABLE.iter().map(|row| row.exit_code))
        .collect();
    codes.sort_unstable();
    codes.dedup();
    codes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_codes_are_distinct_from_every_class_code() {
        for own in [SUCCESS, USAGE, FSCK_TORN_TAILS, FSCK_DAMAGED] {
            assert!(ErrorClass::TABLE.iter().all(|row| row.exit_code != own), "{own} is also a class's code");
        }
        assert!(ErrorClass::TABLE.iter().all(|row| row.code != USAGE_CODE));
    }
}
