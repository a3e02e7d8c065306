//! Single-producer single-consumer header rings of 64-byte slots.
//!
//! One ring per ordered pair (sender → receiver) lives in the receiver's part
//! of the node segment. The ring code only needs a [`RingRef`] — a reference
//! to the control block and the slot array — so it runs unchanged on a real
//! shared mapping and on a heap allocation ([`RingMem`]) under loom.
//!
//! # Slot format (one cache line)
//!
//! ```text
//!  byte  0..4   seq      AtomicU32, (index + 1) mod 2^32, stored LAST with Release
//!  byte  4      kind     u8   message kind (transport-defined)
//!  byte  5      flags    u8
//!  byte  6..8   aux      u16  (inline payload length for inline messages)
//!  byte  8..12  nbytes   u32  message length
//!  byte 12..16  source   u32  sender's local rank
//!  byte 16..20  tag      u32  MPI tag
//!  byte 20..24  context  u32  MPI context id
//!  byte 24..32  word     u64  data offset / address, or the first 8 inline bytes
//!  byte 32..64  ext      [u8; 32] further inline bytes or a rendezvous descriptor
//! ```
//!
//! Bytes 8..32 are MP_Lite's 24-byte header (`nbytes, src, tag, dest_ptr`)
//! widened with the context id; up to [`INLINE_MAX`] = 40 payload bytes ride
//! inline in `word` + `ext`.
//!
//! # Protocol
//!
//! - Producer (process-private `head`, `cached_consumed`): if
//!   `head - cached_consumed >= N`, re-read `consumed` (Acquire) **once**; if
//!   still full, report [`Full`]. Otherwise write the body with plain stores,
//!   then `seq.store(head + 1, Release)`.
//! - Consumer (process-private `next`, `published`): accept slot
//!   `next mod N` iff `seq.load(Acquire) == next + 1`; copy the body out; every
//!   `batch` messages, and whenever a poll finds the ring empty with
//!   unpublished progress, `consumed.store(next, Release)`.
//!
//! A previous lap's slot holds `seq == next + 1 - N`, never equal to the
//! expected value, so slots are never cleared and there is no ABA.

use crate::sync::{AtomicU32, AtomicU64, Ordering, UnsafeCell};
use std::collections::VecDeque;

/// Bytes of a slot (one cache line).
pub const SLOT_BYTES: usize = 64;
/// Bytes of a slot's body (everything but `seq`).
const BODY_BYTES: usize = SLOT_BYTES - 4;
/// Largest payload carried inline in a slot (`word` + `ext`).
pub const INLINE_MAX: usize = 40;
/// Payload bytes of one continuation slot (a slot's body; its `seq` word is
/// left alone). See [`Producer::try_push_ext`].
pub const EXT_SLOT_BYTES: usize = BODY_BYTES;
/// Bytes of the ring control block (the `consumed` index on its own 128-byte
/// pair of cache lines, against the adjacent-line prefetcher).
pub const RING_CTL_BYTES: usize = 128;

/// One 64-byte slot: the sequence word and the header body.
#[cfg_attr(not(tmx_shmem_loom), repr(C, align(64)))]
#[derive(Debug)]
pub struct Slot {
    seq: AtomicU32,
    body: UnsafeCell<[u8; BODY_BYTES]>,
}

// SAFETY: the body is only written by the single producer while the slot is
// free (the consumer released it with a Release store of `consumed` that the
// producer acquired) and only read by the single consumer after an Acquire
// load of `seq` that observed the producer's Release store. That protocol is
// what loom checks in tests/loom.rs.
unsafe impl Sync for Slot {}
// SAFETY: plain bytes and an atomic; no thread affinity.
unsafe impl Send for Slot {}

impl Slot {
    /// An empty slot (`seq == 0`, which no index ever expects).
    pub fn new() -> Self {
        Slot {
            seq: AtomicU32::new(0),
            body: UnsafeCell::new([0; BODY_BYTES]),
        }
    }
}

impl Default for Slot {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(not(tmx_shmem_loom))]
const _: () = assert!(core::mem::size_of::<Slot>() == SLOT_BYTES);
#[cfg(not(tmx_shmem_loom))]
const _: () = assert!(core::mem::size_of::<RingCtl>() == RING_CTL_BYTES);

/// The ring's shared control block: the consumer's published index (first
/// line), and the producer's count of *engine-unexpected* messages (second
/// line; see [`crate::prepost::Phase`]).
#[cfg_attr(not(tmx_shmem_loom), repr(C, align(128)))]
#[derive(Debug)]
pub struct RingCtl {
    consumed: AtomicU64,
    #[cfg(not(tmx_shmem_loom))]
    _pad: [u64; 7],
    /// Written by the producer only (so a plain load and store, no
    /// read-modify-write), read by any sender checking the receiver's phase.
    counted: AtomicU64,
    /// The split-copy hand-off between this ring's producer (a CMA
    /// sender) and consumer (its receiver), one at a time per ring: see
    /// [`SplitWords`].
    split_state: AtomicU32,
    split_id: AtomicU64,
    split_addr: AtomicU64,
    split_len: AtomicU64,
    split_start: AtomicU64,
}

/// Split-copy state: nothing going on (the sender is busy or has not
/// offered help). See [`SplitWords`].
pub const SPLIT_IDLE: u32 = 0;
/// Split-copy state: the sender is idle and can write part of a message.
pub const SPLIT_READY: u32 = 1;
/// Split-copy state: the receiver offered the sender a part
/// ([`SplitOffer`] in the words).
pub const SPLIT_OFFERED: u32 = 2;
/// Split-copy state: the sender claimed the offer and is writing its part.
pub const SPLIT_CLAIMED: u32 = 3;
/// Split-copy state: the sender wrote its part.
pub const SPLIT_DONE: u32 = 4;
/// Split-copy state: the sender's write failed (the receiver copies the part).
pub const SPLIT_FAILED: u32 = 5;
/// Split-copy state: the receiver took its offer back before the sender
/// claimed it (the receiver copies the part).
pub const SPLIT_WITHDRAWN: u32 = 6;

/// The words of a ring's split-copy hand-off (`TMX_SHMEM_TUNE=cma_split`): the
/// hand-off of a CMA message's copy between its receiver (the ring's
/// consumer) and its sender (the ring's producer), one hand-off at a time
/// per ring, as the receiver reads a ring's messages one by one. They
/// share the control block's second line with `counted`.
///
/// `state` goes [`SPLIT_IDLE`] → [`SPLIT_READY`] (sender,
/// [`SplitWords::mark_ready`], on a progress pass that had nothing else to
/// do while it has CMA sends to that receiver: "I am waiting, I can help";
/// it takes it back, `READY` → `IDLE` with [`SplitWords::unready`],
/// before a copy of its own) → [`SPLIT_OFFERED`] (receiver,
/// [`SplitWords::offer`], by compare-exchange after writing `id`, `addr`,
/// `len` and `start`: "for send `id`, write `len` bytes of your buffer
/// from `start` to my address `addr`") → either [`SPLIT_CLAIMED`]
/// (sender, [`SplitWords::claim`], by compare-exchange) → [`SPLIT_DONE`]
/// or [`SPLIT_FAILED`] (sender, [`SplitWords::complete`], after its
/// `process_vm_writev`), or [`SPLIT_WITHDRAWN`] (receiver,
/// [`SplitWords::poll_offer`], by compare-exchange, when it finished its
/// own part first; it then copies the rest itself). The receiver waits
/// only while the state is `CLAIMED` (the sender's one write), then sets
/// `READY` after `DONE` (the sender was idle) or `IDLE` otherwise
/// ([`SplitWords::release`]), and sends its FIN, after which the sender
/// may free or reuse its buffer. Exactly one side copies each byte. A
/// receiver that finds the state not `READY` (a busy sender) reads the
/// whole message in one call as without splitting: a withdrawn offer
/// costs a second `process_vm_readv`.
///
/// The transitions are methods here, so that `tests/loom.rs` checks the
/// code the endpoint runs (`split_handoff_*`).
#[derive(Debug, Clone, Copy)]
pub struct SplitWords<'a> {
    /// The hand-off's state (`SPLIT_*`).
    state: &'a AtomicU32,
    /// The send the offer is for (the sender's request id).
    id: &'a AtomicU64,
    /// Where in the receiver's address space the sender writes.
    addr: &'a AtomicU64,
    /// How many bytes it writes.
    len: &'a AtomicU64,
    /// From which offset of its message.
    start: &'a AtomicU64,
}

/// A receiver's offer: "for send `id`, write `len` bytes of your buffer
/// from `start` to my address `addr`" ([`SplitWords::offer`],
/// [`SplitWords::claim`]). Peer data to the sender: it checks `id`,
/// `start` and `len` against its own sends before writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitOffer {
    /// The send the offer is for (the sender's request id).
    pub id: u64,
    /// Where in the receiver's address space the sender writes.
    pub addr: u64,
    /// How many bytes it writes.
    pub len: u64,
    /// From which offset of its message.
    pub start: u64,
}

