//! Exact data clauses (R-C9): an event's `data` comes back as it was submitted minus
//! insignificant whitespace — key order, number lexemes and string escapes byte for byte
//! — from the log, after a restart, in the export and after an import; strict
//! validation still refuses what it refused before.

use super::fixtures::*;
use super::ServiceBackend;
use berth_core::json::from_strict_slice;
use berth_core::{Error, JsonText};
use berth_service::{AppendRequest, NewEvent};
use serde_json::value::RawValue;

/// An append body as a client sends it: unsorted keys, a 30-digit integer, `1.0`, `1e2`,
/// `-0`, the escapes `\u00e9` and `\/`, and whitespace everywhere.
pub const EXACT_SUBMITTED_BODY: &str = "{ \"run\": \"r1\", \"events\": [ { \"type\": \"myapp/exact\", \"data\":\n  { \"b\" : 1 ,\n    \"a\" : [ 1.0, 1e2, 123456789012345678901234567890, -0 ],\t\"s\" : \"\\u00e9\\/\" } } ] }";

/// What every backend must store and return for the body's `data`.
pub const EXACT_DATA: &str = r#"{"b":1,"a":[1.0,1e2,123456789012345678901234567890,-0],"s":"\u00e9\/"}"#;

/// The event of `EXACT_SUBMITTED_BODY`, decoded as the HTTP server decodes a body.
pub fn exact_event() -> NewEvent {
    let request: AppendRequest = from_strict_slice(EXACT_SUBMITTED_BODY.as_bytes()).expect("a strict body");
    request.events.into_iter().next().expect("one event")
}

