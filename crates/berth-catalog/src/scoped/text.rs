//! Full-text search, defined once for every backend: how a text becomes words, which
//! index terms the words give (what every backend stores), and what a query matches
//! (the exact check every backend applies to the candidates its index finds).
//!
//! - **Words.** A text is NFC-normalized, cut into maximal runs of Unicode alphanumeric
//!   characters (everything else separates), and each run is lowercased. An item's
//!   words are those of every string inside its value (object keys excluded).
//! - **What a query word matches.** A query's words are ANDed. An ASCII query word
//!   matches a *word term* of the item, equal to it: an ASCII word, or inside a word
//!   with other characters, a run of ASCII letters and digits between characters of
//!   other scripts than Latin (`私はpythonを使う` holds `python`; `pythoné` does not).
//!   Any other query word matches as a substring of one of the item's words
//!   (`太郎` in `山田太郎さん`, `café` in `cafés`). These are the rules of Google ADK's
//!   `InMemoryMemoryService`, whose scripts without spaces (Chinese, Japanese) have no
//!   word boundaries to match on.
//! - **Index terms.** Every word term, and each distinct non-ASCII character of the
//!   words that have one (a *character term*). Every match of a query holds all of the
//!   query's `index_terms`, so a backend's index finds a superset of the matches, and
//!   `TextQuery::score` is the exact check; for a query of ASCII words only the index
//!   decides exactly (`decided_by_index`). The two kinds never collide: a word term is
//!   ASCII, a character term one non-ASCII character.
//! - **Relevance** is how often the query's words occur: an ASCII word as an equal word
//!   term, any other as a substring (non-overlapping, counted in each word).

use berth_core::limits::{Limit, MEMORY_QUERY_TERMS_MAX};
use berth_core::{Error, JsonText, Result};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::BTreeSet;
use unicode_normalization::{is_nfc_quick, IsNormalized, UnicodeNormalization};
use unicode_script::{Script, UnicodeScript};

/// The words of a text, in order, repeats kept: NFC, cut at every character that is
/// not alphanumeric, each lowercased.
pub fn words(text: &str) -> Vec<String> {
    let normalized: Cow<'_, str> = match is_nfc_quick(text.chars()) {
        IsNormalized::Yes => Cow::Borrowed(text),
        _ => Cow::Owned(text.nfc().collect()),
    };
    normalized.split(|c: char| !c.is_alphanumeric()).filter(|word| !word.is_empty()).map(str::to_lowercase).collect()
}

/// The words of every string inside a value, in document order, repeats kept.
pub fn value_words(value: &JsonText) -> Vec<String> {
    let mut out = Vec::new();
    collect(&value.to_value(), &mut out);
    out
}

fn collect(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(text) => out.extend(words(text)),
        Value::Array(items) => items.iter().for_each(|item| collect(item, out)),
        Value::Object(map) => map.values().for_each(|item| collect(item, out)),
        _ => {}
    }
}

/// Is `c` of the Latin script as ADK splits words (ASCII letters and digits, and the
/// letters of the Latin script: `é`, `ß`)? A run of such characters is one word term
/// candidate; any other character ends it.
fn is_latin(c: char) -> bool {
    c.is_ascii_digit() || c.script() == Script::Latin
}

/// Calls `found` with each word term of `word` (a word of `words`): the word itself
/// if ASCII, else each run of Latin characters in it that is all ASCII.
fn word_terms_of<'w>(word: &'w str, mut found: impl FnMut(&'w str)) {
    if word.is_ascii() {
        found(word);
        return;
    }
    let mut start = None;
    for (at, c) in word.char_indices().chain(std::iter::once((word.len(), ' '))) {
        match (start, at < word.len() && is_latin(c)) {
            (None, true) => start = Some(at),
            (Some(from), false) => {
                let run = &word[from..at];
                if run.is_ascii() {
                    found(run);
                }
                start = None;
            }
            _ => {}
        }
    }
}

/// What an item puts in a backend's full-text index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexTerms {
    /// The word terms, in document order, repeats kept (relevance counts them).
    pub words: Vec<String>,
    /// The distinct non-ASCII characters of the words, in code point order, each as a
    /// string.
    pub characters: Vec<String>,
}

impl IndexTerms {
    /// The index terms of words (`words`, `value_words`).
    pub fn of(words: &[String]) -> IndexTerms {
        let mut terms = IndexTerms::default();
        let mut characters = BTreeSet::new();
        for word in words {
            word_terms_of(word, |term| terms.words.push(term.to_owned()));
            characters.extend(word.chars().filter(|c| !c.is_ascii()));
        }
        terms.characters = characters.into_iter().map(String::from).collect();
        terms
    }

