//! How a command fails: a usage error, or an error of the store or server.
//!
//! A flag or argument the CLI checks itself — a missing `--tenant`, an id that does not
//! parse, a command that needs a data directory given something else — is a mistake in
//! the command line, not a refusal of the store: it exits 2 (`berth::exit::USAGE`), as
//! clap's own parsing errors do, with a message naming the flag and the environment
//! variable that stands in for it. What a store or a server refuses (a session id taken,
//! a label too long, a role without the right) keeps its class's exit code, the same on
//! a data directory and through `--server`.

use berth_core::Error;
use std::fmt;

/// A mistake in the command line (exit 2).
#[derive(Debug)]
pub struct Usage {
    message: String,
}

impl Usage {
    pub fn new(message: impl Into<String>) -> Usage {
        Usage { message: message.into() }
    }
}

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// How a CLI command fails.
#[derive(Debug)]
pub enum Failure {
    Usage(Usage),
    Error(Error),
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure::Error(error)
    }
}

impl From<Usage> for Failure {
    fn from(usage: Usage) -> Failure {
        Failure::Usage(usage)
    }
}

impl Failure {
    /// The documented exit code (`berth::exit`).
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Usage(_) => berth::exit::USAGE,
            Failure::Error(error) => error.class().exit_code(),
        }
    }
}

/// The CLI's result: its failures are usage errors or store errors.
pub type Result<T, E = Failure> = std::result::Result<T, E>;

/// A flag (with the environment variable that stands in for it, if any) or a positional
/// argument, as usage errors name it.
#[derive(Clone, Copy, Debug)]
pub struct Arg {
    name: &'static str,
    env: Option<&'static str>,
}

impl Arg {
    /// A flag or positional argument with no environment variable (`--owner`, `ID`).
    pub const fn named(name: &'static str) -> Arg {
        Arg { name, env: None }
    }

    /// A flag that an environment variable stands in for (`--tenant`, `BERTH_TENANT`).
    pub const fn with_env(name: &'static str, env: &'static str) -> Arg {
        Arg { name, env: Some(env) }
    }

    /// `--tenant (or BERTH_TENANT)`.
    fn described(self) -> String {
        match self.env {
            Some(env) => format!("{} (or {env})", self.name),
            None => self.name.to_owned(),
        }
    }

    /// The argument is required here and was not given.
    pub fn missing(self, placeholder: &str) -> Usage {
        let set = self.env.map(|env| format!(" or set {env}")).unwrap_or_default();
        Usage::new(format!("{} is required: give {} {placeholder}{set}", self.name, self.name))
    }

    /// `value` is not a valid value of the argument, for `why` (the value quoted, unless
    /// `why` quotes it already).
    pub fn invalid(self, value: &str, why: impl fmt::Display) -> Usage {
        let why = why.to_string();
        let quoted = format!("{value:?}");
        if why.contains(&quoted) {
            Usage::new(format!("invalid {}: {why}", self.described()))
        } else {
            Usage::new(format!("invalid {} {quoted}: {why}", self.described()))
        }
    }

    /// `parse(value)`, a refusal of it the usage error naming this argument.
    pub fn parse<T>(self, value: &str, parse: impl FnOnce(&str) -> berth_core::Result<T>) -> Result<T, Usage> {
        parse(value).map_err(|error| self.invalid(value, reason(&error)))
    }
}

/// What a parser's error says about the value, without repeating "invalid …".
fn reason(error: &Error) -> String {
    match error {
        Error::Invalid { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::TenantId;

    #[test]
    fn messages_name_the_flag_and_its_environment_variable() {
        let tenant = Arg::with_env("--tenant", "BERTH_TENANT");
        assert_eq!(
            tenant.missing("TENANT").to_string(),
            "--tenant is required: give --tenant TENANT or set BERTH_TENANT"
        );
        let refused = tenant.parse("a b", TenantId::parse).unwrap_err().to_string();
        assert!(refused.starts_with(r#"invalid --tenant (or BERTH_TENANT) "a b": byte 0x20"#), "{refused}");
        assert_eq!(Arg::named("--owner").missing("USER").to_string(), "--owner is required: give --owner USER");
        let data = Arg::with_env("--data", "BERTH_DATA").invalid("x://y", r#"unknown scheme in "x://y""#);
        assert_eq!(data.to_string(), r#"invalid --data (or BERTH_DATA): unknown scheme in "x://y""#);
    }

    #[test]
    fn a_usage_error_exits_2_and_a_store_error_with_its_class() {
        assert_eq!(Failure::from(Usage::new("x")).exit_code(), 2);
        assert_eq!(Failure::from(Error::invalid("title", "too long")).exit_code(), 5);
        assert_eq!(Failure::from(Error::session_not_found("s")).exit_code(), 3);
    }
}
