//! Turn repair (R-C5): the synthetic events that close a turn a crash left open.
//!
//! Pure: no I/O. For every run with an open turn it returns, in order, an error
//! `tool/result` for each pending tool call (`TOOL_NOT_STARTED` when no `tool/call` was
//! recorded, `TOOL_OUTCOME_UNKNOWN` when one was: the tool may have run), `step/end` if a
//! step is open, then `turn/end {reason: interrupted}`. Seqs continue the log; every
//! closer's time is the last real event's time, so the output is deterministic.
//!
//! A closer keeps `run` = the crashed run (repair groups by run: a closer of another
//! run would leave the crashed run's turn open at every resume). Who repaired it, and
//! when, is `data.repaired_by: {run, at}` (`mark_repaired_by`, applied by the resume
//! that appends them): a format addition older readers ignore; closers written before
//! it have no such field and read as before.

use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::{Event, EventType, Seq};
use crate::ids::RunId;
use crate::json::JsonText;
use crate::vocabulary::{self as vocab, check_reconstructable};
use serde_json::{json, Value};

pub const TOOL_NOT_STARTED: &str = "TOOL_NOT_STARTED";
pub const TOOL_OUTCOME_UNKNOWN: &str = "TOOL_OUTCOME_UNKNOWN";
pub const INTERRUPTED: &str = "interrupted";
/// The field of a closer's `data` naming the run that repaired it and when:
/// `{"run": RUN, "at": MS_SINCE_EPOCH}`.
pub const REPAIRED_BY: &str = "repaired_by";

/// Marks `closers` as written by `run`'s repair at `at` (`data.repaired_by`), leaving
/// every other field — `run`, `time`, the rest of `data` — as `repair` made it.
pub fn mark_repaired_by(closers: &mut [Event], run: &RunId, at: Timestamp) {
    for closer in closers {
        let mut data = closer.data.to_value();
        if let Some(object) = data.as_object_mut() {
            object.insert(REPAIRED_BY.into(), json!({"run": run.as_str(), "at": at.0}));
            closer.data = JsonText::from(&data);
        }
    }
}

/// The `repaired_by` of an event's `data`, if it is a closer that names it.
pub fn repaired_by(data: &Value) -> Option<(&str, Timestamp)> {
    let by = data.get(REPAIRED_BY)?;
    Some((by.get("run")?.as_str()?, Timestamp(by.get("at")?.as_u64()?)))
}

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

/// Computes the closers for `events` (a whole log, seqs contiguous from its first event,
/// or some runs' events of it in log order). Refuses (`FormatUnsupported`) an event
/// type it does not know unless it is ignorable.
pub fn interrupted_turn_closers<'a>(events: impl IntoIterator<Item = &'a Event>) -> Result<Vec<Event>> {
    Ok(repair(events, |_| true)?.closers)
}

/// What a resume learns from the events it reads.
#[derive(Debug)]
pub struct Repair {
    /// The closers of the runs no longer attached (`interrupted_turn_closers` of their
    /// events).
    pub closers: Vec<Event>,
    /// The seq of the `turn/start` of the oldest turn the closers leave open (a turn of a
    /// run still attached), or of an attached run's event repair could not read if that
    /// is earlier; none if neither: a later resume need not read before it.
    pub oldest_open: Option<u64>,
}

/// Where turns are open in a log as it grows, event by event: `repair`'s reading of
/// every run as attached, kept up to date by the writer that appends (the service's
/// cached write handle) from a point where no turn was open — the end a resume left with
/// nothing open. `oldest_open` is then what `repair` of the log from that point would
/// say, so a detach that finds none may mark the log's end for the next resume.
#[derive(Clone, Debug, Default)]
pub struct OpenTurns {
    runs: Vec<(Option<RunId>, RunTurnState)>,
    /// The first event repair could not read (an unknown type, not ignorable): a later
    /// resume must read it, so nothing may be marked past it.
    unchecked: Option<u64>,
}

impl OpenTurns {
    /// Takes in the next event of the log.
    pub fn feed(&mut self, event: &Event) {
        if self.unchecked.is_none() && check_reconstructable(event).is_err() {
            self.unchecked = Some(event.seq.get());
        }
        if !vocab::is_known(event.event_type.as_str()) {
            return;
        }
        let index = run_index(&mut self.runs, &event.run);
        apply(&mut self.runs[index].1, event);
        if self.runs[index].1.open_turn.is_none() {
            // No turn of it is open: nothing it holds can make a closer (a `turn/start`
            // resets a run's steps and calls), so it is forgotten.
            self.runs.swap_remove(index);
        }
    }

