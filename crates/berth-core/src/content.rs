//! A message's `content` as people read it (R-A7): given as a string or as a list of
//! typed parts (OpenAI Responses and Chat Completions, Anthropic, Gemini / Google ADK),
//! turned into text, with a labelled placeholder for what is not text (`[image]`,
//! `[file: report.pdf]`, `[audio]`). Every reader of berth — the inspector's timeline and
//! list, `berth sessions cat --transcript`, listing previews — calls [`content_text`]; the
//! stored data is never rewritten for display ("readers, not writers, carry
//! presentation"), so sessions written before any of this read the same way.
//!
//! Pure and bounded: the text is at most the caller's `bytes_max` (cut on a character
//! boundary, and said so), nesting deeper than [`CONTENT_DEPTH_MAX`] is one placeholder,
//! and a placeholder's name is at most [`LABEL_CHARS_MAX`] characters. A part this module
//! does not know shows its `text` if it has one, its nested `content` or `parts` if it has
//! those, and otherwise its type as a placeholder, or — an object with no type — its
//! compact JSON; nothing is dropped silently.

use crate::event::Event;
use crate::vocabulary::USER_MESSAGE;
use serde_json::{Map, Value};

/// Nesting of parts followed; anything deeper is shown as `[…]`.
pub const CONTENT_DEPTH_MAX: usize = 16;
/// Characters of a name shown in a placeholder (`[file: …]`).
pub const LABEL_CHARS_MAX: usize = 64;
/// Characters of a listing's preview (the first user message, on one line).
pub const PREVIEW_CHARS_MAX: usize = 80;
/// Bytes of a message's text read for its preview, before it is put on one line: a
/// preview never costs more than this, however long the message is.
pub const PREVIEW_TEXT_BYTES_MAX: usize = 4 * 1024;
/// Events read from a log's start to find the first user message for a preview: a
/// listing costs at most this many events per untitled session on its page, never the
/// whole log.
pub const PREVIEW_SCAN_EVENTS: u64 = 32;

/// Text made from a message's content, at most the asked length.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContentText {
    pub text: String,
    /// The text was cut at the asked length (there is more).
    pub cut: bool,
}

/// The readable text of `content` — a string, a list of typed parts, one part, or any
/// other JSON — at most `bytes_max` bytes. Text parts (`text`, `input_text`,
/// `output_text`, Gemini's `{text}`) give their text, refusals `[refusal] …`, images,
/// files and audio a labelled placeholder; parts are separated by a newline.
pub fn content_text(content: &Value, bytes_max: usize) -> ContentText {
    let mut writer = Writer { out: String::new(), bytes_max, cut: false };
    writer.value(content, 0);
    ContentText { text: writer.out, cut: writer.cut }
}

/// A preview of a session for listings: the text of its first `user/message` among
/// `events` (pass the log's first [`PREVIEW_SCAN_EVENTS`]) whose content reads as
/// something, on one line, at most [`PREVIEW_CHARS_MAX`] characters (with `…` when cut).
pub fn first_user_message_preview(events: &[Event]) -> Option<String> {
    events.iter().filter(|event| event.event_type.as_str() == USER_MESSAGE).find_map(|event| {
        let data = event.data.to_value();
        let text = content_text(data.get("content")?, PREVIEW_TEXT_BYTES_MAX);
        let line = one_line(&text.text, PREVIEW_CHARS_MAX, text.cut);
        (!line.is_empty()).then_some(line)
    })
}

/// `text` on one line: every run of whitespace one space, control characters dropped,
/// trimmed, at most `chars_max` characters; `…` ends it when it was cut here or
/// `cut_before` (the text was already cut by its reader).
pub fn one_line(text: &str, chars_max: usize, cut_before: bool) -> String {
    let mut line = String::new();
    let mut chars = 0;
    let mut space = false;
    let mut cut = cut_before;
    for character in text.chars() {
        if character.is_whitespace() {
            space = !line.is_empty();
            continue;
        }
        if character.is_control() {
            continue;
        }
        if chars + usize::from(space) + 1 > chars_max {
            cut = true;
            break;
        }
        if space {
            line.push(' ');
            chars += 1;
            space = false;
        }
        line.push(character);
        chars += 1;
    }
    if cut && !line.is_empty() {
        line.push('…');
    }
    line
}

/// The text being made, and where it stops.
struct Writer {
    out: String,
    bytes_max: usize,
    cut: bool,
}

impl Writer {
    /// Adds one part's text, on a line of its own after the text before it.
    fn push(&mut self, text: &str) {
        if self.cut || text.is_empty() {
            return;
        }
        if !self.out.is_empty() {
            self.push_bounded("\n");
        }
        self.push_bounded(text);
    }

    fn push_bounded(&mut self, text: &str) {
        let room = self.bytes_max.saturating_sub(self.out.len());
        if text.len() <= room {
            self.out.push_str(text);
            return;
        }
        let mut end = room;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.out.push_str(&text[..end]);
        self.cut = true;
    }

