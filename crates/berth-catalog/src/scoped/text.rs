//! Full-text terms, one tokenizer for every backend (so results agree exactly).
//!
//! A term is a maximal run of Unicode alphanumeric characters, lowercased; everything
//! else separates terms (the rules of SQLite FTS5's `unicode61` without diacritic
//! removal, and of PostgreSQL's `simple` configuration for words: no stemming, no stop
//! words). An item's text is every string inside its value (object keys excluded). A
//! query's terms are ANDed; relevance is how many times the query's terms occur.

use berth_core::limits::{Limit, MEMORY_QUERY_TERMS_MAX};
use berth_core::{Error, JsonText, Result};
use serde_json::Value;

/// The terms of a text, in order, repeats kept.
pub fn terms(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(|word| word.chars().flat_map(char::to_lowercase).collect())
        .collect()
}

/// The terms of every string inside a value, in document order, repeats kept.
pub fn value_terms(value: &JsonText) -> Vec<String> {
    let mut out = Vec::new();
    collect(&value.to_value(), &mut out);
    out
}

fn collect(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(text) => out.extend(terms(text)),
        Value::Array(items) => items.iter().for_each(|item| collect(item, out)),
        Value::Object(map) => map.values().for_each(|item| collect(item, out)),
        _ => {}
    }
}

/// A parsed full-text query: distinct terms, ANDed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextQuery {
    terms: Vec<String>,
}

impl TextQuery {
    /// `Invalid` if the query has no term (only separators); `LimitExceeded` past 32 terms.
    pub fn parse(text: &str) -> Result<TextQuery> {
        let mut found = terms(text);
        found.sort();
        found.dedup();
        if found.is_empty() {
            return Err(Error::invalid("query", "no searchable term (letters or digits)"));
        }
        if found.len() > MEMORY_QUERY_TERMS_MAX {
            return Err(Error::LimitExceeded {
                what: Limit::MemoryQueryTerms,
                limit: MEMORY_QUERY_TERMS_MAX as u64,
                actual: found.len() as u64,
            });
        }
        Ok(TextQuery { terms: found })
    }

    pub fn terms(&self) -> &[String] {
        &self.terms
    }

    /// How often the query's terms occur in `item_terms`; `None` if one is missing.
    pub fn score(&self, item_terms: &[String]) -> Option<u64> {
        let mut total = 0u64;
        for term in &self.terms {
            let count = item_terms.iter().filter(|t| *t == term).count() as u64;
            if count == 0 {
                return None;
            }
            total += count;
        }
        Some(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer() {
        assert_eq!(
            terms("Hello, World! e-mail x@y.z 3.14 Ünïcode ΣΊΣΥΦΟΣ"),
            ["hello", "world", "e", "mail", "x", "y", "z", "3", "14", "ünïcode", "σίσυφοσ"]
        );
        let value =
            JsonText::parse(r#"{"title":"Tea time","tags":["Green tea"],"n":5,"key words":"ignored? no"}"#).unwrap();
        assert_eq!(value_terms(&value), ["tea", "time", "green", "tea", "ignored", "no"]);
        let query = TextQuery::parse("TEA green tea").unwrap();
        assert_eq!(query.terms(), ["green", "tea"]);
        assert_eq!(query.score(&value_terms(&value)), Some(3));
        assert_eq!(TextQuery::parse("tea coffee").unwrap().score(&value_terms(&value)), None);
        assert!(TextQuery::parse(" ,.; ").is_err());
        assert!(TextQuery::parse("teas").unwrap().score(&value_terms(&value)).is_none(), "no stemming");
    }
}
