//! Preallocation of a log's next extent (log format version 2): the writer fills the
//! space past its data with `\0` bytes and syncs them before its appends reach it, so an
//! append overwrites written, allocated space and its `fdatasync` flushes the data
//! without a metadata commit (no size change, no block allocation).
//!
//! Extents are sized by the append rate: the first is `EXTENT_BYTES_MIN`; an extent used
//! up within `FAST` doubles the next (up to `EXTENT_BYTES_MAX`), one that lasted longer
//! than `SLOW` halves it. A handle preallocates only from its `APPENDS_BEFORE`-th append
//! on, so a short-lived handle (a create and a couple of appends) never does, and never
//! past its data end plus `TAIL_BYTES_MAX`: the zero tail of an open log is bounded.
//! A handle whose appends are large (a moving mean of `LARGE_APPEND_BYTES` or more) does
//! not extend: the metadata commit it would save is small beside the data it writes, and
//! zero-filling first would write every byte twice (`berth bench` W2, batches of 100 ~1
//! KiB events: 0.48× the overwrite reference preallocated, 0.61–0.73× not).
//! A handle with no append for `IDLE_GIVE_BACK` gives its tail back (`idle_tails`), and
//! extends again from its next append.

use crate::format::zero_tail::{EXTENT_BYTES_MAX, EXTENT_BYTES_MIN, TAIL_BYTES_MAX};
use crate::fs::{write_all_at, FsFile};
use std::io;
use std::time::{Duration, Instant};

/// Appends a handle makes before it starts preallocating (the default of
/// `JsonlOptions::preallocate_after_appends`).
pub const APPENDS_BEFORE: u64 = 4;
/// A handle whose moving mean append is at least this large does not extend.
pub const LARGE_APPEND_BYTES: u64 = 16 * 1024;
/// An extent used up faster than this doubles the next one.
const FAST: Duration = Duration::from_secs(1);
/// An extent that lasted longer than this halves the next one.
const SLOW: Duration = Duration::from_secs(30);
/// A write handle with no append for this long gives its zero tail back (the background
/// sweep of `idle_tails` does it, within `idle_tails::SWEEP_EVERY` more).
pub const IDLE_GIVE_BACK: Duration = Duration::from_secs(30);

static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// The preallocation state of one write handle on a log that may carry a zero tail.
#[derive(Clone, Debug)]
pub struct Prealloc {
    /// Whether this handle extends the log (`JsonlOptions::preallocate`); when not, it
    /// still writes into and gives back a tail an earlier writer left.
    pub extend: bool,
    /// The file's length: data, then zeros up to here.
    pub alloc_end: u64,
    extent: u64,
    appends: u64,
    appends_before: u64,
    extended_at: Option<Instant>,
    /// The last append of this handle (`None` before its first).
    appended_at: Option<Instant>,
    /// Where the last append ended the data (`None` before the first), and the moving
    /// mean of the appends' sizes (each append weighs a quarter).
    last_end: Option<u64>,
    mean_append_bytes: u64,
}

impl Prealloc {
    pub fn new(extend: bool, appends_before: u64, alloc_end: u64) -> Prealloc {
        Prealloc {
            extend,
            alloc_end,
            extent: EXTENT_BYTES_MIN,
            appends: 0,
            appends_before,
            extended_at: None,
            appended_at: None,
            last_end: None,
            mean_append_bytes: 0,
        }
    }

    /// Counts an append that ended the data at `end`; returns the range to fill with
    /// zeros now, if the space left past `end` is under half an extent.
    pub fn after_append(&mut self, end: u64, now: Instant) -> Option<(u64, u64)> {
        // The first append is measured from where the file ended at open (a tail a
        // crash left counts as no size: such a log was being appended to in small steps).
        let size = end.saturating_sub(self.last_end.unwrap_or(self.alloc_end));
        self.mean_append_bytes = if self.last_end.is_none() { size } else { (self.mean_append_bytes * 3 + size) / 4 };
        self.last_end = Some(end);
        self.appends += 1;
        self.appended_at = Some(now);
        self.alloc_end = self.alloc_end.max(end);
        if !self.extend
            || self.appends < self.appends_before
            || self.alloc_end - end >= self.extent / 2
            || self.mean_append_bytes >= LARGE_APPEND_BYTES
        {
            return None;
        }
        if let Some(last) = self.extended_at {
            let lasted = now.saturating_duration_since(last);
            if lasted < FAST {
                self.extent = (self.extent * 2).min(EXTENT_BYTES_MAX);
            } else if lasted > SLOW {
                self.extent = (self.extent / 2).max(EXTENT_BYTES_MIN);
            }
        }
        let target = (self.alloc_end + self.extent).min(end + TAIL_BYTES_MAX);
        (target > self.alloc_end).then_some((self.alloc_end, target))
    }

