//! The live write path's buffer (R-P5): events published without awaiting wait here,
//! at most one coalescing window (`LIVE_WINDOW_MS`, bounded, not debounced) or until the
//! buffer holds `LIVE_WINDOW_BYTES_MAX`, then drain in order through the write handle.
//!
//! This is the write-behind hand-off's synchronous core: every decision the handle makes
//! under its live lock (accepting a published event and arming the timer, taking a
//! batch to drain, putting a failed one back, what a flush covers and records, sealing
//! on close) is a method here, so `tests/loom_models.rs` runs the same decisions under
//! loom, with the 200 ms timer as an explicit event. Public only for those models.

use berth_core::limits::{BATCH_BYTES_MAX, BATCH_EVENTS_MAX};
use berth_core::{Error, Event};
use std::collections::VecDeque;

#[derive(Default)]
pub struct LiveBuffer {
    pub events: VecDeque<Event>,
    pub bytes: usize,
    /// The seq the handle accepts next (stored next seq + buffered events).
    pub next_seq: u64,
    pub timer_armed: bool,
    /// A drain failed: no timer fires until an explicit drain succeeds.
    pub paused: bool,
    /// The failure of the last background drain, kept for the next explicit drain.
    pub background_error: Option<Error>,
    /// Events `0..flushed_next_seq` were drained and synced by a successful `flush`;
    /// `None` before one, and again after a failed write (a poisoned writer is asked).
    pub flushed_next_seq: Option<u64>,
}

/// What the publisher must start after `accept`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// Start the window's timer (a background drain one window from now).
    pub arm_timer: bool,
    /// The window is full: drain in the background now.
    pub drain_now: bool,
}

/// An event's size estimate for window and batch limits.
pub(crate) fn event_bytes(event: &Event) -> usize {
    event.size_estimate_bytes()
}

impl LiveBuffer {
    pub fn new(next_seq: u64) -> LiveBuffer {
        LiveBuffer { next_seq, ..LiveBuffer::default() }
    }

    /// A published event joins the buffer (its checks passed under the same lock); arms
    /// the timer unless one is armed or draining is paused by a failure.
    pub fn accept(&mut self, event: Event, window_bytes_max: usize) -> Accepted {
        self.push(event);
        let arm_timer = !self.timer_armed && !self.paused;
        if arm_timer {
            self.timer_armed = true;
        }
        Accepted { arm_timer, drain_now: !self.paused && self.bytes >= window_bytes_max }
    }

    /// The next batch a drain writes (empty: the drain is done). A drain in progress
    /// covers whatever the armed timer was for.
    pub fn next_drain_batch(&mut self) -> Vec<Event> {
        self.timer_armed = false;
        self.take_batch()
    }

    /// An explicit drain (flush, append, close) succeeded: draining resumes.
    pub fn drained_explicitly(&mut self) {
        self.paused = false;
        self.background_error = None;
    }

    /// Whether a flush that began when the handle accepted up to `covered_seq` has
    /// nothing left to do: an earlier flush already drained and synced all of it.
    pub fn flush_covers(&self, covered_seq: u64) -> bool {
        self.flushed_next_seq.is_some_and(|flushed| flushed >= covered_seq)
    }

    /// The seq below which every accepted event has been handed to the writer.
    pub fn drained_seq(&self) -> u64 {
        self.next_seq - self.events.len() as u64
    }

    /// A flush synced everything below `drained_seq`.
    pub fn record_flush(&mut self, drained_seq: u64) {
        self.flushed_next_seq = Some(self.flushed_next_seq.map_or(drained_seq, |flushed| flushed.max(drained_seq)));
    }

    /// After a final drain of `close`: whether the handle may seal now (the drain
    /// failed, or nothing was published meanwhile). Sealing discards what is left (it
    /// was never acknowledged as durable).
    pub fn seal_after_final_drain(&mut self, drain_failed: bool) -> bool {
        if drain_failed || self.events.is_empty() {
            self.events.clear();
            self.bytes = 0;
            return true;
        }
        false
    }

    pub(crate) fn push(&mut self, event: Event) {
        self.bytes += event_bytes(&event);
        self.next_seq = event.seq.get() + 1;
        self.events.push_back(event);
    }

    /// Takes the oldest events, at most one batch's worth.
    pub fn take_batch(&mut self) -> Vec<Event> {
        let mut batch = Vec::new();
        let mut bytes = 0;
        while let Some(event) = self.events.front() {
            let size = event_bytes(event);
            if !batch.is_empty() && (batch.len() >= BATCH_EVENTS_MAX || bytes + size > BATCH_BYTES_MAX) {
                break;
            }
            bytes += size;
            batch.push(self.events.pop_front().expect("front exists"));
        }
        self.bytes -= bytes;
        batch
    }

    /// Puts a batch that failed to drain back in front, keeping the order.
    pub fn restore_front(&mut self, batch: Vec<Event>) {
        for event in batch.into_iter().rev() {
            self.bytes += event_bytes(&event);
            self.events.push_front(event);
        }
        self.paused = true;
    }
}
