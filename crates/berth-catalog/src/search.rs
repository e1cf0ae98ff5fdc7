//! The listing's text search (`SessionQuery::search`, issue 55): a session matches when
//! the searched text, folded, is a substring of its id, its title or one of its
//! labels, each folded. Folding is Unicode lowercase (Rust's `str::to_lowercase`) then
//! NFC, made by berth and never by a database, so every catalog matches the same
//! sessions. The text matches literally: `%`, `_` and `\` are characters like any other.
//!
//! The SQL catalogs keep each session's folded fields in one column (`search_column`,
//! written with the rest of the row, so a search costs no extra write) and test it
//! with `LIKE` (`like_pattern`), as a filter on the rows the listing's index scan
//! passes: a search reads no log, and keyset paging is unchanged (it is one more
//! filter, like the others that are not part of the driving index).

use crate::SessionRecord;
use berth_core::{Error, Result};
use unicode_normalization::UnicodeNormalization;

/// The longest searched text, in characters.
pub const SEARCH_CHARS_MAX: usize = 256;

/// Between the folded fields of `search_column`: a control character, which a searched
/// text never holds, so a match never spans two fields.
const SEPARATOR: char = '\u{1f}';

/// A checked search text: 1 to `SEARCH_CHARS_MAX` characters, no control characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSearch {
    text: String,
    folded: String,
}

impl SessionSearch {
    pub fn parse(text: &str) -> Result<SessionSearch> {
        let chars = text.chars().count();
        if chars == 0 || chars > SEARCH_CHARS_MAX {
            return Err(Error::invalid("q", format!("a search is 1 to {SEARCH_CHARS_MAX} characters (got {chars})")));
        }
        if text.chars().any(char::is_control) {
            return Err(Error::invalid("q", "a search holds no control characters"));
        }
        Ok(SessionSearch { text: text.to_owned(), folded: fold(text) })
    }

    /// The text as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The text folded (lowercase, NFC).
    pub fn folded(&self) -> &str {
        &self.folded
    }

    /// The reference semantics: the folded text is in the folded id, title or a label.
    pub fn matches(&self, record: &SessionRecord) -> bool {
        let found = |field: &str| fold(field).contains(&self.folded);
        found(record.header.id.as_str())
            || record.title.as_deref().is_some_and(found)
            || record.labels.iter().any(|label| found(label))
    }

    /// A `LIKE … ESCAPE '\'` pattern matching `search_column` values that hold the
    /// folded text: `%` and `_` and `\` escaped with `\`, between two `%`.
    pub fn like_pattern(&self) -> String {
        let mut pattern = String::with_capacity(self.folded.len() + 2);
        pattern.push('%');
        for char in self.folded.chars() {
            if matches!(char, '%' | '_' | '\\') {
                pattern.push('\\');
            }
            pattern.push(char);
        }
        pattern.push('%');
        pattern
    }
}

/// Lowercase, then NFC.
pub fn fold(text: &str) -> String {
    text.to_lowercase().nfc().collect()
}

/// What a SQL catalog stores for `record`'s search: its folded id, title and labels,
/// joined by a control character.
pub fn search_column(record: &SessionRecord) -> String {
    let mut column = fold(record.header.id.as_str());
    for field in record.title.iter().chain(&record.labels) {
        column.push(SEPARATOR);
        column.push_str(&fold(field));
    }
    column
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_searches_are_refused() {
        assert!(SessionSearch::parse("").is_err());
        assert!(SessionSearch::parse(&"x".repeat(SEARCH_CHARS_MAX + 1)).is_err());
        assert!(SessionSearch::parse(&"é".repeat(SEARCH_CHARS_MAX)).is_ok(), "characters, not bytes");
        assert!(SessionSearch::parse("a\nb").is_err());
        assert!(SessionSearch::parse("a\u{7f}").is_err());
    }

    #[test]
    fn like_patterns_escape_the_wildcards() {
        let pattern = |text: &str| SessionSearch::parse(text).expect("valid").like_pattern();
        assert_eq!(pattern("50%"), "%50\\%%");
        assert_eq!(pattern("A_b"), "%a\\_b%");
        assert_eq!(pattern("c:\\x"), "%c:\\\\x%");
    }

    #[test]
    fn folding_is_lowercase_and_nfc() {
        assert_eq!(fold("CAFE\u{301}"), "caf\u{e9}");
        assert_eq!(SessionSearch::parse("Café").expect("valid").folded(), "caf\u{e9}");
    }
}
