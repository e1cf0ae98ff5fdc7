//! Power-loss simulation of the JSONL backend over `SimFs` (reliability plan §6 A, tests
//! 6, 7 and 10; failure model in §1.1), and the I/O-error sweep (§6 B, test 16).
//!
//! A seeded workload runs on a `LogStore` over `JsonlBackend` over `SimFs`, once to count
//! its file operations K, then once per crash point N in 1..=K with the file system
//! frozen at operation N (that operation and every later one fail with `EIO`). For each
//! crash point, `crash_image(seed)` keeps only durable directory entries and gives every
//! unsynced write an independent fate (applied, dropped, torn at 512 B / 4 KiB, zero- or
//! garbage-filled); a fresh backend then opens the image and the invariants are checked:
//!
//! - every session whose create was acknowledged exists (read open, listing);
//! - a session that exists has its header and at least its first batch (publication is
//!   atomic), and its events are a prefix of what was attempted that contains every
//!   acknowledged event (acknowledged ⊆ recovered ⊆ attempted, content equal);
//! - `fsck` finds no corruption (a torn tail is fine), no operation returns `Corrupt`;
//! - a write open succeeds (truncating any torn tail), its epoch is above every
//!   acknowledged epoch, the stored epoch never went back, leftover temp files are gone
//!   afterwards, and one more append is read back after reopening;
//! - a session that does not exist can be created again (its leftovers are reused).
//!
//! Numbers (debug build, 2 cores, measured): test 6 sweeps 4 workload seeds (3 sessions,
//! 11–14 batches of 1–5 events of up to 6 KiB, one reopen per session), 192–196 crash
//! points each (776 in all); a crash point whose image has unsynced file changes is
//! checked with 16 image seeds, one without (its image is deterministic) with 1: about
//! 1,440 images, ~360 of them with a torn tail to truncate, in ~6.5 s. The plan asks for
//! 200 seeds in CI; raise `WORKLOAD_SEEDS` / `IMAGE_SEEDS` (or set
//! `BERTH_POWER_LOSS_SEEDS`) for a longer run. Test 7 runs the sweep of workload seed 0
//! (196 crash points, 1 image each) twice with directory fsyncs turned into no-ops (all
//! of them; only the session directory's) and must find violations (it finds 161 of 196
//! each), ~1.6 s. Test 10 crashes before each of the 85 operations of a create and two
//! epoch replacements, with 24 image seeds where the image is not deterministic (131
//! images), ~0.8 s.
//!
//! The last test covers a bug this sweep found and `ensure_dir` now fixes (an
//! acknowledged session lost when a process crash between `mkdir` and the parent's
//! `fsync` precedes a power loss); see its doc comment.
//!
//! Run: `cargo nextest run -p berth-testkit --test jsonl_power_loss`.

use berth_core::{Epoch, Error, Event, SessionHeader, SessionKey};
use berth_jsonl::format::{self, EPOCH_FILE, EPOCH_TEMP_FILE, LOG_FILE, LOG_TEMP_PREFIX};
use berth_jsonl::fsck::{self, SessionStatus};
use berth_jsonl::{Durability, JsonlBackend, JsonlOptions};
use berth_store::{Access, ListQuery, LogStore, SessionHandle};
use berth_testkit::conformance::fixtures::{bulky, header, marker, tenant};
use berth_testkit::fault_fs::FsOp;
use berth_testkit::sim_fs::{Freeze, SimFs, SkipDirSyncs, SplitMix64};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const ROOT: &str = "/sim/data";
/// Workload seeds of test 6.
const WORKLOAD_SEEDS: u64 = 4;
/// Image seeds per crash point that has unsynced file changes.
const IMAGE_SEEDS: u64 = 16;

