//! PostgreSQL lease and fencing faults: `reference/reliability.md` §6 D, tests 23–29,
//! against the local server (`BERTH_TEST_PG`), each in a database of its own.
//!
//! | plan | test |
//! |---|---|
//! | 23 | `t23_paused_holder_is_fenced_by_the_database`, `t23_paused_holder_stops_on_its_own_deadline` |
//! | 24 | `t24_racing_acquisitions_have_one_winner_per_epoch` |
//! | 25 | `t25_severed_connection_rolls_back_and_the_retry_applies_once` |
//! | 26 | `t26_black_holed_commit_reply_then_retry_is_exactly_once` |
//! | 27 | `t27_terminated_backend_between_appends_reconnects_without_duplicates` |
//! | 28 | `t28_half_open_connection_stops_the_writer_before_its_lease_lapses` |
//! | 29 | `t29_stalled_backend_between_transactions_times_out_client_side`, `t29_stalled_backend_holding_the_lease_row_makes_takeover_fail_fast` |
//!
//! Waits are polls of an observable condition with a deadline, never bare sleeps. The
//! pauses are real: the lease TTL runs on the database clock.

use berth_core::{Error, Event, Scope, SessionHeader, SessionId, SessionKey, TenantId, Timestamp, UserId};
use berth_postgres::testing::{tokio_postgres, Admission, Flow, Proxy, TestDatabase};
use berth_postgres::{PostgresBackend, PostgresOptions};
use berth_store::{LogBackend, LogWriter};
use std::future::Future;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const TTL: Duration = Duration::from_secs(2);

fn key(session: &str) -> SessionKey {
    SessionKey::new(TenantId::parse("tenant-r").unwrap(), SessionId::parse(session).unwrap())
}

fn header(key: &SessionKey) -> SessionHeader {
    let scope = Scope { tenant: key.tenant.clone(), user: UserId::parse("u").unwrap(), project: None };
    SessionHeader::new(key.id.clone(), scope, Timestamp(1))
}

fn batch(first: u64, count: u64, tag: &str) -> Vec<Event> {
    (0..count)
        .map(|index| {
            Event::new(first + index, "test/fault", Timestamp(1), serde_json::json!({"tag": tag, "n": first + index}))
                .unwrap()
        })
        .collect()
}

fn options(name: &str) -> PostgresOptions {
    PostgresOptions {
        pool_size: 2,
        statement_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(2),
        application_name: format!("{name}-{}", uuid_suffix()),
        ..PostgresOptions::default()
    }
    .with_lease_ttl(TTL)
}

fn uuid_suffix() -> String {
    format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos())
}

async fn connect(url: &str, options: PostgresOptions) -> PostgresBackend {
    PostgresBackend::connect(url, options).await.expect("connect")
}

