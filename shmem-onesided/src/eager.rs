//! The sender's eager area: blocks for buffered (two-copy) messages.
//!
//! A buffered send copies its payload into a block of its own eager area
//! and publishes a header naming the block; the receiver copies the data
//! out and raises the block's release flag; the sender then reuses the
//! block. [`EagerArea`] owns the allocator ([`SymHeap`]) and the list of
//! blocks in flight (handed out, not yet released), oldest first.
//!
//! Blocks of up to [`POOL_MAX`] bytes come in size classes (four per
//! doubling above 256 bytes, so at most a quarter is wasted) and a
//! released one is kept on its class's stack instead of going back to the
//! first-fit allocator: the next send of that class takes the block
//! released last, whose lines are still in this core's and the receiver's
//! cache, where a first-fit allocator over an 8 MiB area would hand out
//! block after block of cold memory while older ones are still in flight.
//!
//! Streams of large blocks are the exception. While older blocks are still
//! in flight (a window of sends), a class of [`STREAM_OLDEST_MIN`] bytes or
//! more hands out its *oldest* kept block instead, and keeps at most
//! [`STREAM_KEEP`] of them: a bounded ring, as a fixed set of cells is in
//! MPICH and UCX. Taking the warmest one there let the set of blocks in
//! circulation settle anywhere from 13 to 64 depending on how the first
//! windows went, and a stream of 8 KiB messages ran at 8–12 GB/s
//! accordingly; with the bounded ring, 11 runs of 12 ran at 12.0–13.1 GB/s.
//! It does not remove every slow start: after `osu`'s latency test a
//! window of 8 KiB sends still often begins near 9 GB/s and moves to 13
//! only some rounds later (crate README, "A stream's blocks in a ring").
//!
//! The stacks hold at most a quarter of the area; when the allocator cannot
//! serve a request they are emptied back into it, so the area's capacity is
//! never lost to them (a message as large as the area still fits once
//! everything is released).
//!
//! The module is pure bookkeeping: whether a block was released is asked
//! through a callback (the endpoint reads the flag in shared memory).

use crate::heap::SymHeap;
use std::collections::VecDeque;

/// Largest block (flag line included) that is kept for reuse when
/// released; larger ones go back to the allocator.
pub(crate) const POOL_MAX: u64 = 128 << 10;
/// Number of size classes up to [`POOL_MAX`].
const CLASSES: usize = 40;
/// Classes of blocks of at least this many bytes (flag line included)
/// hand out their oldest kept block while older blocks are in flight (see
/// the module's documentation). 8 KiB, so that 8 KiB payloads (10 KiB
/// blocks) take it and 4 KiB ones do not: with it their `bw` was 0.92×,
/// and 1 process of 16 reached the fast state against 7 without.
pub(crate) const STREAM_OLDEST_MIN: u64 = 8 << 10;
/// Kept blocks per class of [`STREAM_OLDEST_MIN`] bytes or more. With 16 a
/// stream of 8 KiB messages ran at 8.3 GB/s (3 runs); with 32 and with 64,
/// 14 processes of 20 each reached the fast state (about 14 GB/s), so the
/// smaller ring.
pub(crate) const STREAM_KEEP: usize = 32;
/// No class: the block was allocated at its exact size.
const NO_CLASS: u8 = u8::MAX;

/// The size class of a block of `need` bytes: its index and the class's
/// block size (a multiple of 64 and at least `need`), or `None` above
/// [`POOL_MAX`]. Classes are 64, 128, 192, 256 and then four per doubling
/// (320, 384, 448, 512, 640, …, 131072).
pub(crate) fn class_of(need: u64) -> Option<(usize, u64)> {
    if need > POOL_MAX {
        return None;
    }
    let n = need.max(1).next_multiple_of(64);
    if n <= 256 {
        return Some(((n / 64 - 1) as usize, n));
    }
    // 2^lg < n <= 2^(lg + 1), lg >= 8.
    let lg = 63 - u64::from((n - 1).leading_zeros());
    let step = 1u64 << (lg - 2);
    let size = n.next_multiple_of(step);
    let idx = 4 + (lg as usize - 8) * 4 + ((size - (1 << lg)) / step) as usize - 1;
    Some((idx, size))
}

