//! A lease-holding child process for the PostgreSQL fault tests (paused with SIGSTOP,
//! killed with SIGKILL). Not part of berth's interface.
//!
//! `berth-pg-child serve`: one command per stdin line, one reply per stdout line:
//! `create <tenant> <session>` (create and materialize, keeping the write handle),
//! `open <tenant> <session>` (open for writing), `append <count> <tag>`, `close`, `pid`.
//! Replies are `ok …` or `err <code> <message>`.
//!
//! `berth-pg-child soak <name> <tenant> <sessions> <duration_ms>`: repeatedly takes the
//! writer lease of a random session (`s0`…), appends small batches and prints
//! `ack <session> <first_seq> <count> <writer>` after each acknowledged append.
//!
//! Environment: `BERTH_PG_URL` (the database), `BERTH_PG_TTL_MS` (lease TTL, default
//! 2000), `BERTH_PG_LOCAL_DEADLINE` (`0` turns the local deadline off, so only the
//! database's epoch check can stop a stale writer).

use berth_core::{Error, Event, Scope, SessionHeader, SessionId, SessionKey, TenantId, Timestamp, UserId};
use berth_postgres::{PostgresBackend, PostgresOptions};
use berth_store::{Access, LogStore, SessionHandle};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncBufReadExt, BufReader};

fn now() -> Timestamp {
    Timestamp(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_millis() as u64))
}

fn key(tenant: &str, session: &str) -> Result<SessionKey, Error> {
    Ok(SessionKey::new(TenantId::parse(tenant)?, SessionId::parse(session)?))
}

fn header(key: &SessionKey) -> Result<SessionHeader, Error> {
    let scope = Scope { tenant: key.tenant.clone(), user: UserId::parse("child")?, project: None };
    Ok(SessionHeader::new(key.id.clone(), scope, now()))
}

fn events(first: u64, count: u64, tag: &str) -> Result<Vec<Event>, Error> {
    (0..count)
        .map(|index| {
            Event::new(first + index, "test/child", now(), serde_json::json!({"tag": tag, "n": first + index}))
        })
        .collect()
}

async fn store() -> LogStore {
    let url = std::env::var("BERTH_PG_URL").expect("BERTH_PG_URL names the database");
    let ttl = std::env::var("BERTH_PG_TTL_MS").ok().and_then(|text| text.parse().ok()).unwrap_or(2_000);
    let local_deadline = std::env::var("BERTH_PG_LOCAL_DEADLINE").map_or(true, |text| text != "0");
    let options = PostgresOptions {
        pool_size: 2,
        local_deadline,
        statement_timeout: Duration::from_secs(2),
        application_name: format!("berth-pg-child-{}", std::process::id()),
        ..PostgresOptions::default()
    }
    .with_lease_ttl(Duration::from_millis(ttl));
    let backend = PostgresBackend::connect(&url, options).await.expect("connect");
    LogStore::new(Arc::new(backend))
}

fn reply(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

fn failure(error: &Error) -> String {
    format!("err {} {error}", error.code())
}

async fn serve() {
    let store = store().await;
    let mut handle: Option<SessionHandle> = None;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    reply("ready");
    while let Ok(Some(line)) = lines.next_line().await {
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["create", tenant, session] => match create(&store, tenant, session).await {
                Ok(opened) => {
                    let answer = format!("ok {} {}", opened.epoch().map_or(0, |epoch| epoch.0), opened.next_seq());
                    handle = Some(opened);
                    answer
                }
                Err(error) => failure(&error),
            },
            ["open", tenant, session] => match open(&store, tenant, session).await {
                Ok(opened) => {
                    let answer = format!("ok {} {}", opened.epoch().map_or(0, |epoch| epoch.0), opened.next_seq());
                    handle = Some(opened);
                    answer
                }
                Err(error) => failure(&error),
            },
            ["append", count, tag] => match (&handle, count.parse::<u64>()) {
                (Some(opened), Ok(count)) => {
                    let outcome = match events(opened.next_seq(), count, tag) {
                        Ok(batch) => opened.append(&batch).await,
                        Err(error) => Err(error),
                    };
                    match outcome {
                        Ok(()) => format!("ok {}", opened.next_seq()),
                        Err(error) => failure(&error),
                    }
                }
                _ => "err invalid no open handle or bad count".into(),
            },
            ["close"] => match handle.take() {
                Some(opened) => opened.close().await.map_or_else(|error| failure(&error), |()| "ok".into()),
                None => "ok".into(),
            },
            ["pid"] => format!("ok {}", std::process::id()),
            _ => format!("err invalid unknown command {line:?}"),
        };
        reply(&answer);
    }
}

async fn create(store: &LogStore, tenant: &str, session: &str) -> Result<SessionHandle, Error> {
    let handle = store.create(header(&key(tenant, session)?)?).await?;
    handle.flush().await?;
    Ok(handle)
}

async fn open(store: &LogStore, tenant: &str, session: &str) -> Result<SessionHandle, Error> {
    store.open(&key(tenant, session)?, Access::Write).await
}

/// Takes random sessions' leases and appends until the deadline.
async fn soak(name: &str, tenant: &str, sessions: u64, duration: Duration) {
    let store = store().await;
    let deadline = Instant::now() + duration;
    let writer = format!("{name}.{}", std::process::id());
    let mut turn: u64 = u64::from(std::process::id());
    while Instant::now() < deadline {
        turn = turn.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let session = format!("s{}", (turn >> 33) % sessions);
        let Ok(key) = key(tenant, &session) else { return };
        let handle = match store.open(&key, Access::Write).await {
            Ok(handle) => handle,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        let batches = 1 + (turn >> 40) % 8;
        for batch_number in 0..batches {
            let count = 1 + (turn >> (20 + batch_number)) % 4;
            let first = handle.next_seq();
            let Ok(batch) = events(first, count, &writer) else { return };
            match handle.append(&batch).await {
                Ok(()) => reply(&format!("ack {session} {first} {count} {writer}")),
                Err(_) => break,
            }
        }
        if (turn >> 50).is_multiple_of(4) {
            // Sometimes just drop the handle (its lease is cleared in the background).
            drop(handle);
        } else {
            let _ = handle.close().await;
        }
    }
    let _ = store.close_all().await;
}

fn main() {
    let arguments: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    match arguments.get(1).map(String::as_str) {
        Some("serve") => runtime.block_on(serve()),
        Some("soak") if arguments.len() == 6 => {
            let sessions = arguments[4].parse().expect("session count");
            let duration = Duration::from_millis(arguments[5].parse().expect("duration"));
            runtime.block_on(soak(&arguments[2], &arguments[3], sessions, duration));
        }
        _ => {
            eprintln!("usage: berth-pg-child serve | soak <name> <tenant> <sessions> <duration_ms>");
            std::process::exit(2);
        }
    }
}
