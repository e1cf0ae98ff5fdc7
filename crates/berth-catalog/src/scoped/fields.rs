//! The filter index both SQL catalogs keep (`memory_fields`): each item's top-level scalar fields as
//! `(field, kind, sort)` rows, where `sort` orders exactly as `Filter` compares —
//! `Decimal::sort_key` for numbers (exact decimal order as text), the string itself for
//! strings (byte order of UTF-8 is code-point order; NUL escaped, order kept), `t`/`f`,
//! and `` for null.
//! A condition that compares with a scalar (`eq`, `in` of scalars, the orderings) maps
//! to a range of that index holding *every* item it matches (and only those); the
//! search still applies the whole filter (`Filter::matches`) to what the index yields,
//! so the index only has to be a superset.

use super::{Condition, Decimal, FilterOp};
use berth_core::JsonText;
use serde_json::value::RawValue;
use std::collections::BTreeMap;

/// A string's sort text without NUL (PostgreSQL text cannot hold it), in the same
/// byte order: U+0000 becomes U+0001 U+0001 and U+0001 becomes U+0001 U+0002.
fn escape_nul(text: &str) -> String {
    if !text.contains(['\u{0}', '\u{1}']) {
        return text.to_owned();
    }
    text.replace('\u{1}', "\u{1}\u{2}").replace('\u{0}', "\u{1}\u{1}")
}

/// A scalar as the index holds it: `(kind, sort)`. `None` for arrays, objects and
/// unreadable text (never indexed; conditions on them are not pushed down).
fn scalar(raw: &RawValue) -> Option<(&'static str, String)> {
    let text = raw.get().trim();
    match text.as_bytes().first()? {
        b'n' => Some(("z", String::new())),
        b't' => Some(("b", "t".into())),
        b'f' => Some(("b", "f".into())),
        b'"' => serde_json::from_str::<String>(text).ok().map(|text| ("s", escape_nul(&text))),
        b'[' | b'{' => None,
        _ => Decimal::parse(text).map(|number| ("n", number.sort_key())),
    }
}

/// The index rows of a value: `(field, kind, sort)` for each top-level scalar field of
/// an object (none for other values). Duplicate names (refused by the strict parser
/// anyway) keep the last, as `Filter::matches` reads them.
pub fn value_fields(value: &JsonText) -> Vec<(String, &'static str, String)> {
    let Ok(fields) = serde_json::from_str::<BTreeMap<String, &RawValue>>(value.as_str()) else {
        return Vec::new();
    };
    // A name with NUL is not indexed (PostgreSQL text cannot hold it), nor pushed down.
    let indexed = fields.into_iter().filter(|(name, _)| !name.contains('\u{0}'));
    indexed.filter_map(|(name, raw)| scalar(raw).map(|(kind, sort)| (name, kind, sort))).collect()
}

/// One alternative of a pushed-down condition: `kind = … AND sort <op> …`.
pub struct Alternative {
    pub kind: &'static str,
    pub op: &'static str,
    pub sort: String,
}

/// The index ranges holding every item `condition` matches, or `None` if it cannot be
/// pushed down (`ne`, a comparison with an array or object, `in` with one).
pub fn pushdown(condition: &Condition) -> Option<Vec<Alternative>> {
    if condition.field.contains('\u{0}') {
        return None;
    }
    let operand = condition.operand.as_raw();
    let equal = |raw: &RawValue| scalar(raw).map(|(kind, sort)| Alternative { kind, op: "=", sort });
    match condition.op {
        FilterOp::Ne => None,
        FilterOp::Eq => Some(vec![equal(operand)?]),
        FilterOp::In => {
            let items: Vec<&RawValue> = serde_json::from_str(operand.get()).ok()?;
            items.into_iter().map(equal).collect()
        }
        op => {
            let (kind, sort) = scalar(operand).filter(|(kind, _)| matches!(*kind, "n" | "s"))?;
            let op = match op {
                FilterOp::Gt => ">",
                FilterOp::Gte => ">=",
                FilterOp::Lt => "<",
                _ => "<=",
            };
            Some(vec![Alternative { kind, op, sort }])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::escape_nul;

    #[test]
    fn nul_escape_keeps_byte_order() {
        let texts =
            ["", "\u{0}", "\u{0}\u{0}", "\u{0}\u{5}", "\u{1}", "\u{1}\u{0}", "\u{2}", "a", "a\u{0}", "a\u{1}", "é"];
        for a in texts {
            assert!(!escape_nul(a).contains('\u{0}'));
            for b in texts {
                assert_eq!(escape_nul(a).cmp(&escape_nul(b)), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
    }
}
