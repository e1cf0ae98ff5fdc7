//! The JSONL backend against real processes (reliability plan §6 A test 8 and C tests
//! 17–21): kill -9 mid-append, a second writer process, a paused holder, a killed
//! holder, an unlinked lock file, a lock that must not leak into a child process, and
//! creation races between processes. The other process is `berth-crash-child`; the test
//! waits on its output with a deadline and never sleeps to wait for something.

mod jsonl_common;

use berth_core::{Epoch, Error, SessionKey};
use berth_jsonl::format::{self, ScanStatus};
use berth_jsonl::JsonlBackend;
use berth_store::{Access, LogWriter};
use jsonl_common::*;
use rand::{Rng, SeedableRng};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

const CHILD_DEADLINE: Duration = Duration::from_secs(30);

/// A running `berth-crash-child` and the lines it printed.
struct ChildProcess {
    process: std::process::Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl ChildProcess {
    fn spawn(mode: &str, root: &Path, id: &str) -> ChildProcess {
        ChildProcess::spawn_with(mode, root, id, false)
    }

    /// `preallocate`: the child's logs are preallocated (log format version 2), extended
    /// from its first append.
    fn spawn_with(mode: &str, root: &Path, id: &str, preallocate: bool) -> ChildProcess {
        let mut process = Command::new(env!("CARGO_BIN_EXE_berth-crash-child"))
            .args([mode, root.to_str().unwrap(), "t", id])
            .env("BERTH_CRASH_CHILD_PREALLOCATE", if preallocate { "1" } else { "0" })
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = process.stdout.take().unwrap();
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        ChildProcess { stdin: process.stdin.take(), process, lines }
    }

    fn pid(&self) -> i32 {
        self.process.id() as i32
    }

    /// Waits (with a deadline) for the next line starting with `prefix`; returns the rest.
    fn expect(&self, prefix: &str) -> String {
        let deadline = Instant::now() + CHILD_DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return line[prefix.len()..].trim().to_owned(),
                Ok(line) if line.starts_with("error") => panic!("child failed while waiting for {prefix:?}: {line}"),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => panic!("no {prefix:?} from the child within {CHILD_DEADLINE:?}"),
                Err(RecvTimeoutError::Disconnected) => panic!("child exited before printing {prefix:?}"),
            }
        }
    }

    /// The first line of a one-shot child (it exits after it).
    fn outcome(&self) -> String {
        self.lines.recv_timeout(CHILD_DEADLINE).expect("the child reports")
    }

    fn send(&mut self, command: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{command}").unwrap();
        stdin.flush().unwrap();
    }

    fn signal(&self, signal: i32) {
        assert_eq!(unsafe { libc::kill(self.pid(), signal) }, 0);
    }

    /// SIGKILL and reap.
    fn kill(mut self) -> Vec<String> {
        self.signal(libc::SIGKILL);
        self.process.wait().unwrap();
        self.lines.try_iter().collect()
    }

    fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.process.wait().unwrap();
        assert!(status.success(), "{status}");
    }
}

fn create_session(root: &Path, id: &str, events: u64) {
    let runtime = runtime();
    runtime.block_on(async {
        let store = store(&backend(root));
        let handle = store.create(header("t", id)).await.unwrap();
        handle.flush().await.unwrap();
        let batch: Vec<_> = (0..events).map(|seq| message(seq, &format!("e{seq}"))).collect();
        if !batch.is_empty() {
            handle.append(&batch).await.unwrap();
        }
        handle.close().await.unwrap();
    });
}

fn content_of(event: &berth_core::Event) -> String {
    event.data.to_value()["content"].as_str().unwrap().to_owned()
}

#[test]
fn test_08_kill_9_mid_append_loses_nothing_acknowledged() {
    let zero_tails = kill_9_mid_append_rounds(false);
    assert_eq!(zero_tails, 0, "a classic log never carries a zero tail");
}

/// Test 8 on a preallocated log: the children extend it from their first append, so a
/// kill lands during an extent's zero fill, an append into preallocated space, or the
/// tail's give-back; a zero tail the kill leaves is neither data nor damage.
#[test]
fn test_08_kill_9_mid_append_into_a_preallocated_log_loses_nothing_acknowledged() {
    let zero_tails = kill_9_mid_append_rounds(true);
    assert!(zero_tails > 0, "some kills left a preallocated tail");
}

