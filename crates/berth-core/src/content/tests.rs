//! Table tests of `content_text` over the shapes berth's writers store, and of the
//! listing preview made with it.

use super::*;
use crate::clock::Timestamp;
use serde_json::json;

fn text(content: Value) -> String {
    content_text(&content, 1 << 20).text
}

#[test]
fn every_known_shape_reads_as_text_and_placeholders() {
    let table = [
        // Plain strings and nothing.
        (json!("hi"), "hi"),
        (json!(""), ""),
        (json!(null), ""),
        (json!([]), ""),
        (json!({}), ""),
        (json!("two\nlines"), "two\nlines"),
        // OpenAI Responses: output_text with annotations, input_text beside an image.
        (json!([{"type": "output_text", "text": "hi", "annotations": []}]), "hi"),
        (
            json!([{"type": "input_text", "text": "q"}, {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]),
            "q\n[image]",
        ),
        (json!([{"type": "input_image", "file_id": "file-1", "detail": "auto"}]), "[image]"),
        (
            json!([{"type": "input_file", "filename": "report.pdf", "file_data": "data:application/pdf;base64,AAAA"}]),
            "[file: report.pdf]",
        ),
        (json!([{"type": "input_file", "file_id": "file-2"}]), "[file]"),
        (json!([{"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]), "[audio]"),
        (json!([{"type": "refusal", "refusal": "I can't help with that."}]), "[refusal] I can't help with that."),
        (json!([{"type": "refusal"}]), "[refusal]"),
        (json!([{"type": "output_text", "text": "a"}, {"type": "output_text", "text": "b"}]), "a\nb"),
        // OpenAI Chat Completions.
        (
            json!([{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}}]),
            "look\n[image]",
        ),
        (json!([{"type": "file", "file": {"filename": "notes.txt", "file_data": "AAAA"}}]), "[file: notes.txt]"),
        // The Assistants API's text object.
        (json!([{"type": "text", "text": {"value": "v", "annotations": []}}]), "v"),
        // Anthropic.
        (
            json!([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]),
            "[image]",
        ),
        (json!([{"type": "document", "title": "Spec", "source": {}}]), "[file: Spec]"),
        (json!([{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}]), "[tool_use: get_weather]"),
        (
            json!([{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "sunny"}]}]),
            "sunny",
        ),
        // Gemini / Google ADK parts and a whole Content.
        (json!([{"text": "hello"}, {"inline_data": {"mime_type": "image/jpeg", "data": "AAAA"}}]), "hello\n[image]"),
        (
            json!({"role": "user", "parts": [{"text": "hey"}, {"inlineData": {"mimeType": "audio/mp3", "data": "AAAA"}}]}),
            "hey\n[audio]",
        ),
        (
            json!([{"file_data": {"file_uri": "gs://bucket/docs/plan.pdf", "mime_type": "application/pdf"}}]),
            "[file: plan.pdf]",
        ),
        (json!([{"inline_data": {"mime_type": "application/pdf", "data": "AAAA"}}]), "[file: application/pdf]"),
        (
            json!([{"file_data": {"file_uri": "gs://b/v.mp4", "mime_type": "video/mp4", "display_name": "clip"}}]),
            "[video: clip]",
        ),
        (json!([{"function_call": {"name": "lookup", "args": {}}}]), "[function call: lookup]"),
        (json!([{"functionResponse": {"name": "lookup", "response": {}}}]), "[function response: lookup]"),
        // A single part, not in a list.
        (json!({"type": "output_text", "text": "alone"}), "alone"),
        // Lists of strings (LangChain allows them) and scalars.
        (json!(["a", "b"]), "a\nb"),
        (json!(42), "42"),
        (json!(true), "true"),
        (json!([1, null, "x"]), "1\nx"),
    ];
    for (content, expected) in table {
        assert_eq!(text(content.clone()), expected, "{content}");
    }
}

#[test]
fn unknown_and_odd_parts_still_say_something() {
    let table = [
        // An unknown type with text: its text; with nested content: that; else its type.
        (json!([{"type": "reasoning_text", "text": "thinking"}]), "thinking"),
        (
            json!([{"type": "wrapper", "content": [{"type": "wrapper", "content": [{"type": "input_text", "text": "deep"}]}]}]),
            "deep",
        ),
        (json!([{"type": "mystery", "data": 1}]), "[mystery]"),
        (json!([{"type": "mystery\nline", "name": "n\u{1b}[31m"}]), "[mystery line: n[31m]"),
        // Non-string text.
        (json!([{"type": "text", "text": 7}]), "7"),
        (json!([{"type": "text", "text": null}]), ""),
        (json!([{"type": "text"}]), ""),
        (json!([{"type": "input_text", "text": ["x", {"type": "output_text", "text": "y"}]}]), "x\ny"),
        // An object that is no part at all: its JSON.
        (json!({"files": ["a", "b"]}), r#"{"files":["a","b"]}"#),
        (json!([[["nested"]]]), "nested"),
    ];
    for (content, expected) in table {
        assert_eq!(text(content.clone()), expected, "{content}");
    }
}

#[test]
fn a_long_name_in_a_placeholder_is_cut() {
    let name = "n".repeat(500);
    let shown = text(json!([{"type": "input_file", "filename": name}]));
    assert_eq!(shown, format!("[file: {}…]", "n".repeat(LABEL_CHARS_MAX)));
}

#[test]
fn nesting_past_the_bound_is_one_placeholder() {
    let mut content = json!({"type": "output_text", "text": "bottom"});
    for _ in 0..100 {
        content = json!([{"type": "wrapper", "content": content}]);
    }
    assert_eq!(text(content), "[…]");
    let mut shallow = json!("bottom");
    for _ in 0..CONTENT_DEPTH_MAX {
        shallow = json!([shallow]);
    }
    assert_eq!(text(shallow), "bottom");
}

#[test]
fn output_is_bounded_and_cut_on_a_character_boundary() {
    let huge = "é".repeat(300_000); // 600,000 bytes
    for bytes_max in [0, 1, 2, 3, 1001, 4096] {
        let shown = content_text(&json!(huge), bytes_max);
        assert!(shown.cut, "{bytes_max}");
        assert!(shown.text.len() <= bytes_max && shown.text.len() + 1 >= bytes_max, "{bytes_max}");
        assert!(shown.text.chars().all(|c| c == 'é'));
    }
    let many: Vec<Value> = (0..100_000).map(|i| json!({"type": "input_text", "text": format!("part {i}")})).collect();
    let shown = content_text(&Value::Array(many), 100);
    assert!(shown.cut);
    assert_eq!(shown.text.len(), 100);
    assert!(shown.text.starts_with("part 0\npart 1\n"));
    let exact = content_text(&json!("abc"), 3);
    assert_eq!((exact.text.as_str(), exact.cut), ("abc", false));
}

#[test]
fn one_line_collapses_whitespace_and_cuts_by_characters() {
    assert_eq!(one_line("  a\n\n b\tc  ", 80, false), "a b c");
    assert_eq!(one_line("abcdef", 3, false), "abc…");
    assert_eq!(one_line("ab cd", 3, false), "ab…");
    assert_eq!(one_line("日本語のテキスト", 3, false), "日本語…");
    assert_eq!(one_line("abc", 3, false), "abc");
    assert_eq!(one_line("abc", 3, true), "abc…");
    assert_eq!(one_line("a\u{7}b\u{1b}c", 80, false), "abc");
    assert_eq!(one_line(" \n ", 80, true), "");
}

fn event(seq: u64, event_type: &str, data: Value) -> Event {
    Event::new(seq, event_type, Timestamp(0), data).unwrap()
}

#[test]
fn a_preview_is_the_first_user_message_that_reads_as_something() {
    let events = [
        event(0, "system/message", json!({"content": "you are helpful"})),
        event(1, "turn/start", json!({"turn": 0})),
        event(2, "user/message", json!({"content": "   "})),
        event(
            3,
            "user/message",
            json!({"content": [{"type": "input_text", "text": "what is\nin this"}, {"type": "input_image", "image_url": "data:,"}]}),
        ),
        event(4, "user/message", json!({"content": "later"})),
    ];
    assert_eq!(first_user_message_preview(&events).as_deref(), Some("what is in this [image]"));
    assert_eq!(first_user_message_preview(&events[..3]), None);
    assert_eq!(first_user_message_preview(&[]), None);
    let old = [event(0, "user/message", json!({"content": "plain string content"}))];
    assert_eq!(first_user_message_preview(&old).as_deref(), Some("plain string content"));
}

#[test]
fn a_preview_of_a_long_message_is_one_bounded_line() {
    let long = format!("{}\n{}", "word ".repeat(10_000), "ü".repeat(500_000));
    let preview = first_user_message_preview(&[event(0, "user/message", json!({"content": long}))]).unwrap();
    assert!(preview.chars().count() <= PREVIEW_CHARS_MAX + 1, "{preview}");
    assert!(preview.starts_with("word word ") && preview.ends_with("word…"), "{preview}");
    let unbroken = "ü".repeat(500_000);
    let preview = first_user_message_preview(&[event(0, "user/message", json!({"content": unbroken}))]).unwrap();
    assert_eq!(preview, format!("{}…", "ü".repeat(PREVIEW_CHARS_MAX)));
}
