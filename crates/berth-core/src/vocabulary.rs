//! The reserved event vocabulary (R-C3): which types berth itself understands, the
//! `data` fields it relies on, and the fail-closed rules for types it does not know.

use crate::error::{Error, Result};
use crate::event::Event;
use crate::limits::EVENT_BYTES_MAX;
use serde_json::Value;

pub const TURN_START: &str = "turn/start";
pub const TURN_END: &str = "turn/end";
pub const STEP_START: &str = "step/start";
pub const STEP_END: &str = "step/end";
pub const USER_MESSAGE: &str = "user/message";
pub const SYSTEM_MESSAGE: &str = "system/message";
pub const ASSISTANT_MESSAGE: &str = "assistant/message";
pub const TOOL_CALL: &str = "tool/call";
pub const TOOL_RESULT: &str = "tool/result";
pub const CHECKPOINT: &str = "checkpoint";
pub const SESSION_END_SEED: &str = "session/end-seed";
/// The memory writes an append carried (scoped memory): written by the service only,
/// never accepted from a caller, always `ignorable` (readers that do not reconstruct
/// memory skip it). `{"writes": [{namespace, key, value, checked_revision, ttl_ms?,
/// bound_to?}]}`.
pub const SESSION_MEMORY: &str = "session/memory";
/// One LLM call (issue 54): `{model, provider?, input_tokens?, output_tokens?,
/// cached_tokens?, latency_ms?, finish_reason?, error?, response_id?, …}`, written
/// `ignorable` at the end of the call (its `time`). Reserved as this one exact type, not
/// as a namespace: every other `model/*` type stays a free extension type.
pub const MODEL_CALL: &str = "model/call";

/// Every type berth knows: the reserved namespaces' and the reserved exact types'.
pub const KNOWN_EVENT_TYPES: [&str; 13] = [
    TURN_START,
    TURN_END,
    STEP_START,
    STEP_END,
    USER_MESSAGE,
    SYSTEM_MESSAGE,
    ASSISTANT_MESSAGE,
    TOOL_CALL,
    TOOL_RESULT,
    CHECKPOINT,
    SESSION_END_SEED,
    SESSION_MEMORY,
    MODEL_CALL,
];

/// Namespaces reserved for berth's own vocabulary (`checkpoint` is reserved as a whole).
pub const RESERVED_NAMESPACES: [&str; 7] = ["turn/", "step/", "tool/", "user/", "assistant/", "system/", "session/"];

/// Types reserved one by one, outside the reserved namespaces (their namespace's other
/// types stay free: `model/usage` is an extension type, `model/call` is berth's).
pub const RESERVED_TYPES: [&str; 1] = [MODEL_CALL];

/// The `turn/end` reasons berth defines; any other non-empty string is an extension.
pub const TURN_END_REASONS: [&str; 6] = ["completed", "aborted", "error", "max_tokens", "interrupted", "max-tokens"];

pub fn is_known(event_type: &str) -> bool {
    KNOWN_EVENT_TYPES.contains(&event_type)
}

pub fn is_reserved(event_type: &str) -> bool {
    event_type == CHECKPOINT
        || RESERVED_TYPES.contains(&event_type)
        || event_type.starts_with("checkpoint/")
        || RESERVED_NAMESPACES.iter().any(|namespace| event_type.starts_with(namespace))
}

/// Does this event make a session non-blank (a conversation happened)? Decided by the
/// type alone: a message counts whatever its `content` holds (a string or typed parts),
/// so the listing never has to read an event's data to know.
pub fn is_conversation_event(event_type: &str) -> bool {
    matches!(event_type, USER_MESSAGE | ASSISTANT_MESSAGE | SYSTEM_MESSAGE | TOOL_RESULT | TOOL_CALL)
}

/// Append-side validation: size, reserved types' `data` shapes, and no unknown type in a
/// reserved namespace. Types outside the reserved namespaces are accepted verbatim.
pub fn validate_for_append(event: &Event) -> Result<()> {
    let encoded_bytes = event.size_estimate_bytes();
    if encoded_bytes > EVENT_BYTES_MAX {
        return Err(Error::LimitExceeded {
            what: crate::limits::Limit::EventBytes,
            limit: EVENT_BYTES_MAX as u64,
            actual: encoded_bytes as u64,
        });
    }
    let event_type = event.event_type.as_str();
    if !is_reserved(event_type) {
        return Ok(());
    }
    if !is_known(event_type) {
        return Err(Error::invalid(
            "event type",
            format!("{event_type:?} is in a reserved namespace but is not a berth event type"),
        ));
    }
    if accepted_shallow(event_type, event.data.as_str()) {
        return Ok(());
    }
    validate_reserved_data(event_type, &event.data.to_value())
        .map_err(|reason| Error::invalid("event data", format!("{event_type} at seq {}: {reason}", event.seq)))
}

