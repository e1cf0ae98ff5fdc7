//! The strict validating minifier (R-C9): one pass over submitted JSON bytes that checks
//! them strictly and returns them with insignificant whitespace removed, every other byte
//! kept — key order, number lexemes (any length) and string escapes.
//!
//! Hand-written because no maintained crate does both halves: `serde_json` validates but
//! re-prints (sorted or insertion-ordered keys, numbers through `f64` unless
//! `arbitrary_precision`, which changes every `Number` in the workspace, and its own
//! escaping), and minifier crates strip whitespace without validating (duplicate keys,
//! lone surrogates, depth). The scanner is a loop over an explicit stack of open
//! containers, so hostile nesting costs memory bounded by `JSON_DEPTH_MAX`, never stack.
//!
//! Checked: valid UTF-8; the RFC 8259 grammar, numbers included; no control characters
//! inside strings; `\u` escapes form scalar values (a high surrogate must be followed by a
//! low one, a low one never stands alone), in keys and values alike; no two keys of one
//! object decode to the same string (`"a"` and `"\u0061"` are duplicates); nesting at
//! most `JSON_DEPTH_MAX`; nothing but whitespace after the value.

use crate::error::{Error, Result};
use crate::limits::JSON_DEPTH_MAX;
use std::collections::HashSet;

/// Checks `input` strictly and returns it without insignificant whitespace. Depth beyond
/// the limit is `LimitExceeded { what: Limit::JsonDepth }`; every other defect is `Invalid`.
pub fn minify_strict(input: &[u8]) -> Result<String> {
    let text = std::str::from_utf8(input)
        .map_err(|error| Error::invalid("json", format!("invalid UTF-8 at byte {}", error.valid_up_to())))?;
    let mut scanner = Scanner { text, position: 0, out: String::with_capacity(text.len()), open: Vec::new() };
    scanner.run()?;
    Ok(scanner.out)
}

/// How many bytes at the start of `bytes` (which starts with a byte that is not a quote,
/// a backslash or a control character) a string takes verbatim: up to the next quote,
/// backslash or control character, or the end. The quote and backslash are found with
/// `memchr` and the control characters by a pass the compiler vectorizes (no early
/// exit), so long strings — most of a message's bytes — are not walked byte by byte.
fn plain_run(bytes: &[u8]) -> usize {
    let special = memchr::memchr2(b'"', b'\\', bytes).unwrap_or(bytes.len());
    let candidate = &bytes[..special];
    if !candidate.iter().fold(false, |control, &byte| control | (byte < 0x20)) {
        return special.max(1);
    }
    candidate.iter().position(|&byte| byte < 0x20).unwrap_or(special).max(1)
}

/// An open container: arrays need nothing, objects the decoded keys seen so far.
enum Container {
    Array,
    Object(HashSet<String>),
}

/// What the grammar allows next.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    Value,
    ValueOrArrayEnd,
    Key,
    KeyOrObjectEnd,
    Colon,
    CommaOrEnd,
    Nothing,
}

struct Scanner<'a> {
    text: &'a str,
    position: usize,
    out: String,
    open: Vec<Container>,
}