    /// Every term: the word terms (repeats kept), then the character terms.
    pub fn all(&self) -> impl Iterator<Item = &str> {
        self.words.iter().chain(&self.characters).map(String::as_str)
    }
}

/// The index terms of every string inside a value.
pub fn index_terms(value: &JsonText) -> IndexTerms {
    IndexTerms::of(&value_words(value))
}

/// A parsed full-text query: distinct words, ANDed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextQuery {
    /// Sorted, distinct.
    words: Vec<String>,
    /// What a backend looks up in its index (`index_terms`).
    index_terms: Vec<String>,
}

impl TextQuery {
    /// `Invalid` if the query has no word (only separators); `LimitExceeded` past 32 words.
    pub fn parse(text: &str) -> Result<TextQuery> {
        let mut found = words(text);
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
        let index_terms = candidate_terms(&found);
        Ok(TextQuery { words: found, index_terms })
    }

    /// The query's words (sorted, distinct).
    pub fn words(&self) -> &[String] {
        &self.words
    }

    /// Index terms that every match holds (sorted, distinct, at most 32): each ASCII
    /// word, and characters of the other words. Items holding them all are the
    /// candidates; `score` decides.
    pub fn index_terms(&self) -> &[String] {
        &self.index_terms
    }

    /// Does holding every `index_terms` decide a match (every word is ASCII, so the
    /// index terms are the words themselves)? Then a backend's index answers exactly
    /// and the word terms' counts are the score (`score_terms`).
    pub fn decided_by_index(&self) -> bool {
        self.words.iter().all(|word| word.is_ascii())
    }

    /// The reference: how often the query's words occur in an item whose words are
    /// `item_words` (`value_words`); `None` if one of them does not.
    pub fn score(&self, item_words: &[String]) -> Option<u64> {
        let mut word_terms: Vec<&str> = Vec::new();
        if self.words.iter().any(|word| word.is_ascii()) {
            item_words.iter().for_each(|word| word_terms_of(word, |term| word_terms.push(term)));
        }
        let mut total = 0u64;
        for query_word in &self.words {
            let count = if query_word.is_ascii() {
                word_terms.iter().filter(|term| **term == query_word.as_str()).count()
            } else {
                item_words.iter().map(|word| word.matches(query_word.as_str()).count()).sum()
            };
            if count == 0 {
                return None;
            }
            total += count as u64;
        }
        Some(total)
    }

    /// `score` of an item's value.
    pub fn score_value(&self, value: &JsonText) -> Option<u64> {
        self.score(&value_words(value))
    }

    /// `score` from an item's index terms (`IndexTerms::all`, as a backend stored them),
    /// for a query the index decides (`decided_by_index`); `None` for any other query.
    pub fn score_terms<'t>(&self, item_terms: impl IntoIterator<Item = &'t str>) -> Option<u64> {
        if !self.decided_by_index() {
            return None;
        }
        let item_terms: Vec<&str> = item_terms.into_iter().collect();
        let mut total = 0u64;
        for word in &self.words {
            let count = item_terms.iter().filter(|term| **term == word.as_str()).count() as u64;
            if count == 0 {
                return None;
            }
            total += count;
        }
        Some(total)
    }
}

