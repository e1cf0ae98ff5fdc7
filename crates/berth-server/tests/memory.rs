//! Scoped memory over real HTTP (`/v1/memory/...`): the authorization matrix with every
//! denial audited, bad input typed with nothing stored, exact values, compare-and-set,
//! search, namespaces, bound items deleted with their session, `forget` exact and
//! audited, export → import → export byte-identical.

mod common;

use berth_core::SessionId;
use berth_server::client::Client;
use berth_service::{CreateSession, Role};
use common::TestServer;
use hyper::Method;
use serde_json::{json, Value};

async fn send(client: &Client, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let response = client.send(method, path, body.map(|body| serde_json::to_vec(&body).unwrap()), &[]).await.unwrap();
    let value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    (response.status.as_u16(), value)
}

async fn raw_text(client: &Client, method: Method, path: &str, body: Option<Vec<u8>>) -> (u16, Vec<u8>) {
    let response = client.send(method, path, body, &[]).await.unwrap();
    (response.status.as_u16(), response.body.to_vec())
}

fn put_body(namespace: &str, key: &str, value: Value) -> Value {
    json!({"namespace": namespace, "key": key, "value": value})
}

fn q(text: &str) -> String {
    url_escape(text)
}

fn url_escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn item_path(namespace: &str, key: &str) -> String {
    format!("/v1/memory/items?namespace={}&key={}", q(namespace), q(key))
}

struct Keys {
    alice: Client,
    bob: Client,
    alice_in_p: Client,
    service: Client,
    admin: Client,
    other_tenant: Client,
}

fn keys(server: &TestServer) -> Keys {
    Keys {
        alice: server.client(&server.key("acme", "alice", None, Role::User)),
        bob: server.client(&server.key("acme", "bob", None, Role::User)),
        alice_in_p: server.client(&server.key("acme", "alice", Some("p1"), Role::User)),
        service: server.client(&server.key("acme", "svc", None, Role::Service)),
        admin: server.client(&server.key("acme", "root", None, Role::Admin)),
        other_tenant: server.client(&server.key("globex", "alice", None, Role::Admin)),
    }
}

#[tokio::test]
async fn the_authorization_matrix_with_every_denial_audited() {
    let server = TestServer::start().await;
    let k = keys(&server);
    // (client, namespace, may read, may write)
    let cases: Vec<(&str, &Client, &str, bool, bool)> = vec![
        ("alice", &k.alice, "user/alice/prefs", true, true),
        ("alice", &k.alice, "user/bob/prefs", false, false),
        ("alice", &k.alice, "project/p1", false, false),
        ("alice", &k.alice, "app/faq", true, false),
        ("alice in p1", &k.alice_in_p, "project/p1/notes", true, true),
        ("alice in p1", &k.alice_in_p, "project/p2", false, false),
        ("alice in p1", &k.alice_in_p, "user/alice", true, true),
        ("bob", &k.bob, "user/alice/prefs", false, false),
        ("service", &k.service, "user/alice/prefs", true, true),
        ("service", &k.service, "app/faq", true, true),
        ("admin", &k.admin, "project/p2", true, true),
    ];
    // Plant an item in every namespace first, with the service key.
    for (_, _, namespace, _, _) in &cases {
        let (status, _) =
            send(&k.service, Method::PUT, "/v1/memory/items", Some(put_body(namespace, "k", json!(1)))).await;
        assert_eq!(status, 200, "{namespace}");
    }
    let mut denials = 0;
    for (who, client, namespace, read, write) in &cases {
        let (status, body) = send(client, Method::GET, &item_path(namespace, "k"), None).await;
        assert_eq!(status, if *read { 200 } else { 403 }, "{who} reads {namespace}: {body}");
        let (status, _) = send(client, Method::GET, &item_path(namespace, "absent"), None).await;
        assert_eq!(
            status,
            if *read { 404 } else { 403 },
            "{who} reads absent in {namespace}: 403 whether or not it exists"
        );
        let search = json!({"prefix": namespace});
        let (status, _) = send(client, Method::POST, "/v1/memory/search", Some(search)).await;
        assert_eq!(status, if *read { 200 } else { 403 }, "{who} searches {namespace}");
        let (status, body) =
            send(client, Method::PUT, "/v1/memory/items", Some(put_body(namespace, "w", json!(2)))).await;
        assert_eq!(status, if *write { 200 } else { 403 }, "{who} writes {namespace}: {body}");
        let (status, _) = send(client, Method::DELETE, &item_path(namespace, "k2"), None).await;
        assert_eq!(status, if *write { 404 } else { 403 }, "{who} deletes in {namespace}");
        if !*write {
            assert_eq!(body["code"], "forbidden");
            let (status, _) = send(client, Method::POST, "/v1/memory/forget", Some(json!({"prefix": namespace}))).await;
            assert_eq!(status, 403, "{who} forgets {namespace}");
            denials += 3;
        }
        if !*read {
            denials += 3;
        }
    }
    // Another tenant sees nothing of acme's, whatever its role.
    let (status, _) = send(&k.other_tenant, Method::GET, &item_path("user/alice/prefs", "k"), None).await;
    assert_eq!(status, 404);
    // Every denial is in acme's audit log, with the namespace.
    let (status, log) = send(&k.admin, Method::GET, "/v1/audit?limit=1000", None).await;
    assert_eq!(status, 200);
    let denied: Vec<&Value> = log
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["outcome"] == "denied" && e["action"].as_str().unwrap().starts_with("memory."))
        .collect();
    assert_eq!(denied.len(), denials, "{denied:#?}");
    assert!(denied.iter().all(|e| e["details"]["namespace"].is_string()));
    // Usage is tenant-wide: service and admin keys only.
    assert_eq!(send(&k.alice, Method::GET, "/v1/memory/usage", None).await.0, 403);
    let (status, usage) = send(&k.service, Method::GET, "/v1/memory/usage", None).await;
    assert_eq!(status, 200);
    assert!(usage["items"].as_u64().unwrap() >= cases.len() as u64);
}

