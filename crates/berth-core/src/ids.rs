//! Id newtypes built only through a strict parser (R-C1): 1–128 bytes of
//! `[A-Za-z0-9._~-]`, never `.` or `..`. An invalid id is a typed error before any
//! storage call, so ids are safe to use in file names and URLs.

use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::limits::ID_BYTES_MAX;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Checks the id grammar shared by every id kind.
pub fn check_id(what: &'static str, text: &str) -> Result<()> {
    if text.is_empty() {
        return Err(Error::invalid(what, "empty"));
    }
    if text.len() > ID_BYTES_MAX {
        return Err(Error::invalid(what, format!("{} bytes, at most {ID_BYTES_MAX}", text.len())));
    }
    if text == "." || text == ".." {
        return Err(Error::invalid(what, "\".\" and \"..\" are not ids"));
    }
    if let Some(bad) = text.bytes().find(|byte| !is_id_byte(*byte)) {
        return Err(Error::invalid(what, format!("byte 0x{bad:02x} is outside [A-Za-z0-9._~-]")));
    }
    Ok(())
}

fn is_id_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'~' | b'-')
}

macro_rules! id_type {
    ($(#[$meta:meta])* $name:ident, $what:literal) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Box<str>);

        impl $name {
            /// The only way to build this id: validates the grammar.
            pub fn parse(text: &str) -> Result<Self> {
                check_id($what, text)?;
                Ok(Self(text.into()))
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), &*self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = Error;
            fn from_str(text: &str) -> Result<Self> {
                Self::parse(text)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
                Self::parse(&text).map_err(serde::de::Error::custom)
            }
        }
    };
}

id_type!(
    /// A session's id, unique within its tenant.
    SessionId, "session id");
id_type!(
    /// A run's id, unique within its session.
    RunId, "run id");
id_type!(
    /// The top isolation boundary. No data ever crosses it.
    TenantId, "tenant id");
id_type!(
    /// An identity inside a tenant; owns sessions.
    UserId, "user id");
id_type!(
    /// Optional grouping inside a tenant.
    ProjectId, "project id");

impl SessionId {
    /// A fresh time-ordered id (UUIDv7) whose time part comes from `now`.
    pub fn generate(now: Timestamp) -> SessionId {
        SessionId(uuid_v7(now).into())
    }
}

impl RunId {
    /// A fresh time-ordered id (UUIDv7) whose time part comes from `now`.
    pub fn generate(now: Timestamp) -> RunId {
        RunId(uuid_v7(now).into())
    }
}

fn uuid_v7(now: Timestamp) -> String {
    let millis = now.as_millis();
    let timestamp = uuid::Timestamp::from_unix(uuid::NoContext, millis / 1000, ((millis % 1000) * 1_000_000) as u32);
    uuid::Uuid::new_v7(timestamp).to_string()
}

/// How a session is addressed in storage: ids are unique per tenant, so the pair is the
/// primary key everywhere (and the tenant always leads).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SessionKey {
    pub tenant: TenantId,
    pub id: SessionId,
}

impl SessionKey {
    pub fn new(tenant: TenantId, id: SessionId) -> SessionKey {
        SessionKey { tenant, id }
    }
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant, self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_whole_alphabet_and_the_length_limit() {
        assert!(SessionId::parse("aZ09._~-").is_ok());
        assert!(SessionId::parse(&"a".repeat(ID_BYTES_MAX)).is_ok());
        assert!(SessionId::parse("...").is_ok());
        assert!(SessionId::parse(".hidden").is_ok());
    }

    #[test]
    fn rejects_odd_ids_before_storage() {
        let long = "a".repeat(ID_BYTES_MAX + 1);
        for bad in ["", ".", "..", "../x", "a/b", "a\\b", "a\0b", "%2e%2e", "a b", "é", "ａ", "a\n", long.as_str()] {
            let error = SessionId::parse(bad).unwrap_err();
            assert_eq!(error.code(), "invalid", "{bad:?}");
        }
    }

    #[test]
    fn deserialization_validates() {
        assert!(serde_json::from_str::<TenantId>("\"ok\"").is_ok());
        assert!(serde_json::from_str::<TenantId>("\"../x\"").is_err());
    }

    #[test]
    fn generated_ids_are_valid_and_time_ordered() {
        let first = SessionId::generate(Timestamp(1_000));
        let second = SessionId::generate(Timestamp(2_000));
        assert!(SessionId::parse(first.as_str()).is_ok());
        assert!(first < second);
    }

    proptest::proptest! {
        #[test]
        fn parser_never_panics_and_round_trips(text in ".{0,200}") {
            if let Ok(id) = SessionId::parse(&text) {
                proptest::prop_assert_eq!(id.as_str(), text.as_str());
            }
        }
    }
}
