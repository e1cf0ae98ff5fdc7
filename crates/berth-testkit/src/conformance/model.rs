//! A state-machine model of the LogStore seam, for property tests: random operation
//! sequences run against a real store and a plain in-memory model (per session: the
//! durable log, whether it is pending, which handle owns the writer), comparing every
//! result and, at `Check` steps, everything `stat`, `list` and a fresh instance see.
//!
//! Handles are addressed by index modulo the number of live handles, so every generated
//! sequence is meaningful and proptest can shrink freely.

use super::fixtures::{eventually, header, key, open_write_eventually, stored_events, tenant};
use super::ConformanceBackend;
use berth_core::limits::PAGE_SIZE_MAX;
use berth_core::{Error, Event, Timestamp};
use berth_store::{Access, ListQuery, LogStore, SessionHandle};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

/// The sessions the model plays with (one tenant; few ids so operations collide).
pub const SESSIONS: [&str; 3] = ["model-0", "model-1", "model-2"];

#[derive(Clone, Debug)]
pub enum Op {
    Create {
        session: usize,
    },
    OpenWrite {
        session: usize,
    },
    OpenRead {
        session: usize,
    },
    /// A valid batch of `events` events continuing the handle's log.
    Append {
        handle: usize,
        events: usize,
    },
    /// A batch that replays the last stored seq (`gap == false`) or skips one.
    AppendNonContiguous {
        handle: usize,
        gap: bool,
    },
    Read {
        handle: usize,
        offset: u64,
        length: Option<u64>,
    },
    Flush {
        handle: usize,
    },
    StoreFlush,
    Close {
        handle: usize,
    },
    /// Drops a handle without closing it.
    Drop {
        handle: usize,
    },
    /// Drops every handle without closing and continues on a fresh instance.
    Crash,
    /// Compares `stat`, `list` and a fresh instance's view with the model.
    Check,
}

pub fn op_strategy() -> impl Strategy<Value = Op> {
    let session = 0..SESSIONS.len();
    let handle = 0..8usize;
    prop_oneof![
        3 => session.clone().prop_map(|session| Op::Create { session }),
        2 => session.clone().prop_map(|session| Op::OpenWrite { session }),
        2 => session.prop_map(|session| Op::OpenRead { session }),
        5 => (handle.clone(), 0..4usize).prop_map(|(handle, events)| Op::Append { handle, events }),
        1 => (handle.clone(), any::<bool>()).prop_map(|(handle, gap)| Op::AppendNonContiguous { handle, gap }),
        2 => (handle.clone(), prop_oneof![0..12u64, Just(u64::MAX)], proptest::option::of(prop_oneof![0..12u64, Just(u64::MAX)]))
            .prop_map(|(handle, offset, length)| Op::Read { handle, offset, length }),
        2 => handle.clone().prop_map(|handle| Op::Flush { handle }),
        1 => Just(Op::StoreFlush),
        2 => handle.clone().prop_map(|handle| Op::Close { handle }),
        1 => handle.prop_map(|handle| Op::Drop { handle }),
        1 => Just(Op::Crash),
        1 => Just(Op::Check),
    ]
}

/// The event at `seq` of session `session` (content depends on both, so a mix-up shows).
pub fn model_event(session: usize, seq: u64) -> Event {
    Event::new(seq, "model/event", Timestamp(seq), serde_json::json!({"session": session, "seq": seq}))
        .expect("valid model event")
}

struct ModelHandle {
    session: usize,
    access: Access,
    closed: bool,
}

#[derive(Default)]
struct Model {
    /// Materialized sessions and their logs.
    stored: BTreeMap<usize, Vec<Event>>,
    /// Created in the current instance, not materialized yet.
    pending: BTreeSet<usize>,
    /// Sessions whose writer is held by an open handle of the current instance.
    owned: BTreeSet<usize>,
    handles: Vec<ModelHandle>,
}

impl Model {
    fn log(&self, session: usize) -> &[Event] {
        self.stored.get(&session).map_or(&[], Vec::as_slice)
    }

    fn materialize(&mut self, session: usize) {
        if self.pending.remove(&session) {
            self.stored.insert(session, Vec::new());
        }
    }
}

/// The error kind (`Error::code`) or `ok`, for comparing outcomes.
fn kind<T>(result: &Result<T, Error>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(error) => error.code(),
    }
}

struct Runner<'a> {
    backend: &'a dyn ConformanceBackend,
    store: LogStore,
    handles: Vec<SessionHandle>,
    model: Model,
}

