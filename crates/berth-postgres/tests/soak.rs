//! Multi-process soak (R-G3): 3 child processes (`berth-pg-child soak`) write the same
//! 10 sessions, taking and releasing writer leases (TTL 2 s), while the test SIGKILLs
//! and restarts them at random for `BERTH_PG_SOAK_SECS` (default 60) seconds. Afterwards,
//! per session: seqs are contiguous from 0 and match the head's next seq, no event is
//! stored twice (each carries the seq it was written for), epochs never interleave
//! (non-decreasing along seq, one writer per epoch), and every acknowledged event is
//! stored as acknowledged. The random seed is printed (`BERTH_PG_SOAK_SEED` replays it).

use berth_core::{Scope, SessionHeader, SessionId, TenantId, Timestamp, UserId};
use berth_postgres::testing::TestDatabase;
use berth_postgres::{PostgresBackend, PostgresOptions};
use berth_store::LogBackend;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};

const SESSIONS: u64 = 10;
const PROCESSES: usize = 3;
const TENANT: &str = "tenant-soak";

/// `ack <session> <first_seq> <count> <writer>`, as printed by a child after an
/// acknowledged append.
#[derive(Clone, Debug)]
struct Ack {
    session: String,
    first: i64,
    count: i64,
    writer: String,
}

fn parse_ack(line: &str) -> Option<Ack> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["ack", session, first, count, writer] => Some(Ack {
            session: session.to_string(),
            first: first.parse().ok()?,
            count: count.parse().ok()?,
            writer: writer.to_string(),
        }),
        _ => None,
    }
}

fn start_child(url: &str, name: &str, duration: Duration, acks: Arc<Mutex<Vec<Ack>>>) -> tokio::process::Child {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_berth-pg-child"))
        .args(["soak", name, TENANT, &SESSIONS.to_string(), &duration.as_millis().to_string()])
        .env("BERTH_PG_URL", url)
        .env("BERTH_PG_TTL_MS", "2000")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start a soak child");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    tokio::spawn(async move {
        // A line cut by SIGKILL has no newline and never parses as an ack.
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(ack) = parse_ack(&line) {
                acks.lock().unwrap().push(ack);
            }
        }
    });
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_ten_sessions_random_kills() {
    let seconds: u64 = std::env::var("BERTH_PG_SOAK_SECS").ok().and_then(|text| text.parse().ok()).unwrap_or(60);
    let seed: u64 = std::env::var("BERTH_PG_SOAK_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    eprintln!("soak: {seconds} s, seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let database = TestDatabase::create().await;
    let url = database.url();
    let setup = PostgresBackend::connect(&url, PostgresOptions::default()).await.unwrap();
    let tenant = TenantId::parse(TENANT).unwrap();
    for index in 0..SESSIONS {
        let id = SessionId::parse(&format!("s{index}")).unwrap();
        let scope = Scope { tenant: tenant.clone(), user: UserId::parse("soak").unwrap(), project: None };
        let mut writer = setup.materialize(&SessionHeader::new(id, scope, Timestamp(1)), &[]).await.unwrap();
        writer.release().await.unwrap();
    }

    let acks: Arc<Mutex<Vec<Ack>>> = Arc::default();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut children: Vec<tokio::process::Child> = (0..PROCESSES)
        .map(|index| start_child(&url, &format!("c{index}"), Duration::from_secs(seconds), acks.clone()))
        .collect();
    let mut kills = 0;
    let mut generation = 0;
    while deadline.saturating_duration_since(Instant::now()) > Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(300..2_000))).await;
        let victim = rng.gen_range(0..PROCESSES);
        let _ = children[victim].start_kill();
        let _ = children[victim].wait().await;
        kills += 1;
        generation += 1;
        let remaining = deadline.saturating_duration_since(Instant::now());
        children[victim] = start_child(&url, &format!("c{victim}g{generation}"), remaining, acks.clone());
    }
    for child in &mut children {
        let exited = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
        if exited.is_err() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
    // Give the readers the last lines of the exited children.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let acks = acks.lock().unwrap().clone();
    eprintln!("soak: {kills} kills, {} acknowledged appends", acks.len());
    assert!(kills >= 1 || seconds < 5, "the soak killed processes");
    assert!(!acks.is_empty(), "the children made progress");
    verify(&database, &acks).await;
}

/// (seq, epoch, writer tag, the seq the event was written for) per stored event.
type Stored = Vec<(i64, i64, String, i64)>;

async fn verify(database: &TestDatabase, acks: &[Ack]) {
    let admin = database.client().await;
    let mut sessions: HashMap<String, Stored> = HashMap::new();
    for index in 0..SESSIONS {
        let session = format!("s{index}");
        let rows = admin
            .query(
                "SELECT seq, epoch, line::jsonb -> 'data' ->> 'tag', (line::jsonb -> 'data' ->> 'n')::bigint \
                 FROM events WHERE tenant = $1 AND session_id = $2 ORDER BY seq",
                &[&TENANT, &session],
            )
            .await
            .unwrap();
        let events: Stored = rows.iter().map(|row| (row.get(0), row.get(1), row.get(2), row.get(3))).collect();
        let next_seq: i64 = admin
            .query_one("SELECT next_seq FROM session_heads WHERE tenant = $1 AND session_id = $2", &[&TENANT, &session])
            .await
            .unwrap()
            .get(0);
        assert_eq!(next_seq, events.len() as i64, "{session}: the head's next seq counts the stored events");
        let mut writers_of_epoch: BTreeMap<i64, &str> = BTreeMap::new();
        for (index, (seq, epoch, writer, written_for)) in events.iter().enumerate() {
            assert_eq!(*seq, index as i64, "{session}: contiguous seqs");
            assert_eq!(
                written_for, seq,
                "{session}: event written for seq {written_for} stored at {seq} (a duplicate)"
            );
            let owner = writers_of_epoch.entry(*epoch).or_insert(writer.as_str());
            assert_eq!(*owner, writer.as_str(), "{session}: epoch {epoch} has one writer");
        }
        for pair in events.windows(2) {
            assert!(pair[0].1 <= pair[1].1, "{session}: epochs never interleave ({:?} then {:?})", pair[0], pair[1]);
        }
        sessions.insert(session, events);
    }
    for ack in acks {
        let events = &sessions[&ack.session];
        for seq in ack.first..ack.first + ack.count {
            let stored = events.get(seq as usize);
            assert!(
                stored.is_some_and(|(_, _, writer, _)| *writer == ack.writer),
                "acknowledged {ack:?}: seq {seq} holds {stored:?}"
            );
        }
    }
    let total: usize = sessions.values().map(Vec::len).sum();
    eprintln!("soak: {total} events in {SESSIONS} sessions verified");
}
