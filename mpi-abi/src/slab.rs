//! A slab of objects behind handles that change on every reuse: the
//! request table.
//!
//! A handle is `prefix | generation << SLOT_BITS | slot`. The prefix is
//! MPICH's indirect kind prefix (bits 26–31, see [`crate::handles`]); the
//! slot indexes fixed chunks of slots allocated once and never moved, so
//! a lookup takes no table-wide lock; the generation (6 bits) changes each
//! time a slot is freed, so a handle used after it was freed is refused
//! (until the slot has been reused 64 times) instead of reaching the
//! object that took its place. Each slot has its own lock, held while the
//! caller works on the object. Free slots are kept by the thread that
//! freed them ([`Local`], up to [`LOCAL`] slots, thread-local: no lock
//! and no atomic) and taken from there by its next
//! inserts; the global free list, behind a lock never held while a
//! slot's object is being worked on, takes and gives [`MOVE`] slots at a
//! time when a thread's cache overflows or runs dry, and the cache of a
//! thread that ends.

use std::cell::Cell;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

/// Bits of a handle that hold the slot: 2²⁰ live objects.
const SLOT_BITS: u32 = 20;
/// Bits of a handle that hold the generation (the rest of the 26 bits
/// under the kind prefix).
const GEN_BITS: u32 = 6;
const GEN_MASK: u32 = (1 << GEN_BITS) - 1;
const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;
/// Slots per chunk.
const CHUNK_BITS: u32 = 10;
const CHUNK: usize = 1 << CHUNK_BITS;
const CHUNKS: usize = 1 << (SLOT_BITS - CHUNK_BITS);
/// Freed slots a [`Frees`] batch holds before it returns them.
const BATCH: usize = 32;
/// Free slots a thread keeps for its own inserts.
const LOCAL: usize = 64;
/// Free slots moved at once between a thread's cache and the global list.
const MOVE: usize = 32;
// A batch fits in the cache once `MOVE` have gone.
const _: () = assert!(BATCH <= MOVE && MOVE <= LOCAL - MOVE);

/// One slot: the handle live in it (0: none), and its object.
#[derive(Debug)]
struct Slot<T> {
    /// The live handle; written only with `state` locked.
    live: AtomicI32,
    state: Mutex<State<T>>,
}

#[derive(Debug)]
struct State<T> {
    /// The generation the next handle of this slot gets.
    gen: u32,
    val: Option<T>,
}