    fn placeholder(&mut self, kind: &str, name: Option<&str>) {
        match name.map(|name| one_line(name, LABEL_CHARS_MAX, false)).filter(|name| !name.is_empty()) {
            Some(name) => self.push(&format!("[{kind}: {name}]")),
            None => self.push(&format!("[{kind}]")),
        }
    }

    fn value(&mut self, value: &Value, depth: usize) {
        if self.cut {
            return;
        }
        if depth > CONTENT_DEPTH_MAX {
            return self.push("[…]");
        }
        match value {
            Value::Null => {}
            Value::String(text) => self.push(text),
            Value::Bool(_) | Value::Number(_) => self.push(&value.to_string()),
            Value::Array(items) => {
                for item in items {
                    self.value(item, depth + 1);
                    if self.cut {
                        break;
                    }
                }
            }
            Value::Object(part) => match part.get("type").and_then(Value::as_str) {
                Some(kind) => self.typed_part(kind, part, depth),
                None => self.untyped_part(part, depth),
            },
        }
    }

    /// A part with a `type` (OpenAI, Anthropic and most others).
    fn typed_part(&mut self, kind: &str, part: &Map<String, Value>, depth: usize) {
        match kind {
            "text" | "input_text" | "output_text" => match part.get("text") {
                // The Assistants API's text is `{value, annotations}`.
                Some(Value::Object(text)) if text.contains_key("value") => self.value(&text["value"], depth + 1),
                Some(text) => self.value(text, depth + 1),
                None => {}
            },
            "refusal" => {
                let reason = part.get("refusal").and_then(Value::as_str).map(str::trim);
                match reason.filter(|reason| !reason.is_empty()) {
                    Some(reason) => self.push(&format!("[refusal] {reason}")),
                    None => self.push("[refusal]"),
                }
            }
            "input_image" | "image_url" | "image" => self.placeholder("image", file_name(part)),
            "input_file" | "file" | "document" => self.placeholder("file", file_name(part)),
            "input_audio" | "audio" => self.placeholder("audio", file_name(part)),
            _ => self.unknown_part(kind, part, depth),
        }
    }

    /// A part of a type not known here: its text, else its nested content, else its type.
    fn unknown_part(&mut self, kind: &str, part: &Map<String, Value>, depth: usize) {
        if let Some(text) = part.get("text").filter(|text| text.is_string()) {
            return self.value(text, depth + 1);
        }
        if let Some(nested) = part.get("content").or_else(|| part.get("parts")).filter(|nested| !nested.is_null()) {
            return self.value(nested, depth + 1);
        }
        let name = part.get("name").and_then(Value::as_str).or_else(|| file_name(part));
        self.placeholder(&one_line(kind, LABEL_CHARS_MAX, false), name);
    }

    /// A part without a `type`: Gemini / ADK (`{text}`, `{inline_data}`, `{file_data}`,
    /// `{function_call}`, a `Content` as `{role, parts}`), or any other object.
    fn untyped_part(&mut self, part: &Map<String, Value>, depth: usize) {
        let field = |snake: &str, camel: &str| part.get(snake).or_else(|| part.get(camel));
        if let Some(text) = part.get("text") {
            return self.value(text, depth + 1);
        }
        if let Some(Value::Object(data)) = field("inline_data", "inlineData").or_else(|| field("file_data", "fileData"))
        {
            let mime = data.get("mime_type").or_else(|| data.get("mimeType")).and_then(Value::as_str).unwrap_or("");
            let name = file_name(data).or_else(|| uri_name(data));
            return match mime.split('/').next() {
                Some(kind @ ("image" | "audio" | "video")) => self.placeholder(kind, name),
                _ => self.placeholder("file", name.or(Some(mime))),
            };
        }
        if let Some(call) = field("function_call", "functionCall") {
            return self.placeholder("function call", call.get("name").and_then(Value::as_str));
        }
        if let Some(response) = field("function_response", "functionResponse") {
            return self.placeholder("function response", response.get("name").and_then(Value::as_str));
        }
        if let Some(nested) = part.get("parts").or_else(|| part.get("content")).filter(|nested| !nested.is_null()) {
            return self.value(nested, depth + 1);
        }
        if !part.is_empty() {
            // Not a part at all: its JSON, as the writer stored it (cut like any text).
            self.push(&Value::Object(part.clone()).to_string());
        }
    }
}

/// A file's own name, where the part's format gives one (`filename`, Chat's
/// `file.filename`, `display_name`, Anthropic's `title`).
fn file_name(part: &Map<String, Value>) -> Option<&str> {
    fn own_name(object: &Map<String, Value>) -> Option<&str> {
        ["filename", "file_name", "display_name", "displayName", "title"]
            .iter()
            .find_map(|key| object.get(*key).and_then(Value::as_str))
    }
    own_name(part).or_else(|| part.get("file").and_then(Value::as_object).and_then(own_name))
}

/// The last segment of a Gemini `file_uri` (`gs://bucket/report.pdf` → `report.pdf`).
fn uri_name(data: &Map<String, Value>) -> Option<&str> {
    let uri = data.get("file_uri").or_else(|| data.get("fileUri")).and_then(Value::as_str)?;
    uri.rsplit('/').next().filter(|name| !name.is_empty())
}

#[cfg(test)]
mod tests;
