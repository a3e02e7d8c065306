//! Process synchronization of RMA windows in shared memory.
//!
//! An RMA window whose ranks share a node needs no messages: the origin
//! loads and stores the target's memory itself, and the synchronization
//! calls become a few atomics in the targets' control words. This module is
//! those atomics, after Open MPI's `osc/sm` (its
//! ticket reader-writer lock, per-rank completion counters and
//! post bitmaps):
//!
//! - [`RwTicket`]: a ticket reader-writer lock (Mellor-Crummey / Scott)
//!   over three words. `MPI_Win_lock` takes it with readers first: shared
//!   holds queue by ticket, exclusive ones enter only when the lock is idle
//!   ([`RwTicket::try_exclusive_idle`]), so a waiting writer never blocks a
//!   reader (MPICH's grant rule, which keeps lock_all and nested shared
//!   locks deadlock-free). The per-target accumulate lock, only ever taken
//!   exclusively and never nested, uses it FIFO with tickets.
//! - [`arrive`] / [`arrived`]: a counter barrier (each rank stores its own
//!   epoch number, then waits for every other rank's) for `MPI_Win_fence`.
//! - [`signal`] / [`observed`]: monotone per-pair counters for PSCW (the
//!   target's `post` bumps a word in each origin's control block, the
//!   origin's `complete` bumps one in each target's).
//!
//! Every function is a single non-blocking step: the caller spins, runs
//! its progress engine and checks that the peer is alive between steps,
//! so a waiting rank never stops serving others.
//!
//! # Memory ordering (what makes the data visible)
//!
//! Every grant or observation is an `Acquire` load and every release,
//! arrival or signal a `Release` write, so the data a rank stored before
//! releasing (unlock, fence, complete, post) happens-before the loads of
//! the rank that observes it. These are the MEM_SYNCs MPICH places around
//! each PROC_SYNC. The loom models in `tests/loom.rs` check each protocol
//! with the data accesses as unsynchronized cells, and a negative control
//! shows that a `Relaxed` release is caught.

use crate::sync::{AtomicU64, Ordering};

/// Words of one [`RwTicket`] lock.
pub const RW_WORDS: usize = 3;

/// A ticket reader-writer lock over three 64-bit words (all zero at
/// first): `next` (the ticket dispenser), `write` (the next ticket allowed
/// in as a writer) and `read` (the next ticket allowed in as a reader).
///
/// Tickets are served in order: a writer with ticket `t` enters once every
/// earlier holder released (`write == t`); a reader with ticket `t` enters
/// once every earlier reader entered and every earlier writer released
/// (`read == t`), and then admits the next reader at once. Used that way
/// (every holder with a ticket) neither readers nor writers starve. A writer
/// may instead enter only when the lock is idle, without a ticket
/// ([`RwTicket::try_exclusive_idle`]): readers are then never held up by a
/// waiting writer, and the writer may wait while readers overlap.
#[derive(Debug, Clone, Copy)]
pub struct RwTicket<'a> {
    next: &'a AtomicU64,
    write: &'a AtomicU64,
    read: &'a AtomicU64,
}

impl<'a> RwTicket<'a> {
    /// The lock whose words are `next`, `write` and `read`.
    pub fn new(next: &'a AtomicU64, write: &'a AtomicU64, read: &'a AtomicU64) -> Self {
        RwTicket { next, write, read }
    }

