//! `berth-crash-child`: the other process in the JSONL backend's process tests (kill -9
//! mid-append, lease contention, SIGSTOP, lock-file unlink, inherited descriptors).
//!
//! Usage: `berth-crash-child <mode> <root> <tenant> <session-id>`. It reports on stdout,
//! one line per fact, flushed at once, so the parent can wait on output with a deadline:
//!
//! - `append-loop`: open the session for writing (create it if missing), print
//!   `ready <epoch> <next_seq>`, then append small batches forever, printing
//!   `ack <last_seq>` after each acknowledged (fdatasync'ed) batch.
//! - `hold`: open for writing, print `held <epoch> <next_seq>`, then obey stdin lines:
//!   `append` (prints `appended <seq>`), `spawn-sleep` (spawns `sleep 5`, prints
//!   `spawned <pid>`), `close` (prints `closed`, exits).
//! - `try-write`: open for writing; print `owned <epoch>` (then close) or `error <code>`.
//! - `read`: open for reading; print `read <events>` or `error <code>`.
//! - `create`: create and materialize; print `created` or `error <code>`.
//!
//! Event `seq` always carries `{"content": "e<seq>"}`, so the parent can check content.

use berth_core::{Event, Scope, SessionHeader, SessionId, SessionKey, TenantId, Timestamp, UserId};
use berth_jsonl::{JsonlBackend, JsonlOptions};
use berth_store::{Access, LogStore, SessionHandle};
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::sync::Arc;

/// Most batches `append-loop` writes before it stops on its own.
const APPEND_LOOP_BATCHES_MAX: u64 = 1_000_000;

fn say(line: &str) {
    let mut stdout = std::io::stdout().lock();
    // The parent may be gone; nothing useful to do about it.
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

fn event(seq: u64) -> Event {
    let data = serde_json::json!({ "content": format!("e{seq}") });
    Event::new(seq, "user/message", Timestamp(1_000 + seq), data).expect("a valid event")
}

fn header(key: &SessionKey) -> SessionHeader {
    let scope = Scope { tenant: key.tenant.clone(), user: UserId::parse("u").expect("valid"), project: None };
    SessionHeader::new(key.id.clone(), scope, Timestamp(1_000))
}

async fn open_or_create(store: &LogStore, key: &SessionKey) -> berth_core::Result<SessionHandle> {
    match store.open(key, Access::Write).await {
        Err(berth_core::Error::NotFound { .. }) => {
            let handle = store.create(header(key)).await?;
            handle.flush().await?;
            Ok(handle)
        }
        other => other,
    }
}

fn epoch_of(handle: &SessionHandle) -> u64 {
    handle.epoch().map_or(0, |epoch| epoch.0)
}

async fn append_loop(store: &LogStore, key: &SessionKey) -> berth_core::Result<()> {
    let handle = open_or_create(store, key).await?;
    say(&format!("ready {} {}", epoch_of(&handle), handle.next_seq()));
    for round in 0..APPEND_LOOP_BATCHES_MAX {
        let start = handle.next_seq();
        let batch: Vec<Event> = (start..start + 1 + round % 4).map(event).collect();
        handle.append(&batch).await?;
        say(&format!("ack {}", start + batch.len() as u64 - 1));
    }
    handle.close().await
}

async fn hold(store: &LogStore, key: &SessionKey) -> berth_core::Result<()> {
    let handle = open_or_create(store, key).await?;
    say(&format!("held {} {}", epoch_of(&handle), handle.next_seq()));
    let mut children = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        match line.trim() {
            "append" => {
                let seq = handle.next_seq();
                handle.append(&[event(seq)]).await?;
                say(&format!("appended {seq}"));
            }
            "spawn-sleep" => {
                let child = std::process::Command::new("sleep")
                    .arg("5")
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .map_err(|error| berth_core::Error::io("spawn sleep", &error))?;
                say(&format!("spawned {}", child.id()));
                children.push(child);
            }
            "close" => break,
            other => say(&format!("unknown {other}")),
        }
    }
    handle.close().await?;
    say("closed");
    Ok(())
}

async fn run(mode: &str, store: &LogStore, key: &SessionKey) -> berth_core::Result<()> {
    match mode {
        "append-loop" => append_loop(store, key).await,
        "hold" => hold(store, key).await,
        "try-write" => {
            let handle = store.open(key, Access::Write).await?;
            say(&format!("owned {}", epoch_of(&handle)));
            handle.close().await
        }
        "read" => {
            let handle = store.open(key, Access::Read).await?;
            say(&format!("read {}", handle.read(0, None).await?.len()));
            Ok(())
        }
        "create" => {
            let handle = store.create(header(key)).await?;
            handle.flush().await?;
            say("created");
            handle.close().await
        }
        other => Err(berth_core::Error::invalid("mode", other.to_owned())),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, root, tenant, id] = args.as_slice() else {
        eprintln!("usage: berth-crash-child <mode> <root> <tenant> <session-id>");
        return ExitCode::from(2);
    };
    let key = match (TenantId::parse(tenant), SessionId::parse(id)) {
        (Ok(tenant), Ok(id)) => SessionKey::new(tenant, id),
        _ => {
            eprintln!("invalid tenant or session id");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let outcome = runtime.block_on(async {
        // `BERTH_CRASH_CHILD_PREALLOCATE=1`: preallocated logs, extended from the first append.
        let preallocate = std::env::var("BERTH_CRASH_CHILD_PREALLOCATE").is_ok_and(|value| value == "1");
        let options = JsonlOptions { preallocate, preallocate_after_appends: 0, ..JsonlOptions::default() };
        let backend = JsonlBackend::open(root.as_str(), options)?;
        let store = LogStore::new(Arc::new(backend));
        run(mode, &store, &key).await
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            say(&format!("error {}", error.code()));
            eprintln!("berth-crash-child: {error}");
            ExitCode::from(1)
        }
    }
}
