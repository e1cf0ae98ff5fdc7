//! Unit tests of the record codec and the scanner (pure: bytes in, verdict out).

use super::*;
use berth_core::{Scope, SessionId, TenantId, UserId};
use proptest::prelude::*;
use serde_json::json;

fn header() -> SessionHeader {
    SessionHeader::new(
        SessionId::parse("s1").unwrap(),
        Scope { tenant: TenantId::parse("t").unwrap(), user: UserId::parse("u").unwrap(), project: None },
        Timestamp(1000),
    )
}

fn event(seq: u64, text: &str) -> Event {
    Event::new(seq, "user/message", Timestamp(seq + 1), json!({ "content": text })).unwrap()
}

fn log_of(events: usize) -> (Vec<u8>, Vec<usize>) {
    let mut bytes = encode_header_line(&header(), Epoch(1));
    let mut ends = vec![bytes.len()];
    for seq in 0..events {
        bytes.extend(encode_event_line(&event(seq as u64, &"é\"\\\n".repeat(seq % 5)), Epoch(1)));
        ends.push(bytes.len());
    }
    (bytes, ends)
}

#[test]
fn event_line_has_the_documented_shape_and_round_trips() {
    let event = Event::new(0, "turn/start", Timestamp(1), json!({"turn": 0})).unwrap();
    let line = encode_event_line(&event, Epoch(1));
    let text = std::str::from_utf8(&line).unwrap();
    let body = r#"{"seq":0,"type":"turn/start","time":1,"data":{"turn":0},"epoch":1"#;
    assert_eq!(text, format!("{body},\"crc\":\"{:08x}\"}}\n", crc32c::crc32c(body.as_bytes())));
    let (back, epoch) = decode_event_line(&line[..line.len() - 1]).unwrap();
    assert_eq!((back, epoch), (event, Epoch(1)));
    // Any JSON tool can read it.
    let value: serde_json::Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(value["type"], "turn/start");
}

#[test]
fn header_line_round_trips_and_is_plain_json() {
    let line = encode_header_line(&header(), Epoch(3));
    assert!(line.starts_with(b"{\"berth\":\"session\",\"version\":1,\"id\":\"s1\""));
    let record = decode_header_line(&line[..line.len() - 1]).unwrap();
    assert_eq!(record, HeaderRecord { header: header(), epoch: Epoch(3), zero_tail: false });
    let value: serde_json::Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(value["epoch"], 3);
}

#[test]
fn version_0_header_lines_are_still_read() {
    let mut old = header();
    old.version = 0;
    let line = encode_header_line(&old, Epoch(2));
    assert!(line.starts_with(b"{\"berth\":\"session\",\"version\":0,"));
    let record = decode_header_line(&line[..line.len() - 1]).expect("a version-0 log is read");
    assert_eq!(record.header.version, 0, "and keeps its version");
}

#[test]
fn event_records_keep_the_exact_data_text() {
    let data = r#"{"b":1,"a":[1.0,1e2,123456789012345678901234567890,-0],"s":"\u00e9\/"}"#;
    let mut event = Event::new(0, "myapp/x", Timestamp(1), serde_json::json!(null)).unwrap();
    event.data = berth_core::JsonText::parse(data).unwrap();
    let line = encode_event_line(&event, Epoch(1));
    let text = std::str::from_utf8(&line).unwrap();
    assert!(text.contains(&format!(",\"data\":{data},\"epoch\":1,")), "{text}");
    let (back, _) = decode_event_line(&line[..line.len() - 1]).unwrap();
    assert_eq!(back.data.as_str(), data);
    assert_eq!(peek_event_line(&line[..line.len() - 1]).map(|peek| peek.seq), Ok(0));
}

#[test]
fn newer_header_version_is_unsupported_even_with_another_checksum_scheme() {
    let line = br#"{"berth":"session","version":7,"id":"s1","whatever":"new","sha256":"abc"}"#;
    match decode_header_line(line) {
        Err(LineFault::Unsupported(reason)) => assert!(reason.contains("newer berth"), "{reason}"),
        other => panic!("{other:?}"),
    }
    let mut log = line.to_vec();
    log.push(b'\n');
    assert!(matches!(scan(&log).status, ScanStatus::Unsupported { seq: None, .. }));
}

