//! Spare buffers for the endpoint's own large temporaries: the copy a
//! borrowed rendezvous send registers ([`super::Endpoint::send_borrowed`])
//! and the region a blocking rendezvous receive reads into
//! ([`super::Endpoint::recv_now`]).
//!
//! Without them each such message allocated and freed a buffer of its
//! size; from glibc's mmap threshold (128 KiB) that is an `mmap` and a
//! `munmap` per message, and a page fault for every page the copy or the
//! READ touches.

use crate::pool::BufPool;

/// Buffers kept.
const KEEP: usize = 4;
/// Smallest buffer worth keeping (and taken from the spares): below it
/// the allocator reuses memory itself.
pub(super) const MIN: usize = 64 << 10;
/// Largest buffer kept (as the software device's staging pool: above it an
/// allocation costs little beside moving the data).
const MAX: usize = 16 << 20;

/// The spare buffers and their counters.
#[derive(Debug)]
pub(super) struct Spare {
    bufs: BufPool,
    /// Temporaries taken from the spares.
    pub(super) reused: u64,
    /// Temporaries allocated because no spare held them.
    pub(super) allocs: u64,
}

impl Default for Spare {
    fn default() -> Self {
        Spare {
            bufs: BufPool::new(KEEP, MIN, MAX),
            reused: 0,
            allocs: 0,
        }
    }
}

impl Spare {
    /// A buffer of exactly `len` initialised bytes (their values are
    /// unspecified: the caller overwrites what it uses).
    pub(super) fn take_len(&mut self, len: usize) -> Vec<u8> {
        let mut v = self.take(len);
        if v.len() >= len {
            v.truncate(len);
        } else {
            v.resize(len, 0);
        }
        v
    }

    /// A buffer holding a copy of `data`.
    pub(super) fn copy_of(&mut self, data: &[u8]) -> Vec<u8> {
        let mut v = self.take(data.len());
        v.clear();
        v.extend_from_slice(data);
        v
    }

    /// The smallest spare with room for `len` bytes, else a new buffer
    /// (empty, with that capacity).
    fn take(&mut self, len: usize) -> Vec<u8> {
        if len >= MIN {
            if let Some(v) = self.bufs.take_fit(len) {
                self.reused += 1;
                return v;
            }
            self.allocs += 1;
        }
        Vec::with_capacity(len)
    }

    /// Keeps a temporary that came back (a full set keeps the larger
    /// buffers); contents are not cleared.
    pub(super) fn put(&mut self, v: Vec<u8>) {
        self.bufs.put(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spares_are_reused_by_best_fit_and_small_ones_are_not_kept() {
        let mut s = Spare::default();
        let a = s.copy_of(&vec![7u8; MIN]);
        assert_eq!((a.len(), a[MIN - 1], s.allocs, s.reused), (MIN, 7, 1, 0));
        let pa = a.as_ptr();
        s.put(a);
        s.put(Vec::with_capacity(4 * MIN));
        s.put(vec![1u8; 16]);
        assert_eq!(s.bufs.len(), 2, "a small buffer is not kept");
        // Best fit: the MIN-sized spare, contents kept (no zeroing).
        let b = s.take_len(MIN);
        assert_eq!((b.as_ptr(), b.len(), b[0], s.reused), (pa, MIN, 7, 1));
        // Grown when shorter than asked: the new bytes are initialised.
        let c = s.take_len(3 * MIN);
        assert_eq!(
            (c.len(), c.capacity() >= 4 * MIN, s.reused),
            (3 * MIN, true, 2)
        );
        // None left that fits: allocated.
        let d = s.take_len(2 * MIN);
        assert_eq!((d.len(), s.allocs), (2 * MIN, 2));
        // Small requests never touch the spares.
        s.put(b);
        let e = s.take_len(100);
        assert_eq!((e.len(), s.reused, s.allocs, s.bufs.len()), (100, 2, 2, 1));
    }

    #[test]
    fn a_full_set_keeps_the_larger_buffers() {
        let mut s = Spare::default();
        for k in 1..=KEEP {
            s.put(Vec::with_capacity(k * MIN));
        }
        s.put(Vec::with_capacity(MIN / 2 + MIN));
        s.put(Vec::with_capacity(10 * MIN));
        let caps = s.bufs.capacities();
        assert_eq!(caps.len(), KEEP);
        assert!(caps[0] >= 2 * MIN, "the smallest was replaced: {caps:?}");
        assert!(caps[KEEP - 1] >= 10 * MIN);
        // Larger than the largest kept: freed.
        s.put(Vec::with_capacity(MAX + 1));
        assert!(s.bufs.capacities().iter().all(|&c| c <= MAX));
    }
}
