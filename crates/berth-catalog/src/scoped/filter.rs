//! Search filters on top-level value fields, with one semantics for every backend.
//!
//! - A condition names a top-level field of the item's value (an object) and compares
//!   it with an operand: `eq`, `ne`, `gt`, `gte`, `lt`, `lte`, or `in` (a list of
//!   operands, any of which may be `eq`).
//! - **Numbers compare by exact decimal value**, from their text: `1`, `1.0` and `1e0`
//!   are equal, and `18446744073709551617` is greater than `18446744073709551616` (no
//!   conversion to a double, so no silent precision loss).
//! - **Strings** compare by Unicode code point (byte order of their UTF-8).
//! - `true`/`false`, `null`, arrays and objects support `eq`/`ne`/`in` only, by structural
//!   equality (object keys in any order, numbers inside by exact value).
//! - **Mixed types never match an ordering** (`gt` of a string and a number is false)
//!   and are never equal (`ne` across types is true).
//! - **A field the item does not have matches no condition**, `ne` included; a value
//!   that is not an object has no fields. A filter on a field no item has therefore
//!   returns an empty page, not an error.
//! - Conditions are ANDed.

use berth_core::limits::{Limit, MEMORY_FILTER_CONDITIONS_MAX, MEMORY_FILTER_IN_VALUES_MAX};
use berth_core::{Error, JsonText, Result};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::cmp::Ordering;
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FilterOp {
    Eq,
    Ne,
    Gt,
    Gte,
    Lt,
    Lte,
    In,
}

impl FilterOp {
    pub const ALL: &'static [FilterOp] =
        &[FilterOp::Eq, FilterOp::Ne, FilterOp::Gt, FilterOp::Gte, FilterOp::Lt, FilterOp::Lte, FilterOp::In];

    pub fn name(self) -> &'static str {
        match self {
            FilterOp::Eq => "eq",
            FilterOp::Ne => "ne",
            FilterOp::Gt => "gt",
            FilterOp::Gte => "gte",
            FilterOp::Lt => "lt",
            FilterOp::Lte => "lte",
            FilterOp::In => "in",
        }
    }

    pub fn parse(name: &str) -> Result<FilterOp> {
        FilterOp::ALL.iter().copied().find(|op| op.name() == name).ok_or_else(|| {
            Error::invalid("filter", format!("unknown operator {name:?} (eq, ne, gt, gte, lt, lte, in)"))
        })
    }
}

/// One condition: `field op operand`. The operand is JSON text (for `in`, an array).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    pub field: String,
    pub op: FilterOp,
    pub operand: JsonText,
}

/// Conditions ANDed. Empty matches every item.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    pub conditions: Vec<Condition>,
}

impl Filter {
    /// Builds a filter, checking every condition (`in` needs an array; orderings need
    /// a number or a string operand).
    pub fn new(conditions: Vec<Condition>) -> Result<Filter> {
        if conditions.len() > MEMORY_FILTER_CONDITIONS_MAX {
            return Err(Error::LimitExceeded {
                what: Limit::MemoryFilterConditions,
                limit: MEMORY_FILTER_CONDITIONS_MAX as u64,
                actual: conditions.len() as u64,
            });
        }
        for condition in &conditions {
            if condition.field.is_empty() {
                return Err(Error::invalid("filter", "an empty field name"));
            }
            let operand = Scalar::of(condition.operand.as_raw());
            match condition.op {
                FilterOp::In => match &operand {
                    Scalar::Array(values) if values.len() > MEMORY_FILTER_IN_VALUES_MAX => {
                        return Err(Error::LimitExceeded {
                            what: Limit::MemoryFilterInValues,
                            limit: MEMORY_FILTER_IN_VALUES_MAX as u64,
                            actual: values.len() as u64,
                        })
                    }
                    Scalar::Array(_) => {}
                    _ => {
                        return Err(Error::invalid(
                            "filter",
                            format!("{}: `in` needs an array of values", condition.field),
                        ))
                    }
                },
                FilterOp::Gt | FilterOp::Gte | FilterOp::Lt | FilterOp::Lte
                    if !matches!(operand, Scalar::Number(_) | Scalar::String(_)) =>
                {
                    return Err(Error::invalid(
                        "filter",
                        format!("{}: {} compares numbers or strings", condition.field, condition.op.name()),
                    ))
                }
                _ => {}
            }
        }
        Ok(Filter { conditions })
    }

    pub fn is_empty(&self) -> bool {
        self.conditions.is_empty()
    }

    /// Does an item with this value match? The reference semantics.
    pub fn matches(&self, value: &JsonText) -> bool {
        if self.conditions.is_empty() {
            return true;
        }
        let Ok(fields) = serde_json::from_str::<BTreeMap<String, &RawValue>>(value.as_str()) else {
            return false; // not an object: no fields
        };
        self.conditions.iter().all(|condition| match fields.get(&condition.field) {
            None => false,
            Some(raw) => condition_holds(condition, raw),
        })
    }
}