/// 200 rounds of a child appending until killed; returns how many of the scans found a
/// zero tail.
fn kill_9_mid_append_rounds(preallocate: bool) -> u64 {
    let root = tempfile::tempdir().unwrap();
    let backend = JsonlBackend::open(
        root.path(),
        berth_jsonl::JsonlOptions { preallocate, preallocate_after_appends: 0, ..Default::default() },
    )
    .unwrap();
    runtime().block_on(async {
        let store = store(&backend);
        let handle = store.create(header("t", "s")).await.unwrap();
        handle.flush().await.unwrap();
        handle.close().await.unwrap();
    });
    let mut zero_tails = 0;
    let key = key("t", "s");
    let runtime = runtime();
    let mut rng = rand::rngs::StdRng::seed_from_u64(8);
    let mut max_acknowledged: Option<u64> = None;
    let mut last_epoch = Epoch(1);
    let rounds = 200;
    for round in 0..rounds {
        let child = ChildProcess::spawn_with("append-loop", root.path(), "s", preallocate);
        // Half the rounds kill during the appends, half anywhere from start-up on (the
        // write open, torn-tail truncation and epoch bump included).
        if round % 2 == 0 {
            child.expect("ready");
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..=50))); // the fault's timing, not a wait
        let lines = child.kill();
        for line in lines {
            if let Some(seq) = line.strip_prefix("ack ") {
                let seq: u64 = seq.parse().unwrap();
                max_acknowledged = Some(max_acknowledged.map_or(seq, |max| max.max(seq)));
            }
        }
        // What the kill left, before a writer gives a tail back.
        let outcome = format::scan(&std::fs::read(backend.log_path(&key)).unwrap());
        if outcome.zero_tail > 0 {
            zero_tails += 1;
        }
        let (next_seq, epoch) = runtime.block_on(async {
            // The kernel dropped the killed holder's lock: acquire at once.
            let mut writer = backend.open_jsonl_writer(&key).await.unwrap();
            let next_seq = writer.next_seq();
            if next_seq > 0 {
                let last = writer.read(next_seq - 1, 1).await.unwrap();
                assert_eq!(content_of(&last[0]), format!("e{}", next_seq - 1));
            }
            let epoch = writer.epoch();
            writer.release().await.unwrap();
            (next_seq, epoch)
        });
        assert!(epoch > last_epoch, "round {round}: epoch {epoch} after {last_epoch}");
        last_epoch = epoch;
        if let Some(max) = max_acknowledged {
            assert!(next_seq > max, "round {round}: acknowledged seq {max} lost (recovered {next_seq} events)");
        }
        if round % 20 == 0 || round == rounds - 1 {
            let outcome = format::scan(&std::fs::read(backend.log_path(&key)).unwrap());
            assert!(matches!(outcome.status, ScanStatus::Clean | ScanStatus::TornTail { .. }), "{:?}", outcome.status);
            assert_eq!(outcome.events, next_seq);
        }
    }
    assert!(max_acknowledged.is_some_and(|max| max > 100), "the children did append: {max_acknowledged:?}");
    // Every recovered event is the one the children wrote for that seq.
    runtime.block_on(async {
        let store = store(&backend);
        let reader = store.open(&key, Access::Read).await.unwrap();
        let events = reader.read(0, None).await.unwrap();
        for (seq, event) in events.iter().enumerate() {
            assert_eq!(event.seq.get(), seq as u64);
            assert_eq!(content_of(event), format!("e{seq}"));
        }
    });
    zero_tails
}

fn try_open_writer(backend: &JsonlBackend, key: &SessionKey) -> berth_core::Result<Epoch> {
    runtime().block_on(async {
        let mut writer = backend.open_jsonl_writer(key).await?;
        let epoch = writer.epoch();
        writer.release().await?;
        Ok(epoch)
    })
}

