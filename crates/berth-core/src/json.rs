//! Lossless, strict JSON: no duplicate keys, bounded depth, no trailing bytes; and one
//! canonical text form (compact, object keys sorted by bytes) so every backend stores and
//! exports the same bytes for the same value.
//!
//! Numbers are what `serde_json` holds without `arbitrary_precision`: 64-bit integers are
//! exact, everything else is an IEEE-754 double printed in shortest round-trip form.

use crate::error::{Error, Result};
use crate::limits::JSON_DEPTH_MAX;
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Number, Value};
use std::fmt;

/// Parses `text` strictly into a `Value`.
pub fn parse_strict(text: &[u8]) -> Result<Value> {
    let mut deserializer = serde_json::Deserializer::from_slice(text);
    // Our own visitor bounds the depth (before recursing), so serde_json's fixed limit
    // (127) must not cut in first.
    deserializer.disable_recursion_limit();
    let value = StrictValue { depth: 0 }
        .deserialize(&mut deserializer)
        .map_err(|error| Error::invalid("json", error.to_string()))?;
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

/// The canonical text of `value`: compact, keys sorted by their UTF-8 bytes.
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

/// A JSON value held as its canonical text. Cheap to store and compare; equality is
/// value equality because the text is canonical.
#[derive(Clone)]
pub struct JsonText {
    raw: Box<RawValue>,
    /// Built by a constructor that guarantees canonical text within the depth limit,
    /// so the store need not re-check it on append (a pure cache of a fact about `raw`).
    verified: bool,
}

impl JsonText {
    /// Canonicalizes a value built in Rust.
    pub fn from_value(value: &Value) -> Result<JsonText> {
        check_depth(value)?;
        Ok(JsonText::from_canonical(canonical_string(value), true))
    }

    /// Parses untrusted text strictly and canonicalizes it.
    pub fn parse(text: &str) -> Result<JsonText> {
        JsonText::from_value(&parse_strict(text.as_bytes())?)
    }

    /// Wraps text that is already canonical (e.g. read back from a checksummed record
    /// this crate's encoder wrote). Only syntax is checked, not canonical form.
    pub fn from_trusted_raw(raw: Box<RawValue>) -> JsonText {
        JsonText { raw, verified: false }
    }

    fn from_canonical(text: String, verified: bool) -> JsonText {
        // The canonical writer always produces valid JSON.
        JsonText { raw: RawValue::from_string(text).unwrap_or_else(|_| null_raw()), verified }
    }

    pub fn null() -> JsonText {
        JsonText { raw: null_raw(), verified: true }
    }

    /// Was this built canonical and within the depth limit (`from_value`, `parse`,
    /// strict deserialization, or `From<&Value>` of a value within the limit)? Text from
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

    /// Parses the text back into a `Value`.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.raw.get()).unwrap_or(Value::Null)
    }

    pub fn len_bytes(&self) -> usize {
        self.raw.get().len()
    }
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
    /// Canonicalizes; values deeper than the limit become an error at validation time,
    /// so this conversion keeps them as they are (callers validate events on append).
    fn from(value: &Value) -> JsonText {
        JsonText::from_canonical(canonical_string(value), check_depth(value).is_ok())
    }
}

impl Serialize for JsonText {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for JsonText {
    /// Strict: duplicate keys and excessive depth are refused; the result is canonical.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = StrictValue { depth: 0 }.deserialize(deserializer)?;
        Ok(JsonText::from_canonical(canonical_string(&value), true))
    }
}

/// A `DeserializeSeed` that builds a `Value` while refusing duplicate keys and nesting
/// deeper than `JSON_DEPTH_MAX`.
#[derive(Clone, Copy)]
pub struct StrictValue {
    depth: usize,
}

impl StrictValue {
    pub fn new() -> StrictValue {
        StrictValue { depth: 0 }
    }

    fn nested<E: serde::de::Error>(self) -> Result<StrictValue, E> {
        if self.depth + 1 > JSON_DEPTH_MAX {
            return Err(E::custom(format!("json nested deeper than {JSON_DEPTH_MAX}")));
        }
        Ok(StrictValue { depth: self.depth + 1 })
    }
}

impl Default for StrictValue {
    fn default() -> Self {
        StrictValue::new()
    }
}

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }
    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }
    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }
    fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<Value, E> {
        Number::from_f64(value).map(Value::Number).ok_or_else(|| E::custom("non-finite number"))
    }
    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }
    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let inner = self.nested()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(inner)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let inner = self.nested()?;
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!("duplicate key {key:?}")));
            }
            let value = map.next_value_seed(inner)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_form_sorts_keys_and_is_compact() {
        let text = JsonText::parse(r#"{ "b": 1, "a": [true, null, "x\u0041"], "c": {"z":1,"y":2} }"#).unwrap();
        assert_eq!(text.as_str(), r#"{"a":[true,null,"xA"],"b":1,"c":{"y":2,"z":1}}"#);
    }

    #[test]
    fn refuses_duplicate_keys_trailing_bytes_and_depth() {
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

    #[test]
    fn canonical_text_round_trips() {
        let value: Value = serde_json::json!({"n": 1.5, "big": u64::MAX, "neg": -3, "s": "é\n"});
        let text = JsonText::from_value(&value).unwrap();
        assert_eq!(text.to_value(), value);
        assert_eq!(JsonText::parse(text.as_str()).unwrap(), text);
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
