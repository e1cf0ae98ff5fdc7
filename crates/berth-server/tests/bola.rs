//! Broken object-level authorization (reliability plan E-31, OWASP API1): every
//! endpoint × every principal kind × {existing, missing, other tenant's session}, over
//! real HTTP. Only the allowed calls succeed; "missing" and "other tenant's" answers are
//! byte-identical; the denied calls change no stored byte and no metadata.

mod common;

use berth_server::client::Client;
use berth_service::Role;
use common::{principal, TestServer};
use hyper::Method;
use serde_json::{json, Value};

struct Endpoint {
    name: &'static str,
    method: Method,
    suffix: &'static str,
    body: Option<Value>,
    ok: u16,
    /// The session must be closed first (reopen).
    closed: bool,
    admin_only: bool,
    stream: bool,
}

fn endpoints() -> Vec<Endpoint> {
    let e = |name, method, suffix, body: Option<Value>, ok| Endpoint {
        name,
        method,
        suffix,
        body,
        ok,
        closed: false,
        admin_only: false,
        stream: false,
    };
    let mut list = vec![
        e("get", Method::GET, "", None, 200),
        e("update", Method::PATCH, "", Some(json!({"title": "changed"})), 200),
        e("read", Method::GET, "/events", None, 200),
        e(
            "append",
            Method::POST,
            "/events",
            Some(json!({"run": "r1", "events": [{"type": "note/x", "data": 1, "ignorable": true}]})),
            200,
        ),
        e("attach", Method::POST, "/runs", Some(json!({"run_id": "r2", "on_busy": "interrupt"})), 201),
        e("heartbeat", Method::POST, "/runs/r1/heartbeat", None, 200),
        e("detach", Method::POST, "/runs/r1/detach", Some(json!({"outcome": "completed"})), 200),
        e("resume", Method::POST, "/resume", Some(json!({"run_id": "r3", "on_busy": "interrupt"})), 200),
        e("close", Method::POST, "/close", Some(json!({"policy": "cancel_runs"})), 200),
        e("fork", Method::POST, "/fork", Some(json!({})), 201),
        e("export", Method::GET, "/export", None, 200),
        e("export-zip", Method::GET, "/export?format=zip", None, 200),
        e("usage", Method::GET, "/usage", None, 200),
        e("delete", Method::DELETE, "", None, 204),
    ];
    let mut reopen = e("reopen", Method::POST, "/reopen", None, 200);
    reopen.closed = true;
    reopen.admin_only = true;
    list.push(reopen);
    let mut tail = e("tail", Method::GET, "/events/stream", None, 200);
    tail.stream = true;
    list.push(tail);
    list
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Owner,
    OtherUser,
    OtherProject,
    OtherTenant,
    Service,
    Admin,
    NoToken,
    Revoked,
}

const KINDS: [Kind; 8] = [
    Kind::Owner,
    Kind::OtherUser,
    Kind::OtherProject,
    Kind::OtherTenant,
    Kind::Service,
    Kind::Admin,
    Kind::NoToken,
    Kind::Revoked,
];

fn client_for(server: &TestServer, kind: Kind) -> Client {
    match kind {
        Kind::Owner => server.client(&server.key("acme", "alice", Some("p1"), Role::User)),
        Kind::OtherUser => server.client(&server.key("acme", "bob", Some("p1"), Role::User)),
        Kind::OtherProject => server.client(&server.key("acme", "alice", Some("p2"), Role::User)),
        Kind::OtherTenant => server.client(&server.key("globex", "alice", Some("p1"), Role::User)),
        Kind::Service => server.client(&server.key("acme", "svc", None, Role::Service)),
        Kind::Admin => server.client(&server.key("acme", "root", None, Role::Admin)),
        Kind::NoToken => server.anonymous(),
        Kind::Revoked => {
            let (info, token) = server.keys.create(&principal("acme", "alice", Some("p1"), Role::User), None).unwrap();
            server.keys.revoke(&info.key_id).unwrap();
            server.client(&token)
        }
    }
}