    /// Takes a ticket (the caller's place in the queue). Every ticket
    /// taken must eventually be granted and released, or the lock stalls.
    pub fn ticket(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether `ticket` may enter as a writer now (Acquire: the previous
    /// holders' stores are visible once this returns `true`).
    pub fn try_exclusive(&self, ticket: u64) -> bool {
        self.write.load(Ordering::Acquire) == ticket
    }

    /// Enters as a writer without queueing, if the lock is idle (nobody
    /// holds it, nobody waits): returns the ticket now held (release it with
    /// [`RwTicket::release_exclusive`]), or `None`, leaving the lock
    /// untouched. Acquire: the previous holders' stores are visible on
    /// `Some`.
    ///
    /// This is how window locks take exclusive holds: a writer that waits
    /// holds no place in the queue, so readers arriving meanwhile are let in
    /// (MPICH's grant rule: a shared request is granted whenever nobody holds
    /// the lock exclusively). Shared requests then never wait behind a
    /// waiting writer, which is what keeps `MPI_Win_lock_all` epochs and
    /// nested shared locks free of deadlock whatever order they take their
    /// targets in; the price is that a writer may wait as long as readers
    /// keep overlapping.
    pub fn try_exclusive_idle(&self) -> Option<u64> {
        let n = self.next.load(Ordering::Relaxed);
        if self.write.load(Ordering::Acquire) != n {
            return None;
        }
        self.next
            .compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Relaxed)
            .ok()
    }

    /// Negative control for loom: [`RwTicket::try_exclusive_idle`] with a
    /// `Relaxed` load of the release word, too weak to see the previous
    /// holder's stores. `tests/loom.rs` asserts that loom rejects it.
    #[cfg(tmx_shmem_loom)]
    #[doc(hidden)]
    pub fn try_exclusive_idle_relaxed(&self) -> Option<u64> {
        let n = self.next.load(Ordering::Relaxed);
        if self.write.load(Ordering::Relaxed) != n {
            return None;
        }
        self.next
            .compare_exchange(n, n + 1, Ordering::Relaxed, Ordering::Relaxed)
            .ok()
    }

    /// Whether `ticket` may enter as a reader now; on `true` it has also
    /// admitted the next ticket's reader. Must not be called again for the
    /// same ticket after it returned `true`.
    pub fn try_shared(&self, ticket: u64) -> bool {
        if self.read.load(Ordering::Acquire) != ticket {
            return false;
        }
        self.read.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// Whether `ticket` would enter now ([`RwTicket::try_exclusive`] or
    /// [`RwTicket::try_shared`] returning `true`), without entering: a waiter
    /// spins on this and enters with the `try_*` call once it says yes.
    pub fn may_enter(&self, ticket: u64, exclusive: bool) -> bool {
        if exclusive {
            self.write.load(Ordering::Acquire) == ticket
        } else {
            self.read.load(Ordering::Acquire) == ticket
        }
    }

    /// Releases a writer's hold (Release: its stores become visible to the
    /// next holder).
    pub fn release_exclusive(&self) {
        self.write.fetch_add(1, Ordering::Release);
        self.read.fetch_add(1, Ordering::Release);
    }

    /// Negative control for loom: [`RwTicket::release_exclusive`] with
    /// `Relaxed` increments, too weak to publish the writer's stores.
    /// `tests/loom.rs` asserts that loom rejects it.
    #[cfg(tmx_shmem_loom)]
    #[doc(hidden)]
    pub fn release_exclusive_relaxed(&self) {
        self.write.fetch_add(1, Ordering::Relaxed);
        self.read.fetch_add(1, Ordering::Relaxed);
    }

    /// Negative control for loom: [`signal`] with a `Relaxed` increment.
    #[cfg(tmx_shmem_loom)]
    #[doc(hidden)]
    pub fn signal_relaxed(word: &AtomicU64) {
        word.fetch_add(1, Ordering::Relaxed);
    }

    /// Releases a reader's hold.
    pub fn release_shared(&self) {
        self.write.fetch_add(1, Ordering::Release);
    }

    /// Whether nobody holds or waits for the lock: true only when every
    /// ticket taken was released. A diagnostic, and what a writer waiting
    /// with [`RwTicket::try_exclusive_idle`] spins on.
    pub fn is_idle(&self) -> bool {
        let n = self.next.load(Ordering::Acquire);
        self.write.load(Ordering::Acquire) == n
    }
}

/// A rank's arrival at fence number `epoch` (its own word; numbers start
/// at 1 and increase by one per fence). Release: the rank's earlier stores
/// (its puts into other ranks' memory, its local stores) become visible to
/// every rank that sees the arrival.
pub fn arrive(own: &AtomicU64, epoch: u64) {
    own.store(epoch, Ordering::Release);
}

/// Negative control for loom: [`arrive`] with a `Relaxed` store, too weak
/// to publish the rank's puts. `tests/loom.rs` asserts that loom rejects it.
#[cfg(tmx_shmem_loom)]
#[doc(hidden)]
pub fn arrive_relaxed(own: &AtomicU64, epoch: u64) {
    own.store(epoch, Ordering::Relaxed);
}

/// Whether the rank owning `word` arrived at fence `epoch` (or later).
/// Acquire: on `true`, that rank's stores before it arrived are visible.
pub fn arrived(word: &AtomicU64, epoch: u64) -> bool {
    word.load(Ordering::Acquire) >= epoch
}

/// Bumps a PSCW counter (`post` into an origin's word, `complete` into a
/// target's). Release: everything the caller stored before is visible to
/// the rank that observes the bump.
pub fn signal(word: &AtomicU64) {
    word.fetch_add(1, Ordering::Release);
}

/// Whether a PSCW counter moved past `seen` (the count the observer has
/// consumed so far). Acquire, as [`arrived`].
pub fn observed(word: &AtomicU64, seen: u64) -> bool {
    word.load(Ordering::Acquire) > seen
}

/// Entries of a [`RegionTable`].
pub const REGION_SLOTS: usize = 64;

/// Words of a [`RegionTable`]: the version, then an address and a length
/// per entry.
pub const REGION_WORDS: usize = 1 + 2 * REGION_SLOTS;

/// The memory regions a rank exposes in a dynamic window
/// (`MPI_Win_attach`), published for the origins to check their accesses
/// against: a sequence lock (one writer, the owner) over `(address,
/// length)` entries; an entry with address 0 is free.
///
/// The writer makes the version odd, changes entries, makes it even
/// (Release); a reader takes the version (Acquire), reads the entries, and
/// keeps the result only if the version was even and did not move. Every
/// word is an atomic, so a torn read is detected, never undefined.
#[derive(Debug, Clone, Copy)]
pub struct RegionTable<'a> {
    version: &'a AtomicU64,
    entries: &'a [AtomicU64],
}

impl<'a> RegionTable<'a> {
    /// The table over `words` (at least [`REGION_WORDS`] of them; extra
    /// words are ignored, fewer give a smaller table).
    pub fn new(words: &'a [AtomicU64]) -> Option<Self> {
        let (version, entries) = words.split_first()?;
        let n = entries.len().min(2 * REGION_SLOTS) & !1;
        Some(RegionTable {
            version,
            entries: entries.get(..n)?,
        })
    }