/// The rules of `validate_reserved_data` that need only the top-level fields, checked on
/// borrowed raw values without building the data's tree (which cost more than the rest
/// of a bulk append's CPU: issue 17, W2). `true` only when the data is certainly valid;
/// anything else (another type, a rule on nested values, a key with an escape, a
/// failure) goes to the full check, so errors and their messages are unchanged.
fn accepted_shallow(event_type: &str, data: &str) -> bool {
    use serde_json::value::RawValue;
    let Ok(fields) = serde_json::from_str::<std::collections::HashMap<&str, &RawValue>>(data) else { return false };
    let present = |field: &str| fields.contains_key(field);
    let absent_or_null = |field: &str| fields.get(field).is_none_or(|raw| raw.get() == "null");
    let string = |field: &str| fields.get(field).is_some_and(|raw| raw.get().starts_with('"') && raw.get() != "\"\"");
    match event_type {
        USER_MESSAGE | SYSTEM_MESSAGE => present("content"),
        ASSISTANT_MESSAGE => present("content") && absent_or_null("tool_calls"),
        TOOL_CALL => string("call_id") && string("name") && present("arguments"),
        TOOL_RESULT => string("call_id") && present("content") && !present("is_error") && absent_or_null("error"),
        CHECKPOINT => present("state"),
        MODEL_CALL => {
            let count = |field: &str| {
                fields.get(field).is_none_or(|raw| raw.get() == "null" || raw.get().parse::<u64>().is_ok())
            };
            let latency = fields.get("latency_ms").is_none_or(|raw| {
                let text = raw.get();
                text == "null"
                    || (text.starts_with(|c: char| c.is_ascii_digit())
                        && text.parse::<f64>().is_ok_and(|latency_ms| latency_ms.is_finite()))
            });
            let text_or_null =
                |field: &str| fields.get(field).is_none_or(|raw| raw.get() == "null" || raw.get().starts_with('"'));
            string("model")
                && ["input_tokens", "output_tokens", "cached_tokens"].into_iter().all(count)
                && latency
                && ["provider", "finish_reason", "response_id"].into_iter().all(text_or_null)
                && absent_or_null("error")
        }
        _ => false,
    }
}

/// Read-side rule: a stored type in a reserved namespace that this build does not know
/// was written by a newer berth; unless the writer marked it ignorable, refuse.
pub fn check_stored(event: &Event) -> Result<()> {
    let event_type = event.event_type.as_str();
    if is_reserved(event_type) && !is_known(event_type) && !event.ignorable {
        return Err(unsupported_type(event));
    }
    Ok(())
}

/// Rule for readers that reconstruct state (turn repair): every type must be known, or
/// marked ignorable by its writer.
pub fn check_reconstructable(event: &Event) -> Result<()> {
    if is_known(event.event_type.as_str()) || event.ignorable {
        return Ok(());
    }
    Err(unsupported_type(event))
}

fn unsupported_type(event: &Event) -> Error {
    Error::FormatUnsupported {
        reason: format!(
            "event type {:?} at seq {} is unknown to this build and not marked ignorable (likely written by a newer berth or another application)",
            event.event_type.as_str(),
            event.seq
        ),
        location: None,
    }
}

