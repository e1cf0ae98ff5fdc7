//! What people read of a session in a terminal: `berth sessions cat --transcript` (one
//! entry per event — messages as their text, whether `content` is a string or typed
//! parts, through `berth_core::content`; tool calls and results; other events as their
//! type and cut JSON) and the preview `berth sessions ls` shows for an untitled
//! conversation. Text from the log is never written to the terminal raw: control
//! characters other than newline and tab are shown escaped (`\u{1b}`), so a stored
//! escape sequence cannot drive the terminal.

use super::target::SessionTarget;
use berth_catalog::SessionRecord;
use berth_core::content::{content_text, first_user_message_preview, PREVIEW_SCAN_EVENTS};
use berth_core::vocabulary as vocab;
use berth_core::Event;
use serde_json::Value;

/// Bytes of a message's or a result's text shown per event (the rest: `sessions cat`).
pub const TRANSCRIPT_TEXT_BYTES_MAX: usize = 16 * 1024;
/// Bytes of JSON shown for arguments and events the transcript has no words for.
pub const TRANSCRIPT_JSON_BYTES_MAX: usize = 200;

/// One event as transcript lines (continuation lines indented), ending in a newline.
pub fn transcript_entry(event: &Event) -> String {
    let data = event.data.to_value();
    let kind = event.event_type.as_str();
    let mut head = format!("#{} {}", event.seq.get(), kind);
    if let Some(run) = &event.run {
        head.push_str(&format!(" ({run})"));
    }
    if event.ignorable {
        head.push_str(" (ignorable)");
    }
    let body = match kind {
        vocab::USER_MESSAGE | vocab::SYSTEM_MESSAGE | vocab::ASSISTANT_MESSAGE => message(&data),
        vocab::TOOL_CALL => {
            format!("{} {}: {}", text_field(&data, "name"), text_field(&data, "call_id"), arguments(&data))
        }
        vocab::TOOL_RESULT => {
            let failed = if data.get("is_error").and_then(Value::as_bool) == Some(true) { " (error)" } else { "" };
            format!("{}{failed}: {}", text_field(&data, "call_id"), text(data.get("content")))
        }
        vocab::TURN_START | vocab::TURN_END | vocab::STEP_START | vocab::STEP_END => marker(&data),
        vocab::CHECKPOINT => format!("({} bytes)", event.data.len_bytes()),
        vocab::MODEL_CALL => berth_core::model_call::summary(&data),
        _ => compact(&data),
    };
    let mut entry = if body.is_empty() { head } else { format!("{head}: {body}") };
    entry = safe_for_terminal(&entry).replace('\n', "\n    ");
    entry.push('\n');
    entry
}

/// A message's text, then the tool calls it requested, one a line.
fn message(data: &Value) -> String {
    let mut lines = vec![text(data.get("content"))];
    for call in data.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
        lines.push(format!("→ {} {}: {}", text_field(call, "name"), text_field(call, "call_id"), arguments(call)));
    }
    lines.retain(|line| !line.is_empty());
    lines.join("\n")
}

fn text(content: Option<&Value>) -> String {
    let shown = content_text(content.unwrap_or(&Value::Null), TRANSCRIPT_TEXT_BYTES_MAX);
    if shown.cut {
        format!("{}… (cut at {TRANSCRIPT_TEXT_BYTES_MAX} bytes)", shown.text)
    } else {
        shown.text
    }
}

/// A call's arguments: a JSON object, or a string (OpenAI's are JSON text), cut.
fn arguments(call: &Value) -> String {
    match call.get("arguments") {
        Some(Value::String(text)) => cut(text.clone(), TRANSCRIPT_JSON_BYTES_MAX),
        Some(other) => compact(other),
        None => String::new(),
    }
}

fn text_field<'a>(data: &'a Value, field: &str) -> &'a str {
    data.get(field).and_then(Value::as_str).unwrap_or("?")
}

fn marker(data: &Value) -> String {
    let mut parts = Vec::new();
    for field in ["turn", "step"] {
        if let Some(number) = data.get(field).and_then(Value::as_u64) {
            parts.push(format!("{field} {number}"));
        }
    }
    if let Some(reason) = data.get("reason").and_then(Value::as_str) {
        parts.push(reason.to_owned());
    }
    parts.join(", ")
}

/// Compact JSON, cut at `TRANSCRIPT_JSON_BYTES_MAX`.
fn compact(value: &Value) -> String {
    cut(value.to_string(), TRANSCRIPT_JSON_BYTES_MAX)
}

