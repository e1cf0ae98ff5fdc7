//! The events benchmarks write: ~1 KiB chat-like JSON, as an agent would log.

use berth_core::{Event, Timestamp};
use serde_json::json;

/// An `assistant/message` of about 1 KiB (encoded).
pub fn chat_event(seq: u64) -> Event {
    let content = "The build failed because the linker could not find the symbol; here is what I will try next: \
                   first I will re-run the failing step with verbose output, then compare the flags with the last \
                   green build, and finally bisect the dependency update that landed yesterday. "
        .repeat(6);
    Event::new(
        seq,
        "assistant/message",
        Timestamp(1_790_000_000_000 + seq),
        json!({"content": &content[..860], "model": "bench-model", "usage": {"input_tokens": 1200, "output_tokens": 210}}),
    )
    .expect("valid bench event")
}

/// The same event as one JSON line with an epoch and checksum field, as long as a berth
/// record (what the file references write).
pub fn chat_line(seq: u64) -> Vec<u8> {
    let mut line = chat_event(seq).to_canonical_json().into_bytes();
    line.pop(); // the envelope's closing brace
    line.extend_from_slice(b",\"epoch\":1,\"crc\":\"00000000\"}");
    line.push(b'\n');
    line
}
