//! Kill -9 of a real `berth serve` while clients append (reliability plan A, through
//! HTTP): after a restart on the same data directory every acknowledged append is
//! readable with its content, the logs are contiguous (nothing torn is served), and
//! every session accepts appends again.

use berth_core::SessionId;
use berth_server::client::Client;
use berth_service::{AppendRequest, CreateSession, NewEvent};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SESSIONS: usize = 6;

fn berth(data: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_berth"));
    command.arg("--data").arg(data).env_remove("BERTH_SERVER").env_remove("BERTH_API_KEY");
    command
}

/// Starts `berth serve` on a free port; returns the child and its URL.
fn start_server(data: &Path) -> (Child, String) {
    let mut child = berth(data)
        .args(["serve", "--listen", "127.0.0.1:0", "--rate-per-tenant", "0", "--sweep-interval-s", "0"])
        .env("BERTH_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let url = line
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_owned();
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in stdout.lines() {});
    (child, url)
}

fn key(data: &Path) -> String {
    let output = berth(data)
        .args(["keys", "create", "--tenant", "acme", "--user", "agent", "--role", "service"])
        .output()
        .unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

fn event(session: usize, seq: u64) -> NewEvent {
    NewEvent::new("note/x", serde_json::json!({"session": session, "seq": seq, "pad": "x".repeat(200)}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_appends_survive_a_sigkill_of_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let api_key = key(&data);
    let (mut server, url) = start_server(&data);
    let client = Client::new(&url, Some(api_key.clone())).unwrap();
    let ids: Vec<SessionId> = (0..SESSIONS).map(|i| SessionId::parse(&format!("s{i}")).unwrap()).collect();
    for id in &ids {
        client.create(&CreateSession { id: Some(id.clone()), ..CreateSession::default() }).await.unwrap();
    }

    // One writer per session, each batch pinned with expected_seq; acknowledged seqs recorded.
    let acknowledged = Arc::new(Mutex::new(vec![0u64; SESSIONS]));
    let started = Instant::now();
    let writers: Vec<_> = (0..SESSIONS)
        .map(|index| {
            let client = client.clone();
            let id = ids[index].clone();
            let acknowledged = acknowledged.clone();
            tokio::spawn(async move {
                let mut next = 0u64;
                // Bounded: 2,000 batches or 15 s, whichever first (the kill comes sooner).
                for _ in 0..2_000 {
                    if started.elapsed() > Duration::from_secs(15) {
                        break;
                    }
                    let batch = 1 + (next % 3);
                    let events = (next..next + batch).map(|seq| event(index, seq)).collect();
                    let request = AppendRequest {
                        memory: Vec::new(),
                        run: None,
                        expected_seq: Some(next),
                        events,
                        idempotency_key: None,
                    };
                    match client.append(&id, &request).await {
                        Ok(outcome) => {
                            next = outcome.next_seq;
                            acknowledged.lock().unwrap()[index] = next;
                        }
                        Err(_) => break,
                    }
                }
            })
        })
        .collect();
    // Kill once every session has some acknowledged appends (deadline-bounded wait).
    let deadline = Instant::now() + Duration::from_secs(10);
    while acknowledged.lock().unwrap().iter().any(|&n| n < 30) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.kill().unwrap(); // SIGKILL
    server.wait().unwrap();
    for writer in writers {
        writer.await.unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(acknowledged.iter().all(|&n| n >= 30), "too few appends before the kill: {acknowledged:?}");

    let (mut server, url) = start_server(&data);
    let client = Client::new(&url, Some(api_key)).unwrap();
    for (index, id) in ids.iter().enumerate() {
        let events = client.read(id, 0, None).await.unwrap();
        assert!(
            events.len() as u64 >= acknowledged[index],
            "{id}: {} events readable, {} acknowledged",
            events.len(),
            acknowledged[index]
        );
        for (position, stored) in events.iter().enumerate() {
            assert_eq!(stored.seq.0, position as u64, "{id}: seqs not contiguous");
            let expected = event(index, position as u64);
            assert_eq!(stored.event_type.as_str(), expected.event_type, "{id} seq {position}");
            assert_eq!(stored.data, expected.data, "{id} seq {position}: torn or foreign content");
        }
        // The session takes appends again (any torn tail was cut by the write path).
        let next = events.len() as u64;
        let request = AppendRequest {
            memory: Vec::new(),
            run: None,
            expected_seq: Some(next),
            events: vec![event(index, next)],
            idempotency_key: None,
        };
        assert_eq!(client.append(id, &request).await.unwrap().next_seq, next + 1);
    }
    server.kill().unwrap();
    server.wait().unwrap();
}
