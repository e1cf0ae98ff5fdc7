//! The minifier against written-out cases and two oracles: a generated document's own
//! compact rendering (exact output), and serde_json with a duplicate-key and depth check
//! (the same accept/refuse verdict on mutated documents).

use super::minify_strict;
use crate::error::Error;
use crate::limits::JSON_DEPTH_MAX;
use proptest::prelude::*;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::collections::HashSet;
use std::fmt;

#[test]
fn keeps_order_lexemes_and_escapes_and_drops_whitespace() {
    let input = " {\n \"b\" : 1 ,\t\"a\": [ 1.0, 1e2, 123456789012345678901234567890, -0, 1E+2, 0.5e-7 ],\r\n \"s\": \"\\u00e9\\/ x \\\"\" } ";
    let expected = r#"{"b":1,"a":[1.0,1e2,123456789012345678901234567890,-0,1E+2,0.5e-7],"s":"\u00e9\/ x \""}"#;
    assert_eq!(minify_strict(input.as_bytes()).unwrap(), expected);
    assert_eq!(minify_strict(b"\"\xc3\xa9 \\ud83e\\udd80\"").unwrap(), "\"é \\ud83e\\udd80\"");
    assert_eq!(minify_strict(b" null ").unwrap(), "null");
    assert_eq!(minify_strict(b"[ ]").unwrap(), "[]");
    assert_eq!(minify_strict(b"{ }").unwrap(), "{}");
}

fn refused(input: &[u8]) -> String {
    match minify_strict(input) {
        Err(Error::Invalid { reason, .. }) => reason,
        other => panic!("{:?} gave {other:?}", String::from_utf8_lossy(input)),
    }
}

