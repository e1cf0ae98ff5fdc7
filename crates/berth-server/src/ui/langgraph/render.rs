//! The markup of the LangGraph state section: the checkpoint list, and a selected
//! checkpoint's messages, channels and changed channels. Everything read from the log is
//! text in maud's escaping templates.

use super::decode::{self, item_types_named, BlobSummary, CheckpointSummary};
use super::diff::{changed_channels, ChannelChange};
use super::state::{Located, Selected, WINDOW_EVENTS};
use super::{Links, CHECKPOINT, CHECKPOINTS_LISTED_MAX};
use berth_core::content::content_text;
use berth_core::vocabulary as vocab;
use berth_core::{Event, SessionId};
use maud::{html as markup, Markup};
use serde_json::Value;

/// A message's text shown, in bytes (the whole event one click away).
const MESSAGE_SHOWN_BYTES_MAX: usize = 2_000;
/// A tool call's arguments shown, in characters.
const ARGUMENTS_SHOWN_CHARS: usize = 120;

/// The page's checkpoints, newest first, at most `CHECKPOINTS_LISTED_MAX`.
pub fn listed_checkpoints(events: &[Event]) -> Vec<Located> {
    events
        .iter()
        .rev()
        .filter(|event| event.event_type.as_str() == CHECKPOINT)
        .filter_map(|event| {
            Some(Located { seq: event.seq.get(), summary: decode::checkpoint_summary(&event.data.to_value())? })
        })
        .take(CHECKPOINTS_LISTED_MAX)
        .collect()
}

/// A LangGraph version as read: `00000000000000000000000000000005.0.8995…` is version 5
/// (the full text on hover); any other form as it is.
fn version_view(version: &str) -> Markup {
    let counter = version.split_once('.').map_or(version, |(counter, _)| counter);
    let short = counter.trim_start_matches('0');
    match (counter.len() == 32 && counter.bytes().all(|b| b.is_ascii_digit()), short.is_empty()) {
        (true, false) => markup! { span.version title=(version) { (short) } },
        (true, true) => markup! { span.version title=(version) { "0" } },
        _ => markup! { span.version { (version) } },
    }
}

/// LangGraph's checkpoint time (`2026-12-07T11:31:11.659748+00:00`) as its time of day to
/// the millisecond, the full text on hover; any other form as it is.
fn ts_view(ts: Option<&str>) -> Markup {
    let Some(ts) = ts else { return markup! { "—" } };
    let clock =
        ts.split_once('T').map(|(_, clock)| clock).filter(|clock| clock.len() >= 12 && clock.is_char_boundary(12));
    match clock {
        Some(clock) => markup! { time datetime=(ts) title=(ts) { (clock[..12]) } },
        None => markup! { (ts) },
    }
}

fn step_text(summary: &CheckpointSummary) -> String {
    match (summary.step, summary.source.as_deref()) {
        (Some(step), Some(source)) => format!("step {step} ({source})"),
        (Some(step), None) => format!("step {step}"),
        (None, Some(source)) => source.to_owned(),
        (None, None) => "—".to_owned(),
    }
}

pub fn section(id: &SessionId, listed: &[Located], selected: Option<&Selected>, links: &Links) -> Markup {
    let chosen = selected.map(|selected| selected.checkpoint.seq);
    markup! {
        section.langgraph #langgraph aria-labelledby="langgraph-title" {
            h2 #langgraph-title { "LangGraph state" }
            @if listed.is_empty() {
                p.empty { "No checkpoint among this page's events (older pages of the timeline may have some)." }
            } @else {
                p.hint { "The checkpoints among this page of the timeline, newest first. Pick one to read its state; with one picked, compare it with another." }
                (checkpoint_table(listed, chosen, links))
            }
            @if let Some(selected) = selected { (selected_view(id, selected, links)) }
        }
    }
}

