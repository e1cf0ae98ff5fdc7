//! W5: many sessions, several concurrent writers each, every append durable.
//!
//! berth allows one write handle per session, so "8 concurrent writers of a session"
//! are 8 client tasks sharing that session's handle (as the service's cached writer or
//! a server's request handlers would): each append needs the next seq, so a client
//! takes the session's lock, reads `next_seq`, appends one event and waits for it to be
//! durable. Two ways to share the handle are measured:
//! - `append`: the lock is held across the durable `append` (one fdatasync per event);
//! - `publish + flush`: the lock covers only `publish` (no I/O); each client then calls
//!   `flush` and is acknowledged when its event is durable — concurrent clients of a
//!   session share one write and one fdatasync (group commit).
//!
//! Reference: the same shape on plain files: per session one file, with one thread per
//! writer appending its line (`O_APPEND` write) and calling `fdatasync`.

use super::{elapsed_us, rotation, Backend};
use crate::fixtures::{self, io};
use crate::payload::{chat_event, chat_line};
use crate::report::{Figure, Goal, Measurement, Target};
use berth_core::{Error, Result};
use berth_store::SessionHandle;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant;

pub const REFERENCE: &str = "raw: 1 file per session, 1 thread per writer, write+fdatasync";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sharing {
    Append,
    PublishFlush,
}

enum Variant {
    Raw,
    Berth(Backend, Sharing),
}

fn label(backend: &Backend, sharing: Sharing) -> String {
    match sharing {
        Sharing::Append => format!("{}, shared handle: append", backend.label()),
        Sharing::PublishFlush => format!("{}, shared handle: publish + flush", backend.label()),
    }
}

pub struct Concurrent {
    dir: PathBuf,
    sessions: usize,
    writers: usize,
    appends: usize,
    variants: Vec<(Variant, Measurement)>,
}

impl Concurrent {
    pub fn new(dir: &Path, sizes: &crate::Sizes, backends: &[Backend]) -> Concurrent {
        let (sessions, writers) = (sizes.concurrent_sessions, sizes.writers_per_session);
        let workload = workload_name(sessions, writers);
        let mut variants =
            vec![(Variant::Raw, Measurement::new(&workload, REFERENCE, true, Figure::Throughput, "events"))];
        for backend in backends {
            for sharing in [Sharing::Append, Sharing::PublishFlush] {
                let measurement =
                    Measurement::new(&workload, &label(backend, sharing), false, Figure::Throughput, "events");
                variants.push((Variant::Berth(backend.clone(), sharing), measurement));
            }
        }
        Concurrent { dir: dir.to_owned(), sessions, writers, appends: sizes.appends_per_writer, variants }
    }

    pub async fn round(&mut self, round: usize) -> Result<()> {
        for index in rotation(self.variants.len(), round) {
            let dir = tempfile::tempdir_in(&self.dir).map_err(io("tempdir"))?;
            let (sessions, writers, appends) = (self.sessions, self.writers, self.appends);
            let (variant, measurement) = &mut self.variants[index];
            let started = Instant::now();
            let latencies = match variant {
                Variant::Raw => {
                    let path = dir.path().to_owned();
                    tokio::task::spawn_blocking(move || raw_writers(&path, sessions, writers, appends))
                        .await
                        .map_err(|e| Error::Unavailable { reason: format!("raw writers: {e}") })??
                }
                Variant::Berth(backend, sharing) => {
                    berth_writers(backend, *sharing, dir.path(), sessions, writers, appends).await?
                }
            };
            measurement.record_throughput(latencies.len() as f64, started.elapsed().as_secs_f64());
            measurement.latencies_us.extend(latencies);
        }
        Ok(())
    }

    pub fn finish(self) -> Vec<Measurement> {
        self.variants.into_iter().map(|(_, measurement)| measurement).collect()
    }
}

pub fn workload_name(sessions: usize, writers: usize) -> String {
    format!("W5 {sessions} sessions × {writers} concurrent writers (durable)")
}