#[tokio::test]
async fn bad_input_is_typed_and_stores_nothing() {
    let server = TestServer::start().await;
    let k = keys(&server);
    let bad_namespaces =
        ["", "user", "user/", "user//x", "team/x", "user/../x", "user/alice/..", "user/alice/", "/user/alice"];
    for namespace in bad_namespaces {
        let (status, body) =
            send(&k.alice, Method::PUT, "/v1/memory/items", Some(put_body(namespace, "k", json!(1)))).await;
        assert_eq!((status, body["code"].as_str()), (422, Some("invalid")), "{namespace:?}: {body}");
    }
    let long = format!("user/alice/{}", "x".repeat(600));
    let (status, body) = send(&k.alice, Method::PUT, "/v1/memory/items", Some(put_body(&long, "k", json!(1)))).await;
    assert_eq!((status, body["limit_name"].as_str()), (413, Some("memory_namespace_bytes")), "{body}");
    let huge = "x".repeat(berth_core::limits::MEMORY_VALUE_BYTES_MAX);
    let (status, body) =
        send(&k.alice, Method::PUT, "/v1/memory/items", Some(put_body("user/alice", "k", json!(huge)))).await;
    assert_eq!((status, body["limit_name"].as_str()), (413, Some("memory_value_bytes")), "{body}");
    let (status, _) = send(&k.alice, Method::PUT, "/v1/memory/items", Some(put_body("user/alice", "", json!(1)))).await;
    assert_eq!(status, 422);
    let (status, _) = send(
        &k.alice,
        Method::PUT,
        "/v1/memory/items",
        Some(json!({"namespace": "user/alice", "key": "k", "value": 1, "ttl_ms": 0})),
    )
    .await;
    assert_eq!(status, 422);
    let (status, _) = send(
        &k.alice,
        Method::PUT,
        "/v1/memory/items",
        Some(json!({"namespace": "user/alice", "key": "k", "value": 1, "extra": 1})),
    )
    .await;
    assert_eq!(status, 400, "unknown fields are refused");
    for search in [
        json!({"prefix": "user/alice", "query": " ;,. "}),
        json!({"prefix": "user/alice", "order": "relevance"}),
        json!({"prefix": "user/alice", "order": "size"}),
        json!({"prefix": "user/alice", "filter": [{"field": "n", "op": "in", "value": 1}]}),
        json!({"prefix": "user/alice", "filter": [{"field": "n", "op": "gt", "value": true}]}),
        json!({"prefix": "user/alice", "filter": [{"field": "n", "op": "like", "value": 1}]}),
        json!({"prefix": "user/alice", "cursor": "garbage"}),
        json!({"prefix": "user/alice", "limit": 0}),
        json!({"prefix": "user/alice", "limit": 1001}),
    ] {
        let (status, body) = send(&k.alice, Method::POST, "/v1/memory/search", Some(search.clone())).await;
        assert!(status == 400 || status == 422, "{search}: {status} {body}");
    }
    // A filter on a field no item has is an empty page, not an error.
    let (status, page) = send(
        &k.alice,
        Method::POST,
        "/v1/memory/search",
        Some(json!({"prefix": "user/alice", "filter": [{"field": "nobody", "op": "eq", "value": 1}]})),
    )
    .await;
    assert_eq!((status, page["items"].as_array().map(Vec::len)), (200, Some(0)));
    // An `in` up to its limit is answered (991 operands once were a 500 on SQLite); past
    // it, a 422 naming the limit.
    let widest = berth_core::limits::MEMORY_FILTER_IN_VALUES_MAX;
    for (count, expected) in [
        (widest, (200, None)),
        (widest + 1, (422, Some("memory_filter_in_values"))),
        (991, (422, Some("memory_filter_in_values"))),
    ] {
        let operands: Vec<usize> = (0..count).collect();
        let search = json!({"prefix": "user/alice", "filter": [{"field": "a", "op": "in", "value": operands}]});
        let (status, body) = send(&k.alice, Method::POST, "/v1/memory/search", Some(search)).await;
        assert_eq!((status, body["limit_name"].as_str()), expected, "{count} operands: {body}");
    }
    let (status, usage) = send(&k.service, Method::GET, "/v1/memory/usage", None).await;
    assert_eq!((status, usage["items"].as_u64()), (200, Some(0)), "nothing stored");
}

