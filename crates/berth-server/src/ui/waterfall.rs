//! A turn's trace: a waterfall of its model calls (`model/call`: model, tokens, latency,
//! errors) and tool executions (`tool/call` to `tool/result`) on a time axis from the
//! turn's start, read from the events the page already loaded — never a read of its own.
//!
//! Bars are SVG rectangles whose `x` and `width` are percentages of the turn's span: the
//! CSP allows no inline style, and no script is needed to draw them.

use super::layout::duration_text;
use super::timeline::{Item, Timeline, ToolPairing, Turn};
use berth_core::vocabulary as vocab;
use berth_core::Event;
use maud::{html as markup, Markup};
use serde_json::Value;
use std::ops::RangeInclusive;

/// The narrowest bar drawn, in percent of the axis (the row's figures keep the real width).
const BAR_DRAWN_MIN_PERCENT: f64 = 0.5;

/// What one row of the waterfall shows.
#[derive(Clone, Debug, PartialEq)]
pub enum RowKind {
    /// A `model/call`: tokens in, out and cached (each when given); its error code.
    Model { input_tokens: Option<u64>, output_tokens: Option<u64>, cached_tokens: Option<u64>, error: Option<String> },
    /// A tool execution; `outcome` is `ok`, `error`, `no result` or `interrupted` (a
    /// repair's closer: no duration from it).
    Tool { outcome: &'static str },
}

/// One row: a label (the model or tool name), where its bar starts and how long it is,
/// in ms from the turn's start and as percentages of the axis. A row without a bar (a
/// tool with no result, or a repaired one) has `bar: None`, starting where it started.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub label: String,
    /// The event the row was read from (`model/call`, `tool/call`).
    pub seq: u64,
    pub start_ms: f64,
    /// Where its bar ends, in ms from the turn's start (a model call that began before
    /// the turn is cut at the turn's start; its latency stays `duration_ms`).
    pub end_ms: f64,
    pub duration_ms: Option<f64>,
    /// (offset, width) in percent of the axis.
    pub bar: Option<(f64, f64)>,
    pub kind: RowKind,
}

/// A turn's waterfall: its rows in the order they started, over an axis of `span_ms`.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    pub span_ms: f64,
    pub rows: Vec<Row>,
}

/// The indexes of the turn's events on the page (its first to its last).
fn turn_range(built: &Timeline, turn: &Turn) -> RangeInclusive<usize> {
    let mut last = turn.first.max(turn.end.unwrap_or(0));
    for step in &turn.steps {
        let tools = step.items.iter().filter_map(|item| match item {
            Item::Event(index) => Some(*index),
            Item::Tool(tool) => {
                let pairing = &built.tools[*tool];
                [pairing.requested_at, pairing.started_at, pairing.result_at].into_iter().flatten().max()
            }
        });
        let bounds = [step.start, step.end].into_iter().flatten();
        last = tools.chain(bounds).chain(step.bookkeeping.iter().copied()).fold(last, usize::max);
    }
    turn.first..=last
}

fn model_row(event: &Event, base_ms: f64) -> Row {
    let data = event.data.to_value();
    let tokens = |field: &str| data.get(field).and_then(Value::as_u64);
    let latency_ms = data.get("latency_ms").and_then(Value::as_f64).filter(|ms| *ms >= 0.0);
    let end_ms = event.time.0 as f64 - base_ms;
    let error = data
        .get("error")
        .filter(|error| !error.is_null())
        .map(|error| error.get("code").and_then(Value::as_str).unwrap_or("error").to_owned());
    Row {
        label: data.get("model").and_then(Value::as_str).unwrap_or("unknown model").to_owned(),
        seq: event.seq.get(),
        // A call spans `time - latency_ms` to `time`; without a latency, a point at `time`.
        start_ms: (end_ms - latency_ms.unwrap_or(0.0)).max(0.0),
        end_ms: end_ms.max(0.0),
        duration_ms: latency_ms,
        bar: None,
        kind: RowKind::Model {
            input_tokens: tokens("input_tokens"),
            output_tokens: tokens("output_tokens"),
            cached_tokens: tokens("cached_tokens"),
            error,
        },
    }
}

fn tool_row(events: &[Event], tool: &ToolPairing, started_at: usize, base_ms: f64) -> Row {
    let started = &events[started_at];
    let start_ms = started.time.0 as f64 - base_ms;
    let result = tool.result_at.map(|index| &events[index]);
    let outcome = match (result, tool.repaired, tool.is_error) {
        (None, _, _) => "no result",
        (Some(_), true, _) => "interrupted",
        (Some(_), false, true) => "error",
        (Some(_), false, false) => "ok",
    };
    // A repair's closer carries the crashed run's last event's time: no bar from it.
    let duration_ms =
        result.filter(|_| !tool.repaired).map(|result| result.time.0.saturating_sub(started.time.0) as f64);
    Row {
        label: tool.name.clone().unwrap_or_else(|| "(unnamed tool)".to_owned()),
        seq: started.seq.get(),
        start_ms: start_ms.max(0.0),
        end_ms: (start_ms + duration_ms.unwrap_or(0.0)).max(0.0),
        duration_ms,
        bar: None,
        kind: RowKind::Tool { outcome },
    }
}

