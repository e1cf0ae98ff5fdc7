//! The `berth` command line: inspect, write, export, import, repair and clean up
//! sessions on a data directory, acting as a principal given by flags.
//!
//! Exit codes (also in `docs/reference/cli.md`):
//! 0 success · 1 other error · 2 usage error · 3 not found · 4 conflict (revision, seq,
//! already exists, busy, owned) · 5 refused (forbidden, terminal state, invalid input,
//! limit) · 6 damaged data (corrupt, unsupported format) · for `fsck`: 10 torn tails
//! found and not repaired, 11 corruption or unsupported logs found.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