fn condition_holds(condition: &Condition, field: &RawValue) -> bool {
    let value = Scalar::of(field);
    let operand = Scalar::of(condition.operand.as_raw());
    match condition.op {
        FilterOp::Eq => value.equals(&operand),
        FilterOp::Ne => !value.equals(&operand),
        FilterOp::In => match operand {
            Scalar::Array(items) => items.iter().any(|item| value.equals(&Scalar::of(item))),
            _ => false,
        },
        op => match value.order(&operand) {
            None => false,
            Some(ordering) => match op {
                FilterOp::Gt => ordering == Ordering::Greater,
                FilterOp::Gte => ordering != Ordering::Less,
                FilterOp::Lt => ordering == Ordering::Less,
                FilterOp::Lte => ordering != Ordering::Greater,
                _ => unreachable!("handled above"),
            },
        },
    }
}

/// A JSON value as a filter sees it.
#[derive(Debug)]
enum Scalar<'a> {
    Null,
    Bool(bool),
    Number(Decimal),
    String(String),
    Array(Vec<&'a RawValue>),
    Object(BTreeMap<String, &'a RawValue>),
    /// Unreadable (never for stored, validated values).
    Invalid,
}

impl<'a> Scalar<'a> {
    fn of(raw: &'a RawValue) -> Scalar<'a> {
        let text = raw.get().trim();
        match text.as_bytes().first() {
            Some(b'n') => Scalar::Null,
            Some(b't') => Scalar::Bool(true),
            Some(b'f') => Scalar::Bool(false),
            Some(b'"') => serde_json::from_str(text).map(Scalar::String).unwrap_or(Scalar::Invalid),
            Some(b'[') => serde_json::from_str(text).map(Scalar::Array).unwrap_or(Scalar::Invalid),
            Some(b'{') => serde_json::from_str(text).map(Scalar::Object).unwrap_or(Scalar::Invalid),
            Some(_) => Decimal::parse(text).map(Scalar::Number).unwrap_or(Scalar::Invalid),
            None => Scalar::Invalid,
        }
    }

    fn equals(&self, other: &Scalar<'_>) -> bool {
        match (self, other) {
            (Scalar::Null, Scalar::Null) => true,
            (Scalar::Bool(a), Scalar::Bool(b)) => a == b,
            (Scalar::Number(a), Scalar::Number(b)) => a.cmp(b) == Ordering::Equal,
            (Scalar::String(a), Scalar::String(b)) => a == b,
            (Scalar::Array(a), Scalar::Array(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Scalar::of(x).equals(&Scalar::of(y)))
            }
            (Scalar::Object(a), Scalar::Object(b)) => {
                a.len() == b.len()
                    && a.iter().all(|(key, x)| b.get(key).is_some_and(|y| Scalar::of(x).equals(&Scalar::of(y))))
            }
            _ => false,
        }
    }

    fn order(&self, other: &Scalar<'_>) -> Option<Ordering> {
        match (self, other) {
            (Scalar::Number(a), Scalar::Number(b)) => Some(a.cmp(b)),
            (Scalar::String(a), Scalar::String(b)) => Some(a.as_str().cmp(b.as_str())),
            _ => None,
        }
    }
}

/// An exact decimal read from JSON number text: `sign × 0.digits × 10^exponent`, with
/// no leading or trailing zero digits (zero has no digits and is never negative).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exponent: i64,
}

impl Decimal {
    /// Parses JSON number text (`-?int(.frac)?([eE][+-]?exp)?`); `None` if it is not one.
    pub fn parse(text: &str) -> Option<Decimal> {
        let (negative, rest) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(at) => (&rest[..at], rest[at + 1..].parse::<i64>().ok()?),
            None => (rest, 0),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if mantissa.contains('.') && frac.is_empty() {
            return None;
        }
        let all: Vec<u8> = int.bytes().chain(frac.bytes()).map(|b| b - b'0').collect();
        let leading = all.iter().take_while(|d| **d == 0).count();
        let digits: Vec<u8> = all[leading..].to_vec();
        let trailing = digits.iter().rev().take_while(|d| **d == 0).count();
        let digits = digits[..digits.len() - trailing].to_vec();
        if digits.is_empty() {
            return Some(Decimal { negative: false, digits, exponent: 0 });
        }
        // value = 0.<all> × 10^(int.len() + exponent); dropping `leading` zeros shifts it.
        let exponent = (int.len() as i64).checked_add(exponent)?.checked_sub(leading as i64)?;
        Some(Decimal { negative, digits, exponent })
    }

    fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    /// An order-preserving text key (`Decimal` order = byte order of keys), for SQL
    /// indexes: the sign class, then the exponent and digits (complemented for negatives).
    pub fn sort_key(&self) -> String {
        if self.is_zero() {
            return "1".into();
        }
        // Exponent biased into 20 digits so it sorts as text.
        let biased = (self.exponent as i128 + (1i128 << 62)) as u128;
        if self.negative {
            let exponent = format!("{:020}", (1u128 << 63) - biased);
            let digits: String = self.digits.iter().map(|d| char::from(b'0' + (9 - d))).collect();
            // A longer negative mantissa is smaller: terminate with a byte above the digits.
            format!("0{exponent}{digits}~")
        } else {
            let digits: String = self.digits.iter().map(|d| char::from(b'0' + d)).collect();
            format!("2{biased:020}{digits}")
        }
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Decimal) -> Ordering {
        let sign = |d: &Decimal| {
            if d.is_zero() {
                0
            } else if d.negative {
                -1
            } else {
                1
            }
        };
        match sign(self).cmp(&sign(other)) {
            Ordering::Equal => {}
            unequal => return unequal,
        }
        if self.is_zero() {
            return Ordering::Equal;
        }
        let magnitude = self.exponent.cmp(&other.exponent).then_with(|| self.digits.cmp(&other.digits));
        if self.negative {
            magnitude.reverse()
        } else {
            magnitude
        }
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Decimal) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(text: &str) -> Decimal {
        Decimal::parse(text).unwrap_or_else(|| panic!("{text}"))
    }

    #[test]
    fn exact_decimal_order() {
        let ordered = [
            "-1e400",
            "-18446744073709551617",
            "-18446744073709551616",
            "-2.5",
            "-2",
            "-0.001",
            "0",
            "1e-400",
            "0.001",
            "1",
            "1.5",
            "2",
            "9007199254740993",
            "18446744073709551616",
            "18446744073709551617",
            "1e400",
        ];
        for (i, a) in ordered.iter().enumerate() {
            for (j, b) in ordered.iter().enumerate() {
                assert_eq!(d(a).cmp(&d(b)), i.cmp(&j), "{a} vs {b}");
                assert_eq!(d(a).sort_key().cmp(&d(b).sort_key()), i.cmp(&j), "keys of {a} vs {b}");
            }
        }
        for (a, b) in [("1", "1.0"), ("1", "1e0"), ("100", "1e2"), ("0", "-0"), ("0.10", "1e-1"), ("0", "0.000e5")] {
            assert_eq!(d(a), d(b), "{a} = {b}");
        }
        for bad in ["", "-", "1.", ".5", "1e", "abc", "0x10"] {
            assert!(Decimal::parse(bad).is_none(), "{bad}");
        }
    }

    fn filter(field: &str, op: FilterOp, operand: &str) -> Filter {
        Filter::new(vec![Condition { field: field.into(), op, operand: JsonText::parse(operand).unwrap() }]).unwrap()
    }

    fn value(text: &str) -> JsonText {
        JsonText::parse(text).unwrap()
    }

    #[test]
    fn semantics() {
        let v = value(r#"{"n":18446744073709551617,"s":"b","t":true,"o":{"x":1,"y":[1,2]},"z":null}"#);
        assert!(filter("n", FilterOp::Gt, "18446744073709551616").matches(&v));
        assert!(!filter("n", FilterOp::Eq, "18446744073709551616").matches(&v));
        assert!(filter("n", FilterOp::Eq, "1.8446744073709551617e19").matches(&v));
        assert!(filter("s", FilterOp::Gte, r#""b""#).matches(&v));
        assert!(filter("s", FilterOp::Lt, r#""c""#).matches(&v));
        assert!(!filter("s", FilterOp::Gt, "1").matches(&v), "mixed types never order");
        assert!(filter("s", FilterOp::Ne, "1").matches(&v), "mixed types are unequal");
        assert!(filter("t", FilterOp::Eq, "true").matches(&v));
        assert!(filter("o", FilterOp::Eq, r#"{"y":[1,2.0],"x":1e0}"#).matches(&v));
        assert!(filter("z", FilterOp::Eq, "null").matches(&v));
        assert!(filter("s", FilterOp::In, r#"["a","b"]"#).matches(&v));
        assert!(!filter("s", FilterOp::In, r#"["a",1]"#).matches(&v));
        assert!(!filter("missing", FilterOp::Ne, "1").matches(&v), "a missing field matches nothing");
        assert!(!filter("n", FilterOp::Gt, "1").matches(&value("[1]")), "a non-object has no fields");
        assert!(Filter::new(vec![Condition { field: "a".into(), op: FilterOp::In, operand: value("1") }]).is_err());
        assert!(Filter::new(vec![Condition { field: "a".into(), op: FilterOp::Gt, operand: value("true") }]).is_err());
    }

    #[test]
    fn an_in_condition_holds_at_most_its_limit_of_operands() {
        let operands = |count: usize| {
            let numbers: Vec<String> = (0..count).map(|n| n.to_string()).collect();
            value(&format!("[{}]", numbers.join(",")))
        };
        let condition = |count| Condition { field: "a".into(), op: FilterOp::In, operand: operands(count) };
        assert!(Filter::new(vec![condition(MEMORY_FILTER_IN_VALUES_MAX)]).is_ok());
        let error = Filter::new(vec![condition(MEMORY_FILTER_IN_VALUES_MAX + 1)]).unwrap_err();
        assert!(
            matches!(error, Error::LimitExceeded { what: Limit::MemoryFilterInValues, limit, actual }
                if limit == MEMORY_FILTER_IN_VALUES_MAX as u64 && actual == MEMORY_FILTER_IN_VALUES_MAX as u64 + 1),
            "{error:?}"
        );
    }
}
