//! Fuzzes the JSONL recovery scanner: it must never panic, the committed prefix it
//! reports must re-scan clean with the same events, and a torn tail must account for
//! every byte after that prefix.
#![no_main]

use berth_jsonl::format::{scan, ScanStatus};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let outcome = scan(bytes);
    assert!(outcome.committed_len <= bytes.len() as u64);
    if let ScanStatus::TornTail { torn_bytes } = outcome.status {
        assert_eq!(outcome.committed_len + torn_bytes, bytes.len() as u64);
    }
    if outcome.header.is_some() {
        let again = scan(&bytes[..outcome.committed_len as usize]);
        assert_eq!(again.status, ScanStatus::Clean);
        assert_eq!(again.events, outcome.events);
    }
});
