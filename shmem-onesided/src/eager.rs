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
//! Streams are the exception. While older blocks are still in flight (a
//! window of sends), a class of [`STREAM_MIN`] to [`STREAM_MAX`] bytes
//! (payloads from 961 bytes to 8 KiB) cycles through a ring of its own:
//! until the class has [`STREAM_RING`] bytes of blocks it takes fresh
//! ones from the allocator, and after that it hands out its *oldest* kept
//! block, as a fixed set of cells cycles in MPICH's and UCX's FIFOs.
//! Taking the warmest one there let the set of blocks in circulation be
//! as small as the first windows made it: a receiver that kept pace
//! released each block before the next send, so the sender took it back
//! at once and two or three blocks went back and forth between the cores,
//! each rewritten while its lines were still in the reader's cache. That
//! state held itself (the sender, slowed by it, never got ahead), and it
//! was `bw` 8 KiB's slow start (about 9 GB/s against 13): a C scratch
//! stream of 8 KiB messages ran at 7.5 GB/s through 2 blocks, 8.7 through
//! 4, 10.5 through 8 and 15 through 32.
//!
//! The stacks hold at most half the area; when the allocator cannot serve
//! a request they are emptied back into it, so the area's capacity is
//! never lost to them (a message as large as the area still fits once
//! everything is released). (With a quarter, the rings that `osu_ddt`'s
//! 1–8 KiB windows left kept, 1.25 MiB of the default 8 MiB area, crowded
//! out the blocks of its next sizes: bandwidth at 32 KiB packed was
//! 0.90–0.92× the build before the rings, three runs of 12 pairs; with
//! half, 0.98×, and 64 KiB 1.11×.)
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
/// stream through a ring while older blocks are in flight (see the
/// module's documentation): the 1,280-byte class (payloads of 961–1,216
/// bytes) and larger. With the ring from this class on, against from the
/// 2,560-byte one, `bw` 1 KiB was 1.23× and `bibw` 1 KiB 1.14× (A-B-B-A,
/// 16 pairs); from the 640-byte class, `bw` 512 B was 0.77×.
pub(crate) const STREAM_MIN: u64 = 1280;
/// Bytes of blocks a stream class grows its ring to before it reuses
/// them (32 blocks of 8 KiB payloads, 64 of 4 KiB, 256 of 1 KiB). Against
/// 160 KiB, `bw` 1 KiB 1.14× and 2 KiB 1.11×; against 640 KiB, `bw` 8 KiB
/// 1.17× (A-B-B-A, 16 pairs each).
pub(crate) const STREAM_RING: u64 = 320 << 10;
/// The largest stream class: the 10 KiB one, of 8 KiB payloads. Larger
/// blocks (packed sends of 16 KiB and more, copied; contiguous ones go by
/// CMA) are handed out warmest first: streamed through rings as well,
/// `osu_ddt`'s bandwidth at 16–128 KiB was 0.96–1.02× (12 pairs).
pub(crate) const STREAM_MAX: u64 = 10 << 10;
/// A stream class keeps at most `max(STREAM_RING / size, STREAM_KEEP)`
/// released blocks (the rest go back to the allocator), so classes larger
/// than 10 KiB keep 32 as before the ring was sized in bytes.
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
    stacks: Vec<VecDeque<u64>>,
    /// Bytes in `stacks`.
    cached: u64,
    /// At most this many bytes are kept in `stacks`.
    cache_cap: u64,
    /// Blocks handed out and not yet taken back, oldest first, with their
    /// class ([`NO_CLASS`] for exact-size blocks).
    in_flight: VecDeque<(u64, u8)>,
    /// Blocks of each class that exist, kept or in flight (a stream
    /// class's ring grows until they make [`STREAM_RING`] bytes).
    blocks: Vec<u32>,
    /// Payloads of at least this many bytes are copied into a block with
    /// `rep movsb` (`crate::copy::to_block`; `usize::MAX`: never).
    movsb_min: usize,
    /// The last need asked for and its class (`class_of`): a sender's
    /// next message is most often of the same size, and each send asks
    /// twice ([`EagerArea::alloc`], [`EagerArea::next_kept`]).
    last_class: (u64, Option<(usize, u64)>),
    /// Passes of [`EagerArea::reclaim_pass`] since its last full scan that
    /// found the oldest block in flight still held.
    held_passes: usize,
}

