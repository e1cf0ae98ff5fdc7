//! The `/v1` API end to end over real HTTP: a whole session life through the client,
//! error statuses and codes, the OpenAPI document against real responses, health,
//! readiness and metrics.

mod common;

use berth_core::{RunId, SessionId};
use berth_server::client::Client;
use berth_service::{
    AppendRequest, AttachRequest, ClosePolicy, CreateSession, ListRequest, MetadataUpdate, NewEvent, OnBusy, Role,
};
use common::TestServer;
use hyper::Method;
use serde_json::{json, Value};

fn sid(text: &str) -> SessionId {
    SessionId::parse(text).unwrap()
}

fn rid(text: &str) -> RunId {
    RunId::parse(text).unwrap()
}

async fn raw(client: &Client, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let response = client.send(method, path, body.map(|body| serde_json::to_vec(&body).unwrap()), &[]).await.unwrap();
    let value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    (response.status.as_u16(), value)
}

#[tokio::test]
async fn a_whole_session_life_over_http() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let server = TestServer::start().await;
    let alice = server.client(&server.key("acme", "alice", None, Role::User));
    let admin = server.client(&server.key("acme", "root", None, Role::Admin));
    assert_eq!(alice.whoami().await.unwrap().user.as_str(), "alice");

    let create = CreateSession { id: Some(sid("chat-1")), title: Some("demo".into()), ..CreateSession::default() };
    let record = alice.create(&create).await.unwrap();
    assert_eq!(record.header.scope.tenant.as_str(), "acme");
    assert_eq!(record.header.scope.user.as_str(), "alice");
    let again = alice.create(&create).await.unwrap_err();
    assert_eq!(again.code(), "already_exists");

    let attachment = alice
        .attach(&sid("chat-1"), &AttachRequest { run_id: Some(rid("run-1")), ..AttachRequest::default() })
        .await
        .unwrap();
    assert_eq!(attachment.run.run_id.as_str(), "run-1");
    let busy = alice.attach(&sid("chat-1"), &AttachRequest::default()).await.unwrap_err();
    assert_eq!(busy.code(), "busy");

    let events = vec![
        NewEvent::new("turn/start", json!({"turn": 0})),
        NewEvent::new("user/message", json!({"content": "list files"})),
        NewEvent::new("step/start", json!({"turn": 0, "step": 0})),
        NewEvent::new("tool/call", json!({"call_id": "c1", "name": "ls", "arguments": {}})),
    ];
    let request = AppendRequest {
        memory: Vec::new(),
        run: Some(rid("run-1")),
        expected_seq: Some(0),
        events,
        idempotency_key: None,
    };
    let outcome = alice.append(&sid("chat-1"), &request).await.unwrap();
    assert_eq!((outcome.first_seq, outcome.next_seq, outcome.duplicate), (0, 4, false));
    // The same retry is a no-op success; different content at that seq is a conflict.
    let retry = alice.append(&sid("chat-1"), &request).await.unwrap();
    assert!(retry.duplicate);
    let mut different = request.clone();
    different.events.truncate(1);
    different.events[0] = NewEvent::new("user/message", json!({"content": "other"}));
    let conflict = alice.append(&sid("chat-1"), &different).await.unwrap_err();
    assert_eq!(conflict.code(), "seq_conflict");

    let read = alice.read(&sid("chat-1"), 1, Some(2)).await.unwrap();
    assert_eq!(read.len(), 2);
    assert_eq!(read[0].seq.0, 1);
    assert_eq!(alice.read(&sid("chat-1"), 0, None).await.unwrap().len(), 4);

    // The agent "crashes"; a new run resumes and repairs the open turn.
    let resumed = alice
        .resume(
            &sid("chat-1"),
            &AttachRequest { run_id: Some(rid("run-2")), on_busy: OnBusy::Interrupt, ..AttachRequest::default() },
        )
        .await
        .unwrap();
    assert_eq!(resumed.repaired.len(), 3);
    assert_eq!(resumed.next_seq, 7);
    alice.heartbeat(&sid("chat-1"), &rid("run-2")).await.unwrap();

    let update = MetadataUpdate {
        title: Some(Some("renamed".into())),
        expected_revision: Some(berth_core::Revision(1)),
        ..MetadataUpdate::default()
    };
    let stale = alice.update_metadata(&sid("chat-1"), &update).await.unwrap_err();
    assert_eq!(stale.code(), "revision_conflict");
    let current = alice.get(&sid("chat-1")).await.unwrap();
    let update = MetadataUpdate { expected_revision: Some(current.revision), ..update };
    let renamed = alice.update_metadata(&sid("chat-1"), &update).await.unwrap();
    assert_eq!(renamed.title.as_deref(), Some("renamed"));

    let page = alice.list(&ListRequest::default()).await.unwrap();
    assert_eq!(page.items.len(), 1);

    alice.detach(&sid("chat-1"), &rid("run-2"), "completed", None).await.unwrap();
    let closed = alice.close(&sid("chat-1"), ClosePolicy::Refuse, None).await.unwrap();
    assert_eq!(closed.status.as_str(), "closed");
    let terminal =
        alice.append(&sid("chat-1"), &AppendRequest { expected_seq: None, ..request.clone() }).await.unwrap_err();
    assert_eq!(terminal.code(), "terminal");

    let fork = alice.fork(&sid("chat-1"), None, Some(&sid("chat-2"))).await.unwrap();
    assert_eq!(fork.header.parent.as_ref().unwrap().cut_seq, 7);
    let export = alice.export(&sid("chat-1"), false).await.unwrap();
    assert_eq!(export.iter().filter(|&&b| b == b'\n').count(), 8);
    let zip = alice.export(&sid("chat-1"), true).await.unwrap();
    assert!(zip.starts_with(b"PK"));

    // Reopen is admin only; the audit log too.
    assert_eq!(alice.reopen(&sid("chat-1")).await.unwrap_err().code(), "forbidden");
    assert_eq!(admin.reopen(&sid("chat-1")).await.unwrap().status.as_str(), "idle");
    assert_eq!(alice.audit_log(0, 10).await.unwrap_err().code(), "forbidden");
    let audit = admin.audit_log(0, 1000).await.unwrap();
    assert!(audit.iter().any(|entry| entry.draft.action == "reopen"));
    assert!(admin.verify_audit().await.unwrap().broken_at.is_none());
    admin
        .set_retention(&berth_catalog::RetentionPolicy { idle_ttl_ms: Some(86_400_000), ..Default::default() })
        .await
        .unwrap();

    // Delete, then import the export back.
    admin.delete(&sid("chat-2"), None).await.unwrap();
    admin.close(&sid("chat-1"), ClosePolicy::CancelRuns, None).await.unwrap();
    admin.delete(&sid("chat-1"), None).await.unwrap();
    assert_eq!(alice.get(&sid("chat-1")).await.unwrap_err().code(), "not_found");
    let imported = alice.import(export.clone()).await.unwrap();
    assert_eq!(imported[0].header.id.as_str(), "chat-1");
    assert_eq!(alice.export(&sid("chat-1"), false).await.unwrap(), export);
    server.server.shutdown().await.unwrap();
}