/// R-C9: the submitted data is stored and returned exactly (minus whitespace) by `read`,
/// after a restart, in the export's event line, and after export → delete → import; a
/// retry is a duplicate only when its data has the same bytes (reordered keys are other
/// data: `SeqConflict`).
pub async fn appended_data_comes_back_byte_exact(b: &dyn ServiceBackend) {
    let service = b.service();
    create(&service, &owner(), "exact", serial(DAY_MS, DAY_MS)).await;
    attach(&service, &owner(), "exact", "r1").await;
    let submitted = exact_event();
    assert_eq!(submitted.data.as_str(), EXACT_DATA, "decoding keeps the text");
    append(&service, &owner(), "exact", Some("r1"), vec![submitted.clone()]).await;
    let read = service.read(&owner(), &sid("exact"), 0, None).await.unwrap();
    assert_eq!(read[0].data.as_str(), EXACT_DATA, "{}: read", b.name());

    let retry = AppendRequest {
        memory: Vec::new(),
        run: Some(run("r1")),
        expected_seq: Some(0),
        events: vec![submitted],
        idempotency_key: None,
    };
    assert!(service.append(&owner(), &sid("exact"), retry).await.unwrap().duplicate, "same bytes: a duplicate");
    let sorted = JsonText::parse(r#"{"a":[1.0,1e2,123456789012345678901234567890,-0],"b":1,"s":"\u00e9\/"}"#).unwrap();
    let reordered = NewEvent { data: sorted, ..exact_event() };
    let conflict = AppendRequest {
        memory: Vec::new(),
        run: Some(run("r1")),
        expected_seq: Some(0),
        events: vec![reordered],
        idempotency_key: None,
    };
    assert_eq!(label(&service.append(&owner(), &sid("exact"), conflict).await), "seq_conflict");

    drop(service); // its write handles would keep the writer lease
    b.restart().await;
    let service = b.service();
    let read = service.read(&owner(), &sid("exact"), 0, None).await.unwrap();
    assert_eq!(read[0].data.as_str(), EXACT_DATA, "{}: after a restart", b.name());
    let export = service.export(&owner(), &sid("exact")).await.unwrap();
    let text = String::from_utf8(export.clone()).unwrap();
    let line = text.lines().nth(1).expect("the event line");
    assert!(line.contains(&format!(",\"data\":{EXACT_DATA}")), "{}: export line {line}", b.name());
    service.delete(&admin(TENANT_A), &sid("exact"), None).await.unwrap();
    service.import(&owner(), &export).await.unwrap();
    let read = service.read(&owner(), &sid("exact"), 0, None).await.unwrap();
    assert_eq!(read[0].data.as_str(), EXACT_DATA, "{}: after an import", b.name());
    assert_eq!(service.export(&owner(), &sid("exact")).await.unwrap(), export);
}

/// R-C9's strict half: duplicate keys (also spelled through escapes), lone surrogates
/// (in values and keys), nesting past the limit and invalid UTF-8 are refused where a
/// body is decoded (`Invalid`, depth `LimitExceeded`); data smuggled past the decoder
/// is refused by `append` (`Invalid`); nothing is stored.
pub async fn invalid_data_is_refused_and_nothing_is_stored(b: &dyn ServiceBackend) {
    let service = b.service();
    create(&service, &owner(), "strict", serial(DAY_MS, DAY_MS)).await;
    attach(&service, &owner(), "strict", "r1").await;
    let body = |data: &str| format!(r#"{{"run":"r1","events":[{{"type":"myapp/x","data":{data}}}]}}"#).into_bytes();
    let deep = "[".repeat(129) + &"]".repeat(129);
    let mut bad_utf8 = body(r#""x""#);
    let quote = bad_utf8.iter().rposition(|byte| *byte == b'x').unwrap();
    bad_utf8[quote] = 0xff;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("duplicate key", body(r#"{"a":1,"a":2}"#), "invalid"),
        ("duplicate key through an escape", body(r#"{"a":1,"\u0061":2}"#), "invalid"),
        ("lone leading surrogate", body(r#""\ud800""#), "invalid"),
        ("lone trailing surrogate in a key", body(r#"{"\udc00":1}"#), "invalid"),
        ("surrogates out of order", body(r#""\udc00\ud800""#), "invalid"),
        ("depth 129", body(&deep), "limit_exceeded"),
        ("invalid UTF-8", bad_utf8, "invalid"),
    ];
    for (what, bytes, code) in cases {
        let decoded = from_strict_slice::<AppendRequest>(&bytes);
        assert_eq!(label(&decoded), code, "{what}");
    }
    let smuggled = |text: &str| {
        let data = JsonText::from_trusted_raw(RawValue::from_string(text.to_owned()).unwrap());
        AppendRequest {
            memory: Vec::new(),
            run: Some(run("r1")),
            expected_seq: None,
            events: vec![NewEvent { data, ..exact_event() }],
            idempotency_key: None,
        }
    };
    for text in [r#"{"a":1,"\u0061":2}"#, r#""\ud800""#, r#"{ "b": 1 }"#] {
        let outcome = service.append(&owner(), &sid("strict"), smuggled(text)).await;
        assert!(matches!(outcome, Err(Error::Invalid { .. })), "{}: {text} gave {outcome:?}", b.name());
    }
    assert_eq!(stored_log(&service, TENANT_A, "strict").await.unwrap_or_default(), []);
}

/// The version-0 export of `rich` (`fixtures/v0/`, written by the build before exact
/// data) and the export ZIP of its family.
pub const V0_EXPORT: &[u8] = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/v0/export-rich.jsonl"));
pub const V0_EXPORT_ZIP: &[u8] =
    include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/v0/export-rich-family.zip"));

/// R-C2 with R-C9: a version-0 export (canonical data) imports unchanged — its session
/// keeps header version 0, its events come back byte for byte, and exporting it again
/// gives the same canonical envelope with only the export version raised; the version-0
/// ZIP imports its whole family.
pub async fn version_0_exports_import_unchanged(b: &dyn ServiceBackend) {
    let service = b.service();
    let v0_text = std::str::from_utf8(V0_EXPORT).unwrap();
    let v0_event_lines: Vec<&str> = v0_text.lines().skip(1).collect();
    let record = service.import(&owner(), V0_EXPORT).await.expect("import a version-0 export");
    assert_eq!(record.header.version, 0, "{}: the session keeps its version", b.name());
    let events = service.read(&owner(), &sid("rich"), 0, None).await.unwrap();
    let lines: Vec<String> = events.iter().map(|event| event.to_canonical_json()).collect();
    assert_eq!(lines, v0_event_lines, "{}: the same events, byte for byte", b.name());
    let again = String::from_utf8(service.export(&owner(), &sid("rich")).await.unwrap()).unwrap();
    assert_eq!(again.lines().skip(1).collect::<Vec<_>>(), v0_event_lines, "{}: event lines", b.name());
    let v0_envelope = v0_text.lines().next().unwrap().strip_suffix(",\"version\":0}").expect("a v0 export");
    let envelope = format!("{v0_envelope},\"version\":{}}}", berth_service::EXPORT_VERSION);
    assert_eq!(again.lines().next().unwrap(), envelope, "{}: the same canonical envelope", b.name());

    service.delete(&admin(TENANT_A), &sid("rich"), None).await.unwrap();
    let family = service.import_zip(&owner(), V0_EXPORT_ZIP).await.expect("import a version-0 ZIP");
    assert_eq!(family.len(), super::export::FAMILY.len());
    assert!(family.iter().all(|record| record.header.version == 0));
    let events = service.read(&owner(), &sid("rich"), 0, None).await.unwrap();
    assert_eq!(events.iter().map(|event| event.to_canonical_json()).collect::<Vec<_>>(), v0_event_lines);
}
