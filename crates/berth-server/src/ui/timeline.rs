//! The timeline's model, pure: a page of events grouped into turns and steps, requested
//! tool calls paired with their `tool/call` and `tool/result`, repair closers recognised.
//!
//! Rendering (`session_page`) only walks what this module builds, so every grouping rule
//! has a table test here without a server or a browser.

use berth_core::repair::{repaired_by, INTERRUPTED, TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN};
use berth_core::vocabulary as vocab;
use berth_core::{Event, Timestamp};
use serde_json::Value;
use std::collections::HashMap;

/// Who repaired a closer, when, and how long after the crashed run's last event
/// (`data.repaired_by`; closers written before the field have none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepairedBy {
    pub run: String,
    pub at: Timestamp,
    /// From the crashed run's last event (the closer's own time) to the repair.
    pub later_ms: u64,
}

impl RepairedBy {
    fn of(event: &Event) -> Option<RepairedBy> {
        let data = data_of(event);
        let (run, at) = repaired_by(&data)?;
        Some(RepairedBy { run: run.to_owned(), at, later_ms: at.0.saturating_sub(event.time.0) })
    }
}

/// One requested tool call and what became of it (indexes into the page's events).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolPairing {
    /// The run of the event that made the pairing (its request, start or result).
    pub run: Option<String>,
    pub call_id: String,
    pub name: Option<String>,
    /// The `assistant/message` that asked for it.
    pub requested_at: Option<usize>,
    /// The `tool/call` record (the tool started).
    pub started_at: Option<usize>,
    /// The `tool/result`.
    pub result_at: Option<usize>,
    /// From the request (or start) to the result, in ms of event time; none when the
    /// result is a repair's closer (its time is the crashed run's last event's).
    pub duration_ms: Option<u64>,
    /// The result reports an error (`is_error: true` or an `error` object).
    pub is_error: bool,
    /// The result is a closer written by a resume's repair.
    pub repaired: bool,
    /// Who repaired it, when (closers that say).
    pub repaired_by: Option<RepairedBy>,
}

/// What the timeline shows for one event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// An event shown on its own (messages, opaque events, a boundary with no group of
    /// its own on the page).
    Event(usize),
    /// A tool pairing, shown where its first event appears; its other events are not
    /// shown again on their own.
    Tool(usize),
}

/// A step (`step/start` … `step/end`) or the items of a turn outside any step. Its
/// boundaries are its header, not items.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Step {
    pub number: Option<u64>,
    /// Index of its `step/start`.
    pub start: Option<usize>,
    /// Index of its `step/end`, if it ended on this page.
    pub end: Option<usize>,
    pub items: Vec<Item>,
    /// Bookkeeping events of the group (`is_bookkeeping`), folded behind their count.
    pub bookkeeping: Vec<usize>,
}

/// A turn (`turn/start` … `turn/end`), or events outside any turn. Its boundaries are
/// its header, not items.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Turn {
    /// Index of the group's first event (its `turn/start`, or the first event of events
    /// outside a turn): the group's identity on the page and in live mode.
    pub first: usize,
    pub number: Option<u64>,
    /// Index of its `turn/start`, if on this page.
    pub start: Option<usize>,
    /// Index of its `turn/end`, if it ended (on this page).
    pub end: Option<usize>,
    pub end_reason: Option<String>,
    /// Closed by a resume's repair (`turn/end {reason: interrupted}`).
    pub repaired: bool,
    /// Who repaired it, when (closers that say).
    pub repaired_by: Option<RepairedBy>,
    pub steps: Vec<Step>,
}

/// A page of the timeline, turns in log order (the page renders them in that order, or
/// newest first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    pub turns: Vec<Turn>,
    pub tools: Vec<ToolPairing>,
    /// Per event: written by a resume's repair.
    pub repaired: Vec<bool>,
}

fn data_of(event: &Event) -> Value {
    event.data.to_value()
}

fn text_field<'a>(data: &'a Value, field: &str) -> Option<&'a str> {
    data.get(field).and_then(Value::as_str)
}

/// Bookkeeping rather than conversation: a framework's own record (ignorable),
/// `session/memory`, a `checkpoint`. Folded behind a count per group.
pub fn is_bookkeeping(event: &Event) -> bool {
    event.ignorable || matches!(event.event_type.as_str(), vocab::SESSION_MEMORY | vocab::CHECKPOINT)
}