/// A sender's eager area: allocator, per-class stacks of released blocks,
/// and the blocks in flight.
#[derive(Debug)]
pub(crate) struct EagerArea {
    heap: SymHeap,
    /// Released blocks kept for reuse, per class; the last one pushed is
    /// the warmest, the first the oldest.
    stacks: Vec<Vec<u64>>,
    /// Bytes in `stacks`.
    cached: u64,
    /// At most this many bytes are kept in `stacks`.
    cache_cap: u64,
    /// Blocks handed out and not yet taken back, oldest first, with their
    /// class ([`NO_CLASS`] for exact-size blocks).
    in_flight: VecDeque<(u64, u8)>,
    /// Payloads of at least this many bytes are copied into a block with
    /// `rep movsb` (`crate::copy::to_block`; `usize::MAX`: never).
    movsb_min: usize,
}

impl EagerArea {
    /// An empty area of `size` bytes, whose blocks are filled with `rep
    /// movsb` from `movsb_min` bytes on.
    pub(crate) fn new(size: u64, movsb_min: usize) -> Self {
        let heap = SymHeap::new(size);
        EagerArea {
            cache_cap: heap.size() / 4,
            heap,
            stacks: vec![Vec::new(); CLASSES],
            cached: 0,
            in_flight: VecDeque::new(),
            movsb_min,
        }
    }

    /// From how many bytes a payload is copied in with `rep movsb`.
    #[inline]
    pub(crate) fn movsb_min(&self) -> usize {
        self.movsb_min
    }

    /// The area's size in bytes (a multiple of 64).
    pub(crate) fn size(&self) -> u64 {
        self.heap.size()
    }

    /// Blocks in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// A block of at least `need` bytes, 64-byte aligned, now in flight;
    /// `None` if the area has no room even after taking back every block
    /// `released` says the receiver is done with.
    pub(crate) fn alloc(&mut self, need: u64, released: impl Fn(u64) -> bool) -> Option<u64> {
        let class = class_of(need).filter(|&(_, size)| size <= self.heap.size());
        if let Some((c, _)) = class {
            if self.stacks[c].is_empty() && !self.in_flight.is_empty() {
                // The oldest blocks are usually the ones released by now.
                self.reclaim_front(&released);
            }
            if let Some(off) = self.pop_kept(class) {
                return Some(off);
            }
        }
        if let Some(off) = self.alloc_fresh(need, class) {
            return Some(off);
        }
        // Blocks released out of order.
        if self.reclaim(&released) > 0 {
            if let Some(off) = self
                .pop_kept(class)
                .or_else(|| self.alloc_fresh(need, class))
            {
                return Some(off);
            }
        }
        // The kept blocks back to the allocator, so that they coalesce.
        if self.cached > 0 {
            self.flush_stacks();
            return self.alloc_fresh(need, class);
        }
        None
    }

    /// Whether a class of blocks of `size` bytes hands out its oldest kept
    /// block now (a stream of large blocks) rather than its warmest.
    #[inline]
    fn oldest_first(&self, size: u64) -> bool {
        size >= STREAM_OLDEST_MIN && self.in_flight.len() > 1
    }

    /// A kept block of `class` (the one released last, or in a stream of
    /// large blocks the oldest kept), now in flight.
    fn pop_kept(&mut self, class: Option<(usize, u64)>) -> Option<u64> {
        let (c, size) = class?;
        let oldest = self.oldest_first(size);
        let kept = &mut self.stacks[c];
        let off = if oldest && !kept.is_empty() {
            // At most `STREAM_KEEP` entries move down.
            kept.remove(0)
        } else {
            kept.pop()?
        };
        self.cached -= size;
        self.in_flight.push_back((off, c as u8));
        Some(off)
    }

    /// The block the next [`EagerArea::alloc`] of `need` bytes would most
    /// likely hand out (the kept block [`EagerArea::alloc`] takes first),
    /// as a prefetch hint.
    #[inline]
    pub(crate) fn next_kept(&self, need: u64) -> Option<u64> {
        let (c, size) = class_of(need)?;
        let kept = self.stacks.get(c)?;
        if self.oldest_first(size) {
            kept.first().copied()
        } else {
            kept.last().copied()
        }
    }

