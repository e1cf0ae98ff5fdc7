//! The decoding read on the committed LangGraph fixtures' bytes (threads the drop-in
//! stored, exported: `scripts/dropins/langgraph/fixtures/`), and on hostile bytes.

use super::*;
use serde_json::json;

const WEATHER: &str = "weather.jsonl";
const MARKERS: &str = "markers.jsonl";

/// The data of event `seq` of an exported fixture session.
fn data(fixture: &str, seq: u64) -> Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/dropins/langgraph/fixtures").join(fixture);
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|line| line.get("seq").and_then(Value::as_u64) == Some(seq))
        .and_then(|line| line.get("data").cloned())
        .unwrap()
}

#[test]
fn an_input_checkpoint_reads_its_versions_updated_channels_time_and_step() {
    let summary = checkpoint_summary(&data(WEATHER, 1)).unwrap();
    assert!(summary.readable);
    assert_eq!((summary.ns.as_str(), summary.id.as_str()), ("", "1f1f1e72-3d96-6544-bfff-4a9d0ffaaaa0"));
    assert_eq!(summary.parent, None);
    assert_eq!(summary.ts.as_deref(), Some("2026-12-07T02:37:26.638512+00:00"));
    assert_eq!((summary.step, summary.source.as_deref()), (Some(-1), Some("input")));
    assert_eq!(
        summary.channel_versions,
        [("__start__".to_owned(), "00000000000000000000000000000001.0.9318877392763468".to_owned())]
    );
    assert_eq!(summary.updated_channels, Some(vec!["__start__".to_owned()]));
    assert!(summary.at.is_empty());
}

#[test]
fn a_loop_checkpoint_reads_every_channel_and_where_older_versions_are() {
    let summary = checkpoint_summary(&data(WEATHER, 13)).unwrap();
    assert_eq!(summary.parent.as_deref(), Some("1f1f1e72-3da0-6182-8000-067b0146d168"));
    assert_eq!((summary.step, summary.source.as_deref()), (Some(1), Some("loop")));
    let channels: Vec<&str> = summary.channel_versions.iter().map(|(channel, _)| channel.as_str()).collect();
    assert_eq!(channels, ["__start__", "messages", "branch:to:agent", "branch:to:tools"]);
    assert_eq!(summary.version_of("messages"), Some("00000000000000000000000000000003.0.029187199160858324"));
    assert_eq!(summary.updated_channels, Some(vec!["branch:to:tools".to_owned(), "messages".to_owned()]));
    assert_eq!(summary.at_seq("__start__"), Some(5));
    assert_eq!(summary.at_seq("messages"), None, "in the checkpoint's own batch");
}

#[test]
fn blobs_name_their_type_and_size() {
    let input = blob_summary(&data(WEATHER, 0));
    let dict = ValueShape { name: "dict".into(), len: Some(1), item_types: Vec::new() };
    assert_eq!(input, BlobSummary::Value { serde: "msgpack".into(), bytes: 212, shape: Some(dict) });
    assert_eq!(blob_summary(&data(WEATHER, 5)), BlobSummary::Empty);
    let none = ValueShape { name: "None".into(), len: None, item_types: Vec::new() };
    assert_eq!(
        blob_summary(&data(WEATHER, 7)),
        BlobSummary::Value { serde: "null".into(), bytes: 0, shape: Some(none) }
    );
    let human = "langchain_core.messages.human.HumanMessage".to_owned();
    assert_eq!(
        blob_summary(&data(WEATHER, 6)),
        BlobSummary::List { items: 1, bytes: 201, item_types: vec![human], base_seq: None }
    );
    let ai = "langchain_core.messages.ai.AIMessage".to_owned();
    assert_eq!(
        blob_summary(&data(WEATHER, 10)),
        BlobSummary::List { items: 1, bytes: 283, item_types: vec![ai], base_seq: Some(6) },
        "a suffix names the version it extends"
    );
    assert_eq!(short_name("langchain_core.messages.ai.AIMessage"), "AIMessage");
}

#[test]
fn a_split_value_is_read_from_its_parts_joined() {
    let (first, second) = (data(MARKERS, 0), data(MARKERS, 1));
    assert_eq!(blob_summary(&first), BlobSummary::Part { part: 0, of: 2 });
    let BlobSummary::Value { serde, bytes, shape } = joined_parts(&[&first, &second]) else { panic!("not joined") };
    assert_eq!(serde, "msgpack");
    assert!(bytes > 4096, "{bytes}");
    assert_eq!(shape.map(|shape| shape.name), Some("dict".to_owned()));
    assert_eq!(joined_parts(&[&first]), BlobSummary::Unreadable, "a part alone is not a value");
}

fn typed(bytes: &[u8]) -> Value {
    json!({"ns": "", "c": "x", "v": 1, "t": "msgpack", "b": base64::engine::general_purpose::STANDARD.encode(bytes)})
}

#[test]
fn hostile_or_foreign_bytes_are_unreadable_never_a_panic() {
    // 10,000 nested one-element arrays: past the nesting bound.
    let mut deep = vec![0x91u8; 10_000];
    deep.push(0xc0);
    assert!(matches!(blob_summary(&typed(&deep)), BlobSummary::Value { shape: None, .. }));
    // An array header claiming 2^32-1 items with none after it.
    assert!(matches!(blob_summary(&typed(&[0xdd, 0xff, 0xff, 0xff, 0xff])), BlobSummary::Value { shape: None, .. }));
    // Trailing bytes after a value.
    assert!(matches!(blob_summary(&typed(&[0xc0, 0xc0])), BlobSummary::Value { shape: None, .. }));
    // An extension that is not LangGraph's `[module, class, …]`.
    let shape = msgpack_shape(&[0xd4, 0x07, 0x00]).unwrap();
    assert_eq!(shape.name, "extension type 7");
    assert_eq!(blob_summary(&json!({"t": "msgpack", "b": "not base64!"})), BlobSummary::Unreadable);
    assert_eq!(blob_summary(&json!("a string")), BlobSummary::Unreadable);
    let foreign = json!({"ns": "", "id": "x", "cp": ["pickle", "gAR9lC4="], "md": ["json", "e30="]});
    let summary = checkpoint_summary(&foreign).unwrap();
    assert!(!summary.readable && summary.channel_versions.is_empty() && summary.step.is_none());
    assert_eq!(checkpoint_summary(&json!({"cp": []})), None);
}