fn validate_reserved_data(event_type: &str, data: &Value) -> std::result::Result<(), String> {
    let object = data.as_object().ok_or("data must be an object")?;
    let integer = |field: &str| -> std::result::Result<(), String> {
        match object.get(field) {
            Some(value) if value.as_u64().is_some() => Ok(()),
            _ => Err(format!("{field} must be a non-negative integer")),
        }
    };
    let string = |field: &str| -> std::result::Result<(), String> {
        match object.get(field) {
            Some(Value::String(text)) if !text.is_empty() => Ok(()),
            _ => Err(format!("{field} must be a non-empty string")),
        }
    };
    let present = |field: &str| -> std::result::Result<(), String> {
        object.get(field).map(|_| ()).ok_or_else(|| format!("{field} is required"))
    };
    match event_type {
        TURN_START => integer("turn"),
        TURN_END => integer("turn").and_then(|_| string("reason")),
        STEP_START | STEP_END => integer("turn").and_then(|_| integer("step")),
        USER_MESSAGE | SYSTEM_MESSAGE => present("content"),
        ASSISTANT_MESSAGE => {
            present("content")?;
            match object.get("tool_calls") {
                None | Some(Value::Null) => Ok(()),
                Some(Value::Array(calls)) => calls.iter().try_for_each(validate_requested_call),
                Some(_) => Err("tool_calls must be an array".into()),
            }
        }
        TOOL_CALL => string("call_id").and_then(|_| string("name")).and_then(|_| present("arguments")),
        TOOL_RESULT => {
            string("call_id")?;
            present("content")?;
            if let Some(flag) = object.get("is_error") {
                flag.as_bool().ok_or("is_error must be a boolean")?;
            }
            match object.get("error") {
                None | Some(Value::Null) => Ok(()),
                Some(Value::Object(error)) => match (error.get("code"), error.get("name")) {
                    (Some(Value::String(_)), Some(Value::String(_))) => Ok(()),
                    _ => Err("error must be {code, name} strings".into()),
                },
                Some(_) => Err("error must be an object".into()),
            }
        }
        CHECKPOINT => present("state"),
        SESSION_MEMORY => match object.get("writes") {
            Some(Value::Array(writes)) if writes.iter().all(Value::is_object) => Ok(()),
            _ => Err("writes must be an array of objects".into()),
        },
        MODEL_CALL => validate_model_call(object),
        _ => Ok(()), // session/end-seed: no required fields
    }
}

/// `model/call`: `model` a non-empty string; the counts non-negative integers, the
/// latency a non-negative number, the texts strings, `error` `{code, name, message?}` —
/// each optional field also absent or `null`. Other fields are the writer's.
fn validate_model_call(object: &serde_json::Map<String, Value>) -> std::result::Result<(), String> {
    match object.get("model") {
        Some(Value::String(model)) if !model.is_empty() => {}
        _ => return Err("model must be a non-empty string".into()),
    }
    for field in ["provider", "finish_reason", "response_id"] {
        if !matches!(object.get(field), None | Some(Value::Null | Value::String(_))) {
            return Err(format!("{field} must be a string or null"));
        }
    }
    for field in ["input_tokens", "output_tokens", "cached_tokens"] {
        match object.get(field) {
            None | Some(Value::Null) => {}
            Some(value) if value.as_u64().is_some() => {}
            Some(_) => return Err(format!("{field} must be a non-negative integer or null")),
        }
    }
    match object.get("latency_ms") {
        None | Some(Value::Null) => {}
        Some(value) if value.as_f64().is_some_and(|latency_ms| latency_ms >= 0.0) => {}
        Some(_) => return Err("latency_ms must be a non-negative number or null".into()),
    }
    match object.get("error") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(error)) => {
            let code_and_name =
                matches!((error.get("code"), error.get("name")), (Some(Value::String(_)), Some(Value::String(_))));
            let message = matches!(error.get("message"), None | Some(Value::String(_)));
            if code_and_name && message {
                Ok(())
            } else {
                Err("error must be {code, name} strings, with an optional message string".into())
            }
        }
        Some(_) => Err("error must be an object or null".into()),
    }
}

