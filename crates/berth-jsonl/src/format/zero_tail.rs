//! The zero tail of a preallocated log (log format version 2): space past the last
//! record that the writer filled with `\0` bytes ahead of its appends, so an append
//! overwrites written space and its `fdatasync` flushes data without a metadata commit.
//!
//! A record never contains a `\0` byte (JSON text cannot hold a raw NUL, and the
//! encoder escapes control characters), so the data of a log ends where its trailing
//! run of `\0` bytes begins. Two ways to find it:
//!
//! - `data_end`: exact, walking back from the end of the file over the zeros (at most
//!   `TAIL_BYTES_MAX` of them in a log one writer preallocated). The recovery scanner,
//!   `fsck`, torn-tail repair and backup use it.
//! - `first_nul`: the first `\0` at or after a position known to hold data, found by
//!   bisection over blocks. A live reader uses it: while a single writer appends, the
//!   bytes from a record start on are non-NUL data, then NULs, so the first NUL is the
//!   end; in a file a crash left otherwise, every record is still checked by its CRC.

use super::{read_fully, ReadAt};
use std::io;

/// The first extent a writer preallocates, and the smallest.
pub const EXTENT_BYTES_MIN: u64 = 64 * 1024;
/// The largest extent a writer preallocates at once.
pub const EXTENT_BYTES_MAX: u64 = 1024 * 1024;
/// The most zero-filled bytes an open log carries past its data: a writer never extends
/// past its data end plus this (the documented per-log disk-usage bound).
pub const TAIL_BYTES_MAX: u64 = 2 * EXTENT_BYTES_MAX;

/// Bytes `data_end` reads per call, walking back.
const BACK_CHUNK_BYTES: usize = 64 * 1024;
/// Bytes one bisection probe of `first_nul` reads.
const PROBE_BYTES: usize = 16 * 1024;

/// The start of the trailing run of `\0` bytes of `source[floor..len]` (`len` when the
/// last byte is not NUL, `floor` when every byte is). Reads only the zeros and one
/// chunk before them.
pub fn data_end<S: ReadAt + ?Sized>(source: &S, floor: u64, len: u64) -> io::Result<u64> {
    let mut end = len;
    let mut buf = vec![0u8; BACK_CHUNK_BYTES];
    while end > floor {
        let start = end.saturating_sub(BACK_CHUNK_BYTES as u64).max(floor);
        let want = usize::try_from(end - start).unwrap_or(BACK_CHUNK_BYTES);
        let read = read_fully(source, &mut buf[..want], start)?;
        if let Some(index) = buf[..read].iter().rposition(|byte| *byte != 0) {
            return Ok(start + index as u64 + 1);
        }
        // A short read: the file shrank under us; what is missing holds no data.
        end = start;
    }
    Ok(floor)
}

/// Whether every byte of `source[from..to]` is `\0` (bytes past the end count as zero).
pub fn is_zero<S: ReadAt + ?Sized>(source: &S, from: u64, to: u64) -> io::Result<bool> {
    Ok(data_end(source, from, to)? == from)
}

/// The first `\0` byte in `source[from..len]` (`len` if none), for a file whose bytes
/// from `from` on are non-NUL data followed by NULs: the end of a live log's data, with
/// `from` a position known to hold data (the end of the records a reader validated).
/// A probe at `from` first (a reader that follows the log finds the end there), then a
/// bisection over `PROBE_BYTES` blocks, starting no lower than `TAIL_BYTES_MAX` below
/// the end when the data reaches that far.
pub fn first_nul<S: ReadAt + ?Sized>(source: &S, from: u64, len: u64) -> io::Result<u64> {
    if from >= len {
        return Ok(len);
    }
    let mut last = [0u8; 1];
    if read_fully(source, &mut last, len - 1)? == 1 && last[0] != 0 {
        return Ok(len);
    }
    let mut buf = vec![0u8; PROBE_BYTES];
    // The answer lies in `lo..=hi`; `hi` holds a NUL (or is past the end).
    let (mut lo, mut hi) = (from, len - 1);
    let probe = |at: u64, hi: u64, buf: &mut [u8]| -> io::Result<Result<u64, u64>> {
        let want = usize::try_from(hi - at).unwrap_or(PROBE_BYTES).min(PROBE_BYTES);
        let read = read_fully(source, &mut buf[..want], at)?;
        Ok(match memchr::memchr(0, &buf[..read]) {
            Some(index) => Ok(at + index as u64),
            // A short read: the file shrank; the end is where it stops.
            None if read < want => Ok(at + read as u64),
            None => Err(at + read as u64),
        })
    };
    match probe(lo, hi, &mut buf)? {
        Ok(nul) => return Ok(nul),
        Err(next) => lo = next,
    }
    let deep = hi.saturating_sub(TAIL_BYTES_MAX + PROBE_BYTES as u64);
    if deep > lo {
        match probe(deep, hi, &mut buf)? {
            Ok(nul) => hi = nul,
            Err(next) => lo = next,
        }
    }
    while hi - lo > PROBE_BYTES as u64 {
        let mid = lo + (hi - lo) / 2;
        match probe(mid, hi, &mut buf)? {
            Ok(nul) => hi = nul,
            Err(next) => lo = next,
        }
    }
    if lo >= hi {
        return Ok(hi);
    }
    match probe(lo, hi, &mut buf)? {
        Ok(nul) => Ok(nul),
        Err(_) => Ok(hi),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(data: usize, zeros: usize) -> Vec<u8> {
        let mut bytes: Vec<u8> = (0..data).map(|index| b'a' + (index % 26) as u8).collect();
        bytes.resize(data + zeros, 0);
        bytes
    }

    #[test]
    fn finds_the_end_of_the_data_exactly_and_by_bisection() {
        for data in [0, 1, 100, 16 * 1024 - 1, 16 * 1024, 70_000, 3_000_000] {
            for zeros in [0, 1, 4095, 65_536, 65_537, 2 * 1024 * 1024] {
                let bytes = file(data, zeros);
                let len = bytes.len() as u64;
                assert_eq!(data_end(&bytes[..], 0, len).unwrap(), data as u64, "{data} + {zeros}");
                for from in [0, data / 2, data] {
                    assert_eq!(
                        first_nul(&bytes[..], from as u64, len).unwrap(),
                        data as u64,
                        "{data} + {zeros} from {from}"
                    );
                }
                assert!(is_zero(&bytes[..], data as u64, len).unwrap());
                assert_eq!(is_zero(&bytes[..], 0, len).unwrap(), data == 0);
            }
        }
    }

    #[test]
    fn data_end_keeps_to_its_floor_and_sees_garbage_among_zeros() {
        let mut bytes = file(10, 100);
        bytes[50] = 7;
        assert_eq!(data_end(&bytes[..], 0, 110).unwrap(), 51);
        assert_eq!(data_end(&bytes[..], 60, 110).unwrap(), 60);
        assert!(!is_zero(&bytes[..], 10, 110).unwrap());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        #[test]
        fn bisection_agrees_with_a_linear_search(data in 0usize..200_000, zeros in 0usize..2_200_000, from in 0usize..200_000) {
            let bytes = file(data, zeros);
            let from = from.min(data) as u64;
            proptest::prop_assert_eq!(first_nul(&bytes[..], from, bytes.len() as u64).unwrap(), data as u64);
        }
    }
}
