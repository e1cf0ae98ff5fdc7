//! Strict JSON, kept exact (R-C9). Submitted text is checked strictly (UTF-8, grammar,
//! no duplicate keys, bounded depth, no lone surrogates) and stored with insignificant
//! whitespace removed and every other byte kept: key order, number lexemes, string
//! escapes (`minify`). Values built in Rust keep their insertion order (serde_json's
//! `preserve_order`). `canonical_string` is the one canonical form (compact, keys
//! sorted), for the envelopes and hashes that need one (export header line, audit chain);
//! event data is never canonicalized.

mod minify;

use crate::error::{Error, Result};
use crate::limits::JSON_DEPTH_MAX;
pub use minify::minify_strict;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;
use std::fmt;

/// Parses `text` strictly into a `Value`. Numbers are what `serde_json` holds: 64-bit
/// integers exactly, others as doubles (a number out of the double range is refused);
/// callers that must keep the text use `JsonText`.
pub fn parse_strict(text: &[u8]) -> Result<Value> {
    from_strict_slice(text)
}

/// Checks `bytes` strictly (`minify_strict`), then deserializes them as they are, so
/// `JsonText` fields inside keep their exact text (a detour through `Value` would not).
pub fn from_strict_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    minify_strict(bytes)?;
    deserialize_checked(bytes)
}

/// Deserializes bytes that `minify_strict` accepted. Their depth is within the limit, so
/// serde_json's recursion is bounded by it and its own fixed limit (127) must not cut in
/// first.
pub fn deserialize_checked<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    deserializer.disable_recursion_limit();
    let value = T::deserialize(&mut deserializer).map_err(|error| Error::invalid("json", error.to_string()))?;
    deserializer.end().map_err(|error| Error::invalid("json", error.to_string()))?;
    Ok(value)
}

/// Checks an already-built `Value` against the depth limit (values built in Rust cannot
/// hold duplicate keys or NaN, so depth is the only thing left to check).
pub fn check_depth(value: &Value) -> Result<()> {
    fn depth_of(value: &Value, depth: usize) -> Result<()> {
        if depth > JSON_DEPTH_MAX {
            return Err(Error::LimitExceeded {
                what: crate::limits::Limit::JsonDepth,
                limit: JSON_DEPTH_MAX as u64,
                actual: depth as u64,
            });
        }
        match value {
            Value::Array(items) => items.iter().try_for_each(|item| depth_of(item, depth + 1)),
            Value::Object(map) => map.values().try_for_each(|item| depth_of(item, depth + 1)),
            _ => Ok(()),
        }
    }
    depth_of(value, 0)
}

/// The canonical text of `value`: compact, keys sorted by their UTF-8 bytes. For
/// envelopes and hashes only; event data keeps its own text (`JsonText`).
pub fn canonical_string(value: &Value) -> String {
    let mut out = String::with_capacity(64);
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(number) => out.push_str(&number.to_string()),
        Value::String(text) => write_string(text, out),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            out.push('{');
            for (index, key) in keys.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
    }
}

fn write_string(text: &str, out: &mut String) {
    // serde_json's escaping is the canonical escaping; it cannot fail for a str.
    out.push_str(&serde_json::to_string(text).unwrap_or_default());
}

/// A JSON value held as its exact text: what was submitted, strictly checked, with
/// insignificant whitespace removed (R-C9). Equality is *byte* equality of that text —
/// `{"a":1,"b":2}` and `{"b":2,"a":1}`, or `1.0` and `1`, are different data — which is
/// what append retries compare and what every backend stores and returns.
#[derive(Clone)]
pub struct JsonText {
    raw: Box<RawValue>,
    /// Built by a constructor that guarantees strict, minimal text within the depth
    /// limit, so the store need not re-check it on append (a pure cache of a fact about
    /// `raw`).
    verified: bool,
}