/// One look of a receiver at its offer ([`SplitWords::poll_offer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitPoll {
    /// The sender wrote its part ([`SPLIT_DONE`]).
    Done,
    /// The sender had not claimed the offer: it is withdrawn
    /// ([`SPLIT_WITHDRAWN`]), the receiver copies the part.
    Withdrawn,
    /// The sender is writing its part ([`SPLIT_CLAIMED`]): look again.
    Claimed,
    /// The sender's write failed ([`SPLIT_FAILED`], or a state no sender
    /// writes here): the receiver copies the part.
    Failed,
}

impl SplitWords<'_> {
    /// Receiver: offers the sender `o` if the state is [`SPLIT_READY`]:
    /// writes the words (Relaxed), then `READY` → `OFFERED` by
    /// compare-exchange (AcqRel, publishing them). `false` (the receiver
    /// copies everything itself) if the state was not `READY` (an Acquire
    /// load, before any word is written) or the sender took its `READY`
    /// back meanwhile.
    #[inline]
    pub fn offer(&self, o: SplitOffer) -> bool {
        if self.state.load(Ordering::Acquire) != SPLIT_READY {
            return false;
        }
        self.id.store(o.id, Ordering::Relaxed);
        self.addr.store(o.addr, Ordering::Relaxed);
        self.len.store(o.len, Ordering::Relaxed);
        self.start.store(o.start, Ordering::Relaxed);
        self.state
            .compare_exchange(
                SPLIT_READY,
                SPLIT_OFFERED,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// Receiver, after a successful [`SplitWords::offer`] and its own
    /// part: one step of its wait (Acquire loads). An offer still
    /// unclaimed is withdrawn, `OFFERED` → `WITHDRAWN` by compare-exchange
    /// (AcqRel); if the sender claimed it just before, the state is looked
    /// at again. The caller repeats while [`SplitPoll::Claimed`], then
    /// calls [`SplitWords::release`].
    #[inline]
    pub fn poll_offer(&self) -> SplitPoll {
        self.poll_with(|state| {
            state
                .compare_exchange(
                    SPLIT_OFFERED,
                    SPLIT_WITHDRAWN,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        })
    }

    /// **Negative control for loom only**: [`SplitWords::poll_offer`]
    /// withdrawing with a plain store of `WITHDRAWN` after the load that
    /// saw `OFFERED`, not a compare-exchange, so the sender can claim in
    /// between and both sides copy the part. `tests/loom.rs` asserts that
    /// loom rejects it.
    #[cfg(tmx_shmem_loom)]
    #[doc(hidden)]
    pub fn poll_offer_withdraw_by_store(&self) -> SplitPoll {
        self.poll_with(|state| {
            state.store(SPLIT_WITHDRAWN, Ordering::Release);
            true
        })
    }

    /// [`SplitWords::poll_offer`] with `withdraw` run when the state is
    /// `OFFERED` (`true`: withdrawn; `false`: the state is read again).
    #[inline(always)]
    fn poll_with(&self, withdraw: impl Fn(&AtomicU32) -> bool) -> SplitPoll {
        loop {
            match self.state.load(Ordering::Acquire) {
                SPLIT_DONE => return SplitPoll::Done,
                SPLIT_OFFERED => {
                    if withdraw(self.state) {
                        return SplitPoll::Withdrawn;
                    }
                    // The sender claimed it just now (only its claim
                    // moves an offer on): look again.
                }
                SPLIT_CLAIMED => return SplitPoll::Claimed,
                _ => return SplitPoll::Failed,
            }
        }
    }

    /// Receiver: ends the hand-off (a Release store): `READY` if the
    /// sender wrote its part (`shared`: it is serving, idle otherwise, so
    /// it stays `READY` for the next message, as its next idle pass would
    /// mark it), `IDLE` otherwise. The receiver sends its FIN after this.
    #[inline]
    pub fn release(&self, shared: bool) {
        let next = if shared { SPLIT_READY } else { SPLIT_IDLE };
        self.state.store(next, Ordering::Release);
    }

    /// Sender: the state (an Acquire load), to choose between
    /// [`SplitWords::mark_ready`] (`IDLE`) and [`SplitWords::claim`]
    /// (`OFFERED`).
    #[inline]
    pub fn state(&self) -> u32 {
        self.state.load(Ordering::Acquire)
    }

    /// Sender: `IDLE` → `READY` by compare-exchange (AcqRel): it can help.
    /// `false` if the state was not `IDLE`.
    #[inline]
    pub fn mark_ready(&self) -> bool {
        self.state
            .compare_exchange(SPLIT_IDLE, SPLIT_READY, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Sender, about to copy a message of its own: takes its `READY` back
    /// (`READY` → `IDLE` by compare-exchange, AcqRel, tried only if a
    /// Relaxed load sees `READY`). Fails harmlessly if the receiver
    /// offered meanwhile (the receiver then withdraws, or the sender
    /// claims on a later pass).
    #[inline]
    pub fn unready(&self) {
        if self.state.load(Ordering::Relaxed) == SPLIT_READY {
            let _ = self.state.compare_exchange(
                SPLIT_READY,
                SPLIT_IDLE,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    /// Sender: claims the receiver's offer, `OFFERED` → `CLAIMED` by
    /// compare-exchange (AcqRel, which acquires the words the receiver
    /// wrote before offering), and reads it (Relaxed). `None` if there was
    /// no offer (not `OFFERED`, or withdrawn meanwhile). After a claim the
    /// sender must write the part (the receiver waits for it) and then
    /// call [`SplitWords::complete`].
    #[inline]
    pub fn claim(&self) -> Option<SplitOffer> {
        self.state
            .compare_exchange(
                SPLIT_OFFERED,
                SPLIT_CLAIMED,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .ok()?;
        Some(SplitOffer {
            id: self.id.load(Ordering::Relaxed),
            addr: self.addr.load(Ordering::Relaxed),
            len: self.len.load(Ordering::Relaxed),
            start: self.start.load(Ordering::Relaxed),
        })
    }

    /// Sender, after writing a claimed part: `DONE` if the write succeeded
    /// (`ok`), `FAILED` otherwise (a Release store, publishing the write).
    #[inline]
    pub fn complete(&self, ok: bool) {
        let s = if ok { SPLIT_DONE } else { SPLIT_FAILED };
        self.state.store(s, Ordering::Release);
    }
}

impl RingCtl {
    /// A control block for an empty ring.
    pub fn new() -> Self {
        RingCtl {
            consumed: AtomicU64::new(0),
            #[cfg(not(tmx_shmem_loom))]
            _pad: [0; 7],
            counted: AtomicU64::new(0),
            split_state: AtomicU32::new(0),
            split_id: AtomicU64::new(0),
            split_addr: AtomicU64::new(0),
            split_len: AtomicU64::new(0),
            split_start: AtomicU64::new(0),
        }
    }
}

impl Default for RingCtl {
    fn default() -> Self {
        Self::new()
    }
}

/// A header as it travels in a slot. See the module docs for the byte layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// Message kind (transport-defined).
    pub kind: u8,
    /// Flags (transport-defined).
    pub flags: u8,
    /// Auxiliary 16 bits (the inline length for inline messages).
    pub aux: u16,
    /// Message length in bytes.
    pub nbytes: u32,
    /// Sender's local rank.
    pub source: u32,
    /// MPI tag.
    pub tag: u32,
    /// MPI context id.
    pub context: u32,
    /// Data offset/address, or the first 8 inline bytes.
    pub word: u64,
    /// Extra inline bytes or a rendezvous descriptor.
    pub ext: [u8; 32],
}

impl Header {
    /// Stores `payload` (at most [`INLINE_MAX`] bytes) in `word` + `ext` and
    /// sets `aux` to its length. Returns `false` (and changes nothing) if it
    /// does not fit.
    pub fn set_inline(&mut self, payload: &[u8]) -> bool {
        if payload.len() > INLINE_MAX {
            return false;
        }
        // Zero-padded, as before; the first 8 bytes (when there are 8) in
        // one fixed-size load, not a `memcpy` call of a variable length.
        let mut ext = [0u8; INLINE_MAX - 8];
        let w = match payload.split_first_chunk::<8>() {
            Some((w, rest)) => {
                if !rest.is_empty() {
                    ext[..rest.len()].copy_from_slice(rest);
                }
                *w
            }
            None => {
                let mut w = [0u8; 8];
                w[..payload.len()].copy_from_slice(payload);
                w
            }
        };
        self.word = u64::from_le_bytes(w);
        self.ext = ext;
        // INLINE_MAX < 2^16
        self.aux = payload.len() as u16;
        true
    }

    /// The inline payload (`aux` bytes of `word` + `ext`), clamped to
    /// [`INLINE_MAX`] so a corrupt `aux` cannot read past the slot.
    pub fn inline_payload(&self) -> ([u8; INLINE_MAX], usize) {
        let mut b = [0u8; INLINE_MAX];
        b[..8].copy_from_slice(&self.word.to_le_bytes());
        b[8..].copy_from_slice(&self.ext);
        (b, usize::from(self.aux).min(INLINE_MAX))
    }

    #[inline(always)]
    fn encode(&self) -> [u8; BODY_BYTES] {
        let mut b = [0u8; BODY_BYTES];
        // body index = slot byte - 4
        b[0] = self.kind;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.aux.to_le_bytes());
        b[4..8].copy_from_slice(&self.nbytes.to_le_bytes());
        b[8..12].copy_from_slice(&self.source.to_le_bytes());
        b[12..16].copy_from_slice(&self.tag.to_le_bytes());
        b[16..20].copy_from_slice(&self.context.to_le_bytes());
        b[20..28].copy_from_slice(&self.word.to_le_bytes());
        b[28..60].copy_from_slice(&self.ext);
        b
    }

    #[inline(always)]
    fn decode(b: &[u8; BODY_BYTES]) -> Self {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[20..28]);
        let mut ext = [0u8; 32];
        ext.copy_from_slice(&b[28..60]);
        Header {
            kind: b[0],
            flags: b[1],
            aux: u16::from_le_bytes([b[2], b[3]]),
            nbytes: u32_at(4),
            source: u32_at(8),
            tag: u32_at(12),
            context: u32_at(16),
            word: u64::from_le_bytes(w),
            ext,
        }
    }
}

/// Continuation slots that carry a tail of `len` bytes.
#[inline]
pub const fn ext_slots(len: usize) -> u64 {
    len.div_ceil(EXT_SLOT_BYTES) as u64
}

/// The producer found the ring full even after re-reading the consumer index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// Where a ring lives: its control block and its slots (a power-of-two count).
#[derive(Debug, Clone, Copy)]
pub struct RingRef<'a> {
    ctl: &'a RingCtl,
    slots: &'a [Slot],
}

impl<'a> RingRef<'a> {
    /// A ring over `slots` (length must be a power of two, at least 1).
    ///
    /// # Panics
    /// If `slots.len()` is not a power of two: ring geometry is fixed by the
    /// crate's layout code, never by peer data.
    pub fn new(ctl: &'a RingCtl, slots: &'a [Slot]) -> Self {
        assert!(
            slots.len().is_power_of_two(),
            "ring length must be a power of two"
        );
        RingRef { ctl, slots }
    }

    /// [`RingRef::new`] for the segment's own rings, whose length the
    /// layout fixed (a power of two, checked once at attach): no check per
    /// call on the hot paths.
    #[inline]
    pub(crate) fn from_layout(ctl: &'a RingCtl, slots: &'a [Slot]) -> Self {
        debug_assert!(slots.len().is_power_of_two());
        RingRef { ctl, slots }
    }

    /// Producer: one more *engine-unexpected* message, counted before its
    /// header is published (whose Release store then orders the count
    /// before the receiver can process the message). The ring's one
    /// producer is the only writer of the counter, so this is a load and a
    /// store, not a locked read-modify-write: on x86 a locked instruction
    /// waits for every earlier store to leave the store buffer, including
    /// the slot just written for the other core.
    #[inline]
    pub fn count_message(&self) {
        let c = &self.ctl.counted;
        c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }

    /// Messages [`RingRef::count_message`] counted so far (Acquire).
    #[inline]
    pub fn counted(&self) -> u64 {
        self.ctl.counted.load(Ordering::Acquire)
    }

    /// The ring's split-copy words.
    pub fn split(&self) -> SplitWords<'a> {
        let c = self.ctl;
        SplitWords {
            state: &c.split_state,
            id: &c.split_id,
            addr: &c.split_addr,
            len: &c.split_len,
            start: &c.split_start,
        }
    }

    /// Number of slots.
    #[inline]
    pub fn capacity(&self) -> u64 {
        self.slots.len() as u64
    }

    #[inline]
    fn slot(&self, index: u64) -> &'a Slot {
        // The mask keeps the index in bounds.
        &self.slots[(index & (self.capacity() - 1)) as usize]
    }
}

/// A ring on the heap, for tests and loom models (the real rings live in the
/// node segment).
#[derive(Debug)]
pub struct RingMem {
    ctl: RingCtl,
    slots: Box<[Slot]>,
}

impl RingMem {
    /// A heap ring of `n` slots (`n` a power of two).
    pub fn new(n: usize) -> Self {
        RingMem {
            ctl: RingCtl::new(),
            slots: (0..n).map(|_| Slot::new()).collect(),
        }
    }

    /// The ring's [`RingRef`].
    pub fn view(&self) -> RingRef<'_> {
        RingRef::new(&self.ctl, &self.slots)
    }
}

/// The producer's process-private state.
#[derive(Debug, Default, Clone)]
pub struct Producer {
    head: u64,
    cached_consumed: u64,
    rereads: u64,
}

impl Producer {
    /// A producer for a fresh ring.
    pub fn new() -> Self {
        Self::default()
    }

    /// Messages pushed so far.
    pub fn pushed(&self) -> u64 {
        self.head
    }

    /// How often the cached consumer index had to be re-read.
    pub fn rereads(&self) -> u64 {
        self.rereads
    }

    /// Free slots as far as this producer knows (an under-estimate: the
    /// consumer may have freed more since the last re-read).
    pub fn known_free(&self, ring: RingRef<'_>) -> u64 {
        ring.capacity()
            .saturating_sub(self.head.wrapping_sub(self.cached_consumed))
    }

    /// Whether the next push will succeed, re-reading the consumer index
    /// once if the cached one says the ring is full (only this producer
    /// fills the ring, so a `true` stays true until the next push).
    #[inline(always)]
    pub fn has_room(&mut self, ring: RingRef<'_>) -> bool {
        let n = ring.capacity();
        if self.head.wrapping_sub(self.cached_consumed) >= n {
            self.rereads += 1;
            self.cached_consumed = ring.ctl.consumed.load(Ordering::Acquire);
        }
        self.head.wrapping_sub(self.cached_consumed) < n
    }

    /// Publishes `hdr` in the next slot, or returns [`Full`] if the ring is full
    /// after one re-read of the consumer index.
    #[inline]
    pub fn try_push(&mut self, ring: RingRef<'_>, hdr: &Header) -> Result<(), Full> {
        self.push_with(ring, hdr, Ordering::Release)
    }

    /// Publishes `hdr` followed by `tail` in the next
    /// `ext_slots(tail.len())` slots ("continuation slots", whose bodies
    /// carry the bytes and whose `seq` words are never written), all or
    /// nothing: [`Full`] if the ring lacks `1 + ext_slots` free slots after
    /// one re-read of the consumer index. The continuation bodies are
    /// written before the header's `seq` (Release), so a consumer that
    /// acquired it reads them with [`Consumer::take_ext`]. The transport
    /// must tell its consumer the tail's length (in the header).
    #[inline]
    pub fn try_push_ext(
        &mut self,
        ring: RingRef<'_>,
        hdr: &Header,
        tail: &[u8],
    ) -> Result<(), Full> {
        let n = ring.capacity();
        let need = 1 + ext_slots(tail.len());
        if self.head.wrapping_sub(self.cached_consumed) + need > n {
            self.rereads += 1;
            self.cached_consumed = ring.ctl.consumed.load(Ordering::Acquire);
            if self.head.wrapping_sub(self.cached_consumed) + need > n {
                return Err(Full);
            }
        }
        if tail.len() <= EXT_SLOT_BYTES {
            // The common tail, one slot: no loop. Straight into the slot
            // (the bytes after the tail are never read).
            let slot = ring.slot(self.head + 1);
            // SAFETY: as in `push_with`: this slot is free (`consumed` is
            // past `head + need - 1 - n`), the consumer reads it only after
            // acquiring the header's `seq` stored below, and we are the only
            // producer. `tail.len() <= EXT_SLOT_BYTES == BODY_BYTES`, so the
            // copy stays inside the body.
            slot.body.with_mut(|p| unsafe {
                core::ptr::copy_nonoverlapping(tail.as_ptr(), p.cast::<u8>(), tail.len())
            });
        } else {
            self.write_tail(ring, tail);
        }
        let slot = ring.slot(self.head);
        let body = hdr.encode();
        // SAFETY: as for the tail above; the header slot is free too.
        slot.body.with_mut(|p| unsafe { p.write(body) });
        // Truncation to u32 is the sequence word's wrap-around by design.
        slot.seq
            .store((self.head as u32).wrapping_add(1), Ordering::Release);
        self.head += need;
        Ok(())
    }

    /// [`Producer::try_push_ext`]'s copy of a tail longer than one slot
    /// into the slots after `head` (the caller checked they are free).
    #[inline(never)]
    fn write_tail(&mut self, ring: RingRef<'_>, tail: &[u8]) {
        for (i, chunk) in tail.chunks(EXT_SLOT_BYTES).enumerate() {
            let slot = ring.slot(self.head + 1 + i as u64);
            // Straight into the slot (the bytes after `chunk` are never
            // read): no body built on the stack and copied again.
            // SAFETY: as in `push_with`: these slots are free (`consumed`
            // is past `head + need - 1 - n`), the consumer reads them only
            // after acquiring the header's `seq`, which the caller stores
            // after this, and we are the only producer. `chunk.len() <=
            // EXT_SLOT_BYTES == BODY_BYTES`, so the copy stays inside the
            // body.
            slot.body.with_mut(|p| unsafe {
                core::ptr::copy_nonoverlapping(chunk.as_ptr(), p.cast::<u8>(), chunk.len())
            });
        }
    }

    /// Whether `1 + ext` slots are free, re-reading the consumer index once
    /// if the cached one says they are not.
    #[inline(always)]
    pub fn has_room_for(&mut self, ring: RingRef<'_>, ext: u64) -> bool {
        let n = ring.capacity();
        if self.head.wrapping_sub(self.cached_consumed) + 1 + ext > n {
            self.rereads += 1;
            self.cached_consumed = ring.ctl.consumed.load(Ordering::Acquire);
        }
        self.head.wrapping_sub(self.cached_consumed) + 1 + ext <= n
    }

    /// **Negative control for loom only**: the same as [`Producer::try_push`]
    /// but publishing `seq` with `Relaxed`, which is too weak. `tests/loom.rs`
    /// asserts that loom rejects it.
    #[cfg(tmx_shmem_loom)]
    #[doc(hidden)]
    pub fn try_push_relaxed_publish(
        &mut self,
        ring: RingRef<'_>,
        hdr: &Header,
    ) -> Result<(), Full> {
        self.push_with(ring, hdr, Ordering::Relaxed)
    }

    #[inline]
    fn push_with(
        &mut self,
        ring: RingRef<'_>,
        hdr: &Header,
        publish: Ordering,
    ) -> Result<(), Full> {
        if !self.has_room(ring) {
            return Err(Full);
        }
        let slot = ring.slot(self.head);
        let body = hdr.encode();
        // SAFETY: the slot is free: `consumed` (acquired by `has_room`, or earlier)
        // is past `head - n`, so the consumer finished reading this slot's
        // previous lap before its Release store of `consumed`, and it reads
        // this lap only after our Release store of `seq` below. We are the
        // only producer.
        slot.body.with_mut(|p| unsafe { p.write(body) });
        // Truncation to u32 is the sequence word's wrap-around by design.
        slot.seq.store((self.head as u32).wrapping_add(1), publish);
        self.head += 1;
        Ok(())
    }

    /// Publishes an inline message: the same bytes as [`Producer::try_push`]
    /// of a header made with [`Header::set_inline`], written straight into
    /// the slot as eight-byte words computed in registers (the payload read
    /// from the caller's buffer a word at a time, zero-padded).
    ///
    /// Why not build a [`Header`] and encode it: that copies it through
    /// the stack twice, and each copy reads back in wide loads what was
    /// just stored in narrow ones. The store buffer cannot forward such a
    /// load, which then waits until every older instruction has retired,
    /// including the previous message's slot store and the cache misses
    /// of the receive path. Profiles of a bi-directional window put a
    /// large share of their samples right behind those loads.
    ///
    /// [`Full`] (nothing written) as `try_push`; also if `payload` is
    /// longer than [`INLINE_MAX`].
    #[inline(always)]
    pub fn try_push_inline(
        &mut self,
        ring: RingRef<'_>,
        fields: InlineFields,
        payload: &[u8],
    ) -> Result<(), Full> {
        let len = payload.len();
        if len > INLINE_MAX {
            return Err(Full);
        }
        if !self.has_room(ring) {
            return Err(Full);
        }
        // aux = nbytes = the length (<= INLINE_MAX).
        let (w0, w1, w2) = fields.words(len as u16, len as u32);
        let slot = ring.slot(self.head);
        // SAFETY: the slot is free, as in `push_with` (we are its only
        // producer, the consumer finished its previous lap and reads this
        // one only after acquiring `seq` below); `write_inline_body` writes
        // the 60 bytes of its body and nothing else.
        slot.body
            .with_mut(|p| unsafe { write_inline_body(p.cast::<u8>(), w0, w1, w2, payload) });
        slot.seq
            .store((self.head as u32).wrapping_add(1), Ordering::Release);
        self.head += 1;
        Ok(())
    }

    /// Publishes an inline message of more than [`INLINE_MAX`] bytes with
    /// continuation slots: the same bytes as [`Producer::try_push_ext`] of
    /// the header `fields` make with `nbytes = data.len()` and the first
    /// [`INLINE_MAX`] bytes inline (`aux == INLINE_MAX`), followed by the
    /// rest of `data` — written straight from `data` into the slots, in
    /// 16-byte stores on x86-64, where `try_push_ext` encoded the header
    /// on the stack and copied it and the tail (see
    /// [`Producer::try_push_inline`] and `write_inline_body`). [`Full`]
    /// (nothing written) as `try_push_ext`; also if `data` is not longer
    /// than [`INLINE_MAX`] or its length does not fit the header.
    #[inline(always)]
    pub fn try_push_inline_ext(
        &mut self,
        ring: RingRef<'_>,
        fields: InlineFields,
        data: &[u8],
    ) -> Result<(), Full> {
        let len = data.len();
        let (Some(head), Some(tail)) = (data.get(..INLINE_MAX), data.get(INLINE_MAX..)) else {
            return Err(Full);
        };
        let Ok(nbytes) = u32::try_from(len) else {
            return Err(Full);
        };
        if tail.is_empty() {
            return Err(Full);
        }
        let ext = ext_slots(tail.len());
        if !self.has_room_for(ring, ext) {
            return Err(Full);
        }
        // The header slot's body first (its fields then need no register
        // while the tail is copied), its `seq` last.
        let (w0, w1, w2) = fields.words(INLINE_MAX as u16, nbytes);
        let slot = ring.slot(self.head);
        // SAFETY: the header slot is free (`has_room_for`, and we are the
        // only producer; the consumer reads it only after acquiring `seq`
        // below); the body is 60 bytes.
        slot.body
            .with_mut(|p| unsafe { write_inline_body(p.cast::<u8>(), w0, w1, w2, head) });
        let mut at = self.head + 1;
        // Whole bodies as copies of a constant length (straight moves),
        // then the last, partial one.
        let mut chunks = tail.chunks_exact(EXT_SLOT_BYTES);
        for chunk in &mut chunks {
            // SAFETY: as in `try_push_ext`: these slots are free
            // (`has_room_for`), the consumer reads them only after
            // acquiring the header's `seq` stored below, and we are the
            // only producer; `chunk.len() == EXT_SLOT_BYTES == BODY_BYTES`.
            ring.slot(at).body.with_mut(|p| unsafe {
                core::ptr::copy_nonoverlapping(chunk.as_ptr(), p.cast::<u8>(), EXT_SLOT_BYTES)
            });
            at += 1;
        }
        let last = chunks.remainder();
        if !last.is_empty() {
            // SAFETY: as above; `last.len() < EXT_SLOT_BYTES`.
            ring.slot(at)
                .body
                .with_mut(|p| unsafe { copy_chunk(p.cast::<u8>(), last) });
        }
        slot.seq
            .store((self.head as u32).wrapping_add(1), Ordering::Release);
        self.head += 1 + ext;
        Ok(())
    }

    /// Publishes the header `fields` describes: the same bytes as
    /// [`Producer::try_push`] of [`HeaderFields::header`], written straight
    /// into the slot as words made in registers, for a header that was
    /// never in memory (see [`Producer::try_push_inline`] for why: an
    /// eager send's header copied through the stack waited there for the
    /// payload copy's stores to drain). [`Full`] (nothing written) as
    /// `try_push`.
    #[inline(always)]
    pub fn try_push_fields(&mut self, ring: RingRef<'_>, f: HeaderFields) -> Result<(), Full> {
        if !self.has_room(ring) {
            return Err(Full);
        }
        // Body bytes 0..8: kind, flags, aux, nbytes; 8..16: source, tag;
        // 16..20: context; 20..28: word; 28..60: ext.
        let w0 = u64::from(f.kind)
            | u64::from(f.flags) << 8
            | u64::from(f.aux) << 16
            | u64::from(f.nbytes) << 32;
        let w1 = u64::from(f.source) | u64::from(f.tag) << 32;
        let slot = ring.slot(self.head);
        // SAFETY: the slot is free, as in `push_with` (we are its only
        // producer, the consumer finished its previous lap and reads this
        // one only after acquiring `seq` below). The writes cover body
        // bytes 0..8, 8..16, 16..20, 20..28 and 28..60, all inside the
        // body (BODY_BYTES == 60).
        slot.body.with_mut(|p| unsafe {
            let b = p.cast::<u8>();
            b.cast::<u64>().write_unaligned(w0.to_le());
            b.add(8).cast::<u64>().write_unaligned(w1.to_le());
            b.add(16).cast::<u32>().write_unaligned(f.context.to_le());
            b.add(20).cast::<u64>().write_unaligned(f.word.to_le());
            for (i, w) in f.ext.iter().enumerate() {
                b.add(28 + 8 * i).cast::<u64>().write_unaligned(w.to_le());
            }
        });
        slot.seq
            .store((self.head as u32).wrapping_add(1), Ordering::Release);
        self.head += 1;
        Ok(())
    }
}

/// Writes an inline slot's body (bytes 0..4 `w0`, 4..12 `w1`, 12..20
/// `w2`, 20..60 the payload words, zero-padded) at `b`.
///
/// On x86-64 in four 16-byte stores (the last two overlap by 4 bytes,
/// which get the same value twice) instead of eight narrow ones: each
/// store takes a store-buffer entry until the slot's line, last read by
/// the consumer's core, is owned here again, and while those entries wait
/// the sender's further stores (its request, the next message) queue
/// behind them. With fewer entries per message more messages' line
/// transfers overlap.
///
/// # Safety
/// `b` must be valid for writes of 60 bytes (a slot's body) that nothing
/// else reads or writes meanwhile.
#[inline(always)]
unsafe fn write_inline_body(b: *mut u8, w0: u32, w1: u64, w2: u64, payload: &[u8]) {
    let p = |i| payload_word(payload, i);
    #[cfg(all(target_arch = "x86_64", not(tmx_shmem_loom)))]
    {
        use core::arch::x86_64::{__m128i, _mm_set_epi64x, _mm_storeu_si128};
        let (p0, p1, p2, p3, p4) = (p(0), p(1), p(2), p(3), p(4));
        // SAFETY: each 16-byte store is inside the 60-byte body the
        // caller gave (offsets 0, 16, 32, 44); unaligned stores of plain
        // bytes. Little-endian lanes.
        unsafe {
            let at = |off: usize| b.add(off).cast::<__m128i>();
            let lanes = |lo: u64, hi: u64| _mm_set_epi64x(hi as i64, lo as i64);
            _mm_storeu_si128(at(0), lanes(u64::from(w0) | w1 << 32, w1 >> 32 | w2 << 32));
            _mm_storeu_si128(at(16), lanes(w2 >> 32 | p0 << 32, p0 >> 32 | p1 << 32));
            _mm_storeu_si128(at(32), lanes(p1 >> 32 | p2 << 32, p2 >> 32 | p3 << 32));
            _mm_storeu_si128(at(44), lanes(p3, p4));
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(tmx_shmem_loom))))]
    // SAFETY: bytes 0..4, 4..12, 12..20 and 20..60 of the body.
    unsafe {
        b.cast::<u32>().write_unaligned(w0.to_le());
        b.add(4).cast::<u64>().write_unaligned(w1.to_le());
        b.add(12).cast::<u64>().write_unaligned(w2.to_le());
        for i in 0..INLINE_MAX / 8 {
            b.add(20 + 8 * i)
                .cast::<u64>()
                .write_unaligned(p(i).to_le());
        }
    }
}