impl EagerArea {
    /// An empty area of `size` bytes, whose blocks are filled with `rep
    /// movsb` from `movsb_min` bytes on.
    pub(crate) fn new(size: u64, movsb_min: usize) -> Self {
        let heap = SymHeap::new(size);
        EagerArea {
            cache_cap: heap.size() / 2,
            heap,
            stacks: vec![VecDeque::new(); CLASSES],
            cached: 0,
            in_flight: VecDeque::new(),
            blocks: vec![0; CLASSES],
            movsb_min,
            last_class: (0, class_of(0)),
            held_passes: 0,
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

    /// The oldest block in flight.
    #[inline]
    pub(crate) fn oldest(&self) -> Option<u64> {
        self.in_flight.front().map(|&(off, _)| off)
    }

    /// A block of at least `need` bytes, 64-byte aligned, now in flight;
    /// `None` if the area has no room even after taking back every block
    /// `released` says the receiver is done with.
    pub(crate) fn alloc(&mut self, need: u64, released: impl Fn(u64) -> bool) -> Option<u64> {
        let class = self.class(need);
        let class = class.filter(|&(_, size)| size <= self.heap.size());
        // Asked before anything is taken back: a stream's reclaim can leave
        // a single block in flight.
        let stream = self.in_flight.len() > 1;
        if let Some((c, size)) = class {
            if self.ring_grows(c, size, stream) {
                if let Some(off) = self.alloc_fresh(need, class) {
                    return Some(off);
                }
            }
            if self.stacks[c].is_empty() && !self.in_flight.is_empty() {
                // The oldest blocks are usually the ones released by now.
                self.reclaim_front(&released);
            }
            if let Some(off) = self.pop_kept(class, stream) {
                return Some(off);
            }
        }
        if let Some(off) = self.alloc_fresh(need, class) {
            return Some(off);
        }
        // Blocks released out of order.
        if self.reclaim(&released) > 0 {
            if let Some(off) = self
                .pop_kept(class, stream)
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

    /// [`class_of`]`(need)`, remembered for the next call.
    #[inline]
    fn class(&mut self, need: u64) -> Option<(usize, u64)> {
        if self.last_class.0 != need {
            self.last_class = (need, class_of(need));
        }
        self.last_class.1
    }

    /// [`class_of`]`(need)`, from the remembered one when it is `need`'s.
    #[inline]
    fn class_cached(&self, need: u64) -> Option<(usize, u64)> {
        if self.last_class.0 == need {
            self.last_class.1
        } else {
            class_of(need)
        }
    }

    /// Whether a class of blocks of `size` bytes hands out its oldest kept
    /// block now (a stream class, while the sender has more than one block
    /// in flight) rather than its warmest.
    #[inline]
    fn oldest_first(size: u64, stream: bool) -> bool {
        (STREAM_MIN..=STREAM_MAX).contains(&size) && stream
    }

    /// Whether class `c` (of blocks of `size` bytes) is a stream whose ring
    /// has fewer than [`STREAM_RING`] bytes of blocks yet, so that its next
    /// block comes fresh from the allocator.
    #[inline]
    fn ring_grows(&self, c: usize, size: u64, stream: bool) -> bool {
        Self::oldest_first(size, stream) && u64::from(self.blocks[c]) * size < STREAM_RING
    }

    /// At most this many released blocks of `size` bytes are kept.
    #[inline]
    fn keep_max(size: u64) -> u64 {
        if size >= STREAM_MIN {
            (STREAM_RING / size).max(STREAM_KEEP as u64)
        } else {
            u64::MAX
        }
    }

    /// A kept block of `class` (the one released last, or in a stream the
    /// oldest kept), now in flight.
    fn pop_kept(&mut self, class: Option<(usize, u64)>, stream: bool) -> Option<u64> {
        let (c, size) = class?;
        let oldest = Self::oldest_first(size, stream);
        let kept = &mut self.stacks[c];
        let off = if oldest {
            kept.pop_front()?
        } else {
            kept.pop_back()?
        };
        self.cached -= size;
        self.in_flight.push_back((off, c as u8));
        Some(off)
    }

    /// The block the next [`EagerArea::alloc`] of `need` bytes would most
    /// likely hand out (the kept block [`EagerArea::alloc`] takes first),
    /// as a prefetch hint; `None` while a stream's ring grows (its next
    /// block is a fresh one).
    #[inline]
    pub(crate) fn next_kept(&self, need: u64) -> Option<u64> {
        let (c, size) = self.class_cached(need)?;
        let kept = self.stacks.get(c)?;
        let stream = self.in_flight.len() > 1;
        if self.ring_grows(c, size, stream) {
            return None;
        }
        if Self::oldest_first(size, stream) {
            kept.front().copied()
        } else {
            kept.back().copied()
        }
    }

    /// A new block from the allocator (of the class's size, or exactly
    /// `need` bytes without a class), now in flight.
    fn alloc_fresh(&mut self, need: u64, class: Option<(usize, u64)>) -> Option<u64> {
        let (off, c) = match class {
            Some((c, size)) => {
                let off = self.heap.alloc(size, 64).ok()?;
                self.blocks[c] += 1;
                (off, c as u8)
            }
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
        // Taken out for the scan, so that released blocks go back as they
        // are found (no list of them on the heap).
        let mut in_flight = core::mem::take(&mut self.in_flight);
        let before = in_flight.len();
        in_flight.retain(|&(off, c)| {
            if released(off) {
                self.put_back(off, c);
                false
            } else {
                true
            }
        });
        self.in_flight = in_flight;
        before - self.in_flight.len()
    }

    /// A progress pass's reclaim: the oldest blocks while they are
    /// released ([`EagerArea::reclaim_front`]), and every block
    /// ([`EagerArea::reclaim`]) only once per as many passes as there are
    /// blocks in flight while the oldest one is still held (a block
    /// released out of order: its message matched after later ones, or
    /// went to another receiver). A pass then reads one release flag, or
    /// a few in order, instead of the flag of every block in flight: a
    /// window of 64 eager sends scanned 64 flags per pass of the waits
    /// that follow it (`req_cost.c`, 4 KiB: a fifth of the sender's
    /// instructions).
    pub(crate) fn reclaim_pass(&mut self, released: impl Fn(u64) -> bool) -> usize {
        let n = self.reclaim_front(&released);
        if self.in_flight.is_empty() {
            self.held_passes = 0;
            return n;
        }
        self.held_passes += 1;
        if self.held_passes < self.in_flight.len() {
            return n;
        }
        self.held_passes = 0;
        n + self.reclaim(released)
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
                let room = (self.stacks[c as usize].len() as u64) < Self::keep_max(size);
                if room && self.cached + size <= self.cache_cap {
                    self.stacks[c as usize].push_back(off);
                    self.cached += size;
                    return;
                }
            }
            self.blocks[c as usize] -= 1;
        }
        // The offset came from this allocator and is in flight exactly once.
        let _ = self.heap.free(off);
    }

    /// Returns every kept block to the allocator (so that it can coalesce
    /// them for a larger request).
    fn flush_stacks(&mut self) {
        for (s, n) in self.stacks.iter_mut().zip(&mut self.blocks) {
            *n -= s.len() as u32;
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

    /// The remembered class is always `class_of`'s, whatever the order of
    /// the needs (repeated, alternating, out of the pool's range).
    #[test]
    fn the_remembered_class_is_class_ofs() {
        let mut a = EagerArea::new(1 << 20, usize::MAX);
        for need in [
            0,
            0,
            1,
            1088,
            1088,
            64,
            1088,
            POOL_MAX + 1,
            POOL_MAX + 1,
            300,
            0,
        ] {
            assert_eq!(a.class_cached(need), class_of(need), "{need} (cached)");
            assert_eq!(a.class(need), class_of(need), "{need}");
            assert_eq!(a.class_cached(need), class_of(need), "{need} (after)");
        }
    }

    /// A need of the 640-byte class, below `STREAM_MIN`.
    const SMALL: u64 = 600;

    #[test]
    fn a_released_block_is_reused_first() {
        let mut a = EagerArea::new(1 << 20, usize::MAX);
        let freed = RefCell::new(HashSet::new());
        let rel = |o: u64| freed.borrow().contains(&o);
        let x = a.alloc(SMALL, rel).unwrap();
        let y = a.alloc(SMALL, rel).unwrap();
        assert_ne!(x, y);
        freed.borrow_mut().insert(x);
        // x is the oldest in flight and released: taken back and reused.
        assert_eq!(a.alloc(SMALL + 20, rel), Some(x), "same class (640 bytes)");
        assert_eq!(a.in_flight(), 2);
        freed.borrow_mut().insert(y);
        freed.borrow_mut().insert(x);
        assert_eq!(a.reclaim(rel), 2);
        assert_eq!(a.in_flight(), 0);
        // LIFO: the last one taken back comes first.
        let z = a.alloc(SMALL, |_| false).unwrap();
        assert!(z == x || z == y);
    }

    /// A progress pass takes back the released oldest blocks at once, and
    /// a block released out of order (behind one still held) within as
    /// many passes as there are blocks in flight, reading one flag per
    /// pass meanwhile.
    #[test]
    fn a_pass_reads_the_oldest_flags_and_scans_all_now_and_then() {
        let mut a = EagerArea::new(1 << 20, usize::MAX);
        let freed = RefCell::new(HashSet::new());
        let reads = RefCell::new(0usize);
        let rel = |o: u64| {
            *reads.borrow_mut() += 1;
            freed.borrow().contains(&o)
        };
        let blocks: Vec<u64> = (0..8).map(|_| a.alloc(SMALL, |_| false).unwrap()).collect();
        // In order: the two oldest come back in the first pass.
        freed.borrow_mut().extend(&blocks[..2]);
        assert_eq!(a.reclaim_pass(rel), 2);
        assert_eq!(a.in_flight(), 6);
        // Out of order: the newest is released, the oldest still held.
        freed.borrow_mut().insert(blocks[7]);
        *reads.borrow_mut() = 0;
        let mut passes = 0;
        while a.in_flight() == 6 {
            assert_eq!(*reads.borrow(), passes, "one flag per pass until the scan");
            a.reclaim_pass(rel);
            passes += 1;
            assert!(passes <= 6, "taken back within in_flight passes");
        }
        assert_eq!(a.in_flight(), 5);
        // Everything released: the next pass takes it all back.
        freed.borrow_mut().extend(&blocks);
        assert_eq!(a.reclaim_pass(rel), 5);
        assert_eq!(a.in_flight(), 0);
    }

    /// `next_kept` names the block the next allocation of that size hands
    /// out (the warmest released one of its class), and nothing when the
    /// class has none kept.
    #[test]
    fn next_kept_is_the_block_alloc_hands_out_next() {
        let mut a = EagerArea::new(1 << 20, usize::MAX);
        let freed = RefCell::new(HashSet::new());
        let rel = |o: u64| freed.borrow().contains(&o);
        assert_eq!(a.next_kept(SMALL), None, "nothing released yet");
        let x = a.alloc(SMALL, rel).unwrap();
        let y = a.alloc(SMALL, rel).unwrap();
        let other = a.alloc(200, rel).unwrap();
        freed.borrow_mut().extend([x, y, other]);
        assert_eq!(a.reclaim(rel), 3);
        let next = a.next_kept(SMALL + 20).expect("a 640-byte block is kept");
        assert!(next == x || next == y);
        assert_eq!(a.alloc(SMALL + 20, |_| false), Some(next));
        let last = a.next_kept(SMALL).expect("the other one");
        assert_ne!(last, next);
        assert_eq!(a.alloc(SMALL, |_| false), Some(last));
        assert_eq!(a.next_kept(SMALL), None, "class emptied");
        assert_eq!(a.next_kept(200), Some(other), "other classes apart");
        assert_eq!(a.next_kept(POOL_MAX + 1), None, "no class");
    }

    /// A sender streaming `n` messages of `need` bytes to a receiver that
    /// keeps pace: each block is released as soon as the next one is
    /// handed out (so one or two are in flight at a time). Returns the
    /// blocks in the order they were handed out.
    fn stream_kept_pace(a: &mut EagerArea, need: u64, n: usize) -> Vec<u64> {
        let freed = RefCell::new(HashSet::new());
        let mut got: Vec<u64> = Vec::new();
        for _ in 0..n {
            let o = a
                .alloc(need, |o| freed.borrow().contains(&o))
                .expect("room");
            freed.borrow_mut().remove(&o);
            if let Some(&prev) = got.last() {
                freed.borrow_mut().insert(prev);
            }
            got.push(o);
        }
        got
    }

    /// A stream class grows its ring to `STREAM_RING` bytes of blocks even
    /// when the receiver keeps pace (taking back the released block at
    /// once would cycle two or three), and then cycles through it oldest
    /// first; `next_kept` says nothing while the ring grows and names the
    /// oldest kept block after.
    #[test]
    fn a_stream_cycles_through_a_ring_of_stream_ring_bytes() {
        for need in [EAGER_TEST_BIG, 4096 + 64, 1024 + 64] {
            let (c, size) = class_of(need).unwrap();
            let ring = (STREAM_RING / size) as usize;
            let mut a = EagerArea::new(8 << 20, usize::MAX);
            let got = stream_kept_pace(&mut a, need, 3 * ring + 5);
            let distinct: HashSet<u64> = got.iter().copied().collect();
            // The first two blocks come before the stream is seen (at most
            // one in flight), the ring then grows to `ring` blocks.
            assert_eq!(distinct.len(), ring, "{need}: ring of {size}-byte blocks");
            assert_eq!(a.blocks[c] as usize, ring);
            for k in ring + 2..got.len() {
                assert_eq!(got[k], got[k - ring], "{need}: oldest first, at {k}");
            }
            assert_eq!(a.next_kept(need), a.stacks[c].front().copied());
            assert!(a.next_kept(need).is_some());
        }
        // While the ring grows, no kept block is named.
        let mut a = EagerArea::new(8 << 20, usize::MAX);
        let got = stream_kept_pace(&mut a, EAGER_TEST_BIG, 4);
        let _ = a.reclaim(|o| o != got[3]);
        assert_eq!(a.in_flight(), 1);
        let _ = a.alloc(EAGER_TEST_BIG, |_| false).unwrap();
        assert_eq!(a.in_flight(), 2, "a stream");
        assert!(!a.stacks[class_of(EAGER_TEST_BIG).unwrap().0].is_empty());
        assert_eq!(a.next_kept(EAGER_TEST_BIG), None, "the ring still grows");
    }

    /// Below `STREAM_MIN`, and for lone sends (a ping-pong, at most one
    /// block in flight), the warmest released block is reused: no ring.
    #[test]
    fn lone_sends_and_small_classes_reuse_the_warmest() {
        let mut a = EagerArea::new(8 << 20, usize::MAX);
        let got = stream_kept_pace(&mut a, SMALL, 200);
        let distinct: HashSet<u64> = got.iter().copied().collect();
        assert!(
            distinct.len() <= 3,
            "small class: {} blocks",
            distinct.len()
        );
        let mut l = EagerArea::new(8 << 20, usize::MAX);
        let mut seen = HashSet::new();
        for _ in 0..100 {
            let o = l.alloc(EAGER_TEST_BIG, |_| true).unwrap();
            seen.insert(o);
            assert_eq!(l.reclaim(|_| true), 1, "the ping-pong's reply came");
        }
        assert_eq!(seen.len(), 1, "a ping-pong reuses its one block");
        assert_eq!(l.next_kept(EAGER_TEST_BIG), seen.iter().next().copied());
    }

    /// A stream class keeps at most `max(STREAM_RING / size, STREAM_KEEP)`
    /// released blocks, the first released, in order; the rest go back to
    /// the allocator. Small classes are bounded by bytes only.
    #[test]
    fn stream_classes_keep_a_bounded_ring() {
        for (need, keep) in [
            (EAGER_TEST_BIG, 32),
            (4096 + 64, 64),
            (1024 + 64, 256),
            (32 << 10, STREAM_KEEP),
        ] {
            let mut a = EagerArea::new(32 << 20, usize::MAX);
            let (c, size) = class_of(need).unwrap();
            let n = keep + 8;
            let b: Vec<u64> = (0..n).map(|_| a.alloc(need, |_| false).unwrap()).collect();
            assert_eq!(a.blocks[c] as usize, n);
            assert_eq!(a.reclaim(|_| true), n);
            assert_eq!(a.stacks[c].len(), keep, "{need}");
            assert!(
                a.stacks[c].iter().eq(&b[..keep]),
                "{need}: the first released, in order"
            );
            assert_eq!(a.cached, keep as u64 * size);
            assert_eq!(a.blocks[c] as usize, keep, "{need}: the rest freed");
        }
        let mut a = EagerArea::new(8 << 20, usize::MAX);
        let n = 1000;
        let s: Vec<u64> = (0..n).map(|_| a.alloc(SMALL, |_| false).unwrap()).collect();
        assert_eq!(a.reclaim(|_| true), n);
        assert_eq!(a.stacks[class_of(SMALL).unwrap().0].len(), s.len());
    }

    /// Released blocks are kept up to half the area (bytes), the rest go
    /// back to the allocator.
    #[test]
    fn kept_blocks_fill_at_most_half_the_area() {
        let size = 1 << 20;
        let mut a = EagerArea::new(size, usize::MAX);
        let mut n = 0;
        while a.alloc(SMALL, |_| false).is_some() {
            n += 1;
        }
        assert!(n as u64 * 640 > size * 3 / 4, "{n} blocks");
        assert_eq!(a.reclaim(|_| true), n);
        let half = size / 2;
        assert!(a.cached <= half && a.cached + 640 > half, "{}", a.cached);
        assert_eq!(a.blocks[class_of(SMALL).unwrap().0] as u64 * 640, a.cached);
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
                // Each class's count is its kept blocks and those in flight.
                for c in 0..CLASSES {
                    let out = a.in_flight.iter().filter(|&&(_, k)| usize::from(k) == c).count();
                    prop_assert_eq!(a.blocks[c] as usize, a.stacks[c].len() + out, "class {}", c);
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
