//! Models of the LogStore's concurrency kernels under loom (`reference/reliability.md`
//! §6 test 40), every interleaving up to a preemption bound:
//!
//! - the single-writer registry (`berth_store::registry`, the code `LogStore` runs):
//!   `open(write)` racing `close`, a repeated `close`, and a handle dropped while its
//!   final drain still holds the writer. Checked: never two write handles for one id;
//!   a repeated (or late) `close` frees nothing it does not own; an id whose drain still
//!   holds the writer is not handed out; no deadlock.
//! - the write-behind hand-off (`berth_store::live::LiveBuffer`, the decisions the
//!   handle makes under its live lock): `publish` racing `flush`, the window's timer and
//!   `close`, with one injected write failure. The 200 ms timer is an explicit event (a
//!   thread that fires once, at any point). Checked: the durable log is the accepted
//!   events in order, each once; `flush` returns `Ok` only after every event accepted
//!   before it began is durable; after `close` every accepted event is durable or the
//!   close reported the failure; no deadlock.
//!
//! The tokio parts of the handle (its async state lock, spawning) are modelled by loom
//! mutexes and threads; what runs is the production registry and buffer code. Each model
//! must finish in under 2 minutes on 2 cores; each writes its time to
//! `$CARGO_TARGET_TMPDIR/loom-models.txt`, which `scripts/test` prints.

use berth_core::{Event, Timestamp};
use berth_store::live::LiveBuffer;
use berth_store::registry::{OwnerRef, Registry, Slot};
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MODEL_TIME_MAX: Duration = Duration::from_secs(120);
const KEY: u8 = 7;

/// Runs `model` under loom with `preemptions` and records how long it took.
fn check(name: &str, preemptions: usize, model: impl Fn() + Sync + Send + 'static) {
    let started = Instant::now();
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(preemptions);
    builder.check(model);
    let elapsed = started.elapsed();
    let line = format!("loom model {name}: {:.2} s (preemption bound {preemptions})\n", elapsed.as_secs_f64());
    eprint!("{line}");
    let log = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("loom-models.txt");
    let previous = std::fs::read_to_string(&log).unwrap_or_default();
    let kept: String = previous
        .lines()
        .filter(|old| !old.starts_with(&format!("loom model {name}:")))
        .map(|old| format!("{old}\n"))
        .collect();
    std::fs::write(&log, kept + &line).expect("record the model's time");
    assert!(elapsed < MODEL_TIME_MAX, "{name} took {elapsed:?}, over {MODEL_TIME_MAX:?}");
}

// ---------------------------------------------------------------------------------
// The single-writer registry.

/// A write handle, as the registry names it (the store's `HandleShared`).
struct Handle {
    /// Whether the last reference is gone (the store's `Weak::strong_count() == 0`).
    dropped: AtomicBool,
    closed: AtomicBool,
}

/// `sloppy` plants a bug for the mutation check: every handle claims to own every slot.
#[derive(Clone)]
struct HandleRef(Arc<Handle>, bool);

impl OwnerRef for HandleRef {
    type Owner = Handle;

    fn is_owner(&self, owner: &Handle) -> bool {
        self.1 || std::ptr::eq(&*self.0, owner)
    }

    fn alive(&self) -> bool {
        !self.0.dropped.load(Ordering::SeqCst)
    }
}

/// One store instance and the backend's writer lease for the one session.
struct Store {
    registry: Mutex<Registry<u8, HandleRef>>,
    /// The backend's lease (JSONL `flock`, PostgreSQL row): held by at most one writer.
    lease_held: Mutex<bool>,
    /// Write handles handed out and not yet closed or dropped.
    live_handles: AtomicUsize,
    sloppy_owners: bool,
}

impl Store {
    fn new() -> Store {
        Store::with_owner_check(false)
    }

    fn with_owner_check(sloppy_owners: bool) -> Store {
        Store {
            registry: Mutex::new(Registry::default()),
            lease_held: Mutex::new(false),
            live_handles: AtomicUsize::new(0),
            sloppy_owners,
        }
    }