#[tokio::test]
async fn values_round_trip_exactly_with_compare_and_set() {
    let server = TestServer::start().await;
    let k = keys(&server);
    let exact =
        r#"{"namespace":"user/alice/prefs","key":"tone","value":{"z":1,"a":18446744073709551617,"f":1.50,"s":"é"}}"#;
    let response = k.alice.send(Method::PUT, "/v1/memory/items", Some(exact.as_bytes().to_vec()), &[]).await.unwrap();
    assert_eq!(response.status.as_u16(), 200);
    let (status, raw) = raw_text(&k.alice, Method::GET, &item_path("user/alice/prefs", "tone"), None).await;
    assert_eq!(status, 200);
    let text = String::from_utf8(raw).unwrap();
    assert!(text.contains(r#""value":{"z":1,"a":18446744073709551617,"f":1.50,"s":"é"}"#), "{text}");
    let cas = json!({"namespace": "user/alice/prefs", "key": "tone", "value": 2, "expected_revision": 7});
    let (status, body) = send(&k.alice, Method::PUT, "/v1/memory/items", Some(cas)).await;
    assert_eq!((status, body["code"].as_str()), (412, Some("revision_conflict")), "{body}");
    let cas = json!({"namespace": "user/alice/prefs", "key": "tone", "value": 2, "expected_revision": 1});
    let (status, body) = send(&k.alice, Method::PUT, "/v1/memory/items", Some(cas)).await;
    assert_eq!((status, body["revision"].as_u64()), (200, Some(2)));
    let (status, _) =
        send(&k.alice, Method::DELETE, &format!("{}&expected_revision=1", item_path("user/alice/prefs", "tone")), None)
            .await;
    assert_eq!(status, 412);
    let (status, deleted) = send(&k.alice, Method::DELETE, &item_path("user/alice/prefs", "tone"), None).await;
    assert_eq!((status, deleted["value"].clone()), (200, json!(2)));
    // Search and namespaces.
    for (namespace, key, value) in [
        ("user/alice/notes", "a", json!({"text": "Green tea at noon", "n": 3})),
        ("user/alice/notes", "b", json!({"text": "coffee", "n": 18446744073709551615u64})),
        ("user/alice/notes/deep", "c", json!({"text": "tea tea", "n": 1})),
    ] {
        let (status, _) = send(&k.alice, Method::PUT, "/v1/memory/items", Some(put_body(namespace, key, value))).await;
        assert_eq!(status, 200);
    }
    let (_, page) = send(
        &k.alice,
        Method::POST,
        "/v1/memory/search",
        Some(json!({"prefix": "user/alice/notes", "query": "TEA", "order": "relevance"})),
    )
    .await;
    let keys: Vec<&str> = page["items"].as_array().unwrap().iter().map(|i| i["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["c", "a"]);
    let (_, page) = send(
        &k.alice,
        Method::POST,
        "/v1/memory/search",
        Some(json!({"prefix": "user/alice", "filter": [{"field": "n", "op": "gt", "value": 3}]})),
    )
    .await;
    let keys: Vec<&str> = page["items"].as_array().unwrap().iter().map(|i| i["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["b"]);
    let (_, page) =
        send(&k.alice, Method::POST, "/v1/memory/search", Some(json!({"prefix": "user/alice", "limit": 2}))).await;
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let (_, next) = send(
        &k.alice,
        Method::POST,
        "/v1/memory/search",
        Some(json!({"prefix": "user/alice", "limit": 2, "cursor": cursor})),
    )
    .await;
    assert_eq!(next["items"].as_array().unwrap().len(), 1);
    assert!(next.get("next_cursor").is_none());
    let (_, namespaces) =
        send(&k.alice, Method::GET, "/v1/memory/namespaces?prefix=user%2Falice&max_depth=3", None).await;
    assert_eq!(namespaces["namespaces"], json!(["user/alice/notes"]));
}

#[tokio::test]
async fn bound_items_are_deleted_with_their_session_and_closing_leaves_memory() {
    let server = TestServer::start().await;
    let k = keys(&server);
    for id in ["chat-1", "chat-2"] {
        let create = CreateSession { id: Some(SessionId::parse(id).unwrap()), ..CreateSession::default() };
        k.alice.create(&create).await.unwrap();
    }
    for (key, session) in [("a", Some("chat-1")), ("b", Some("chat-2")), ("c", None)] {
        let mut body = put_body("user/alice/s", key, json!(key));
        if let Some(session) = session {
            body["bound_to"] = json!(session);
        }
        let (status, item) = send(&k.alice, Method::PUT, "/v1/memory/items", Some(body)).await;
        assert_eq!(status, 200, "{item}");
    }
    // Binding to a session the caller cannot see is refused (404, as for the session).
    let mut body = put_body("user/bob/s", "x", json!(1));
    body["bound_to"] = json!("chat-1");
    assert_eq!(send(&k.bob, Method::PUT, "/v1/memory/items", Some(body)).await.0, 404);
    k.alice.close(&SessionId::parse("chat-2").unwrap(), berth_service::ClosePolicy::default(), None).await.unwrap();
    k.alice.delete(&SessionId::parse("chat-1").unwrap(), None).await.unwrap();
    let (_, page) = send(&k.alice, Method::POST, "/v1/memory/search", Some(json!({"prefix": "user/alice"}))).await;
    let keys: Vec<&str> = page["items"].as_array().unwrap().iter().map(|i| i["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["b", "c"], "deleting chat-1 deleted its bound item only; closing chat-2 left its own");
    let (_, log) = send(&k.admin, Method::GET, "/v1/audit?limit=1000", None).await;
    let delete = log.as_array().unwrap().iter().find(|e| e["action"] == "delete").unwrap();
    assert_eq!(delete["details"]["memory_items"], 1);
}

#[tokio::test]
async fn forget_is_exact_audited_and_export_import_round_trips() {
    let server = TestServer::start().await;
    let k = keys(&server);
    for namespace in ["user/alice", "user/alice/notes", "user/alicex", "user/bob", "project/alice", "app/alice"] {
        for key in ["k1", "k2"] {
            let (status, _) = send(
                &k.service,
                Method::PUT,
                "/v1/memory/items",
                Some(put_body(namespace, key, json!({"v": [1.0, "x"]}))),
            )
            .await;
            assert_eq!(status, 200);
        }
    }
    let (status, before) = raw_text(&k.service, Method::GET, "/v1/memory/export", None).await;
    assert_eq!(status, 200);
    let (status, report) =
        send(&k.alice, Method::POST, "/v1/memory/forget", Some(json!({"prefix": "user/alice"}))).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["items"], 4);
    let (_, after) = raw_text(&k.service, Method::GET, "/v1/memory/export", None).await;
    let kept = |bytes: &[u8]| -> Vec<String> {
        String::from_utf8(bytes.to_vec())
            .unwrap()
            .lines()
            .skip(1)
            .filter(|l| !l.contains(r#""namespace":"user/alice""#) && !l.contains(r#""namespace":"user/alice/"#))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        kept(&before),
        String::from_utf8(after.clone()).unwrap().lines().skip(1).map(str::to_owned).collect::<Vec<_>>(),
        "everything else byte for byte"
    );
    let (_, log) = send(&k.admin, Method::GET, "/v1/audit?limit=1000", None).await;
    let forgets: Vec<&Value> = log.as_array().unwrap().iter().filter(|e| e["action"] == "memory.forget").collect();
    assert_eq!(forgets.len(), 1);
    assert_eq!(forgets[0]["details"]["items"], 4);
    assert_eq!(forgets[0]["details"]["namespace"], "user/alice");
    assert_eq!(forgets[0]["actor"], "user:alice");
    // Export → import into another tenant → export: byte-identical.
    let (status, imported) = send_bytes(&k.other_tenant, "/v1/memory/import", after.clone()).await;
    assert_eq!(status, 201, "{imported}");
    assert_eq!(imported["imported"], 8);
    let (_, again) = raw_text(&k.other_tenant, Method::GET, "/v1/memory/export", None).await;
    assert_eq!(String::from_utf8(again).unwrap(), String::from_utf8(after.clone()).unwrap());
    let (status, body) = send_bytes(&k.other_tenant, "/v1/memory/import", after).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("already_exists")));
    // A user exports its own scope only.
    assert_eq!(raw_text(&k.bob, Method::GET, "/v1/memory/export", None).await.0, 403);
    assert_eq!(raw_text(&k.bob, Method::GET, "/v1/memory/export?prefix=user%2Fbob", None).await.0, 200);
}

async fn send_bytes(client: &Client, path: &str, body: Vec<u8>) -> (u16, Value) {
    let (status, bytes) = raw_text(client, Method::POST, path, Some(body)).await;
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn appends_carry_memory_writes_atomically() {
    let server = TestServer::start().await;
    let k = keys(&server);
    k.service
        .create(&CreateSession { id: Some(SessionId::parse("s1").unwrap()), ..CreateSession::default() })
        .await
        .unwrap();
    let events = json!([{"type": "user/message", "data": {"content": "hi"}}]);
    let append = |memory: Value, key: Option<&str>| {
        let mut body = json!({"events": events.clone(), "memory": memory});
        if let Some(key) = key {
            body["idempotency_key"] = json!(key);
        }
        body
    };
    let writes =
        json!([put_body("user/alice/prefs", "tone", json!("terse")), put_body("app/faq", "hours", json!("9-5"))]);
    // Read-your-writes: the answer comes after the writes are applied.
    let (status, outcome) =
        send(&k.service, Method::POST, "/v1/sessions/s1/events", Some(append(writes.clone(), Some("a1")))).await;
    assert_eq!((status, outcome["next_seq"].as_u64()), (200, Some(2)), "{outcome}");
    let (_, item) = send(&k.service, Method::GET, &item_path("user/alice/prefs", "tone"), None).await;
    assert_eq!((item["value"].clone(), item["revision"].as_u64()), (json!("terse"), Some(1)));
    let (_, events_page) = send(&k.service, Method::GET, "/v1/sessions/s1/events", None).await;
    assert_eq!(events_page["events"][1]["type"], "session/memory");
    assert_eq!(events_page["events"][1]["ignorable"], true);
    // A keyed retry is the original outcome; nothing is applied twice.
    let (status, again) =
        send(&k.service, Method::POST, "/v1/sessions/s1/events", Some(append(writes.clone(), Some("a1")))).await;
    assert_eq!((status, again["duplicate"].as_bool()), (200, Some(true)));
    let (_, item) = send(&k.service, Method::GET, &item_path("user/alice/prefs", "tone"), None).await;
    assert_eq!(item["revision"], 1);
    // A failed compare-and-set stores nothing: no events, no writes.
    let mut stale = put_body("user/alice/prefs", "tone", json!("verbose"));
    stale["expected_revision"] = json!(0);
    let (status, body) = send(
        &k.service,
        Method::POST,
        "/v1/sessions/s1/events",
        Some(append(json!([stale, put_body("app/faq", "x", json!(1))]), Some("a2"))),
    )
    .await;
    assert_eq!((status, body["code"].as_str()), (412, Some("revision_conflict")), "{body}");
    let (_, events_page) = send(&k.service, Method::GET, "/v1/sessions/s1/events", None).await;
    assert_eq!(events_page["events"].as_array().unwrap().len(), 2, "nothing appended");
    assert_eq!(send(&k.service, Method::GET, &item_path("app/faq", "x"), None).await.0, 404);
    // Bad input, each typed with nothing stored.
    let (status, _) =
        send(&k.service, Method::POST, "/v1/sessions/s1/events", Some(append(writes.clone(), None))).await;
    assert_eq!(status, 422, "carried writes need an idempotency key");
    let forged = json!({"events": [{"type": "session/memory", "data": {"writes": []}, "ignorable": true}], "idempotency_key": "a3"});
    let (status, body) = send(&k.service, Method::POST, "/v1/sessions/s1/events", Some(forged)).await;
    assert_eq!(status, 422, "session/memory is the service's: {body}");
    let mut bound = put_body("user/alice/prefs", "b", json!(1));
    bound["bound_to"] = json!("another-session");
    let (status, _) =
        send(&k.service, Method::POST, "/v1/sessions/s1/events", Some(append(json!([bound]), Some("a4")))).await;
    assert_eq!(status, 422, "bound to the appending session only");
    let (status, _) = send(
        &k.service,
        Method::POST,
        "/v1/sessions/s1/events",
        Some(append(json!([put_body("berth/carried", "s1", json!(1))]), Some("a5"))),
    )
    .await;
    assert_eq!(status, 403, "berth's own scope is nobody's");
    assert_eq!(send(&k.admin, Method::GET, &item_path("berth/carried", "s1"), None).await.0, 403);
    let (_, events_page) = send(&k.service, Method::GET, "/v1/sessions/s1/events", None).await;
    assert_eq!(events_page["events"].as_array().unwrap().len(), 2, "nothing appended by any refused request");
    // A user appending through its run writes its own scope only.
    let alice_session = CreateSession { id: Some(SessionId::parse("s2").unwrap()), ..CreateSession::default() };
    k.alice.create(&alice_session).await.unwrap();
    let run = k.alice.attach(&SessionId::parse("s2").unwrap(), &Default::default()).await.unwrap().run.run_id;
    let mut body = append(json!([put_body("user/bob/x", "k", json!(1))]), Some("b1"));
    body["run"] = json!(run.as_str());
    assert_eq!(send(&k.alice, Method::POST, "/v1/sessions/s2/events", Some(body.clone())).await.0, 403);
    body["memory"] = json!([put_body("user/alice/x", "k", json!(1))]);
    assert_eq!(send(&k.alice, Method::POST, "/v1/sessions/s2/events", Some(body)).await.0, 200);
    assert_eq!(send(&k.alice, Method::GET, &item_path("user/alice/x", "k"), None).await.1["value"], 1);
    // Export leaves berth's own bookkeeping out.
    let (_, exported) = raw_text(&k.service, Method::GET, "/v1/memory/export", None).await;
    assert!(!String::from_utf8(exported).unwrap().contains("\"berth/"));
}

/// A tenant's memory quota set over HTTP (issue: quotas were one service-wide setting,
/// reachable only from the library): admin keys only (a service key is 403, audited),
/// stored per tenant; a put past it is the documented 422 `limit_exceeded` naming the
/// limit, with nothing stored; usage reports the quota that applies; another tenant
/// keeps the server's default; a limit left out is the default again.
#[tokio::test]
async fn an_admin_sets_a_tenants_memory_quota_and_a_put_past_it_is_422() {
    let default = berth_catalog::scoped::MemoryQuota { items: 50, bytes: 1_000_000 };
    let server = TestServer::start_with_service(common::test_config(), move |s| s.with_memory_quota(default)).await;
    let k = keys(&server);
    let (status, usage) = send(&k.service, Method::GET, "/v1/memory/usage", None).await;
    assert_eq!((status, &usage["quota_items"], &usage["quota_bytes"]), (200, &json!(50), &json!(1_000_000)));
    let (status, body) = send(&k.service, Method::PUT, "/v1/memory/quota", Some(json!({"items": 2}))).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("forbidden")));
    let (status, body) = send(&k.admin, Method::PUT, "/v1/memory/quota", Some(json!({"items": 2, "other": 1}))).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid")), "unknown fields are refused: {body}");
    for no_body in [None, Some(Value::Null)] {
        let (status, body) = send(&k.admin, Method::PUT, "/v1/memory/quota", no_body).await;
        assert_eq!((status, body["code"].as_str()), (400, Some("invalid")), "a body is required: {body}");
    }
    let (status, usage) = send(&k.admin, Method::PUT, "/v1/memory/quota", Some(json!({"items": 2}))).await;
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage, json!({"items": 0, "bytes": 0, "quota_items": 2, "quota_bytes": 1_000_000}));
    for key in ["a", "b"] {
        let (status, _) =
            send(&k.alice, Method::PUT, "/v1/memory/items", Some(put_body("user/alice", key, json!(1)))).await;
        assert_eq!(status, 200);
    }
    let (status, body) =
        send(&k.alice, Method::PUT, "/v1/memory/items", Some(put_body("user/alice", "c", json!(1)))).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        (body["code"].as_str(), body["limit_name"].as_str(), body["limit"].as_u64(), body["actual"].as_u64()),
        (Some("limit_exceeded"), Some("memory_items"), Some(2), Some(3))
    );
    assert_eq!(send(&k.alice, Method::GET, &item_path("user/alice", "c"), None).await.0, 404, "nothing stored");
    // Replacing an item is no new item.
    assert_eq!(
        send(&k.alice, Method::PUT, "/v1/memory/items", Some(put_body("user/alice", "a", json!(2)))).await.0,
        200
    );
    // Another tenant keeps the server's default.
    let (_, theirs) = send(&k.other_tenant, Method::GET, "/v1/memory/usage", None).await;
    assert_eq!(theirs["quota_items"], 50);
    // The bytes alone: the items are the default again.
    let (_, usage) = send(&k.admin, Method::PUT, "/v1/memory/quota", Some(json!({"bytes": 30}))).await;
    assert_eq!((usage["quota_items"].as_u64(), usage["quota_bytes"].as_u64()), (Some(50), Some(30)));
    let (status, body) =
        send(&k.alice, Method::PUT, "/v1/memory/items", Some(put_body("user/alice", "c", json!("twenty bytes long"))))
            .await;
    assert_eq!((status, body["limit_name"].as_str()), (422, Some("memory_bytes")), "{body}");
    assert_eq!(send(&k.alice, Method::GET, &item_path("user/alice", "c"), None).await.0, 404);
    let (_, usage) = send(&k.admin, Method::PUT, "/v1/memory/quota", Some(json!({}))).await;
    assert_eq!((usage["quota_items"].as_u64(), usage["quota_bytes"].as_u64()), (Some(50), Some(1_000_000)));
    let (_, log) = send(&k.admin, Method::GET, "/v1/audit?limit=1000", None).await;
    let quotas: Vec<&Value> = log.as_array().unwrap().iter().filter(|e| e["action"] == "memory.quota").collect();
    let outcomes: Vec<&str> = quotas.iter().map(|e| e["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["denied", "ok", "ok", "ok"]);
}

/// A batch delete over HTTP: absent items skipped, one audit record (per scope), a
/// single delete leaves its record too; and an import bound to another user's session
/// is the put's 404, with nothing stored.
#[tokio::test]
async fn memory_deletes_are_audited_and_imports_keep_the_puts_binding_rule() {
    let server = TestServer::start().await;
    let k = keys(&server);
    for (namespace, key) in [("user/alice", "a"), ("user/alice", "b"), ("user/alice/notes", "c"), ("user/alice", "d")] {
        assert_eq!(
            send(&k.alice, Method::PUT, "/v1/memory/items", Some(put_body(namespace, key, json!(1)))).await.0,
            200
        );
    }
    let batch = json!({"items": [
        {"namespace": "user/alice", "key": "a"},
        {"namespace": "user/alice", "key": "absent"},
        {"namespace": "user/alice/notes", "key": "c"},
    ]});
    let (status, body) = send(&k.alice, Method::POST, "/v1/memory/delete", Some(batch.clone())).await;
    assert_eq!(status, 200, "{body}");
    let keys_deleted: Vec<&str> =
        body["deleted"].as_array().unwrap().iter().map(|i| i["key"].as_str().unwrap()).collect();
    assert_eq!(keys_deleted, ["a", "c"]);
    let (status, body) = send(&k.bob, Method::POST, "/v1/memory/delete", Some(batch)).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("forbidden")));
    assert_eq!(send(&k.alice, Method::DELETE, &item_path("user/alice", "b"), None).await.0, 200);
    let (_, log) = send(&k.admin, Method::GET, "/v1/audit?limit=1000", None).await;
    let deletes: Vec<&Value> =
        log.as_array().unwrap().iter().filter(|e| e["action"] == "memory.delete" && e["outcome"] == "ok").collect();
    assert_eq!(deletes.len(), 2, "{deletes:#?}");
    assert_eq!(deletes[0]["details"]["scopes"], json!({"user/alice": {"items": 2, "bytes": 30}}));
    assert_eq!(deletes[1]["details"]["key"], "b");
    // An import bound to another user's session answers as the put: 404, nothing stored.
    k.bob
        .create(&CreateSession { id: Some(SessionId::parse("bobs").unwrap()), ..CreateSession::default() })
        .await
        .unwrap();
    let export = format!(
        "{}\n{}\n",
        json!({"berth_memory_export": 1, "prefix": "user/alice"}),
        json!({"namespace": "user/alice", "key": "e", "value": 1, "revision": 1, "created_at": 1, "updated_at": 1,
               "bound_to": "bobs"})
    );
    let (status, body) = send_bytes(&k.alice, "/v1/memory/import", export.into_bytes()).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")), "{body}");
    assert_eq!(send(&k.alice, Method::GET, &item_path("user/alice", "e"), None).await.0, 404);
}

/// A query string whose escapes are not UTF-8 is a 400 on every endpoint, never read as
/// U+FFFD: `key=%FE` once deleted the item whose key is "\u{fffd}".
#[tokio::test]
async fn a_query_string_that_is_not_utf8_is_refused_everywhere() {
    let server = TestServer::start().await;
    let k = keys(&server);
    let (status, _) =
        send(&k.alice, Method::PUT, "/v1/memory/items", Some(put_body("user/alice", "\u{fffd}", json!(1)))).await;
    assert_eq!(status, 200);
    for (method, path) in [
        (Method::DELETE, "/v1/memory/items?namespace=user%2Falice&key=%FE"),
        (Method::GET, "/v1/memory/items?namespace=user%2Falice&key=%FE"),
        (Method::GET, "/v1/sessions?label=%FF"),
        (Method::GET, "/v1/audit?action=%FF"),
        (Method::GET, "/v1/audit/search?action=%FF"),
        (Method::GET, "/v1/memory/namespaces?prefix=user%2F%C3"),
        (Method::POST, "/v1/sessions?x=%FF"),
        (Method::GET, "/v1/whoami?%FF"),
    ] {
        let (status, body) = send(&k.admin, method.clone(), path, None).await;
        assert_eq!((status, body["code"].as_str()), (400, Some("invalid")), "{method} {path}: {body}");
    }
    let (status, item) = send(&k.alice, Method::GET, &item_path("user/alice", "\u{fffd}"), None).await;
    assert_eq!((status, item["value"].as_u64()), (200, Some(1)), "the U+FFFD item is still there");
}
