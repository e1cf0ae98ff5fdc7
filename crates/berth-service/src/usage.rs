//! Usage (issue 54): what a session's LLM calls and tool calls add up to, and a tenant's
//! totals over a time range — computed from the log when asked (the `model/call`,
//! `tool/call` and `tool/result` events), never kept in the catalog: an append writes
//! nothing more for it.
//!
//! A session's usage is authorized exactly as reading its events. A tenant's totals go
//! over the sessions the caller may list (an admin or service key: the tenant's; a user
//! key: its own), picked from the catalog's listing by activity overlapping the range,
//! and read each one's events of those types: the cost grows with the number of
//! sessions active in the range and their logs' lengths.

use super::*;
use crate::events::scan_types;
use crate::types::{ModelUsage, SessionUsage, TenantUsage, UsageTotals};
use berth_core::vocabulary::{MODEL_CALL, TOOL_CALL, TOOL_RESULT};
use serde::de::IgnoredAny;
use serde::Deserialize;
use std::collections::BTreeMap;

impl SessionService {
    /// The session's usage: totals over its `model/call` events (also per provider and
    /// model) and its tool time. Authorized like `read`.
    pub async fn session_usage(&self, principal: &Principal, id: &SessionId) -> Result<SessionUsage> {
        let record = self.load(principal, id, READ_ACTION).await?;
        let mut tally = UsageTally::new(None);
        self.tally_log(&record, &mut tally).await?;
        Ok(tally.finish())
    }

    /// The caller's totals over event times in `[since, before)`: every session it may
    /// list whose activity overlaps the range (created before `before`, last active at
    /// or after `since`), blank ones included (model calls do not make a session
    /// non-blank). `sessions` counts those with a model call in the range.
    pub async fn tenant_usage(
        &self,
        principal: &Principal,
        since: Timestamp,
        before: Timestamp,
    ) -> Result<TenantUsage> {
        if since >= before {
            return Err(Error::invalid("usage range", "since must be before before (the range is [since, before))"));
        }
        let request = ListRequest { active_since: Some(since), include_blank: true, ..ListRequest::default() };
        let mut query = self.listing_query(principal, &request)?;
        query.created_before = Some(before);
        query.limit = PAGE_SIZE_MAX;
        self.write_held_activity(principal).await;
        let mut total = UsageTally::new(Some((since, before)));
        let mut sessions = 0;
        loop {
            let page = self.catalog.list(&query).await?;
            for record in &page {
                let mut tally = UsageTally::new(Some((since, before)));
                match self.tally_log(record, &mut tally).await {
                    // Deleted since the listing: nothing to count.
                    Err(Error::NotFound { .. }) => continue,
                    outcome => outcome?,
                }
                if tally.totals.calls > 0 {
                    sessions += 1;
                }
                total.merge(tally);
            }
            match page.last() {
                Some(last) if page.len() == query.limit => query.cursor = Some(ListCursor::of(last)),
                _ => break,
            }
        }
        Ok(TenantUsage { since, before, sessions, usage: total.finish() })
    }

    /// Feeds `tally` the session's `model/call`, `tool/call` and `tool/result` events,
    /// read page by page (only those types are kept; the log is scanned in order).
    async fn tally_log(&self, record: &SessionRecord, tally: &mut UsageTally) -> Result<()> {
        let types = [EventType::parse(MODEL_CALL)?, EventType::parse(TOOL_CALL)?, EventType::parse(TOOL_RESULT)?];
        let handle = self.store.open(&record.key(), Access::Read).await?;
        let scanned = async {
            let mut from = 0;
            loop {
                let range = ReadRange::Forward { from, before: None };
                let page = scan_types(&handle, range, &types, PAGE_SIZE_MAX as u64).await?;
                page.events.iter().for_each(|event| tally.add(event));
                if page.next_seq == from {
                    return Ok(());
                }
                from = page.next_seq;
            }
        }
        .await;
        let _ = handle.close().await;
        scanned
    }
}

