//! Usage clauses (issue 54): a session's usage computed from its `model/call`,
//! `tool/call` and `tool/result` events, authorized as reading them; a tenant's totals
//! over a time range of event times, over exactly the sessions the caller may list.

use super::fixtures::*;
use super::ServiceBackend;
use berth_core::{Clock, Error, Timestamp};
use berth_service::{NewEvent, SessionService, SessionUsage, UsageTotals};
use serde_json::{json, Value};

/// A `model/call` at `time_ms`, marked ignorable as writers do.
fn model_call(time_ms: u64, data: Value) -> NewEvent {
    NewEvent { time: Some(Timestamp(time_ms)), ignorable: true, ..event("model/call", data) }
}

fn at(time_ms: u64, event_type: &str, data: Value) -> NewEvent {
    NewEvent { time: Some(Timestamp(time_ms)), ..event(event_type, data) }
}

/// Two calls of one model, one of another, a tool call answered after 250 ms and one
/// closed by a repair, spread over `start_ms` .. `start_ms + 5_000`.
fn calls(start_ms: u64) -> Vec<NewEvent> {
    vec![
        model_call(
            start_ms,
            json!({"model": "gpt-4o", "provider": "openai", "input_tokens": 100, "output_tokens": 20,
                "cached_tokens": 50, "latency_ms": 800.5}),
        ),
        at(start_ms + 1_000, "tool/call", json!({"call_id": "c1", "name": "ls", "arguments": {}})),
        at(start_ms + 1_250, "tool/result", json!({"call_id": "c1", "content": "a b"})),
        model_call(
            start_ms + 2_000,
            json!({"model": "gpt-4o", "provider": "openai", "input_tokens": 130, "latency_ms": 200,
                "error": {"code": "rate_limited", "name": "RateLimitError"}}),
        ),
        at(start_ms + 3_000, "tool/call", json!({"call_id": "c2", "name": "grep", "arguments": {}})),
        at(start_ms + 4_000, "tool/result", json!({"call_id": "c2", "content": null, "repaired_by": "r2"})),
        model_call(start_ms + 5_000, json!({"model": "claude", "output_tokens": 7, "response_id": "msg_1"})),
        // Another `model/*` type is an extension: never counted.
        at(start_ms + 5_000, "model/usage", json!({"model": "gpt-4o", "input_tokens": 1_000})),
    ]
}

fn totals(calls: u64, errors: u64, tokens: (u64, u64, u64), model_ms: f64) -> UsageTotals {
    UsageTotals { calls, errors, input_tokens: tokens.0, output_tokens: tokens.1, cached_tokens: tokens.2, model_ms }
}

async fn session_usage(service: &SessionService, principal: &berth_service::Principal, id: &str) -> SessionUsage {
    service.session_usage(principal, &sid(id)).await.unwrap_or_else(|error| panic!("usage of {id}: {error}"))
}

/// A session's usage: totals, per (provider, model) sorted (no provider first), tool
/// time from matched call → result pairs without the repaired one; model calls alone
/// leave a session blank; a session without calls has zero usage; another user's
/// session is `NotFound`, as reading it is.
pub async fn session_usage_totals_its_model_calls_and_tool_time(b: &dyn ServiceBackend) {
    let service = b.service();
    let start_ms = b.clock().now().0;
    create(&service, &owner(), "usage", serial(DAY_MS, DAY_MS)).await;
    attach(&service, &owner(), "usage", "r1").await;
    append(&service, &owner(), "usage", Some("r1"), calls(start_ms)).await;
    let usage = session_usage(&service, &owner(), "usage").await;
    assert_eq!(usage.totals, totals(3, 1, (230, 27, 50), 1000.5), "{}", b.name());
    let by_model: Vec<_> =
        usage.by_model.iter().map(|m| (m.provider.as_deref(), m.model.as_str(), m.totals.calls)).collect();
    assert_eq!(by_model, [(None, "claude", 1), (Some("openai"), "gpt-4o", 2)]);
    assert_eq!(usage.by_model[1].totals, totals(2, 1, (230, 20, 50), 1000.5));
    assert_eq!((usage.tool_calls, usage.tool_ms), (2, 250));

    let admin_view = session_usage(&service, &admin(TENANT_A), "usage").await;
    assert_eq!(admin_view, usage);
    create(&service, &owner(), "quiet", serial(DAY_MS, DAY_MS)).await;
    assert_eq!(session_usage(&service, &owner(), "quiet").await, SessionUsage::default());
    attach(&service, &owner(), "quiet", "r1").await;
    append(&service, &owner(), "quiet", Some("r1"), vec![model_call(start_ms, json!({"model": "m"}))]).await;
    assert!(stored(&service, TENANT_A, "quiet").await.unwrap().blank, "model calls are not conversation");
    assert_eq!(session_usage(&service, &owner(), "quiet").await.totals, totals(1, 0, (0, 0, 0), 0.0));

    let bob = user_principal(TENANT_A, OTHER_USER, Some(PROJECT));
    for (who, principal) in [("bob", bob), ("tenant-b", service_principal(TENANT_B))] {
        let refused = service.session_usage(&principal, &sid("usage")).await.unwrap_err();
        assert!(matches!(refused, Error::NotFound { .. }), "{who}: {refused}");
    }
}