    /// Number of entries.
    pub fn slots(&self) -> usize {
        self.entries.len() / 2
    }

    /// Sets entry `i` (the owner only; `addr` 0 frees it). `false` if `i`
    /// is out of range.
    pub fn set(&self, i: usize, addr: u64, len: u64) -> bool {
        let (Some(a), Some(l)) = (self.entries.get(2 * i), self.entries.get(2 * i + 1)) else {
            return false;
        };
        let v = self.version.load(Ordering::Relaxed);
        self.version.store(v.wrapping_add(1), Ordering::Relaxed);
        crate::sync::fence(Ordering::Release);
        a.store(addr, Ordering::Relaxed);
        l.store(len, Ordering::Relaxed);
        self.version.store(v.wrapping_add(2), Ordering::Release);
        true
    }

    /// Whether `[addr, addr + len)` lies inside one entry; `None` if the
    /// owner was changing the table meanwhile (read again).
    pub fn contains(&self, addr: u64, len: u64) -> Option<bool> {
        let v1 = self.version.load(Ordering::Acquire);
        if v1 % 2 == 1 {
            return None;
        }
        let end = addr.checked_add(len);
        let mut found = false;
        for e in self.entries.chunks_exact(2) {
            let base = e[0].load(Ordering::Relaxed);
            let n = e[1].load(Ordering::Relaxed);
            if base != 0
                && addr >= base
                && end.is_some_and(|end| base.checked_add(n).is_some_and(|lim| end <= lim))
            {
                found = true;
            }
        }
        crate::sync::fence(Ordering::Acquire);
        (self.version.load(Ordering::Relaxed) == v1).then_some(found)
    }