/// Copies `chunk` (at most 60 bytes: a continuation slot's body) to `d`,
/// in 16-byte loads and stores on x86-64 (the last one overlapping the
/// one before, never past `chunk`), in two overlapping words from 8 to 16
/// bytes: no call to `memcpy` and few store-buffer entries (see
/// [`write_inline_body`]). Other lengths (and every length above 16 off
/// x86-64 and under loom) by `copy_nonoverlapping`.
///
/// # Safety
/// `d` must be valid for writes of `chunk.len()` bytes that nothing else
/// reads or writes meanwhile, and not overlap `chunk`.
#[inline(always)]
unsafe fn copy_chunk(d: *mut u8, chunk: &[u8]) {
    let n = chunk.len();
    let s = chunk.as_ptr();
    #[cfg(all(target_arch = "x86_64", not(tmx_shmem_loom)))]
    if n >= 16 {
        use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
        // SAFETY: each 16-byte access is at an offset `off` with
        // `off + 16 <= n`, inside `chunk` and inside the `n` bytes at `d`
        // the caller gave. Straight-line code, not a loop (which the
        // compiler turns back into a call to `memcpy`).
        unsafe {
            let copy16 = |off: usize| {
                _mm_storeu_si128(
                    d.add(off).cast::<__m128i>(),
                    _mm_loadu_si128(s.add(off).cast::<__m128i>()),
                )
            };
            copy16(0);
            if n > 32 {
                copy16(16);
            }
            if n > 48 {
                copy16(32);
            }
            copy16(n - 16);
        }
        return;
    }
    if (8..=16).contains(&n) {
        // SAFETY: words at 0 and n - 8 (8 <= n <= 16: together they cover
        // all n bytes), inside both ranges.
        unsafe {
            d.cast::<u64>()
                .write_unaligned(s.cast::<u64>().read_unaligned());
            d.add(n - 8)
                .cast::<u64>()
                .write_unaligned(s.add(n - 8).cast::<u64>().read_unaligned());
        }
        return;
    }
    // SAFETY: `n` bytes, inside both ranges, not overlapping (the caller).
    unsafe { core::ptr::copy_nonoverlapping(s, d, n) };
}