#[test]
fn segments_are_injective_and_traversal_proof() {
    for (id, encoded) in [("abc", "abc"), (".hidden", "%2Ehidden"), ("...", "%2E.."), ("a~b-c_d.e", "a~b-c_d.e")] {
        assert_eq!(encode_segment(id), encoded);
        assert_eq!(decode_segment(encoded).as_deref(), Some(id));
    }
    assert_eq!(encode_segment("../x"), "%2E.%2Fx");
    assert_eq!(encode_segment("a/b%"), "a%2Fb%25");
    assert!(encode_segment(&".".repeat(128)).len() <= 130);
    assert_eq!(decode_segment("%2e.."), None, "only the encoder's spelling decodes");
    assert_eq!(decode_segment(".x"), None);
}

#[test]
fn clean_log_scans_clean() {
    let (bytes, ends) = log_of(10);
    let outcome = scan(&bytes);
    assert_eq!(outcome.status, ScanStatus::Clean);
    assert_eq!(outcome.events, 10);
    assert_eq!(outcome.committed_len, bytes.len() as u64);
    assert_eq!(outcome.header_len, ends[0] as u64);
    assert_eq!(outcome.last_epoch, Epoch(1));
}

#[test]
fn partial_zero_and_garbage_tails_are_torn() {
    let (bytes, ends) = log_of(5);
    for tail in [&b"{\"seq\":5,\"ty"[..], &[0u8; 100][..], b"garbage\nmore {\"seq\":5} garbage\n", b"\n"] {
        let mut damaged = bytes.clone();
        damaged.extend_from_slice(tail);
        let outcome = scan(&damaged);
        assert_eq!(outcome.status, ScanStatus::TornTail { torn_bytes: tail.len() as u64 }, "{tail:?}");
        assert_eq!(outcome.events, 5);
        assert_eq!(outcome.committed_len, bytes.len() as u64);
    }
    // The last record zeroed in place (delayed allocation).
    let mut zeroed = bytes.clone();
    zeroed[ends[4]..].fill(0);
    let outcome = scan(&zeroed);
    assert_eq!(outcome.events, 4);
    assert!(matches!(outcome.status, ScanStatus::TornTail { .. }));
}

#[test]
fn damage_followed_by_a_valid_record_is_corruption() {
    let (bytes, ends) = log_of(6);
    // Flip a bit inside record 2's data.
    let mut flipped = bytes.clone();
    flipped[ends[2] + 40] ^= 0x01;
    let outcome = scan(&flipped);
    assert_eq!(outcome.events, 2);
    match outcome.status {
        ScanStatus::Corrupt { seq, offset, .. } => assert_eq!((seq, offset), (Some(2), ends[2] as u64)),
        other => panic!("{other:?}"),
    }
    // Record 4's newline flipped: it merges with record 5, which is still found.
    let mut merged = bytes.clone();
    merged[ends[5] - 1] ^= 0x20;
    assert!(matches!(scan(&merged).status, ScanStatus::Corrupt { seq: Some(4), .. }));
}

#[test]
fn seq_gaps_duplicates_and_epoch_regressions_are_corruption() {
    let (bytes, ends) = log_of(4);
    let mut gap = bytes[..ends[1]].to_vec();
    gap.extend_from_slice(&bytes[ends[2]..]);
    assert!(matches!(scan(&gap).status, ScanStatus::Corrupt { seq: Some(1), .. }));
    // A duplicated last record is corruption even with nothing after it.
    let mut duplicate = bytes.clone();
    duplicate.extend_from_slice(&bytes[ends[3]..ends[4]]);
    assert!(matches!(scan(&duplicate).status, ScanStatus::Corrupt { seq: Some(4), .. }));
    let mut regressed = encode_header_line(&header(), Epoch(2));
    regressed.extend(encode_event_line(&event(0, "a"), Epoch(2)));
    regressed.extend(encode_event_line(&event(1, "b"), Epoch(1)));
    assert!(matches!(scan(&regressed).status, ScanStatus::Corrupt { seq: Some(1), .. }));
}