/// `GET …/events?before=SEQ&limit=N` (R-S15): the N events before SEQ in order, the
/// tail when SEQ is past the end; `first_seq` pages backwards; `from` and `before`
/// together is a 400; another tenant's session is a 404 as for `from`. The client
/// follows backward pages past the page size.
#[tokio::test]
async fn events_before_a_seq_over_http() {
    let server = TestServer::start().await;
    let alice = server.client(&server.key("acme", "alice", None, Role::User));
    let mallory = server.client(&server.key("other", "mallory", None, Role::User));
    alice.create(&CreateSession { id: Some(sid("long")), ..CreateSession::default() }).await.unwrap();
    let attach = AttachRequest { run_id: Some(rid("run-1")), ..AttachRequest::default() };
    alice.attach(&sid("long"), &attach).await.unwrap();
    for _ in 0..3 {
        let body = Some(common::events_body(Some("run-1"), 900));
        let (status, _) = raw(&alice, Method::POST, "/v1/sessions/long/events", body).await;
        assert_eq!(status, 200);
    }
    let seqs = |page: &Value| -> Vec<u64> {
        page["events"].as_array().unwrap().iter().map(|event| event["seq"].as_u64().unwrap()).collect()
    };
    let (status, page) = raw(&alice, Method::GET, "/v1/sessions/long/events?before=10&limit=3", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        (seqs(&page), page["first_seq"].as_u64(), page["next_seq"].as_u64()),
        (vec![7, 8, 9], Some(7), Some(10))
    );
    let (_, page) = raw(&alice, Method::GET, "/v1/sessions/long/events?before=99999&limit=2", None).await;
    assert_eq!(
        (seqs(&page), page["first_seq"].as_u64(), page["next_seq"].as_u64()),
        (vec![2698, 2699], Some(2698), Some(2700))
    );
    let (_, page) = raw(&alice, Method::GET, "/v1/sessions/long/events?before=0", None).await;
    assert_eq!((seqs(&page), page["first_seq"].as_u64(), page["next_seq"].as_u64()), (vec![], Some(0), Some(0)));
    let (_, page) = raw(&alice, Method::GET, "/v1/sessions/long/events?before=2700", None).await;
    assert_eq!(seqs(&page), (1700..2700).collect::<Vec<_>>(), "the default limit is the page size");
    let (_, page) = raw(&alice, Method::GET, "/v1/sessions/long/events?from=5&limit=2", None).await;
    assert_eq!((seqs(&page), page["first_seq"].as_u64(), page["next_seq"].as_u64()), (vec![5, 6], Some(5), Some(7)));

    // Both bound a range [from, before), read forward (a schema-valid combination, so it
    // is served rather than refused).
    let (_, page) = raw(&alice, Method::GET, "/v1/sessions/long/events?from=1&before=5", None).await;
    assert_eq!(
        (seqs(&page), page["first_seq"].as_u64(), page["next_seq"].as_u64()),
        (vec![1, 2, 3, 4], Some(1), Some(5))
    );
    let (_, page) = raw(&alice, Method::GET, "/v1/sessions/long/events?from=5&before=1", None).await;
    assert_eq!(seqs(&page), Vec::<u64>::new());
    let (status, _) = raw(&mallory, Method::GET, "/v1/sessions/long/events?before=5", None).await;
    assert_eq!(status, 404);

    let tail = alice.read_before(&sid("long"), u64::MAX, 2_500).await.unwrap();
    assert_eq!(tail.iter().map(|event| event.seq.get()).collect::<Vec<_>>(), (200..2700).collect::<Vec<_>>());
    let start = alice.read_before(&sid("long"), 1_200, 5_000).await.unwrap();
    assert_eq!(start.iter().map(|event| event.seq.get()).collect::<Vec<_>>(), (0..1200).collect::<Vec<_>>());
    assert_eq!(alice.read_before(&sid("long"), 0, 10).await.unwrap(), []);
}