/// Word `i` (bytes `8i..8i + 8`, little-endian, zero past the end) of an
/// inline payload, made in a register.
#[inline(always)]
fn payload_word(payload: &[u8], i: usize) -> u64 {
    match payload.get(8 * i..) {
        Some(rest) if rest.len() >= 8 => {
            let mut w = [0u8; 8];
            w.copy_from_slice(&rest[..8]);
            u64::from_le_bytes(w)
        }
        Some(rest) => rest.iter().rev().fold(0u64, |a, &b| a << 8 | u64::from(b)),
        None => 0,
    }
}

/// The fields of an inline message's header
/// ([`Producer::try_push_inline`]); its length is the payload's.
#[derive(Debug, Clone, Copy)]
pub struct InlineFields {
    /// Message kind.
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Sender's local rank.
    pub source: u32,
    /// MPI tag.
    pub tag: u32,
    /// MPI context id.
    pub context: u32,
}

impl InlineFields {
    /// The first 20 body bytes of an inline header slot as three words:
    /// bytes 0..4 kind, flags, `aux`; 4..12 `nbytes`, source; 12..20 tag,
    /// context (see [`write_inline_body`]).
    #[inline(always)]
    fn words(self, aux: u16, nbytes: u32) -> (u32, u64, u64) {
        (
            u32::from(self.kind) | u32::from(self.flags) << 8 | u32::from(aux) << 16,
            u64::from(nbytes) | u64::from(self.source) << 32,
            u64::from(self.tag) | u64::from(self.context) << 32,
        )
    }
}