    /// `LogStore::open_write`: claim the slot, take the backend writer (its lease),
    /// install the handle; a failed step releases the claim (`ClaimGuard`).
    fn open_write(&self) -> Option<Arc<Handle>> {
        if self.registry.lock().unwrap().claim(&KEY).is_err() {
            return None;
        }
        let acquired = {
            let mut lease = self.lease_held.lock().unwrap();
            !std::mem::replace(&mut *lease, true)
        };
        if !acquired {
            self.registry.lock().unwrap().release(&KEY, None);
            return None;
        }
        let live = self.live_handles.fetch_add(1, Ordering::SeqCst) + 1;
        assert!(live <= 1, "two write handles for one id");
        let handle = Arc::new(Handle { dropped: AtomicBool::new(false), closed: AtomicBool::new(false) });
        self.registry.lock().unwrap().install(&KEY, HandleRef(handle.clone(), self.sloppy_owners));
        Some(handle)
    }

    /// `SessionHandle::close`, possibly repeated: the first call closes the writer
    /// (releasing its lease) and then the slot; any later call only repeats the
    /// slot release, which must free nothing it does not own.
    fn close(&self, handle: &Handle) {
        if !handle.closed.swap(true, Ordering::SeqCst) {
            self.live_handles.fetch_sub(1, Ordering::SeqCst);
            *self.lease_held.lock().unwrap() = false;
        }
        self.registry.lock().unwrap().release(&KEY, Some(handle));
    }

    /// `HandleShared::drop` without `close`: the last reference is gone, the slot turns
    /// into a claim while the final drain still holds the writer, then it is freed.
    fn drop_during_drain(&self, handle: &Handle) {
        handle.dropped.store(true, Ordering::SeqCst);
        let claimed = self.registry.lock().unwrap().reclaim(&KEY, handle);
        // The final drain writes through the writer, which still holds the lease.
        assert!(*self.lease_held.lock().unwrap(), "the drain's writer still holds the lease");
        self.live_handles.fetch_sub(1, Ordering::SeqCst);
        *self.lease_held.lock().unwrap() = false;
        if claimed {
            self.registry.lock().unwrap().release(&KEY, None);
        }
    }

    /// After the threads: a live handle owns the slot (and the id cannot be claimed);
    /// without one, the id is free.
    fn check_settled(&self, live: Option<&Arc<Handle>>) {
        let mut registry = self.registry.lock().unwrap();
        match live {
            Some(handle) => {
                assert!(
                    matches!(registry.get(&KEY), Some(Slot::Owned(owner)) if owner.is_owner(handle)),
                    "the live handle owns its slot"
                );
                assert!(registry.claim(&KEY).is_err(), "a live handle's id cannot be claimed");
                assert!(*self.lease_held.lock().unwrap());
            }
            None => {
                assert!(registry.is_empty(), "no live handle: the slot is free");
                assert!(!*self.lease_held.lock().unwrap());
            }
        }
    }
}

fn open_racing_repeated_close(sloppy_owners: bool) {
    let store = Arc::new(Store::with_owner_check(sloppy_owners));
    let first = store.open_write().expect("the first open of a free id succeeds");
    let closer = {
        let store = store.clone();
        loom::thread::spawn(move || {
            store.close(&first);
            store.close(&first); // idempotent, also after the id changed hands
        })
    };
    let opener = {
        let store = store.clone();
        loom::thread::spawn(move || store.open_write())
    };
    closer.join().unwrap();
    let second = opener.join().unwrap();
    store.check_settled(second.as_ref());
}

#[test]
fn registry_open_write_racing_close_and_a_repeated_close() {
    check("registry: open(write) racing close and a repeated close", 3, || open_racing_repeated_close(false));
}

/// The model is able to fail: with an owner check that accepts any handle (a planted
/// bug), a repeated `close` frees the slot of the handle opened meanwhile, and loom
/// finds that interleaving.
#[test]
fn registry_model_catches_a_release_without_an_owner_check() {
    let caught = std::panic::catch_unwind(|| {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(3);
        builder.check(|| open_racing_repeated_close(true));
    });
    assert!(caught.is_err(), "the model must reject a registry whose release ignores the owner");
}

