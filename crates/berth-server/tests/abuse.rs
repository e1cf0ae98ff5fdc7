//! Abuse and hostile input over real HTTP (reliability plan E-32, E-35, F-36–F-38):
//! smuggled tenant/user/epoch/seq fields, odd ids, size limits, deep JSON, invalid
//! UTF-8, slowloris connections and a flooding tenant. Every loop is bounded in count
//! and time, and all traffic goes to 127.0.0.1.

mod common;

use berth_core::limits::{BATCH_EVENTS_MAX, EVENT_BYTES_MAX};
use berth_server::client::Client;
use berth_server::limits::RateLimit;
use berth_service::Role;
use common::{test_config, TestServer};
use hyper::Method;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

async fn post(client: &Client, path: &str, body: &Value) -> (u16, Value) {
    send(client, Method::POST, path, Some(serde_json::to_vec(body).unwrap())).await
}

async fn send(client: &Client, method: Method, path: &str, body: Option<Vec<u8>>) -> (u16, Value) {
    let response = client.send(method, path, body, &[]).await.unwrap();
    let value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    (response.status.as_u16(), value)
}

async fn next_seq(client: &Client, id: &str) -> u64 {
    let (status, page) = send(client, Method::GET, &format!("/v1/sessions/{id}/events"), None).await;
    assert_eq!(status, 200);
    page["next_seq"].as_u64().unwrap()
}