/// `GET …/events?seqs=…`: a point read by position. The events at the seqs asked, each
/// once, ascending; a seq at or past the end is 404 `not_found` with `actual` = that seq
/// (as is every seq on another tenant's session: the session's 404); more than
/// `READ_SEQS_MAX` distinct seqs is 422 `page_size`, nothing read; text that is not
/// comma-separated digits is 400. `from` / `before` / `limit` narrow the seqs read.
#[tokio::test]
async fn events_at_given_seqs_over_http() {
    let server = TestServer::start().await;
    let alice = server.client(&server.key("acme", "alice", None, Role::User));
    let mallory = server.client(&server.key("other", "mallory", None, Role::User));
    alice.create(&CreateSession { id: Some(sid("points")), ..CreateSession::default() }).await.unwrap();
    let attach = AttachRequest { run_id: Some(rid("run-1")), ..AttachRequest::default() };
    alice.attach(&sid("points"), &attach).await.unwrap();
    for _ in 0..2 {
        let (status, _) =
            raw(&alice, Method::POST, "/v1/sessions/points/events", Some(common::events_body(Some("run-1"), 700)))
                .await;
        assert_eq!(status, 200);
    }
    let seqs = |page: &Value| -> Vec<u64> {
        page["events"].as_array().unwrap().iter().map(|event| event["seq"].as_u64().unwrap()).collect()
    };
    let bounds = |page: &Value| (page["first_seq"].as_u64(), page["next_seq"].as_u64());
    let (status, page) = raw(&alice, Method::GET, "/v1/sessions/points/events?seqs=1399,3,40,3,41,0", None).await;
    assert_eq!(status, 200);
    assert_eq!((seqs(&page), bounds(&page)), (vec![0, 3, 40, 41, 1399], (Some(0), Some(1400))));
    let (_, forward) = raw(&alice, Method::GET, "/v1/sessions/points/events?from=40&limit=2", None).await;
    assert_eq!(page["events"][2], forward["events"][0], "a point read answers the same event as a range read");
    let (_, page) = raw(&alice, Method::GET, "/v1/sessions/points/events?seqs=5,6,7,8&from=6&before=8", None).await;
    assert_eq!((seqs(&page), bounds(&page)), (vec![6, 7], (Some(6), Some(8))));
    let (_, page) = raw(&alice, Method::GET, "/v1/sessions/points/events?seqs=9,5,7&limit=2", None).await;
    assert_eq!(seqs(&page), vec![5, 7]);
    let (_, page) = raw(&alice, Method::GET, "/v1/sessions/points/events?seqs=9&from=10", None).await;
    assert_eq!((seqs(&page), bounds(&page)), (vec![], (Some(10), Some(10))));

    // Past the end: the first missing seq, and nothing else is answered.
    for (query, missing) in
        [("seqs=2,1400", 1400), ("seqs=1401,5000", 1401), ("seqs=99999999999999999999999", i64::MAX as u64)]
    {
        let (status, body) = raw(&alice, Method::GET, &format!("/v1/sessions/points/events?{query}"), None).await;
        assert_eq!(
            (status, body["code"].as_str(), body["actual"].as_u64()),
            (404, Some("not_found"), Some(missing)),
            "{query}"
        );
    }
    // The count bound, and malformed text.
    let many = (0..=berth_core::limits::PAGE_SIZE_MAX as u64).map(|seq| seq.to_string()).collect::<Vec<_>>().join(",");
    let (status, body) = raw(&alice, Method::GET, &format!("/v1/sessions/points/events?seqs={many}"), None).await;
    assert_eq!(
        (status, body["code"].as_str(), body["limit_name"].as_str(), body["limit"].as_u64()),
        (422, Some("limit_exceeded"), Some("page_size"), Some(1000))
    );
    let just_enough =
        (0..berth_core::limits::PAGE_SIZE_MAX as u64).map(|seq| seq.to_string()).collect::<Vec<_>>().join(",");
    let (status, page) =
        raw(&alice, Method::GET, &format!("/v1/sessions/points/events?seqs={just_enough}"), None).await;
    assert_eq!((status, seqs(&page).len()), (200, 1000));
    for bad in ["seqs=", "seqs=1,,2", "seqs=-1", "seqs=a", "seqs=1%2C2%2C"] {
        let (status, body) = raw(&alice, Method::GET, &format!("/v1/sessions/points/events?{bad}"), None).await;
        assert_eq!((status, body["code"].as_str()), (400, Some("invalid")), "{bad}");
    }
    // Another tenant's session is the session's 404, whatever the seqs.
    let (status, body) = raw(&mallory, Method::GET, "/v1/sessions/points/events?seqs=1", None).await;
    assert_eq!((status, body["actual"].as_u64()), (404, None));
}

