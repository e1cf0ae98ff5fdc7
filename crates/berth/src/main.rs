//! The `berth` command line: inspect, write, export, import, repair and clean up
//! sessions on a data directory, acting as a principal given by flags.
//!
//! Exit codes: `berth::exit` lists every one (the README's and `docs/reference/cli.md`'s tables
//! are checked against it).

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