impl Runner<'_> {
    fn pick(&self, handle: usize) -> Option<usize> {
        (!self.handles.is_empty()).then(|| handle % self.handles.len())
    }

    async fn apply(&mut self, op: &Op) {
        match *op {
            Op::Create { session } => self.create(session).await,
            Op::OpenWrite { session } => self.open_write(session).await,
            Op::OpenRead { session } => self.open_read(session).await,
            Op::Append { handle, events } => {
                if let Some(index) = self.pick(handle) {
                    self.append(index, events).await;
                }
            }
            Op::AppendNonContiguous { handle, gap } => {
                if let Some(index) = self.pick(handle) {
                    self.append_non_contiguous(index, gap).await;
                }
            }
            Op::Read { handle, offset, length } => {
                if let Some(index) = self.pick(handle) {
                    self.read(index, offset, length).await;
                }
            }
            Op::Flush { handle } => {
                if let Some(index) = self.pick(handle) {
                    self.flush(index).await;
                }
            }
            Op::StoreFlush => {
                self.store.flush().await.expect("store flush");
                let pending: Vec<usize> = self.model.pending.iter().copied().collect();
                pending.into_iter().for_each(|session| self.model.materialize(session));
            }
            Op::Close { handle } => {
                if let Some(index) = self.pick(handle) {
                    self.handles[index].close().await.expect("close");
                    self.forget_owner(index);
                    self.model.handles[index].closed = true;
                }
            }
            Op::Drop { handle } => {
                if let Some(index) = self.pick(handle) {
                    self.drop_handle(index).await;
                }
            }
            Op::Crash => self.crash().await,
            Op::Check => self.check().await,
        }
        self.check_writers();
    }

    async fn create(&mut self, session: usize) {
        let result = self.store.create(header(SESSIONS[session])).await;
        let model = &mut self.model;
        let expected = if model.pending.contains(&session) || model.stored.contains_key(&session) {
            "already_exists"
        } else {
            "ok"
        };
        assert_eq!(kind(&result), expected, "create {session}: {result:?}");
        if let Ok(handle) = result {
            model.pending.insert(session);
            model.owned.insert(session);
            model.handles.push(ModelHandle { session, access: Access::Write, closed: false });
            self.handles.push(handle);
        }
    }

    async fn open_write(&mut self, session: usize) {
        let result = self.store.open(&key(SESSIONS[session]), Access::Write).await;
        let model = &mut self.model;
        let expected = if model.owned.contains(&session) {
            "already_owned"
        } else if !model.stored.contains_key(&session) {
            "not_found"
        } else {
            "ok"
        };
        assert_eq!(kind(&result), expected, "open write {session}: {result:?}");
        if let Ok(handle) = result {
            assert_eq!(handle.next_seq(), model.log(session).len() as u64);
            model.owned.insert(session);
            model.handles.push(ModelHandle { session, access: Access::Write, closed: false });
            self.handles.push(handle);
        }
    }

    async fn open_read(&mut self, session: usize) {
        let result = self.store.open(&key(SESSIONS[session]), Access::Read).await;
        let model = &mut self.model;
        let exists = model.pending.contains(&session) || model.stored.contains_key(&session);
        assert_eq!(kind(&result), if exists { "ok" } else { "not_found" }, "open read {session}: {result:?}");
        if let Ok(handle) = result {
            model.handles.push(ModelHandle { session, access: Access::Read, closed: false });
            self.handles.push(handle);
        }
    }

    /// The error a mutation through `index` must fail with, if any.
    fn mutation_refusal(&self, index: usize) -> Option<&'static str> {
        let handle = &self.model.handles[index];
        if handle.closed {
            Some("handle_closed")
        } else if handle.access == Access::Read {
            Some("read_only")
        } else {
            None
        }
    }

    async fn append(&mut self, index: usize, count: usize) {
        let session = self.model.handles[index].session;
        let start = self.model.log(session).len() as u64;
        let batch: Vec<Event> = (start..start + count as u64).map(|seq| model_event(session, seq)).collect();
        let result = self.handles[index].append(&batch).await;
        let expected = self.mutation_refusal(index).unwrap_or("ok");
        assert_eq!(kind(&result), expected, "append {count} to {session} via {index}: {result:?}");
        if result.is_ok() && count > 0 {
            self.model.materialize(session);
            self.model.stored.entry(session).or_default().extend(batch);
        }
    }

    async fn append_non_contiguous(&mut self, index: usize, gap: bool) {
        let session = self.model.handles[index].session;
        let expected_seq = self.model.log(session).len() as u64;
        let seq = if gap || expected_seq == 0 { expected_seq + 1 } else { expected_seq - 1 };
        let result = self.handles[index].append(&[model_event(session, seq)]).await;
        match self.mutation_refusal(index) {
            Some(refusal) => assert_eq!(kind(&result), refusal, "{result:?}"),
            None => match result {
                Err(Error::SeqConflict { expected, actual }) => {
                    assert_eq!((expected, actual), (expected_seq, seq));
                }
                other => panic!("non-contiguous append at {seq} (next {expected_seq}) gave {other:?}"),
            },
        }
    }

    async fn read(&mut self, index: usize, offset: u64, length: Option<u64>) {
        let result = self.handles[index].read(offset, length).await;
        let handle = &self.model.handles[index];
        if handle.closed {
            assert_eq!(kind(&result), "handle_closed", "{result:?}");
            return;
        }
        let log = self.model.log(handle.session);
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(log.len());
        let end = length.map_or(log.len(), |length| {
            start.saturating_add(usize::try_from(length).unwrap_or(usize::MAX)).min(log.len())
        });
        let events = result.unwrap_or_else(|error| panic!("read {offset} {length:?} via {index}: {error}"));
        assert_eq!(events, log[start..end], "read {offset} {length:?} of {} via {index}", handle.session);
    }

    async fn flush(&mut self, index: usize) {
        let result = self.handles[index].flush().await;
        let expected = self.mutation_refusal(index).unwrap_or("ok");
        assert_eq!(kind(&result), expected, "flush via {index}: {result:?}");
        if result.is_ok() {
            self.model.materialize(self.model.handles[index].session);
        }
    }

    /// Closing or dropping the open write handle at `index` ends its ownership, and a
    /// never-materialized session with it.
    fn forget_owner(&mut self, index: usize) {
        let handle = &self.model.handles[index];
        if !handle.closed && handle.access == Access::Write {
            let session = handle.session;
            self.model.owned.remove(&session);
            self.model.pending.remove(&session);
        }
    }

    async fn drop_handle(&mut self, index: usize) {
        let handle = self.handles.remove(index);
        let model_handle = &self.model.handles[index];
        let held_writer = !model_handle.closed && model_handle.access == Access::Write;
        let session = model_handle.session;
        let materialized = self.model.stored.contains_key(&session);
        self.forget_owner(index);
        self.model.handles.remove(index);
        drop(handle);
        if held_writer && materialized {
            // Ownership is released by a background final drain; wait for it.
            let key = key(SESSIONS[session]);
            open_write_eventually(&self.store, &key).await.close().await.expect("close");
        } else if held_writer {
            let key = key(SESSIONS[session]);
            eventually("a dropped pending session disappears", || async {
                self.store.stat(&key).await.expect("stat").is_none()
            })
            .await;
        }
    }

    async fn crash(&mut self) {
        let held: Vec<usize> = self.model.owned.iter().copied().filter(|s| self.model.stored.contains_key(s)).collect();
        self.handles.clear();
        self.model.handles.clear();
        self.model.pending.clear();
        self.model.owned.clear();
        self.store = self.backend.reopen().await.expect("the model needs reopen");
        for session in held {
            open_write_eventually(&self.store, &key(SESSIONS[session])).await.close().await.expect("close");
        }
    }

    async fn check(&mut self) {
        let mut query = ListQuery::tenant(tenant());
        query.limit = PAGE_SIZE_MAX;
        let listed: BTreeSet<String> = self
            .store
            .list(&query)
            .await
            .expect("list")
            .items
            .into_iter()
            .map(|stat| stat.header.id.to_string())
            .collect();
        let visible: BTreeSet<String> = self
            .model
            .stored
            .keys()
            .chain(self.model.pending.iter())
            .map(|session| SESSIONS[*session].to_string())
            .collect();
        assert_eq!(listed, visible, "list");
        let fresh = self.backend.reopen().await.expect("the model needs reopen");
        for (session, id) in SESSIONS.iter().enumerate() {
            let key = key(id);
            let stat = self.store.stat(&key).await.expect("stat");
            assert_eq!(stat.is_some(), visible.contains(*id), "stat {id}");
            let log = self.model.stored.get(&session);
            if let (Some(stat), Some(log)) = (&stat, log) {
                if let Some(count) = stat.event_count {
                    assert_eq!(count, log.len() as u64, "event count of {id}");
                }
            }
            let fresh_stat = fresh.stat(&key).await.expect("stat");
            assert_eq!(fresh_stat.is_some(), log.is_some(), "fresh instance stat {id}");
            if let Some(log) = log {
                assert_eq!(&stored_events(&fresh, &key).await, log, "fresh instance log of {id}");
            }
        }
    }

    /// Every open write handle continues exactly where the model's log ends.
    fn check_writers(&self) {
        for (handle, model) in self.handles.iter().zip(&self.model.handles) {
            if !model.closed && model.access == Access::Write {
                assert_eq!(handle.next_seq(), self.model.log(model.session).len() as u64, "next seq");
            }
        }
    }
}