/// `GET …/events?types=…`: only events of those types; `first_seq` / `next_seq` bound
/// what was scanned (forward, backward, a range, point reads); malformed lists are 400.
#[tokio::test]
async fn events_of_given_types_over_http() {
    let server = TestServer::start().await;
    let alice = server.client(&server.key("acme", "alice", None, Role::User));
    alice.create(&CreateSession { id: Some(sid("typed")), ..CreateSession::default() }).await.unwrap();
    let attach = AttachRequest { run_id: Some(rid("run-1")), ..AttachRequest::default() };
    alice.attach(&sid("typed"), &attach).await.unwrap();
    // 0..1200 notes, with a user message at every hundredth seq.
    let events: Vec<Value> = (0..1_200)
        .map(|i| match i % 100 {
            0 => serde_json::json!({"type": "user/message", "data": {"content": format!("m{i}")}}),
            _ => serde_json::json!({"type": "note/text", "data": {"i": i}}),
        })
        .collect();
    for chunk in events.chunks(600) {
        let body = serde_json::json!({"run": "run-1", "events": chunk});
        let (status, _) = raw(&alice, Method::POST, "/v1/sessions/typed/events", Some(body)).await;
        assert_eq!(status, 200);
    }
    let seqs = |page: &Value| -> Vec<u64> {
        page["events"].as_array().unwrap().iter().map(|event| event["seq"].as_u64().unwrap()).collect()
    };
    let bounds = |page: &Value| (page["first_seq"].as_u64().unwrap(), page["next_seq"].as_u64().unwrap());
    let get = |query: &str| {
        let path = format!("/v1/sessions/typed/events?{query}");
        let alice = &alice;
        async move { raw(alice, Method::GET, &path, None).await }
    };
    let (status, page) = get("types=user/message&limit=5").await;
    assert_eq!((status, seqs(&page), bounds(&page)), (200, vec![0, 100, 200, 300, 400], (0, 401)));
    let (_, page) = get("types=user/message&from=401").await;
    assert_eq!((seqs(&page), bounds(&page)), (vec![500, 600, 700, 800, 900, 1000, 1100], (401, 1200)));
    let (_, page) = get("types=user/message&before=1200&limit=2").await;
    assert_eq!((seqs(&page), bounds(&page)), (vec![1000, 1100], (1000, 1200)));
    let (_, page) = get("types=user/message,note/text&from=99&before=102").await;
    assert_eq!((seqs(&page), bounds(&page)), (vec![99, 100, 101], (99, 102)));
    let (_, page) = get("types=user/message&seqs=99,100,200,201").await;
    assert_eq!(seqs(&page), vec![100, 200]);
    assert_eq!(page["events"][0]["data"]["content"], "m100");
    let (_, page) = get("types=tool/call").await;
    assert_eq!((seqs(&page), bounds(&page)), (vec![], (0, 1200)));
    let many = (0..33).map(|i| format!("note/t{i}")).collect::<Vec<_>>().join(",");
    for bad in ["types=", "types=user/message,,tool/call", "types=Not%20a%20type", &format!("types={many}")] {
        let (status, body) = get(bad).await;
        assert_eq!((status, body["code"].as_str()), (400, Some("invalid")), "{bad}");
    }
    let (status, body) = get(&format!("types={}", "a".repeat(65))).await;
    assert_eq!((status, body["code"].as_str()), (413, Some("payload_too_large")));
}

#[tokio::test]
async fn error_bodies_carry_stable_codes_and_statuses() {
    let server = TestServer::start().await;
    let alice = server.client(&server.key("acme", "alice", None, Role::User));
    let service = server.client(&server.key("acme", "svc", None, Role::Service));
    let (status, body) = raw(&alice, Method::GET, "/v1/sessions/nope", None).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    let (status, body) = raw(&alice, Method::GET, "/v1/nothing-here", None).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    let (status, _) = raw(&alice, Method::PUT, "/v1/sessions", None).await;
    assert_eq!(status, 405);
    let (status, body) = raw(&server.anonymous(), Method::GET, "/v1/sessions", None).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("unauthenticated")));

    raw(&alice, Method::POST, "/v1/sessions", Some(json!({"id": "s"}))).await;
    // A user key appends only from an attached run.
    let (status, body) = raw(&alice, Method::POST, "/v1/sessions/s/events", Some(common::events_body(None, 1))).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("forbidden")));
    // Revision conflicts are 412 with both revisions.
    let (status, body) =
        raw(&alice, Method::PATCH, "/v1/sessions/s", Some(json!({"title": "x", "expected_revision": 9}))).await;
    assert_eq!((status, body["code"].as_str(), body["expected"].as_u64()), (412, Some("revision_conflict"), Some(9)));
    // Seq conflicts are 409.
    let (status, body) = raw(
        &service,
        Method::POST,
        "/v1/sessions/s/events",
        Some(json!({"expected_seq": 5, "events": [{"type": "x"}]})),
    )
    .await;
    assert_eq!((status, body["code"].as_str()), (409, Some("seq_conflict")));
    // Reserved types with bad data are 422.
    let (status, body) = raw(
        &service,
        Method::POST,
        "/v1/sessions/s/events",
        Some(json!({"events": [{"type": "turn/start", "data": {}}]})),
    )
    .await;
    assert_eq!((status, body["code"].as_str()), (422, Some("invalid")));
    // A page size over the limit is 422.
    let (status, _) = raw(&alice, Method::GET, "/v1/sessions?limit=5000", None).await;
    assert_eq!(status, 422);
    let (status, _) = raw(&alice, Method::GET, "/v1/sessions?status=bogus", None).await;
    assert_eq!(status, 400);
}