impl<T> Slot<T> {
    fn new() -> Slot<T> {
        Slot {
            live: AtomicI32::new(0),
            state: Mutex::new(State { gen: 0, val: None }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Debug)]
struct FreeList {
    /// Freed slots, most recently freed last.
    list: Vec<u32>,
    /// Slots below this have been handed out at least once.
    next: u32,
}

/// The free slots a thread keeps, of one slab's free list (`owner`): the
/// slots are free and this thread's alone, so taking one needs neither
/// the global list's lock nor the slot's. Another slab's slots are
/// returned to their owner before the cache serves this one.
struct Local {
    owner: Cell<Option<&'static Mutex<FreeList>>>,
    n: Cell<usize>,
    buf: [Cell<u32>; LOCAL],
}

impl Local {
    #[inline]
    fn owns(&self, free: &'static Mutex<FreeList>) -> bool {
        self.owner.get().is_some_and(|o| std::ptr::eq(o, free))
    }

    /// A free slot of `free` kept by this thread.
    #[inline]
    fn pop(&self, free: &'static Mutex<FreeList>) -> Option<u32> {
        let n = self.n.get().checked_sub(1)?;
        if !self.owns(free) {
            return None;
        }
        let i = self.buf.get(n)?.get();
        self.n.set(n);
        Some(i)
    }

    /// Keeps the freed slots of `free` (at most [`MOVE`]) for this
    /// thread; when they do not fit, the oldest [`MOVE`] kept go to the
    /// global list first.
    #[inline]
    fn push(&self, free: &'static Mutex<FreeList>, slots: &[u32]) {
        if !self.owns(free) {
            self.adopt(free);
        }
        if self.n.get() + slots.len() > LOCAL {
            self.spill();
        }
        let n = self.n.get();
        if let Some(to) = self.buf.get(n..n + slots.len()) {
            for (c, &i) in to.iter().zip(slots) {
                c.set(i);
            }
            self.n.set(n + slots.len());
        } else {
            // More than `MOVE` at once (not done by this module).
            lock_free_list(free).list.extend_from_slice(slots);
        }
    }

    /// Makes this cache `free`'s, returning what it kept of another
    /// slab's to that slab's list.
    #[cold]
    fn adopt(&self, free: &'static Mutex<FreeList>) {
        self.flush();
        self.owner.set(Some(free));
    }

    /// Moves the [`MOVE`] oldest kept slots to the global list.
    #[cold]
    fn spill(&self) {
        let n = self.n.get();
        let k = MOVE.min(n);
        if let Some(owner) = self.owner.get() {
            lock_free_list(owner)
                .list
                .extend(self.buf[..k].iter().map(Cell::get));
        }
        for j in k..n {
            self.buf[j - k].set(self.buf[j].get());
        }
        self.n.set(n - k);
    }

    /// Returns every kept slot to the global list.
    fn flush(&self) {
        let n = self.n.replace(0);
        if let (Some(owner), true) = (self.owner.get(), n > 0) {
            lock_free_list(owner)
                .list
                .extend(self.buf[..n].iter().map(Cell::get));
        }
    }

    /// The kept slots (tests).
    #[cfg(test)]
    fn kept(&self) -> Vec<u32> {
        self.buf[..self.n.get()].iter().map(Cell::get).collect()
    }
}

impl Drop for Local {
    /// A thread that ends returns its slots.
    fn drop(&mut self) {
        self.flush();
    }
}

thread_local! {
    static CACHE: Local = const {
        Local {
            owner: Cell::new(None),
            n: Cell::new(0),
            buf: [const { Cell::new(0) }; LOCAL],
        }
    };
}

/// Runs `f` on this thread's cache; `None` when the cache is gone (the
/// thread is ending).
#[inline]
fn with_cache<R>(f: impl FnOnce(&Local) -> R) -> Option<R> {
    CACHE.try_with(f).ok()
}

fn lock_free_list(free: &Mutex<FreeList>) -> MutexGuard<'_, FreeList> {
    free.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A slab of objects of one kind, by handle.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    prefix: i32,
    chunks: [OnceLock<Box<[Slot<T>]>>; CHUNKS],
    free: Mutex<FreeList>,
}

/// An object of the slab, locked for the holder.
#[derive(Debug)]
pub(crate) struct Entry<'a, T: 'static> {
    slab: &'static Slab<T>,
    slot: &'a Slot<T>,
    index: u32,
    g: MutexGuard<'a, State<T>>,
}

impl<T> Slab<T> {
    /// An empty slab giving out handles under `prefix` (bits 26–31).
    pub(crate) const fn new(prefix: u32) -> Slab<T> {
        Slab {
            prefix: prefix as i32,
            chunks: [const { OnceLock::new() }; CHUNKS],
            free: Mutex::new(FreeList {
                list: Vec::new(),
                next: 0,
            }),
        }
    }

    fn free_list(&self) -> MutexGuard<'_, FreeList> {
        lock_free_list(&self.free)
    }

    #[inline]
    fn slot(&self, index: u32) -> Option<&Slot<T>> {
        let chunk = self.chunks.get((index >> CHUNK_BITS) as usize)?.get()?;
        chunk.get(index as usize & (CHUNK - 1))
    }

    /// The slot of `h` if `h` has this slab's prefix (not whether it is
    /// live).
    #[inline]
    fn decode(&self, h: i32) -> Option<(u32, &Slot<T>)> {
        if h & !((1 << (SLOT_BITS + GEN_BITS)) - 1) != self.prefix {
            return None;
        }
        let index = h as u32 & SLOT_MASK;
        Some((index, self.slot(index)?))
    }

    /// Stores `v` and returns its handle (`None` when 2²⁰ objects are
    /// live).
    #[inline]
    pub(crate) fn insert(&'static self, v: T) -> Option<i32> {
        let index = match with_cache(|c| c.pop(&self.free)) {
            Some(Some(i)) => i,
            _ => self.refill()?,
        };
        // A free slot (kept by this thread, on the free list, or below
        // `next`) exists.
        let slot = self.slot(index)?;
        let mut s = slot.lock();
        let h = self.prefix | (s.gen << SLOT_BITS) as i32 | index as i32;
        // A free slot holds no object: checked, so that storing `v` drops
        // nothing (and `v` is moved in place, not through the stack).
        if s.val.is_some() {
            return None;
        }
        s.val = Some(v);
        slot.live.store(h, Ordering::Release);
        Some(h)
    }