/// Polls `condition` every 20 ms until it holds; panics after `deadline`.
async fn wait_until<F, Fut>(what: &str, deadline: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let give_up = Instant::now() + deadline;
    while !condition().await {
        assert!(Instant::now() < give_up, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// (seq, epoch, tag) of every stored event of a session, in seq order.
async fn stored(admin: &tokio_postgres::Client, key: &SessionKey) -> Vec<(i64, i64, String)> {
    admin
        .query(
            "SELECT seq, epoch, line::jsonb -> 'data' ->> 'tag' FROM events \
             WHERE tenant = $1 AND session_id = $2 ORDER BY seq",
            &[&key.tenant.as_str(), &key.id.as_str()],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect()
}

/// Seqs are contiguous from 0 and epochs never go back along them.
fn assert_contiguous_and_ordered(events: &[(i64, i64, String)]) {
    for (index, (seq, _, _)) in events.iter().enumerate() {
        assert_eq!(*seq, index as i64, "seqs are contiguous: {events:?}");
    }
    for pair in events.windows(2) {
        assert!(pair[0].1 <= pair[1].1, "epochs never interleave: {events:?}");
    }
}

async fn lease_lapsed(admin: &tokio_postgres::Client, key: &SessionKey) -> bool {
    admin
        .query_one(
            "SELECT coalesce(lease_until < now(), true) FROM session_heads WHERE tenant = $1 AND session_id = $2",
            &[&key.tenant.as_str(), &key.id.as_str()],
        )
        .await
        .unwrap()
        .get(0)
}

async fn backend_pids(admin: &tokio_postgres::Client, application_name: &str) -> Vec<i32> {
    admin
        .query("SELECT pid FROM pg_stat_activity WHERE application_name = $1", &[&application_name])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

async fn waiting_on_lock(admin: &tokio_postgres::Client, application_name: &str) -> bool {
    admin
        .query_one(
            "SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
            &[&application_name],
        )
        .await
        .unwrap()
        .get(0)
}

fn signal(pid: i32, signal: libc::c_int) {
    // SAFETY: kill(2) with a pid we looked up; no memory is shared.
    let outcome = unsafe { libc::kill(pid, signal) };
    assert_eq!(outcome, 0, "kill({pid}, {signal}): {}", std::io::Error::last_os_error());
}

/// A stopped PostgreSQL backend, continued when dropped: a failing assertion must not
/// leave a backend stopped (it would hold its locks, and `DROP DATABASE … WITH (FORCE)`
/// waits for it forever).
struct StoppedBackends(Vec<i32>);

impl StoppedBackends {
    fn stop(pids: &[i32]) -> StoppedBackends {
        for pid in pids {
            signal(*pid, libc::SIGSTOP);
        }
        StoppedBackends(pids.to_vec())
    }

    fn resume(mut self) {
        for pid in std::mem::take(&mut self.0) {
            signal(pid, libc::SIGCONT);
        }
    }
}

impl Drop for StoppedBackends {
    fn drop(&mut self) {
        for pid in &self.0 {
            // SAFETY: kill(2); failures (the backend is gone) do not matter here.
            unsafe { libc::kill(*pid, libc::SIGCONT) };
        }
    }
}

/// Holds an uncommitted row at `(key, seq)`: an append of that seq takes the lease row
/// lock, then waits on this transaction's unique-index entry — a statement frozen
/// mid-transaction, on demand.
async fn block_seq(url: &str, key: &SessionKey, seq: i64) -> tokio_postgres::Client {
    let blocker = berth_postgres::testing::connect(url).await;
    blocker.batch_execute("BEGIN").await.unwrap();
    blocker
        .execute(
            "INSERT INTO events (tenant, session_id, seq, epoch, event_type, ignorable, line) \
             VALUES ($1, $2, $3, 0, 'test/blocker', false, '{}')",
            &[&key.tenant.as_str(), &key.id.as_str(), &seq],
        )
        .await
        .unwrap();
    blocker
}

// ---------------------------------------------------------------------------------
// The child process (`src/bin/berth-pg-child.rs`).

struct Child {
    process: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Child {
    async fn start(url: &str, local_deadline: bool) -> Child {
        let mut process = tokio::process::Command::new(env!("CARGO_BIN_EXE_berth-pg-child"))
            .arg("serve")
            .env("BERTH_PG_URL", url)
            .env("BERTH_PG_TTL_MS", TTL.as_millis().to_string())
            .env("BERTH_PG_LOCAL_DEADLINE", if local_deadline { "1" } else { "0" })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the child");
        let stdin = process.stdin.take().unwrap();
        let stdout = BufReader::new(process.stdout.take().unwrap()).lines();
        let mut child = Child { process, stdin, stdout };
        assert_eq!(child.line().await, "ready");
        child
    }

    async fn line(&mut self) -> String {
        let line = tokio::time::timeout(Duration::from_secs(30), self.stdout.next_line()).await;
        line.expect("the child answers").expect("read").expect("the child is alive")
    }

    async fn send(&mut self, command: &str) -> String {
        self.stdin.write_all(format!("{command}\n").as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
        self.line().await
    }

    fn pid(&self) -> i32 {
        self.process.id().expect("running") as i32
    }
}

/// A holds the lease and appends; its *process* is stopped past the TTL; B takes over
/// and appends; A resumes and tries to append. `expected` is A's answer.
async fn paused_holder(local_deadline: bool, expected: &str) {
    let database = TestDatabase::with_app_role().await;
    let admin = database.client().await;
    let key = key("paused");
    let mut a = Child::start(&database.app_url(), local_deadline).await;
    assert_eq!(a.send("create tenant-r paused").await, "ok 1 0");
    assert_eq!(a.send("append 3 a-before").await, "ok 3");

    signal(a.pid(), libc::SIGSTOP);
    wait_until("A's lease lapses on the database clock", Duration::from_secs(10), || lease_lapsed(&admin, &key)).await;
    let b = connect(&database.app_url(), options("t23-b")).await;
    let mut writer = b.open_postgres_writer(&key).await.expect("B takes over the lapsed lease");
    assert_eq!((writer.epoch().0, writer.next_seq()), (2, 3));
    writer.append(&batch(3, 2, "b")).await.expect("B appends");
    signal(a.pid(), libc::SIGCONT);

    let answer = a.send("append 2 a-after").await;
    assert!(answer.starts_with(expected), "A's append after the pause: {answer}");
    let events = stored(&admin, &key).await;
    assert_contiguous_and_ordered(&events);
    let tags: Vec<(i64, &str)> = events.iter().map(|(_, epoch, tag)| (*epoch, tag.as_str())).collect();
    assert_eq!(tags, [(1, "a-before"), (1, "a-before"), (1, "a-before"), (2, "b"), (2, "b")]);
    writer.append(&batch(5, 1, "b")).await.expect("B is unaffected");
    writer.release().await.unwrap();
}

/// 23, the database alone: with the local deadline off, only the epoch check can stop
/// A — and it does (`Fenced`), whatever the length of the pause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t23_paused_holder_is_fenced_by_the_database() {
    paused_holder(false, "err fenced").await;
}

/// 23, as shipped: A's local deadline passed while it was stopped, so it refuses on
/// its own (`OwnershipLost`) without touching the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t23_paused_holder_stops_on_its_own_deadline() {
    paused_holder(true, "err ownership_lost").await;
}

/// 24: 8 tasks on 4 connections race to acquire one lapsed lease, round after round:
/// exactly one wins each round, with the next epoch; the others get `AlreadyOwned`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn t24_racing_acquisitions_have_one_winner_per_epoch() {
    let rounds: u64 = std::env::var("BERTH_PG_RACE_ROUNDS").ok().and_then(|text| text.parse().ok()).unwrap_or(200);
    let database = TestDatabase::with_app_role().await;
    let admin = database.client().await;
    let key = key("race");
    let mut backends = Vec::new();
    for index in 0..4 {
        let options = PostgresOptions { pool_size: 1, ..options(&format!("t24-{index}")) };
        backends.push(connect(&database.app_url(), options).await);
    }
    let first = backends[0].materialize(&header(&key), &[]).await.unwrap();
    let first_epoch = first.epoch().0;
    drop(first);
    for round in 0..rounds {
        let epoch = first_epoch + round;
        admin
            .execute(
                "UPDATE session_heads SET lease_until = now() - interval '1 second' WHERE tenant = $1 AND session_id = $2",
                &[&key.tenant.as_str(), &key.id.as_str()],
            )
            .await
            .unwrap();
        let barrier = Arc::new(tokio::sync::Barrier::new(8));
        let tasks: Vec<_> = (0..8)
            .map(|task| {
                let (backend, barrier, key) = (backends[task % 4].clone(), barrier.clone(), key.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    backend.open_postgres_writer(&key).await
                })
            })
            .collect();
        let mut winners = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                Ok(writer) => winners.push(writer),
                Err(Error::AlreadyOwned { .. }) => {}
                Err(other) => panic!("round {round}: a loser must see AlreadyOwned, got {other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one winner");
        let winner = winners.pop().unwrap();
        assert_eq!(winner.epoch().0, epoch + 1, "round {round}: the winner holds the next epoch");
        winner.abandon();
    }
}

/// 25: the connection is cut while the append statement is inside its transaction
/// (past the fencing update, waiting to insert): the append fails, the transaction
/// rolls back, and a retry of the same batch on a new connection applies it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t25_severed_connection_rolls_back_and_the_retry_applies_once() {
    let database = TestDatabase::with_app_role().await;
    let admin = database.client().await;
    let proxy = Proxy::start(database.server().address()).await;
    let key = key("severed");
    let options = PostgresOptions { append_attempts: 1, statement_timeout: Duration::from_secs(10), ..options("t25") };
    let application_name = options.application_name.clone();
    let backend = connect(&database.app_url_via(Some(proxy.address())), options).await;
    let mut writer = backend.materialize(&header(&key), &batch(0, 2, "first")).await.unwrap();

    let blocker = block_seq(&database.url(), &key, 2).await;
    let appending = tokio::spawn(async move {
        let outcome = writer.append(&batch(2, 3, "second")).await;
        (writer, outcome)
    });
    wait_until("the append waits inside its transaction", Duration::from_secs(10), || {
        waiting_on_lock(&admin, &application_name)
    })
    .await;
    proxy.sever();
    let (mut writer, outcome) = appending.await.unwrap();
    assert!(matches!(outcome, Err(Error::Unavailable { .. })), "a cut connection is Unavailable: {outcome:?}");
    // The server notices the vanished client (client_connection_check_interval) and
    // rolls the statement back before the blocker goes away.
    wait_until("the severed statement is rolled back", Duration::from_secs(10), || async {
        !waiting_on_lock(&admin, &application_name).await
    })
    .await;
    blocker.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(stored(&admin, &key).await.len(), 2, "nothing of the severed batch is stored");

    writer.append(&batch(2, 3, "second")).await.expect("the retry on a new connection succeeds");
    writer.append(&batch(5, 1, "third")).await.unwrap();
    let events = stored(&admin, &key).await;
    assert_contiguous_and_ordered(&events);
    let tags: Vec<&str> = events.iter().map(|(_, _, tag)| tag.as_str()).collect();
    assert_eq!(tags, ["first", "first", "second", "second", "second", "third"]);
}

/// 26: the proxy forwards the append to the server and black-holes the reply: the
/// client times out with an unknown outcome though the batch committed. Retrying the
/// same batch succeeds without storing it twice — by the caller, and by `append`'s own
/// retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t26_black_holed_commit_reply_then_retry_is_exactly_once() {
    let database = TestDatabase::with_app_role().await;
    let admin = database.client().await;
    let proxy = Proxy::start(database.server().address()).await;
    for (session, attempts) in [("reply-lost-caller", 1), ("reply-lost-internal", 2)] {
        let key = key(session);
        // One connection, and no notifications competing for it: the request the proxy
        // swallows the reply of is the append.
        let options = PostgresOptions {
            pool_size: 1,
            notify: false,
            append_attempts: attempts,
            statement_timeout: Duration::from_secs(1),
            ..options("t26")
        }
        .with_lease_ttl(Duration::from_secs(20));
        let backend = connect(&database.app_url_via(Some(proxy.address())), options).await;
        let mut writer = backend.materialize(&header(&key), &batch(0, 1, "first")).await.unwrap();
        // Prepares the append statement on the one pooled connection, so the request
        // black-holed below is the append itself, not its preparation.
        writer.append(&batch(1, 1, "warm")).await.unwrap();

        proxy.set_flow(Flow::Forward, Flow::Blackhole);
        let outcome = writer.append(&batch(2, 2, "second")).await;
        if attempts == 1 {
            assert!(
                matches!(&outcome, Err(Error::Unavailable { reason }) if reason.contains("outcome unknown")),
                "{outcome:?}"
            );
            assert_eq!(stored(&admin, &key).await.len(), 4, "the batch committed though its reply was lost");
            writer.append(&batch(2, 2, "second")).await.expect("the retry reports the batch as applied");
        } else {
            outcome.expect("append retried on a fresh connection and found its batch applied");
        }
        writer.append(&batch(4, 1, "third")).await.unwrap();
        let events = stored(&admin, &key).await;
        assert_contiguous_and_ordered(&events);
        let tags: Vec<&str> = events.iter().map(|(_, _, tag)| tag.as_str()).collect();
        assert_eq!(tags, ["first", "warm", "second", "second", "third"], "exactly once");
        proxy.sever();
    }
}

/// 27: an administrator terminates the writer's backends between two appends: the next
/// append reconnects, the epoch still holds, no seq is duplicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t27_terminated_backend_between_appends_reconnects_without_duplicates() {
    let database = TestDatabase::with_app_role().await;
    let admin = database.client().await;
    let key = key("terminated");
    let options = options("t27");
    let application_name = options.application_name.clone();
    let backend = connect(&database.app_url(), options).await;
    let mut writer = backend.materialize(&header(&key), &batch(0, 2, "first")).await.unwrap();
    for round in 0..3u64 {
        let terminated: Vec<bool> = admin
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
                &[&application_name],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert!(!terminated.is_empty() && terminated.iter().all(|done| *done), "round {round}: {terminated:?}");
        let first = writer.next_seq();
        writer.append(&batch(first, 2, "after-kill")).await.expect("the next append reconnects");
        assert_eq!(writer.epoch().0, 1);
    }
    let events = stored(&admin, &key).await;
    assert_contiguous_and_ordered(&events);
    assert_eq!(events.len(), 8);
}