/// A repair closer's tool result: an error with one of the repair's codes.
fn is_repair_result(data: &Value) -> bool {
    let code = data.get("error").and_then(|error| error.get("code")).and_then(Value::as_str);
    matches!(code, Some(TOOL_OUTCOME_UNKNOWN) | Some(TOOL_NOT_STARTED))
}

/// Which events a resume's repair wrote: each `turn/end {reason: interrupted}`, and the
/// `step/end` and repair-coded `tool/result`s of the same run just before it (the repair
/// appends exactly that run of closers, with the last real event's time).
pub fn repaired_events(events: &[Event]) -> Vec<bool> {
    let mut repaired = vec![false; events.len()];
    for (index, event) in events.iter().enumerate() {
        let data = data_of(event);
        if event.event_type.as_str() != vocab::TURN_END || text_field(&data, "reason") != Some(INTERRUPTED) {
            continue;
        }
        repaired[index] = true;
        let mut back = index;
        while back > 0 {
            back -= 1;
            let earlier = &events[back];
            let same_run = earlier.run == event.run && earlier.time == event.time;
            let closer = match earlier.event_type.as_str() {
                vocab::STEP_END => true,
                vocab::TOOL_RESULT => is_repair_result(&data_of(earlier)),
                _ => false,
            };
            if !(same_run && closer) {
                break;
            }
            repaired[back] = true;
        }
    }
    repaired
}

/// Pairs every tool call of the page by `call_id` (per run: parallel runs may reuse ids).
fn pair_tools(events: &[Event], repaired: &[bool]) -> (Vec<ToolPairing>, HashMap<usize, usize>) {
    let mut tools: Vec<ToolPairing> = Vec::new();
    let mut by_call: HashMap<(Option<String>, String), usize> = HashMap::new();
    let mut owner_of_event: HashMap<usize, usize> = HashMap::new();
    let mut pairing_for = |run: Option<String>, call_id: &str, name: Option<String>, tools: &mut Vec<ToolPairing>| {
        *by_call.entry((run.clone(), call_id.to_owned())).or_insert_with(|| {
            tools.push(ToolPairing {
                run: run.clone(),
                call_id: call_id.to_owned(),
                name,
                requested_at: None,
                started_at: None,
                result_at: None,
                duration_ms: None,
                is_error: false,
                repaired: false,
                repaired_by: None,
            });
            tools.len() - 1
        })
    };
    for (index, event) in events.iter().enumerate() {
        let run = event.run.as_ref().map(|run| run.to_string());
        let data = data_of(event);
        match event.event_type.as_str() {
            vocab::ASSISTANT_MESSAGE => {
                for call in data.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                    let Some(call_id) = text_field(call, "call_id") else { continue };
                    let name = text_field(call, "name").map(str::to_owned);
                    let tool = pairing_for(run.clone(), call_id, name, &mut tools);
                    tools[tool].requested_at.get_or_insert(index);
                }
            }
            vocab::TOOL_CALL => {
                let Some(call_id) = text_field(&data, "call_id") else { continue };
                let name = text_field(&data, "name").map(str::to_owned);
                let tool = pairing_for(run, call_id, name.clone(), &mut tools);
                tools[tool].started_at.get_or_insert(index);
                if tools[tool].name.is_none() {
                    tools[tool].name = name;
                }
                owner_of_event.insert(index, tool);
            }
            vocab::TOOL_RESULT => {
                let Some(call_id) = text_field(&data, "call_id") else { continue };
                // A result of another run answers a call left open (a crash, then the next
                // process's repair or the framework's own outcome-unknown result): the
                // newest open call with that id, if this run has none of its own.
                let tool = match open_call_of_another_run(&tools, run.as_deref(), call_id) {
                    Some(tool) => tool,
                    None => pairing_for(run, call_id, None, &mut tools),
                };
                if tools[tool].result_at.is_some() {
                    continue; // a second result stays an event of its own
                }
                tools[tool].result_at = Some(index);
                tools[tool].is_error = data.get("is_error").and_then(Value::as_bool) == Some(true)
                    || data.get("error").is_some_and(|error| !error.is_null());
                tools[tool].repaired = repaired[index];
                tools[tool].repaired_by = RepairedBy::of(event).filter(|_| repaired[index]);
                owner_of_event.insert(index, tool);
            }
            _ => {}
        }
    }
    for tool in &mut tools {
        let from = tool.requested_at.or(tool.started_at).map(|index| events[index].time.0);
        let to = tool.result_at.map(|index| events[index].time.0);
        if let (Some(from), Some(to), false) = (from, to, tool.repaired) {
            tool.duration_ms = Some(to.saturating_sub(from));
        }
    }
    (tools, owner_of_event)
}