#[test]
fn refuses_duplicate_keys_also_through_escapes() {
    assert!(refused(br#"{"a":1,"a":2}"#).contains("duplicate"));
    assert!(refused(br#"{"a":1,"\u0061":2}"#).contains("duplicate"));
    assert!(refused(r#"{"\u00e9":1,"é":2}"#.as_bytes()).contains("duplicate"));
    assert!(refused(r#"{"\ud83e\udd80":1,"🦀":2}"#.as_bytes()).contains("duplicate"));
    assert!(refused(br#"{"x":{"k":[],"k":{}}}"#).contains("duplicate"));
    assert!(minify_strict(br#"[{"a":1},{"a":1}]"#).is_ok(), "keys are per object");
    assert!(minify_strict(br#"{"a":{"a":1}}"#).is_ok(), "a nested object has its own keys");
}

#[test]
fn refuses_lone_or_misordered_surrogates_in_values_and_keys() {
    for text in [
        r#""\ud800""#,
        r#""\udc00""#,
        r#""\ud800x""#,
        r#""\ud800\u0041""#,
        r#""\udc00\ud800""#,
        r#""\ud800\ud800""#,
        r#"{"\ud800":1}"#,
        r#"{"\udfff":1}"#,
    ] {
        assert!(refused(text.as_bytes()).contains("surrogate"), "{text}");
    }
}

#[test]
fn refuses_bad_utf8_grammar_and_trailing_bytes() {
    assert!(refused(b"\"\xff\"").contains("UTF-8"));
    assert!(refused(b"\"\xed\xa0\x80\"").contains("UTF-8"), "an encoded surrogate is not UTF-8");
    for text in [
        "",
        " ",
        "NaN",
        "Infinity",
        "-",
        "01",
        "1.",
        ".5",
        "1e",
        "1e+",
        "+1",
        "0x10",
        "[1,]",
        "[,1]",
        "{\"a\"}",
        "{\"a\":}",
        "{\"a\" 1}",
        "{1:2}",
        "{'a':1}",
        "[1 2]",
        "1 2",
        "{}{}",
        "tru",
        "nul",
        "truex",
        "\"a",
        "\"\\x\"",
        "\"\\u12\"",
        "\"\\u12g4\"",
        "\"\t\"",
        "\"\n\"",
        "[1}",
        "{\"a\":1]",
        "\u{feff}1",
        "[\u{a0}1]",
    ] {
        refused(text.as_bytes());
    }
}

#[test]
fn long_strings_are_checked_at_every_byte() {
    // Runs of plain bytes are skipped in one step (`plain_run`): a control character
    // anywhere in one is still refused, at its own byte, and escapes after one still count.
    let long = "é".repeat(300) + &"a".repeat(301);
    for at in [0, 2, 598, 600, 601, 900, long.len()] {
        let input = format!("[\"{}\u{1}{}\"]", &long[..at], &long[at..]);
        let reason = refused(input.as_bytes());
        assert_eq!(reason, format!("unescaped control character in a string at byte {}", at + 2), "{at}");
    }
    let escaped = format!("{{\"{long}\\n{long}\":\"{long}\\\"\"}}");
    assert_eq!(minify_strict(escaped.as_bytes()).unwrap(), escaped);
    let duplicate = format!("{{\"{long}\\u0061\":1,\"{long}a\":2}}");
    assert!(refused(duplicate.as_bytes()).contains("duplicate"), "keys decode across the runs");
    assert!(refused(format!("\"{long}").as_bytes()).contains("unterminated"));
}

#[test]
fn depth_is_bounded_by_the_limit() {
    let ok = "[".repeat(JSON_DEPTH_MAX) + &"]".repeat(JSON_DEPTH_MAX);
    assert_eq!(minify_strict(ok.as_bytes()).unwrap(), ok);
    let objects = "{\"a\":".repeat(JSON_DEPTH_MAX) + "1" + &"}".repeat(JSON_DEPTH_MAX);
    assert!(minify_strict(objects.as_bytes()).is_ok());
    let too_deep = "[".repeat(JSON_DEPTH_MAX + 1) + &"]".repeat(JSON_DEPTH_MAX + 1);
    let error = minify_strict(too_deep.as_bytes()).unwrap_err();
    assert!(
        matches!(error, Error::LimitExceeded { what: crate::limits::Limit::JsonDepth, actual: 129, .. }),
        "{error:?}"
    );
    let hostile = "[".repeat(1_000_000);
    assert!(matches!(minify_strict(hostile.as_bytes()), Err(Error::LimitExceeded { .. })));
}

// ---------------------------------------------------------------------------------
// Generated documents: rendered compact (the expected output) and spaced (the input).

#[derive(Clone, Debug)]
enum Doc {
    Literal(&'static str),
    Number(String),
    Text(Vec<Piece>),
    Array(Vec<Doc>),
    Object(Vec<(Vec<Piece>, Doc)>),
}

/// One unit of a string's source text: a plain character or an escape of one.
#[derive(Clone, Debug)]
enum Piece {
    Plain(char),
    Escaped(&'static str),
    Unicode(char),
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        4 => prop_oneof![Just('a'), Just('Z'), Just(' '), Just('é'), Just('🦀'), Just('\u{2028}'), Just('/')]
            .prop_map(Piece::Plain),
        1 => prop_oneof![
            Just("\\\""), Just("\\\\"), Just("\\/"), Just("\\b"), Just("\\f"), Just("\\n"), Just("\\r"), Just("\\t")
        ]
        .prop_map(Piece::Escaped),
        1 => prop_oneof![Just('a'), Just('\u{1}'), Just('é'), Just('\u{ffff}'), Just('🦀'), Just('\u{10ffff}')]
            .prop_map(Piece::Unicode),
    ]
}

fn number() -> impl Strategy<Value = String> {
    let integer = prop_oneof![Just("0".to_owned()), "[1-9][0-9]{0,40}"];
    (proptest::bool::ANY, integer, proptest::option::of("[0-9]{1,20}"), proptest::option::of("[eE][+-]?[0-9]"))
        .prop_map(|(negative, integer, fraction, exponent)| {
            let mut text = if negative { "-".to_owned() } else { String::new() };
            text.push_str(&integer);
            if let Some(fraction) = fraction {
                text.push('.');
                text.push_str(&fraction);
            }
            text.push_str(exponent.as_deref().unwrap_or(""));
            text
        })
}

fn doc() -> impl Strategy<Value = Doc> {
    let leaf = prop_oneof![
        prop_oneof![Just("true"), Just("false"), Just("null")].prop_map(Doc::Literal),
        number().prop_map(Doc::Number),
        proptest::collection::vec(piece(), 0..6).prop_map(Doc::Text),
    ];
    leaf.prop_recursive(6, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Doc::Array),
            proptest::collection::vec((proptest::collection::vec(piece(), 0..4), inner), 0..6)
                .prop_map(|members| Doc::Object(without_duplicate_keys(members))),
        ]
    })
}

fn decoded(pieces: &[Piece]) -> String {
    pieces
        .iter()
        .map(|piece| match piece {
            Piece::Plain(character) | Piece::Unicode(character) => *character,
            Piece::Escaped(escape) => match escape.as_bytes()[1] {
                b'b' => '\u{8}',
                b'f' => '\u{c}',
                b'n' => '\n',
                b'r' => '\r',
                b't' => '\t',
                other => char::from(other),
            },
        })
        .collect()
}

fn without_duplicate_keys(members: Vec<(Vec<Piece>, Doc)>) -> Vec<(Vec<Piece>, Doc)> {
    let mut seen = HashSet::new();
    members.into_iter().filter(|(key, _)| seen.insert(decoded(key))).collect()
}

fn render_string(pieces: &[Piece], out: &mut String) {
    out.push('"');
    for piece in pieces {
        match piece {
            Piece::Plain(character) => out.push(*character),
            Piece::Escaped(escape) => out.push_str(escape),
            Piece::Unicode(character) => {
                let mut units = [0u16; 2];
                for unit in character.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

/// Renders `doc`, putting `space` (cycled) between every two tokens.
fn render(doc: &Doc, space: &mut dyn FnMut() -> &'static str, out: &mut String) {
    match doc {
        Doc::Literal(word) => out.push_str(word),
        Doc::Number(text) => out.push_str(text),
        Doc::Text(pieces) => render_string(pieces, out),
        Doc::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                out.push_str(if index > 0 { "," } else { "" });
                out.push_str(space());
                render(item, space, out);
                out.push_str(space());
            }
            out.push_str(space());
            out.push(']');
        }
        Doc::Object(members) => {
            out.push('{');
            for (index, (key, value)) in members.iter().enumerate() {
                out.push_str(if index > 0 { "," } else { "" });
                out.push_str(space());
                render_string(key, out);
                out.push_str(space());
                out.push(':');
                out.push_str(space());
                render(value, space, out);
            }
            out.push_str(space());
            out.push('}');
        }
    }
}

fn render_with(doc: &Doc, spaces: &[&'static str]) -> String {
    let mut next = 0usize;
    let mut space = move || {
        next += 1;
        spaces[next % spaces.len()]
    };
    let mut out = String::new();
    out.push_str(space());
    render(doc, &mut space, &mut out);
    out.push_str(space());
    out
}

fn whitespace() -> impl Strategy<Value = Vec<&'static str>> {
    proptest::collection::vec(prop_oneof![Just(""), Just(" "), Just("\n"), Just("\t"), Just("\r\n  ")], 1..5)
}

/// The reference verdict: serde_json (which refuses bad grammar, bad UTF-8 and lone
/// surrogates) plus the duplicate-key and depth checks it lacks. A number beyond the
/// double range is valid RFC 8259 JSON that serde_json cannot hold: accepted.
fn reference_accepts(input: &[u8]) -> bool {
    let mut deserializer = serde_json::Deserializer::from_slice(input);
    deserializer.disable_recursion_limit();
    let verdict = Reference { depth: 0 }.deserialize(&mut deserializer).and_then(|()| deserializer.end());
    match verdict {
        Ok(()) => true,
        Err(error) => {
            error.to_string().starts_with("number out of range") && reference_accepts(&without_exponents(input))
        }
    }
}

/// `input` with every exponent's digits cut to one, so serde_json can hold its numbers.
fn without_exponents(input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len());
    let mut in_exponent = false;
    for (index, &byte) in input.iter().enumerate() {
        let after_digit = index > 0 && input[index - 1].is_ascii_digit();
        if matches!(byte, b'e' | b'E') && after_digit && !in_string_at(input, index) {
            in_exponent = true;
            out.push(byte);
            continue;
        }
        if in_exponent && byte.is_ascii_digit() {
            if !out.last().is_some_and(u8::is_ascii_digit) {
                out.push(b'1');
            }
            continue;
        }
        in_exponent = in_exponent && matches!(byte, b'+' | b'-') && matches!(out.last(), Some(b'e' | b'E'));
        out.push(byte);
    }
    out
}

/// Whether byte `index` of `input` lies inside a string (quotes not escaped before it).
fn in_string_at(input: &[u8], index: usize) -> bool {
    let (mut inside, mut escaped) = (false, false);
    for &byte in &input[..index] {
        match (inside, escaped, byte) {
            (true, true, _) => escaped = false,
            (true, false, b'\\') => escaped = true,
            (_, false, b'"') => inside = !inside,
            _ => {}
        }
    }
    inside
}

#[derive(Clone, Copy)]
struct Reference {
    depth: usize,
}

impl Reference {
    fn nested<E: serde::de::Error>(self) -> Result<Reference, E> {
        if self.depth >= JSON_DEPTH_MAX {
            return Err(E::custom("too deep"));
        }
        Ok(Reference { depth: self.depth + 1 })
    }
}

impl<'de> DeserializeSeed<'de> for Reference {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Reference {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let inner = self.nested()?;
        while seq.next_element_seed(inner)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let inner = self.nested()?;
        let mut keys = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !keys.insert(key) {
                return Err(serde::de::Error::custom("duplicate key"));
            }
            map.next_value_seed(inner)?;
        }
        Ok(())
    }
}

/// Small edits that may or may not keep a document valid.
#[derive(Clone, Debug)]
enum Mutation {
    Delete(usize),
    Insert(usize, u8),
    Replace(usize, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let byte = proptest::sample::select(b"{}[]:,\"\\/ 0123456789-+.eEuabdfnrt\x01\xc3\xff".to_vec());
    prop_oneof![
        any::<usize>().prop_map(Mutation::Delete),
        (any::<usize>(), byte.clone()).prop_map(|(at, byte)| Mutation::Insert(at, byte)),
        (any::<usize>(), byte).prop_map(|(at, byte)| Mutation::Replace(at, byte)),
    ]
}

fn mutate(mut bytes: Vec<u8>, mutation: &Mutation) -> Vec<u8> {
    let len = bytes.len().max(1);
    match *mutation {
        Mutation::Delete(at) if !bytes.is_empty() => {
            bytes.remove(at % len);
        }
        Mutation::Insert(at, byte) => bytes.insert(at % (bytes.len() + 1), byte),
        Mutation::Replace(at, byte) if !bytes.is_empty() => bytes[at % len] = byte,
        _ => {}
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Whitespace anywhere between tokens is removed and nothing else changes; the
    /// output is what serde_json reads the input as; minifying again changes nothing.
    #[test]
    fn output_is_the_compact_rendering(doc in doc(), spaces in whitespace()) {
        let compact = render_with(&doc, &[""]);
        let spaced = render_with(&doc, &spaces);
        let minified = minify_strict(spaced.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}: {spaced}")))?;
        prop_assert_eq!(&minified, &compact);
        prop_assert_eq!(minify_strict(minified.as_bytes()).unwrap(), minified.clone());
        let parsed_input: serde_json::Value = serde_json::from_str(&spaced).unwrap();
        let parsed_output: serde_json::Value = serde_json::from_str(&minified).unwrap();
        prop_assert_eq!(parsed_input, parsed_output);
    }

    /// On mutated documents the minifier refuses exactly what the reference refuses,
    /// and what it accepts it still keeps token for token.
    #[test]
    fn verdict_matches_the_reference(doc in doc(), spaces in whitespace(), edits in proptest::collection::vec(mutation(), 1..2)) {
        let input = edits.iter().fold(render_with(&doc, &spaces).into_bytes(), mutate);
        let ours = minify_strict(&input);
        prop_assert_eq!(ours.is_ok(), reference_accepts(&input), "{:?}: {:?}", String::from_utf8_lossy(&input), ours);
        if let Ok(minified) = ours {
            prop_assert_eq!(minify_strict(minified.as_bytes()).unwrap(), minified.clone());
            let _: IgnoredAny = serde_json::from_str(&minified).unwrap();
        }
    }
}