/// Waits (up to 1 s, well inside the `sleep 5` it is used on) until process `pid` has no
/// open descriptor for a file under `root` (read from `/proc/<pid>/fd`); returns either
/// way, so the caller's check decides.
fn wait_until_no_descriptor_under(pid: i32, root: &Path) {
    let root = std::fs::canonicalize(root).unwrap();
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return };
        let holds = entries
            .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
            .any(|target| target.starts_with(&root));
        if !holds {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn assert_already_owned(backend: &JsonlBackend, key: &SessionKey, root: &Path) {
    let error = try_open_writer(backend, key).unwrap_err();
    assert!(matches!(error, Error::AlreadyOwned { .. }), "{error}");
    let other = ChildProcess::spawn("try-write", root, key.id.as_str());
    assert_eq!(other.outcome(), "error already_owned");
}

#[test]
fn test_17_second_writer_process_is_refused_and_readers_work() {
    let root = tempfile::tempdir().unwrap();
    create_session(root.path(), "s", 3);
    let backend = backend(root.path());
    let key = key("t", "s");
    let mut holder = ChildProcess::spawn("hold", root.path(), "s");
    holder.expect("held");
    assert_already_owned(&backend, &key, root.path());
    let runtime = runtime();
    runtime.block_on(async {
        let store = store(&backend);
        assert_eq!(store.open(&key, Access::Write).await.unwrap_err().code(), "already_owned");
        let reader = store.open(&key, Access::Read).await.unwrap();
        assert_eq!(reader.read(0, None).await.unwrap().len(), 3);
    });
    assert_eq!(ChildProcess::spawn("read", root.path(), "s").outcome(), "read 3");
    holder.send("append");
    assert_eq!(holder.expect("appended"), "3");
    holder.send("close");
    holder.expect("closed");
    holder.finish();
    try_open_writer(&backend, &key).unwrap();
}

#[test]
fn test_18_paused_holder_keeps_the_lease() {
    let root = tempfile::tempdir().unwrap();
    create_session(root.path(), "s", 1);
    let backend = backend(root.path());
    let key = key("t", "s");
    let mut holder = ChildProcess::spawn("hold", root.path(), "s");
    let held: Vec<u64> = holder.expect("held").split(' ').map(|part| part.parse().unwrap()).collect();
    holder.signal(libc::SIGSTOP);
    for _ in 0..3 {
        assert_already_owned(&backend, &key, root.path());
    }
    holder.signal(libc::SIGCONT);
    holder.send("append");
    assert_eq!(holder.expect("appended"), "1");
    holder.send("close");
    holder.expect("closed");
    holder.finish();
    let epoch = try_open_writer(&backend, &key).unwrap();
    assert_eq!(epoch, Epoch(held[0] + 1), "nobody else held it in between");
    let outcome = format::scan(&std::fs::read(backend.log_path(&key)).unwrap());
    assert_eq!((outcome.status, outcome.events, outcome.last_epoch), (ScanStatus::Clean, 2, Epoch(held[0])));
}

#[test]
fn test_19_killed_holder_frees_the_lease_at_once_with_the_next_epoch() {
    let root = tempfile::tempdir().unwrap();
    create_session(root.path(), "s", 2);
    let backend = backend(root.path());
    let key = key("t", "s");
    let holder = ChildProcess::spawn("hold", root.path(), "s");
    let held: u64 = holder.expect("held").split(' ').next().unwrap().parse().unwrap();
    assert_already_owned(&backend, &key, root.path());
    holder.kill();
    assert_eq!(try_open_writer(&backend, &key).unwrap(), Epoch(held + 1));
}

#[test]
fn test_20_unlinked_lock_file_never_yields_two_holders() {
    let root = tempfile::tempdir().unwrap();
    create_session(root.path(), "s", 1);
    let backend = backend(root.path());
    let key = key("t", "s");
    let mut holder = ChildProcess::spawn("hold", root.path(), "s");
    holder.expect("held");
    let lock = backend.session_dir(&key).join(format::LOCK_FILE);
    std::fs::remove_file(&lock).unwrap();
    assert_already_owned(&backend, &key, root.path());
    // Again, now that a new lock-file inode exists at the path.
    assert!(lock.exists());
    assert_already_owned(&backend, &key, root.path());
    holder.send("append");
    assert_eq!(holder.expect("appended"), "1");
    holder.send("close");
    holder.expect("closed");
    holder.finish();
    try_open_writer(&backend, &key).unwrap();
}

#[test]
fn test_21_lock_is_not_inherited_by_the_holders_children() {
    let root = tempfile::tempdir().unwrap();
    create_session(root.path(), "s", 1);
    let backend = backend(root.path());
    let key = key("t", "s");
    let mut holder = ChildProcess::spawn("hold", root.path(), "s");
    holder.expect("held");
    holder.send("spawn-sleep");
    let sleep_pid: i32 = holder.expect("spawned").parse().unwrap();
    // The spawner may run again before its child has finished `exec`: the kernel wakes a
    // `vfork` parent when the child's new memory is in place, and closes the `O_CLOEXEC`
    // descriptors a moment later. Until then the child shares the lease's open files.
    // Wait that moment out; a descriptor inherited past `exec` never goes, and the
    // takeover below then fails (checked: with `O_CLOEXEC` dropped from the backend's
    // opens, this test fails).
    wait_until_no_descriptor_under(sleep_pid, root.path());
    holder.kill();
    let acquired = try_open_writer(&backend, &key);
    let sleep_alive = unsafe { libc::kill(sleep_pid, 0) } == 0;
    unsafe { libc::kill(sleep_pid, libc::SIGKILL) };
    assert!(sleep_alive, "the holder's child was still running during the takeover");
    acquired.unwrap();
}

#[test]
fn creating_an_existing_id_in_another_process_is_already_exists() {
    let root = tempfile::tempdir().unwrap();
    let backend = backend(root.path());
    let runtime = runtime();
    let store = store(&backend);
    // Materialized and still held here.
    let held = runtime.block_on(async {
        let handle = store.create(header("t", "x")).await.unwrap();
        handle.flush().await.unwrap();
        handle
    });
    assert_eq!(ChildProcess::spawn("create", root.path(), "x").outcome(), "error already_exists");
    runtime.block_on(held.close()).unwrap();
    assert_eq!(ChildProcess::spawn("create", root.path(), "x").outcome(), "error already_exists");
    // Pending here, materialized first by the other process: our publish must not
    // overwrite it.
    let pending = runtime.block_on(store.create(header("t", "y"))).unwrap();
    assert_eq!(ChildProcess::spawn("create", root.path(), "y").outcome(), "created");
    let error = runtime.block_on(pending.append(&[message(0, "mine")])).unwrap_err();
    assert_eq!(error.code(), "already_exists", "{error}");
    assert_eq!(ChildProcess::spawn("read", root.path(), "y").outcome(), "read 0");
}

#[test]
fn a_fresh_instance_sees_only_materialized_sessions() {
    let root = tempfile::tempdir().unwrap();
    let runtime = runtime();
    let store = store(&backend(root.path()));
    let (_pending, _materialized) = runtime.block_on(async {
        let pending = store.create(header("t", "pending")).await.unwrap();
        let materialized = store.create(header("t", "materialized")).await.unwrap();
        materialized.append(&[message(0, "a")]).await.unwrap();
        (pending, materialized)
    });
    let fresh = jsonl_common::store(&backend(root.path()));
    runtime.block_on(async {
        let page =
            fresh.list(&berth_store::ListQuery::tenant(berth_core::TenantId::parse("t").unwrap())).await.unwrap();
        let ids: Vec<String> = page.items.iter().map(|item| item.header.id.to_string()).collect();
        assert_eq!(ids, ["materialized"]);
        assert!(fresh.stat(&key("t", "pending")).await.unwrap().is_none());
    });
    assert_eq!(ChildProcess::spawn("read", root.path(), "pending").outcome(), "error not_found");
    assert_eq!(ChildProcess::spawn("read", root.path(), "materialized").outcome(), "read 1");
}

/// Opens the session for writing after a child stopped, checks that every recovered
/// event is the one the children wrote for its seq (`e<seq>`), appends the next one if
/// asked (as a child would), and returns the next seq and the writer's epoch.
async fn reopen_and_check(backend: &JsonlBackend, key: &SessionKey, label: &str, append_next: bool) -> (u64, Epoch) {
    let mut writer = backend.open_jsonl_writer(key).await.unwrap();
    let mut next_seq = writer.next_seq();
    let events = writer.read(0, next_seq).await.unwrap();
    for (seq, event) in events.iter().enumerate() {
        assert_eq!(content_of(event), format!("e{seq}"), "{label}");
    }
    if append_next {
        let data = serde_json::json!({ "content": format!("e{next_seq}") });
        let event = berth_core::Event::new(next_seq, "user/message", berth_core::Timestamp(1_000), data).unwrap();
        writer.append(&[event]).await.unwrap();
        next_seq += 1;
    }
    let epoch = writer.epoch();
    writer.release().await.unwrap();
    (next_seq, epoch)
}

/// Reliability test 9: a deterministic kill at the N-th write syscall. The append-loop
/// child runs under `strace -e inject=pwrite64:signal=SIGKILL:when=N`, so it dies as it
/// enters its N-th `pwrite64` — the epoch file's write, the publish, or the write of one
/// batch — for every N in turn. After each, every acknowledged event is there, the log
/// scans clean (or with a torn tail only), the content of every seq is the child's, and
/// a new writer acquires at once with a higher epoch.
#[test]
fn test_09_kill_at_the_nth_write_syscall_loses_nothing_acknowledged() {
    // `.ci/run` installs strace when it is missing; a machine without it cannot run this.
    let strace = ["/usr/bin/strace", "/bin/strace"].into_iter().find(|path| Path::new(path).exists());
    let strace = strace.expect("strace is needed for reliability test 9 (`.ci/run` installs it)");
    let root = tempfile::tempdir().unwrap();
    create_session(root.path(), "s", 0);
    let backend = backend(root.path());
    let key = key("t", "s");
    let runtime = runtime();
    let mut max_acknowledged: Option<u64> = None;
    let mut last_epoch = Epoch(1);
    let mut killed = 0;
    for n in 1..=40u32 {
        let output = Command::new(strace)
            .args(["-f", "-qq", "-o", "/dev/null", "-e", &format!("inject=pwrite64:signal=SIGKILL:when={n}")])
            .arg(env!("CARGO_BIN_EXE_berth-crash-child"))
            .args(["append-loop", root.path().to_str().unwrap(), "t", "s"])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(output.status.signal(), Some(libc::SIGKILL), "N = {n}: the child dies at its N-th pwrite64");
        killed += 1;
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            if let Some(seq) = line.strip_prefix("ack ") {
                let seq: u64 = seq.parse().unwrap();
                max_acknowledged = Some(max_acknowledged.map_or(seq, |max| max.max(seq)));
            }
        }
        let bytes = std::fs::read(backend.log_path(&key)).unwrap();
        let scanned = format::scan(&bytes);
        assert!(
            matches!(scanned.status, ScanStatus::Clean | ScanStatus::TornTail { .. }),
            "N = {n}: {:?}",
            scanned.status
        );
        let (next_seq, epoch) = runtime.block_on(reopen_and_check(&backend, &key, &format!("N = {n}"), false));
        assert!(epoch > last_epoch, "N = {n}: epoch {epoch} after {last_epoch}");
        last_epoch = epoch;
        if let Some(max) = max_acknowledged {
            assert!(next_seq > max, "N = {n}: acknowledged seq {max} lost (recovered {next_seq} events)");
        }
    }
    assert_eq!(killed, 40);
    assert!(max_acknowledged.is_some_and(|max| max > 10), "the children did append: {max_acknowledged:?}");
}