/// Runs `ops` against a fresh instance of `backend` and the model, panicking (with the
/// operation index) on the first disagreement. `backend` must support `reopen`.
pub async fn run_model(backend: &dyn ConformanceBackend, ops: &[Op]) {
    let mut runner = Runner { backend, store: backend.store().await, handles: Vec::new(), model: Model::default() };
    for (index, op) in ops.iter().enumerate() {
        let step = std::panic::AssertUnwindSafe(runner.apply(op));
        if let Err(panic) = futures_catch(step).await {
            eprintln!("model disagreement at op #{index}: {op:?}");
            std::panic::resume_unwind(panic);
        }
    }
    runner.apply(&Op::Check).await;
    runner.store.close_all().await.expect("close_all");
}

/// Awaits `future`, turning a panic into an `Err` so the caller can add context.
async fn futures_catch<F: std::future::Future<Output = ()>>(
    future: std::panic::AssertUnwindSafe<F>,
) -> Result<(), Box<dyn std::any::Any + Send>> {
    use std::pin::pin;
    use std::task::Poll;
    let mut future = pin!(future.0);
    std::future::poll_fn(|cx| {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(Poll::Ready(())) => Poll::Ready(Ok(())),
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => Poll::Ready(Err(panic)),
        }
    })
    .await
}