    /// The range `from..to` was filled and synced.
    pub fn extended(&mut self, to: u64, now: Instant) {
        self.alloc_end = self.alloc_end.max(to);
        self.extended_at = Some(now);
    }

    /// Whether the handle has a zero tail past `end` and no append since `IDLE_GIVE_BACK`
    /// before `now` (a handle that never appended is idle: its tail is one a crash left).
    pub fn idle_tail(&self, end: u64, now: Instant) -> bool {
        self.alloc_end > end
            && self.appended_at.is_none_or(|appended| now.saturating_duration_since(appended) >= IDLE_GIVE_BACK)
    }

    /// The file was cut to `len` (a rollback, a torn-tail truncation, a give-back).
    pub fn truncated(&mut self, len: u64) {
        self.alloc_end = len;
        self.last_end = self.last_end.map(|last| last.min(len));
        self.extent = EXTENT_BYTES_MIN;
        self.extended_at = None;
    }
}

/// Writes `\0` over `from..to` and `fdatasync`s it.
pub fn fill_zeros(file: &dyn FsFile, from: u64, to: u64) -> io::Result<()> {
    let mut at = from;
    while at < to {
        let count = usize::try_from(to - at).unwrap_or(ZEROS.len()).min(ZEROS.len());
        write_all_at(file, &ZEROS[..count], at)?;
        at += count as u64;
    }
    file.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_start_small_grow_with_the_rate_and_stay_bounded() {
        let start = Instant::now();
        let mut prealloc = Prealloc::new(true, APPENDS_BEFORE, 1_000);
        let mut end = 1_000;
        let mut extensions = Vec::new();
        for index in 0..20_000u64 {
            end += 1_000;
            let now = start + Duration::from_millis(index / 10);
            if let Some((from, to)) = prealloc.after_append(end, now) {
                assert!(index + 1 >= APPENDS_BEFORE, "no preallocation before the {APPENDS_BEFORE}th append");
                assert_eq!(from, prealloc.alloc_end);
                assert!(to - end <= TAIL_BYTES_MAX, "the tail stays bounded");
                extensions.push(to - from);
                prealloc.extended(to, now);
            }
        }
        assert_eq!(extensions[0], EXTENT_BYTES_MIN);
        assert_eq!(*extensions.last().unwrap(), EXTENT_BYTES_MAX, "a fast writer reaches the largest extent");
        // A slow writer's extents shrink again.
        let mut now = start + Duration::from_secs(10_000);
        let mut sizes = Vec::new();
        for _ in 0..2_000 {
            end += 1_000;
            now += Duration::from_secs(1);
            if let Some((from, to)) = prealloc.after_append(end, now) {
                sizes.push(to - from);
                prealloc.extended(to, now);
            }
        }
        assert_eq!(*sizes.last().unwrap(), EXTENT_BYTES_MIN);
    }

    #[test]
    fn a_tail_is_idle_once_no_append_came_for_the_idle_time() {
        let start = Instant::now();
        let mut prealloc = Prealloc::new(true, 0, 100);
        assert!(!prealloc.idle_tail(100, start), "no tail, nothing to give back");
        let (_, to) = prealloc.after_append(200, start).unwrap();
        prealloc.extended(to, start);
        assert!(!prealloc.idle_tail(200, start + IDLE_GIVE_BACK - Duration::from_millis(1)));
        assert!(prealloc.idle_tail(200, start + IDLE_GIVE_BACK));
        prealloc.truncated(200);
        assert!(!prealloc.idle_tail(200, start + IDLE_GIVE_BACK), "given back: no tail left");
        let again = prealloc.after_append(300, start + IDLE_GIVE_BACK);
        assert_eq!(again, Some((300, 300 + EXTENT_BYTES_MIN)), "the next append extends again");
        // A tail found at open (a crash left it) on a handle that never appended.
        let found = Prealloc::new(true, 0, 5_000);
        assert!(found.idle_tail(100, start));
    }

    #[test]
    fn large_appends_do_not_extend_until_appends_are_small_again() {
        let start = Instant::now();
        let mut prealloc = Prealloc::new(true, 0, 0);
        let mut end = 0;
        for _ in 0..50 {
            end += 100 * 1024;
            assert_eq!(prealloc.after_append(end, start), None, "bulk appends write over no zeros");
        }
        let mut extended = false;
        for _ in 0..50 {
            end += 1024;
            if let Some((_, to)) = prealloc.after_append(end, start) {
                prealloc.extended(to, start);
                extended = true;
                break;
            }
        }
        assert!(extended, "small appends extend again once the mean falls");
    }

    #[test]
    fn a_handle_that_does_not_extend_never_asks_to() {
        let mut prealloc = Prealloc::new(false, 0, 10);
        for end in 11..100 {
            assert_eq!(prealloc.after_append(end, Instant::now()), None);
        }
    }
}