    /// A new block from the allocator (of the class's size, or exactly
    /// `need` bytes without a class), now in flight.
    fn alloc_fresh(&mut self, need: u64, class: Option<(usize, u64)>) -> Option<u64> {
        let (off, c) = match class {
            Some((c, size)) => (self.heap.alloc(size, 64).ok()?, c as u8),
            None => (self.heap.alloc(need, 64).ok()?, NO_CLASS),
        };
        self.in_flight.push_back((off, c));
        Some(off)
    }

    /// Takes back the block just handed out by [`EagerArea::alloc`] (at
    /// `off`, the newest in flight) without it having been used: it goes
    /// where a released block goes. Nothing happens if `off` is not the
    /// newest block in flight.
    pub(crate) fn unalloc_last(&mut self, off: u64) {
        if let Some(&(last, c)) = self.in_flight.back() {
            if last == off {
                self.in_flight.pop_back();
                self.put_back(off, c);
            }
        }
    }

    /// Takes back every block in flight that `released` says is free;
    /// returns how many.
    pub(crate) fn reclaim(&mut self, released: impl Fn(u64) -> bool) -> usize {
        let before = self.in_flight.len();
        let mut back = Vec::new();
        self.in_flight.retain(|&(off, c)| {
            if released(off) {
                back.push((off, c));
                false
            } else {
                true
            }
        });
        for (off, c) in back {
            self.put_back(off, c);
        }
        before - self.in_flight.len()
    }

    /// Takes back the oldest blocks in flight while `released` says they
    /// are free (stops at the first one still in use): cheap however many
    /// blocks a lagging receiver holds. Returns how many.
    pub(crate) fn reclaim_front(&mut self, released: impl Fn(u64) -> bool) -> usize {
        let mut n = 0;
        while let Some(&(off, c)) = self.in_flight.front() {
            if !released(off) {
                break;
            }
            self.in_flight.pop_front();
            self.put_back(off, c);
            n += 1;
        }
        n
    }

    fn put_back(&mut self, off: u64, c: u8) {
        if c != NO_CLASS {
            if let Some((_, size)) = class_size(c) {
                let kept = &self.stacks[c as usize];
                let room = size < STREAM_OLDEST_MIN || kept.len() < STREAM_KEEP;
                if room && self.cached + size <= self.cache_cap {
                    self.stacks[c as usize].push(off);
                    self.cached += size;
                    return;
                }
            }
        }
        // The offset came from this allocator and is in flight exactly once.
        let _ = self.heap.free(off);
    }

    /// Returns every kept block to the allocator (so that it can coalesce
    /// them for a larger request).
    fn flush_stacks(&mut self) {
        for s in &mut self.stacks {
            for off in s.drain(..) {
                let _ = self.heap.free(off);
            }
        }
        self.cached = 0;
    }
}