/// 28: both directions of the writer's connections are black-holed while it idles:
/// renewals fail, and the writer stops on its own before the database would let anyone
/// else in; B takes over after the lapse; A's later appends are refused and nothing of
/// them is stored, also once the network heals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t28_half_open_connection_stops_the_writer_before_its_lease_lapses() {
    let database = TestDatabase::with_app_role().await;
    let admin = database.client().await;
    let proxy = Proxy::start(database.server().address()).await;
    let key = key("half-open");
    let options = PostgresOptions { statement_timeout: Duration::from_millis(500), ..options("t28") };
    let a = connect(&database.app_url_via(Some(proxy.address())), options).await;
    let mut writer = a.materialize(&header(&key), &batch(0, 1, "a")).await.unwrap();

    proxy.admit(Admission::Blackhole);
    proxy.set_flow(Flow::Blackhole, Flow::Blackhole);
    // A stops before its lease lapses, checked by the order of observations rather
    // than a wall-clock margin: each round reads the database clock first, then asks A.
    // A lease that had lapsed on the database clock while A still accepted an append
    // afterwards is the violation. A stall of this (loaded) machine only delays both
    // observations; it can hide a violation in that round, never invent one.
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let lapsed_before = lease_lapsed(&admin, &key).await;
        match writer.append(&[]).await {
            Ok(()) => {
                assert!(!lapsed_before, "A still accepted an append after its lease lapsed on the database clock")
            }
            Err(Error::OwnershipLost { .. }) => break,
            Err(other) => panic!("A stops with OwnershipLost, got {other:?}"),
        }
        assert!(Instant::now() < give_up, "A never stopped on its own");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    wait_until("A's lease lapses", Duration::from_secs(10), || lease_lapsed(&admin, &key)).await;
    let b = connect(&database.app_url(), options_for_b()).await;
    let mut taken = b.open_postgres_writer(&key).await.expect("B takes over");
    taken.append(&batch(1, 1, "b")).await.unwrap();

    let refused = writer.append(&batch(1, 1, "a-late")).await;
    assert!(matches!(refused, Err(Error::OwnershipLost { .. })), "{refused:?}");
    proxy.admit(Admission::Forward);
    proxy.sever();
    let refused = writer.append(&batch(1, 1, "a-late")).await;
    assert!(matches!(refused, Err(Error::OwnershipLost { .. } | Error::Fenced { .. })), "{refused:?}");
    let events = stored(&admin, &key).await;
    assert_contiguous_and_ordered(&events);
    let tags: Vec<(i64, &str)> = events.iter().map(|(_, epoch, tag)| (*epoch, tag.as_str())).collect();
    assert_eq!(tags, [(1, "a"), (2, "b")]);
}

