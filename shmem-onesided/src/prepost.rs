//! The prepost ring: receive headers advertised by a receiver to one sender.
//!
//! One ring per ordered pair (receiver → sender). The receiver *posts* a
//! receive ([`Prepost`]: a 64-bit TM tag and mask as [`tm_proto::TagLayout`]
//! builds them, the offload model's 16-bit sync count, the capacity and the
//! offset of the receive buffer in its symmetric heap). The sender scans the posted entries in
//! posting order and *claims* the first that matches its message, puts the
//! data straight into the receive buffer and marks the entry *done*. The
//! receiver may *withdraw* an entry it no longer wants the sender to use (the
//! MP_Lite "gap": a buffered send crossed the prepost; or a cancel).
//!
//! Claim and withdraw race on one word per slot; a compare-and-swap decides,
//! so exactly one of them wins. Which receives may be preposted at all, and
//! when a prepost crossed by a buffered send must be withdrawn, is protocol
//! policy that comes from tm-match's offload model (`Action::Add { entry,
//! count }` maps to [`Poster::post`], `Delete` to [`Poster::withdraw`], whose
//! CAS fails exactly when the sender already claimed the entry); this module
//! only provides the race-free primitive.
//!
//! # Slot (one cache line)
//!
//! ```text
//!  word     AtomicU64   (index + 1) << 2 | state     state: 0 POSTED, 1 CLAIMED,
//!                                                            2 DONE, 3 WITHDRAWN
//!  body[0]  AtomicU64   TM tag   (TagLayout::encode / match_bits)
//!  body[1]  AtomicU64   TM mask  (a message tag t matches iff (t ^ tag) & mask == 0)
//!  body[2]  AtomicU64   capacity (bytes)
//!  body[3]  AtomicU64   offset of the receive buffer in the receiver's heap
//!  body[4]  AtomicU64   cookie (the receiver's request id)
//!  body[5]  AtomicU64   count (u16, the offload model's phase) | flags (u32) << 32
//!  body[6]  AtomicU64   result, stored by the claimer before DONE (the
//!                       endpoint stores length | tag << 32, bit 63 = failed)
//! ```
//!
//! # Phase (the gap)
//!
//! [`Phase`] is the pair of counters that makes a prepost trustworthy, the
//! shared-memory form of the TM-SRQ's phase/sync (tm-match's offload model):
//! `h` counts the messages senders published into this receiver's header
//! rings as *engine-unexpected* (every message that did not go through a
//! prepost), incremented by each sender **before** it publishes the header
//! (one counter per sender, in its ring's control block, so that counting
//! is a plain store by the counter's only writer; `h` is their sum);
//! `s` is the offload model's 16-bit counter of such messages the receiver
//! has fully processed, stored by the receiver with every add, delete and
//! sync it executes. A sender may use a prepost only if, read after the
//! entry, `s == h`: then every message it published before (in particular
//! one that crossed the prepost in the gap) was processed, and a processed
//! message that matched the entry made the receiver withdraw it first.
//!
//! The body words are atomics accessed with `Relaxed` because a sender may
//! read an entry while the receiver recycles its slot; the claim CAS on
//! `word` then fails, so such a torn read is never acted on (a claim succeeds
//! only if the slot still holds the same posted index, and the receiver
//! rewrites a body only after the old index is DONE or WITHDRAWN).

use crate::sync::{AtomicU64, Ordering};

/// The receiver's side of the phase (see the module docs): its processed
/// count `s`, a 16-bit wrapping value kept in a 64-bit word. The senders'
/// side, `h`, is the sum of one counter per sender, each written by its
/// sender alone ([`crate::ring::RingRef::count_message`]).
#[cfg_attr(not(tmx_shmem_loom), repr(C))]
#[derive(Debug)]
pub struct Phase {
    /// The receiver's processed count, as its last add/delete/sync said.
    s: AtomicU64,
}

impl Phase {
    /// Counter at zero.
    pub fn new() -> Self {
        Phase {
            s: AtomicU64::new(0),
        }
    }

    /// Receiver: applies the offload model's counter (an add, delete or
    /// sync), after executing everything the model emitted before it.
    pub fn apply(&self, count: u16) {
        self.s.store(u64::from(count), Ordering::Release);
    }

    /// Sender: whether every engine-unexpected message counted so far has
    /// been processed by the receiver. `counted` returns `h`, the sum of
    /// every sender's counter (each read with Acquire); it is called after
    /// `s` is read (Acquire). Call this after reading the entry it would
    /// claim.
    ///
    /// Why a sum read counter by counter is enough: each counter only
    /// grows, and a message the receiver processed before storing the `s`
    /// read here was counted before it was published, so every counter
    /// read afterwards includes it. The sum is therefore at least the
    /// number of messages counted when `s` was stored, and `s == h` still
    /// means "all of them processed" (16-bit compare, as the TM-SRQ's).
    #[inline]
    pub fn synced(&self, counted: impl FnOnce() -> u64) -> bool {
        let s = self.s.load(Ordering::Acquire);
        let h = counted();
        s as u16 == h as u16
    }
}