fn validate_requested_call(call: &Value) -> std::result::Result<(), String> {
    let call = call.as_object().ok_or("each tool call must be an object")?;
    match (call.get("call_id"), call.get("name"), call.get("arguments")) {
        (Some(Value::String(id)), Some(Value::String(_)), Some(_)) if !id.is_empty() => Ok(()),
        _ => Err("each tool call needs call_id, name and arguments".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Timestamp;
    use serde_json::json;

    fn event(event_type: &str, data: Value) -> Event {
        Event::new(0, event_type, Timestamp(0), data).unwrap()
    }

    #[test]
    fn reserved_shapes_are_checked() {
        let good = [
            (TURN_START, json!({"turn": 0})),
            (TURN_END, json!({"turn": 0, "reason": "completed"})),
            (TURN_END, json!({"turn": 0, "reason": "plugin/custom"})),
            (STEP_START, json!({"turn": 0, "step": 1})),
            (USER_MESSAGE, json!({"content": "hi"})),
            // Content as typed parts (OpenAI Responses, Gemini): any JSON is content.
            (
                USER_MESSAGE,
                json!({"content": [{"type": "input_text", "text": "q"}, {"type": "input_image", "image_url": "x"}]}),
            ),
            (ASSISTANT_MESSAGE, json!({"content": [{"type": "output_text", "text": "hi", "annotations": []}]})),
            (SYSTEM_MESSAGE, json!({"content": {"role": "system", "parts": [{"text": "be brief"}]}})),
            (ASSISTANT_MESSAGE, json!({"content": [], "tool_calls": [{"call_id": "c", "name": "n", "arguments": {}}]})),
            (TOOL_CALL, json!({"call_id": "c", "name": "n", "arguments": "{}"})),
            (
                TOOL_RESULT,
                json!({"call_id": "c", "content": "x", "is_error": true, "error": {"code": "E", "name": "N"}}),
            ),
            (CHECKPOINT, json!({"state": {"k": 1}})),
            (SESSION_END_SEED, json!({})),
            (MODEL_CALL, json!({"model": "unknown"})),
            (
                MODEL_CALL,
                json!({"model": "gpt-4o", "provider": "openai", "input_tokens": 12, "output_tokens": 3,
                    "cached_tokens": 0, "latency_ms": 812.5, "finish_reason": "stop", "response_id": "r-1",
                    "error": null, "trace": {"span": "s"}}),
            ),
            (
                MODEL_CALL,
                json!({"model": "m", "provider": null, "input_tokens": null, "output_tokens": null,
                    "cached_tokens": null, "latency_ms": null, "finish_reason": null, "response_id": null}),
            ),
            (
                MODEL_CALL,
                json!({"model": "m", "latency_ms": 0, "error": {"code": "rate_limited", "name": "RateLimitError"}}),
            ),
            (MODEL_CALL, json!({"model": "m", "error": {"code": "E", "name": "N", "message": "too many requests"}})),
        ];
        for (event_type, data) in good {
            assert!(validate_for_append(&event(event_type, data.clone())).is_ok(), "{event_type} {data}");
        }
        let bad = [
            (TURN_START, json!({})),
            (TURN_START, json!({"turn": -1})),
            (TURN_END, json!({"turn": 0})),
            (TURN_END, json!({"turn": 0, "reason": ""})),
            (STEP_END, json!({"turn": 0})),
            (USER_MESSAGE, json!({})),
            (USER_MESSAGE, json!("hi")),
            (ASSISTANT_MESSAGE, json!({"content": "", "tool_calls": [{"name": "n"}]})),
            (TOOL_CALL, json!({"call_id": "c", "name": "n"})),
            (TOOL_RESULT, json!({"content": "x"})),
            (TOOL_RESULT, json!({"call_id": "c", "content": "x", "error": {"code": 1}})),
            (CHECKPOINT, json!({})),
            ("turn/pause", json!({})),
            (MODEL_CALL, json!({})),
            (MODEL_CALL, json!({"model": ""})),
            (MODEL_CALL, json!({"model": 4})),
            (MODEL_CALL, json!(["model"])),
            (MODEL_CALL, json!({"model": "m", "provider": 1})),
            (MODEL_CALL, json!({"model": "m", "input_tokens": -1})),
            (MODEL_CALL, json!({"model": "m", "output_tokens": 1.5})),
            (MODEL_CALL, json!({"model": "m", "cached_tokens": "3"})),
            (MODEL_CALL, json!({"model": "m", "latency_ms": -0.5})),
            (MODEL_CALL, json!({"model": "m", "latency_ms": "1"})),
            (MODEL_CALL, json!({"model": "m", "finish_reason": ["stop"]})),
            (MODEL_CALL, json!({"model": "m", "response_id": 7})),
            (MODEL_CALL, json!({"model": "m", "error": "boom"})),
            (MODEL_CALL, json!({"model": "m", "error": {"code": "E"}})),
            (MODEL_CALL, json!({"model": "m", "error": {"code": "E", "name": "N", "message": 1}})),
        ];
        for (event_type, data) in bad {
            assert_eq!(
                validate_for_append(&event(event_type, data.clone())).unwrap_err().code(),
                "invalid",
                "{event_type} {data}"
            );
        }
    }

    /// The shallow check accepts nothing the full check refuses: every combination of a
    /// small pool of values for the fields its rules read (absent included), with and
    /// without a key holding an escape. And it does accept the common shapes.
    #[test]
    fn shallow_check_never_accepts_what_the_full_check_refuses() {
        let pool = [
            None,
            Some("null"),
            Some(r#""""#),
            Some(r#""x""#),
            Some("1"),
            Some("1.5"),
            Some("-1"),
            Some("[]"),
            Some("{}"),
            Some("true"),
        ];
        let rules: [(&str, &[&str]); 8] = [
            (USER_MESSAGE, &["content"]),
            (SYSTEM_MESSAGE, &["content"]),
            (ASSISTANT_MESSAGE, &["content", "tool_calls"]),
            (TOOL_CALL, &["call_id", "name", "arguments"]),
            (TOOL_RESULT, &["call_id", "content", "is_error", "error"]),
            (CHECKPOINT, &["state"]),
            (MODEL_CALL, &["model", "input_tokens", "latency_ms", "provider", "error"]),
            (MODEL_CALL, &["model", "output_tokens", "cached_tokens", "finish_reason", "response_id"]),
        ];
        let mut accepted = 0;
        for (event_type, fields) in rules {
            for mut n in 0..pool.len().pow(fields.len() as u32) {
                let mut members = Vec::new();
                for field in fields {
                    if let Some(value) = pool[n % pool.len()] {
                        members.push(format!(r#""{field}":{value}"#));
                    }
                    n /= pool.len();
                }
                let mut escaped = vec![r#""\u0063ontent":1"#.to_owned()];
                escaped.extend(members.iter().cloned());
                for text in [format!("{{{}}}", members.join(",")), format!("{{{}}}", escaped.join(","))] {
                    let data: Value = serde_json::from_str(&text).unwrap();
                    if accepted_shallow(event_type, &text) {
                        accepted += 1;
                        assert_eq!(validate_reserved_data(event_type, &data), Ok(()), "{event_type} {text}");
                    }
                }
            }
        }
        assert!(accepted >= 50, "the common shapes take the shallow path ({accepted})");
        assert!(accepted_shallow(ASSISTANT_MESSAGE, r#"{"content":"hi","model":"m"}"#));
        assert!(!accepted_shallow(ASSISTANT_MESSAGE, r#"{"\u0063ontent":"hi"}"#), "escaped keys go the full way");
        let model_call =
            r#"{"model":"gpt-4o","provider":"openai","input_tokens":12,"output_tokens":3,"latency_ms":812.5}"#;
        assert!(accepted_shallow(MODEL_CALL, model_call), "a model call takes the shallow path");
    }

    /// `model/call` is one reserved type, not a namespace: the other `model/*` types stay
    /// extension types, stored and read back as before (old logs may hold them).
    #[test]
    fn model_call_is_reserved_alone_and_is_not_conversation() {
        assert!(is_known(MODEL_CALL) && is_reserved(MODEL_CALL));
        assert!(!is_reserved("model/other") && !is_reserved("model/call/x") && !is_reserved("model/calls"));
        assert!(!is_conversation_event(MODEL_CALL));
        let other = event("model/other", json!("anything"));
        assert!(validate_for_append(&other).is_ok());
        assert!(check_stored(&other).is_ok());
        let call = event(MODEL_CALL, json!({"model": "m"})).with_ignorable(true);
        assert!(check_stored(&call).is_ok() && check_reconstructable(&call).is_ok());
        let message =
            validate_for_append(&event(MODEL_CALL, json!({"model": "m", "input_tokens": -3}))).unwrap_err().to_string();
        assert!(message.contains("model/call at seq 0: input_tokens must be a non-negative integer"), "{message}");
    }

    #[test]
    fn extension_types_are_kept_verbatim() {
        assert!(validate_for_append(&event("myapp/anything", json!([1, 2]))).is_ok());
        assert!(check_stored(&event("myapp/anything", json!(null))).is_ok());
    }

    #[test]
    fn unknown_types_fail_closed_unless_ignorable() {
        let newer = event("turn/pause", json!({}));
        assert_eq!(check_stored(&newer).unwrap_err().code(), "format_unsupported");
        assert!(check_stored(&newer.clone().with_ignorable(true)).is_ok());
        let extension = event("myapp/x", json!({}));
        assert_eq!(check_reconstructable(&extension).unwrap_err().code(), "format_unsupported");
        assert!(check_reconstructable(&extension.with_ignorable(true)).is_ok());
    }
}
