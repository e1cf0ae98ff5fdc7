//! The inspector's defences and authorization over raw HTTP (the browser tests in
//! `scripts/inspector/` cover the pages themselves): the Host allowlist, the security
//! headers, sign-in exchanging a key for a session cookie, CSRF and origin checks,
//! revocation and expiry ending a session, another user's session as a 404, and the
//! API additions the inspector reads (counts, audit search, the `parent` filter).

mod common;

use berth_core::{Clock, Timestamp};
use berth_service::Role;
use common::{test_config, TestServer};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A clock the test moves (inspector sessions expire by the service's clock).
#[derive(Debug)]
struct ManualClock(AtomicU64);

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }

    fn set_cookies(&self) -> Vec<&str> {
        self.headers.iter().filter(|(key, _)| key.eq_ignore_ascii_case("set-cookie")).map(|(_, v)| v.as_str()).collect()
    }

    /// The value a `Set-Cookie` gives cookie `name`.
    fn cookie(&self, name: &str) -> Option<String> {
        self.set_cookies()
            .into_iter()
            .filter_map(|line| line.split(';').next()?.split_once('='))
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.to_owned())
    }
}

/// One HTTP/1.1 request with exactly `headers` (a browser would not let a test forge Host).
async fn request(server: &TestServer, method: &str, path: &str, headers: &[(&str, String)], body: &str) -> Answer {
    let mut stream = tokio::net::TcpStream::connect(server.server.local_addr).await.unwrap();
    let mut text = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    stream.write_all(text.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|line| line.split_whitespace().nth(1)).unwrap().parse().unwrap();
    let headers = lines.filter_map(|line| line.split_once(": ")).map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
    Answer { status, headers, body: body.to_owned() }
}

fn host(server: &TestServer) -> (&'static str, String) {
    ("Host", format!("127.0.0.1:{}", server.server.local_addr.port()))
}

fn form(pairs: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new()).extend_pairs(pairs).finish()
}

const FORM: (&str, &str) = ("Content-Type", "application/x-www-form-urlencoded");

/// Signs in with `key`; returns the session cookie's value.
async fn sign_in(server: &TestServer, key: &str) -> String {
    let page = request(server, "GET", "/ui/sign-in", &[host(server)], "").await;
    let token = page.cookie("berth_ui_signin").unwrap();
    let cookie = ("Cookie", format!("berth_ui_signin={token}"));
    let body = form(&[("key", key), ("csrf", &token)]);
    let answer = request(server, "POST", "/ui/sign-in", &[host(server), cookie, (FORM.0, FORM.1.into())], &body).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    answer.cookie("berth_ui_session").unwrap()
}