/// A header's fields for [`Producer::try_push_fields`], with `ext` as
/// four little-endian words (`ext[8i..8i + 8]` of [`Header::ext`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeaderFields {
    /// Message kind.
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Auxiliary 16 bits.
    pub aux: u16,
    /// Message length in bytes.
    pub nbytes: u32,
    /// Sender's local rank.
    pub source: u32,
    /// MPI tag.
    pub tag: u32,
    /// MPI context id.
    pub context: u32,
    /// Data offset/address.
    pub word: u64,
    /// `Header::ext` as words.
    pub ext: [u64; 4],
}

impl HeaderFields {
    /// The [`Header`] these fields publish.
    pub fn header(&self) -> Header {
        let mut ext = [0u8; 32];
        for (i, w) in self.ext.iter().enumerate() {
            ext[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
        }
        Header {
            kind: self.kind,
            flags: self.flags,
            aux: self.aux,
            nbytes: self.nbytes,
            source: self.source,
            tag: self.tag,
            context: self.context,
            word: self.word,
            ext,
        }
    }
}

/// The consumer's process-private state.
#[derive(Debug, Clone)]
pub struct Consumer {
    next: u64,
    published: u64,
    batch: u64,
}

impl Consumer {
    /// A consumer that publishes its index every `batch` messages (clamped to
    /// at least 1), and whenever a poll finds the ring empty.
    pub fn new(batch: u64) -> Self {
        Consumer {
            next: 0,
            published: 0,
            batch: batch.max(1),
        }
    }