impl JsonText {
    /// The compact text of a value built in Rust, keys in the map's (insertion) order.
    pub fn from_value(value: &Value) -> Result<JsonText> {
        check_depth(value)?;
        Ok(JsonText::from_minimal(compact_string(value), true))
    }

    /// Checks untrusted text strictly and keeps it exactly, minus insignificant
    /// whitespace (`minify_strict`).
    pub fn parse(text: &str) -> Result<JsonText> {
        Ok(JsonText::from_minimal(minify_strict(text.as_bytes())?, true))
    }

    /// Wraps text read back from storage (e.g. a checksummed record this crate's encoder
    /// wrote). Only syntax is checked, not strictness or minimal form.
    pub fn from_trusted_raw(raw: Box<RawValue>) -> JsonText {
        JsonText { raw, verified: false }
    }

    fn from_minimal(text: String, verified: bool) -> JsonText {
        // Both producers (`minify_strict`, serde_json's writer) emit valid JSON.
        JsonText { raw: RawValue::from_string(text).unwrap_or_else(|_| null_raw()), verified }
    }

    pub fn null() -> JsonText {
        JsonText { raw: null_raw(), verified: true }
    }

    /// Was this built strict, minimal and within the depth limit (`from_value`, `parse`,
    /// deserialization, or `From<&Value>` of a value within the limit)? Text from
    /// `from_trusted_raw` is not: whoever stores it must check it.
    pub fn is_verified(&self) -> bool {
        self.verified
    }

    pub fn as_str(&self) -> &str {
        self.raw.get()
    }

    pub fn as_raw(&self) -> &RawValue {
        &self.raw
    }

    /// Parses the text back into a `Value` (numbers as serde_json holds them; `Null` if
    /// serde_json cannot hold the text, e.g. a number beyond the double range).
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.raw.get()).unwrap_or(Value::Null)
    }

    pub fn len_bytes(&self) -> usize {
        self.raw.get().len()
    }
}