    /// The seq of the oldest open turn's `turn/start`, or of the first event repair could
    /// not read if that is earlier; none when neither is there.
    pub fn oldest_open(&self) -> Option<u64> {
        self.runs.iter().filter_map(|(_, state)| state.open_turn.map(|(_, seq)| seq)).chain(self.unchecked).min()
    }
}

/// The closers for the runs `detached` says are gone (the run-less stream is `None`),
/// from `events` in log order: the part of a log from a point where no turn was open
/// (its start, or a resume's mark) to its end. The events of the runs still attached
/// are read only to find where their open turns start; they are neither checked nor
/// closed. Refuses (`FormatUnsupported`) a detached run's event of a type it does not
/// know unless it is ignorable.
pub fn repair<'a>(
    events: impl IntoIterator<Item = &'a Event>,
    detached: impl Fn(Option<&RunId>) -> bool,
) -> Result<Repair> {
    // Runs in order of first appearance; `None` is the run-less (serial) stream.
    let mut runs: Vec<(Option<RunId>, RunTurnState)> = Vec::new();
    let mut last = None;
    // The first event of a run still attached that repair could not read (a type it
    // does not know, not ignorable): a later resume, when its run is gone, must read
    // (and refuse) it, so the mark stays at or before it.
    let mut unchecked = None;
    for event in events {
        if detached(event.run.as_ref()) {
            last = Some(event);
            check_reconstructable(event)?;
        } else if unchecked.is_none() && check_reconstructable(event).is_err() {
            unchecked = Some(event.seq.get());
        }
        if !vocab::is_known(event.event_type.as_str()) {
            continue; // ignorable unknown type, or an attached run's (not checked)
        }
        let index = run_index(&mut runs, &event.run);
        apply(&mut runs[index].1, event);
    }
    let open_turn_of = |run: &Option<RunId>, state: &RunTurnState| {
        state.open_turn.filter(|_| !detached(run.as_ref())).map(|(_, seq)| seq)
    };
    let oldest_open = runs.iter().filter_map(|(run, state)| open_turn_of(run, state)).chain(unchecked).min();
    let Some(last) = last else {
        return Ok(Repair { closers: Vec::new(), oldest_open });
    };
    let mut open: Vec<&(Option<RunId>, RunTurnState)> =
        runs.iter().filter(|(run, state)| state.open_turn.is_some() && detached(run.as_ref())).collect();
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
            idempotency: None,
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
    Ok(Repair { closers, oldest_open })
}

/// The top-level fields of an event's data that repair reads, left as raw text: the
/// rest of the data (a message's content, often most of the log) is skipped over, never
/// made into a tree.
#[derive(serde::Deserialize)]
struct RepairFields<'a> {
    #[serde(borrow, default)]
    turn: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    step: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    call_id: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    tool_calls: Option<&'a serde_json::value::RawValue>,
}

/// What repair reads of an event's data: `turn`, `step` (0 unless a non-negative
/// integer), `call_id` (a string, else none) and the `call_id`s of the objects in a
/// `tool_calls` array — the same as reading them from the data's tree (`from_tree`,
/// which data the fields cannot be read from directly, e.g. a repeated key, goes to).
#[derive(Debug, PartialEq)]
struct Read {
    turn: u64,
    step: u64,
    call_id: Option<String>,
    tool_call_ids: Vec<String>,
}

impl Read {
    fn of(event: &Event) -> Read {
        Read::from_fields(event.data.as_str()).unwrap_or_else(|| Read::from_tree(&event.data.to_value()))
    }

    fn from_fields(text: &str) -> Option<Read> {
        // serde reads a struct from an array too (by position): only objects here.
        if !text.trim_start().starts_with('{') {
            return None;
        }
        let fields: RepairFields<'_> = serde_json::from_str(text).ok()?;
        let number = |raw: Option<&serde_json::value::RawValue>| {
            raw.and_then(|raw| serde_json::from_str::<u64>(raw.get()).ok()).unwrap_or(0)
        };
        let string = |raw: Option<&serde_json::value::RawValue>| {
            raw.and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
        };
        let mut tool_call_ids = Vec::new();
        if let Some(calls) = fields.tool_calls.and_then(|raw| serde_json::from_str::<Vec<Value>>(raw.get()).ok()) {
            tool_call_ids.extend(calls.iter().filter_map(|call| field_str(call, "call_id")).map(str::to_owned));
        }
        Some(Read {
            turn: number(fields.turn),
            step: number(fields.step),
            call_id: string(fields.call_id),
            tool_call_ids,
        })
    }