impl Default for Phase {
    fn default() -> Self {
        Self::new()
    }
}

const POSTED: u64 = 0;
const CLAIMED: u64 = 1;
const DONE: u64 = 2;
const WITHDRAWN: u64 = 3;
const BODY_WORDS: usize = 7;
const RESULT: usize = 6;

/// One prepost slot (64 bytes).
#[cfg_attr(not(tmx_shmem_loom), repr(C, align(64)))]
#[derive(Debug)]
pub struct PrepostSlot {
    word: AtomicU64,
    body: [AtomicU64; BODY_WORDS],
}

#[cfg(not(tmx_shmem_loom))]
const _: () = assert!(core::mem::size_of::<PrepostSlot>() == 64);

impl PrepostSlot {
    /// An unused slot.
    pub fn new() -> Self {
        PrepostSlot {
            word: AtomicU64::new(0),
            body: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Default for PrepostSlot {
    fn default() -> Self {
        Self::new()
    }
}

/// A preposted receive as the sender sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Prepost {
    /// The receive's 64-bit TM tag (`TagLayout::match_bits(..).tag`).
    pub tag: u64,
    /// The receive's mask: a message tag `t` matches iff
    /// `((t ^ tag) & mask) == 0` (all ones for an exact receive).
    pub mask: u64,
    /// The offload model's sync count when the entry was posted.
    pub count: u16,
    /// Receive buffer capacity in bytes.
    pub capacity: u64,
    /// Offset of the receive buffer in the receiver's symmetric heap.
    pub offset: u64,
    /// Receiver's request id, echoed back.
    pub cookie: u64,
    /// Flags (protocol-defined).
    pub flags: u32,
}

impl Prepost {
    /// The receive's tag and mask, as the engine side of tm-match's offload
    /// model matches a message against them
    /// ([`tm_match::offload::EngineScan`]).
    pub fn entry(&self) -> tm_proto::TagMask {
        tm_proto::TagMask {
            tag: self.tag,
            mask: self.mask,
        }
    }
}

/// State of a posted entry, as [`Poster::state`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostState {
    /// Still offered to the sender.
    Posted,
    /// The sender claimed it and is writing the data.
    Claimed,
    /// The sender finished: this many bytes are in the receive buffer.
    Done(u64),
    /// The receiver withdrew it.
    Withdrawn,
}

/// Result of [`Poster::withdraw`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withdraw {
    /// The entry is withdrawn: the sender will never use it.
    Withdrawn,
    /// Too late: the sender claimed it (and may still be writing). Wait for
    /// [`PostState::Done`].
    Claimed,
    /// Too late: the sender already delivered this many bytes.
    Done(u64),
}

/// The prepost ring is full: the oldest entry in the slot to reuse is still
/// posted or claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrepostFull;

/// Where a prepost ring lives (a power-of-two number of slots).
#[derive(Debug, Clone, Copy)]
pub struct PrepostRef<'a> {
    slots: &'a [PrepostSlot],
}

impl<'a> PrepostRef<'a> {
    /// A ring over `slots`.
    ///
    /// # Panics
    /// If `slots.len()` is not a power of two (geometry is fixed by the
    /// crate's layout code, never by peer data).
    pub fn new(slots: &'a [PrepostSlot]) -> Self {
        assert!(
            slots.len().is_power_of_two(),
            "prepost ring length must be a power of two"
        );
        PrepostRef { slots }
    }

    fn n(&self) -> u64 {
        self.slots.len() as u64
    }

    fn slot(&self, index: u64) -> &'a PrepostSlot {
        &self.slots[(index & (self.n() - 1)) as usize]
    }
}

/// A prepost ring on the heap, for tests and loom models.
#[derive(Debug)]
pub struct PrepostMem {
    slots: Box<[PrepostSlot]>,
}

impl PrepostMem {
    /// A heap ring of `n` slots (`n` a power of two).
    pub fn new(n: usize) -> Self {
        PrepostMem {
            slots: (0..n).map(|_| PrepostSlot::new()).collect(),
        }
    }

    /// The ring's [`PrepostRef`].
    pub fn view(&self) -> PrepostRef<'_> {
        PrepostRef::new(&self.slots)
    }
}

#[inline]
fn word(index: u64, state: u64) -> u64 {
    ((index + 1) << 2) | state
}

#[inline]
fn split(w: u64) -> (u64, u64) {
    (w >> 2, w & 3)
}

/// The receiver's side: posts, polls and withdraws entries.
#[derive(Debug, Default, Clone)]
pub struct Poster {
    head: u64,
}

