//! Two real OS processes doing compare-and-set on the same session's metadata in one
//! SQLite catalog file: exactly one wins each round.
//!
//! The children are this test binary re-executed with `cas_child` selected and the
//! catalog path in an environment variable. The parent drives rounds over the
//! children's stdin (`go <round>`) and reads their answers from stdout
//! (`berth-cas-child: won|lost …`); other output (the test harness's own) is ignored.

use berth_catalog::Catalog;
use berth_core::{Error, Revision, SessionKey};
use berth_sqlite::{SqliteCatalog, CATALOG_FILE_NAME};
use berth_testkit::catalog_conformance::{sample_record, session_id, tenant};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const CHILD_CATALOG_ENV: &str = "BERTH_CAS_CHILD_CATALOG";
const CHILD_NAME_ENV: &str = "BERTH_CAS_CHILD_NAME";
const ANSWER_PREFIX: &str = "berth-cas-child: ";
const ROUNDS: u64 = 100;
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

fn contended_key() -> SessionKey {
    SessionKey::new(tenant("t-processes"), session_id("contended"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// The child role. As an ordinary test (no environment variable) it does nothing.
#[test]
fn cas_child() {
    let Ok(path) = std::env::var(CHILD_CATALOG_ENV) else {
        return;
    };
    let name = std::env::var(CHILD_NAME_ENV).expect("child name");
    let runtime = runtime();
    let catalog = SqliteCatalog::open(&path).expect("child open");
    let base = runtime.block_on(catalog.get(&contended_key())).expect("get").expect("seeded record");
    let answer = |text: String| {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{ANSWER_PREFIX}{text}").expect("answer");
        stdout.flush().expect("flush");
    };
    answer("ready".into());
    for line in std::io::stdin().lock().lines() {
        let line = line.expect("stdin");
        let Some(round) = line.strip_prefix("go ").and_then(|round| round.parse::<u64>().ok()) else {
            break;
        };
        let mut next = base.clone();
        next.revision = Revision(round + 1);
        next.title = Some(format!("round {round} by {name}"));
        match runtime.block_on(catalog.update(&next, Revision(round))) {
            Ok(()) => answer(format!("won {round}")),
            Err(Error::RevisionConflict { expected, actual }) => answer(format!("lost {round} {expected} {actual}")),
            Err(error) => answer(format!("error {round} {}", error.code())),
        }
    }
}

/// A started child, killed if the test fails before it exits.
struct ChildProcess {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn spawn_child(path: &Path, index: usize, answers: mpsc::Sender<(usize, String)>) -> ChildProcess {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["cas_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_CATALOG_ENV, path)
        .env(CHILD_NAME_ENV, format!("child-{index}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("child stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // The harness may print "test cas_child ... " on the same line first.
            if let Some(start) = line.find(ANSWER_PREFIX) {
                let answer = &line[start + ANSWER_PREFIX.len()..];
                if answers.send((index, answer.to_owned())).is_err() {
                    return;
                }
            }
        }
    });
    let stdin = child.stdin.take();
    ChildProcess { child, stdin }
}

fn tell(child: &mut ChildProcess, line: &str) {
    let stdin = child.stdin.as_mut().expect("child stdin");
    writeln!(stdin, "{line}").expect("write to child");
    stdin.flush().expect("flush to child");
}

/// Both children's answers for one round, indexed by child.
fn collect_round(answers: &mpsc::Receiver<(usize, String)>, round: u64) -> [String; 2] {
    let mut round_answers = [None, None];
    while round_answers.iter().any(Option::is_none) {
        let (index, answer) = answers
            .recv_timeout(ANSWER_TIMEOUT)
            .unwrap_or_else(|_| panic!("round {round}: a child did not answer (it died or hung)"));
        assert!(round_answers[index].is_none(), "round {round}: child-{index} answered twice");
        round_answers[index] = Some(answer);
    }
    round_answers.map(|answer| answer.expect("answer"))
}

#[test]
fn two_processes_cas_on_one_session_have_exactly_one_winner_per_round() {
    if std::env::var(CHILD_CATALOG_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(CATALOG_FILE_NAME);
    let runtime = runtime();
    let catalog = SqliteCatalog::open(&path).expect("open");
    let record = sample_record("t-processes", "contended", "alice", 1_000);
    runtime.block_on(catalog.insert(&record)).expect("seed");

    let (sender, answers) = mpsc::channel();
    let mut children = [spawn_child(&path, 0, sender.clone()), spawn_child(&path, 1, sender)];
    assert_eq!(collect_round(&answers, 0), ["ready", "ready"]);

    let mut wins = [0u64; 2];
    for round in 0..ROUNDS {
        // Alternate who hears "go" first, so neither child is favoured by the parent.
        let first = (round % 2) as usize;
        tell(&mut children[first], &format!("go {round}"));
        tell(&mut children[1 - first], &format!("go {round}"));
        let round_answers = collect_round(&answers, round);
        let winners: Vec<usize> = (0..2).filter(|&index| round_answers[index] == format!("won {round}")).collect();
        assert_eq!(winners.len(), 1, "round {round}: {round_answers:?}");
        let winner = winners[0];
        wins[winner] += 1;
        let loser_answer = &round_answers[1 - winner];
        assert_eq!(loser_answer, &format!("lost {round} {round} {}", round + 1), "round {round}");
        let stored = runtime.block_on(catalog.get(&contended_key())).expect("get").expect("stored");
        assert_eq!(stored.revision, Revision(round + 1));
        assert_eq!(stored.title, Some(format!("round {round} by child-{winner}")));
    }
    for child in &mut children {
        child.stdin.take();
        let status = child.child.wait().expect("child exit");
        assert!(status.success(), "child failed: {status}");
    }
    let stored = runtime.block_on(catalog.get(&contended_key())).expect("get").expect("stored");
    assert_eq!(stored.revision, Revision(ROUNDS));
    eprintln!("rounds won: child-0 {}, child-1 {}", wins[0], wins[1]);
}