pub fn targets(sizes: &crate::Sizes) -> Vec<Target> {
    let workload = workload_name(sizes.concurrent_sessions, sizes.writers_per_session);
    [Sharing::Append, Sharing::PublishFlush]
        .into_iter()
        .map(|sharing| Target {
            workload: workload.clone(),
            variant: label(&Backend::Jsonl, sharing),
            goal: Goal::RatioAtLeast { versus: REFERENCE.into(), ratio: 0.8 },
            text: "W5 ≥ 0.8× the per-file fdatasync reference".into(),
        })
        .collect()
}

/// One thread per writer; per-append latencies of all threads.
fn raw_writers(dir: &Path, sessions: usize, writers: usize, appends: usize) -> Result<Vec<f64>> {
    let barrier = Arc::new(Barrier::new(sessions * writers));
    let mut threads = Vec::new();
    for session in 0..sessions {
        let path = dir.join(format!("session-{session}.jsonl"));
        for writer in 0..writers {
            let (path, barrier) = (path.clone(), barrier.clone());
            threads.push(std::thread::spawn(move || -> std::io::Result<Vec<f64>> {
                let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
                barrier.wait();
                let mut latencies = Vec::with_capacity(appends);
                for append in 0..appends {
                    let line = chat_line((writer * appends + append) as u64);
                    let started = Instant::now();
                    file.write_all(&line)?;
                    file.sync_data()?;
                    latencies.push(elapsed_us(started));
                }
                Ok(latencies)
            }));
        }
    }
    let mut latencies = Vec::new();
    for thread in threads {
        let joined = thread.join().map_err(|_| Error::Unavailable { reason: "raw writer panicked".into() })?;
        latencies.extend(joined.map_err(|error| Error::io("raw concurrent append", &error))?);
    }
    Ok(latencies)
}

/// `sessions` sessions, `writers` tasks each sharing the session's write handle.
async fn berth_writers(
    backend: &Backend,
    sharing: Sharing,
    dir: &Path,
    sessions: usize,
    writers: usize,
    appends: usize,
) -> Result<Vec<f64>> {
    let store = backend.open(dir).await?;
    let mut handles = Vec::new();
    for session in 0..sessions {
        let handle = store.create(fixtures::header(&fixtures::unique_id(&format!("w5-{session}")))).await?;
        handle.flush().await?;
        handles.push((handle, Arc::new(tokio::sync::Mutex::new(())), Arc::new(Mutex::new(()))));
    }
    let start = Arc::new(tokio::sync::Barrier::new(sessions * writers));
    let mut tasks = tokio::task::JoinSet::new();
    for (handle, append_lock, publish_lock) in &handles {
        for _ in 0..writers {
            let (handle, append_lock, publish_lock, start) =
                (handle.clone(), append_lock.clone(), publish_lock.clone(), start.clone());
            tasks.spawn(async move {
                start.wait().await;
                let mut latencies = Vec::with_capacity(appends);
                for _ in 0..appends {
                    let started = Instant::now();
                    match sharing {
                        Sharing::Append => {
                            let _turn = append_lock.lock().await;
                            handle.append(&[chat_event(handle.next_seq())]).await?;
                        }
                        Sharing::PublishFlush => {
                            publish(&handle, &publish_lock)?;
                            handle.flush().await?;
                        }
                    }
                    latencies.push(elapsed_us(started));
                }
                Ok::<_, Error>(latencies)
            });
        }
    }
    let mut latencies = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        latencies.extend(joined.map_err(|e| Error::Unavailable { reason: format!("writer task: {e}") })??);
    }
    for (handle, _, _) in handles {
        handle.close().await?;
    }
    Ok(latencies)
}

/// Publishes the session's next event; the lock makes "read next seq, publish" atomic.
fn publish(handle: &SessionHandle, lock: &Mutex<()>) -> Result<()> {
    let _turn = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    handle.publish(chat_event(handle.next_seq()))
}