fn image_seeds() -> u64 {
    std::env::var("BERTH_POWER_LOSS_SEEDS").ok().and_then(|seeds| seeds.parse().ok()).unwrap_or(IMAGE_SEEDS)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn open_store(fs: &SimFs, preallocate: bool) -> Result<(JsonlBackend, LogStore), Error> {
    let options = JsonlOptions {
        durability: Durability::PerAppend,
        fs: fs.shared(),
        preallocate,
        // From the first append, so that every append of the workload after a create
        // goes into preallocated space.
        preallocate_after_appends: 0,
    };
    let backend = JsonlBackend::open(ROOT, options)?;
    let store = LogStore::new(Arc::new(backend.clone()));
    Ok((backend, store))
}

// ---------------------------------------------------------------------------------------
// The workload

/// One step of a workload.
#[derive(Clone, Debug)]
enum Step {
    /// Create session `s` and materialize it: with its first batch (an append), or with a
    /// flush when the first batch is empty.
    Create(usize),
    /// Append the next batch of session `s`.
    Append(usize),
    /// Close session `s` and open it for writing again (an epoch replacement).
    Reopen(usize),
    Close(usize),
    /// Every open write handle has been idle long enough: the backend's idle sweep gives
    /// their zero tails back (`JsonlBackend::give_back_idle_tails`, with a time ahead).
    Idle,
}

#[derive(Clone, Debug)]
struct SessionPlan {
    header: SessionHeader,
    /// The batch the create publishes (may be empty).
    first: Vec<Event>,
    /// The later batches, in order.
    batches: Vec<Vec<Event>>,
}

impl SessionPlan {
    fn key(&self) -> SessionKey {
        self.header.key()
    }

    /// Every event the workload tries to store, in order.
    fn attempted(&self) -> Vec<Event> {
        self.first.iter().chain(self.batches.iter().flatten()).cloned().collect()
    }
}

#[derive(Clone, Debug)]
struct Workload {
    sessions: Vec<SessionPlan>,
    steps: Vec<Step>,
    /// Logs created preallocated (log format version 2), extended from the first append.
    preallocate: bool,
}

/// What the workload was told succeeded.
#[derive(Clone, Debug, Default)]
struct Acked {
    created: bool,
    /// Events whose append (or create) returned `Ok`.
    events: usize,
    /// The largest epoch of a write handle that was returned (create or write open).
    epoch: Option<Epoch>,
}

fn event(seq: u64, rng: &mut SplitMix64) -> Event {
    match rng.below(3) {
        0 => marker(seq),
        // Up to ~6 KiB, so that batches straddle 512-byte and 4 KiB tear points.
        _ => bulky(seq, 10 + rng.below(6_000) as usize),
    }
}

fn batch(next_seq: &mut u64, rng: &mut SplitMix64) -> Vec<Event> {
    let count = 1 + rng.below(5);
    (0..count)
        .map(|_| {
            let event = event(*next_seq, rng);
            *next_seq += 1;
            event
        })
        .collect()
}

/// Test 6's workload: three sessions (one created by a flush, two by a first batch),
/// each with 3–4 batches of 1–5 events, interleaved, one reopen for writing each, closed.
fn seeded_workload(seed: u64) -> Workload {
    let mut rng = SplitMix64::new(seed);
    let mut sessions = Vec::new();
    let mut queue = Vec::new();
    for index in 0..3 {
        let mut next_seq = 0;
        let first = if index == 0 { Vec::new() } else { batch(&mut next_seq, &mut rng) };
        let count = 3 + rng.below(2) as usize;
        let batches = (0..count).map(|_| batch(&mut next_seq, &mut rng)).collect::<Vec<_>>();
        let reopen_after = rng.below(count as u64) as usize;
        let mut own = vec![Step::Create(index)];
        for batch_index in 0..count {
            if batch_index == reopen_after {
                own.push(Step::Reopen(index));
            }
            own.push(Step::Append(index));
        }
        own.push(Step::Close(index));
        sessions.push(SessionPlan { header: header(&format!("s{index}")), first, batches });
        queue.push(own.into_iter().collect::<std::collections::VecDeque<_>>());
    }
    let mut steps = Vec::new();
    while queue.iter().any(|own| !own.is_empty()) {
        let candidates: Vec<usize> = (0..queue.len()).filter(|index| !queue[*index].is_empty()).collect();
        let pick = candidates[rng.below(candidates.len() as u64) as usize];
        steps.push(queue[pick].pop_front().expect("non-empty"));
    }
    Workload { sessions, steps, preallocate: false }
}

/// Runs `workload` on `fs` until the first failure (after which a frozen file system
/// fails everything anyway) and returns what was acknowledged.
async fn run_workload(fs: &SimFs, workload: &Workload) -> Vec<Acked> {
    let mut acked = vec![Acked::default(); workload.sessions.len()];
    let Ok((backend, store)) = open_store(fs, workload.preallocate) else {
        return acked;
    };
    let mut handles: Vec<Option<SessionHandle>> = vec![None; workload.sessions.len()];
    let mut next_batch = vec![0usize; workload.sessions.len()];
    for step in &workload.steps {
        if matches!(step, Step::Idle) {
            backend.give_back_idle_tails(std::time::Instant::now() + berth_jsonl::IDLE_GIVE_BACK);
            continue;
        }
        let outcome = run_step(&store, workload, step, &mut handles, &mut next_batch, &mut acked).await;
        if outcome.is_err() {
            break;
        }
    }
    for handle in handles.into_iter().flatten() {
        let _ = handle.close().await;
    }
    acked
}

async fn run_step(
    store: &LogStore,
    workload: &Workload,
    step: &Step,
    handles: &mut [Option<SessionHandle>],
    next_batch: &mut [usize],
    acked: &mut [Acked],
) -> Result<(), Error> {
    match *step {
        Step::Create(s) => {
            let plan = &workload.sessions[s];
            let handle = store.create(plan.header.clone()).await?;
            handles[s] = Some(handle.clone());
            if plan.first.is_empty() {
                handle.flush().await?;
            } else {
                handle.append(&plan.first).await?;
            }
            acked[s].created = true;
            acked[s].events = plan.first.len();
            acked[s].epoch = handle.epoch().max(acked[s].epoch);
        }
        Step::Append(s) => {
            let batch = &workload.sessions[s].batches[next_batch[s]];
            next_batch[s] += 1;
            let handle = handles[s].as_ref().expect("created before appending");
            handle.append(batch).await?;
            acked[s].events += batch.len();
        }
        Step::Reopen(s) => {
            let handle = handles[s].take().expect("created before reopening");
            handle.close().await?;
            let handle = store.open(&workload.sessions[s].key(), Access::Write).await?;
            acked[s].epoch = handle.epoch().max(acked[s].epoch);
            handles[s] = Some(handle);
        }
        Step::Close(s) => {
            let handle = handles[s].take().expect("created before closing");
            handle.close().await?;
        }
        Step::Idle => {}
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The invariants

/// Checks one crash image; returns the first violation, or how many sessions had a torn
/// tail that the write open found (and the first append truncated).
async fn check_image(image: &SimFs, workload: &Workload, acked: &[Acked]) -> Result<(u64, u64), String> {
    let mut torn_tails = 0;
    // What the crash left, before anything touches it.
    let reports = fsck::check_root_with(image, Path::new(ROOT)).map_err(|error| format!("fsck failed: {error}"))?;
    let mut zero_tails = 0;
    for report in &reports {
        if !matches!(report.status, SessionStatus::Ok { .. } | SessionStatus::TornTail { .. }) {
            return Err(format!("fsck: {} is {:?}", report.key, report.status));
        }
        let path = Path::new(ROOT).join(&report.artifact);
        let scanned = fsck::scan_log(image, &path).map_err(|error| format!("{}: scan: {error}", report.key))?;
        if let (true, SessionStatus::TornTail { committed_len, .. }) = (workload.preallocate, &report.status) {
            // Only written bytes can be torn: in a preallocated log (all of this
            // workload's), a tail of zeros alone is preallocated space.
            let bytes = image.read_file(&path).map_err(|error| format!("{}: read: {error}", report.key))?;
            let after = usize::try_from(*committed_len).expect("fits");
            if bytes[after..].iter().all(|byte| *byte == 0) {
                return Err(format!("{}: a zero tail reported as torn", report.key));
            }
        }
        if scanned.zero_tail > 0 {
            if !workload.preallocate {
                return Err(format!("{}: a zero tail in a log created without preallocation", report.key));
            }
            zero_tails += 1;
        }
    }
    let (backend, store) =
        open_store(image, workload.preallocate).map_err(|error| format!("opening the data root: {error}"))?;
    let mut query = ListQuery::tenant(tenant());
    query.limit = berth_core::limits::PAGE_SIZE_MAX;
    let listed: Vec<String> = store
        .list(&query)
        .await
        .map_err(|error| format!("list: {error}"))?
        .items
        .iter()
        .map(|stat| stat.header.id.to_string())
        .collect();
    for (plan, acked) in workload.sessions.iter().zip(acked) {
        let key = plan.key();
        let stored_epoch = durable_epoch(image, &backend, &key)?;
        let reader = match store.open(&key, Access::Read).await {
            Ok(reader) => reader,
            Err(Error::NotFound { .. }) => {
                if acked.created {
                    return Err(format!("{key}: acknowledged create lost (session missing)"));
                }
                if listed.contains(&key.id.to_string()) {
                    return Err(format!("{key}: listed but does not exist"));
                }
                check_recreate(&store, plan).await?;
                continue;
            }
            Err(error) => return Err(format!("{key}: read open failed: {error}")),
        };
        if let Some(epoch) = acked.epoch {
            // An acknowledged write handle made its epoch durable first (in the epoch
            // file, or, for the creating writer, in the published log).
            if stored_epoch < epoch {
                return Err(format!("{key}: durable epoch {stored_epoch} < acknowledged epoch {epoch}"));
            }
        }
        if reader.header() != &plan.header {
            return Err(format!("{key}: header differs"));
        }
        let recovered = reader.read(0, None).await.map_err(|error| format!("{key}: read failed: {error}"))?;
        reader.close().await.map_err(|error| format!("{key}: closing the reader: {error}"))?;
        let attempted = plan.attempted();
        if recovered.len() < acked.events {
            return Err(format!("{key}: {} events recovered, {} acknowledged", recovered.len(), acked.events));
        }
        if recovered.len() < plan.first.len() {
            return Err(format!("{key}: exists with {} events, first batch has {}", recovered.len(), plan.first.len()));
        }
        if recovered.len() > attempted.len() || recovered[..] != attempted[..recovered.len()] {
            return Err(format!("{key}: recovered events are not a prefix of the attempted ones"));
        }
        if !listed.contains(&key.id.to_string()) {
            return Err(format!("{key}: exists but is not listed"));
        }
        // The write path: torn tails truncated, epoch above everything acknowledged.
        let writer = store.open(&key, Access::Write).await.map_err(|error| format!("{key}: write open: {error}"))?;
        if writer.recovery().is_some() {
            torn_tails += 1;
        }
        let epoch = writer.epoch().ok_or_else(|| format!("{key}: write handle without an epoch"))?;
        if epoch <= stored_epoch || acked.epoch.is_some_and(|acked| epoch <= acked) {
            return Err(format!(
                "{key}: epoch {epoch} after recovery does not exceed {stored_epoch} / {:?}",
                acked.epoch
            ));
        }
        if writer.next_seq() != recovered.len() as u64 {
            return Err(format!("{key}: writer next seq {} != {} recovered", writer.next_seq(), recovered.len()));
        }
        let next = marker(recovered.len() as u64);
        writer.append(std::slice::from_ref(&next)).await.map_err(|error| format!("{key}: append: {error}"))?;
        writer.close().await.map_err(|error| format!("{key}: close: {error}"))?;
        let leftovers: Vec<String> = image
            .list_dir(backend.session_dir(&key))
            .map_err(|error| format!("{key}: listing the session directory: {error}"))?
            .into_iter()
            .filter_map(|name| name.into_string().ok())
            .filter(|name| name.starts_with(LOG_TEMP_PREFIX) || name == EPOCH_TEMP_FILE)
            .collect();
        if !leftovers.is_empty() {
            return Err(format!("{key}: temp files left after a write open: {leftovers:?}"));
        }
        let reader = store.open(&key, Access::Read).await.map_err(|error| format!("{key}: reopen: {error}"))?;
        let after = reader.read(0, None).await.map_err(|error| format!("{key}: read after append: {error}"))?;
        reader.close().await.map_err(|error| format!("{key}: closing the reader: {error}"))?;
        if after.len() != recovered.len() + 1
            || after.last() != Some(&next)
            || after[..recovered.len()] != recovered[..]
        {
            return Err(format!("{key}: the append after recovery is not read back"));
        }
    }
    Ok((torn_tails, zero_tails))
}

/// The epoch a new writer must exceed: the larger of `session.epoch` and the largest
/// epoch on a whole line of the log (§5 of docs/reference/storage-format.md), 0 if neither exists.
fn durable_epoch(image: &SimFs, backend: &JsonlBackend, key: &SessionKey) -> Result<Epoch, String> {
    let stored = stored_epoch(image, backend, key)?;
    let log = match image.read_file(backend.session_dir(key).join(LOG_FILE)) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(stored),
        Err(error) => return Err(format!("{key}: reading the log: {error}")),
    };
    let largest = log
        .split_inclusive(|byte| *byte == b'\n')
        .filter(|line| line.ends_with(b"\n"))
        .filter_map(|line| serde_json::from_slice::<serde_json::Value>(line).ok())
        .filter_map(|record| record["epoch"].as_u64())
        .max()
        .unwrap_or(0);
    Ok(stored.max(Epoch(largest)))
}

/// The epoch in `session.epoch` of the image (0 if absent).
fn stored_epoch(image: &SimFs, backend: &JsonlBackend, key: &SessionKey) -> Result<Epoch, String> {
    match image.read_file(backend.session_dir(key).join(EPOCH_FILE)) {
        Ok(bytes) => format::decode_epoch_record(&bytes).ok_or_else(|| format!("{key}: damaged epoch file")),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Epoch(0)),
        Err(error) => Err(format!("{key}: reading the epoch file: {error}")),
    }
}

/// A session that does not exist after the crash can be created again, over whatever
/// its crashed creation left behind.
async fn check_recreate(store: &LogStore, plan: &SessionPlan) -> Result<(), String> {
    let key = plan.key();
    let handle = store.create(plan.header.clone()).await.map_err(|error| format!("{key}: re-create: {error}"))?;
    let materialized = if plan.first.is_empty() { handle.flush().await } else { handle.append(&plan.first).await };
    materialized.map_err(|error| format!("{key}: re-create's first write: {error}"))?;
    handle.close().await.map_err(|error| format!("{key}: close after re-create: {error}"))?;
    let reader = store.open(&key, Access::Read).await.map_err(|error| format!("{key}: open re-created: {error}"))?;
    let events = reader.read(0, None).await.map_err(|error| format!("{key}: read re-created: {error}"))?;
    reader.close().await.map_err(|error| format!("{key}: closing the reader: {error}"))?;
    if events != plan.first {
        return Err(format!("{key}: re-created session holds {} events, not its first batch", events.len()));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The sweep

#[derive(Debug, Default)]
struct Sweep {
    crash_points: u64,
    images: u64,
    /// `(N, image seed, violation)`.
    violations: Vec<(u64, u64, String)>,
    /// Images in which a leftover temp log survived the crash.
    leftover_temp_logs: u64,
    /// Sessions whose write open after the crash found a torn tail.
    torn_tails: u64,
    /// Sessions whose log the crash left with a preallocated zero tail (not torn).
    zero_tails: u64,
}

/// Runs `workload` once to count its operations K, then crashes it at every operation
/// 1..=K (frozen there) and checks `image_seeds` images per crash point (1 when the image
/// is deterministic). Two lanes, one per core. `mutate` is applied to every fresh file
/// system before the workload runs.
fn sweep(workload: &Workload, image_seeds: u64, mutate: &(dyn Fn(&SimFs) + Sync), stop_at_first: bool) -> Sweep {
    let fs = SimFs::with_root("/sim");
    mutate(&fs);
    let acked = runtime().block_on(run_workload(&fs, workload));
    assert!(acked.iter().all(|acked| acked.created), "the uncrashed workload completes");
    let total = fs.ops();
    let lanes: Vec<Sweep> = std::thread::scope(|scope| {
        let lanes: Vec<_> = (0..2u64)
            .map(|lane| {
                scope.spawn(move || {
                    let runtime = runtime();
                    let mut result = Sweep::default();
                    for n in (1 + lane..=total).step_by(2) {
                        let fs = SimFs::with_root("/sim");
                        mutate(&fs);
                        fs.freeze(Freeze::AtOp(n));
                        let acked = runtime.block_on(run_workload(&fs, workload));
                        assert!(fs.is_frozen(), "crash point {n} of {total} reached");
                        result.crash_points += 1;
                        let seeds = if fs.pending_changes() == 0 { 1 } else { image_seeds };
                        for seed in 0..seeds {
                            let image = fs.crash_image(seed);
                            result.images += 1;
                            if has_leftover_temp_log(&image, workload) {
                                result.leftover_temp_logs += 1;
                            }
                            match runtime.block_on(check_image(&image, workload, &acked)) {
                                Ok((torn_tails, zero_tails)) => {
                                    result.torn_tails += torn_tails;
                                    result.zero_tails += zero_tails;
                                }
                                Err(violation) => {
                                    result.violations.push((n, seed, violation));
                                    if stop_at_first {
                                        return result;
                                    }
                                }
                            }
                        }
                    }
                    result
                })
            })
            .collect();
        lanes.into_iter().map(|lane| lane.join().expect("sweep lane panicked")).collect()
    });
    let mut result = Sweep::default();
    for lane in lanes {
        result.crash_points += lane.crash_points;
        result.images += lane.images;
        result.leftover_temp_logs += lane.leftover_temp_logs;
        result.torn_tails += lane.torn_tails;
        result.zero_tails += lane.zero_tails;
        result.violations.extend(lane.violations);
    }
    result.violations.sort_by_key(|(n, seed, _)| (*n, *seed));
    result
}

fn session_dir(key: &SessionKey) -> PathBuf {
    Path::new(ROOT)
        .join("tenants")
        .join(format::encode_segment(key.tenant.as_str()))
        .join("sessions")
        .join(format::encode_segment(key.id.as_str()))
}

fn has_leftover_temp_log(image: &SimFs, workload: &Workload) -> bool {
    workload.sessions.iter().any(|plan| {
        image.list_dir(session_dir(&plan.key())).is_ok_and(|names| {
            names.iter().any(|name| name.to_str().is_some_and(|name| name.starts_with(LOG_TEMP_PREFIX)))
        })
    })
}

fn report(what: &str, sweep: &Sweep) {
    eprintln!(
        "{what}: {} crash points, {} images, {} with a leftover temp log, {} torn tails truncated, {} zero tails, {} violations",
        sweep.crash_points,
        sweep.images,
        sweep.leftover_temp_logs,
        sweep.torn_tails,
        sweep.zero_tails,
        sweep.violations.len()
    );
}

// ---------------------------------------------------------------------------------------
// Tests

#[test]
fn test_06_power_loss_at_every_operation_keeps_everything_acknowledged() {
    let seeds = image_seeds();
    for workload_seed in 0..WORKLOAD_SEEDS {
        let workload = seeded_workload(workload_seed);
        let result = sweep(&workload, seeds, &|_| {}, true);
        report(&format!("test 6, workload seed {workload_seed}"), &result);
        if let Some((n, seed, violation)) = result.violations.first() {
            panic!("workload seed {workload_seed}, crash at operation {n}, image seed {seed}: {violation}");
        }
        assert!(result.crash_points > 100, "the workload has a useful number of crash points");
        assert!(result.torn_tails > 0, "the images include torn tails");
    }
}

/// Test 6 on preallocated logs (log format version 2, extended from a handle's first
/// append): a crash at every operation — during an extent's zero fill or its sync, at
/// the write or the `fdatasync` of an append into preallocated space, during the tail's
/// give-back at close — keeps everything acknowledged, and a zero tail is never
/// reported as damage nor copied aside as a torn tail.
#[test]
fn test_06_power_loss_on_preallocated_logs_keeps_everything_acknowledged() {
    let seeds = image_seeds();
    for workload_seed in 0..2 {
        let workload = Workload { preallocate: true, ..seeded_workload(workload_seed) };
        // The uncrashed run extends logs: more writes to the logs than appends.
        let fs = SimFs::with_root("/sim");
        runtime().block_on(run_workload(&fs, &workload));
        let appends = workload.steps.iter().filter(|step| matches!(step, Step::Append(_))).count();
        let on_logs =
            |kind: FsOp| fs.op_log().iter().filter(|(op, path)| *op == kind && path.ends_with(LOG_FILE)).count();
        assert!(on_logs(FsOp::WriteAt) > appends, "extents were preallocated: {} writes", on_logs(FsOp::WriteAt));
        assert!(on_logs(FsOp::SetLen) >= workload.sessions.len(), "tails given back at close");
        let result = sweep(&workload, seeds, &|_| {}, true);
        report(&format!("test 6 preallocated, workload seed {workload_seed}"), &result);
        if let Some((n, seed, violation)) = result.violations.first() {
            panic!("workload seed {workload_seed}, crash at operation {n}, image seed {seed}: {violation}");
        }
        assert!(result.crash_points > 100, "the workload has a useful number of crash points");
        assert!(result.torn_tails > 0, "the images include torn appends into preallocated space");
        assert!(result.zero_tails > 0, "the images include logs with a preallocated tail");
    }
}

/// Test 6 on preallocated logs whose open handles go idle between batches: a crash at
/// every operation, the idle give-back's truncation included (and the extension of the
/// appends after it), keeps everything acknowledged and every log valid.
#[test]
fn test_06_power_loss_around_idle_give_backs_keeps_everything_acknowledged() {
    let mut workload = Workload { preallocate: true, ..seeded_workload(0) };
    workload.steps = workload
        .steps
        .iter()
        .enumerate()
        .flat_map(|(index, step)| if index % 3 == 2 { vec![step.clone(), Step::Idle] } else { vec![step.clone()] })
        .collect();
    let fs = SimFs::with_root("/sim");
    runtime().block_on(run_workload(&fs, &workload));
    let on_logs = |kind: FsOp| fs.op_log().iter().filter(|(op, path)| *op == kind && path.ends_with(LOG_FILE)).count();
    let closes = workload.steps.iter().filter(|step| matches!(step, Step::Close(_) | Step::Reopen(_))).count();
    assert!(on_logs(FsOp::SetLen) > closes, "idle handles gave tails back: {} truncations", on_logs(FsOp::SetLen));
    let result = sweep(&workload, image_seeds(), &|_| {}, true);
    report("test 6 preallocated with idle give-backs", &result);
    if let Some((n, seed, violation)) = result.violations.first() {
        panic!("crash at operation {n}, image seed {seed}: {violation}");
    }
    assert!(result.zero_tails > 0, "the images include logs with a preallocated tail");
}

#[test]
fn test_07_the_sweep_catches_a_missing_directory_fsync() {
    let workload = seeded_workload(0);
    // Every directory fsync forgotten.
    let all = sweep(&workload, 1, &|fs| fs.skip_dir_syncs(SkipDirSyncs::All), false);
    report("test 7, every directory sync skipped", &all);
    assert!(!all.violations.is_empty(), "the harness must detect that no directory fsync happens");
    // Only the session directory's fsync forgotten (the publish `link` and the epoch
    // `rename` are never made durable), the parents' fsyncs kept.
    let session_dirs =
        sweep(&workload, 1, &|fs| fs.skip_dir_syncs(SkipDirSyncs::PathContains("/sessions/".into())), false);
    report("test 7, session directory syncs skipped", &session_dirs);
    assert!(
        session_dirs.violations.iter().any(|(_, _, violation)| violation.contains("acknowledged create lost")),
        "the harness must detect a create whose link was never made durable: {:?}",
        session_dirs.violations.first()
    );
}

/// Test 10's workload: one session created with a first batch (temp write, temp fsync,
/// link, directory fsync, unlink temp), closed, opened for writing (epoch replacement:
/// temp write, fsync, rename, directory fsync), appended to, closed, and opened for
/// writing once more (a second replacement, over an existing epoch file).
fn creation_workload() -> Workload {
    let mut rng = SplitMix64::new(10);
    let mut next_seq = 0;
    let mut first = batch(&mut next_seq, &mut rng);
    first.push(bulky(next_seq, 9_000));
    next_seq += 1;
    let batches = vec![batch(&mut next_seq, &mut rng), batch(&mut next_seq, &mut rng)];
    Workload {
        sessions: vec![SessionPlan { header: header("created"), first, batches }],
        steps: vec![
            Step::Create(0),
            Step::Reopen(0),
            Step::Append(0),
            Step::Reopen(0),
            Step::Append(0),
            Step::Close(0),
        ],
        preallocate: false,
    }
}

/// Index (1-based) of the first operation of `kind` on a path ending in `suffix` at or
/// after operation `from`.
fn find_op(log: &[(FsOp, PathBuf)], from: usize, kind: FsOp, suffix: &str) -> usize {
    log.iter()
        .enumerate()
        .skip(from.saturating_sub(1))
        .find(|(_, (op, path))| *op == kind && path.to_string_lossy().ends_with(suffix))
        .map(|(index, _)| index + 1)
        .unwrap_or_else(|| panic!("no {kind:?} on *{suffix} after operation {from}"))
}

#[test]
fn test_10_crash_at_each_step_of_create_and_epoch_replacement() {
    let workload = creation_workload();
    let key = workload.sessions[0].key();
    let dir = session_dir(&key);
    let dir_name = dir.to_string_lossy().into_owned();

    // The steps the plan names, located in the uncrashed run's operation log.
    let fs = SimFs::with_root("/sim");
    runtime().block_on(run_workload(&fs, &workload));
    let log = fs.op_log();
    let temp_write = find_op(&log, 1, FsOp::WriteAt, &format!("{LOG_TEMP_PREFIX}1"));
    let temp_sync = find_op(&log, temp_write, FsOp::SyncAll, &format!("{LOG_TEMP_PREFIX}1"));
    let link = find_op(&log, temp_sync, FsOp::HardLink, LOG_FILE);
    let link_sync = find_op(&log, link, FsOp::SyncDir, &dir_name);
    let unlink = find_op(&log, link_sync, FsOp::RemoveFile, &format!("{LOG_TEMP_PREFIX}1"));
    let mut steps = vec![temp_write, temp_sync, link, link_sync, unlink];
    let mut from = unlink;
    for _ in 0..2 {
        let epoch_write = find_op(&log, from, FsOp::WriteAt, EPOCH_TEMP_FILE);
        let epoch_sync = find_op(&log, epoch_write, FsOp::SyncAll, EPOCH_TEMP_FILE);
        let rename = find_op(&log, epoch_sync, FsOp::Rename, EPOCH_FILE);
        let rename_sync = find_op(&log, rename, FsOp::SyncDir, &dir_name);
        steps.extend([epoch_write, epoch_sync, rename, rename_sync]);
        from = rename_sync;
    }
    assert!(steps.windows(2).all(|pair| pair[0] < pair[1]), "steps in protocol order: {steps:?}");
    let total = log.len();

    // Crash before every operation (so between every two steps), 24 image seeds each.
    let runtime = runtime();
    let (mut images, mut absent, mut leftovers) = (0, 0, 0);
    for n in 1..=total as u64 {
        let fs = SimFs::with_root("/sim");
        fs.freeze(Freeze::AtOp(n));
        let acked = runtime.block_on(run_workload(&fs, &workload));
        let seeds = if fs.pending_changes() == 0 { 1 } else { 24 };
        for seed in 0..seeds {
            let image = fs.crash_image(seed);
            images += 1;
            if !image.exists(dir.join(LOG_FILE)) {
                absent += 1;
            }
            if has_leftover_temp_log(&image, &workload) {
                leftovers += 1;
            }
            if let Err(violation) = runtime.block_on(check_image(&image, &workload, &acked)) {
                let step = steps.iter().position(|step| *step == n as usize);
                panic!("crash at operation {n} (named step {step:?} of {steps:?}), image seed {seed}: {violation}");
            }
        }
    }
    eprintln!(
        "test 10: {total} crash points, {images} images, {absent} without the session, {leftovers} with a leftover temp log"
    );
    assert!(absent > 0, "some crash points precede publication");
    assert!(leftovers > 0, "some crash points leave a temp log behind (the unlink is not made durable)");
}

/// A process crash (the page cache survives) between a directory's `mkdir` and its
/// parent's `fsync` during a create, then a restart whose create of the same session is
/// acknowledged, then a power loss. Returns, for each directory of the chain
/// `tenants/`, `<tenant>/`, `sessions/`, `<id>/`, whether the acknowledged session was
/// lost.
fn lost_after_a_process_crash_between_mkdir_and_parent_fsync() -> Vec<(String, bool)> {
    let workload = Workload {
        sessions: vec![SessionPlan { header: header("s"), first: vec![marker(0)], batches: Vec::new() }],
        steps: vec![Step::Create(0), Step::Close(0)],
        preallocate: false,
    };
    let probe = SimFs::with_root("/sim");
    let runtime = runtime();
    runtime.block_on(run_workload(&probe, &workload));
    let log = probe.op_log();
    let mut results = Vec::new();
    for (index, (op, path)) in log.iter().enumerate() {
        if *op != FsOp::CreateDir || !path.starts_with(ROOT) || path == Path::new(ROOT) {
            continue;
        }
        let parent_sync = index + 2; // 1-based index of the operation after the mkdir
        assert_eq!(log[parent_sync - 1].0, FsOp::SyncDir, "ensure_dir fsyncs the parent right after mkdir");
        let fs = SimFs::with_root("/sim");
        fs.freeze(Freeze::AtOp(parent_sync as u64));
        let acked = runtime.block_on(run_workload(&fs, &workload));
        assert!(!acked[0].created, "the first process dies before the create is acknowledged");
        fs.thaw(); // restart: the page cache, with the new directory, survived
        let acked = runtime.block_on(run_workload(&fs, &workload));
        assert!(acked[0].created, "the restarted process's create is acknowledged");
        let image = fs.crash_image(0);
        let lost = runtime.block_on(check_image(&image, &workload, &acked)).is_err_and(|violation| {
            eprintln!("{}: {violation}", path.display());
            violation.contains("acknowledged create lost")
        });
        results.push((path.display().to_string(), lost));
    }
    assert_eq!(results.len(), 4, "tenants/, <tenant>/, sessions/, <id>/");
    results
}

/// A directory left by a process that died between its `mkdir` and the parent's fsync
/// (or got `EIO` from that fsync) is made durable by the next create that finds it:
/// `ensure_dir` (`crates/berth-jsonl/src/backend.rs`) syncs the parent of a directory it
/// finds already there, once per process. Without that, the next create published and
/// acknowledged its session inside a directory whose entry a power loss then dropped
/// (found by this sweep; fails if that sync is removed).
#[test]
fn test_10_a_directory_left_by_a_crashed_process_is_made_durable_by_the_next_create() {
    let lost: Vec<_> = lost_after_a_process_crash_between_mkdir_and_parent_fsync()
        .into_iter()
        .filter(|(_, lost)| *lost)
        .map(|(dir, _)| dir)
        .collect();
    assert!(lost.is_empty(), "acknowledged session lost when the first process died after mkdir of {lost:?}");
}

/// Reliability plan test 16, the I/O-error sweep (SQLite's loop): for every operation N
/// of a workload, fail N once (a transient `EIO`) and, separately, N and every later
/// operation (a persistent one); then stop the faults, restart (a fresh store on the same
/// file system, which did not lose power) and check test 6's invariants on what the
/// restarted process sees: acknowledged ⊆ recovered ⊆ attempted, no corruption, a write
/// open works. A failed write or sync is rolled back (or, when the rollback fails too,
/// left whole and unacknowledged), never half-visible.
#[test]
fn test_16_io_error_at_every_operation_then_restart_keeps_everything_acknowledged() {
    let runtime = runtime();
    let workload = seeded_workload(1);
    let fs = SimFs::with_root("/sim");
    let acked = runtime.block_on(run_workload(&fs, &workload));
    assert!(acked.iter().all(|acked| acked.created), "the workload completes without faults");
    let total = fs.ops();
    let mut runs = 0;
    let mut violations = Vec::new();
    for n in 1..=total {
        for (mode, fault) in [("transient", Freeze::OnlyOp(n)), ("persistent", Freeze::AtOp(n))] {
            let fs = SimFs::with_root("/sim");
            fs.freeze(fault);
            let acked = runtime.block_on(run_workload(&fs, &workload));
            fs.thaw();
            runs += 1;
            if let Err(violation) = runtime.block_on(check_image(&fs, &workload, &acked)) {
                violations.push(format!("{mode} EIO at operation {n}: {violation}"));
            }
        }
    }
    eprintln!("test 16: {runs} runs over {total} operations, {} violations", violations.len());
    assert!(violations.is_empty(), "{violations:#?}");
}

/// Holds the first sync of one directory in flight: the sync has been made (a crash image
/// keeps what it saw) but does not return until released, as a real `fsync` that has
/// begun and not finished. Everything else passes through to the `SimFs`.
struct SyncInFlight {
    inner: SimFs,
    directory: PathBuf,
    /// Taken by the first sync of `directory`: says it is in flight, waits for release.
    gate: std::sync::Mutex<Option<(std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>)>>,
}

impl berth_jsonl::fs::Fs for SyncInFlight {
    fn open(
        &self,
        path: &Path,
        options: berth_jsonl::fs::OpenOptions,
    ) -> std::io::Result<Box<dyn berth_jsonl::fs::FsFile>> {
        self.inner.open(path, options)
    }
    fn open_dir(&self, path: &Path) -> std::io::Result<Box<dyn berth_jsonl::fs::FsFile>> {
        self.inner.open_dir(path)
    }
    fn create_dir(&self, path: &Path) -> std::io::Result<()> {
        self.inner.create_dir(path)
    }
    fn sync_dir(&self, path: &Path) -> std::io::Result<()> {
        let synced = self.inner.sync_dir(path);
        let gate = match path == self.directory {
            true => self.gate.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take(),
            false => None,
        };
        if let Some((in_flight, release)) = gate {
            in_flight.send(()).expect("the test listens");
            release.recv().expect("the test releases the sync");
        }
        synced
    }
    fn hard_link(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.inner.hard_link(from, to)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.inner.remove_file(path)
    }
    fn remove_dir(&self, path: &Path) -> std::io::Result<()> {
        self.inner.remove_dir(path)
    }
    fn read_dir(&self, path: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
        self.inner.read_dir(path)
    }
    fn metadata(&self, path: &Path) -> std::io::Result<berth_jsonl::fs::FileMeta> {
        self.inner.metadata(path)
    }
}

/// Creates a session (its first write a flush, as test 6's first session) and says
/// whether it was acknowledged.
async fn create_acknowledged(store: LogStore, id: String) -> bool {
    let Ok(handle) = store.create(header(&id)).await else {
        return false;
    };
    let acknowledged = handle.flush().await.is_ok();
    let _ = handle.close().await;
    acknowledged
}

/// Concurrent creates share the syncs of their tenant's `sessions/` (the group sync in
/// `crates/berth-jsonl/src/dir_sync.rs`), and a create is acknowledged only after a sync
/// of it that *started* after its new directory was made. Create `a`'s sync of
/// `sessions/` is held in flight, having seen `sessions/` without the others; creates
/// `b0`…`b2` make their directories meanwhile; then `a`'s sync returns. A power loss
/// after all four are acknowledged keeps all four. Fails if a create joins the sync in
/// flight instead of waiting for the next, or does not wait at all.
#[test]
fn test_10_a_create_is_acknowledged_only_after_a_sync_that_started_after_its_directory() {
    let sim = SimFs::with_root("/sim");
    let sessions = session_dir(&header("a").key()).parent().expect("sessions/").to_path_buf();
    let (in_flight_sender, in_flight) = std::sync::mpsc::channel();
    let (release, release_receiver) = std::sync::mpsc::channel();
    let fs = SyncInFlight {
        inner: sim.clone(),
        directory: sessions,
        gate: std::sync::Mutex::new(Some((in_flight_sender, release_receiver))),
    };
    let options = JsonlOptions { fs: Arc::new(fs), ..JsonlOptions::default() };
    let backend = JsonlBackend::open(ROOT, options).expect("open");
    let store = LogStore::new(Arc::new(backend.clone()));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let first = runtime.spawn(create_acknowledged(store.clone(), "a".into()));
    let deadline = std::time::Duration::from_secs(30);
    in_flight.recv_timeout(deadline).expect("a's sync of sessions/ is in flight");
    let later: Vec<_> =
        (0..3).map(|index| runtime.spawn(create_acknowledged(store.clone(), format!("b{index}")))).collect();
    // Release a's sync once the others wait for a sync (or, were they not to wait, have
    // finished). They wait on a condition variable: no event to wait on, so poll.
    let started = std::time::Instant::now();
    while backend.directory_syncs_waiting() < later.len() && !later.iter().all(|create| create.is_finished()) {
        assert!(started.elapsed() < deadline, "the later creates neither wait nor finish");
        std::thread::yield_now();
    }
    release.send(()).expect("a's sync waits for release");
    let mut acknowledged = vec![("a".to_owned(), runtime.block_on(first).expect("create a"))];
    for (index, create) in later.into_iter().enumerate() {
        acknowledged.push((format!("b{index}"), runtime.block_on(create).expect("create b")));
    }
    assert!(acknowledged.iter().all(|(_, acked)| *acked), "every create is acknowledged: {acknowledged:?}");
    let image = sim.crash_image(0);
    let recovered = JsonlBackend::open(ROOT, JsonlOptions { fs: image.shared(), ..JsonlOptions::default() })
        .expect("open the image");
    let lost: Vec<_> = acknowledged
        .iter()
        .filter(|(id, _)| !matches!(recovered.stat_blocking(&header(id).key()), Ok(Some(_))))
        .map(|(id, _)| id.clone())
        .collect();
    assert!(lost.is_empty(), "acknowledged creates lost by a power loss: {lost:?}");
}
