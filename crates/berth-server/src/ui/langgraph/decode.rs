//! Reading the LangGraph drop-in's records without Python: an `lg/checkpoint`'s checkpoint
//! and metadata (base64 of LangGraph's MessagePack) down to what the inspector shows —
//! channel versions, the channels its super-step updated, time, step and source — and an
//! `lg/blob`'s value down to its type and size.
//!
//! MessagePack is decoded generically with `rmpv` (no schema; nesting bounded by
//! `NESTING_DEPTH_MAX`). LangGraph's serde writes a Python object as an extension type
//! whose payload is itself MessagePack, `[module, class, …]`
//! (`langgraph.checkpoint.serde.jsonplus`): the type shown is `module.class`. Nothing is
//! evaluated; an unreadable record is shown as unreadable, never an error of the page.

use base64::Engine;
use rmpv::ValueRef;
use serde_json::Value;

/// Nesting followed when decoding a value (LangGraph's values are a few levels deep; a
/// hostile record cannot recurse deeper than this).
const NESTING_DEPTH_MAX: usize = 64;
/// Distinct item types named in a list's description.
const ITEM_TYPES_NAMED_MAX: usize = 3;

/// What a checkpoint record says, as far as the inspector reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckpointSummary {
    pub ns: String,
    pub id: String,
    pub parent: Option<String>,
    /// LangGraph's own time of the checkpoint (`ts`, ISO 8601), as written.
    pub ts: Option<String>,
    /// `metadata.step` (-1 for an input checkpoint).
    pub step: Option<i64>,
    /// `metadata.source`: `input`, `loop`, `update`, `fork`.
    pub source: Option<String>,
    /// Every channel with its version, in the checkpoint's order.
    pub channel_versions: Vec<(String, String)>,
    /// The channels the super-step before it updated (absent in older LangGraph).
    pub updated_channels: Option<Vec<String>>,
    /// Seqs of the blobs of channel versions stored in earlier batches (`at`).
    pub at: Vec<(String, u64)>,
    /// Whether the checkpoint itself (`cp`) could be read.
    pub readable: bool,
}

impl CheckpointSummary {
    pub fn version_of(&self, channel: &str) -> Option<&str> {
        self.channel_versions.iter().find(|(name, _)| name == channel).map(|(_, version)| version.as_str())
    }

    pub fn at_seq(&self, channel: &str) -> Option<u64> {
        self.at.iter().find(|(name, _)| name == channel).map(|(_, seq)| *seq)
    }
}

/// The shape of a decoded value: its type's name, and for a list or a dict how many
/// items or keys it holds and (a list's) the types of its items.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueShape {
    pub name: String,
    pub len: Option<usize>,
    pub item_types: Vec<String>,
}

/// An `lg/blob` record as the inspector shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlobSummary {
    /// The channel holds no value at this version (serde type `empty`).
    Empty,
    /// One serialized value: its serde type (`msgpack`, `null`, `json`, `bytes`…), its
    /// size in bytes, and its shape when it could be read.
    Value { serde: String, bytes: usize, shape: Option<ValueShape> },
    /// A list stored item by item: the whole list, or (`base_seq`) the items it appends to
    /// the version stored at that seq.
    List { items: usize, bytes: usize, item_types: Vec<String>, base_seq: Option<u64> },
    /// One part of a value split across events (`part` of `of`).
    Part { part: u64, of: u64 },
    /// Not a record this reader knows.
    Unreadable,
}

fn base64_bytes(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

fn read_msgpack(bytes: &[u8]) -> Option<ValueRef<'_>> {
    let mut reader = bytes;
    let value = rmpv::decode::read_value_ref_with_max_depth(&mut reader, NESTING_DEPTH_MAX).ok()?;
    reader.is_empty().then_some(value)
}

/// A serialized value `[serde type, base64]` as MessagePack bytes (only `msgpack` is read).
fn typed_msgpack(typed: Option<&Value>) -> Option<Vec<u8>> {
    let pair = typed?.as_array()?;
    match (pair.first()?.as_str()?, pair.get(1)?.as_str()?) {
        ("msgpack", text) => base64_bytes(text),
        _ => None,
    }
}

fn text_of(value: &ValueRef) -> Option<String> {
    match value {
        ValueRef::String(text) => text.as_str().map(str::to_owned),
        _ => None,
    }
}