    /// Negative control for loom: [`RegionTable::contains`] without the
    /// version check, which can combine an address and a length from two
    /// different states of an entry. `tests/loom.rs` asserts that loom finds
    /// such a torn read.
    #[cfg(tmx_shmem_loom)]
    #[doc(hidden)]
    pub fn contains_ignoring_version(&self, addr: u64, len: u64) -> bool {
        let end = addr.checked_add(len);
        self.entries.chunks_exact(2).any(|e| {
            let base = e[0].load(Ordering::Relaxed);
            let n = e[1].load(Ordering::Relaxed);
            base != 0
                && addr >= base
                && end.is_some_and(|end| base.checked_add(n).is_some_and(|lim| end <= lim))
        })
    }
}

#[cfg(all(test, not(tmx_shmem_loom)))]
mod tests {
    use super::*;

    fn words() -> [AtomicU64; 3] {
        [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]
    }

    #[test]
    fn readers_share_writers_exclude_in_ticket_order() {
        let w = words();
        let l = RwTicket::new(&w[0], &w[1], &w[2]);
        let r1 = l.ticket();
        let r2 = l.ticket();
        let x = l.ticket();
        let r3 = l.ticket();
        assert!(l.may_enter(r1, false) && !l.may_enter(r2, false));
        assert!(l.try_shared(r1));
        assert!(l.may_enter(r2, false), "a reader admits the next one");
        assert!(l.try_shared(r2), "a second reader enters beside the first");
        assert!(!l.try_exclusive(x), "the writer waits for both readers");
        assert!(!l.try_shared(r3), "a reader queued behind a writer waits");
        l.release_shared();
        assert!(!l.try_exclusive(x));
        l.release_shared();
        assert!(l.try_exclusive(x));
        assert!(!l.try_shared(r3), "still excluded while the writer holds");
        l.release_exclusive();
        assert!(l.try_shared(r3));
        l.release_shared();
        assert!(l.is_idle());
    }

    #[test]
    fn idle_writers_never_hold_up_readers() {
        let w = words();
        let l = RwTicket::new(&w[0], &w[1], &w[2]);
        let r1 = l.ticket();
        assert!(l.try_shared(r1));
        assert_eq!(l.try_exclusive_idle(), None, "a reader holds");
        let r2 = l.ticket();
        assert!(l.try_shared(r2), "no waiting writer in front of a reader");
        l.release_shared();
        assert_eq!(l.try_exclusive_idle(), None, "one reader still holds");
        l.release_shared();
        let x = l.try_exclusive_idle().expect("idle: the writer enters");
        assert_eq!(l.try_exclusive_idle(), None, "a second writer waits");
        let r3 = l.ticket();
        assert!(!l.try_shared(r3), "a reader waits while the writer holds");
        l.release_exclusive();
        assert!(l.try_shared(r3));
        assert!(r3 > x);
        l.release_shared();
        assert!(l.is_idle());
        assert!(l.try_exclusive_idle().is_some());
        l.release_exclusive();
        assert!(l.is_idle());
    }

    #[test]
    fn counters_are_monotone() {
        let a = AtomicU64::new(0);
        assert!(!arrived(&a, 1));
        arrive(&a, 1);
        assert!(arrived(&a, 1));
        arrive(&a, 2);
        assert!(arrived(&a, 1), "a rank one fence ahead still counts");
        let c = AtomicU64::new(0);
        assert!(!observed(&c, 0));
        signal(&c);
        signal(&c);
        assert!(observed(&c, 1));
        assert!(!observed(&c, 2));
    }

    #[test]
    fn region_table_checks_containment() {
        let words: Vec<AtomicU64> = (0..REGION_WORDS).map(|_| AtomicU64::new(0)).collect();
        let t = RegionTable::new(&words).unwrap();
        assert_eq!(t.slots(), REGION_SLOTS);
        assert_eq!(t.contains(0x1000, 8), Some(false));
        assert!(t.set(3, 0x1000, 64));
        assert_eq!(t.contains(0x1000, 64), Some(true));
        assert_eq!(t.contains(0x1038, 8), Some(true));
        assert_eq!(t.contains(0x1038, 9), Some(false), "crosses the end");
        assert_eq!(t.contains(0xfff, 2), Some(false), "starts before");
        assert_eq!(t.contains(u64::MAX, 2), Some(false), "overflow");
        assert!(t.set(3, 0, 0));
        assert_eq!(t.contains(0x1000, 8), Some(false), "freed");
        assert!(!t.set(REGION_SLOTS, 1, 1));
        assert!(RegionTable::new(&[]).is_none());
    }
}