/// The newest pairing of another run with this call id that has no result yet, when
/// `run` has no pairing of that id itself.
fn open_call_of_another_run(tools: &[ToolPairing], run: Option<&str>, call_id: &str) -> Option<usize> {
    if tools.iter().any(|tool| tool.run.as_deref() == run && tool.call_id == call_id) {
        return None;
    }
    tools.iter().rposition(|tool| tool.call_id == call_id && tool.result_at.is_none() && tool.run.as_deref() != run)
}

/// Groups a page of events (ascending seqs) into turns, steps and tool pairings.
pub fn build(events: &[Event]) -> Timeline {
    let repaired = repaired_events(events);
    let (tools, owner_of_event) = pair_tools(events, &repaired);
    let mut shown_tools = vec![false; tools.len()];
    let mut turns: Vec<Turn> = Vec::new();
    let mut open_turn = false;
    let mut open_step = false;
    for (index, event) in events.iter().enumerate() {
        let data = data_of(event);
        let kind = event.event_type.as_str();
        if kind == vocab::TURN_START {
            turns.push(Turn {
                first: index,
                number: data.get("turn").and_then(Value::as_u64),
                start: Some(index),
                steps: vec![Step::default()],
                ..Turn::default()
            });
            open_turn = true;
            open_step = false;
        } else if !open_turn && turns.last().is_none_or(|turn| turn.start.is_some()) {
            // Events between turns collect in one loose group until the next turn starts.
            turns.push(Turn { first: index, steps: vec![Step::default()], ..Turn::default() });
            open_step = false;
        }
        let Some(turn) = turns.last_mut() else { continue };
        if kind == vocab::STEP_START {
            turn.steps.push(Step {
                number: data.get("step").and_then(Value::as_u64),
                start: Some(index),
                ..Step::default()
            });
            open_step = true;
        }
        // Boundaries of a group on this page are its header; one without (a `step/end`
        // or `turn/end` whose start is on an older page) stays an item.
        let header = kind == vocab::TURN_START
            || kind == vocab::STEP_START
            || (kind == vocab::STEP_END && open_step)
            || (kind == vocab::TURN_END && open_turn);
        let item = match owner_of_event.get(&index) {
            _ if header => None,
            Some(&tool) if shown_tools[tool] => None,
            Some(&tool) => {
                shown_tools[tool] = true;
                Some(Item::Tool(tool))
            }
            None if is_bookkeeping(event) => {
                if let Some(step) = turn.steps.last_mut() {
                    step.bookkeeping.push(index);
                }
                None
            }
            None => Some(Item::Event(index)),
        };
        if let (Some(item), Some(step)) = (item, turn.steps.last_mut()) {
            step.items.push(item);
        }
        // A request's pairing is shown right after the assistant message that asked.
        if kind == vocab::ASSISTANT_MESSAGE {
            for (tool, pairing) in tools.iter().enumerate() {
                if pairing.requested_at == Some(index) && !shown_tools[tool] {
                    shown_tools[tool] = true;
                    if let Some(step) = turn.steps.last_mut() {
                        step.items.push(Item::Tool(tool));
                    }
                }
            }
        }
        if kind == vocab::STEP_END && open_step {
            if let Some(step) = turn.steps.last_mut() {
                step.end = Some(index);
            }
            turn.steps.push(Step::default());
            open_step = false;
        }
        if kind == vocab::TURN_END && open_turn {
            turn.end = Some(index);
            turn.end_reason = text_field(&data, "reason").map(str::to_owned);
            turn.repaired = repaired[index];
            turn.repaired_by = RepairedBy::of(event).filter(|_| repaired[index]);
            open_turn = false;
        }
    }
    for turn in &mut turns {
        turn.steps.retain(|step| step.start.is_some() || !step.items.is_empty() || !step.bookkeeping.is_empty());
    }
    Timeline { turns, tools, repaired }
}