/// The waterfall of `turn` (None when it has no model call and no tool execution on
/// the page). The axis runs from the turn's first event to the latest of its last
/// event and its rows' ends.
pub fn trace(events: &[Event], built: &Timeline, turn: &Turn) -> Option<Trace> {
    let range = turn_range(built, turn);
    let base_ms = events[turn.first].time.0 as f64;
    let mut rows: Vec<Row> = range
        .clone()
        .filter(|index| events[*index].event_type.as_str() == vocab::MODEL_CALL)
        .map(|index| model_row(&events[index], base_ms))
        .collect();
    for tool in &built.tools {
        if let Some(started_at) = tool.started_at.filter(|index| range.contains(index)) {
            rows.push(tool_row(events, tool, started_at, base_ms));
        }
    }
    if rows.is_empty() {
        return None;
    }
    rows.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms).then(a.seq.cmp(&b.seq)));
    let last_event_ms = range.map(|index| events[index].time.0 as f64 - base_ms).fold(0.0, f64::max);
    let span_ms = rows.iter().map(|row| row.end_ms).fold(last_event_ms, f64::max);
    for row in &mut rows {
        let percent = |ms: f64| if span_ms > 0.0 { ms / span_ms * 100.0 } else { 0.0 };
        let has_bar = !matches!(row.kind, RowKind::Tool { outcome: "no result" | "interrupted" });
        row.bar = has_bar.then(|| (percent(row.start_ms), percent(row.end_ms - row.start_ms)));
    }
    Some(Trace { span_ms, rows })
}

/// A percentage as an SVG length, to two decimals.
fn percent_text(value: f64) -> String {
    format!("{:.2}%", (value * 100.0).round() / 100.0)
}

fn ms_text(ms: f64) -> String {
    if ms < 1000.0 && ms.fract() != 0.0 {
        format!("{:.1} ms", ms)
    } else {
        duration_text(ms.round() as u64)
    }
}

fn tokens_text(input: Option<u64>, output: Option<u64>, cached: Option<u64>) -> String {
    [(input, "in"), (output, "out"), (cached, "cached")]
        .into_iter()
        .filter_map(|(count, label)| count.map(|count| format!("{count} {label}")))
        .collect::<Vec<_>>()
        .join(" / ")
}

fn row_view(row: &Row) -> Markup {
    let (class, outcome) = match &row.kind {
        RowKind::Model { error: Some(_), .. } => ("wf-row wf-model wf-error", "error"),
        RowKind::Model { .. } => ("wf-row wf-model", "ok"),
        RowKind::Tool { outcome: "error" } => ("wf-row wf-tool wf-error", "error"),
        RowKind::Tool { outcome } => ("wf-row wf-tool", *outcome),
    };
    let bar = row.bar.map(|(offset, width)| (percent_text(offset), percent_text(width)));
    // An instant (no latency given, or 0 ms) still shows as a thin mark.
    let drawn = row.bar.map(|(offset, width)| {
        (percent_text(offset.min(100.0 - BAR_DRAWN_MIN_PERCENT)), percent_text(width.max(BAR_DRAWN_MIN_PERCENT)))
    });
    markup! {
        li class=(class) data-seq=(row.seq) data-start-ms=(row.start_ms) data-duration-ms=[row.duration_ms]
            data-offset=[bar.as_ref().map(|bar| &bar.0)] data-width=[bar.as_ref().map(|bar| &bar.1)] data-outcome=(outcome) {
            span.wf-label {
                @match &row.kind { RowKind::Model { .. } => span.badge.wf-kind { "model" }, RowKind::Tool { .. } => span.badge.wf-kind { "tool" } }
                " " strong.wf-name { (row.label) }
            }
            span.wf-track {
                @if let Some((offset, width)) = &drawn {
                    svg.wf-svg viewBox="0 0 100 10" preserveAspectRatio="none" role="img" aria-label={"+" (ms_text(row.start_ms))} {
                        rect.wf-bar x=(offset) y="0" width=(width) height="100%" {}
                    }
                } @else {
                    span.wf-nobar { "+" (ms_text(row.start_ms)) " · " (outcome) }
                }
            }
            span.wf-figures {
                @if let Some(ms) = row.duration_ms { span.wf-latency { (ms_text(ms)) } }
                @if let RowKind::Model { input_tokens, output_tokens, cached_tokens, error } = &row.kind {
                    @let tokens = tokens_text(*input_tokens, *output_tokens, *cached_tokens);
                    @if !tokens.is_empty() { " " span.wf-tokens { (tokens) } }
                    @if let Some(code) = error { " " span.badge.state-error.wf-error-code { "error " (code) } }
                }
                @if let RowKind::Tool { outcome: "error" } = row.kind { " " span.badge.state-error { "error" } }
            }
        }
    }
}