/// The expected status for `kind` on `endpoint` when the session exists and is theirs
/// to reach (`None`: success expected).
fn denial(kind: Kind, endpoint: &Endpoint, exists_for_caller: bool) -> Option<u16> {
    match kind {
        Kind::NoToken | Kind::Revoked => Some(401),
        _ if endpoint.admin_only && kind != Kind::Admin => Some(403),
        Kind::Owner | Kind::Service | Kind::Admin if exists_for_caller => None,
        _ => Some(404),
    }
}

/// A session in `acme` owned by alice/p1 with run r1 attached and two events.
async fn make_session(owner: &Client, id: &str, closed: bool) {
    let created = owner
        .send(Method::POST, "/v1/sessions", Some(serde_json::to_vec(&json!({"id": id})).unwrap()), &[])
        .await
        .unwrap();
    assert_eq!(created.status.as_u16(), 201, "{:?}", created.body);
    let attach = json!({"run_id": "r1"});
    let attached = owner
        .send(Method::POST, &format!("/v1/sessions/{id}/runs"), Some(serde_json::to_vec(&attach).unwrap()), &[])
        .await
        .unwrap();
    assert_eq!(attached.status.as_u16(), 201);
    let append = json!({"run": "r1", "events": [{"type": "user/message", "data": {"content": "hi"}}, {"type": "note/x", "ignorable": true}]});
    let appended = owner
        .send(Method::POST, &format!("/v1/sessions/{id}/events"), Some(serde_json::to_vec(&append).unwrap()), &[])
        .await
        .unwrap();
    assert_eq!(appended.status.as_u16(), 200);
    if closed {
        let close = json!({"policy": "cancel_runs"});
        let response = owner
            .send(Method::POST, &format!("/v1/sessions/{id}/close"), Some(serde_json::to_vec(&close).unwrap()), &[])
            .await
            .unwrap();
        assert_eq!(response.status.as_u16(), 200);
    }
}

async fn request(client: &Client, endpoint: &Endpoint, id: &str) -> (u16, Vec<u8>) {
    let path = format!("/v1/sessions/{id}{}", endpoint.suffix);
    if endpoint.stream {
        // A successful tail never ends: only its status line is awaited.
        let session = berth_core::SessionId::parse(id).unwrap();
        return match client.tail(&session, None, None).await {
            Ok(_stream) => (200, Vec::new()),
            Err(_) => {
                let response = client.send(endpoint.method.clone(), &path, None, &[]).await.unwrap();
                (response.status.as_u16(), response.body.to_vec())
            }
        };
    }
    let body = endpoint.body.as_ref().map(|body| serde_json::to_vec(body).unwrap());
    let response = client.send(endpoint.method.clone(), &path, body, &[]).await.unwrap();
    (response.status.as_u16(), response.body.to_vec())
}

async fn stored_state(server: &TestServer) -> (std::collections::BTreeMap<String, Vec<u8>>, Vec<String>) {
    let files = common::snapshot(&server.root(), &common::DATABASE_FILES);
    let admin = principal("acme", "root", None, Role::Admin);
    let other = principal("globex", "root", None, Role::Admin);
    let mut records = Vec::new();
    let page = berth_service::ListRequest { include_blank: true, limit: Some(1000), ..Default::default() };
    for who in [&admin, &other] {
        let listed = server.service.list(who, &page).await.unwrap();
        records.extend(listed.items.iter().map(|record| serde_json::to_string(record).unwrap()));
    }
    (files, records)
}