fn options_for_b() -> PostgresOptions {
    options("t28-b")
}

/// 29 (i): the backend serving the writer is stopped between transactions. The next
/// append fails on the client-side bound (a stopped backend cannot enforce its own
/// `statement_timeout`) instead of hanging; the writer still holds its lease, so a
/// retry on a fresh connection applies the batch once, and the stale statement the
/// stopped backend runs after SIGCONT changes nothing (its expected next seq is gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t29_stalled_backend_between_transactions_times_out_client_side() {
    let database = TestDatabase::with_app_role().await;
    let admin = database.client().await;
    let key = key("stalled-idle");
    // One connection, and no notifications that could take it first.
    let options = PostgresOptions {
        pool_size: 1,
        notify: false,
        append_attempts: 1,
        statement_timeout: Duration::from_secs(1),
        ..options("t29i")
    }
    .with_lease_ttl(Duration::from_secs(20));
    let application_name = options.application_name.clone();
    let a = connect(&database.app_url(), options).await;
    let mut writer = a.materialize(&header(&key), &batch(0, 1, "first")).await.unwrap();
    let pids = backend_pids(&admin, &application_name).await;
    assert_eq!(pids.len(), 1, "one pooled connection");
    let stopped = StoppedBackends::stop(&pids);

    let started = Instant::now();
    let outcome = writer.append(&batch(1, 2, "second")).await;
    let waited = started.elapsed();
    assert!(matches!(outcome, Err(Error::Unavailable { .. })), "{outcome:?}");
    assert!(waited < Duration::from_secs(5), "the client-side bound fired (after {waited:?})");

    let b = connect(&database.app_url(), options_for_b()).await;
    assert!(matches!(b.open_postgres_writer(&key).await, Err(Error::AlreadyOwned { .. })), "A still holds the lease");
    writer.append(&batch(1, 2, "second")).await.expect("the retry on a fresh connection succeeds");
    stopped.resume();
    wait_until("the stopped backend finishes", Duration::from_secs(10), || async {
        backend_pids(&admin, &application_name).await.iter().all(|pid| *pid != pids[0])
    })
    .await;
    writer.append(&batch(3, 1, "third")).await.unwrap();
    let events = stored(&admin, &key).await;
    assert_contiguous_and_ordered(&events);
    let tags: Vec<&str> = events.iter().map(|(_, _, tag)| tag.as_str()).collect();
    assert_eq!(tags, ["first", "second", "second", "third"]);
}

