//! The event envelope (R-C3): `{seq, type, time, run?, data, ignorable?}`, plus the
//! small newtypes that travel with it (seq, epoch, revision).

use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::idempotency::IdempotencyMark;
use crate::ids::RunId;
use crate::json::JsonText;
use crate::limits::EVENT_TYPE_BYTES_MAX;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Position of an event in its session's log: contiguous from 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Seq(pub u64);

impl Seq {
    pub fn get(self) -> u64 {
        self.0
    }
    pub fn next(self) -> Seq {
        Seq(self.0 + 1)
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A writer lease's fencing epoch: only ever grows for a session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Epoch(pub u64);

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Metadata version used for compare-and-set (`expected_revision`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Revision(pub u64);

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An event type: `[a-z0-9_.-]+(/[a-z0-9_.-]+)*`, at most 64 bytes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventType(Box<str>);

impl EventType {
    pub fn parse(text: &str) -> Result<EventType> {
        if text.len() > EVENT_TYPE_BYTES_MAX {
            return Err(Error::LimitExceeded {
                what: crate::limits::Limit::EventTypeBytes,
                limit: EVENT_TYPE_BYTES_MAX as u64,
                actual: text.len() as u64,
            });
        }
        let segments_ok = !text.is_empty()
            && text.split('/').all(|segment| {
                !segment.is_empty()
                    && segment
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b'-'))
            });
        if !segments_ok {
            return Err(Error::invalid("event type", format!("{text:?} does not match [a-z0-9_.-]+(/[a-z0-9_.-]+)*")));
        }
        Ok(EventType(text.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

impl Serialize for EventType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for EventType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(deserializer)?;
        EventType::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// One record of a session log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub seq: Seq,
    pub event_type: EventType,
    pub time: Timestamp,
    /// The run that produced the event; required in `parallel` sessions.
    pub run: Option<RunId>,
    pub data: JsonText,
    /// Readers that reconstruct state may skip this event if they do not know its type.
    pub ignorable: bool,
    /// Set on every event of a batch appended with an idempotency key (R-S14); absent
    /// in logs written before keys existed (the field is optional and additive).
    pub idempotency: Option<Box<IdempotencyMark>>,
}

impl Event {
    /// Builds an event from a type string and a JSON value (validates both).
    pub fn new(seq: u64, event_type: &str, time: Timestamp, data: serde_json::Value) -> Result<Event> {
        Ok(Event {
            seq: Seq(seq),
            event_type: EventType::parse(event_type)?,
            time,
            run: None,
            data: JsonText::from_value(&data)?,
            ignorable: false,
            idempotency: None,
        })
    }

    pub fn with_run(mut self, run: RunId) -> Event {
        self.run = Some(run);
        self
    }

    pub fn with_ignorable(mut self, ignorable: bool) -> Event {
        self.ignorable = ignorable;
        self
    }

    /// The event's size for limits and batching: its data and type plus a fixed
    /// allowance for the envelope (seq, time, run, epoch, checksum).
    pub fn size_estimate_bytes(&self) -> usize {
        let mark_bytes = self.idempotency.as_ref().map_or(0, |mark| mark.size_estimate_bytes());
        self.data.len_bytes() + self.event_type.as_str().len() + 64 + mark_bytes
    }

    /// The canonical envelope text: fixed field order, `data` exactly as stored (R-C9).
    pub fn to_canonical_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl Serialize for Event {
    /// Canonical envelope: `seq, type, time, run?, data, ignorable?, idempotency?` in
    /// this order.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let fields =
            4 + usize::from(self.run.is_some()) + usize::from(self.ignorable) + usize::from(self.idempotency.is_some());
        let mut state = serializer.serialize_struct("Event", fields)?;
        state.serialize_field("seq", &self.seq)?;
        state.serialize_field("type", &self.event_type)?;
        state.serialize_field("time", &self.time)?;
        if let Some(run) = &self.run {
            state.serialize_field("run", run)?;
        }
        state.serialize_field("data", &self.data)?;
        if self.ignorable {
            state.serialize_field("ignorable", &true)?;
        }
        if let Some(mark) = &self.idempotency {
            state.serialize_field("idempotency", mark)?;
        }
        state.end()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventWire {
    seq: Seq,
    #[serde(rename = "type")]
    event_type: EventType,
    time: Timestamp,
    #[serde(default)]
    run: Option<RunId>,
    data: JsonText,
    #[serde(default)]
    ignorable: Option<bool>,
    #[serde(default)]
    idempotency: Option<Box<IdempotencyMark>>,
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = EventWire::deserialize(deserializer)?;
        Ok(Event {
            seq: wire.seq,
            event_type: wire.event_type,
            time: wire.time,
            run: wire.run,
            data: wire.data,
            ignorable: wire.ignorable.unwrap_or(false),
            idempotency: wire.idempotency,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_type_grammar() {
        for good in ["turn/start", "a", "my-app/x.y_z/0", "checkpoint"] {
            assert!(EventType::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "/a", "a/", "a//b", "A", "a b", "é", "a\0"] {
            assert!(EventType::parse(bad).is_err(), "{bad:?}");
        }
        assert!(EventType::parse(&"a".repeat(64)).is_ok());
        assert!(matches!(EventType::parse(&"a".repeat(65)), Err(Error::LimitExceeded { .. })));
    }

    #[test]
    fn envelope_round_trips_canonically() {
        let event = Event::new(3, "user/message", Timestamp(7), serde_json::json!({"content": "hi"}))
            .unwrap()
            .with_run(RunId::parse("r1").unwrap());
        let text = event.to_canonical_json();
        assert_eq!(text, r#"{"seq":3,"type":"user/message","time":7,"run":"r1","data":{"content":"hi"}}"#);
        let back: Event = serde_json::from_str(&text).unwrap();
        assert_eq!(back, event);
        let ignorable: Event =
            serde_json::from_str(r#"{"seq":0,"type":"x","time":0,"data":1,"ignorable":true}"#).unwrap();
        assert!(ignorable.ignorable);
        assert!(serde_json::from_str::<Event>(r#"{"seq":0,"type":"x","time":0,"data":1,"tenant":"t"}"#).is_err());
    }

    #[test]
    fn idempotency_mark_is_the_last_envelope_field_and_optional() {
        let mut event = Event::new(0, "x", Timestamp(1), serde_json::json!(1)).unwrap();
        let old = event.to_canonical_json();
        assert_eq!(serde_json::from_str::<Event>(&old).unwrap(), event, "envelopes without a mark still read");
        event.idempotency = Some(Box::new(IdempotencyMark {
            key: crate::IdempotencyKey::parse("k-1").unwrap(),
            events: Some(1),
            digest: Some("ab".into()),
        }));
        let text = event.to_canonical_json();
        assert_eq!(
            text,
            r#"{"seq":0,"type":"x","time":1,"data":1,"idempotency":{"key":"k-1","events":1,"digest":"ab"}}"#
        );
        assert_eq!(serde_json::from_str::<Event>(&text).unwrap(), event);
    }
}
