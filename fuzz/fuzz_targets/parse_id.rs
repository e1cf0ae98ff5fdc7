//! Fuzzes the id parser: never panics; whatever it accepts round-trips, is 1–128 bytes
//! of `[A-Za-z0-9._~-]`, is not `.` or `..`, and encodes to a path segment that decodes
//! back to it and cannot traverse.
#![no_main]

use berth_core::SessionId;
use berth_jsonl::format::{decode_segment, encode_segment};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(text) = std::str::from_utf8(bytes) else { return };
    let Ok(id) = SessionId::parse(text) else { return };
    assert_eq!(id.as_str(), text);
    assert!(!text.is_empty() && text.len() <= 128 && text != "." && text != "..");
    let segment = encode_segment(text);
    assert!(segment.len() <= 130 && !segment.starts_with('.') && !segment.contains('/'));
    assert_eq!(decode_segment(&segment).as_deref(), Some(text));
});