    /// Messages consumed so far.
    pub fn consumed(&self) -> u64 {
        self.next
    }

    /// Takes the next header if one is published. When the ring is empty,
    /// publishes any unpublished progress so a waiting producer can go on.
    #[inline]
    pub fn poll(&mut self, ring: RingRef<'_>) -> Option<Header> {
        self.poll_with(ring, Ordering::Release)
    }

    /// **Negative control for loom only**: [`Consumer::poll`] publishing the
    /// consumer index with `Relaxed`, which lets the producer overwrite a slot
    /// the consumer may still be reading. `tests/loom.rs` asserts that loom
    /// rejects it.
    #[cfg(tmx_shmem_loom)]
    #[doc(hidden)]
    pub fn poll_relaxed_release(&mut self, ring: RingRef<'_>) -> Option<Header> {
        self.poll_with(ring, Ordering::Relaxed)
    }

    /// The next header if one is published, as [`Consumer::peek`] but
    /// never publishing the consumer index (which `peek` does when the ring
    /// is empty): a look ahead, e.g. at the header after the one just
    /// taken, to prefetch its payload. Takes nothing.
    #[inline(always)]
    pub fn peek_ahead(&self, ring: RingRef<'_>) -> Option<Header> {
        let slot = ring.slot(self.next);
        // Truncation: see Producer::push_with.
        let expect = (self.next as u32).wrapping_add(1);
        if slot.seq.load(Ordering::Acquire) != expect {
            return None;
        }
        // SAFETY: the Acquire load above saw the producer's Release store of
        // this lap's `seq`, which follows its write of the body; the producer
        // does not touch this slot again until we publish `consumed` past it
        // (in `skip_with`, after this read).
        let body = slot.body.with(|p| unsafe { p.read() });
        Some(Header::decode(&body))
    }

    #[inline]
    fn poll_with(&mut self, ring: RingRef<'_>, release: Ordering) -> Option<Header> {
        let h = self.peek_with(ring, release)?;
        self.skip_with(ring, release);
        Some(h)
    }

    /// The next header if one is published, **without taking it**: the
    /// same header comes again until [`Consumer::skip`] steps over it
    /// (`peek` + `skip` is [`Consumer::poll`]). When the ring is empty,
    /// publishes any unpublished progress, as `poll` does.
    #[inline(always)]
    pub fn peek(&mut self, ring: RingRef<'_>) -> Option<Header> {
        self.peek_with(ring, Ordering::Release)
    }

    /// Takes the header the last [`Consumer::peek`] returned (call it only
    /// after a `peek` that returned `Some`, once).
    #[inline]
    pub fn skip(&mut self, ring: RingRef<'_>) {
        self.skip_with(ring, Ordering::Release);
    }

    // Always inlined (as `Header::decode`): a header returned through
    // memory, written field by field and read back in 16-byte moves, cost a
    // store-forwarding stall per message.
    #[inline(always)]
    fn peek_with(&mut self, ring: RingRef<'_>, release: Ordering) -> Option<Header> {
        let h = self.peek_ahead(ring);
        if h.is_none() {
            self.publish_with(ring, release);
        }
        h
    }

    #[inline]
    fn skip_with(&mut self, ring: RingRef<'_>, release: Ordering) {
        self.next += 1;
        if self.next - self.published >= self.batch {
            self.publish_with(ring, release);
        }
    }

    /// Copies the `dst.len()` tail bytes that follow the header just taken
    /// by [`Consumer::poll`] out of their continuation slots (see
    /// [`Producer::try_push_ext`]) and steps over those slots. Call it once,
    /// right after that `poll`, with the length the header announced.
    ///
    /// The common tail (one slot, up to 60 bytes) is copied inline; longer
    /// ones out of line.
    ///
    /// # Errors
    /// [`Full`]-free: returns `false` (copying nothing, consuming nothing)
    /// if the length is more than the ring could ever hold (a corrupt
    /// header); the caller then treats the message as malformed.
    #[inline(always)]
    pub fn take_ext(&mut self, ring: RingRef<'_>, dst: &mut [u8]) -> bool {
        if dst.len() > EXT_SLOT_BYTES || ring.capacity() < 2 {
            return self.take_ext_slots(ring, dst);
        }
        let slot = ring.slot(self.next);
        // SAFETY: the producer wrote this body before its Release store of
        // the header's `seq`, which our `poll` acquired; it does not reuse
        // it until we publish `consumed` past it. `dst.len() <=
        // EXT_SLOT_BYTES == BODY_BYTES`: the copy stays inside the body,
        // and `dst` is private memory.
        slot.body.with(|p| unsafe {
            core::ptr::copy_nonoverlapping(p.cast::<u8>(), dst.as_mut_ptr(), dst.len())
        });
        self.next += u64::from(!dst.is_empty());
        if self.next - self.published >= self.batch {
            self.publish(ring);
        }
        true
    }

    /// [`Consumer::take_ext`] of a tail of any length.
    #[inline(never)]
    fn take_ext_slots(&mut self, ring: RingRef<'_>, dst: &mut [u8]) -> bool {
        let k = ext_slots(dst.len());
        if k + 1 > ring.capacity() {
            return false;
        }
        // Whole bodies first, each a copy of a constant length (straight
        // moves, no call to `memcpy`), then the last, partial one.
        let mut chunks = dst.chunks_exact_mut(EXT_SLOT_BYTES);
        let mut at = self.next;
        for chunk in &mut chunks {
            // SAFETY: the producer wrote these bodies before its Release
            // store of the header's `seq`, which our `poll` acquired; it
            // does not reuse them until we publish `consumed` past them.
            // `chunk.len() == EXT_SLOT_BYTES == BODY_BYTES`: the copy stays
            // inside the body, and `dst` is private memory.
            ring.slot(at).body.with(|p| unsafe {
                core::ptr::copy_nonoverlapping(p.cast::<u8>(), chunk.as_mut_ptr(), EXT_SLOT_BYTES)
            });
            at += 1;
        }
        let last = chunks.into_remainder();
        if !last.is_empty() {
            // SAFETY: as above; `last.len() < EXT_SLOT_BYTES`.
            ring.slot(at).body.with(|p| unsafe {
                core::ptr::copy_nonoverlapping(p.cast::<u8>(), last.as_mut_ptr(), last.len())
            });
        }
        self.next += k;
        if self.next - self.published >= self.batch {
            self.publish(ring);
        }
        true
    }

    /// Publishes the consumer index now (Release) if it moved.
    #[inline]
    pub fn publish(&mut self, ring: RingRef<'_>) {
        self.publish_with(ring, Ordering::Release)
    }

    #[inline]
    fn publish_with(&mut self, ring: RingRef<'_>, order: Ordering) {
        if self.next != self.published {
            ring.ctl.consumed.store(self.next, order);
            self.published = self.next;
        }
    }
}

/// A producer with a per-peer pending FIFO: backpressure without loss.
///
/// [`Outbox::send`] pushes to the ring when it can; when the ring is full
/// (after the one re-read) or earlier headers are still pending, the header
/// joins the local FIFO, so order is preserved. [`Outbox::flush`] moves
/// pending headers into the ring in order. Nothing is ever dropped.
#[derive(Debug, Default)]
pub struct Outbox {
    producer: Producer,
    pending: VecDeque<Header>,
    backpressure_events: u64,
}

/// Where [`Outbox::send`] put a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Published in the ring.
    Ring,
    /// Queued locally behind a full ring or earlier pending headers.
    Queued,
}

impl Outbox {
    /// An outbox for a fresh ring.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends `hdr`, in order after everything sent before.
    pub fn send(&mut self, ring: RingRef<'_>, hdr: Header) -> Sent {
        self.send_with(ring, hdr, &mut |_| {})
    }

    /// [`Outbox::send`], calling `before` for the header just before it is
    /// published in the ring (immediately, or from a later flush), never for
    /// a header that is not published.
    pub fn send_with(
        &mut self,
        ring: RingRef<'_>,
        hdr: Header,
        before: &mut dyn FnMut(&Header),
    ) -> Sent {
        if self.try_send_now(ring, &hdr, &mut *before) {
            return Sent::Ring;
        }
        if self.pending.is_empty() {
            self.backpressure_events += 1;
            tracing::debug!(
                pending = 1,
                "shmem ring full after re-reading consumer index: queueing locally"
            );
        }
        self.pending.push_back(hdr);
        Sent::Queued
    }

    /// [`Outbox::try_send_now`] of an inline message, written straight into
    /// the slot ([`Producer::try_push_inline`]); `before` gets the flags.
    #[inline(always)]
    pub fn try_send_inline_now(
        &mut self,
        ring: RingRef<'_>,
        fields: InlineFields,
        payload: &[u8],
        before: impl FnOnce(u8),
    ) -> bool {
        // Checked here too, so that `before` never runs for a push that
        // cannot happen.
        if payload.len() > INLINE_MAX || !self.pending.is_empty() || !self.producer.has_room(ring) {
            return false;
        }
        before(fields.flags);
        self.producer.try_push_inline(ring, fields, payload).is_ok()
    }