/// The fields of a `model/call` the totals read. Read leniently: a log written before
/// berth reserved the type may hold a `model/call` of another shape, which counts nothing.
#[derive(Deserialize)]
struct ModelCallData {
    model: String,
    #[serde(default)]
    provider: Option<String>,
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cached_tokens: Option<u64>,
    #[serde(default)]
    latency_ms: Option<f64>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct ToolEventData {
    call_id: String,
    #[serde(default)]
    repaired_by: Option<IgnoredAny>,
}

/// The running totals of one log (or of several, merged), fed one event at a time in
/// log order. With a window, a model call or tool call counts when its time is in it,
/// a tool call's duration when its result's time is.
pub(crate) struct UsageTally {
    window: Option<(Timestamp, Timestamp)>,
    totals: UsageTotals,
    by_model: BTreeMap<(Option<String>, String), UsageTotals>,
    tool_calls: u64,
    tool_ms: u64,
    /// The time of each `tool/call` not answered yet, by `call_id`.
    open_calls: HashMap<String, Timestamp>,
}

impl UsageTally {
    pub(crate) fn new(window: Option<(Timestamp, Timestamp)>) -> UsageTally {
        UsageTally {
            window,
            totals: UsageTotals::default(),
            by_model: BTreeMap::new(),
            tool_calls: 0,
            tool_ms: 0,
            open_calls: HashMap::new(),
        }
    }

    fn in_window(&self, time: Timestamp) -> bool {
        self.window.is_none_or(|(since, before)| since <= time && time < before)
    }

    pub(crate) fn add(&mut self, event: &Event) {
        match event.event_type.as_str() {
            MODEL_CALL if self.in_window(event.time) => {
                let Ok(call) = serde_json::from_str::<ModelCallData>(event.data.as_str()) else { return };
                self.totals.add(&call);
                self.by_model.entry((call.provider.clone(), call.model.clone())).or_default().add(&call);
            }
            TOOL_CALL => {
                let Ok(call) = serde_json::from_str::<ToolEventData>(event.data.as_str()) else { return };
                if self.in_window(event.time) {
                    self.tool_calls += 1;
                }
                self.open_calls.insert(call.call_id, event.time);
            }
            TOOL_RESULT => {
                let Ok(result) = serde_json::from_str::<ToolEventData>(event.data.as_str()) else { return };
                let Some(started) = self.open_calls.remove(&result.call_id) else { return };
                // A repair's closer says when the repair ran, not when the tool ended.
                if result.repaired_by.is_none() && self.in_window(event.time) {
                    self.tool_ms = self.tool_ms.saturating_add(event.time.0.saturating_sub(started.0));
                }
            }
            _ => {}
        }
    }

    /// Adds another log's totals (its open tool calls stay its own).
    pub(crate) fn merge(&mut self, other: UsageTally) {
        self.totals.merge(&other.totals);
        for (key, totals) in other.by_model {
            self.by_model.entry(key).or_default().merge(&totals);
        }
        self.tool_calls = self.tool_calls.saturating_add(other.tool_calls);
        self.tool_ms = self.tool_ms.saturating_add(other.tool_ms);
    }

    pub(crate) fn finish(self) -> SessionUsage {
        let by_model = self
            .by_model
            .into_iter()
            .map(|((provider, model), totals)| ModelUsage { provider, model, totals: totals.rounded() })
            .collect();
        SessionUsage { totals: self.totals.rounded(), by_model, tool_calls: self.tool_calls, tool_ms: self.tool_ms }
    }
}

impl UsageTotals {
    fn add(&mut self, call: &ModelCallData) {
        self.calls += 1;
        self.errors += u64::from(call.error.is_some());
        self.input_tokens = self.input_tokens.saturating_add(call.input_tokens.unwrap_or(0));
        self.output_tokens = self.output_tokens.saturating_add(call.output_tokens.unwrap_or(0));
        self.cached_tokens = self.cached_tokens.saturating_add(call.cached_tokens.unwrap_or(0));
        self.model_ms +=
            call.latency_ms.filter(|latency_ms| latency_ms.is_finite() && *latency_ms >= 0.0).unwrap_or(0.0);
    }

