//! Caller idempotency (R-S14): the key an append may carry, the mark every event of a
//! keyed batch carries in its envelope (so the key is exactly as durable as the events),
//! and the index entry the catalog keeps for lookups.

use crate::error::{Error, Result};
use crate::limits::IDEMPOTENCY_KEY_BYTES_MAX;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A caller-chosen key: 1 to `IDEMPOTENCY_KEY_BYTES_MAX` bytes of `[A-Za-z0-9]` and
/// `- _ . : + / =` (UUIDs, ULIDs, base64 and base64url digests all fit).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IdempotencyKey(Box<str>);

fn is_key_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b':' | b'+' | b'/' | b'=')
}

impl IdempotencyKey {
    pub fn parse(text: &str) -> Result<IdempotencyKey> {
        if text.len() > IDEMPOTENCY_KEY_BYTES_MAX {
            return Err(Error::LimitExceeded {
                what: crate::limits::Limit::IdempotencyKeyBytes,
                limit: IDEMPOTENCY_KEY_BYTES_MAX as u64,
                actual: text.len() as u64,
            });
        }
        if text.is_empty() || !text.bytes().all(is_key_byte) {
            return Err(Error::invalid("idempotency key", format!("{text:?} is not 1+ bytes of [A-Za-z0-9-_.:+/=]")));
        }
        Ok(IdempotencyKey(text.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

impl Serialize for IdempotencyKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for IdempotencyKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        IdempotencyKey::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// The envelope field `"idempotency"` of every event of a keyed batch. The first event
/// also carries the batch's length and content digest (`{"key":…,"events":N,"digest":…}`);
/// the others carry the key alone, so any stored event tells whether it belongs to a
/// keyed batch (a keyless append is never a duplicate of one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdempotencyMark {
    pub key: IdempotencyKey,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

impl IdempotencyMark {
    /// The keyed batch this mark opens (`None` for a batch's later events).
    pub fn batch(&self, first_seq: u64) -> Option<KeyedBatch> {
        match (self.events, &self.digest) {
            (Some(events), Some(digest)) => {
                Some(KeyedBatch { key: self.key.clone(), first_seq, events, digest: digest.clone() })
            }
            _ => None,
        }
    }

    /// The envelope size it adds, for `Event::size_estimate_bytes`.
    pub fn size_estimate_bytes(&self) -> usize {
        self.key.as_str().len() + self.digest.as_ref().map_or(0, String::len) + 48
    }
}

/// One keyed batch as stored: where it starts, how long it is, and its content digest.
/// What a retry with the same key is compared with, and what it is answered with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyedBatch {
    pub key: IdempotencyKey,
    pub first_seq: u64,
    pub events: u64,
    pub digest: String,
}

impl KeyedBatch {
    /// The marks its events carry, in order (the first one opens the batch).
    pub fn marks(&self) -> impl Iterator<Item = IdempotencyMark> + '_ {
        (0..self.events).map(move |index| IdempotencyMark {
            key: self.key.clone(),
            events: (index == 0).then_some(self.events),
            digest: (index == 0).then(|| self.digest.clone()),
        })
    }

    pub fn next_seq(&self) -> u64 {
        self.first_seq + self.events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_grammar_and_limit() {
        for good in ["a", "0f8e6b1c-3d2a-4e5f-9a7b-1c2d3e4f5a6b", "01HZX3:pop/7", "aGVsbG8=", "a_b.c+d"] {
            assert!(IdempotencyKey::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "a b", "é", "a\"b", "a\\b", "a\nb", "{}"] {
            assert!(matches!(IdempotencyKey::parse(bad), Err(Error::Invalid { .. })), "{bad:?}");
        }
        assert!(IdempotencyKey::parse(&"k".repeat(IDEMPOTENCY_KEY_BYTES_MAX)).is_ok());
        let long = IdempotencyKey::parse(&"k".repeat(IDEMPOTENCY_KEY_BYTES_MAX + 1));
        assert!(matches!(long, Err(Error::LimitExceeded { .. })));
        assert!(serde_json::from_str::<IdempotencyKey>("\"a b\"").is_err());
    }

    #[test]
    fn only_the_first_mark_opens_the_batch() {
        let batch =
            KeyedBatch { key: IdempotencyKey::parse("k").unwrap(), first_seq: 4, events: 2, digest: "d".into() };
        let marks: Vec<IdempotencyMark> = batch.marks().collect();
        assert_eq!(serde_json::to_string(&marks[0]).unwrap(), r#"{"key":"k","events":2,"digest":"d"}"#);
        assert_eq!(serde_json::to_string(&marks[1]).unwrap(), r#"{"key":"k"}"#);
        assert_eq!(marks[0].batch(4), Some(batch));
        assert_eq!(marks[1].batch(5), None);
    }
}