    /// [`Outbox::try_send_ext`] of an inline message with continuation
    /// slots, written straight from `data` ([`Producer::try_push_inline_ext`]);
    /// `before` gets the flags.
    #[inline(always)]
    pub fn try_send_inline_ext_now(
        &mut self,
        ring: RingRef<'_>,
        fields: InlineFields,
        data: &[u8],
        before: impl FnOnce(u8),
    ) -> bool {
        let Some(tail) = data.len().checked_sub(INLINE_MAX).filter(|&t| t > 0) else {
            return false;
        };
        if !self.pending.is_empty() || !self.producer.has_room_for(ring, ext_slots(tail)) {
            return false;
        }
        before(fields.flags);
        self.producer
            .try_push_inline_ext(ring, fields, data)
            .is_ok()
    }

    /// [`Outbox::try_send_now`] of a header given as fields, written
    /// straight into the slot ([`Producer::try_push_fields`]); `before`
    /// gets the flags.
    #[inline(always)]
    pub fn try_send_fields_now(
        &mut self,
        ring: RingRef<'_>,
        fields: HeaderFields,
        before: impl FnOnce(u8),
    ) -> bool {
        if !self.pending.is_empty() || !self.producer.has_room(ring) {
            return false;
        }
        before(fields.flags);
        self.producer.try_push_fields(ring, fields).is_ok()
    }

    /// Publishes `hdr` at once if nothing is pending and the ring has room
    /// (after one re-read of the consumer index), calling `before` just
    /// before; otherwise does nothing and returns `false` (the caller then
    /// sends it with [`Outbox::send_with`], which queues it).
    #[inline]
    pub fn try_send_now(
        &mut self,
        ring: RingRef<'_>,
        hdr: &Header,
        before: impl FnOnce(&Header),
    ) -> bool {
        if !self.pending.is_empty() || !self.producer.has_room(ring) {
            return false;
        }
        before(hdr);
        self.producer.try_push(ring, hdr).is_ok()
    }

    /// Publishes `hdr` with a tail in continuation slots
    /// ([`Producer::try_push_ext`]) if nothing is pending and the ring has
    /// room for all of it, calling `before` just before; otherwise does
    /// nothing and returns `false` (the caller sends the message another
    /// way: pending headers never carry tails).
    ///
    /// Until 2026-11-23 half the ring was kept free of continuation slots
    /// (for the headers of later messages of a stream). In a window of 64
    /// messages of 64 B on a 64-slot ring (the default then) that sent half of them
    /// buffered, each re-reading the consumer index first; without it,
    /// two-rank windows ran 0.91× (64 B) and 0.89× (100 B) the time per
    /// slot both ways, and 1.00× and 0.93× one way (median of 10–12
    /// rotating rounds).
    #[inline(always)]
    pub fn try_send_ext(
        &mut self,
        ring: RingRef<'_>,
        hdr: Header,
        tail: &[u8],
        before: &mut dyn FnMut(&Header),
    ) -> bool {
        if !self.pending.is_empty() || !self.producer.has_room_for(ring, ext_slots(tail.len())) {
            return false;
        }
        before(&hdr);
        self.producer.try_push_ext(ring, &hdr, tail).is_ok()
    }

    /// Moves pending headers into the ring, in order, until it is full.
    /// Returns how many remain pending.
    pub fn flush(&mut self, ring: RingRef<'_>) -> usize {
        self.flush_with(ring, &mut |_| {})
    }

    /// [`Outbox::flush`], calling `before` for each header just before it is
    /// published.
    pub fn flush_with(&mut self, ring: RingRef<'_>, before: &mut dyn FnMut(&Header)) -> usize {
        while let Some(h) = self.pending.front() {
            if !self.producer.has_room(ring) {
                break;
            }
            before(h);
            if self.producer.try_push(ring, h).is_err() {
                break;
            }
            self.pending.pop_front();
        }
        self.pending.len()
    }

    /// Headers waiting locally.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// How many times a send found the ring full and started queueing.
    pub fn backpressure_events(&self) -> u64 {
        self.backpressure_events
    }

    /// The underlying producer state.
    pub fn producer(&self) -> &Producer {
        &self.producer
    }
}