#[tokio::test]
async fn every_endpoint_by_every_principal_on_existing_missing_and_other_tenants_sessions() {
    let server = TestServer::start().await;
    let owner = client_for(&server, Kind::Owner);
    make_session(&owner, "victim", false).await;
    // The other tenant's session has the same id, owner, project and shape.
    let globex_owner = server.client(&server.key("globex", "alice", Some("p1"), Role::User));
    make_session(&globex_owner, "victim", false).await;
    for endpoint in endpoints() {
        let id = format!("globex-only-{}", endpoint.name);
        make_session(&globex_owner, &id, endpoint.closed).await;
    }
    let clients: Vec<(Kind, Client)> = KINDS.iter().map(|&kind| (kind, client_for(&server, kind))).collect();

    // Denied calls first, on the shared sessions: none may change anything.
    let before = stored_state(&server).await;
    let mut denied = 0;
    for endpoint in endpoints() {
        for (kind, client) in &clients {
            let other_tenant = *kind == Kind::OtherTenant;
            // "victim" in acme: other-tenant callers see globex's own "victim", skip them.
            if let (Some(status), false) = (denial(*kind, &endpoint, true), other_tenant) {
                let (got, _) = request(client, &endpoint, "victim").await;
                assert_eq!(got, status, "{kind:?} {} on an existing session", endpoint.name);
                denied += 1;
            }
            // Missing vs another tenant's session: same status, same bytes.
            let (missing_status, missing_body) = request(client, &endpoint, "no-such-session").await;
            let expected = denial(*kind, &endpoint, false).unwrap();
            assert_eq!(missing_status, expected, "{kind:?} {} on a missing session", endpoint.name);
            if !other_tenant {
                // acme callers reaching for globex's session: globex has one, acme has not.
                let foreign = format!("globex-only-{}", endpoint.name);
                let (foreign_status, foreign_body) = request(client, &endpoint, &foreign).await;
                assert_eq!(foreign_status, missing_status, "{kind:?} {}", endpoint.name);
                assert_eq!(foreign_body, missing_body, "{kind:?} {} bodies differ", endpoint.name);
            }
        }
    }
    assert!(denied > 50);
    let after = stored_state(&server).await;
    assert_eq!(before.0, after.0, "a denied call changed a stored file");
    assert_eq!(before.1, after.1, "a denied call changed metadata");

    // Denials are audited.
    let admin = principal("acme", "root", None, Role::Admin);
    let audit = server.service.audit_log(&admin, 0, 1000).await.unwrap();
    assert!(audit.iter().any(|entry| entry.draft.outcome == "denied" && entry.draft.actor == "user:bob"));

    // Allowed calls, each on a fresh session of its own.
    for endpoint in endpoints() {
        for (kind, client) in &clients {
            if denial(*kind, &endpoint, true).is_some() {
                continue;
            }
            let id = format!("{}-{:?}", endpoint.name, kind).to_lowercase();
            make_session(&owner, &id, endpoint.closed).await;
            let (status, body) = request(client, &endpoint, &id).await;
            assert_eq!(status, endpoint.ok, "{kind:?} {}: {}", endpoint.name, String::from_utf8_lossy(&body));
        }
    }

    // Listing is scoped the same way.
    for (kind, client) in &clients {
        let response = client.send(Method::GET, "/v1/sessions?include_blank=true", None, &[]).await.unwrap();
        let page: Value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
        let ids: Vec<&str> = page["items"]
            .as_array()
            .map(|items| items.iter().filter_map(|item| item["header"]["id"].as_str()).collect())
            .unwrap_or_default();
        let sees_victim = ids.contains(&"victim");
        match kind {
            Kind::NoToken | Kind::Revoked => assert_eq!(response.status.as_u16(), 401),
            Kind::Owner | Kind::Service | Kind::Admin => assert!(sees_victim, "{kind:?}"),
            Kind::OtherTenant => {
                // Sees globex's own "victim" only: every item is globex's.
                for item in page["items"].as_array().unwrap() {
                    assert_eq!(item["header"]["scope"]["tenant"], "globex");
                }
            }
            _ => assert!(!sees_victim, "{kind:?} lists someone else's session"),
        }
    }
}

/// Sessions only globex has, named per endpoint (so deleting one does not affect others).
#[tokio::test]
async fn another_tenants_session_is_not_found_even_with_the_right_id() {
    let server = TestServer::start().await;
    let globex = server.client(&server.key("globex", "alice", Some("p1"), Role::User));
    make_session(&globex, "globex-only-get", false).await;
    let acme_admin = client_for(&server, Kind::Admin);
    let (status, found) = request(&acme_admin, &endpoints()[0], "globex-only-get").await;
    let (missing_status, missing) = request(&acme_admin, &endpoints()[0], "no-such-session").await;
    assert_eq!((status, &found), (missing_status, &missing));
    assert_eq!(status, 404);
}