impl Poster {
    /// A poster for a fresh ring.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether [`Poster::post`] would succeed now: the slot to reuse holds
    /// no entry that is still posted or claimed.
    pub fn can_post(&self, ring: PrepostRef<'_>) -> bool {
        let i = self.head;
        let w = ring.slot(i).word.load(Ordering::Acquire);
        if i < ring.n() {
            w == 0
        } else {
            let (idx1, st) = split(w);
            idx1 == i - ring.n() + 1 && (st == DONE || st == WITHDRAWN)
        }
    }

    /// Posts `p`; returns the entry's index. Fails if the slot to reuse still
    /// holds an entry that is posted or claimed.
    pub fn post(&mut self, ring: PrepostRef<'_>, p: &Prepost) -> Result<u64, PrepostFull> {
        let i = self.head;
        let slot = ring.slot(i);
        if !self.can_post(ring) {
            return Err(PrepostFull);
        }
        let b = &slot.body;
        b[0].store(p.tag, Ordering::Relaxed);
        b[1].store(p.mask, Ordering::Relaxed);
        b[2].store(p.capacity, Ordering::Relaxed);
        b[3].store(p.offset, Ordering::Relaxed);
        b[4].store(p.cookie, Ordering::Relaxed);
        b[5].store(
            u64::from(p.count) | (u64::from(p.flags) << 32),
            Ordering::Relaxed,
        );
        b[RESULT].store(0, Ordering::Relaxed);
        slot.word.store(word(i, POSTED), Ordering::Release);
        self.head += 1;
        Ok(i)
    }

    /// The state of entry `index` (Acquire: on `Done`, the sender's data
    /// writes into the receive buffer are visible).
    pub fn state(&self, ring: PrepostRef<'_>, index: u64) -> PostState {
        let slot = ring.slot(index);
        let (idx1, st) = split(slot.word.load(Ordering::Acquire));
        if idx1 != index + 1 {
            // Only this poster reuses slots, and it does so only after the
            // entry finished; a different index here means it finished.
            return PostState::Withdrawn;
        }
        match st {
            POSTED => PostState::Posted,
            CLAIMED => PostState::Claimed,
            DONE => PostState::Done(slot.body[RESULT].load(Ordering::Relaxed)),
            _ => PostState::Withdrawn,
        }
    }

    /// Withdraws entry `index` unless the sender claimed it first.
    pub fn withdraw(&mut self, ring: PrepostRef<'_>, index: u64) -> Withdraw {
        let slot = ring.slot(index);
        match slot.word.compare_exchange(
            word(index, POSTED),
            word(index, WITHDRAWN),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Withdraw::Withdrawn,
            Err(cur) => match split(cur) {
                (i1, DONE) if i1 == index + 1 => {
                    Withdraw::Done(slot.body[RESULT].load(Ordering::Relaxed))
                }
                (i1, CLAIMED) if i1 == index + 1 => Withdraw::Claimed,
                _ => Withdraw::Withdrawn,
            },
        }
    }
}

/// An entry the sender claimed: it owns the receive buffer until
/// [`Claimer::complete`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// The entry's index.
    pub index: u64,
    /// What the receiver posted.
    pub prepost: Prepost,
}

/// The sender's side: finds and claims posted entries.
#[derive(Debug, Default, Clone)]
pub struct Claimer {
    scan: u64,
}

impl Claimer {
    /// A claimer for a fresh ring.
    pub fn new() -> Self {
        Self::default()
    }

    /// Claims the oldest posted entry for which `accept` returns true.
    pub fn claim_first(
        &mut self,
        ring: PrepostRef<'_>,
        mut accept: impl FnMut(&Prepost) -> bool,
    ) -> Option<Claim> {
        self.advance(ring);
        for i in self.scan..self.scan + ring.n() {
            let slot = ring.slot(i);
            let w = slot.word.load(Ordering::Acquire);
            let (idx1, st) = split(w);
            if idx1 < i + 1 {
                // Not posted yet; later indices are not either.
                break;
            }
            if idx1 != i + 1 || st != POSTED {
                continue;
            }
            let b = &slot.body;
            let cf = b[5].load(Ordering::Relaxed);
            let p = Prepost {
                tag: b[0].load(Ordering::Relaxed),
                mask: b[1].load(Ordering::Relaxed),
                // Low 16 bits and high 32 bits of the packed word.
                count: cf as u16,
                flags: (cf >> 32) as u32,
                capacity: b[2].load(Ordering::Relaxed),
                offset: b[3].load(Ordering::Relaxed),
                cookie: b[4].load(Ordering::Relaxed),
            };
            if !accept(&p) {
                continue;
            }
            // The CAS validates the reads above: it succeeds only if the slot
            // still holds posted entry `i`, whose body the receiver wrote
            // before its Release store of `word` and does not rewrite before
            // the entry is DONE (by us) or WITHDRAWN (which would fail this).
            if slot
                .word
                .compare_exchange(w, word(i, CLAIMED), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Some(Claim {
                    index: i,
                    prepost: p,
                });
            }
        }
        None
    }