/// A tenant's totals over `[since, before)`: the model calls whose time is in it, over
/// the sessions the caller may list (an admin: the tenant's; a user: its own), blank
/// ones included; `sessions` counts those with a call in the range; sessions of
/// another tenant and sessions idle before the range are not read; an empty or
/// reversed range is `Invalid`.
pub async fn tenant_usage_sums_the_callers_sessions_over_the_range(b: &dyn ServiceBackend) {
    let service = b.service();
    let clock = b.clock();
    let bob = user_principal(TENANT_A, OTHER_USER, Some(PROJECT));
    let start_ms = clock.now().0;
    for (principal, id) in [(owner(), "a1"), (owner(), "a2"), (bob.clone(), "b1")] {
        create(&service, &principal, id, serial(DAY_MS, DAY_MS)).await;
        attach(&service, &principal, id, "r1").await;
        append(&service, &principal, id, Some("r1"), calls(start_ms)).await;
    }
    let other_tenant = service_principal(TENANT_B);
    create(&service, &other_tenant, "z1", serial(DAY_MS, DAY_MS)).await;
    append(&service, &other_tenant, "z1", None, calls(start_ms)).await;
    clock.advance_ms(HOUR_MS);
    let later_ms = clock.now().0;
    let late_call = || vec![model_call(later_ms, json!({"model": "late", "input_tokens": 1}))];
    append(&service, &owner(), "a2", Some("r1"), late_call()).await;
    // A blank session (model calls only) is counted too.
    create(&service, &owner(), "a3", serial(DAY_MS, DAY_MS)).await;
    attach(&service, &owner(), "a3", "r1").await;
    append(&service, &owner(), "a3", Some("r1"), late_call()).await;

    let range = |since: u64, before: u64| (Timestamp(since), Timestamp(before));
    let usage = |principal: berth_service::Principal, (since, before): (Timestamp, Timestamp)| {
        let service = service.clone();
        async move { service.tenant_usage(&principal, since, before).await }
    };
    let everything = range(start_ms, later_ms + 1);
    let all = usage(admin(TENANT_A), everything).await.unwrap();
    assert_eq!((all.sessions, all.since, all.before), (4, everything.0, everything.1), "{}", b.name());
    assert_eq!(all.usage.totals, totals(11, 3, (692, 81, 150), 3001.5));
    assert_eq!((all.usage.tool_calls, all.usage.tool_ms), (6, 750));
    let models: Vec<_> = all.usage.by_model.iter().map(|m| (m.model.as_str(), m.totals.calls)).collect();
    assert_eq!(models, [("claude", 3), ("late", 2), ("gpt-4o", 6)]);

    let alice = usage(owner(), everything).await.unwrap();
    assert_eq!((alice.sessions, alice.usage.totals.calls), (3, 8));
    let bobs = usage(bob, everything).await.unwrap();
    assert_eq!((bobs.sessions, bobs.usage.totals.calls), (1, 3));
    let tenant_b = usage(service_principal(TENANT_B), everything).await.unwrap();
    assert_eq!((tenant_b.sessions, tenant_b.usage.totals.calls), (1, 3));

    // Only the first call of each session: [start, start + 1 s).
    let first = usage(admin(TENANT_A), range(start_ms, start_ms + 1_000)).await.unwrap();
    assert_eq!((first.sessions, first.usage.totals.calls, first.usage.totals.input_tokens), (3, 3, 300));
    assert_eq!((first.usage.tool_calls, first.usage.tool_ms), (0, 0));
    // Only the late calls: two sessions had a call in range (the others were idle).
    let late = usage(admin(TENANT_A), range(later_ms, later_ms + 1)).await.unwrap();
    assert_eq!((late.sessions, late.usage.totals.calls), (2, 2));
    // After every session's activity: nothing listed, nothing counted.
    let after = usage(admin(TENANT_A), range(later_ms + 1, later_ms + HOUR_MS)).await.unwrap();
    assert_eq!((after.sessions, after.usage), (0, SessionUsage::default()));

    for (since, before) in [(start_ms, start_ms), (later_ms, start_ms)] {
        let refused = usage(admin(TENANT_A), range(since, before)).await.unwrap_err();
        assert_eq!(refused.code(), "invalid", "[{since}, {before})");
    }
}