fn session_cookie(value: &str) -> (&'static str, String) {
    ("Cookie", format!("berth_ui_session={value}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forged_host_is_refused_and_pages_carry_the_security_headers() {
    let server = TestServer::start().await;
    for forged in ["attacker.example", "attacker.example:80", "127.0.0.1.attacker.example"] {
        let answer = request(&server, "GET", "/ui/sign-in", &[("Host", forged.into())], "").await;
        assert_eq!(answer.status, 421, "{forged}");
    }
    let port = server.server.local_addr.port();
    for allowed in [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("LOCALHOST:{port}")] {
        let answer = request(&server, "GET", "/ui/sign-in", &[("Host", allowed.clone())], "").await;
        assert_eq!(answer.status, 200, "{allowed}");
        let csp = answer.header("content-security-policy").unwrap();
        assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert_eq!(answer.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(answer.header("x-frame-options"), Some("DENY"));
        assert_eq!(answer.header("cache-control"), Some("no-store"));
        assert!(!answer.body.contains("<script>"), "no inline script: {}", answer.body);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sign_in_exchanges_the_key_for_a_session_cookie_and_checks_the_form_token() {
    let server = TestServer::start().await;
    let key = server.key("acme", "alice", None, Role::User);
    let page = request(&server, "GET", "/ui/sign-in", &[host(&server)], "").await;
    let token = page.cookie("berth_ui_signin").unwrap();
    // A post without the matching double-submit token is refused.
    let body = form(&[("key", &key), ("csrf", "0000")]);
    let cookie = ("Cookie", format!("berth_ui_signin={token}"));
    let refused =
        request(&server, "POST", "/ui/sign-in", &[host(&server), cookie.clone(), (FORM.0, FORM.1.into())], &body).await;
    assert_eq!(refused.status, 403);
    assert!(refused.cookie("berth_ui_session").is_none());
    // A post from another origin is refused before anything is checked.
    let body = form(&[("key", &key), ("csrf", &token)]);
    let cross = [host(&server), cookie.clone(), (FORM.0, FORM.1.into()), ("Sec-Fetch-Site", "cross-site".into())];
    assert_eq!(request(&server, "POST", "/ui/sign-in", &cross, &body).await.status, 403);
    let cross = [host(&server), cookie.clone(), (FORM.0, FORM.1.into()), ("Origin", "http://attacker.example".into())];
    assert_eq!(request(&server, "POST", "/ui/sign-in", &cross, &body).await.status, 403);
    let signed_in =
        request(&server, "POST", "/ui/sign-in", &[host(&server), cookie, (FORM.0, FORM.1.into())], &body).await;
    assert_eq!(signed_in.status, 303);
    let line = signed_in.set_cookies().into_iter().find(|line| line.starts_with("berth_ui_session=")).unwrap();
    assert!(line.contains("HttpOnly") && line.contains("SameSite=Strict") && !line.contains("Secure"), "{line}");
    let secret = key.rsplit('_').next().unwrap();
    for line in signed_in.set_cookies() {
        assert!(!line.contains(secret) && !line.contains(&key[6..22]), "the key is never in a cookie: {line}");
    }
    let value = signed_in.cookie("berth_ui_session").unwrap();
    let list = request(&server, "GET", "/ui/sessions", &[host(&server), session_cookie(&value)], "").await;
    assert_eq!(list.status, 200);
    assert!(list.body.contains("acme / alice (user)"));
    let anonymous = request(&server, "GET", "/ui/sessions", &[host(&server)], "").await;
    assert_eq!((anonymous.status, anonymous.header("location")), (303, Some("/ui/sign-in")));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_key_and_signing_out_end_the_session() {
    let server = TestServer::start().await;
    let key = server.key("acme", "alice", None, Role::User);
    let value = sign_in(&server, &key).await;
    let page = request(&server, "GET", "/ui/sessions", &[host(&server), session_cookie(&value)], "").await;
    assert_eq!(page.status, 200);
    let key_id = berth_server::auth::key_id_of(&key).unwrap();
    assert!(server.keys.revoke(key_id).unwrap());
    let after = request(&server, "GET", "/ui/sessions", &[host(&server), session_cookie(&value)], "").await;
    assert_eq!((after.status, after.header("location")), (303, Some("/ui/sign-in")));

    let key = server.key("acme", "bob", None, Role::User);
    let value = sign_in(&server, &key).await;
    let page = request(&server, "GET", "/ui/sessions", &[host(&server), session_cookie(&value)], "").await;
    let csrf = page.body.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    let headers = [host(&server), session_cookie(&value), (FORM.0, FORM.1.into())];
    let wrong = request(&server, "POST", "/ui/sign-out", &headers, &form(&[("csrf", "bad")])).await;
    assert_eq!(wrong.status, 403);
    let out = request(&server, "POST", "/ui/sign-out", &headers, &form(&[("csrf", &csrf)])).await;
    assert_eq!(out.status, 303);
    let after = request(&server, "GET", "/ui/sessions", &[host(&server), session_cookie(&value)], "").await;
    assert_eq!(after.status, 303);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unused_session_expires_by_the_services_clock() {
    let clock = Arc::new(ManualClock(AtomicU64::new(1_800_000_000_000)));
    let server = TestServer::start_with_clock(clock.clone()).await;
    let key = server.key("acme", "alice", None, Role::User);
    let value = sign_in(&server, &key).await;
    clock.0.fetch_add(berth_server::ui::INSPECTOR_SESSION_IDLE_MS - 1, Ordering::SeqCst);
    let page = request(&server, "GET", "/ui/sessions", &[host(&server), session_cookie(&value)], "").await;
    assert_eq!(page.status, 200, "used just in time: still signed in");
    clock.0.fetch_add(berth_server::ui::INSPECTOR_SESSION_IDLE_MS, Ordering::SeqCst);
    let page = request(&server, "GET", "/ui/sessions", &[host(&server), session_cookie(&value)], "").await;
    assert_eq!(page.status, 303, "idle too long: signed out");
}

#[tokio::test(flavor = "multi_thread")]
async fn another_users_or_tenants_session_is_a_404_on_every_inspector_url() {
    let server = TestServer::start().await;
    let alice = server.key("acme", "alice", None, Role::User);
    let bob = server.client(&server.key("acme", "bob", None, Role::User));
    let other_tenant = server.client(&server.key("globex", "alice", None, Role::User));
    for (client, id) in [(&bob, "bobs"), (&other_tenant, "theirs")] {
        client
            .create(&berth_service::CreateSession { id: Some(id.parse().unwrap()), ..Default::default() })
            .await
            .unwrap();
    }
    let value = sign_in(&server, &alice).await;
    let page = request(&server, "GET", "/ui/sessions", &[host(&server), session_cookie(&value)], "").await;
    let csrf = page.body.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    let missing = request(&server, "GET", "/ui/sessions/nobody", &[host(&server), session_cookie(&value)], "").await;
    assert_eq!(missing.status, 404);
    for id in ["bobs", "theirs"] {
        for path in ["", "/events/0", "/export", "/export?format=zip", "/live?from=0", "/usage"] {
            let answer = request(
                &server,
                "GET",
                &format!("/ui/sessions/{id}{path}"),
                &[host(&server), session_cookie(&value)],
                "",
            )
            .await;
            assert_eq!(answer.status, 404, "{id}{path}");
        }
        let headers = [host(&server), session_cookie(&value), (FORM.0, FORM.1.into())];
        let fork = form(&[("csrf", &csrf), ("upto_seq", "0")]);
        assert_eq!(request(&server, "POST", &format!("/ui/sessions/{id}/fork"), &headers, &fork).await.status, 404);
        let page =
            request(&server, "GET", &format!("/ui/sessions/{id}"), &[host(&server), session_cookie(&value)], "").await;
        assert_eq!(
            page.body.replace(id, "ID"),
            missing.body.replace("nobody", "ID"),
            "reads exactly like a missing id"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_without_the_inspector_serves_no_ui_routes() {
    let server = TestServer::start_with(berth_server::ServerConfig { ui: None, ..test_config() }).await;
    assert_eq!(request(&server, "GET", "/ui/sign-in", &[host(&server)], "").await.status, 404);
    assert_eq!(request(&server, "GET", "/ui/assets/live.js", &[host(&server)], "").await.status, 404);
}

async fn get_json(server: &TestServer, key: &str, path: &str) -> serde_json::Value {
    let headers = [host(server), ("Authorization", format!("Bearer {key}"))];
    let answer = request(server, "GET", path, &headers, "").await;
    assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    serde_json::from_str(&answer.body).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn counts_audit_search_and_the_parent_filter_answer_as_documented() {
    let server = TestServer::start().await;
    let admin_key = server.key("acme", "ops", None, Role::Admin);
    let admin = server.client(&admin_key);
    let create = |id: &str| berth_service::CreateSession { id: Some(id.parse().unwrap()), ..Default::default() };
    admin.create(&create("source")).await.unwrap();
    admin.create(&create("lonely")).await.unwrap();
    let source: berth_core::SessionId = "source".parse().unwrap();
    let append = berth_service::AppendRequest {
        memory: Vec::new(),
        run: None,
        expected_seq: None,
        events: vec![berth_service::NewEvent::new("user/message", serde_json::json!({"content": "hi"}))],
        idempotency_key: None,
    };
    admin.append(&source, &append).await.unwrap();
    admin.fork(&source, Some(1), Some(&"child".parse().unwrap())).await.unwrap();
    let listed = get_json(&server, &admin_key, "/v1/sessions?parent=source&include_blank=true").await;
    let ids: Vec<_> = listed["items"].as_array().unwrap().iter().map(|item| item["header"]["id"].clone()).collect();
    assert_eq!(ids, vec![serde_json::json!("child")]);
    let counts = get_json(&server, &admin_key, "/v1/sessions/counts?include_blank=true").await;
    assert_eq!(counts["cap"], 1000);
    assert_eq!(counts["counts"][0], serde_json::json!({"status": "active", "count": 3, "more": false}));
    let counts = get_json(&server, &admin_key, "/v1/sessions/counts?parent=source").await;
    assert_eq!(counts["counts"][0]["count"], 1);
    let search = get_json(&server, &admin_key, "/v1/audit/search?action=fork").await;
    let entries = search["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{search}");
    assert_eq!(entries[0]["session"], "child", "a fork is audited on the new session");
    assert_eq!(search["next_from"], serde_json::Value::Null, "scanned to the end");
    let search = get_json(&server, &admin_key, "/v1/audit/search?session=lonely&limit=1").await;
    assert_eq!(search["entries"][0]["action"], "create");
    assert_eq!(search["next_from"], search["entries"][0]["seq"].as_u64().unwrap() + 1);
    let user = server.key("acme", "alice", None, Role::User);
    let headers = [host(&server), ("Authorization", format!("Bearer {user}"))];
    assert_eq!(request(&server, "GET", "/v1/audit/search", &headers, "").await.status, 403);

    // A fork at 0 (a conversation continued in another framework's layout) says so.
    admin.fork(&source, Some(0), Some(&"elsewhere".parse().unwrap())).await.unwrap();
    let cookie = session_cookie(&sign_in(&server, &admin_key).await);
    let headers = [host(&server), cookie];
    let child = request(&server, "GET", "/ui/sessions/child", &headers, "").await.body;
    assert!(child.contains("(first 1 events)"), "{child}");
    let elsewhere = request(&server, "GET", "/ui/sessions/elsewhere", &headers, "").await.body;
    assert!(elsewhere.contains("(no events copied: its conversation continued here, written anew)"), "{elsewhere}");
}

/// The `<tr>` of session `id` on a list page.
fn list_row<'a>(page: &'a str, id: &str) -> &'a str {
    let start = page.find(&format!("href=\"/ui/sessions/{id}\"")).unwrap_or_else(|| panic!("{id} listed: {page}"));
    let row = &page[start..];
    &row[..row.find("</tr>").unwrap()]
}

fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../berth-testkit/fixtures/content").join(name);
    std::fs::read(path).unwrap()
}

/// Issue 52 (R-A7): sessions stored with `content` as a string and as OpenAI-style typed
/// parts (the fixtures, imported as they are: no migration) read as text on the session
/// page, and an untitled conversation is named by its first user message in the list and
/// the page header — escaped, and read from the log's first events only.
#[tokio::test(flavor = "multi_thread")]
async fn content_parts_read_as_text_and_untitled_conversations_show_their_first_user_message() {
    use berth_service::{AppendRequest, CreateSession, NewEvent};
    use serde_json::json;
    let server = TestServer::start().await;
    // An admin of the fixtures' tenant: it imports alice's sessions and appends without a run.
    let key = server.key("acme", "ops", None, Role::Admin);
    let alice = server.client(&key);
    for name in ["chat-strings.jsonl", "chat-parts.jsonl"] {
        alice.import(fixture(name)).await.unwrap();
    }
    let append = |id: &'static str, events: Vec<NewEvent>| {
        let alice = &alice;
        async move {
            let request =
                AppendRequest { memory: Vec::new(), run: None, expected_seq: None, events, idempotency_key: None };
            alice.append(&id.parse().unwrap(), &request).await.unwrap();
        }
    };
    let create = |id: &str, title: Option<&str>| CreateSession {
        id: Some(id.parse().unwrap()),
        title: title.map(str::to_owned),
        ..Default::default()
    };
    let parts_message =
        |text: &str| NewEvent::new("user/message", json!({"content": [{"type": "input_text", "text": text}]}));
    alice.create(&create("titled", Some("Named by hand"))).await.unwrap();
    append("titled", vec![parts_message("not the title")]).await;
    alice.create(&create("hostile", None)).await.unwrap();
    append("hostile", vec![parts_message("<img src=x onerror=alert(1)> hi")]).await;
    // A user message past the events a preview reads: no preview (the listing never
    // reads further into a log), though the session is listed.
    alice.create(&create("late", None)).await.unwrap();
    let mut late = vec![NewEvent::new("assistant/message", json!({"content": "before"}))];
    late.extend((0..berth_core::content::PREVIEW_SCAN_EVENTS).map(|i| NewEvent::new("acme/note", json!({"i": i}))));
    late.push(parts_message("too late to preview"));
    append("late", late).await;
    alice.create(&create("empty", None)).await.unwrap();
    // A framework's own record beside its conversation: folded on the page.
    alice.create(&create("framework", None)).await.unwrap();
    let mut record = NewEvent::new("smol/step", json!({"step_number": 1, "model_output": "kept verbatim"}));
    record.ignorable = true;
    append("framework", vec![parts_message("what is the weather?"), record]).await;

    let cookie = session_cookie(&sign_in(&server, &key).await);
    let get = |path: String| {
        let (server, cookie) = (&server, cookie.clone());
        async move {
            let answer = request(server, "GET", &path, &[host(server), cookie], "").await;
            assert_eq!(answer.status, 200, "{path}: {}", answer.body);
            answer.body
        }
    };
    let list = get("/ui/sessions".into()).await;
    let preview = |text: &str| format!("<span class=\"visually-hidden\">First user message: </span>{text}</span>");
    assert!(
        list_row(&list, "chat-parts").contains(&preview("What is in this picture? [image] [file: notes.pdf]")),
        "{list}"
    );
    assert!(list_row(&list, "chat-strings").contains(&preview("What is in the repo? Short answer, please.")), "{list}");
    assert!(list_row(&list, "titled").contains("Named by hand") && !list.contains("not the title"), "{list}");
    assert!(list_row(&list, "hostile").contains(&preview("&lt;img src=x onerror=alert(1)&gt; hi")), "{list}");
    assert!(!list_row(&list, "late").contains("class=\"preview\""), "{list}");
    assert!(!list.contains("/ui/sessions/empty\""), "a blank session stays hidden: {list}");

    let parts = get("/ui/sessions/chat-parts".into()).await;
    let header = &parts[parts.find("<header class=\"session-header\">").unwrap()..];
    assert!(header.contains(&preview("What is in this picture? [image] [file: notes.pdf]")), "{header}");
    assert!(parts
        .contains("<title>What is in this picture? [image] [file: notes.pdf] · chat-parts · berth inspector</title>"));
    for text in [
        "What is in this picture?\n[image]\n[file: notes.pdf]",
        "hi",
        "Sunny, 21 °C\n[image]",
        "[audio]",
        "[refusal] I can't transcribe that recording.",
    ] {
        let shown = format!("<div class=\"content parts\">{text}</div>");
        assert!(parts.contains(&shown), "{shown} in {parts}");
    }
    assert!(parts.contains("<details class=\"raw-json\"><summary>JSON</summary>"), "the parts' JSON one click away");
    let framework = get("/ui/sessions/framework".into()).await;
    assert!(
        framework.contains("<details class=\"record\"><summary>Record kept for smol (")
            && framework.contains("kept verbatim"),
        "a framework's record is folded, its JSON one click away: {framework}"
    );
    assert!(
        framework.contains(
            "<details class=\"bookkeeping\"><summary>1 bookkeeping record <span class=\"kinds\">(smol/step)</span>"
        ),
        "bookkeeping folds behind a count per group: {framework}"
    );
    assert!(!parts.contains("iVBORw0KGgo") || parts.matches("iVBORw0KGgo").count() == 1, "the image only in the JSON");

    let strings = get("/ui/sessions/chat-strings".into()).await;
    assert!(strings.contains("<div class=\"content\">What is in the repo?\nShort answer, please.</div>"), "{strings}");
    assert!(strings.contains("<div class=\"content\">You are a helpful assistant.</div>"));
    assert!(
        strings.contains("<div class=\"content\">README.md\nsrc</div>"),
        "a string tool result reads as text: {strings}"
    );
    assert_eq!(
        strings.matches("raw-json").count(),
        1,
        "string messages read as before; the tool result's JSON is one click away"
    );
    // Chat order by default, opening at the latest turn; turn boundaries are headers.
    assert!(strings.contains("data-order=\"chat\"") && strings.contains(" id=\"latest\""), "{strings}");
    assert!(!strings.contains("type-turn-start") && !strings.contains("type-turn-end"), "no boundary rows: {strings}");
    assert!(strings.contains("<details class=\"actions\"><summary aria-label=\"Actions for event"), "{strings}");
    let newest = get("/ui/sessions/chat-strings?order=newest".into()).await;
    assert!(newest.contains("data-order=\"newest\"") && newest.contains("href=\"/ui/sessions/chat-strings#latest\""));
    let (server_ref, cookie_ref) = (&server, cookie.clone());
    let bad =
        request(server_ref, "GET", "/ui/sessions/chat-strings?order=sideways", &[host(server_ref), cookie_ref], "")
            .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let titled = get("/ui/sessions/titled".into()).await;
    assert!(titled.contains("<p class=\"session-title\">Named by hand</p>"), "{titled}");
    let late = get("/ui/sessions/late".into()).await;
    assert!(late.contains("too late to preview") && !late.contains("class=\"session-title\""), "{late}");
}

/// Each row of the list shows the badges its catalog record tells, by the service's
/// clock: a writer attached (a run whose lease holds), a lease lapsed (a run still
/// recorded attached past its lease); a session with no run shows neither. The list
/// says how many blank sessions it hides, with a link that shows them.
#[tokio::test(flavor = "multi_thread")]
async fn list_rows_show_writer_and_lapsed_lease_badges_and_the_hidden_blank_count() {
    use berth_core::{RunId, SessionPolicy};
    use berth_service::{AppendRequest, AttachRequest, CreateSession, NewEvent};
    use serde_json::json;
    let clock = Arc::new(ManualClock(AtomicU64::new(1_800_000_000_000)));
    let server = TestServer::start_with_clock(clock.clone()).await;
    let key = server.key("acme", "alice", None, Role::User);
    let alice = server.client(&key);
    let short = SessionPolicy { run_lease_ttl_ms: 1_000, ..SessionPolicy::default() };
    for (id, policy, detach) in [("writer", None, false), ("lapsed", Some(short), false), ("detached", None, true)] {
        let create = CreateSession { id: Some(id.parse().unwrap()), policy, ..Default::default() };
        alice.create(&create).await.unwrap();
        let run_id: RunId = "w".parse().unwrap();
        let attach =
            AttachRequest { run_id: Some(run_id.clone()), expected_revision: None, on_busy: Default::default() };
        alice.attach(&id.parse().unwrap(), &attach).await.unwrap();
        let events = vec![NewEvent::new("user/message", json!({"content": id}))];
        let append = AppendRequest {
            memory: Vec::new(),
            run: Some(run_id.clone()),
            expected_seq: None,
            events,
            idempotency_key: None,
        };
        alice.append(&id.parse().unwrap(), &append).await.unwrap();
        if detach {
            alice.detach(&id.parse().unwrap(), &run_id, "done", None).await.unwrap();
        }
    }
    for id in ["blank-1", "blank-2"] {
        alice.create(&CreateSession { id: Some(id.parse().unwrap()), ..Default::default() }).await.unwrap();
    }
    clock.0.fetch_add(2_000, Ordering::SeqCst);
    let cookie = session_cookie(&sign_in(&server, &key).await);
    let list = request(&server, "GET", "/ui/sessions", &[host(&server), cookie.clone()], "").await;
    assert_eq!(list.status, 200, "{}", list.body);
    let (writer, lapsed, detached) =
        (list_row(&list.body, "writer"), list_row(&list.body, "lapsed"), list_row(&list.body, "detached"));
    assert!(writer.contains("class=\"badge run-writer\"") && !writer.contains("run-lapsed"), "{writer}");
    assert!(lapsed.contains("class=\"badge run-lapsed\"") && !lapsed.contains("run-writer"), "{lapsed}");
    assert!(!detached.contains("run-writer") && !detached.contains("run-lapsed"), "{detached}");

    // The blank sessions are hidden, counted, and one link away.
    assert!(!list.body.contains("/ui/sessions/blank-1\""), "{}", list.body);
    assert!(
        list.body.contains(concat!(
            "<p class=\"hidden-blank\"><span class=\"hidden-count\" data-count=\"2\">2 blank sessions ",
            "(no conversation yet) hidden.</span> <a href=\"/ui/sessions?include_blank=1\">Show them</a></p>"
        )),
        "{}",
        list.body
    );
    let all = request(&server, "GET", "/ui/sessions?include_blank=1", &[host(&server), cookie.clone()], "").await;
    assert!(all.body.contains("/ui/sessions/blank-1\"") && all.body.contains("/ui/sessions/blank-2\""));
    assert!(!all.body.contains("hidden-blank"), "nothing hidden: {}", all.body);
    // Counted within the status filter: no closed session is blank.
    let closed = request(&server, "GET", "/ui/sessions?status=closed", &[host(&server), cookie], "").await;
    assert!(closed.status == 200 && !closed.body.contains("hidden-blank"), "{}", closed.body);
}

/// A live feed read as a browser's `EventSource` reads it (HTTP/1.0: the body is the
/// event stream as sent, no chunking).
struct Feed {
    stream: tokio::net::TcpStream,
    buffer: String,
}

/// One Server-Sent Event: its name, data and id.
#[derive(Debug)]
struct Message {
    event: String,
    data: String,
    id: Option<String>,
}

impl Feed {
    async fn open(server: &TestServer, cookie: &(&str, String), path: &str) -> Feed {
        let mut stream = tokio::net::TcpStream::connect(server.server.local_addr).await.unwrap();
        let (host_name, host_value) = host(server);
        let text = format!("GET {path} HTTP/1.0\r\n{host_name}: {host_value}\r\n{}: {}\r\n\r\n", cookie.0, cookie.1);
        stream.write_all(text.as_bytes()).await.unwrap();
        let mut feed = Feed { stream, buffer: String::new() };
        let head = feed.until_text("\r\n\r\n").await;
        assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains("text/event-stream"), "{head}");
        feed
    }

    /// Reads until `end` has arrived; returns what came before it (and it).
    async fn until_text(&mut self, end: &str) -> String {
        let read = async {
            loop {
                if let Some(at) = self.buffer.find(end) {
                    let rest = self.buffer.split_off(at + end.len());
                    return std::mem::replace(&mut self.buffer, rest);
                }
                let mut chunk = [0u8; 8192];
                let count = self.stream.read(&mut chunk).await.unwrap();
                assert!(count > 0, "the feed ended: {}", self.buffer);
                self.buffer.push_str(&String::from_utf8_lossy(&chunk[..count]));
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(30), read).await.expect("the feed went quiet")
    }

    /// The next event (heartbeat comments skipped).
    async fn next(&mut self) -> Message {
        loop {
            let block = self.until_text("\n\n").await;
            let mut message = Message { event: String::new(), data: String::new(), id: None };
            let mut data = Vec::new();
            for line in block.lines() {
                match line.split_once(':') {
                    Some(("event", value)) => message.event = value.trim_start().to_owned(),
                    Some(("data", value)) => data.push(value.strip_prefix(' ').unwrap_or(value)),
                    Some(("id", value)) => message.id = Some(value.trim_start().to_owned()),
                    _ => {}
                }
            }
            message.data = data.join("\n");
            if !message.event.is_empty() {
                return message;
            }
        }
    }

    /// The next event named `event`, skipping others.
    async fn next_named(&mut self, event: &str) -> Message {
        loop {
            let message = self.next().await;
            if message.event == event {
                return message;
            }
        }
    }
}

/// Issue 55 item 5: live mode sends each group it touches whole, rendered as the page
/// renders it (a turn with its steps, pairings and end reason as its header; boundaries
/// never rows), continuing the page's open group in place; and the header's changing
/// part after each batch and on a timer, so a run's lease lapsing by the service's
/// clock shows with no new event.
#[tokio::test(flavor = "multi_thread")]
async fn live_mode_sends_whole_groups_and_keeps_the_header_current() {
    use berth_core::{RunId, SessionPolicy};
    use berth_service::{AppendRequest, AttachRequest, CreateSession, NewEvent};
    use serde_json::json;
    let clock = Arc::new(ManualClock(AtomicU64::new(1_800_000_000_000)));
    let server = TestServer::start_with_clock(clock.clone()).await;
    let key = server.key("acme", "alice", None, Role::User);
    let alice = server.client(&key);
    let id: berth_core::SessionId = "watched".parse().unwrap();
    let policy = SessionPolicy { run_lease_ttl_ms: 10_000, ..SessionPolicy::default() };
    alice.create(&CreateSession { id: Some(id.clone()), policy: Some(policy), ..Default::default() }).await.unwrap();
    let run: RunId = "w".parse().unwrap();
    let attach = AttachRequest { run_id: Some(run.clone()), expected_revision: None, on_busy: Default::default() };
    alice.attach(&id, &attach).await.unwrap();
    let append = |events: Vec<NewEvent>| AppendRequest {
        memory: Vec::new(),
        run: Some(run.clone()),
        expected_seq: None,
        events,
        idempotency_key: None,
    };
    alice.append(&id, &append(vec![NewEvent::new("system/message", json!({"content": "be brief"}))])).await.unwrap();

    let cookie = session_cookie(&sign_in(&server, &key).await);
    let page = request(&server, "GET", "/ui/sessions/watched", &[host(&server), cookie.clone()], "").await;
    assert!(page.body.contains("data-group=\"0\" data-open"), "the loose group may continue: {}", page.body);
    assert!(page.body.contains("data-next-seq=\"1\" data-group=\"0\""), "{}", page.body);
    let state = &page.body[page.body.find("<p class=\"session-state\"").unwrap()..];
    assert!(state.contains("data-event-count=\"1\"") && state.contains("class=\"badge run-writer\""), "{state}");

    let mut feed = Feed::open(&server, &cookie, "/ui/sessions/watched/live?from=1&group=0").await;
    let continued = feed.next().await;
    assert_eq!((continued.event.as_str(), continued.id.as_deref()), ("group", Some("0")), "{continued:?}");
    assert!(continued.data.starts_with("<section class=\"turn\"") && continued.data.contains("data-group=\"0\""));
    assert!(continued.data.contains("Events outside a turn") && continued.data.contains("id=\"event-0\""));
    let header = feed.next().await;
    assert_eq!(header.event, "header", "{header:?}");
    assert!(header.data.contains("data-event-count=\"1\""), "{}", header.data);

    let before = alice.get(&id).await.unwrap().revision.0;
    let turn = vec![
        NewEvent::new("turn/start", json!({"turn": 0})),
        NewEvent::new("step/start", json!({"turn": 0, "step": 0})),
        NewEvent::new("user/message", json!({"content": "<script>alert(1)</script> ls?"})),
        NewEvent::new("tool/call", json!({"call_id": "c1", "name": "ls", "arguments": {}})),
        NewEvent::new("tool/result", json!({"call_id": "c1", "content": "README.md"})),
        NewEvent::new("step/end", json!({"turn": 0, "step": 0})),
        NewEvent::new("turn/end", json!({"turn": 0, "reason": "completed"})),
    ];
    alice.append(&id, &append(turn)).await.unwrap();
    let group = feed.next().await;
    assert_eq!((group.event.as_str(), group.id.as_deref()), ("group", Some("7")), "{group:?}");
    let html = &group.data;
    assert!(html.contains("data-group=\"1\"") && !html.contains("data-open"), "a turn that ended: {html}");
    assert!(html.contains("<h3>Turn 0</h3><span class=\"badge reason-completed\">completed</span>"), "{html}");
    assert!(html.contains("<h4>Step 0</h4>") && html.contains("class=\"tool tool-ok\""), "{html}");
    assert!(html.contains("id=\"event-3\"") && html.contains("&lt;script&gt;alert(1)&lt;/script&gt; ls?"), "{html}");
    assert!(!html.contains("<script>"), "escaped: {html}");
    for boundary in ["type-turn-start", "type-step-start", "type-step-end", "type-turn-end"] {
        assert!(!html.contains(boundary), "{boundary} is a header, not a row: {html}");
    }
    assert!(!html.contains("id=\"event-0\""), "the loose group was not touched");
    let header = feed.next_named("header").await;
    let after = alice.get(&id).await.unwrap().revision.0;
    assert!(after > before);
    assert!(header.data.contains("data-event-count=\"8\""), "{}", header.data);
    assert!(header.data.contains(&format!("data-revision=\"{after}\"")), "{}", header.data);
    assert!(header.data.contains("<span class=\"count\">8 events</span>"), "{}", header.data);
    assert!(header.data.contains("class=\"badge run-writer\"") && !header.data.contains("run-lapsed"));

    // A page loaded mid-turn: its open turn continues in place (the feed reads it again).
    let opened = vec![
        NewEvent::new("turn/start", json!({"turn": 1})),
        NewEvent::new("user/message", json!({"content": "and order 1043?"})),
    ];
    alice.append(&id, &append(opened)).await.unwrap();
    let page = request(&server, "GET", "/ui/sessions/watched", &[host(&server), cookie.clone()], "").await;
    assert!(page.body.contains("data-next-seq=\"10\" data-group=\"8\""), "{}", page.body);
    let mut mid_turn = Feed::open(&server, &cookie, "/ui/sessions/watched/live?from=10&group=8").await;
    let again = mid_turn.next().await;
    assert!(again.data.contains("data-group=\"8\" data-open") && again.data.contains("id=\"event-9\""));
    alice
        .append(&id, &append(vec![NewEvent::new("assistant/message", json!({"content": "shipped too"}))]))
        .await
        .unwrap();
    let continued = mid_turn.next_named("group").await;
    assert_eq!(continued.id.as_deref(), Some("10"));
    assert!(continued.data.contains("data-group=\"8\" data-open") && continued.data.contains("reason-open"));
    assert!(continued.data.contains("id=\"event-9\"") && continued.data.contains("id=\"event-10\""));
    drop(mid_turn);

    // The run's lease lapses by the service's clock; no event arrives, the header says so.
    clock.0.fetch_add(20_000, Ordering::SeqCst);
    let lapsed = loop {
        let header = feed.next_named("header").await;
        if header.data.contains("run-lapsed") {
            break header.data;
        }
    };
    assert!(lapsed.contains("lease lapsed") && lapsed.contains("lease ended") && !lapsed.contains("run-writer"));
}

fn langgraph_fixture() -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts/inspector/fixtures/langgraph-weather.jsonl");
    std::fs::read(path).unwrap()
}

/// The part of a page from `start` to the end of that element's first `end`.
fn part_of<'a>(page: &'a str, start: &str, end: &str) -> &'a str {
    let from = page.find(start).unwrap_or_else(|| panic!("{start} in {page}"));
    let rest = &page[from..];
    &rest[..rest.find(end).map_or(rest.len(), |at| at + end.len())]
}

/// Issue 55 item 6: a LangGraph thread (the weather example's, two turns, exported as the
/// drop-in stored it) lists the checkpoints of the timeline's page; a selected one
/// (`?cp=`) shows its messages, every channel with its version, type and size, and the
/// channels changed from its parent or from a chosen checkpoint (`&vs=`).
#[tokio::test(flavor = "multi_thread")]
async fn a_langgraph_thread_shows_checkpoints_channels_and_changed_channels() {
    let server = TestServer::start().await;
    let key = server.key("acme", "ops", None, Role::Admin);
    server.client(&key).import(langgraph_fixture()).await.unwrap();
    let cookie = session_cookie(&sign_in(&server, &key).await);
    let get = |path: &str| {
        let (server, cookie, path) = (&server, cookie.clone(), path.to_owned());
        async move { request(server, "GET", &path, &[host(server), cookie], "").await }
    };
    let page = get("/ui/sessions/alice-langgraph").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let section = part_of(&page.body, "<section class=\"langgraph\"", "</section>");
    let listed: Vec<&str> = section.split("data-seq=\"").skip(1).map(|rest| &rest[..rest.find('"').unwrap()]).collect();
    assert_eq!(listed, ["74", "67", "59", "50", "40", "36", "29", "21", "12", "2"], "newest first: {section}");
    assert!(section.contains("<td>step 5 (loop)</td>") && section.contains("<td>step 4 (input)</td>"), "{section}");
    assert!(!section.contains("checkpoint-state"), "nothing read until one is picked");

    let state = get("/ui/sessions/alice-langgraph?cp=50").await;
    assert_eq!(state.status, 200, "{}", state.body);
    let channels = part_of(&state.body, "<table class=\"channels\">", "</table>");
    let row = |channel: &str| part_of(channels, &format!("<tr data-channel=\"{channel}\""), "</tr>").to_owned();
    assert!(row("messages").contains("list: appends 1 (HumanMessage) to #34") && row("messages").contains(">#48</a>"));
    assert!(row("messages").contains("title=\"00000000000000000000000000000007."), "{}", row("messages"));
    assert!(row("__start__").contains("(empty)") && row("__start__").contains("#47"), "{}", row("__start__"));
    assert!(row("branch:to:agent").contains("<td class=\"type\">None</td><td class=\"size\">0 bytes</td>"));
    assert!(row("branch:to:tools").contains("#28"), "an older version, read where `at` says");
    let diff = part_of(&state.body, "<table class=\"channel-diff\">", "</table>");
    let changed: Vec<&str> =
        diff.split("<tr data-channel=\"").skip(1).map(|rest| &rest[..rest.find('"').unwrap()]).collect();
    assert_eq!(changed, ["__start__", "messages", "branch:to:agent"], "from its parent #40: {diff}");
    assert!(state.body.contains("From its parent, checkpoint #40 (step 4 (input)) to #50."), "{}", state.body);
    assert!(row("messages").contains("changed") && !row("branch:to:tools").contains("changed"));
    let messages = part_of(&state.body, "<ol class=\"lg-messages\">", "</ol>");
    assert!(messages.contains("get_weather({&quot;city&quot;:&quot;Paris&quot;})"), "tool calls shown: {messages}");
    assert!(messages.ends_with("<li class=\"lg-message role-user\"><span class=\"role\">user</span><div class=\"content\">What's the weather in Paris?</div></li></ol>"), "{messages}");

    let compared = get("/ui/sessions/alice-langgraph?cp=74&vs=12").await;
    let diff = part_of(&compared.body, "<table class=\"channel-diff\">", "</table>");
    assert!(diff.contains("data-channel=\"branch:to:tools\" data-change=\"added\""), "{diff}");
    assert!(compared.body.contains("From checkpoint #12 (step 0 (loop)) to #74."), "{}", compared.body);

    for (query, status) in [("cp=45", 400), ("vs=40", 400), ("cp=100000", 404), ("cp=x", 400)] {
        let refused = get(&format!("/ui/sessions/alice-langgraph?{query}")).await;
        assert_eq!(refused.status, status, "{query}: {}", refused.body);
    }

    // Markup in a record's names (a channel, a version, a class) is text on the page.
    use berth_service::{AppendRequest, CreateSession, NewEvent};
    use rmpv::Value as Pack;
    let pack = |value: Pack| {
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, &value).unwrap();
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes)
    };
    let hostile = "<script>alert(1)</script>";
    let class = Pack::Array(vec![Pack::from("<img src=x onerror=alert(2)>"), Pack::from("Evil"), Pack::Map(vec![])]);
    let mut class_bytes = Vec::new();
    rmpv::encode::write_value(&mut class_bytes, &class).unwrap();
    let checkpoint = Pack::Map(vec![
        (Pack::from("channel_versions"), Pack::Map(vec![(Pack::from(hostile), Pack::from("<b>1</b>"))])),
        (Pack::from("updated_channels"), Pack::Array(vec![Pack::from(hostile)])),
    ]);
    let events = vec![
        NewEvent::new(
            "lg/blob",
            serde_json::json!({"ns": "", "c": hostile, "v": "<b>1</b>", "t": "msgpack", "b": pack(Pack::Ext(5, class_bytes))}),
        ),
        NewEvent::new(
            "lg/checkpoint",
            serde_json::json!({"ns": "", "id": hostile, "parent": null, "cp": ["msgpack", pack(checkpoint)]}),
        ),
    ];
    let admin = server.client(&key);
    let create = CreateSession { id: Some("lg-hostile".parse().unwrap()), ..Default::default() };
    admin.create(&create).await.unwrap();
    let append = AppendRequest { memory: Vec::new(), run: None, expected_seq: None, events, idempotency_key: None };
    admin.append(&"lg-hostile".parse().unwrap(), &append).await.unwrap();
    let page = get("/ui/sessions/lg-hostile?cp=1").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let section = part_of(&page.body, "<section class=\"langgraph\"", "</section>");
    assert!(!section.contains("<script>") && !section.contains("<img") && !section.contains("<b>"), "{section}");
    assert!(section.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{section}");
    assert!(section.contains("&lt;img src=x onerror=alert(2)&gt;.Evil"), "{section}");
}

fn dropin_fixture(name: &str) -> Vec<u8> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/dropins/langgraph/fixtures").join(name);
    std::fs::read(path).unwrap()
}

/// Threads stored before the drop-in wrote the conversation vocabulary (issue 52's
/// fixtures) show their channels and changes, and say why no messages; a value split
/// into parts is read from all of them, also when the checkpoint's `at` names a part
/// far behind it (the other parts by point reads).
#[tokio::test(flavor = "multi_thread")]
async fn old_layout_threads_and_split_values_read_in_the_langgraph_state() {
    use berth_service::{AppendRequest, CreateSession, NewEvent};
    let server = TestServer::start().await;
    let key = server.key("acme", "ops", None, Role::Admin);
    let admin = server.client(&key);
    for name in ["weather.jsonl", "markers.jsonl"] {
        admin.import(dropin_fixture(name)).await.unwrap();
    }
    let cookie = session_cookie(&sign_in(&server, &key).await);
    let get = |path: &str| {
        let (server, cookie, path) = (&server, cookie.clone(), path.to_owned());
        async move {
            let answer = request(server, "GET", &path, &[host(server), cookie], "").await;
            assert_eq!(answer.status, 200, "{path}: {}", answer.body);
            answer.body
        }
    };
    let weather = get("/ui/sessions/weather?cp=13").await;
    let channels = part_of(&weather, "<table class=\"channels\">", "</table>");
    let row = |channel: &str| part_of(channels, &format!("<tr data-channel=\"{channel}\""), "</tr>").to_owned();
    assert!(row("messages").contains("list: appends 1 (AIMessage) to #6"), "{}", row("messages"));
    assert!(row("__start__").contains("(empty)") && row("__start__").contains(">#5</a>"), "read where `at` says");
    assert!(weather.contains("No conversation events in the 200 events before it"), "{weather}");
    let diff = part_of(&weather, "<table class=\"channel-diff\">", "</table>");
    assert!(diff.contains("data-channel=\"branch:to:tools\" data-change=\"added\""), "{diff}");

    let markers = get("/ui/sessions/markers?cp=2").await;
    let start = part_of(&markers, "<tr data-channel=\"__start__\"", "</tr>");
    assert!(start.contains("<td class=\"type\">dict of 2 keys</td><td class=\"size\">5190 bytes</td>"), "{start}");
    assert!(start.contains(">#0</a>"), "named by its first part: {start}");

    // The same parts, then 250 other events, then a checkpoint whose `at` names part 1.
    let parts: Vec<NewEvent> = dropin_fixture("markers.jsonl")
        .split(|byte| *byte == b'\n')
        .filter_map(|line| serde_json::from_slice::<serde_json::Value>(line).ok())
        .filter(|line| matches!(line.get("seq").and_then(|seq| seq.as_u64()), Some(0 | 1)))
        .map(|line| NewEvent::new("lg/blob", line["data"].clone()))
        .collect();
    let version = parts[0].data.to_value()["v"].clone();
    let pack = |value: rmpv::Value| {
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, &value).unwrap();
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes)
    };
    let versions = rmpv::Value::Map(vec![(
        "channel_versions".into(),
        rmpv::Value::Map(vec![("__start__".into(), version.as_str().unwrap().into())]),
    )]);
    let mut events = parts;
    events.extend((0..250).map(|i| NewEvent::new("acme/note", serde_json::json!({"i": i}))));
    let checkpoint = serde_json::json!({"ns": "", "id": "far", "parent": null, "cp": ["msgpack", pack(versions)], "at": {"__start__": 1}});
    events.push(NewEvent::new("lg/checkpoint", checkpoint));
    admin.create(&CreateSession { id: Some("lg-far".parse().unwrap()), ..Default::default() }).await.unwrap();
    let append = AppendRequest { memory: Vec::new(), run: None, expected_seq: None, events, idempotency_key: None };
    admin.append(&"lg-far".parse().unwrap(), &append).await.unwrap();
    let far = get("/ui/sessions/lg-far?cp=252").await;
    let start = part_of(&far, "<tr data-channel=\"__start__\"", "</tr>");
    assert!(start.contains("<td class=\"type\">dict of 2 keys</td><td class=\"size\">5190 bytes</td>"), "{start}");
    assert!(far.contains("The thread's first checkpoint: no parent"), "{far}");
}