/// A channel version as LangGraph writes it: a string, an integer or a float.
fn version_text(value: &ValueRef) -> String {
    match value {
        ValueRef::String(text) => text.as_str().unwrap_or("(not UTF-8)").to_owned(),
        ValueRef::Integer(number) => number.to_string(),
        ValueRef::F64(number) => number.to_string(),
        ValueRef::F32(number) => number.to_string(),
        other => type_name(other),
    }
}

fn map_get<'v, 'a>(map: &'v [(ValueRef<'a>, ValueRef<'a>)], key: &str) -> Option<&'v ValueRef<'a>> {
    map.iter().find(|(name, _)| matches!(name, ValueRef::String(text) if text.as_str() == Some(key))).map(|(_, v)| v)
}

/// The checkpoint record of an `lg/checkpoint` event's data.
pub fn checkpoint_summary(data: &Value) -> Option<CheckpointSummary> {
    let mut summary = CheckpointSummary {
        ns: data.get("ns")?.as_str()?.to_owned(),
        id: data.get("id")?.as_str()?.to_owned(),
        parent: data.get("parent").and_then(Value::as_str).map(str::to_owned),
        ..CheckpointSummary::default()
    };
    if let Some(at) = data.get("at").and_then(Value::as_object) {
        summary.at = at.iter().filter_map(|(channel, seq)| Some((channel.clone(), seq.as_u64()?))).collect();
    }
    if let Some(bytes) = typed_msgpack(data.get("cp")) {
        if let Some(ValueRef::Map(map)) = read_msgpack(&bytes) {
            read_checkpoint_map(&map, &mut summary);
        }
    }
    if let Some(bytes) = typed_msgpack(data.get("md")) {
        if let Some(ValueRef::Map(map)) = read_msgpack(&bytes) {
            summary.source = map_get(&map, "source").and_then(text_of);
            summary.step = map_get(&map, "step").and_then(|step| match step {
                ValueRef::Integer(number) => number.as_i64(),
                _ => None,
            });
        }
    }
    Some(summary)
}

fn read_checkpoint_map(map: &[(ValueRef, ValueRef)], summary: &mut CheckpointSummary) {
    let Some(ValueRef::Map(versions)) = map_get(map, "channel_versions") else { return };
    summary.channel_versions =
        versions.iter().filter_map(|(channel, version)| Some((text_of(channel)?, version_text(version)))).collect();
    summary.ts = map_get(map, "ts").and_then(text_of);
    summary.updated_channels = match map_get(map, "updated_channels") {
        Some(ValueRef::Array(channels)) => Some(channels.iter().filter_map(text_of).collect()),
        _ => None,
    };
    summary.readable = true;
}

/// The name of a decoded value's type: Python's for the builtins LangGraph maps to
/// MessagePack, `module.class` for an object it wrote as an extension type.
pub fn type_name(value: &ValueRef) -> String {
    match value {
        ValueRef::Nil => "None".into(),
        ValueRef::Boolean(_) => "bool".into(),
        ValueRef::Integer(_) => "int".into(),
        ValueRef::F32(_) | ValueRef::F64(_) => "float".into(),
        ValueRef::String(_) => "str".into(),
        ValueRef::Binary(_) => "bytes".into(),
        ValueRef::Array(_) => "list".into(),
        ValueRef::Map(_) => "dict".into(),
        ValueRef::Ext(code, payload) => extension_name(*code, payload),
    }
}

/// LangGraph's extension payloads (codes 0–5) are `[module, class, …]`; any other
/// extension is named by its code.
fn extension_name(code: i8, payload: &[u8]) -> String {
    if let Some(ValueRef::Array(parts)) = read_msgpack(payload) {
        if let (Some(module), Some(class)) = (parts.first().and_then(text_of), parts.get(1).and_then(text_of)) {
            return format!("{module}.{class}");
        }
    }
    format!("extension type {code}")
}

/// The last segment of a dotted name (`HumanMessage` of `langchain_core.messages.human.HumanMessage`).
pub fn short_name(name: &str) -> &str {
    name.rsplit_once('.').map_or(name, |(_, last)| last)
}