/// Usage over HTTP (issue 54): a session's totals from its `model/call` and tool events,
/// another user's session 404 as elsewhere, the caller's totals over `[since, before)`
/// (a user key: its own sessions), and typed 400s for a bad range.
#[tokio::test]
async fn usage_of_a_session_and_of_the_caller_over_a_range() {
    let server = TestServer::start().await;
    let alice = server.client(&server.key("acme", "alice", None, Role::User));
    let bob = server.client(&server.key("acme", "bob", None, Role::User));
    let admin = server.client(&server.key("acme", "root", None, Role::Admin));
    for (client, id) in [(&alice, "u-alice"), (&bob, "u-bob")] {
        client.create(&CreateSession { id: Some(sid(id)), ..CreateSession::default() }).await.unwrap();
        let attach = AttachRequest { run_id: Some(rid("r1")), ..AttachRequest::default() };
        client.attach(&sid(id), &attach).await.unwrap();
    }
    // The server runs on the system clock: the events are timed from after the creates,
    // so that a range around them overlaps the sessions' activity (how `/v1/usage`
    // picks sessions).
    let t0 = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let timed = |event_type: &str, time: u64, ignorable: bool, data: Value| NewEvent {
        time: Some(berth_core::Timestamp(time)),
        ignorable,
        ..NewEvent::new(event_type, data)
    };
    for (client, id) in [(&alice, "u-alice"), (&bob, "u-bob")] {
        let events = vec![
            timed(
                "model/call",
                t0,
                true,
                json!({"model": "gpt-4o", "provider": "openai", "input_tokens": 10,
                "output_tokens": 4, "cached_tokens": 2, "latency_ms": 120.5}),
            ),
            timed("tool/call", t0 + 10, false, json!({"call_id": "c1", "name": "ls", "arguments": {}})),
            timed("tool/result", t0 + 40, false, json!({"call_id": "c1", "content": "a"})),
            timed(
                "model/call",
                t0 + 50,
                true,
                json!({"model": "gpt-4o", "provider": "openai", "latency_ms": 3,
                "error": {"code": "timeout", "name": "APITimeoutError"}}),
            ),
        ];
        let request = AppendRequest {
            memory: Vec::new(),
            run: Some(rid("r1")),
            expected_seq: None,
            events,
            idempotency_key: None,
        };
        client.append(&sid(id), &request).await.unwrap();
    }
    let (status, body) = raw(&alice, Method::GET, "/v1/sessions/u-alice/usage", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"session": "u-alice", "calls": 2, "errors": 1, "input_tokens": 10, "output_tokens": 4,
            "cached_tokens": 2, "model_ms": 123.5, "tool_calls": 1, "tool_ms": 30,
            "by_model": [{"provider": "openai", "model": "gpt-4o", "calls": 2, "errors": 1, "input_tokens": 10,
                "output_tokens": 4, "cached_tokens": 2, "model_ms": 123.5}]})
    );
    let typed = alice.session_usage(&sid("u-alice")).await.unwrap();
    assert_eq!((typed.calls, typed.tool_ms), (2, 30));
    // Another user's session, and a missing one: the same 404.
    let (status, other) = raw(&alice, Method::GET, "/v1/sessions/u-bob/usage", None).await;
    let (_, missing) = raw(&alice, Method::GET, "/v1/sessions/nope/usage", None).await;
    assert_eq!((status, other["code"].as_str()), (404, Some("not_found")));
    assert_eq!(other["code"], missing["code"]);

    // The caller's totals.
    let until = 4_102_444_800_000u64; // 2100-01-01
    let path = format!("/v1/usage?since={t0}&before={until}");
    let (status, mine) = raw(&alice, Method::GET, &path, None).await;
    assert_eq!(status, 200, "{mine}");
    assert_eq!(
        (mine["sessions"].as_u64(), mine["calls"].as_u64(), mine["since"].as_u64()),
        (Some(1), Some(2), Some(t0))
    );
    let everyone = admin.tenant_usage(t0, until).await.unwrap();
    assert_eq!((everyone.sessions, everyone.calls, everyone.errors, everyone.tool_calls), (2, 4, 2, 2));
    let first_call_only = admin.tenant_usage(t0, t0 + 1).await.unwrap();
    assert_eq!((first_call_only.sessions, first_call_only.calls, first_call_only.input_tokens), (2, 2, 20));

    for bad in [
        "/v1/usage".to_owned(),
        format!("/v1/usage?since={t0}"),
        format!("/v1/usage?since=yesterday&before={until}"),
        format!("/v1/usage?since=-1&before={until}"),
        format!("/v1/usage?since={t0}&before={t0}"),
        format!("/v1/usage?since={until}&before={t0}"),
        format!("/v1/usage?since={t0}&before={until}&user=bob"),
        "/v1/sessions/..%2F/usage".to_owned(),
    ] {
        let (status, body) = raw(&alice, Method::GET, &bad, None).await;
        assert_eq!((status, body["code"].as_str()), (400, Some("invalid")), "{bad}: {body}");
    }
}

