//! Linearizability of one session through a real `berth serve` (reliability §6 test 39):
//! concurrent HTTP clients append (with and without `expected_seq` and idempotency
//! keys, as a service or as their attached run), read, tail, attach and detach runs
//! (their own, or the one another client attached last), while the server is killed
//! with SIGKILL and restarted in the middle. Every invocation and answer is recorded
//! with its time (a request cut by the kill is an unknown outcome, retried once with its
//! key or `expected_seq`), a final read takes the whole log, and the bounded history is
//! checked against the sequential session model of `berth_testkit::lincheck`. Then the
//! recorded history is corrupted, and the checker must reject it: a checker that
//! accepts everything fails here.
//!
//! Runs on the embedded store (a temporary data directory) and on PostgreSQL with two
//! `berth serve` replicas on one fresh database, the clients spread over both. Appends
//! through the replica without the writer lease answer `busy` (the model takes it as a
//! refusal without effect) and are retried through the other one; round 0 kills the
//! lease holder, so the session takes appends again only once its lease lapsed, round 1
//! the other replica.

mod common;

use berth::postgres::testing::TestDatabase;
use berth_core::{Error, RunId, SessionId, TenantId, UserId};
use berth_server::auth::{KeyStore, KEYS_FILE};
use berth_server::client::Client;
use berth_service::{AppendRequest, AttachRequest, CreateSession, NewEvent, Principal, Role};
use berth_testkit::lincheck::{self, CheckError, Entry, History, Label, Operation, Outcome};
use hyper::Method;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

const CLIENTS: usize = 4;
const OPERATIONS_PER_CLIENT: usize = 30;
/// The bound on a client's operations while it waits for the session to take appends
/// again after the restart.
const OPERATIONS_PER_CLIENT_MAX: usize = 90;
/// Operations each client makes once appends are stored again after the restart (the
/// writer that took over, on PostgreSQL).
const OPERATIONS_AFTER_RECOVERY: usize = 5;
/// A client's pause between operations while it waits for that (on PostgreSQL the
/// killed writer's lease, 10 s, must lapse first).
const RECOVERY_PAUSE: Duration = Duration::from_millis(400);
const SESSION: &str = "lin";
/// The client that reads the whole log once everyone is done.
const FINAL_READER: usize = 99;
/// How long a client waits for a restarted server (a bound, not a sleep).
const DOWN_MAX: Duration = Duration::from_secs(60);
/// How long a tail waits for its next event before the client cuts it.
const TAIL_WAIT: Duration = Duration::from_millis(150);
const TAIL_EVENTS_MAX: usize = 3;
/// Histories per store, each on a fresh store with its own seed and kill (a PostgreSQL
/// round waits out a writer lease, 10 s).
const ROUNDS: u64 = 3;
const POSTGRES_ROUNDS: u64 = 2;

/// Starts `berth serve` from `command` and waits for its "listening on" line; returns
/// the child (killed when dropped) and its URL.
fn spawn_server(mut command: Command) -> (common::Server, String) {
    command.env("BERTH_LOG", "warn").stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = command.spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("listening on"), "{line:?}");
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in stdout.lines() {});
    let url = line.split_whitespace().find(|word| word.starts_with("http://")).unwrap().to_owned();
    (common::Server(child), url)
}

/// `berth serve` on `store` (a data directory or a PostgreSQL URL) with `keys`.
fn serve_command(store: &str, keys: &Path) -> Command {
    let mut command = common::berth(Path::new(store));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--rate-per-tenant", "0", "--sweep-interval-s", "0"])
        .arg("--keys-file")
        .arg(keys);
    command
}

/// A service key (it may append without a run and detach any run).
fn service_key(keys: &Path) -> String {
    let principal = Principal {
        tenant: TenantId::parse("acme").unwrap(),
        user: UserId::parse("lin").unwrap(),
        project: None,
        role: Role::Service,
    };
    KeyStore::open(keys).unwrap().create(&principal, None).unwrap().1
}

/// One server the clients reach: its client (the URL changes on restart), `None` while
/// it is down.
struct Slot {
    client: RwLock<Option<Client>>,
}

impl Slot {
    fn new(url: &str, key: &str) -> Slot {
        Slot { client: RwLock::new(Some(Client::new(url, Some(key.to_owned())).unwrap())) }
    }