#[test]
fn bad_or_missing_header_is_corruption() {
    assert!(matches!(scan(b"").status, ScanStatus::Corrupt { seq: None, .. }));
    let (bytes, ends) = log_of(2);
    assert!(matches!(scan(&bytes[..ends[0] - 1]).status, ScanStatus::Corrupt { seq: None, .. }));
    let mut flipped = bytes.clone();
    flipped[20] ^= 0x02;
    assert!(matches!(scan(&flipped).status, ScanStatus::Corrupt { offset: 0, seq: None, .. }));
    let not_berth = seal(br#"{"type":"session","version":0"#.to_vec());
    assert!(matches!(scan(&not_berth).status, ScanStatus::Corrupt { .. }));
}

#[test]
fn unknown_reserved_types_are_unsupported_unless_ignorable() {
    let mut bytes = encode_header_line(&header(), Epoch(1));
    let unknown = Event::new(0, "turn/fork", Timestamp(1), json!({})).unwrap();
    bytes.extend(encode_event_line(&unknown.clone().with_ignorable(true), Epoch(1)));
    assert_eq!(scan(&bytes).status, ScanStatus::Clean);
    let mut unknown = unknown;
    unknown.seq = berth_core::Seq(1);
    bytes.extend(encode_event_line(&unknown, Epoch(1)));
    assert!(matches!(scan(&bytes).status, ScanStatus::Unsupported { seq: Some(1), .. }));
}

#[test]
fn epoch_record_round_trips() {
    let record = encode_epoch_record(Epoch(42));
    assert_eq!(decode_epoch_record(&record), Some(Epoch(42)));
    let mut damaged = record.clone();
    damaged[5] ^= 1;
    assert_eq!(decode_epoch_record(&damaged), None);
    assert_eq!(decode_epoch_record(b""), None);
}

#[test]
fn line_cursor_bounds_its_buffer_and_reports_overlong_lines() {
    let mut bytes = b"short\n".to_vec();
    bytes.extend(std::iter::repeat_n(b'x', LINE_BYTES_MAX + 10));
    bytes.extend_from_slice(b"\nafter\n");
    let mut cursor = LineCursor::new(0, bytes.len() as u64);
    assert_eq!(cursor.next_line(&bytes[..]).unwrap(), NextLine::Line { offset: 0, bytes: b"short" });
    let overlong = cursor.next_line(&bytes[..]).unwrap();
    assert!(matches!(overlong, NextLine::Unterminated { offset: 6 }), "an overlong line is never a record");
}

/// Checks the scanner's contract on arbitrary bytes: no panic, a committed prefix that
/// re-scans clean with the same events, and torn bytes that add up.
fn check_scan_properties(bytes: &[u8]) {
    let outcome = scan(bytes);
    assert!(outcome.committed_len <= bytes.len() as u64);
    if let ScanStatus::TornTail { torn_bytes } = outcome.status {
        assert_eq!(outcome.committed_len + torn_bytes, bytes.len() as u64);
    }
    if outcome.header.is_some() {
        let prefix = &bytes[..outcome.committed_len as usize];
        let again = scan(prefix);
        assert_eq!(again.status, ScanStatus::Clean);
        assert_eq!(again.events, outcome.events);
    }
}

fn mutated_log() -> impl Strategy<Value = Vec<u8>> {
    (1usize..12, proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 0..6), 0usize..64)
        .prop_map(|(events, edits, garbage)| {
            let (mut bytes, _) = log_of(events);
            for (index, byte, kind) in edits {
                let at = index.index(bytes.len());
                match kind {
                    0 => bytes[at] ^= 1 << (byte % 8),
                    1 => bytes[at] = byte,
                    2 => bytes.truncate(at),
                    _ => bytes.insert(at, b'\n'),
                }
                if bytes.is_empty() {
                    break;
                }
            }
            bytes.extend(std::iter::repeat_n(b'{', garbage % 7).chain((0..garbage).map(|i| (i * 37) as u8)));
            bytes
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn scanner_never_panics_on_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        check_scan_properties(&bytes);
    }

    #[test]
    fn scanner_never_panics_on_mutated_logs(bytes in mutated_log()) {
        check_scan_properties(&bytes);
    }
}

// ---------------------------------------------------------------------------------------
// Preallocated logs (log format version 2)

fn preallocated_log_of(events: usize) -> Vec<u8> {
    let mut bytes = encode_header_line_for(&header(), Epoch(1), true);
    for seq in 0..events {
        bytes.extend(encode_event_line(&event(seq as u64, "x"), Epoch(1)));
    }
    bytes
}

#[test]
fn a_preallocated_log_is_version_2_and_holds_a_version_1_header() {
    let line = encode_header_line_for(&header(), Epoch(3), true);
    assert!(line.starts_with(b"{\"berth\":\"session\",\"version\":2,\"id\":\"s1\""));
    let record = decode_header_line(&line[..line.len() - 1]).unwrap();
    assert_eq!(record, HeaderRecord { header: header(), epoch: Epoch(3), zero_tail: true });
    assert_eq!(record.header.version, SESSION_FORMAT_VERSION);
    // A version-0 header is never preallocated (its version says what its data is).
    let mut old = header();
    old.version = 0;
    let line = encode_header_line_for(&old, Epoch(1), true);
    assert!(line.starts_with(b"{\"berth\":\"session\",\"version\":0,"));
    assert!(!decode_header_line(&line[..line.len() - 1]).unwrap().zero_tail);
}

/// The version gate: a build that reads log versions up to 1 refuses a preallocated
/// log before its checksum, as "written by a newer berth" — the gate every earlier
/// build runs (`version > LOG_FORMAT_VERSION`, which was 1) — and this build refuses
/// the next version the same way.
#[test]
fn the_version_gate_refuses_a_preallocated_log_in_an_older_reader_and_a_newer_log_here() {
    let line = encode_header_line_for(&header(), Epoch(1), true);
    let probe: HeaderProbe<'_> = serde_json::from_slice(&line[..line.len() - 1]).unwrap();
    assert_eq!(probe.berth.as_deref(), Some(HEADER_MAGIC));
    assert!(probe.version.unwrap() > 1, "an older build's gate (version > 1) refuses it");
    assert!(berth_core::header::check_version(2, None).is_err(), "and the session version check would too");
    let mut newer = preallocated_log_of(1);
    newer[..line.len()].copy_from_slice(
        &String::from_utf8(line.clone()).unwrap().replace("\"version\":2", "\"version\":3").into_bytes(),
    );
    match scan(&newer).status {
        ScanStatus::Unsupported { reason, .. } => assert!(reason.contains("newer berth"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_zero_tail_is_clean_in_a_preallocated_log_and_torn_in_a_classic_one() {
    let data = preallocated_log_of(3);
    let events_end = data.len() as u64;
    for zeros in [1usize, 4095, 70_000] {
        let mut bytes = data.clone();
        bytes.resize(data.len() + zeros, 0);
        let outcome = scan(&bytes);
        assert_eq!(outcome.status, ScanStatus::Clean, "{zeros} zeros");
        assert_eq!((outcome.events, outcome.committed_len, outcome.zero_tail), (3, events_end, zeros as u64));
        let (classic, _) = log_of(3);
        let mut classic = classic;
        let classic_len = classic.len() as u64;
        classic.resize(classic.len() + zeros, 0);
        let outcome = scan(&classic);
        assert_eq!(outcome.status, ScanStatus::TornTail { torn_bytes: zeros as u64 });
        assert_eq!((outcome.committed_len, outcome.zero_tail), (classic_len, 0));
    }
    // A header alone, then zeros.
    let mut bytes = preallocated_log_of(0);
    let header_len = bytes.len() as u64;
    bytes.resize(bytes.len() + 100, 0);
    let outcome = scan(&bytes);
    assert_eq!((outcome.status, outcome.committed_len, outcome.zero_tail), (ScanStatus::Clean, header_len, 100));
}

#[test]
fn a_torn_append_into_preallocated_space_is_a_torn_tail_that_includes_the_zeros() {
    let data = preallocated_log_of(3);
    let next = encode_event_line(&event(3, "torn"), Epoch(1));
    for cut in [1, next.len() / 2, next.len() - 1] {
        let mut bytes = data.clone();
        bytes.extend_from_slice(&next[..cut]);
        bytes.resize(data.len() + 8192, 0);
        let outcome = scan(&bytes);
        assert_eq!(outcome.status, ScanStatus::TornTail { torn_bytes: 8192 }, "cut at {cut}");
        assert_eq!((outcome.events, outcome.committed_len, outcome.zero_tail), (3, data.len() as u64, 0));
    }
    // Garbage among the zeros (a torn zero fill) is a torn tail too, never data.
    let mut bytes = data.clone();
    bytes.resize(data.len() + 8192, 0);
    bytes[data.len() + 5000] = b'x';
    assert_eq!(scan(&bytes).status, ScanStatus::TornTail { torn_bytes: 8192 });
    // A valid record after zeros is corruption, as after any damage.
    let mut bytes = data.clone();
    bytes.resize(data.len() + 512, 0);
    bytes.extend_from_slice(&encode_event_line(&event(4, "later"), Epoch(1)));
    bytes.resize(bytes.len() + 512, 0);
    assert!(matches!(scan(&bytes).status, ScanStatus::Corrupt { .. }), "{:?}", scan(&bytes).status);
}