fn checkpoint_table(listed: &[Located], chosen: Option<u64>, links: &Links) -> Markup {
    markup! {
        table.checkpoints {
            thead { tr { th { "Event" } th { "Step" } th { "Namespace" } th { "Time" } th { "Updated channels" } th { "Checkpoint id" } th { "" } } }
            tbody {
                @for checkpoint in listed {
                    @let summary = &checkpoint.summary;
                    tr class=[(Some(checkpoint.seq) == chosen).then_some("selected")] data-seq=(checkpoint.seq) {
                        td { "#" (checkpoint.seq) }
                        td { (step_text(summary)) }
                        td { @if summary.ns.is_empty() { "(root)" } @else { code { (summary.ns) } } }
                        td { (ts_view(summary.ts.as_deref())) }
                        td.updated { @match &summary.updated_channels {
                            Some(channels) => { (channels.join(", ")) },
                            None => "—",
                        } }
                        td { code.checkpoint-id { (summary.id) } }
                        td.pick {
                            @if Some(checkpoint.seq) == chosen { span.badge { "shown" } }
                            @else {
                                a.show-state href=(links.to(Some(checkpoint.seq), None)) { "State" }
                                @if let Some(chosen) = chosen {
                                    " · " a.compare href=(links.to(Some(chosen), Some(checkpoint.seq))) { "Compare" }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn selected_view(id: &SessionId, selected: &Selected, links: &Links) -> Markup {
    let checkpoint = &selected.checkpoint;
    let summary = &checkpoint.summary;
    markup! {
        div.checkpoint-state #checkpoint-state {
            h3 { "Checkpoint " a href={"/ui/sessions/" (id) "/events/" (checkpoint.seq)} { "#" (checkpoint.seq) } ", " (step_text(summary)) }
            dl.facts {
                dt { "Id" } dd { code { (summary.id) } }
                dt { "Namespace" } dd { @if summary.ns.is_empty() { "(root)" } @else { code { (summary.ns) } } }
                dt { "Time" } dd { (summary.ts.as_deref().unwrap_or("—")) }
                dt { "Parent" } dd { @match &summary.parent { Some(parent) => { code { (parent) } }, None => "none (the thread's first)" } }
            }
            @if !summary.readable { p.empty { "The checkpoint's own record could not be read (not LangGraph's MessagePack)." } }
            h4 { "Messages" }
            (messages_view(id, checkpoint.seq, &selected.messages))
            h4 { "Channels" }
            (channels_view(id, selected))
            (diff_view(selected, links))
        }
    }
}

fn messages_view(id: &SessionId, seq: u64, messages: &[Event]) -> Markup {
    markup! {
        @if messages.is_empty() {
            p.empty { "No conversation events in the " (WINDOW_EVENTS) " events before it (a thread stored before the drop-in wrote them has none)." }
        } @else {
            p.hint { "The latest messages the drop-in recorded before this checkpoint (event #" (seq) "), from the conversation events it writes beside its records." }
            ol.lg-messages {
                @for event in messages { (message_view(id, event)) }
            }
        }
    }
}

fn message_view(id: &SessionId, event: &Event) -> Markup {
    let data = event.data.to_value();
    let role = match event.event_type.as_str() {
        vocab::USER_MESSAGE => "user",
        vocab::ASSISTANT_MESSAGE => "assistant",
        vocab::SYSTEM_MESSAGE => "system",
        _ => "tool",
    };
    let text = data.get("content").map(|content| content_text(content, MESSAGE_SHOWN_BYTES_MAX));
    let calls = data.get("tool_calls").and_then(Value::as_array).cloned().unwrap_or_default();
    markup! {
        li class={"lg-message role-" (role)} {
            span.role { (role) @if let Some(name) = data.get("name").and_then(Value::as_str) { " " code { (name) } } }
            @if let Some(text) = text.as_ref().filter(|text| !text.text.is_empty()) {
                div.content { (text.text) }
                @if text.cut { a.show-all href={"/ui/sessions/" (id) "/events/" (event.seq.get())} { "Show all" } }
            }
            @if !calls.is_empty() {
                ul.tool-calls { @for call in &calls { li { "calls " code { (call_text(call)) } } } }
            }
        }
    }
}

fn call_text(call: &Value) -> String {
    let name = call.get("name").and_then(Value::as_str).unwrap_or("(unnamed)");
    let arguments = call.get("arguments").map(|arguments| match arguments {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    });
    let arguments = arguments.unwrap_or_default();
    match arguments.char_indices().nth(ARGUMENTS_SHOWN_CHARS) {
        Some((end, _)) => format!("{name}({}…)", &arguments[..end]),
        None => format!("{name}({arguments})"),
    }
}

fn shape_text(shape: &decode::ValueShape) -> String {
    let (named, more) = item_types_named(&shape.item_types);
    let items: Vec<&str> = named.iter().map(|name| decode::short_name(name)).collect();
    match (shape.name.as_str(), shape.len) {
        ("list", Some(len)) if items.is_empty() => format!("list of {len}"),
        ("list", Some(len)) => format!("list of {len}: {}{}", items.join(", "), if more { ", …" } else { "" }),
        ("dict", Some(len)) => format!("dict of {len} {}", if len == 1 { "key" } else { "keys" }),
        (name, _) => name.to_owned(),
    }
}

/// A channel value's type and size, as shown in the table.
fn blob_cells(blob: &BlobSummary) -> (String, String) {
    match blob {
        BlobSummary::Empty => ("(empty)".into(), "—".into()),
        BlobSummary::Value { serde, bytes, shape } => {
            let kind = shape.as_ref().map_or_else(|| format!("{serde} (not read)"), shape_text);
            (kind, format!("{bytes} bytes"))
        }
        BlobSummary::List { items, bytes, item_types, base_seq } => match base_seq {
            Some(base) => {
                let (named, more) = item_types_named(item_types);
                let named: Vec<&str> = named.iter().map(|name| decode::short_name(name)).collect();
                let etc = if more { ", …" } else { "" };
                (format!("list: appends {items} ({}{etc}) to #{base}", named.join(", ")), format!("+{bytes} bytes"))
            }
            None => {
                let shape =
                    decode::ValueShape { name: "list".into(), len: Some(*items), item_types: item_types.clone() };
                (shape_text(&shape), format!("{bytes} bytes"))
            }
        },
        BlobSummary::Part { part, of } => (format!("part {} of {of} (the others not found)", part + 1), "—".into()),
        BlobSummary::Unreadable => ("(unreadable record)".into(), "—".into()),
    }
}

fn channels_view(id: &SessionId, selected: &Selected) -> Markup {
    let summary = &selected.checkpoint.summary;
    let changed: Vec<ChannelChange> =
        selected.compared.as_ref().map(|compared| changed_channels(&compared.summary, summary)).unwrap_or_default();
    markup! {
        table.channels {
            thead { tr { th { "Channel" } th { "Version" } th { "Type" } th { "Size" } th { "Stored at" } } }
            tbody {
                @for row in &selected.channels {
                    @let is_changed = changed.iter().any(|change| change.channel == row.channel);
                    tr data-channel=(row.channel) class=[is_changed.then_some("changed")] {
                        td { code { (row.channel) } @if is_changed { " " span.badge.changed { "changed" } } }
                        td { (version_view(&row.version)) }
                        @match &row.blob {
                            Some((seq, blob)) => {
                                @let (kind, size) = blob_cells(blob);
                                td.type { (kind) } td.size { (size) }
                                td { a href={"/ui/sessions/" (id) "/events/" (seq)} { "#" (seq) } }
                            },
                            None => { td.type { "(record not found nearby)" } td.size { "—" } td { "—" } },
                        }
                    }
                }
            }
        }
        @if selected.channels_not_shown > 0 { p.hint { (selected.channels_not_shown) " more channels not shown." } }
    }
}

fn diff_view(selected: &Selected, links: &Links) -> Markup {
    let summary = &selected.checkpoint.summary;
    let Some(compared) = &selected.compared else {
        return markup! {
            h4 { "Changed channels" }
            @if summary.parent.is_none() {
                p.empty { "The thread's first checkpoint: no parent to compare with (pick another checkpoint to)." }
            } @else {
                p.empty { "Its parent is not among the " (WINDOW_EVENTS) " events before it: pick a checkpoint to compare with." }
            }
        };
    };
    let changes = changed_channels(&compared.summary, summary);
    let against = if selected.compared_chosen { "" } else { "its parent, " };
    markup! {
        h4 { "Changed channels" }
        p.hint.compared {
            "From " (against) "checkpoint #" (compared.seq) " (" (step_text(&compared.summary)) ") to #" (selected.checkpoint.seq) "."
            @if selected.compared_chosen { " " a href=(links.to(Some(selected.checkpoint.seq), None)) { "Compare with its parent" } }
        }
        @if changes.is_empty() { p.empty { "No channel changed." } }
        @else {
            table.channel-diff {
                thead { tr { th { "Channel" } th { "Change" } th { "Version at #" (compared.seq) } th { "Version at #" (selected.checkpoint.seq) } } }
                tbody { @for change in &changes {
                    tr data-channel=(change.channel) data-change=(change.kind()) {
                        td { code { (change.channel) } }
                        td { span class={"badge change-" (change.kind())} { (change.kind()) } }
                        td { @match &change.before { Some(version) => (version_view(version)), None => "—" } }
                        td { @match &change.after { Some(version) => (version_view(version)), None => "—" } }
                    }
                } }
            }
        }
        @if let Some(updated) = &summary.updated_channels {
            p.hint.updated-channels { "LangGraph's own record of the channels its super-step updated: "
                @if updated.is_empty() { "none" } @else { code { (updated.join(", ")) } } "." }
        }
    }
}