/// `text` cut at `bytes_max` on a character boundary, `…` marking the cut.
fn cut(mut text: String, bytes_max: usize) -> String {
    if text.len() > bytes_max {
        let mut end = bytes_max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// `text` with every control character but newline and tab escaped.
fn safe_for_terminal(text: &str) -> String {
    let mut safe = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '\n' | '\t' => safe.push(character),
            // C0, DEL, C1 (CSI is U+009B), and the bidirectional overrides.
            _ if character.is_control() || ('\u{202a}'..='\u{202e}').contains(&character) => {
                safe.extend(character.escape_unicode())
            }
            _ => safe.push(character),
        }
    }
    safe
}

/// The previews of a listing's records (`None` where a record has a title, is blank,
/// or shows no user message among its log's first `PREVIEW_SCAN_EVENTS` events): one
/// short read per untitled conversation on the page, never a whole log. A read that
/// fails leaves that preview out.
pub async fn previews(target: &dyn SessionTarget, records: &[SessionRecord]) -> Vec<Option<String>> {
    let mut previews = Vec::with_capacity(records.len());
    for record in records {
        let preview = if record.wants_preview() {
            match target.read(&record.header.id, 0, Some(PREVIEW_SCAN_EVENTS)).await {
                Ok(events) => first_user_message_preview(&events),
                Err(error) => {
                    tracing::debug!(session = %record.header.id, %error, "no preview");
                    None
                }
            }
        } else {
            None
        };
        previews.push(preview);
    }
    previews
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::Timestamp;
    use serde_json::json;

    fn entry(seq: u64, kind: &str, data: Value) -> String {
        transcript_entry(&Event::new(seq, kind, Timestamp(0), data).unwrap())
    }

    #[test]
    fn messages_read_as_text_in_both_shapes() {
        assert_eq!(entry(1, "user/message", json!({"content": "hi"})), "#1 user/message: hi\n");
        assert_eq!(
            entry(
                2,
                "user/message",
                json!({"content": [{"type": "input_text", "text": "q"}, {"type": "input_image", "image_url": "data:,"}]})
            ),
            "#2 user/message: q\n    [image]\n"
        );
        assert_eq!(
            entry(
                3,
                "assistant/message",
                json!({"content": [{"type": "output_text", "text": "hi", "annotations": []}]})
            ),
            "#3 assistant/message: hi\n"
        );
        assert_eq!(
            entry(
                4,
                "assistant/message",
                json!({"content": "", "tool_calls": [{"call_id": "c1", "name": "ls", "arguments": {"path": "."}}]})
            ),
            "#4 assistant/message: → ls c1: {\"path\":\".\"}\n"
        );
        assert_eq!(
            entry(5, "assistant/message", json!({"content": [{"type": "refusal", "refusal": "no"}]})),
            "#5 assistant/message: [refusal] no\n"
        );
    }

    #[test]
    fn tools_markers_and_other_events() {
        assert_eq!(
            entry(0, "tool/call", json!({"call_id": "c1", "name": "ls", "arguments": {"path": "."}})),
            "#0 tool/call: ls c1: {\"path\":\".\"}\n"
        );
        assert_eq!(
            entry(
                1,
                "tool/result",
                json!({"call_id": "c1", "is_error": true, "content": [{"type": "input_text", "text": "boom"}]})
            ),
            "#1 tool/result: c1 (error): boom\n"
        );
        assert_eq!(
            entry(5, "tool/call", json!({"call_id": "c2", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"})),
            "#5 tool/call: get_weather c2: {\"city\":\"Paris\"}\n"
        );
        assert_eq!(entry(2, "turn/end", json!({"turn": 0, "reason": "completed"})), "#2 turn/end: turn 0, completed\n");
        assert_eq!(entry(3, "checkpoint", json!({"state": {}})), "#3 checkpoint: (12 bytes)\n");
        assert_eq!(
            entry(
                6,
                "model/call",
                json!({"model": "gpt-4o", "input_tokens": 42, "output_tokens": 9, "latency_ms": 2.051})
            ),
            "#6 model/call: gpt-4o · 42 in / 9 out · 2.051 ms\n"
        );
        let long = entry(4, "acme/blob", json!({"blob": "x".repeat(10_000)}));
        assert!(
            long.starts_with("#4 acme/blob: {\"blob\":\"xxx") && long.ends_with("…\n") && long.len() < 300,
            "{long}"
        );
    }

    #[test]
    fn stored_escape_sequences_never_reach_the_terminal() {
        let shown = entry(0, "user/message", json!({"content": "a\u{1b}[2Jb\u{9b}c\u{202e}d\ttab\nnext"}));
        assert_eq!(shown, "#0 user/message: a\\u{1b}[2Jb\\u{9b}c\\u{202e}d\ttab\n    next\n");
    }

    #[test]
    fn a_huge_message_is_cut() {
        let shown = entry(0, "user/message", json!({"content": "é".repeat(100_000)}));
        assert!(shown.len() < TRANSCRIPT_TEXT_BYTES_MAX + 100 && shown.contains("… (cut at 16384 bytes)"));
    }
}