/// Every checkpoint of every committed LangGraph fixture (whole lists, suffix chains and
/// anchors, subgraph namespaces, `Send` tasks, interrupts, errors, a copied thread) reads
/// whole: each channel's record found and read.
#[tokio::test(flavor = "multi_thread")]
async fn every_checkpoint_of_the_langgraph_fixtures_reads_whole() {
    let server = TestServer::start().await;
    let key = server.key("acme", "ops", None, Role::Admin);
    let admin = server.client(&key);
    let cookie = session_cookie(&sign_in(&server, &key).await);
    let mut read = 0;
    for name in ["chain", "failed", "fan", "interrupt", "markers", "weather"] {
        let bytes = dropin_fixture(&format!("{name}.jsonl"));
        let id = admin.import(bytes.clone()).await.unwrap()[0].header.id.clone();
        let lines = bytes
            .split(|byte| *byte == b'\n')
            .filter_map(|line| serde_json::from_slice::<serde_json::Value>(line).ok());
        for line in lines.filter(|line| line["type"] == "lg/checkpoint") {
            let seq = line["seq"].as_u64().unwrap();
            let path = format!("/ui/sessions/{id}?cp={seq}");
            let page = request(&server, "GET", &path, &[host(&server), cookie.clone()], "").await;
            assert_eq!(page.status, 200, "{path}: {}", page.body);
            let channels = part_of(&page.body, "<table class=\"channels\">", "</table>");
            assert!(channels.contains("<tr data-channel="), "{path}: {channels}");
            for missing in ["(record not found nearby)", "(unreadable record)", "(not read)", "not found)"] {
                assert!(!channels.contains(missing), "{path}: {missing} in {channels}");
            }
            read += 1;
        }
    }
    assert!(read >= 50, "{read} checkpoints read");
}