/// Reliability test 13: a real short write from the kernel. The append-loop child runs
/// with `RLIMIT_FSIZE` a few KiB past the log's current end and `SIGXFSZ` ignored, so the
/// kernel cuts the write that crosses the limit short (and refuses the next one with
/// `EFBIG`). The append fails with an error and is never acknowledged; the writer rolls
/// the file back to its last durable length, so the log scans clean — no partial record
/// — and holds every acknowledged event; a writer without the limit appends after it.
#[test]
fn test_13_real_short_write_from_rlimit_fsize_leaves_nothing_partial() {
    use std::os::unix::process::CommandExt;
    let root = tempfile::tempdir().unwrap();
    create_session(root.path(), "s", 0);
    let backend = backend(root.path());
    let key = key("t", "s");
    let runtime = runtime();
    for round in 0..5u64 {
        let size = std::fs::metadata(backend.log_path(&key)).unwrap().len();
        // Records are ~150–600 bytes, so the limit lands inside one, at a varying place.
        let limit = size + 2_000 + round * 337;
        let mut command = Command::new(env!("CARGO_BIN_EXE_berth-crash-child"));
        command
            .args(["append-loop", root.path().to_str().unwrap(), "t", "s"])
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls (setrlimit, signal) between fork and exec.
        unsafe {
            command.pre_exec(move || {
                let rlimit = libc::rlimit { rlim_cur: limit, rlim_max: limit };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &rlimit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                Ok(())
            });
        }
        let output = command.output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(!output.status.success(), "round {round}: the child stops at the limit: {stdout}");
        assert!(stdout.lines().any(|line| line.starts_with("error ")), "round {round}: {stdout}");
        let max_acknowledged =
            stdout.lines().filter_map(|line| line.strip_prefix("ack ")).map(|seq| seq.parse::<u64>().unwrap()).max();
        let bytes = std::fs::read(backend.log_path(&key)).unwrap();
        assert!(bytes.len() as u64 <= limit, "round {round}");
        let scanned = format::scan(&bytes);
        assert_eq!(scanned.status, ScanStatus::Clean, "round {round}: the short write was rolled back");
        let (next_seq, _) = runtime.block_on(reopen_and_check(&backend, &key, &format!("round {round}"), true));
        let max = max_acknowledged.expect("the child acknowledged appends before the limit");
        assert!(next_seq > max + 1, "round {round}: acknowledged seq {max} lost ({next_seq} events now)");
    }
}