/// Where a backward page should begin so it does not start inside a turn: the index of
/// the page's first `turn/start`, unless the page holds none (one turn longer than a
/// page) or already starts at one.
pub fn turn_aligned_start(events: &[Event]) -> usize {
    events.iter().position(|event| event.event_type.as_str() == vocab::TURN_START).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::{RunId, Timestamp};
    use serde_json::json;

    fn log(entries: &[(&str, Value)]) -> Vec<Event> {
        entries
            .iter()
            .enumerate()
            .map(|(seq, (kind, data))| {
                Event::new(seq as u64, kind, Timestamp(1_000 + 10 * seq as u64), data.clone())
                    .unwrap()
                    .with_run(RunId::parse("run-1").unwrap())
            })
            .collect()
    }

    fn crashed_and_repaired() -> Vec<Event> {
        let mut events = log(&[
            ("turn/start", json!({"turn": 0})),
            ("user/message", json!({"content": "list files"})),
            ("step/start", json!({"turn": 0, "step": 0})),
            ("assistant/message", json!({"content": "", "tool_calls": [{"call_id": "c1", "name": "ls"}]})),
            ("tool/call", json!({"call_id": "c1", "name": "ls", "arguments": {}})),
        ]);
        // The repair's closers carry the last real event's time.
        let last_time = events[4].time;
        for (kind, data) in [
            ("tool/result", json!({"call_id": "c1", "is_error": true, "error": {"code": TOOL_OUTCOME_UNKNOWN}})),
            ("step/end", json!({"turn": 0, "step": 0})),
            ("turn/end", json!({"turn": 0, "reason": "interrupted"})),
        ] {
            let seq = events.len() as u64;
            events.push(Event::new(seq, kind, last_time, data).unwrap().with_run(RunId::parse("run-1").unwrap()));
        }
        events
    }

    #[test]
    fn a_repaired_turn_marks_exactly_its_closers() {
        let timeline = build(&crashed_and_repaired());
        assert_eq!(timeline.repaired, vec![false, false, false, false, false, true, true, true]);
        assert_eq!(timeline.turns.len(), 1);
        let turn = &timeline.turns[0];
        assert!(turn.repaired);
        assert_eq!(turn.end_reason.as_deref(), Some("interrupted"));
        assert_eq!(timeline.tools.len(), 1);
        let tool = &timeline.tools[0];
        assert_eq!((tool.requested_at, tool.started_at, tool.result_at), (Some(3), Some(4), Some(5)));
        assert!(tool.is_error && tool.repaired);
        assert_eq!(tool.duration_ms, None, "no duration from a closer (older closers: no repaired_by)");
        assert_eq!((&tool.repaired_by, &turn.repaired_by), (&None, &None));
    }

    #[test]
    fn closers_that_name_their_repair_say_who_and_how_much_later() {
        let mut events = crashed_and_repaired();
        let by = RunId::parse("run-2").unwrap();
        let at = Timestamp(events[4].time.0 + 14 * 60_000);
        berth_core::repair::mark_repaired_by(&mut events[5..], &by, at);
        let timeline = build(&events);
        assert_eq!(timeline.repaired, vec![false, false, false, false, false, true, true, true]);
        let expected = Some(RepairedBy { run: "run-2".into(), at, later_ms: 14 * 60_000 });
        assert_eq!(timeline.turns[0].repaired_by, expected);
        assert_eq!(timeline.tools[0].repaired_by, expected);
        assert_eq!(timeline.tools[0].duration_ms, None);
        assert_eq!(timeline.turns[0].steps[1].end, Some(6), "the step's closer is its header");
    }

    #[test]
    fn a_pairing_is_shown_once_after_its_request() {
        let timeline = build(&crashed_and_repaired());
        let step = &timeline.turns[0].steps[1];
        assert_eq!(step.number, Some(0));
        assert_eq!(step.items, vec![Item::Event(3), Item::Tool(0)], "its boundaries are its header");
        assert_eq!((step.start, step.end), (Some(2), Some(6)));
        let turn = &timeline.turns[0];
        assert_eq!(turn.steps[0].items, vec![Item::Event(1)], "turn/start is the turn's header");
        assert_eq!((turn.start, turn.end), (Some(0), Some(7)));
    }

    #[test]
    fn a_result_written_by_the_next_run_answers_the_call_left_open() {
        let mut events = log(&[
            ("turn/start", json!({"turn": 0})),
            ("assistant/message", json!({"tool_calls": [{"call_id": "c1", "name": "ls"}]})),
            ("tool/call", json!({"call_id": "c1", "name": "ls"})),
        ]);
        let next = RunId::parse("run-2").unwrap();
        for (kind, data) in [
            ("tool/result", json!({"call_id": "c1", "is_error": true, "error": {"code": TOOL_OUTCOME_UNKNOWN}})),
            ("turn/end", json!({"turn": 0, "reason": "interrupted"})),
            // The next run's own call with the same id is a pairing of its own.
            ("tool/call", json!({"call_id": "c1", "name": "ls"})),
            ("tool/result", json!({"call_id": "c1", "content": "a b"})),
        ] {
            let seq = events.len() as u64;
            events.push(Event::new(seq, kind, Timestamp(2_000), data).unwrap().with_run(next.clone()));
        }
        let timeline = build(&events);
        assert_eq!(timeline.tools.len(), 2);
        let (first, second) = (&timeline.tools[0], &timeline.tools[1]);
        assert_eq!((first.requested_at, first.started_at, first.result_at), (Some(1), Some(2), Some(3)));
        assert!(first.is_error);
        assert_eq!((second.started_at, second.result_at), (Some(5), Some(6)));
        assert!(!second.is_error);
    }

    #[test]
    fn a_completed_turn_is_not_a_repair_and_errors_are_flagged() {
        let events = log(&[
            ("turn/start", json!({"turn": 3})),
            ("assistant/message", json!({"tool_calls": [{"call_id": "a", "name": "grep"}]})),
            ("tool/result", json!({"call_id": "a", "is_error": true, "content": "no such file"})),
            ("turn/end", json!({"turn": 3, "reason": "completed"})),
        ]);
        let timeline = build(&events);
        assert_eq!(timeline.turns[0].number, Some(3));
        assert!(!timeline.turns[0].repaired);
        assert!(timeline.repaired.iter().all(|repaired| !repaired));
        assert!(timeline.tools[0].is_error && !timeline.tools[0].repaired);
        assert_eq!(timeline.tools[0].started_at, None);
    }

    #[test]
    fn events_outside_turns_form_one_loose_group_until_a_turn_starts() {
        let events = log(&[
            ("checkpoint", json!({"state": 1})),
            ("acme/opaque", json!({"x": 1})),
            ("turn/start", json!({"turn": 0})),
            ("turn/end", json!({"turn": 0, "reason": "completed"})),
            ("acme/opaque", json!({"x": 2})),
        ]);
        let timeline = build(&events);
        assert_eq!(timeline.turns.len(), 3);
        assert_eq!(timeline.turns[0].start, None);
        assert_eq!(timeline.turns.iter().map(|turn| turn.first).collect::<Vec<_>>(), vec![0, 2, 4]);
        assert_eq!(timeline.turns[0].steps[0].items, vec![Item::Event(1)]);
        assert_eq!(timeline.turns[0].steps[0].bookkeeping, vec![0], "the checkpoint is folded");
        assert_eq!(timeline.turns[1].end, Some(3));
        assert_eq!(timeline.turns[2].steps[0].items, vec![Item::Event(4)]);
    }

    #[test]
    fn bookkeeping_folds_per_group_and_orphan_boundaries_stay_items() {
        let mut events = log(&[
            ("step/end", json!({"turn": 0, "step": 3})),
            ("turn/end", json!({"turn": 0, "reason": "completed"})),
            ("turn/start", json!({"turn": 1})),
            ("step/start", json!({"turn": 1, "step": 0})),
            ("assistant/message", json!({"content": "hi"})),
            ("session/memory", json!({"writes": [{}]})),
            ("acme/state", json!({"x": 1})),
            ("step/end", json!({"turn": 1, "step": 0})),
            ("checkpoint", json!({"state": 1})),
            ("step/start", json!({"turn": 1, "step": 1})),
            ("step/end", json!({"turn": 1, "step": 1})),
            ("turn/end", json!({"turn": 1, "reason": "completed"})),
        ]);
        events[6].ignorable = true;
        let timeline = build(&events);
        assert_eq!(timeline.turns.len(), 2);
        assert_eq!(timeline.turns[0].steps[0].items, vec![Item::Event(0), Item::Event(1)], "no group on this page");
        let turn = &timeline.turns[1];
        assert_eq!(turn.steps.len(), 3);
        assert_eq!(turn.steps[0].items, vec![Item::Event(4)]);
        assert_eq!(turn.steps[0].bookkeeping, vec![5, 6]);
        assert_eq!((turn.steps[1].number, turn.steps[1].bookkeeping.clone()), (None, vec![8]));
        assert_eq!((turn.steps[2].number, turn.steps[2].start, turn.steps[2].end), (Some(1), Some(9), Some(10)));
        assert!(turn.steps[2].items.is_empty(), "an empty step keeps its header");
    }

    #[test]
    fn a_backward_page_starts_at_its_first_turn() {
        let events = log(&[
            ("assistant/message", json!({})),
            ("turn/end", json!({"turn": 0, "reason": "completed"})),
            ("turn/start", json!({"turn": 1})),
        ]);
        assert_eq!(turn_aligned_start(&events), 2);
        assert_eq!(turn_aligned_start(&events[..2]), 0);
    }
}