/// The waterfall, folded under a one-line summary in the turn's group.
pub fn trace_view(trace: &Trace) -> Markup {
    let models = trace.rows.iter().filter(|row| matches!(row.kind, RowKind::Model { .. })).count();
    let tools = trace.rows.len() - models;
    let errors = trace.rows.iter().filter(|row| row.class_is_error()).count();
    markup! {
        details.waterfall data-span-ms=(trace.span_ms) {
            summary {
                "Trace: " (models) @if models == 1 { " model call" } @else { " model calls" }
                ", " (tools) @if tools == 1 { " tool" } @else { " tools" }
                " over " (ms_text(trace.span_ms))
                @if errors > 0 { " · " span.badge.state-error { (errors) @if errors == 1 { " error" } @else { " errors" } } }
            }
            ol.wf-rows { @for row in &trace.rows { (row_view(row)) } }
        }
    }
}

impl Row {
    fn class_is_error(&self) -> bool {
        matches!(self.kind, RowKind::Model { error: Some(_), .. } | RowKind::Tool { outcome: "error" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ui::timeline;
    use berth_core::repair::TOOL_OUTCOME_UNKNOWN;
    use berth_core::{RunId, Timestamp};
    use serde_json::json;

    fn log(entries: &[(u64, &str, Value)]) -> Vec<Event> {
        entries
            .iter()
            .enumerate()
            .map(|(seq, (time, kind, data))| {
                Event::new(seq as u64, kind, Timestamp(*time), data.clone())
                    .unwrap()
                    .with_run(RunId::parse("run-1").unwrap())
            })
            .collect()
    }

    fn trace_of(events: &[Event]) -> Option<Trace> {
        let built = timeline::build(events);
        trace(events, &built, &built.turns[0])
    }

    #[test]
    fn an_unanswered_or_repaired_tool_has_no_bar_and_a_call_without_latency_is_a_mark() {
        let events = log(&[
            (1000, "turn/start", json!({"turn": 0})),
            (1100, "model/call", json!({"model": "m"})),
            (1200, "tool/call", json!({"call_id": "c1", "name": "slow", "arguments": {}})),
            (1300, "tool/call", json!({"call_id": "c2", "name": "never", "arguments": {}})),
            (1300, "tool/result", json!({"call_id": "c1", "content": null, "error": {"code": TOOL_OUTCOME_UNKNOWN}})),
            (1300, "turn/end", json!({"turn": 0, "reason": "interrupted"})),
        ]);
        let trace = trace_of(&events).unwrap();
        assert_eq!(trace.span_ms, 300.0);
        let shown: Vec<_> =
            trace.rows.iter().map(|row| (row.label.as_str(), row.start_ms, row.duration_ms, row.bar)).collect();
        assert_eq!(
            shown,
            [
                ("m", 100.0, None, Some((100.0 / 300.0 * 100.0, 0.0))),
                ("slow", 200.0, None, None),
                ("never", 300.0, None, None)
            ]
        );
        assert_eq!(trace.rows[1].kind, RowKind::Tool { outcome: "interrupted" });
        assert_eq!(trace.rows[2].kind, RowKind::Tool { outcome: "no result" });
    }

    #[test]
    fn a_call_begun_before_the_turn_starts_at_its_start_and_a_quiet_turn_has_no_trace() {
        let events = log(&[
            (1000, "turn/start", json!({"turn": 0})),
            (1050, "model/call", json!({"model": "m", "latency_ms": 500.5})),
            (1100, "turn/end", json!({"turn": 0, "reason": "completed"})),
            (1200, "turn/start", json!({"turn": 1})),
            (1300, "turn/end", json!({"turn": 1, "reason": "completed"})),
        ]);
        let first = trace_of(&events).unwrap();
        let row = &first.rows[0];
        assert_eq!((row.start_ms, row.end_ms, row.duration_ms, row.bar), (0.0, 50.0, Some(500.5), Some((0.0, 50.0))));
        assert_eq!(first.span_ms, 100.0, "the axis reaches the turn's last event");
        let built = timeline::build(&events);
        assert_eq!(trace(&events, &built, &built.turns[1]), None);
        assert_eq!(ms_text(500.5), "500.5 ms");
        assert_eq!(percent_text(100.0 / 3.0), "33.33%");
    }
}