/// 29 (ii): the backend is stopped *inside* an append, after the fencing update, so it
/// holds the lease row lock. The client gives up on its own bound; B's acquisition does
/// not hang on the lock (`lock_timeout` → `AlreadyOwned`). After SIGCONT the stalled
/// transaction finishes or aborts — A was the legitimate holder when it took the lock —
/// and B then takes the lapsed lease with the next epoch; seqs stay contiguous and the
/// epochs do not interleave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t29_stalled_backend_holding_the_lease_row_makes_takeover_fail_fast() {
    let database = TestDatabase::with_app_role().await;
    let admin = database.client().await;
    let key = key("stalled-locked");
    let options = PostgresOptions { pool_size: 1, notify: false, append_attempts: 1, ..options("t29ii") };
    let application_name = options.application_name.clone();
    let a = connect(&database.app_url(), options).await;
    let mut writer = a.materialize(&header(&key), &batch(0, 1, "first")).await.unwrap();

    let blocker = block_seq(&database.url(), &key, 1).await;
    let appending = tokio::spawn(async move {
        let outcome = writer.append(&batch(1, 2, "stalled")).await;
        (writer, outcome)
    });
    wait_until("the append holds the lease row and waits", Duration::from_secs(10), || {
        waiting_on_lock(&admin, &application_name)
    })
    .await;
    let pids = backend_pids(&admin, &application_name).await;
    let stopped = StoppedBackends::stop(&pids);
    blocker.batch_execute("ROLLBACK").await.unwrap();
    let (writer, outcome) = appending.await.unwrap();
    assert!(matches!(outcome, Err(Error::Unavailable { .. })), "the client-side bound fired: {outcome:?}");

    wait_until("A's lease lapses", Duration::from_secs(10), || lease_lapsed(&admin, &key)).await;
    let b = connect(&database.app_url(), options_for_b()).await;
    let started = Instant::now();
    let blocked = b.open_postgres_writer(&key).await;
    assert!(matches!(blocked, Err(Error::AlreadyOwned { .. })), "{blocked:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "the acquisition did not hang on the row lock");

    stopped.resume();
    let give_up = Instant::now() + Duration::from_secs(20);
    let mut taken = loop {
        match b.open_postgres_writer(&key).await {
            Ok(writer) => break writer,
            Err(error) => assert!(Instant::now() < give_up, "B never took over: {error:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(taken.epoch().0, 2);
    let next = taken.next_seq();
    taken.append(&batch(next, 1, "b")).await.unwrap();
    drop(writer);
    let events = stored(&admin, &key).await;
    assert_contiguous_and_ordered(&events);
    let tags: Vec<(i64, &str)> = events.iter().map(|(_, epoch, tag)| (*epoch, tag.as_str())).collect();
    let stalled_applied = tags.len() == 4;
    let expected: Vec<(i64, &str)> = if stalled_applied {
        vec![(1, "first"), (1, "stalled"), (1, "stalled"), (2, "b")]
    } else {
        vec![(1, "first"), (2, "b")]
    };
    assert_eq!(tags, expected);
}
