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
//! References: the same shape on plain files: per session one file, with one thread
//! per writer writing its line and calling `fdatasync` — appended to a growing file
//! (`O_APPEND` write), or written with `pwrite` into a pre-zeroed file at the session's
//! next offset (see `raw`). Targets are judged against the faster of the two.

use super::raw::{self, RawFile};
use super::{elapsed_us, rotation, Backend};
use crate::fixtures::{self, io};
use crate::payload::{chat_event, chat_line};
use crate::report::{Figure, Goal, Measurement, Target};
use berth_core::{Error, Result};
use berth_store::SessionHandle;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant;

/// The growing-file reference.
pub const REFERENCE: &str = "raw: 1 file per session, 1 thread per writer, write+fdatasync, growing file";
/// The overwrite reference.
pub const REFERENCE_OVERWRITE: &str =
    "raw: 1 file per session, 1 thread per writer, pwrite+fdatasync, overwrite pre-zeroed file";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sharing {
    Append,
    PublishFlush,
}

enum Variant {
    Raw(RawFile),
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
        let mut variants = vec![
            (
                Variant::Raw(RawFile::Growing),
                Measurement::reference_tagged(&workload, REFERENCE, RawFile::Growing.tag(), "events"),
            ),
            (
                Variant::Raw(RawFile::Overwrite),
                Measurement::reference_tagged(&workload, REFERENCE_OVERWRITE, RawFile::Overwrite.tag(), "events"),
            ),
        ];
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
            let (latencies, seconds) = match variant {
                Variant::Raw(kind) => {
                    let (kind, path) = (*kind, dir.path().to_owned());
                    tokio::task::spawn_blocking(move || raw_writers(kind, &path, sessions, writers, appends))
                        .await
                        .map_err(|e| Error::Unavailable { reason: format!("raw writers: {e}") })??
                }
                Variant::Berth(backend, sharing) => {
                    let started = Instant::now();
                    let latencies = berth_writers(backend, *sharing, dir.path(), sessions, writers, appends).await?;
                    (latencies, started.elapsed().as_secs_f64())
                }
            };
            measurement.record_throughput(latencies.len() as f64, seconds);
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
            goal: Goal::RatioToFasterAtLeast { versus: vec![REFERENCE.into(), REFERENCE_OVERWRITE.into()], ratio: 0.8 },
            text: "W5 ≥ 0.8× the faster per-file fdatasync reference".into(),
        })
        .collect()
}

/// The line writer `writer` of a session appends as its `append`-th.
fn writer_seq(writer: usize, append: usize, appends: usize) -> u64 {
    (writer * appends + append) as u64
}

/// One thread per writer; per-append latencies of all threads, and the wall time from
/// the start of the threads to the last one's end (pre-zeroing the files is not timed).
fn raw_writers(kind: RawFile, dir: &Path, sessions: usize, writers: usize, appends: usize) -> Result<(Vec<f64>, f64)> {
    let session_bytes =
        || raw::lines_len((0..writers).flat_map(|writer| (0..appends).map(move |a| writer_seq(writer, a, appends))));
    let mut files = Vec::with_capacity(sessions);
    for session in 0..sessions {
        let path = dir.join(format!("session-{session}.jsonl"));
        if kind == RawFile::Overwrite {
            raw::prezeroed(&path, session_bytes())?;
        }
        files.push((path, Arc::new(AtomicU64::new(0))));
    }
    let barrier = Arc::new(Barrier::new(sessions * writers));
    let started = Instant::now();
    let mut threads = Vec::new();
    for (path, next_offset) in &files {
        for writer in 0..writers {
            let (path, next_offset, barrier) = (path.clone(), next_offset.clone(), barrier.clone());
            threads.push(std::thread::spawn(move || -> std::io::Result<Vec<f64>> {
                let file = match kind {
                    RawFile::Growing => std::fs::OpenOptions::new().create(true).append(true).open(path)?,
                    RawFile::Overwrite => std::fs::OpenOptions::new().write(true).open(path)?,
                };
                barrier.wait();
                let mut latencies = Vec::with_capacity(appends);
                for append in 0..appends {
                    let line = chat_line(writer_seq(writer, append, appends));
                    let started = Instant::now();
                    match kind {
                        // `O_APPEND`: each write lands whole at the end of the file.
                        RawFile::Growing => (&file).write_all(&line)?,
                        // The session's next offset, claimed by this writer alone.
                        RawFile::Overwrite => {
                            let offset = next_offset.fetch_add(line.len() as u64, Ordering::Relaxed);
                            file.write_all_at(&line, offset)?
                        }
                    }
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
    Ok((latencies, started.elapsed().as_secs_f64()))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines in a session file, sorted (writers interleave), and the file's length.
    fn session_lines(dir: &Path, session: usize) -> (Vec<Vec<u8>>, u64) {
        let bytes = std::fs::read(dir.join(format!("session-{session}.jsonl"))).expect("read");
        let data = bytes.iter().rposition(|&b| b != 0).map_or(&bytes[..0], |end| &bytes[..=end]);
        let mut lines: Vec<Vec<u8>> = data.split_inclusive(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
        lines.sort();
        (lines, bytes.len() as u64)
    }

    #[test]
    fn both_raw_references_write_every_line_of_every_writer() {
        let (sessions, writers, appends) = (2, 3, 4);
        let mut expected: Vec<Vec<u8>> =
            (0..writers).flat_map(|w| (0..appends).map(move |a| chat_line(writer_seq(w, a, appends)))).collect();
        expected.sort();
        let data_len: u64 = expected.iter().map(|line| line.len() as u64).sum();
        for kind in [RawFile::Growing, RawFile::Overwrite] {
            let dir = tempfile::tempdir().expect("tempdir");
            let (latencies, seconds) = raw_writers(kind, dir.path(), sessions, writers, appends).expect("writers");
            assert_eq!(latencies.len(), sessions * writers * appends, "{kind:?}");
            assert!(seconds > 0.0);
            for session in 0..sessions {
                let (lines, file_len) = session_lines(dir.path(), session);
                assert_eq!(lines, expected, "{kind:?} session {session}");
                match kind {
                    RawFile::Growing => assert_eq!(file_len, data_len),
                    // Written inside the pre-zeroed space: the file kept its size.
                    RawFile::Overwrite => assert_eq!(file_len, data_len.div_ceil(4096) * 4096),
                }
            }
        }
    }
}