#[test]
fn registry_two_opens_race_and_one_wins() {
    check("registry: two open(write) race", 3, || {
        let store = Arc::new(Store::new());
        let openers: Vec<_> = (0..2)
            .map(|_| {
                let store = store.clone();
                loom::thread::spawn(move || store.open_write())
            })
            .collect();
        let opened: Vec<Arc<Handle>> = openers.into_iter().filter_map(|opener| opener.join().unwrap()).collect();
        assert_eq!(opened.len(), 1, "exactly one of two racing opens of a free id wins");
        store.check_settled(opened.first());
    });
}

#[test]
fn registry_drop_during_drain_racing_open_write() {
    check("registry: drop during the final drain racing open(write)", 3, || {
        let store = Arc::new(Store::new());
        let first = store.open_write().expect("a free id opens");
        let dropper = {
            let store = store.clone();
            loom::thread::spawn(move || store.drop_during_drain(&first))
        };
        let opener = {
            let store = store.clone();
            loom::thread::spawn(move || store.open_write())
        };
        dropper.join().unwrap();
        let second = opener.join().unwrap();
        store.check_settled(second.as_ref());
    });
}

// ---------------------------------------------------------------------------------
// The write-behind hand-off.

/// The backend writer behind the handle's state lock: the durable log and the
/// injected failures.
struct Writer {
    durable: Vec<u64>,
    /// Writes still to fail (one injected failure).
    failures_left: usize,
    /// `durable.len()` at the last sync.
    synced: usize,
    sealed: bool,
}

/// A live write handle: the state lock (the handle's tokio mutex) and the live lock.
struct LiveHandle {
    state: Mutex<Writer>,
    live: Mutex<LiveBuffer>,
    closed: AtomicBool,
    /// A planted bug for the mutation check: `flush` syncs without draining.
    flush_skips_drain: bool,
}

const WINDOW_BYTES_MAX: usize = usize::MAX;

fn event(seq: u64) -> Event {
    Event::new(seq, "test/loom", Timestamp(1), serde_json::json!({})).expect("a valid event")
}

impl LiveHandle {
    fn new(failures: usize) -> LiveHandle {
        LiveHandle {
            state: Mutex::new(Writer { durable: Vec::new(), failures_left: failures, synced: 0, sealed: false }),
            live: Mutex::new(LiveBuffer::new(0)),
            closed: AtomicBool::new(false),
            flush_skips_drain: false,
        }
    }

    /// `SessionHandle::publish`: refused once sealed (checked under the live lock).
    fn publish(&self) -> Result<u64, &'static str> {
        let mut live = self.live.lock().unwrap();
        if self.closed.load(Ordering::SeqCst) {
            return Err("closed");
        }
        let seq = live.next_seq;
        live.accept(event(seq), WINDOW_BYTES_MAX);
        Ok(seq)
    }

    /// `write_batch`: contiguous, once; may fail (nothing stored).
    fn write(&self, writer: &mut Writer, batch: &[Event]) -> Result<(), &'static str> {
        if writer.failures_left > 0 {
            writer.failures_left -= 1;
            return Err("injected write failure");
        }
        for event in batch {
            assert_eq!(event.seq.get(), writer.durable.len() as u64, "stored in order, each once");
            writer.durable.push(event.seq.get());
        }
        Ok(())
    }

    /// `HandleShared::drain`.
    fn drain(&self, writer: &mut Writer) -> Result<(), &'static str> {
        loop {
            let batch = self.live.lock().unwrap().next_drain_batch();
            if batch.is_empty() {
                return Ok(());
            }
            if let Err(error) = self.write(writer, &batch) {
                self.live.lock().unwrap().restore_front(batch);
                return Err(error);
            }
        }
    }

    fn drain_explicit(&self, writer: &mut Writer) -> Result<(), &'static str> {
        self.drain(writer)?;
        self.live.lock().unwrap().drained_explicitly();
        Ok(())
    }

    /// The window's timer firing: `drain_background`.
    fn timer_fires(&self) {
        let mut writer = self.state.lock().unwrap();
        if self.live.lock().unwrap().paused || writer.sealed {
            return;
        }
        if self.drain(&mut writer).is_err() {
            self.live.lock().unwrap().background_error =
                Some(berth_core::Error::Unavailable { reason: "injected".into() });
        }
    }

    /// `SessionHandle::flush`; returns the seq it covered when it succeeded.
    fn flush(&self) -> Result<u64, &'static str> {
        let covered = self.live.lock().unwrap().next_seq;
        let mut writer = self.state.lock().unwrap();
        if writer.sealed {
            return Err("closed");
        }
        if self.live.lock().unwrap().flush_covers(covered) {
            assert!(writer.synced as u64 >= covered, "a covered flush is already durable");
            return Ok(covered);
        }
        if !self.flush_skips_drain {
            self.drain_explicit(&mut writer)?;
        }
        let drained = self.live.lock().unwrap().drained_seq();
        writer.synced = writer.durable.len();
        self.live.lock().unwrap().record_flush(drained);
        assert!(writer.synced as u64 >= covered, "flush returned before an earlier publish was durable");
        Ok(covered)
    }

    /// `SessionHandle::close`: the final drain, sealed under the live lock.
    fn close(&self) -> Result<(), &'static str> {
        let mut writer = self.state.lock().unwrap();
        if writer.sealed {
            return Ok(());
        }
        loop {
            let outcome = self.drain_explicit(&mut writer);
            let mut live = self.live.lock().unwrap();
            if live.seal_after_final_drain(outcome.is_err()) {
                self.closed.store(true, Ordering::SeqCst);
                writer.sealed = true;
                writer.synced = writer.durable.len();
                return outcome;
            }
        }
    }
}

