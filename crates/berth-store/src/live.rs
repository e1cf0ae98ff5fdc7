//! The live write path's buffer (R-P5): events published without awaiting wait here,
//! at most one coalescing window (`LIVE_WINDOW_MS`, bounded, not debounced) or until the
//! buffer holds `LIVE_WINDOW_BYTES_MAX`, then drain in order through the write handle.

use berth_core::limits::{BATCH_BYTES_MAX, BATCH_EVENTS_MAX};
use berth_core::{Error, Event};
use std::collections::VecDeque;

#[derive(Default)]
pub(crate) struct LiveBuffer {
    pub(crate) events: VecDeque<Event>,
    pub(crate) bytes: usize,
    /// The seq the handle accepts next (stored next seq + buffered events).
    pub(crate) next_seq: u64,
    pub(crate) timer_armed: bool,
    /// A drain failed: no timer fires until an explicit drain succeeds.
    pub(crate) paused: bool,
    /// The failure of the last background drain, kept for the next explicit drain.
    pub(crate) background_error: Option<Error>,
    /// Events `0..flushed_next_seq` were drained and synced by a successful `flush`;
    /// `None` before one, and again after a failed write (a poisoned writer is asked).
    pub(crate) flushed_next_seq: Option<u64>,
}

/// An event's size estimate for window and batch limits.
pub(crate) fn event_bytes(event: &Event) -> usize {
    event.size_estimate_bytes()
}

impl LiveBuffer {
    pub(crate) fn new(next_seq: u64) -> LiveBuffer {
        LiveBuffer { next_seq, ..LiveBuffer::default() }
    }

    pub(crate) fn push(&mut self, event: Event) {
        self.bytes += event_bytes(&event);
        self.next_seq = event.seq.get() + 1;
        self.events.push_back(event);
    }

    /// Takes the oldest events, at most one batch's worth.
    pub(crate) fn take_batch(&mut self) -> Vec<Event> {
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
    pub(crate) fn restore_front(&mut self, batch: Vec<Event>) {
        for event in batch.into_iter().rev() {
            self.bytes += event_bytes(&event);
            self.events.push_front(event);
        }
        self.paused = true;
    }
}