#[tokio::test]
async fn smuggled_tenant_user_epoch_and_seq_fields_are_refused_or_ignored() {
    let server = TestServer::start().await;
    let alice = server.client(&server.key("acme", "alice", None, Role::User));
    let service = server.client(&server.key("acme", "svc", None, Role::Service));
    for body in [
        json!({"id": "s1", "tenant": "globex"}),
        json!({"id": "s1", "tenant_id": "globex"}),
        json!({"id": "s1", "scope": {"tenant": "globex"}}),
        json!({"id": "s1", "revision": 7}),
    ] {
        let (status, error) = post(&alice, "/v1/sessions", &body).await;
        assert_eq!((status, error["code"].as_str()), (400, Some("invalid")), "{body}");
    }
    // A user key may not create for another user; a service key may, in its own tenant.
    let (status, _) = post(&alice, "/v1/sessions", &json!({"id": "s1", "user": "bob"})).await;
    assert_eq!(status, 403);
    let (status, record) = post(&service, "/v1/sessions", &json!({"id": "s1", "user": "bob"})).await;
    assert_eq!(status, 201);
    assert_eq!(record["header"]["scope"]["tenant"], "acme");
    for body in [
        json!({"events": [{"type": "note/x"}], "tenant_id": "globex"}),
        json!({"events": [{"type": "note/x"}], "epoch": 99}),
        json!({"events": [{"type": "note/x", "seq": 41}]}),
        json!({"events": [{"type": "note/x", "run": "r"}]}),
        json!({"events": [{"type": "note/x"}], "user": "bob"}),
    ] {
        let (status, _) = post(&service, "/v1/sessions/s1/events", &body).await;
        assert_eq!(status, 400, "{body}");
    }
    assert_eq!(next_seq(&service, "s1").await, 0);
    // A tenant in the path is not a route; in the query it is an unknown parameter.
    let (status, _) = send(&service, Method::GET, "/v1/tenants/globex/sessions/s1", None).await;
    assert_eq!(status, 404);
    let (status, _) = send(&service, Method::GET, "/v1/sessions?tenant=globex", None).await;
    assert_eq!(status, 400);
    // Nothing was ever stored under another tenant.
    let tenants: Vec<String> = std::fs::read_dir(server.root().join("tenants"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(tenants.len(), 1, "{tenants:?}");
}

#[tokio::test]
async fn odd_ids_are_refused_before_storage_and_nothing_outside_the_root_is_touched() {
    let server = TestServer::start().await;
    let admin = server.client(&server.key("acme", "root", None, Role::Admin));
    post(&admin, "/v1/sessions", &json!({"id": "x"})).await;
    let outside_before: Vec<_> =
        std::fs::read_dir(server.dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    let before = common::snapshot(&server.root(), &common::DATABASE_FILES);
    let long = "a".repeat(300);
    let odd = [
        "..%2Fx",
        "..%2F..%2Fetc%2Fpasswd",
        "%2e%2e",
        "%2E%2E%2Fx",
        "a%2Fb",
        "a%5Cb",
        "a%00b",
        "%00",
        "%2Fabs",
        ".",
        "..",
        long.as_str(),
        "%D0%B0",             // Cyrillic a
        "x%E2%80%8B",         // zero-width space
        "%EF%BC%8E%EF%BC%8E", // fullwidth dots
        "%FF%FE",             // invalid UTF-8
        "a%20b",
    ];
    for id in odd {
        for (method, suffix, body) in [
            (Method::GET, "", None),
            (Method::DELETE, "", None),
            (Method::GET, "/events", None),
            (Method::POST, "/events", Some(json!({"events": [{"type": "note/x"}]}))),
            (Method::GET, "/export", None),
            (Method::POST, "/fork", Some(json!({}))),
        ] {
            let body = body.map(|body| serde_json::to_vec(&body).unwrap());
            let (status, _) = send(&admin, method.clone(), &format!("/v1/sessions/{id}{suffix}"), body).await;
            assert!(status == 400 || status == 404, "{method} {id}{suffix}: {status}");
        }
    }
    // Ids inside bodies go through the same grammar.
    for id in ["../x", "a/b", "a\u{0}b", "\u{430}", long.as_str()] {
        let (status, _) = post(&admin, "/v1/sessions", &json!({"id": id})).await;
        assert_eq!(status, 400, "{id:?}");
        let (status, _) = post(&admin, "/v1/sessions/x/fork", &json!({"new_id": id})).await;
        assert_eq!(status, 400, "{id:?}");
    }
    // A path with a literal "/" in the id is simply not a route.
    let (status, _) = send(&admin, Method::GET, "/v1/sessions/a/b", None).await;
    assert_eq!(status, 404);
    assert_eq!(before, common::snapshot(&server.root(), &common::DATABASE_FILES));
    let outside_after: Vec<_> = std::fs::read_dir(server.dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(outside_before, outside_after);
}

#[tokio::test]
async fn size_limits_deep_json_and_invalid_utf8_leave_nothing_appended() {
    let server = TestServer::start().await;
    let service = server.client(&server.key("acme", "svc", None, Role::Service));
    post(&service, "/v1/sessions", &json!({"id": "s"})).await;
    let path = "/v1/sessions/s/events";

    // Body limit + 1 byte.
    let limit = test_config().body_bytes_max;
    let mut body = br#"{"events":[{"type":"note/x","data":""#.to_vec();
    let tail = br#""}]}"#;
    body.resize(limit + 1 - tail.len(), b'a');
    body.extend_from_slice(tail);
    assert_eq!(body.len(), limit + 1);
    let (status, error) = send(&service, Method::POST, path, Some(body)).await;
    assert_eq!((status, error["code"].as_str()), (413, Some("payload_too_large")));

    // One event at the limit is stored; one byte more is refused.
    let type_name = "note/x";
    let overhead = 64 + type_name.len() + 2; // the envelope allowance and the quotes
    let at_limit = "b".repeat(EVENT_BYTES_MAX - overhead);
    let (status, _) = post(&service, path, &json!({"events": [{"type": type_name, "data": at_limit}]})).await;
    assert_eq!(status, 200);
    let over = "b".repeat(EVENT_BYTES_MAX - overhead + 1);
    let (status, error) = post(
        &service,
        path,
        &json!({"events": [{"type": "note/x", "data": "small"}, {"type": type_name, "data": over}]}),
    )
    .await;
    assert_eq!((status, error["code"].as_str()), (413, Some("payload_too_large")));
    assert_eq!(next_seq(&service, "s").await, 1, "nothing of the refused batch is stored");

    // A batch of max + 1 events.
    let events: Vec<Value> = (0..=BATCH_EVENTS_MAX).map(|i| json!({"type": "note/x", "data": i})).collect();
    let (status, error) = post(&service, path, &json!({"events": events})).await;
    assert_eq!((status, error["code"].as_str()), (413, Some("payload_too_large")));
    assert_eq!(next_seq(&service, "s").await, 1);

    // JSON nested 10,000 deep: refused, the server does not overflow its stack.
    let deep = format!(r#"{{"events":[{{"type":"note/x","data":{}{}}}]}}"#, "[".repeat(10_000), "]".repeat(10_000));
    let (status, error) = send(&service, Method::POST, path, Some(deep.into_bytes())).await;
    assert_eq!((status, error["code"].as_str()), (400, Some("invalid")));
    let deep_create = format!(r#"{{"id":"d","title":{}{}}}"#, "[".repeat(10_000), "]".repeat(10_000));
    let (status, _) = send(&service, Method::POST, "/v1/sessions", Some(deep_create.into_bytes())).await;
    assert_eq!(status, 400);

    // Invalid UTF-8, duplicate keys, trailing bytes.
    let mut invalid = br#"{"events":[{"type":"note/x","data":""#.to_vec();
    invalid.extend_from_slice(&[0xff, 0xfe]);
    invalid.extend_from_slice(br#""}]}"#);
    for body in [
        invalid,
        br#"{"events":[{"type":"note/x","data":{"a":1,"a":2}}]}"#.to_vec(),
        br#"{"events":[]} {}"#.to_vec(),
        br#"{"events":[{"type":"note/x","data":NaN}]}"#.to_vec(),
    ] {
        let (status, _) = send(&service, Method::POST, path, Some(body)).await;
        assert_eq!(status, 400);
    }
    assert_eq!(next_seq(&service, "s").await, 1);
    // The server is still healthy.
    let (status, _) = post(&service, path, &json!({"events": [{"type": "note/x"}]})).await;
    assert_eq!(status, 200);
}

/// Slowloris: connections that trickle header bytes are closed by the header-read
/// timeout, while normal requests keep being answered. Bounded: 40 connections, 20 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_connections_are_closed_while_normal_requests_succeed() {
    let mut config = test_config();
    config.header_read_timeout = Duration::from_secs(1);
    let server = TestServer::start_with(config).await;
    let service = server.client(&server.key("acme", "svc", None, Role::Service));
    let address = server.server.local_addr;
    let slow = std::thread::spawn(move || {
        let started = Instant::now();
        let mut streams: Vec<std::net::TcpStream> = (0..40)
            .map(|_| {
                let stream = std::net::TcpStream::connect(address).unwrap();
                stream.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                stream
            })
            .collect();
        let request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
        let mut closed = vec![false; streams.len()];
        let mut index = 0;
        while closed.iter().any(|c| !c) && started.elapsed() < Duration::from_secs(20) {
            for (number, stream) in streams.iter_mut().enumerate() {
                if closed[number] {
                    continue;
                }
                let byte = request[index.min(request.len() - 1)];
                let wrote = stream.write(&[byte]);
                let mut buffer = [0u8; 512];
                let read = stream.read(&mut buffer);
                let peer_closed = matches!(read, Ok(0))
                    || wrote.is_err()
                    || matches!(&read, Err(e) if e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut);
                // A 408 answer is also a close: hyper answers then hangs up.
                if peer_closed || matches!(read, Ok(n) if n > 0) {
                    closed[number] = true;
                }
            }
            index += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
        (closed.iter().all(|c| *c), started.elapsed())
    });
    // Normal traffic meanwhile.
    let mut answered = 0;
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        let (status, _) = send(&service, Method::GET, "/v1/sessions", None).await;
        assert_eq!(status, 200);
        answered += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Connections that never send a byte are closed too (they would hold a connection slot).
    let silent = std::thread::spawn(move || {
        let started = Instant::now();
        let mut streams: Vec<std::net::TcpStream> =
            (0..9).map(|_| std::net::TcpStream::connect(address).unwrap()).collect();
        // And one that finished a request and then idles on keep-alive.
        let mut idle = std::net::TcpStream::connect(address).unwrap();
        idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut answer = [0u8; 512];
        assert!(idle.read(&mut answer).unwrap() > 0);
        streams.push(idle);
        let mut closed = 0;
        for mut stream in streams {
            stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut buffer = [0u8; 512];
            // EOF, a reset, or an error answer: all mean the server ended the connection.
            let _ = stream.read(&mut buffer);
            if started.elapsed() < Duration::from_secs(19) {
                closed += 1;
            }
        }
        (closed, started.elapsed())
    });
    let (all_closed, took) = tokio::task::spawn_blocking(move || slow.join().unwrap()).await.unwrap();
    let (silent_closed, silent_took) = tokio::task::spawn_blocking(move || silent.join().unwrap()).await.unwrap();
    assert_eq!(silent_closed, 10, "silent connections stayed open ({silent_took:?})");
    assert!(all_closed, "slow connections still open after {took:?}");
    assert!(took < Duration::from_secs(20));
    assert!(took >= Duration::from_millis(900), "closed before the header timeout: {took:?}");
    assert!(answered >= 10);
}

/// A tenant that floods gets 429 with Retry-After; another tenant is not starved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_tenant_is_rate_limited_and_another_tenant_is_not() {
    let mut config = test_config();
    config.rate_limit = Some(RateLimit { per_second: 20, burst: 20 });
    let server = TestServer::start_with(config).await;
    let flooder = server.client(&server.key("flood", "svc", None, Role::Service));
    let quiet = server.client(&server.key("quiet", "svc", None, Role::Service));
    let flood = tokio::spawn(async move {
        let mut limited = 0;
        let mut retry_after = None;
        let started = Instant::now();
        // Bounded: 400 requests from 8 concurrent loops, or 10 s.
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let client = flooder.clone();
                tokio::spawn(async move {
                    let mut outcomes = Vec::new();
                    for _ in 0..50 {
                        if started.elapsed() > Duration::from_secs(10) {
                            break;
                        }
                        let response = client.send(Method::GET, "/v1/sessions", None, &[]).await.unwrap();
                        outcomes.push((response.status.as_u16(), response.headers.get("retry-after").cloned()));
                    }
                    outcomes
                })
            })
            .collect();
        for task in tasks {
            for (status, header) in task.await.unwrap() {
                if status == 429 {
                    limited += 1;
                    retry_after = header;
                }
            }
        }
        (limited, retry_after)
    });
    for _ in 0..10 {
        let (status, _) = send(&quiet, Method::GET, "/v1/sessions", None).await;
        assert_eq!(status, 200, "the quiet tenant was limited");
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let (limited, retry_after) = flood.await.unwrap();
    assert!(limited > 100, "only {limited} of 400 flood requests were limited");
    let seconds: u64 = retry_after.unwrap().to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&seconds));
}

/// A ZIP whose entries are `(name, zero bytes)`, deflated as they are written, so the
/// test never holds the inflated bytes.
fn zip_of_zeros(entries: &[(&str, usize)]) -> Vec<u8> {
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    let chunk = vec![0u8; 64 * 1024];
    for (name, bytes) in entries {
        writer.start_file(*name, options).unwrap();
        let mut left = *bytes;
        while left > 0 {
            let step = left.min(chunk.len());
            writer.write_all(&chunk[..step]).unwrap();
            left -= step;
        }
    }
    writer.finish().unwrap().into_inner()
}

/// The inflated bytes of every entry of a ZIP, counted by reading them.
fn zip_inflated_bytes(bytes: &[u8]) -> u64 {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
    (0..archive.len())
        .map(|index| std::io::copy(&mut archive.by_index(index).unwrap(), &mut std::io::sink()).unwrap())
        .sum()
}

async fn server_with_import_cap(cap: u64) -> TestServer {
    TestServer::start_with_service(test_config(), |service| service.with_import_inflated_bytes_max(cap)).await
}

async fn sessions_of(client: &Client) -> usize {
    let (status, page) = send(client, Method::GET, "/v1/sessions?include_blank=true", None).await;
    assert_eq!(status, 200);
    page["items"].as_array().unwrap().len()
}

#[tokio::test]
async fn a_zip_bomb_is_refused_with_413_after_inflating_no_more_than_the_cap() {
    let cap: u64 = 1024 * 1024;
    let server = server_with_import_cap(cap).await;
    let alice = server.client(&server.key("acme", "alice", None, Role::User));
    // One entry of 64 MiB of zeros (about 64 KiB deflated), then the same cap split over
    // entries each under it: the declared sizes are small enough to pass any per-entry
    // check on what the ZIP says, and only the inflated total counts.
    let one_entry = zip_of_zeros(&[("0000-bomb.jsonl", 64 * 1024 * 1024)]);
    let many_entries =
        zip_of_zeros(&[("0000-a.jsonl", 512 * 1024), ("0001-b.jsonl", 512 * 1024), ("0002-c.jsonl", 512 * 1024)]);
    for bomb in [one_entry, many_entries] {
        assert!(bomb.len() < 256 * 1024, "the bomb is small on the wire: {} bytes", bomb.len());
        let (status, error) = send(&alice, Method::POST, "/v1/import", Some(bomb)).await;
        assert_eq!((status, error["code"].as_str()), (413, Some("payload_too_large")), "{error}");
        assert_eq!(error["limit"], cap);
        // Inflating stopped one byte past the cap: the rest of the entry was never read.
        assert_eq!(error["actual"], cap + 1, "{error}");
    }
    assert_eq!(sessions_of(&alice).await, 0, "a refused import stores nothing");
}

#[tokio::test]
async fn berths_own_zip_of_a_session_with_forks_imports_just_under_the_inflated_cap() {
    let source = TestServer::start().await;
    let writer = source.client(&source.key("acme", "svc", None, Role::Service));
    post(&writer, "/v1/sessions", &json!({"id": "big"})).await;
    let bulky: Vec<Value> =
        (0..64).map(|i| json!({"type": "note/text", "data": {"i": i, "pad": "x".repeat(4096)}})).collect();
    let (status, _) = post(&writer, "/v1/sessions/big/events", &json!({"events": bulky})).await;
    assert_eq!(status, 200);
    for fork in ["big-fork-1", "big-fork-2"] {
        let (status, _) = post(&writer, "/v1/sessions/big/fork", &json!({"new_id": fork})).await;
        assert_eq!(status, 201);
    }
    let (status, zip) = {
        let response = writer.send(Method::GET, "/v1/sessions/big/export?format=zip", None, &[]).await.unwrap();
        (response.status.as_u16(), response.body.to_vec())
    };
    assert_eq!(status, 200);
    let inflated = zip_inflated_bytes(&zip);
    assert!(inflated > 3 * 64 * 4096, "three sessions of 64 padded events: {inflated}");

    let at_cap = server_with_import_cap(inflated).await;
    let writer_there = at_cap.client(&at_cap.key("acme", "svc", None, Role::Service));
    let (status, imported) = send(&writer_there, Method::POST, "/v1/import", Some(zip.clone())).await;
    assert_eq!(status, 201, "{imported}");
    assert_eq!(imported["sessions"].as_array().unwrap().len(), 3);
    let again = writer_there.export(&"big".parse().unwrap(), true).await.unwrap();
    assert_eq!(again, zip, "the round trip is byte-identical");

    let under_cap = server_with_import_cap(inflated - 1).await;
    let writer_short = under_cap.client(&under_cap.key("acme", "svc", None, Role::Service));
    let (status, error) = send(&writer_short, Method::POST, "/v1/import", Some(zip)).await;
    assert_eq!((status, error["limit"].as_u64()), (413, Some(inflated - 1)), "{error}");
    assert_eq!(sessions_of(&writer_short).await, 0);
}

/// Imports inflate and parse off the async runtime: on a one-thread runtime (the
/// server's and this test's), another tenant's requests are answered while two ZIP
/// bombs inflate (they once held every request for the whole inflation: 2.2–4.0 s for a
/// `whoami` on a 2-core machine), and the bombs are still refused. Judged by a ratio
/// measured in this run, not a time: the slowest `whoami` during the imports against how
/// long the imports took (with the inflating on the runtime, one `whoami` waited for
/// at least one whole inflation).
#[tokio::test(flavor = "current_thread")]
async fn another_tenants_requests_are_answered_while_zip_imports_inflate() {
    let cap = 128 * 1024 * 1024;
    let server = server_with_import_cap(cap as u64).await;
    let alice = server.client(&server.key("acme", "alice", None, Role::User));
    let other = server.client(&server.key("globex", "carol", None, Role::User));
    let bomb = zip_of_zeros(&[("0000-bomb.jsonl", cap + 1024 * 1024)]);
    let started = std::time::Instant::now();
    let imports: Vec<_> = (0..2)
        .map(|_| {
            let (alice, bomb) = (alice.clone(), bomb.clone());
            tokio::spawn(async move { send(&alice, Method::POST, "/v1/import", Some(bomb)).await })
        })
        .collect();
    let (mut answered, mut slowest) = (0, std::time::Duration::ZERO);
    while !imports.iter().all(|import| import.is_finished()) {
        let asked = std::time::Instant::now();
        let (status, _) = send(&other, Method::GET, "/v1/whoami", None).await;
        assert_eq!(status, 200);
        (answered, slowest) = (answered + 1, slowest.max(asked.elapsed()));
    }
    let took = started.elapsed();
    for import in imports {
        let (status, error) = import.await.unwrap();
        assert_eq!((status, error["code"].as_str()), (413, Some("payload_too_large")), "{error}");
    }
    assert!(
        answered >= 10 && slowest * 4 < took,
        "another tenant waited for the imports: {answered} answers, the slowest in {slowest:?}, the imports took {took:?}"
    );
    assert_eq!(sessions_of(&alice).await, 0, "a refused import stores nothing");
}
