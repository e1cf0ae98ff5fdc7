//! Turn repair (R-C5): the synthetic events that close a turn a crash left open.
//!
//! Pure: no I/O. For every run with an open turn it returns, in order, an error
//! `tool/result` for each pending tool call (`TOOL_NOT_STARTED` when no `tool/call` was
//! recorded, `TOOL_OUTCOME_UNKNOWN` when one was: the tool may have run), `step/end` if a
//! step is open, then `turn/end {reason: interrupted}`. Seqs continue the log; every
//! closer's time is the last real event's time, so the output is deterministic.

use crate::error::Result;
use crate::event::{Event, EventType, Seq};
use crate::ids::RunId;
use crate::json::JsonText;
use crate::vocabulary::{self as vocab, check_reconstructable};
use serde_json::{json, Value};

pub const TOOL_NOT_STARTED: &str = "TOOL_NOT_STARTED";
pub const TOOL_OUTCOME_UNKNOWN: &str = "TOOL_OUTCOME_UNKNOWN";
pub const INTERRUPTED: &str = "interrupted";

#[derive(Clone, Debug)]
struct PendingCall {
    call_id: String,
    /// Seq of the `tool/call` record, if the tool was recorded as started.
    started_seq: Option<u64>,
}

#[derive(Clone, Debug, Default)]
struct RunTurnState {
    /// (turn number, seq of its turn/start) of the open turn.
    open_turn: Option<(u64, u64)>,
    open_step: Option<(u64, u64)>,
    pending: Vec<PendingCall>,
}

impl RunTurnState {
    fn reset(&mut self) {
        *self = RunTurnState::default();
    }

    fn pending_mut(&mut self, call_id: &str) -> Option<&mut PendingCall> {
        self.pending.iter_mut().find(|call| call.call_id == call_id)
    }
}

fn field_u64(data: &Value, field: &str) -> u64 {
    data.get(field).and_then(Value::as_u64).unwrap_or(0)
}

fn field_str<'a>(data: &'a Value, field: &str) -> Option<&'a str> {
    data.get(field).and_then(Value::as_str)
}

/// Computes the closers for `events` (a whole log, seqs contiguous from its first event).
/// Refuses (`FormatUnsupported`) an event type it does not know unless it is ignorable.
pub fn interrupted_turn_closers(events: &[Event]) -> Result<Vec<Event>> {
    // Runs in order of first appearance; `None` is the run-less (serial) stream.
    let mut runs: Vec<(Option<RunId>, RunTurnState)> = Vec::new();
    for event in events {
        check_reconstructable(event)?;
        if !vocab::is_known(event.event_type.as_str()) {
            continue; // ignorable unknown type
        }
        let index = match runs.iter().position(|(run, _)| *run == event.run) {
            Some(index) => index,
            None => {
                runs.push((event.run.clone(), RunTurnState::default()));
                runs.len() - 1
            }
        };
        apply(&mut runs[index].1, event);
    }
    let Some(last) = events.last() else { return Ok(Vec::new()) };
    let mut open: Vec<&(Option<RunId>, RunTurnState)> =
        runs.iter().filter(|(_, state)| state.open_turn.is_some()).collect();
    open.sort_by_key(|(_, state)| state.open_turn.map(|(_, seq)| seq));
    let mut closers = Vec::new();
    let mut next_seq = last.seq.get() + 1;
    let mut push = |run: &Option<RunId>, event_type: &str, data: Value| {
        closers.push(Event {
            seq: Seq(next_seq),
            event_type: EventType::parse(event_type).expect("reserved type"),
            time: last.time,
            run: run.clone(),
            data: JsonText::from(&data),
            ignorable: false,
        });
        next_seq += 1;
    };
    for (run, state) in open {
        let (turn, _) = state.open_turn.expect("filtered");
        for call in &state.pending {
            let (code, name, content, mut data) = match call.started_seq {
                Some(call_seq) => (
                    TOOL_OUTCOME_UNKNOWN,
                    "ToolOutcomeUnknownError",
                    "The tool call was interrupted after it started; its outcome is unknown. Retry only read-only or idempotent work; otherwise verify the effect or ask the user.",
                    json!({"call_seq": call_seq}),
                ),
                None => (
                    TOOL_NOT_STARTED,
                    "ToolNotStartedError",
                    "The tool call was interrupted before it started. Retry it if it is still needed.",
                    json!({}),
                ),
            };
            let object = data.as_object_mut().expect("object");
            object.insert("call_id".into(), json!(call.call_id));
            object.insert("content".into(), json!(content));
            object.insert("is_error".into(), json!(true));
            object.insert("error".into(), json!({"code": code, "name": name}));
            object.insert("turn".into(), json!(turn));
            push(run, vocab::TOOL_RESULT, data);
        }
        if let Some((step_turn, step)) = state.open_step {
            push(run, vocab::STEP_END, json!({"turn": step_turn, "step": step}));
        }
        push(run, vocab::TURN_END, json!({"turn": turn, "reason": INTERRUPTED}));
    }
    Ok(closers)
}

fn apply(state: &mut RunTurnState, event: &Event) {
    let data = event.data.to_value();
    match event.event_type.as_str() {
        vocab::TURN_START => {
            state.reset();
            state.open_turn = Some((field_u64(&data, "turn"), event.seq.get()));
        }
        vocab::TURN_END => state.reset(),
        vocab::STEP_START => {
            state.open_step = Some((field_u64(&data, "turn"), field_u64(&data, "step")));
        }
        vocab::STEP_END => {
            state.open_step = None;
            state.pending.clear();
        }
        vocab::ASSISTANT_MESSAGE => {
            let calls = data.get("tool_calls").and_then(Value::as_array).cloned().unwrap_or_default();
            for call in calls {
                if let Some(call_id) = field_str(&call, "call_id") {
                    if state.pending_mut(call_id).is_none() {
                        state.pending.push(PendingCall { call_id: call_id.to_owned(), started_seq: None });
                    }
                }
            }
        }
        vocab::TOOL_CALL => {
            if let Some(call_id) = field_str(&data, "call_id") {
                match state.pending_mut(call_id) {
                    Some(call) => call.started_seq = Some(event.seq.get()),
                    None => state.pending.push(PendingCall {
                        call_id: call_id.to_owned(),
                        started_seq: Some(event.seq.get()),
                    }),
                }
            }
        }
        vocab::TOOL_RESULT => {
            if let Some(call_id) = field_str(&data, "call_id") {
                state.pending.retain(|call| call.call_id != call_id);
            }
        }
        _ => {}
    }
}
