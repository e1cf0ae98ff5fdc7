//! Fuzzes the event record codec, both directions:
//! - arbitrary bytes as an event record line (`decode_event_line`) and as an event's
//!   JSON (`Event` deserialization) never panic;
//! - whatever decodes re-encodes (`encode_event_line`, `to_canonical_json`) to a line
//!   that decodes to the same event and epoch, byte-stable on a second round (the
//!   record's `data` is kept exactly as stored, R-C9).
#![no_main]

use berth_core::{Epoch, Event};
use berth_jsonl::format::{decode_event_line, encode_event_line};
use libfuzzer_sys::fuzz_target;

fn round_trips(event: &Event, epoch: Epoch) {
    let line = encode_event_line(event, epoch);
    let body = line.strip_suffix(b"\n").unwrap_or(&line);
    let (decoded, decoded_epoch) = decode_event_line(body).expect("an encoded record decodes");
    assert_eq!(&decoded, event);
    assert_eq!(decoded_epoch, epoch);
    assert_eq!(encode_event_line(&decoded, decoded_epoch), line, "encoding is stable");
    let canonical = event.to_canonical_json();
    let reparsed: Event = serde_json::from_str(&canonical).expect("canonical JSON parses");
    assert_eq!(&reparsed, event);
    assert_eq!(reparsed.to_canonical_json(), canonical);
}

fuzz_target!(|bytes: &[u8]| {
    let line = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    if let Ok((event, epoch)) = decode_event_line(line) {
        round_trips(&event, epoch);
    }
    if let Ok(event) = serde_json::from_slice::<Event>(bytes) {
        round_trips(&event, Epoch(bytes.len() as u64));
    }
});