    /// Marks a claimed entry done with `written` bytes in the receive buffer.
    /// Everything written before this call is visible to the receiver once it
    /// sees [`PostState::Done`].
    pub fn complete(&mut self, ring: PrepostRef<'_>, claim: &Claim, written: u64) {
        let slot = ring.slot(claim.index);
        slot.body[RESULT].store(written, Ordering::Relaxed);
        slot.word.store(word(claim.index, DONE), Ordering::Release);
    }

    fn advance(&mut self, ring: PrepostRef<'_>) {
        loop {
            let (idx1, st) = split(ring.slot(self.scan).word.load(Ordering::Acquire));
            let finished = idx1 > self.scan + 1 || (idx1 == self.scan + 1 && st != POSTED);
            if !finished {
                return;
            }
            self.scan += 1;
        }
    }
}

#[cfg(test)]
#[cfg(not(tmx_shmem_loom))]
mod tests {
    use super::*;

    fn pp(tag: u64) -> Prepost {
        Prepost {
            tag,
            mask: u64::MAX,
            count: 3,
            capacity: 8,
            offset: 64 * tag,
            cookie: tag,
            flags: 9,
        }
    }

    #[test]
    fn phase_synced_compares_16_bits() {
        let ph = Phase::new();
        let ring = crate::ring::RingMem::new(2);
        let r = ring.view();
        assert!(ph.synced(|| r.counted()));
        r.count_message();
        assert!(!ph.synced(|| r.counted()), "a counted message is in flight");
        ph.apply(1);
        assert!(ph.synced(|| r.counted()));
        for _ in 0..65_535 {
            r.count_message();
        }
        ph.apply(0); // 65536 processed, as the model's wrapping counter says
        assert!(ph.synced(|| r.counted()));
        r.count_message();
        assert!(!ph.synced(|| r.counted()));
    }

    #[test]
    fn phase_sums_every_senders_counter() {
        let ph = Phase::new();
        let (a, b) = (crate::ring::RingMem::new(2), crate::ring::RingMem::new(2));
        let h = || a.view().counted().wrapping_add(b.view().counted());
        a.view().count_message();
        b.view().count_message();
        ph.apply(1);
        assert!(!ph.synced(h), "one of two counted messages is unprocessed");
        ph.apply(2);
        assert!(ph.synced(h));
    }

    #[test]
    fn claims_oldest_match_and_recycles() {
        let mem = PrepostMem::new(2);
        let (mut po, mut cl) = (Poster::new(), Claimer::new());
        let any = Prepost { mask: 0, ..pp(0) };
        let takes = |p: &Prepost, t| tm_match::offload::EngineScan::new(t).offer(&p.entry());
        assert!(takes(&any, 12345) && takes(&pp(2), 2) && !takes(&pp(2), 3));
        assert_eq!(po.post(mem.view(), &pp(1)), Ok(0));
        assert_eq!(po.post(mem.view(), &pp(2)), Ok(1));
        assert_eq!(po.post(mem.view(), &pp(3)), Err(PrepostFull));
        // The sender wants tag 2: it skips entry 0.
        let c = cl.claim_first(mem.view(), |p| p.tag == 2).unwrap();
        assert_eq!((c.index, c.prepost), (1, pp(2)));
        assert_eq!(po.state(mem.view(), 1), PostState::Claimed);
        assert_eq!(po.withdraw(mem.view(), 1), Withdraw::Claimed);
        cl.complete(mem.view(), &c, 5);
        assert_eq!(po.state(mem.view(), 1), PostState::Done(5));
        assert_eq!(po.withdraw(mem.view(), 1), Withdraw::Done(5));
        // Entry 0 is still posted, so slot 0 cannot be reused yet.
        assert_eq!(po.post(mem.view(), &pp(3)), Err(PrepostFull));
        assert_eq!(po.withdraw(mem.view(), 0), Withdraw::Withdrawn);
        assert_eq!(po.state(mem.view(), 0), PostState::Withdrawn);
        assert!(
            cl.claim_first(mem.view(), |_| true).is_none(),
            "withdrawn entries are never claimed"
        );
        assert_eq!(po.post(mem.view(), &pp(3)), Ok(2));
        assert_eq!(po.post(mem.view(), &pp(4)), Ok(3));
        let c = cl.claim_first(mem.view(), |_| true).unwrap();
        assert_eq!(
            (c.index, c.prepost),
            (2, pp(3)),
            "posting order is kept across laps"
        );
        assert_eq!(po.state(mem.view(), 0), PostState::Withdrawn);
    }
}