    /// A free slot when this thread keeps none of this slab's: up to
    /// [`MOVE`] more are taken for its next inserts (from the global list,
    /// else never handed out before).
    #[cold]
    fn refill(&'static self) -> Option<u32> {
        let mut got = [0u32; MOVE];
        let mut k = 0;
        {
            let mut f = self.free_list();
            while k < MOVE {
                let Some(i) = f.list.pop().or_else(|| self.fresh(&mut f)) else {
                    break;
                };
                got[k] = i;
                k += 1;
            }
        }
        let (&mut first, rest) = got[..k].split_first_mut()?;
        // Kept in reverse so the next inserts take them in the order the
        // list gave them; when the cache is gone (the thread is ending)
        // they go back at once.
        rest.reverse();
        self.release(rest);
        Some(first)
    }

    /// A slot never handed out before (its chunk allocated on first use);
    /// `None` when all 2²⁰ have been.
    #[cold]
    fn fresh(&self, f: &mut FreeList) -> Option<u32> {
        if f.next > SLOT_MASK {
            return None;
        }
        let i = f.next;
        self.chunks[(i >> CHUNK_BITS) as usize]
            .get_or_init(|| (0..CHUNK).map(|_| Slot::new()).collect());
        f.next += 1;
        Some(i)
    }

    /// Whether `h` is live (without locking it: the answer may be stale
    /// when another thread frees it meanwhile).
    #[inline]
    pub(crate) fn is_live(&self, h: i32) -> bool {
        self.decode(h)
            .is_some_and(|(_, s)| s.live.load(Ordering::Acquire) == h)
    }

    /// The object of handle `h`, locked; `None` if `h` is not live.
    #[inline]
    pub(crate) fn get(&'static self, h: i32) -> Option<Entry<'static, T>> {
        let (index, slot) = self.decode(h)?;
        if slot.live.load(Ordering::Acquire) != h {
            return None;
        }
        let g = slot.lock();
        // Checked again under the lock: another thread may have freed it.
        if slot.live.load(Ordering::Relaxed) != h || g.val.is_none() {
            return None;
        }
        Some(Entry {
            slab: self,
            slot,
            index,
            g,
        })
    }

    /// [`get`](Self::get) without waiting: `None` also when another
    /// holder has the object locked (a set call that holds several
    /// objects at once, and may meet one of them twice, does not wait for
    /// itself).
    #[inline]
    pub(crate) fn try_get(&'static self, h: i32) -> Option<Entry<'static, T>> {
        let (index, slot) = self.decode(h)?;
        if slot.live.load(Ordering::Acquire) != h {
            return None;
        }
        let g = match slot.state.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        if slot.live.load(Ordering::Relaxed) != h || g.val.is_none() {
            return None;
        }
        Some(Entry {
            slab: self,
            slot,
            index,
            g,
        })
    }

    /// Returns freed slots: kept by this thread (the global list takes
    /// what overflows, or all of them when the thread is ending).
    #[inline]
    fn release(&'static self, slots: &[u32]) {
        if slots.is_empty() {
            return;
        }
        if with_cache(|c| c.push(&self.free, slots)).is_none() {
            self.free_list().list.extend_from_slice(slots);
        }
    }

    /// Frees every object (at finalize); every handle given out so far
    /// becomes stale. The objects are dropped after the locks are
    /// released. Their slots go to the global list (the free slots stay
    /// where they are: a thread's cache, or the list).
    pub(crate) fn clear(&self) -> Vec<T> {
        let mut out = Vec::new();
        let mut f = self.free_list();
        for i in 0..f.next {
            if let Some(slot) = self.slot(i) {
                let mut s = slot.lock();
                if let Some(v) = s.val.take() {
                    s.gen = (s.gen + 1) & GEN_MASK;
                    slot.live.store(0, Ordering::Release);
                    out.push(v);
                    f.list.push(i);
                }
            }
        }
        out
    }
}

impl<T: 'static> Entry<'_, T> {
    /// Removes the object from the slab and returns it (its handle becomes
    /// stale); the slot goes back to the free list at once.
    pub(crate) fn remove(self) -> T {
        let slab = self.slab;
        let (v, index) = self.take_out();
        slab.release(&[index]);
        v
    }

    /// Drops the object in place (its handle becomes stale); the slot
    /// goes back to the free list at once.
    #[inline]
    pub(crate) fn discard(mut self) {
        let slab = self.slab;
        self.g.val = None;
        self.g.gen = (self.g.gen + 1) & GEN_MASK;
        self.slot.live.store(0, Ordering::Release);
        let index = self.index;
        drop(self);
        slab.release(&[index]);
    }

    /// Drops the object in place (its handle becomes stale); the slot is
    /// returned with `batch`.
    #[inline]
    pub(crate) fn discard_into(mut self, batch: &mut Frees<T>) {
        self.g.val = None;
        self.g.gen = (self.g.gen + 1) & GEN_MASK;
        self.slot.live.store(0, Ordering::Release);
        let index = self.index;
        drop(self);
        batch.push(index);
    }

    /// [`remove`](Self::remove), the slot returned with `batch`.
    pub(crate) fn remove_into(self, batch: &mut Frees<T>) -> T {
        let (v, index) = self.take_out();
        batch.push(index);
        v
    }

    #[inline]
    fn take_out(mut self) -> (T, u32) {
        let v = self.g.val.take();
        self.g.gen = (self.g.gen + 1) & GEN_MASK;
        self.slot.live.store(0, Ordering::Release);
        let index = self.index;
        drop(self);
        // `get` only returns entries holding an object.
        (
            v.unwrap_or_else(|| unreachable!("a live slab entry has an object")),
            index,
        )
    }
}

impl<T: 'static> core::ops::Deref for Entry<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // `get` only returns entries holding an object, and only
        // `take_out` (which consumes the entry) empties it.
        self.g.val.as_ref().unwrap_or_else(|| unreachable!())
    }
}