fn distinct_item_types(names: impl Iterator<Item = String>) -> Vec<String> {
    let mut distinct: Vec<String> = Vec::new();
    for name in names {
        if !distinct.contains(&name) {
            distinct.push(name);
        }
    }
    distinct.truncate(ITEM_TYPES_NAMED_MAX + 1);
    distinct
}

/// The shape of MessagePack `bytes` (None: not one readable value).
pub fn msgpack_shape(bytes: &[u8]) -> Option<ValueShape> {
    let value = read_msgpack(bytes)?;
    let (len, item_types) = match &value {
        ValueRef::Array(items) => (Some(items.len()), distinct_item_types(items.iter().map(type_name))),
        ValueRef::Map(entries) => (Some(entries.len()), Vec::new()),
        _ => (None, Vec::new()),
    };
    Some(ValueShape { name: type_name(&value), len, item_types })
}

/// How many more item types a list has than `ITEM_TYPES_NAMED_MAX` names (a list's
/// `item_types` holds one extra to tell).
pub fn item_types_named(types: &[String]) -> (&[String], bool) {
    if types.len() > ITEM_TYPES_NAMED_MAX {
        (&types[..ITEM_TYPES_NAMED_MAX], true)
    } else {
        (types, false)
    }
}

/// A serialized value `(serde type, base64)`: its size and (MessagePack, or `null`) shape.
fn typed_value(serde: &str, text: &str) -> Option<(usize, Option<ValueShape>)> {
    let bytes = base64_bytes(text)?;
    let shape = match serde {
        "msgpack" => msgpack_shape(&bytes),
        "null" => Some(ValueShape { name: "None".into(), len: None, item_types: Vec::new() }),
        _ => None,
    };
    Some((bytes.len(), shape))
}

/// The `lg/blob` record of an event's data.
pub fn blob_summary(data: &Value) -> BlobSummary {
    if let (Some(part), Some(of)) = (data.get("part").and_then(Value::as_u64), data.get("of").and_then(Value::as_u64)) {
        return BlobSummary::Part { part, of };
    }
    if let Some(items) = data.get("items").and_then(Value::as_array) {
        return list_summary(data, items).unwrap_or(BlobSummary::Unreadable);
    }
    match (data.get("t").and_then(Value::as_str), data.get("b").and_then(Value::as_str)) {
        (Some("empty"), _) => BlobSummary::Empty,
        (Some(serde), Some(text)) => match typed_value(serde, text) {
            Some((bytes, shape)) => BlobSummary::Value { serde: serde.to_owned(), bytes, shape },
            None => BlobSummary::Unreadable,
        },
        _ => BlobSummary::Unreadable,
    }
}

fn list_summary(data: &Value, items: &[Value]) -> Option<BlobSummary> {
    let mut bytes = 0;
    let mut names = Vec::new();
    for item in items {
        let pair = item.as_array()?;
        let (size, shape) = typed_value(pair.first()?.as_str()?, pair.get(1)?.as_str()?)?;
        bytes += size;
        names.push(shape.map_or_else(|| "(unread)".to_owned(), |shape| shape.name));
    }
    let base_seq = data.get("base").and_then(Value::as_array).and_then(|base| base.get(1)?.as_u64());
    Some(BlobSummary::List { items: items.len(), bytes, item_types: distinct_item_types(names.into_iter()), base_seq })
}

/// The value of a split blob from its parts' data in part order: all of them (`of`),
/// else unreadable.
pub fn joined_parts(parts: &[&Value]) -> BlobSummary {
    let Some(first) = parts.first() else { return BlobSummary::Unreadable };
    let of = first.get("of").and_then(Value::as_u64);
    let in_order =
        parts.iter().enumerate().all(|(index, part)| part.get("part").and_then(Value::as_u64) == Some(index as u64));
    if of != Some(parts.len() as u64) || !in_order {
        return BlobSummary::Unreadable;
    }
    let serde = first.get("t").and_then(Value::as_str).unwrap_or("");
    let text: Option<String> = parts.iter().map(|part| part.get("b").and_then(Value::as_str)).collect();
    match text.and_then(|text| typed_value(serde, &text)) {
        Some((bytes, shape)) => BlobSummary::Value { serde: serde.to_owned(), bytes, shape },
        None => BlobSummary::Unreadable,
    }
}

#[cfg(test)]
mod tests;