/// Compact text in the map's order; serializing a `Value` into memory cannot fail.
fn compact_string(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

fn null_raw() -> Box<RawValue> {
    RawValue::from_string("null".to_owned()).expect("null is json")
}

impl PartialEq for JsonText {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}
impl Eq for JsonText {}

impl fmt::Debug for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&Value> for JsonText {
    /// Compact text in the map's order; values deeper than the limit become an error at
    /// validation time, so this conversion keeps them as they are (callers validate
    /// events on append).
    fn from(value: &Value) -> JsonText {
        JsonText::from_minimal(compact_string(value), check_depth(value).is_ok())
    }
}

impl Serialize for JsonText {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for JsonText {
    /// Takes the value's source text (serde_json's `RawValue`: exact when deserializing
    /// from text, re-printed when from a `Value`) and checks and minifies it.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        let minimal = minify_strict(raw.get().as_bytes()).map_err(serde::de::Error::custom)?;
        // Minifying only removes bytes: text it left as long as it was is unchanged, and
        // the `RawValue` serde_json just checked is kept instead of parsing it again.
        if minimal.len() == raw.get().len() {
            return Ok(JsonText { raw, verified: true });
        }
        Ok(JsonText::from_minimal(minimal, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_keeps_the_submitted_text_minus_whitespace() {
        let submitted = "{ \"b\": 1, \"a\": [1.0, 1e2, 123456789012345678901234567890], \"s\": \"\\u00e9\\/\" }";
        let text = JsonText::parse(submitted).unwrap();
        assert_eq!(text.as_str(), r#"{"b":1,"a":[1.0,1e2,123456789012345678901234567890],"s":"\u00e9\/"}"#);
        assert_ne!(text, JsonText::parse(r#"{"a":[1.0,1e2,123456789012345678901234567890],"b":1,"s":"é/"}"#).unwrap());
        assert_eq!(text, JsonText::parse(text.as_str()).unwrap(), "equality is byte equality of the text");
    }

    #[test]
    fn deserializing_keeps_the_text_and_stays_strict() {
        let text: JsonText = serde_json::from_str(r#" {"z": 1e400, "a": -0} "#).unwrap();
        assert_eq!(text.as_str(), r#"{"z":1e400,"a":-0}"#);
        assert!(serde_json::from_str::<JsonText>(r#"{"a":1,"\u0061":2}"#).is_err());
        assert!(serde_json::from_str::<JsonText>(r#""\ud800""#).is_err());
        // Text that is minimal already is kept as serde_json read it, and is as strict.
        let compact: JsonText = serde_json::from_str(r#"{"a":[1,{"b":"c d"}],"e":"\n"}"#).unwrap();
        assert_eq!(compact.as_str(), r#"{"a":[1,{"b":"c d"}],"e":"\n"}"#);
        assert!(compact.is_verified());
        let fields: Vec<JsonText> = serde_json::from_str(r#"[{"x":1}, {"y": 2}, 3]"#).unwrap();
        let texts: Vec<&str> = fields.iter().map(JsonText::as_str).collect();
        assert_eq!(texts, [r#"{"x":1}"#, r#"{"y":2}"#, "3"]);
        assert!(serde_json::from_str::<JsonText>(r#"{"a":1,"a":1}"#).is_err(), "compact and duplicate");
        assert!(serde_json::from_str::<JsonText>(&format!("[{}]", "[".repeat(200) + &"]".repeat(200))).is_err());
    }

    #[test]
    fn values_built_in_rust_keep_insertion_order() {
        let value: Value = serde_json::json!({"zeta": 1, "alpha": {"y": 2, "x": [1.5, u64::MAX]}});
        let text = JsonText::from_value(&value).unwrap();
        assert_eq!(text.as_str(), r#"{"zeta":1,"alpha":{"y":2,"x":[1.5,18446744073709551615]}}"#);
        assert_eq!(JsonText::from(&value), text);
        assert_eq!(text.to_value(), value);
        assert_eq!(canonical_string(&value), r#"{"alpha":{"x":[1.5,18446744073709551615],"y":2},"zeta":1}"#);
    }

    #[test]
    fn parse_strict_refuses_duplicate_keys_trailing_bytes_and_depth() {
        assert!(parse_strict(br#"{"a":1,"a":2}"#).is_err());
        assert!(parse_strict(br#"{"a":{"b":1,"b":1}}"#).is_err());
        assert!(parse_strict(b"1 2").is_err());
        assert!(parse_strict(b"NaN").is_err());
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert!(parse_strict(deep.as_bytes()).is_err());
        let ok_depth = "[".repeat(JSON_DEPTH_MAX) + &"]".repeat(JSON_DEPTH_MAX);
        assert!(parse_strict(ok_depth.as_bytes()).is_ok());
        let too_deep = "[".repeat(JSON_DEPTH_MAX + 1) + &"]".repeat(JSON_DEPTH_MAX + 1);
        assert!(parse_strict(too_deep.as_bytes()).is_err());
    }
}

#[cfg(test)]
mod verified_tests {
    use super::*;

    #[test]
    fn only_checked_constructors_are_verified() {
        assert!(JsonText::parse(r#"{"a":1}"#).unwrap().is_verified());
        assert!(JsonText::from_value(&serde_json::json!([1])).unwrap().is_verified());
        assert!(JsonText::null().is_verified());
        assert!(serde_json::from_str::<JsonText>(r#"{"b":2,"a":1}"#).unwrap().is_verified());
        let raw = RawValue::from_string(r#"{"b":2,"a":1}"#.to_owned()).unwrap();
        assert!(!JsonText::from_trusted_raw(raw).is_verified(), "raw text is never trusted on append");
        let mut deep = Value::Null;
        for _ in 0..JSON_DEPTH_MAX + 1 {
            deep = Value::Array(vec![deep]);
        }
        assert!(!JsonText::from(&deep).is_verified(), "From<&Value> is verified only within the depth limit");
        assert!(JsonText::from(&serde_json::json!({"x": [1]})).is_verified());
    }
}
