//! Integers on the wire: every count, seq, revision, time and duration is a JSON Schema
//! `integer` with `format: int64`, so it is at most 2^63 − 1 (what PostgreSQL's `bigint`
//! stores and what a client can hold as a signed 64-bit number). A body's integer may be
//! written with a zero fraction (`3.0` is the integer 3 in JSON Schema); anything else is a
//! decode error (400). Used with `#[serde(deserialize_with = …)]`.

use serde::de::{Deserializer, Error as _};
use serde::Deserialize;

/// The largest integer on the wire.
pub const WIRE_INT_MAX: u64 = i64::MAX as u64;

fn integral<E: serde::de::Error>(number: &serde_json::Number) -> Result<u64, E> {
    let value = match (number.as_u64(), number.as_f64()) {
        (Some(value), _) => Some(value),
        (None, Some(float)) if float.fract() == 0.0 && (0.0..=WIRE_INT_MAX as f64).contains(&float) => {
            Some(float as u64)
        }
        _ => None,
    };
    match value {
        Some(value) if value <= WIRE_INT_MAX => Ok(value),
        _ => Err(E::custom(format!("{number} is not an integer in 0..={WIRE_INT_MAX}"))),
    }
}

/// A body integer.
pub fn u64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    integral(&serde_json::Number::deserialize(deserializer)?)
}

/// An optional body integer (`null` or absent: `None`).
pub fn option_u64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    Option::<serde_json::Number>::deserialize(deserializer)?.map(|number| integral(&number)).transpose()
}

/// A body integer narrowed to `u32` (depths, counts of runs).
pub fn u32<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    let value = u64(deserializer)?;
    u32::try_from(value).map_err(|_| D::Error::custom(format!("{value} is larger than {}", u32::MAX)))
}

/// An optional event time.
pub fn option_timestamp<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<berth_core::Timestamp>, D::Error> {
    option_u64(deserializer).map(|value| value.map(berth_core::Timestamp))
}

/// An optional query-string integer (query values arrive as text).
pub fn query_u64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    let Some(text) = Option::<String>::deserialize(deserializer)? else {
        return Ok(None);
    };
    match text.parse::<u64>() {
        Ok(value) if value <= WIRE_INT_MAX => Ok(Some(value)),
        _ => Err(D::Error::custom(format!("{text:?} is not an integer in 0..={WIRE_INT_MAX}"))),
    }
}

/// A required query-string integer (absent: the query does not decode, 400).
pub fn query_u64_required<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    query_u64(deserializer)?.ok_or_else(|| D::Error::custom("a value is required"))
}

/// An optional query-string integer narrowed to `usize` (page sizes).
pub fn query_usize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<usize>, D::Error> {
    query_u64(deserializer)?
        .map(|value| usize::try_from(value).map_err(|_| D::Error::custom(format!("{value} is too large"))))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Body {
        #[serde(deserialize_with = "u64")]
        n: u64,
    }

    fn decode(text: &str) -> Result<u64, serde_json::Error> {
        serde_json::from_str::<Body>(text).map(|body| body.n)
    }

    #[test]
    fn integers_are_int64_and_integral_floats_are_integers() {
        assert_eq!(decode(r#"{"n": 7}"#).unwrap(), 7);
        assert_eq!(decode(r#"{"n": 7.0}"#).unwrap(), 7);
        assert_eq!(decode(r#"{"n": 9223372036854775807}"#).unwrap(), WIRE_INT_MAX);
        assert!(decode(r#"{"n": 9223372036854775808}"#).is_err());
        assert!(decode(r#"{"n": 7.5}"#).is_err());
        assert!(decode(r#"{"n": -1}"#).is_err());
        assert!(decode(r#"{"n": 1e300}"#).is_err());
        assert!(decode(r#"{"n": "7"}"#).is_err());
    }
}