/// The served document is the committed golden file `crates/berth-api/openapi.json`, from
/// which the Python and TypeScript clients are typed: a change to a wire type, a handler's
/// annotation or a status must show up as a diff of that file (regenerate it with
/// `BERTH_BLESS=1 cargo test -p berth-server --test api the_served_openapi`).
#[tokio::test]
async fn the_served_openapi_document_is_the_committed_golden_file() {
    let server = TestServer::start().await;
    let alice = server.client(&server.key("acme", "alice", None, Role::User));
    let response = alice.send(Method::GET, "/v1/openapi.json", None, &[]).await.unwrap();
    assert_eq!(response.status, 200);
    let served = String::from_utf8(response.body.to_vec()).unwrap();
    let golden_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../berth-api/openapi.json");
    berth_golden::assert_golden(&golden_path, "the served OpenAPI document", served.as_bytes());
    let document: Value = serde_json::from_str(&served).unwrap();
    let paths = document["paths"].as_object().unwrap();
    for path in [
        "/v1/sessions",
        "/v1/sessions/{id}",
        "/v1/sessions/{id}/events",
        "/v1/sessions/{id}/events/stream",
        "/v1/sessions/{id}/runs",
        "/v1/sessions/{id}/runs/{run}/heartbeat",
        "/v1/sessions/{id}/runs/{run}/detach",
        "/v1/sessions/{id}/resume",
        "/v1/sessions/{id}/close",
        "/v1/sessions/{id}/fork",
        "/v1/sessions/{id}/reopen",
        "/v1/sessions/{id}/export",
        "/v1/sessions/{id}/usage",
        "/v1/usage",
        "/v1/import",
        "/v1/audit",
        "/v1/audit/verify",
        "/v1/retention",
        "/v1/whoami",
    ] {
        assert!(paths.contains_key(path), "{path} missing from the document");
    }
}