    fn from_tree(data: &Value) -> Read {
        let calls = data.get("tool_calls").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        Read {
            turn: field_u64(data, "turn"),
            step: field_u64(data, "step"),
            call_id: field_str(data, "call_id").map(str::to_owned),
            tool_call_ids: calls.iter().filter_map(|call| field_str(call, "call_id")).map(str::to_owned).collect(),
        }
    }
}

/// Where `run`'s state is in `runs` (runs in order of first appearance), added if new.
fn run_index(runs: &mut Vec<(Option<RunId>, RunTurnState)>, run: &Option<RunId>) -> usize {
    match runs.iter().position(|(known, _)| known == run) {
        Some(index) => index,
        None => {
            runs.push((run.clone(), RunTurnState::default()));
            runs.len() - 1
        }
    }
}

/// Only the arms that need the data read it (`Read::of`): every other event, most of a
/// log, is not parsed at all.
fn apply(state: &mut RunTurnState, event: &Event) {
    match event.event_type.as_str() {
        vocab::TURN_START => {
            state.reset();
            state.open_turn = Some((Read::of(event).turn, event.seq.get()));
        }
        vocab::TURN_END => state.reset(),
        vocab::STEP_START => {
            let data = Read::of(event);
            state.open_step = Some((data.turn, data.step));
        }
        vocab::STEP_END => {
            state.open_step = None;
            state.pending.clear();
        }
        vocab::ASSISTANT_MESSAGE => {
            for call_id in Read::of(event).tool_call_ids {
                if state.pending_mut(&call_id).is_none() {
                    state.pending.push(PendingCall { call_id, started_seq: None });
                }
            }
        }
        vocab::TOOL_CALL => {
            if let Some(call_id) = Read::of(event).call_id {
                match state.pending_mut(&call_id) {
                    Some(call) => call.started_seq = Some(event.seq.get()),
                    None => state.pending.push(PendingCall { call_id, started_seq: Some(event.seq.get()) }),
                }
            }
        }
        vocab::TOOL_RESULT => {
            if let Some(call_id) = Read::of(event).call_id {
                state.pending.retain(|call| call.call_id != call_id);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Timestamp;

    struct Log(Vec<Event>);

    impl Log {
        fn new() -> Log {
            Log(Vec::new())
        }
        fn push(&mut self, run: Option<&str>, event_type: &str, data: Value) -> &mut Log {
            let seq = self.0.len() as u64;
            let mut event = Event::new(seq, event_type, Timestamp(100 + seq), data).unwrap();
            event.run = run.map(|r| RunId::parse(r).unwrap());
            self.0.push(event);
            self
        }
        fn closers(&self) -> Vec<(String, Option<String>, Value)> {
            interrupted_turn_closers(&self.0)
                .unwrap()
                .into_iter()
                .enumerate()
                .map(|(index, event)| {
                    assert_eq!(event.seq.get(), self.0.len() as u64 + index as u64, "seqs continue the log");
                    assert_eq!(event.time, self.0.last().unwrap().time, "time is the last real event's");
                    (event.event_type.to_string(), event.run.map(|r| r.to_string()), event.data.to_value())
                })
                .collect()
        }
    }

    fn codes(closers: &[(String, Option<String>, Value)]) -> Vec<String> {
        closers
            .iter()
            .map(|(t, _, data)| match t.as_str() {
                "tool/result" => {
                    format!("result:{}:{}", data["call_id"].as_str().unwrap(), data["error"]["code"].as_str().unwrap())
                }
                "step/end" => format!("step/end:{}", data["step"]),
                _ => format!("{t}:{}", data["reason"].as_str().unwrap_or("")),
            })
            .collect()
    }

    #[test]
    fn marking_the_closers_names_the_repairing_run_and_keeps_the_crashed_one() {
        let mut log = Log::new();
        log.push(Some("run-a"), "turn/start", json!({"turn": 0}))
            .push(
                Some("run-a"),
                "assistant/message",
                json!({"content": "", "tool_calls": [{"call_id": "c1", "name": "ls", "arguments": {}}]}),
            )
            .push(Some("run-a"), "tool/call", json!({"call_id": "c1", "name": "ls", "arguments": {}}));
        let plain = interrupted_turn_closers(&log.0).unwrap();
        let mut marked = plain.clone();
        let by = RunId::parse("run-b").unwrap();
        mark_repaired_by(&mut marked, &by, Timestamp(900_000));
        assert_eq!(marked.len(), 2);
        for (closer, before) in marked.iter().zip(&plain) {
            assert_eq!(
                (&closer.run, closer.time, closer.seq),
                (&before.run, before.time, before.seq),
                "only data changes"
            );
            let data = closer.data.to_value();
            assert_eq!(data[REPAIRED_BY], json!({"run": "run-b", "at": 900_000}));
            assert_eq!(repaired_by(&data), Some(("run-b", Timestamp(900_000))));
            let mut without = data.clone();
            without.as_object_mut().unwrap().remove(REPAIRED_BY);
            assert_eq!(without, before.data.to_value(), "every other field as repair made it");
        }
        assert_eq!(repaired_by(&plain[1].data.to_value()), None, "closers written before the field read as before");
        // A marked closer still closes the turn: a second repair finds nothing open.
        let mut repaired = log.0.clone();
        repaired.extend(marked);
        assert!(interrupted_turn_closers(&repaired).unwrap().is_empty());
    }

    /// `repair` with only the runs `gone` detached: the closers' types and runs, and
    /// where the oldest turn left open starts.
    fn repair_of(log: &Log, gone: &[&str]) -> (Vec<(String, String)>, Option<u64>) {
        let scan = repair(&log.0, |run| run.is_none_or(|run| gone.contains(&run.as_str()))).unwrap();
        let closers = scan
            .closers
            .iter()
            .map(|event| {
                (event.event_type.to_string(), event.run.as_ref().map(|run| run.to_string()).unwrap_or_default())
            })
            .collect();
        (closers, scan.oldest_open)
    }

    #[test]
    fn repair_closes_only_detached_runs_and_says_where_the_oldest_open_turn_starts() {
        let mut log = Log::new();
        log.push(Some("a"), "turn/start", json!({"turn": 0}))
            .push(Some("b"), "turn/start", json!({"turn": 0}))
            .push(Some("a"), "turn/end", json!({"turn": 0, "reason": "completed"}))
            .push(Some("a"), "turn/start", json!({"turn": 1}))
            .push(Some("c"), "turn/start", json!({"turn": 0}));
        let end = |run: &str| ("turn/end".to_owned(), run.to_owned());
        assert_eq!(repair_of(&log, &["c"]), (vec![end("c")], Some(1)), "b's turn is the oldest left open");
        assert_eq!(repair_of(&log, &["b", "c"]), (vec![end("b"), end("c")], Some(3)), "then a's second turn");
        assert_eq!(repair_of(&log, &["a", "b", "c"]), (vec![end("b"), end("a"), end("c")], None));
        assert_eq!(repair_of(&log, &[]), (vec![], Some(1)), "nothing detached: nothing closed");
        assert_eq!(repair(&log.0, |_| true).unwrap().closers, interrupted_turn_closers(&log.0).unwrap());
    }

    /// Fed one event at a time, `OpenTurns` says what `repair` of the log so far says
    /// with every run attached, at every length of the log.
    #[test]
    fn open_turns_fed_event_by_event_agree_with_repair_at_every_length() {
        let mut log = Log::new();
        log.push(Some("a"), "user/message", json!({"content": "hi"}))
            .push(Some("a"), "turn/start", json!({"turn": 0}))
            .push(Some("b"), "turn/start", json!({"turn": 0}))
            .push(Some("a"), "step/start", json!({"turn": 0, "step": 0}))
            .push(Some("a"), "tool/call", json!({"call_id": "c1", "name": "t"}))
            .push(Some("a"), "tool/result", json!({"call_id": "c1", "content": "ok"}))
            .push(Some("a"), "turn/end", json!({"turn": 0, "reason": "completed"}))
            .push(None, "turn/start", json!({"turn": 0}))
            .push(Some("b"), "turn/end", json!({"turn": 0, "reason": "completed"}))
            .push(Some("a"), "tool/call", json!({"call_id": "c2", "name": "t"}))
            .push(None, "turn/end", json!({"turn": 0, "reason": "completed"}))
            .push(Some("c"), "myapp/x", json!({}))
            .push(Some("a"), "turn/start", json!({"turn": 1}))
            .push(Some("a"), "turn/end", json!({"turn": 1, "reason": "completed"}));
        let mut turns = OpenTurns::default();
        let mut seen = Vec::new();
        for (length, event) in log.0.iter().enumerate() {
            turns.feed(event);
            let expected = repair(&log.0[..=length], |_| false).unwrap().oldest_open;
            assert_eq!(turns.oldest_open(), expected, "after {} events", length + 1);
            seen.push(turns.oldest_open());
        }
        assert_eq!(seen[..3], [None, Some(1), Some(1)]);
        assert_eq!(seen[7..9], [Some(2), Some(7)], "b's turn, then the run-less one");
        assert_eq!(seen[10], None, "every turn closed");
        assert_eq!(seen[11..], [Some(11), Some(11), Some(11)], "an unreadable event holds it from then on");
    }

    #[test]
    fn an_attached_runs_unreadable_event_holds_the_oldest_open_back() {
        let mut log = Log::new();
        log.push(Some("a"), "turn/start", json!({"turn": 0}))
            .push(Some("a"), "turn/end", json!({"turn": 0, "reason": "completed"}))
            .push(Some("a"), "myapp/x", json!({}))
            .push(Some("b"), "turn/start", json!({"turn": 0}));
        assert_eq!(repair_of(&log, &[]), (vec![], Some(2)), "read again (and refused) once a is gone");
        assert_eq!(repair_of(&log, &["b"]).1, Some(2));
        let refused = repair(&log.0, |run| run.is_some_and(|run| run.as_str() == "a")).unwrap_err();
        assert_eq!(refused.code(), "format_unsupported");
    }

    #[test]
    fn empty_and_balanced_logs_need_nothing() {
        assert!(Log::new().closers().is_empty());
        let mut log = Log::new();
        log.push(None, "turn/start", json!({"turn": 0}))
            .push(None, "user/message", json!({"content": "hi"}))
            .push(None, "step/start", json!({"turn": 0, "step": 0}))
            .push(None, "assistant/message", json!({"content": "hello"}))
            .push(None, "step/end", json!({"turn": 0, "step": 0}))
            .push(None, "turn/end", json!({"turn": 0, "reason": "completed"}));
        assert!(log.closers().is_empty());
    }

    #[test]
    fn open_turn_with_pending_calls_gets_exact_closers() {
        let mut log = Log::new();
        log.push(None, "turn/start", json!({"turn": 3}))
            .push(None, "step/start", json!({"turn": 3, "step": 1}))
            .push(
                None,
                "assistant/message",
                json!({"content": "", "tool_calls": [
                    {"call_id": "a", "name": "read", "arguments": {}},
                    {"call_id": "b", "name": "write", "arguments": {}},
                    {"call_id": "c", "name": "ls", "arguments": {}}
                ]}),
            )
            .push(None, "tool/call", json!({"call_id": "b", "name": "write", "arguments": {}}))
            .push(None, "tool/result", json!({"call_id": "c", "content": "ok"}));
        let closers = log.closers();
        assert_eq!(
            codes(&closers),
            ["result:a:TOOL_NOT_STARTED", "result:b:TOOL_OUTCOME_UNKNOWN", "step/end:1", "turn/end:interrupted"]
        );
        assert_eq!(closers[1].2["call_seq"], 3);
        assert_eq!(closers[0].2["is_error"], true);
        assert_eq!(closers[3].2["turn"], 3);
    }

    #[test]
    fn tool_call_without_request_and_no_open_step() {
        let mut log = Log::new();
        log.push(None, "turn/start", json!({"turn": 0})).push(
            None,
            "tool/call",
            json!({"call_id": "x", "name": "n", "arguments": 1}),
        );
        assert_eq!(codes(&log.closers()), ["result:x:TOOL_OUTCOME_UNKNOWN", "turn/end:interrupted"]);
    }

    #[test]
    fn a_step_end_settles_its_calls() {
        let mut log = Log::new();
        log.push(None, "turn/start", json!({"turn": 0}))
            .push(None, "step/start", json!({"turn": 0, "step": 0}))
            .push(
                None,
                "assistant/message",
                json!({"content": "", "tool_calls": [{"call_id": "a", "name": "n", "arguments": {}}]}),
            )
            .push(None, "step/end", json!({"turn": 0, "step": 0}));
        assert_eq!(codes(&log.closers()), ["turn/end:interrupted"]);
    }

    #[test]
    fn interleaved_runs_are_repaired_separately_in_turn_order() {
        let mut log = Log::new();
        log.push(Some("r2"), "turn/start", json!({"turn": 0}))
            .push(Some("r1"), "turn/start", json!({"turn": 0}))
            .push(Some("r1"), "step/start", json!({"turn": 0, "step": 0}))
            .push(Some("r2"), "turn/end", json!({"turn": 0, "reason": "completed"}))
            .push(Some("r2"), "turn/start", json!({"turn": 1}))
            .push(Some("r1"), "tool/call", json!({"call_id": "k", "name": "n", "arguments": {}}))
            .push(Some("r3"), "turn/start", json!({"turn": 0}))
            .push(Some("r3"), "turn/end", json!({"turn": 0, "reason": "error"}));
        let closers = log.closers();
        let runs: Vec<Option<String>> = closers.iter().map(|(_, run, _)| run.clone()).collect();
        assert_eq!(
            codes(&closers),
            ["result:k:TOOL_OUTCOME_UNKNOWN", "step/end:0", "turn/end:interrupted", "turn/end:interrupted"]
        );
        assert_eq!(runs, [Some("r1".into()), Some("r1".into()), Some("r1".into()), Some("r2".into())]);
        assert_eq!(closers[3].2["turn"], 1);
    }

    #[test]
    fn repairing_twice_appends_nothing_the_second_time() {
        let mut log = Log::new();
        log.push(None, "turn/start", json!({"turn": 0})).push(None, "step/start", json!({"turn": 0, "step": 0}));
        let closers = interrupted_turn_closers(&log.0).unwrap();
        log.0.extend(closers);
        assert!(log.closers().is_empty());
    }

    #[test]
    fn unknown_types_fail_closed_unless_ignorable() {
        let mut log = Log::new();
        log.push(None, "turn/start", json!({"turn": 0}));
        log.0.push(Event::new(1, "myapp/note", Timestamp(1), json!({})).unwrap().with_ignorable(true));
        assert_eq!(log.closers().len(), 1);
        log.0.push(Event::new(2, "myapp/state", Timestamp(1), json!({})).unwrap());
        assert_eq!(interrupted_turn_closers(&log.0).unwrap_err().code(), "format_unsupported");
    }

    /// The fields read straight from the text are the ones the data's tree gives, for
    /// every shape of data (what cannot be read directly falls back to the tree).
    #[test]
    fn fields_read_from_the_text_match_the_tree() {
        let datas = [
            r#"{"turn":3,"step":4,"call_id":"c1","content":"x"}"#,
            r#"{"turn":"3","step":-1,"call_id":7}"#,
            r#"{"turn":1.0,"step":1e2,"call_id":null,"tool_calls":null}"#,
            r#"{"turn":18446744073709551615,"step":18446744073709551616}"#,
            r#"{"turn":-0,"call_id":"a\"b\u00e9"}"#,
            r#"{"tool_calls":[{"call_id":"a"},{"call_id":5},"x",{"id":"b"},{"call_id":"c","call_id":"d"}]}"#,
            r#"{"tool_calls":{"call_id":"a"}}"#,
            r#"{"turn":1,"turn":2,"call_id":"x","call_id":"y"}"#,
            r#"[1,2,"c"]"#,
            r#""text""#,
            "12",
            "null",
            r#"{}"#,
            r#"{"nested":{"turn":9},"items":[{"call_id":"z"}]}"#,
        ];
        for data in datas {
            let text = JsonText::parse(data).unwrap_or_else(|_| {
                JsonText::from_trusted_raw(serde_json::value::RawValue::from_string(data.to_owned()).expect("raw"))
            });
            let event = Event {
                seq: Seq(0),
                event_type: EventType::parse("tool/call").unwrap(),
                time: Timestamp(1),
                run: None,
                data: text,
                ignorable: false,
                idempotency: None,
            };
            let tree = Read::from_tree(&event.data.to_value());
            assert_eq!(Read::of(&event), tree, "{data}");
        }
    }
}