impl Scanner<'_> {
    fn run(&mut self) -> Result<()> {
        let mut expect = Expect::Value;
        loop {
            self.skip_whitespace();
            let Some(&byte) = self.text.as_bytes().get(self.position) else {
                return match expect {
                    Expect::Nothing => Ok(()),
                    _ => Err(self.invalid("unexpected end of input")),
                };
            };
            expect = match expect {
                Expect::Nothing => return Err(self.invalid("trailing bytes after the value")),
                Expect::ValueOrArrayEnd if byte == b']' => self.close()?,
                Expect::Value | Expect::ValueOrArrayEnd => self.value(byte)?,
                Expect::KeyOrObjectEnd if byte == b'}' => self.close()?,
                Expect::Key | Expect::KeyOrObjectEnd => self.key(byte)?,
                Expect::Colon if byte == b':' => self.punctuation(Expect::Value),
                Expect::Colon => return Err(self.invalid("expected ':' after an object key")),
                Expect::CommaOrEnd => self.comma_or_end(byte)?,
            };
        }
    }

    fn skip_whitespace(&mut self) {
        let bytes = self.text.as_bytes();
        while matches!(bytes.get(self.position), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.position += 1;
        }
    }

    fn invalid(&self, what: &str) -> Error {
        Error::invalid("json", format!("{what} at byte {}", self.position))
    }

    /// Copies `text[from..self.position]` to the output.
    fn copy_from(&mut self, from: usize) {
        self.out.push_str(&self.text[from..self.position]);
    }

    /// Copies the one-byte token at the position and moves past it.
    fn punctuation(&mut self, next: Expect) -> Expect {
        self.position += 1;
        self.copy_from(self.position - 1);
        next
    }

    fn after_value(&self) -> Expect {
        if self.open.is_empty() {
            Expect::Nothing
        } else {
            Expect::CommaOrEnd
        }
    }

    fn value(&mut self, byte: u8) -> Result<Expect> {
        match byte {
            b'{' => self.open(Container::Object(HashSet::new()), Expect::KeyOrObjectEnd),
            b'[' => self.open(Container::Array, Expect::ValueOrArrayEnd),
            b'"' => {
                self.string(None)?;
                Ok(self.after_value())
            }
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            b'-' | b'0'..=b'9' => {
                self.number()?;
                Ok(self.after_value())
            }
            _ => Err(self.invalid("expected a value")),
        }
    }

    fn open(&mut self, container: Container, next: Expect) -> Result<Expect> {
        if self.open.len() >= JSON_DEPTH_MAX {
            return Err(Error::LimitExceeded {
                what: crate::limits::Limit::JsonDepth,
                limit: JSON_DEPTH_MAX as u64,
                actual: self.open.len() as u64 + 1,
            });
        }
        self.open.push(container);
        Ok(self.punctuation(next))
    }

    fn close(&mut self) -> Result<Expect> {
        self.open.pop();
        self.punctuation(Expect::Nothing);
        Ok(self.after_value())
    }

    fn comma_or_end(&mut self, byte: u8) -> Result<Expect> {
        match (self.open.last(), byte) {
            (Some(Container::Array), b',') => Ok(self.punctuation(Expect::Value)),
            (Some(Container::Array), b']') | (Some(Container::Object(_)), b'}') => self.close(),
            (Some(Container::Object(_)), b',') => Ok(self.punctuation(Expect::Key)),
            (Some(Container::Array), _) => Err(self.invalid("expected ',' or ']' in an array")),
            _ => Err(self.invalid("expected ',' or '}' in an object")),
        }
    }

    fn key(&mut self, byte: u8) -> Result<Expect> {
        if byte != b'"' {
            return Err(self.invalid("expected a string key"));
        }
        let key_start = self.position;
        let mut decoded = String::new();
        self.string(Some(&mut decoded))?;
        if let Some(Container::Object(keys)) = self.open.last_mut() {
            if !keys.insert(decoded) {
                self.position = key_start;
                return Err(self.invalid("duplicate object key"));
            }
        }
        Ok(Expect::Colon)
    }

    fn literal(&mut self, word: &str) -> Result<Expect> {
        if !self.text[self.position..].starts_with(word) {
            return Err(self.invalid("expected a value"));
        }
        let start = self.position;
        self.position += word.len();
        self.copy_from(start);
        Ok(self.after_value())
    }

    /// `-? (0 | [1-9][0-9]*) (\.[0-9]+)? ([eE][+-]?[0-9]+)?`, any length, copied as is.
    fn number(&mut self) -> Result<()> {
        let start = self.position;
        self.skip_byte(b'-');
        match self.peek() {
            Some(b'0') => self.position += 1,
            Some(b'1'..=b'9') => self.skip_digits(),
            _ => return Err(self.invalid("expected a digit in a number")),
        }
        if self.skip_byte(b'.') {
            self.required_digits("expected a digit after the decimal point")?;
        }
        if self.skip_byte(b'e') || self.skip_byte(b'E') {
            let _sign = self.skip_byte(b'+') || self.skip_byte(b'-');
            self.required_digits("expected a digit in the exponent")?;
        }
        self.copy_from(start);
        Ok(())
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.position).copied()
    }

    fn skip_byte(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        self.position += usize::from(found);
        found
    }

    fn skip_digits(&mut self) {
        while self.peek().is_some_and(|byte| byte.is_ascii_digit()) {
            self.position += 1;
        }
    }

    fn required_digits(&mut self, what: &str) -> Result<()> {
        if !self.peek().is_some_and(|byte| byte.is_ascii_digit()) {
            return Err(self.invalid(what));
        }
        self.skip_digits();
        Ok(())
    }

    /// Scans a string at the position (its opening quote) and copies it verbatim;
    /// decodes it into `decoded` when given (keys, for the duplicate check).
    fn string(&mut self, mut decoded: Option<&mut String>) -> Result<()> {
        let start = self.position;
        self.position += 1;
        let mut plain_from = self.position;
        loop {
            match self.peek() {
                None => return Err(self.invalid("unterminated string")),
                Some(b'"') => break,
                Some(b'\\') => {
                    if let Some(decoded) = decoded.as_deref_mut() {
                        decoded.push_str(&self.text[plain_from..self.position]);
                    }
                    let character = self.escape()?;
                    if let Some(decoded) = decoded.as_deref_mut() {
                        decoded.push(character);
                    }
                    plain_from = self.position;
                }
                Some(0x00..=0x1f) => return Err(self.invalid("unescaped control character in a string")),
                Some(_) => self.position += plain_run(&self.text.as_bytes()[self.position..]),
            }
        }
        if let Some(decoded) = decoded {
            decoded.push_str(&self.text[plain_from..self.position]);
        }
        self.position += 1; // the closing quote
        self.copy_from(start);
        Ok(())
    }

    /// Decodes the escape at the position (its backslash) and moves past it.
    fn escape(&mut self) -> Result<char> {
        let simple = match self.text.as_bytes().get(self.position + 1) {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => return self.unicode_escape(),
            _ => return Err(self.invalid("invalid escape in a string")),
        };
        self.position += 2;
        Ok(simple)
    }

    /// `\uXXXX`, or a surrogate pair `\uD8xx\uDCxx`; a lone surrogate is refused.
    fn unicode_escape(&mut self) -> Result<char> {
        let unit = self.hex4(self.position + 2)?;
        let scalar = match unit {
            0xD800..=0xDBFF => {
                let bytes = self.text.as_bytes();
                let low = match (bytes.get(self.position + 6), bytes.get(self.position + 7)) {
                    (Some(b'\\'), Some(b'u')) => self.hex4(self.position + 8)?,
                    _ => return Err(self.invalid("lone leading surrogate in a \\u escape")),
                };
                if !(0xDC00..=0xDFFF).contains(&low) {
                    return Err(self.invalid("lone leading surrogate in a \\u escape"));
                }
                self.position += 6;
                0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
            }
            0xDC00..=0xDFFF => return Err(self.invalid("lone trailing surrogate in a \\u escape")),
            _ => unit,
        };
        self.position += 6;
        char::from_u32(scalar).ok_or_else(|| self.invalid("invalid \\u escape"))
    }

    fn hex4(&self, at: usize) -> Result<u32> {
        let digits = self.text.as_bytes().get(at..at + 4).filter(|digits| digits.iter().all(u8::is_ascii_hexdigit));
        let digits = digits.ok_or_else(|| self.invalid("expected four hex digits in a \\u escape"))?;
        // Four ASCII hex digits always parse.
        Ok(digits.iter().fold(0, |value, digit| value * 16 + char::from(*digit).to_digit(16).unwrap_or(0)))
    }
}

#[cfg(test)]
mod tests;