    fn set(&self, client: Option<Client>) {
        *self.client.write().unwrap() = client;
    }

    /// The server's client once it is up (waits with a deadline).
    async fn up(&self) -> Client {
        let deadline = Instant::now() + DOWN_MAX;
        loop {
            if let Some(client) = self.client.read().unwrap().clone() {
                return client;
            }
            assert!(Instant::now() < deadline, "the server did not come back");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The history as it is recorded: times in nanoseconds since the test's origin.
struct Recorder {
    origin: Instant,
    entries: Mutex<Vec<Entry>>,
}

impl Recorder {
    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    fn len(&self) -> usize {
        self.entries.lock().unwrap().len()
    }
}

fn session() -> SessionId {
    SessionId::parse(SESSION).unwrap()
}

fn label_of(data: &str) -> Label {
    // An event the workload did not write gets a label no append has: the check fails.
    let value: serde_json::Value = serde_json::from_str(data).unwrap_or_default();
    value["label"].as_u64().unwrap_or(u64::MAX)
}

/// Performs one operation; `None` is an unknown outcome (anything that is not one of
/// the answers the model knows: a cut connection, a 5xx, a timeout).
async fn perform(client: &Client, operation: &Operation) -> Option<Outcome> {
    let id = session();
    match operation {
        Operation::Append { events, expected_seq, key, run } => {
            let request = AppendRequest {
                memory: Vec::new(),
                run: run.as_ref().map(|run| RunId::parse(run).unwrap()),
                expected_seq: *expected_seq,
                events: events
                    .iter()
                    .map(|label| NewEvent::new("note/x", serde_json::json!({"label": label})))
                    .collect(),
                idempotency_key: key.clone(),
            };
            match client.append(&id, &request).await {
                Ok(outcome) => Some(Outcome::Appended {
                    first_seq: outcome.first_seq,
                    next_seq: outcome.next_seq,
                    duplicate: outcome.duplicate,
                }),
                Err(Error::SeqConflict { expected, .. }) => Some(Outcome::SeqConflict { next_seq: expected }),
                Err(Error::IdempotencyKeyReused { first_seq, .. }) => Some(Outcome::KeyReused { first_seq }),
                Err(Error::Busy { .. } | Error::WriterBusy { .. }) => Some(Outcome::Busy),
                Err(Error::RunNotAttached { .. }) => Some(Outcome::RunNotAttached),
                Err(_) => None,
            }
        }
        Operation::Read { from, limit } => {
            // One request, one page: the read is one operation.
            let path = format!("/v1/sessions/{SESSION}/events?from={from}&limit={limit}");
            let response = client.send(Method::GET, &path, None, &[]).await.ok()?;
            if !response.status.is_success() {
                return None;
            }
            let page: berth_api::EventPage = serde_json::from_slice(&response.body).ok()?;
            Some(Outcome::Events(page.events.iter().map(|event| label_of(event.data.as_str())).collect()))
        }
        Operation::Tail { from } => {
            let mut stream = client.tail(&id, Some(*from), None).await.ok()?;
            let mut received = Vec::new();
            // Whatever arrived before the client cut the stream (or the kill did) is what
            // the tail saw.
            while received.len() < TAIL_EVENTS_MAX {
                match tokio::time::timeout(TAIL_WAIT, stream.next_event()).await {
                    Ok(Ok(Some(event))) => received.push(label_of(event.data.as_str())),
                    _ => break,
                }
            }
            Some(Outcome::Events(received))
        }
        Operation::Attach { run } => {
            let request = AttachRequest { run_id: Some(RunId::parse(run).unwrap()), ..AttachRequest::default() };
            match client.attach(&id, &request).await {
                Ok(_) => Some(Outcome::Attached),
                Err(Error::AlreadyExists { .. }) => Some(Outcome::RunExists),
                Err(Error::Busy { .. } | Error::WriterBusy { .. }) => Some(Outcome::Busy),
                Err(_) => None,
            }
        }
        Operation::Detach { run } => match client.detach(&id, &RunId::parse(run).unwrap(), "done", None).await {
            Ok(_) => Some(Outcome::Detached),
            Err(Error::RunNotAttached { .. }) => Some(Outcome::RunNotAttached),
            Err(_) => None,
        },
    }
}

/// What one client believes about the session, to aim its next operation.
#[derive(Default)]
struct View {
    known_len: u64,
    my_run: Option<String>,
}

impl View {
    fn learn(&mut self, operation: &Operation, outcome: &Outcome) {
        match (operation, outcome) {
            (_, Outcome::Appended { next_seq, .. }) | (_, Outcome::SeqConflict { next_seq }) => {
                self.known_len = self.known_len.max(*next_seq)
            }
            (Operation::Read { from, .. } | Operation::Tail { from }, Outcome::Events(events)) => {
                self.known_len = self.known_len.max(from + events.len() as u64)
            }
            (Operation::Attach { run }, Outcome::Attached) => self.my_run = Some(run.clone()),
            (Operation::Detach { run }, Outcome::Detached | Outcome::RunNotAttached)
            | (Operation::Append { run: Some(run), .. }, Outcome::RunNotAttached)
                if self.my_run.as_ref() == Some(run) =>
            {
                self.my_run = None
            }
            _ => {}
        }
    }

    /// The next operation; `latest_run` is the run most recently attached by anyone (a
    /// detach of another client's run races that client's appends as the run).
    fn choose(&self, rng: &mut StdRng, client: usize, number: usize, latest_run: Option<String>) -> Operation {
        let name = format!("c{client}-o{number}");
        match rng.gen_range(0..100) {
            0..45 => {
                let events =
                    (0..rng.gen_range(1..=3)).map(|i| (client * 1_000_000 + number * 10 + i) as Label).collect();
                let expected_seq = rng.gen_bool(0.5).then_some(self.known_len);
                let key = rng.gen_bool(0.5).then(|| name.clone());
                // As this client's run, when it has one attached, half the time.
                let run = self.my_run.clone().filter(|_| rng.gen_bool(0.5));
                Operation::Append { events, expected_seq, key, run }
            }
            45..65 => Operation::Read { from: rng.gen_range(0..=self.known_len), limit: rng.gen_range(1..=40) },
            65..75 => Operation::Tail { from: self.known_len.saturating_sub(rng.gen_range(0..=2)) },
            75..87 => Operation::Attach { run: name },
            _ => {
                let own = self.my_run.clone().filter(|_| rng.gen_bool(0.5));
                let run = own.or(latest_run).unwrap_or_else(|| format!("c{}-o{number}", (client + 1) % CLIENTS));
                Operation::Detach { run }
            }
        }
    }
}

/// Whether an operation whose outcome is unknown is retried (as a new operation with the
/// same arguments): appends that are safe to retry, attaches with their run id, detaches.
fn retried(operation: &Operation) -> bool {
    match operation {
        Operation::Append { expected_seq, key, .. } => expected_seq.is_some() || key.is_some(),
        Operation::Attach { .. } | Operation::Detach { .. } => true,
        Operation::Read { .. } | Operation::Tail { .. } => false,
    }
}

/// What the clients and the test share while the history is recorded.
struct Shared {
    slots: Vec<Slot>,
    recorder: Recorder,
    /// Server 0 (or the writer) was killed and restarted.
    restarted: AtomicBool,
    /// An append was stored after the restart: the session takes writes again (on
    /// PostgreSQL once the killed writer's lease lapsed and a replica took it over).
    recovered: AtomicBool,
    /// The run most recently attached (by any client).
    latest_run: Mutex<Option<String>>,
    /// The server through which the latest append was stored: the writer-lease holder,
    /// which is the one killed.
    last_stored_via: AtomicUsize,
}

impl Shared {
    fn stored(&self) -> usize {
        let entries = self.recorder.entries.lock().unwrap();
        entries.iter().filter(|entry| matches!(entry.outcome, Some(Outcome::Appended { duplicate: false, .. }))).count()
    }

    /// Performs `operation` through server `via` and records it.
    async fn perform_recorded(&self, client: usize, via: usize, operation: &Operation) -> Option<Outcome> {
        let http = self.slots[via].up().await;
        let invoked_ns = self.recorder.now_ns();
        let outcome = perform(&http, operation).await;
        let returned_ns = outcome.as_ref().map(|_| self.recorder.now_ns());
        if let Some(Outcome::Appended { duplicate: false, .. }) = &outcome {
            self.last_stored_via.store(via, Ordering::SeqCst);
            if self.restarted.load(Ordering::SeqCst) {
                self.recovered.store(true, Ordering::SeqCst);
            }
        }
        if let (Operation::Attach { run }, Some(Outcome::Attached)) = (operation, &outcome) {
            *self.latest_run.lock().unwrap() = Some(run.clone());
        }
        let entry = Entry { client, invoked_ns, returned_ns, operation: operation.clone(), outcome: outcome.clone() };
        self.recorder.entries.lock().unwrap().push(entry);
        outcome
    }
}

/// One client: `OPERATIONS_PER_CLIENT` operations through its home server, and after
/// the restart more until the session takes appends again (paced, bounded). An unknown
/// outcome is retried once through the same server; an append answered busy (another
/// server holds the writer lease) once through the next server — busy is a refusal
/// without effect, so any append may be retried.
async fn run_client(client: usize, home: usize, shared: Arc<Shared>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut view = View::default();
    let (mut number, mut since_recovery) = (0, 0);
    loop {
        let recovered = shared.recovered.load(Ordering::SeqCst);
        since_recovery += usize::from(recovered);
        let wanted = number < OPERATIONS_PER_CLIENT || since_recovery <= OPERATIONS_AFTER_RECOVERY;
        if !wanted || number >= OPERATIONS_PER_CLIENT_MAX {
            break;
        }
        let latest_run = shared.latest_run.lock().unwrap().clone();
        let operation = view.choose(&mut rng, client, number, latest_run);
        let mut via = home;
        for attempt in 0..2 {
            let outcome = shared.perform_recorded(client, via, &operation).await;
            if let Some(outcome) = &outcome {
                view.learn(&operation, outcome);
            }
            let is_append = matches!(operation, Operation::Append { .. });
            let again = match outcome {
                None => retried(&operation),
                Some(Outcome::Busy) if is_append && shared.slots.len() > 1 => {
                    via = (via + 1) % shared.slots.len();
                    true
                }
                Some(_) => false,
            };
            if !again || attempt == 1 {
                break;
            }
        }
        number += 1;
        if shared.restarted.load(Ordering::SeqCst) && !shared.recovered.load(Ordering::SeqCst) {
            // Waiting out the killed writer's lease: keep the history short meanwhile.
            tokio::time::sleep(RECOVERY_PAUSE).await;
        }
    }
}

/// The stores the test runs on: how to start (and restart) server `index`.
type Launch = Arc<dyn Fn(usize) -> (common::Server, String) + Send + Sync>;

/// Which server is killed: the one holding the session's writer (lease) — on PostgreSQL
/// the session then waits for the lease to lapse —, or another one.
#[derive(Clone, Copy, Debug)]
enum Victim {
    Writer,
    NotWriter,
}

/// Appends stored before the kill (with a third of the operations made).
const STORED_BEFORE_KILL: usize = 8;

/// Drives the clients against `servers` servers (client `i` on server `i % n`), kills
/// `victim` with SIGKILL a third of the way through and restarts it, waits until the
/// session takes appends again, then reads the whole log and returns the history.
async fn record_history(
    launch: Launch,
    key: &str,
    servers: usize,
    victim: Victim,
    seed: u64,
) -> (History, Vec<common::Server>) {
    let mut running = Vec::new();
    let mut slots = Vec::new();
    for index in 0..servers {
        let launch = launch.clone();
        let (server, url) = tokio::task::spawn_blocking(move || launch(index)).await.unwrap();
        running.push(server);
        slots.push(Slot::new(&url, key));
    }
    let setup = slots[0].up().await;
    setup.create(&CreateSession { id: Some(session()), ..CreateSession::default() }).await.unwrap();

    let shared = Arc::new(Shared {
        slots,
        recorder: Recorder { origin: Instant::now(), entries: Mutex::new(Vec::new()) },
        restarted: AtomicBool::new(false),
        recovered: AtomicBool::new(false),
        last_stored_via: AtomicUsize::new(0),
        latest_run: Mutex::new(None),
    });
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| tokio::spawn(run_client(client, client % servers, shared.clone(), seed * 100 + client as u64)))
        .collect();

    // Kill once a third of the operations are recorded and some appends stored
    // (deadline-bounded wait).
    let deadline = Instant::now() + Duration::from_secs(60);
    while shared.recorder.len() < CLIENTS * OPERATIONS_PER_CLIENT / 3 || shared.stored() < STORED_BEFORE_KILL {
        assert!(Instant::now() < deadline, "the clients made no progress");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let writer = shared.last_stored_via.load(Ordering::SeqCst);
    let victim = match victim {
        Victim::Writer => writer,
        Victim::NotWriter => (writer + 1) % servers,
    };
    shared.slots[victim].set(None);
    let killed_at = shared.recorder.len();
    running[victim].0.kill().unwrap(); // SIGKILL
    running[victim].0.wait().unwrap();
    let relaunch = launch.clone();
    let (server, url) = tokio::task::spawn_blocking(move || relaunch(victim)).await.unwrap();
    running[victim] = server;
    shared.restarted.store(true, Ordering::SeqCst);
    shared.slots[victim].set(Some(Client::new(&url, Some(key.to_owned())).unwrap()));

    for client in clients {
        tokio::time::timeout(Duration::from_secs(120), client).await.expect("a client hung").unwrap();
    }
    assert!(shared.recorder.len() > killed_at, "nothing ran after the restart");
    assert!(shared.recovered.load(Ordering::SeqCst), "no append was stored after the restart");

    // The whole log, read after everything else returned: every acknowledged batch must
    // be in it, exactly once.
    let operation = Operation::Read { from: 0, limit: berth_core::limits::PAGE_SIZE_MAX as u64 };
    let outcome = shared.perform_recorded(FINAL_READER, victim, &operation).await;
    assert!(outcome.is_some(), "the final read answers");
    let entries = std::mem::take(&mut *shared.recorder.entries.lock().unwrap());
    (History::new(entries).unwrap(), running)
}

/// Where a test keeps its rounds' lines for the CI log (nextest hides a passing test's
/// output): `$CARGO_TARGET_TMPDIR/linearizability-<backend>.txt`, one file per test,
/// started afresh by it.
fn report_file(backend: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("linearizability-{backend}.txt"))
}

/// Prints `line` and appends it to the report file of `store`'s backend (its first word).
fn report(store: &str, line: &str) {
    use std::io::Write;
    println!("{line}");
    let backend = store.split([',', ' ']).next().unwrap_or(store);
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(report_file(backend)).unwrap();
    writeln!(file, "{line}").expect("record the check's size and time");
}

/// Checks the recorded history, prints its size and the checker's time, and checks that
/// corrupted copies of it are rejected.
fn check_recorded(store: &str, history: &History) {
    let entries = history.entries();
    let count = |pick: fn(&Entry) -> bool| entries.iter().filter(|entry| pick(entry)).count();
    let appended = count(|entry| matches!(entry.outcome, Some(Outcome::Appended { duplicate: false, .. })));
    let unknown = count(|entry| entry.outcome.is_none());
    let started = Instant::now();
    let verdict = lincheck::check(history);
    let took = started.elapsed();
    let line = format!(
        "{store}: {} operations ({appended} appends stored, {} duplicates, {} seq conflicts, {} key reused, {} \
         busy, {} as a run not attached, {unknown} unknown outcomes, {} reads and tails, {} run operations); checked in {took:?}: {}",
        entries.len(),
        count(|entry| matches!(entry.outcome, Some(Outcome::Appended { duplicate: true, .. }))),
        count(|entry| matches!(entry.outcome, Some(Outcome::SeqConflict { .. }))),
        count(|entry| matches!(entry.outcome, Some(Outcome::KeyReused { .. }))),
        count(|entry| matches!(entry.outcome, Some(Outcome::Busy))),
        count(|entry| {
            matches!((&entry.operation, &entry.outcome), (Operation::Append { .. }, Some(Outcome::RunNotAttached)))
        }),
        count(|entry| matches!(entry.operation, Operation::Read { .. } | Operation::Tail { .. })),
        count(|entry| matches!(entry.operation, Operation::Attach { .. } | Operation::Detach { .. })),
        match &verdict {
            Ok(found) => format!("linearizable ({} states visited)", found.states_visited),
            Err(error) => error.to_string(),
        }
    );
    report(store, &line);
    verdict.unwrap_or_else(|error| panic!("{store}: {error}\nhistory: {entries:#?}"));
    assert!(appended >= 5, "{store}: only {appended} appends stored: the history tests little");

    // Mutation 1: swap the seqs of the first acknowledged batch and of one acknowledged
    // after it returned (so they cannot be reordered).
    let stored: Vec<usize> = (0..entries.len())
        .filter(|&index| matches!(entries[index].outcome, Some(Outcome::Appended { duplicate: false, .. })))
        .collect();
    let first = *stored.iter().min_by_key(|&&index| entries[index].returned_ns).unwrap();
    let later = *stored
        .iter()
        .filter(|&&index| entries[index].invoked_ns > entries[first].returned_ns.unwrap())
        .max_by_key(|&&index| entries[index].invoked_ns)
        .expect("an append after the first");
    let mut swapped = entries.to_vec();
    let (a, b) = (swapped[first].outcome.clone(), swapped[later].outcome.clone());
    swapped[first].outcome = b;
    swapped[later].outcome = a;
    assert_rejected(store, "two acknowledged batches' seqs swapped", swapped);

    // Mutation 2: the final read loses one event from the middle.
    let mut lossy = entries.to_vec();
    let last = lossy.last_mut().unwrap();
    let Some(Outcome::Events(events)) = &mut last.outcome else { unreachable!("the final read") };
    events.remove(events.len() / 2);
    assert_rejected(store, "an event missing from the final read", lossy);
}

fn assert_rejected(store: &str, corruption: &str, entries: Vec<Entry>) {
    let history = History::new(entries).expect("still well formed");
    let started = Instant::now();
    let verdict = lincheck::check(&history);
    let said = verdict.as_ref().map_or_else(ToString::to_string, |_| "accepted".to_owned());
    report(store, &format!("{store}: corrupted ({corruption}): {said} in {:?}", started.elapsed()));
    assert!(
        matches!(verdict, Err(CheckError::NotLinearizable { .. })),
        "{store}: the checker accepted a history with {corruption}: {verdict:?}"
    );
}

/// One server holds the only write handle, so an append answered `busy` there is a
/// spurious refusal (the model takes it as refused without effect, as it must for a
/// replica without the writer lease). Its one cause was a detach that left no run
/// closing the write handle without the session's append lock, so that an append
/// opening a new handle found the old one still registered; `close_writer` now waits for
/// the append lock, and no append may be answered busy here.
fn assert_no_busy_appends(store: &str, history: &History) {
    let busy: Vec<_> = history
        .entries()
        .iter()
        .filter(|entry| matches!((&entry.operation, &entry.outcome), (Operation::Append { .. }, Some(Outcome::Busy))))
        .collect();
    assert!(busy.is_empty(), "{store}: appends answered busy by the only server: {busy:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_linearizable_through_a_killed_embedded_server() {
    let _ = std::fs::remove_file(report_file("embedded"));
    for round in 0..ROUNDS {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let keys = data.join(KEYS_FILE);
        let key = service_key(&keys);
        let store = data.to_str().unwrap().to_owned();
        let launch: Launch = Arc::new(move |_| spawn_server(serve_command(&store, &keys)));
        let (history, servers) = record_history(launch, &key, 1, Victim::Writer, round).await;
        drop(servers);
        assert_no_busy_appends(&format!("embedded, round {round}"), &history);
        check_recorded(&format!("embedded, round {round}"), &history);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_linearizable_across_two_postgres_replicas_one_killed() {
    let _ = std::fs::remove_file(report_file("postgres"));
    for round in 0..POSTGRES_ROUNDS {
        let database = TestDatabase::with_app_role().await;
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join(KEYS_FILE);
        let key = service_key(&keys);
        let store = database.app_url();
        let launch: Launch = Arc::new(move |_| spawn_server(serve_command(&store, &keys)));
        // Round 0 kills the writer (a replica takes over once its lease lapsed), round 1
        // the other replica.
        let victim = if round == 0 { Victim::Writer } else { Victim::NotWriter };
        let (history, servers) = record_history(launch, &key, 2, victim, round).await;
        drop(servers);
        check_recorded(&format!("postgres, two replicas, round {round} (killed: {victim:?})"), &history);
    }
}