/// Within a tenant, session ids are one namespace (docs/reference/http.md, "Session ids"): a
/// create, a fork to, or an import of an id another user owns is 409 `already_exists` —
/// the id is taken — with a body byte-identical to the 409 for an id the caller owns
/// itself, so it says nothing about whose it is or what is in it; reading it stays 404,
/// byte-identical to a missing id. The owner's session is untouched.
#[tokio::test]
async fn another_users_id_conflicts_exactly_like_ones_own_and_reads_as_missing() {
    let server = TestServer::start().await;
    let alice = client_for(&server, Kind::Owner);
    let bob = client_for(&server, Kind::OtherUser);
    make_session(&alice, "alice-secret", false).await;
    let alice_before = alice.send(Method::GET, "/v1/sessions/alice-secret", None, &[]).await.unwrap().body;
    let send = |client: &Client, method: Method, path: String, body: Vec<u8>| {
        let client = client.clone();
        async move {
            let response = client.send(method, &path, Some(body), &[]).await.unwrap();
            (response.status.as_u16(), response.body.to_vec())
        }
    };
    let create = |id: &str| serde_json::to_vec(&json!({"id": id})).unwrap();
    assert_eq!(send(&bob, Method::POST, "/v1/sessions".into(), create("bob-own")).await.0, 201);
    let bob_export = bob.send(Method::GET, "/v1/sessions/bob-own/export", None, &[]).await.unwrap().body.to_vec();
    let renamed =
        String::from_utf8(bob_export.clone()).unwrap().replacen(r#""id":"bob-own""#, r#""id":"alice-secret""#, 1);
    assert_ne!(renamed.as_bytes(), &bob_export[..], "the export names its id");

    let fork_to = |id: &str| serde_json::to_vec(&json!({"new_id": id})).unwrap();
    let cases = [
        ("create", Method::POST, "/v1/sessions".to_owned(), create("alice-secret"), create("bob-own")),
        ("fork to", Method::POST, "/v1/sessions/bob-own/fork".into(), fork_to("alice-secret"), fork_to("bob-own")),
        ("import", Method::POST, "/v1/import".into(), renamed.into_bytes(), bob_export),
    ];
    for (what, method, path, on_alices_id, on_bobs_own_id) in cases {
        let taken_by_alice = send(&bob, method.clone(), path.clone(), on_alices_id).await;
        let taken_by_bob = send(&bob, method, path, on_bobs_own_id).await;
        assert_eq!(taken_by_alice.0, 409, "{what}: {}", String::from_utf8_lossy(&taken_by_alice.1));
        assert_eq!(taken_by_alice, taken_by_bob, "{what}: the same answer whoever owns the id");
        let body: Value = serde_json::from_slice(&taken_by_alice.1).unwrap();
        assert_eq!(body["code"], "already_exists");
        assert!(!String::from_utf8_lossy(&taken_by_alice.1).contains("alice"), "{what}: nothing of the owner's");
    }
    let read_alices = bob.send(Method::GET, "/v1/sessions/alice-secret", None, &[]).await.unwrap();
    let read_missing = bob.send(Method::GET, "/v1/sessions/no-such-session", None, &[]).await.unwrap();
    assert_eq!(read_alices.status.as_u16(), 404);
    assert_eq!((read_alices.status, read_alices.body), (read_missing.status, read_missing.body));
    let alice_after = alice.send(Method::GET, "/v1/sessions/alice-secret", None, &[]).await.unwrap().body;
    assert_eq!(alice_after, alice_before, "the owner's session is untouched");
    // The documented contract is this one: the doc says conflicts reveal a taken id.
    let doc = include_str!("../../../docs/reference/http.md");
    let section =
        doc.split("## Session ids within a tenant").nth(1).expect("docs/reference/http.md explains session ids");
    let section = section.split("\n## ").next().unwrap();
    for promise in ["namespace", "409 already_exists", "byte-identical", "an id is taken"] {
        assert!(section.replace("**", "").replace('`', "").contains(promise), "docs/reference/http.md: {promise:?}");
    }
}