#[tokio::test]
async fn health_readiness_and_metrics() {
    let server = TestServer::start().await;
    let anonymous = server.anonymous();
    let health = anonymous.send(Method::GET, "/healthz", None, &[]).await.unwrap();
    assert_eq!(health.status.as_u16(), 200);
    let ready = anonymous.send(Method::GET, "/readyz", None, &[]).await.unwrap();
    assert_eq!(ready.status.as_u16(), 200);
    let service = server.client(&server.key("acme", "svc", None, Role::Service));
    raw(&service, Method::POST, "/v1/sessions", Some(json!({"id": "m"}))).await;
    for _ in 0..3 {
        let (status, _) =
            raw(&service, Method::POST, "/v1/sessions/m/events", Some(common::events_body(None, 2))).await;
        assert_eq!(status, 200);
    }
    raw(&service, Method::POST, "/v1/sessions/m/runs", Some(json!({"run_id": "a"}))).await;
    raw(&service, Method::POST, "/v1/sessions/m/runs", Some(json!({"run_id": "b", "on_busy": "interrupt"}))).await;
    let metrics = anonymous.send(Method::GET, "/metrics", None, &[]).await.unwrap();
    let text = String::from_utf8(metrics.body.to_vec()).unwrap();
    let value = |prefix: &str| -> f64 {
        text.lines()
            .find(|line| line.starts_with(prefix))
            .unwrap_or_else(|| panic!("{prefix} missing in\n{text}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(value("berth_append_batches_total"), 3.0);
    assert_eq!(value("berth_appended_events_total"), 6.0);
    assert!(value("berth_storage_fsyncs_total") >= 3.0);
    assert_eq!(value("berth_write_handles_open"), 1.0);
    assert_eq!(value("berth_run_lease_takeovers_total{reason=\"interrupted\"}"), 1.0);
    assert!(
        text.contains("berth_http_requests_total{method=\"POST\",route=\"/v1/sessions/{id}/events\",status=\"200\"} 3")
    );
    assert!(text.contains("berth_http_request_duration_seconds_bucket"));
    let state = server.server.state.clone();
    server.server.shutdown().await.unwrap();
    assert!(state.service.store().write_handles_open() == 0);
}

#[tokio::test]
async fn jwt_bearer_tokens_authenticate_with_the_tenant_from_their_claims() {
    use jsonwebtoken::{encode, EncodingKey, Header};
    let config = berth_server::auth::JwtConfig {
        hs256_secret: Some(b"shared-secret".to_vec()),
        issuer: Some("https://idp.example".into()),
        audience: Some("berth".into()),
        ..Default::default()
    };
    let verifier = berth_server::auth::JwtVerifier::new(&config).unwrap();
    let server = TestServer::start_with_jwt(common::test_config(), verifier).await;
    let exp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 600;
    let sign =
        |claims: Value, secret: &[u8]| encode(&Header::default(), &claims, &EncodingKey::from_secret(secret)).unwrap();
    let good = sign(
        json!({"sub": "carol", "tenant": "acme", "role": "service", "iss": "https://idp.example", "aud": "berth", "exp": exp}),
        b"shared-secret",
    );
    let principal = server.client(&good).whoami().await.unwrap();
    assert_eq!((principal.tenant.as_str(), principal.user.as_str()), ("acme", "carol"));
    assert_eq!(principal.role, Role::Service);
    let forged = sign(
        json!({"sub": "carol", "tenant": "acme", "iss": "https://idp.example", "aud": "berth", "exp": exp}),
        b"guess",
    );
    let expired = sign(
        json!({"sub": "carol", "tenant": "acme", "iss": "https://idp.example", "aud": "berth", "exp": 1}),
        b"shared-secret",
    );
    let wrong_issuer =
        sign(json!({"sub": "carol", "tenant": "acme", "iss": "other", "aud": "berth", "exp": exp}), b"shared-secret");
    // A configured issuer and audience are required claims, and `nbf` is checked (an hour
    // ahead is past the leeway; a minute behind is not).
    let no_issuer = sign(json!({"sub": "carol", "tenant": "acme", "aud": "berth", "exp": exp}), b"shared-secret");
    let no_audience =
        sign(json!({"sub": "carol", "tenant": "acme", "iss": "https://idp.example", "exp": exp}), b"shared-secret");
    let now = exp - 600;
    let not_yet = sign(
        json!({"sub": "carol", "tenant": "acme", "iss": "https://idp.example", "aud": "berth", "exp": exp, "nbf": now + 3600}),
        b"shared-secret",
    );
    for token in [forged, expired, wrong_issuer, no_issuer, no_audience, not_yet] {
        assert_eq!(server.client(&token).whoami().await.unwrap_err().code(), "unauthenticated");
    }
    let valid_from_a_minute_ago = sign(
        json!({"sub": "carol", "tenant": "acme", "iss": "https://idp.example", "aud": "berth", "exp": exp, "nbf": now - 60}),
        b"shared-secret",
    );
    assert_eq!(server.client(&valid_from_a_minute_ago).whoami().await.unwrap().user.as_str(), "carol");
}

#[tokio::test]
async fn the_background_sweeper_expires_lapsed_sessions() {
    let mut config = common::test_config();
    config.sweep_interval = Some(std::time::Duration::from_millis(50));
    let server = TestServer::start_with(config).await;
    let alice = server.client(&server.key("acme", "alice", None, Role::User));
    let (status, _) = raw(
        &alice,
        Method::POST,
        "/v1/sessions",
        Some(json!({"id": "short", "policy": {"activity_ttl_ms": 1, "run_lease_ttl_ms": 1000}})),
    )
    .await;
    assert_eq!(status, 201);
    let key = berth_core::SessionKey::new(berth_core::TenantId::parse("acme").unwrap(), sid("short"));
    // Read the catalog directly: a service read would itself observe the expiry.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let record = server.service.catalog().get(&key).await.unwrap().unwrap();
        if record.status == berth_core::lifecycle::Status::Expired {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the sweeper never expired the session");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// `status=` names listable statuses only: `creating`, an empty filter (`status=`,
/// `status=,`) or an empty part (`status=active,`) is a 400 naming the listable
/// statuses — never "no filter", which listed every status.
#[tokio::test]
async fn a_status_filter_naming_no_listable_status_is_a_400() {
    let server = TestServer::start().await;
    let admin = server.client(&server.key("acme", "root", None, Role::Admin));
    for id in ["open", "shut"] {
        let (status, _) = raw(&admin, Method::POST, "/v1/sessions", Some(json!({"id": id}))).await;
        assert_eq!(status, 201);
    }
    let (status, _) = raw(&admin, Method::POST, "/v1/sessions/shut/close", Some(json!({}))).await;
    assert_eq!(status, 200);
    for filter in ["creating", "", ",", "active,", ",closed", "active,creating", "bogus"] {
        let path = format!("/v1/sessions?include_blank=true&status={filter}");
        let (status, body) = raw(&admin, Method::GET, &path, None).await;
        assert_eq!((status, body["code"].as_str()), (400, Some("invalid")), "status={filter}: {body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("active, idle, closed, expired"), "status={filter}: {message}");
    }
    let listed = |body: &Value| -> Vec<String> {
        body["items"].as_array().unwrap().iter().map(|item| item["header"]["id"].as_str().unwrap().to_owned()).collect()
    };
    let (status, body) = raw(&admin, Method::GET, "/v1/sessions?include_blank=true&status=closed", None).await;
    assert_eq!((status, listed(&body)), (200, vec!["shut".to_owned()]));
    let (status, body) = raw(&admin, Method::GET, "/v1/sessions?include_blank=true", None).await;
    assert_eq!(status, 200);
    assert_eq!(listed(&body).len(), 2);
}

/// R-C9 over HTTP: an append body's `data` comes back from `GET …/events` and the export
/// exactly as sent minus whitespace (key order, `1.0`, `1e2`, a 30-digit integer, `-0`,
/// `\u00e9`, `\/`); strict refusals stay 400s that store nothing.
#[tokio::test]
async fn event_data_comes_back_exactly_over_http() {
    let server = TestServer::start().await;
    let alice = server.client(&server.key("acme", "alice", None, Role::User));
    alice.create(&CreateSession { id: Some(sid("exact")), ..CreateSession::default() }).await.unwrap();
    let attach = AttachRequest { run_id: Some(rid("r1")), ..AttachRequest::default() };
    alice.attach(&sid("exact"), &attach).await.unwrap();
    let exact = r#"{"b":1,"a":[1.0,1e2,123456789012345678901234567890,-0],"s":"\u00e9\/"}"#;
    let body = |data: &str| {
        format!("{{ \"run\": \"r1\", \"events\": [ {{ \"type\": \"myapp/exact\", \"data\": {data} }} ] }}").into_bytes()
    };
    let spaced = "{ \"b\" : 1 ,\n \"a\" : [ 1.0, 1e2, 123456789012345678901234567890, -0 ],\t\"s\" : \"\\u00e9\\/\" }";
    let path = "/v1/sessions/exact/events";
    let appended = alice.send(Method::POST, path, Some(body(spaced)), &[]).await.unwrap();
    assert_eq!(appended.status.as_u16(), 200, "{}", String::from_utf8_lossy(&appended.body));
    let page = alice.send(Method::GET, path, None, &[]).await.unwrap();
    let page = String::from_utf8(page.body.to_vec()).unwrap();
    assert!(page.contains(&format!("\"data\":{exact}")), "{page}");
    assert_eq!(alice.read(&sid("exact"), 0, None).await.unwrap()[0].data.as_str(), exact);
    let export = String::from_utf8(alice.export(&sid("exact"), false).await.unwrap()).unwrap();
    assert!(export.lines().nth(1).unwrap().contains(&format!(",\"data\":{exact}")), "{export}");

    let deep = "[".repeat(129) + &"]".repeat(129);
    let mut bad_utf8 = body(r#""x""#);
    let x = bad_utf8.iter().rposition(|byte| *byte == b'x').unwrap();
    bad_utf8[x] = 0xff;
    let refused = [body(r#"{"a":1,"\u0061":2}"#), body(r#""\ud800""#), body(r#"{"\udc00":1}"#), body(&deep), bad_utf8];
    for bytes in refused {
        let response = alice.send(Method::POST, path, Some(bytes.clone()), &[]).await.unwrap();
        assert_eq!(response.status.as_u16(), 400, "{}", String::from_utf8_lossy(&bytes));
    }
    assert_eq!(alice.read(&sid("exact"), 0, None).await.unwrap().len(), 1, "nothing refused was stored");
}

/// R-S14 over HTTP: `idempotency_key` in the body and the `Idempotency-Key` header are one
/// key (a retry through either gets the original outcome), both given and different is
/// a 400, the key with other content is a 409 `idempotency_key_reused` naming the stored
/// seq, and the Rust client decodes it into `Error::IdempotencyKeyReused`.
#[tokio::test]
async fn appends_are_idempotent_by_key_in_the_body_or_the_idempotency_key_header() {
    let server = TestServer::start().await;
    let service = server.client(&server.key("acme", "svc", None, Role::Service));
    service.create(&CreateSession { id: Some(sid("keyed")), ..CreateSession::default() }).await.unwrap();
    let path = "/v1/sessions/keyed/events";
    let claim = |target: u64| json!({"events": [{"type": "oa/pop", "data": {"target": target}}]});
    let send = |body: Value, headers: Vec<(&'static str, &'static str)>| {
        let client = &service;
        async move {
            let response =
                client.send(Method::POST, path, Some(serde_json::to_vec(&body).unwrap()), &headers).await.unwrap();
            (response.status.as_u16(), serde_json::from_slice::<Value>(&response.body).unwrap_or(Value::Null))
        }
    };
    let (status, first) = send(claim(1), vec![("idempotency-key", "pop-1")]).await;
    assert_eq!((status, first["first_seq"].as_u64(), first["duplicate"].as_bool()), (200, Some(0), Some(false)));
    let mut in_body = claim(1);
    in_body["idempotency_key"] = json!("pop-1");
    let (status, retry) = send(in_body.clone(), Vec::new()).await;
    assert_eq!((status, retry["next_seq"].as_u64(), retry["duplicate"].as_bool()), (200, Some(1), Some(true)));
    let (status, both) = send(in_body, vec![("Idempotency-Key", "pop-1")]).await;
    assert_eq!((status, both["duplicate"].as_bool()), (200, Some(true)), "both, agreeing");

    let mut disagreeing = claim(1);
    disagreeing["idempotency_key"] = json!("pop-2");
    let (status, body) = send(disagreeing, vec![("Idempotency-Key", "pop-1")]).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid")));
    let (status, body) = send(claim(2), vec![("Idempotency-Key", "pop-1")]).await;
    assert_eq!(
        (status, body["code"].as_str(), body["actual"].as_u64()),
        (409, Some("idempotency_key_reused"), Some(0))
    );
    let (status, body) = send(claim(2), vec![("Idempotency-Key", "no spaces")]).await;
    assert_eq!((status, body["code"].as_str()), (422, Some("invalid")));
    let mut too_long = claim(2);
    too_long["idempotency_key"] = json!("k".repeat(berth_core::limits::IDEMPOTENCY_KEY_BYTES_MAX + 1));
    let (status, body) = send(too_long, Vec::new()).await;
    assert_eq!((status, body["code"].as_str()), (422, Some("limit_exceeded")), "a key is not a payload");

    let request = AppendRequest {
        memory: Vec::new(),
        run: None,
        expected_seq: None,
        events: vec![NewEvent::new("oa/pop", json!({"target": 3}))],
        idempotency_key: Some("pop-1".into()),
    };
    let reused = service.append(&sid("keyed"), &request).await.unwrap_err();
    assert_eq!(reused, berth_core::Error::IdempotencyKeyReused { key: "pop-1".into(), first_seq: 0 });
    let read = service.read(&sid("keyed"), 0, None).await.unwrap();
    assert_eq!(read.len(), 1, "only the first claim was stored");
    assert_eq!(read[0].idempotency.as_ref().map(|mark| mark.key.as_str()), Some("pop-1"), "readers see the key");
}