    /// `model_ms` to the microsecond: a sum of latencies written to the microsecond
    /// (`7.066`), not a float sum's tail (`7.066000000000001`).
    fn rounded(mut self) -> UsageTotals {
        self.model_ms = (self.model_ms * 1000.0).round() / 1000.0;
        self
    }

    fn merge(&mut self, other: &UsageTotals) {
        self.calls = self.calls.saturating_add(other.calls);
        self.errors = self.errors.saturating_add(other.errors);
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
        self.model_ms += other.model_ms;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(seq: u64, event_type: &str, time: u64, data: serde_json::Value) -> Event {
        Event::new(seq, event_type, Timestamp(time), data).unwrap()
    }

    fn log() -> Vec<Event> {
        vec![
            event(
                0,
                MODEL_CALL,
                100,
                json!({"model": "m1", "provider": "p", "input_tokens": 10, "output_tokens": 2,
                "cached_tokens": 4, "latency_ms": 12.5}),
            ),
            event(1, TOOL_CALL, 110, json!({"call_id": "a", "name": "ls", "arguments": {}})),
            event(2, TOOL_RESULT, 150, json!({"call_id": "a", "content": "x"})),
            event(
                3,
                MODEL_CALL,
                200,
                json!({"model": "m1", "provider": "p", "input_tokens": null, "latency_ms": 7.5,
                "error": {"code": "rate_limited", "name": "RateLimitError"}}),
            ),
            event(4, MODEL_CALL, 300, json!({"model": "m2", "output_tokens": 5, "error": null, "extra": [1]})),
            event(5, TOOL_CALL, 310, json!({"call_id": "b", "name": "grep", "arguments": {}})),
            // A repair's closer, a result without its call: no duration.
            event(6, TOOL_RESULT, 900, json!({"call_id": "b", "content": null, "repaired_by": "r2"})),
            event(7, TOOL_RESULT, 950, json!({"call_id": "zzz", "content": null})),
            // An older writer's model/call of another shape counts nothing.
            event(8, MODEL_CALL, 960, json!({"name": "legacy"})),
            event(9, "model/other", 970, json!({"model": "m3"})),
        ]
    }

    fn tally(window: Option<(u64, u64)>) -> SessionUsage {
        let mut tally = UsageTally::new(window.map(|(since, before)| (Timestamp(since), Timestamp(before))));
        log().iter().for_each(|event| tally.add(event));
        tally.finish()
    }

    #[test]
    fn totals_per_model_and_tool_time() {
        let usage = tally(None);
        let m1 =
            UsageTotals { calls: 2, errors: 1, input_tokens: 10, output_tokens: 2, cached_tokens: 4, model_ms: 20.0 };
        let m2 = UsageTotals { calls: 1, output_tokens: 5, ..UsageTotals::default() };
        assert_eq!(
            usage.by_model,
            vec![
                ModelUsage { provider: None, model: "m2".into(), totals: m2.clone() },
                ModelUsage { provider: Some("p".into()), model: "m1".into(), totals: m1.clone() },
            ]
        );
        let mut all = m1;
        all.merge(&m2);
        assert_eq!(usage.totals, all);
        assert_eq!((usage.tool_calls, usage.tool_ms), (2, 40));
    }

    #[test]
    fn model_time_is_summed_to_the_microsecond() {
        let mut tally = UsageTally::new(None);
        for (seq, latency_ms) in [(0, 1.1), (1, 2.2), (2, 3.766)] {
            tally.add(&event(seq, MODEL_CALL, 100 + seq, json!({"model": "m", "latency_ms": latency_ms})));
        }
        let usage = tally.finish();
        assert_eq!(usage.totals.model_ms, 7.066);
        assert_eq!(usage.by_model[0].totals.model_ms, 7.066);
    }

    #[test]
    fn a_window_counts_what_happened_in_it() {
        let usage = tally(Some((150, 300)));
        assert_eq!((usage.totals.calls, usage.totals.errors, usage.totals.model_ms), (1, 1, 7.5));
        // The call at 110 is outside; its result at 150 is inside: its duration counts.
        assert_eq!((usage.tool_calls, usage.tool_ms), (0, 40));
        assert_eq!(tally(Some((1000, 2000))), SessionUsage::default());
    }
}