impl<T: 'static> core::ops::DerefMut for Entry<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.g.val.as_mut().unwrap_or_else(|| unreachable!())
    }
}

/// Slots freed by one call, returned to the free list together (when
/// [`BATCH`] have gathered, and when dropped).
#[derive(Debug)]
pub(crate) struct Frees<T: 'static> {
    slab: &'static Slab<T>,
    buf: [u32; BATCH],
    n: usize,
}

impl<T> Frees<T> {
    pub(crate) fn new(slab: &'static Slab<T>) -> Frees<T> {
        Frees {
            slab,
            buf: [0; BATCH],
            n: 0,
        }
    }

    #[inline]
    fn push(&mut self, index: u32) {
        if self.n == BATCH {
            self.flush();
        }
        self.buf[self.n] = index;
        self.n += 1;
    }

    fn flush(&mut self) {
        self.slab.release(&self.buf[..self.n]);
        self.n = 0;
    }
}

impl<T> Drop for Frees<T> {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handles::prefix;

    /// A slab of its own for a test (leaked: slabs live for the program).
    fn slab() -> &'static Slab<u32> {
        Box::leak(Box::new(Slab::new(prefix::REQUEST)))
    }

    #[test]
    fn insert_get_remove() {
        let s = slab();
        let a = s.insert(1).unwrap();
        let b = s.insert(2).unwrap();
        assert_ne!(a, b);
        assert_eq!(a as u32 & 0xfc00_0000, prefix::REQUEST);
        assert_eq!(*s.get(a).unwrap(), 1);
        *s.get(b).unwrap() += 10;
        assert_eq!(*s.get(b).unwrap(), 12);
        assert!(s.is_live(a));
        assert_eq!(s.get(a).unwrap().remove(), 1);
        assert!(!s.is_live(a));
        assert!(s.get(a).is_none());
        // Other kinds, null and predefined handles are not found.
        assert!(s.get(crate::abi::MPI_REQUEST_NULL).is_none());
        assert!(s.get(crate::abi::MPI_COMM_WORLD).is_none());
        assert!(s.get(prefix::COMM as i32 | (b & 0x3ff_ffff)).is_none());
        assert!(s.get(0).is_none());
    }

    #[test]
    fn stale_handle_is_refused_after_reuse() {
        let s = slab();
        let a = s.insert(1).unwrap();
        assert_eq!(s.get(a).unwrap().remove(), 1);
        let b = s.insert(2).unwrap();
        assert_eq!(b & SLOT_MASK as i32, a & SLOT_MASK as i32, "slot reused");
        assert_ne!(a, b, "with a new generation");
        assert!(
            s.get(a).is_none(),
            "the stale handle does not reach the new object"
        );
        assert_eq!(*s.get(b).unwrap(), 2);
    }

    #[test]
    fn try_get_does_not_wait_for_a_held_object() {
        let s = slab();
        let a = s.insert(5).unwrap();
        let held = s.try_get(a).unwrap();
        assert_eq!(*held, 5);
        assert!(s.try_get(a).is_none(), "held: not waited for");
        drop(held);
        assert_eq!(*s.try_get(a).unwrap(), 5, "free again");
        s.get(a).unwrap().discard();
        assert!(s.try_get(a).is_none(), "stale handle");
    }

    #[test]
    fn double_free_is_refused() {
        let s = slab();
        let a = s.insert(7).unwrap();
        let e = s.get(a).unwrap();
        assert_eq!(e.remove(), 7);
        assert!(s.get(a).is_none(), "second free finds nothing");
        // The slot went back to the free list once: two inserts get two
        // different slots.
        let b = s.insert(8).unwrap();
        let c = s.insert(9).unwrap();
        assert_ne!(b & SLOT_MASK as i32, c & SLOT_MASK as i32);
    }

    #[test]
    fn generation_wraps_after_64_reuses() {
        let s = slab();
        let first = s.insert(0).unwrap();
        s.get(first).unwrap().remove();
        let mut seen = vec![first];
        for i in 1..=GEN_MASK {
            let h = s.insert(i).unwrap();
            assert!(!seen.contains(&h), "generation {i} repeats a handle early");
            seen.push(h);
            s.get(h).unwrap().remove();
        }
        let again = s.insert(99).unwrap();
        assert_eq!(again, first, "generation wrapped to the first handle");
        assert_eq!(*s.get(again).unwrap(), 99);
    }

    #[test]
    fn batched_frees_and_clear() {
        let s = slab();
        let hs: Vec<i32> = (0..100).map(|i| s.insert(i).unwrap()).collect();
        // Taken from the global list `MOVE` at a time: the rest is kept.
        let spare = free(s);
        assert_eq!(spare + 100, s.free_list().next as usize);
        {
            let mut f = Frees::new(s);
            for (i, &h) in hs.iter().enumerate().take(70) {
                assert_eq!(s.get(h).unwrap().remove_into(&mut f), i as u32);
            }
        }
        assert_eq!(free(s), spare + 70);
        {
            let mut f = Frees::new(s);
            s.get(hs[70]).unwrap().discard_into(&mut f);
            assert!(s.get(hs[70]).is_none(), "discarded handle is stale");
            assert_eq!(free(s), spare + 70, "slot returned with the batch");
        }
        assert_eq!(free(s), spare + 71);
        let back = s.insert(70).unwrap();
        assert_eq!(back & SLOT_MASK as i32, hs[70] & SLOT_MASK as i32);
        assert_ne!(back, hs[70]);
        for &h in &hs[..70] {
            assert!(s.get(h).is_none());
        }
        let left = s.clear();
        assert_eq!(left.len(), 30);
        assert!(!s.is_live(back));
        assert!(hs.iter().all(|&h| s.get(h).is_none()));
        // Every slot is free again, and a slot spanning chunks works.
        let many: Vec<i32> = (0..(CHUNK as u32 + 5))
            .map(|i| s.insert(i).unwrap())
            .collect();
        assert_eq!(*s.get(many[CHUNK + 4]).unwrap(), CHUNK as u32 + 4);
        assert!(hs.iter().all(|&h| s.get(h).is_none()));
    }

    #[test]
    fn threads_insert_and_free_concurrently() {
        let s = slab();
        let ts: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..2000u32 {
                        let h = s.insert(t * 10_000 + i).unwrap();
                        assert_eq!(*s.get(h).unwrap(), t * 10_000 + i);
                        assert_eq!(s.get(h).unwrap().remove(), t * 10_000 + i);
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        // The threads' caches went back to the global list as they ended.
        let f = s.free_list();
        assert_eq!(f.list.len(), f.next as usize, "every slot free, once");
    }

    /// Slots of `s` this thread keeps.
    fn cached(s: &'static Slab<u32>) -> usize {
        with_cache(|c| if c.owns(&s.free) { c.n.get() } else { 0 }).unwrap_or(0)
    }

    /// Free slots of `s`: kept by this thread and on the global list.
    fn free(s: &'static Slab<u32>) -> usize {
        cached(s) + s.free_list().list.len()
    }

    #[test]
    fn stale_handle_is_refused_after_reuse_from_another_thread() {
        let s = slab();
        let a = s.insert(1).unwrap();
        // Freed by another thread: the slot goes to that thread's cache,
        // and back to the global list when it ends.
        std::thread::spawn(move || {
            assert_eq!(s.get(a).unwrap().remove(), 1);
            assert_eq!(cached(s), 1);
        })
        .join()
        .unwrap();
        assert!(s.get(a).is_none());
        let mut seen = Vec::new();
        loop {
            let h = s.insert(2).unwrap();
            if h & SLOT_MASK as i32 == a & SLOT_MASK as i32 {
                assert_ne!(h, a, "reused with a new generation");
                assert!(s.get(a).is_none(), "the stale handle is refused");
                assert_eq!(*s.get(h).unwrap(), 2);
                break;
            }
            seen.push(h);
            assert!(seen.len() < 2 * MOVE, "the freed slot came back");
        }
    }

    #[test]
    fn free_from_another_thread_is_kept_there() {
        let s = slab();
        let hs: Vec<i32> = (0..10).map(|i| s.insert(i).unwrap()).collect();
        let before = free(s);
        let (tx, rx) = std::sync::mpsc::channel();
        let (back_tx, back_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            {
                let mut f = Frees::new(s);
                for &h in &hs {
                    s.get(h).unwrap().discard_into(&mut f);
                }
            }
            // Kept by this thread, taken again by its inserts first.
            assert_eq!(cached(s), 10);
            let h = s.insert(99).unwrap();
            assert!(hs.iter().all(|&o| o != h), "not a stale handle again");
            assert_eq!(h & SLOT_MASK as i32, hs[9] & SLOT_MASK as i32);
            tx.send(h).unwrap();
            back_rx.recv().unwrap();
        });
        let h = rx.recv().unwrap();
        // The inserting thread's view: the object and nothing else.
        assert_eq!(*s.get(h).unwrap(), 99);
        assert_eq!(free(s), before, "the 9 other slots are the other thread's");
        back_tx.send(()).unwrap();
        t.join().unwrap();
        assert_eq!(free(s), before + 9, "returned when the thread ended");
        assert_eq!(s.get(h).unwrap().remove(), 99);
    }

    #[test]
    fn batch_overflow_goes_to_the_global_list() {
        let s = slab();
        let n = 3 * LOCAL + 5;
        let hs: Vec<i32> = (0..n as u32).map(|i| s.insert(i).unwrap()).collect();
        assert_eq!(cached(s) + hs.len(), s.free_list().next as usize);
        for (i, &h) in hs.iter().enumerate() {
            assert_eq!(s.get(h).unwrap().remove(), i as u32);
            assert!(cached(s) <= LOCAL, "the cache stays bounded");
        }
        assert!(s.free_list().list.len() >= n - LOCAL, "overflow moved");
        assert_eq!(free(s), s.free_list().next as usize);
        // Taken back without handing out new slots, each slot once.
        let next = s.free_list().next;
        let again: std::collections::HashSet<i32> =
            (0..n as u32).map(|i| s.insert(i).unwrap()).collect();
        assert_eq!(again.len(), n);
        assert_eq!(s.free_list().next, next, "no fresh slot needed");
        assert!(hs.iter().all(|h| s.get(*h).is_none()), "old handles stale");
        // One thread inserts, another frees: the slots flow back in
        // batches through the global list, none lost or doubled.
        let (tx, rx) = std::sync::mpsc::sync_channel::<i32>(8);
        let freer = std::thread::spawn(move || {
            for h in rx {
                s.get(h).unwrap().discard();
            }
        });
        for i in 0..(20 * LOCAL) as u32 {
            tx.send(s.insert(i).unwrap()).unwrap();
        }
        drop(tx);
        freer.join().unwrap();
        for h in again {
            s.get(h).unwrap().discard();
        }
        assert_eq!(free(s), s.free_list().next as usize, "every slot free");
        let f = s.free_list();
        let mut all: Vec<u32> = f.list.clone();
        drop(f);
        all.extend(with_cache(Local::kept).unwrap());
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), free(s), "no slot free twice");
    }
}