#[cfg(test)]
#[cfg(not(tmx_shmem_loom))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    fn any_header() -> impl Strategy<Value = Header> {
        (
            any::<[u8; 4]>(),
            any::<[u32; 4]>(),
            any::<u64>(),
            any::<[u8; 32]>(),
        )
            .prop_map(|(k, w, word, ext)| Header {
                kind: k[0],
                flags: k[1],
                aux: u16::from_le_bytes([k[2], k[3]]),
                nbytes: w[0],
                source: w[1],
                tag: w[2],
                context: w[3],
                word,
                ext,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn header_round_trips(h in any_header()) {
            prop_assert_eq!(Header::decode(&h.encode()), h);
        }

        #[test]
        fn inline_round_trips(p in proptest::collection::vec(any::<u8>(), 0..=INLINE_MAX)) {
            let mut h = Header::default();
            prop_assert!(h.set_inline(&p));
            let (b, n) = h.inline_payload();
            prop_assert_eq!(&b[..n], &p[..]);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// The direct inline push publishes exactly what `try_push` of the
        /// header built with `set_inline` publishes (every body byte, the
        /// padding zeros included: the consumer decodes them all), into a
        /// ring whose slots hold stale bytes from an earlier lap.
        #[test]
        fn inline_push_is_try_push_of_set_inline(
            p in proptest::collection::vec(any::<u8>(), 0..=INLINE_MAX),
            k in any::<[u8; 2]>(),
            w in any::<[u32; 3]>(),
            stale in any_header(),
        ) {
            let fields = InlineFields { kind: k[0], flags: k[1], source: w[0], tag: w[1], context: w[2] };
            let mut h = Header {
                kind: k[0],
                flags: k[1],
                nbytes: p.len() as u32,
                source: w[0],
                tag: w[1],
                context: w[2],
                ..Header::default()
            };
            prop_assert!(h.set_inline(&p));
            let mem = RingMem::new(1);
            let (mut prod, mut cons) = (Producer::new(), Consumer::new(1));
            prop_assert!(prod.try_push(mem.view(), &stale).is_ok());
            prop_assert_eq!(cons.poll(mem.view()), Some(stale));
            prop_assert!(prod.try_push_inline(mem.view(), fields, &p).is_ok());
            prop_assert_eq!(cons.poll(mem.view()), Some(h));
            let (b, n) = h.inline_payload();
            prop_assert_eq!(&b[..n], &p[..]);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// A header pushed as fields publishes what `try_push` of the same
        /// header would, over a stale slot.
        #[test]
        fn fields_push_is_try_push_of_its_header(
            k in any::<[u8; 2]>(),
            aux in any::<u16>(),
            w in any::<[u32; 4]>(),
            word in any::<u64>(),
            ext in any::<[u64; 4]>(),
            stale in any_header(),
        ) {
            let f = HeaderFields {
                kind: k[0], flags: k[1], aux, nbytes: w[0], source: w[1], tag: w[2],
                context: w[3], word, ext,
            };
            let mem = RingMem::new(1);
            let (mut prod, mut cons) = (Producer::new(), Consumer::new(1));
            prop_assert!(prod.try_push(mem.view(), &stale).is_ok());
            prop_assert_eq!(cons.poll(mem.view()), Some(stale));
            prop_assert!(prod.try_push_fields(mem.view(), f).is_ok());
            prop_assert_eq!(prod.try_push_fields(mem.view(), f), Err(Full));
            prop_assert_eq!(cons.poll(mem.view()), Some(f.header()));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// The direct inline push with continuation slots publishes what
        /// `try_push_ext` of the header `send_inline_ext` built before
        /// (kind, flags, `nbytes` = the length, the first 40 bytes inline)
        /// publishes, over slots with stale bytes from an earlier lap, for
        /// tails of one to several slots (every chunk length of the copy);
        /// the consumer reads the whole message back.
        #[test]
        fn inline_ext_push_is_try_push_ext_of_its_header(
            data in proptest::collection::vec(any::<u8>(), INLINE_MAX + 1..=INLINE_MAX + 4 * EXT_SLOT_BYTES),
            k in any::<[u8; 2]>(),
            w in any::<[u32; 3]>(),
            stale in any_header(),
            lap in 0usize..8,
        ) {
            let fields = InlineFields { kind: k[0], flags: k[1], source: w[0], tag: w[1], context: w[2] };
            let mut h = Header {
                kind: k[0],
                flags: k[1],
                nbytes: data.len() as u32,
                source: w[0],
                tag: w[1],
                context: w[2],
                ..Header::default()
            };
            prop_assert!(h.set_inline(&data[..INLINE_MAX]));
            let tail = &data[INLINE_MAX..];
            // Both pushes into rings of 8 slots whose slots all hold stale
            // bytes, starting at slot `lap` (so that a tail may wrap).
            let mut got = Vec::new();
            for direct in [false, true] {
                let mem = RingMem::new(8);
                let (mut prod, mut cons) = (Producer::new(), Consumer::new(1));
                for _ in 0..8 + lap {
                    prop_assert!(prod.try_push(mem.view(), &stale).is_ok());
                    prop_assert_eq!(cons.poll(mem.view()), Some(stale));
                }
                if direct {
                    prop_assert!(prod.try_push_inline_ext(mem.view(), fields, &data).is_ok());
                } else {
                    prop_assert!(prod.try_push_ext(mem.view(), &h, tail).is_ok());
                }
                prop_assert_eq!(prod.pushed(), (8 + lap) as u64 + 1 + ext_slots(tail.len()));
                let head = cons.poll(mem.view());
                let mut rest = vec![0u8; tail.len()];
                prop_assert!(cons.take_ext(mem.view(), &mut rest));
                got.push((head, rest));
            }
            prop_assert_eq!(&got[0], &got[1]);
            prop_assert_eq!(got[1].0, Some(h));
            prop_assert_eq!(&got[1].1[..], tail);
        }
    }

    #[test]
    fn inline_ext_push_full_and_bad_lengths() {
        let mem = RingMem::new(4);
        let mut p = Producer::new();
        let f = plain_fields();
        // Not longer than INLINE_MAX: that is `try_push_inline`'s.
        assert_eq!(
            p.try_push_inline_ext(mem.view(), f, &[0; INLINE_MAX]),
            Err(Full)
        );
        // Header + 4 continuation slots do not fit 4 slots.
        let big = [7u8; INLINE_MAX + 3 * EXT_SLOT_BYTES + 1];
        assert_eq!(p.try_push_inline_ext(mem.view(), f, &big), Err(Full));
        assert_eq!(p.pushed(), 0);
        // Header + 3: fits once, then the ring is full (nothing written).
        let fits = [7u8; INLINE_MAX + 2 * EXT_SLOT_BYTES + 1];
        assert!(p.try_push_inline_ext(mem.view(), f, &fits).is_ok());
        assert_eq!(p.pushed(), 4);
        assert_eq!(
            p.try_push_inline_ext(mem.view(), f, &fits[..INLINE_MAX + 1]),
            Err(Full)
        );
        assert_eq!(p.pushed(), 4);
    }

    /// Kind 1, everything else zero.
    fn plain_fields() -> InlineFields {
        InlineFields {
            kind: 1,
            flags: 0,
            source: 0,
            tag: 0,
            context: 0,
        }
    }

    #[test]
    fn inline_push_full_and_oversized() {
        let mem = RingMem::new(1);
        let mut p = Producer::new();
        let f = plain_fields();
        assert_eq!(
            p.try_push_inline(mem.view(), f, &[0; INLINE_MAX + 1]),
            Err(Full)
        );
        assert_eq!(p.pushed(), 0);
        assert!(p.try_push_inline(mem.view(), f, &[1; 8]).is_ok());
        assert_eq!(p.try_push_inline(mem.view(), f, &[1; 8]), Err(Full));
        assert_eq!(p.pushed(), 1);
    }

    /// `peek_ahead` sees the next published header without taking it and,
    /// unlike `peek`, never publishes the consumer index: a look at an
    /// empty ring leaves the producer's view of free slots as it was.
    #[test]
    fn peek_ahead_looks_without_taking_or_publishing() {
        let mem = RingMem::new(2);
        let (mut p, mut c) = (Producer::new(), Consumer::new(8));
        let h = |t| Header {
            tag: t,
            ..Header::default()
        };
        assert_eq!(c.peek_ahead(mem.view()), None, "empty ring");
        assert!(p.try_push(mem.view(), &h(0)).is_ok());
        assert!(p.try_push(mem.view(), &h(1)).is_ok());
        assert_eq!(c.poll(mem.view()).map(|x| x.tag), Some(0));
        // The header after the one just taken, as often as asked.
        assert_eq!(c.peek_ahead(mem.view()).map(|x| x.tag), Some(1));
        assert_eq!(c.peek_ahead(mem.view()).map(|x| x.tag), Some(1));
        assert_eq!(c.consumed(), 1, "nothing taken");
        assert_eq!(c.poll(mem.view()).map(|x| x.tag), Some(1));
        // Empty again: peek_ahead publishes nothing (batch 8 not reached),
        // so the producer still sees a full ring...
        assert_eq!(c.peek_ahead(mem.view()), None);
        assert_eq!(p.try_push(mem.view(), &h(2)), Err(Full));
        // ...until `peek` finds the ring empty and publishes.
        assert_eq!(c.peek(mem.view()), None);
        assert!(p.try_push(mem.view(), &h(2)).is_ok());
        assert_eq!(c.peek_ahead(mem.view()).map(|x| x.tag), Some(2));
    }

    #[test]
    fn inline_limits() {
        let mut h = Header::default();
        assert!(!h.set_inline(&[0; INLINE_MAX + 1]));
        h.aux = 999; // corrupt length from a peer is clamped
        assert_eq!(h.inline_payload().1, INLINE_MAX);
    }

    #[test]
    fn full_then_reread_then_wraps() {
        let mem = RingMem::new(2);
        let (mut p, mut c) = (Producer::new(), Consumer::new(2));
        let h = |t| Header {
            tag: t,
            ..Header::default()
        };
        assert!(p.try_push(mem.view(), &h(0)).is_ok());
        assert!(p.try_push(mem.view(), &h(1)).is_ok());
        assert_eq!(p.try_push(mem.view(), &h(2)), Err(Full));
        assert_eq!(p.rereads(), 1);
        assert_eq!(c.poll(mem.view()).map(|x| x.tag), Some(0));
        // batch 2: index not yet published, still full for the producer
        assert_eq!(p.try_push(mem.view(), &h(2)), Err(Full));
        assert_eq!(c.poll(mem.view()).map(|x| x.tag), Some(1));
        assert!(p.try_push(mem.view(), &h(2)).is_ok());
        assert_eq!(p.known_free(mem.view()), 1);
        assert_eq!(c.poll(mem.view()).map(|x| x.tag), Some(2));
        assert_eq!(c.poll(mem.view()), None);
        assert_eq!(c.consumed(), 3);
    }

    /// `peek` leaves the header in place (the producer cannot reuse its
    /// slot) until `skip`; `peek` + `skip` takes headers as `poll` does,
    /// with the same batched index publication.
    #[test]
    fn peek_then_skip_is_poll() {
        let mem = RingMem::new(2);
        let (mut p, mut c) = (Producer::new(), Consumer::new(2));
        let h = |t| Header {
            tag: t,
            ..Header::default()
        };
        assert_eq!(c.peek(mem.view()), None);
        assert!(p.try_push(mem.view(), &h(0)).is_ok());
        assert!(p.try_push(mem.view(), &h(1)).is_ok());
        assert_eq!(c.peek(mem.view()).map(|x| x.tag), Some(0));
        assert_eq!(c.peek(mem.view()).map(|x| x.tag), Some(0), "not taken");
        c.skip(mem.view());
        assert_eq!(c.consumed(), 1);
        assert_eq!(
            p.try_push(mem.view(), &h(2)),
            Err(Full),
            "batch of 2 not published yet"
        );
        assert_eq!(c.peek(mem.view()).map(|x| x.tag), Some(1));
        c.skip(mem.view());
        assert!(
            p.try_push(mem.view(), &h(2)).is_ok(),
            "published after the batch"
        );
        assert_eq!(c.poll(mem.view()).map(|x| x.tag), Some(2));
        assert_eq!(c.peek(mem.view()), None);
    }

    #[test]
    fn threads_stream_in_order() {
        let mem = Arc::new(RingMem::new(4));
        let m2 = mem.clone();
        let n = 50_000u32;
        let t = std::thread::spawn(move || {
            let mut o = Outbox::new();
            for i in 0..n {
                o.send(
                    m2.view(),
                    Header {
                        tag: i,
                        nbytes: i ^ 0xabcd,
                        ..Header::default()
                    },
                );
                o.flush(m2.view());
            }
            while o.flush(m2.view()) > 0 {
                std::thread::yield_now();
            }
        });
        let mut c = Consumer::new(2);
        let mut i = 0;
        while i < n {
            match c.poll(mem.view()) {
                Some(h) => {
                    assert_eq!((h.tag, h.nbytes), (i, i ^ 0xabcd));
                    i += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        t.join().unwrap();
    }
}