/// The block size of class `c`.
fn class_size(c: u8) -> Option<(usize, u64)> {
    let c = usize::from(c);
    if c >= CLASSES {
        return None;
    }
    let size = if c < 4 {
        (c as u64 + 1) * 64
    } else {
        let lg = 8 + (c - 4) / 4;
        let k = (c - 4) % 4 + 1;
        (1u64 << lg) + k as u64 * (1u64 << (lg - 2))
    };
    Some((c, size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cell::RefCell;
    use std::collections::HashSet;

    /// A block need of the 10 KiB class (an 8 KiB payload and its flag line).
    const EAGER_TEST_BIG: u64 = 8192 + 64;

    #[test]
    fn classes_cover_sizes_with_little_waste() {
        let mut last = (0, 0);
        for need in 1..=POOL_MAX {
            let (c, size) = class_of(need).unwrap();
            assert!(size >= need && size % 64 == 0, "{need} -> {size}");
            assert_eq!(class_size(c as u8), Some((c, size)), "class {c}");
            assert!(c < CLASSES);
            assert!(c >= last.0 && size >= last.1, "monotonic at {need}");
            if need > 256 {
                assert!(size - need < size / 4 + 64, "waste at {need}: {size}");
            }
            last = (c, size);
        }
        assert_eq!(last, (CLASSES - 1, POOL_MAX));
        assert_eq!(class_of(POOL_MAX + 1), None);
    }

    #[test]
    fn a_released_block_is_reused_first() {
        let mut a = EagerArea::new(1 << 20, usize::MAX);
        let freed = RefCell::new(HashSet::new());
        let rel = |o: u64| freed.borrow().contains(&o);
        let x = a.alloc(1088, rel).unwrap();
        let y = a.alloc(1088, rel).unwrap();
        assert_ne!(x, y);
        freed.borrow_mut().insert(x);
        // x is the oldest in flight and released: taken back and reused.
        assert_eq!(a.alloc(1100, rel), Some(x), "same class (1280 bytes)");
        assert_eq!(a.in_flight(), 2);
        freed.borrow_mut().insert(y);
        freed.borrow_mut().insert(x);
        assert_eq!(a.reclaim(rel), 2);
        assert_eq!(a.in_flight(), 0);
        // LIFO: the last one taken back comes first.
        let z = a.alloc(1088, |_| false).unwrap();
        assert!(z == x || z == y);
    }

    /// `next_kept` names the block the next allocation of that size hands
    /// out (the warmest released one of its class), and nothing when the
    /// class has none kept.
    #[test]
    fn next_kept_is_the_block_alloc_hands_out_next() {
        let mut a = EagerArea::new(1 << 20, usize::MAX);
        let freed = RefCell::new(HashSet::new());
        let rel = |o: u64| freed.borrow().contains(&o);
        assert_eq!(a.next_kept(1088), None, "nothing released yet");
        let x = a.alloc(1088, rel).unwrap();
        let y = a.alloc(1088, rel).unwrap();
        let other = a.alloc(200, rel).unwrap();
        freed.borrow_mut().extend([x, y, other]);
        assert_eq!(a.reclaim(rel), 3);
        let next = a.next_kept(1100).expect("a 1280-byte block is kept");
        assert!(next == x || next == y);
        assert_eq!(a.alloc(1100, |_| false), Some(next));
        let last = a.next_kept(1088).expect("the other one");
        assert_ne!(last, next);
        assert_eq!(a.alloc(1088, |_| false), Some(last));
        assert_eq!(a.next_kept(1088), None, "class emptied");
        assert_eq!(a.next_kept(200), Some(other), "other classes apart");
        assert_eq!(a.next_kept(POOL_MAX + 1), None, "no class");
    }

    /// While older blocks are in flight, a class of `STREAM_OLDEST_MIN`
    /// bytes or more hands out its oldest kept block (and `next_kept`
    /// names it); a lone send, and smaller classes, the warmest.
    #[test]
    fn streams_of_large_blocks_take_the_oldest_kept() {
        let big = EAGER_TEST_BIG;
        let mut a = EagerArea::new(4 << 20, usize::MAX);
        let freed = RefCell::new(HashSet::new());
        let rel = |o: u64| freed.borrow().contains(&o);
        let b: Vec<u64> = (0..4).map(|_| a.alloc(big, rel).unwrap()).collect();
        freed.borrow_mut().extend([b[0], b[1]]);
        assert_eq!(a.reclaim_front(rel), 2);
        assert_eq!(a.in_flight(), 2, "b[2] and b[3] still out: a stream");
        assert_eq!(a.next_kept(big), Some(b[0]));
        assert_eq!(a.alloc(big, |_| false), Some(b[0]), "oldest kept, not b[1]");
        // The same in a small class: the warmest.
        let s: Vec<u64> = (0..2).map(|_| a.alloc(200, |_| false).unwrap()).collect();
        freed.borrow_mut().extend(s.iter().copied());
        assert_eq!(
            a.reclaim(rel),
            3,
            "s[0], s[1], and b[0] (its flag still reads released)"
        );
        assert_eq!(a.next_kept(200), Some(s[1]));
        assert_eq!(a.alloc(200, |_| false), Some(s[1]));
        // A lone send: everything released, nothing in flight.
        let mut l = EagerArea::new(4 << 20, usize::MAX);
        let x = l.alloc(big, |_| false).unwrap();
        let y = l.alloc(big, |_| false).unwrap();
        assert_eq!(l.reclaim(|_| true), 2);
        assert_eq!(l.in_flight(), 0);
        assert_eq!(l.next_kept(big), Some(y));
        assert_eq!(l.alloc(big, |_| false), Some(y), "the warmest");
        assert_ne!(x, y);
    }

    /// A class of `STREAM_OLDEST_MIN` bytes or more keeps at most
    /// `STREAM_KEEP` released blocks; the rest go back to the allocator.
    #[test]
    fn large_classes_keep_a_bounded_ring() {
        let big = EAGER_TEST_BIG;
        let mut a = EagerArea::new(8 << 20, usize::MAX);
        let n = STREAM_KEEP + 8;
        let b: Vec<u64> = (0..n).map(|_| a.alloc(big, |_| false).unwrap()).collect();
        assert_eq!(a.reclaim(|_| true), n);
        let (c, size) = class_of(big).unwrap();
        assert_eq!(a.stacks[c].len(), STREAM_KEEP);
        assert_eq!(
            a.stacks[c],
            b[..STREAM_KEEP],
            "the first released are kept, in order"
        );
        assert_eq!(a.cached, STREAM_KEEP as u64 * size);
        // Small classes are bounded by bytes only.
        let s: Vec<u64> = (0..n).map(|_| a.alloc(1000, |_| false).unwrap()).collect();
        assert_eq!(a.reclaim(|_| true), n);
        assert_eq!(a.stacks[class_of(1000).unwrap().0].len(), s.len());
    }

    #[test]
    fn the_whole_area_fits_once_everything_is_released() {
        let size = 64 << 10;
        let mut a = EagerArea::new(size, usize::MAX);
        let mut offs = Vec::new();
        while let Some(o) = a.alloc(300, |_| false) {
            offs.push(o);
        }
        assert!(offs.len() >= 150, "{} blocks", offs.len());
        assert_eq!(a.alloc(size, |_| false), None);
        // Released but never reclaimed: alloc takes them back itself.
        assert_eq!(a.alloc(size, |_| true), Some(0));
        assert_eq!(a.in_flight(), 1);
    }

    #[test]
    fn small_areas_fall_back_to_exact_sizes() {
        // 4096 + 64 rounds to a 5120-byte class, larger than the area.
        let mut a = EagerArea::new(4160, usize::MAX);
        assert_eq!(a.alloc(4160, |_| false), Some(0));
        assert_eq!(a.alloc(64, |_| false), None);
        assert_eq!(a.alloc(4160, |_| true), Some(0));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Blocks in flight never overlap and stay in bounds; releasing
        /// everything gives the whole area back.
        #[test]
        fn blocks_in_flight_are_disjoint(
            ops in proptest::collection::vec((1u64..40_000, 0u8..4), 1..120)
        ) {
            let size = 256 << 10;
            let mut a = EagerArea::new(size, usize::MAX);
            let freed = RefCell::new(HashSet::new());
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (need, op) in ops {
                if op == 0 && !live.is_empty() {
                    let (o, _) = live.remove(need as usize % live.len());
                    freed.borrow_mut().insert(o);
                    continue;
                }
                let got = {
                    let rel = |o: u64| freed.borrow().contains(&o);
                    a.alloc(need, rel)
                };
                if let Some(o) = got {
                    // A reused offset is no longer released.
                    freed.borrow_mut().remove(&o);
                    prop_assert_eq!(o % 64, 0);
                    prop_assert!(o + need <= size);
                    for &(p, pl) in &live {
                        prop_assert!(o + need <= p || p + pl <= o, "overlap");
                    }
                    live.push((o, need));
                }
                if op == 3 {
                    let rel = |o: u64| freed.borrow().contains(&o);
                    a.reclaim(rel);
                }
            }
            for &(o, _) in &live {
                prop_assert!(a.in_flight.iter().any(|&(f, _)| f == o));
            }
            for (o, _) in live {
                freed.borrow_mut().insert(o);
            }
            let rel = |o: u64| freed.borrow().contains(&o);
            prop_assert_eq!(a.alloc(size, rel), Some(0));
        }
    }
}