#[test]
fn handoff_publish_racing_flush_and_the_timer_with_a_failed_write() {
    check("write-behind: publish racing flush and the timer, one failed write", 3, || {
        let handle = Arc::new(LiveHandle::new(1));
        let publisher = {
            let handle = handle.clone();
            loom::thread::spawn(move || {
                let first = handle.publish().expect("open");
                let second = handle.publish().expect("open");
                (first, second)
            })
        };
        let timer = {
            let handle = handle.clone();
            loom::thread::spawn(move || handle.timer_fires())
        };
        let flusher = {
            let handle = handle.clone();
            loom::thread::spawn(move || handle.flush())
        };
        let published = publisher.join().unwrap();
        timer.join().unwrap();
        let flushed = flusher.join().unwrap();
        // Whatever the first flush saw, a later flush makes it all durable: a flush
        // reports a failed write (the injected one, if nothing consumed it yet) and the
        // next one retries the events it put back.
        let last = handle.flush().or_else(|_| handle.flush()).expect("a flush after a reported failure succeeds");
        assert_eq!(last, 2);
        let writer = handle.state.lock().unwrap();
        assert_eq!(writer.durable, [published.0, published.1], "every accepted event, in order, once");
        if let Ok(covered) = flushed {
            assert!(covered <= 2);
        }
    });
}

#[test]
fn handoff_publish_racing_close_and_flush() {
    check("write-behind: publish racing close and flush", 3, || {
        let handle = Arc::new(LiveHandle::new(0));
        let publisher = {
            let handle = handle.clone();
            loom::thread::spawn(move || [handle.publish(), handle.publish()])
        };
        let flusher = {
            let handle = handle.clone();
            loom::thread::spawn(move || handle.flush())
        };
        let closer = {
            let handle = handle.clone();
            loom::thread::spawn(move || handle.close())
        };
        let published = publisher.join().unwrap();
        let _ = flusher.join().unwrap();
        closer.join().unwrap().expect("close drains without a failure");
        let accepted: Vec<u64> = published.iter().filter_map(|outcome| outcome.ok()).collect();
        let writer = handle.state.lock().unwrap();
        assert_eq!(writer.durable, accepted, "after close, every accepted publish is durable; refused ones are not");
        assert!(handle.live.lock().unwrap().events.is_empty());
    });
}

/// The hand-off model is able to fail: a `flush` that syncs without draining returns
/// before an event published earlier is durable, and loom finds that interleaving.
#[test]
fn handoff_model_catches_a_flush_that_does_not_drain() {
    let caught = std::panic::catch_unwind(|| {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(2);
        builder.check(|| {
            let handle = Arc::new(LiveHandle { flush_skips_drain: true, ..LiveHandle::new(0) });
            let publisher = {
                let handle = handle.clone();
                loom::thread::spawn(move || handle.publish().map(|_| ()))
            };
            publisher.join().unwrap().expect("open");
            let _ = handle.flush();
        });
    });
    assert!(caught.is_err(), "the model must reject a flush that does not drain");
}