/// A query's index terms (`TextQuery::index_terms`): every ASCII word, then characters
/// of the other words taken in turns (each word's first distinct non-ASCII character,
/// then each one's second, …) up to `MEMORY_QUERY_TERMS_MAX` terms, so that every word
/// narrows the candidates and a long query costs a bounded number of lookups.
fn candidate_terms(words: &[String]) -> Vec<String> {
    let mut terms: BTreeSet<String> = words.iter().filter(|word| word.is_ascii()).cloned().collect();
    let mut characters: Vec<Vec<char>> = words
        .iter()
        .filter(|word| !word.is_ascii())
        .map(|word| {
            let mut seen = BTreeSet::new();
            word.chars().filter(|c| !c.is_ascii() && seen.insert(*c)).collect()
        })
        .collect();
    let mut turn = 0;
    while terms.len() < MEMORY_QUERY_TERMS_MAX && characters.iter().any(|chars| turn < chars.len()) {
        for chars in &mut characters {
            if let Some(c) = chars.get(turn) {
                if terms.len() < MEMORY_QUERY_TERMS_MAX {
                    terms.insert(c.to_string());
                }
            }
        }
        turn += 1;
    }
    terms.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|item| item.to_string()).collect()
    }

    fn score(query: &str, text: &str) -> Option<u64> {
        TextQuery::parse(query).unwrap().score(&words(text))
    }

    #[test]
    fn tokenizer() {
        assert_eq!(
            words("Hello, World! e-mail x@y.z 3.14 Ünïcode ΣΊΣΥΦΟΣ"),
            ["hello", "world", "e", "mail", "x", "y", "z", "3", "14", "ünïcode", "σίσυφος"]
        );
        let value =
            JsonText::parse(r#"{"title":"Tea time","tags":["Green tea"],"n":5,"key words":"ignored? no"}"#).unwrap();
        assert_eq!(value_words(&value), ["tea", "time", "green", "tea", "ignored", "no"]);
        let query = TextQuery::parse("TEA green tea").unwrap();
        assert_eq!(query.words(), ["green", "tea"]);
        assert_eq!(query.score_value(&value), Some(3));
        assert_eq!(TextQuery::parse("tea coffee").unwrap().score_value(&value), None);
        assert!(TextQuery::parse(" ,.; ").is_err());
        assert!(TextQuery::parse("teas").unwrap().score_value(&value).is_none(), "no stemming");
    }

    #[test]
    fn words_are_nfc() {
        // NFD spellings: e + U+0301, and katakana with U+309A / U+3099 marks.
        assert_eq!(words("Cafe\u{301} プログラミング"), ["café", "プログラミング"]);
        assert_eq!(words("\u{1100}\u{1161}\u{11A8}"), ["각"], "hangul jamo compose");
        assert_eq!(score("CAFE\u{301}", "un café crème"), Some(1));
        assert_eq!(score("プログラミング", "プログラミングが好き"), Some(1));
    }

    #[test]
    fn index_terms_of_mixed_scripts() {
        let terms = IndexTerms::of(&words("私はPythonを使う naïve pythoné ok 東京tokyo2"));
        assert_eq!(terms.words, ["python", "ok", "tokyo2"], "ASCII runs between other scripts");
        assert_eq!(terms.characters, strings(&["é", "ï", "う", "は", "を", "京", "使", "東", "私"]));
        assert_eq!(terms.all().count(), 12);
    }

    #[test]
    fn ascii_words_match_word_terms() {
        assert_eq!(score("Python", "私はPythonを使う"), Some(1));
        assert_eq!(score("python", "pythoné"), None, "a Latin run with other letters is not the word");
        assert_eq!(score("thon", "私はPythonを使う"), None, "no partial ASCII word");
        assert_eq!(score("python", "Python python, 私はpythonを"), Some(3));
    }

    #[test]
    fn other_words_match_as_substrings() {
        assert_eq!(score("太郎", "山田太郎さんと太郎"), Some(2));
        assert_eq!(score("机器学习", "我喜欢机器学习和深度学习"), Some(1));
        assert_eq!(score("使って", "Pythonを使ってください"), Some(1));
        assert_eq!(score("서울", "서울에서 만나요"), Some(1));
        assert_eq!(score("café", "CAFÉS"), Some(1));
        assert_eq!(score("学习 python", "我学习Python"), Some(2), "words ANDed, each by its rule");
        assert_eq!(score("学习 java", "我学习Python"), None);
        assert_eq!(score("ab", "ab ab"), Some(2));
        assert_eq!(score("郎山", "太郎 山田"), None, "a substring of one word, not across words");
    }

    #[test]
    fn index_terms_narrow_to_a_superset() {
        let query = TextQuery::parse("机器学习 python 学").unwrap();
        assert_eq!(query.index_terms(), strings(&["python", "习", "器", "学", "机"]));
        assert!(!query.decided_by_index());
        let ascii = TextQuery::parse("Tea green").unwrap();
        assert!(ascii.decided_by_index());
        assert_eq!(ascii.index_terms(), ascii.words());
        assert_eq!(ascii.score_terms(["tea", "green", "tea", "茶"]), Some(3));
        assert_eq!(query.score_terms(["python"]), None, "not decided by the index");
        // Every match holds every index term.
        for text in ["我学习机器学习 Python", "机器学习はpythonで"] {
            let held: Vec<String> = IndexTerms::of(&words(text)).all().map(str::to_owned).collect();
            assert!(query.score(&words(text)).is_some(), "{text}");
            assert!(query.index_terms().iter().all(|term| held.contains(term)), "{text}");
        }
    }

    #[test]
    fn index_terms_are_bounded() {
        let long: String = ('一'..='\u{4e60}').collect();
        let query = TextQuery::parse(&format!("{long} 猫")).unwrap();
        assert_eq!(query.index_terms().len(), MEMORY_QUERY_TERMS_MAX);
        assert!(query.index_terms().contains(&"猫".to_owned()), "every word narrows");
    }
}