/// The `<li>` of the waterfall row read from event `seq`.
fn waterfall_row(page: &str, seq: u64) -> &str {
    let start = page.find(&format!("data-seq=\"{seq}\"")).unwrap_or_else(|| panic!("no row for #{seq}: {page}"));
    let start = page[..start].rfind("<li").unwrap();
    let end = start + page[start..].find("</li>").unwrap();
    &page[start..end]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turns_waterfall_places_model_calls_and_tools_by_their_stored_times() {
    use berth_core::RunId;
    use berth_service::{AppendRequest, AttachRequest, CreateSession, NewEvent};
    use serde_json::json;
    const T: u64 = 1_800_000_000_000;
    let clock = Arc::new(ManualClock(AtomicU64::new(T + 60_000)));
    let server = TestServer::start_with_clock(clock).await;
    let key = server.key("acme", "alice", None, Role::User);
    let alice = server.client(&key);
    let id: berth_core::SessionId = "traced".parse().unwrap();
    alice.create(&CreateSession { id: Some(id.clone()), ..Default::default() }).await.unwrap();
    let run: RunId = "w".parse().unwrap();
    let attach = AttachRequest { run_id: Some(run.clone()), expected_revision: None, on_busy: Default::default() };
    alice.attach(&id, &attach).await.unwrap();
    let at = |offset_ms: u64, kind: &str, data: serde_json::Value| NewEvent {
        time: Some(Timestamp(T + offset_ms)),
        ignorable: kind == "model/call",
        ..NewEvent::new(kind, data)
    };
    // Two model calls (one failed, its model name hostile) and a tool between them;
    // the turn runs 2,000 ms, so every offset and width is a round percentage.
    let events = vec![
        at(0, "turn/start", json!({"turn": 0})),
        at(10, "step/start", json!({"turn": 0, "step": 0})),
        at(
            1010,
            "model/call",
            json!({"model": "gpt-4o", "provider": "openai", "input_tokens": 1200,
            "output_tokens": 80, "cached_tokens": 1000, "latency_ms": 1000, "finish_reason": "tool_calls"}),
        ),
        at(
            1020,
            "assistant/message",
            json!({"content": "", "tool_calls": [{"call_id": "c1", "name": "grep", "arguments": {}}]}),
        ),
        at(1100, "tool/call", json!({"call_id": "c1", "name": "grep", "arguments": {}})),
        at(1600, "tool/result", json!({"call_id": "c1", "content": "3 matches"})),
        at(1610, "step/end", json!({"turn": 0, "step": 0})),
        at(1620, "step/start", json!({"turn": 0, "step": 1})),
        at(
            1900,
            "model/call",
            json!({"model": "<b>claude</b>", "input_tokens": 300, "latency_ms": 200,
            "error": {"code": "rate_limited", "name": "RateLimitError"}}),
        ),
        at(1950, "assistant/message", json!({"content": "sorry"})),
        at(1990, "step/end", json!({"turn": 0, "step": 1})),
        at(2000, "turn/end", json!({"turn": 0, "reason": "completed"})),
    ];
    let append =
        AppendRequest { memory: Vec::new(), run: Some(run), expected_seq: None, events, idempotency_key: None };
    alice.append(&id, &append).await.unwrap();

    let cookie = session_cookie(&sign_in(&server, &key).await);
    let page = request(&server, "GET", "/ui/sessions/traced", &[host(&server), cookie.clone()], "").await;
    assert_eq!(page.status, 200);
    let body = &page.body;
    assert!(body.contains("<details class=\"waterfall\" data-span-ms=\"2000\">"), "{body}");
    assert!(body.contains("Trace: 2 model calls, 1 tool over 2.0 s"), "{body}");
    // seq 2: from 10 ms (1010 − 1000) for 1,000 ms; seq 4: the tool, 1,100 to 1,600 ms;
    // seq 8: 1,700 to 1,900 ms, failed.
    let first = waterfall_row(body, 2);
    assert!(
        first.contains("data-start-ms=\"10\" data-duration-ms=\"1000\" data-offset=\"0.50%\" data-width=\"50.00%\""),
        "{first}"
    );
    assert!(
        first.contains("gpt-4o") && first.contains(">1.0 s<") && first.contains("1200 in / 80 out / 1000 cached"),
        "{first}"
    );
    assert!(first.contains("<rect class=\"wf-bar\" x=\"0.50%\" y=\"0\" width=\"50.00%\""), "{first}");
    let tool = waterfall_row(body, 4);
    assert!(tool.contains("class=\"wf-row wf-tool\"") && tool.contains("grep") && tool.contains("500 ms"), "{tool}");
    assert!(
        tool.contains("data-start-ms=\"1100\" data-duration-ms=\"500\" data-offset=\"55.00%\" data-width=\"25.00%\""),
        "{tool}"
    );
    let failed = waterfall_row(body, 8);
    assert!(failed.contains("class=\"wf-row wf-model wf-error\"") && failed.contains("error rate_limited"), "{failed}");
    assert!(failed.contains("data-offset=\"85.00%\" data-width=\"10.00%\"") && failed.contains("300 in"), "{failed}");
    assert!(failed.contains("&lt;b&gt;claude&lt;/b&gt;") && !body.contains("<b>claude"), "escaped: {failed}");
    // Rows in the order they started.
    let order: Vec<usize> = [2, 4, 8].iter().map(|seq| body.find(&format!("data-seq=\"{seq}\"")).unwrap()).collect();
    assert!(order.windows(2).all(|pair| pair[0] < pair[1]), "{order:?}");

    // The session's totals: the usage computation's figures, on a page of their own
    // (the session page does not read the whole log for them).
    assert!(!body.contains("class=\"usage\"") && body.contains("href=\"/ui/sessions/traced/usage\""), "{body}");
    let totals = request(&server, "GET", "/ui/sessions/traced/usage", &[host(&server), cookie], "").await;
    assert_eq!(totals.status, 200);
    let usage = &totals.body[totals.body.find("<section class=\"usage\"").expect("usage section")..];
    let usage = &usage[..usage.find("</section>").unwrap()];
    assert!(
        usage.contains(
            "data-calls=\"2\" data-errors=\"1\" data-model-ms=\"1200\" data-tool-calls=\"1\" data-tool-ms=\"500\""
        ),
        "{usage}"
    );
    assert!(usage.contains("1500 in / 80 out / 1000 cached") && usage.contains("gpt-4o (openai)"), "{usage}");
    assert!(usage.contains("&lt;b&gt;claude&lt;/b&gt;") && !totals.body.contains("<b>claude"), "escaped: {usage}");
}

/// The `href` of the list page's "Next page" link, unescaped.
fn next_page(page: &str) -> Option<String> {
    let start = page.find("rel=\"next\" href=\"")? + "rel=\"next\" href=\"".len();
    Some(page[start..][..page[start..].find('"').unwrap()].replace("&amp;", "&"))
}

/// Issue 55 item 4: the list searches title, label and id (case-insensitively, `%` and
/// `_` literally), keeps the search across its pages (none skipped or repeated), and
/// badges a session whose crashed run's turn a resume repaired (from `record.repair`,
/// on the list row and the session page's header); `GET /v1/sessions?q=` answers the
/// same search, and a search too long or holding control characters is a 400.
#[tokio::test(flavor = "multi_thread")]
async fn the_list_searches_titles_labels_and_ids_and_badges_interrupted_and_repaired_sessions() {
    use berth_core::{RunId, SessionPolicy};
    use berth_service::{AppendRequest, AttachRequest, CreateSession, NewEvent, OnBusy};
    use serde_json::json;
    let clock = Arc::new(ManualClock(AtomicU64::new(1_800_000_000_000)));
    let server = TestServer::start_with_clock(clock.clone()).await;
    let key = server.key("acme", "alice", None, Role::User);
    // Written by a service key for alice (a user key appends only through a run).
    let alice = server.client(&server.key("acme", "ops", None, Role::Service));
    let append = |run: Option<&RunId>, events: Vec<NewEvent>| AppendRequest {
        memory: Vec::new(),
        run: run.cloned(),
        expected_seq: None,
        events,
        idempotency_key: None,
    };
    let said = |text: &str| vec![NewEvent::new("user/message", json!({"content": text}))];
    let sessions: Vec<(String, Option<&str>, Vec<&str>)> = (0..57)
        .map(|index| (format!("order-{index:02}"), Some("Order question"), vec![]))
        .chain([
            ("pct".to_owned(), Some("Refund 50% off"), vec![]),
            ("nopct".to_owned(), Some("refund 500 off"), vec![]),
            ("under".to_owned(), None, vec!["a_b"]),
            ("nounder".to_owned(), None, vec!["axb"]),
        ])
        .collect();
    for (id, title, labels) in &sessions {
        let create = CreateSession {
            id: Some(id.parse().unwrap()),
            user: Some("alice".parse().unwrap()),
            title: title.map(str::to_owned),
            labels: labels.iter().map(|label| label.to_string()).collect(),
            ..Default::default()
        };
        alice.create(&create).await.unwrap();
        alice.append(&id.parse().unwrap(), &append(None, said(id))).await.unwrap();
        clock.0.fetch_add(1, Ordering::SeqCst);
    }
    // A run that crashes with its turn open, and a resume that repairs it.
    let short = SessionPolicy { run_lease_ttl_ms: 1_000, ..SessionPolicy::default() };
    let crashed = CreateSession {
        id: Some("crashed".parse().unwrap()),
        user: Some("alice".parse().unwrap()),
        policy: Some(short),
        ..Default::default()
    };
    alice.create(&crashed).await.unwrap();
    let crashed_id = "crashed".parse().unwrap();
    let (first, second): (RunId, RunId) = ("run-a".parse().unwrap(), "run-b".parse().unwrap());
    let attach =
        |run: &RunId| AttachRequest { run_id: Some(run.clone()), expected_revision: None, on_busy: OnBusy::Reject };
    alice.attach(&crashed_id, &attach(&first)).await.unwrap();
    let mut opened = vec![NewEvent::new("turn/start", json!({"turn": 0}))];
    opened.extend(said("where is my parcel?"));
    alice.append(&crashed_id, &append(Some(&first), opened)).await.unwrap();
    clock.0.fetch_add(2_000, Ordering::SeqCst);
    let cookie = session_cookie(&sign_in(&server, &key).await);
    let get = |path: String| {
        let (server, cookie) = (&server, cookie.clone());
        async move { request(server, "GET", &path, &[host(server), cookie], "").await }
    };
    let before = get("/ui/sessions?q=crashed".into()).await.body;
    let row = list_row(&before, "crashed");
    assert!(row.contains("run-lapsed") && !row.contains("run-interrupted") && !row.contains("run-repaired"), "{row}");
    let outcome = alice.resume(&crashed_id, &attach(&second)).await.unwrap();
    assert!(!outcome.repaired.is_empty());

    // The badges, on the row and in the session page's header.
    let after = get("/ui/sessions?q=CRASHED".into()).await.body;
    let row = list_row(&after, "crashed");
    assert!(row.contains("class=\"badge run-interrupted\"") && row.contains("class=\"badge run-repaired\""), "{row}");
    assert!(row.contains("title=\"Repaired by run run-b at ") && row.contains("Run run-a left a turn open"), "{row}");
    assert!(!list_row(&after, "crashed").contains("run-lapsed"), "the resume detached the lapsed run");
    let page = get("/ui/sessions/crashed".into()).await.body;
    assert!(page.contains("class=\"badge run-interrupted\"") && page.contains("class=\"badge run-repaired\""));

    // Literal wildcards, labels, case.
    let rows = |page: &str| page.matches("class=\"session-link\"").count();
    let pct = get("/ui/sessions?q=50%25".into()).await.body;
    assert!(pct.contains("/ui/sessions/pct\"") && !pct.contains("/ui/sessions/nopct\"") && rows(&pct) == 1, "{pct}");
    let under = get("/ui/sessions?q=A_B".into()).await.body;
    assert!(under.contains("/ui/sessions/under\"") && rows(&under) == 1, "{under}");
    assert!(under.contains("<input id=\"q\" name=\"q\" type=\"search\" maxlength=\"256\""), "{under}");
    assert!(under.contains("value=\"A_B\""), "the box keeps the search: {under}");

    // Paging keeps the search; the pages hold every match once.
    let mut seen = Vec::new();
    let mut path = Some("/ui/sessions?q=order".to_owned());
    while let Some(next) = path {
        let page = get(next).await.body;
        for (id, _, _) in sessions.iter().filter(|(id, _, _)| page.contains(&format!("/ui/sessions/{id}\""))) {
            seen.push(id.clone());
        }
        path = next_page(&page);
        assert!(path.as_deref().is_none_or(|path| path.contains("q=order")), "{path:?}");
    }
    seen.sort();
    let expected: Vec<String> = (0..57).map(|index| format!("order-{index:02}")).collect();
    assert_eq!(seen, expected);

    // The API: the same search, the counts of it, and 400s.
    let headers = [host(&server), ("Authorization", format!("Bearer {key}"))];
    let listed = get_json(&server, &key, "/v1/sessions?q=refund%20").await;
    let ids: Vec<_> = listed["items"].as_array().unwrap().iter().map(|item| item["header"]["id"].clone()).collect();
    assert_eq!(ids, [json!("nopct"), json!("pct")]);
    let counts = get_json(&server, &key, "/v1/sessions/counts?q=order").await;
    assert_eq!(counts["counts"][0], json!({"status": "active", "count": 57, "more": false}));
    let everything = get_json(&server, &key, "/v1/sessions?q=&limit=1000").await;
    assert_eq!(everything["items"].as_array().unwrap().len(), 62, "an empty q is no search");
    let long = format!("/v1/sessions?q={}", "x".repeat(257));
    for bad in [long.as_str(), "/v1/sessions?q=a%01b", "/v1/sessions/counts?q=%0A", "/ui/sessions?q=a%7Fb"] {
        let answer = if bad.starts_with("/ui") {
            get(bad.into()).await
        } else {
            request(&server, "GET", bad, &headers, "").await
        };
        assert_eq!(answer.status, 400, "{bad}: {}", answer.body);
        if !bad.starts_with("/ui") {
            let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
            assert_eq!(body["code"], "invalid", "{bad}: {body}");
            assert!(body["message"].as_str().unwrap().contains("q"), "{bad}: {body}");
        }
    }
    let exact = format!("/v1/sessions?q={}", "x".repeat(256));
    assert_eq!(get_json(&server, &key, &exact).await["items"], json!([]));
}
