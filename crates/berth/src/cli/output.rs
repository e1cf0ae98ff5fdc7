//! How the CLI prints: plain text for people, JSON (`--json`) for scripts.

use berth_catalog::SessionRecord;
use berth_core::Error;
use serde::Serialize;

pub fn print_error(error: &Error, json: bool) {
    if json {
        let class = error.class();
        let body = serde_json::json!({"error": {
            "code": class.code(), "message": error.to_string(), "retryable": class.retryable()
        }});
        eprintln!("{body}");
    } else {
        eprintln!("berth: {error}");
    }
}

pub fn print_json<T: Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(error) => eprintln!("berth: cannot encode output: {error}"),
    }
}

pub fn print_value<T: Serialize>(value: &T, json: bool, text: impl FnOnce(&T) -> String) {
    if json {
        print_json(value);
    } else {
        println!("{}", text(value));
    }
}

pub fn session_line(record: &SessionRecord) -> String {
    format!(
        "{:<40} {:<8} rev {:<4} events {:<6} runs {} last_activity {}{}",
        record.header.id.as_str(),
        record.status.as_str(),
        record.revision.0,
        record.event_count,
        record.runs.len(),
        record.last_activity.0,
        record.title.as_deref().map(|title| format!("  {title:?}")).unwrap_or_default()
    )
}

pub fn session_detail(record: &SessionRecord) -> String {
    serde_json::to_string_pretty(record).unwrap_or_default()
}
